//! Every durable fact, behind the [`Store`] trait. [`RedbStore`] is the
//! embedded backend; [`PostgresStore`] keeps the same tables in
//! PostgreSQL, for several hosts on one database.

pub mod access;
mod apply;
pub use self::apply::retry_epoch;
mod group;
mod lease;
pub mod messages;
mod postgres;
mod records;
mod redb;
pub mod registry;
mod rows;
pub mod snapshots;
mod wakes;
mod write;

pub use self::access::{
    AccessWrite, AuditRecord, Quota, Right, Role, SecretGrant, SecretRecord, TenantRecord,
    TokenRecord,
};
pub use self::group::{Done, GroupCommit, Held, SHARED_BATCH, SHORT_BATCH};
pub use self::lease::{HostRecord, Lease};
pub use self::messages::{
    DeliveryOp, DeliveryRecord, DeliveryState, MessageRecord, SubscriptionRecord, Target,
};
pub use self::postgres::{
    BatchCosts, DEFAULT_POOL_SIZE as POSTGRES_POOL_SIZE, PostgresStore, SchemaMigration,
};
pub use self::records::{
    CANCEL_PATH, DEADLINE_PATH, DefinitionRecord, END_PATH, Effect, Migration, OutboxRecord,
    ParentLink, PauseMark, PinnedPlugin, RETRY_PATH, RetryMark, RunError, RunRecord, RunState,
    ScheduleRecord, StepRecord, TimerKind, TimerRecord, TimerRef, TriggerLink,
};
pub use self::redb::RedbStore;
pub use self::registry::{DeploymentRecord, PluginRecord};
pub use self::snapshots::{DataState, SnapshotData, SnapshotEntry, SnapshotRecord};
pub use self::wakes::{Wake, Wakes};
pub use self::write::{Charge, Emitted, Spawn, TimerRow, Write};
pub use self::write::{encode, queue_lease};
pub use weft_core::{Emission, ErrorRecord};

use std::sync::Arc;

/// Why the store could not do what was asked. After any error the store is
/// as it was before the call: every write is one transaction.
///
/// A write refused on its own (see [`Store::apply`]) answers
/// [`Refused`](Self::Refused), with what it ran into; the others fail a
/// call as a whole.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A write was refused for lack of space on the store's device (or a
    /// quota of it). Nothing of it was stored; the store tries again, and
    /// works once space is back.
    #[error(
        "store: no space left on the device of the data directory {dir}; free some, and the store goes on by itself"
    )]
    NoSpace {
        /// The directory of the store's file.
        dir: String,
    },
    /// The database does not take writes now: a PostgreSQL server that is
    /// read-only, out of resources, shutting down or out of reach. The
    /// write was not stored, except when the connection was lost during
    /// its commit, whose outcome is then unknown (the engine reads the run
    /// back, as after any failed commit); the store goes on once the
    /// database takes writes again.
    #[error("store: {why}")]
    Unavailable {
        /// What the database said, or why it cannot be reached.
        why: String,
    },
    /// Another process holds the database in a way that excludes this one.
    #[error("the store at {path} is in use by another process")]
    Locked {
        /// The database file.
        path: String,
    },
    /// The file was written by an incompatible version of weft.
    #[error("the store at {path} has format {found}; this weft reads format {expected}")]
    Format {
        /// The database file.
        path: String,
        /// The format found.
        found: String,
        /// The format this build reads and writes.
        expected: String,
    },
    /// A writer crashed and the file needs repair, which a read-only handle
    /// cannot do; open it with [`RedbStore::open`] once to repair it.
    #[error("the store at {path} needs repair after a crash; open it for writing to repair it")]
    NeedsRepair {
        /// The database file.
        path: String,
    },
    /// The batch this write was committed with failed. Nothing in it was
    /// stored, as far as this process knows: a connection lost during the
    /// commit leaves its outcome unknown ([`StoreError::outcome_unknown`]).
    #[error("the commit failed: {0}")]
    Commit(String),
    /// The committing thread has stopped.
    #[error("store: the committing thread has stopped")]
    Closed,
    /// The store refused this one write; nothing of it was stored, and the
    /// other writes of its batch are not affected.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The store cannot be opened as given: a URL that is not one, say.
    #[error("{what}: {message}")]
    Config {
        /// What was given.
        what: String,
        /// What is wrong with it.
        message: String,
    },
    /// The store was opened read-only and a write was attempted.
    #[error("the store was opened read-only")]
    ReadOnly,
    /// The database failed: I/O, corruption, a full disk, a server that
    /// cannot be reached or went away. Shared, so that the error can be
    /// cloned for every listener.
    #[error("store: {0}")]
    Backend(#[source] Arc<dyn std::error::Error + Send + Sync>),
    /// A record could not be encoded or decoded.
    #[error("store: record `{key}` cannot be decoded: {message}")]
    Codec {
        /// The record's key.
        key: String,
        /// Why.
        message: String,
    },
}

