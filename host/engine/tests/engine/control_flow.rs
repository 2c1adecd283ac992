//! Control flow, one construct at a time: a sequence, `parallel` (joined,
//! and failing fast), `if`, `switch`, `foreach` with `concurrency`, `while`
//! with its cap, and `catch`.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use weft_engine::StepOutcome;
use weft_store::RunState;

use crate::common::{Host, assert_succeeded, finish, inputs, paths, sorted_paths, steps_called};
use crate::fake::{Behaviour, Gate, broken, lock};

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
fn switch_runs_the_first_case_that_matches_or_its_default() {
    let host = Host::new(vec![]);
    let text = r#"
id: route
steps:
  - id: pick
    switch:
      - if: "inputs.n > 10"
        steps: [ { id: big, uses: echo, with: "big" } ]
      - if: "inputs.n > 1"
        steps: [ { id: some, uses: echo, with: "some" } ]
      - if: "inputs.n > 0"
        steps: [ { id: also, uses: echo, with: "also" } ]
      - steps: [ { id: none, uses: echo, with: "none" } ]
outputs: { chose: "${{ steps.pick.output }}" }
"#;
    for (n, chose) in [(20, "big"), (5, "some"), (0, "none")] {
        let run = finish(host.start(text, json!({ "n": n })));
        assert_succeeded(&run, json!({ "chose": chose }));
        assert_eq!(paths(&host.steps(&run.id)), [format!("pick/{chose}")]);
    }
    assert_eq!(steps_called(&host.calls()), ["big", "some", "none"]);
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
