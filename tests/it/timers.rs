//! Time: durable timers under a simulated clock. `sleep` steps, retry
//! delays and run deadlines wait on timer rows; a run that only waits
//! leaves memory; a restart re-arms every timer; a fire that finds its row
//! gone (fired, cancelled, or its run ended) does nothing. No test waits
//! for a simulated duration in real time.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{guests, wait};
use serde_json::{Value, json};
use weft::engine::{EngineConfig, Quiet};
use weft::store::{Refused, RunRecord, RunState, StepRecord, TimerKind, Write};
use weft::{
    Engine, PluginDir, RedbStore, Runtime, RuntimeConfig, SimClock, Store, Timestamp, model,
};

/// 2026-11-30T00:00:00Z.
const T0: Timestamp = Timestamp(1_795_996_800_000);

struct Host {
    _dir: tempfile::TempDir,
    store: Arc<RedbStore>,
    clock: Arc<SimClock>,
}

impl Host {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(RedbStore::open(dir.path().join("weft.redb")).unwrap());
        Self {
            _dir: dir,
            store,
            clock: Arc::new(SimClock::new(T0)),
        }
    }

    /// An engine on this host's store and clock: a process.
    fn engine(&self) -> Engine {
        self.engine_with(4)
    }

    fn engine_with(&self, workers: usize) -> Engine {
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        Engine::with_config(
            self.store.clone(),
            PluginDir::new(runtime, guests()),
            self.clock.clone(),
            EngineConfig {
                workers,
                ..EngineConfig::default()
            },
        )
        .unwrap()
    }

    fn start(&self, engine: &Engine, text: &str, input: Value) -> String {
        let workflow = model::parse(text, model::Format::Yaml, "wf.yaml").unwrap();
        let mut handle = engine
            .start(Arc::new(workflow), input, Box::new(Quiet))
            .unwrap();
        handle.recorded().unwrap();
        handle.id().to_owned()
    }

    fn run(&self, id: &str) -> RunRecord {
        self.store.run(id).unwrap().unwrap()
    }

    fn steps(&self, id: &str) -> Vec<StepRecord> {
        self.store.steps(id).unwrap()
    }

    /// Polls (in real time, briefly) until `done` holds for the run.
    fn wait_for(&self, id: &str, what: &str, done: impl Fn(&RunRecord) -> bool) -> RunRecord {
        let look = || {
            let run = self.run(id);
            if done(&run) {
                Ok(run)
            } else {
                Err(Box::new(run))
            }
        };
        wait(
            Duration::from_secs(30),
            Duration::from_millis(5),
            look,
            |run| format!("run never {what}: {run:?}\n{:?}", self.steps(id)),
        )
    }

    fn wait_suspended(&self, id: &str) -> RunRecord {
        self.wait_for(id, "suspended", |run| run.suspended)
    }

    fn wait_ended(&self, id: &str) -> RunRecord {
        self.wait_for(id, "ended", |run| run.state.is_terminal())
    }
}

fn successes(steps: &[StepRecord], path: &str) -> usize {
    steps
        .iter()
        .filter(|s| s.path == path && s.output.is_some())
        .count()
}

const NAP: &str = r#"
id: nap
steps:
  - { id: before, uses: echo, with: "${{ inputs }}" }
  - { id: nap, sleep: 1h }
  - { id: after, uses: echo, with: "${{ steps.nap.output }}" }
"#;

