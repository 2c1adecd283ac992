//! Every durable fact, behind the [`Store`] trait. [`RedbStore`] is the
//! embedded backend.

mod records;
mod redb;

pub use self::records::{ErrorRecord, PinnedPlugin, RunError, RunRecord, RunState, StepRecord};
pub use self::redb::RedbStore;

/// Why the store could not do what was asked. After any error the store is
/// as it was before the call: every write is one transaction.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
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
    /// The write conflicts with what is stored, such as a second run with
    /// the same id.
    #[error("store: {0}")]
    Conflict(String),
    /// A writer crashed and the file needs repair, which a read-only handle
    /// cannot do; open it with [`RedbStore::open`] once to repair it.
    #[error("the store at {path} needs repair after a crash; open it for writing to repair it")]
    NeedsRepair {
        /// The database file.
        path: String,
    },
    /// The store was opened read-only and a write was attempted.
    #[error("the store was opened read-only")]
    ReadOnly,
    /// The database failed: I/O, corruption, a full disk.
    #[error("store: {0}")]
    Backend(#[from] ::redb::Error),
    /// A record could not be encoded or decoded.
    #[error("store: record `{key}` cannot be decoded: {message}")]
    Codec {
        /// The record's key.
        key: String,
        /// Why.
        message: String,
    },
}

/// Durable storage of runs and their steps.
///
/// Every method is blocking and, for writes, durable when it returns `Ok`:
/// the data has been committed and synced. A crash during a write leaves the
/// state before it.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Records a new run. Fails if a run with that id exists.
    fn create_run(&self, run: &RunRecord) -> Result<(), StoreError>;

    /// Records a step's result and the run's next state in one transaction:
    /// after a crash either both are there or neither is.
    fn commit_step(&self, step: &StepRecord, run: &RunRecord) -> Result<(), StoreError>;

    /// Replaces a run's record.
    fn update_run(&self, run: &RunRecord) -> Result<(), StoreError>;

    /// The run with id `id`.
    fn run(&self, id: &str) -> Result<Option<RunRecord>, StoreError>;

    /// Up to `limit` runs, newest first.
    fn runs(&self, limit: usize) -> Result<Vec<RunRecord>, StoreError>;

    /// The step records of run `id`, in order.
    fn steps(&self, id: &str) -> Result<Vec<StepRecord>, StoreError>;
}
