//! Backup and restore of the embedded store: every table copied, row by
//! row, from one read transaction (a consistent snapshot, taken beside
//! the writers of a running host) into a new file, under a temporary name
//! renamed into place once committed, so that a file named by a backup is
//! whole.

use std::path::Path;

use redb::{ReadTransaction, ReadableTable, TableDefinition, TableError, WriteTransaction};

use super::{
    AUDIT, AUDIT_TENANTS, CANCELLED, COMPONENTS, DEAD, DEFINITIONS, DELIVERIES, DEPLOYMENTS,
    DOOMED, HOSTS, IDEMPOTENCY, KV, LEASES, MESSAGES, META, OUTBOX, PARKED, PLUGINS, QUEUE,
    RUN_MESSAGES, RUN_TIMERS, RUNNING, RUNS, RedbStore, SCHEDULES, SECRETS, SNAPSHOT_DATA,
    SNAPSHOT_ENTRIES, SNAPSHOTS, STEPS, SUBSCRIPTIONS, TENANT_RUNS, TENANTS, TIMER_KEYS, TIMERS,
    TOKENS, USAGE,
};
use crate::StoreError;

/// Copies table `def` from `from` into `to`; the rows copied.
fn copy<K: redb::Key + 'static, V: redb::Value + 'static>(
    from: &ReadTransaction,
    to: &WriteTransaction,
    def: TableDefinition<K, V>,
) -> Result<u64, StoreError> {
    let source = match from.open_table(def) {
        Err(TableError::TableDoesNotExist(_)) => return Ok(0),
        other => backend!(other)?,
    };
    let mut target = backend!(to.open_table(def))?;
    let mut rows = 0;
    for entry in backend!(source.iter())? {
        let (key, value) = backend!(entry)?;
        backend!(target.insert(key.value(), value.value()))?;
        rows += 1;
    }
    Ok(rows)
}

/// What a copy is for.
#[derive(Clone, Copy)]
enum Purpose {
    /// A backup: every row as it is.
    Backup,
    /// A restore at `now` (microseconds since the epoch): without the
    /// hosts' rows, numbering messages anew (see [`RedbStore::restore`]).
    Restore { now: u64 },
}

/// Copies every table of `from` into `to`, but the hosts' rows when
/// `hosts` is false; the rows copied.
fn copy_all(from: &ReadTransaction, to: &WriteTransaction, hosts: bool) -> Result<u64, StoreError> {
    let mut rows = 0;
    rows += copy(from, to, META)?;
    rows += copy(from, to, RUNS)?;
    rows += copy(from, to, TENANT_RUNS)?;
    rows += copy(from, to, RUNNING)?;
    rows += copy(from, to, STEPS)?;
    rows += copy(from, to, DEFINITIONS)?;
    rows += copy(from, to, COMPONENTS)?;
    rows += copy(from, to, KV)?;
    rows += copy(from, to, OUTBOX)?;
    rows += copy(from, to, TIMERS)?;
    rows += copy(from, to, RUN_TIMERS)?;
    rows += copy(from, to, TIMER_KEYS)?;
    rows += copy(from, to, SCHEDULES)?;
    rows += copy(from, to, CANCELLED)?;
    rows += copy(from, to, MESSAGES)?;
    rows += copy(from, to, RUN_MESSAGES)?;
    rows += copy(from, to, SUBSCRIPTIONS)?;
    rows += copy(from, to, DELIVERIES)?;
    rows += copy(from, to, QUEUE)?;
    rows += copy(from, to, DEAD)?;
    rows += copy(from, to, IDEMPOTENCY)?;
    rows += copy(from, to, DEPLOYMENTS)?;
    rows += copy(from, to, PLUGINS)?;
    rows += copy(from, to, LEASES)?;
    rows += copy(from, to, PARKED)?;
    rows += copy(from, to, DOOMED)?;
    rows += copy(from, to, SNAPSHOTS)?;
    rows += copy(from, to, SNAPSHOT_DATA)?;
    rows += copy(from, to, SNAPSHOT_ENTRIES)?;
    if hosts {
        rows += copy(from, to, HOSTS)?;
    }
    rows += copy(from, to, TENANTS)?;
    rows += copy(from, to, TOKENS)?;
    rows += copy(from, to, SECRETS)?;
    rows += copy(from, to, AUDIT)?;
    rows += copy(from, to, AUDIT_TENANTS)?;
    rows += copy(from, to, USAGE)?;
    Ok(rows)
}

