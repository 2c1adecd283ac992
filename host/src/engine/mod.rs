//! Runs workflows: one state machine per run, one commit per step attempt.
//!
//! [`Engine::run`] checks the input, resolves and pins every plugin, and
//! records the run together with its definition and the bytes of the
//! components it is pinned to. Then it walks the steps in order. After each
//! attempt of a step it commits, in one transaction, the attempt's record
//! (input, output or error, logs, timing) and the run's next state; the last
//! step's commit also carries the run's outputs and terminal state.
//!
//! A crash loses at most the attempt in flight. [`Engine::resume`] picks a
//! `running` run up from its record: the definition and components come from
//! the store, the outputs of finished steps are read back, and the step in
//! flight runs again, as its next attempt. Steps are therefore run
//! at least once; what they commit is recorded exactly once.
//!
//! A failed step is data, not an `Err`: the run ends `failed` and its record
//! says which step failed and why. `Err` means the run could not start or
//! resume, or the store failed.

mod error;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::clock::{Clock, Timestamp};
use crate::model::{self, Format, Scope, Step, Workflow};
use crate::plugins::PluginDir;
use crate::runtime::{CallError, Digest, Plugin, StepContext};
use crate::store::{
    DefinitionRecord, ErrorRecord, GroupCommit, PinnedPlugin, RunError, RunRecord, RunState,
    StepRecord, Store, StoreError, Write,
};

pub use error::{ResumeError, StartError};

/// The tenant of runs started without one.
pub const DEFAULT_TENANT: &str = "default";

/// Hears about a run's progress, for display. Every method has an empty
/// default.
pub trait Observer {
    /// The run was recorded and is about to run its first step.
    fn run_created(&mut self, _run: &RunRecord) {}
    /// A `running` run was picked up again at `run.next_step`.
    fn run_resumed(&mut self, _run: &RunRecord) {}
    /// Attempt `attempt` of step `index` (of `total`) is about to run.
    fn step_started(&mut self, _step: &Step, _index: usize, _total: usize, _attempt: u32) {}
    /// The attempt's result was committed.
    fn step_finished(&mut self, _step: &Step, _record: &StepRecord) {}
}

/// An [`Observer`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Observer for Quiet {}

/// Runs workflows against a store and a directory of plugins.
///
/// An `Engine` is shared: any number of threads may run workflows through it
/// at once. Their commits are grouped: one transaction and one sync serve
/// every write that is waiting.
#[derive(Debug)]
pub struct Engine {
    store: Arc<dyn Store>,
    commits: GroupCommit,
    plugins: PluginDir,
    clock: Arc<dyn Clock>,
}

/// A run being driven: its record, its definition, its plugins (one per
/// step) and what its expressions see.
struct Drive<'a> {
    run: RunRecord,
    workflow: &'a Workflow,
    plugins: Vec<Plugin>,
    scope: Scope,
    /// The attempt the step at `run.next_step` is on.
    attempt: u32,
}

impl Engine {
    /// An engine over `store`, running plugins from `plugins`, reading time
    /// from `clock`. Starts the thread that commits; fails only if it cannot.
    pub fn new(
        store: Arc<dyn Store>,
        plugins: PluginDir,
        clock: Arc<dyn Clock>,
    ) -> std::io::Result<Self> {
        Ok(Self {
            commits: GroupCommit::start(store.clone())?,
            store,
            plugins,
            clock,
        })
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Runs `workflow` on `input` to the end. Blocking, including through
    /// retry delays.
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
        let definition = DefinitionRecord {
            digest: Digest::of(workflow.source.as_bytes()).to_string(),
            origin: workflow.origin.clone(),
            format: workflow.format.name().to_owned(),
            source: workflow.source.clone(),
        };

        let now = self.clock.now();
        let run = RunRecord {
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
            definition: definition.digest.clone(),
            outputs: None,
            error: None,
            created_at: now,
            updated_at: now,
        };
        let mut components: Vec<(String, Arc<[u8]>)> = plugins
            .iter()
            .map(|p| (p.digest().to_string(), p.bytes()))
            .collect();
        components.sort_by(|a, b| a.0.cmp(&b.0));
        components.dedup_by(|a, b| a.0 == b.0);
        self.commits
            .commit(Write::create_run(&run, &definition, components))?;
        observer.run_created(&run);

        let scope = Scope::new(&workflow.id, &run.id, &run.input);
        let drive = Drive {
            run,
            workflow,
            plugins,
            scope,
            attempt: 1,
        };
        Ok(self.drive(drive, observer)?)
    }

