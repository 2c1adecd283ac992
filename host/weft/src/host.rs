//! A running weft host: the engine, the deployed workflows and the hub,
//! started in the one order that recovery needs. `weft serve` and `weft
//! run` start here (and the end-to-end tests through them), so the order
//! lives in one place.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use weft_core::Clock;
use weft_engine::plugins::{self, DirWatcher, ResolveError};
use weft_engine::sweep::{Pass, Retention, Swept};
use weft_engine::{Engine, EngineConfig, ResumeError};
use weft_model::WorkflowDir;
use weft_runtime::Plugin;
use weft_store::{DeploymentRecord, Store, StoreError, Wake};

use crate::api::Api;
use crate::hub::Hub;
use crate::services::Services;
use crate::services::deployments::{DeployError, Deployments};

/// What a host is made of, and how much of the store's state it takes
/// over when it starts.
#[derive(Debug)]
pub struct HostConfig {
    /// Where every durable fact lives.
    pub store: Arc<dyn Store>,
    /// Where plugins are found.
    pub plugins: plugins::PluginDir,
    /// The source of time.
    pub clock: Arc<dyn Clock>,
    /// The engine's limits.
    pub engine: EngineConfig,
    /// The workflow files to serve (each one not yet a revision is
    /// deployed). `None`: the host serves no deployments, as `weft run`.
    pub workflows: Option<WorkflowDir>,
    /// The folder `workflows` was read from: with [`recover`](Self::recover),
    /// a file written there later is deployed as it lands.
    pub workflows_dir: Option<PathBuf>,
    /// Take over the store: carry out its outbox, arm its timers, resume
    /// its interrupted runs, fire its cron triggers, deliver its messages
    /// and watch the plugins directory. Exactly one process per store
    /// should do so (`weft serve`); a process that only runs its own runs
    /// (`weft run`) leaves it off.
    pub recover: bool,
    /// Who hears what happens to plugin files. Default: tracing.
    pub events: Arc<dyn HostEvents>,
    /// How long the sweeper keeps ended runs, settled messages and dead
    /// letters when neither their workflow (`retain:`) nor their tenant
    /// says. A host that takes the store over sweeps the others away.
    /// Default: [`Retention::default`].
    pub retention: Retention,
}

/// Hears what a host does with the files of its plugins directory. Each
/// method defaults to a tracing event; called from the host's threads.
pub trait HostEvents: Send + Sync + std::fmt::Debug {
    /// A component in the plugins directory was loaded and registered.
    fn plugin_ready(&self, plugin: &Plugin, file: &Path) {
        tracing::info!(
            plugin = %plugin.meta().name,
            version = %plugin.meta().version,
            digest = %plugin.digest(),
            file = %file.display(),
            "plugin is ready"
        );
    }

    /// A file that landed in the plugins directory was refused; the
    /// registry's versions keep serving.
    fn plugin_rejected(&self, file: &Path, error: &ResolveError) {
        tracing::warn!(file = %file.display(), "rejected plugin file: {error}");
    }

    /// A file found by the start's scan of the plugins directory is not
    /// served.
    fn plugin_not_served(&self, file: &Path, error: &ResolveError) {
        tracing::warn!(file = %file.display(), "not serving plugin: {error}");
    }

    /// The plugins directory cannot be watched; files that land there are
    /// not picked up until the next start.
    fn not_watching(&self, dir: &Path, error: &str) {
        tracing::warn!(dir = %dir.display(), "not watching for plugins: {error}");
    }

    /// A workflow file written in the watched workflows folder was
    /// deployed as a new revision, which new runs start on.
    fn workflow_deployed(&self, record: &DeploymentRecord, file: &Path) {
        tracing::info!(
            workflow = %record.workflow,
            revision = record.revision,
            file = %file.display(),
            "workflow deployed from its file"
        );
    }

    /// A workflow file written in the watched workflows folder was
    /// refused; the revision served before keeps serving.
    fn workflow_rejected(&self, file: &Path, error: &DeployError) {
        tracing::warn!(file = %file.display(), "not deploying the workflow file: {error}");
    }
}

/// The default [`HostEvents`]: tracing only.
#[derive(Debug, Clone, Copy, Default)]
pub struct Traced;

impl HostEvents for Traced {}