#[test]
fn a_sleep_that_spans_a_restart_completes_once() {
    let host = Host::new();
    let engine = host.engine();
    let id = host.start(&engine, NAP, json!({ "n": 1 }));
    // Waiting on its timer only, the run leaves memory.
    let run = host.wait_suspended(&id);
    assert_eq!(run.state, RunState::Running);
    // The run gives its place back just after the commit that marks it
    // suspended.
    crate::common::wait(
        Duration::from_secs(10),
        Duration::from_millis(5),
        || match engine.load() {
            (0, 0) => Ok(()),
            load => Err(load),
        },
        |load| format!("the suspended run still holds its place: {load:?}"),
    );
    let timers = host.store.run_timers(&id).unwrap();
    assert_eq!(timers.len(), 1);
    assert_eq!(timers[0].timer.kind, TimerKind::Sleep);
    assert_eq!(timers[0].timer.due, Timestamp(T0.0 + 3_600_000));
    drop(engine); // the process ends

    // The next process re-arms the timer. Before it is due, nothing runs.
    let engine = host.engine();
    assert_eq!(engine.arm_timers().unwrap(), 1);
    host.clock.advance(Duration::from_secs(59 * 60));
    std::thread::sleep(Duration::from_millis(50));
    assert!(host.run(&id).suspended);
    assert_eq!(host.steps(&id).len(), 2, "{:?}", host.steps(&id));

    host.clock.advance(Duration::from_secs(61));
    let run = host.wait_ended(&id);
    assert_eq!(run.state, RunState::Succeeded, "{run:?}");
    assert_eq!(
        run.outputs,
        Some(json!({ "slept_until": "2026-11-30T01:00:00.000Z" }))
    );
    let steps = host.steps(&id);
    assert_eq!(successes(&steps, "before"), 1);
    assert_eq!(successes(&steps, "nap"), 1);
    assert_eq!(successes(&steps, "after"), 1);
    assert!(host.store.run_timers(&id).unwrap().is_empty());
    assert!(host.store.timer_keys().unwrap().is_empty());
}

#[test]
fn a_handle_outlives_its_run_s_suspension() {
    let host = Host::new();
    let engine = host.engine();
    let workflow = model::parse(NAP, model::Format::Yaml, "wf.yaml").unwrap();
    let mut handle = engine
        .start(Arc::new(workflow), json!({}), Box::new(Quiet))
        .unwrap();
    handle.recorded().unwrap();
    host.wait_suspended(handle.id());
    host.clock.advance(Duration::from_secs(3600));
    let run = handle.wait().unwrap();
    assert_eq!(run.state, RunState::Succeeded);
}

#[test]
fn a_retry_delay_is_a_durable_timer() {
    let host = Host::new();
    let engine = host.engine();
    let text = r#"
id: patient
steps:
  - id: shaky
    uses: flaky
    with: { succeed_on: 2 }
    retry: { max_attempts: 3, backoff: fixed, initial: 2h, max: 2h }
"#;
    let id = host.start(&engine, text, json!({}));
    host.wait_suspended(&id);
    let steps = host.steps(&id);
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].retry_in_ms, Some(7_200_000));
    drop(engine);

    let engine = host.engine();
    engine.arm_timers().unwrap();
    host.clock.advance(Duration::from_secs(2 * 3600));
    let run = host.wait_ended(&id);
    assert_eq!(run.state, RunState::Succeeded, "{run:?}");
    assert_eq!(run.outputs, Some(json!({ "attempt": 2 })));
    assert_eq!(host.steps(&id).len(), 2);
}

#[test]
fn a_run_deadline_ends_a_parallel_block_and_no_timer_fires_after() {
    let host = Host::new();
    let engine = host.engine();
    let text = r#"
id: late
timeout: 10m
steps:
  - id: fan
    parallel:
      - { id: short, sleep: 1h }
      - { id: long, sleep: 2h }
"#;
    let id = host.start(&engine, text, json!({}));
    host.wait_for(&id, "waiting on its three timers", |_| {
        host.store.run_timers(&id).unwrap().len() == 3
    });
    host.clock.advance(Duration::from_secs(11 * 60));
    let run = host.wait_ended(&id);
    assert_eq!(run.state, RunState::TimedOut, "{run:?}");
    let error = run.error.unwrap();
    assert_eq!(error.error.code, "run_timeout");
    assert_eq!(error.step, None);
    // Its sleeps' timers went with it; when they would have been due,
    // nothing happens.
    assert!(host.store.run_timers(&id).unwrap().is_empty());
    let before = host.steps(&id).len();
    host.clock.advance(Duration::from_secs(3 * 3600));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(host.steps(&id).len(), before);
    assert_eq!(host.run(&id).state, RunState::TimedOut);
}