/// Why the store refused one write (see [`Store::apply`]): what it names
/// is missing, exists already, or changed since the write was decided; a
/// run driven by another host; a quota. Nothing of the write was stored,
/// and the other writes of its batch are not affected. A refusal is an
/// answer about the data, unlike the other [`StoreError`]s, which fail a
/// call as a whole.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// What a write names does not exist (a run to act on or cancel, a
    /// subscription to remove, a delivery to move on); nothing of the
    /// write was stored.
    #[error("store: no {0}")]
    NotFound(What),
    /// What a write would make exists already: a run with that id, a
    /// subscription with that key and another target, a trigger with that
    /// key, a workflow revision. Nothing of the write was stored.
    #[error("store: {}", exists(.0))]
    Exists(What),
    /// A version check failed: what the write was computed from changed
    /// since it was read (a trigger another host moved on, or removed; a
    /// run with another number of records than the write was decided on).
    /// Nothing of the write was stored; read again and recompute.
    #[error("store: {0} changed since it was read")]
    Changed(What),
    /// The run is in progress in another process that shares the store
    /// (it is not suspended), so only that process may write it on.
    /// Nothing of the write was stored.
    #[error("store: run `{run}` is in progress in another process")]
    Busy {
        /// The run.
        run: String,
    },
    /// The writer does not hold run `run`'s lease: host `owner` drives it
    /// (or took it over). Nothing of the write was stored.
    #[error("store: run `{run}` is driven by host `{owner}`")]
    Fenced {
        /// The run.
        run: String,
        /// The host whose lease it is.
        owner: String,
    },
    /// The delivery is not in a state the operation applies to (a resend
    /// of one that is not a dead letter, say). Nothing of the write was
    /// stored.
    #[error("store: delivery `{id}` is {state}")]
    DeliveryState {
        /// The delivery.
        id: String,
        /// Its state.
        state: DeliveryState,
    },
    /// A key a step read was changed by another run before the step's
    /// result committed; nothing of the write was stored, and the step must
    /// run again.
    #[error("store: key `{key}` of {space} changed since the step read it")]
    KvConflict {
        /// The key space.
        space: String,
        /// The key.
        key: String,
    },
    /// The timer a write fires is gone: it fired or was cancelled already
    /// (or its run ended). Nothing of the write was stored.
    #[error("store: timer {0} has already fired or been cancelled")]
    TimerGone(u64),
    /// The run a write would change has ended (it was cancelled, say);
    /// nothing of the write was stored.
    #[error("store: run `{0}` has ended")]
    RunEnded(String),
    /// What is still needed cannot be deleted: a run that has not ended,
    /// or that a run which has not ended needs (a child whose parent
    /// waits), a message with deliveries not settled. Nothing was.
    #[error("store: {what} cannot be deleted: {why}")]
    Needed {
        /// What was to be deleted.
        what: What,
        /// Why, in a few words: "it has not ended", "its parent `p` has
        /// not ended", "2 deliveries are not settled".
        why: String,
    },
    /// A run was started before with this idempotency key; nothing of the
    /// write was stored.
    #[error("store: idempotency key `{key}` started run `{run}` already")]
    Duplicate {
        /// The key.
        key: String,
        /// The run it started.
        run: String,
    },
    /// The write would take its tenant's stored bytes over the tenant's
    /// `max_stored_bytes`; nothing of it was stored.
    #[error(
        "tenant `{tenant}` is at its quota `max_stored_bytes` ({limit}): it stores {used} bytes, and this write adds {bytes}"
    )]
    StorageQuota {
        /// The tenant.
        tenant: String,
        /// What it stores.
        used: u64,
        /// Its quota.
        limit: u64,
        /// What the write would add.
        bytes: u64,
    },
    /// A record the write reads does not decode (a damaged row, or one of
    /// a newer weft): this write is refused, the rest of its batch goes on.
    #[error("store: record `{key}` cannot be decoded: {message}")]
    Unreadable {
        /// The record's key.
        key: String,
        /// Why.
        message: String,
    },
    /// The write would set a timer past its tenant's `max_timers`; nothing
    /// of it was stored.
    #[error(
        "tenant `{tenant}` is at its quota `max_timers` ({limit}): its runs have {timers} timers pending"
    )]
    TimerQuota {
        /// The tenant.
        tenant: String,
        /// Its timers pending.
        timers: u64,
        /// Its quota.
        limit: u64,
    },
}

