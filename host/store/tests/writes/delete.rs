//! `DeleteRun`: an ended run goes with its step records, its cancellation
//! mark and its index of messages, and gives its bytes back; a run that
//! has not ended, or a child whose parent has not, is refused with
//! `Needed` and nothing changes.

use weft_store::RunState::{Running, Succeeded};
use weft_store::{ParentLink, Store, StoreError, Write};

use crate::common::{R, cancel, commit, create, emission, emit, keyed, run, stored_run, update};
use crate::table::{open, put};

fn delete(s: &dyn Store, id: &str) -> Result<(), StoreError> {
    s.apply(&[&Write::DeleteRun(id.to_owned())])
        .unwrap()
        .pop()
        .unwrap()
}

fn needed(result: Result<(), StoreError>, why: &str) {
    assert!(
        matches!(&result, Err(StoreError::Needed { why: said, .. }) if said.contains(why)),
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
    assert!(matches!(delete(&*s, R), Err(StoreError::NotFound(_))));
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
    assert!(matches!(answer, Err(StoreError::RunEnded(_))), "{answer:?}");
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
        matches!(refused, Err(StoreError::Duplicate { .. })),
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
