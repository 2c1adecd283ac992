//! A run's own writes: `CreateRun` (and how a batch answers each of its
//! writes), `StartRun` of a spawned child, `UpdateRun` and `CancelRun`.

use std::sync::Arc;

use weft_store::RunState::{Cancelled, Failed, Succeeded};
use weft_store::TimerKind::Deadline;
use weft_store::{DEADLINE_PATH, Refused, Store, What, Write};

use crate::common::{
    R, armed, at, cancel, changed, child, commit, commit_with, create, def, dozing, duplicate,
    ended, exists, glance, is_running, keyed, no_timers, not_found, outbox_row, run, spawn, stale,
    started, stored_run, timer, timers, update, with_deadline,
};
use crate::table::{given, open, put, walk};

// CreateRun, and batches.

/// Run `id` with a deadline, definition `d1` and component `c1` (both
/// `text`), started with key `key`.
fn full_create(id: &str, key: &str, text: &str) -> Write {
    let component = ("c1".to_owned(), Arc::from(text.as_bytes()));
    let write = Write::create_run(&with_deadline(id), &def("d1", text), vec![component]);
    keyed(write, key)
}

fn with_r1(s: &dyn Store) {
    put(s, full_create("r1", "k1", "first"));
}

#[test]
fn create_run() {
    walk(&[
        given("a run, with all it carries", |_| {})
            .write(|_| full_create("r1", "k1", "first"))
            .stored(|s| {
                assert_eq!(stored_run(s, "r1"), with_deadline("r1"));
                assert!(is_running(s, "r1"));
                assert_eq!(timers(s, "r1"), [armed(Deadline, DEADLINE_PATH)]);
                assert_eq!(s.timer_keys().unwrap(), [timer(Deadline).key()]);
                assert_eq!(s.definition("d1").unwrap(), Some(def("d1", "first")));
                assert_eq!(s.component("c1").unwrap().unwrap(), b"first");
                assert_eq!(s.idempotent_run("k1").unwrap().unwrap(), "r1");
            }),
        given("definitions, components: stored once", with_r1)
            .write(|_| full_create("r2", "k2", "second"))
            .stored(|s| {
                assert_eq!(stored_run(s, "r2"), with_deadline("r2"));
                assert_eq!(s.definition("d1").unwrap(), Some(def("d1", "first")));
                assert_eq!(s.component("c1").unwrap().unwrap(), b"first");
            }),
        given("a run id that exists", with_r1)
            .write(|_| full_create("r1", "k2", "second"))
            .refused(|e| exists(e, What::Run("r1".into()))),
        given("an idempotency key used before", with_r1)
            .write(|_| {
                let write = Write::create_run(&run("r3"), &def("d3", "x"), Vec::new());
                keyed(write, "k1")
            })
            .refused(|e| duplicate(e, "k1", "r1")),
    ]);
}

#[test]
fn each_write_of_a_batch_is_answered_on_its_own() {
    let (_dir, handle) = open();
    let s = handle.as_ref();
    let mut again = run("a");
    again.step_count = 9;
    let answers = s.apply(&[&create(&run("a")), &create(&again), &create(&run("b"))]);
    let answers = answers.unwrap();
    let answered = matches!(
        answers.as_slice(),
        [Ok(()), Err(Refused::Exists(What::Run(_))), Ok(())]
    );
    assert!(answered, "{answers:?}");
    assert_eq!(stored_run(s, "a"), run("a"));
    assert_eq!(stored_run(s, "b"), run("b"));
}

// StartRun and UpdateRun.

/// Run `r` spawned child `c`: its outbox row is open.
fn spawned(s: &dyn Store) {
    started(s);
    let spawning = commit_with(s, R, "spawn", |_, _, x| x.spawn = Some(spawn()));
    put(s, spawning);
}

fn start_child(_: &dyn Store) -> Write {
    Write::start_run(&outbox_row()).unwrap()
}

#[test]
fn start_run() {
    walk(&[
        given("the child: stored, listed, its row closed", spawned)
            .write(start_child)
            .stored(|s| {
                assert_eq!(stored_run(s, "c"), child());
                assert!(is_running(s, "c"));
                assert!(s.outbox().unwrap().is_empty());
            }),
        // The child moved on since: a second carry-out (a retry whose
        // first answer was lost, another host's) must not write it back.
        given(
            "carried out again: refused as done, nothing changes",
            spawned,
        )
        .then(start_child)
        .then(|s| commit(s, "c", "first"))
        .write(start_child)
        .refused(|e| matches!(e, Refused::Exists(What::Run(id)) if id == "c")),
    ]);
}

#[test]
fn update_run() {
    walk(&[
        given("a run that ends: unlisted, its timers gone", dozing)
            .write(|s| update(s, Failed))
            .stored(|s| {
                assert_eq!(glance(s), (Failed, 1, false, false));
                assert!(no_timers(s));
            }),
        given("a run still running: listed, with its timers", |_| {})
            .then(|_| create(&with_deadline(R)))
            .write(|s| {
                let mut run = stored_run(s, R);
                run.next_step = 1;
                Write::update_run(&run)
            })
            .stored(|s| {
                assert_eq!(stored_run(s, R).next_step, 1);
                assert_eq!(timers(s, R), [armed(Deadline, DEADLINE_PATH)]);
                assert!(is_running(s, R));
            }),
        given("a run cancelled in the store", started)
            .then(|s| cancel(s, 9))
            .write(|s| update(s, Failed))
            .refused(ended),
    ]);
}

// CancelRun.

#[test]
fn cancel_run() {
    walk(&[
        given("a cancel: the run ends, says why", dozing)
            .write(|s| cancel(s, 9))
            .stored(|s| {
                assert_eq!(glance(s), (Cancelled, 1, false, false));
                assert_eq!(stored_run(s, R).updated_at, at(9));
                assert!(no_timers(s));
            }),
        given("a cancel, then the driver's next commit", dozing)
            .then(|s| cancel(s, 9))
            .write(|s| commit(s, R, "next"))
            .refused(ended),
        given("a cancel decided before the run moved on", dozing)
            .write(|s| stale(s, |s| cancel(s, 9)))
            .refused(changed),
        given("a run that ended", started)
            .then(|s| update(s, Succeeded))
            .write(|s| cancel(s, 9))
            .refused(ended),
        given("no such run", |_| {})
            .write(|s| cancel(s, 9))
            .refused(|e| not_found(e, What::Run(R.into()))),
    ]);
}