impl StoreError {
    /// Whether what was read (or what a write read) does not decode: a
    /// damaged row, or one of a newer weft. Trying again reads the same.
    pub fn unreadable(&self) -> bool {
        matches!(
            self,
            StoreError::Codec { .. } | StoreError::Refused(Refused::Unreadable { .. })
        )
    }

    /// Whether the write may have been stored all the same: the commit
    /// failed in a way that can hide a transaction that landed (a
    /// connection lost after `COMMIT` was sent, a sync that failed after
    /// the write reached the disk). Its writer reads back what it wrote;
    /// every other error is an answer.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            StoreError::Commit(_) | StoreError::Backend(_) | StoreError::Unavailable { .. }
        )
    }
}

impl From<::redb::Error> for StoreError {
    fn from(error: ::redb::Error) -> Self {
        Self::Backend(Arc::new(error))
    }
}

/// How [`Refused::Exists`] reads: a subscription exists "with another
/// target" (one with the same target is kept, not refused).
fn exists(what: &What) -> String {
    match what {
        What::Subscription(_) => format!("{what} exists with another target"),
        _ => format!("{what} exists already"),
    }
}

/// What a refused write named, for [`Refused::NotFound`],
/// [`Refused::Exists`] and [`Refused::Changed`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum What {
    /// The run with this id: "run `id`".
    Run(String),
    /// The host with this id: "host `id`".
    Host(String),
    /// The subscription with this key, `<channel>/<name>`.
    Subscription(String),
    /// The delivery with this id.
    Delivery(String),
    /// The message with this seq.
    Message(u64),
    /// The tenant with this name.
    Tenant(String),
    /// The API token with this id.
    Token(String),
    /// A tenant's secret, by name.
    Secret(String),
    /// The cron trigger with this key, `<workflow>/<trigger>`: "trigger
    /// `key`".
    Schedule(String),
    /// The step record numbered `seq` of a run: its slot.
    Step {
        /// The run's id.
        run: String,
        /// The record's number.
        seq: u32,
    },
    /// A stored definition or component, by digest.
    Blob(String),
    /// A revision of a snapshot store.
    Snapshot {
        /// The store, as its tenant names it.
        store: String,
        /// The revision.
        revision: u32,
    },
    /// The data being staged for a snapshot revision, by id.
    SnapshotData(String),
    /// A key of a snapshot revision.
    SnapshotKey(String),
    /// One deployed version of a workflow.
    Revision {
        /// The workflow's id.
        workflow: String,
        /// The revision.
        revision: u32,
    },
}

