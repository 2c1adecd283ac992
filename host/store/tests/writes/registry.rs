//! The registry's writes: `Schedule` (a trigger's row, its version checks
//! and the run a fire starts), `Deploy` and `AddPlugin`.

use std::sync::Arc;

use serde_json::json;
use weft_core::Timestamp;
use weft_store::{
    Blob, DeploymentRecord, PluginRecord, Refused, ScheduleRecord, Store, What, Write, encode,
};

use crate::common::{R, T0, at, create, def, duplicate, exists, keyed, run, stored_run};
use crate::table::{given, put, walk};

const TRIGGER: &str = "wf/nightly";

fn changed(e: &Refused, what: What) -> bool {
    matches!(e, Refused::Changed(found) if *found == what)
}

// Schedule.

fn row(version: u64) -> ScheduleRecord {
    serde_json::from_value(json!({
        "key": TRIGGER, "workflow": "wf", "spec": { "cron": "0 * * * * *" }, "origin": "cli",
        "next_fire": at(60), "version": version,
    }))
    .unwrap()
}

/// The row at `version`, if the stored one is at `expect`, with `start`.
fn trigger(version: u64, expect: Option<u64>, start: Option<Write>) -> Write {
    Write::schedule(&row(version), expect, start)
}

fn unschedule(expect: Option<u64>) -> Write {
    Write::Schedule {
        key: TRIGGER.to_owned(),
        expect,
        row: None,
        start: None,
    }
}

fn paused() -> ScheduleRecord {
    let mut row = row(1);
    row.paused = true;
    row
}

/// The trigger, at version 1.
fn scheduled(s: &dyn Store) {
    put(s, trigger(1, Some(0), None));
}

fn moved_on(_: &dyn Store) -> Write {
    trigger(2, Some(1), None)
}

#[test]
fn schedule() {
    walk(&[
        given("a row expected absent (0)", |_| {})
            .write(|_| trigger(1, Some(0), None))
            .stored(|s| assert_eq!(s.schedules().unwrap(), [row(1)])),
        given("a row expected absent that exists", scheduled)
            .write(|_| trigger(1, Some(0), None))
            .refused(|e| exists(e, What::Schedule(TRIGGER.into()))),
        given("a row at the expected version", scheduled)
            .write(moved_on)
            .stored(|s| assert_eq!(s.schedules().unwrap(), [row(2)])),
        given("a row that moved on", scheduled)
            .then(moved_on)
            .write(|_| trigger(3, Some(1), None))
            .refused(|e| changed(e, What::Schedule(TRIGGER.into()))),
        given("a row without expect: overwritten", scheduled)
            .then(moved_on)
            .write(|_| Write::schedule(&paused(), None, None))
            .stored(|s| assert_eq!(s.schedules().unwrap(), [paused()])),
        given("no row: the trigger goes", scheduled)
            .then(moved_on)
            .write(|_| unschedule(Some(2)))
            .stored(|s| assert!(s.schedules().unwrap().is_empty())),
        given("no row, for a trigger not there", |_| {})
            .write(|_| unschedule(Some(5)))
            .refused(|e| changed(e, What::Schedule(TRIGGER.into()))),
        given("a row with the run its fire starts", scheduled)
            .write(|_| trigger(2, Some(1), Some(create(&run(R)))))
            .stored(|s| {
                assert_eq!(s.schedules().unwrap(), [row(2)]);
                assert_eq!(stored_run(s, R), run(R));
            }),
        given("a row whose start's run exists", scheduled)
            .then(|_| create(&run(R)))
            .write(|_| trigger(2, Some(1), Some(create(&run(R)))))
            .refused(|e| exists(e, What::Run(R.into()))),
        given("a row whose start's key was used", scheduled)
            .then(|_| keyed(create(&run("r0")), "k1"))
            .write(|_| trigger(2, Some(1), Some(keyed(create(&run(R)), "k1"))))
            .refused(|e| duplicate(e, "k1", "r0")),
    ]);
}

// Deploy and AddPlugin.

fn deployment(revision: u32, digest: &str) -> DeploymentRecord {
    serde_json::from_value(json!({
        "workflow": "wf", "revision": revision, "digest": digest, "version": 1,
        "deployed_at": T0, "origin": "api",
    }))
    .unwrap()
}

fn deploy(revision: u32, digest: &str, source: &str) -> Write {
    let record = encode(&deployment(revision, digest));
    let definition = (digest.to_owned(), encode(&def(digest, source)));
    Write::Deploy {
        workflow: "wf".to_owned(),
        revision,
        record,
        definition,
    }
}

fn plugin(added_at: Timestamp) -> PluginRecord {
    serde_json::from_value(json!({
        "name": "echo", "version": "1.0.0", "digest": "c1", "size": 5, "added_at": added_at,
        "origin": "api",
    }))
    .unwrap()
}

fn add_plugin(added_at: Timestamp) -> Write {
    let (name, digest) = ("echo".to_owned(), "c1".to_owned());
    let (record, bytes) = (encode(&plugin(added_at)), Arc::from(&b"bytes"[..]));
    Write::AddPlugin {
        name,
        digest,
        record,
        bytes,
    }
}

