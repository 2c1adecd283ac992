//! What is committed for one leaf: its records folded into one state,
//! and that state in words.

use std::collections::HashMap;

use serde_json::{Value, json};

use weft_model::StepEntry;
use weft_store::{ErrorRecord, RETRY_PATH, StepRecord, TimerRef};

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
    /// The attempts made before the run's last retry set the leaf aside:
    /// its retry policy counts from there.
    pub(super) base: u32,
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

    /// True when the leaf has a result that stands: an output, or skipped.
    pub(crate) fn stands(&self) -> bool {
        matches!(self.outcome, Some(Outcome::Output(_) | Outcome::Skipped))
    }

    /// True when the leaf failed for good.
    pub(crate) fn failed(&self) -> bool {
        matches!(self.outcome, Some(Outcome::Failed(_)))
    }

    /// True when the leaf waits for a timer or an answer: a wait that the
    /// run's end broke off (its timers went with it).
    pub(crate) fn waits(&self) -> bool {
        self.outcome.is_none() && (self.timer.is_some() || self.awaiting)
    }

    /// The step id of its last record.
    pub(crate) fn step(&self) -> &str {
        &self.step_id
    }

    /// Sets the leaf's result aside (a retry of the run): its next attempt
    /// runs, numbered after its last.
    pub(crate) fn reset(&mut self) {
        self.outcome = None;
        self.entry = None;
        self.child = None;
        self.timer = None;
        self.awaiting = false;
        self.base = self.attempts;
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

/// A run's records folded into its leaves, by path. A `@retry` record is
/// no leaf: it sets aside the leaves it names.
pub(crate) fn fold(records: &[StepRecord]) -> HashMap<String, Leaf> {
    let mut leaves: HashMap<String, Leaf> = HashMap::new();
    for record in records {
        if let Some(mark) = record.retry.as_ref().filter(|_| record.path == RETRY_PATH) {
            for path in &mark.reset {
                if let Some(leaf) = leaves.get_mut(path) {
                    leaf.reset();
                }
            }
            continue;
        }
        let path = if record.path.is_empty() {
            record.step_id.clone()
        } else {
            record.path.clone()
        };
        leaves.entry(path).or_default().apply(record);
    }
    leaves
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
