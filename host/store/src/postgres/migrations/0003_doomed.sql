-- Stored definitions and components the sweeper found unused in a pass:
-- digest to when, in milliseconds (8 bytes, little-endian). Storing the digest again takes its row out; a later
-- pass deletes only what still has one.
CREATE TABLE doomed (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
