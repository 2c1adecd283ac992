//! What the store keeps, as serde types. Each record is stored as JSON, so
//! a new optional field is a compatible change.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use weft_core::clock::Timestamp;
use weft_core::{ErrorRecord, LogLine, ScheduleSpec};

/// A run's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Started and not finished; `next_step` says where it is.
    Running,
    /// Every step succeeded and the outputs were evaluated.
    Succeeded,
    /// A step or an expression failed; `error` says which and why.
    Failed,
    /// The run's deadline (`timeout:`) passed and no handler took over.
    TimedOut,
    /// The run was cancelled.
    Cancelled,
}

impl RunState {
    /// True for a state a run never leaves.
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Running)
    }
}

impl std::str::FromStr for RunState {
    type Err = String;

    /// `running`, `succeeded` or `failed`.
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "running" => Ok(Self::Running),
            "succeeded" => Ok(Self::Succeeded),
            "failed" => Ok(Self::Failed),
            "timed_out" => Ok(Self::TimedOut),
            "cancelled" => Ok(Self::Cancelled),
            other => Err(format!(
                "`{other}` is not a run state (running, succeeded, failed, timed_out, cancelled)"
            )),
        }
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
        })
    }
}

/// One run of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id: a UUIDv7, so ids sort by start time.
    pub id: String,
    /// The workflow's id.
    pub workflow: String,
    /// The workflow's version.
    pub workflow_version: u32,
    /// Where the definition was read from.
    pub origin: String,
    /// Where the run is.
    pub state: RunState,
    /// The run's input.
    pub input: Value,
    /// The index of the next step to run.
    pub next_step: u32,
    /// How many step records the run has; the next one gets this number.
    pub step_records: u32,
    /// The number of steps in the workflow.
    pub step_count: u32,
    /// The plugins the run is pinned to: step id to `name@version` and digest.
    pub plugins: BTreeMap<String, PinnedPlugin>,
    /// The digest of the workflow definition the run follows, stored with
    /// it, so the run can be resumed whatever happens to the file. Empty for
    /// runs recorded before definitions were kept.
    #[serde(default)]
    pub definition: String,
    /// The run's outputs, once it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Value>,
    /// Why the run failed, once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// When the run was created.
    pub created_at: Timestamp,
    /// When the run last changed.
    pub updated_at: Timestamp,
    /// For a child run (`subflow`): the run and the step that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// True while the run waits for timers only: it is not in memory, and
    /// a timer's fire brings it back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    /// The run's deadline, when its workflow has a `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<TimerRef>,
    /// For a run a cron trigger started: the trigger and the fire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerLink>,
    /// Set while the run is paused (`weft runs pause`): it starts no step,
    /// waits out of memory (`suspended`), and its timers' fires and the
    /// answers it gets are recorded for it to take up on its resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<PauseMark>,
    /// Set when the run was moved to another revision of its workflow
    /// (`weft runs migrate`): from which, to which, when and by whom.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrated: Option<Migration>,
    /// The revision of each snapshot store its workflow names that the run
    /// reads, pinned at its start (a store read at its newest revision,
    /// `revision: latest`, is not listed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub snapshots: BTreeMap<String, u32>,
}

/// Who paused a run, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseMark {
    /// When the pause took hold.
    pub at: Timestamp,
    /// Who asked: a token's actor, or `cli`.
    pub actor: String,
}

/// A run's move to another revision of its workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    /// The revision it followed.
    pub from_revision: u32,
    /// The revision it follows now.
    pub to_revision: u32,
    /// When it moved.
    pub at: Timestamp,
    /// Who moved it: a token's actor, or `cli`.
    pub actor: String,
    /// Its step records when it moved: those before were made under the
    /// revision it followed.
    pub at_record: u32,
}

/// The fire of a cron trigger that started a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerLink {
    /// The trigger's key, `<workflow>/<trigger id>`.
    pub schedule: String,
    /// The fire's due time.
    pub fire: Timestamp,
}

/// The path of the record a run's cancellation leaves.
pub const CANCEL_PATH: &str = "@cancel";

/// The step path of the notice a run's end leaves on its tenant's
/// [`RUNS_ENDED`](weft_core::names::RUNS_ENDED) channel.
pub const END_PATH: &str = "@end";