/// Sets the floor of message numbers in `txn`, a restore at `now`, above
/// every number the copied rows hold or an earlier floor set.
fn renumber_messages(txn: &WriteTransaction, now: u64) -> Result<(), StoreError> {
    let last = {
        let messages = backend!(txn.open_table(MESSAGES))?;
        backend!(messages.last())?.map_or(0, |(seq, _)| seq.value())
    };
    let mut meta = backend!(txn.open_table(META))?;
    let floor = super::messages_floor(&meta)?
        .max(last.saturating_add(1))
        .max(now);
    backend!(meta.insert(super::MESSAGES_FLOOR, floor.to_string().as_str()))?;
    Ok(())
}

/// Refuses to write over `to`.
fn fresh(to: &Path) -> Result<(), StoreError> {
    if to.exists() {
        return Err(StoreError::Config {
            what: to.display().to_string(),
            message: "exists already; a backup or a restore never writes over a file".to_owned(),
        });
    }
    Ok(())
}

/// `to` with `.partial` after its name: where a copy is made.
fn partial(to: &Path) -> std::path::PathBuf {
    let mut name = to.file_name().unwrap_or_default().to_owned();
    name.push(".partial");
    to.with_file_name(name)
}

/// Copies `from` (a read transaction's snapshot) into a new store file
/// at `to`; the rows copied.
fn copy_into(from: &ReadTransaction, to: &Path, purpose: Purpose) -> Result<u64, StoreError> {
    fresh(to)?;
    let making = partial(to);
    let _ = std::fs::remove_file(&making);
    let rows = {
        let target = RedbStore::open(&making)?;
        let (txn, _) = target.begin_write()?;
        let rows = copy_all(from, &txn, matches!(purpose, Purpose::Backup))?;
        if let Purpose::Restore { now } = purpose {
            renumber_messages(&txn, now)?;
        }
        // A copy of a file made before the index of runs has no index: the
        // mark the new file got is taken back, and the index filled.
        if matches!(
            from.open_table(TENANT_RUNS),
            Err(TableError::TableDoesNotExist(_))
        ) {
            let mut meta = backend!(txn.open_table(META))?;
            backend!(meta.remove("tenant_runs"))?;
            super::index_tenant_runs(&txn, &mut meta)?;
        }
        backend!(txn.commit())?;
        rows
    };
    std::fs::rename(&making, to).map_err(|e| StoreError::Config {
        what: to.display().to_string(),
        message: format!("cannot move the copy into place: {e}"),
    })?;
    Ok(rows)
}

impl RedbStore {
    /// Writes a consistent copy of this store, as of one moment, to a new
    /// file `to` (refused if it exists), while other processes go on
    /// writing this one. Returns the rows copied. Blocking.
    pub fn backup(&self, to: impl AsRef<Path>) -> Result<u64, StoreError> {
        copy_into(&self.begin_read()?, to.as_ref(), Purpose::Backup)
    }

    /// Makes a new store file `to` (refused if it exists) from backup
    /// `from`, without the rows of the hosts that ran then: every run they
    /// drove is free for the first host that starts on `to`, which resumes
    /// it. Returns the rows copied. Blocking.
    ///
    /// The store backed up may have numbered messages after the backup
    /// was taken, and a consumer may hold one of those numbers (an SSE
    /// `Last-Event-ID`): numbering again from the backup's last would give
    /// new messages numbers it takes as seen. So the restored store
    /// numbers its next message from the time of the restore in
    /// microseconds, or the backup's last plus one if that is more: a
    /// store numbers fewer than a million messages a second, so no number
    /// given since the backup (nor by an earlier restore of it) reaches
    /// it.
    pub fn restore(from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<u64, StoreError> {
        let backup = Self::open_read_only(from)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
            });
        copy_into(&backup.begin_read()?, to.as_ref(), Purpose::Restore { now })
    }
}
