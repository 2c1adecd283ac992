//! Time, on the simulated clock: a retry waits for its backoff (and keeps
//! its idempotency key), and a retry timer armed twice starts one attempt;
//! a `sleep` suspends the run until its due time; a run past its `timeout`
//! ends, its call told to stop.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use weft_core::Timestamp;
use weft_engine::StepOutcome;
use weft_store::{RunState, TimerKind};

use crate::common::{
    Host, NAP, START, assert_still_running, assert_succeeded, eventually, finish, inputs, paths,
    steps_called,
};
use crate::fake::{Behaviour, Gate, broken, unavailable};

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

/// Arming a timer twice is normal (a host's start arms every pending
/// timer, and taking a run in arms its own again): both copies fire, and
/// the leaf must still be made ready once, not once per copy.
#[test]
fn a_retry_timer_armed_twice_starts_one_next_attempt() {
    let second = Arc::new(Gate::default());
    let gate = Arc::clone(&second);
    let once: Behaviour = Arc::new(move |call, input| match call.context.attempt {
        1 => StepOutcome::of(Err(unavailable(1))),
        _ => StepOutcome::of(gate.pass(call).then_some(input).ok_or_else(broken)),
    });
    // A sibling held open keeps the run in memory through the retry delay.
    let hold = Arc::new(Gate::default());
    let host = Host::new(vec![("once", once), ("hold", hold.plugin())]);
    let text = r#"
id: twice
steps:
  - id: both
    parallel:
      - { id: a, uses: once, with: 1, retry: { max_attempts: 3, initial: 10s } }
      - { id: b, uses: hold, with: 2 }
"#;
    let handle = host.start(text, json!({}));
    let id = handle.id().to_owned();
    hold.wait_entered(1);
    eventually("the retry's timer", || {
        host.timers(&id)
            .iter()
            .any(|(kind, _)| *kind == TimerKind::Retry)
    });
    host.engine.arm_timers().unwrap();
    host.advance(10);
    second.wait_entered(1);
    // Both copies have fired by now; the second attempt is still under way.
    std::thread::sleep(Duration::from_millis(200));
    second.open();
    hold.open();
    assert_succeeded(&finish(handle), json!({ "a": 1, "b": 2 }));
    let attempts: Vec<u32> = host
        .calls()
        .iter()
        .filter(|c| c.step == "a")
        .map(|c| c.attempt)
        .collect();
    assert_eq!(attempts, [1, 2], "one call per attempt");
}

#[test]
fn a_sleep_suspends_the_run_until_the_clock_passes_its_due_time() {
    let host = Host::new(vec![]);
    let handle = host.start(NAP, json!({}));
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