#[test]
fn deploy_and_add_plugin() {
    walk(&[
        given("a revision, with its definition", |_| {})
            .write(|_| deploy(1, "d1", "first"))
            .stored(|s| {
                assert_eq!(s.deployments(Some("wf")).unwrap(), [deployment(1, "d1")]);
                assert_eq!(s.definition("d1").unwrap(), Some(def("d1", "first")));
            }),
        given("a revision that exists", |_| {})
            .then(|_| deploy(1, "d1", "first"))
            .write(|_| deploy(1, "d2", "second"))
            .refused(|e| matches!(e, Refused::Exists(What::Revision { revision: 1, .. }))),
        given("the next revision, same definition", |_| {})
            .then(|_| deploy(1, "d1", "first"))
            .write(|_| deploy(2, "d1", "second"))
            .stored(|s| {
                let both = [deployment(1, "d1"), deployment(2, "d1")];
                assert_eq!(s.deployments(Some("wf")).unwrap(), both);
                assert_eq!(s.definition("d1").unwrap(), Some(def("d1", "first")));
            }),
        given("a plugin, with its bytes", |_| {})
            .write(|_| add_plugin(T0))
            .stored(|s| {
                assert_eq!(s.plugins().unwrap(), [plugin(T0)]);
                assert_eq!(s.component("c1").unwrap().unwrap(), b"bytes");
            }),
        given("a plugin added again: refreshed", |_| {})
            .then(|_| add_plugin(T0))
            .write(|_| add_plugin(at(5)))
            .stored(|s| assert_eq!(s.plugins().unwrap(), [plugin(at(5))])),
    ]);
}

// DeleteRevision and DeleteBlob.

fn delete(s: &dyn Store, write: Write) -> Result<(), Refused> {
    s.apply(&[&write]).unwrap().pop().unwrap()
}

fn needed(result: Result<(), Refused>, why: &str) {
    assert!(
        matches!(&result, Err(Refused::Needed { why: said, .. }) if said.contains(why)),
        "expected Needed ({why}), got {result:?}"
    );
}

fn revision(revision: u32) -> Write {
    Write::DeleteRevision {
        workflow: "wf".to_owned(),
        revision,
    }
}

fn mark(blob: Blob, digest: &str, secs: u64) -> Write {
    Write::MarkBlob {
        blob,
        digest: digest.to_owned(),
        at: at(secs),
    }
}

fn blob(blob: Blob, digest: &str, marked_by: u64) -> Write {
    Write::DeleteBlob {
        blob,
        digest: digest.to_owned(),
        marked_by: at(marked_by),
    }
}

/// Run `id`, following definition `d1` and pinning component `c2`.
fn pinning(id: &str) -> Write {
    let mut pinned = run(id);
    pinned.definition = "d1".to_owned();
    let pin = json!({ "name": "file", "version": "1.0.0", "digest": "c2" });
    pinned
        .plugins
        .insert("file".to_owned(), serde_json::from_value(pin).unwrap());
    let component: Arc<[u8]> = Arc::from(&b"bytes"[..]);
    Write::create_run(
        &pinned,
        &def("d1", "first"),
        vec![("c2".to_owned(), component)],
    )
}

#[test]
fn a_replaced_revision_goes_and_a_digest_goes_once_marked_unused_and_not_stored_again() {
    let (_dir, s) = crate::table::open();
    put(&*s, deploy(1, "d1", "first"));
    put(&*s, deploy(2, "d2", "second"));
    put(&*s, add_plugin(T0));
    put(&*s, pinning(R));

    needed(delete(&*s, revision(2)), "newest");
    delete(&*s, revision(1)).unwrap();
    assert_eq!(s.deployments(Some("wf")).unwrap(), [deployment(2, "d2")]);
    assert!(matches!(
        delete(&*s, revision(1)),
        Err(Refused::NotFound(_))
    ));

    // Not marked, or marked after the pass's bound: refused.
    needed(delete(&*s, blob(Blob::Definition, "d1", 100)), "unused");
    put(&*s, mark(Blob::Definition, "d1", 10));
    needed(delete(&*s, blob(Blob::Definition, "d1", 9)), "unused");
    // What refers to it is looked at again.
    put(&*s, mark(Blob::Definition, "d2", 10));
    needed(delete(&*s, blob(Blob::Definition, "d2", 10)), "a revision");
    put(&*s, mark(Blob::Component, "c1", 10));
    needed(
        delete(&*s, blob(Blob::Component, "c1", 10)),
        "registry plugin",
    );

    // A run that stores the digest again takes the mark away.
    put(&*s, mark(Blob::Component, "c2", 10));
    put(&*s, pinning("r2"));
    needed(delete(&*s, blob(Blob::Component, "c2", 100)), "unused");

    // A later mark leaves the first; marked long enough, they go.
    put(&*s, mark(Blob::Component, "c2", 20));
    put(&*s, mark(Blob::Component, "c2", 50));
    needed(delete(&*s, blob(Blob::Component, "c2", 19)), "unused");
    delete(&*s, blob(Blob::Component, "c2", 20)).unwrap();
    // d1 was stored again by those runs: its mark is gone.
    needed(delete(&*s, blob(Blob::Definition, "d1", 100)), "unused");
    put(&*s, mark(Blob::Definition, "d1", 70));
    delete(&*s, blob(Blob::Definition, "d1", 70)).unwrap();
    assert_eq!(s.digests(Blob::Definition).unwrap(), ["d2"]);
    assert_eq!(s.digests(Blob::Component).unwrap(), ["c1"]);
    assert_eq!(s.definition("d1").unwrap(), None);
    assert_eq!(s.component("c2").unwrap(), None);
    // Deleting what is gone is no change; marking it too.
    delete(&*s, blob(Blob::Component, "c2", 100)).unwrap();
    put(&*s, mark(Blob::Component, "c2", 60));
    // Stored again, it is there, and unmarked.
    put(&*s, pinning("r3"));
    needed(delete(&*s, blob(Blob::Component, "c2", 100)), "unused");
}
