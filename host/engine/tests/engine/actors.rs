//! Outside actors: an `await` takes one answer, which becomes the step's
//! output; a cancel ends the run, and no later step is called, whether the
//! run is in memory or suspended in the store.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use weft_engine::{ActError, Answer};
use weft_store::{CANCEL_PATH, Refused, RunState, StoreError};

use crate::common::{Host, assert_succeeded, finish, inputs, paths, steps_called};
use crate::fake::Gate;

#[test]
fn an_await_takes_one_answer_which_becomes_the_step_output() {
    let gate = Arc::new(Gate::default());
    let host = Host::new(vec![("gate", gate.plugin())]);
    let text = r#"
id: approval
steps:
  - { id: approve, await: {}, with: { amount: "${{ inputs.amount }}" } }
  - { id: after, uses: gate, with: "${{ steps.approve.output }}" }
"#;
    let handle = host.start(text, json!({ "amount": 5 }));
    let id = handle.id().to_owned();
    host.suspended(&id);
    let waiting = host.steps(&id);
    assert_eq!(waiting.len(), 1);
    assert!(waiting[0].awaiting && waiting[0].output.is_none());
    assert_eq!(waiting[0].input, json!({ "amount": 5 }));
    assert!(host.calls().is_empty());

    let ok = json!({ "ok": true });
    let answer = Answer::Complete(ok.clone());
    host.engine.act(&id, "approve", &answer).unwrap();
    gate.wait_entered(1);
    // The run is in progress: the step is answered, not waiting.
    let again = host.engine.act(&id, "approve", &Answer::Skip);
    assert_matches!(again, Err(ActError::NotWaiting { .. }));
    let elsewhere = host.engine.act(&id, "after", &answer);
    assert_matches!(elsewhere, Err(ActError::NotWaiting { .. }));
    gate.open();

    assert_succeeded(&finish(handle), ok.clone());
    assert_eq!(inputs(&host.calls()), [("after", &ok)]);
    let records = host.steps(&id);
    let outputs: Vec<_> = records.iter().map(|r| r.output.as_ref()).collect();
    assert_eq!(outputs, [None, Some(&ok), Some(&ok)], "one answer recorded");
    let late = host.engine.act(&id, "approve", &answer);
    assert_matches!(late, Err(ActError::Ended(_)));
}

#[test]
fn cancel_ends_the_run_and_no_later_step_is_called() {
    let gate = Arc::new(Gate::default());
    let host = Host::new(vec![("gate", gate.plugin())]);
    let text = r#"
id: doomed
steps:
  - { id: first, uses: echo, with: 1 }
  - { id: hold, uses: gate, with: 2 }
  - { id: later, uses: echo, with: 3 }
"#;
    let handle = host.start(text, json!({}));
    let id = handle.id().to_owned();
    gate.wait_entered(1);
    host.engine.cancel(&id).unwrap();
    assert_eq!(finish(handle).state, RunState::Cancelled);
    assert_eq!(host.record(&id).state, RunState::Cancelled);
    gate.wait_cancelled();
    // Its late result is dropped, and nothing runs after it.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(steps_called(&host.calls()), ["first", "hold"]);
    assert_eq!(paths(&host.steps(&id)), ["first", CANCEL_PATH]);
    assert_matches!(
        host.engine.cancel(&id),
        Err(StoreError::Refused(Refused::RunEnded(_)))
    );
}

#[test]
fn a_cancel_of_a_suspended_run_ends_it_in_the_store_and_its_timer_never_fires() {
    let host = Host::new(vec![]);
    let text = r#"
id: nap
steps:
  - { id: nap, sleep: 1h }
  - { id: after, uses: echo, with: 1 }
"#;
    let handle = host.start(text, json!({}));
    let id = handle.id().to_owned();
    let asleep = host.suspended(&id);
    host.engine.cancel(&id).unwrap();
    let run = host.record(&id);
    assert_eq!((run.state, run.suspended), (RunState::Cancelled, false));
    assert_eq!(
        run.step_records, asleep.step_records,
        "a cancel in the store adds no record"
    );
    assert_eq!(run.error.unwrap().error.code, "cancelled");
    assert!(host.timers(&id).is_empty());
    host.advance(3600);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(paths(&host.steps(&id)), ["nap"]);
    assert!(host.calls().is_empty());
    assert_matches!(
        host.engine.cancel(&id),
        Err(StoreError::Refused(Refused::RunEnded(_)))
    );
}
