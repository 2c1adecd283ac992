//! The seam between the engine and the code its steps run: a run's
//! [`StepRunner`] makes its plugin calls, and a [`RunnerSource`] pins a new
//! run's plugins and loads a recorded run's back. The engine's walk and
//! scheduler see only these traits, so they are tested with a fake runner
//! and no WebAssembly; [`WasmPlugins`] is the real source, over the plugin
//! registry and the wasmtime runtime.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::Value;

use weft_core::Clock;
use weft_core::egress::{Egress, Policy};
use weft_core::{Emission, ErrorRecord, KvEffects, LogLine, Versioned};
use weft_model::{Call, Workflow};
use weft_runtime::{
    CallError, CallOptions, KvAccess, KvSource, Plugin, Secrets, SharedSnapshots, StepContext,
};
use weft_store::{PinnedPlugin, RunRecord, Store, StoreError};

use crate::egress::EgressPolicies;
use crate::error::{ResumeError, StartError};
use crate::plugins::PluginDir;
use crate::secrets::{SecretError, Vault};
use crate::snapshots::RunSnapshots;

/// One call of a step's pinned plugin.
#[derive(Debug, Clone)]
pub struct StepCall {
    /// Who is calling: the run, the step, the attempt, and the key that
    /// stays the same across the step's attempts.
    pub context: StepContext,
    /// The leaf's path in the run (`charge`, `each[2]/fetch`).
    pub path: String,
    /// The input, as JSON text.
    pub input: String,
    /// The call's deadline; the runner's default when `None`.
    pub timeout: Option<Duration>,
    /// The cap on the call's memory, in bytes; the runner's default when
    /// `None`.
    pub memory_limit: Option<u64>,
    /// The run's tenant's ceilings on the deadline and the memory cap,
    /// defaults included.
    pub ceilings: (Option<Duration>, Option<u64>),
    /// Set when the run leaves the engine's hands: the call should stop.
    pub cancel: Arc<AtomicBool>,
    /// Where the step may send HTTP requests (`allow: {http: [...]}`).
    pub grants: Vec<weft_core::egress::Rule>,
    /// The tenant's secrets the step may read (`secrets: [...]`).
    pub secrets: Vec<String>,
    /// A command's arguments and environment (`args`, `env`), evaluated.
    pub command: weft_runtime::CommandLine,
}

/// What one call gave, with what it did besides its result.
#[derive(Debug, Clone)]
pub struct StepOutcome {
    /// The output, or the error the step ends this attempt with.
    pub result: Result<Value, ErrorRecord>,
    /// What the call logged.
    pub logs: Vec<LogLine>,
    /// Its key-value reads and buffered writes.
    pub kv: KvEffects,
    /// The messages it emitted, committed only if it succeeded.
    pub emitted: Vec<Emission>,
    /// The HTTP requests it made, refused ones included.
    pub http: Vec<weft_core::HttpCall>,
}

/// The plugins one run is pinned to, by step id. Shared by the run's
/// attempts, which run on any worker at once.
pub trait StepRunner: Send + Sync + std::fmt::Debug {
    /// The name of the plugin pinned for step `step`; `None` when none is
    /// (the attempt then fails `internal`).
    fn plugin(&self, step: &str) -> Option<&str>;

    /// Checks `input` against the input schema of step `step`'s plugin;
    /// `Err` lists every problem.
    fn check_input(&self, step: &str, input: &Value) -> Result<(), Vec<String>>;

    /// Makes the call of step `call.context.step_id`. Blocking. Never
    /// fails: a failure is the outcome's error.
    fn call(&self, call: &StepCall) -> StepOutcome;
}

/// A new run's plugins, pinned at its start.
#[derive(Debug)]
pub struct Pinned {
    /// Makes its calls.
    pub runner: Arc<dyn StepRunner>,
    /// What the run record says each call step is pinned to, by step id.
    pub pins: BTreeMap<String, PinnedPlugin>,
    /// The components to store with the run: digest and bytes, once each.
    pub components: Vec<(String, Arc<[u8]>)>,
    /// The revision of each snapshot store the run reads, pinned now.
    pub snapshots: BTreeMap<String, u32>,
}

