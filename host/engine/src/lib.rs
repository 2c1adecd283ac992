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
//!
//! What this crate owns: the walk (`drive`), the scheduler, making and
//! loading runs (`launch`), cron, the [`StepRunner`] seam to the code steps
//! run (wasm through [`WasmPlugins`], or anything else through
//! [`Engine::with_source`]), the plugin registry ([`plugins`]) and the
//! [`Committer`] the hub writes through. It never names wasmtime, axum or
//! redb.

mod committer;
pub(crate) mod cron;
mod drive;
mod egress;
mod error;
#[cfg(feature = "fake")]
pub mod fake;
mod launch;
mod migrate;
pub mod plugins;
mod recovery;
mod retry;
mod runner;
mod scheduler;
pub mod secrets;
pub mod snapshots;
mod stored;
pub mod sweep;
mod telemetry;

use std::sync::Arc;
use std::sync::mpsc::{Receiver, sync_channel};
use std::thread::JoinHandle;

use serde_json::Value;

use crate::plugins::PluginDir;
use std::collections::HashMap;
use weft_core::clock::Clock;
use weft_model::{Step, Workflow};
use weft_store::{
    GroupCommit, Refused, RunRecord, RunState, ScheduleRecord, StepRecord, Store, StoreError, Write,
};

use launch::Launcher;
use scheduler::{Scheduler, Task};

pub use committer::{Committer, DeliveryWrite};
pub use cron::ScheduleError;
pub use drive::Answer;
#[cfg(feature = "sim")]
pub use drive::{verify_walks, walk_mismatches};
pub use egress::EgressPolicies;
pub use error::{ActError, MigrateError, PauseError, ResumeError, RetryError, StartError};
pub use launch::MAX_DEPTH;
pub use recovery::{Recovered, RecoveryError};
pub use runner::{
    Pinned, RunnerSource, StepCall, StepOutcome, StepRunner, WasmPlugins, check_reach,
};
#[cfg(feature = "stepped")]
pub use scheduler::stepped::{Answering, Stepper};
pub use scheduler::{Pausing, TenantLimits};
pub use secrets::{SecretError, SecretKeys, Vault};
pub use telemetry::{
    KEPT as EVENTS_KEPT, RunEvent, RunEventKind, RunEvents, StepEvent, Subscription,
};
pub use weft_core::metrics::Metrics;
pub use weft_model::Workflows;

/// The tenant of runs started without one.
pub const DEFAULT_TENANT: &str = weft_core::tenant::DEFAULT;

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
    /// Held so that a run suspended on its timers keeps its answer for
    /// this handle.
    _alive: Arc<()>,
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
    /// record then says how far it got, and it can be resumed. On a store
    /// that other hosts share, a run parked here for a place may be taken
    /// by one of them: the handle then follows the run in the store and
    /// answers its end there (reading it at most once a second while it
    /// goes on). (A start that was
    /// not recorded, such as a [`Refused::Duplicate`], answers here as
    /// in [`RunHandle::recorded`].)
    pub fn wait(self) -> Result<RunRecord, StoreError> {
        self.outcome.recv().map_err(|_| StoreError::Closed)?
    }

    /// As [`RunHandle::wait`], for at most `timeout`: `Ok(None)` if the run
    /// has not ended by then (the handle stays usable).
    pub fn wait_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> Result<Option<RunRecord>, StoreError> {
        match self.outcome.recv_timeout(timeout) {
            Ok(outcome) => outcome.map(Some),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(StoreError::Closed),
        }
    }
}

/// Runs workflows against a store and a directory of plugins.
///
/// Any number of runs may be in flight at once. Their attempts run on the
/// engine's workers, and their commits are grouped: one transaction and one
/// sync serve every write that is waiting. Dropping the engine stops its
/// threads; runs still in flight stay `running` in the store.
pub struct Engine {
    core: Arc<Scheduler>,
    plugins: Arc<PluginDir>,
    threads: Vec<JoinHandle<()>>,
    egress: Arc<EgressPolicies>,
    vault: Vault,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.core.launcher.store)
            .field("plugins", &self.plugins)
            .field("workers", &self.threads.len().saturating_sub(1))
            .finish_non_exhaustive()
    }
}

