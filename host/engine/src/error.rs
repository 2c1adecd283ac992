//! The engine's errors: why a run could not start, resume or be
//! answered. A step that fails is not one of them; it is in the run's
//! record.
use crate::plugins::ResolveError;
use weft_store::StoreError;

/// Why a run could not start, or could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The input does not satisfy the workflow's `inputs` schema. Nothing
    /// was stored.
    #[error("the input does not match the workflow's `inputs` schema:\n  {}", problems.join("\n  "))]
    Input {
        /// Every problem, each with the JSON Pointer of the offending value.
        problems: Vec<String>,
    },
    /// A step's plugin could not be resolved. Nothing was stored.
    #[error("{origin}{}: step `{step}`: {source}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Plugin {
        /// The workflow file.
        origin: String,
        /// The step's line, when known.
        line: Option<usize>,
        /// The step.
        step: String,
        /// Why.
        source: Box<ResolveError>,
    },
    /// A step's plugin needs a grant the step does not give, or the step
    /// grants more than its tenant's egress policy allows. Nothing was
    /// stored.
    #[error("{origin}{}: step `{step}`: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Reach {
        /// The workflow file.
        origin: String,
        /// The step's line, when known.
        line: Option<usize>,
        /// The step.
        step: String,
        /// What is wrong.
        message: String,
    },
    /// A `subflow` step names a workflow that is not deployed. Nothing was
    /// stored.
    #[error("{origin}{}: step `{step}`: subflow: no workflow `{workflow}` is deployed", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Subflow {
        /// The workflow file.
        origin: String,
        /// The step's line, when known.
        line: Option<usize>,
        /// The step.
        step: String,
        /// The workflow it names.
        workflow: String,
    },
    /// A snapshot store the workflow names has no revision, or could not
    /// be read. Nothing was stored.
    #[error("{origin}: snapshots: {}", match error {
        None => format!("no snapshot store `{store}` is published; publish it first (`weft snapshots publish {store} FILE`)"),
        Some(e) => format!("snapshot store `{store}` cannot be read: {e}"),
    })]
    Snapshot {
        /// The workflow file.
        origin: String,
        /// The store.
        store: String,
        /// Why it could not be read, if it could not.
        error: Option<String>,
    },
    /// The store failed. A run already recorded stays `running` at the step
    /// it had reached.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a run could not be resumed. The run's record is left as it was.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// No run has that id.
    #[error("no run `{0}`")]
    NotFound(String),
    /// The run has ended; only `running` runs resume.
    #[error("run `{id}` is {state}, not running; only an interrupted run can be resumed")]
    NotRunning {
        /// The run.
        id: String,
        /// Its state.
        state: weft_store::RunState,
    },
    /// The run is already in this engine's hands.
    #[error("run `{0}` is already running here")]
    Resident(String),
    /// Another host drives the run, and its lease holds.
    #[error("run `{run}` is driven by host `{host}`, whose lease holds")]
    Driven {
        /// The run.
        run: String,
        /// The host that holds its lease.
        host: String,
    },
    /// The stored definition is missing or no longer parses.
    #[error("the run's workflow definition cannot be used: {0}")]
    Definition(String),
    /// A pinned component is missing or no longer loads.
    #[error("step `{step}`: {reason}")]
    Component {
        /// The step.
        step: String,
        /// Why.
        reason: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why an answer to an `await` step was not taken. Nothing was stored.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    /// No run has that id.
    #[error("no run `{0}`")]
    NotFound(String),
    /// The run has ended.
    #[error("run `{0}` has ended")]
    Ended(String),
    /// The step does not wait for an answer.
    #[error("step `{step}` of run `{run}` is not waiting for an action: it is {state}")]
    NotWaiting {
        /// The run.
        run: String,
        /// The step's path.
        step: String,
        /// Where it is.
        state: String,
    },
    /// The run is in progress in another process that shares the store.
    #[error("{0}")]
    Busy(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a run was not retried. Nothing was stored, except after
/// [`RetryError::Resume`]: the retry is durable and the run runs again
/// wherever it is claimed first.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    /// No run has that id.
    #[error("no run `{0}`")]
    NotFound(String),
    /// The run is still going, or it succeeded.
    #[error("run `{run}` is {state}: only a failed, timed-out or cancelled run can be retried")]
    NotEnded {
        /// The run.
        run: String,
        /// Where it is.
        state: weft_store::RunState,
    },
    /// A child run is retried through its parent.
    #[error(
        "run `{run}` is a child of run `{parent}`: retry the parent, whose step starts a new child"
    )]
    Child {
        /// The run.
        run: String,
        /// Its parent.
        parent: String,
    },
    /// `--from` names no leaf the run reached.
    #[error("run `{run}` has no step `{step}`{}", if failed.is_empty() { String::new() } else { format!(" (failed: {})", failed.join(", ")) })]
    UnknownStep {
        /// The run.
        run: String,
        /// The path asked for.
        step: String,
        /// The leaves that failed, to choose from.
        failed: Vec<String>,
    },
    /// `--from` names a leaf that succeeded or was skipped: results that
    /// stand are never run again.
    #[error("step `{step}` of run `{run}` {state}: a retry never runs again a step that succeeded")]
    NotFailed {
        /// The run.
        run: String,
        /// The path asked for.
        step: String,
        /// Where it is.
        state: String,
    },
    /// Nothing a retry could run again would change the end.
    #[error("run `{run}` cannot be retried: {why}")]
    NotRetryable {
        /// The run.
        run: String,
        /// Why.
        why: String,
    },
    /// The retry is durable, but this host could not take the run in; it
    /// runs wherever it is claimed first.
    #[error("run `{run}` was retried, but not taken in here: {source}")]
    Resume {
        /// The run.
        run: String,
        /// Why.
        source: Box<ResumeError>,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a run was not moved to another revision. Nothing was stored.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// No run has that id.
    #[error("no run `{0}`")]
    NotFound(String),
    /// The run cannot follow the new revision from where it is.
    #[error("{0}")]
    Unmovable(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a run was not paused or resumed. Nothing was stored.
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    /// No run has that id.
    #[error("no run `{0}`")]
    NotFound(String),
    /// The run has ended.
    #[error("run `{run}` has ended: {state}")]
    Ended {
        /// The run.
        run: String,
        /// How it ended.
        state: weft_store::RunState,
    },
    /// A pause of a run that is paused, or a resume of one that is not.
    #[error("run `{run}` is {}", if *paused { "paused already" } else { "not paused" })]
    Already {
        /// The run.
        run: String,
        /// Whether it is paused.
        paused: bool,
    },
    /// The run cannot be paused or resumed here now: it waits for a place
    /// (parked), another host drives it, or its pause is being committed.
    #[error("run `{run}` cannot be changed now: {why}")]
    Busy {
        /// The run.
        run: String,
        /// Why.
        why: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}
