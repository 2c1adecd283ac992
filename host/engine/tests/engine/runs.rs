//! Runs as a whole: a `subflow`'s child run, admission beyond
//! `max_resident`, resumption from records after a crash, and a failed
//! attempt whose effects are never committed.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use weft_core::{Emission, SimClock};
use weft_engine::{Quiet, ResumeError, RunEventKind, RunHandle, StartError, StepOutcome};
use weft_model::{Format, WorkflowDir};
use weft_store::{Refused, RunState, StoreError};

use crate::common::{
    Host, NAP, START, assert_succeeded, engine, eventually, finish, inputs, paths, steps_called,
    store, workflow,
};
use crate::fake::{Behaviour, Gate, calls, echo, source, unavailable};

#[test]
fn a_subflow_starts_a_child_run_whose_outputs_become_the_step_output() {
    let host = Host::new(vec![]);
    let parent = r#"
id: order
steps:
  - { id: price, subflow: pricing, with: { qty: "${{ inputs.qty }}" } }
  - { id: confirm, uses: echo, with: { charged: "${{ steps.price.output.total }}" } }
"#;
    let refused = host
        .engine
        .start(workflow(parent), json!({}), Box::new(Quiet));
    assert_matches!(refused, Err(StartError::Subflow { .. }));
    let child = r#"
id: pricing
steps: [ { id: price, uses: echo, with: { total: "${{ inputs.qty * 3 }}" } } ]
outputs: "${{ steps.price.output }}"
"#;
    let child = weft_model::parse(child, Format::Yaml, "child.yaml").unwrap();
    host.engine
        .set_workflows(Arc::new(WorkflowDir::default().with(child)));

    let run = finish(host.start(parent, json!({ "qty": 4 })));
    assert_succeeded(&run, json!({ "charged": 12 }));
    let records = host.steps(&run.id);
    assert_eq!(paths(&records), ["price", "price", "confirm"]);
    let child_id = records[0].child.clone().expect("its child");
    assert_eq!(records[1].output, Some(json!({ "total": 12 })));
    let calls = host.calls();
    let workflows: Vec<&str> = calls.iter().map(|c| c.workflow.as_str()).collect();
    assert_eq!(workflows, ["pricing", "order"]);
    let runs: Vec<&String> = calls.iter().map(|c| &c.run).collect();
    assert_eq!(runs, [&child_id, &run.id]);

    let child = host.record(&child_id);
    assert_eq!(child.state, RunState::Succeeded);
    assert_eq!(child.input, json!({ "qty": 4 }));
    let link = child.parent.unwrap();
    assert_eq!((&link.run, link.depth), (&run.id, 1));
    assert_eq!(link.path, "price");
}

/// A host with one place, its first run held in a gate, and two more runs
/// parked behind it.
fn two_parked() -> (Arc<Gate>, Host, [RunHandle; 3]) {
    let gate = Arc::new(Gate::default());
    let host = Host::with_config(vec![("gate", gate.plugin())], 1);
    let text = "id: one\nsteps: [ { id: only, uses: gate, with: \"${{ inputs.n }}\" } ]\n";
    let first = host.start(text, json!({ "n": 1 }));
    gate.wait_entered(1);
    let second = host.start(text, json!({ "n": 2 }));
    let third = host.start(text, json!({ "n": 3 }));
    eventually("two runs to be parked", || host.engine.load() == (1, 2));
    (gate, host, [first, second, third])
}

#[test]
fn runs_beyond_max_resident_are_parked_durably_and_admitted_in_arrival_order() {
    let (gate, host, [first, second, third]) = two_parked();
    assert_eq!(host.calls().len(), 1, "parked runs do not run");
    let parked = host.record(third.id());
    assert_eq!(parked.state, RunState::Running, "recorded while parked");

    gate.open();
    let ids = [first.id(), second.id(), third.id()].map(str::to_owned);
    for handle in [first, second, third] {
        assert_eq!(finish(handle).state, RunState::Succeeded);
    }
    let order: Vec<String> = host.calls().into_iter().map(|c| c.run).collect();
    assert_eq!(order, ids);
    assert_eq!(host.engine.load(), (0, 0));
}