impl Drop for Engine {
    /// Stops the engine's threads, then gives its leases up, so that another
    /// host may take over its runs at once (a stepped engine keeps them: it
    /// stands for a process that died).
    fn drop(&mut self) {
        self.core.stop();
        let threaded = !self.threads.is_empty();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        if threaded && self.core.listed() {
            self.core.retire();
        }
        // The runs that ended are freed before the engine is gone: a
        // drive holds the store and the run's observer.
        self.core.stop_reaper();
    }
}

/// How an engine runs. Every field has a default.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Threads that run step attempts. Default: four per core, so that a few
    /// long steps do not hold up every other run.
    pub workers: usize,
    /// Runs in progress at once; more are parked, durably recorded, and
    /// started in arrival order as places free. Default: 10,000.
    pub max_resident: usize,
    /// How long this host's leases on its runs hold without a renewal
    /// (it renews three times as often). Once they lapse, any other host
    /// on the store takes its runs over. Default: 10 s.
    pub lease_ttl: std::time::Duration,
    /// Take over the runs of hosts that are gone (a recovering host does;
    /// a one-off `weft run` does not). Default: on.
    pub take_over: bool,
    /// Whether this engine is listed in the store's hosts: it writes its
    /// host row, renews it, and gives it up when it stops. Default: on. An
    /// engine that drives no run (a host in maintenance, serving one
    /// command) is not listed: it holds no lease, and when it goes, no
    /// peer sees a host vanish and looks for runs to take over.
    pub listed: bool,
    /// The host's egress policy: what every tenant without its own may
    /// reach over HTTP ([`EgressPolicies`]). Default: none, so steps of
    /// tenant `default` are bound by their grants only, and other tenants'
    /// by their grants and public addresses.
    pub egress: Option<Vec<weft_core::egress::Rule>>,
    /// The keys tenants' secrets are sealed with. Default: none, so no
    /// secret can be set or read.
    pub secrets: Option<Arc<SecretKeys>>,
    /// Where the engine counts and times what it does (`GET /metrics`).
    /// Default: none, and counting costs nothing.
    pub metrics: Option<Arc<Metrics>>,
    /// Note each timer fire's lag behind its due time, for
    /// [`Engine::take_fire_lags`] (benchmarks). Default: off.
    #[cfg(feature = "bench")]
    pub measure_fires: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            workers: std::thread::available_parallelism().map_or(4, |n| n.get() * 4),
            max_resident: 10_000,
            lease_ttl: std::time::Duration::from_secs(10),
            take_over: true,
            listed: true,
            egress: None,
            secrets: None,
            metrics: None,
            #[cfg(feature = "bench")]
            measure_fires: false,
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
        if let Some(metrics) = &config.metrics {
            plugins.meter(Arc::clone(metrics));
        }
        // The registry of plugins lives in the store.
        plugins
            .attach(store.clone(), Arc::clone(&clock))
            .map_err(std::io::Error::other)?;
        let plugins = Arc::new(plugins);
        let egress = Arc::new(EgressPolicies::new(config.egress.clone()));
        let vault = Vault::new(Arc::clone(&store), config.secrets.clone());
        let source = Arc::new(
            WasmPlugins::new(Arc::clone(&plugins), Arc::clone(&store))
                .timed(Arc::clone(&clock))
                .metered(config.metrics.clone())
                .reaching(Arc::clone(&egress), vault.clone()),
        );
        Self::assemble(store, plugins, source, clock, config, egress, vault)
    }

    /// As [`Engine::with_config`], with runs taking their plugins from
    /// `source` instead of running the registry's components: the seam a
    /// test or a simulator drives the engine through without WebAssembly.
    /// `plugins` is still the registry the engine shows and adds to.
    pub fn with_source(
        store: Arc<dyn Store>,
        plugins: Arc<PluginDir>,
        source: Arc<dyn RunnerSource>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> std::io::Result<Self> {
        let egress = Arc::new(EgressPolicies::new(config.egress.clone()));
        let vault = Vault::new(Arc::clone(&store), config.secrets.clone());
        Self::assemble(store, plugins, source, clock, config, egress, vault)
    }

    fn assemble(
        store: Arc<dyn Store>,
        plugins: Arc<PluginDir>,
        source: Arc<dyn RunnerSource>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
        egress: Arc<EgressPolicies>,
        vault: Vault,
    ) -> std::io::Result<Self> {
        let commits = GroupCommit::start(store.clone())?.metered(config.metrics.clone());
        let host = weft_core::ids::uuid_v7(clock.now());
        let launcher = Arc::new(Launcher::new(store, source, clock, host));
        #[cfg(feature = "bench")]
        let measure_fires = config.measure_fires;
        #[cfg(not(feature = "bench"))]
        let measure_fires = false;
        let core = Arc::new(Scheduler::new(
            launcher,
            commits,
            config.max_resident,
            measure_fires,
            config.lease_ttl,
            config.metrics.clone(),
        ));
        core.set_take_over(config.take_over && config.listed);
        // The host's row exists before any run is made under its leases.
        if config.listed {
            core.join().map_err(std::io::Error::other)?;
        }
        let threads = core.start(config.workers, config.listed)?;
        Ok(Self {
            core,
            plugins,
            threads,
            egress,
            vault,
        })
    }

    /// As [`Engine::with_source`], stepped: the engine starts no threads
    /// and commits nothing by itself. The [`Stepper`] decides what happens
    /// next: a simulator's seam.
    #[cfg(feature = "stepped")]
    pub fn stepped(
        store: Arc<dyn Store>,
        plugins: Arc<PluginDir>,
        source: Arc<dyn RunnerSource>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> (Self, Stepper) {
        let (commits, held) = GroupCommit::held(store.clone());
        let vault = Vault::new(Arc::clone(&store), config.secrets.clone());
        let host = weft_core::ids::uuid_v7(clock.now());
        let launcher = Arc::new(Launcher::new(store, source, clock, host));
        let core = Arc::new(Scheduler::new(
            launcher,
            commits,
            config.max_resident,
            false,
            config.lease_ttl,
            config.metrics.clone(),
        ));
        let _ = core.join();
        let stepper = Stepper::new(Arc::clone(&core), held);
        let engine = Self {
            core,
            plugins,
            threads: Vec::new(),
            egress: Arc::new(EgressPolicies::new(config.egress.clone())),
            vault,
        };
        (engine, stepper)
    }

    /// The plugins: the directory and the registry.
    pub fn plugins(&self) -> &PluginDir {
        &self.plugins
    }

    /// The egress policies in force; set a tenant's with
    /// [`EgressPolicies::set_tenant`].
    pub fn egress(&self) -> &Arc<EgressPolicies> {
        &self.egress
    }

    /// Where tenants' secrets are sealed and opened.
    pub fn vault(&self) -> &Vault {
        &self.vault
    }

    /// The source of time every part of this engine reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.core.launcher.clock
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.core.launcher.store
    }

    /// Where `subflow` steps find the workflows they start, by id: nowhere
    /// until this is called. A run checks at its start that every workflow
    /// it may start is there, and a child starts the definition found when
    /// its step runs.
    pub fn set_workflows(&self, workflows: Arc<dyn Workflows>) {
        self.core.launcher.set_workflows(workflows);
    }

    /// Arms every pending timer in the store, and returns how many: a long
    /// running host calls it once at its start, before resuming runs, so
    /// that suspended runs wake when their timers come due (those already
    /// due fire at once). An engine that does not call it only fires the
    /// timers of runs it drives.
    pub fn arm_timers(&self) -> Result<usize, StoreError> {
        let keys = self.store().timer_keys()?;
        let count = keys.len();
        self.core.arm_all(keys);
        Ok(count)
    }

    /// Each timer fire's lag behind its due time, in microseconds, since
    /// the last call; empty unless `measure_fires` is on.
    #[cfg(feature = "bench")]
    pub fn take_fire_lags(&self) -> Vec<i64> {
        self.core.take_fire_lags()
    }

    /// The events of runs this engine drives, for `GET /v1/events`.
    pub fn events(&self) -> &RunEvents {
        &self.core.telemetry.events
    }

    /// What the engine counts, if it counts ([`EngineConfig::metrics`]).
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.core.telemetry.metrics.as_ref()
    }

    /// Sets the engine's gauges to what they read now: runs ready,
    /// resident and parked, and timers armed.
    pub fn read_gauges(&self) {
        let Some(metrics) = self.core.telemetry.metrics.as_ref() else {
            return;
        };
        let (resident, parked) = self.core.load();
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        metrics.runs_ready.set(gauge(self.core.ready_len()));
        metrics.runs_resident.set(gauge(resident));
        metrics.runs_parked.set(gauge(parked));
        metrics.timers_pending.set(gauge(self.core.armed()));
    }

    /// How many timers are armed in memory (a timer armed twice counts
    /// twice).
    pub fn armed_timers(&self) -> usize {
        self.core.armed()
    }

    /// Brings the store's cron triggers in line with the `on: schedule:`
    /// of `workflows`: a new trigger is added (its first fire the next
    /// after now), a changed one starts over from now, one no longer
    /// declared is removed; an unchanged one keeps its next fire, so fires
    /// missed while no host ran are caught up. Triggers added with `weft
    /// schedules add` are left alone. Returns how many triggers the
    /// workflows declare.
    pub fn sync_schedules(&self, workflows: &weft_model::WorkflowDir) -> Result<usize, StoreError> {
        let now = self.core.clock.now();
        let existing: HashMap<String, ScheduleRecord> = self
            .store()
            .schedules()?
            .into_iter()
            .map(|row| (row.key.clone(), row))
            .collect();
        let mut writes = Vec::new();
        let mut declared = std::collections::HashSet::new();
        for workflow in workflows.iter() {
            for (trigger, schedule) in &workflow.schedules {
                let key = format!("{}/{trigger}", workflow.id);
                declared.insert(key.clone());
                match existing.get(&key) {
                    Some(row) if row.spec == schedule.spec => {}
                    Some(row) => {
                        let mut updated =
                            cron::new_row(key, &workflow.id, schedule, "workflow", now);
                        updated.paused = row.paused;
                        updated.version = row.version + 1;
                        writes.push(Write::schedule(&updated, Some(row.version), None));
                    }
                    // Only if there is still none: a host that made it
                    // since this read may have fired it, and a row made
                    // again here would fire that time again.
                    None => {
                        let row = cron::new_row(key, &workflow.id, schedule, "workflow", now);
                        writes.push(Write::schedule(&row, Some(0), None));
                    }
                }
            }
        }
        for (key, row) in &existing {
            if row.origin == "workflow" && !declared.contains(key) {
                writes.push(Write::Schedule {
                    key: key.clone(),
                    expect: Some(row.version),
                    row: None,
                    start: None,
                });
            }
        }
        for outcome in self.core.commits.commit_all(writes) {
            match outcome {
                // Another host changed the trigger first: it wins.
                Ok(()) | Err(StoreError::Refused(Refused::Changed(_) | Refused::Exists(_))) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(declared.len())
    }

    /// Starts the thread that fires cron triggers. Fires due before this
    /// call were missed, and follow each trigger's `catch_up` policy.
    pub fn run_schedules(&mut self) -> std::io::Result<()> {
        let cron = cron::Cron::new(Arc::clone(&self.core));
        let thread = std::thread::Builder::new()
            .name("weft-cron".to_owned())
            .spawn(move || cron.run())?;
        self.threads.push(thread);
        Ok(())
    }

    /// Cancels run `run_id`: it ends `cancelled`, its timers with it, and
    /// whatever its steps still return is dropped. Returns once the
    /// cancellation is durable. A run in this engine's hands ends when its
    /// cancellation commits, after the commit of it in flight, if any; any
    /// other is cancelled in the store. `Err(RunEnded)` if it had already
    /// ended, or ended otherwise before the cancellation landed;
    /// `Err(NotFound)` if there is no such run. Blocking.
    pub fn cancel(&self, run_id: &str) -> Result<(), StoreError> {
        match self.store().run(run_id)? {
            None => Err(StoreError::Refused(Refused::NotFound(
                weft_store::What::Run(run_id.to_owned()),
            ))),
            Some(run) if run.state.is_terminal() => {
                Err(StoreError::Refused(Refused::RunEnded(run.id)))
            }
            Some(_) => self.core.cancel(run_id),
        }
    }

    /// Carries out the outbox rows a previous process left open (child runs
    /// that were decided and not yet recorded), and returns how many. Call
    /// it before resuming runs; carrying a row out twice is harmless.
    pub fn replay_outbox(&self) -> Result<usize, StoreError> {
        let rows = self.store().outbox()?;
        // A child recorded here is this host's to drive (epoch 1).
        let lease = weft_store::Lease::after(None, self.core.host());
        let writes = rows
            .iter()
            .filter_map(Write::start_run)
            .map(|write| write.under(lease.clone()))
            .collect();
        for outcome in self.core.commits.commit_all(writes) {
            match outcome {
                // Carried out meanwhile, by another host.
                Ok(()) | Err(StoreError::Refused(Refused::Exists(_))) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(rows.len())
    }

    /// How many runs are in progress, and how many are parked waiting for a
    /// place.
    pub fn load(&self) -> (usize, usize) {
        self.core.load()
    }

    /// What `tenant` uses on this host now: its resident runs, its parked
    /// runs, and the guest time its calls took in this minute.
    pub fn tenant_usage(&self, tenant: &str) -> (usize, usize, std::time::Duration) {
        let (resident, parked) = self.core.tenant_load(tenant);
        (resident, parked, self.core.launcher.guest_time_now(tenant))
    }

    /// Holds `tenant` to `limits` from now on: its weight in the turns
    /// of the ready queue and of parked runs, and its resident cap (its
    /// runs beyond it are parked, never dropped). Parked runs that may
    /// have a place now get one.
    pub fn set_tenant_limits(&self, tenant: &str, limits: TenantLimits) {
        self.core.set_limits(tenant, limits);
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
        observer: Box<dyn Observer + Send>,
    ) -> Result<RunHandle, StartError> {
        self.start_keyed(workflow, input, observer, None)
    }

    /// As [`Engine::start`], with a client's idempotency key: if a run was
    /// recorded with `key` before, nothing is started and
    /// [`RunHandle::recorded`] answers [`Refused::Duplicate`], naming
    /// that run.
    pub fn start_keyed(
        &self,
        workflow: Arc<Workflow>,
        input: Value,
        observer: Box<dyn Observer + Send>,
        key: Option<String>,
    ) -> Result<RunHandle, StartError> {
        let new = self.core.launcher.make(workflow, input, None)?;
        let tenant: Arc<str> = Arc::from(weft_core::tenant::of(&new.drive.run.workflow));
        let mut write = Write::create_run(&new.drive.run, &new.definition, new.components);
        // A run this host has no place for is stored as free work, which
        // any host with a place may take; it is held here (claimed) from
        // now, so this host's claims of free work pass it over.
        let parked = self.core.start_parked(&new.drive.run.id, &tenant);
        if !parked {
            // Held from now until its commit is answered (`created`).
            self.core.claim(&new.drive.run.id);
        }
        write = if parked {
            write.parked(&tenant)
        } else {
            new.drive.leased(write)
        };
        if let Write::CreateRun { idempotency, .. } = &mut write {
            *idempotency = key;
        }
        // Charged after the key is set: the key is stored too.
        let write = write.charged(&tenant, true);
        let (done, outcome) = sync_channel(1);
        let (recorded, recorded_answer) = sync_channel(1);
        let alive = Arc::new(());
        let task = Task {
            drive: new.drive,
            observer: Box::new(Quiet),
            done,
            alive: Arc::downgrade(&alive),
        };
        let handle = RunHandle {
            id: task.drive.run.id.clone(),
            _alive: alive,
            recorded: Some(recorded_answer),
            outcome,
        };
        let created = scheduler::created::Created {
            task,
            observer,
            recorded,
            parked,
        };
        let core = Arc::clone(&self.core);
        self.core.commits.submit_as(
            tenant,
            write,
            Box::new(move |outcome| core.created(created, outcome)),
        );
        Ok(handle)
    }

    /// Answers the waiting `await` step at `path` (such as `approve` or
    /// `each[2]/approve`) of run `run_id`, and returns once the answer is
    /// durable; the run then goes on. Blocking.
    pub fn act(&self, run_id: &str, path: &str, answer: &Answer) -> Result<(), ActError> {
        self.core.act(run_id, path, answer)
    }

    /// What the delivery side of a host commits through: subscriptions
    /// and delivery moves, in this engine's group commit.
    pub fn committer(&self) -> Committer {
        Committer::new(Arc::clone(&self.core))
    }

    /// Retries run `run_id`, which failed, timed out or was cancelled:
    /// `from` names the leaf to go on from (its path, as `weft runs show`
    /// prints it); without it, a failed run goes on from the leaf whose
    /// failure ended it. That leaf runs again as its next attempt, with its
    /// `retry:` policy anew; every leaf that succeeded keeps its result,
    /// key-value writes and messages. The retry is a `@retry` record naming
    /// `actor`, committed before the run is taken in here. Blocking.
    pub fn retry(
        &self,
        run_id: &str,
        from: Option<&str>,
        actor: &str,
        observer: Box<dyn Observer + Send>,
    ) -> Result<RunHandle, RetryError> {
        let store = &self.core.launcher.store;
        let mut tries = 0;
        loop {
            tries += 1;
            let run = store
                .run(run_id)?
                .ok_or_else(|| RetryError::NotFound(run_id.to_owned()))?;
            let steps = store.steps(run_id)?;
            let timeout = self.core.launcher.timeout_of(&run).map_err(|e| match e {
                ResumeError::Store(e) => RetryError::Store(e),
                e => RetryError::NotRetryable {
                    run: run_id.to_owned(),
                    why: e.to_string(),
                },
            })?;
            let (record, wake) = retry::decide(
                store.as_ref(),
                &run,
                &steps,
                from,
                actor,
                timeout,
                self.core.clock.now(),
            )?;
            match self.core.commits.commit(Write::retry_run(&record, &wake)) {
                Ok(()) => break,
                // It moved on (another retry, a late record): decide again.
                Err(StoreError::Refused(Refused::Changed(_))) if tries < 5 => {}
                Err(StoreError::Refused(Refused::Busy { .. })) => {
                    return Err(RetryError::NotEnded {
                        run: run_id.to_owned(),
                        state: RunState::Running,
                    });
                }
                Err(StoreError::Refused(Refused::NotFound(_))) => {
                    return Err(RetryError::NotFound(run_id.to_owned()));
                }
                // The retry may have landed: if it did, the run is running
                // with no driver, and is woken after a pause.
                Err(e)
                    if e.outcome_unknown() && !weft_core::mutation::on("lost-retry-not-woken") =>
                {
                    self.core.wake_later(run_id);
                    return Err(e.into());
                }
                Err(e) => return Err(e.into()),
            }
        }
        let resumed = if self.core.retried(run_id) {
            Err(ResumeError::Resident(run_id.to_owned()))
        } else {
            match self.resume(run_id, observer) {
                // Claimed here, not resident (a fire of it being decided,
                // a load): noted, so that the claim's end wakes it; else
                // no one would (its lease is free, and it is no orphan).
                Err(ResumeError::Resident(id)) => {
                    if self.core.claim_or_note(&id) {
                        self.core.unclaim(&id);
                        self.core.wake_later(&id);
                    }
                    Err(ResumeError::Resident(id))
                }
                resumed => resumed,
            }
        };
        resumed.map_err(|e| {
            // Durable, and driven by nobody yet: woken after a pause,
            // unless another host took it first or it ended again.
            if !matches!(
                e,
                ResumeError::Driven { .. }
                    | ResumeError::NotRunning { .. }
                    | ResumeError::Resident(_)
            ) {
                self.core.wake_later(run_id);
            }
            RetryError::Resume {
                run: run_id.to_owned(),
                source: Box::new(e),
            }
        })
    }

    /// Pauses run `run_id`: it finishes the attempts under way, starts
    /// nothing new, and waits out of memory, its timers firing into the
    /// store (their records wait for its resume; a run's deadline still
    /// ends it). Resident here, the pause is committed once the calls
    /// under way are ([`Pausing::Pending`]); a run that waits suspended is
    /// paused in the store at once. `actor` is recorded. Blocking.
    pub fn pause(&self, run_id: &str, actor: &str) -> Result<Pausing, PauseError> {
        self.core.pause_run(run_id, actor)
    }

    /// Resumes paused run `run_id`: it is taken in here and goes on, first
    /// with what its timers and answers recorded while it was paused. A
    /// pause still pending here is dropped. `None` when the run goes on
    /// where it was (a pending pause) or is taken in elsewhere. Blocking.
    pub fn unpause(
        &self,
        run_id: &str,
        observer: Box<dyn Observer + Send>,
    ) -> Result<Option<RunHandle>, PauseError> {
        if self.core.unpause_run(run_id)? {
            return Ok(None);
        }
        match self.resume(run_id, observer) {
            Ok(handle) => Ok(Some(handle)),
            Err(ResumeError::Driven { .. } | ResumeError::NotRunning { .. }) => Ok(None),
            Err(_) => {
                self.core.wake_later(run_id);
                Ok(None)
            }
        }
    }

    /// Moves run `run_id`, which has not ended and follows revision
    /// `revisions.0` of its workflow, to `to` (revision `revisions.1`), at
    /// a step boundary: what it committed stays, and it goes on under
    /// `to`. Every leaf it has a record of must be a step of `to` with the
    /// same id and kind; otherwise it stays, and the error says why. A
    /// host that drives it loses it at its next commit (an attempt it has
    /// under way runs again under `to`); it is taken in here, unless it is
    /// parked. With `dry_run`, only checks. `actor` is recorded. Blocking.
    pub fn migrate(
        &self,
        run_id: &str,
        to: &Workflow,
        revisions: (u32, u32),
        actor: &str,
        dry_run: bool,
    ) -> Result<(), MigrateError> {
        let store = &self.core.launcher.store;
        for tries in 1.. {
            let run = store
                .run(run_id)?
                .ok_or_else(|| MigrateError::NotFound(run_id.to_owned()))?;
            let steps = store.steps(run_id)?;
            let (moved, definition, components) = self
                .core
                .launcher
                .migration(&run, &steps, to, revisions, actor)?;
            if dry_run {
                return Ok(());
            }
            let write = Write::migrate_run(&moved, &definition, components);
            match self.core.commits.commit(write) {
                Ok(()) => break,
                // It moved on meanwhile: decided again on what it is now.
                Err(StoreError::Refused(Refused::Changed(_))) if tries < 5 => {}
                Err(StoreError::Refused(Refused::RunEnded(_))) => {
                    return Err(MigrateError::Unmovable("it has ended".to_owned()));
                }
                Err(StoreError::Refused(Refused::NotFound(_))) => {
                    return Err(MigrateError::NotFound(run_id.to_owned()));
                }
                // The move may have landed: if it did, the run's lease is
                // free and nobody drives it, so a cell of it here is read
                // back, or it is woken after a pause (a wake of a run
                // another host holds leaves it there).
                Err(e) => {
                    if e.outcome_unknown()
                        && !weft_core::mutation::on("lost-migrate-not-woken")
                        && !self.core.retried(run_id)
                    {
                        self.core.wake_later(run_id);
                    }
                    return Err(e.into());
                }
            }
        }
        // A host drove it, or claimed it since it was read: the move freed
        // its lease (host `""`), and it is taken in here, under the new
        // revision (a cell of it here from before is read back). A parked
        // run keeps no lease and waits for a place; a claim that landed
        // after the move drives the new revision already.
        let freed = match store.lease(run_id) {
            Ok(lease) => lease.is_some_and(|lease| lease.host.is_empty()),
            Err(_) => true,
        };
        if freed && !weft_core::mutation::on("migrate-freed-left") && !self.core.retried(run_id) {
            match self.resume(run_id, Box::new(Quiet)) {
                Ok(_) | Err(ResumeError::Driven { .. } | ResumeError::NotRunning { .. }) => {}
                Err(_) => self.core.wake_later(run_id),
            }
        }
        Ok(())
    }

    /// Tries [`resume`](Self::resume) of run `run_id` again after a pause,
    /// and again after each failure, with the backoff of a failed commit:
    /// for a resume that failed because the store did.
    pub fn resume_later(&self, run_id: &str) {
        self.core.wake_later(run_id);
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
        // Claimed before the run is read: a fire of one of its timers
        // here is decided either before the read or after the run is taken
        // in, never between.
        if !self.core.claim(run_id) {
            return Err(ResumeError::Resident(run_id.to_owned()));
        }
        let drive = match self.core.take_in(run_id) {
            Ok(drive) => drive,
            Err(e) => {
                self.core.unclaim(run_id);
                return Err(e);
            }
        };
        observer.run_resumed(&drive.run);
        if !drive.run.suspended {
            self.core
                .telemetry
                .resumed(&drive.run, self.core.clock.now());
        }
        let (done, outcome) = sync_channel(1);
        let alive = Arc::new(());
        let handle = RunHandle {
            id: drive.run.id.clone(),
            _alive: Arc::clone(&alive),
            recorded: None,
            outcome,
        };
        // A suspended run waits out of memory, its timers armed here.
        self.core.admit_awake(Task {
            drive,
            observer,
            done,
            alive: Arc::downgrade(&alive),
        });
        Ok(handle)
    }
}

#[cfg(test)]
mod send_checks {
    fn is_send<T: Send>() {}
    fn is_sync<T: Sync>() {}
    #[test]
    fn run_state_can_move_between_threads() {
        is_send::<weft_model::Scope>();
        is_send::<weft_model::Workflow>();
        is_sync::<weft_model::Workflow>();
        is_send::<weft_runtime::Plugin>();
    }
}
