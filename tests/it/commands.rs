//! Command steps: plain WASI programs (tests/guests/command, a Rust program
//! with no weft SDK) described by `weft plugin add --name --version`, their
//! input on stdin and their output on stdout, and how each way a program
//! can misbehave ends.

use std::time::{Duration, Instant};

use crate::common::{Scratch, guest_bytes};
use serde_json::{Value, json};
use weft::runtime::{
    CallError, CallOptions, CommandLine, Description, LoadError, LogSource, Plugin, StepContext,
    describe_command,
};
use weft::{Runtime, RuntimeConfig};

fn context() -> StepContext {
    StepContext {
        tenant: "t".to_owned(),
        workflow: "wf".to_owned(),
        run_id: "run-1".to_owned(),
        step_id: "cmd".to_owned(),
        attempt: 1,
        idempotency_key: "run-1:cmd".to_owned(),
    }
}

fn described(name: &str) -> Description {
    Description {
        name: name.to_owned(),
        version: "1.2.3".to_owned(),
        description: "a plain WASI program".to_owned(),
        input_schema: None,
        output_schema: None,
    }
}

fn command(runtime: &Runtime) -> Plugin {
    let bytes = describe_command(&guest_bytes("command"), &described("cmd")).unwrap();
    runtime.load(&bytes).unwrap()
}

fn call(plugin: &Plugin, input: Value, options: &CallOptions) -> Result<Value, CallError> {
    plugin.call(&context(), &input.to_string(), options).result
}

#[test]
fn a_command_gets_its_input_arguments_and_environment_and_nothing_else() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let plugin = command(&runtime);
    assert!(plugin.is_command());
    assert_eq!(plugin.contract(), None);
    assert_eq!(plugin.meta().name, "cmd");
    assert_eq!(plugin.meta().version.to_string(), "1.2.3");
    let options = CallOptions {
        command: CommandLine {
            args: vec!["-c".to_owned(), "a b".to_owned()],
            env: vec![("MODE".to_owned(), "fast".to_owned())],
        },
        ..CallOptions::default()
    };
    let outcome = plugin.call(&context(), r#"{"do": "echo", "n": 7}"#, &options);
    assert_eq!(
        outcome.result.unwrap(),
        json!({
            "input": {"do": "echo", "n": 7},
            // The program's name is the plugin's.
            "args": ["cmd", "-c", "a b"],
            "env": [["MODE", "fast"]],
            "files": false,
            "stdin_left": 0,
        })
    );
    // stderr is the step's log; stdout, its output, is not.
    let lines: Vec<_> = outcome
        .logs
        .iter()
        .map(|l| (l.source, l.message.as_str()))
        .collect();
    assert_eq!(lines, [(LogSource::Stderr, "echoing")]);
    // With no `args` or `env`, none.
    let bare = call(&plugin, json!({"do": "echo"}), &CallOptions::default()).unwrap();
    assert_eq!(bare["args"], json!(["cmd"]));
    assert_eq!(bare["env"], json!([]));
}

