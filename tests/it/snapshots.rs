//! Snapshot stores and expiry: a run reads the revision of each store
//! pinned at its start, while new ones are published and across a
//! restart; `revision: latest` reads the newest at each call; entries and
//! key-value keys past their time to live read as absent on the engine's
//! (simulated) clock, and the sweeper removes them; the sweeper never
//! deletes a revision a run that has not ended pins. Bad files, bad TTLs
//! and unknown stores get clear errors, and leave nothing a run can read.

use std::sync::Arc;
use std::time::Duration;

use crate::common::server::{run_ended, serve_with, start_run};
use crate::common::{Scratch, guests, wait};
use serde_json::{Value, json};
use weft::engine::snapshots::{FileFormat, PublishOptions};
use weft::engine::sweep::Retention;
use weft::engine::{EngineConfig, Quiet};
use weft::store::{RunRecord, RunState};
use weft::{
    Engine, PluginDir, RedbStore, Runtime, RuntimeConfig, SimClock, Store, Timestamp, WorkflowDir,
    model,
};

/// 2026-11-30T00:00:00Z.
const T0: Timestamp = Timestamp(1_795_996_800_000);

struct Host {
    _dir: tempfile::TempDir,
    store: Arc<RedbStore>,
    clock: Arc<SimClock>,
}

impl Host {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(RedbStore::open(dir.path().join("weft.redb")).unwrap());
        Self {
            _dir: dir,
            store,
            clock: Arc::new(SimClock::new(T0)),
        }
    }

    /// An engine on this host's store and clock: a process.
    fn engine(&self) -> Engine {
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        Engine::with_config(
            self.store.clone(),
            PluginDir::new(runtime, guests()),
            self.clock.clone(),
            EngineConfig::default(),
        )
        .unwrap()
    }

    fn publish(&self, engine: &Engine, name: &str, text: &str, format: FileFormat, keep: u32) {
        engine
            .publish_snapshot(
                "default",
                name,
                text.as_bytes(),
                format,
                "test",
                &PublishOptions {
                    keep,
                    ..PublishOptions::default()
                },
            )
            .unwrap();
    }

    fn start(&self, engine: &Engine, text: &str, input: Value) -> String {
        let workflow = Arc::new(model::parse(text, model::Format::Yaml, "wf.yaml").unwrap());
        let mut served = WorkflowDir::default();
        served.insert(Arc::clone(&workflow));
        engine.set_workflows(Arc::new(served));
        let mut handle = engine.start(workflow, input, Box::new(Quiet)).unwrap();
        handle.recorded().unwrap();
        handle.id().to_owned()
    }

    fn run(&self, id: &str) -> RunRecord {
        self.store.run(id).unwrap().unwrap()
    }

    fn wait_for(&self, id: &str, what: &str, done: impl Fn(&RunRecord) -> bool) -> RunRecord {
        let look = || {
            let run = self.run(id);
            if done(&run) {
                Ok(run)
            } else {
                Err(Box::new(run))
            }
        };
        wait(
            Duration::from_secs(30),
            Duration::from_millis(5),
            look,
            |run| format!("run never {what}: {run:?}"),
        )
    }

    fn ended(&self, id: &str) -> RunRecord {
        let run = self.wait_for(id, "ended", |run| run.state.is_terminal());
        assert_eq!(run.state, RunState::Succeeded, "{run:?}");
        run
    }

    /// Runs `text` on `input` to its end: its outputs.
    fn outputs(&self, engine: &Engine, text: &str, input: Value) -> Value {
        let id = self.start(engine, text, input);
        self.ended(&id).outputs.unwrap()
    }
}

const QUOTE: &str = r#"
id: quote
snapshots: [prices]
steps:
  - { id: first, uses: lookup, with: { store: prices, key: sku-1 } }
  - { id: nap, sleep: 1h }
  - { id: second, uses: lookup, with: { store: prices, key: sku-1 } }
outputs: { first: "${{ steps.first.output.value }}", second: "${{ steps.second.output.value }}" }
"#;

