//! One run's state machine.
//!
//! A run's state is the set of committed leaf results (one per plugin call,
//! by path, such as `fan-out/ship` or `each[3]/fetch`). To find what to do
//! next, [`Drive`] walks the workflow's steps in document order against
//! those results: control flow is native and its expressions are pure, so
//! the walk is deterministic, and resuming a run is the same walk over the
//! results read back from the store. Every call the walk reaches that has no
//! final result, and no attempt under way, is ready: the branches of a
//! `parallel` and up to `concurrency` iterations of a `foreach` are ready
//! together.
//!
//! [`Drive::plan`] turns the ready calls into [`Attempt`]s, which run without
//! the drive (on any worker, at the same time); [`Drive::complete`] folds a
//! finished attempt back in and gives the run's next state, to commit with
//! it.

mod attempt;
mod events;
mod leaf;
mod prepare;
mod waits;
mod walk;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use weft_core::clock::Clock;
use weft_model::{Scope, Template, Workflow};
use weft_store::{
    CANCEL_PATH, DEADLINE_PATH, ErrorRecord, Lease, RunError, RunRecord, RunState, TimerKind,
    TimerRef, Write,
};

use super::Observer;
use super::launch::Launcher;
use crate::runner::StepRunner;

pub(crate) use attempt::{Attempt, Completed, Finished, Reply};
pub use events::Answer;
pub(crate) use leaf::{Leaf, fold, leaf_state};
use walk::Status;
#[cfg(feature = "sim")]
pub use walk::{verify_walks, walk_mismatches};

/// A run being driven. Its record is the caller's to read and commit;
/// the rest is its own: the leaf results, and which leaves are busy and
/// what they wait for, changed only through its methods (waits.rs keeps
/// "every wait is busy").
pub(super) struct Drive {
    /// The run's record, moved to its next state by each attempt.
    pub(super) run: RunRecord,
    workflow: Arc<Workflow>,
    /// Makes the calls of the plugins the run is pinned to.
    runner: Arc<dyn StepRunner>,
    /// Committed leaf results, by path.
    results: HashMap<String, Leaf>,
    /// The run's scope before any step, converted once.
    base: Scope,
    /// Leaves with an attempt under way: running, finished and waiting for
    /// their commit, or waiting out a retry delay. The walk does not offer
    /// them again.
    busy: HashSet<String>,
    /// Makes the runs that `subflow` steps start.
    launcher: Arc<Launcher>,
    /// The busy leaves that wait for a pending timer (a `sleep`, a retry
    /// delay, an `await`'s timeout), by path.
    timers: HashMap<String, TimerRef>,
    /// The busy `await` leaves that wait for an outside actor, by path.
    awaits: HashSet<String>,
    /// Set when the run leaves the scheduler's hands: its guest calls
    /// still running are interrupted.
    cancel: Arc<std::sync::atomic::AtomicBool>,
    /// The lease this host holds on the run: every commit of it names it.
    lease: Option<Lease>,
    /// Where the last walk found the first top-level step not done, so
    /// the next starts there (see [`walk::Cursor`]).
    cursor: Option<walk::Cursor>,
}

/// What a run can do now.
pub(super) enum Plan {
    /// Run these attempts (at least one).
    Start(Vec<Attempt>),
    /// Nothing new: wait for the attempts under way.
    Wait,
    /// The run reached a terminal state, which is in its record, to commit.
    End,
}

/// What happens after an attempt is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Run the next attempt.
    Step,
    /// Wait for this timer (set by the record): a `sleep`, or a retry
    /// delay.
    Wait(TimerRef),
    /// Wait for an outside actor, and for the wait's timeout, if it has
    /// one.
    Await(Option<TimerRef>),
    /// The run reached a terminal state.
    Done,
}

/// The state of a [`Drive`] before an attempt, to go back to when the
/// attempt's commit is refused.
pub(super) struct Undo {
    run: Saved,
    path: String,
    leaf: Option<Leaf>,
}

/// The run record as it was before an attempt's result. A result that
/// does not end the run changes only its progress (and its commit only
/// `suspended`), so only that is kept: copying the whole record for every
/// step cost the workers an allocation per field and the committing
/// thread the time to free them.
enum Saved {
    Progress(Progress),
    /// A result that ends the run: the whole record.
    Whole(Box<RunRecord>),
}

/// The fields of a run record that a step's result changes.
#[derive(Clone, Copy)]
struct Progress {
    step_records: u32,
    updated_at: weft_core::Timestamp,
    next_step: u32,
    suspended: bool,
}

impl Progress {
    fn of(run: &RunRecord) -> Self {
        Self {
            step_records: run.step_records,
            updated_at: run.updated_at,
            next_step: run.next_step,
            suspended: run.suspended,
        }
    }

