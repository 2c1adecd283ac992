//! The engine's walk and scheduler, driven through its public API with a
//! fake [`StepRunner`] and a simulated clock: no WebAssembly, no real waits.
//!
//! Proves, by the calls the fake runner receives and the records the store
//! holds: every control-flow construct (sequence, `parallel`, `if`,
//! `foreach` with `concurrency`, `while`, `catch`, `retry`, `sleep`,
//! `await`, `subflow`, a run's `timeout`, cancellation); admission beyond
//! `max_resident`; resumption from records (a committed step is not called
//! again, the call in flight is); and that a failed attempt's effects are
//! never committed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

use weft_core::{Clock, Emission, ErrorRecord, SimClock, Timestamp};
use weft_engine::plugins::PluginDir;
use weft_engine::{
    ActError, Answer, Engine, EngineConfig, Pinned, Quiet, ResumeError, RunHandle, RunnerSource,
    StartError, StepCall, StepOutcome, StepRunner,
};
use weft_model::{Format, Workflow, WorkflowDir};
use weft_runtime::{Runtime, RuntimeConfig};
use weft_store::{
    CANCEL_PATH, PinnedPlugin, RedbStore, RunRecord, RunState, StepRecord, Store, StoreError,
    TimerKind,
};

/// Asserts that `$value` matches `$pattern`, showing it if not.
macro_rules! assert_matches {
    ($value:expr, $pattern:pat) => {{
        let value = $value;
        assert!(matches!(value, $pattern), "{value:?}");
    }};
}

// The fake runner

/// What a fake plugin does with one call and its input.
type Behaviour = Arc<dyn Fn(&StepCall, Value) -> StepOutcome + Send + Sync>;

/// One call the fake runner received.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    workflow: String,
    run: String,
    step: String,
    attempt: u32,
    key: String,
    input: Value,
}