/// Where runs get their plugins.
pub trait RunnerSource: Send + Sync + std::fmt::Debug {
    /// Resolves the plugin of every call step of `workflow`, at every
    /// depth. May compile; nothing is stored.
    fn pin(&self, workflow: &Workflow) -> Result<Pinned, StartError>;

    /// The runner of recorded run `run`, from the components it is pinned
    /// to (never from a newer version).
    fn load(
        &self,
        run: &RunRecord,
        workflow: &Workflow,
    ) -> Result<Arc<dyn StepRunner>, ResumeError>;
}

/// The real source: plugins from the registry and the plugins directory,
/// run in wasmtime, with the workflow's key-value space in the store.
#[derive(Debug)]
pub struct WasmPlugins {
    plugins: Arc<PluginDir>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    egress: Arc<EgressPolicies>,
    vault: Vault,
    metrics: Option<Arc<weft_core::metrics::Metrics>>,
    /// Steps whose plugin is neither pinned nor loaded: another runner
    /// answers their calls (`weft test`'s mocks).
    mocked: std::collections::BTreeSet<String>,
}

impl WasmPlugins {
    /// A source over `plugins`, reading key-value data from `store`. Its
    /// steps reach no secret, and only the hosts their grants name.
    pub fn new(plugins: Arc<PluginDir>, store: Arc<dyn Store>) -> Self {
        let vault = Vault::new(Arc::clone(&store), None);
        Self {
            plugins,
            store,
            clock: Arc::new(weft_core::SystemClock),
            egress: Arc::default(),
            vault,
            metrics: None,
            mocked: std::collections::BTreeSet::new(),
        }
    }

    /// The same source, leaving the plugins of steps `mocked` (by id)
    /// unpinned and unloaded: their calls are another runner's to answer,
    /// and the runner this source makes has no plugin for them.
    pub fn except(self, mocked: std::collections::BTreeSet<String>) -> Self {
        Self { mocked, ..self }
    }

    /// The same source, timing each guest's instantiation and call in
    /// `metrics`.
    pub fn metered(self, metrics: Option<Arc<weft_core::metrics::Metrics>>) -> Self {
        Self { metrics, ..self }
    }

    /// The same source, measuring expiry (of key-value data and snapshot
    /// entries) by `clock`.
    pub fn timed(self, clock: Arc<dyn Clock>) -> Self {
        Self { clock, ..self }
    }

    /// The same source, with steps' requests bound by `egress` and their
    /// secrets opened by `vault`.
    pub fn reaching(self, egress: Arc<EgressPolicies>, vault: Vault) -> Self {
        Self {
            egress,
            vault,
            ..self
        }
    }

    fn runner(
        &self,
        workflow: &Workflow,
        plugins: HashMap<String, Plugin>,
        snapshots: &BTreeMap<String, u32>,
    ) -> Result<WasmRunner, StoreError> {
        let snapshots: Option<SharedSnapshots> = if workflow.snapshots.is_empty() {
            None
        } else {
            Some(Arc::new(RunSnapshots::new(
                Arc::clone(&self.store),
                Arc::clone(&self.clock),
                workflow,
                snapshots,
            )?))
        };
        let mut meters = HashMap::new();
        if let Some(metrics) = &self.metrics {
            let tenant = weft_core::tenant::of(&workflow.id);
            let mut by_name: HashMap<&str, weft_core::metrics::PluginMeters> = HashMap::new();
            for (step, plugin) in &plugins {
                let name = plugin.meta().name.as_str();
                let found = by_name
                    .entry(name)
                    .or_insert_with(|| metrics.plugin(tenant, name));
                meters.insert(step.clone(), found.clone());
            }
        }
        Ok(WasmRunner {
            meters,
            plugins,
            kv: KvAccess {
                space: format!("workflow/{}", workflow.id),
                source: Arc::new(StoreKv(Arc::clone(&self.store), Arc::clone(&self.clock))),
            },
            snapshots,
            egress: Arc::clone(&self.egress),
            vault: self.vault.clone(),
        })
    }
}