    fn restore(self, run: &mut RunRecord) {
        run.step_records = self.step_records;
        run.updated_at = self.updated_at;
        run.next_step = self.next_step;
        run.suspended = self.suspended;
    }
}

impl Saved {
    /// Puts `run` back as it was.
    fn restore(self, run: &mut RunRecord) {
        match self {
            Self::Progress(progress) => progress.restore(run),
            Self::Whole(whole) => *run = *whole,
        }
    }
}

impl Drive {
    /// Drives `run` of `workflow` from its committed leaf `results`, with
    /// nothing under way.
    pub(super) fn new(
        run: RunRecord,
        workflow: Arc<Workflow>,
        runner: Arc<dyn StepRunner>,
        results: HashMap<String, Leaf>,
        launcher: Arc<Launcher>,
    ) -> Self {
        let base = Scope::new(&workflow.id, &run.id, &run.input);
        Self {
            run,
            workflow,
            runner,
            results,
            base,
            busy: HashSet::new(),
            launcher,
            timers: HashMap::new(),
            awaits: HashSet::new(),
            cancel: Arc::default(),
            lease: None,
            cursor: None,
        }
    }

    /// The lease this host holds on the run, if it took one.
    pub(crate) fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// Drives the run under `lease` from now on.
    pub(crate) fn hold(&mut self, lease: Lease) {
        self.lease = Some(lease);
    }

    /// `write`, a commit of this run, under its lease.
    pub(crate) fn leased(&self, write: Write) -> Write {
        match &self.lease {
            Some(lease) => write.under(lease.clone()),
            None => write,
        }
    }