impl std::fmt::Display for What {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Run(id) => write!(f, "run `{id}`"),
            Self::Host(id) => write!(f, "host `{id}`"),
            Self::Subscription(key) => write!(f, "subscription `{key}`"),
            Self::Delivery(id) => write!(f, "delivery `{id}`"),
            Self::Message(seq) => write!(f, "message {seq}"),
            Self::Schedule(key) => write!(f, "trigger `{key}`"),
            Self::Tenant(name) => write!(f, "tenant `{name}`"),
            Self::Token(id) => write!(f, "token `{id}`"),
            Self::Secret(name) => write!(f, "secret `{name}`"),
            Self::Step { run, seq } => write!(f, "record {seq} of run `{run}`"),
            Self::Blob(digest) => write!(f, "`{digest}`"),
            Self::Snapshot { store, revision } => {
                write!(f, "snapshot store `{store}` revision {revision}")
            }
            Self::SnapshotData(data) => write!(f, "snapshot data `{data}`"),
            Self::SnapshotKey(key) => write!(f, "key `{key}`"),
            Self::Revision { workflow, revision } => {
                write!(f, "workflow `{workflow}` revision {revision}")
            }
        }
    }
}

/// A stored row that does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged {
    /// Its table.
    pub table: String,
    /// Its key, as text.
    pub key: String,
    /// Why it does not decode.
    pub error: String,
}

impl Damaged {
    /// The row at `key` of `table`, if `decoded` (its decoding) failed.
    pub(crate) fn of<T>(table: &str, key: String, decoded: Result<T, StoreError>) -> Option<Self> {
        decoded.err().map(|e| Self {
            table: table.to_owned(),
            key,
            error: e.to_string(),
        })
    }
}

/// Which runs a listing keeps. The default keeps every run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only runs of this tenant.
    pub tenant: Option<String>,
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Only runs in this state.
    pub state: Option<RunState>,
    /// Only runs created at or after this time.
    pub since: Option<weft_core::clock::Timestamp>,
    /// Only runs created before this time.
    pub until: Option<weft_core::clock::Timestamp>,
    /// Only runs whose id sorts before this one (older ones: ids are
    /// time-ordered): the next page after a page that ended with it.
    pub before: Option<String>,
    /// Only runs paused by an operator (`true`: running and paused), or
    /// only runs that are not (`false`).
    pub paused: Option<bool>,
}

impl RunFilter {
    /// The one tenant whose runs can pass, if the filter names one (by
    /// itself or by its workflow): a store reads that tenant's index of
    /// runs instead of every run.
    pub fn tenant_of(&self) -> Option<&str> {
        self.tenant
            .as_deref()
            .or_else(|| self.workflow.as_deref().map(weft_core::tenant::of))
    }

    /// Whether `run` passes.
    pub fn keeps(&self, run: &RunRecord) -> bool {
        self.tenant
            .as_ref()
            .is_none_or(|t| t == weft_core::tenant::of(&run.workflow))
            && self.workflow.as_ref().is_none_or(|w| *w == run.workflow)
            && self.state.is_none_or(|s| s == run.state)
            && self.since.is_none_or(|t| run.created_at >= t)
            && self.until.is_none_or(|t| run.created_at < t)
            && self.before.as_ref().is_none_or(|b| run.id < *b)
            && self
                .paused
                .is_none_or(|p| p == (run.paused.is_some() && run.state == RunState::Running))
    }

    /// Keeps the runs in the state named `name`: a [`RunState`], or
    /// `paused` (running, and paused by an operator).
    pub fn state_named(mut self, name: &str) -> Result<Self, String> {
        if name == "paused" {
            self.state = Some(RunState::Running);
            self.paused = Some(true);
        } else {
            let state = name
                .parse()
                .map_err(|e: String| format!("{}, or paused)", e.trim_end_matches(')')))?;
            self.state = Some(state);
        }
        Ok(self)
    }
}