/// A run parked on a full host, which a second host on the same store
/// takes as free work, is answered on the first host's handle when it
/// ends on the second: the first host finds it driven there when a place
/// frees, and follows it in the store.
#[test]
fn the_handle_of_a_parked_run_another_host_took_answers_its_end_there() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let clock = Arc::new(SimClock::new(START));
    // Each host's calls wait at a gate of its own.
    let (here, there) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
    let full_source = source(vec![("gate", here.plugin())]);
    let full = engine(&store, &full_source, &clock, &dir, 1);
    let text = "id: one\nsteps: [ { id: only, uses: gate, with: \"${{ inputs.n }}\" } ]\n";
    let start = |n: u32| {
        let mut handle = full
            .start(workflow(text), json!({ "n": n }), Box::new(Quiet))
            .unwrap();
        handle.recorded().unwrap();
        handle
    };
    let first = start(1);
    here.wait_entered(1);
    let second = start(2);
    eventually("the second run to be parked", || full.load() == (1, 1));

    let plugins = tempfile::tempdir().unwrap();
    let roomy_source = source(vec![("gate", there.plugin())]);
    let roomy = engine(&store, &roomy_source, &clock, &plugins, 10);
    there.wait_entered(1);
    assert_eq!(roomy.load(), (1, 0), "the second host took the parked run");

    // The first host's place frees while the second still drives the run:
    // it finds the run driven there, gives the place on, and its handle
    // waits.
    here.open();
    assert_eq!(finish(first).state, RunState::Succeeded);
    eventually("the first host to give the place on", || {
        full.load() == (0, 0)
    });
    assert_matches!(second.wait_timeout(Duration::from_millis(50)), Ok(None));

    // The run ends there; the handle here answers its end, looking again
    // as the clock moves on.
    there.open();
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    let ended = loop {
        match second.wait_timeout(Duration::from_millis(20)) {
            Ok(Some(run)) => break run,
            Ok(None) => {
                assert!(std::time::Instant::now() < give_up, "no answer in 10 s");
                clock.advance(Duration::from_millis(50));
            }
            Err(e) => panic!("the handle failed: {e}"),
        }
    };
    assert_eq!(ended.state, RunState::Succeeded);
    assert_eq!(ended.id, second.id());
    assert_eq!(
        calls(&full_source).len(),
        1,
        "the first host ran its first run only"
    );
    let there_runs: Vec<String> = calls(&roomy_source).into_iter().map(|c| c.run).collect();
    assert_eq!(
        there_runs,
        std::slice::from_ref(&ended.id),
        "the second host ran it once"
    );
}

/// A tenant at its resident cap has its runs parked while the host has
/// places, and a tenant that starts one run while another's flood is
/// parked gets the next place in turn, before the flood's later runs.
#[test]
fn a_tenant_at_its_cap_is_parked_and_another_tenant_takes_the_next_place_in_turn() {
    let gate = Arc::new(Gate::default());
    let host = Host::with_config(vec![("gate", gate.plugin())], 2);
    host.engine.set_tenant_limits(
        "flood",
        weft_engine::TenantLimits {
            weight: 1,
            max_resident: Some(1),
            ..weft_engine::TenantLimits::default()
        },
    );
    let text = "id: one\nsteps: [ { id: only, uses: gate, with: \"${{ inputs.n }}\" } ]\n";
    let first = host.start_in("flood", text, json!({ "n": 0 }));
    gate.wait_entered(1);
    let mut flood = vec![first];
    for n in 1..5 {
        flood.push(host.start_in("flood", text, json!({ "n": n })));
    }
    // One resident of `flood`, four parked though a place is free.
    eventually("the flood to be parked at its cap", || {
        host.engine.load() == (1, 4)
    });
    assert_eq!(host.calls().len(), 1);
    // Another tenant's run takes the free place at once.
    let other = host.start_in("calm", text, json!({ "n": 100 }));
    gate.wait_entered(2);
    assert_eq!(host.engine.load(), (2, 4));
    gate.open();
    let other_id = other.id().to_owned();
    assert_eq!(finish(other).state, RunState::Succeeded);
    let ids: Vec<String> = flood.iter().map(|h| h.id().to_owned()).collect();
    for handle in flood {
        assert_eq!(finish(handle).state, RunState::Succeeded);
    }
    let order: Vec<String> = host.calls().into_iter().map(|c| c.run).collect();
    assert_eq!(
        order[1], other_id,
        "the calm tenant's run went second: {order:?}"
    );
    let flood_order: Vec<&String> = order.iter().filter(|id| **id != other_id).collect();
    assert_eq!(
        flood_order,
        ids.iter().collect::<Vec<_>>(),
        "the flood keeps its own order"
    );
    assert_eq!(host.engine.load(), (0, 0));
}

