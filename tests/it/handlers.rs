//! HTTP handler steps: a component that exports
//! `wasi:http/incoming-handler` (tests/guests/handler, with no weft SDK),
//! described by `weft plugin add --name --version`. Its input is the
//! request, its response the output; each way a handler can misbehave
//! ends as the docs say.

use std::time::{Duration, Instant};

use crate::common::{Scratch, guest_bytes};
use serde_json::{Value, json};
use weft::runtime::{
    CallError, CallOptions, Description, LoadError, Plugin, StepContext, describe_command,
};
use weft::{Runtime, RuntimeConfig};

fn context() -> StepContext {
    StepContext {
        tenant: "t".to_owned(),
        workflow: "wf".to_owned(),
        run_id: "run-1".to_owned(),
        step_id: "api".to_owned(),
        attempt: 1,
        idempotency_key: "run-1:api".to_owned(),
    }
}

fn handler(runtime: &Runtime) -> Plugin {
    let description = Description {
        name: "api".to_owned(),
        version: "0.3.0".to_owned(),
        description: "an HTTP handler".to_owned(),
        input_schema: None,
        output_schema: None,
    };
    let bytes = describe_command(&guest_bytes("handler"), &description).unwrap();
    runtime.load(&bytes).unwrap()
}

fn call(plugin: &Plugin, input: Value, options: &CallOptions) -> Result<Value, CallError> {
    plugin.call(&context(), &input.to_string(), options).result
}

#[test]
fn a_handler_is_given_the_request_and_its_response_is_the_output() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    assert_eq!(
        runtime.load(&guest_bytes("handler")).unwrap_err(),
        LoadError::Undescribed
    );
    let plugin = handler(&runtime);
    assert!(plugin.is_handler() && !plugin.is_command());
    assert_eq!((plugin.kind(), plugin.contract()), ("handler", None));

    let input = json!({
        "path": "/echo?q=1",
        "headers": {"x-trace": "abc", "weft-run": "forged"},
        "body": {"order": 7},
    });
    let output = call(&plugin, input, &CallOptions::default()).unwrap();
    assert_eq!(output["status"], 200);
    assert_eq!(output["headers"]["content-type"], "application/json");
    let echoed = &output["body"];
    assert_eq!(echoed["method"], "POST");
    assert_eq!(echoed["path"], "/echo?q=1");
    assert_eq!(echoed["body"], r#"{"order":7}"#);
    assert_eq!(echoed["headers"]["content-type"], "application/json");
    assert_eq!(echoed["headers"]["x-trace"], "abc");
    // The step's context, not what the input claimed.
    assert_eq!(echoed["headers"]["weft-run"], "run-1");
    assert_eq!(echoed["headers"]["weft-step"], "api");
    assert_eq!(echoed["headers"]["weft-attempt"], "1");

    // No input: `GET /`, which this handler does not know.
    match call(&plugin, Value::Null, &CallOptions::default()) {
        Err(e @ CallError::Step { .. }) => {
            assert_eq!(e.code(), "http_404");
            assert!(!e.is_retryable());
            assert!(e.to_string().contains("no such route"), "{e}");
        }
        other => panic!("expected http_404, got {other:?}"),
    }
    // A text body is text.
    let text = call(
        &plugin,
        json!({"path": "/status/201"}),
        &CallOptions::default(),
    )
    .unwrap();
    assert_eq!(text["body"], "status 201, as asked");
}

#[test]
fn a_5xx_is_retryable_and_a_misbehaving_handler_fails_as_documented() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let plugin = handler(&runtime);
    let fails = |input: Value| match call(&plugin, input.clone(), &CallOptions::default()) {
        Err(e) => e,
        Ok(output) => panic!("{input}: expected a failure, got {output}"),
    };
    for (status, retryable) in [(503, true), (500, true), (429, true), (400, false)] {
        let e = fails(json!({"path": format!("/status/{status}")}));
        assert_eq!(e.code(), format!("http_{status}"), "{e}");
        assert_eq!(e.is_retryable(), retryable, "{status}");
        assert!(e.to_string().contains("as asked"), "{e}");
    }
    let e = fails(json!({"path": "/error"}));
    assert_eq!(e.code(), "handler_error");
    assert!(
        e.is_retryable() && e.to_string().contains("on purpose"),
        "{e}"
    );
    // A body cut short (it said 100 bytes and wrote 5) is not an output.
    let e = fails(json!({"path": "/short"}));
    assert_eq!(e.code(), "handler_error", "{e}");
    assert!(
        e.is_retryable() && e.to_string().contains("ended badly"),
        "{e}"
    );
    let e = fails(json!({"path": "/none"}));
    assert_eq!(e.code(), "no_response");
    assert!(!e.is_retryable());
    match fails(json!({"path": "/panic"})) {
        CallError::Trap { message } => assert!(message.contains("on purpose"), "{message}"),
        other => panic!("expected a trap, got {other:?}"),
    }
    let e = fails(json!({"url": "/echo"}));
    assert_eq!(e.code(), "invalid_request");
    assert!(e.to_string().contains("unknown field `url`"), "{e}");

    // 100 MiB of body: past the host's budget for the call (the memory
    // limit, 64 MiB by default), reading stops, the guest's write fails,
    // and the call fails naming the budget.
    let started = Instant::now();
    match fails(json!({"path": "/big/100"})) {
        CallError::ResourceLimit { message } => {
            assert!(message.contains("response's body"), "{message}");
            assert!(message.contains("budget"), "{message}");
        }
        other => panic!("expected resource_limit, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    // 2 MiB is fine.
    let big = call(&plugin, json!({"path": "/big/2"}), &CallOptions::default()).unwrap();
    assert_eq!(big["body"].as_str().map(str::len), Some(2 << 20));

    let options = CallOptions {
        timeout: Some(Duration::from_millis(300)),
        ..CallOptions::default()
    };
    let started = Instant::now();
    match call(&plugin, json!({"path": "/sleep"}), &options) {
        Err(CallError::Timeout { limit }) => assert_eq!(limit, Duration::from_millis(300)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// A handler step in a workflow, end to end through the CLI: added with
/// `weft plugin add`, inspected, then run: a 503 is retried until the
/// handler answers, and the response's body feeds the next step.
#[test]
fn a_workflow_runs_a_handler_and_retries_its_503s() {
    let scratch = Scratch::new(&["echo"]);
    let shown = scratch.add_described("handler", "api");
    assert!(shown.contains("contract:    handler"), "{shown}");

    let workflow = scratch.file(
        "calls.yaml",
        r#"
id: calls
steps:
  - id: flaky
    uses: api
    retry: { max_attempts: 3, initial: 10ms }
    with: { path: /flaky }
  - id: echo
    uses: api
    with:
      method: PUT
      path: /echo
      headers: { x-attempt: "${{ steps.flaky.output.body.attempt }}" }
      body: "after ${{ steps.flaky.output.status }}"
outputs:
  attempt: "${{ steps.flaky.output.body.attempt }}"
  echoed: "${{ steps.echo.output.body }}"
"#,
    );
    let run = scratch.weft().arg("run").arg(&workflow).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let outputs: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(outputs["attempt"], 3);
    assert_eq!(outputs["echoed"]["method"], "PUT");
    assert_eq!(outputs["echoed"]["body"], "after 200");
    assert_eq!(outputs["echoed"]["headers"]["x-attempt"], "3");
    assert_eq!(outputs["echoed"]["headers"]["weft-step"], "echo");
}
