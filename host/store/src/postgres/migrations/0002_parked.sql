-- Runs started while their host had no place, which no host has taken
-- yet: run id (time-ordered) to the run's tenant. Hosts claim them with
-- SELECT ... FOR UPDATE SKIP LOCKED.
CREATE TABLE parked (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