/// A tenant whose guest time for the minute is spent has its next step
/// wait, on a timer, for the next minute: recorded as `cpu_quota`, not
/// called, and called once the minute turns, whatever its retry policy.
#[test]
fn a_tenant_out_of_guest_time_waits_for_the_next_minute() {
    let host = Host::new(vec![]);
    host.engine.set_tenant_limits(
        "metered",
        weft_engine::TenantLimits {
            guest_time_per_minute: Some(Duration::from_nanos(1)),
            ..weft_engine::TenantLimits::default()
        },
    );
    let text =
        "id: two\nsteps:\n  - { id: a, uses: echo, with: 1 }\n  - { id: b, uses: echo, with: 2 }\n";
    let handle = host.start_in("metered", text, json!({}));
    let id = handle.id().to_owned();
    eventually("step b to wait for the minute", || {
        host.steps(&id)
            .iter()
            .any(|s| s.error.as_ref().is_some_and(|e| e.code == "cpu_quota"))
    });
    assert_eq!(steps_called(&host.calls()), ["a"], "b was not called");
    let waiting = host
        .steps(&id)
        .into_iter()
        .find(|s| s.step_id == "b")
        .unwrap();
    assert!(waiting.retry_in_ms.is_some_and(|ms| ms > 0 && ms <= 60_000));
    // A tenant without a budget is not held back meanwhile.
    let free = host.start_in("free", text, json!({}));
    assert_eq!(finish(free).state, RunState::Succeeded);
    host.advance(61);
    assert_eq!(finish(handle).state, RunState::Succeeded);
    let called: Vec<_> = host
        .calls()
        .into_iter()
        .filter(|c| c.run == id)
        .map(|c| c.step)
        .collect();
    assert_eq!(called, ["a", "b"]);
}

#[test]
fn a_run_cancelled_while_parked_never_runs_and_gives_its_place_on() {
    let (gate, host, [first, second, third]) = two_parked();
    let (second_id, third_id) = (second.id().to_owned(), third.id().to_owned());
    host.engine.cancel(&second_id).unwrap();
    assert_eq!(host.record(&second_id).state, RunState::Cancelled);

    gate.open();
    assert_eq!(finish(first).state, RunState::Succeeded);
    assert_eq!(finish(second).state, RunState::Cancelled);
    assert_eq!(finish(third).state, RunState::Succeeded);
    let called: Vec<String> = host.calls().into_iter().map(|c| c.run).collect();
    assert!(
        !called.contains(&second_id),
        "the cancelled parked run ran an attempt: {called:?}"
    );
    assert!(
        called.contains(&third_id),
        "the next parked run took its place"
    );
    assert_eq!(host.engine.load(), (0, 0));
}

/// A run cancelled in the store while it is being read back (woken by its
/// timer, no cell yet) is told `ended` once: by the cancellation, and not
/// again by the cell that read it before, which finds it ended at its next
/// commit.
#[test]
fn a_run_cancelled_while_it_is_read_back_is_told_ended_once() {
    let host = Host::new(vec![]);
    let handle = host.start(NAP, json!({}));
    let id = handle.id().to_owned();
    host.suspended(&id);
    let held = host.source().hold_loads();
    host.advance(3600);
    crate::fake::wait_loads_held(host.source(), 1);
    host.engine.cancel(&id).unwrap();
    assert_eq!(host.record(&id).state, RunState::Cancelled);
    drop(held);

    // The cancellation answered the handle the run kept while it slept.
    assert_eq!(finish(handle).state, RunState::Cancelled);
    // The cell read the run before the cancellation: it runs its next step,
    // whose commit is refused, and leaves.
    eventually("the cell's step", || host.calls().len() == 2);
    assert_eq!(steps_called(&host.calls()), ["before", "after"]);
    eventually("the run to leave", || host.engine.load() == (0, 0));
    assert!(!paths(&host.steps(&id)).contains(&"after"));
    assert_eq!(host.told(&id, RunEventKind::Ended), 1);
}

