//! Retention: the sweeper deletes ended runs once their workflow's
//! `retain:` (or the host's) has passed, on the engine's clock, and never
//! what a live run needs: a run that has not ended, or a child whose
//! parent has not. `weft runs delete` and `DELETE /v1/runs/{id}` delete one
//! ended run and refuse one that has not ended.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{Scratch, guests};
use serde_json::json;
use weft::engine::sweep::Retention;
use weft::engine::{EngineConfig, Quiet};
use weft::model::{self, Retain};
use weft::store::{AccessWrite, Refused, RunState, StoreError, TenantRecord, Write};
use weft::{
    Engine, PluginDir, RedbStore, Runtime, RuntimeConfig, SimClock, Store, Timestamp, WorkflowDir,
};

/// 2026-11-30T00:00:00Z.
const T0: Timestamp = Timestamp(1_795_996_800_000);

const HOUR: &str = "id: hourly\nretain: 1h\nsteps:\n  - { id: a, uses: echo, with: 1 }\n";
const FOREVER: &str = "id: kept\nretain: forever\nsteps:\n  - { id: a, uses: echo, with: 1 }\n";
const PLAIN: &str = "id: plain\nsteps:\n  - { id: a, uses: echo, with: 1 }\n";
const WAITS: &str = "id: waits\nretain: 1h\nsteps:\n  - { id: ask, await: {} }\n";
const PARENT: &str = "id: parent\nretain: 1h\nsteps:\n  - { id: call, subflow: hourly, with: {} }\n  - { id: ask, await: {} }\n";

