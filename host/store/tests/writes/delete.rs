//! `DeleteRun`: an ended run goes with its step records, its cancellation
//! mark and its index of messages, and gives its bytes back; a run that
//! has not ended, or a child whose parent has not, is refused with
//! `Needed` and nothing changes. `DeleteMessage`: a message goes with its
//! deliveries once every one is settled, never the newest. `ForgetKv`: a
//! tombstone goes, and a key made again starts above its version.

use weft_core::KvEffects;
use weft_store::RunState::{Running, Succeeded};
use weft_store::{DeliveryOp, ParentLink, Refused, Store, Write};

use crate::common::{
    R, SPACE, at, cancel, commit, commit_with, create, emission, emit, keyed, queued, run, started,
    stored_run, subscribe, update,
};
use crate::table::{open, put};

fn delete(s: &dyn Store, id: &str) -> Result<(), Refused> {
    s.apply(&[&Write::DeleteRun(id.to_owned())])
        .unwrap()
        .pop()
        .unwrap()
}

fn needed(result: Result<(), Refused>, why: &str) {
    assert!(
        matches!(&result, Err(Refused::Needed { why: said, .. }) if said.contains(why)),
        "expected Needed ({why}), got {result:?}"
    );
}

#[test]
fn an_ended_run_is_deleted_with_its_records_and_gives_its_bytes_back() {
    let (_dir, s) = open();
    put(&*s, create(&run(R)).charged("default", false));
    put(&*s, commit(&*s, R, "a"));
    put(&*s, commit(&*s, R, "b"));
    needed(delete(&*s, R), "it has not ended");
    assert_eq!(stored_run(&*s, R).state, Running);
    assert_eq!(s.steps(R).unwrap().len(), 2);

    put(&*s, update(&*s, Succeeded));
    let before = s.stored_bytes("default").unwrap();
    delete(&*s, R).unwrap();
    assert_eq!(s.run(R).unwrap(), None);
    assert_eq!(s.steps(R).unwrap(), []);
    assert!(s.running().unwrap().is_empty());
    assert!(s.stored_bytes("default").unwrap() < before.max(1));
    assert!(matches!(delete(&*s, R), Err(Refused::NotFound(_))));
    // The id may be used again.
    put(&*s, create(&run(R)));
}

#[test]
fn a_cancelled_run_is_deleted_and_its_mark_stays_for_whoever_still_drives_it() {
    let (_dir, s) = open();
    put(&*s, create(&run(R)));
    let late = commit(&*s, R, "a");
    put(&*s, cancel(&*s, 5));
    delete(&*s, R).unwrap();
    assert_eq!(s.run(R).unwrap(), None);
    let answer = s.apply(&[&late]).unwrap().pop().unwrap();
    assert!(matches!(answer, Err(Refused::RunEnded(_))), "{answer:?}");
}

#[test]
fn a_deleted_runs_idempotency_key_and_message_index_go_with_it() {
    let (_dir, s) = open();
    put(&*s, keyed(create(&run(R)), "k1"));
    let refused = s
        .apply(&[&keyed(create(&run("r2")), "k1")])
        .unwrap()
        .pop()
        .unwrap();
    assert!(
        matches!(refused, Err(Refused::Duplicate { .. })),
        "{refused:?}"
    );
    put(&*s, emit(&*s, vec![emission("m1", "ch")]));
    let seq = s.run_messages(R).unwrap()[0].seq;
    put(&*s, update(&*s, Succeeded));
    delete(&*s, R).unwrap();
    assert_eq!(s.run_messages(R).unwrap(), []);
    assert!(s.message(seq).unwrap().is_some(), "the message stays");
    // The key starts a new run.
    put(&*s, keyed(create(&run("r2")), "k1"));
    assert_eq!(s.idempotent_run("k1").unwrap().as_deref(), Some("r2"));
}