const LATEST: &str = r#"
id: quote_latest
snapshots: [{ name: prices, revision: latest }]
steps:
  - { id: first, uses: lookup, with: { store: prices, key: sku-1 } }
  - { id: nap, sleep: 1h }
  - { id: second, uses: lookup, with: { store: prices, key: sku-1 } }
outputs: { first: "${{ steps.first.output.value }}", second: "${{ steps.second.output.value }}" }
"#;

#[test]
fn a_run_reads_the_revision_pinned_at_its_start_while_a_new_one_is_published_and_across_a_restart()
{
    let host = Host::new();
    let engine = host.engine();
    host.publish(
        &engine,
        "prices",
        r#"{"sku-1": 10, "sku-2": 20}"#,
        FileFormat::Json,
        5,
    );
    let pinned = host.start(&engine, QUOTE, json!({}));
    let latest = host.start(&engine, LATEST, json!({}));
    for id in [&pinned, &latest] {
        host.wait_for(id, "suspended", |run| run.suspended);
    }
    assert_eq!(
        host.run(&pinned).snapshots,
        [("prices".to_owned(), 1)].into()
    );
    assert!(host.run(&latest).snapshots.is_empty());
    drop(engine); // the process ends

    // The next process publishes a new revision, then the runs go on.
    let engine = host.engine();
    host.publish(&engine, "prices", r#"{"sku-1": 12}"#, FileFormat::Json, 5);
    assert_eq!(engine.arm_timers().unwrap(), 2);
    host.clock.advance(Duration::from_secs(3600));
    assert_eq!(
        host.ended(&pinned).outputs,
        Some(json!({ "first": 10, "second": 10 })),
        "a pinned run sees one revision from start to end"
    );
    assert_eq!(
        host.ended(&latest).outputs,
        Some(json!({ "first": 10, "second": 12 })),
        "revision: latest reads the newest at each call"
    );
    // A run started now pins revision 2.
    let next = host.start(&engine, QUOTE, json!({}));
    host.wait_for(&next, "suspended", |run| run.suspended);
    assert_eq!(host.run(&next).snapshots, [("prices".to_owned(), 2)].into());
    host.clock.advance(Duration::from_secs(3600));
    assert_eq!(
        host.ended(&next).outputs,
        Some(json!({ "first": 12, "second": 12 }))
    );
}

const ALL: &str = r#"
id: all
snapshots: [flags]
steps:
  - { id: read, uses: lookup, with: { store: flags, prefix: "" } }
outputs: "${{ steps.read.output.values }}"
"#;

#[test]
fn an_entry_past_its_ttl_reads_as_absent_on_the_engine_s_clock_and_the_sweeper_removes_it() {
    let host = Host::new();
    let engine = host.engine();
    let lines = concat!(
        r#"{"key": "flash-sale", "value": {"off": 30}, "ttl": "1h"}"#,
        "\n",
        r#"{"key": "base", "value": true}"#,
        "\n",
        r#"{"key": "soon", "value": 1, "ttl": 90}"#,
        "\n",
    );
    host.publish(&engine, "flags", lines, FileFormat::Lines, 5);
    assert_eq!(
        host.outputs(&engine, ALL, json!({})),
        json!({ "base": true, "flash-sale": { "off": 30 }, "soon": 1 })
    );
    host.clock.advance(Duration::from_secs(91));
    assert_eq!(
        host.outputs(&engine, ALL, json!({})),
        json!({ "base": true, "flash-sale": { "off": 30 } })
    );
    host.clock.advance(Duration::from_secs(3600));
    assert_eq!(
        host.outputs(&engine, ALL, json!({})),
        json!({ "base": true })
    );
    let swept = engine.sweep(&Retention::default(), false).unwrap();
    assert_eq!(swept.snapshot_entries, 2, "{swept:?}");
    let record = host.store.snapshots(Some("flags")).unwrap().pop().unwrap();
    let left = host
        .store
        .snapshot_entries(&record.data, None, "", 10)
        .unwrap();
    assert_eq!(
        left.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        ["base"]
    );
}

const HITS: &str = r#"
id: hits
steps:
  - { id: count, uses: counter, with: "${{ inputs }}" }
outputs: "${{ steps.count.output.value }}"
"#;

#[test]
fn a_key_set_with_a_ttl_reads_as_absent_once_it_expires_on_the_engine_s_clock() {
    let host = Host::new();
    let engine = host.engine();
    let count = |input: Value| host.outputs(&engine, HITS, input);
    assert_eq!(count(json!({ "key": "window", "ttl": 60 })), json!(1));
    host.clock.advance(Duration::from_secs(30));
    assert_eq!(count(json!({ "key": "window", "ttl": 60 })), json!(2));
    assert_eq!(count(json!({ "key": "forever" })), json!(1));
    // The second write set the expiry 60 s from its own time.
    host.clock.advance(Duration::from_secs(59));
    assert_eq!(count(json!({ "key": "window", "by": 0 })), json!(2));
    host.clock.advance(Duration::from_secs(2));
    assert_eq!(
        count(json!({ "key": "window", "by": 0 })),
        json!(0),
        "expired"
    );
    assert_eq!(
        count(json!({ "key": "window", "ttl": 60 })),
        json!(1),
        "counts afresh"
    );
    assert_eq!(count(json!({ "key": "forever", "by": 0 })), json!(1));
    let listed = host
        .store
        .kv_list(
            "workflow/hits",
            "",
            10,
            weft::Clock::now(host.clock.as_ref()).0,
        )
        .unwrap();
    assert_eq!(listed, ["forever", "window"]);
    host.clock.advance(Duration::from_secs(61));
    let listed = host
        .store
        .kv_list(
            "workflow/hits",
            "",
            10,
            weft::Clock::now(host.clock.as_ref()).0,
        )
        .unwrap();
    assert_eq!(listed, ["forever"], "an expired key is not listed");
    // The sweeper drops the expired key's row; a key made again counts
    // from 0, at a version above the one that expired.
    let expired = host.store.kv_get("workflow/hits", "window").unwrap();
    assert!(expired.value.is_some() && expired.expires_at.is_some());
    let swept = engine.sweep(&Retention::default(), false).unwrap();
    assert_eq!(swept.tombstones, 1, "{swept:?}");
    assert_eq!(
        host.store
            .kv_get("workflow/hits", "window")
            .unwrap()
            .version,
        0
    );
    assert_eq!(count(json!({ "key": "window" })), json!(1));
    let again = host.store.kv_get("workflow/hits", "window").unwrap();
    assert!(
        again.version > expired.version,
        "{again:?} after {expired:?}"
    );
    assert_eq!(count(json!({ "key": "forever", "by": 0 })), json!(1));
}

#[test]
fn the_sweeper_keeps_a_revision_a_run_pins_and_deletes_replaced_ones_past_keep() {
    let host = Host::new();
    let engine = host.engine();
    let big: String = {
        let entries: Vec<String> = (0..700).map(|i| format!("\"k{i:04}\": {i}")).collect();
        format!("{{\"sku-1\": 10, {}}}", entries.join(", "))
    };
    host.publish(&engine, "prices", &big, FileFormat::Json, 1);
    let pinned = host.start(&engine, QUOTE, json!({}));
    host.wait_for(&pinned, "suspended", |run| run.suspended);
    host.publish(&engine, "prices", r#"{"sku-1": 11}"#, FileFormat::Json, 1);
    host.publish(&engine, "prices", r#"{"sku-1": 12}"#, FileFormat::Json, 1);
    let revisions = |store: &RedbStore| -> Vec<u32> {
        store
            .snapshots(Some("prices"))
            .unwrap()
            .iter()
            .map(|r| r.revision)
            .collect()
    };
    // Within a minute of being replaced, nothing goes.
    let swept = engine.sweep(&Retention::default(), false).unwrap();
    assert_eq!(swept.snapshot_revisions, 0);
    host.clock.advance(Duration::from_secs(120));
    let swept = engine.sweep(&Retention::default(), false).unwrap();
    assert_eq!(swept.snapshot_revisions, 1, "{swept:?}");
    assert_eq!(
        revisions(&host.store),
        [1, 3],
        "revision 1 is pinned by a live run"
    );
    // The run reads its revision to the end.
    host.clock.advance(Duration::from_secs(3600));
    assert_eq!(
        host.ended(&pinned).outputs,
        Some(json!({ "first": 10, "second": 10 }))
    );
    // Ended, it pins revision 1 until it is deleted itself.
    let swept_ended = engine.sweep(&Retention::default(), false).unwrap();
    assert_eq!(swept_ended.snapshot_revisions, 0, "{swept_ended:?}");
    host.clock.advance(Duration::from_secs(31 * 86_400));
    let mut total = weft::engine::sweep::Swept::default();
    for _ in 0..3 {
        total += engine.sweep(&Retention::default(), false).unwrap();
    }
    assert_eq!(total.snapshot_revisions, 1);
    assert_eq!(revisions(&host.store), [3]);
    // Every entry of the deleted revisions went, page by page (701 + 1),
    // and their data's rows with them.
    assert_eq!(total.snapshot_entries + swept.snapshot_entries, 702);
    let data = host.store.snapshot_data().unwrap();
    assert_eq!(data.len(), 1, "{data:?}");
}

#[test]
fn an_ended_run_pins_its_revision_until_it_is_deleted_so_a_retry_reads_it() {
    let host = Host::new();
    let engine = host.engine();
    host.publish(&engine, "prices", r#"{"sku-1": 10}"#, FileFormat::Json, 1);
    let run = host.start(&engine, QUOTE, json!({}));
    host.wait_for(&run, "suspended", |run| run.suspended);
    engine.cancel(&run).unwrap();
    host.wait_for(&run, "cancelled", |run| run.state == RunState::Cancelled);
    host.publish(&engine, "prices", r#"{"sku-1": 11}"#, FileFormat::Json, 1);
    host.publish(&engine, "prices", r#"{"sku-1": 12}"#, FileFormat::Json, 1);
    // Past the margin and `keep`: only the cancelled run's pin holds
    // revision 1.
    host.clock.advance(Duration::from_secs(120));
    let swept = engine.sweep(&Retention::default(), false).unwrap();
    assert_eq!(swept.snapshot_revisions, 1, "{swept:?}");
    let revisions: Vec<u32> = host
        .store
        .snapshots(Some("prices"))
        .unwrap()
        .iter()
        .map(|r| r.revision)
        .collect();
    assert_eq!(revisions, [1, 3], "the ended run pins revision 1");
    // Its retry reads the revision it pinned, not the newest.
    let mut retried = engine
        .retry(&run, Some("nap"), "test", Box::new(Quiet))
        .unwrap();
    retried.recorded().unwrap();
    let records = host.run(&run).step_records;
    host.wait_for(&run, "asleep again", |r| {
        r.suspended && r.step_records > records
    });
    host.clock.advance(Duration::from_secs(3600));
    assert_eq!(
        host.ended(&run).outputs,
        Some(json!({ "first": 10, "second": 10 }))
    );
    // Once the run itself is deleted, its revision goes.
    host.clock.advance(Duration::from_secs(31 * 86_400));
    let mut total = weft::engine::sweep::Swept::default();
    for _ in 0..3 {
        total += engine.sweep(&Retention::default(), false).unwrap();
    }
    assert_eq!((total.runs, total.snapshot_revisions), (1, 1), "{total:?}");
}

#[test]
fn a_bad_file_is_refused_naming_its_line_and_leaves_no_revision() {
    let scratch = Scratch::new(&["lookup"]);
    let refused = |name: &str, text: &str, more: &[&str]| {
        let file = scratch.file(name, text);
        let mut args = vec!["snapshots", "publish", "prices", file.to_str().unwrap()];
        args.extend_from_slice(more);
        let run = scratch.run(&args);
        assert_eq!(run.code, Some(2), "{run:?}");
        run.stderr
    };
    let e = refused("a.json", "{\"a\": 1,\n \"b\": ]\n}", &[]);
    assert!(e.contains("a.json:2:") && e.contains("not JSON"), "{e}");
    let e = refused(
        "b.jsonl",
        "{\"key\": \"a\", \"value\": 1}\n{\"key\": \"b\", \"value\": 2}\nnot json\n",
        &[],
    );
    assert!(e.contains("b.jsonl:3:") && e.contains("not JSON"), "{e}");
    let e = refused(
        "c.jsonl",
        "{\"key\": \"a\", \"value\": 1}\n{\"key\": \"b\", \"value\": 2}\n{\"key\": \"a\", \"value\": 3}\n",
        &[],
    );
    assert!(e.contains("c.jsonl:3: key `a` appears twice"), "{e}");
    // A duplicate pages apart is caught by the store, one in the same page
    // by the publish; either in the middle of a file names its line.
    let mut many: Vec<String> = (0..4500).map(|i| format!("\"k{i}\": {i}")).collect();
    many.insert(3000, "\"k7\": 0".to_owned());
    let e = refused("d.json", &format!("{{\n{}\n}}", many.join(",\n")), &[]);
    assert!(e.contains("d.json:3002: key `k7` appears twice"), "{e}");
    let e = refused(
        "d2.json",
        "{\"a\": 1,\n\"b\": 2,\n\"a\": 3,\n\"c\": 4}",
        &[],
    );
    assert!(e.contains("d2.json:3: key `a` appears twice"), "{e}");
    let long = "x".repeat(70_000);
    let e = refused("d3.json", &format!("{{\"a\": \"{long}\", \"b\": 1}}"), &[]);
    assert!(e.contains("d3.json:1:") && e.contains("65536"), "{e}");
    let e = refused(
        "d4.jsonl",
        &format!("{{\"key\": \"a\", \"value\": \"{long}\"}}\n"),
        &[],
    );
    assert!(e.contains("d4.jsonl:1:"), "{e}");
    let huge = "x".repeat(3 << 20);
    let e = refused("d5.json", &format!("{{\"a\": \"{huge}\"}}"), &[]);
    assert!(
        e.contains("d5.json:1:") && e.contains("over 65536 bytes"),
        "{e}"
    );
    let e = refused(
        "d6.jsonl",
        "{\"key\": \"a\", \"value\": 1, \"ttl\": 0.0001}\n",
        &[],
    );
    assert!(
        e.contains("d6.jsonl:1:") && e.contains("at least 1ms"),
        "{e}"
    );
    let e = refused(
        "e.jsonl",
        "{\"key\": \"a\", \"value\": 1, \"ttl\": -5}\n",
        &[],
    );
    assert!(e.contains("e.jsonl:1:") && e.contains("negative"), "{e}");
    let e = refused(
        "f.jsonl",
        "{\"key\": \"a\", \"value\": 1, \"ttl\": \"soon\"}\n",
        &[],
    );
    assert!(e.contains("f.jsonl:1:") && e.contains("`soon`"), "{e}");
    let e = refused("g.json", "{\"a\": 1}", &["--ttl=-1h"]);
    assert!(e.contains("--ttl"), "{e}");
    let e = refused("h.json", "[1, 2]", &[]);
    assert!(e.contains("h.json:1:"), "{e}");
    let listed = scratch.run(&["snapshots", "list", "--json"]);
    assert_eq!(listed.code, Some(0), "{listed:?}");
    assert_eq!(
        listed.json()["snapshots"],
        json!([]),
        "nothing was published"
    );
    // A workflow that names a store nobody published does not start.
    let wf = scratch.file(
        "wf.yaml",
        "id: wf\nsnapshots: [nope]\nsteps:\n  - { id: a, uses: lookup, with: { store: nope, key: a } }\n",
    );
    let run = scratch.run(&["run", wf.to_str().unwrap()]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr.contains("no snapshot store `nope` is published"),
        "{}",
        run.stderr
    );
}

const QUERY: &str = "id: q\nsnapshots: [rates]\nsteps:\n  - { id: a, uses: lookup, with: { store: rates, key: eur } }\n";

#[test]
fn publish_list_show_and_diff_from_the_cli_then_through_a_server() {
    let scratch = Scratch::new(&["lookup"]);
    let one = scratch.file("one.json", r#"{"a": 1, "b": {"x": true}, "c": "same"}"#);
    let two = scratch.file(
        "two.jsonl",
        "{\"key\": \"a\", \"value\": 2}\n{\"key\": \"c\", \"value\": \"same\"}\n{\"key\": \"d\", \"value\": null, \"ttl\": \"1d\"}\n",
    );
    for (file, revision) in [(&one, 1), (&two, 2)] {
        let run = scratch.run(&["snapshots", "publish", "prices", file.to_str().unwrap()]);
        assert_eq!(run.code, Some(0), "{run:?}");
        assert!(
            run.stdout.contains(&format!(
                "published snapshot store `prices` revision {revision}"
            )),
            "{}",
            run.stdout
        );
    }
    let listed = scratch.run(&["snapshots", "list", "--json"]).json();
    assert_eq!(listed["snapshots"][0]["store"], "prices");
    assert_eq!(listed["snapshots"][0]["revision"], 2);
    assert_eq!(listed["snapshots"][0]["revisions"], 2);
    let shown = scratch
        .run(&["snapshots", "show", "prices", "--revision", "1", "--json"])
        .json();
    assert_eq!(shown["snapshot"]["entries"], 3);
    assert_eq!(
        shown["entries"][1],
        json!({ "key": "b", "value": { "x": true }, "expires_at": null })
    );
    let diff = scratch.run(&["snapshots", "diff", "prices", "1", "2"]);
    assert_eq!(diff.code, Some(0), "{diff:?}");
    assert!(diff.stdout.contains("~ a: 1 -> 2"), "{}", diff.stdout);
    assert!(
        diff.stdout.contains("- b = {\"x\":true}"),
        "{}",
        diff.stdout
    );
    assert!(diff.stdout.contains("+ d = null"), "{}", diff.stdout);
    assert!(
        diff.stdout.contains("1 added, 1 removed, 1 changed"),
        "{}",
        diff.stdout
    );
    // Publishing the same file again makes a revision with the same digest.
    let again = scratch.run(&["snapshots", "publish", "prices", one.to_str().unwrap()]);
    assert_eq!(again.code, Some(0), "{again:?}");
    let revisions = scratch
        .run(&["snapshots", "show", "prices", "--json"])
        .json();
    let digests: Vec<&Value> = revisions["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["digest"])
        .collect();
    assert_eq!(digests[0], digests[2]);
    assert_ne!(digests[0], digests[1]);

    // Through a running server, which holds the store.
    let host = serve_with(&scratch, 0, &[]);
    let (status, body) = host.send("/v1/workflows", "application/yaml", QUERY.as_bytes());
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "unknown_snapshot");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no snapshot store `rates`"),
        "{body}"
    );
    let (status, body) = host.send(
        "/v1/snapshots/rates",
        "application/json",
        br#"{"eur": 1.08}"#,
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["snapshot"]["revision"], 1);
    let (status, body) = host.send(
        "/v1/snapshots/rates",
        "application/json",
        b"{\"eur\": 1.08,\n\"eur\": 2,\n\"usd\": 1}",
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "duplicate_key");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("request body:2: key `eur`"),
        "{body}"
    );
    let (status, body) = host.send("/v1/workflows", "application/yaml", QUERY.as_bytes());
    assert_eq!(status, 201, "{body}");
    let id = start_run(&host, "q", &json!({}));
    let ended = run_ended(&host, &id);
    assert_eq!(ended["run"]["state"], "succeeded", "{ended}");
    // The CLI goes through the server that holds the store.
    let run = scratch.run(&["snapshots", "publish", "rates", two.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let (status, body) = host.call("GET", "/v1/snapshots", None);
    assert_eq!(status, 200, "{body}");
    let stores: Vec<&str> = body["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["store"].as_str().unwrap())
        .collect();
    assert_eq!(stores, ["prices", "rates"]);
    let (status, body) = host.call("GET", "/v1/snapshots/rates/diff?from=1&to=2", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["added"].as_u64(), body["removed"].as_u64()),
        (Some(3), Some(1))
    );
}
