//! The fake step runner, for the engine's tests and the simulator: no
//! WebAssembly, the same seam the real plugins use ([`RunnerSource`]).
//! Fake plugins are found by name, each a closure over the call and its
//! input; every call is recorded, in order; loads of runs read back can be
//! held, to catch a run between its record's read and its start.
//!
//! Only with the `fake` feature: never in a build of weft itself.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use serde_json::Value;

use weft_core::ErrorRecord;
use weft_model::Workflow;
use weft_store::{PinnedPlugin, RunRecord};

use crate::{Pinned, ResumeError, RunnerSource, StartError, StepCall, StepOutcome, StepRunner};

/// What a fake plugin does with one call and its input.
pub type Behaviour = Arc<dyn Fn(&StepCall, Value) -> StepOutcome + Send + Sync>;

/// One call the fake runner received.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// The run's workflow.
    pub workflow: String,
    /// The run.
    pub run: String,
    /// The step.
    pub step: String,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The call's idempotency key.
    pub key: String,
    /// The call's input.
    pub input: Value,
}

/// The fake plugins by name, and every call made to any of them, in the
/// order they were made.
struct Shared {
    plugins: HashMap<String, Behaviour>,
    calls: Mutex<Vec<Seen>>,
    /// Whether loads of runs read back wait, and how many wait now.
    loads: Mutex<(bool, usize)>,
    loads_changed: Condvar,
    /// Whether a load checks the run's pins ([`FakeSource::checking_pins`]).
    check_pins: AtomicBool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Pins each call step to the fake plugin its `uses` names.
#[derive(Debug, Clone)]
pub struct FakeSource(Arc<Shared>);

/// One run's pinned fake plugins: step id to plugin name.
#[derive(Debug)]
struct FakeRunner {
    shared: Arc<Shared>,
    plugins: HashMap<String, String>,
}

/// The pin of fake plugin `name`: the SHA-256 of its name, in the shape
/// the store records.
pub fn pin(name: &str) -> PinnedPlugin {
    PinnedPlugin {
        name: name.to_owned(),
        version: "1.0.0".to_owned(),
        digest: weft_core::Digest::of(name.as_bytes()).to_string(),
    }
}

impl FakeSource {
    /// A source of `plugins`, by name; a later one of the same name wins.
    pub fn new<'a>(plugins: impl IntoIterator<Item = (&'a str, Behaviour)>) -> Self {
        Self(Arc::new(Shared {
            plugins: plugins
                .into_iter()
                .map(|(name, b)| (name.to_owned(), b))
                .collect(),
            calls: Mutex::new(Vec::new()),
            loads: Mutex::new((false, 0)),
            loads_changed: Condvar::new(),
            check_pins: AtomicBool::new(false),
        }))
    }

    /// From now on, a load refuses a run whose pins are not its own: each
    /// call step of the workflow it is read back under must be pinned to
    /// the plugin its `uses` names, as the real source's pins are (a
    /// `ResumeError::Component`, naming the step).
    pub fn checking_pins(self) -> Self {
        self.0.check_pins.store(true, Ordering::SeqCst);
        self
    }

    /// Every call made so far, in order.
    pub fn calls(&self) -> Vec<Seen> {
        lock(&self.0.calls).clone()
    }

    /// From now on, a run read back from the store waits in its load (after
    /// its record was read) until the guard is dropped (so a failed test
    /// does not leave a worker waiting, which would hang the engine's
    /// drop).
    pub fn hold_loads(&self) -> LoadsHeld<'_> {
        lock(&self.0.loads).0 = true;
        LoadsHeld(self)
    }

    /// How many loads wait now.
    pub fn loads_waiting(&self) -> usize {
        lock(&self.0.loads).1
    }

    /// Lets every waiting load go on, and loads no longer wait.
    fn release_loads(&self) {
        lock(&self.0.loads).0 = false;
        self.0.loads_changed.notify_all();
    }

    fn runner(&self, pins: &BTreeMap<String, PinnedPlugin>) -> Arc<FakeRunner> {
        let plugins = pins.iter().map(|(s, p)| (s.clone(), p.name.clone()));
        Arc::new(FakeRunner {
            shared: Arc::clone(&self.0),
            plugins: plugins.collect(),
        })
    }
}

/// Loads held by [`FakeSource::hold_loads`]: let go when dropped.
#[derive(Debug)]
pub struct LoadsHeld<'a>(&'a FakeSource);

impl Drop for LoadsHeld<'_> {
    fn drop(&mut self) {
        self.0.release_loads();
    }
}

impl RunnerSource for FakeSource {
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

    /// The run's own pins, as the real source loads them.
    fn load(
        &self,
        run: &RunRecord,
        workflow: &Workflow,
    ) -> Result<Arc<dyn StepRunner>, ResumeError> {
        let mut loads = lock(&self.0.loads);
        if loads.0 {
            loads.1 += 1;
            while loads.0 {
                loads = self
                    .0
                    .loads_changed
                    .wait(loads)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            loads.1 -= 1;
        }
        drop(loads);
        if self.0.check_pins.load(Ordering::SeqCst) {
            for step in workflow.all_steps() {
                let Some(call) = step.call() else { continue };
                let own = pin(&call.uses.name);
                if run.plugins.get(&step.id) != Some(&own) {
                    return Err(ResumeError::Component {
                        step: step.id.clone(),
                        reason: format!("not pinned to fake plugin `{}`", own.name),
                    });
                }
            }
        }
        Ok(self.runner(&run.plugins))
    }
}

impl StepRunner for FakeRunner {
    fn plugin(&self, step: &str) -> Option<&str> {
        self.plugins.get(step).map(String::as_str)
    }

    fn check_input(&self, _step: &str, _input: &Value) -> Result<(), Vec<String>> {
        Ok(())
    }

    fn call(&self, call: &StepCall) -> StepOutcome {
        let input: Value = serde_json::from_str(&call.input).unwrap_or(Value::Null);
        let context = &call.context;
        lock(&self.shared.calls).push(Seen {
            workflow: context.workflow.clone(),
            run: context.run_id.clone(),
            step: context.step_id.clone(),
            attempt: context.attempt,
            key: context.idempotency_key.clone(),
            input: input.clone(),
        });
        let behaviour = self
            .plugins
            .get(&context.step_id)
            .and_then(|name| self.shared.plugins.get(name));
        match behaviour {
            Some(behaviour) => behaviour(call, input),
            None => StepOutcome::of(Err(ErrorRecord::internal("no such fake plugin"))),
        }
    }
}