    /// Picks up run `run_id`, which must be `running` (its process died),
    /// at the step it had reached, and runs it to the end. The definition and
    /// the pinned components come from the store, not from files. Blocking.
    pub fn resume(
        &self,
        run_id: &str,
        observer: &mut dyn Observer,
    ) -> Result<RunRecord, ResumeError> {
        let run = self
            .store
            .run(run_id)?
            .ok_or_else(|| ResumeError::NotFound(run_id.to_owned()))?;
        if run.state != RunState::Running {
            return Err(ResumeError::NotRunning {
                id: run.id,
                state: run.state,
            });
        }
        let definition = self.store.definition(&run.definition)?.ok_or_else(|| {
            ResumeError::Definition(format!("definition {} is not in the store", run.definition))
        })?;
        let format = Format::from_name(&definition.format).unwrap_or(Format::Yaml);
        let workflow = model::parse(&definition.source, format, &definition.origin)
            .map_err(|e| ResumeError::Definition(e.to_string()))?;
        let plugins = self.pinned_plugins(&run, &workflow)?;

        // Read back what the run had committed: the last record of each step.
        let records = self.store.steps(&run.id)?;
        let mut scope = Scope::new(&workflow.id, &run.id, &run.input);
        let mut last: BTreeMap<u32, &StepRecord> = BTreeMap::new();
        for record in &records {
            last.insert(record.index, record);
        }
        for (index, record) in &last {
            if *index < run.next_step {
                scope.add_step(&record.step_id, &scope_entry(record));
            }
        }
        let tried = records.iter().filter(|r| r.index == run.next_step).count();
        let attempt = u32::try_from(tried).unwrap_or(u32::MAX).saturating_add(1);

        observer.run_resumed(&run);
        let drive = Drive {
            run,
            workflow: &workflow,
            plugins,
            scope,
            attempt,
        };
        Ok(self.drive(drive, observer)?)
    }

