//! One attempt of one leaf: prepared by the drive, run on any worker
//! (a plugin call, or a child run's start), and handed back to commit.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use weft_core::KvEffects;
use weft_core::clock::Clock;
use weft_model::RetryPolicy;
use weft_store::{
    Emission, ErrorRecord, ParentLink, Refused, RunError, RunRecord, RunState, StepRecord,
    StoreError, TimerRef,
};

use crate::launch::{Launcher, NewRun};
use crate::runner::{StepCall, StepOutcome, StepRunner};

use super::{Next, Undo};

/// One attempt of one leaf, ready to run on any thread.
pub(crate) struct Attempt {
    pub(super) path: String,
    pub(super) record: StepRecord,
    pub(super) retry: RetryPolicy,
    /// The plugin call; `None` when the record is already final (the step
    /// was skipped, or its input could not be built).
    pub(super) call: Option<Invocation>,
    /// The messages an `emit` step commits with its record.
    pub(super) emitted: Vec<Emission>,
}

pub(super) enum Invocation {
    /// Call a plugin.
    Plugin {
        runner: Arc<dyn StepRunner>,
        call: Box<StepCall>,
        /// Counts the call's guest time to its tenant.
        launcher: Arc<Launcher>,
    },
    /// Make a child run (recorded through the outbox once this attempt
    /// commits).
    Spawn {
        launcher: Arc<Launcher>,
        workflow: String,
        input: Value,
        parent: ParentLink,
    },
    /// Wait for child run `.0` to end; see [`Attempt::resolve`].
    Await(String),
}

/// An attempt that ran, to be committed.
pub(crate) struct Finished {
    pub(super) path: String,
    pub(super) record: StepRecord,
    pub(super) retry: RetryPolicy,
    pub(super) kv: Option<KvEffects>,
    pub(super) spawn: Option<Box<NewRun>>,
    /// The timer whose fire this is.
    pub(super) fired: Option<TimerRef>,
    /// The messages the attempt emitted.
    pub(super) emitted: Vec<Emission>,
    /// Told how the commit went (an outside actor's answer, or a
    /// cancellation).
    pub(super) reply: Option<Reply>,
}

/// How an answer to an `await` step or a cancellation went: told once its
/// commit is answered.
pub(crate) type Reply = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// A finished attempt folded into its run: what to commit, and after.
pub(crate) struct Completed {
    pub(crate) record: StepRecord,
    pub(crate) next: Next,
    pub(crate) kv: Option<KvEffects>,
    pub(crate) undo: Undo,
    /// The child run the attempt starts.
    pub(crate) spawn: Option<Box<NewRun>>,
    /// The timer whose fire this is: the commit is refused if it is gone.
    pub(crate) fired: Option<TimerRef>,
    /// The messages to commit with the record (a successful attempt's).
    pub(crate) emitted: Vec<Emission>,
    /// Told how the commit went.
    pub(crate) reply: Option<Reply>,
}

impl Finished {
    /// This result, telling `reply` how its commit went.
    pub(crate) fn telling(mut self, reply: Reply) -> Self {
        self.reply = Some(reply);
        self
    }

    /// Drops this result uncommitted (its run left memory): whoever waits
    /// for its commit is told to try again ([`Refused::Changed`]), and
    /// the timer whose fire it was, if any, is given back to arm again.
    pub(crate) fn abandon(self) -> Option<TimerRef> {
        if let Some(reply) = self.reply {
            reply(Err(StoreError::Refused(Refused::Changed(
                weft_store::What::Run(self.record.run_id.clone()),
            ))));
        }
        self.fired
    }

    /// The leaf's path.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Attempt `record` at `path`, whose result the store refused because
    /// it would take the tenant over its stored bytes or its pending
    /// timers (`refused` says how far): failed with `code`
    /// (`storage_quota`, `timer_quota`) instead, without its output, timer
    /// or effects, and not tried again by its retry policy (its tenant's
    /// quota does not change by waiting).
    pub(crate) fn over_quota(
        path: String,
        mut record: StepRecord,
        fired: Option<TimerRef>,
        code: &str,
        refused: String,
    ) -> Self {
        record.output = None;
        record.child = None;
        record.kv_writes.clear();
        record.messages.clear();
        record.retry_in_ms = None;
        record.timer = None;
        // A refused `await` waits for nothing.
        record.awaiting = false;
        record.error = Some(ErrorRecord::fatal(code, refused));
        Self {
            path,
            record,
            retry: RetryPolicy::default(),
            kv: None,
            spawn: None,
            fired,
            emitted: Vec::new(),
            reply: None,
        }
    }
}

impl Attempt {
    /// True when there is no call to make.
    pub(crate) fn is_settled(&self) -> bool {
        self.call.is_none()
    }

    /// The child run this attempt waits for, if it is a wait.
    pub(crate) fn awaited(&self) -> Option<&str> {
        match &self.call {
            Some(Invocation::Await(child)) => Some(child),
            _ => None,
        }
    }

