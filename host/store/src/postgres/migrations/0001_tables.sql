-- weft's tables, one for each table of the embedded store, with the same
-- keys: `k1` (and `k2`) are the key's parts, `v` the value, the same bytes
-- redb stores (records are JSON). A text key is stored as its UTF-8 bytes
-- (`bytea`), so that it sorts by bytes as redb sorts it and may hold any
-- character a key may, NUL included. A number is stored as a bigint with
-- its top bit flipped, so that bigints sort as the unsigned numbers do.

-- Run id to its RunRecord.
CREATE TABLE runs (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- The runs to resume: running and not suspended.
CREATE TABLE running (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- (run, seq) to a StepRecord.
CREATE TABLE steps (k1 bytea NOT NULL, k2 bigint NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
-- Digest to a DefinitionRecord, stored once.
CREATE TABLE definitions (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- Digest to a component's bytes, stored once.
CREATE TABLE components (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- (space, key) to a version and a value.
CREATE TABLE kv (k1 bytea NOT NULL, k2 bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
-- Outbox row id to its OutboxRecord.
CREATE TABLE outbox (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- Pending timers: (due, id) to a TimerRecord.
CREATE TABLE timers (k1 bigint NOT NULL, k2 bigint NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
-- The same keys alone.
CREATE TABLE timer_keys (k1 bigint NOT NULL, k2 bigint NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
-- Each run's pending timers: (run, id) to the due time.
CREATE TABLE run_timers (k1 bytea NOT NULL, k2 bigint NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
-- Cron trigger key to its ScheduleRecord.
CREATE TABLE schedules (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- Runs cancelled in the store.
CREATE TABLE cancelled (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- Message seq to its MessageRecord.
CREATE TABLE messages (k1 bigint NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- Each run's messages: (run, seq).
CREATE TABLE run_messages (k1 bytea NOT NULL, k2 bigint NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
-- <channel>/<name> to a SubscriptionRecord.
CREATE TABLE subscriptions (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- Delivery id to its DeliveryRecord.
CREATE TABLE deliveries (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- Each subscription's unsettled deliveries: (subscription, seq) to the delivery id.
CREATE TABLE queue (k1 bytea NOT NULL, k2 bigint NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
-- Each subscription's dead letters: (subscription, seq) to the delivery id.
CREATE TABLE dead (k1 bytea NOT NULL, k2 bigint NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
-- A start's idempotency key to the run it started.
CREATE TABLE idempotency (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- (workflow, revision) to a DeploymentRecord.
CREATE TABLE deployments (k1 bytea NOT NULL, k2 bigint NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
-- (name, digest) to a PluginRecord.
CREATE TABLE plugins (k1 bytea NOT NULL, k2 bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
-- Run id to its Lease, while it has one.
CREATE TABLE leases (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- Host id to its HostRecord.
CREATE TABLE hosts (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- Tenant name to its TenantRecord.
CREATE TABLE tenants (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- Token id to its TokenRecord.
CREATE TABLE tokens (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
-- (tenant, name) to a sealed SecretRecord.
CREATE TABLE secrets (k1 bytea NOT NULL, k2 bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
-- (microseconds, random) to an AuditRecord.
CREATE TABLE audit (k1 bigint NOT NULL, k2 bigint NOT NULL, v bytea NOT NULL, PRIMARY KEY (k1, k2));
-- Tenant to the bytes it stores (8 bytes, little-endian).
CREATE TABLE usage (k1 bytea NOT NULL PRIMARY KEY, v bytea NOT NULL);