#[test]
fn a_child_is_kept_while_its_parent_has_not_ended() {
    let (_dir, s) = open();
    put(&*s, create(&run("p")));
    let mut child = run("c");
    child.parent = Some(ParentLink {
        run: "p".to_owned(),
        path: "call".to_owned(),
        depth: 1,
    });
    child.state = Succeeded;
    put(&*s, create(&child));
    needed(delete(&*s, "c"), "its parent `p` has not ended");
    assert!(s.run("c").unwrap().is_some());
    let mut parent = stored_run(&*s, "p");
    parent.state = Succeeded;
    put(&*s, Write::update_run(&parent));
    delete(&*s, "c").unwrap();
    delete(&*s, "p").unwrap();
}

fn delete_message(s: &dyn Store, seq: u64) -> Result<(), Refused> {
    s.apply(&[&Write::DeleteMessage(seq)])
        .unwrap()
        .pop()
        .unwrap()
}

#[test]
fn a_message_goes_with_its_deliveries_once_all_are_settled_but_never_the_newest() {
    let (_dir, s) = open();
    started(&*s);
    put(&*s, subscribe("ch/a"));
    put(&*s, subscribe("ch/b").charged("default", false));
    put(
        &*s,
        emit(&*s, vec![emission("m1", "ch")]).charged("default", false),
    );
    put(&*s, emit(&*s, vec![emission("m2", "ch")]));
    let seqs: Vec<u64> = s.run_messages(R).unwrap().iter().map(|m| m.seq).collect();
    let [first, newest] = seqs[..] else {
        panic!("two messages: {seqs:?}")
    };
    needed(
        delete_message(&*s, first),
        "2 of its deliveries not settled",
    );
    let ack = |subscription: &str| {
        for delivery in queued(&*s, subscription, false) {
            if delivery.seq == first {
                let op = DeliveryOp::Ack { at: at(1) };
                put(&*s, Write::Delivery(delivery.id, op));
            }
        }
    };
    ack("ch/a");
    needed(
        delete_message(&*s, first),
        "1 of its deliveries not settled",
    );
    ack("ch/b");
    let deliveries = s.message(first).unwrap().unwrap().deliveries;
    let before = s.stored_bytes("default").unwrap();
    delete_message(&*s, first).unwrap();
    assert_eq!(s.message(first).unwrap(), None);
    for id in deliveries {
        assert_eq!(s.delivery(&id).unwrap(), None, "delivery {id} stayed");
    }
    assert!(s.stored_bytes("default").unwrap() < before);
    assert_eq!(
        s.run_messages(R)
            .unwrap()
            .iter()
            .map(|m| m.seq)
            .collect::<Vec<_>>(),
        [newest]
    );
    assert!(matches!(
        delete_message(&*s, first),
        Err(Refused::NotFound(_))
    ));
    // Settled or not, the newest stays: the next seq follows it.
    for subscription in ["ch/a", "ch/b"] {
        for delivery in queued(&*s, subscription, false) {
            put(
                &*s,
                Write::Delivery(delivery.id, DeliveryOp::Ack { at: at(2) }),
            );
        }
    }
    needed(delete_message(&*s, newest), "newest");
    put(&*s, emit(&*s, vec![emission("m3", "ch")]));
    let third = s.messages_from(newest, 10).unwrap();
    assert_eq!(third.len(), 1);
    assert!(third[0].seq > newest, "{third:?}");
    delete_message(&*s, newest).unwrap();
    assert_eq!(
        s.messages_from(0, 10)
            .unwrap()
            .iter()
            .map(|m| m.seq)
            .collect::<Vec<_>>(),
        [third[0].seq]
    );
}

fn kv_write(s: &dyn Store, read: Option<u64>, value: Option<&str>) -> Result<(), Refused> {
    let effects = KvEffects {
        space: SPACE.to_owned(),
        writes: [("k".to_owned(), value.map(str::to_owned))].into(),
        reads: read.map(|v| ("k".to_owned(), v)).into_iter().collect(),
        expires: Default::default(),
    };
    let write = commit_with(s, R, "kv", |_, _, x| x.kv = Some(effects));
    s.apply(&[&write]).unwrap().pop().unwrap()
}

