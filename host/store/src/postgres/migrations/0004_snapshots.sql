-- Snapshot stores: each store's sealed revisions, by (store, revision);
-- each data id's state (staging, sealed, dropped); and the entries of
-- each data id, by (data id, key): when the entry expires (8 bytes,
-- little-endian milliseconds, 0 for never), then its JSON value.
CREATE TABLE snapshots (k1 bytea NOT NULL, k2 bigint NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
CREATE TABLE snapshot_data (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
CREATE TABLE snapshot_entries (k1 bytea NOT NULL, k2 bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