/// The fake plugins by name, and every call made to any of them, in the
/// order they were made.
struct Shared {
    plugins: HashMap<String, Behaviour>,
    calls: Mutex<Vec<Seen>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

/// Pins each call step to the fake plugin its `uses` names.
#[derive(Debug, Clone)]
struct FakeSource(Arc<Shared>);

/// One run's pinned fake plugins: step id to plugin name.
#[derive(Debug)]
struct FakeRunner {
    shared: Arc<Shared>,
    plugins: HashMap<String, String>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
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
    fn runner(&self, pins: &BTreeMap<String, PinnedPlugin>) -> Arc<FakeRunner> {
        let plugins = pins.iter().map(|(s, p)| (s.clone(), p.name.clone()));
        Arc::new(FakeRunner {
            shared: Arc::clone(&self.0),
            plugins: plugins.collect(),
        })
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
        })
    }

    fn load(
        &self,
        run: &RunRecord,
        workflow: &Workflow,
    ) -> Result<Arc<dyn StepRunner>, ResumeError> {
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
fn source(extra: Vec<(&str, Behaviour)>) -> FakeSource {
    let fatal: Behaviour = Arc::new(|_, _| StepOutcome::of(Err(broken())));
    let defaults = [("echo", echo()), ("fatal", fatal), ("flaky", flaky())];
    let plugins = defaults.into_iter().chain(extra);
    FakeSource(Arc::new(Shared {
        plugins: plugins.map(|(name, b)| (name.to_owned(), b)).collect(),
        calls: Mutex::new(Vec::new()),
    }))
}

fn echo() -> Behaviour {
    Arc::new(|_, input| StepOutcome::of(Ok(input)))
}

fn broken() -> ErrorRecord {
    ErrorRecord::fatal("broken", "broken for good")
}

fn unavailable(attempt: u32) -> ErrorRecord {
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
struct Gate {
    entered: AtomicUsize,
    open: AtomicBool,
    cancelled: AtomicUsize,
}

impl Gate {
    /// True once the gate is open; false if the call was told to stop (or
    /// after 5 s, so that a failing test does not hang).
    fn pass(&self, call: &StepCall) -> bool {
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

    fn wait_entered(&self, calls: usize) {
        eventually("the gate", || self.entered.load(SeqCst) >= calls);
    }

    fn open(&self) {
        self.open.store(true, SeqCst);
    }

    fn wait_cancelled(&self) {
        eventually("a stop", || self.cancelled.load(SeqCst) == 1);
    }

    /// A plugin that passes this gate, then echoes its input.
    fn plugin(self: &Arc<Self>) -> Behaviour {
        let gate = Arc::clone(self);
        Arc::new(move |call, input| {
            let stopped = ErrorRecord::fatal("stopped", "told to stop");
            StepOutcome::of(gate.pass(call).then_some(input).ok_or(stopped))
        })
    }
}

// The host around the engine

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

const START: Timestamp = Timestamp(1_700_000_000_000);

fn engine(
    store: &Arc<dyn Store>,
    source: &FakeSource,
    clock: &Arc<SimClock>,
    dir: &TempDir,
    max_resident: usize,
) -> Engine {
    let config = EngineConfig {
        workers: 8,
        max_resident,
        measure_fires: false,
    };
    let plugins = Arc::new(PluginDir::new(runtime(), dir.path().join("plugins")));
    let clock: Arc<dyn Clock> = Arc::clone(clock) as Arc<dyn Clock>;
    let source = Arc::new(source.clone());
    Engine::with_source(Arc::clone(store), plugins, source, clock, config).unwrap()
}

fn store(dir: &TempDir) -> Arc<dyn Store> {
    Arc::new(RedbStore::open(dir.path().join("weft.redb")).unwrap())
}

/// An engine over a fresh store, its fake plugins and its clock.
struct Host {
    engine: Engine,
    clock: Arc<SimClock>,
    source: FakeSource,
    _dir: TempDir,
}

impl Host {
    fn new(extra: Vec<(&str, Behaviour)>) -> Self {
        Self::with_config(extra, 10_000)
    }

    fn with_config(extra: Vec<(&str, Behaviour)>, max_resident: usize) -> Self {
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
    fn start(&self, text: &str, input: Value) -> RunHandle {
        let observer = Box::new(Quiet);
        let mut handle = self.engine.start(workflow(text), input, observer).unwrap();
        handle.recorded().unwrap();
        handle
    }

    fn calls(&self) -> Vec<Seen> {
        calls(&self.source)
    }

    fn steps(&self, run: &str) -> Vec<StepRecord> {
        self.engine.store().steps(run).unwrap()
    }

    fn record(&self, run: &str) -> RunRecord {
        self.engine.store().run(run).unwrap().unwrap()
    }

    /// The kinds and due times of run `run`'s pending timers.
    fn timers(&self, run: &str) -> Vec<(TimerKind, Timestamp)> {
        let timers = self.engine.store().run_timers(run).unwrap();
        timers.iter().map(|t| (t.timer.kind, t.timer.due)).collect()
    }

    fn advance(&self, seconds: u64) {
        self.clock.advance(Duration::from_secs(seconds));
    }

    /// Waits until run `id` has left memory, suspended on its timers, and
    /// returns its record.
    fn suspended(&self, id: &str) -> RunRecord {
        eventually("the run to suspend", || {
            self.record(id).suspended && self.engine.load() == (0, 0)
        });
        self.record(id)
    }
}

fn workflow(text: &str) -> Arc<Workflow> {
    Arc::new(weft_model::parse(text, Format::Yaml, "test.yaml").unwrap())
}

fn calls(source: &FakeSource) -> Vec<Seen> {
    lock(&source.0.calls).clone()
}

fn steps_called(calls: &[Seen]) -> Vec<&str> {
    calls.iter().map(|c| c.step.as_str()).collect()
}

/// Each call's step and input.
fn inputs(calls: &[Seen]) -> Vec<(&str, &Value)> {
    calls.iter().map(|c| (c.step.as_str(), &c.input)).collect()
}

fn paths(records: &[StepRecord]) -> Vec<&str> {
    records.iter().map(|r| r.path.as_str()).collect()
}

/// The paths of `records`, sorted (steps that commit as they finish).
fn sorted_paths(records: &[StepRecord]) -> Vec<&str> {
    let mut paths = paths(records);
    paths.sort_unstable();
    paths
}

/// The run's final record; fails the test if it does not end within 5 s.
fn finish(handle: RunHandle) -> RunRecord {
    match handle.wait_timeout(Duration::from_secs(5)) {
        Ok(Some(run)) => run,
        Ok(None) => panic!("run {} did not end within 5 s", handle.id()),
        Err(e) => panic!("run {} failed: {e}", handle.id()),
    }
}

fn assert_succeeded(run: &RunRecord, outputs: Value) {
    assert_eq!(run.state, RunState::Succeeded, "{run:?}");
    assert_eq!(run.outputs, Some(outputs));
}

/// Fails the test if the run ends within a few milliseconds.
fn assert_still_running(handle: &RunHandle) {
    let ended = handle.wait_timeout(Duration::from_millis(30)).unwrap();
    assert!(ended.is_none(), "the run ended too soon: {ended:?}");
}

fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(5);
    while !condition() {
        assert!(Instant::now() < give_up, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

// Control flow

#[test]
fn a_sequence_runs_in_document_order_and_each_step_sees_the_previous_output() {
    let host = Host::new(vec![]);
    let text = r#"
id: seq
steps:
  - { id: first, uses: echo, with: { n: "${{ inputs.n }}" } }
  - { id: second, uses: echo, with: { prev: "${{ steps.first.output.n }}", plus: "${{ steps.first.output.n + 1 }}" } }
  - { id: third, uses: echo, with: "${{ steps.second.output.plus * 10 }}" }
outputs: { last: "${{ steps.third.output }}", first: "${{ steps.first.output }}" }
"#;
    let run = finish(host.start(text, json!({ "n": 1 })));
    assert_succeeded(&run, json!({ "last": 20, "first": { "n": 1 } }));
    let calls = host.calls();
    assert_eq!(steps_called(&calls), ["first", "second", "third"]);
    let (first, second) = (json!({ "n": 1 }), json!({ "prev": 1, "plus": 2 }));
    let values: Vec<&Value> = calls.iter().map(|c| &c.input).collect();
    assert_eq!(values, [&first, &second, &json!(20)]);
    assert!(calls.iter().all(|c| c.attempt == 1 && c.run == run.id));
    let records = host.steps(&run.id);
    assert_eq!(paths(&records), ["first", "second", "third"]);
    let seqs: Vec<u32> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [0, 1, 2], "one record per attempt, in order");
}

#[test]
fn parallel_runs_every_branch_at_once_and_joins_their_outputs() {
    // Each branch waits until all three are in flight: run one at a time,
    // they would each give up and fail.
    let meeting = Arc::new((Mutex::new(0_usize), Condvar::new()));
    let meet: Behaviour = Arc::new(move |_, input| {
        let (count, arrived) = &*meeting;
        let mut count = lock(count);
        *count += 1;
        arrived.notify_all();
        let wait = Duration::from_secs(2);
        let (count, _) = arrived.wait_timeout_while(count, wait, |n| *n < 3).unwrap();
        StepOutcome::of((*count >= 3).then_some(input).ok_or_else(broken))
    });
    let host = Host::new(vec![("meet", meet)]);
    let text = r#"
id: par
steps:
  - id: fan
    parallel:
      - { id: left, uses: meet, with: "L" }
      - { id: right, uses: meet, with: { r: 2 } }
      - { id: mid, uses: meet, with: 3 }
  - { id: after, uses: echo, with: "${{ steps.fan.output }}" }
"#;
    let run = finish(host.start(text, json!({})));
    let joined = json!({ "left": "L", "right": { "r": 2 }, "mid": 3 });
    assert_succeeded(&run, joined.clone());
    let calls = host.calls();
    let mut branches = steps_called(&calls[..3]);
    branches.sort_unstable();
    assert_eq!(branches, ["left", "mid", "right"], "each branch once");
    assert_eq!(inputs(&calls[3..]), [("after", &joined)]);
    let expected = ["after", "fan/left", "fan/mid", "fan/right"];
    assert_eq!(sorted_paths(&host.steps(&run.id)), expected);
}

#[test]
fn parallel_fails_fast_without_waiting_for_branches_still_running() {
    let gate = Arc::new(Gate::default());
    let host = Host::new(vec![("gate", gate.plugin())]);
    let text = r#"
id: par
steps:
  - id: fan
    parallel:
      - { id: ok, uses: echo, with: 1 }
      - { id: hang, uses: gate, with: 2 }
      - { id: bad, uses: fatal, with: 3 }
  - { id: after, uses: echo, with: 4 }
"#;
    let handle = host.start(text, json!({}));
    gate.wait_entered(1);
    // The gate stays shut: the run must end while `hang` is in flight.
    let run = finish(handle);
    assert_eq!(run.state, RunState::Failed, "{run:?}");
    let error = run.error.unwrap();
    assert_eq!(error.step.as_deref(), Some("bad"));
    assert_eq!(error.error, broken());
    gate.wait_cancelled();
    assert!(!steps_called(&host.calls()).contains(&"after"));
    let records = host.steps(&run.id);
    let bad = records.iter().filter(|r| r.step_id == "bad").count();
    assert_eq!(bad, 1, "a fatal error is recorded once");
    assert!(records.iter().all(|r| r.step_id != "hang"), "{records:?}");
}

#[test]
fn a_false_if_records_the_step_as_skipped_and_skips_a_block_without_a_record() {
    let host = Host::new(vec![]);
    let text = r#"
id: cond
steps:
  - { id: maybe, uses: echo, if: "inputs.go", with: "ran" }
  - { id: block, if: "inputs.go", parallel: [ { id: inner, uses: echo, with: 1 } ] }
  - { id: report, uses: echo, with: { skipped: "${{ has(steps.maybe.skipped) }}", maybe: "${{ steps.maybe.output }}" } }
"#;
    let skipped = finish(host.start(text, json!({ "go": false })));
    assert_succeeded(&skipped, json!({ "skipped": true, "maybe": null }));
    assert_eq!(steps_called(&host.calls()), ["report"]);
    let records = host.steps(&skipped.id);
    assert_eq!(paths(&records), ["maybe", "report"]);
    assert!(records[0].skipped && records[0].output.is_none());

    let ran = finish(host.start(text, json!({ "go": true })));
    assert_succeeded(&ran, json!({ "skipped": false, "maybe": "ran" }));
    let called = host.calls();
    assert_eq!(steps_called(&called[1..]), ["maybe", "inner", "report"]);
    assert!(host.steps(&ran.id).iter().all(|r| !r.skipped));
}

#[test]
fn foreach_calls_every_item_once_and_never_more_than_concurrency_at_once() {
    let in_flight = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
    let meter = Arc::clone(&in_flight);
    let slow: Behaviour = Arc::new(move |_, input| {
        let now = meter.0.fetch_add(1, SeqCst) + 1;
        meter.1.fetch_max(now, SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        meter.0.fetch_sub(1, SeqCst);
        StepOutcome::of(Ok(input))
    });
    let host = Host::new(vec![("slow", slow)]);
    let text = r#"
id: each
steps:
  - id: each
    foreach: "${{ inputs.items }}"
    concurrency: 2
    steps: [ { id: work, uses: slow, with: "${{ item * 10 }}" } ]
outputs: "${{ steps.each.output }}"
"#;
    let run = finish(host.start(text, json!({ "items": [1, 2, 3, 4, 5, 6] })));
    assert_succeeded(&run, json!([10, 20, 30, 40, 50, 60]));
    // At most `concurrency` at once, and that many: 8 workers are free.
    assert_eq!(in_flight.1.load(SeqCst), 2);
    let calls = host.calls();
    let mut items: Vec<i64> = calls.iter().map(|c| c.input.as_i64().unwrap()).collect();
    items.sort_unstable();
    assert_eq!(items, [10, 20, 30, 40, 50, 60], "every item once");
    let expected: Vec<String> = (0..6).map(|i| format!("each[{i}]/work")).collect();
    assert_eq!(sorted_paths(&host.steps(&run.id)), expected);
}

#[test]
fn while_loops_until_its_condition_fails_and_fails_at_its_cap() {
    let host = Host::new(vec![]);
    let text = |cap: u32| {
        format!(
            r#"
id: loop
steps:
  - id: spin
    while: "!has(steps.tick) || steps.tick.output < 3"
    max_iterations: {cap}
    steps: [ {{ id: tick, uses: echo, with: "${{{{ iteration + 1 }}}}" }} ]
  - {{ id: done, uses: echo, with: "${{{{ steps.spin.output }}}}" }}
"#
        )
    };
    let run = finish(host.start(&text(10), json!({})));
    assert_succeeded(&run, json!(3));
    let inputs: Vec<Value> = host.calls().into_iter().map(|c| c.input).collect();
    assert_eq!(inputs, [json!(1), json!(2), json!(3), json!(3)]);
    let expected = ["spin[0]/tick", "spin[1]/tick", "spin[2]/tick", "done"];
    assert_eq!(paths(&host.steps(&run.id)), expected);

    let capped = finish(host.start(&text(2), json!({})));
    assert_eq!(capped.state, RunState::Failed, "{capped:?}");
    let error = capped.error.unwrap();
    assert_eq!(error.step.as_deref(), Some("spin"));
    assert_eq!(error.error.code, "while_limit");
    assert_eq!(host.steps(&capped.id).len(), 2, "then the cap");
}

#[test]
fn catch_handles_a_failed_step_with_the_first_matching_handler() {
    let host = Host::new(vec![]);
    let text = r#"
id: caught
steps:
  - id: risky
    uses: fatal
    retry: { max_attempts: 3, initial: 1ms }
    catch:
      - { if: "error.code == 'other'", steps: [ { id: wrong, uses: echo } ] }
      - steps:
          - { id: recover, uses: echo, with: { code: "${{ error.code }}", step: "${{ error.step }}" } }
  - { id: after, uses: echo, with: "${{ steps.risky.output }}" }
"#;
    let run = finish(host.start(text, json!({})));
    let handled = json!({ "code": "broken", "step": "risky" });
    assert_succeeded(&run, handled.clone());
    let calls = host.calls();
    assert_eq!(steps_called(&calls), ["risky", "recover", "after"]);
    assert_eq!(calls[2].input, handled, "the handler's output");
    let records = host.steps(&run.id);
    assert_eq!(paths(&records), ["risky", "risky/catch/recover", "after"]);
    // A fatal error is not retried, whatever the policy.
    assert_eq!(records[0].error, Some(broken()));
    assert_eq!(records[0].retry_in_ms, None);
}

// Time: retries, sleeps, deadlines

#[test]
fn a_retry_waits_for_its_backoff_on_the_clock_and_keeps_its_idempotency_key() {
    let host = Host::new(vec![]);
    let text = r#"
id: retry
steps:
  - { id: flaky, uses: flaky, retry: { max_attempts: 5, initial: 10s, max: 1m } }
  - { id: after, uses: echo, with: "${{ steps.flaky.output }}" }
"#;
    let handle = host.start(text, json!({}));
    let id = handle.id().to_owned();
    for (attempt, delay) in [(1, 10), (2, 20)] {
        let run = host.suspended(&id);
        let due = Timestamp(run.updated_at.0 + delay * 1000);
        assert_eq!(host.timers(&id), [(TimerKind::Retry, due)]);
        assert_eq!(host.calls().len(), attempt);
        // Not a moment before its due time.
        host.advance(delay - 1);
        assert_still_running(&handle);
        assert_eq!(host.calls().len(), attempt, "attempt {attempt} ran early");
        host.advance(1);
        eventually("the next attempt", || host.calls().len() > attempt);
    }
    assert_succeeded(&finish(handle), json!({ "attempt": 3 }));
    let calls = host.calls();
    let keys: Vec<(u32, &str)> = calls.iter().map(|c| (c.attempt, c.key.as_str())).collect();
    let (flaky, after) = (format!("{id}:flaky"), format!("{id}:after"));
    let (flaky, after) = (flaky.as_str(), after.as_str());
    assert_eq!(keys, [(1, flaky), (2, flaky), (3, flaky), (1, after)]);
    let records = host.steps(&id);
    let delays: Vec<Option<u64>> = records.iter().map(|r| r.retry_in_ms).collect();
    assert_eq!(delays, [Some(10_000), Some(20_000), None, None]);
    assert_eq!(records[0].error, Some(unavailable(1)));
}

#[test]
fn a_sleep_suspends_the_run_until_the_clock_passes_its_due_time() {
    let host = Host::new(vec![]);
    let text = r#"
id: nap
steps:
  - { id: before, uses: echo, with: 1 }
  - { id: nap, sleep: 1h }
  - { id: after, uses: echo, with: "${{ steps.nap.output }}" }
"#;
    let handle = host.start(text, json!({}));
    let id = handle.id().to_owned();
    assert_eq!(host.suspended(&id).state, RunState::Running);
    let due = Timestamp(START.0 + 3_600_000);
    assert_eq!(host.timers(&id), [(TimerKind::Sleep, due)]);

    host.advance(3599);
    assert_still_running(&handle);
    assert_eq!(steps_called(&host.calls()), ["before"]);
    host.advance(1);
    let slept = json!({ "slept_until": due.to_string() });
    assert_succeeded(&finish(handle), slept.clone());
    assert_eq!(inputs(&host.calls()[1..]), [("after", &slept)]);
    let records = host.steps(&id);
    assert_eq!(paths(&records), ["before", "nap", "nap", "after"]);
    assert_eq!(records[2].output, Some(slept));
    assert!(host.timers(&id).is_empty());
}

#[test]
fn a_run_past_its_deadline_ends_timed_out_and_its_call_is_told_to_stop() {
    let gate = Arc::new(Gate::default());
    let host = Host::new(vec![("gate", gate.plugin())]);
    let text = r#"
id: slowpoke
timeout: 1m
steps:
  - { id: first, uses: echo, with: 1 }
  - { id: hold, uses: gate, with: 2 }
  - { id: never, uses: echo, with: 3 }
"#;
    let handle = host.start(text, json!({}));
    gate.wait_entered(1);
    host.advance(59);
    assert_still_running(&handle);
    host.advance(1);
    let run = finish(handle);
    assert_eq!(run.state, RunState::TimedOut, "{run:?}");
    assert_eq!(run.error.unwrap().error.code, "run_timeout");
    gate.wait_cancelled();
    assert_eq!(steps_called(&host.calls()), ["first", "hold"]);
    assert!(host.steps(&run.id).iter().all(|r| r.step_id != "hold"));
    assert!(host.timers(&run.id).is_empty());
}

// Outside actors: await, cancel

#[test]
fn an_await_takes_one_answer_which_becomes_the_step_output() {
    let gate = Arc::new(Gate::default());
    let host = Host::new(vec![("gate", gate.plugin())]);
    let text = r#"
id: approval
steps:
  - { id: approve, await: {}, with: { amount: "${{ inputs.amount }}" } }
  - { id: after, uses: gate, with: "${{ steps.approve.output }}" }
"#;
    let handle = host.start(text, json!({ "amount": 5 }));
    let id = handle.id().to_owned();
    host.suspended(&id);
    let waiting = host.steps(&id);
    assert_eq!(waiting.len(), 1);
    assert!(waiting[0].awaiting && waiting[0].output.is_none());
    assert_eq!(waiting[0].input, json!({ "amount": 5 }));
    assert!(host.calls().is_empty());

    let ok = json!({ "ok": true });
    let answer = Answer::Complete(ok.clone());
    host.engine.act(&id, "approve", &answer).unwrap();
    gate.wait_entered(1);
    // The run is in progress: the step is answered, not waiting.
    let again = host.engine.act(&id, "approve", &Answer::Skip);
    assert_matches!(again, Err(ActError::NotWaiting { .. }));
    let elsewhere = host.engine.act(&id, "after", &answer);
    assert_matches!(elsewhere, Err(ActError::NotWaiting { .. }));
    gate.open();

    assert_succeeded(&finish(handle), ok.clone());
    assert_eq!(inputs(&host.calls()), [("after", &ok)]);
    let records = host.steps(&id);
    let outputs: Vec<_> = records.iter().map(|r| r.output.as_ref()).collect();
    assert_eq!(outputs, [None, Some(&ok), Some(&ok)], "one answer recorded");
    let late = host.engine.act(&id, "approve", &answer);
    assert_matches!(late, Err(ActError::Ended(_)));
}

#[test]
fn cancel_ends_the_run_and_no_later_step_is_called() {
    let gate = Arc::new(Gate::default());
    let host = Host::new(vec![("gate", gate.plugin())]);
    let text = r#"
id: doomed
steps:
  - { id: first, uses: echo, with: 1 }
  - { id: hold, uses: gate, with: 2 }
  - { id: later, uses: echo, with: 3 }
"#;
    let handle = host.start(text, json!({}));
    let id = handle.id().to_owned();
    gate.wait_entered(1);
    host.engine.cancel(&id).unwrap();
    assert_eq!(finish(handle).state, RunState::Cancelled);
    assert_eq!(host.record(&id).state, RunState::Cancelled);
    gate.wait_cancelled();
    // Its late result is dropped, and nothing runs after it.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(steps_called(&host.calls()), ["first", "hold"]);
    assert_eq!(paths(&host.steps(&id)), ["first", CANCEL_PATH]);
    assert_matches!(host.engine.cancel(&id), Err(StoreError::RunEnded(_)));
}

// Child runs, admission, resumption, effects

#[test]
fn a_subflow_starts_a_child_run_whose_outputs_become_the_step_output() {
    let host = Host::new(vec![]);
    let parent = r#"
id: order
steps:
  - { id: price, subflow: pricing, with: { qty: "${{ inputs.qty }}" } }
  - { id: confirm, uses: echo, with: { charged: "${{ steps.price.output.total }}" } }
"#;
    let refused = host
        .engine
        .start(workflow(parent), json!({}), Box::new(Quiet));
    assert_matches!(refused, Err(StartError::Subflow { .. }));
    let child = r#"
id: pricing
steps: [ { id: price, uses: echo, with: { total: "${{ inputs.qty * 3 }}" } } ]
outputs: "${{ steps.price.output }}"
"#;
    let child = weft_model::parse(child, Format::Yaml, "child.yaml").unwrap();
    host.engine
        .set_workflows(Arc::new(WorkflowDir::default().with(child)));

    let run = finish(host.start(parent, json!({ "qty": 4 })));
    assert_succeeded(&run, json!({ "charged": 12 }));
    let records = host.steps(&run.id);
    assert_eq!(paths(&records), ["price", "price", "confirm"]);
    let child_id = records[0].child.clone().expect("its child");
    assert_eq!(records[1].output, Some(json!({ "total": 12 })));
    let calls = host.calls();
    let workflows: Vec<&str> = calls.iter().map(|c| c.workflow.as_str()).collect();
    assert_eq!(workflows, ["pricing", "order"]);
    let runs: Vec<&String> = calls.iter().map(|c| &c.run).collect();
    assert_eq!(runs, [&child_id, &run.id]);

    let child = host.record(&child_id);
    assert_eq!(child.state, RunState::Succeeded);
    assert_eq!(child.input, json!({ "qty": 4 }));
    let link = child.parent.unwrap();
    assert_eq!((&link.run, link.depth), (&run.id, 1));
    assert_eq!(link.path, "price");
}

#[test]
fn runs_beyond_max_resident_are_parked_durably_and_admitted_in_arrival_order() {
    let gate = Arc::new(Gate::default());
    let host = Host::with_config(vec![("gate", gate.plugin())], 1);
    let text = "id: one\nsteps: [ { id: only, uses: gate, with: \"${{ inputs.n }}\" } ]\n";
    let first = host.start(text, json!({ "n": 1 }));
    gate.wait_entered(1);
    let second = host.start(text, json!({ "n": 2 }));
    let third = host.start(text, json!({ "n": 3 }));
    eventually("two runs to be parked", || host.engine.load() == (1, 2));
    assert_eq!(host.calls().len(), 1, "parked runs do not run");
    let parked = host.record(third.id());
    assert_eq!(parked.state, RunState::Running, "recorded while parked");

    gate.open();
    let ids = [first.id(), second.id(), third.id()].map(str::to_owned);
    for handle in [first, second, third] {
        assert_eq!(finish(handle).state, RunState::Succeeded);
    }
    let order: Vec<String> = host.calls().into_iter().map(|c| c.run).collect();
    assert_eq!(order, ids);
    assert_eq!(host.engine.load(), (0, 0));
}

#[test]
fn a_resumed_run_does_not_call_its_committed_steps_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let clock = Arc::new(SimClock::new(START));
    // The first engine dies in `b`: the call never gives a result, as if
    // the process had been killed there (its worker panics).
    let gate = Arc::new(Gate::default());
    let passing = Arc::clone(&gate);
    let dies: Behaviour = Arc::new(move |call, _| {
        passing.pass(call);
        panic!("simulated crash in `{}`", call.context.step_id)
    });
    let crashed = source(vec![("gate", dies)]);
    let first = engine(&store, &crashed, &clock, &dir, 10_000);
    let text = r#"
id: resumable
steps:
  - { id: a, uses: echo, with: { n: "${{ inputs.n }}" } }
  - { id: b, uses: gate, with: { from_a: "${{ steps.a.output.n }}" } }
  - { id: c, uses: echo, with: { from_b: "${{ steps.b.output.from_a }}" } }
outputs: "${{ steps.c.output }}"
"#;
    let input = json!({ "n": 7 });
    let stuck = first.start(workflow(text), input, Box::new(Quiet)).unwrap();
    let id = stuck.id().to_owned();
    gate.wait_entered(1);
    gate.open();
    drop(first);
    let stopped = stuck.wait_timeout(Duration::from_secs(1));
    assert_matches!(stopped, Err(StoreError::Closed));
    assert_eq!(steps_called(&calls(&crashed)), ["a", "b"]);
    let stored = store.run(&id).unwrap().unwrap();
    assert_eq!((stored.state, stored.next_step), (RunState::Running, 1));
    assert_eq!(paths(&store.steps(&id).unwrap()), ["a"]);

    // A new engine, with plugins of its own, picks the run up.
    let fresh = source(vec![("gate", echo())]);
    let second = engine(&store, &fresh, &clock, &dir, 10_000);
    let run = finish(second.resume(&id, Box::new(Quiet)).unwrap());
    assert_succeeded(&run, json!({ "from_b": 7 }));
    // `a` is not called again; `b` sees its output, read back.
    let resumed = calls(&fresh);
    let (b, c) = (json!({ "from_a": 7 }), json!({ "from_b": 7 }));
    assert_eq!(inputs(&resumed), [("b", &b), ("c", &c)]);
    assert_eq!(resumed[0].attempt, 1);
    let records = store.steps(&id).unwrap();
    assert_eq!(paths(&records), ["a", "b", "c"]);
    assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [0, 1, 2]);
    let again = second.resume(&id, Box::new(Quiet));
    assert_matches!(again, Err(ResumeError::NotRunning { .. }));
}

#[test]
fn a_failed_attempt_commits_neither_its_key_value_writes_nor_its_messages() {
    // Writes `last` and emits a message on every attempt; fails the first.
    let effects: Behaviour = Arc::new(|call, _| {
        let attempt = call.context.attempt;
        let ok = (attempt > 1).then(|| json!(attempt));
        let mut outcome = StepOutcome::of(ok.ok_or_else(|| unavailable(1)));
        outcome.kv.space = format!("workflow/{}", call.context.workflow);
        outcome
            .kv
            .writes
            .insert("last".into(), Some(attempt.to_string()));
        let id = format!("{}#{attempt}", call.context.idempotency_key);
        let payload = json!({ "attempt": attempt });
        let channel = "audit".to_owned();
        outcome.emitted.push(Emission {
            id,
            channel,
            payload,
        });
        outcome
    });
    let host = Host::new(vec![("effects", effects)]);
    let text = r#"
id: fx
steps:
  - { id: write, uses: effects, retry: { max_attempts: 2, backoff: fixed, initial: 1s } }
"#;
    let handle = host.start(text, json!({}));
    let id = handle.id().to_owned();
    let store = host.engine.store();
    host.suspended(&id);
    assert!(store.run_messages(&id).unwrap().is_empty());
    assert_eq!(store.kv_get("workflow/fx", "last").unwrap().version, 0);
    let failed = &host.steps(&id)[0];
    assert!(failed.error.is_some(), "{failed:?}");
    assert!(failed.kv_writes.is_empty() && failed.messages.is_empty());

    host.advance(1);
    assert_succeeded(&finish(handle), json!(2));
    let messages = store.run_messages(&id).unwrap();
    assert_eq!(messages.len(), 1, "{messages:?}");
    let message = &messages[0];
    assert_eq!([&message.channel, &message.step], ["audit", "write"]);
    assert_eq!(message.payload, json!({ "attempt": 2 }));
    let last = store.kv_get("workflow/fx", "last").unwrap();
    assert_eq!((last.version, last.value.as_deref()), (1, Some("2")));
    let records = host.steps(&id);
    let written = records[1].kv_writes.get("last").cloned().flatten();
    assert_eq!(written.as_deref(), Some("2"));
    assert_eq!(records[1].messages, [message.id.as_str()]);
}