fn forget(s: &dyn Store, version: u64) {
    let write = Write::ForgetKv {
        space: SPACE.to_owned(),
        key: "k".to_owned(),
        version,
        now: 0,
    };
    put(s, write);
}

#[test]
fn a_forgotten_tombstone_never_lets_a_version_come_back_with_another_value() {
    let (_dir, s) = open();
    started(&*s);
    kv_write(&*s, None, Some("one")).unwrap();
    assert_eq!(s.kv_get(SPACE, "k").unwrap().version, 1);
    // A live key, or a tombstone at another version, is not forgotten.
    forget(&*s, 1);
    assert_eq!(s.kv_get(SPACE, "k").unwrap().value.as_deref(), Some("one"));
    kv_write(&*s, None, None).unwrap();
    forget(&*s, 1);
    let rows = s.kv_from(None, 10).unwrap();
    assert!(
        rows.iter()
            .any(|(space, key, row)| space == SPACE && key == "k" && row.version == 2),
        "{rows:?}"
    );
    forget(&*s, 2);
    let rows = s.kv_from(None, 10).unwrap();
    assert!(
        !rows.iter().any(|(space, _, _)| space == SPACE),
        "the tombstone stayed: {rows:?}"
    );
    assert_eq!(s.kv_get(SPACE, "k").unwrap().version, 0);
    // Made again, the key starts above the forgotten version: a step that
    // read `one` at version 1 cannot commit over the new value.
    kv_write(&*s, None, Some("two")).unwrap();
    assert_eq!(s.kv_get(SPACE, "k").unwrap().version, 3);
    let stale = kv_write(&*s, Some(1), Some("three"));
    assert!(
        matches!(stale, Err(Refused::KvConflict { .. })),
        "{stale:?}"
    );
    let rows = s.kv_from(Some((SPACE, "k")), 10).unwrap();
    assert!(rows.is_empty(), "{rows:?}");
}

#[test]
fn a_key_with_a_ttl_reads_as_it_was_written_and_is_forgotten_once_expired() {
    let (_dir, s) = open();
    started(&*s);
    let effects = KvEffects {
        space: SPACE.to_owned(),
        writes: [("k".to_owned(), Some("v".to_owned()))].into(),
        reads: Default::default(),
        expires: [("k".to_owned(), 500)].into(),
    };
    let write = commit_with(&*s, R, "kv", |_, _, x| x.kv = Some(effects));
    put(&*s, write);
    let row = s.kv_get(SPACE, "k").unwrap();
    assert_eq!(
        (row.value.as_deref(), row.expires_at, row.version),
        (Some("v"), Some(500), 1)
    );
    assert_eq!(row.live(499), Some("v"));
    assert_eq!(row.live(500), None);
    assert_eq!(s.kv_list(SPACE, "", 10, 499).unwrap(), ["k"]);
    assert!(s.kv_list(SPACE, "", 10, 500).unwrap().is_empty());
    let used = s.stored_bytes("default").unwrap();
    // Not yet expired: it stays.
    let early = Write::ForgetKv {
        space: SPACE.to_owned(),
        key: "k".to_owned(),
        version: 1,
        now: 499,
    };
    put(&*s, early);
    assert_eq!(s.kv_get(SPACE, "k").unwrap().version, 1);
    let due = Write::ForgetKv {
        space: SPACE.to_owned(),
        key: "k".to_owned(),
        version: 1,
        now: 500,
    };
    put(&*s, due);
    assert_eq!(s.kv_get(SPACE, "k").unwrap(), Default::default());
    assert!(s.stored_bytes("default").unwrap() <= used);
    // Made again, it starts above the version that expired.
    kv_write(&*s, None, Some("again")).unwrap();
    assert_eq!(s.kv_get(SPACE, "k").unwrap().version, 2);
}
