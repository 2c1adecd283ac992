//! Per-step control: `retry` with backoff, `if`, and `continue_on_error`,
//! through the real binary and real guests.

use crate::common::Scratch;
use serde_json::{Value, json};

fn records_of(scratch: &Scratch, id: &str) -> Vec<Value> {
    let shown = scratch.run(&["runs", "show", id, "--json"]).json();
    shown["steps"].as_array().unwrap().clone()
}

fn run_workflow(scratch: &Scratch, text: &str) -> crate::common::Run {
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

#[test]
fn parallel_switch_and_foreach_shape_their_outputs() {
    let scratch = Scratch::new(&["echo"]);
    let text = r#"
id: shapes
inputs: { type: object, required: [kind, items] }
steps:
  - id: fan
    parallel:
      - { id: left, uses: echo, with: "${{ inputs.kind }}" }
      - { id: right, uses: echo, with: 2 }
  - id: route
    switch:
      - if: "inputs.kind == 'a'"
        steps: [ { id: on-a, uses: echo, with: "chose a" } ]
      - steps: [ { id: other, uses: echo, with: "chose default" } ]
  - id: each
    foreach: "${{ inputs.items }}"
    steps:
      - { id: double, uses: echo, with: "${{ {'i': index, 'twice': item * 2} }}" }
outputs:
  fan: "${{ steps.fan.output }}"
  route: "${{ steps.route.output }}"
  each: "${{ steps.each.output }}"
  last_double: "${{ has(steps.double) ? steps.double.output : null }}"
"#;
    let wf = scratch.file("wf.yaml", text);
    let wf = wf.to_str().unwrap();
    let run = scratch.run(&["run", wf, "--input", r#"{"kind": "a", "items": [1, 5]}"#]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.json(),
        json!({
            "fan": { "left": "a", "right": 2 },
            "route": "chose a",
            "each": [{ "i": 0, "twice": 2 }, { "i": 1, "twice": 10 }],
            "last_double": { "i": 1, "twice": 10 },
        })
    );
    let mut paths: Vec<_> = records_of(&scratch, &run.run_id())
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .collect();
    // The branches commit in the order they finish.
    paths[0..2].sort();
    assert_eq!(
        paths,
        [
            "fan/left",
            "fan/right",
            "route/on-a",
            "each[0]/double",
            "each[1]/double"
        ]
    );

    let run = scratch.run(&["run", wf, "--input", r#"{"kind": "b", "items": []}"#]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json()["route"], "chose default");
    assert_eq!(run.json()["each"], json!([]));
}

#[test]
fn a_while_loop_runs_until_its_condition_fails_or_its_cap() {
    let scratch = Scratch::new(&["counter"]);
    let text = |cap: u32| {
        format!(
            "id: loop\nsteps:\n  - id: spin\n    while: \"!has(steps.tick) || steps.tick.output.value < 3\"\n    max_iterations: {cap}\n    steps:\n      - {{ id: tick, uses: counter, with: {{ key: \"${{{{ run.id }}}}\" }} }}\n"
        )
    };
    let run = run_workflow(&scratch, &text(5));
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json(), json!({ "key": run.run_id(), "value": 3 }));

    let run = run_workflow(&scratch, &text(2));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains("failed at step `spin`: while_limit: `spin` ran its 2 iterations and its condition still holds"),
        "{}",
        run.stderr
    );
}

#[test]
fn catch_handles_a_fatal_error_even_deep_inside_nested_blocks() {
    let scratch = Scratch::new(&["echo", "flaky"]);
    // A parallel inside a foreach inside a step with a catch.
    let text = r#"
id: nested
steps:
  - id: outer
    foreach: "${{ [1, 2] }}"
    steps:
      - id: pair
        parallel:
          - { id: fine, uses: echo, with: "${{ item }}" }
          - { id: bad, uses: flaky, if: "item == 2", with: { fail_with: fatal } }
    catch:
      - if: "error.code == 'nope'"
        steps: [ { id: wrong, uses: echo, with: "wrong handler" } ]
      - if: "error.code == 'broken'"
        steps: [ { id: recover, uses: echo, with: "${{ {'recovered': error.step, 'message': error.message} }}" } ]
  - { id: after, uses: echo, with: "${{ steps.outer.output }}" }
"#;
    let run = run_workflow(&scratch, text);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.json(),
        json!({ "recovered": "bad", "message": "attempt 1 failed for good" })
    );
    let paths: Vec<_> = records_of(&scratch, &run.run_id())
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .collect();
    // The iterations run in order; the branches of each in either order. The
    // failure returns at once (fail fast), so the sibling `fine` of the failed
    // iteration runs on beside the catch: its record lands before or after the
    // handler's, or not at all if the run ends first (its call is then
    // interrupted), but never before the first iteration's.
    assert!((5..=6).contains(&paths.len()), "{paths:?}");
    let at = |path: &str| paths.iter().position(|p| p == path);
    let mut first = paths[0..2].to_vec();
    first.sort();
    assert_eq!(
        first,
        ["outer[0]/pair/bad", "outer[0]/pair/fine"],
        "{paths:?}"
    );
    let rest: Vec<_> = paths[2..]
        .iter()
        .filter(|p| *p != "outer[1]/pair/fine")
        .collect();
    assert_eq!(
        rest,
        ["outer[1]/pair/bad", "outer/catch/recover", "after"],
        "{paths:?}"
    );
    assert!(at("outer[1]/pair/fine").is_none_or(|i| i >= 2), "{paths:?}");

    // A workflow-level catch: the run succeeds with the handler's output.
    let text = "id: saved\nsteps:\n  - { id: s, uses: flaky, with: { fail_with: fatal } }\ncatch:\n  - steps: [ { id: h, uses: echo, with: \"${{ error.code }}\" } ]\n";
    let run = run_workflow(&scratch, text);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json(), json!("broken"));

    // No handler matches: the error stands.
    let text = "id: lost\nsteps:\n  - id: s\n    uses: flaky\n    with: { fail_with: fatal }\n    catch:\n      - if: \"error.code == 'other'\"\n        steps: [ { id: h, uses: echo } ]\n";
    let run = run_workflow(&scratch, text);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains("failed at step `s`: broken"),
        "{}",
        run.stderr
    );
}