#[test]
fn exit_75_is_retryable_and_other_statuses_are_fatal_with_the_last_stderr_lines() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let plugin = command(&runtime);
    let lines = json!(["starting", "the upstream is busy", "try later"]);
    for (status, retryable) in [(75, true), (3, false), (1, false)] {
        let input = json!({"do": "exit", "status": status, "lines": lines});
        match call(&plugin, input, &CallOptions::default()) {
            Err(e @ CallError::Step { .. }) => {
                assert_eq!(e.is_retryable(), retryable, "exit {status}: {e}");
                assert_eq!(e.code(), format!("exit_{status}"));
                let CallError::Step {
                    message, details, ..
                } = e
                else {
                    unreachable!()
                };
                assert_eq!(message, "starting the upstream is busy try later");
                assert_eq!(details, Some(json!({ "exit_status": status })));
            }
            other => panic!("exit {status}: expected a step error, got {other:?}"),
        }
    }
    // A typed error on stdout is the step's error, retryable as it says,
    // whatever the status (which a preview-1 program cannot carry).
    let typed = json!({"do": "typed", "error": {
        "code": "upstream_busy", "message": "the upstream is busy",
        "retryable": true, "details": {"wait": 5}}});
    match call(&plugin, typed, &CallOptions::default()) {
        Err(e @ CallError::Step { .. }) => {
            assert!(e.is_retryable());
            assert_eq!(e.code(), "upstream_busy");
            let CallError::Step { details, .. } = e else {
                unreachable!()
            };
            assert_eq!(details, Some(json!({"wait": 5})));
        }
        other => panic!("expected a typed error, got {other:?}"),
    }
    // A silent failure says so.
    match call(
        &plugin,
        json!({"do": "exit", "status": 9}),
        &CallOptions::default(),
    ) {
        Err(CallError::Step { message, .. }) => {
            assert!(message.contains("exited with status 9"), "{message}")
        }
        other => panic!("expected a step error, got {other:?}"),
    }
    match call(&plugin, json!({"do": "panic"}), &CallOptions::default()) {
        Err(CallError::Trap { message }) | Err(CallError::Step { message, .. }) => {
            assert!(message.contains("panics on purpose"), "{message}")
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn output_that_is_missing_not_json_or_too_large_fails_the_call() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let plugin = command(&runtime);
    match call(&plugin, json!({"do": "nothing"}), &CallOptions::default()) {
        Err(e @ CallError::Step { .. }) => {
            assert_eq!(e.code(), "no_output");
            assert!(!e.is_retryable());
        }
        other => panic!("expected no_output, got {other:?}"),
    }
    for what in ["text", "two"] {
        match call(&plugin, json!({"do": what}), &CallOptions::default()) {
            Err(e @ CallError::InvalidOutput { .. }) => assert!(!e.is_retryable()),
            other => panic!("{what}: expected invalid_output, got {other:?}"),
        }
    }
    // 100 MiB to stdout: past the host's budget for the call (the memory
    // limit, 64 MiB by default), the write traps and the call fails,
    // naming the budget; the host held no more than that.
    let started = Instant::now();
    match call(
        &plugin,
        json!({"do": "flood", "mib": 100}),
        &CallOptions::default(),
    ) {
        Err(CallError::ResourceLimit { message }) => {
            assert!(message.contains("stdout"), "{message}");
            assert!(message.contains("budget"), "{message}");
        }
        other => panic!("expected resource_limit, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    // The same plugin still answers.
    assert!(call(&plugin, json!({"do": "echo"}), &CallOptions::default()).is_ok());
}

#[test]
fn a_command_that_sleeps_past_its_deadline_is_stopped() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let plugin = command(&runtime);
    let started = Instant::now();
    let options = CallOptions {
        timeout: Some(Duration::from_millis(300)),
        ..CallOptions::default()
    };
    match call(&plugin, json!({"do": "sleep", "seconds": 3600}), &options) {
        Err(CallError::Timeout { limit }) => assert_eq!(limit, Duration::from_millis(300)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn commands_without_a_description_and_bad_descriptions_are_refused() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    assert_eq!(
        runtime.load(&guest_bytes("command")).unwrap_err(),
        LoadError::Undescribed
    );
    let mut bad = described("two words");
    assert!(describe_command(&guest_bytes("command"), &bad).is_err());
    bad.name = "ok".to_owned();
    bad.input_schema = Some(json!({"type": 5}));
    // A recorded description's JSON Schema must be usable.
    let bytes = describe_command(&guest_bytes("command"), &bad).unwrap();
    assert!(matches!(runtime.load(&bytes), Err(LoadError::Describe(_))));
    // A weft step describes itself: a name recorded in it is refused, not
    // silently ignored.
    let echo = describe_command(&guest_bytes("echo"), &described("other")).unwrap();
    assert!(matches!(
        runtime.load(&echo),
        Err(LoadError::Description(_))
    ));
}

/// A command step in a workflow, end to end through the CLI: `weft plugin
/// add --name --version --out`, then `weft run`, with `args` and `env`
/// from expressions; a retryable exit is retried; `args` on a step that is
/// not a command is refused at start, naming why.
#[test]
fn a_workflow_runs_a_command_with_args_and_env_and_retries_exit_75() {
    let scratch = Scratch::new(&["echo"]);
    let shown = scratch.add_described("command", "shell");
    assert!(shown.contains("contract:    command"), "{shown}");

    let workflow = scratch.file(
        "cmd.yaml",
        r#"
id: cmd
inputs: { type: object }
steps:
  - id: run
    uses: shell
    args: ["--mode", "${{ inputs.mode }}", "${{ inputs.n }}"]
    env: { GREETING: "hi ${{ inputs.mode }}" }
    with: { do: echo, from: "${{ inputs.mode }}" }
  - id: flaky
    uses: shell
    retry: { max_attempts: 2, initial: 10ms }
    with: { do: exit, status: 75, lines: [busy] }
    continue_on_error: true
outputs:
  args: "${{ steps.run.output.args }}"
  env: "${{ steps.run.output.env }}"
  from: "${{ steps.run.output.input.from }}"
  error: "${{ steps.flaky.error }}"
"#,
    );
    let run = scratch
        .weft()
        .arg("run")
        .arg(&workflow)
        .args(["--input", r#"{"mode": "fast", "n": 3}"#])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let outputs: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(outputs["args"], json!(["shell", "--mode", "fast", "3"]));
    assert_eq!(outputs["env"], json!([["GREETING", "hi fast"]]));
    assert_eq!(outputs["from"], "fast");
    assert_eq!(outputs["error"]["code"], "exit_75");
    assert_eq!(outputs["error"]["retryable"], true);
    assert_eq!(outputs["error"]["message"], "busy");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("attempt 2") || stderr.contains("retry"),
        "{stderr}"
    );

    let wrong = scratch.file(
        "wrong.yaml",
        "id: wrong\nsteps:\n  - id: e\n    uses: echo\n    args: [x]\n    with: {}\n",
    );
    let refused = scratch.weft().arg("run").arg(&wrong).output().unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("`args` and `env` are for a command"),
        "{stderr}"
    );
}