impl RunnerSource for WasmPlugins {
    fn pin(&self, workflow: &Workflow) -> Result<Pinned, StartError> {
        let mut plugins = HashMap::new();
        for step in workflow.all_steps() {
            let Some(call) = step.call() else { continue };
            if self.mocked.contains(&step.id) {
                continue;
            }
            let plugin = self
                .plugins
                .resolve_in(weft_core::tenant::of(&workflow.id), &call.uses)
                .map_err(|source| StartError::Plugin {
                    origin: workflow.origin.clone(),
                    line: step.line,
                    step: step.id.clone(),
                    source: Box::new(source),
                })?;
            let policy = self.egress.policy(weft_core::tenant::of(&workflow.id));
            check_reach(&plugin, call, &policy).map_err(|message| StartError::Reach {
                origin: workflow.origin.clone(),
                line: step.line,
                step: step.id.clone(),
                message,
            })?;
            plugins.insert(step.id.clone(), plugin);
        }
        let mut distinct: Vec<&Plugin> = plugins.values().collect();
        distinct.sort_by_key(|p| p.digest());
        distinct.dedup_by_key(|p| p.digest());
        let components = distinct
            .iter()
            .map(|p| (p.digest().to_string(), p.bytes()))
            .collect();
        let pins = plugins
            .iter()
            .map(|(id, plugin)| (id.clone(), pin(plugin)))
            .collect();
        let snapshots =
            crate::snapshots::pins(self.store.as_ref(), workflow).map_err(|(store, error)| {
                StartError::Snapshot {
                    origin: workflow.origin.clone(),
                    store,
                    error: error.map(|e| e.to_string()),
                }
            })?;
        let runner = self
            .runner(workflow, plugins, &snapshots)
            .map_err(StartError::Store)?;
        Ok(Pinned {
            runner: Arc::new(runner),
            pins,
            components,
            snapshots,
        })
    }

    fn load(
        &self,
        run: &RunRecord,
        workflow: &Workflow,
    ) -> Result<Arc<dyn StepRunner>, ResumeError> {
        let mut loaded: BTreeMap<&str, Plugin> = BTreeMap::new();
        let mut plugins = HashMap::new();
        for step in workflow.all_steps() {
            if step.call().is_none() || self.mocked.contains(&step.id) {
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
            let plugin = self
                .plugins
                .by_digest(&pinned.digest)
                .map_err(|e| component_error(e.to_string()))?;
            loaded.insert(&pinned.digest, plugin.clone());
            plugins.insert(step.id.clone(), plugin);
        }
        Ok(Arc::new(self.runner(workflow, plugins, &run.snapshots)?))
    }
}

/// Pinned wasm plugins and the workflow's key-value space.
#[derive(Debug)]
struct WasmRunner {
    plugins: HashMap<String, Plugin>,
    kv: KvAccess,
    snapshots: Option<SharedSnapshots>,
    egress: Arc<EgressPolicies>,
    vault: Vault,
    /// Each plugin step's metrics, when the engine counts.
    meters: HashMap<String, weft_core::metrics::PluginMeters>,
}

impl StepOutcome {
    /// An outcome with `result` and nothing else: no logs, no key-value
    /// effects, no messages.
    pub fn of(result: Result<Value, ErrorRecord>) -> Self {
        Self {
            result,
            logs: Vec::new(),
            kv: KvEffects::default(),
            emitted: Vec::new(),
            http: Vec::new(),
        }
    }
}

impl StepRunner for WasmRunner {
    fn plugin(&self, step: &str) -> Option<&str> {
        self.plugins.get(step).map(|p| p.meta().name.as_str())
    }

    fn check_input(&self, step: &str, input: &Value) -> Result<(), Vec<String>> {
        self.plugins
            .get(step)
            .map_or(Ok(()), |plugin| plugin.check_input(input))
    }

