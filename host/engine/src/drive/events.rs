//! Outside events as results to commit: a timer's fire, the run's
//! cancellation, an outside actor's answer to an `await` step.

use serde_json::Value;

use weft_core::clock::{Clock, Timestamp};
use weft_model::RetryPolicy;
use weft_store::{CANCEL_PATH, ErrorRecord, StepRecord, TimerRecord};

use super::{Drive, Finished, Leaf, Reply};

impl Drive {
    /// The fire of a pending timer of this run, as an attempt's result to
    /// commit (a `sleep`'s end, the run's deadline); `None` for a retry
    /// delay, whose fire records nothing.
    pub(crate) fn fired(&self, timer: &TimerRecord) -> Option<Finished> {
        let record = crate::stored::fired_record(timer, 0)?;
        Some(Finished {
            path: timer.path.clone(),
            record,
            retry: RetryPolicy::default(),
            kv: None,
            spawn: None,
            fired: Some(timer.timer),
            emitted: Vec::new(),
            reply: None,
        })
    }

    /// The cancellation of this run, as a result to commit: the walk then
    /// ends the run `cancelled`.
    pub(crate) fn cancelled(&self, clock: &dyn Clock) -> Finished {
        Finished {
            path: CANCEL_PATH.to_owned(),
            record: StepRecord {
                error: Some(ErrorRecord::cancelled()),
                ..StepRecord::empty(
                    &self.run.id,
                    0,
                    (self.run.next_step, CANCEL_PATH, CANCEL_PATH),
                    1,
                    clock.now(),
                )
            },
            retry: RetryPolicy::default(),
            kv: None,
            spawn: None,
            fired: None,
            emitted: Vec::new(),
            reply: None,
        }
    }

    /// An outside actor's answer to the `await` leaf at `path`, as a result
    /// to commit (with the wait's timeout, which the commit removes, so an
    /// answer and a timeout cannot both land). `None` when the leaf does
    /// not wait. The leaf stops counting as waiting at once, so a second
    /// answer finds it so.
    pub(crate) fn answer(
        &mut self,
        path: &str,
        answer: &Answer,
        clock: &dyn Clock,
        reply: Reply,
    ) -> Result<Finished, Reply> {
        let Some(leaf) = self.results.get(path).filter(|l| l.awaiting) else {
            return Err(reply);
        };
        if !self.awaits.remove(path) {
            return Err(reply);
        }
        let record = answer.record(&self.run.id, path, leaf, clock.now());
        Ok(Finished {
            path: path.to_owned(),
            record,
            retry: RetryPolicy::default(),
            kv: None,
            spawn: None,
            fired: leaf.timer,
            emitted: Vec::new(),
            reply: Some(reply),
        })
    }
}

/// What an outside actor does to a waiting `await` step.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The step succeeds with this output.
    Complete(Value),
    /// The step fails with this error (not retried; a `catch` may handle
    /// it).
    Fail {
        /// A short stable code.
        code: String,
        /// A message for people.
        message: String,
        /// Structured details.
        details: Option<Value>,
    },
    /// The step is skipped: its output is `null`.
    Skip,
}

impl Answer {
    /// The leaf's result record (numbered by whoever commits it).
    pub(crate) fn record(&self, run: &str, path: &str, leaf: &Leaf, now: Timestamp) -> StepRecord {
        let mut record = StepRecord::empty(
            run,
            0,
            (leaf.index, path, &leaf.step_id),
            leaf.attempts.max(1),
            now,
        );
        match self {
            Self::Complete(output) => record.output = Some(output.clone()),
            Self::Fail {
                code,
                message,
                details,
            } => {
                record.error = Some(ErrorRecord {
                    code: code.clone(),
                    message: message.clone(),
                    retryable: false,
                    details: details.clone(),
                });
            }
            Self::Skip => record.skipped = true,
        }
        record
    }
}
