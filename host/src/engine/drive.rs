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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};

use crate::clock::Clock;
use crate::clock::Timestamp;
use crate::model::{
    Await, Call, Case, Emit, RetryPolicy, Scope, Sleep, Step, StepEntry, StepKind, Subflow,
    Template, Workflow,
};
use crate::runtime::{CallError, CallOptions, KvAccess, KvEffects, Plugin, StepContext};
use crate::store::{
    CANCEL_PATH, DEADLINE_PATH, Emission, ErrorRecord, ParentLink, RunError, RunRecord, RunState,
    StepRecord, StoreError, TimerKind, TimerRecord, TimerRef,
};

use super::launch::{Launcher, MAX_DEPTH, NewRun};
use super::{DEFAULT_TENANT, Observer};

/// A run being driven.
pub(super) struct Drive {
    pub(super) run: RunRecord,
    pub(super) workflow: Arc<Workflow>,
    /// The pinned plugin of each call step, by step id.
    pub(super) plugins: HashMap<String, Plugin>,
    /// Committed leaf results, by path.
    pub(super) results: HashMap<String, Leaf>,
    /// The workflow's key-value space.
    pub(super) kv: KvAccess,
    /// The run's scope before any step, converted once.
    pub(super) base: Scope,
    /// Leaves with an attempt under way: running, finished and waiting for
    /// their commit, or waiting out a retry delay. The walk does not offer
    /// them again.
    pub(super) busy: HashSet<String>,
    /// Makes the runs that `subflow` steps start.
    pub(super) launcher: Arc<Launcher>,
    /// The busy leaves that wait for a pending timer (a `sleep`, a retry
    /// delay, an `await`'s timeout), by path.
    pub(super) timers: HashMap<String, TimerRef>,
    /// The busy `await` leaves that wait for an outside actor, by path.
    pub(super) awaits: HashSet<String>,
    /// Set when the run leaves the scheduler's hands: its guest calls
    /// still running are interrupted.
    pub(super) cancel: Arc<std::sync::atomic::AtomicBool>,
}

/// What is committed for one leaf (one call at one path).
#[derive(Debug, Clone, Default)]
pub(super) struct Leaf {
    /// Attempts committed.
    attempts: u32,
    /// The final outcome; `None` while a retry is due.
    outcome: Option<Outcome>,
    /// What expressions see of a finished leaf, converted once.
    entry: Option<StepEntry>,
    /// The child run the current attempt waits for (`subflow`).
    child: Option<String>,
    /// The timer the leaf waits for after its last record.
    pub(super) timer: Option<TimerRef>,
    /// An `await` leaf that waits for an outside actor.
    pub(super) awaiting: bool,
    /// The step id and top-level index of its last record.
    step_id: String,
    index: u32,
}

#[derive(Debug, Clone)]
enum Outcome {
    Output(Value),
    Skipped,
    Failed(ErrorRecord),
}