#[test]
fn a_catch_can_take_over_from_a_run_deadline() {
    let host = Host::new();
    let engine = host.engine();
    let text = r#"
id: rescued
timeout: 1m
steps:
  - { id: slow, sleep: 1h }
catch:
  - if: "error.code == 'run_timeout'"
    steps: [ { id: tidy, uses: echo, with: "${{ {'why': error.code} }}" } ]
"#;
    let id = host.start(&engine, text, json!({}));
    host.wait_suspended(&id);
    host.clock.advance(Duration::from_secs(61));
    let run = host.wait_ended(&id);
    assert_eq!(run.state, RunState::Succeeded, "{run:?}");
    assert_eq!(run.outputs, Some(json!({ "why": "run_timeout" })));
}

/// Fire and cancel race in the store: whichever commits first wins, and
/// the loser is refused as a whole.
#[test]
fn a_fire_and_a_run_s_end_race_and_the_first_commit_wins() {
    for fire_first in [true, false] {
        let host = Host::new();
        let engine = host.engine();
        let id = host.start(&engine, NAP, json!({}));
        host.wait_suspended(&id);
        drop(engine);
        let timer = host.store.run_timers(&id).unwrap().remove(0).timer;
        let mut ended = host.run(&id);
        ended.state = RunState::Failed;
        ended.suspended = false;
        let end = Write::update_run(&ended);
        // The fire as the engine decides it on the run as stored.
        let asleep = host.run(&id);
        let seq = asleep.step_records;
        let mut slept = StepRecord::empty(&id, seq, (1, "nap", "nap"), 1, timer.due);
        slept.output = Some(json!({ "slept_until": timer.due.to_string() }));
        let mut wake = asleep;
        (wake.step_records, wake.suspended) = (seq + 1, false);
        let fire = Write::fire_timer(timer, seq, Some(&slept), &wake);
        let writes: Vec<&Write> = if fire_first {
            vec![&fire, &end]
        } else {
            vec![&end, &fire]
        };
        let answers = host.store.apply(&writes).unwrap();
        let fired = host
            .steps(&id)
            .iter()
            .any(|s| s.path == "nap" && s.output.is_some());
        if fire_first {
            assert!(answers.iter().all(Result::is_ok), "{answers:?}");
            assert!(fired);
        } else {
            assert!(answers[0].is_ok());
            assert!(
                matches!(answers[1], Err(Refused::TimerGone(_))),
                "{answers:?}"
            );
            assert!(!fired);
        }
        assert_eq!(host.run(&id).state, RunState::Failed);
        assert!(host.store.run_timers(&id).unwrap().is_empty());
    }
}