impl HostConfig {
    /// A host that drives only the runs it starts or resumes itself (`weft
    /// run`), with the default engine limits: it serves no deployments and
    /// takes nothing over.
    pub fn local(
        store: Arc<dyn Store>,
        plugins: plugins::PluginDir,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            plugins,
            clock,
            engine: EngineConfig::default(),
            workflows: None,
            workflows_dir: None,
            recover: false,
            events: Arc::new(Traced),
            retention: Retention::default(),
        }
    }

    /// A host for maintenance of the store (`weft runs cancel`, `weft
    /// schedules add` and the like without a server): it serves no
    /// deployments, takes nothing over, arms no timers, starts no hub, runs
    /// one worker, and is not listed in the store's hosts (so its going
    /// sets no peer looking for runs to take over); the operations come
    /// through its [`Host::services`] as a serving host's do.
    pub fn maintenance(
        store: Arc<dyn Store>,
        plugins: plugins::PluginDir,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self::local(store, plugins, clock).with_engine(EngineConfig {
            workers: 1,
            take_over: false,
            listed: false,
            ..EngineConfig::default()
        })
    }

    /// This host serves `workflows` and every revision deployed before, and
    /// takes the store over (`weft serve`).
    pub fn serving(self, workflows: WorkflowDir) -> Self {
        Self {
            workflows: Some(workflows),
            recover: true,
            ..self
        }
    }

    /// [`serving`](Self::serving) the workflows of folder `dir`, read now,
    /// and each file written there later, as it lands.
    pub fn serving_dir(self, workflows: WorkflowDir, dir: PathBuf) -> Self {
        Self {
            workflows_dir: Some(dir),
            ..self.serving(workflows)
        }
    }

    /// The engine's limits.
    pub fn with_engine(self, engine: EngineConfig) -> Self {
        Self { engine, ..self }
    }

    /// Who hears what happens to plugin files.
    pub fn with_events(self, events: Arc<dyn HostEvents>) -> Self {
        Self { events, ..self }
    }

    /// How long the sweeper keeps what it deletes, when neither
    /// workflow nor tenant says.
    pub fn retaining(self, retention: Retention) -> Self {
        Self { retention, ..self }
    }
}

/// Why a host could not start. Nothing it did before the failure is
/// undone; each step it takes is durable and safe to take again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The engine's threads could not start.
    #[error("cannot start the engine: {0}")]
    Engine(std::io::Error),
    /// The deployed workflows could not be read or recorded.
    #[error("cannot read the deployed workflows: {0}")]
    Deployments(StoreError),
    /// A recovery step failed in the store.
    #[error("cannot {step}: {error}")]
    Recovery {
        /// The step, such as "carry out the store's outbox".
        step: &'static str,
        /// What the store said.
        error: StoreError,
    },
    /// A thread could not be started.
    #[error("cannot start {what}: {error}")]
    Thread {
        /// Which thread.
        what: &'static str,
        /// What the system said.
        error: std::io::Error,
    },
}

/// A started host. Dropping it stops nothing that is durable: a host that
/// goes away is recovered by the next one to start on its store.
#[derive(Debug)]
pub struct Host {
    engine: Arc<Engine>,
    deployments: Arc<Deployments>,
    hub: Hub,
    resumed: usize,
    warnings: Vec<String>,
    /// Set once the outbox was carried out for [`Host::resume`].
    replayed: std::sync::OnceLock<()>,
    _watcher: Option<DirWatcher>,
    _workflows_watcher: Option<DirWatcher>,
}