#[test]
fn malformed_blocks_are_refused_at_load_time() {
    let scratch = Scratch::new(&[]);
    let cases = [
        (
            "id: x\nsteps:\n  - { id: a, uses: echo, parallel: [ { id: b, uses: echo } ] }\n",
            "step `a`: a step needs exactly one of `uses`, `subflow`, `sleep`, `sleep_until`, `emit`, `await`, `parallel`, `switch`, `foreach` or `while`",
        ),
        (
            "id: x\nsteps:\n  - { id: w, while: 'true', steps: [ { id: b, uses: echo } ] }\n",
            "`while` needs `max_iterations`",
        ),
        (
            "id: x\nsteps:\n  - id: s\n    switch:\n      - steps: [ { id: a, uses: echo } ]\n      - { if: 'true', steps: [ { id: b, uses: echo } ] }\n",
            "switch[0]: a case without `if` matches everything, so it must be the last",
        ),
        (
            "id: x\nsteps:\n  - { id: p, parallel: [ { id: a, uses: echo }, { id: a, uses: echo } ] }\n",
            "step `a`: steps[0].parallel[1].id: the id `a` is used by an earlier step",
        ),
        (
            "id: x\nsteps:\n  - { id: f, foreach: '${{ [1] }}', steps: [ { id: a, uses: echo, with: '${{ iteration }}' } ] }\n",
            "unknown variable `iteration`",
        ),
        (
            "id: x\nsteps:\n  - { id: p, parallel: [ { id: a, uses: echo } ], timeout: 1s }\n",
            "`timeout` applies only to a step with `uses`",
        ),
        (
            "id: x\nsteps:\n  - { id: f, foreach: '${{ [1] }}', steps: [] }\n",
            "step `f`: steps[0].steps: is empty",
        ),
        (
            "id: x\nsteps:\n  - { id: f, foreach: '${{ [1] }}', concurrency: 0, steps: [ { id: a, uses: echo } ] }\n",
            "step `f`: concurrency must be from 1 to 1000, not 0",
        ),
        (
            "id: x\nsteps:\n  - { id: w, while: 'true', max_iterations: 2, concurrency: 2, steps: [ { id: a, uses: echo } ] }\n",
            "step `w`: `concurrency` applies only to a `foreach` step",
        ),
        (
            "id: x\nsteps:\n  - { id: s, subflow: other, timeout: 1s }\n",
            "step `s`: `timeout` applies only to a step with `uses`",
        ),
        (
            "id: x\nsteps:\n  - { id: s, subflow: 'Not An Id' }\n",
            "step `s`: subflow:",
        ),
        (
            "id: x\nsteps:\n  - { id: p, parallel: [ { id: a, uses: echo } ], with: 1 }\n",
            "`with` applies only to a step with `uses`, `subflow`, `emit` or `await`",
        ),
        (
            "id: x\nsteps:\n  - { id: e, emit: 'a/b', with: 1 }\n",
            "step `e`: emit: the channel `a/b` has `/`",
        ),
        (
            "id: x\nsteps:\n  - { id: w, await: { timeout: soon } }\n",
            "step `w`: await.timeout: `soon` is not a duration",
        ),
        (
            "id: x\nsteps:\n  - { id: w, await: { timeuot: 1s } }\n",
            "timeuot",
        ),
        (
            "id: x\nsteps:\n  - { id: w, await: {}, retry: { max_attempts: 2 } }\n",
            "`retry` applies only to a step with `uses` or `subflow`",
        ),
    ];
    for (text, expected) in cases {
        let path = scratch.file("bad.yaml", text);
        let run = scratch.run(&["check", path.to_str().unwrap()]);
        assert_eq!(run.code, Some(2), "{text}: {run:?}");
        assert!(
            run.stderr.contains(expected),
            "{text}: expected `{expected}` in {}",
            run.stderr
        );
    }
}