    /// Makes the call, or the child run. Never fails: a failure is in the
    /// record. A wait must go to [`Attempt::resolve`] instead.
    pub(crate) fn run(self, clock: &dyn Clock) -> Finished {
        let Self {
            path,
            mut record,
            retry,
            call,
            mut emitted,
        } = self;
        let mut kv = None;
        let mut spawn = None;
        record.started_at = clock.now();
        let timer = Instant::now();
        match call {
            None | Some(Invocation::Await(_)) => {}
            Some(Invocation::Plugin {
                runner,
                call,
                launcher,
            }) => {
                let began = Instant::now();
                // A panic in the host's part of the call fails this
                // attempt alone (`internal`, retryable as a trap is), not
                // the worker that serves every run.
                let outcome = weft_core::panics::contain("worker", || runner.call(&call))
                    .unwrap_or_else(|panic| StepOutcome::of(Err(panicked(&panic))));
                launcher.guest_time_spent(&call.context.tenant, began.elapsed());
                record.logs = outcome.logs;
                record.http = outcome.http;
                kv = Some(outcome.kv);
                match outcome.result {
                    Ok(output) => {
                        record.output = Some(output);
                        record.messages = outcome.emitted.iter().map(|m| m.id.clone()).collect();
                        // A step emits to its own tenant's channels (a
                        // channel's name holds no `:`, so it names no
                        // other tenant's).
                        emitted = outcome
                            .emitted
                            .into_iter()
                            .map(|mut message| {
                                message.channel = weft_core::tenant::qualify(
                                    &call.context.tenant,
                                    &message.channel,
                                );
                                message
                            })
                            .collect();
                    }
                    Err(error) => record.error = Some(error),
                }
            }
            Some(Invocation::Spawn {
                launcher,
                workflow,
                input,
                parent,
            }) => match launcher.workflow(&workflow) {
                None => {
                    record.error = Some(ErrorRecord::fatal(
                        "unknown_workflow",
                        format!(
                            "subflow: no workflow `{}` is deployed",
                            weft_core::tenant::bare(&workflow)
                        ),
                    ));
                }
                Some(child) => match weft_core::panics::contain("worker", || {
                    launcher.make(child, input, Some(parent))
                }) {
                    Err(panic) => record.error = Some(panicked(&panic)),
                    Ok(Ok(child)) => {
                        record.child = Some(child.drive.run.id.clone());
                        spawn = Some(Box::new(child));
                    }
                    Ok(Err(e)) => {
                        let code = match e {
                            crate::StartError::Input { .. } => "invalid_input",
                            _ => "subflow_start",
                        };
                        record.error = Some(ErrorRecord::fatal(
                            code,
                            format!("subflow `{workflow}` cannot start: {e}"),
                        ));
                    }
                },
            },
        }
        record.duration_us = u64::try_from(timer.elapsed().as_micros()).unwrap_or(u64::MAX);
        Finished {
            path,
            record,
            retry,
            kv,
            spawn,
            fired: None,
            emitted,
            reply: None,
        }
    }

    /// Ends a wait with the child's terminal record: its outputs, or its
    /// failure as this step's.
    pub(crate) fn resolve(self, child: &RunRecord) -> Finished {
        let mut record = self.record;
        record.child = Some(child.id.clone());
        record.started_at = child.created_at;
        record.duration_us = child
            .updated_at
            .millis_since(child.created_at)
            .saturating_mul(1000);
        if child.state == RunState::Succeeded {
            record.output = Some(child.outputs.clone().unwrap_or(Value::Null));
        } else {
            // A child that timed out or was cancelled has no failed step.
            let why = match (&child.error, child.state) {
                (Some(RunError { step, error }), RunState::Failed) => format!(
                    "failed {}: {}: {}",
                    step.as_deref()
                        .map(|s| format!("at step `{s}`"))
                        .unwrap_or_else(|| "at its outputs".to_owned()),
                    error.code,
                    error.message
                ),
                (Some(RunError { error, .. }), state) => {
                    format!("ended {state}: {}: {}", error.code, error.message)
                }
                (None, state) => format!("ended {state}"),
            };
            record.error = Some(ErrorRecord {
                code: "subflow_failed".to_owned(),
                message: format!("child run {} of `{}` {why}", child.id, child.workflow),
                retryable: false,
                details: Some(json!({ "run": child.id, "error": child.error })),
            });
        }
        Finished {
            path: self.path,
            record,
            retry: self.retry,
            kv: None,
            spawn: None,
            fired: None,
            emitted: Vec::new(),
            reply: None,
        }
    }
}

/// The error of an attempt whose host side panicked: `internal`, and
/// retryable as a trap is (the policy's attempts bound the retries).
fn panicked(message: &str) -> ErrorRecord {
    ErrorRecord {
        code: "internal".to_owned(),
        message: format!("the host failed while running the step (a bug): {message}"),
        retryable: true,
        details: None,
    }
}
