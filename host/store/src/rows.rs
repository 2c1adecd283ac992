//! The tables every backend keeps, and [`Rows`], what a backend offers one
//! write transaction: get, put and delete a row by key, and scan a
//! table's rows under a first key part. The rules of every write (its
//! conditions, its refusals, the tables kept in step) are written once,
//! in `apply`, against this trait; redb and PostgreSQL each implement it.
//!
//! Values are bytes. A table whose rows carry no value stores an empty
//! value; one that holds a number stores it as 8 little-endian bytes; one
//! that holds an id stores its UTF-8.

use crate::StoreError;

/// One table of the store: what it holds, and by what key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Table {
    /// Run id to its `RunRecord`.
    Runs,
    /// `(tenant, run id)`, no value: each tenant's runs, so that a
    /// tenant's listing reads its own rows and no other tenant's.
    TenantRuns,
    /// The runs to resume: running and not suspended. Run id, no value.
    Running,
    /// `(run, seq)` to a `StepRecord`.
    Steps,
    /// Digest to a `DefinitionRecord`, stored once.
    Definitions,
    /// Digest to a component's bytes, stored once.
    Components,
    /// `(space, key)` to a version and a value (see `encode_kv`).
    Kv,
    /// Outbox row id to its `OutboxRecord`.
    Outbox,
    /// Pending timers: `(due, id)` to a `TimerRecord`.
    Timers,
    /// The same keys alone, so that arming a million timers reads 16
    /// bytes each.
    TimerKeys,
    /// Each run's pending timers: `(run, id)` to the due time.
    RunTimers,
    /// Cron trigger key to its `ScheduleRecord`.
    Schedules,
    /// Runs cancelled in the store, whose driver's next commit is refused.
    Cancelled,
    /// Message seq to its `MessageRecord`.
    Messages,
    /// Each run's messages: `(run, seq)`.
    RunMessages,
    /// `<channel>/<name>` to a `SubscriptionRecord`.
    Subscriptions,
    /// Delivery id to its `DeliveryRecord`.
    Deliveries,
    /// Each subscription's unsettled deliveries: `(subscription, seq)` to
    /// the delivery id.
    Queue,
    /// Each subscription's dead letters, keyed as `Queue`.
    Dead,
    /// A start's idempotency key to the run it started.
    Idempotency,
    /// `(workflow, revision)` to a `DeploymentRecord`.
    Deployments,
    /// `(name, digest)` to a `PluginRecord`.
    Plugins,
    /// Run id to its `Lease`, while it has one.
    Leases,
    /// Runs started while their host had no place, which no host has
    /// taken yet: run id (time-ordered) to the run's tenant.
    Parked,
    /// Stored definitions and components the sweeper found unused in a
    /// pass: digest to when (a number, milliseconds). A run or a deployment that stores the
    /// digest again takes its row out; the sweeper deletes, on a later
    /// pass, only what still has one.
    Doomed,
    /// `(store, revision)` to a sealed `SnapshotRecord`.
    Snapshots,
    /// Snapshot data id to its `SnapshotData`.
    SnapshotData,
    /// `(data id, key)` to an encoded `SnapshotEntry`.
    SnapshotEntries,
    /// Host id to its `HostRecord`.
    Hosts,
    /// Tenant name to its `TenantRecord`.
    Tenants,
    /// Token id to its `TokenRecord`.
    Tokens,
    /// `(tenant, name)` to a sealed `SecretRecord`.
    Secrets,
    /// `(microseconds, random)` to an `AuditRecord`.
    Audit,
    /// `(tenant, audit key)`, no value: each tenant's audit rows in time
    /// order (the key as [`audit_key`] writes it), so that its oldest go
    /// first once it has more than its `max_audit_rows`, and its listing
    /// reads no other tenant's.
    AuditTenants,
    /// Tenant to the bytes it stores.
    Usage,
}

