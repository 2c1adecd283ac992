//! Runs workflows: one state machine per run, one commit per step.
//!
//! [`Engine::run`] checks the input, resolves and pins every plugin, records
//! the run, then walks its steps in order. After each step it commits, in one
//! transaction, the step's record (input, output or error, logs, timing) and
//! the run's next state; the last step's commit also carries the run's
//! outputs and terminal state. A crash loses at most the step in flight,
//! whose run stays `running` with `next_step` pointing at it.
//!
//! A failed step is data, not an `Err`: the run ends `failed` and its record
//! says which step failed and why. `Err` means the run could not start, or
//! the store failed.

mod error;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::clock::{Clock, Timestamp};
use crate::model::{Scope, Step, Workflow};
use crate::plugins::PluginDir;
use crate::runtime::{CallError, Plugin, StepContext};
use crate::store::{ErrorRecord, PinnedPlugin, RunError, RunRecord, RunState, StepRecord, Store};

pub use error::StartError;

/// The tenant of runs started without one.
pub const DEFAULT_TENANT: &str = "default";

/// Hears about a run's progress, for display. Every method has an empty
/// default.
pub trait Observer {
    /// The run was recorded and is about to run its first step.
    fn run_created(&mut self, _run: &RunRecord) {}
    /// Step `index` (of `total`) is about to run.
    fn step_started(&mut self, _step: &Step, _index: usize, _total: usize) {}
    /// The step's result was committed.
    fn step_finished(&mut self, _step: &Step, _record: &StepRecord) {}
}

/// An [`Observer`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Observer for Quiet {}

/// Runs workflows against a store and a directory of plugins.
#[derive(Debug)]
pub struct Engine {
    store: Arc<dyn Store>,
    plugins: PluginDir,
    clock: Arc<dyn Clock>,
}

impl Engine {
    /// An engine over `store`, running plugins from `plugins`, reading time
    /// from `clock`.
    pub fn new(store: Arc<dyn Store>, plugins: PluginDir, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            plugins,
            clock,
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Runs `workflow` on `input` to the end. Blocking.
    ///
    /// Before anything is stored, the input is checked against the
    /// workflow's schema and every step's plugin is resolved; a problem there
    /// is an `Err` and leaves no trace. From then on the returned record
    /// tells how the run ended.
    pub fn run(
        &self,
        workflow: &Workflow,
        input: Value,
        observer: &mut dyn Observer,
    ) -> Result<RunRecord, StartError> {
        if let Some(schema) = &workflow.inputs {
            schema
                .check(&input)
                .map_err(|problems| StartError::Input { problems })?;
        }
        let plugins = self.resolve_plugins(workflow)?;

        let now = self.clock.now();
        let mut run = RunRecord {
            id: new_run_id(now),
            workflow: workflow.id.clone(),
            workflow_version: workflow.version,
            origin: workflow.origin.clone(),
            state: RunState::Running,
            input,
            next_step: 0,
            step_records: 0,
            step_count: u32::try_from(workflow.steps.len()).unwrap_or(u32::MAX),
            plugins: workflow
                .steps
                .iter()
                .zip(&plugins)
                .map(|(step, plugin)| (step.id.clone(), pin(plugin)))
                .collect::<BTreeMap<_, _>>(),
            outputs: None,
            error: None,
            created_at: now,
            updated_at: now,
        };
        self.store.create_run(&run)?;
        observer.run_created(&run);

        let mut scope = Scope::new(&workflow.id, &run.id, run.input.clone());
        let total = workflow.steps.len();
        for (index, (step, plugin)) in workflow.steps.iter().zip(&plugins).enumerate() {
            observer.step_started(step, index, total);
            let record = self.run_step(&run, step, plugin, index, &scope);
            run.step_records += 1;
            run.updated_at = self.clock.now();
            match (&record.output, &record.error) {
                (Some(output), _) => {
                    scope.add_step_output(&step.id, output.clone());
                    run.next_step = u32::try_from(index + 1).unwrap_or(u32::MAX);
                    if index + 1 == total {
                        finish(&mut run, workflow, &scope, output);
                    }
                }
                (None, error) => {
                    run.state = RunState::Failed;
                    run.error = Some(RunError {
                        step: Some(step.id.clone()),
                        error: error.clone().unwrap_or_else(|| ErrorRecord {
                            code: "internal".to_owned(),
                            message: "the step produced neither output nor error".to_owned(),
                            retryable: false,
                            details: None,
                        }),
                    });
                }
            }
            self.store.commit_step(&record, &run)?;
            observer.step_finished(step, &record);
            if run.state.is_terminal() {
                break;
            }
        }
        Ok(run)
    }

    fn resolve_plugins(&self, workflow: &Workflow) -> Result<Vec<Plugin>, StartError> {
        workflow
            .steps
            .iter()
            .map(|step| {
                self.plugins
                    .resolve(&step.uses)
                    .map_err(|source| StartError::Plugin {
                        origin: workflow.origin.clone(),
                        line: step.line,
                        step: step.id.clone(),
                        source: Box::new(source),
                    })
            })
            .collect()
    }

    /// Evaluates the step's input and calls its plugin once. Never fails:
    /// every problem ends up in the record.
    fn run_step(
        &self,
        run: &RunRecord,
        step: &Step,
        plugin: &Plugin,
        index: usize,
        scope: &Scope,
    ) -> StepRecord {
        let started_at = self.clock.now();
        let timer = Instant::now();
        let mut record = StepRecord {
            run_id: run.id.clone(),
            seq: run.step_records,
            index: u32::try_from(index).unwrap_or(u32::MAX),
            step_id: step.id.clone(),
            attempt: 1,
            input: Value::Null,
            started_at,
            duration_us: 0,
            output: None,
            error: None,
            logs: Vec::new(),
        };
        match step.with.eval(scope) {
            Err(e) => {
                record.error = Some(ErrorRecord {
                    code: "expression".to_owned(),
                    message: e.to_string(),
                    retryable: false,
                    details: None,
                });
            }
            Ok(input) => {
                let context = StepContext {
                    tenant: DEFAULT_TENANT.to_owned(),
                    workflow: run.workflow.clone(),
                    run_id: run.id.clone(),
                    step_id: step.id.clone(),
                    attempt: record.attempt,
                    idempotency_key: format!("{}:{}", run.id, step.id),
                };
                let outcome = plugin.call(
                    &context,
                    &input.to_string(),
                    step.timeout,
                    step.memory_limit,
                );
                record.input = input;
                record.logs = outcome.logs;
                match outcome.result {
                    Ok(output) => record.output = Some(output),
                    Err(error) => record.error = Some(error_record(&error)),
                }
            }
        }
        record.duration_us = u64::try_from(timer.elapsed().as_micros()).unwrap_or(u64::MAX);
        record
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
                error: ErrorRecord {
                    code: "expression".to_owned(),
                    message: e.to_string(),
                    retryable: false,
                    details: None,
                },
            });
        }
    }
}

fn pin(plugin: &Plugin) -> PinnedPlugin {
    PinnedPlugin {
        name: plugin.meta().name.clone(),
        version: plugin.meta().version.to_string(),
        digest: plugin.digest().to_string(),
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

/// A UUIDv7 from the injected clock: ids sort by creation time.
fn new_run_id(now: Timestamp) -> String {
    let millis = now.as_millis();
    let ts = uuid::Timestamp::from_unix(
        uuid::NoContext,
        millis / 1000,
        u32::try_from((millis % 1000) * 1_000_000).unwrap_or(0),
    );
    uuid::Uuid::new_v7(ts).to_string()
}