#[test]
fn an_oversized_foreach_fails_cleanly() {
    let scratch = Scratch::new(&["echo"]);
    let wf = scratch.file(
        "wf.yaml",
        "id: big\nsteps:\n  - { id: each, foreach: '${{ inputs }}', steps: [ { id: e, uses: echo } ] }\n",
    );
    let items = serde_json::to_string(&vec![0; 10_001]).unwrap();
    let run = scratch.run(&["run", wf.to_str().unwrap(), "--input", &items]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains("failed at step `each`: foreach_limit: `each` got a list of 10001 items; the limit is 10000"),
        "{}",
        run.stderr
    );
}

/// Each record's interval, `[start, end)` in milliseconds.
fn intervals(records: &[Value]) -> Vec<(u64, u64)> {
    records
        .iter()
        .map(|r| {
            let start = r["started_at"].as_u64().unwrap();
            (start, start + r["duration_us"].as_u64().unwrap() / 1000)
        })
        .collect()
}

/// The most intervals that hold at one instant.
fn most_at_once(intervals: &[(u64, u64)]) -> usize {
    intervals
        .iter()
        .map(|(start, _)| {
            intervals
                .iter()
                .filter(|(s, e)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn parallel_branches_run_at_the_same_time() {
    let scratch = Scratch::new(&["spin", "echo"]);
    let text = r#"
id: fan
steps:
  - id: fan
    parallel:
      - { id: a, uses: spin, with: { ms: 400 } }
      - { id: b, uses: spin, with: { ms: 400 } }
      - { id: c, uses: spin, with: { ms: 400 } }
  - { id: after, uses: echo, with: "${{ steps.fan.output }}" }
"#;
    let run = run_workflow(&scratch, text);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.json(),
        json!({ "a": { "spun_ms": 400 }, "b": { "spun_ms": 400 }, "c": { "spun_ms": 400 } })
    );
    let records = records_of(&scratch, &run.run_id());
    assert_eq!(records.len(), 4);
    let branches = intervals(&records[..3]);
    assert_eq!(most_at_once(&branches), 3, "{branches:?}");
    // `after` starts only when every branch has ended.
    let after = records[3]["started_at"].as_u64().unwrap();
    assert!(
        branches.iter().all(|(_, end)| *end <= after + 1),
        "{records:?}"
    );
}

#[test]
fn a_foreach_runs_at_most_its_concurrency_at_once_and_keeps_list_order() {
    let scratch = Scratch::new(&["spin"]);
    let text = r#"
id: each
steps:
  - id: each
    foreach: "${{ [300, 150, 300, 150, 300] }}"
    concurrency: 2
    steps:
      - { id: work, uses: spin, with: { ms: "${{ item }}" } }
outputs: "${{ steps.each.output.map(o, o.spun_ms) }}"
"#;
    let run = run_workflow(&scratch, text);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json(), json!([300, 150, 300, 150, 300]));
    let records = records_of(&scratch, &run.run_id());
    assert_eq!(records.len(), 5);
    let at_once = most_at_once(&intervals(&records));
    assert_eq!(at_once, 2, "{records:?}");
}

#[test]
fn a_failed_branch_fails_the_parallel_without_waiting_for_its_siblings() {
    let scratch = Scratch::new(&["spin", "flaky"]);
    let text = r#"
id: fast-fail
steps:
  - id: fan
    parallel:
      - { id: slow, uses: spin, with: { ms: 5000 } }
      - { id: bad, uses: flaky, with: { fail_with: fatal } }
"#;
    let run = run_workflow(&scratch, text);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains("failed at step `bad`"),
        "{}",
        run.stderr
    );
    // The slow branch was abandoned: the run ended before it did, so
    // nothing of it was committed.
    let records = records_of(&scratch, &run.run_id());
    let paths: Vec<_> = records.iter().map(|r| r["path"].clone()).collect();
    assert_eq!(paths, [json!("fan/bad")]);
}

#[test]
fn a_branch_may_not_name_a_step_of_another_branch() {
    let scratch = Scratch::new(&["echo"]);
    let text = "id: x\nsteps:\n  - id: fan\n    parallel:\n      - { id: a, uses: echo, with: 1 }\n      - { id: b, uses: echo, with: \"${{ steps.a.output }}\" }\n  - { id: after, uses: echo, with: \"${{ steps.a.output }}\" }\n";
    let wf = scratch.file("wf.yaml", text);
    let check = scratch.run(&["check", wf.to_str().unwrap()]);
    assert_eq!(check.code, Some(2), "{check:?}");
    assert!(check.stderr.contains("step `b`"), "{}", check.stderr);
    assert!(check.stderr.contains("`a`"), "{}", check.stderr);

    // After the parallel, every branch's steps may be named.
    let fixed = text.replace(
        "with: \"${{ steps.a.output }}\" }\n  - { id: after",
        "with: 2 }\n  - { id: after",
    );
    let run = run_workflow(&scratch, &fixed);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json(), json!(1));
}

