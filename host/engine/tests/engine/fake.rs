//! The fake step runner: fake plugins by name, each a closure over the call
//! and its input; the calls they receive, in order; the [`RunnerSource`]
//! that pins a workflow's call steps to them; and the [`Gate`], a plugin
//! that holds its calls until it is opened or their run tells them to stop.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use weft_core::ErrorRecord;
use weft_engine::{
    Pinned, ResumeError, RunnerSource, StartError, StepCall, StepOutcome, StepRunner,
};
use weft_model::Workflow;
use weft_store::{PinnedPlugin, RunRecord};

use crate::common::eventually;

/// What a fake plugin does with one call and its input.
pub(crate) type Behaviour = Arc<dyn Fn(&StepCall, Value) -> StepOutcome + Send + Sync>;

/// One call the fake runner received.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Seen {
    pub(crate) workflow: String,
    pub(crate) run: String,
    pub(crate) step: String,
    pub(crate) attempt: u32,
    pub(crate) key: String,
    pub(crate) input: Value,
}

/// The fake plugins by name, and every call made to any of them, in the
/// order they were made.
struct Shared {
    plugins: HashMap<String, Behaviour>,
    calls: Mutex<Vec<Seen>>,
    /// Whether loads of runs read back wait, and how many wait now.
    loads: Mutex<(bool, usize)>,
    loads_changed: Condvar,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

/// Pins each call step to the fake plugin its `uses` names.
#[derive(Debug, Clone)]
pub(crate) struct FakeSource(Arc<Shared>);

/// One run's pinned fake plugins: step id to plugin name.
#[derive(Debug)]
struct FakeRunner {
    shared: Arc<Shared>,
    plugins: HashMap<String, String>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap()
}

/// The pin of fake plugin `name`: a digest of the shape the store records.
fn pin(name: &str) -> PinnedPlugin {
    let mut hasher = DefaultHasher::new();
    name.hash(&mut hasher);
    PinnedPlugin {
        name: name.to_owned(),
        version: "1.0.0".to_owned(),
        digest: format!("sha256:{:064x}", u128::from(hasher.finish())),
    }
}

impl FakeSource {
    /// From now on, a run read back from the store waits in its load (after
    /// its record was read) until the guard is dropped (so a failed test
    /// does not leave a worker waiting, which would hang the engine's
    /// drop).
    pub(crate) fn hold_loads(&self) -> LoadsHeld<'_> {
        lock(&self.0.loads).0 = true;
        LoadsHeld(self)
    }

    /// Waits until `n` loads wait.
    pub(crate) fn wait_loads_held(&self, n: usize) {
        eventually("loads to wait", || lock(&self.0.loads).1 >= n);
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
pub(crate) struct LoadsHeld<'a>(&'a FakeSource);

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

    fn load(
        &self,
        run: &RunRecord,
        workflow: &Workflow,
    ) -> Result<Arc<dyn StepRunner>, ResumeError> {
        let mut loads = lock(&self.0.loads);
        if loads.0 {
            loads.1 += 1;
            while loads.0 {
                loads = self.0.loads_changed.wait(loads).unwrap();
            }
            loads.1 -= 1;
        }
        drop(loads);
        for step in workflow.all_steps() {
            let Some(call) = step.call() else { continue };
            let pinned = run.plugins.get(&step.id);
            assert_eq!(pinned, Some(&pin(&call.uses.name)), "the run's own pin");
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
        let input: Value = serde_json::from_str(&call.input).unwrap();
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

/// A source of the fake plugins `echo`, `fatal` and `flaky` (fails twice,
/// retryably), and of `extra`.
pub(crate) fn source(extra: Vec<(&str, Behaviour)>) -> FakeSource {
    let fatal: Behaviour = Arc::new(|_, _| StepOutcome::of(Err(broken())));
    let defaults = [("echo", echo()), ("fatal", fatal), ("flaky", flaky())];
    let plugins = defaults.into_iter().chain(extra);
    FakeSource(Arc::new(Shared {
        plugins: plugins.map(|(name, b)| (name.to_owned(), b)).collect(),
        calls: Mutex::new(Vec::new()),
        loads: Mutex::new((false, 0)),
        loads_changed: Condvar::new(),
    }))
}

pub(crate) fn echo() -> Behaviour {
    Arc::new(|_, input| StepOutcome::of(Ok(input)))
}

pub(crate) fn broken() -> ErrorRecord {
    ErrorRecord::fatal("broken", "broken for good")
}

pub(crate) fn unavailable(attempt: u32) -> ErrorRecord {
    let mut error = ErrorRecord::fatal("unavailable", format!("attempt {attempt} failed"));
    error.retryable = true;
    error
}

/// Fails its first two attempts retryably, then gives its attempt.
fn flaky() -> Behaviour {
    Arc::new(|call, _| match call.context.attempt {
        n @ 1..=2 => StepOutcome::of(Err(unavailable(n))),
        n => StepOutcome::of(Ok(json!({ "attempt": n }))),
    })
}

/// Holds calls until it is opened, or until their run tells them to stop.
#[derive(Default)]
pub(crate) struct Gate {
    entered: AtomicUsize,
    open: AtomicBool,
    cancelled: AtomicUsize,
}

impl Gate {
    /// True once the gate is open; false if the call was told to stop (or
    /// after 5 s, so that a failing test does not hang).
    pub(crate) fn pass(&self, call: &StepCall) -> bool {
        self.entered.fetch_add(1, SeqCst);
        let give_up = Instant::now() + Duration::from_secs(5);
        while !self.open.load(SeqCst) && Instant::now() < give_up {
            if call.cancel.load(SeqCst) {
                self.cancelled.fetch_add(1, SeqCst);
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.open.load(SeqCst)
    }

    pub(crate) fn wait_entered(&self, calls: usize) {
        eventually("the gate", || self.entered.load(SeqCst) >= calls);
    }

    pub(crate) fn open(&self) {
        self.open.store(true, SeqCst);
    }

    pub(crate) fn wait_cancelled(&self) {
        eventually("a stop", || self.cancelled.load(SeqCst) == 1);
    }

    /// A plugin that passes this gate, then echoes its input.
    pub(crate) fn plugin(self: &Arc<Self>) -> Behaviour {
        let gate = Arc::clone(self);
        Arc::new(move |call, input| {
            let stopped = ErrorRecord::fatal("stopped", "told to stop");
            StepOutcome::of(gate.pass(call).then_some(input).ok_or(stopped))
        })
    }
}

pub(crate) fn calls(source: &FakeSource) -> Vec<Seen> {
    lock(&source.0.calls).clone()
}