/// A page of [`Store::runs_from`]: the runs, and the id to go on after.
pub type RunsFrom = (Vec<RunRecord>, Option<String>);

/// What the store keeps once per digest, for the runs that pin it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Blob {
    /// A workflow definition's text (`DefinitionRecord`).
    Definition,
    /// A plugin's component bytes.
    Component,
}

/// A row of [`Store::kv_from`]: a space, a key, and its state.
pub type KvRow = (String, String, weft_core::Versioned);

/// Durable storage of runs and their steps.
///
/// Every method is blocking and, for writes, durable when it returns `Ok`:
/// the data has been committed and synced. A crash during a write leaves the
/// state before it.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Applies `writes` in one transaction, synced once, and answers for
    /// each: a write may be refused on its own (a run id that exists is
    /// [`Refused::Exists`]; see [`Refused`] for every refusal)
    /// without affecting the others. `Err` means the transaction failed and
    /// none of the writes was stored.
    fn apply(&self, writes: &[&Write]) -> Result<Vec<Result<(), Refused>>, StoreError>;

    /// Applies `write` alone, in a transaction of its own: a refusal is
    /// [`StoreError::Refused`].
    fn apply_one(&self, write: &Write) -> Result<(), StoreError> {
        self.apply(&[write])?
            .pop()
            .map_or(Err(StoreError::Closed), |answer| {
                answer.map_err(StoreError::from)
            })
    }

    /// Why the store fails now (a full disk, say), if it does: what
    /// `/v1/health` reports. It goes on by itself once it can.
    fn degraded(&self) -> Option<String> {
        None
    }

    /// The news of other processes' commits ([`Wakes`]), if this backend
    /// hears of them: PostgreSQL does (`LISTEN`/`NOTIFY`); redb, which one
    /// process holds, does not.
    fn wakes(&self) -> Option<Arc<Wakes>> {
        None
    }

    /// The runs among the next `limit` run rows after id `after` (from the
    /// first if `None`), in id order: oldest first, as ids are
    /// time-ordered. A row that does not decode is passed over (`weft
    /// doctor` lists it). With them, the id to go on after, if `limit`
    /// rows were read (`None`: the table ended).
    fn runs_from(&self, after: Option<&str>, limit: usize) -> Result<RunsFrom, StoreError>;

    /// Up to `limit` messages after seq `after`, in seq order (oldest
    /// first). For the sweeper.
    fn messages_from(&self, after: u64, limit: usize) -> Result<Vec<MessageRecord>, StoreError>;

    /// Up to `limit` rows of every key-value space after `(space, key)`
    /// `after` (from the first if `None`), in key order, deleted keys
    /// (tombstones) included: each row's space, key and state. For the
    /// sweeper.
    fn kv_from(&self, after: Option<(&str, &str)>, limit: usize) -> Result<Vec<KvRow>, StoreError>;

    /// The digests of every stored `blob` (definitions or components), in
    /// order. For the sweeper.
    fn digests(&self, blob: Blob) -> Result<Vec<String>, StoreError>;

    /// The digests the sweeper marked unused (see [`Write::MarkBlob`]),
    /// each with when. For the sweeper.
    fn marks(&self) -> Result<Vec<(String, weft_core::Timestamp)>, StoreError>;

    /// The parked runs, oldest first, up to `limit`: each run's id and
    /// tenant (see [`Write::parked`]).
    fn parked(&self, limit: usize) -> Result<Vec<(String, String)>, StoreError>;

    /// Takes up to `n` of the oldest parked runs for host `host`, at most
    /// `room` of each tenant listed in `rooms` as `(tenant, room)` (none
    /// of a tenant whose room is 0), in one transaction: each gets a lease
    /// of `host` at its next epoch, as a [`Write::Claim`] would give it,
    /// and leaves the parked runs. Returns the runs taken, oldest first,
    /// each with its tenant. Hosts that claim at once take different
    /// runs, and none waits for another's claim.
    fn claim_parked(
        &self,
        host: &str,
        n: usize,
        rooms: &[(String, usize)],
    ) -> Result<Vec<(String, String)>, StoreError>;

    /// The bytes tenant `tenant`'s writes store, as their
    /// [`Charge`]s count them.
    fn stored_bytes(&self, tenant: &str) -> Result<u64, StoreError>;

    /// The timers tenant `tenant`'s runs have pending, as the store counts
    /// them against its `max_timers`.
    fn pending_timers(&self, tenant: &str) -> Result<u64, StoreError> {
        // Kept beside the tenant's stored bytes, in the row
        // `<tenant>/timers` (see `apply/usage.rs`).
        self.stored_bytes(&format!("{tenant}/timers"))
    }

    /// The audit rows kept for tenant `tenant`, as the store counts them
    /// against its `max_audit_rows` (rows from before the count are not
    /// in it).
    fn audit_rows(&self, tenant: &str) -> Result<u64, StoreError> {
        self.stored_bytes(&format!("{tenant}/audit"))
    }

    /// The run with id `id`.
    fn run(&self, id: &str) -> Result<Option<RunRecord>, StoreError>;

    /// Up to `limit` runs that pass `filter`, newest first.
    fn runs(&self, filter: &RunFilter, limit: usize) -> Result<Vec<RunRecord>, StoreError>;

    /// The step records of run `id`, in order.
    fn steps(&self, id: &str) -> Result<Vec<StepRecord>, StoreError>;

    /// Up to `limit` step records of run `id` after record `after` (from
    /// the first without it), in order.
    fn steps_page(
        &self,
        id: &str,
        after: Option<u32>,
        limit: usize,
    ) -> Result<Vec<StepRecord>, StoreError> {
        let mut steps = self.steps(id)?;
        steps.retain(|s| after.is_none_or(|a| s.seq > a));
        steps.truncate(limit);
        Ok(steps)
    }

    /// The runs in state `running`, oldest first.
    fn running(&self) -> Result<Vec<RunRecord>, StoreError>;

    /// The ids of the runs in state `running`, oldest first: what a host
    /// resumes at its start, read from the index alone (reading a hundred
    /// thousand whole runs first held up the first step by seconds).
    fn running_ids(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.running()?.into_iter().map(|run| run.id).collect())
    }

    /// The definition with `digest`.
    fn definition(&self, digest: &str) -> Result<Option<DefinitionRecord>, StoreError>;

    /// Every pending timer's key `(due, id)`, soonest first.
    fn timer_keys(&self) -> Result<Vec<(u64, u64)>, StoreError>;

    /// The pending timer with key `(due, id)`.
    fn timer(&self, key: (u64, u64)) -> Result<Option<TimerRecord>, StoreError>;

    /// The pending timers of run `id`.
    fn run_timers(&self, id: &str) -> Result<Vec<TimerRecord>, StoreError>;

    /// Every cron trigger, by key.
    fn schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError>;

    /// The open outbox rows, oldest first.
    fn outbox(&self) -> Result<Vec<OutboxRecord>, StoreError>;

    /// The bytes of the component with `digest`.
    fn component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// The committed state of `key` in key space `space`.
    fn kv_get(&self, space: &str, key: &str) -> Result<weft_core::Versioned, StoreError>;

    /// Up to `limit` keys of `space` that start with `prefix` and have a
    /// value that has not expired by `now` (milliseconds), in byte order.
    fn kv_list(
        &self,
        space: &str,
        prefix: &str,
        limit: usize,
        now: u64,
    ) -> Result<Vec<String>, StoreError>;

    /// The subscriptions of `channel`, or of every channel, by key.
    fn subscriptions(&self, channel: Option<&str>) -> Result<Vec<SubscriptionRecord>, StoreError>;

    /// The subscription `<channel>/<name>`.
    fn subscription(&self, key: &str) -> Result<Option<SubscriptionRecord>, StoreError>;

    /// The delivery with `id`.
    fn delivery(&self, id: &str) -> Result<Option<DeliveryRecord>, StoreError>;

    /// The message with `seq`.
    fn message(&self, seq: u64) -> Result<Option<MessageRecord>, StoreError>;

    /// Up to `limit` unsettled deliveries of `subscription` (with `dead`,
    /// its dead letters) for messages after `after`, in message order.
    fn queued(
        &self,
        subscription: &str,
        dead: bool,
        after: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError>;

    /// Up to `limit` dead letters of every subscription.
    fn dead_letters(&self, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError>;

    /// Up to `limit` deliveries, newest first.
    fn deliveries(&self, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError>;

    /// The messages run `id` emitted, in order.
    fn run_messages(&self, id: &str) -> Result<Vec<MessageRecord>, StoreError>;

    /// The run a start with idempotency key `key` recorded.
    fn idempotent_run(&self, key: &str) -> Result<Option<String>, StoreError>;

    /// The deployed versions of `workflow`, or of every workflow, by id
    /// then revision.
    fn deployments(&self, workflow: Option<&str>) -> Result<Vec<DeploymentRecord>, StoreError>;

    /// Every plugin in the registry, by name then digest.
    fn plugins(&self) -> Result<Vec<PluginRecord>, StoreError>;

    /// The sealed revisions of snapshot store `store` (named with its
    /// tenant), or of every store, by store then revision.
    fn snapshots(&self, store: Option<&str>) -> Result<Vec<SnapshotRecord>, StoreError>;

    /// Entry `key` of snapshot data `data`, expired or not.
    fn snapshot_entry(&self, data: &str, key: &str) -> Result<Option<SnapshotEntry>, StoreError>;

    /// Up to `limit` entries of snapshot data `data` whose keys start with
    /// `prefix` and come after `after` (from the first if `None`), in key
    /// order, expired ones included.
    fn snapshot_entries(
        &self,
        data: &str,
        after: Option<&str>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, SnapshotEntry)>, StoreError>;

    /// As [`Store::snapshot_entries`], the keys alone, each with when it
    /// expires: no value is read into memory.
    fn snapshot_keys(
        &self,
        data: &str,
        after: Option<&str>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError>;

    /// Every snapshot data id with its row. For the sweeper.
    fn snapshot_data(&self) -> Result<Vec<(String, SnapshotData)>, StoreError>;

    /// The rows of the runs, outbox, schedules, timers, hosts, tenants,
    /// deployments and plugins tables that do not decode, as `weft doctor`
    /// shows them: listings set them aside, but for the tenants', which
    /// fails (a tenant set aside would lose its quota).
    fn damaged(&self) -> Result<Vec<Damaged>, StoreError>;

    /// Run `id`'s lease, if it has one.
    fn lease(&self, id: &str) -> Result<Option<Lease>, StoreError>;

    /// Every host with a row, live or expired.
    fn hosts(&self) -> Result<Vec<HostRecord>, StoreError>;

    /// Every tenant, by name (tenant `default` has a row only once one
    /// is written for it).
    fn tenants(&self) -> Result<Vec<TenantRecord>, StoreError>;

    /// The API token with id `id`.
    fn token(&self, id: &str) -> Result<Option<TokenRecord>, StoreError>;

    /// Every API token, revoked and expired ones too, by id.
    fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError>;

    /// `tenant`'s secret `name`, sealed.
    fn secret(&self, tenant: &str, name: &str) -> Result<Option<SecretRecord>, StoreError>;

    /// Every secret of `tenant`, sealed, by name.
    fn secrets(&self, tenant: &str) -> Result<Vec<SecretRecord>, StoreError>;

    /// Up to `limit` entries of the audit log, of `tenant` or of every
    /// tenant, newest first.
    fn audit(&self, tenant: Option<&str>, limit: usize) -> Result<Vec<AuditRecord>, StoreError>;
}