/// A row's key: one of the shapes the tables use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Key<'a> {
    Str(&'a str),
    StrU32(&'a str, u32),
    StrStr(&'a str, &'a str),
    StrU64(&'a str, u64),
    U64(u64),
    U64U64(u64, u64),
}

/// The part of a key after its first, in a scan under the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    U64(u64),
    Str(String),
}

impl Part {
    /// The number, in a table keyed `(text, number)`.
    pub(crate) fn number(&self) -> u64 {
        match self {
            Self::U64(n) => *n,
            Self::Str(_) => 0,
        }
    }
}

/// One write transaction's rows. An error from any method fails the
/// transaction as a whole; nothing of it is stored.
pub(crate) trait Rows {
    /// The value of row `key` of `table`.
    fn get(&mut self, table: Table, key: Key<'_>) -> Result<Option<Vec<u8>>, StoreError>;

    /// Whether row `key` of `table` exists.
    fn has(&mut self, table: Table, key: Key<'_>) -> Result<bool, StoreError> {
        Ok(self.get(table, key)?.is_some())
    }

    /// Stores `value` as row `key` of `table`.
    fn put(&mut self, table: Table, key: Key<'_>, value: &[u8]) -> Result<(), StoreError>;

    /// Removes row `key` of `table`; whether it was there.
    fn delete(&mut self, table: Table, key: Key<'_>) -> Result<bool, StoreError>;

    /// The rows of `table` (keyed `(text, _)`) whose first key part is
    /// `first`, in key order: each row's second part and value.
    fn under(&mut self, table: Table, first: &str) -> Result<Vec<(Part, Vec<u8>)>, StoreError>;

    /// The second parts of the first `n` rows of `table` (keyed `(text,
    /// text)`) whose first key part is `first`, in key order.
    fn first_under(
        &mut self,
        table: Table,
        first: &str,
        n: usize,
    ) -> Result<Vec<String>, StoreError>;

    /// The keys of `table` (keyed by text) from `from` up to, not
    /// including, `to`, in order.
    fn keys_between(
        &mut self,
        table: Table,
        from: &str,
        to: &str,
    ) -> Result<Vec<String>, StoreError>;

    /// The value of every row of `table`, a small one (deployments,
    /// plugins), in key order.
    fn values(&mut self, table: Table) -> Result<Vec<Vec<u8>>, StoreError>;

    /// The greatest key of `table` (keyed by a number).
    fn last_number(&mut self, table: Table) -> Result<Option<u64>, StoreError>;
}

/// An audit row's key `(microseconds, random)` as text that sorts as the
/// key does: the two numbers, 20 digits each.
pub(crate) fn audit_key((at, n): (u64, u64)) -> String {
    format!("{at:020}{n:020}")
}

/// The key [`audit_key`] wrote, back; `None` for text it did not write.
pub(crate) fn audit_key_of(text: &str) -> Option<(u64, u64)> {
    let (at, n) = (text.get(..20)?, text.get(20..)?);
    Some((at.parse().ok()?, n.parse().ok()?))
}

/// A number as a table stores it.
pub(crate) fn number(value: u64) -> [u8; 8] {
    value.to_le_bytes()
}

/// A number stored by [`number`].
pub(crate) fn read_number(bytes: &[u8]) -> u64 {
    bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// A version and a value (`None`: deleted) as the `Kv` table stores them:
/// the version (8 bytes, little-endian), then `1` and the value, or `0`
/// for a deleted key (kept, so its version keeps growing), or `2`, the
/// time the value expires (8 bytes, milliseconds) and the value.
pub(crate) fn encode_kv(version: u64, value: Option<&str>, expires_at: Option<u64>) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(17 + value.map_or(0, str::len));
    bytes.extend_from_slice(&version.to_le_bytes());
    match (value, expires_at) {
        (Some(value), None) => {
            bytes.push(1);
            bytes.extend_from_slice(value.as_bytes());
        }
        (Some(value), Some(at)) => {
            bytes.push(2);
            bytes.extend_from_slice(&at.to_le_bytes());
            bytes.extend_from_slice(value.as_bytes());
        }
        (None, _) => bytes.push(0),
    }
    bytes
}

/// A row of the `Kv` table.
pub(crate) fn decode_kv(bytes: &[u8]) -> weft_core::Versioned {
    let version = read_number(bytes);
    let text =
        |from: usize| String::from_utf8_lossy(bytes.get(from..).unwrap_or_default()).into_owned();
    let (value, expires_at) = match bytes.get(8) {
        Some(1) => (Some(text(9)), None),
        Some(2) => (
            Some(text(17)),
            Some(read_number(bytes.get(9..).unwrap_or_default())),
        ),
        _ => (None, None),
    };
    weft_core::Versioned {
        version,
        value,
        expires_at,
    }
}

/// A stored record, decoded.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    key: impl std::fmt::Display,
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Codec {
        key: key.to_string(),
        message: e.to_string(),
    })
}
