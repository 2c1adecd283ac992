//! `weft test`: the examples' test files pass with the real plugins; a case
//! that should fail does, with a readable difference; a recorded run turns
//! into a passing case; a replay under a changed revision names the leaves
//! that would run differently.

use crate::common::{Scratch, built, jq_plugin, root};

/// A scratch directory with the example plugins the examples call: the
/// Rust ones (rates, an HTTP handler, among them), slug (a Go step, built
/// by `weft plugin build`), and jaq (examples/jq.yaml), a program built
/// unchanged.
fn scratch() -> Scratch {
    let scratch = Scratch::new(&["template", "validate_order", "transform", "rates"]);
    std::fs::copy(jq_plugin(), scratch.plugins_dir().join("jq.wasm")).unwrap();
    std::fs::copy(
        built("plugins/slug-go"),
        scratch.plugins_dir().join("slug.wasm"),
    )
    .unwrap();
    scratch
}

#[test]
fn the_examples_pass_their_tests() {
    let scratch = scratch();
    let examples = root().join("examples");
    let run = scratch.run(&["test", examples.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    // approval.test.yaml holds a 30-day sleep; it passes in simulated time.
    assert!(
        run.stdout
            .lines()
            .any(|l| l.contains("ok") && l.contains("held for 30 days") && l.contains("32d")),
        "{}",
        run.stdout
    );
    let last = run.stdout.lines().last().unwrap();
    let passed: usize = last.split_whitespace().next().unwrap().parse().unwrap();
    assert!(passed >= 19, "{last}");
    assert!(last.ends_with(" passed, 0 failed"), "{last}");

    // Without the plugins, the cases that call one fail, and the run says
    // where the plugins were looked for and how to give them.
    let bare = Scratch::new(&[]);
    let run = bare.run(&["test", examples.to_str().unwrap()]);
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("hint: ") && run.stderr.contains("--plugins target/plugins"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_case_that_should_fail_fails_with_a_readable_difference() {
    let scratch = scratch();
    std::fs::copy(
        root().join("examples/order.yaml"),
        scratch.path().join("order.yaml"),
    )
    .unwrap();
    scratch.file(
        "order.test.yaml",
        r#"
cases:
  - name: right
    input: { order: { id: A-1, currency: EUR, items: [{ sku: s, quantity: 1, unit_price: 700 }] } }
    expect:
      outputs: { order_id: A-1, total_cents: 700, confirmation: "Dear customer, order A-1 (1 items) totals 7.00 EUR.", coupon: none }
  - name: wrong
    input: { order: { id: A-2, currency: EUR, items: [{ sku: s, quantity: 3, unit_price: 700 }] } }
    mock:
      summary: { output: { order_id: A-2, total_cents: 2100, message: hi, coupon: null } }
    expect:
      outputs: { order_id: A-2, total_cents: 2000, confirmation: hi, coupon: none }
      steps: { summary: { attempts: 2 }, validate: failed }
  - name: misnamed
    input: { order: { id: A-3, currency: EUR, items: [{ sku: s, quantity: 1, unit_price: 700 }] } }
    expect:
      steps: { sumary: succeeded }
"#,
    );
    let run = scratch.run(&["test", scratch.path().to_str().unwrap()]);
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    for line in [
        "ok    right",
        "FAIL  wrong",
        "outputs.total_cents: expected 2000, got 2100",
        "outputs.coupon: expected \"none\", got null",
        "steps.summary.attempts: expected 2, got 1",
        "steps.validate: expected failed, got succeeded",
        "FAIL  misnamed",
        "expect.steps `sumary`: workflow `order` has no step `sumary`",
        "1 passed, 2 failed",
    ] {
        assert!(run.stdout.contains(line), "no `{line}` in:\n{}", run.stdout);
    }

    // A file that does not read is named, with its line, and nothing runs.
    scratch.file(
        "order.test.yaml",
        "cases:\n  - name: a\n    expect: { sate: failed }\n",
    );
    let run = scratch.run(&["test", scratch.path().to_str().unwrap()]);
    assert_eq!(run.code, Some(2), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("order.test.yaml:3") && run.stdout.contains("unknown field `sate`"),
        "{}",
        run.stdout
    );
}

#[test]
fn a_recorded_run_becomes_a_case_and_replays_under_a_new_revision() {
    let scratch = scratch();
    let workflow = scratch.path().join("order.yaml");
    std::fs::copy(root().join("examples/order.yaml"), &workflow).unwrap();
    let input = root().join("examples/inputs/order.json");
    let ran = scratch.run(&[
        "run",
        workflow.to_str().unwrap(),
        "--input",
        &format!("@{}", input.display()),
    ]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let id = ran.run_id();

    let recorded = scratch.run(&["test", "--record", &id]);
    assert_eq!(recorded.code, Some(0), "{}", recorded.stderr);
    assert!(recorded.stdout.contains("validate:"), "{}", recorded.stdout);
    scratch.file("order.test.yaml", &recorded.stdout);
    // The plugins are mocked by the recording: none is needed to pass.
    std::fs::remove_dir_all(scratch.plugins_dir()).unwrap();
    let run = scratch.run(&[
        "test",
        scratch.path().join("order.test.yaml").to_str().unwrap(),
    ]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.ends_with("1 passed, 0 failed\n"),
        "{}",
        run.stdout
    );

    // The same revision replays the recorded run on the same path.
    let replay = scratch.run(&["test", "--replay", workflow.to_str().unwrap()]);
    assert_eq!(replay.code, Some(0), "{}\n{}", replay.stdout, replay.stderr);
    assert!(
        replay.stdout.contains("1 passed, 0 failed"),
        "{}",
        replay.stdout
    );

    // A revision that skips the confirmation takes another path: named.
    let text = std::fs::read_to_string(&workflow).unwrap().replace(
        "  - id: confirm\n",
        "  - id: confirm\n    if: \"${{ inputs.customer == 'nobody' }}\"\n",
    );
    let changed = scratch.file("order-2.yaml", &text);
    let replay = scratch.run(&["test", "--replay", changed.to_str().unwrap()]);
    assert_eq!(replay.code, Some(1), "{}\n{}", replay.stdout, replay.stderr);
    assert!(
        replay
            .stdout
            .contains("steps.confirm: expected succeeded, got skipped"),
        "{}",
        replay.stdout
    );
    assert!(
        replay.stdout.contains("0 passed, 1 failed"),
        "{}",
        replay.stdout
    );
}