/// A run cancelled in the store (paused, so out of memory) takes its
/// child, asleep and out of memory too, with it: each is told `ended` once.
#[test]
fn the_children_of_a_run_cancelled_in_the_store_are_told_ended_once() {
    let host = Host::new(vec![]);
    let child = "id: slow\nsteps: [ { id: nap, sleep: 1h } ]\n";
    let child = weft_model::parse(child, Format::Yaml, "child.yaml").unwrap();
    host.engine
        .set_workflows(Arc::new(WorkflowDir::default().with(child)));
    let parent = "id: wait\nsteps: [ { id: kid, subflow: slow } ]\n";
    let handle = host.start(parent, json!({}));
    let id = handle.id().to_owned();
    let child_id = || host.steps(&id).first().and_then(|r| r.child.clone());
    eventually("the child to start", || child_id().is_some());
    let child_id = child_id().unwrap();
    let store = host.engine.store();
    eventually("the child to sleep", || {
        store.run(&child_id).unwrap().is_some_and(|r| r.suspended)
    });
    host.engine.pause(&id, "test").unwrap();
    eventually("the parent to leave memory", || {
        let parent = host.record(&id);
        parent.paused.is_some() && host.engine.load() == (0, 0)
    });
    host.engine.cancel(&id).unwrap();
    // Answered though the run was paused out of memory.
    assert_eq!(finish(handle).state, RunState::Cancelled);
    eventually("the child to be cancelled", || {
        host.record(&child_id).state == RunState::Cancelled
    });
    eventually("both to leave", || host.engine.load() == (0, 0));
    assert_eq!(host.told(&id, RunEventKind::Ended), 1);
    assert_eq!(host.told(&child_id, RunEventKind::Ended), 1);
}

#[test]
fn a_resumed_run_does_not_call_its_committed_steps_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let clock = Arc::new(SimClock::new(START));
    // The first engine's runner panics in `b` (a host bug): the attempt
    // fails `internal`, retryable, and the run waits a minute for its retry
    // when the engine goes.
    let dies: Behaviour =
        Arc::new(move |call, _| panic!("simulated host bug in `{}`", call.context.step_id));
    let crashed = source(vec![("gate", dies)]);
    let first = engine(&store, &crashed, &clock, &dir, 10_000);
    let text = r#"
id: resumable
steps:
  - { id: a, uses: echo, with: { n: "${{ inputs.n }}" } }
  - { id: b, uses: gate, with: { from_a: "${{ steps.a.output.n }}" }, retry: { max_attempts: 2, initial: 1m } }
  - { id: c, uses: echo, with: { from_b: "${{ steps.b.output.from_a }}" } }
outputs: "${{ steps.c.output }}"
"#;
    let input = json!({ "n": 7 });
    let stuck = first.start(workflow(text), input, Box::new(Quiet)).unwrap();
    let id = stuck.id().to_owned();
    eventually("b to fail", || store.steps(&id).unwrap().len() == 2);
    drop(first);
    drop(stuck);
    assert_eq!(steps_called(&calls(&crashed)), ["a", "b"]);
    let stored = store.run(&id).unwrap().unwrap();
    assert_eq!(stored.state, RunState::Running);
    let records = store.steps(&id).unwrap();
    assert_eq!(paths(&records), ["a", "b"]);
    assert_eq!(
        records[1].error.as_ref().map(|e| e.code.as_str()),
        Some("internal")
    );

    // A new engine, with plugins of its own, picks the run up.
    let fresh = source(vec![("gate", echo())]);
    let second = engine(&store, &fresh, &clock, &dir, 10_000);
    let resumed = second.resume(&id, Box::new(Quiet)).unwrap();
    clock.advance(Duration::from_secs(60));
    let run = finish(resumed);
    assert_succeeded(&run, json!({ "from_b": 7 }));
    // `a` is not called again; `b` sees its output, read back.
    let resumed = calls(&fresh);
    let (b, c) = (json!({ "from_a": 7 }), json!({ "from_b": 7 }));
    assert_eq!(inputs(&resumed), [("b", &b), ("c", &c)]);
    assert_eq!(resumed[0].attempt, 2);
    let records = store.steps(&id).unwrap();
    assert_eq!(paths(&records), ["a", "b", "b", "c"]);
    assert_eq!(
        records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    let again = second.resume(&id, Box::new(Quiet));
    assert_matches!(again, Err(ResumeError::NotRunning { .. }));
}