    fn call(&self, call: &StepCall) -> StepOutcome {
        let started = std::time::Instant::now();
        let outcome = self.call_plugin(call);
        if let Some(meters) = self.meters.get(&call.context.step_id) {
            meters.step.observe(started.elapsed().as_secs_f64());
            match outcome.result {
                Ok(_) => meters.ok.inc(),
                Err(_) => meters.error.inc(),
            };
        }
        outcome
    }
}

impl WasmRunner {
    fn call_plugin(&self, call: &StepCall) -> StepOutcome {
        let Some(plugin) = self.plugins.get(&call.context.step_id) else {
            return StepOutcome::of(Err(ErrorRecord::internal(format!(
                "no plugin is pinned for step `{}`",
                call.context.step_id
            ))));
        };
        let tenant = call.context.tenant.as_str();
        let mut secrets = Secrets::default();
        let digest = plugin.digest().to_string();
        for name in &call.secrets {
            match self.vault.get(tenant, name, (&plugin.meta().name, &digest)) {
                Ok(value) => secrets.grant(name.clone(), value),
                Err(e) => {
                    let code = match e {
                        SecretError::NotGranted { .. } => "secret_not_granted",
                        _ => "secrets",
                    };
                    return StepOutcome::of(Err(ErrorRecord {
                        code: code.to_owned(),
                        message: e.to_string(),
                        retryable: matches!(e, SecretError::Store(_)),
                        details: None,
                    }));
                }
            }
        }
        let egress = (!call.grants.is_empty())
            .then(|| Arc::new(Egress::new(call.grants.clone(), self.egress.policy(tenant))));
        let options = CallOptions {
            timeout: call.timeout,
            memory_limit: call.memory_limit,
            max_timeout: call.ceilings.0,
            max_memory_limit: call.ceilings.1,
            kv: Some(self.kv.clone()),
            cancel: Some(Arc::clone(&call.cancel)),
            egress,
            secrets,
            snapshots: self.snapshots.clone(),
            command: call.command.clone(),
        };
        let outcome = plugin.call(&call.context, &call.input, &options);
        if let Some(meters) = self.meters.get(&call.context.step_id) {
            // A call that found a spare instance: the spare's making.
            let instantiate = outcome.timing.spare.unwrap_or(outcome.timing.instantiate);
            meters.instantiate.observe(instantiate.as_secs_f64());
            meters.call.observe(outcome.timing.call.as_secs_f64());
        }
        StepOutcome {
            result: outcome.result.map_err(|e| error_record(&e)),
            logs: outcome.logs,
            kv: outcome.kv,
            emitted: outcome.emitted,
            http: outcome.http,
        }
    }
}

/// Checks what a call step grants against what its plugin imports and what
/// its tenant's `policy` allows: a plugin that makes HTTP requests needs at
/// least one grant, and every grant must be within the policy. An HTTP
/// handler is not held to the first: the `wasi:http/proxy` world it is built
/// for imports the outgoing handler whether it makes requests or not (a
/// request without a grant is still refused, and fails the attempt).
pub fn check_reach(plugin: &Plugin, call: &Call, policy: &Policy) -> Result<(), String> {
    if plugin.imports_http() && !plugin.is_handler() && call.allow_http.is_empty() {
        return Err(format!(
            "plugin `{}` imports `wasi:http/outgoing-handler` (it makes HTTP requests), \
             but the step grants it no destination; add `allow: {{http: [\"https://host\"]}}`",
            plugin.meta().name
        ));
    }
    for grant in &call.allow_http {
        policy.check_grant(grant)?;
    }
    if !plugin.is_command() && (call.args.is_some() || call.env.is_some()) {
        return Err(format!(
            "`args` and `env` are for a command (a WASI program that reads its input on \
             stdin); plugin `{}` is a {}, whose input is `with` alone",
            plugin.meta().name,
            plugin.kind()
        ));
    }
    Ok(())
}

/// A call's error as the run records it.
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

/// The store, as the runtime reads key-value data, and the clock expiry
/// is measured by.
#[derive(Debug)]
struct StoreKv(Arc<dyn Store>, Arc<dyn Clock>);

impl KvSource for StoreKv {
    fn get(&self, space: &str, key: &str) -> Result<Versioned, String> {
        self.0.kv_get(space, key).map_err(|e| e.to_string())
    }

    fn list(
        &self,
        space: &str,
        prefix: &str,
        limit: usize,
        now: u64,
    ) -> Result<Vec<String>, String> {
        self.0
            .kv_list(space, prefix, limit, now)
            .map_err(|e| e.to_string())
    }

    fn now(&self) -> u64 {
        self.1.now().0
    }
}

fn pin(plugin: &Plugin) -> PinnedPlugin {
    PinnedPlugin {
        name: plugin.meta().name.clone(),
        version: plugin.meta().version.to_string(),
        digest: plugin.digest().to_string(),
    }
}