#[test]
fn sleeps_take_a_duration_an_expression_or_a_time() {
    let host = Host::new();
    let engine = host.engine();
    let text = r#"
id: times
steps:
  - { id: by-expr, sleep: "${{ inputs.wait }}" }
  - { id: by-ms, sleep: "${{ 1000 }}" }
  - { id: until, sleep_until: "2026-11-30T05:00:00Z" }
  - { id: past, sleep_until: "${{ inputs.past }}" }
"#;
    let id = host.start(
        &engine,
        text,
        json!({ "wait": "90m", "past": "2020-01-01T00:00:00Z" }),
    );
    host.wait_suspended(&id);
    host.clock.advance(Duration::from_secs(90 * 60));
    host.wait_for(&id, "at its second sleep", |_| {
        successes(&host.steps(&id), "by-expr") == 1 && host.run(&id).suspended
    });
    host.clock.advance(Duration::from_secs(1));
    host.wait_for(&id, "at its third sleep", |_| {
        successes(&host.steps(&id), "by-ms") == 1 && host.run(&id).suspended
    });
    host.clock.set(Timestamp(T0.0 + 5 * 3_600_000));
    let run = host.wait_ended(&id);
    assert_eq!(run.state, RunState::Succeeded, "{run:?}");
    let steps = host.steps(&id);
    let until: Vec<_> = steps
        .iter()
        .filter_map(|s| s.output.as_ref().map(|o| o["slept_until"].clone()))
        .collect();
    assert_eq!(
        until,
        [
            json!("2026-11-30T01:30:00.000Z"),
            json!("2026-11-30T01:30:01.000Z"),
            json!("2026-11-30T05:00:00.000Z"),
            json!("2020-01-01T00:00:00.000Z"),
        ]
    );

    // A bad duration fails the step, naming it.
    let id = host.start(&engine, text, json!({ "wait": "soon", "past": 0 }));
    let run = host.wait_ended(&id);
    assert_eq!(run.state, RunState::Failed);
    let error = run.error.unwrap();
    assert_eq!(error.step.as_deref(), Some("by-expr"));
    assert!(
        error.error.message.contains("`soon` is not a duration"),
        "{error:?}"
    );
}

#[test]
fn weft_runs_cancel_ends_a_sleeping_run_that_another_process_waits_for() {
    let scratch = crate::common::Scratch::new(&["echo"]);
    let wf = scratch.file(
        "nap.yaml",
        "id: nap\nsteps:\n  - { id: nap, sleep: 1h }\n  - { id: after, uses: echo, with: 1 }\n",
    );
    let waiting = scratch
        .weft()
        .args(["run", wf.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let id =
        scratch.wait_for_newest_run("nap", "went to sleep", |run| run["suspended"] == true)["id"]
            .as_str()
            .unwrap()
            .to_owned();
    let cancelled = scratch.run(&["runs", "cancel", &id]);
    assert_eq!(cancelled.code, Some(0), "{cancelled:?}");
    let again = scratch.run(&["runs", "cancel", &id]);
    assert_eq!(again.code, Some(2), "{again:?}");
    assert!(
        again.stderr.contains("has already ended: cancelled"),
        "{again:?}"
    );

    let waited = crate::common::Run::from(waiting.wait_with_output().unwrap());
    assert_eq!(waited.code, Some(1), "{waited:?}");
    assert!(
        waited.stderr.contains("cancelled: the run was cancelled"),
        "{}",
        waited.stderr
    );
    let shown = scratch.run(&["runs", "show", &id, "--json"]).json();
    assert_eq!(shown["run"]["state"], "cancelled");
    assert_eq!(shown["steps"].as_array().unwrap().len(), 1);
}

#[test]
fn a_run_deadline_interrupts_a_guest_call_still_running() {
    let host = Host::new();
    // One worker: a guest that kept it would hold up every other run.
    let engine = host.engine_with(1);
    let stuck = host.start(
        &engine,
        "id: stuck\ntimeout: 1m\nsteps:\n  - { id: loop, uses: spin, timeout: 10m }\n",
        json!({}),
    );
    host.wait_for(&stuck, "calling its guest", |run| run.next_step == 0);
    std::thread::sleep(Duration::from_millis(100));
    host.clock.advance(Duration::from_secs(61));
    let run = host.wait_ended(&stuck);
    assert_eq!(run.state, RunState::TimedOut);
    // The worker is free again: another run goes through.
    let next = host.start(
        &engine,
        "id: next\nsteps:\n  - { id: echo, uses: echo, with: 1 }\n",
        json!({}),
    );
    let run = host.wait_ended(&next);
    assert_eq!(run.state, RunState::Succeeded);
    // The interrupted call left no record: its run had ended.
    assert!(host.steps(&stuck).iter().all(|s| s.path != "loop"));
}
