//! The tables in PostgreSQL: one for each [`Table`], keyed as redb keys
//! it (see `migrations/`), and the versioned migrations that make them.

use crate::rows::{Key, Table};

/// The migrations, in order: each runs once, in its own transaction, and
/// is recorded in `weft_migrations`. Never edit one that has shipped; add
/// the next.
pub(super) const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "tables", include_str!("migrations/0001_tables.sql")),
    (2, "parked", include_str!("migrations/0002_parked.sql")),
    (3, "doomed", include_str!("migrations/0003_doomed.sql")),
    (
        4,
        "snapshots",
        include_str!("migrations/0004_snapshots.sql"),
    ),
    (
        5,
        "tenant_runs",
        include_str!("migrations/0005_tenant_runs.sql"),
    ),
    (
        6,
        "audit_tenants",
        include_str!("migrations/0006_audit_tenants.sql"),
    ),
];

/// The newest migration this build knows.
pub(super) fn newest() -> i32 {
    MIGRATIONS.last().map_or(0, |(version, _, _)| *version)
}

/// The SQL name of `table`.
pub(super) fn name(table: Table) -> &'static str {
    use Table as T;
    match table {
        T::Runs => "runs",
        T::TenantRuns => "tenant_runs",
        T::Running => "running",
        T::Steps => "steps",
        T::Definitions => "definitions",
        T::Components => "components",
        T::Kv => "kv",
        T::Outbox => "outbox",
        T::Timers => "timers",
        T::TimerKeys => "timer_keys",
        T::RunTimers => "run_timers",
        T::Schedules => "schedules",
        T::Cancelled => "cancelled",
        T::Messages => "messages",
        T::RunMessages => "run_messages",
        T::Subscriptions => "subscriptions",
        T::Deliveries => "deliveries",
        T::Queue => "queue",
        T::Dead => "dead",
        T::Idempotency => "idempotency",
        T::Deployments => "deployments",
        T::Plugins => "plugins",
        T::Leases => "leases",
        T::Parked => "parked",
        T::Doomed => "doomed",
        T::Snapshots => "snapshots",
        T::SnapshotData => "snapshot_data",
        T::SnapshotEntries => "snapshot_entries",
        T::Hosts => "hosts",
        T::Tenants => "tenants",
        T::Tokens => "tokens",
        T::Secrets => "secrets",
        T::Audit => "audit",
        T::AuditTenants => "audit_tenants",
        T::Usage => "usage",
    }
}

/// The types of `table`'s key columns: the first's, and the second's if
/// it has one.
pub(super) fn kinds(table: Table) -> (Kind, Option<Kind>) {
    use Table as T;
    let first = match table {
        T::Timers | T::TimerKeys | T::Messages | T::Audit => Kind::Int,
        _ => Kind::Text,
    };
    let second = match table {
        T::Steps
        | T::Timers
        | T::TimerKeys
        | T::RunTimers
        | T::RunMessages
        | T::Queue
        | T::Dead
        | T::Deployments
        | T::Snapshots
        | T::Audit => Some(Kind::Int),
        T::Kv | T::Plugins | T::Secrets | T::SnapshotEntries | T::TenantRuns | T::AuditTenants => {
            Some(Kind::Text)
        }
        _ => None,
    };
    (first, second)
}

/// The type of a key column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// `bytea`: a text's UTF-8 bytes.
    Text,
    /// `bigint`, a number with its top bit flipped.
    Int,
}

impl Kind {
    /// The SQL type of an array of this column's values.
    pub(super) fn array(self) -> &'static str {
        match self {
            Self::Text => "bytea[]",
            Self::Int => "int8[]",
        }
    }
}

/// A number as a bigint key column holds it: its top bit flipped, so that
/// bigints sort as the unsigned numbers do.
pub(super) fn to_sql(n: u64) -> i64 {
    i64::from_ne_bytes((n ^ (1 << 63)).to_ne_bytes())
}

/// A bigint key column's number.
pub(super) fn from_sql(n: i64) -> u64 {
    u64::from_ne_bytes(n.to_ne_bytes()) ^ (1 << 63)
}

/// One part of a key, owned, as SQL takes it: a text as its UTF-8 bytes
/// (which sort as the text's bytes do), a number flipped ([`to_sql`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Col {
    Text(Vec<u8>),
    Int(i64),
}

/// A key, owned: its first part and, for two-part keys, its second.
pub(super) type Owned = (Col, Option<Col>);

/// `key` owned.
pub(super) fn owned(key: Key<'_>) -> Owned {
    let text = |s: &str| Col::Text(s.as_bytes().to_vec());
    let int = |n: u64| Col::Int(to_sql(n));
    match key {
        Key::Str(a) => (text(a), None),
        Key::StrU32(a, b) => (text(a), Some(int(u64::from(b)))),
        Key::StrStr(a, b) => (text(a), Some(text(b))),
        Key::StrU64(a, b) => (text(a), Some(int(b))),
        Key::U64(a) => (int(a), None),
        Key::U64U64(a, b) => (int(a), Some(int(b))),
    }
}
