//! `subflow`: child runs, started through the outbox, waited for by their
//! parent step, and carried across a `kill -9`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use std::sync::Arc;

use crate::common::{Scratch, guests};
use serde_json::{Value, json};
use weft::engine::Quiet;
use weft::store::{
    DefinitionRecord, DeliveryRecord, Effect, MessageRecord, OutboxRecord, Refused, RunFilter,
    RunRecord, RunState, StepRecord, StoreError, SubscriptionRecord, TimerRecord, Write,
};
use weft::{Engine, PluginDir, RedbStore, Runtime, RuntimeConfig, Store, SystemClock, WorkflowDir};

const CHILD: &str = r#"
id: pricing
inputs:
  type: object
  required: [qty]
  properties: { qty: { type: integer } }
steps:
  - { id: price, uses: echo, with: "${{ {'total': inputs.qty * 3} }}" }
outputs: "${{ steps.price.output }}"
"#;

fn show(scratch: &Scratch, id: &str) -> Value {
    let shown = scratch.run(&["runs", "show", id, "--json"]);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    shown.json()
}

#[test]
fn a_child_run_returns_its_outputs_to_the_parent_step() {
    let scratch = Scratch::new(&["echo"]);
    scratch.file("pricing.yaml", CHILD);
    let parent = scratch.file(
        "order.yaml",
        r#"
id: order
steps:
  - id: price
    subflow: pricing
    with: { qty: "${{ inputs.qty }}" }
  - { id: confirm, uses: echo, with: "${{ {'charged': steps.price.output.total} }}" }
"#,
    );
    let run = scratch.run(&["run", parent.to_str().unwrap(), "--input", r#"{"qty": 4}"#]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json(), json!({ "charged": 12 }));

    // The parent's step records the child it started; the child records
    // its parent.
    let parent_id = run.run_id();
    let shown = show(&scratch, &parent_id);
    let steps = shown["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3, "{steps:?}");
    let child_id = steps[0]["child"].as_str().unwrap().to_owned();
    assert!(steps[0].get("output").is_none(), "{steps:?}");
    assert_eq!(steps[1]["child"], json!(child_id));
    assert_eq!(steps[1]["output"], json!({ "total": 12 }));
    assert_eq!(steps[1]["attempt"], 1);

    let child = show(&scratch, &child_id);
    assert_eq!(child["run"]["workflow"], "pricing");
    assert_eq!(child["run"]["state"], "succeeded");
    assert_eq!(child["run"]["input"], json!({ "qty": 4 }));
    assert_eq!(child["run"]["parent"]["run"], json!(parent_id));
    assert_eq!(child["run"]["parent"]["path"], "price");
}

#[test]
fn a_failed_child_fails_the_step_and_a_catch_sees_why() {
    let scratch = Scratch::new(&["echo"]);
    scratch.file("pricing.yaml", CHILD);
    let parent = scratch.file(
        "order.yaml",
        r#"
id: order
steps:
  - id: price
    subflow: pricing
    with: { qty: "${{ inputs.qty }}" }
    catch:
      - if: "error.code == 'invalid_input'"
        steps: [ { id: fallback, uses: echo, with: "${{ {'why': error.code} }}" } ]
"#,
    );
    // The child refuses its input: the step fails with `invalid_input`,
    // and no child is recorded.
    let run = scratch.run(&[
        "run",
        parent.to_str().unwrap(),
        "--input",
        r#"{"qty": "many"}"#,
    ]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json(), json!({ "why": "invalid_input" }));

    // A child that fails at a step: `subflow_failed`, naming the child.
    scratch.file(
        "broken.yaml",
        "id: broken\nsteps:\n  - { id: boom, uses: echo, with: \"${{ 1 / 0 }}\" }\n",
    );
    let parent = scratch.file(
        "caller.yaml",
        "id: caller\nsteps:\n  - { id: call, subflow: broken }\n",
    );
    let run = scratch.run(&["run", parent.to_str().unwrap()]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr
            .contains("failed at step `call`: subflow_failed: child run "),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("of `broken` failed at step `boom`: expression:"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_unknown_subflow_is_refused_before_anything_is_stored() {
    let scratch = Scratch::new(&["echo"]);
    let parent = scratch.file(
        "lonely.yaml",
        "id: lonely\nsteps:\n  - { id: a, uses: echo, with: 1 }\n  - { id: call, subflow: nowhere }\n",
    );
    let run = scratch.run(&["run", parent.to_str().unwrap()]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr
            .contains("lonely.yaml:4: step `call`: subflow: no workflow `nowhere` is deployed"),
        "{}",
        run.stderr
    );
    let listed = scratch.run(&["runs", "list", "--json"]);
    assert_eq!(listed.json(), json!([]));
}

#[test]
fn a_workflow_may_start_itself_down_to_a_depth_limit() {
    let scratch = Scratch::new(&["echo"]);
    let rec = scratch.file(
        "rec.yaml",
        r#"
id: rec
steps:
  - id: down
    if: "inputs.n > 0"
    subflow: rec
    with: { n: "${{ inputs.n - 1 }}" }
outputs: "${{ inputs.n == 0 ? 0 : steps.down.output + 1 }}"
"#,
    );
    let run = scratch.run(&["run", rec.to_str().unwrap(), "--input", r#"{"n": 3}"#]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json(), json!(3));

    let run = scratch.run(&["run", rec.to_str().unwrap(), "--input", r#"{"n": 40}"#]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains(
            "subflow_depth: starting `rec` would nest child runs 33 deep; the limit is 32"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn kill_9_while_a_child_runs_then_resume_finishes_both_once() {
    let scratch = Scratch::new(&["echo", "spin"]);
    scratch.file(
        "slow.yaml",
        "id: slow\nsteps:\n  - { id: first, uses: echo, with: \"${{ inputs }}\" }\n  - { id: stuck, uses: spin, with: { ms: 3000 }, timeout: 5m }\noutputs: \"${{ steps.first.output }}\"\n",
    );
    let parent = scratch.file(
        "outer.yaml",
        "id: outer\nsteps:\n  - { id: call, subflow: slow, with: { n: 7 } }\n  - { id: done, uses: echo, with: \"${{ steps.call.output }}\" }\n",
    );
    let mut process = scratch
        .weft()
        .args(["run", parent.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    // Wait until the child has committed its first step, then kill.
    let child = scratch.wait_for_newest_run("slow", "got going", |run| run["next_step"] == 1);
    process.kill().unwrap(); // SIGKILL
    process.wait().unwrap();
    let child_id = child["id"].as_str().unwrap().to_owned();
    let parent_id = child["parent"]["run"].as_str().unwrap().to_owned();

    let resumed = scratch.run(&["runs", "resume", "--all"]);
    assert_eq!(resumed.code, Some(0), "{resumed:?}");

    let outer = show(&scratch, &parent_id);
    assert_eq!(outer["run"]["state"], "succeeded", "{outer}");
    assert_eq!(outer["run"]["outputs"], json!({ "n": 7 }));
    let slow = show(&scratch, &child_id);
    assert_eq!(slow["run"]["state"], "succeeded", "{slow}");
    // One child, whose first step committed once; the parent's step
    // records one start and one result, both naming that child.
    let listed = scratch.run(&["runs", "list", "--json", "--workflow", "slow"]);
    assert_eq!(listed.json().as_array().unwrap().len(), 1);
    let firsts = slow["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["step_id"] == "first")
        .count();
    assert_eq!(firsts, 1);
    let calls: Vec<_> = outer["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["step_id"] == "call")
        .map(|s| s["child"].clone())
        .collect();
    assert_eq!(calls, [json!(child_id), json!(child_id)]);
}

/// The store with a disk that fails every transaction holding one kind of
/// write, the one that records a child run (the whole transaction, as a
/// disk fails it); every other transaction goes to the real redb file.
#[derive(Debug)]
struct NoChildren(Arc<RedbStore>);

impl Store for NoChildren {
    fn apply(&self, writes: &[&Write]) -> Result<Vec<Result<(), Refused>>, StoreError> {
        // The transaction fails as a whole, as a disk's failure fails it.
        if writes.iter().any(|w| matches!(w, Write::StartRun { .. })) {
            return Err(StoreError::Commit("the disk refused this write".to_owned()));
        }
        self.0.apply(writes)
    }
    fn runs_from(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<weft::store::RunsFrom, StoreError> {
        self.0.runs_from(after, limit)
    }
    fn marks(&self) -> Result<Vec<(String, weft::Timestamp)>, StoreError> {
        self.0.marks()
    }
    fn digests(&self, blob: weft::store::Blob) -> Result<Vec<String>, StoreError> {
        self.0.digests(blob)
    }
    fn messages_from(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<weft::store::MessageRecord>, StoreError> {
        self.0.messages_from(after, limit)
    }
    fn kv_from(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<weft::store::KvRow>, StoreError> {
        self.0.kv_from(after, limit)
    }
    fn parked(&self, limit: usize) -> Result<Vec<(String, String)>, StoreError> {
        self.0.parked(limit)
    }
    fn claim_parked(
        &self,
        host: &str,
        n: usize,
        rooms: &[(String, usize)],
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.0.claim_parked(host, n, rooms)
    }
    fn run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.0.run(id)
    }
    fn runs(&self, filter: &RunFilter, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        self.0.runs(filter, limit)
    }
    fn steps(&self, id: &str) -> Result<Vec<StepRecord>, StoreError> {
        self.0.steps(id)
    }
    fn running(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.0.running()
    }
    fn definition(&self, digest: &str) -> Result<Option<DefinitionRecord>, StoreError> {
        self.0.definition(digest)
    }
    fn outbox(&self) -> Result<Vec<OutboxRecord>, StoreError> {
        self.0.outbox()
    }
    fn schedules(&self) -> Result<Vec<weft::store::ScheduleRecord>, StoreError> {
        self.0.schedules()
    }
    fn timer_keys(&self) -> Result<Vec<(u64, u64)>, StoreError> {
        self.0.timer_keys()
    }
    fn timer(&self, key: (u64, u64)) -> Result<Option<TimerRecord>, StoreError> {
        self.0.timer(key)
    }
    fn run_timers(&self, id: &str) -> Result<Vec<TimerRecord>, StoreError> {
        self.0.run_timers(id)
    }
    fn component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.0.component(digest)
    }
    fn kv_get(&self, space: &str, key: &str) -> Result<weft::runtime::Versioned, StoreError> {
        self.0.kv_get(space, key)
    }
    fn kv_list(
        &self,
        space: &str,
        prefix: &str,
        limit: usize,
        now: u64,
    ) -> Result<Vec<String>, StoreError> {
        self.0.kv_list(space, prefix, limit, now)
    }
    fn subscriptions(&self, channel: Option<&str>) -> Result<Vec<SubscriptionRecord>, StoreError> {
        self.0.subscriptions(channel)
    }
    fn subscription(&self, key: &str) -> Result<Option<SubscriptionRecord>, StoreError> {
        self.0.subscription(key)
    }
    fn delivery(&self, id: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        self.0.delivery(id)
    }
    fn message(&self, seq: u64) -> Result<Option<MessageRecord>, StoreError> {
        self.0.message(seq)
    }
    fn queued(
        &self,
        subscription: &str,
        dead: bool,
        after: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        self.0.queued(subscription, dead, after, limit)
    }
    fn dead_letters(&self, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        self.0.dead_letters(limit)
    }
    fn deliveries(&self, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        self.0.deliveries(limit)
    }
    fn run_messages(&self, id: &str) -> Result<Vec<MessageRecord>, StoreError> {
        self.0.run_messages(id)
    }
    fn idempotent_run(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.0.idempotent_run(key)
    }
    fn deployments(
        &self,
        workflow: Option<&str>,
    ) -> Result<Vec<weft::store::DeploymentRecord>, StoreError> {
        self.0.deployments(workflow)
    }
    fn snapshots(
        &self,
        store: Option<&str>,
    ) -> Result<Vec<weft::store::SnapshotRecord>, StoreError> {
        self.0.snapshots(store)
    }

    fn snapshot_entry(
        &self,
        data: &str,
        key: &str,
    ) -> Result<Option<weft::store::SnapshotEntry>, StoreError> {
        self.0.snapshot_entry(data, key)
    }

    fn snapshot_entries(
        &self,
        data: &str,
        after: Option<&str>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, weft::store::SnapshotEntry)>, StoreError> {
        self.0.snapshot_entries(data, after, prefix, limit)
    }

    fn snapshot_keys(
        &self,
        data: &str,
        after: Option<&str>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        self.0.snapshot_keys(data, after, prefix, limit)
    }

    fn snapshot_data(&self) -> Result<Vec<(String, weft::store::SnapshotData)>, StoreError> {
        self.0.snapshot_data()
    }

    fn plugins(&self) -> Result<Vec<weft::store::PluginRecord>, StoreError> {
        self.0.plugins()
    }

    fn lease(&self, id: &str) -> Result<Option<weft::store::Lease>, StoreError> {
        self.0.lease(id)
    }

    fn hosts(&self) -> Result<Vec<weft::store::HostRecord>, StoreError> {
        self.0.hosts()
    }

    fn stored_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        self.0.stored_bytes(tenant)
    }

    fn tenants(&self) -> Result<Vec<weft::store::TenantRecord>, StoreError> {
        self.0.tenants()
    }

    fn token(&self, id: &str) -> Result<Option<weft::store::TokenRecord>, StoreError> {
        self.0.token(id)
    }

    fn tokens(&self) -> Result<Vec<weft::store::TokenRecord>, StoreError> {
        self.0.tokens()
    }

    fn secret(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<weft::store::SecretRecord>, StoreError> {
        self.0.secret(tenant, name)
    }

    fn secrets(&self, tenant: &str) -> Result<Vec<weft::store::SecretRecord>, StoreError> {
        self.0.secrets(tenant)
    }

    fn audit(
        &self,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<Vec<weft::store::AuditRecord>, StoreError> {
        self.0.audit(tenant, limit)
    }

    fn damaged(&self) -> Result<Vec<weft::store::Damaged>, StoreError> {
        self.0.damaged()
    }
}

fn engine_over(store: Arc<dyn Store>, dir: &std::path::Path) -> Engine {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let engine = Engine::new(
        store,
        PluginDir::new(runtime, guests()),
        Arc::new(SystemClock),
    )
    .unwrap();
    let (workflows, errors) = WorkflowDir::load(dir).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    engine.set_workflows(Arc::new(workflows));
    engine
}

#[test]
fn an_open_outbox_row_is_carried_out_once_on_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let defs = dir.path().join("workflows");
    std::fs::create_dir(&defs).unwrap();
    std::fs::write(defs.join("pricing.yaml"), CHILD).unwrap();
    std::fs::write(
        defs.join("order.yaml"),
        "id: order\nsteps:\n  - { id: price, subflow: pricing, with: { qty: 5 } }\n",
    )
    .unwrap();
    let redb = Arc::new(RedbStore::open(dir.path().join("weft.redb")).unwrap());

    // First process: the parent's step commits (with its outbox row), and
    // the write that would record the child fails.
    let engine = engine_over(Arc::new(NoChildren(redb.clone())), &defs);
    let workflow = weft::model::load(defs.join("order.yaml")).unwrap();
    let mut handle = engine
        .start(Arc::new(workflow), Value::Null, Box::new(Quiet))
        .unwrap();
    handle.recorded().unwrap();
    let parent = handle.id().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    while redb.outbox().unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the parent's step never committed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(engine);
    let rows = redb.outbox().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let Effect::StartRun { run: child } = &rows[0].effect;
    assert!(redb.run(&child.id).unwrap().is_none());

    // Next start: the row is carried out before runs resume; the parent
    // resumes, finds its child recorded, and the child runs.
    let engine = engine_over(redb.clone(), &defs);
    assert_eq!(engine.replay_outbox().unwrap(), 1);
    assert!(redb.outbox().unwrap().is_empty());
    let handle = engine.resume(&parent, Box::new(Quiet)).unwrap();
    let done = handle.wait().unwrap();
    assert_eq!(done.outputs, Some(json!({ "total": 15 })), "{done:?}");
    let finished_child = redb.run(&child.id).unwrap().unwrap();
    assert_eq!(finished_child.state, RunState::Succeeded);

    // Carrying the same row out again is refused as done and changes
    // nothing: the child is not reset to its first state.
    let again = Write::start_run(&rows[0]).unwrap();
    let answers = redb.apply(&[&again]).unwrap();
    assert!(
        matches!(&answers[0], Err(weft::store::Refused::Exists(_))),
        "{answers:?}"
    );
    assert_eq!(redb.run(&child.id).unwrap().unwrap(), finished_child);
    let children = redb
        .runs(
            &RunFilter {
                workflow: Some("pricing".to_owned()),
                ..RunFilter::default()
            },
            10,
        )
        .unwrap();
    assert_eq!(children.len(), 1);
}

#[test]
fn a_child_cancelled_while_it_sleeps_fails_its_parent_step() {
    let scratch = Scratch::new(&["echo"]);
    scratch.file("nap.yaml", "id: nap\nsteps:\n  - { id: zz, sleep: 1h }\n");
    let parent = scratch.file(
        "waits.yaml",
        "id: waits\nsteps:\n  - { id: call, subflow: nap }\n",
    );
    let waiting = scratch
        .weft()
        .args(["run", parent.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let child = scratch.wait_for_newest_run("nap", "went to sleep", |run| run["suspended"] == true)
        ["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cancelled = scratch.run(&["runs", "cancel", &child]);
    assert_eq!(cancelled.code, Some(0), "{cancelled:?}");
    let waited = crate::common::Run::from(waiting.wait_with_output().unwrap());
    assert_eq!(waited.code, Some(1), "{waited:?}");
    assert!(
        waited
            .stderr
            .contains("of `nap` ended cancelled: cancelled: the run was cancelled"),
        "{}",
        waited.stderr
    );
}
