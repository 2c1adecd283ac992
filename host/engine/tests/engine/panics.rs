//! A panic in the host's part of a step call (a bug, never the guest's
//! doing) once killed the worker thread that ran it: the pool shrank by
//! one for good, the run stayed in memory holding its place, and a restart
//! resumed it into the same panic. Now the attempt fails `internal`
//! (retryable, under the step's policy), the panic is counted, and the
//! worker goes on.

use std::sync::Arc;

use serde_json::{Value, json};

use weft_engine::StepOutcome;
use weft_store::RunState;

use crate::common::{Host, assert_succeeded, eventually, finish};
use crate::fake::Behaviour;

#[allow(clippy::panic)]
fn panics_on_first_attempt() -> Behaviour {
    Arc::new(|call, input: Value| {
        if call.context.attempt == 1 {
            panic!("a host bug on purpose");
        }
        StepOutcome::of(Ok(input))
    })
}

#[allow(clippy::panic)]
fn always_panics() -> Behaviour {
    Arc::new(|_, _| panic!("a host bug on purpose, every time"))
}

#[test]
fn a_panicking_attempt_fails_internal_and_its_retry_goes_on() {
    let before = weft_core::panics::count("worker");
    let host = Host::new(vec![("boom", panics_on_first_attempt())]);
    let text = r#"
id: boom
steps:
  - { id: boom, uses: boom, with: { n: 1 }, retry: { max_attempts: 2, initial: 1s } }
"#;
    let handle = host.start(text, json!({}));
    let id = handle.id().to_owned();
    host.suspended(&id);
    let error = host.steps(&id)[0].error.clone().unwrap();
    assert_eq!(error.code, "internal");
    assert!(error.retryable);
    assert!(
        error.message.contains("a host bug on purpose"),
        "{}",
        error.message
    );
    host.advance(1);
    assert_succeeded(&finish(handle), json!({ "n": 1 }));
    assert!(weft_core::panics::count("worker") > before);
}

/// More panicking runs than there are workers (8): each fails, and a run
/// after them still finds a worker.
#[test]
fn workers_outlive_panics_and_serve_the_next_run() {
    let host = Host::new(vec![("doom", always_panics())]);
    let text = "id: doom\nsteps:\n  - { id: doom, uses: doom }\n";
    let handles: Vec<_> = (0..20).map(|_| host.start(text, json!({}))).collect();
    for handle in handles {
        let run = finish(handle);
        assert_eq!(run.state, RunState::Failed, "{run:?}");
        assert_eq!(
            run.error.as_ref().map(|e| e.error.code.as_str()),
            Some("internal")
        );
    }
    let echo = host.start(
        "id: after\nsteps:\n  - { id: echo, uses: echo, with: { ok: true } }\n",
        json!({}),
    );
    assert_succeeded(&finish(echo), json!({ "ok": true }));
    eventually("the panics counted", || {
        weft_core::panics::count("worker") >= 20
    });
}
