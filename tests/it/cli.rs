//! `weft run`, `weft check` and `weft runs` as a user drives them: the real
//! binary, real components built from source, a real redb file.

use crate::common::{Scratch, root};
use serde_json::json;

const EXAMPLE_PLUGINS: [&str; 4] = ["echo", "template", "transform", "validate_order"];

fn example(name: &str) -> String {
    root().join("examples").join(name).display().to_string()
}

#[test]
fn the_example_order_workflow_runs_end_to_end() {
    let scratch = Scratch::new(&EXAMPLE_PLUGINS);
    let input = format!("@{}", root().join("examples/inputs/order.json").display());
    let run = scratch.run(&["run", &example("order.yaml"), "--input", &input]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.json(),
        json!({
            "order_id": "A-1001",
            "total_cents": 3399,
            "confirmation": "Dear Ada, order A-1001 (3 items) totals 33.99 EUR.",
            "coupon": "none",
        })
    );
    for (i, step) in ["validate", "confirm", "summary"].iter().enumerate() {
        let line = format!("ok   [{}/3] {step} (", i + 1);
        assert!(
            run.stderr.contains(&line),
            "no `{line}` in:\n{}",
            run.stderr
        );
    }

    // The run and each step's result are in the store.
    let id = run.run_id();
    let shown = scratch.run(&["runs", "show", &id, "--json"]);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    let shown = shown.json();
    assert_eq!(shown["run"]["state"], "succeeded");
    assert_eq!(shown["run"]["next_step"], 3);
    assert_eq!(shown["run"]["outputs"]["total_cents"], 3399);
    let steps = shown["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[0]["step_id"], "validate");
    assert_eq!(steps[0]["output"]["total"], 3399);
    assert_eq!(
        steps[0]["logs"][0]["message"],
        format!("run {id}: order A-1001 is valid, total 3399 EUR")
    );
    assert!(
        shown["run"]["plugins"]["validate"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );

    let listed = scratch.run(&["runs", "list"]);
    assert!(
        listed.stdout.contains(&id) && listed.stdout.contains("succeeded"),
        "{listed:?}"
    );
    let text = scratch.run(&["runs", "show", &id]);
    assert!(
        text.stdout.contains("state     succeeded"),
        "{}",
        text.stdout
    );
    // The start of an id that no other run's has names the run, as git
    // takes a commit's; one that several share is refused with them.
    let short = scratch.run(&["runs", "show", &id[..23]]);
    assert_eq!(short.code, Some(0), "{short:?}");
    assert!(
        short.stdout.contains(&format!("run       {id}")),
        "{}",
        short.stdout
    );
    let again = scratch.run(&["run", &example("order.yaml"), "--input", &input]);
    assert_eq!(again.code, Some(0), "{again:?}");
    let both = scratch.run(&["runs", "show", &id[..4]]);
    assert_eq!(both.code, Some(2), "{both:?}");
    assert!(
        both.stderr.contains("starts more than one run's id") && both.stderr.contains(&id),
        "{}",
        both.stderr
    );
}

#[test]
fn a_second_run_loads_plugins_from_the_compiled_code_cache() {
    let scratch = Scratch::new(&["echo"]);
    let wf = scratch.file(
        "wf.yaml",
        "id: once\nsteps:\n  - { id: a, uses: echo, with: { n: 1 } }\n",
    );
    let wf = wf.to_str().unwrap();
    let first = scratch
        .weft()
        .args(["run", wf])
        .env("WEFT_LOG", "weft=debug")
        .output()
        .unwrap();
    let first = crate::common::Run::from(first);
    assert_eq!(first.code, Some(0), "{first:?}");
    assert!(first.stderr.contains("source=Compiled"), "{}", first.stderr);
    let second = crate::common::Run::from(
        scratch
            .weft()
            .args(["run", wf])
            .env("WEFT_LOG", "weft=debug")
            .output()
            .unwrap(),
    );
    assert_eq!(second.code, Some(0), "{second:?}");
    assert!(second.stderr.contains("source=Cache"), "{}", second.stderr);
    assert_eq!(second.json(), json!({ "n": 1 }));
}

#[test]
fn a_failing_step_fails_the_run_with_its_typed_error() {
    let scratch = Scratch::new(&EXAMPLE_PLUGINS);
    let input = r#"{"order": {"id": "B-2", "currency": "XYZ", "items": [{"sku": "a", "quantity": 0, "unit_price": 5}]}}"#;
    let run = scratch.run(&["run", &example("order.yaml"), "--input", input]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(
        run.stderr
            .contains("failed at step `validate`: invalid_order: order `B-2` has 2 problem(s)"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(r#"details: {"problems":"#),
        "{}",
        run.stderr
    );

    let shown = scratch
        .run(&["runs", "show", &run.run_id(), "--json"])
        .json();
    assert_eq!(shown["run"]["state"], "failed");
    assert_eq!(shown["run"]["error"]["step"], "validate");
    assert_eq!(shown["run"]["error"]["error"]["code"], "invalid_order");
    assert_eq!(shown["run"]["error"]["error"]["retryable"], false);
    assert_eq!(
        shown["steps"].as_array().unwrap().len(),
        1,
        "no step runs after the failure"
    );
}

#[test]
fn malformed_workflows_are_refused_with_file_line_and_step() {
    let scratch = Scratch::new(&["echo", "template"]);
    let cases = [
        (
            "syntax.yaml",
            "id: x\nsteps:\n  - id: a\n    uses: \"echo\n",
            "syntax.yaml:5:1: found unexpected end of stream, while scanning a quoted scalar at line 4 column 11",
        ),
        (
            "unknown.yaml",
            "id: x\nsteps:\n  - id: a\n    uses: echo\n    retries: 3\n",
            "unknown.yaml:5:5: steps[0]: unknown field `retries`",
        ),
        (
            "noid.yaml",
            "steps:\n  - id: a\n    uses: echo\n",
            "missing field `id`",
        ),
        (
            "dup.yaml",
            "id: x\nsteps:\n  - id: a\n    uses: echo\n  - id: a\n    uses: echo\n",
            "dup.yaml:5: step `a`: steps[1].id: the id `a` is used by an earlier step",
        ),
        (
            "expr.yaml",
            "id: x\nsteps:\n  - id: a\n    uses: echo\n    with: { v: '${{ inputs.n + }}' }\n",
            "expr.yaml:3: step `a`: with.v: `inputs.n +` is not a valid CEL expression",
        ),
        (
            "cond.yaml",
            "id: x\nsteps:\n  - id: a\n    uses: echo\n    if: \"n is ${{ inputs.n }}\"\n",
            "`if` is text around an expression, so a string, never true or false",
        ),
    ];
    for (name, text, expected) in cases {
        let path = scratch.file(name, text);
        for command in ["run", "check"] {
            let run = scratch.run(&[command, path.to_str().unwrap()]);
            assert_eq!(run.code, Some(2), "{name} {command}: {run:?}");
            assert!(
                run.stderr.contains(expected),
                "{name} {command}: expected `{expected}` in:\n{}",
                run.stderr
            );
            assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
        }
    }
    let ok = scratch.file("ok.yaml", "id: x\nsteps:\n  - id: a\n    uses: echo\n");
    let checked = scratch.run(&["check", ok.to_str().unwrap()]);
    assert_eq!(checked.code, Some(0), "{checked:?}");
    // With --plugins, each step's plugin is checked too: found, of a
    // version that satisfies `uses:`, and fitting the step's grants and
    // `args`; every problem is named with its line.
    let plugins = scratch.plugins_dir();
    let plugins = plugins.to_str().unwrap();
    let checked = scratch.run(&["check", ok.to_str().unwrap(), "--plugins", plugins]);
    assert_eq!(checked.code, Some(0), "{checked:?}");
    assert!(checked.stdout.contains("plugins: a (echo@"), "{checked:?}");
    let wrong = scratch.file(
        "wrong.yaml",
        "id: x\nsteps:\n  - id: a\n    uses: nosuch\n  - id: b\n    uses: echo@9\n  - id: c\n    uses: echo\n    args: [x]\n  - id: d\n    uses: template\n    with: { template: 5 }\n",
    );
    // Without --plugins, the file alone is valid.
    assert_eq!(
        scratch.run(&["check", wrong.to_str().unwrap()]).code,
        Some(0)
    );
    let checked = scratch.run(&["check", wrong.to_str().unwrap(), "--plugins", plugins]);
    assert_eq!(checked.code, Some(2), "{checked:?}");
    for expected in [
        "wrong.yaml:3: step `a`: ",
        "wrong.yaml:5: step `b`: ",
        "wrong.yaml:7: step `c`: `args` and `env` are for a command",
        "wrong.yaml:10: step `d`: `with` does not fit the input schema of plugin `template`",
    ] {
        assert!(checked.stderr.contains(expected), "{expected}: {checked:?}");
    }
    let nowhere = scratch.run(&["check", ok.to_str().unwrap(), "--plugins", "/nonexistent"]);
    assert_eq!(nowhere.code, Some(2), "{nowhere:?}");
    let missing = scratch.run(&["run", "/nonexistent/wf.yaml"]);
    assert_eq!(missing.code, Some(2));
    assert!(
        missing
            .stderr
            .contains("cannot read workflow file /nonexistent/wf.yaml"),
        "{}",
        missing.stderr
    );
}

#[test]
fn unknown_plugins_bad_input_and_bad_json_stop_before_a_run_is_stored() {
    let scratch = Scratch::new(&["echo", "template"]);
    let unknown = scratch.file(
        "unknown.yaml",
        "id: x\nsteps:\n  - id: a\n    uses: echo\n  - id: b\n    uses: nope@2\n",
    );
    let run = scratch.run(&["run", unknown.to_str().unwrap()]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr
            .contains("unknown.yaml:5: step `b`: plugin `nope` not found: no nope.wasm in the plugins directory (available")
            && run.stderr.contains("(available: echo, template)"),
        "{}",
        run.stderr
    );

    let version = scratch.file(
        "version.yaml",
        "id: x\nsteps:\n  - id: a\n    uses: echo@2\n",
    );
    let run = scratch.run(&["run", version.to_str().unwrap()]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr
            .contains("is `echo` version 1.0.0, which does not satisfy `echo@^2`"),
        "{}",
        run.stderr
    );

    let hello = root().join("examples").join("hello.yaml");
    let hello = hello.to_str().unwrap();
    let run = scratch.run(&["run", hello, "--input", r#"{"nom": "Ada"}"#]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr
            .contains("does not match the workflow's `inputs` schema")
            && run.stderr.contains("\"name\""),
        "{}",
        run.stderr
    );

    let run = scratch.run(&["run", hello, "--input", "{not json"]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr
            .contains("--input: the text given is not valid JSON"),
        "{}",
        run.stderr
    );

    let listed = scratch.run(&["runs", "list", "--json"]);
    assert_eq!(listed.json(), json!([]), "nothing was stored: {listed:?}");

    let run = scratch.run(&["run", hello, "--input", r#"{"name": "Ada"}"#]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json(), json!({ "greeting": "Hello, Ada!" }));
}

#[test]
fn files_that_are_not_plugins_are_refused_by_name() {
    let scratch = Scratch::new(&["future_contract"]);
    std::fs::write(scratch.plugins_dir().join("text.wasm"), b"this is not wasm").unwrap();
    // The smallest core module: magic and version 1.
    std::fs::write(scratch.plugins_dir().join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let cases = [
        ("text", "not a WebAssembly file"),
        ("core", "a core WebAssembly module, not a component"),
        (
            "future-contract",
            "was built for contract `weft:plugin@9.0.0`, but this host speaks `weft:plugin@0.3.0`",
        ),
    ];
    for (name, expected) in cases {
        let wf = scratch.file(
            "wf.yaml",
            &format!("id: x\nsteps:\n  - id: s\n    uses: {name}\n"),
        );
        let run = scratch.run(&["run", wf.to_str().unwrap()]);
        assert_eq!(run.code, Some(2), "{name}: {run:?}");
        assert!(
            run.stderr.contains(expected),
            "{name}: expected `{expected}` in:\n{}",
            run.stderr
        );
    }
}

#[test]
fn misbehaving_guests_fail_their_step_and_the_record_says_why() {
    let scratch = Scratch::new(&["echo", "trap", "spin", "hog", "bad_json"]);
    let cases = [
        (
            "trap",
            "trap",
            "the step trapped: wasm trap: wasm `unreachable` instruction executed; the guest wrote: thread '<unnamed>' (1) panicked at tests/guests/trap/src/lib.rs",
        ),
        (
            "spin",
            "timeout",
            "the step ran longer than its timeout of 1s and was stopped",
        ),
        ("hog", "memory_limit", "over its limit of 67108864 bytes"),
        (
            "bad-json",
            "invalid_output",
            "the step returned output that is not JSON",
        ),
    ];
    for (plugin, code, message) in cases {
        let wf = scratch.file(
            "wf.yaml",
            &format!("id: bad\nsteps:\n  - {{ id: before, uses: echo, with: 1 }}\n  - {{ id: s, uses: {plugin}, timeout: 1s }}\n  - {{ id: after, uses: echo }}\n"),
        );
        let run = scratch.run(&["run", wf.to_str().unwrap()]);
        assert_eq!(run.code, Some(1), "{plugin}: {run:?}");
        assert!(
            run.stderr
                .contains(&format!("failed at step `s`: {code}: ")),
            "{plugin}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains(message),
            "{plugin}: expected `{message}` in {}",
            run.stderr
        );
        assert!(!run.stderr.contains("weft' panicked"), "{}", run.stderr);

        let shown = scratch
            .run(&["runs", "show", &run.run_id(), "--json"])
            .json();
        assert_eq!(shown["run"]["state"], "failed", "{plugin}");
        assert_eq!(shown["run"]["error"]["error"]["code"], code, "{plugin}");
        let steps = shown["steps"].as_array().unwrap();
        assert_eq!(
            steps.len(),
            2,
            "{plugin}: the step before is kept, the one after never ran"
        );
        assert_eq!(steps[0]["output"], 1);
        assert_eq!(steps[1]["error"]["code"], code);
    }
    // The trap's panic message is also in the step's log.
    let runs = scratch.run(&["runs", "list", "--json"]).json();
    assert_eq!(runs.as_array().unwrap().len(), 4);
}

#[test]
fn step_limits_can_be_raised_per_step() {
    let scratch = Scratch::new(&["hog"]);
    let wf = scratch.file(
        "wf.yaml",
        "id: big\nsteps:\n  - { id: s, uses: hog, with: { mib: 80 }, memory_limit: 128MiB }\n",
    );
    let run = scratch.run(&["run", wf.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json()["allocated_mib"], 80);
}

#[test]
fn the_readme_and_docs_workflow_examples_are_valid() {
    let scratch = Scratch::new(&[]);
    let mut pages = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (i, block) in text.split("```yaml\n").skip(1).enumerate() {
            let text = block.split("```").next().unwrap();
            let path = scratch.file(&format!("block-{checked}-{i}.yaml"), text);
            let run = scratch.run(&["check", path.to_str().unwrap()]);
            assert_eq!(
                run.code,
                Some(0),
                "{} yaml block {i}:\n{text}\n{run:?}",
                page.display()
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 3,
        "only {checked} yaml examples in the README and docs/"
    );
    for name in ["order.yaml", "hello.yaml", "http.yaml", "polyglot.yaml"] {
        let run = scratch.run(&["check", &example(name)]);
        assert_eq!(run.code, Some(0), "{name}: {run:?}");
    }
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let scratch = Scratch::new(&["echo"]);
    let wf = scratch.file(
        "wf.yaml",
        "id: x\nsteps:\n  - { id: a, uses: echo, with: 1 }\n",
    );
    for _ in 0..3 {
        assert_eq!(scratch.run(&["run", wf.to_str().unwrap()]).code, Some(0));
    }
    let mut child = scratch
        .weft()
        .args(["runs", "list"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn oversized_and_unreadable_inputs_are_refused() {
    let scratch = Scratch::new(&["echo"]);
    let wf = scratch.file("wf.yaml", "id: x\nsteps:\n  - { id: a, uses: echo }\n");
    let run = scratch.run(&["run", wf.to_str().unwrap(), "--input", "@/nonexistent.json"]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr
            .contains("--input: cannot read the file /nonexistent.json"),
        "{}",
        run.stderr
    );
    let dir = scratch.path().to_str().unwrap().to_owned();
    let run = scratch.run(&["run", &dir]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr.contains("cannot read workflow file"),
        "{}",
        run.stderr
    );
    let deep = format!("{}1{}", "[".repeat(1000), "]".repeat(1000));
    let run = scratch.run(&["run", wf.to_str().unwrap(), "--input", &deep]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr.contains("recursion limit exceeded"),
        "{}",
        run.stderr
    );
}

#[test]
fn step_input_is_checked_against_the_plugins_schema_before_the_call() {
    let scratch = Scratch::new(&["template"]);
    let wf = scratch.file(
        "wf.yaml",
        "id: x\nsteps:\n  - { id: render, uses: template, with: { vars: { a: 1 }, extra: true } }\n",
    );
    let run = scratch.run(&["run", wf.to_str().unwrap()]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains("failed at step `render`: invalid_input: the input does not match the input schema of plugin `template`"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("\"template\" is a required property"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("extra"), "{}", run.stderr);
}

#[test]
fn runs_can_be_listed_by_workflow_and_state() {
    let scratch = Scratch::new(&["echo", "trap"]);
    let ok = scratch.file("ok.yaml", "id: fine\nsteps:\n  - { id: a, uses: echo }\n");
    let bad = scratch.file(
        "bad.yaml",
        "id: broken\nsteps:\n  - { id: a, uses: trap }\n",
    );
    for wf in [&ok, &ok, &bad] {
        scratch.run(&["run", wf.to_str().unwrap()]);
    }
    let count = |args: &[&str]| {
        let mut all = vec!["runs", "list", "--json"];
        all.extend_from_slice(args);
        scratch.run(&all).json().as_array().unwrap().len()
    };
    assert_eq!(count(&[]), 3);
    assert_eq!(count(&["--workflow", "fine"]), 2);
    assert_eq!(count(&["--state", "failed"]), 1);
    assert_eq!(count(&["--state", "failed", "--workflow", "fine"]), 0);
    assert_eq!(count(&["--limit", "1"]), 1);
    let run = scratch.run(&["runs", "list", "--state", "sleeping"]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr.contains("`sleeping` is not a run state"),
        "{}",
        run.stderr
    );
}

/// A wait shows as a wait: a sleep says until when, an `await` without a
/// timeout is refused by `weft run` (only a serving host takes answers),
/// with what to run instead.
#[test]
fn waits_show_as_waits_and_weft_run_refuses_an_await_it_cannot_answer() {
    let scratch = Scratch::new(&["echo"]);
    let napping = scratch.file(
        "nap.yaml",
        "id: nap\nsteps:\n  - { id: nap, sleep: 10ms }\n  - { id: after, uses: echo, with: 1 }\n",
    );
    let run = scratch.run(&["run", napping.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stderr.contains("wait [1/2] nap (): asleep until"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("ok   [2/2] after (echo)"),
        "{}",
        run.stderr
    );

    let waiting = scratch.file(
        "ask.yaml",
        "id: ask\nsteps:\n  - { id: approve, await: {} }\n",
    );
    let run = scratch.run(&["run", waiting.to_str().unwrap()]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr
            .contains("step `approve` is an `await` without a timeout")
            && run
                .stderr
                .contains("weft act RUN approve complete --output JSON"),
        "{}",
        run.stderr
    );
    // A workflow's timeout ends it too: not refused.
    let bounded = scratch.file(
        "bounded.yaml",
        "id: bounded\ntimeout: 50ms\nsteps:\n  - { id: approve, await: {} }\n",
    );
    let run = scratch.run(&["run", bounded.to_str().unwrap()]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains("wait [1/1] approve (): for an answer"),
        "{}",
        run.stderr
    );
    // With a timeout it runs, and ends by it.
    let hurried = scratch.file(
        "hurry.yaml",
        "id: hurry\nsteps:\n  - { id: approve, await: { timeout: 10ms } }\n",
    );
    let run = scratch.run(&["run", hurried.to_str().unwrap()]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains("wait [1/1] approve ()"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("await_timeout"), "{}", run.stderr);
}
