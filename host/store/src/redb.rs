//! The embedded store: one redb file.
//!
//! Tables: the `TableDefinition` constants below, each documented with
//! what it holds (runs, steps, definitions, components, key-value data,
//! outbox, timers, cancellations, schedules, messages, subscriptions,
//! deliveries and their queues, idempotency keys, deployments, plugins).
//! Records are JSON; the `kv` table holds a version (8 bytes,
//! little-endian), then `1` and the value, or `0` for a deleted key (kept,
//! so its version keeps growing).
//!
//! This module opens the file and reads it. A batch of writes is one
//! transaction over `tables::Tables`, the redb [`Rows`](crate::rows::Rows)
//! that the backend-neutral `apply` writes through.
//!
//! The file is opened in redb's multi-writer mode, so several `weft`
//! processes (two `weft run`s, or a `weft runs list` beside a run) can use one
//! data directory at once; each write transaction is still exclusive.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redb::{
    ConcurrencyMode, Database, ReadOnlyDatabase, ReadTransaction, ReadableDatabase, ReadableTable,
    ReadableTableMetadata, TableDefinition, WriteTransaction,
};
use serde::de::DeserializeOwned;

use self::tables::Tables;
use super::{
    DefinitionRecord, OutboxRecord, Refused, RunFilter, RunRecord, SnapshotData, SnapshotEntry,
    SnapshotRecord, StepRecord, Store, StoreError, TimerRecord, Write,
};
use crate::rows::{decode, decode_kv};
use weft_core::Versioned;

const META: TableDefinition<&str, &str> = TableDefinition::new("meta");
/// The key in `META` of the least number the next message may take: set
/// by a restore, above any number the store restored from could have
/// given since its backup (see `backup::restore`).
const MESSAGES_FLOOR: &str = "messages_floor";
const RUNS: TableDefinition<&str, &[u8]> = TableDefinition::new("runs");
/// `(tenant, run id)`, no value: each tenant's runs (see
/// [`Table::TenantRuns`](crate::rows::Table::TenantRuns)). A file made
/// before it had it gets it filled as it is opened (`tenant_runs` in
/// `META` says it was).
const TENANT_RUNS: TableDefinition<(&str, &str), ()> = TableDefinition::new("tenant_runs");
const RUNNING: TableDefinition<&str, ()> = TableDefinition::new("running");
const STEPS: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("steps");
const DEFINITIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("definitions");
const COMPONENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("components");
const KV: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("kv");
const OUTBOX: TableDefinition<&str, &[u8]> = TableDefinition::new("outbox");
/// Pending timers by `(due, id)`.
const TIMERS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("timers");
/// The same keys alone, so that arming a million timers reads 16 bytes
/// each.
const TIMER_KEYS: TableDefinition<(u64, u64), ()> = TableDefinition::new("timer_keys");
/// Each run's pending timers: `(run, id)` to due.
const RUN_TIMERS: TableDefinition<(&str, u64), u64> = TableDefinition::new("run_timers");
/// Runs cancelled in the store (not through the process that drives
/// them): that process's next commit of the run is refused.
const CANCELLED: TableDefinition<&str, ()> = TableDefinition::new("cancelled");
/// Cron triggers by key.
const SCHEDULES: TableDefinition<&str, &[u8]> = TableDefinition::new("schedules");
/// Messages by `seq`.
const MESSAGES: TableDefinition<u64, &[u8]> = TableDefinition::new("messages");
/// Each run's messages: `(run, seq)`.
const RUN_MESSAGES: TableDefinition<(&str, u64), ()> = TableDefinition::new("run_messages");
/// Subscriptions by `<channel>/<name>`.
const SUBSCRIPTIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("subscriptions");
/// Deliveries by id.
const DELIVERIES: TableDefinition<&str, &[u8]> = TableDefinition::new("deliveries");
/// Each subscription's unsettled deliveries in message order:
/// `(subscription, seq)` to delivery id.
const QUEUE: TableDefinition<(&str, u64), &str> = TableDefinition::new("queue");
/// Each subscription's dead letters: `(subscription, seq)` to delivery id.
const DEAD: TableDefinition<(&str, u64), &str> = TableDefinition::new("dead");
/// Client-supplied keys of run starts, to the run each started.
const IDEMPOTENCY: TableDefinition<&str, &str> = TableDefinition::new("idempotency");
/// Deployed workflow versions, by (workflow, revision).
const DEPLOYMENTS: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("deployments");
/// The plugin registry, by (name, digest).
const PLUGINS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("plugins");

/// Each run's lease, while it has one: run id to the encoded
/// [`Lease`](crate::Lease).
const LEASES: TableDefinition<&str, &[u8]> = TableDefinition::new("leases");
/// Runs waiting for a place that no host has taken: run id to tenant.
const PARKED: TableDefinition<&str, &[u8]> = TableDefinition::new("parked");
const DOOMED: TableDefinition<&str, u64> = TableDefinition::new("doomed");
/// Sealed snapshot revisions by (store, revision).
const SNAPSHOTS: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("snapshots");
/// Snapshot data ids to their `SnapshotData`.
const SNAPSHOT_DATA: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshot_data");
/// Snapshot entries by (data id, key).
const SNAPSHOT_ENTRIES: TableDefinition<(&str, &str), &[u8]> =
    TableDefinition::new("snapshot_entries");
