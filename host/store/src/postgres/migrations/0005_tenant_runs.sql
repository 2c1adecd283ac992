-- (tenant, run id), no value: each tenant's runs, so that a tenant's
-- listing reads its own rows and no other tenant's.
CREATE TABLE tenant_runs (k1 bytea NOT NULL, k2 bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));

-- Filled from the runs there are. A run's tenant is its workflow's name
-- up to the first `:`, or `default`; a row that does not decode (which
-- `weft doctor` lists) is left out rather than failing the migration.
CREATE FUNCTION pg_temp.weft_run_workflow(v bytea) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN convert_from(v, 'UTF8')::json ->> 'workflow';
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;

INSERT INTO tenant_runs (k1, k2, v)
SELECT convert_to(CASE WHEN position(':' IN workflow) > 0
                       THEN split_part(workflow, ':', 1)
                       ELSE 'default' END, 'UTF8'),
       k1, ''::bytea
FROM (SELECT k1, pg_temp.weft_run_workflow(v) AS workflow FROM runs) AS found
WHERE workflow IS NOT NULL;

DROP FUNCTION pg_temp.weft_run_workflow(bytea);
