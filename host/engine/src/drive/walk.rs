//! The walk: which leaves are ready, from the committed records, or how
//! the run ended.

use serde_json::{Map, Value, json};

use weft_model::{Await, Call, Case, Emit, Scope, Sleep, Step, StepKind, Subflow, Workflow};
use weft_store::{CANCEL_PATH, DEADLINE_PATH, ErrorRecord, TimerRef};

use super::leaf::Outcome;
use super::{Drive, expression_error, truth};

/// Where a walk stopped.
pub(super) enum Status<'w> {
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
pub(super) enum Action<'w> {
    Call(&'w Call),
    Subflow(&'w Subflow),
    Sleep(&'w Sleep),
    Emit(&'w Emit),
    Await(&'w Await),
}

/// A ready leaf: where it is, and what its expressions see.
pub(super) struct Ready<'w> {
    pub(super) path: String,
    pub(super) step: &'w Step,
    pub(super) action: Action<'w>,
    /// The child run the attempt waits for.
    pub(super) child: Option<String>,
    /// A timer the leaf waited for that is no longer pending (a `sleep`
    /// whose row was removed without its result).
    pub(super) stale_timer: Option<TimerRef>,
    pub(super) scope: Scope,
    pub(super) attempt: u32,
    /// The top-level step it belongs to.
    pub(super) top: usize,
}

/// The top-level steps a walk found done, with the scope and the output
/// they leave: the next walk starts after them instead of walking them
/// again. Without it a run of S steps walked S steps for each of its S
/// results, and the walk dominated runs of a hundred steps (`weft bench
/// --curve`). A walk is a function of the leaf results, so a step found
/// done stays done while no result under it changes: the cursor is
/// forgotten whenever one might ([`Drive::passed`], an undo, a restore).
pub(super) struct Cursor {
    /// Steps `0..done` are done.
    done: usize,
    /// The scope after them.
    scope: Scope,
    /// The last one's output.
    last: Value,
}

#[cfg(feature = "sim")]
thread_local! {
    /// When set (by the simulator, on the thread that steps its engines),
    /// every walk on this thread that starts from a cursor is checked
    /// against a walk from the start, and a difference is counted.
    static VERIFY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static MISMATCHES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Checks every walk on this thread from a cursor against one from the
/// start, from now on (the simulator's check of the cursor); [`walk_mismatches`] counts the walks that differed,
/// from 0 again.
#[cfg(feature = "sim")]
pub fn verify_walks() {
    VERIFY.set(true);
    MISMATCHES.set(0);
}

/// How many walks on this thread from a cursor differed from a walk from
/// the start, since [`verify_walks`].
#[cfg(feature = "sim")]
pub fn walk_mismatches() -> usize {
    MISMATCHES.get()
}

/// What a walk found, for comparing two walks.
#[cfg(feature = "sim")]
fn summary(status: &Status<'_>) -> String {
    match status {
        Status::Done(output) => format!("done {output}"),
        Status::Failed(error, step) => format!("failed at {step}: {}", error.code),
        Status::Pending(ready) => {
            let paths: Vec<&str> = ready.iter().map(|r| r.path.as_str()).collect();
            format!("pending {paths:?}")
        }
    }
}

/// The most items a `foreach` takes. Each attempt walks a loop from its
/// start (the cursor passes only whole top-level steps), so a loop's cost
/// grows with the square of its length.
const MAX_ITEMS: usize = 10_000;

fn join(prefix: &str, id: &str) -> String {
    if prefix.is_empty() {
        id.to_owned()
    } else {
        format!("{prefix}/{id}")
    }
}

impl Drive {
    /// Walks the whole workflow: its steps, then, if they failed, its
    /// handlers. The flag says a handler took over.
    pub(super) fn walk<'w>(
        &mut self,
        workflow: &'w Workflow,
        scope: &mut Scope,
    ) -> (Status<'w>, bool) {
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
            None => {
                let (status, reached) = self.walk_top(&workflow.steps, scope);
                #[cfg(feature = "sim")]
                self.verify(&workflow.steps, &status);
                if let Some(reached) = reached {
                    self.cursor = Some(reached);
                }
                status
            }
        };
        // Outputs that break the workflow's `outputs_schema` fail the run
        // with `invalid_outputs`, which its handlers see like a step's
        // failure.
        let status = match status {
            Status::Done(last) => match check_outputs(workflow, last.clone(), scope) {
                Some(error) => Status::Failed(error, OUTPUTS_PATH.to_owned()),
                None => Status::Done(last),
            },
            status => status,
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

    /// The simulator's check of the cursor, when [`verify_walks`] is on:
    /// a walk from the cursor that found `status` must find what a walk
    /// from the start finds; a difference is counted and logged.
    #[cfg(feature = "sim")]
    fn verify(&self, steps: &[Step], status: &Status<'_>) {
        if !VERIFY.get() || self.cursor.is_none() {
            return;
        }
        let mut fresh = self.scope();
        let full = self.walk_steps(steps, "", &mut fresh, None);
        if summary(&full) != summary(status) {
            MISMATCHES.set(MISMATCHES.get() + 1);
            tracing::error!(
                run = %self.run.id,
                from_cursor = %summary(status),
                from_start = %summary(&full),
                "a walk from the cursor differed from one from the start"
            );
        }
    }

    /// The workflow's own steps, as [`Drive::walk_steps`], starting after
    /// the steps the cursor passed; with the cursor past the steps this
    /// walk found done, if it found any.
    fn walk_top<'w>(&self, steps: &'w [Step], scope: &mut Scope) -> (Status<'w>, Option<Cursor>) {
        let (start, mut last) = match &self.cursor {
            Some(cursor) => {
                scope.clone_from(&cursor.scope);
                (cursor.done, cursor.last.clone())
            }
            None => (0, Value::Null),
        };
        let mut reached = None;
        for (i, step) in steps.iter().enumerate().skip(start) {
            if i > start {
                reached = Some(Cursor {
                    done: i,
                    scope: scope.clone(),
                    last: last.clone(),
                });
            }
            match self.walk_step(step, "", scope, i) {
                Status::Done(output) => last = output,
                other => return (other, reached),
            }
        }
        let reached = (start < steps.len()).then(|| Cursor {
            done: steps.len(),
            scope: scope.clone(),
            last: last.clone(),
        });
        (Status::Done(last), reached)
    }

    /// The result of the leaf at `path` is about to change: the cursor is
    /// forgotten if the leaf lies in a step it passed (or in none of the
    /// top-level steps, to be safe).
    pub(super) fn passed(&mut self, path: &str) {
        let Some(cursor) = &self.cursor else {
            return;
        };
        let head = path.split('/').next().unwrap_or(path);
        let id = head.split('[').next().unwrap_or(head);
        match self.workflow.steps.iter().position(|step| step.id == id) {
            Some(top) if top >= cursor.done => {}
            _ if weft_core::mutation::on("cursor-kept") => {}
            _ => self.cursor = None,
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
            StepKind::Parallel(branches) => self.walk_parallel(branches, path, scope, top),
            StepKind::Switch(cases) => self.walk_cases(cases, path, scope, top, step),
            StepKind::Foreach {
                items,
                steps,
                concurrency,
            } => match items.eval(scope) {
                Ok(Value::Array(items)) if items.len() > MAX_ITEMS => {
                    Status::Failed(foreach_limit(step, items.len()), step.id.clone())
                }
                Ok(Value::Array(items)) => {
                    self.walk_foreach(&items, steps, *concurrency, path, scope, top)
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
                                while_limit(step, *max_iterations),
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

    /// A `parallel`: every branch, done when all of them are.
    fn walk_parallel<'w>(
        &self,
        branches: &'w [Step],
        path: &str,
        scope: &mut Scope,
        top: usize,
    ) -> Status<'w> {
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

    /// A `foreach` over `items`, the list its expression gave.
    fn walk_foreach<'w>(
        &self,
        items: &[Value],
        steps: &'w [Step],
        concurrency: u32,
        path: &str,
        scope: &mut Scope,
        top: usize,
    ) -> Status<'w> {
        // Iterations in list order; at most `concurrency` of
        // them unfinished, so the window slides as the oldest
        // finish.
        let mut outputs = Vec::with_capacity(items.len());
        let mut ready = Vec::new();
        let mut open = 0;
        for (i, item) in items.iter().enumerate() {
            if open == concurrency {
                break;
            }
            let mut inner = scope.clone();
            inner.set_local("item", item);
            inner.set_local("index", &json!(i));
            let done = self.walk_steps(steps, &format!("{path}[{i}]"), &mut inner, Some(top));
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
}

/// The error of a `foreach` whose list has more than [`MAX_ITEMS`] items.
fn foreach_limit(step: &Step, items: usize) -> ErrorRecord {
    ErrorRecord::fatal(
        "foreach_limit",
        format!(
            "`{}` got a list of {items} items; the limit is {MAX_ITEMS}",
            step.id
        ),
    )
}

/// The error of a `while` whose condition still holds after its
/// `max_iterations` iterations.
fn while_limit(step: &Step, max_iterations: u32) -> ErrorRecord {
    ErrorRecord::fatal(
        "while_limit",
        format!(
            "`{}` ran its {max_iterations} iterations and its condition still holds",
            step.id
        ),
    )
}

/// Where a run's failure to match its `outputs_schema` is said to be: the
/// run's outputs, not a step.
pub(super) const OUTPUTS_PATH: &str = "@outputs";

/// The `invalid_outputs` error of a run whose outputs (`outputs:`
/// evaluated, or the last step's output) break its `outputs_schema`;
/// `None` when they match, or when there is no schema. An `outputs:`
/// expression that fails is left to [`Drive::conclude`].
pub(super) fn check_outputs(
    workflow: &Workflow,
    last: Value,
    scope: &Scope,
) -> Option<ErrorRecord> {
    let schema = workflow.outputs_schema.as_ref()?;
    let outputs = match &workflow.outputs {
        Some(template) => template.eval(scope).ok()?,
        None => last,
    };
    invalid_outputs(schema, &outputs)
}

/// The `invalid_outputs` error for `outputs` that break `schema`.
pub(super) fn invalid_outputs(
    schema: &weft_core::InputSchema,
    outputs: &Value,
) -> Option<ErrorRecord> {
    let problems = schema.check(outputs).err()?;
    let mut error = ErrorRecord::fatal(
        "invalid_outputs",
        format!(
            "the run's outputs do not match the workflow's `outputs_schema`: {}",
            problems.join("; ")
        ),
    );
    error.details = Some(json!({ "problems": problems }));
    Some(error)
}