impl Host {
    /// Starts a host. Without [`HostConfig::recover`], only the engine
    /// starts (and the deployments, if any). With it, in this order, each
    /// step only after the one before it is done:
    ///
    /// 1. the workflows are deployed and served (before anything runs, so
    ///    a resumed `subflow` finds its target);
    /// 2. the outbox is carried out: child runs decided before a crash and
    ///    not yet recorded are recorded, before any parent resumes;
    /// 3. every pending timer is armed (one already due fires at once);
    /// 4. every run left `running` resumes at its last commit;
    /// 5. the cron triggers are brought in line with the workflows, then
    ///    fired (missed fires follow each trigger's catch-up policy);
    /// 6. the plugins directory is watched and scanned;
    /// 7. the hub starts delivering messages.
    ///
    /// Blocking; a store with many runs takes a while.
    pub fn start(config: HostConfig) -> Result<Self, HostError> {
        // Only a recovering host takes over the runs of hosts that are
        // gone; `weft run` and `weft runs resume` drive their own.
        let engine_config = EngineConfig {
            take_over: config.engine.take_over && config.recover,
            ..config.engine.clone()
        };
        let mut engine = Engine::with_config(
            Arc::clone(&config.store),
            config.plugins,
            Arc::clone(&config.clock),
            engine_config,
        )
        .map_err(HostError::Engine)?;
        let (deployments, warnings) = match &config.workflows {
            Some(files) => {
                Deployments::open(Arc::clone(&config.store), Arc::clone(&config.clock), files)
                    .map_err(HostError::Deployments)?
            }
            None => (
                Deployments::none(Arc::clone(&config.store), Arc::clone(&config.clock)),
                Vec::new(),
            ),
        };
        let deployments = Arc::new(deployments);
        engine.set_workflows(deployments.clone());
        // Each tenant's turns and resident cap hold from the first run
        // resumed.
        let tenants = config
            .store
            .tenants()
            .map_err(|error| HostError::Recovery {
                step: "read the tenants' quotas",
                error,
            })?;
        let mut quotas = Quotas::default();
        quotas.enforce(&engine, tenants);
        let mut resumed = 0;
        if config.recover {
            resumed = recover(&mut engine, &deployments)?;
        }
        let engine = Arc::new(engine);
        let watcher = if config.recover {
            let watcher = watch_plugins(&engine, &config.events);
            scan_plugins(&engine, &config.events)?;
            watcher
        } else {
            None
        };
        let workflows_watcher = match &config.workflows_dir {
            Some(dir) if config.recover => {
                watch_workflows(dir, &engine, &deployments, &config.events)
            }
            _ => None,
        };
        if config.recover {
            look_at_the_store(&engine, &deployments, quotas)?;
            start_sweeper(&engine, config.retention)?;
        }
        let hub = Hub::new(
            engine.committer(),
            Arc::clone(engine.egress()),
            engine.vault().clone(),
        );
        if config.recover {
            hub.start().map_err(|error| HostError::Thread {
                what: "delivering messages",
                error,
            })?;
        }
        Ok(Self {
            engine,
            deployments,
            hub,
            resumed,
            warnings,
            replayed: std::sync::OnceLock::new(),
            _watcher: watcher,
            _workflows_watcher: workflows_watcher,
        })
    }

    /// The engine: start, cancel and answer runs.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The workflows served, and deployment of new revisions.
    pub fn deployments(&self) -> &Arc<Deployments> {
        &self.deployments
    }

    /// The hub: subscriptions, consumers, acks.
    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    /// The host's operations, each with one entrance.
    pub fn services(&self) -> Services {
        Services::new(
            Arc::clone(&self.engine),
            Arc::clone(&self.deployments),
            self.hub.clone(),
        )
    }

    /// The HTTP API over this host.
    pub fn api(&self) -> Api {
        Api::new(
            Arc::clone(&self.engine),
            Arc::clone(&self.deployments),
            self.hub.clone(),
        )
    }

    /// Resumes interrupted run `id` in this host, for a host started
    /// without [`HostConfig::recover`] (`weft runs resume`). Before the
    /// first resume, the outbox is carried out, so that no parent resumes
    /// before the child runs it decided on are recorded.
    pub fn resume(
        &self,
        id: &str,
        observer: Box<dyn weft_engine::Observer + Send>,
    ) -> Result<weft_engine::RunHandle, ResumeError> {
        if self.replayed.get().is_none() {
            self.engine.replay_outbox()?;
            let _ = self.replayed.set(());
        }
        self.engine.resume(id, observer)
    }

    /// How many interrupted runs this host resumed when it started.
    pub fn resumed(&self) -> usize {
        self.resumed
    }

    /// The workflow revisions the host could not serve, each with why.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Stops delivering messages. Runs in progress are left to the next
    /// host on the store.
    pub fn stop(&self) {
        self.hub.stop();
    }
}

/// Steps 2 to 5 of [`Host::start`]: the engine's recovery (outbox,
/// timers, interrupted runs), then the cron triggers; returns how many
/// runs resumed.
fn recover(engine: &mut Engine, deployments: &Deployments) -> Result<usize, HostError> {
    let recovered = engine.recover(RESUMERS).map_err(|e| HostError::Recovery {
        step: e.step,
        error: e.error,
    })?;
    if recovered.outbox_rows > 0 {
        tracing::info!(rows = recovered.outbox_rows, "carried out open outbox rows");
    }
    if recovered.timers > 0 {
        tracing::info!(timers = recovered.timers, "armed pending timers");
    }
    let triggers = engine
        .sync_schedules(&deployments.current())
        .map_err(|error| HostError::Recovery {
            step: "record the workflows' cron triggers",
            error,
        })?;
    engine.run_schedules().map_err(|error| HostError::Thread {
        what: "the cron thread",
        error,
    })?;
    if triggers > 0 {
        tracing::info!(triggers, "cron triggers active");
    }
    Ok(recovered.resumed)
}