impl Leaf {
    /// Folds one committed record into the leaf.
    pub(super) fn apply(&mut self, record: &StepRecord) {
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
pub(super) fn leaf_state(leaf: &Leaf) -> String {
    match &leaf.outcome {
        Some(Outcome::Output(_)) => "succeeded".to_owned(),
        Some(Outcome::Skipped) => "skipped".to_owned(),
        Some(Outcome::Failed(error)) => format!("failed ({})", error.code),
        None if leaf.awaiting => "waiting".to_owned(),
        None => "running".to_owned(),
    }
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

/// One attempt of one leaf, ready to run on any thread.
pub(super) struct Attempt {
    path: String,
    record: StepRecord,
    retry: RetryPolicy,
    /// The plugin call; `None` when the record is already final (the step
    /// was skipped, or its input could not be built).
    call: Option<Invocation>,
    /// The messages an `emit` step commits with its record.
    emitted: Vec<Emission>,
}

enum Invocation {
    /// Call a plugin.
    Plugin {
        plugin: Plugin,
        context: StepContext,
        input: String,
        options: CallOptions,
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
pub(super) struct Finished {
    path: String,
    record: StepRecord,
    retry: RetryPolicy,
    kv: Option<KvEffects>,
    spawn: Option<Box<NewRun>>,
    /// The timer whose fire this is.
    fired: Option<TimerRef>,
    /// The messages the attempt emitted.
    emitted: Vec<Emission>,
    /// Told how the commit went (an outside actor's answer).
    reply: Option<Reply>,
}

/// How an answer to an `await` step went: told once its commit is
/// answered.
pub(super) type Reply = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// A finished attempt folded into its run: what to commit, and after.
pub(super) struct Completed {
    pub(super) record: StepRecord,
    pub(super) next: Next,
    pub(super) kv: Option<KvEffects>,
    pub(super) undo: Undo,
    /// The child run the attempt starts.
    pub(super) spawn: Option<Box<NewRun>>,
    /// The timer whose fire this is: the commit is refused if it is gone.
    pub(super) fired: Option<TimerRef>,
    /// The messages to commit with the record (a successful attempt's).
    pub(super) emitted: Vec<Emission>,
    /// Told how the commit went.
    pub(super) reply: Option<Reply>,
}

impl Finished {
    /// The leaf's path.
    pub(super) fn path(&self) -> &str {
        &self.path
    }
}

impl Attempt {
    /// True when there is no call to make.
    pub(super) fn is_settled(&self) -> bool {
        self.call.is_none()
    }

    /// The child run this attempt waits for, if it is a wait.
    pub(super) fn awaited(&self) -> Option<&str> {
        match &self.call {
            Some(Invocation::Await(child)) => Some(child),
            _ => None,
        }
    }

    /// Makes the call, or the child run. Never fails: a failure is in the
    /// record. A wait must go to [`Attempt::resolve`] instead.
    pub(super) fn run(self, clock: &dyn Clock) -> Finished {
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
                plugin,
                context,
                input,
                options,
            }) => {
                let outcome = plugin.call(&context, &input, &options);
                record.logs = outcome.logs;
                kv = Some(outcome.kv);
                match outcome.result {
                    Ok(output) => {
                        record.output = Some(output);
                        record.messages = outcome.emitted.iter().map(|m| m.id.clone()).collect();
                        emitted = outcome.emitted;
                    }
                    Err(error) => record.error = Some(error_record(&error)),
                }
            }
            Some(Invocation::Spawn {
                launcher,
                workflow,
                input,
                parent,
            }) => match launcher.workflow(&workflow) {
                None => {
                    record.error = Some(ErrorRecord {
                        code: "unknown_workflow".to_owned(),
                        message: format!("subflow: no workflow `{workflow}` is deployed"),
                        retryable: false,
                        details: None,
                    });
                }
                Some(child) => match launcher.make(child, input, Some(parent)) {
                    Ok(child) => {
                        record.child = Some(child.drive.run.id.clone());
                        spawn = Some(Box::new(child));
                    }
                    Err(e) => {
                        let code = match e {
                            super::StartError::Input { .. } => "invalid_input",
                            _ => "subflow_start",
                        };
                        record.error = Some(ErrorRecord {
                            code: code.to_owned(),
                            message: format!("subflow `{workflow}` cannot start: {e}"),
                            retryable: false,
                            details: None,
                        });
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
    pub(super) fn resolve(self, child: &RunRecord) -> Finished {
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
    run: RunRecord,
    path: String,
    leaf: Option<Leaf>,
}

/// Where a walk stopped.
enum Status<'w> {
    /// Finished, with this output.
    Done(Value),
    /// Failed at step `.1`.
    Failed(ErrorRecord, String),
    /// Not finished: these calls are ready (none when every unfinished call
    /// has an attempt under way).
    Pending(Vec<Ready<'w>>),
}

/// What a leaf does.
#[derive(Clone, Copy)]
enum Action<'w> {
    Call(&'w Call),
    Subflow(&'w Subflow),
    Sleep(&'w Sleep),
    Emit(&'w Emit),
    Await(&'w Await),
}

/// A ready leaf: where it is, and what its expressions see.
struct Ready<'w> {
    path: String,
    step: &'w Step,
    action: Action<'w>,
    /// The child run the attempt waits for.
    child: Option<String>,
    /// A timer the leaf waited for that is no longer pending (a `sleep`
    /// whose row was removed without its result).
    stale_timer: Option<TimerRef>,
    scope: Scope,
    attempt: u32,
    /// The top-level step it belongs to.
    top: usize,
}

/// The most items a `foreach` takes. Each attempt walks the run from the
/// start, so a loop's cost grows with the square of its length.
const MAX_ITEMS: usize = 10_000;

fn join(prefix: &str, id: &str) -> String {
    if prefix.is_empty() {
        id.to_owned()
    } else {
        format!("{prefix}/{id}")
    }
}

impl Drive {
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
        let undo = Undo {
            run: self.run.clone(),
            leaf: self.results.get(&path).cloned(),
            path: path.clone(),
        };
        record.seq = self.run.step_records;
        self.run.step_records += 1;
        self.run.updated_at = clock.now();

        let mut next = Next::Step;
        if let Some(error) = &record.error
            && retry.retries(record.attempt, &error.code, error.retryable)
        {
            let delay = retry.delay(record.attempt);
            let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
            record.retry_in_ms = Some(delay_ms);
            record.timer = Some(TimerRef {
                id: timer_id(),
                due: Timestamp(clock.now().as_millis().saturating_add(delay_ms)),
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

    /// The fire of a pending timer of this run, as an attempt's result to
    /// commit (a `sleep`'s end, the run's deadline); `None` for a retry
    /// delay, whose fire records nothing.
    pub(super) fn fired(&self, timer: &TimerRecord) -> Option<Finished> {
        let record = timer.fired_record(&self.run.id, 0)?;
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
    pub(super) fn cancelled(&self, clock: &dyn Clock) -> Finished {
        Finished {
            path: CANCEL_PATH.to_owned(),
            record: StepRecord {
                error: Some(ErrorRecord {
                    code: "cancelled".to_owned(),
                    message: "the run was cancelled".to_owned(),
                    retryable: false,
                    details: None,
                }),
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
    pub(super) fn answer(
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

    /// True when every leaf under way waits for a timer (and one does): the
    /// run has nothing to do until one fires. `also` counts as waiting.
    pub(super) fn only_timers(&self, also: Option<&str>) -> bool {
        !self.busy.is_empty()
            && self.busy.iter().all(|path| {
                self.timers.contains_key(path)
                    || self.awaits.contains(path)
                    || Some(path.as_str()) == also
            })
    }

    /// Takes back the attempt `undo` was taken before, whose commit was
    /// refused, so that it can run again.
    pub(super) fn undo(&mut self, undo: Undo) {
        self.run = undo.run;
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
                match outputs {
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

impl Drive {
    /// Walks the whole workflow: its steps, then, if they failed, its
    /// handlers. The flag says a handler took over.
    fn walk<'w>(&self, workflow: &'w Workflow, scope: &mut Scope) -> (Status<'w>, bool) {
        // A cancelled run ends there: no handler runs.
        if let Some(Outcome::Failed(error)) = self
            .results
            .get(CANCEL_PATH)
            .and_then(|leaf| leaf.outcome.as_ref())
        {
            return (Status::Failed(error.clone(), CANCEL_PATH.to_owned()), false);
        }
        let deadline = self
            .results
            .get(DEADLINE_PATH)
            .and_then(|leaf| match &leaf.outcome {
                Some(Outcome::Failed(error)) => Some(error.clone()),
                _ => None,
            });
        let status = match deadline {
            // Past its deadline, the run's steps count as failed, whatever
            // they had reached; a handler may still take over.
            Some(error) => Status::Failed(error, DEADLINE_PATH.to_owned()),
            None => self.walk_steps(&workflow.steps, "", scope, None),
        };
        match status {
            Status::Failed(error, step) if !workflow.catch.is_empty() => {
                match self.handle(&workflow.catch, "catch", &error, &step, scope, 0) {
                    Some(status) => (status, true),
                    None => (Status::Failed(error, step), false),
                }
            }
            status => (status, false),
        }
    }

    /// A sequence: each step in turn, stopping at the first that is not
    /// done. Its output is the last step's.
    fn walk_steps<'w>(
        &self,
        steps: &'w [Step],
        prefix: &str,
        scope: &mut Scope,
        top: Option<usize>,
    ) -> Status<'w> {
        let mut last = Value::Null;
        for (i, step) in steps.iter().enumerate() {
            match self.walk_step(step, prefix, scope, top.unwrap_or(i)) {
                Status::Done(output) => last = output,
                other => return other,
            }
        }
        Status::Done(last)
    }

    fn walk_step<'w>(
        &self,
        step: &'w Step,
        prefix: &str,
        scope: &mut Scope,
        top: usize,
    ) -> Status<'w> {
        let path = join(prefix, &step.id);
        // A call's `if` is evaluated by its attempt, which records it; a
        // block's is evaluated here.
        if !step.is_leaf()
            && let Some(condition) = &step.condition
        {
            match truth(condition, scope, "if") {
                Ok(true) => {}
                Ok(false) => {
                    scope.add_step(&step.id, &json!({ "output": null, "skipped": true }));
                    return Status::Done(Value::Null);
                }
                Err(error) => return Status::Failed(error, step.id.clone()),
            }
        }
        let status = self.walk_kind(step, &path, scope, top);
        self.settle(step, &path, status, scope, top)
    }

    /// What the step itself does, before handlers.
    fn walk_kind<'w>(
        &self,
        step: &'w Step,
        path: &str,
        scope: &mut Scope,
        top: usize,
    ) -> Status<'w> {
        match &step.kind {
            StepKind::Call(call) => self.walk_leaf(step, Action::Call(call), path, scope, top),
            StepKind::Subflow(subflow) => {
                self.walk_leaf(step, Action::Subflow(subflow), path, scope, top)
            }
            StepKind::Sleep(sleep) => self.walk_leaf(step, Action::Sleep(sleep), path, scope, top),
            StepKind::Emit(emit) => self.walk_leaf(step, Action::Emit(emit), path, scope, top),
            StepKind::Await(wait) => self.walk_leaf(step, Action::Await(wait), path, scope, top),
            StepKind::Parallel(branches) => {
                let mut outputs = Map::new();
                let mut ready = Vec::new();
                let mut pending = false;
                for branch in branches {
                    match self.walk_step(branch, path, scope, top) {
                        Status::Done(output) => {
                            outputs.insert(branch.id.clone(), output);
                        }
                        Status::Pending(more) => {
                            pending = true;
                            ready.extend(more);
                        }
                        failed => return failed,
                    }
                }
                if pending {
                    Status::Pending(ready)
                } else {
                    Status::Done(Value::Object(outputs))
                }
            }
            StepKind::Switch(cases) => self.walk_cases(cases, path, scope, top, step),
            StepKind::Foreach {
                items,
                steps,
                concurrency,
            } => match items.eval(scope) {
                Ok(Value::Array(items)) if items.len() > MAX_ITEMS => Status::Failed(
                    ErrorRecord {
                        code: "foreach_limit".to_owned(),
                        message: format!(
                            "`{}` got a list of {} items; the limit is {MAX_ITEMS}",
                            step.id,
                            items.len()
                        ),
                        retryable: false,
                        details: None,
                    },
                    step.id.clone(),
                ),
                Ok(Value::Array(items)) => {
                    // Iterations in list order; at most `concurrency` of
                    // them unfinished, so the window slides as the oldest
                    // finish.
                    let mut outputs = Vec::with_capacity(items.len());
                    let mut ready = Vec::new();
                    let mut open = 0;
                    for (i, item) in items.iter().enumerate() {
                        if open == *concurrency {
                            break;
                        }
                        let mut inner = scope.clone();
                        inner.set_local("item", item);
                        inner.set_local("index", &json!(i));
                        let done =
                            self.walk_steps(steps, &format!("{path}[{i}]"), &mut inner, Some(top));
                        scope.adopt_steps(&inner);
                        match done {
                            Status::Done(output) => outputs.push(output),
                            Status::Pending(more) => {
                                open += 1;
                                ready.extend(more);
                            }
                            failed => return failed,
                        }
                    }
                    if open > 0 {
                        Status::Pending(ready)
                    } else {
                        Status::Done(Value::Array(outputs))
                    }
                }
                Ok(other) => Status::Failed(
                    expression_error(format!("foreach: expected a list, got {other}")),
                    step.id.clone(),
                ),
                Err(e) => Status::Failed(expression_error(e.to_string()), step.id.clone()),
            },
            StepKind::While {
                condition,
                steps,
                max_iterations,
            } => {
                let mut last = Value::Null;
                let mut status = None;
                for i in 0..=*max_iterations {
                    let mut inner = scope.clone();
                    inner.set_local("iteration", &json!(i));
                    match truth(condition, &inner, "while") {
                        Ok(false) => break,
                        Ok(true) if i == *max_iterations => {
                            status = Some(Status::Failed(
                                ErrorRecord {
                                    code: "while_limit".to_owned(),
                                    message: format!(
                                        "`{}` ran its {max_iterations} iterations and its condition still holds",
                                        step.id
                                    ),
                                    retryable: false,
                                    details: None,
                                },
                                step.id.clone(),
                            ));
                            break;
                        }
                        Ok(true) => {}
                        Err(error) => {
                            status = Some(Status::Failed(error, step.id.clone()));
                            break;
                        }
                    }
                    let done =
                        self.walk_steps(steps, &format!("{path}[{i}]"), &mut inner, Some(top));
                    scope.adopt_steps(&inner);
                    match done {
                        Status::Done(output) => last = output,
                        other => {
                            status = Some(other);
                            break;
                        }
                    }
                }
                status.unwrap_or(Status::Done(last))
            }
        }
    }

    /// What a finished step leaves behind: its entry in `steps`, or its
    /// handlers' or `continue_on_error`'s say over a failure.
    fn settle<'w>(
        &self,
        step: &'w Step,
        path: &str,
        status: Status<'w>,
        scope: &mut Scope,
        top: usize,
    ) -> Status<'w> {
        match status {
            Status::Done(output) => {
                if !step.is_leaf() {
                    scope.add_step(&step.id, &json!({ "output": output }));
                }
                Status::Done(output)
            }
            Status::Failed(error, failed) => {
                if let Some(handled) = self.handle(
                    &step.catch,
                    &format!("{path}/catch"),
                    &error,
                    &failed,
                    scope,
                    top,
                ) {
                    if let Status::Done(output) = &handled {
                        scope.add_step(&step.id, &json!({ "output": output, "error": error }));
                    }
                    return handled;
                }
                if step.continue_on_error {
                    scope.add_step(&step.id, &json!({ "output": null, "error": error }));
                    return Status::Done(Value::Null);
                }
                Status::Failed(error, failed)
            }
            pending => pending,
        }
    }

    /// Runs the first handler whose `if` matches `error`; `None` if none
    /// does.
    fn handle<'w>(
        &self,
        handlers: &'w [Case],
        prefix: &str,
        error: &ErrorRecord,
        failed: &str,
        scope: &mut Scope,
        top: usize,
    ) -> Option<Status<'w>> {
        if handlers.is_empty() {
            return None;
        }
        let mut inner = scope.clone();
        let mut seen = serde_json::to_value(error).unwrap_or(Value::Null);
        if let Value::Object(fields) = &mut seen {
            fields.insert("step".to_owned(), json!(failed));
        }
        inner.set_local("error", &seen);
        for case in handlers {
            let matches = match &case.condition {
                None => Ok(true),
                Some(condition) => truth(condition, &inner, "catch if"),
            };
            match matches {
                Ok(true) => {
                    let status = self.walk_steps(&case.steps, prefix, &mut inner, Some(top));
                    scope.adopt_steps(&inner);
                    return Some(status);
                }
                Ok(false) => {}
                Err(e) => return Some(Status::Failed(e, failed.to_owned())),
            }
        }
        None
    }

    fn walk_cases<'w>(
        &self,
        cases: &'w [Case],
        path: &str,
        scope: &mut Scope,
        top: usize,
        step: &'w Step,
    ) -> Status<'w> {
        for case in cases {
            let matches = match &case.condition {
                None => Ok(true),
                Some(condition) => truth(condition, scope, "switch if"),
            };
            match matches {
                Ok(true) => return self.walk_steps(&case.steps, path, scope, Some(top)),
                Ok(false) => {}
                Err(error) => return Status::Failed(error, step.id.clone()),
            }
        }
        Status::Done(Value::Null)
    }

    /// A leaf: done, failed, or ready for its next attempt (or for its wait
    /// on a child run).
    fn walk_leaf<'w>(
        &self,
        step: &'w Step,
        action: Action<'w>,
        path: &str,
        scope: &mut Scope,
        top: usize,
    ) -> Status<'w> {
        let leaf = self.results.get(path);
        if let Some(entry) = leaf.and_then(|l| l.entry.as_ref()) {
            scope.add_entry(&step.id, entry);
        }
        match leaf.and_then(|l| l.outcome.as_ref()) {
            Some(Outcome::Output(output)) => Status::Done(output.clone()),
            Some(Outcome::Skipped) => Status::Done(Value::Null),
            Some(Outcome::Failed(error)) => Status::Failed(error.clone(), step.id.clone()),
            None if self.busy.contains(path) => Status::Pending(Vec::new()),
            None => {
                let child = leaf.and_then(|l| l.child.clone());
                let attempts = leaf.map_or(0, |l| l.attempts);
                Status::Pending(vec![Ready {
                    path: path.to_owned(),
                    step,
                    action,
                    // A wait belongs to the attempt that started the child.
                    attempt: if child.is_some() {
                        attempts
                    } else {
                        attempts + 1
                    },
                    child,
                    stale_timer: leaf.and_then(|l| l.timer),
                    scope: scope.clone(),
                    top,
                }])
            }
        }
    }

    /// One attempt of a ready call: its condition and input are evaluated
    /// here; the call itself is made by [`Attempt::run`].
    fn prepare(&self, ready: &Ready<'_>, clock: &dyn Clock) -> Attempt {
        let run = &self.run;
        let step = ready.step;
        let mut attempt = Attempt {
            path: ready.path.clone(),
            record: StepRecord {
                run_id: run.id.clone(),
                seq: 0,
                index: u32::try_from(ready.top).unwrap_or(u32::MAX),
                path: ready.path.clone(),
                step_id: step.id.clone(),
                attempt: ready.attempt,
                input: Value::Null,
                started_at: clock.now(),
                duration_us: 0,
                output: None,
                error: None,
                skipped: false,
                retry_in_ms: None,
                kv_writes: Default::default(),
                logs: Vec::new(),
                child: None,
                timer: None,
                awaiting: false,
                messages: Vec::new(),
            },
            retry: step.retry.clone(),
            call: None,
            emitted: Vec::new(),
        };
        if let Some(child) = &ready.child {
            attempt.call = Some(Invocation::Await(child.clone()));
            return attempt;
        }
        let record = &mut attempt.record;
        if let Some(condition) = &step.condition {
            match truth(condition, &ready.scope, "if") {
                Ok(true) => {}
                Ok(false) => {
                    record.skipped = true;
                    return attempt;
                }
                Err(error) => {
                    record.error = Some(error);
                    return attempt;
                }
            }
        }
        let call = match ready.action {
            Action::Call(call) => call,
            Action::Subflow(subflow) => {
                self.prepare_spawn(subflow, ready, &mut attempt);
                return attempt;
            }
            Action::Sleep(sleep) => {
                self.prepare_sleep(sleep, ready, &mut attempt, clock);
                return attempt;
            }
            Action::Emit(emit) => {
                match emit.with.eval(&ready.scope) {
                    Ok(payload) => {
                        let id = uuid::Uuid::now_v7().to_string();
                        record.output = Some(json!({ "message": id, "channel": emit.channel }));
                        record.messages = vec![id.clone()];
                        record.input = payload.clone();
                        attempt.emitted.push(Emission {
                            id,
                            channel: emit.channel.clone(),
                            payload,
                        });
                    }
                    Err(e) => record.error = Some(expression_error(e.to_string())),
                }
                return attempt;
            }
            Action::Await(wait) => {
                match wait.with.eval(&ready.scope) {
                    Ok(input) => {
                        record.input = input;
                        record.awaiting = true;
                        record.timer = wait.timeout.map(|timeout| TimerRef {
                            id: timer_id(),
                            due: Timestamp(clock.now().as_millis().saturating_add(
                                u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                            )),
                            kind: TimerKind::Await,
                        });
                    }
                    Err(e) => record.error = Some(expression_error(e.to_string())),
                }
                return attempt;
            }
        };
        let record = &mut attempt.record;
        let Some(plugin) = self.plugins.get(&step.id) else {
            record.error = Some(ErrorRecord {
                code: "internal".to_owned(),
                message: format!("no plugin is pinned for step `{}`", step.id),
                retryable: false,
                details: None,
            });
            return attempt;
        };
        let input = match call.with.eval(&ready.scope) {
            Ok(input) => input,
            Err(e) => {
                record.error = Some(expression_error(e.to_string()));
                return attempt;
            }
        };
        if let Err(problems) = plugin.check_input(&input) {
            record.error = Some(ErrorRecord {
                code: "invalid_input".to_owned(),
                message: format!(
                    "the input does not match the input schema of plugin `{}`: {}",
                    plugin.meta().name,
                    problems.join("; ")
                ),
                retryable: false,
                details: Some(json!({ "problems": problems })),
            });
            record.input = input;
            return attempt;
        }
        let context = StepContext {
            tenant: DEFAULT_TENANT.to_owned(),
            workflow: run.workflow.clone(),
            run_id: run.id.clone(),
            step_id: step.id.clone(),
            attempt: ready.attempt,
            idempotency_key: format!("{}:{}", run.id, ready.path),
        };
        let options = CallOptions {
            timeout: call.timeout,
            memory_limit: call.memory_limit,
            kv: Some(self.kv.clone()),
            cancel: Some(Arc::clone(&self.cancel)),
        };
        attempt.call = Some(Invocation::Plugin {
            plugin: plugin.clone(),
            context,
            input: input.to_string(),
            options,
        });
        attempt.record.input = input;
        attempt
    }

    /// The due time of a `sleep`: the attempt records it and sets its
    /// timer; the step ends when the timer fires.
    fn prepare_sleep(
        &self,
        sleep: &Sleep,
        ready: &Ready<'_>,
        attempt: &mut Attempt,
        clock: &dyn Clock,
    ) {
        let record = &mut attempt.record;
        if let Some(timer) = ready.stale_timer {
            record.output = Some(json!({ "slept_until": timer.due.to_string() }));
            return;
        }
        let now = clock.now();
        let due = match sleep {
            Sleep::For(template) => template.eval(&ready.scope).map_err(|e| e.to_string()).and_then(|value| match &value {
                Value::String(text) => humantime::parse_duration(text)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .map_err(|e| format!("sleep: `{text}` is not a duration such as `90s`: {e}")),
                Value::Number(n) => n
                    .as_u64()
                    .ok_or_else(|| format!("sleep: {n} is not a whole number of milliseconds")),
                other => Err(format!("sleep: expected a duration, got {other}")),
            })
            .map(|ms| Timestamp(now.as_millis().saturating_add(ms))),
            Sleep::Until(template) => template.eval(&ready.scope).map_err(|e| e.to_string()).and_then(|value| match &value {
                Value::String(text) => humantime::parse_rfc3339_weak(text)
                    .map(|t| {
                        Timestamp(
                            t.duration_since(std::time::UNIX_EPOCH)
                                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                        )
                    })
                    .map_err(|e| format!("sleep_until: `{text}` is not a time such as `2026-12-01T09:00:00Z`: {e}")),
                Value::Number(n) => n
                    .as_u64()
                    .map(Timestamp)
                    .ok_or_else(|| format!("sleep_until: {n} is not milliseconds since the epoch")),
                other => Err(format!("sleep_until: expected a time, got {other}")),
            }),
        };
        match due {
            Ok(due) => {
                record.input = json!({ "until": due.to_string() });
                record.timer = Some(TimerRef {
                    id: timer_id(),
                    due,
                    kind: TimerKind::Sleep,
                });
            }
            Err(message) => record.error = Some(expression_error(message)),
        }
    }

    /// The input and the parent link of an attempt that starts a child.
    fn prepare_spawn(&self, subflow: &Subflow, ready: &Ready<'_>, attempt: &mut Attempt) {
        let record = &mut attempt.record;
        let input = match subflow.with.eval(&ready.scope) {
            Ok(input) => input,
            Err(e) => {
                record.error = Some(expression_error(e.to_string()));
                return;
            }
        };
        record.input = input.clone();
        let depth = self.run.parent.as_ref().map_or(0, |p| p.depth) + 1;
        if depth > MAX_DEPTH {
            record.error = Some(ErrorRecord {
                code: "subflow_depth".to_owned(),
                message: format!(
                    "starting `{}` would nest child runs {depth} deep; the limit is {MAX_DEPTH}",
                    subflow.workflow
                ),
                retryable: false,
                details: None,
            });
            return;
        }
        attempt.call = Some(Invocation::Spawn {
            launcher: Arc::clone(&self.launcher),
            workflow: subflow.workflow.clone(),
            input,
            parent: ParentLink {
                run: self.run.id.clone(),
                path: ready.path.clone(),
                depth,
            },
        });
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
    pub(super) fn record(&self, run: &str, path: &str, leaf: &Leaf, now: Timestamp) -> StepRecord {
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

/// A new timer's id: random, so ids from several processes sharing a
/// store do not collide.
pub(super) fn timer_id() -> u64 {
    // The low half of a UUIDv7 is random.
    uuid::Uuid::now_v7().as_u64_pair().1
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
    ErrorRecord {
        code: "expression".to_owned(),
        message,
        retryable: false,
        details: None,
    }
}

fn error_record(error: &CallError) -> ErrorRecord {
    let details = match error {
        CallError::Step { details, .. } => details.clone(),
        _ => None,
    };
    let message = match error {
        CallError::Step { message, .. } => message.clone(),
        other => other.to_string(),
    };
    ErrorRecord {
        code: error.code().to_owned(),
        message,
        retryable: error.is_retryable(),
        details,
    }
}