#[test]
fn a_failed_attempt_commits_neither_its_key_value_writes_nor_its_messages() {
    // Writes `last` and emits a message on every attempt; fails the first.
    let effects: Behaviour = Arc::new(|call, _| {
        let attempt = call.context.attempt;
        let ok = (attempt > 1).then(|| json!(attempt));
        let mut outcome = StepOutcome::of(ok.ok_or_else(|| unavailable(1)));
        outcome.kv.space = format!("workflow/{}", call.context.workflow);
        outcome
            .kv
            .writes
            .insert("last".into(), Some(attempt.to_string()));
        let id = format!("{}#{attempt}", call.context.idempotency_key);
        let payload = json!({ "attempt": attempt });
        let channel = "audit".to_owned();
        outcome.emitted.push(Emission {
            id,
            channel,
            payload,
        });
        outcome
    });
    let host = Host::new(vec![("effects", effects)]);
    let text = r#"
id: fx
steps:
  - { id: write, uses: effects, retry: { max_attempts: 2, backoff: fixed, initial: 1s } }
"#;
    let handle = host.start(text, json!({}));
    let id = handle.id().to_owned();
    let store = host.engine.store();
    host.suspended(&id);
    assert!(store.run_messages(&id).unwrap().is_empty());
    assert_eq!(store.kv_get("workflow/fx", "last").unwrap().version, 0);
    let failed = &host.steps(&id)[0];
    assert!(failed.error.is_some(), "{failed:?}");
    assert!(failed.kv_writes.is_empty() && failed.messages.is_empty());

    host.advance(1);
    assert_succeeded(&finish(handle), json!(2));
    let messages = store.run_messages(&id).unwrap();
    assert_eq!(messages.len(), 1, "{messages:?}");
    let message = &messages[0];
    assert_eq!([&message.channel, &message.step], ["audit", "write"]);
    assert_eq!(message.payload, json!({ "attempt": 2 }));
    let last = store.kv_get("workflow/fx", "last").unwrap();
    assert_eq!((last.version, last.value.as_deref()), (1, Some("2")));
    let records = host.steps(&id);
    let written = records[1].kv_writes.get("last").cloned().flatten();
    assert_eq!(written.as_deref(), Some("2"));
    assert_eq!(records[1].messages, [message.id.as_str()]);
}

/// Tenant `tenant`'s quota of `max_stored_bytes`, stored as an admin sets
/// it.
fn store_quota(host: &Host, tenant: &str, max_stored_bytes: u64) {
    set_quota(
        host,
        tenant,
        weft_store::Quota {
            max_stored_bytes: Some(max_stored_bytes),
            ..weft_store::Quota::default()
        },
    );
}

/// Tenant `tenant`'s quota, stored as an admin sets it.
fn set_quota(host: &Host, tenant: &str, quota: weft_store::Quota) {
    let record = weft_store::TenantRecord {
        name: tenant.to_owned(),
        created_at: START,
        quota,
    };
    let write = weft_store::Write::Access(weft_store::AccessWrite::put_tenant(&record, true));
    let answers = host.engine.store().apply(&[&write]).unwrap();
    assert!(answers[0].is_ok(), "{answers:?}");
}