/// A cron trigger and where it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    /// `<workflow>/<trigger id>`.
    pub key: String,
    /// The workflow it starts (as deployed when it fires).
    pub workflow: String,
    /// As written.
    pub spec: ScheduleSpec,
    /// `workflow` (declared in the workflow's `on:`) or `cli`.
    pub origin: String,
    /// A paused trigger does not fire; resuming it skips what it missed.
    #[serde(default)]
    pub paused: bool,
    /// The due time of its last fire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fire: Option<Timestamp>,
    /// The due time of its next fire; `None` if it never fires again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_fire: Option<Timestamp>,
    /// The last run it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<String>,
    /// A fire kept by `overlap: buffer_one`, to start when `last_run` ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffered: Option<Timestamp>,
    /// Fires that started a run.
    #[serde(default)]
    pub started: u64,
    /// Fires that started nothing (overlap, catch-up).
    #[serde(default)]
    pub skipped: u64,
    /// Bumped by every change: a change names the version it read, and
    /// is refused if the row moved on.
    #[serde(default)]
    pub version: u64,
}

/// A timer, as the record that set it names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TimerRef {
    /// Random; with `due`, the timer's key.
    pub id: u64,
    /// When it fires.
    pub due: Timestamp,
    /// What it is for.
    pub kind: TimerKind,
}

impl TimerRef {
    /// The key of its row: `(due, id)`, so rows sort by due time.
    pub fn key(&self) -> (u64, u64) {
        (self.due.as_millis(), self.id)
    }
}

/// What a timer does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerKind {
    /// Ends a `sleep` step: its result is recorded.
    Sleep,
    /// Ends a retry delay: the step's next attempt may run.
    Retry,
    /// Ends the run's time: a `run_timeout` failure is recorded.
    Deadline,
    /// Ends an `await` step's wait: an `await_timeout` failure is
    /// recorded.
    Await,
}

/// A durable timer: written in the commit that sets it, removed by the
/// commit that fires or cancels it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerRecord {
    /// Its id, due time and kind.
    #[serde(flatten)]
    pub timer: TimerRef,
    /// The run it belongs to.
    pub run: String,
    /// The leaf it belongs to (`@deadline` for a deadline).
    pub path: String,
    /// That leaf's step id.
    pub step_id: String,
    /// That leaf's top-level step index.
    pub index: u32,
    /// The attempt that set it.
    pub attempt: u32,
    /// The run's tenant, whose count of pending timers it is in (see
    /// `max_timers`); none in a timer written before timers were counted,
    /// which is not in any count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// The path of the record a run's deadline leaves.
pub const DEADLINE_PATH: &str = "@deadline";

/// Where a child run comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent run.
    pub run: String,
    /// The path of the `subflow` step in the parent.
    pub path: String,
    /// How deep the child is: 1 for a child of a top-level run.
    pub depth: u32,
}

/// An effect that leaves a run, recorded in the commit that causes it and
/// removed once it is done. Open rows are carried out again when a host
/// starts, so each must be safe to carry out twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxRecord {
    /// The row's id.
    pub id: String,
    /// When it was written.
    pub created_at: Timestamp,
    /// What to do.
    pub effect: Effect,
}

/// What an outbox row asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Effect {
    /// Record this child run, unless a run with its id exists.
    StartRun {
        /// The child, as it starts.
        run: Box<RunRecord>,
    },
}

/// The exact plugin code a step of a run uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedPlugin {
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// `sha256:` and the hex digest of its component.
    pub digest: String,
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunError {
    /// The step that failed, or none when the run's outputs could not be
    /// evaluated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// What went wrong.
    pub error: ErrorRecord,
}

