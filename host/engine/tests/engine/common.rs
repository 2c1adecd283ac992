//! The host around the engine: one [`Engine`] over a fresh redb store, the
//! fake plugins and a simulated clock ([`Host`]), and the reads, waits and
//! assertions the tests share.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use weft_core::{Clock, SimClock, Timestamp};
use weft_engine::plugins::PluginDir;
use weft_engine::{Engine, EngineConfig, Quiet, RunHandle};
use weft_model::{Format, Workflow};
use weft_runtime::{Runtime, RuntimeConfig};
use weft_store::{RedbStore, RunRecord, RunState, StepRecord, Store, TimerKind};

use crate::fake::{Behaviour, FakeSource, Seen, calls, source};

/// One runtime for every test: the engine's plugin directory needs one,
/// and the fake runner never uses it.
fn runtime() -> Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    let config = || RuntimeConfig {
        pooling: false,
        ..RuntimeConfig::default()
    };
    RUNTIME
        .get_or_init(|| Runtime::new(config()).unwrap())
        .clone()
}

pub(crate) const START: Timestamp = Timestamp(1_700_000_000_000);

/// A step, an hour's sleep, and a step given what the sleep gave.
pub(crate) const NAP: &str = r#"
id: nap
steps:
  - { id: before, uses: echo, with: 1 }
  - { id: nap, sleep: 1h }
  - { id: after, uses: echo, with: "${{ steps.nap.output }}" }
"#;

pub(crate) fn engine(
    store: &Arc<dyn Store>,
    source: &FakeSource,
    clock: &Arc<SimClock>,
    dir: &TempDir,
    max_resident: usize,
) -> Engine {
    let config = EngineConfig {
        workers: 8,
        max_resident,
        ..EngineConfig::default()
    };
    let plugins = Arc::new(PluginDir::new(runtime(), dir.path().join("plugins")));
    let clock: Arc<dyn Clock> = Arc::clone(clock) as Arc<dyn Clock>;
    let source = Arc::new(source.clone());
    Engine::with_source(Arc::clone(store), plugins, source, clock, config).unwrap()
}

pub(crate) fn store(dir: &TempDir) -> Arc<dyn Store> {
    Arc::new(RedbStore::open(dir.path().join("weft.redb")).unwrap())
}

/// An engine over a fresh store, its fake plugins and its clock.
pub(crate) struct Host {
    pub(crate) engine: Engine,
    clock: Arc<SimClock>,
    source: FakeSource,
    _dir: TempDir,
}

impl Host {
    pub(crate) fn new(extra: Vec<(&str, Behaviour)>) -> Self {
        Self::with_config(extra, 10_000)
    }

    pub(crate) fn with_config(extra: Vec<(&str, Behaviour)>, max_resident: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(SimClock::new(START));
        let source = source(extra);
        Self {
            engine: engine(&store(&dir), &source, &clock, &dir, max_resident),
            clock,
            source,
            _dir: dir,
        }
    }

    /// Starts a run of workflow `text`, and returns once it is recorded.
    pub(crate) fn start(&self, text: &str, input: Value) -> RunHandle {
        let observer = Box::new(Quiet);
        let mut handle = self.engine.start(workflow(text), input, observer).unwrap();
        handle.recorded().unwrap();
        handle
    }

    /// Starts a run of workflow `text` as tenant `tenant`'s (its id
    /// qualified as the API deploys it), and returns once it is recorded.
    pub(crate) fn start_in(&self, tenant: &str, text: &str, input: Value) -> RunHandle {
        let mut parsed = weft_model::parse(text, Format::Yaml, "test.yaml").unwrap();
        parsed.id = weft_core::tenant::qualify(tenant, &parsed.id);
        let observer = Box::new(Quiet);
        let mut handle = self
            .engine
            .start(Arc::new(parsed), input, observer)
            .unwrap();
        handle.recorded().unwrap();
        handle
    }

    /// The fake plugins' source.
    pub(crate) fn source(&self) -> &FakeSource {
        &self.source
    }

    /// How many `kind` events the engine told of run `id`, of those kept.
    pub(crate) fn told(&self, id: &str, kind: weft_engine::RunEventKind) -> usize {
        let kept = self.engine.events().subscribe(Some(0)).backlog;
        kept.iter()
            .filter(|e| e.run == id && e.kind == kind)
            .count()
    }

    pub(crate) fn calls(&self) -> Vec<Seen> {
        calls(&self.source)
    }

    pub(crate) fn steps(&self, run: &str) -> Vec<StepRecord> {
        self.engine.store().steps(run).unwrap()
    }

    pub(crate) fn record(&self, run: &str) -> RunRecord {
        self.engine.store().run(run).unwrap().unwrap()
    }

    /// The kinds and due times of run `run`'s pending timers.
    pub(crate) fn timers(&self, run: &str) -> Vec<(TimerKind, Timestamp)> {
        let timers = self.engine.store().run_timers(run).unwrap();
        timers.iter().map(|t| (t.timer.kind, t.timer.due)).collect()
    }

    pub(crate) fn advance(&self, seconds: u64) {
        self.clock.advance(Duration::from_secs(seconds));
    }

    /// Waits until run `id` has left memory, suspended on its timers, and
    /// returns its record.
    pub(crate) fn suspended(&self, id: &str) -> RunRecord {
        eventually("the run to suspend", || {
            self.record(id).suspended && self.engine.load() == (0, 0)
        });
        self.record(id)
    }
}

pub(crate) fn workflow(text: &str) -> Arc<Workflow> {
    Arc::new(weft_model::parse(text, Format::Yaml, "test.yaml").unwrap())
}

pub(crate) fn steps_called(calls: &[Seen]) -> Vec<&str> {
    calls.iter().map(|c| c.step.as_str()).collect()
}

/// Each call's step and input.
pub(crate) fn inputs(calls: &[Seen]) -> Vec<(&str, &Value)> {
    calls.iter().map(|c| (c.step.as_str(), &c.input)).collect()
}

pub(crate) fn paths(records: &[StepRecord]) -> Vec<&str> {
    records.iter().map(|r| r.path.as_str()).collect()
}

/// The paths of `records`, sorted (steps that commit as they finish).
pub(crate) fn sorted_paths(records: &[StepRecord]) -> Vec<&str> {
    let mut paths = paths(records);
    paths.sort_unstable();
    paths
}

/// The run's final record; fails the test if it does not end within 5 s.
pub(crate) fn finish(handle: RunHandle) -> RunRecord {
    match handle.wait_timeout(Duration::from_secs(5)) {
        Ok(Some(run)) => run,
        Ok(None) => panic!("run {} did not end within 5 s", handle.id()),
        Err(e) => panic!("run {} failed: {e}", handle.id()),
    }
}

pub(crate) fn assert_succeeded(run: &RunRecord, outputs: Value) {
    assert_eq!(run.state, RunState::Succeeded, "{run:?}");
    assert_eq!(run.outputs, Some(outputs));
}

/// Fails the test if the run ends within a few milliseconds.
pub(crate) fn assert_still_running(handle: &RunHandle) {
    let ended = handle.wait_timeout(Duration::from_millis(30)).unwrap();
    assert!(ended.is_none(), "the run ended too soon: {ended:?}");
}

pub(crate) fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(5);
    while !condition() {
        assert!(Instant::now() < give_up, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
