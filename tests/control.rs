//! Per-step control: `retry` with backoff, `if`, and `continue_on_error`,
//! through the real binary and real guests.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::Scratch;
use serde_json::{Value, json};

fn records_of(scratch: &Scratch, id: &str) -> Vec<Value> {
    let shown = scratch.run(&["runs", "show", id, "--json"]).json();
    shown["steps"].as_array().unwrap().clone()
}

fn run_workflow(scratch: &Scratch, text: &str) -> common::Run {
    let wf = scratch.file("wf.yaml", text);
    scratch.run(&["run", wf.to_str().unwrap()])
}

#[test]
fn a_retryable_failure_succeeds_on_the_third_attempt() {
    let scratch = Scratch::new(&["flaky"]);
    let run = run_workflow(
        &scratch,
        "id: r\nsteps:\n  - id: s\n    uses: flaky\n    with: { succeed_on: 3 }\n    retry: { max_attempts: 5, backoff: fixed, initial: 10ms }\n",
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json(), json!({ "attempt": 3 }));
    assert!(
        run.stderr.contains("(retrying in 10.0ms)"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("ok   [1/1] s (flaky) attempt 3"),
        "{}",
        run.stderr
    );

    let records = records_of(&scratch, &run.run_id());
    let attempts: Vec<_> = records
        .iter()
        .map(|r| (r["attempt"].clone(), r["retry_in_ms"].clone()))
        .collect();
    assert_eq!(
        attempts,
        [
            (json!(1), json!(10)),
            (json!(2), json!(10)),
            (json!(3), Value::Null)
        ]
    );
    assert_eq!(records[0]["error"]["code"], "unavailable");
    assert_eq!(records[2]["output"], json!({ "attempt": 3 }));
}

#[test]
fn traps_are_retried_and_fatal_errors_are_not() {
    let scratch = Scratch::new(&["flaky"]);
    let run = run_workflow(
        &scratch,
        "id: r\nsteps:\n  - id: s\n    uses: flaky\n    with: { succeed_on: 2, fail_with: trap }\n    retry: { max_attempts: 2, initial: 1ms }\n",
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json(), json!({ "attempt": 2 }));

    let run = run_workflow(
        &scratch,
        "id: r\nsteps:\n  - id: s\n    uses: flaky\n    with: { fail_with: fatal }\n    retry: { max_attempts: 5, initial: 1ms }\n",
    );
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr
            .contains("failed at step `s`: broken: attempt 1 failed for good"),
        "{}",
        run.stderr
    );
    assert_eq!(
        records_of(&scratch, &run.run_id()).len(),
        1,
        "a fatal error is not retried"
    );
}

#[test]
fn retries_stop_when_attempts_run_out_or_the_code_is_not_listed() {
    let scratch = Scratch::new(&["flaky"]);
    let run = run_workflow(
        &scratch,
        "id: r\nsteps:\n  - id: s\n    uses: flaky\n    with: { succeed_on: 10 }\n    retry: { max_attempts: 3, initial: 1ms, max: 2ms }\n",
    );
    assert_eq!(run.code, Some(1), "{run:?}");
    let records = records_of(&scratch, &run.run_id());
    let delays: Vec<_> = records.iter().map(|r| r["retry_in_ms"].clone()).collect();
    assert_eq!(
        delays,
        [json!(1), json!(2), Value::Null],
        "exponential, capped, none after the last"
    );
    assert!(run.stderr.contains("attempt 3 failed"), "{}", run.stderr);

    let run = run_workflow(
        &scratch,
        "id: r\nsteps:\n  - id: s\n    uses: flaky\n    retry: { max_attempts: 3, initial: 1ms, retry_on: [timeout] }\n",
    );
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        records_of(&scratch, &run.run_id()).len(),
        1,
        "`unavailable` is not in retry_on"
    );
}

#[test]
fn if_skips_steps_and_continue_on_error_carries_on() {
    let scratch = Scratch::new(&["echo", "flaky"]);
    let text = r#"
id: branchy
inputs: { type: object, required: [go] }
steps:
  - id: maybe
    uses: echo
    if: inputs.go
    with: { ran: true }
  - id: shaky
    uses: flaky
    with: { fail_with: fatal }
    continue_on_error: true
  - id: report
    uses: echo
    with:
      skipped: "${{ has(steps.maybe.skipped) }}"
      maybe: "${{ steps.maybe.output }}"
      shaky_code: "${{ steps.shaky.error.code }}"
"#;
    let wf = scratch.file("wf.yaml", text);
    let wf = wf.to_str().unwrap();
    let run = scratch.run(&["run", wf, "--input", r#"{"go": false}"#]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.json(),
        json!({ "skipped": true, "maybe": null, "shaky_code": "broken" })
    );
    assert!(
        run.stderr.contains("skip [1/3] maybe (echo) (if: false)"),
        "{}",
        run.stderr
    );
    let records = records_of(&scratch, &run.run_id());
    assert_eq!(records[0]["skipped"], true);
    assert_eq!(records[1]["error"]["code"], "broken");

    let run = scratch.run(&["run", wf, "--input", r#"{"go": true}"#]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.json(),
        json!({ "skipped": false, "maybe": { "ran": true }, "shaky_code": "broken" })
    );

    let run = scratch.run(&["run", wf, "--input", r#"{"go": "yes"}"#]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr
            .contains("expression: if: expected true or false, got \"yes\""),
        "{}",
        run.stderr
    );
}

#[test]
fn kv_writes_commit_with_the_step_and_only_when_it_succeeds() {
    let scratch = Scratch::new(&["counter"]);
    let text = "id: tally\nsteps:\n  - { id: a, uses: counter, with: { key: hits } }\n  - { id: b, uses: counter, with: { key: hits, by: 10 } }\n";
    for expected in [11, 22, 33] {
        let run = run_workflow(&scratch, text);
        assert_eq!(run.code, Some(0), "{run:?}");
        assert_eq!(run.json(), json!({ "key": "hits", "value": expected }));
    }
    let newest = scratch.run(&["runs", "list", "--json"]).json();
    let records = records_of(&scratch, newest[0]["id"].as_str().unwrap());
    assert_eq!(records[1]["kv_writes"], json!({ "hits": "33" }));

    // A step that fails after writing leaves the counter as it was, and so
    // does every failed attempt of a retried one.
    let failing = "id: tally\nsteps:\n  - { id: a, uses: counter, with: { key: hits, fail: true }, retry: { max_attempts: 3, initial: 1ms, retry_on: [asked_to_fail] } }\n";
    let run = run_workflow(&scratch, failing);
    assert_eq!(run.code, Some(1), "{run:?}");
    let peek = "id: tally\nsteps:\n  - { id: a, uses: counter, with: { key: hits, by: 0 } }\n";
    let run = run_workflow(&scratch, peek);
    assert_eq!(run.json(), json!({ "key": "hits", "value": 33 }));

    // Another workflow has a key space of its own.
    let other = "id: other\nsteps:\n  - { id: a, uses: counter, with: { key: hits, by: 0 } }\n";
    assert_eq!(
        run_workflow(&scratch, other).json(),
        json!({ "key": "hits", "value": 0 })
    );
}