/// The hosts that drive runs: host id to the encoded
/// [`HostRecord`](crate::HostRecord).
const HOSTS: TableDefinition<&str, &[u8]> = TableDefinition::new("hosts");
/// Each tenant's `TenantRecord`, by name.
const TENANTS: TableDefinition<&str, &[u8]> = TableDefinition::new("tenants");
/// Each API token's `TokenRecord`, by its public id.
const TOKENS: TableDefinition<&str, &[u8]> = TableDefinition::new("tokens");
/// Each tenant's `SecretRecord`s, by (tenant, name).
const SECRETS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("secrets");
/// The audit log's `AuditRecord`s, by (microseconds, random).
const AUDIT: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("audit");
/// Each tenant's audit rows, by (tenant, `rows::audit_key`), no value.
const AUDIT_TENANTS: TableDefinition<(&str, &str), ()> = TableDefinition::new("audit_tenants");
/// The bytes each tenant stores, by tenant (see `usage`).
const USAGE: TableDefinition<&str, u64> = TableDefinition::new("usage");

/// The format this build reads and writes.
const FORMAT: &str = "1";

/// The store in one redb file.
///
/// A write that fails for lack of space (or any I/O error) leaves redb
/// refusing every later transaction until the database is opened again.
/// The store then answers [`StoreError::NoSpace`] (or the error) and, at
/// most once a second, tries to open the file again: once space is back,
/// the next call finds the store working, without a restart, and the first
/// write that commits ends the episode. Nothing acknowledged is lost: a
/// failed write was never acknowledged, and the file is repaired, as after
/// a crash, when it is opened again.
pub struct RedbStore {
    db: RwLock<Arc<Handle>>,
    path: PathBuf,
    /// redb's page cache, when set at open.
    cache: Option<usize>,
    /// Whether an I/O failure is met by opening the file again: not for a
    /// store in memory, nor one open for reading only.
    reopens: bool,
    /// Counts the times the file was opened again: a transaction of an
    /// earlier opening that fails says nothing of the one open now.
    generation: std::sync::atomic::AtomicU64,
    /// Why the store fails, from its first I/O failure until a write
    /// commits again.
    degraded: Mutex<Option<Degraded>>,
    /// The last attempt to open the file again.
    reopened_at: Mutex<Option<Instant>>,
}

enum Handle {
    ReadWrite(Database),
    ReadOnly(ReadOnlyDatabase),
    /// Between a failed database's drop and a reopen that succeeds.
    Closed,
}

/// A store that an I/O error left failing.
struct Degraded {
    /// The disk was full (or over a quota), not another I/O error.
    space: bool,
    /// The file was opened again since the last failure: no other reopen
    /// until another failure.
    reopened: bool,
}

/// How often a failing store tries to open its file again.
const REOPEN_EVERY: Duration = Duration::from_secs(1);

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

macro_rules! backend {
    ($e:expr) => {
        $e.map_err(|e| StoreError::from(::redb::Error::from(e)))
    };
}

mod access;
mod backup;
mod queue;
mod registry;
mod snapshots;
mod tables;

/// Creates the store's file, if it is missing, readable and writable by
/// its owner only (redb would create it with the process's umask).
fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map(drop)
}

/// The most bytes of pages redb keeps in memory for a store opened with
/// [`RedbStore::open`], read and written pages together. redb's own default
/// is 1 GiB, the whole of a small host's memory budget; a host whose
/// working set is larger pays with reads from the page cache of the OS.
pub const DEFAULT_CACHE: usize = 256 << 20;