    /// Interrupts the run's guest calls still running: it has left the
    /// scheduler's hands.
    pub(super) fn stop_calls(&self) {
        self.cancel
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A fresh scope for this run.
    fn scope(&self) -> Scope {
        self.base.clone()
    }

    /// Walks the run: the attempts to start now, or nothing new to start,
    /// or the run's end (then set in its record). The attempts' leaves become
    /// busy.
    pub(super) fn plan(&mut self, clock: &dyn Clock, observer: &mut dyn Observer) -> Plan {
        let workflow = Arc::clone(&self.workflow);
        let mut scope = self.scope();
        let (status, handled) = self.walk(&workflow, &mut scope);
        let ready = match status {
            Status::Pending(ready) if ready.is_empty() => return Plan::Wait,
            Status::Pending(ready) => ready,
            status => {
                self.conclude(status, handled, &scope, clock);
                return Plan::End;
            }
        };
        if let Some(top) = ready.iter().map(|r| r.top).min() {
            self.run.next_step = u32::try_from(top).unwrap_or(u32::MAX);
        }
        let attempts: Vec<Attempt> = ready
            .iter()
            .map(|ready| {
                if ready.child.is_none() {
                    observer.step_started(
                        ready.step,
                        ready.top,
                        workflow.steps.len(),
                        ready.attempt,
                    );
                }
                self.prepare(ready, clock)
            })
            .collect();
        self.busy
            .extend(attempts.iter().map(|attempt| attempt.path.clone()));
        Plan::Start(attempts)
    }

    /// Folds a finished attempt into the run and moves the run's record to
    /// its next state. Nothing is stored: the caller commits the returned
    /// record with the run. The leaf stays busy.
    pub(super) fn complete(&mut self, finished: Finished, clock: &dyn Clock) -> Completed {
        let Finished {
            path,
            mut record,
            retry,
            kv,
            spawn,
            fired,
            emitted,
            reply,
        } = finished;
        let before = Progress::of(&self.run);
        let mut undo = Undo {
            run: Saved::Progress(before),
            leaf: self.results.get(&path).cloned(),
            path: path.clone(),
        };
        record.seq = self.run.step_records;
        self.run.step_records += 1;
        self.run.updated_at = clock.now();

        let mut next = Next::Step;
        // A step held back by its tenant's guest time has its retry timer
        // from `prepare_call` already, whatever its retry policy.
        // A retry of the run gives each leaf it set aside its policy anew.
        let counted = record
            .attempt
            .saturating_sub(undo.leaf.as_ref().map_or(0, |leaf| leaf.base));
        if record.retry_in_ms.is_none()
            && let Some(error) = &record.error
            && retry.retries(counted, &error.code, error.retryable)
        {
            let delay = retry.delay(counted);
            record.retry_in_ms = Some(weft_core::clock::millis(delay));
            record.timer = Some(TimerRef {
                id: timer_id(),
                due: clock.now() + delay,
                kind: TimerKind::Retry,
            });
        }
        if record.awaiting {
            next = Next::Await(record.timer);
        } else if let Some(timer) = record.timer
            && record.output.is_none()
            && !record.skipped
        {
            next = Next::Wait(timer);
        }
        self.passed(&path);
        self.results.entry(path).or_default().apply(&record);

        // Walk again with the result, to know the run's next state.
        let workflow = Arc::clone(&self.workflow);
        let mut scope = self.scope();
        let (status, handled) = self.walk(&workflow, &mut scope);
        match status {
            Status::Pending(ready) => {
                if let Some(top) = ready.iter().map(|r| r.top).min() {
                    self.run.next_step = u32::try_from(top).unwrap_or(u32::MAX);
                }
            }
            status => {
                // Only its progress changed so far.
                let mut whole = Box::new(self.run.clone());
                before.restore(&mut whole);
                undo.run = Saved::Whole(whole);
                self.conclude(status, handled, &scope, clock);
                next = Next::Done;
            }
        }
        // Only a successful attempt's writes take effect.
        let kv = kv.filter(|_| record.output.is_some());
        if let Some(kv) = &kv {
            record.kv_writes = kv.writes.clone();
        }
        let emitted = if record.output.is_some() {
            emitted
        } else {
            Vec::new()
        };
        Completed {
            record,
            next,
            kv,
            undo,
            spawn,
            fired,
            emitted,
            reply,
        }
    }

    /// Takes back the attempt `undo` was taken before, whose commit was
    /// refused, so that it can run again.
    /// The child runs the run's leaves wait for.
    pub(crate) fn open_children(&self) -> Vec<String> {
        let mut children: Vec<String> = self
            .results
            .values()
            .filter_map(|leaf| leaf.open_child().map(str::to_owned))
            .collect();
        children.sort();
        children
    }

    pub(super) fn undo(&mut self, undo: Undo) {
        if !weft_core::mutation::on("cursor-kept") {
            self.cursor = None;
        }
        undo.run.restore(&mut self.run);
        self.busy.remove(&undo.path);
        match undo.leaf {
            Some(leaf) => self.results.insert(undo.path, leaf),
            None => self.results.remove(&undo.path),
        };
    }

    /// Sets the run's terminal state from a walk that ended.
    /// `handled`: the run failed and a workflow-level handler ran to the
    /// end; its last output is the run's outputs.
    fn conclude(&mut self, status: Status<'_>, handled: bool, scope: &Scope, clock: &dyn Clock) {
        self.run.updated_at = clock.now();
        match status {
            Status::Pending(_) => {}
            Status::Done(last) => {
                self.run.next_step = self.run.step_count;
                let outputs = match (&self.workflow.outputs, handled) {
                    (_, true) => Ok(last),
                    (None, false) => Ok(last),
                    (Some(template), false) => template.eval(scope),
                };
                // A handler's outputs are held to the schema too; there is
                // no second handler for them.
                let invalid = match (&outputs, &self.workflow.outputs_schema, handled) {
                    (Ok(outputs), Some(schema), true) => walk::invalid_outputs(schema, outputs),
                    _ => None,
                };
                match outputs {
                    Ok(_) if invalid.is_some() => {
                        self.run.state = RunState::Failed;
                        self.run.error = invalid.map(|error| RunError { step: None, error });
                    }
                    Ok(outputs) => {
                        self.run.state = RunState::Succeeded;
                        self.run.outputs = Some(outputs);
                    }
                    Err(e) => {
                        self.run.state = RunState::Failed;
                        self.run.error = Some(RunError {
                            step: None,
                            error: expression_error(e.to_string()),
                        });
                    }
                }
            }
            Status::Failed(error, step) if step == CANCEL_PATH => {
                self.run.state = RunState::Cancelled;
                self.run.error = Some(RunError { step: None, error });
            }
            Status::Failed(error, step) if step == DEADLINE_PATH => {
                self.run.state = RunState::TimedOut;
                self.run.error = Some(RunError { step: None, error });
            }
            Status::Failed(error, step) if step == walk::OUTPUTS_PATH => {
                self.run.state = RunState::Failed;
                self.run.error = Some(RunError { step: None, error });
            }
            Status::Failed(error, step) => {
                self.run.state = RunState::Failed;
                self.run.error = Some(RunError {
                    step: Some(step),
                    error,
                });
            }
        }
    }
}

/// A new timer's id: random, so ids from several processes sharing a
/// store do not collide.
pub(super) fn timer_id() -> u64 {
    weft_core::ids::random_u64()
}

/// Evaluates a condition, which must be `true` or `false`.
fn truth(condition: &Template, scope: &Scope, field: &str) -> Result<bool, ErrorRecord> {
    match condition.eval(scope) {
        Ok(Value::Bool(b)) => Ok(b),
        Ok(other) => Err(expression_error(format!(
            "{field}: expected true or false, got {other}"
        ))),
        Err(e) => Err(expression_error(e.to_string())),
    }
}

fn expression_error(message: String) -> ErrorRecord {
    ErrorRecord::fatal("expression", message)
}
