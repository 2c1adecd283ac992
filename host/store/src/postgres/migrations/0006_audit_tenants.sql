-- (tenant, audit key), no value: each tenant's audit rows in time order,
-- the key as text that sorts as (microseconds, random) does. Rows written
-- before it are not in it: they are kept, and not counted against the
-- tenant's max_audit_rows.
CREATE TABLE audit_tenants (k1 bytea NOT NULL, k2 bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
