//! Runs workflows: one state machine per run, one commit per step attempt.
//!
//! [`Engine::run`] checks the input, resolves and pins every plugin, and
//! records the run together with its definition and the bytes of the
//! components it is pinned to. Then it runs the workflow's calls one attempt
//! at a time, in the order a walk over the control flow gives (see `drive`).
//! After each attempt it commits, in one transaction, the attempt's record
//! (input, output or error, logs, timing, key-value writes) and the run's
//! next state; the last commit also carries the run's outputs and terminal
//! state.
//!
//! Runs are driven by a few worker threads, one step attempt at a time per
//! worker (see `scheduler`): the ready calls of one run (the branches of a
//! `parallel`, the iterations of a concurrent `foreach`) run on several
//! workers at once; no thread belongs to a run, and no thread waits for a
//! sync.
//! [`Engine::start`] returns a [`RunHandle`] at once; [`Engine::run`] waits.
//!
//! A crash loses at most the attempt in flight. [`Engine::resume`] picks a
//! `running` run up from its record: the definition and components come from
//! the store, the committed results are read back, and the walk finds the
//! call in flight, which runs again as its next attempt. Steps are therefore run
//! at least once; what they commit is recorded exactly once.
//!
//! A failed step is data, not an `Err`: the run ends `failed` and its record
//! says which step failed and why. `Err` means the run could not start or
//! resume, or the store failed.

mod drive;
mod error;
mod scheduler;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, sync_channel};
use std::thread::JoinHandle;

use serde_json::Value;

use crate::clock::{Clock, Timestamp};
use crate::model::{self, Format, Scope, Step, Workflow};
use crate::plugins::PluginDir;
use crate::runtime::{Digest, KvAccess, KvSource, Plugin, Versioned};
use crate::store::{
    DefinitionRecord, GroupCommit, PinnedPlugin, RunRecord, RunState, StepRecord, Store,
    StoreError, Write,
};

use drive::{Drive, Leaf};
use scheduler::{Core, Task};

pub use error::{ResumeError, StartError};

/// The tenant of runs started without one.
pub const DEFAULT_TENANT: &str = "default";

/// Hears about a run's progress, for display. Every method has an empty
/// default. Methods are called from the engine's threads, one at a time for
/// a given run, and must be quick.
pub trait Observer {
    /// The run was recorded and is about to run its first step.
    fn run_created(&mut self, _run: &RunRecord) {}
    /// A `running` run was picked up again at `run.next_step`.
    fn run_resumed(&mut self, _run: &RunRecord) {}
    /// Attempt `attempt` of step `index` (of `total`) is about to run.
    fn step_started(&mut self, _step: &Step, _index: usize, _total: usize, _attempt: u32) {}
    /// The attempt's record was committed.
    fn step_finished(&mut self, _record: &StepRecord) {}
}

/// An [`Observer`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Observer for Quiet {}

/// A started run.
#[derive(Debug)]
pub struct RunHandle {
    id: String,
    recorded: Option<Receiver<Result<(), StoreError>>>,
    outcome: Receiver<Result<RunRecord, StoreError>>,
}

impl RunHandle {
    /// The run's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Blocks until the run's record is durable (`Ok`), or could not be
    /// stored. Returns at once after the first call.
    pub fn recorded(&mut self) -> Result<(), StoreError> {
        match self.recorded.take() {
            Some(answer) => answer.recv().map_err(|_| StoreError::Closed)?,
            None => Ok(()),
        }
    }

    /// Blocks until the run ends, and returns its final record. `Err` means
    /// the store failed, or the engine stopped, before the run ended; its
    /// record then says how far it got, and it can be resumed.
    pub fn wait(self) -> Result<RunRecord, StoreError> {
        self.outcome.recv().map_err(|_| StoreError::Closed)?
    }
}

/// Runs workflows against a store and a directory of plugins.
///
/// Any number of runs may be in flight at once. Their attempts run on the
/// engine's workers, and their commits are grouped: one transaction and one
/// sync serve every write that is waiting. Dropping the engine stops its
/// threads; runs still in flight stay `running` in the store.
pub struct Engine {
    store: Arc<dyn Store>,
    plugins: PluginDir,
    core: Arc<Core>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store)
            .field("plugins", &self.plugins)
            .field("workers", &self.threads.len().saturating_sub(1))
            .finish_non_exhaustive()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.core.stop();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// How an engine runs. Every field has a default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Threads that run step attempts. Default: four per core, so that a few
    /// long steps do not hold up every other run.
    pub workers: usize,
    /// Runs in progress at once; more are parked, durably recorded, and
    /// started in arrival order as places free. Default: 10,000.
    pub max_resident: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            workers: std::thread::available_parallelism().map_or(4, |n| n.get() * 4),
            max_resident: 10_000,
        }
    }
}