#[test]
fn the_sweeper_deletes_ended_runs_past_their_retention_and_nothing_a_live_run_needs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbStore::open(dir.path().join("weft.redb")).unwrap());
    let clock = Arc::new(SimClock::new(T0));
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let engine = Engine::with_config(
        store.clone(),
        PluginDir::new(runtime, guests()),
        clock.clone(),
        EngineConfig::default(),
    )
    .unwrap();
    let mut served = WorkflowDir::default();
    let mut workflows = std::collections::HashMap::new();
    for text in [HOUR, FOREVER, PLAIN, WAITS, PARENT] {
        let workflow = Arc::new(model::parse(text, model::Format::Yaml, "wf.yaml").unwrap());
        workflows.insert(workflow.id.clone(), Arc::clone(&workflow));
        served.insert(workflow);
    }
    engine.set_workflows(Arc::new(served));
    let start = |id: &str| {
        let mut handle = engine
            .start(Arc::clone(&workflows[id]), json!({}), Box::new(Quiet))
            .unwrap();
        handle.recorded().unwrap();
        handle
    };
    let ended = |id: &str| {
        let handle = start(id);
        let run = handle.wait().unwrap();
        assert_eq!(run.state, RunState::Succeeded, "{run:?}");
        run.id
    };
    let hourly = ended("hourly");
    let kept = ended("kept");
    let plain = ended("plain");
    // Waits on its `await`: it never ends here.
    let waits = start("waits").id().to_owned();
    let parent = start("parent").id().to_owned();
    let settled = |id: &str| {
        for _ in 0..500 {
            if store.run(id).unwrap().is_some_and(|run| run.suspended) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("run {id} never waited");
    };
    settled(&waits);
    settled(&parent);
    let child = store
        .steps(&parent)
        .unwrap()
        .iter()
        .find_map(|step| step.child.clone())
        .expect("the parent started its child");
    assert!(store.run(&child).unwrap().unwrap().state.is_terminal());
    let day = Retention {
        runs: Retain::For(Duration::from_secs(86_400)),
        ..Retention::default()
    };

    // Nothing is past its retention yet.
    let swept = engine.sweep(&day, false).unwrap();
    assert_eq!((swept.runs, swept.kept, swept.examined), (0, 0, 6));

    // Two hours on: the hour-long runs are due. The one that ended goes,
    // with its records; the child stays while its parent waits; runs
    // that have not ended are never due.
    clock.advance(Duration::from_secs(2 * 3600));
    let dry = engine.sweep(&day, true).unwrap();
    assert_eq!((dry.runs, dry.steps, dry.kept), (1, 1, 1), "{dry:?}");
    assert!(
        store.run(&hourly).unwrap().is_some(),
        "a dry run deletes nothing"
    );
    let swept = engine.sweep(&day, false).unwrap();
    assert_eq!(
        (swept.runs, swept.steps, swept.kept),
        (1, 1, 1),
        "{swept:?}"
    );
    assert_eq!(store.run(&hourly).unwrap(), None);
    assert_eq!(store.steps(&hourly).unwrap(), []);
    for id in [&kept, &plain, &waits, &parent, &child] {
        assert!(store.run(id).unwrap().is_some(), "run {id} was deleted");
    }

    // The tenant's retention comes before the host's: at an hour, `plain`
    // goes; `kept` says `forever` itself, and stays.
    let mut tenant: TenantRecord = serde_json::from_value(json!({
        "name": "default", "created_at": T0, "quota": { "retain": "1h" },
    }))
    .unwrap();
    let write = Write::Access(AccessWrite::put_tenant(&tenant, true));
    store.apply(&[&write]).unwrap().pop().unwrap().unwrap();
    let swept = engine.sweep(&day, false).unwrap();
    assert_eq!((swept.runs, swept.kept), (1, 1), "{swept:?}");
    assert_eq!(store.run(&plain).unwrap(), None);
    assert!(store.run(&kept).unwrap().is_some());
    tenant.quota.retain = None;
    let write = Write::Access(AccessWrite::put_tenant(&tenant, false));
    store.apply(&[&write]).unwrap().pop().unwrap().unwrap();

    // Past the host's day, `kept` stays forever.
    clock.advance(Duration::from_secs(86_400));
    let swept = engine.sweep(&day, false).unwrap();
    assert_eq!((swept.runs, swept.kept), (0, 1), "{swept:?}");
    assert!(store.run(&kept).unwrap().is_some());

    // By hand: refused for a run that has not ended, and for a child whose
    // parent has not; the parent cancelled, both go.
    let refused = engine.delete_run(&waits).unwrap_err();
    assert!(
        matches!(&refused, StoreError::Refused(Refused::Needed { why, .. }) if why == "it has not ended"),
        "{refused:?}"
    );
    let refused = engine.delete_run(&child).unwrap_err();
    assert!(
        matches!(&refused, StoreError::Refused(Refused::Needed { why, .. }) if why.contains(&parent)),
        "{refused:?}"
    );
    engine.cancel(&parent).unwrap();
    for _ in 0..500 {
        if store.run(&parent).unwrap().unwrap().state.is_terminal() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    engine.delete_run(&child).unwrap();
    engine.delete_run(&parent).unwrap();
    assert_eq!(store.run(&parent).unwrap(), None);
    assert!(matches!(
        engine.delete_run(&parent),
        Err(StoreError::Refused(Refused::NotFound(_)))
    ));
}

#[test]
fn runs_delete_removes_an_ended_run_and_refuses_one_that_has_not_ended() {
    let scratch = Scratch::new(&["echo"]);
    let done = scratch.file("done.yaml", PLAIN);
    let ids: Vec<String> = (0..2)
        .map(|_| {
            let run = scratch.run(&["run", done.to_str().unwrap()]);
            assert_eq!(run.code, Some(0), "{run:?}");
            run.run_id()
        })
        .collect();
    let (id, other) = (&ids[0], &ids[1]);
    std::thread::sleep(Duration::from_millis(1100));
    let dry = scratch.run(&["gc", "--dry-run", "--retain", "1s"]);
    assert_eq!(dry.code, Some(0), "{dry:?}");
    assert!(
        dry.stdout.contains("would delete 2 ended run(s)"),
        "{dry:?}"
    );
    assert_eq!(scratch.run(&["runs", "show", other]).code, Some(0));
    let deleted = scratch.run(&["runs", "delete", id]);
    assert_eq!(deleted.code, Some(0), "{deleted:?}");
    assert!(deleted.stdout.contains("deleted"), "{deleted:?}");
    let shown = scratch.run(&["runs", "show", id]);
    assert_eq!(shown.code, Some(2), "{shown:?}");
    let again = scratch.run(&["runs", "delete", id]);
    assert_eq!(again.code, Some(2), "{again:?}");
    assert!(again.stderr.contains("no run"), "{again:?}");
    // A compiled component that neither the registry nor the plugins
    // folder holds (an earlier build, say) goes from the code cache; the
    // plugins folder's stays.
    let cache = scratch.data_dir().join("cache");
    let entries = || std::fs::read_dir(&cache).unwrap().count();
    let before = entries();
    assert!(
        before >= 1,
        "the run compiled echo into {}",
        cache.display()
    );
    std::fs::write(
        cache.join(format!("{}-0123456789abcdef.cwasm", "ab".repeat(32))),
        b"x",
    )
    .unwrap();
    let swept = scratch.run(&["gc", "--retain", "1s"]);
    assert_eq!(swept.code, Some(0), "{swept:?}");
    assert!(swept.stdout.contains("deleted 1 ended run(s)"), "{swept:?}");
    assert!(
        swept
            .stdout
            .contains("deleted 1 compiled component(s) of the code cache"),
        "{swept:?}"
    );
    assert_eq!(entries(), before);
    assert_eq!(scratch.run(&["runs", "show", other]).code, Some(2));
    let bad = scratch.run(&["gc", "--retain=-5s"]);
    assert_eq!(bad.code, Some(2), "{bad:?}");
    assert!(bad.stderr.contains("--retain"), "{bad:?}");
}

const EMITS: &str =
    "id: emits\nsteps:\n  - { id: say, uses: emitter, with: { channel: news, count: 1 } }\n";

#[test]
fn the_sweeper_deletes_settled_messages_and_clears_old_dead_letters() {
    use weft::store::DeliveryOp;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbStore::open(dir.path().join("weft.redb")).unwrap());
    let clock = Arc::new(SimClock::new(T0));
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let engine = Engine::with_config(
        store.clone(),
        PluginDir::new(runtime, guests()),
        clock.clone(),
        EngineConfig::default(),
    )
    .unwrap();
    let workflow = Arc::new(model::parse(EMITS, model::Format::Yaml, "emits.yaml").unwrap());
    let mut served = WorkflowDir::default();
    served.insert(Arc::clone(&workflow));
    engine.set_workflows(Arc::new(served));
    let subscription = serde_json::from_value(json!({
        "key": "news/reader", "channel": "news", "name": "reader", "target": { "kind": "sse" },
        "max_attempts": 3, "backoff_ms": 1_000, "max_backoff_ms": 60_000,
        "ack_timeout_ms": 30_000, "created_at": T0,
    }))
    .unwrap();
    let apply = |write: Write| store.apply(&[&write]).unwrap().pop().unwrap().unwrap();
    apply(Write::Subscribe(Box::new(subscription)));
    let mut deliveries = Vec::new();
    for _ in 0..3 {
        let handle = engine
            .start(Arc::clone(&workflow), json!({}), Box::new(Quiet))
            .unwrap();
        let run = handle.wait().unwrap();
        assert_eq!(run.state, RunState::Succeeded, "{run:?}");
        let message = &store.run_messages(&run.id).unwrap()[0];
        deliveries.push((message.seq, message.deliveries[0].clone()));
    }
    // The first and last are acked; the second runs out of attempts.
    let [(first, acked), (second, dead), (newest, last)] = &deliveries[..] else {
        unreachable!()
    };
    for id in [acked, last] {
        apply(Write::Delivery(id.clone(), DeliveryOp::Ack { at: T0 }));
    }
    let error = "the consumer never acked".to_owned();
    let op = DeliveryOp::Dead {
        at: T0,
        error,
        attempted: false,
    };
    apply(Write::Delivery(dead.clone(), op));
    let retention = Retention::default();

    // A day on, nothing is due (settled messages are kept 7 days).
    clock.advance(Duration::from_secs(86_400));
    let swept = engine.sweep(&retention, false).unwrap();
    assert_eq!((swept.messages, swept.dead_letters), (0, 0), "{swept:?}");

    // Eight days on: the first message goes with its delivery. The newest
    // stays (the next seq follows it), and so does the one whose dead
    // letter is younger than 30 days.
    clock.advance(Duration::from_secs(7 * 86_400));
    let dry = engine.sweep(&retention, true).unwrap();
    assert_eq!((dry.messages, dry.dead_letters), (1, 0), "{dry:?}");
    assert!(store.message(*first).unwrap().is_some());
    let swept = engine.sweep(&retention, false).unwrap();
    assert_eq!((swept.messages, swept.dead_letters), (1, 0), "{swept:?}");
    assert_eq!(store.message(*first).unwrap(), None);
    assert_eq!(store.delivery(acked).unwrap(), None);
    assert!(store.message(*second).unwrap().is_some());
    assert!(store.message(*newest).unwrap().is_some());
    assert_eq!(store.dead_letters(10).unwrap().len(), 1);

    // Thirty-one days on: the dead letter is cleared, and its message,
    // now settled, goes on the next pass.
    clock.advance(Duration::from_secs(23 * 86_400));
    let swept = engine.sweep(&retention, false).unwrap();
    assert_eq!((swept.messages, swept.dead_letters), (0, 1), "{swept:?}");
    assert!(store.dead_letters(10).unwrap().is_empty());
    let swept = engine.sweep(&retention, false).unwrap();
    assert_eq!((swept.messages, swept.dead_letters), (1, 0), "{swept:?}");
    assert_eq!(store.message(*second).unwrap(), None);
    assert!(store.message(*newest).unwrap().is_some());
}