/// The committed result of one attempt of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The run.
    pub run_id: String,
    /// The record's number within the run, from 0, in commit order.
    pub seq: u32,
    /// The position, among the workflow's top-level steps, of the step this
    /// record belongs to.
    pub index: u32,
    /// Where the call is: the step id, under its enclosing blocks, with an
    /// iteration index for loops (`fan-out/ship`, `each[3]/fetch`). Empty in
    /// records written before paths were kept: the step id then.
    #[serde(default)]
    pub path: String,
    /// The step's id.
    pub step_id: String,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The input the step was given.
    pub input: Value,
    /// When the attempt started.
    pub started_at: Timestamp,
    /// How long the attempt took, in microseconds.
    pub duration_us: u64,
    /// The output, when the step succeeded. A `null` output is an
    /// output: it reads back as `Some(Null)`, not as no output.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub output: Option<Value>,
    /// For a `subflow` step: the child run this attempt started. A record
    /// with a child and no outcome means the attempt waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<String>,
    /// The error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorRecord>,
    /// True when the step's `if:` was false and it did not run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
    /// When the attempt failed and will be retried: the delay before the
    /// next attempt, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
    /// The timer the leaf waits on after this record: a `sleep`, or the
    /// retry delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer: Option<TimerRef>,
    /// The key-value writes committed with this record (`null` deletes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kv_writes: BTreeMap<String, Option<String>>,
    /// What the step logged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<LogLine>,
    /// The HTTP requests the step made, refused ones included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<weft_core::HttpCall>,
    /// For an `await` step: this record starts the wait for an outside
    /// actor; the step's result is the next record at its path.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting: bool,
    /// The ids of the messages committed with this record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<String>,
    /// The host that made the attempt's call, for a record of a call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// For a record at [`RETRY_PATH`]: the retry of an ended run, and the
    /// leaves it runs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryMark>,
}

/// The path of the record a run's retry leaves.
pub const RETRY_PATH: &str = "@retry";

/// What a retry of an ended run did: who asked, how the run had ended,
/// and the leaves whose results it set aside (their next attempt runs,
/// numbered after their last). Every other leaf's result stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryMark {
    /// Who asked for it: a token's actor, or `cli`.
    pub actor: String,
    /// The leaf asked for (`--from`), if one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// How the run had ended.
    pub was: RunState,
    /// Why it had, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// The paths of the leaves set aside.
    pub reset: Vec<String>,
}

impl StepRecord {
    /// A record of attempt `attempt` of the leaf `(index, path, step id)`,
    /// started `at`, with no input and no outcome yet.
    pub fn empty(
        run_id: &str,
        seq: u32,
        (index, path, step_id): (u32, &str, &str),
        attempt: u32,
        at: Timestamp,
    ) -> Self {
        Self {
            run_id: run_id.to_owned(),
            seq,
            index,
            path: path.to_owned(),
            step_id: step_id.to_owned(),
            attempt,
            input: Value::Null,
            started_at: at,
            duration_us: 0,
            output: None,
            child: None,
            error: None,
            skipped: false,
            retry_in_ms: None,
            timer: None,
            kv_writes: BTreeMap::new(),
            logs: Vec::new(),
            http: Vec::new(),
            awaiting: false,
            messages: Vec::new(),
            host: None,
            retry: None,
        }
    }
}

/// A workflow definition as it was when a run started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefinitionRecord {
    /// `sha256:` and the hex digest of `source`.
    pub digest: String,
    /// Where it was read from.
    pub origin: String,
    /// `yaml` or `json`.
    pub format: String,
    /// The text.
    pub source: String,
}

impl DefinitionRecord {
    /// The stored form of a definition: its text `source`, read from
    /// `origin`, in `format` (`yaml` or `json`). The digest is computed here.
    pub fn new(origin: &str, format: &str, source: &str) -> Self {
        Self {
            digest: weft_core::Digest::of(source.as_bytes()).to_string(),
            origin: origin.to_owned(),
            format: format.to_owned(),
            source: source.to_owned(),
        }
    }
}

/// A field that is there, `null` included: `Some`. (A field that is not
/// there is `None`, by `#[serde(default)]`.)
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_null_output_reads_back_as_an_output() {
        let mut record = StepRecord::empty("r", 0, (0, "a", "a"), 1, Timestamp(0));
        record.output = Some(Value::Null);
        let back: StepRecord = serde_json::from_slice(&crate::encode(&record)).unwrap();
        assert_eq!(back.output, Some(Value::Null));
        record.output = None;
        let back: StepRecord = serde_json::from_slice(&crate::encode(&record)).unwrap();
        assert_eq!(back.output, None);
    }
}