/// A tenant at its quota of stored bytes: a start that would go over it is
/// refused with nothing recorded; a step whose output would go over it
/// fails with `storage_quota`, its output not stored and not retried, and
/// the run ends; a tenant without a quota is not held back meanwhile.
#[test]
fn a_tenant_over_its_stored_bytes_has_its_start_and_results_refused() {
    let host = Host::new(vec![]);
    store_quota(&host, "small", 12_000);
    let text = "id: grow\nsteps:\n  - { id: a, uses: echo, with: '${{ inputs.small }}' }\n  - { id: b, uses: echo, with: '${{ inputs.big }}', retry: { max_attempts: 3 } }\n";
    let big = "x".repeat(5_000);
    let mut parsed = weft_model::parse(text, Format::Yaml, "test.yaml").unwrap();
    parsed.id = weft_core::tenant::qualify("small", &parsed.id);
    let parsed = Arc::new(parsed);

    // An input larger than the quota: refused as it is recorded.
    let mut refused = host
        .engine
        .start(
            Arc::clone(&parsed),
            json!({ "small": big.repeat(3) }),
            Box::new(Quiet),
        )
        .unwrap();
    assert!(
        matches!(refused.recorded(), Err(StoreError::Refused(Refused::StorageQuota { ref tenant, .. })) if tenant == "small"),
        "the start was not refused for its size"
    );
    assert!(host.engine.store().run(refused.id()).unwrap().is_none());
    assert_eq!(host.engine.store().stored_bytes("small").unwrap(), 0);

    // A small input, but step b's output is larger than what is left.
    let handle = host.start_in("small", text, json!({ "small": "s", "big": big }));
    let id = handle.id().to_owned();
    let ended = finish(handle);
    assert_eq!(ended.state, RunState::Failed);
    let steps = host.steps(&id);
    let a = steps.iter().find(|s| s.step_id == "a").unwrap();
    assert_eq!(a.output, Some(json!("s")));
    let b: Vec<_> = steps.iter().filter(|s| s.step_id == "b").collect();
    assert_eq!(b.len(), 1, "storage_quota is not retried: {b:?}");
    assert_eq!(b[0].output, None);
    assert_eq!(
        b[0].error.as_ref().map(|e| e.code.as_str()),
        Some("storage_quota")
    );
    // The run's input (5,000 bytes), and step b's failure, which keeps
    // its input, are counted; b's output (5,000 more) is not.
    let after = host.engine.store().stored_bytes("small").unwrap();
    assert!(
        (10_000..12_000).contains(&after),
        "stored bytes after the run: {after}"
    );

    // Another tenant's large run goes on.
    let free = host.start_in(
        "free",
        text,
        json!({ "small": "s", "big": "x".repeat(5_000) }),
    );
    assert_eq!(finish(free).state, RunState::Succeeded);
    assert!(host.engine.store().stored_bytes("free").unwrap() > 5_000);
}

/// A tenant at its quota of pending timers: a run's `sleep` past it fails
/// with `timer_quota` and the run ends; its first run, whose
/// deadline and sleep are within the quota, sleeps on.
#[test]
fn a_tenants_sleep_past_its_pending_timers_fails_with_timer_quota() {
    let host = Host::new(vec![]);
    set_quota(
        &host,
        "few",
        weft_store::Quota {
            max_timers: Some(2),
            ..weft_store::Quota::default()
        },
    );
    let text = "id: nap\ntimeout: 1d\nsteps:\n  - { id: nap, sleep: 1h }\n";
    let first = host.start_in("few", text, json!({}));
    let first = first.id().to_owned();
    host.suspended(&first);
    assert_eq!(host.engine.store().pending_timers("few").unwrap(), 2);

    let second = finish(host.start_in("few", text, json!({})));
    assert_eq!(second.state, RunState::Failed, "{second:?}");
    let naps: Vec<_> = host
        .steps(&second.id)
        .into_iter()
        .filter(|s| s.step_id == "nap")
        .collect();
    assert_eq!(naps.len(), 1, "{naps:?}");
    assert_eq!(
        naps[0].error.as_ref().map(|e| e.code.as_str()),
        Some("timer_quota")
    );
    // The failed run's deadline is gone with it; the first still sleeps.
    assert_eq!(host.engine.store().pending_timers("few").unwrap(), 2);
    assert!(host.record(&first).suspended);
}
