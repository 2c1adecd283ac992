//! One run's state machine.
//!
//! A run's state is the set of committed leaf results (one per plugin call,
//! by path, such as `fan-out/ship` or `each[3]/fetch`). To find what to do
//! next, [`Drive`] walks the workflow's steps in document order against
//! those results: control flow is native and its expressions are pure, so
//! the walk is deterministic, and resuming a run is the same walk over the
//! results read back from the store. The first call that has no final result
//! is the next attempt to run.
//!
//! Leaves run one at a time per run: `parallel` branches and `foreach`
//! iterations run one after another (many runs still run at once).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::clock::Clock;
use crate::model::{Call, Case, Scope, Step, StepEntry, StepKind, Template, Workflow};
use crate::runtime::{CallError, CallOptions, KvAccess, KvEffects, Plugin, StepContext};
use crate::store::{ErrorRecord, RunError, RunRecord, RunState, StepRecord};

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
        self.entry = match &self.outcome {
            Some(Outcome::Output(output)) => Some(StepEntry::new(&json!({ "output": output }))),
            Some(Outcome::Skipped) => {
                Some(StepEntry::new(&json!({ "output": null, "skipped": true })))
            }
            _ => None,
        };
    }
}

/// What happens after an attempt is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Run the next attempt.
    Step,
    /// Run the next attempt after this delay.
    RetryAfter(Duration),
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
    /// This call is the next attempt.
    Ready(Ready<'w>),
}

/// The next attempt: a call, where it is, and what its expressions see.
struct Ready<'w> {
    path: String,
    step: &'w Step,
    call: &'w Call,
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

    /// Runs the next attempt and moves the run's record to its next state.
    /// Nothing is stored: the caller commits the returned record (if any; a
    /// run can also end on an expression alone) with the run. Never fails:
    /// every problem is in the records.
    pub(super) fn attempt(
        &mut self,
        clock: &dyn Clock,
        observer: &mut dyn Observer,
    ) -> (Option<StepRecord>, Next, Option<KvEffects>, Undo) {
        let workflow = Arc::clone(&self.workflow);
        let mut scope = self.scope();
        let (status, handled) = self.walk(&workflow, &mut scope);
        let Status::Ready(ready) = status else {
            let undo = Undo {
                run: self.run.clone(),
                path: String::new(),
                leaf: None,
            };
            self.conclude(status, handled, &scope, clock);
            return (None, Next::Done, None, undo);
        };
        let undo = Undo {
            run: self.run.clone(),
            path: ready.path.clone(),
            leaf: self.results.get(&ready.path).cloned(),
        };
        observer.step_started(ready.step, ready.top, workflow.steps.len(), ready.attempt);
        let (mut record, kv) = self.call(&ready, clock);
        self.run.step_records += 1;
        self.run.updated_at = clock.now();

        let mut next = Next::Step;
        if let Some(error) = &record.error
            && ready
                .step
                .retry
                .retries(ready.attempt, &error.code, error.retryable)
        {
            let delay = ready.step.retry.delay(ready.attempt);
            record.retry_in_ms = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
            next = Next::RetryAfter(delay);
        }
        self.results
            .entry(ready.path.clone())
            .or_default()
            .apply(&record);

        // Walk again with the result, to know the run's next state.
        let mut scope = self.scope();
        let (status, handled) = self.walk(&workflow, &mut scope);
        match status {
            Status::Ready(after) => {
                self.run.next_step = u32::try_from(after.top).unwrap_or(u32::MAX);
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
        (Some(record), next, kv, undo)
    }

    /// Takes back the attempt `undo` was taken before, whose commit was
    /// refused, so that it can run again.
    pub(super) fn undo(&mut self, undo: Undo) {
        self.run = undo.run;
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
            Status::Ready(_) => {}
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
        match self.walk_steps(&workflow.steps, "", scope, None) {
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
        if step.call().is_none()
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
            StepKind::Call(call) => self.walk_call(step, call, path, scope, top),
            StepKind::Parallel(branches) => {
                let mut outputs = Map::new();
                let mut status = None;
                for branch in branches {
                    match self.walk_step(branch, path, scope, top) {
                        Status::Done(output) => {
                            outputs.insert(branch.id.clone(), output);
                        }
                        other => {
                            status = Some(other);
                            break;
                        }
                    }
                }
                status.unwrap_or(Status::Done(Value::Object(outputs)))
            }
            StepKind::Switch(cases) => self.walk_cases(cases, path, scope, top, step),
            StepKind::Foreach { items, steps } => match items.eval(scope) {
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
                    let mut outputs = Vec::with_capacity(items.len());
                    let mut status = None;
                    for (i, item) in items.iter().enumerate() {
                        let mut inner = scope.clone();
                        inner.set_local("item", item);
                        inner.set_local("index", &json!(i));
                        let done =
                            self.walk_steps(steps, &format!("{path}[{i}]"), &mut inner, Some(top));
                        scope.adopt_steps(&inner);
                        match done {
                            Status::Done(output) => outputs.push(output),
                            other => {
                                status = Some(other);
                                break;
                            }
                        }
                    }
                    status.unwrap_or(Status::Done(Value::Array(outputs)))
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
                if step.call().is_none() {
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
            ready => ready,
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

    /// A call: done, failed, or the next attempt.
    fn walk_call<'w>(
        &self,
        step: &'w Step,
        call: &'w Call,
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
            None => Status::Ready(Ready {
                path: path.to_owned(),
                step,
                call,
                scope: scope.clone(),
                attempt: leaf.map_or(0, |l| l.attempts) + 1,
                top,
            }),
        }
    }

    /// The condition, the input and the call of one attempt.
    fn call(&self, ready: &Ready<'_>, clock: &dyn Clock) -> (StepRecord, Option<KvEffects>) {
        let run = &self.run;
        let step = ready.step;
        let timer = Instant::now();
        let mut record = StepRecord {
            run_id: run.id.clone(),
            seq: run.step_records,
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
        };
        if let Some(condition) = &step.condition {
            match truth(condition, &ready.scope, "if") {
                Ok(true) => {}
                Ok(false) => {
                    record.skipped = true;
                    return (record, None);
                }
                Err(error) => {
                    record.error = Some(error);
                    return (record, None);
                }
            }
        }
        let Some(plugin) = self.plugins.get(&step.id) else {
            record.error = Some(ErrorRecord {
                code: "internal".to_owned(),
                message: format!("no plugin is pinned for step `{}`", step.id),
                retryable: false,
                details: None,
            });
            return (record, None);
        };
        let mut kv = None;
        match ready.call.with.eval(&ready.scope) {
            Err(e) => record.error = Some(expression_error(e.to_string())),
            Ok(input) => {
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
                    return (record, None);
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
                    timeout: ready.call.timeout,
                    memory_limit: ready.call.memory_limit,
                    kv: Some(self.kv.clone()),
                };
                let outcome = plugin.call(&context, &input.to_string(), &options);
                record.input = input;
                record.logs = outcome.logs;
                kv = Some(outcome.kv);
                match outcome.result {
                    Ok(output) => record.output = Some(output),
                    Err(error) => record.error = Some(error_record(&error)),
                }
            }
        }
        record.duration_us = u64::try_from(timer.elapsed().as_micros()).unwrap_or(u64::MAX);
        (record, kv)
    }
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
