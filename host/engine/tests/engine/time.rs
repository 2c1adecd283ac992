//! Time, on the simulated clock: a retry waits for its backoff (and keeps
//! its idempotency key), a `sleep` suspends the run until its due time, and
//! a run past its `timeout` ends, its call told to stop.

use std::sync::Arc;

use serde_json::json;

use weft_core::Timestamp;
use weft_store::{RunState, TimerKind};

use crate::common::{
    Host, START, assert_still_running, assert_succeeded, eventually, finish, inputs, paths,
    steps_called,
};
use crate::fake::{Gate, unavailable};

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