#[test]
fn the_sweeper_deletes_replaced_revisions_once_no_run_follows_them() {
    use weft::store::{Blob, DefinitionRecord, DeploymentRecord};
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbStore::open(dir.path().join("weft.redb")).unwrap());
    let clock = Arc::new(SimClock::new(T0));
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let engine = Engine::with_config(
        store.clone(),
        PluginDir::new(runtime, guests()),
        clock.clone(),
        EngineConfig::default(),
    )
    .unwrap();
    let newer = HOUR.replace("with: 1", "with: 2");
    let deploy = |revision: u32, source: &str| {
        let definition = DefinitionRecord::new("wf.yaml", "yaml", source);
        let record: DeploymentRecord = serde_json::from_value(json!({
            "workflow": "hourly", "revision": revision, "digest": definition.digest,
            "version": 1, "deployed_at": T0, "origin": "api",
        }))
        .unwrap();
        let write = Write::Deploy {
            workflow: "hourly".to_owned(),
            revision,
            record: weft::store::encode(&record),
            definition: (definition.digest.clone(), weft::store::encode(&definition)),
        };
        store.apply(&[&write]).unwrap().pop().unwrap().unwrap();
        definition.digest
    };
    let first = deploy(1, HOUR);
    let second = deploy(2, &newer);
    // A run follows revision 1 (it ends, and is kept an hour).
    let workflow = Arc::new(model::parse(HOUR, model::Format::Yaml, "wf.yaml").unwrap());
    let handle = engine
        .start(Arc::clone(&workflow), json!({}), Box::new(Quiet))
        .unwrap();
    let run = handle.wait().unwrap();
    assert_eq!(store.run(&run.id).unwrap().unwrap().definition, first);
    let retention = Retention::default();

    // Within the host's 30 days of its replacement, revision 1 stays.
    clock.advance(Duration::from_secs(86_400));
    let swept = engine.sweep(&retention, false).unwrap();
    assert_eq!((swept.runs, swept.revisions), (1, 0), "{swept:?}");
    assert_eq!(store.deployments(Some("hourly")).unwrap().len(), 2);

    // Past them: revision 1 goes; its definition, now unused, is marked,
    // and goes on a pass that starts a minute after the mark. The newest
    // stays.
    clock.advance(Duration::from_secs(30 * 86_400));
    let dry = engine.sweep(&retention, true).unwrap();
    assert_eq!((dry.revisions, dry.blobs), (1, 0), "{dry:?}");
    let swept = engine.sweep(&retention, false).unwrap();
    assert_eq!((swept.revisions, swept.blobs), (1, 0), "{swept:?}");
    let left = store.deployments(Some("hourly")).unwrap();
    assert_eq!(
        left.iter().map(|d| d.revision).collect::<Vec<_>>(),
        [2],
        "{left:?}"
    );
    assert!(store.definition(&first).unwrap().is_some());
    let swept = engine.sweep(&retention, false).unwrap();
    assert_eq!(swept.blobs, 0, "within the minute: {swept:?}");
    clock.advance(Duration::from_secs(61));
    let dry = engine.sweep(&retention, true).unwrap();
    assert_eq!(dry.blobs, 1, "{dry:?}");
    let swept = engine.sweep(&retention, false).unwrap();
    assert_eq!(swept.blobs, 1, "{swept:?}");
    assert_eq!(store.digests(Blob::Definition).unwrap(), [second]);
    assert_eq!(store.definition(&first).unwrap(), None);
}