/// Threads that resume interrupted runs at start-up: each resume claims
/// its run with a synced commit, and the group commit puts the claims of
/// all of them in one transaction, so a hundred thousand runs take
/// seconds, not one sync each.
const RESUMERS: usize = 64;

/// Step 6, the watch: a component dropped into the plugins directory is
/// checked, compiled and registered as it lands; one that fails is
/// reported, and the registry's versions keep serving.
fn watch_plugins(engine: &Arc<Engine>, events: &Arc<dyn HostEvents>) -> Option<DirWatcher> {
    let dir = engine.plugins().dir().to_owned();
    let watched = std::fs::create_dir_all(&dir)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let engine = Arc::clone(engine);
            let events = Arc::clone(events);
            plugins::watch(&dir, move |path| match engine.plugins().refresh(&path) {
                Ok(plugin) => events.plugin_ready(&plugin, &path),
                Err(e) => events.plugin_rejected(&path, &e),
            })
            .map_err(|e| e.to_string())
        });
    watched.inspect_err(|e| events.not_watching(&dir, e)).ok()
}

/// Step 6 too: a workflow file written in the served folder is deployed
/// as it lands (checked as `weft deploy` checks it), and one that fails is
/// reported while the revision before keeps serving. A file removed is
/// served until the next start.
fn watch_workflows(
    dir: &Path,
    engine: &Arc<Engine>,
    deployments: &Arc<Deployments>,
    events: &Arc<dyn HostEvents>,
) -> Option<DirWatcher> {
    let engine = Arc::clone(engine);
    let deployments = Arc::clone(deployments);
    let told = Arc::clone(events);
    plugins::watch_files(
        dir,
        "weft-workflow-watch",
        |path| {
            !weft_model::cases::is_test_file(path)
                && path
                    .extension()
                    .and_then(|ext| ext.to_str())
                    .is_some_and(|ext| matches!(ext, "yaml" | "yml" | "json"))
        },
        move |path| {
            // A panic fails this file's deployment, not the watch.
            let deployed = weft_core::panics::contain("weft-workflow-watch", || {
                deployments.deploy_file(&engine, &path)
            });
            match deployed {
                Ok(Ok(deployed)) if deployed.created => {
                    told.workflow_deployed(&deployed.record, &path);
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => told.workflow_rejected(&path, &e),
                Err(panic) => {
                    tracing::error!(file = %path.display(), "deploying it panicked: {panic}")
                }
            }
        },
    )
    .inspect_err(|e| {
        tracing::warn!(dir = %dir.display(), "not watching for workflow files: {e}");
    })
    .ok()
}

/// Step 6, the scan: every component in the plugins directory joins the
/// registry, off the start's path (compiling one that is not cached can
/// take a while).
fn scan_plugins(engine: &Arc<Engine>, events: &Arc<dyn HostEvents>) -> Result<(), HostError> {
    let engine = Arc::clone(engine);
    let events = Arc::clone(events);
    std::thread::Builder::new()
        .name("weft-plugin-scan".to_owned())
        .spawn(move || {
            for (path, error) in engine.plugins().scan() {
                events.plugin_not_served(&path, &error);
            }
        })
        .map(drop)
        .map_err(|error| HostError::Thread {
            what: "the plugin scan",
            error,
        })
}

/// How often a serving host looks in the store for what other hosts on
/// it deployed or added, on a store that does not tell it (redb).
const LOOK: std::time::Duration = std::time::Duration::from_secs(1);

/// The same, on a store that tells it as other hosts commit (PostgreSQL):
/// a safety net for news that is lost.
const LOOK_HEARING: std::time::Duration = std::time::Duration::from_secs(5);

/// How long the sweeper rests after a pass over every run, and between
/// two pages of one.
const SWEEP_REST: std::time::Duration = std::time::Duration::from_secs(10);
const PAGE_REST: std::time::Duration = std::time::Duration::from_millis(10);

/// Starts the sweeper of `engine`, as `weft serve` does: a pass over the
/// store, a page at a time, deleting what has outlived `retention` (see
/// `weft_engine::sweep`), then a rest. The thread ends with the engine.
pub fn start_sweeper(engine: &Arc<Engine>, retention: Retention) -> Result<(), HostError> {
    let engine = Arc::downgrade(engine);
    std::thread::Builder::new()
        .name("weft-sweeper".to_owned())
        .spawn(move || {
            loop {
                let mut pass = Pass::new();
                let mut swept = Swept::default();
                while !pass.is_done() {
                    std::thread::sleep(PAGE_REST);
                    let Some(engine) = engine.upgrade() else {
                        return;
                    };
                    match engine.sweep_page(&mut pass, &retention, false) {
                        Ok(page) => swept += page,
                        Err(e) => {
                            tracing::warn!("the sweeper stops this pass: {e}");
                            break;
                        }
                    }
                }
                if !swept.is_empty() {
                    tracing::info!(
                        runs = swept.runs,
                        steps = swept.steps,
                        kept = swept.kept,
                        messages = swept.messages,
                        dead_letters = swept.dead_letters,
                        tombstones = swept.tombstones,
                        revisions = swept.revisions,
                        blobs = swept.blobs,
                        snapshot_revisions = swept.snapshot_revisions,
                        snapshot_entries = swept.snapshot_entries,
                        "swept what outlived its retention"
                    );
                }
                let rest = std::time::Instant::now() + SWEEP_REST;
                while std::time::Instant::now() < rest {
                    std::thread::sleep(LOOK.min(SWEEP_REST));
                    if engine.strong_count() == 0 {
                        return;
                    }
                }
            }
        })
        .map(drop)
        .map_err(|error| HostError::Thread {
            what: "sweeping the store",
            error,
        })
}

/// Other hosts on the store: as soon as the store tells of news (on
/// PostgreSQL, [`weft_store::Wakes`]; else every [`LOOK`]), the workflow
/// revisions and plugins they deployed and the tenants' quotas they set
/// are taken in here, so that any host serves and enforces them. The
/// thread ends with the engine (within a [`LOOK_HEARING`]).
fn look_at_the_store(
    engine: &Arc<Engine>,
    deployments: &Arc<Deployments>,
    mut quotas: Quotas,
) -> Result<(), HostError> {
    const NEWS: [Wake; 3] = [Wake::Deployed, Wake::Plugins, Wake::Settings];
    let wakes = engine.store().wakes();
    let mut seen = wakes.as_ref().map_or(0, |wakes| wakes.seen(&NEWS));
    let engine = Arc::downgrade(engine);
    let deployments = Arc::downgrade(deployments);
    std::thread::Builder::new()
        .name("weft-store-look".to_owned())
        .spawn(move || {
            loop {
                match &wakes {
                    Some(wakes) => seen = wakes.wait(&NEWS, seen, LOOK_HEARING),
                    None => std::thread::sleep(LOOK),
                }
                let (Some(engine), Some(deployments)) = (engine.upgrade(), deployments.upgrade())
                else {
                    return;
                };
                if let Err(e) = engine.plugins().reload_registry() {
                    tracing::debug!("cannot read the plugin registry: {e}");
                }
                if let Err(e) = deployments.refresh() {
                    tracing::debug!("cannot read the deployed workflows: {e}");
                }
                match engine.store().tenants() {
                    Ok(tenants) => quotas.enforce(&engine, tenants),
                    Err(e) => tracing::debug!("cannot read the tenants' quotas: {e}"),
                }
            }
        })
        .map(drop)
        .map_err(|error| HostError::Thread {
            what: "looking at the store",
            error,
        })
}

/// The tenants' quotas this host enforces, as last read from the store:
/// a tenant changed or removed through another host is held to its new
/// quota here as the news of it arrives ([`look_at_the_store`]).
#[derive(Default)]
struct Quotas(HashMap<String, weft_store::Quota>);

impl Quotas {
    /// Holds the engine to `tenants`, the store's rows now: a changed
    /// quota is enforced, and a tenant whose row is gone goes back to no
    /// limits and no egress rules, as its removal through this host does.
    fn enforce(&mut self, engine: &Engine, tenants: Vec<weft_store::TenantRecord>) {
        let mut now = HashMap::with_capacity(tenants.len());
        for tenant in tenants {
            if self.0.get(&tenant.name) != Some(&tenant.quota) {
                crate::services::enforce_quota(engine, &tenant.name, &tenant.quota);
            }
            now.insert(tenant.name, tenant.quota);
        }
        for gone in self.0.keys().filter(|name| !now.contains_key(*name)) {
            crate::services::release_quota(engine, gone);
        }
        self.0 = now;
    }
}