#[test]
fn a_step_timeout_interrupts_a_looping_guest_and_the_attempt_is_retried() {
    let scratch = Scratch::new(&["spin"]);
    let text = "id: loop\nsteps:\n  - id: forever\n    uses: spin\n    timeout: 200ms\n    retry: { max_attempts: 2, backoff: fixed, initial: 10ms }\n";
    let run = run_workflow(&scratch, text);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains("failed at step `forever`: timeout:"),
        "{}",
        run.stderr
    );
    let records = records_of(&scratch, &run.run_id());
    let codes: Vec<_> = records
        .iter()
        .map(|r| (r["attempt"].clone(), r["error"]["code"].clone()))
        .collect();
    assert_eq!(
        codes,
        [(json!(1), json!("timeout")), (json!(2), json!("timeout"))]
    );
    assert_eq!(records[0]["error"]["retryable"], true);
}

/// With a `weft serve` holding the data directory (it needs tokens once
/// one exists), the commands that change runs go through it: without a
/// token they are refused as the API refuses them, with one they act;
/// `runs resume --all`, which would take over the serve's runs, is
/// refused. With the serve gone, they work on the store again.
#[test]
fn with_a_serve_running_runs_commands_go_through_it() {
    use crate::common::server::serve;
    let scratch = Scratch::new(&["echo"]);
    let wf = scratch.file(
        "wf.yaml",
        "id: wf\nsteps:\n  - { id: a, uses: echo, with: 1 }\n",
    );
    for _ in 0..2 {
        assert_eq!(scratch.run(&["run", wf.to_str().unwrap()]).code, Some(0));
    }
    let listed = scratch.run(&["runs", "list", "--json"]).json();
    let ids: Vec<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    let made = scratch.run(&["tokens", "create", "--local", "--role", "admin"]);
    assert_eq!(made.code, Some(0), "{made:?}");
    let admin = made.stdout.trim().to_owned();
    let mut host = serve(&scratch, 0);

    let refused = scratch.run(&["runs", "delete", &ids[0]]);
    assert_ne!(refused.code, Some(0), "{refused:?}");
    assert!(
        refused.stderr.contains("through the weft serve at"),
        "{refused:?}"
    );
    assert!(refused.stderr.contains("token"), "{refused:?}");
    let deleted = scratch
        .weft()
        .args(["runs", "delete", &ids[0]])
        .env("WEFT_TOKEN", &admin)
        .output()
        .unwrap();
    assert!(deleted.status.success(), "{deleted:?}");
    let all = scratch.run(&["runs", "resume", "--all"]);
    assert_eq!(all.code, Some(2), "{all:?}");
    assert!(all.stderr.contains("stop the serve first"), "{all:?}");

    host.kill();
    let local = scratch.run(&["runs", "delete", &ids[1]]);
    assert_eq!(local.code, Some(0), "{local:?}");
    assert!(!local.stderr.contains("through"), "{local:?}");
    let left = scratch.run(&["runs", "list", "--json"]).json();
    assert_eq!(left.as_array().unwrap().len(), 0, "{left}");
}