#[test]
fn a_definition_found_unused_stays_for_a_run_started_while_the_sweeper_reads() {
    use weft::engine::sweep::Pass;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbStore::open(dir.path().join("weft.redb")).unwrap());
    let clock = Arc::new(SimClock::new(T0));
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let engine = Engine::with_config(
        store.clone(),
        PluginDir::new(runtime, guests()),
        clock.clone(),
        EngineConfig::default(),
    )
    .unwrap();
    let workflow = Arc::new(model::parse(WAITS, model::Format::Yaml, "waits.yaml").unwrap());
    let mut served = WorkflowDir::default();
    served.insert(Arc::clone(&workflow));
    engine.set_workflows(Arc::new(served));
    let start = || {
        let mut handle = engine
            .start(Arc::clone(&workflow), json!({}), Box::new(Quiet))
            .unwrap();
        handle.recorded().unwrap();
        handle.id().to_owned()
    };
    let first = start();
    let definition = store.run(&first).unwrap().unwrap().definition;
    engine.cancel(&first).unwrap();
    for _ in 0..500 {
        if store.run(&first).unwrap().unwrap().state.is_terminal() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let retention = Retention::default();
    // Past its hour the run goes; the next pass finds its definition
    // unused, and marks it; a minute on, a pass would delete it.
    clock.advance(Duration::from_secs(2 * 3600));
    assert_eq!(engine.sweep(&retention, false).unwrap().runs, 1);
    assert_eq!(engine.sweep(&retention, false).unwrap().blobs, 0);
    clock.advance(Duration::from_secs(120));
    assert_eq!(engine.sweep(&retention, true).unwrap().blobs, 1);

    // A pass reads every run; then a run of the same definition starts,
    // before the pass deletes what it found unused.
    let mut pass = Pass::new();
    while pass.reading() != "blobs" {
        engine.sweep_page(&mut pass, &retention, false).unwrap();
    }
    let second = start();
    let swept = engine.sweep_page(&mut pass, &retention, false).unwrap();
    assert_eq!(
        pass.reading(),
        "snapshots",
        "revisions and blobs are one page"
    );
    assert_eq!(swept.blobs, 0, "{swept:?}");
    assert!(store.definition(&definition).unwrap().is_some());
    // And later passes see the run, which needs it.
    clock.advance(Duration::from_secs(120));
    assert_eq!(engine.sweep(&retention, false).unwrap().blobs, 0);
    assert!(store.definition(&definition).unwrap().is_some());
    assert!(!store.run(&second).unwrap().unwrap().state.is_terminal());
}
