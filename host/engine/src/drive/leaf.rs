//! What is committed for one leaf: its records folded into one state,
//! and that state in words.

use serde_json::{Value, json};

use weft_model::StepEntry;
use weft_store::{ErrorRecord, StepRecord, TimerRef};

/// What is committed for one leaf (one call at one path).
#[derive(Debug, Clone, Default)]
pub(crate) struct Leaf {
    /// Attempts committed.
    pub(super) attempts: u32,
    /// The final outcome; `None` while a retry is due.
    pub(super) outcome: Option<Outcome>,
    /// What expressions see of a finished leaf, converted once.
    pub(super) entry: Option<StepEntry>,
    /// The child run the current attempt waits for (`subflow`).
    pub(super) child: Option<String>,
    /// The timer the leaf waits for after its last record.
    pub(crate) timer: Option<TimerRef>,
    /// An `await` leaf that waits for an outside actor.
    pub(crate) awaiting: bool,
    /// The step id and top-level index of its last record.
    pub(super) step_id: String,
    pub(super) index: u32,
}

#[derive(Debug, Clone)]
pub(super) enum Outcome {
    Output(Value),
    Skipped,
    Failed(ErrorRecord),
}

impl Leaf {
    /// The child run this leaf waits for, if it waits for one.
    pub(crate) fn open_child(&self) -> Option<&str> {
        self.child.as_deref().filter(|_| self.outcome.is_none())
    }

    /// Folds one committed record into the leaf.
    pub(crate) fn apply(&mut self, record: &StepRecord) {
        self.attempts = self.attempts.max(record.attempt);
        self.child = record.child.clone();
        self.outcome = if record.skipped {
            Some(Outcome::Skipped)
        } else if let Some(output) = &record.output {
            Some(Outcome::Output(output.clone()))
        } else {
            match (&record.error, record.retry_in_ms) {
                (Some(error), None) => Some(Outcome::Failed(error.clone())),
                _ => None,
            }
        };
        if self.outcome.is_some() || record.error.is_some() {
            self.child = None;
        }
        self.timer = record.timer.filter(|_| self.outcome.is_none());
        self.awaiting = record.awaiting && self.outcome.is_none();
        self.step_id.clone_from(&record.step_id);
        self.index = record.index;
        self.entry = match &self.outcome {
            Some(Outcome::Output(output)) => Some(StepEntry::new(&json!({ "output": output }))),
            Some(Outcome::Skipped) => {
                Some(StepEntry::new(&json!({ "output": null, "skipped": true })))
            }
            _ => None,
        };
    }
}

/// Where a leaf is, in words: `waiting`, `succeeded`, `failed (code)`,
/// `skipped`, `running`.
pub(crate) fn leaf_state(leaf: &Leaf) -> String {
    match &leaf.outcome {
        Some(Outcome::Output(_)) => "succeeded".to_owned(),
        Some(Outcome::Skipped) => "skipped".to_owned(),
        Some(Outcome::Failed(error)) => format!("failed ({})", error.code),
        None if leaf.awaiting => "waiting".to_owned(),
        None => "running".to_owned(),
    }
}