impl RedbStore {
    /// Opens the store at `path` for reading and writing, creating it if it
    /// does not exist. Blocking; may repair the file after a crash.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        create_private(path).map_err(|e| {
            let message = format!("cannot create the store at {shown}: {e}");
            StoreError::Backend(std::sync::Arc::new(std::io::Error::new(e.kind(), message)))
        })?;
        let db = builder(Some(DEFAULT_CACHE))
            .create(path)
            .map_err(|e| open_error(e, &shown))?;
        Self::prepare(db, path, shown, Some(DEFAULT_CACHE))
    }

    /// As [`RedbStore::open`], with redb's page cache held to `bytes`
    /// instead of [`DEFAULT_CACHE`]: what `weft bench` uses to tell the
    /// memory a writer holds from the pages the store caches.
    pub fn open_with_cache(path: impl AsRef<Path>, bytes: usize) -> Result<Self, StoreError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        create_private(path).map_err(|e| {
            let message = format!("cannot create the store at {shown}: {e}");
            StoreError::Backend(std::sync::Arc::new(std::io::Error::new(e.kind(), message)))
        })?;
        let db = builder(Some(bytes))
            .create(path)
            .map_err(|e| open_error(e, &shown))?;
        Self::prepare(db, path, shown, Some(bytes))
    }

    /// A store held in memory only, gone when it is dropped: the
    /// simulator's, where thousands of runs of the engine each need a
    /// fresh store and no sync is worth waiting for.
    pub fn in_memory() -> Result<Self, StoreError> {
        // One writer at a time: the simulator has one thread, and the
        // memory backend cannot take several.
        let db = redb::Builder::new()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(|e| open_error(e, "memory"))?;
        Self::prepare(db, Path::new(":memory:"), "memory".to_owned(), None)
    }

    /// Checks the format of the newly opened `db` and makes its tables.
    fn prepare(
        db: Database,
        path: &Path,
        shown: String,
        cache: Option<usize>,
    ) -> Result<Self, StoreError> {
        let txn = backend!(db.begin_write())?;
        {
            let mut meta = backend!(txn.open_table(META))?;
            let found = backend!(meta.get("format"))?.map(|v| v.value().to_owned());
            match found {
                None => {
                    backend!(meta.insert("format", FORMAT))?;
                }
                Some(found) if found == FORMAT => {}
                Some(found) => {
                    return Err(StoreError::Format {
                        path: shown,
                        found,
                        expected: FORMAT.to_owned(),
                    });
                }
            }
            backend!(txn.open_table(RUNS))?;
            index_tenant_runs(&txn, &mut meta)?;
            backend!(txn.open_table(RUNNING))?;
            backend!(txn.open_table(STEPS))?;
            backend!(txn.open_table(DEFINITIONS))?;
            backend!(txn.open_table(COMPONENTS))?;
            backend!(txn.open_table(KV))?;
            backend!(txn.open_table(OUTBOX))?;
            backend!(txn.open_table(TIMERS))?;
            backend!(txn.open_table(RUN_TIMERS))?;
            backend!(txn.open_table(TIMER_KEYS))?;
            backend!(txn.open_table(SCHEDULES))?;
            backend!(txn.open_table(CANCELLED))?;
            backend!(txn.open_table(MESSAGES))?;
            backend!(txn.open_table(RUN_MESSAGES))?;
            backend!(txn.open_table(SUBSCRIPTIONS))?;
            backend!(txn.open_table(DELIVERIES))?;
            backend!(txn.open_table(QUEUE))?;
            backend!(txn.open_table(DEAD))?;
            backend!(txn.open_table(IDEMPOTENCY))?;
            backend!(txn.open_table(DEPLOYMENTS))?;
            backend!(txn.open_table(PLUGINS))?;
            backend!(txn.open_table(LEASES))?;
            backend!(txn.open_table(PARKED))?;
            backend!(txn.open_table(DOOMED))?;
            backend!(txn.open_table(SNAPSHOTS))?;
            backend!(txn.open_table(SNAPSHOT_DATA))?;
            backend!(txn.open_table(SNAPSHOT_ENTRIES))?;
            backend!(txn.open_table(HOSTS))?;
            backend!(txn.open_table(TENANTS))?;
            backend!(txn.open_table(TOKENS))?;
            backend!(txn.open_table(AUDIT))?;
            backend!(txn.open_table(AUDIT_TENANTS))?;
            backend!(txn.open_table(USAGE))?;
            backend!(txn.open_table(SECRETS))?;
        }
        backend!(txn.commit())?;
        Ok(Self {
            db: RwLock::new(Arc::new(Handle::ReadWrite(db))),
            reopens: path != Path::new(":memory:"),
            path: path.to_owned(),
            cache,
            generation: std::sync::atomic::AtomicU64::new(0),
            degraded: Mutex::new(None),
            reopened_at: Mutex::new(None),
        })
    }

    /// Opens an existing store at `path` for reading only. Blocking. A file
    /// left by a writer that crashed needs repair first:
    /// [`StoreError::NeedsRepair`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let db = builder(Some(DEFAULT_CACHE))
            .open_read_only(path)
            .map_err(|e| open_error(e, &shown))?;
        let store = Self {
            db: RwLock::new(Arc::new(Handle::ReadOnly(db))),
            path: path.to_owned(),
            cache: None,
            reopens: false,
            generation: std::sync::atomic::AtomicU64::new(0),
            degraded: Mutex::new(None),
            reopened_at: Mutex::new(None),
        };
        let txn = store.begin_read()?;
        let meta = backend!(txn.open_table(META))?;
        let found = backend!(meta.get("format"))?.map(|v| v.value().to_owned());
        if found.as_deref() != Some(FORMAT) {
            return Err(StoreError::Format {
                path: shown,
                found: found.unwrap_or_else(|| "none".to_owned()),
                expected: FORMAT.to_owned(),
            });
        }
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn begin_read(&self) -> Result<ReadTransaction, StoreError> {
        let (handle, generation) = self.handle();
        let began = match &*handle {
            Handle::ReadWrite(db) => backend!(db.begin_read()),
            Handle::ReadOnly(db) => backend!(db.begin_read()),
            Handle::Closed => Err(self.closed()),
        };
        self.noted(generation, began)
    }

    /// A write transaction, and the generation of the opening it belongs
    /// to, for [`RedbStore::committed`].
    fn begin_write(&self) -> Result<(WriteTransaction, u64), StoreError> {
        let (handle, generation) = self.handle();
        let began = match &*handle {
            Handle::ReadWrite(db) => backend!(db.begin_write()),
            Handle::ReadOnly(_) => Err(StoreError::ReadOnly),
            Handle::Closed => Err(self.closed()),
        };
        self.noted(generation, began).map(|txn| (txn, generation))
    }

    /// Commits `txn`, of opening `generation`: a commit ends a failure
    /// episode, and a failed one is noted.
    fn committed(&self, txn: WriteTransaction, generation: u64) -> Result<(), StoreError> {
        let committed = self.noted(generation, backend!(txn.commit()));
        if committed.is_ok() && generation == self.generation() {
            let ended = weft_core::lock(&self.degraded).take();
            if ended.is_some() {
                tracing::warn!(store = %self.path.display(), "the store works again");
            }
        }
        committed
    }

    fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The database and its generation, after an attempt to open it again
    /// if it failed since it was last opened and that was a second ago.
    fn handle(&self) -> (Arc<Handle>, u64) {
        let failed = weft_core::lock(&self.degraded)
            .as_ref()
            .is_some_and(|d| !d.reopened);
        if failed {
            let due = {
                let mut at = weft_core::lock(&self.reopened_at);
                let due = at.is_none_or(|at| at.elapsed() >= REOPEN_EVERY);
                if due {
                    *at = Some(Instant::now());
                }
                due
            };
            if due {
                match self.reopen() {
                    Ok(()) => {
                        if let Some(d) = weft_core::lock(&self.degraded).as_mut() {
                            d.reopened = true;
                        }
                    }
                    Err(e) => tracing::debug!("the store is still failing: {e}"),
                }
            }
        }
        let handle = Arc::clone(&weft_core::read(&self.db));
        (handle, self.generation())
    }

    /// Drops the failed database once no call is beginning a transaction
    /// on it, and opens the file again (repairing it, as after a crash). A
    /// transaction still open on the old one fails, or, if it writes,
    /// keeps the file locked, and the next attempt, a second later, opens
    /// it.
    fn reopen(&self) -> Result<(), StoreError> {
        let mut slot = weft_core::write(&self.db);
        if !matches!(**slot, Handle::ReadWrite(_) | Handle::Closed) {
            return Ok(());
        }
        let waited = Instant::now();
        while Arc::strong_count(&slot) > 1 {
            if waited.elapsed() > Duration::from_secs(2) {
                return Err(self.closed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        *slot = Arc::new(Handle::Closed);
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let db = builder(self.cache)
            .create(&self.path)
            .map_err(|e| open_error(e, &self.path.display().to_string()))?;
        *slot = Arc::new(Handle::ReadWrite(db));
        Ok(())
    }

    /// The error of a call made while the store is closed for a reopen.
    fn closed(&self) -> StoreError {
        let space = weft_core::lock(&self.degraded)
            .as_ref()
            .is_some_and(|d| d.space);
        if space {
            self.no_space()
        } else {
            StoreError::Commit(format!(
                "the store at {} failed and is being opened again",
                self.path.display()
            ))
        }
    }

    fn no_space(&self) -> StoreError {
        StoreError::NoSpace {
            dir: self.path.parent().map_or_else(
                || self.path.display().to_string(),
                |p| p.display().to_string(),
            ),
        }
    }

    /// Notes an I/O failure of redb's in `result`, of a transaction of
    /// opening `generation`: the store is degraded until a write commits
    /// again, and a lack of space is told as such. A failure of an earlier
    /// opening's transaction is passed on as it is.
    fn noted<T>(&self, generation: u64, result: Result<T, StoreError>) -> Result<T, StoreError> {
        let Err(StoreError::Backend(error)) = &result else {
            return result;
        };
        let Some(redb_error) = error.downcast_ref::<redb::Error>() else {
            return result;
        };
        let space = match redb_error {
            redb::Error::Io(io) => is_space(io),
            redb::Error::PreviousIo => false,
            _ => return result,
        };
        if !self.reopens || generation != self.generation() {
            return result;
        }
        let mut degraded = weft_core::lock(&self.degraded);
        let degraded = degraded.get_or_insert_with(|| {
            weft_core::metrics::count_store_failure();
            tracing::error!(store = %self.path.display(), "the store failed: {redb_error}; it is opened again once it can be");
            Degraded { space, reopened: false }
        });
        degraded.space |= space;
        degraded.reopened = false;
        if degraded.space {
            return Err(self.no_space());
        }
        result
    }

    /// Why the store fails now, if it does.
    fn failing(&self) -> Option<String> {
        let degraded = weft_core::lock(&self.degraded);
        degraded.as_ref().map(|d| {
            if d.space {
                self.no_space().to_string()
            } else {
                format!(
                    "the store at {} failed an I/O and is being opened again",
                    self.path.display()
                )
            }
        })
    }
}

/// Fills [`TENANT_RUNS`] from the runs of a file made before it, once:
/// `tenant_runs` in `META` says it was. A run row that does not decode is
/// left out, as a listing leaves it out (`weft doctor` names it).
pub(super) fn index_tenant_runs(
    txn: &WriteTransaction,
    meta: &mut redb::Table<'_, &'static str, &'static str>,
) -> Result<(), StoreError> {
    let mut index = backend!(txn.open_table(TENANT_RUNS))?;
    if backend!(meta.get("tenant_runs"))?.is_some() {
        return Ok(());
    }
    #[derive(serde::Deserialize)]
    struct Workflow {
        workflow: String,
    }
    let runs = backend!(txn.open_table(RUNS))?;
    for entry in backend!(runs.iter())? {
        let (id, value) = backend!(entry)?;
        if let Ok(run) = serde_json::from_slice::<Workflow>(value.value()) {
            let tenant = weft_core::tenant::of(&run.workflow);
            backend!(index.insert((tenant, id.value()), ()))?;
        }
    }
    backend!(meta.insert("tenant_runs", "1"))?;
    Ok(())
}

/// The least number the next message takes, from `META`: 0 unless a
/// restore set it. A value that does not read as a number fails, as the
/// file is then not one this build wrote.
pub(super) fn messages_floor(
    meta: &impl ReadableTable<&'static str, &'static str>,
) -> Result<u64, StoreError> {
    let Some(found) = backend!(meta.get(MESSAGES_FLOOR))? else {
        return Ok(0);
    };
    let text = found.value();
    text.parse().map_err(|_| StoreError::Codec {
        key: format!("meta `{MESSAGES_FLOOR}`"),
        message: format!("expected a number, found {text:?}"),
    })
}

/// Whether `error` is the disk's being full (or a quota's being reached).
fn is_space(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::StorageFull
        || matches!(error.raw_os_error(), Some(28 | 122))
}

/// redb's settings for a store: several writers, and `cache` bytes of page
/// cache when given.
fn builder(cache: Option<usize>) -> redb::Builder {
    let mut builder = redb::Builder::new();
    builder.set_concurrency_mode(ConcurrencyMode::MultiWriter);
    if let Some(bytes) = cache {
        builder.set_cache_size(bytes);
    }
    builder
}

fn open_error(error: redb::DatabaseError, path: &str) -> StoreError {
    match error {
        redb::DatabaseError::RepairAborted => StoreError::NeedsRepair {
            path: path.to_owned(),
        },
        redb::DatabaseError::DatabaseAlreadyOpen | redb::DatabaseError::LockProtocolMismatch => {
            StoreError::Locked {
                path: path.to_owned(),
            }
        }
        other => StoreError::from(::redb::Error::from(other)),
    }
}

/// A row of `table` read in a listing that recovery depends on: one that
/// does not decode is set aside with a warning (`weft doctor` lists it)
/// instead of failing the listing, so one bad row cannot stop a host.
fn kept<T: DeserializeOwned>(table: &str, key: &str, bytes: &[u8]) -> Option<T> {
    match decode(key, bytes) {
        Ok(row) => Some(row),
        Err(e) => {
            tracing::warn!(table, key, "a row does not decode and is set aside: {e}");
            None
        }
    }
}

macro_rules! reads {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {{
        let txn = $self.begin_read()?;
        queue::Reads(&txn).$method($($arg),*)
    }};
}

impl Store for RedbStore {
    fn degraded(&self) -> Option<String> {
        self.failing()
    }

    fn subscriptions(
        &self,
        channel: Option<&str>,
    ) -> Result<Vec<super::SubscriptionRecord>, StoreError> {
        reads!(self.subscriptions(channel))
    }

    fn subscription(&self, key: &str) -> Result<Option<super::SubscriptionRecord>, StoreError> {
        reads!(self.subscription(key))
    }

    fn delivery(&self, id: &str) -> Result<Option<super::DeliveryRecord>, StoreError> {
        reads!(self.delivery(id))
    }

    fn message(&self, seq: u64) -> Result<Option<super::MessageRecord>, StoreError> {
        reads!(self.message(seq))
    }

    fn queued(
        &self,
        subscription: &str,
        dead: bool,
        after: u64,
        limit: usize,
    ) -> Result<Vec<super::DeliveryRecord>, StoreError> {
        reads!(self.queued(subscription, dead, after, limit))
    }

    fn dead_letters(&self, limit: usize) -> Result<Vec<super::DeliveryRecord>, StoreError> {
        reads!(self.dead_letters(limit))
    }

    fn deliveries(&self, limit: usize) -> Result<Vec<super::DeliveryRecord>, StoreError> {
        reads!(self.deliveries(limit))
    }

    fn run_messages(&self, id: &str) -> Result<Vec<super::MessageRecord>, StoreError> {
        reads!(self.run_messages(id))
    }

    fn idempotent_run(&self, key: &str) -> Result<Option<String>, StoreError> {
        reads!(self.idempotent_run(key))
    }

    fn deployments(
        &self,
        workflow: Option<&str>,
    ) -> Result<Vec<super::DeploymentRecord>, StoreError> {
        let txn = self.begin_read()?;
        registry::deployments(&txn, workflow)
    }

    fn plugins(&self) -> Result<Vec<super::PluginRecord>, StoreError> {
        let txn = self.begin_read()?;
        registry::plugins(&txn)
    }

    fn snapshots(&self, store: Option<&str>) -> Result<Vec<SnapshotRecord>, StoreError> {
        snapshots::revisions(&self.begin_read()?, store)
    }

    fn snapshot_entry(&self, data: &str, key: &str) -> Result<Option<SnapshotEntry>, StoreError> {
        snapshots::entry(&self.begin_read()?, data, key)
    }

    fn snapshot_entries(
        &self,
        data: &str,
        after: Option<&str>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, SnapshotEntry)>, StoreError> {
        snapshots::entries(&self.begin_read()?, data, after, prefix, limit)
    }

    fn snapshot_keys(
        &self,
        data: &str,
        after: Option<&str>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        snapshots::keys(&self.begin_read()?, data, after, prefix, limit)
    }

    fn snapshot_data(&self) -> Result<Vec<(String, SnapshotData)>, StoreError> {
        snapshots::data(&self.begin_read()?)
    }

    fn damaged(&self) -> Result<Vec<crate::Damaged>, StoreError> {
        let txn = self.begin_read()?;
        let mut found = Vec::new();
        let mut look = |table: &str, key: String, outcome: Result<(), StoreError>| {
            found.extend(crate::Damaged::of(table, key, outcome));
        };
        for (name, table) in [("runs", RUNS), ("outbox", OUTBOX), ("schedules", SCHEDULES)] {
            let table = backend!(txn.open_table(table))?;
            for entry in backend!(table.iter())? {
                let (key, value) = backend!(entry)?;
                let key = key.value();
                let outcome = match name {
                    "runs" => decode::<RunRecord>(key, value.value()).map(drop),
                    "outbox" => decode::<OutboxRecord>(key, value.value()).map(drop),
                    _ => decode::<super::ScheduleRecord>(key, value.value()).map(drop),
                };
                look(name, key.to_owned(), outcome);
            }
        }
        let timers = backend!(txn.open_table(TIMERS))?;
        for entry in backend!(timers.iter())? {
            let (key, value) = backend!(entry)?;
            let (due, id) = key.value();
            let outcome = decode::<TimerRecord>(id, value.value()).map(drop);
            look("timers", format!("{due}/{id}"), outcome);
        }
        for (name, table) in [("hosts", HOSTS), ("tenants", TENANTS)] {
            let table = backend!(txn.open_table(table))?;
            for entry in backend!(table.iter())? {
                let (key, value) = backend!(entry)?;
                let key = key.value();
                let outcome = match name {
                    "hosts" => decode::<crate::HostRecord>(key, value.value()).map(drop),
                    _ => decode::<crate::TenantRecord>(key, value.value()).map(drop),
                };
                look(name, key.to_owned(), outcome);
            }
        }
        let damaged = registry::damaged(&txn)?;
        found.extend(damaged);
        Ok(found)
    }

    fn lease(&self, id: &str) -> Result<Option<crate::Lease>, StoreError> {
        let txn = self.begin_read()?;
        let leases = backend!(txn.open_table(LEASES))?;
        backend!(leases.get(id))?
            .map(|bytes| decode(id, bytes.value()))
            .transpose()
    }

    fn hosts(&self) -> Result<Vec<crate::HostRecord>, StoreError> {
        let txn = self.begin_read()?;
        let hosts = backend!(txn.open_table(HOSTS))?;
        let mut found = Vec::new();
        for entry in backend!(hosts.iter())? {
            let (id, bytes) = backend!(entry)?;
            found.extend(kept("hosts", id.value(), bytes.value()));
        }
        Ok(found)
    }

    fn tenants(&self) -> Result<Vec<crate::TenantRecord>, StoreError> {
        access::tenants(&self.begin_read()?)
    }

    fn token(&self, id: &str) -> Result<Option<crate::TokenRecord>, StoreError> {
        access::token(&self.begin_read()?, id)
    }

    fn tokens(&self) -> Result<Vec<crate::TokenRecord>, StoreError> {
        access::tokens(&self.begin_read()?)
    }

    fn audit(
        &self,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<Vec<crate::AuditRecord>, StoreError> {
        access::audit(&self.begin_read()?, tenant, limit)
    }

    fn secret(&self, tenant: &str, name: &str) -> Result<Option<crate::SecretRecord>, StoreError> {
        access::secret(&self.begin_read()?, tenant, name)
    }

    fn secrets(&self, tenant: &str) -> Result<Vec<crate::SecretRecord>, StoreError> {
        access::secrets(&self.begin_read()?, tenant)
    }

    fn stored_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        let txn = self.begin_read()?;
        let table = match txn.open_table(USAGE) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
            other => backend!(other)?,
        };
        Ok(backend!(table.get(tenant))?.map_or(0, |used| used.value()))
    }

    fn apply(&self, writes: &[&Write]) -> Result<Vec<Result<(), Refused>>, StoreError> {
        let (txn, generation) = self.begin_write()?;
        let results = crate::apply::batch(&mut Tables::open(&txn)?, writes)?;
        self.committed(txn, generation)?;
        Ok(results)
    }

    fn runs_from(&self, after: Option<&str>, limit: usize) -> Result<crate::RunsFrom, StoreError> {
        use std::ops::Bound;
        let txn = self.begin_read()?;
        let runs = backend!(txn.open_table(RUNS))?;
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let (mut found, mut read, mut last) = (Vec::new(), 0, None);
        for entry in backend!(runs.range::<&str>((from, Bound::Unbounded)))?.take(limit) {
            let (key, value) = backend!(entry)?;
            read += 1;
            if let Ok(run) = decode(key.value(), value.value()) {
                found.push(run);
            }
            last = Some(key.value().to_owned());
        }
        Ok((found, last.filter(|_| read == limit)))
    }

    fn messages_from(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<super::MessageRecord>, StoreError> {
        let txn = self.begin_read()?;
        let messages = match txn.open_table(MESSAGES) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            other => backend!(other)?,
        };
        let mut found = Vec::new();
        for entry in backend!(messages.range(after.saturating_add(1)..))?.take(limit) {
            let (seq, value) = backend!(entry)?;
            found.push(decode(seq.value(), value.value())?);
        }
        Ok(found)
    }

    fn kv_from(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<crate::KvRow>, StoreError> {
        use std::ops::Bound;
        let txn = self.begin_read()?;
        let kv = match txn.open_table(KV) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            other => backend!(other)?,
        };
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut found = Vec::new();
        for entry in backend!(kv.range::<(&str, &str)>((from, Bound::Unbounded)))?.take(limit) {
            let (key, value) = backend!(entry)?;
            let (space, key) = key.value();
            found.push((space.to_owned(), key.to_owned(), decode_kv(value.value())));
        }
        Ok(found)
    }

    fn parked(&self, limit: usize) -> Result<Vec<(String, String)>, StoreError> {
        let txn = self.begin_read()?;
        let parked = match txn.open_table(PARKED) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            other => backend!(other)?,
        };
        let mut found = Vec::new();
        for entry in backend!(parked.iter())?.take(limit) {
            let (id, tenant) = backend!(entry)?;
            let tenant = String::from_utf8_lossy(tenant.value()).into_owned();
            found.push((id.value().to_owned(), tenant));
        }
        Ok(found)
    }

    fn claim_parked(
        &self,
        host: &str,
        n: usize,
        rooms: &[(String, usize)],
    ) -> Result<Vec<(String, String)>, StoreError> {
        let (txn, generation) = self.begin_write()?;
        let taken = {
            let mut tables = Tables::open(&txn)?;
            let ids = tables.parked_first(n, rooms)?;
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            crate::apply::claim_parked(&mut tables, host, &ids)?
        };
        self.committed(txn, generation)?;
        Ok(taken)
    }

    fn run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let txn = self.begin_read()?;
        let runs = backend!(txn.open_table(RUNS))?;
        backend!(runs.get(id))?
            .map(|bytes| decode(id, bytes.value()))
            .transpose()
    }

    fn runs(&self, filter: &RunFilter, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        let txn = self.begin_read()?;
        let runs = backend!(txn.open_table(RUNS))?;
        let mut found = Vec::new();
        // A tenant's runs, through its index: no other tenant's row is
        // read. A file opened only for reading may predate the index.
        let index = match filter.tenant_of() {
            Some(tenant) => match txn.open_table(TENANT_RUNS) {
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                other => Some((tenant, backend!(other)?)),
            },
            None => None,
        };
        if let Some((tenant, index)) = index {
            use std::ops::Bound;
            // Past every `(tenant, _)` and before any other tenant's.
            let next = format!("{tenant}\0");
            let upper = match &filter.before {
                Some(before) => Bound::Excluded((tenant, before.as_str())),
                None => Bound::Excluded((next.as_str(), "")),
            };
            let keys =
                backend!(index.range::<(&str, &str)>((Bound::Included((tenant, "")), upper)))?;
            for entry in keys.rev() {
                if found.len() >= limit {
                    break;
                }
                let (key, _) = backend!(entry)?;
                let id = key.value().1;
                let Some(value) = backend!(runs.get(id))? else {
                    continue;
                };
                let run: RunRecord = decode(id, value.value())?;
                if filter.keeps(&run) {
                    found.push(run);
                }
            }
            return Ok(found);
        }
        let rows = match &filter.before {
            Some(before) => backend!(runs.range(..before.as_str()))?,
            None => backend!(runs.iter())?,
        };
        for entry in rows.rev() {
            if found.len() >= limit {
                break;
            }
            let (key, value) = backend!(entry)?;
            let run: RunRecord = decode(key.value(), value.value())?;
            if filter.keeps(&run) {
                found.push(run);
            }
        }
        Ok(found)
    }

    fn running_ids(&self) -> Result<Vec<String>, StoreError> {
        let txn = self.begin_read()?;
        let running = backend!(txn.open_table(RUNNING))?;
        let mut found = Vec::new();
        for entry in backend!(running.iter())? {
            let (id, _) = backend!(entry)?;
            found.push(id.value().to_owned());
        }
        Ok(found)
    }

    fn running(&self) -> Result<Vec<RunRecord>, StoreError> {
        let txn = self.begin_read()?;
        let running = backend!(txn.open_table(RUNNING))?;
        let runs = backend!(txn.open_table(RUNS))?;
        let mut found = Vec::new();
        for entry in backend!(running.iter())? {
            let (id, ()) = backend!(entry).map(|(k, _)| (k, ()))?;
            if let Some(bytes) = backend!(runs.get(id.value()))?
                && let Some(run) = kept("runs", id.value(), bytes.value())
            {
                found.push(run);
            }
        }
        Ok(found)
    }

    fn marks(&self) -> Result<Vec<(String, weft_core::Timestamp)>, StoreError> {
        let txn = self.begin_read()?;
        let doomed = match txn.open_table(DOOMED) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            other => backend!(other)?,
        };
        let mut found = Vec::new();
        for entry in backend!(doomed.iter())? {
            let (digest, at) = backend!(entry)?;
            found.push((digest.value().to_owned(), weft_core::Timestamp(at.value())));
        }
        Ok(found)
    }

    fn digests(&self, blob: crate::Blob) -> Result<Vec<String>, StoreError> {
        let txn = self.begin_read()?;
        let table = match blob {
            crate::Blob::Definition => DEFINITIONS,
            crate::Blob::Component => COMPONENTS,
        };
        let table = match txn.open_table(table) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            other => backend!(other)?,
        };
        let mut found = Vec::new();
        for entry in backend!(table.iter())? {
            found.push(backend!(entry)?.0.value().to_owned());
        }
        Ok(found)
    }

    fn definition(&self, digest: &str) -> Result<Option<DefinitionRecord>, StoreError> {
        let txn = self.begin_read()?;
        let definitions = backend!(txn.open_table(DEFINITIONS))?;
        backend!(definitions.get(digest))?
            .map(|bytes| decode(digest, bytes.value()))
            .transpose()
    }

    fn timer_keys(&self) -> Result<Vec<(u64, u64)>, StoreError> {
        let txn = self.begin_read()?;
        let timers = match txn.open_table(TIMER_KEYS) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            other => backend!(other)?,
        };
        let mut keys = Vec::with_capacity(usize::try_from(backend!(timers.len())?).unwrap_or(0));
        for entry in backend!(timers.iter())? {
            keys.push(backend!(entry)?.0.value());
        }
        Ok(keys)
    }

    fn timer(&self, key: (u64, u64)) -> Result<Option<TimerRecord>, StoreError> {
        let txn = self.begin_read()?;
        let timers = match txn.open_table(TIMERS) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            other => backend!(other)?,
        };
        backend!(timers.get(key))?
            .map(|bytes| decode(key.1, bytes.value()))
            .transpose()
    }

    fn run_timers(&self, id: &str) -> Result<Vec<TimerRecord>, StoreError> {
        let txn = self.begin_read()?;
        let (timers, run_timers) = match (txn.open_table(TIMERS), txn.open_table(RUN_TIMERS)) {
            (Err(redb::TableError::TableDoesNotExist(_)), _)
            | (_, Err(redb::TableError::TableDoesNotExist(_))) => return Ok(Vec::new()),
            (timers, run_timers) => (backend!(timers)?, backend!(run_timers)?),
        };
        let mut found = Vec::new();
        for entry in backend!(run_timers.range((id, 0)..=(id, u64::MAX)))? {
            let (key, due) = backend!(entry)?;
            if let Some(bytes) = backend!(timers.get((due.value(), key.value().1)))? {
                found.push(decode(key.value().1, bytes.value())?);
            }
        }
        Ok(found)
    }

    fn schedules(&self) -> Result<Vec<super::ScheduleRecord>, StoreError> {
        let txn = self.begin_read()?;
        let schedules = match txn.open_table(SCHEDULES) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            other => backend!(other)?,
        };
        let mut rows = Vec::new();
        for entry in backend!(schedules.iter())? {
            let (key, value) = backend!(entry)?;
            rows.extend(kept("schedules", key.value(), value.value()));
        }
        Ok(rows)
    }

    fn outbox(&self) -> Result<Vec<OutboxRecord>, StoreError> {
        let txn = self.begin_read()?;
        // A file written before outboxes existed, opened read-only.
        let outbox = match txn.open_table(OUTBOX) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            other => backend!(other)?,
        };
        let mut rows = Vec::new();
        for entry in backend!(outbox.iter())? {
            let (key, value) = backend!(entry)?;
            rows.extend(kept("outbox", key.value(), value.value()));
        }
        Ok(rows)
    }

    fn component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.begin_read()?;
        let components = backend!(txn.open_table(COMPONENTS))?;
        Ok(backend!(components.get(digest))?.map(|bytes| bytes.value().to_vec()))
    }

    fn kv_get(&self, space: &str, key: &str) -> Result<Versioned, StoreError> {
        let txn = self.begin_read()?;
        let kv = backend!(txn.open_table(KV))?;
        Ok(backend!(kv.get((space, key)))?
            .map(|v| decode_kv(v.value()))
            .unwrap_or_default())
    }

    fn kv_list(
        &self,
        space: &str,
        prefix: &str,
        limit: usize,
        now: u64,
    ) -> Result<Vec<String>, StoreError> {
        let txn = self.begin_read()?;
        let kv = backend!(txn.open_table(KV))?;
        let mut keys = Vec::new();
        for entry in backend!(kv.range((space, prefix)..))? {
            let (key, value) = backend!(entry)?;
            let (entry_space, entry_key) = key.value();
            if entry_space != space || !entry_key.starts_with(prefix) || keys.len() >= limit {
                break;
            }
            if decode_kv(value.value()).live(now).is_some() {
                keys.push(entry_key.to_owned());
            }
        }
        Ok(keys)
    }

    fn steps(&self, id: &str) -> Result<Vec<StepRecord>, StoreError> {
        let txn = self.begin_read()?;
        let steps = backend!(txn.open_table(STEPS))?;
        let mut found = Vec::new();
        for entry in backend!(steps.range((id, 0u32)..=(id, u32::MAX)))? {
            let (key, value) = backend!(entry)?;
            let (run, seq) = key.value();
            found.push(decode(format!("{run}/{seq}"), value.value())?);
        }
        Ok(found)
    }

    fn steps_page(
        &self,
        id: &str,
        after: Option<u32>,
        limit: usize,
    ) -> Result<Vec<StepRecord>, StoreError> {
        let Some(first) = after.map_or(Some(0), |a| a.checked_add(1)) else {
            return Ok(Vec::new());
        };
        let txn = self.begin_read()?;
        let steps = backend!(txn.open_table(STEPS))?;
        let mut found = Vec::new();
        for entry in backend!(steps.range((id, first)..=(id, u32::MAX)))?.take(limit) {
            let (key, value) = backend!(entry)?;
            let (run, seq) = key.value();
            found.push(decode(format!("{run}/{seq}"), value.value())?);
        }
        Ok(found)
    }
}
