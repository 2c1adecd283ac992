//! One run's state machine: what its next step attempt is, and what follows
//! from its outcome.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::clock::Clock;
use crate::model::{Scope, Workflow};
use crate::runtime::{CallError, CallOptions, KvAccess, KvEffects, Plugin, StepContext};
use crate::store::{ErrorRecord, RunError, RunRecord, RunState, StepRecord};

use super::DEFAULT_TENANT;

/// A run being driven: its record, its definition, its plugins (one per
/// step) and what its expressions see.
pub(super) struct Drive {
    pub(super) run: RunRecord,
    pub(super) workflow: Arc<Workflow>,
    pub(super) plugins: Vec<Plugin>,
    pub(super) scope: Scope,
    /// The attempt the step at `run.next_step` is on.
    pub(super) attempt: u32,
    /// The workflow's key-value space.
    pub(super) kv: KvAccess,
}

/// The state of a [`Drive`] before an attempt, to go back to when the
/// attempt's commit is refused.
pub(super) struct Undo {
    run: RunRecord,
    attempt: u32,
    step_id: String,
}

/// What happens after an attempt is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Run the next step (or the same step's next attempt is not due).
    Step,
    /// Try the same step again after this delay.
    RetryAfter(Duration),
    /// The run reached a terminal state.
    Done,
}

impl Drive {
    /// Runs one attempt of the step at `run.next_step` and moves the run's
    /// record to its next state. Nothing is stored: the caller commits the
    /// returned record with the run. Never fails: every problem is in the
    /// record.
    ///
    /// Also returns the attempt's key-value effects, to commit with the
    /// record, and what [`Drive::undo`] needs to take the attempt back.
    pub(super) fn attempt(
        &mut self,
        clock: &dyn Clock,
    ) -> (StepRecord, Next, Option<KvEffects>, Undo) {
        let index = self.run.next_step as usize;
        let workflow = Arc::clone(&self.workflow);
        let step = &workflow.steps[index];
        let total = workflow.steps.len();
        let undo = Undo {
            run: self.run.clone(),
            attempt: self.attempt,
            step_id: step.id.clone(),
        };
        let (mut record, kv) = self.call(index, clock);
        self.run.step_records += 1;
        self.run.updated_at = clock.now();

        let mut next = Next::Step;
        let advance = match &record.error {
            None => true,
            Some(error)
                if step
                    .retry
                    .retries(self.attempt, &error.code, error.retryable) =>
            {
                let delay = step.retry.delay(self.attempt);
                record.retry_in_ms = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
                next = Next::RetryAfter(delay);
                self.attempt += 1;
                false
            }
            Some(_) if step.continue_on_error => true,
            Some(error) => {
                self.run.state = RunState::Failed;
                self.run.error = Some(RunError {
                    step: Some(step.id.clone()),
                    error: error.clone(),
                });
                false
            }
        };
        if advance {
            let entry = scope_entry(&record);
            self.scope.add_step(&step.id, &entry);
            self.run.next_step = u32::try_from(index + 1).unwrap_or(u32::MAX);
            self.attempt = 1;
            if index + 1 == total {
                let last_output = entry.get("output").cloned().unwrap_or(Value::Null);
                finish(&mut self.run, &workflow, &self.scope, &last_output);
            }
        }
        if self.run.state.is_terminal() {
            next = Next::Done;
        }
        // Only a successful attempt's writes take effect.
        let kv = kv.filter(|_| record.output.is_some());
        if let Some(kv) = &kv {
            record.kv_writes = kv.writes.clone();
        }
        (record, next, kv, undo)
    }

    /// Takes back the attempt `undo` was taken before, whose commit was
    /// refused, so that it can run again.
    pub(super) fn undo(&mut self, undo: Undo) {
        self.run = undo.run;
        self.attempt = undo.attempt;
        self.scope.remove_step(&undo.step_id);
    }

    /// The condition, the input and the call of one attempt.
    fn call(&self, index: usize, clock: &dyn Clock) -> (StepRecord, Option<KvEffects>) {
        let run = &self.run;
        let step = &self.workflow.steps[index];
        let timer = Instant::now();
        let mut record = StepRecord {
            run_id: run.id.clone(),
            seq: run.step_records,
            index: u32::try_from(index).unwrap_or(u32::MAX),
            step_id: step.id.clone(),
            attempt: self.attempt,
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
            match condition.eval(&self.scope) {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => {
                    record.skipped = true;
                    return (record, None);
                }
                Ok(other) => {
                    record.error = Some(expression_error(format!(
                        "if: expected true or false, got {other}"
                    )));
                    return (record, None);
                }
                Err(e) => {
                    record.error = Some(expression_error(e.to_string()));
                    return (record, None);
                }
            }
        }
        let mut kv = None;
        match step.with.eval(&self.scope) {
            Err(e) => record.error = Some(expression_error(e.to_string())),
            Ok(input) => {
                if let Err(problems) = self.plugins[index].check_input(&input) {
                    record.error = Some(ErrorRecord {
                        code: "invalid_input".to_owned(),
                        message: format!(
                            "the input does not match the input schema of plugin `{}`: {}",
                            self.plugins[index].meta().name,
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
                    attempt: self.attempt,
                    idempotency_key: format!("{}:{}", run.id, step.id),
                };
                let options = CallOptions {
                    timeout: step.timeout,
                    memory_limit: step.memory_limit,
                    kv: Some(self.kv.clone()),
                };
                let outcome = self.plugins[index].call(&context, &input.to_string(), &options);
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

/// What later expressions see of a finished step as `steps.<id>`.
pub(super) fn scope_entry(record: &StepRecord) -> Value {
    if record.skipped {
        return json!({ "output": null, "skipped": true });
    }
    match (&record.output, &record.error) {
        (Some(output), _) => json!({ "output": output }),
        (None, Some(error)) => json!({ "output": null, "error": error }),
        (None, None) => json!({ "output": null }),
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

/// Evaluates the run's outputs (the last step's output when the workflow
/// declares none) and sets its terminal state.
fn finish(run: &mut RunRecord, workflow: &Workflow, scope: &Scope, last_output: &Value) {
    let outputs = match &workflow.outputs {
        None => Ok(last_output.clone()),
        Some(template) => template.eval(scope),
    };
    match outputs {
        Ok(outputs) => {
            run.state = RunState::Succeeded;
            run.outputs = Some(outputs);
        }
        Err(e) => {
            run.state = RunState::Failed;
            run.error = Some(RunError {
                step: None,
                error: expression_error(e.to_string()),
            });
        }
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