    /// Walks the steps from `run.next_step` to the end or to a failure,
    /// committing each attempt.
    fn drive(
        &self,
        mut drive: Drive<'_>,
        observer: &mut dyn Observer,
    ) -> Result<RunRecord, StoreError> {
        let steps = &drive.workflow.steps;
        let total = steps.len();
        while let Some(step) = steps.get(drive.run.next_step as usize) {
            let index = drive.run.next_step as usize;
            observer.step_started(step, index, total, drive.attempt);
            let mut record = self.attempt(&drive, step, index);
            let run = &mut drive.run;
            run.step_records += 1;
            run.updated_at = self.clock.now();

            let mut retry_in = None;
            let advance = match &record.error {
                None => true,
                Some(error)
                    if step
                        .retry
                        .retries(drive.attempt, &error.code, error.retryable) =>
                {
                    let delay = step.retry.delay(drive.attempt);
                    record.retry_in_ms = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
                    retry_in = Some(delay);
                    false
                }
                Some(_) if step.continue_on_error => true,
                Some(error) => {
                    run.state = RunState::Failed;
                    run.error = Some(RunError {
                        step: Some(step.id.clone()),
                        error: error.clone(),
                    });
                    false
                }
            };
            if advance {
                let entry = scope_entry(&record);
                drive.scope.add_step(&step.id, &entry);
                run.next_step = u32::try_from(index + 1).unwrap_or(u32::MAX);
                if index + 1 == total {
                    let last_output = entry.get("output").cloned().unwrap_or(Value::Null);
                    finish(run, drive.workflow, &drive.scope, &last_output);
                }
            }
            self.commits.commit(Write::commit_step(&record, run))?;
            observer.step_finished(step, &record);
            if drive.run.state.is_terminal() {
                break;
            }
            match retry_in {
                Some(delay) => {
                    self.clock.sleep(delay);
                    drive.attempt += 1;
                }
                None => drive.attempt = 1,
            }
        }
        Ok(drive.run)
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

    /// Loads the components a run is pinned to from the store.
    fn pinned_plugins(
        &self,
        run: &RunRecord,
        workflow: &Workflow,
    ) -> Result<Vec<Plugin>, ResumeError> {
        let mut loaded: BTreeMap<&str, Plugin> = BTreeMap::new();
        let mut plugins = Vec::with_capacity(workflow.steps.len());
        for step in &workflow.steps {
            let component_error = |reason: String| ResumeError::Component {
                step: step.id.clone(),
                reason,
            };
            let pinned = run.plugins.get(&step.id).ok_or_else(|| {
                component_error("the run has no plugin pinned for this step".to_owned())
            })?;
            if let Some(plugin) = loaded.get(pinned.digest.as_str()) {
                plugins.push(plugin.clone());
                continue;
            }
            let bytes = self.store.component(&pinned.digest)?.ok_or_else(|| {
                component_error(format!("component {} is not in the store", pinned.digest))
            })?;
            let plugin = self
                .plugins
                .runtime()
                .load(&bytes)
                .map_err(|e| component_error(format!("component {} {e}", pinned.digest)))?;
            if plugin.digest().to_string() != pinned.digest {
                return Err(component_error(format!(
                    "the stored component's digest is {}, not {}",
                    plugin.digest(),
                    pinned.digest
                )));
            }
            loaded.insert(&pinned.digest, plugin.clone());
            plugins.push(plugin);
        }
        Ok(plugins)
    }

    /// One attempt of one step: its condition, its input, the call. Never
    /// fails: every problem ends up in the record.
    fn attempt(&self, drive: &Drive<'_>, step: &Step, index: usize) -> StepRecord {
        let run = &drive.run;
        let started_at = self.clock.now();
        let timer = Instant::now();
        let mut record = StepRecord {
            run_id: run.id.clone(),
            seq: run.step_records,
            index: u32::try_from(index).unwrap_or(u32::MAX),
            step_id: step.id.clone(),
            attempt: drive.attempt,
            input: Value::Null,
            started_at,
            duration_us: 0,
            output: None,
            error: None,
            skipped: false,
            retry_in_ms: None,
            logs: Vec::new(),
        };
        if let Some(condition) = &step.condition {
            match condition.eval(&drive.scope) {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => {
                    record.skipped = true;
                    return record;
                }
                Ok(other) => {
                    record.error = Some(expression_error(format!(
                        "if: expected true or false, got {other}"
                    )));
                    return record;
                }
                Err(e) => {
                    record.error = Some(expression_error(e.to_string()));
                    return record;
                }
            }
        }
        match step.with.eval(&drive.scope) {
            Err(e) => record.error = Some(expression_error(e.to_string())),
            Ok(input) => {
                let context = StepContext {
                    tenant: DEFAULT_TENANT.to_owned(),
                    workflow: run.workflow.clone(),
                    run_id: run.id.clone(),
                    step_id: step.id.clone(),
                    attempt: drive.attempt,
                    idempotency_key: format!("{}:{}", run.id, step.id),
                };
                let plugin = &drive.plugins[index];
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

/// What later expressions see of a finished step as `steps.<id>`.
fn scope_entry(record: &StepRecord) -> Value {
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
