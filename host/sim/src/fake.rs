//! The simulated plugins: no WebAssembly, the same seam the engine's own
//! tests use (`RunnerSource`). Each plugin is a pure function of its call,
//! so a seed replays them exactly.
//!
//! - `count` reads key `n` of its workflow's key space, writes `n + 1`, and
//!   emits one message to channel `counted`: its KV write and its message
//!   must land exactly once per success.
//! - `flaky` fails its first attempt retryably, then succeeds.
//! - `echo` gives back its input.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use weft_core::{Emission, ErrorRecord, KvEffects};
use weft_engine::{
    Pinned, ResumeError, RunnerSource, StartError, StepCall, StepOutcome, StepRunner,
};
use weft_model::Workflow;
use weft_store::{PinnedPlugin, RunRecord, Store};

/// The key space of workflow `workflow`, as the real runtime names it.
pub(crate) fn space(workflow: &str) -> String {
    format!("workflow/{workflow}")
}

/// Pins call steps to the simulated plugins.
#[derive(Debug)]
pub(crate) struct Source {
    store: Arc<dyn Store>,
}

impl Source {
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }
}

fn pin(name: &str) -> PinnedPlugin {
    PinnedPlugin {
        name: name.to_owned(),
        version: "1.0.0".to_owned(),
        digest: format!("sha256:{:0>64}", name.len()),
    }
}

/// One run's pins: step id to plugin name.
#[derive(Debug)]
struct Runner {
    store: Arc<dyn Store>,
    plugins: BTreeMap<String, String>,
}

impl RunnerSource for Source {
    fn pin(&self, workflow: &Workflow) -> Result<Pinned, StartError> {
        let pins: BTreeMap<String, PinnedPlugin> = workflow
            .all_steps()
            .into_iter()
            .filter_map(|step| Some((step.id.clone(), pin(&step.call()?.uses.name))))
            .collect();
        let components: BTreeMap<String, Arc<[u8]>> = pins
            .values()
            .map(|p| (p.digest.clone(), Arc::from(p.name.as_bytes())))
            .collect();
        Ok(Pinned {
            runner: self.runner(&pins),
            pins,
            components: components.into_iter().collect(),
            snapshots: BTreeMap::new(),
        })
    }

    fn load(
        &self,
        run: &RunRecord,
        _workflow: &Workflow,
    ) -> Result<Arc<dyn StepRunner>, ResumeError> {
        Ok(self.runner(&run.plugins))
    }
}

impl Source {
    fn runner(&self, pins: &BTreeMap<String, PinnedPlugin>) -> Arc<dyn StepRunner> {
        Arc::new(Runner {
            store: Arc::clone(&self.store),
            plugins: pins
                .iter()
                .map(|(step, p)| (step.clone(), p.name.clone()))
                .collect(),
        })
    }
}

impl StepRunner for Runner {
    fn plugin(&self, step: &str) -> Option<&str> {
        self.plugins.get(step).map(String::as_str)
    }

    fn check_input(&self, _step: &str, _input: &Value) -> Result<(), Vec<String>> {
        Ok(())
    }

    fn call(&self, call: &StepCall) -> StepOutcome {
        let context = &call.context;
        let input = serde_json::from_str(&call.input).unwrap_or(Value::Null);
        match self.plugin(&context.step_id) {
            Some("count") => self.count(call),
            Some("flaky") if context.attempt == 1 => {
                let mut error = ErrorRecord::fatal("unavailable", "the first attempt fails");
                error.retryable = true;
                StepOutcome::of(Err(error))
            }
            Some("flaky" | "echo") => StepOutcome::of(Ok(input)),
            _ => StepOutcome::of(Err(ErrorRecord::internal("no such simulated plugin"))),
        }
    }
}

impl Runner {
    /// Key `n` plus one, read from the committed data with its version.
    fn count(&self, call: &StepCall) -> StepOutcome {
        // The real runtime names the space by the workflow's stored id:
        // its tenant, then its bare id.
        let space = space(&weft_core::tenant::qualify(
            &call.context.tenant,
            &call.context.workflow,
        ));
        let read = match self.store.kv_get(&space, "n") {
            Ok(read) => read,
            Err(e) => return StepOutcome::of(Err(ErrorRecord::internal(e.to_string()))),
        };
        let n = read
            .value
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            + 1;
        let mut outcome = StepOutcome::of(Ok(json!({ "n": n })));
        outcome.kv = KvEffects {
            space,
            writes: BTreeMap::from([("n".to_owned(), Some(n.to_string()))]),
            reads: BTreeMap::from([("n".to_owned(), read.version)]),
            expires: BTreeMap::new(),
        };
        outcome.emitted = vec![Emission {
            id: weft_core::ids::uuid_v7(weft_core::Timestamp(0)),
            channel: "counted".to_owned(),
            payload: json!({ "run": call.context.run_id, "step": call.context.step_id }),
        }];
        outcome
    }
}