impl Engine {
    /// An engine over `store`, running plugins from `plugins`, reading time
    /// from `clock`, configured by default. Starts its threads; fails only if
    /// they cannot be started.
    pub fn new(
        store: Arc<dyn Store>,
        plugins: PluginDir,
        clock: Arc<dyn Clock>,
    ) -> std::io::Result<Self> {
        Self::with_config(store, plugins, clock, EngineConfig::default())
    }

    /// As [`Engine::new`], configured by `config`.
    pub fn with_config(
        store: Arc<dyn Store>,
        plugins: PluginDir,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> std::io::Result<Self> {
        let commits = GroupCommit::start(store.clone())?;
        let core = Arc::new(Core::new(commits, clock, config.max_resident));
        let threads = core.start(config.workers)?;
        Ok(Self {
            store,
            plugins,
            core,
            threads,
        })
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// How many runs are in progress, and how many are parked waiting for a
    /// place.
    pub fn load(&self) -> (usize, usize) {
        self.core.load()
    }

    /// Runs `workflow` on `input` to the end; [`Engine::start`] then
    /// [`RunHandle::wait`]. Blocking.
    pub fn run(
        &self,
        workflow: Arc<Workflow>,
        input: Value,
        observer: Box<dyn Observer + Send>,
    ) -> Result<RunRecord, StartError> {
        Ok(self.start(workflow, input, observer)?.wait()?)
    }

    /// Starts a run of `workflow` on `input`, and returns without waiting.
    ///
    /// Before anything is stored, the input is checked against the
    /// workflow's schema and every step's plugin is resolved (which may
    /// compile a component); a problem there is an `Err` and leaves no trace.
    /// The run is then recorded, with its definition and the components it
    /// is pinned to, in one commit, before its first step runs.
    pub fn start(
        &self,
        workflow: Arc<Workflow>,
        input: Value,
        mut observer: Box<dyn Observer + Send>,
    ) -> Result<RunHandle, StartError> {
        if let Some(schema) = &workflow.inputs {
            schema
                .check(&input)
                .map_err(|problems| StartError::Input { problems })?;
        }
        let plugins = self.resolve_plugins(&workflow)?;
        let mut pinned_components: Vec<&Plugin> = plugins.values().collect();
        pinned_components.sort_by_key(|p| p.digest());
        pinned_components.dedup_by_key(|p| p.digest());
        let definition = DefinitionRecord {
            digest: Digest::of(workflow.source.as_bytes()).to_string(),
            origin: workflow.origin.clone(),
            format: workflow.format.name().to_owned(),
            source: workflow.source.clone(),
        };

        let now = self.core.clock.now();
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
            plugins: plugins
                .iter()
                .map(|(id, plugin)| (id.clone(), pin(plugin)))
                .collect::<BTreeMap<_, _>>(),
            definition: definition.digest.clone(),
            outputs: None,
            error: None,
            created_at: now,
            updated_at: now,
        };
        let components: Vec<(String, Arc<[u8]>)> = pinned_components
            .iter()
            .map(|p| (p.digest().to_string(), p.bytes()))
            .collect();
        let write = Write::create_run(&run, &definition, components);

        let (done, outcome) = sync_channel(1);
        let (recorded, recorded_answer) = sync_channel(1);
        let handle = RunHandle {
            id: run.id.clone(),
            recorded: Some(recorded_answer),
            outcome,
        };
        let kv = self.kv_access(&workflow.id);
        let base = Scope::new(&workflow.id, &run.id, &run.input);
        let task = Task {
            drive: Drive {
                run,
                workflow,
                plugins,
                results: HashMap::new(),
                kv,
                base,
                busy: HashSet::new(),
            },
            observer: Box::new(Quiet),
            done,
        };
        let core = Arc::clone(&self.core);
        self.core.commits.submit(
            write,
            Box::new(move |result| {
                let mut task = task;
                match result {
                    Ok(()) => {
                        let _ = recorded.send(Ok(()));
                        observer.run_created(&task.drive.run);
                        task.observer = observer;
                        core.admit(task);
                    }
                    Err(e) => {
                        let _ = recorded.send(Err(StoreError::Commit(e.to_string())));
                        let _ = task.done.send(Err(e));
                    }
                }
            }),
        );
        Ok(handle)
    }

    /// Picks up run `run_id`, which must be `running` (its process died),
    /// at the step it had reached, and returns without waiting. The
    /// definition and the pinned components come from the store, not from
    /// files; the outputs of finished steps are read back.
    pub fn resume(
        &self,
        run_id: &str,
        mut observer: Box<dyn Observer + Send>,
    ) -> Result<RunHandle, ResumeError> {
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

        // Read back what the run had committed.
        let mut results: HashMap<String, Leaf> = HashMap::new();
        for record in self.store.steps(&run.id)? {
            let path = if record.path.is_empty() {
                record.step_id.clone()
            } else {
                record.path.clone()
            };
            results.entry(path).or_default().apply(&record);
        }

        observer.run_resumed(&run);
        let (done, outcome) = sync_channel(1);
        let handle = RunHandle {
            id: run.id.clone(),
            recorded: None,
            outcome,
        };
        let kv = self.kv_access(&workflow.id);
        let base = Scope::new(&workflow.id, &run.id, &run.input);
        self.core.admit(Task {
            drive: Drive {
                run,
                workflow: Arc::new(workflow),
                plugins,
                results,
                kv,
                base,
                busy: HashSet::new(),
            },
            observer,
            done,
        });
        Ok(handle)
    }

    /// The key-value space of workflow `id`: `workflow/<id>`.
    fn kv_access(&self, id: &str) -> KvAccess {
        KvAccess {
            space: format!("workflow/{id}"),
            source: Arc::new(StoreKv(Arc::clone(&self.store))),
        }
    }

    /// Resolves the plugin of every call step, at every depth, by step id.
    fn resolve_plugins(&self, workflow: &Workflow) -> Result<HashMap<String, Plugin>, StartError> {
        let mut plugins = HashMap::new();
        for step in workflow.all_steps() {
            let Some(call) = step.call() else { continue };
            let plugin = self
                .plugins
                .resolve(&call.uses)
                .map_err(|source| StartError::Plugin {
                    origin: workflow.origin.clone(),
                    line: step.line,
                    step: step.id.clone(),
                    source: Box::new(source),
                })?;
            plugins.insert(step.id.clone(), plugin);
        }
        Ok(plugins)
    }

    /// Loads the components a run is pinned to from the store.
    fn pinned_plugins(
        &self,
        run: &RunRecord,
        workflow: &Workflow,
    ) -> Result<HashMap<String, Plugin>, ResumeError> {
        let mut loaded: BTreeMap<&str, Plugin> = BTreeMap::new();
        let mut plugins = HashMap::new();
        for step in workflow.all_steps() {
            if step.call().is_none() {
                continue;
            }
            let component_error = |reason: String| ResumeError::Component {
                step: step.id.clone(),
                reason,
            };
            let pinned = run.plugins.get(&step.id).ok_or_else(|| {
                component_error("the run has no plugin pinned for this step".to_owned())
            })?;
            if let Some(plugin) = loaded.get(pinned.digest.as_str()) {
                plugins.insert(step.id.clone(), plugin.clone());
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
            plugins.insert(step.id.clone(), plugin);
        }
        Ok(plugins)
    }
}

/// The store, as the runtime reads key-value data.
#[derive(Debug)]
struct StoreKv(Arc<dyn Store>);

impl KvSource for StoreKv {
    fn get(&self, space: &str, key: &str) -> Result<Versioned, String> {
        self.0.kv_get(space, key).map_err(|e| e.to_string())
    }

    fn list(&self, space: &str, prefix: &str, limit: usize) -> Result<Vec<String>, String> {
        self.0
            .kv_list(space, prefix, limit)
            .map_err(|e| e.to_string())
    }
}

fn pin(plugin: &Plugin) -> PinnedPlugin {
    PinnedPlugin {
        name: plugin.meta().name.clone(),
        version: plugin.meta().version.to_string(),
        digest: plugin.digest().to_string(),
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

#[cfg(test)]
mod send_checks {
    fn is_send<T: Send>() {}
    fn is_sync<T: Sync>() {}
    #[test]
    fn run_state_can_move_between_threads() {
        is_send::<crate::model::Scope>();
        is_send::<crate::model::Workflow>();
        is_sync::<crate::model::Workflow>();
        is_send::<crate::runtime::Plugin>();
    }
}
