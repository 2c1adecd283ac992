//! `GroupCommit`: the committing thread never waits for itself. Answers
//! run on that thread; a write an answer submits joins a later batch even
//! when its tenant's lane is full, and a blocking commit from an answer is
//! refused at once instead of waiting for its own thread. Tenants wait
//! apart: a flood's full lane holds back its own submitters only.

use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::time::Duration;

use weft_store::{GroupCommit, HostRecord, Store, StoreError, Write};

use crate::common::T0;
use crate::table::open;

fn renew(n: usize) -> Write {
    Write::renew(&HostRecord {
        id: format!("host-{n}"),
        machine: "test".to_owned(),
        pid: 0,
        started_at: T0,
        expires_at: T0,
    })
}

#[test]
fn writes_submitted_from_answers_land_even_past_the_queue_bound() {
    let (_dir, store) = open();
    let commits = Arc::new(GroupCommit::start(Arc::clone(&store)).unwrap());
    // More than a tenant's lane holds (1,024), all from one answer.
    const MANY: usize = 10_000;
    let (tell, told) = sync_channel(MANY + 1);
    let inner = Arc::clone(&commits);
    let first_tell = tell.clone();
    commits.submit(
        renew(0),
        Box::new(move |outcome| {
            let _ = first_tell.send(outcome);
            for n in 1..=MANY {
                let tell = tell.clone();
                inner.submit(
                    renew(n),
                    Box::new(move |outcome| {
                        let _ = tell.send(outcome);
                    }),
                );
            }
        }),
    );
    for n in 0..=MANY {
        match told.recv_timeout(Duration::from_secs(60)) {
            Ok(outcome) => assert!(outcome.is_ok(), "write {n}: {outcome:?}"),
            Err(RecvTimeoutError::Timeout) => {
                panic!("the committing thread waits for itself: {n} writes answered")
            }
            Err(RecvTimeoutError::Disconnected) => panic!("write {n} was never answered"),
        }
    }
    assert_eq!(store.hosts().unwrap().len(), MANY + 1);
}

#[test]
fn a_blocking_commit_from_an_answer_is_refused_not_waited_for() {
    let (_dir, store) = open();
    let commits = Arc::new(GroupCommit::start(Arc::clone(&store)).unwrap());
    let (tell, told) = sync_channel(1);
    let inner = Arc::clone(&commits);
    commits.submit(
        renew(0),
        Box::new(move |_| {
            let _ = tell.send(inner.commit(renew(1)));
        }),
    );
    let outcome = told
        .recv_timeout(Duration::from_secs(60))
        .expect("the committing thread waited for itself");
    assert!(
        matches!(&outcome, Err(StoreError::Commit(why)) if why.contains("wait for itself")),
        "{outcome:?}"
    );
    // Elsewhere, the same commit lands.
    let elsewhere = commits.commit(renew(1));
    assert!(elsewhere.is_ok(), "{elsewhere:?}");
}

/// Submits `writes` (each a tenant and a host row's number) from the answer
/// to a first write (row 0), so that all of them wait when the next batch
/// is made; returns how many host rows were stored once row `watched` had
/// committed.
fn stored_with(
    store: &Arc<dyn Store>,
    commits: &Arc<GroupCommit>,
    writes: Vec<(&'static str, usize)>,
    watched: usize,
) -> usize {
    let (tell, told) = sync_channel(1);
    let inner = Arc::clone(commits);
    let seen = Arc::clone(store);
    commits.submit(
        renew(0),
        Box::new(move |_| {
            for (tenant, n) in writes {
                let done: weft_store::Done = if n == watched {
                    let (seen, tell) = (Arc::clone(&seen), tell.clone());
                    Box::new(move |outcome| {
                        let _ = tell.send((outcome, seen.hosts().map(|h| h.len())));
                    })
                } else {
                    Box::new(|_| {})
                };
                inner.submit_as(Arc::from(tenant), renew(n), done);
            }
        }),
    );
    let (outcome, stored) = told.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(outcome.is_ok(), "{outcome:?}");
    stored.unwrap()
}

/// Writes wait by tenant: a lone write of one tenant, submitted after
/// another tenant's flood, commits in the next batch, which holds at most
/// `SHARED_BATCH` writes, before most of the flood.
#[test]
fn a_lone_tenants_write_commits_before_another_tenants_flood() {
    let (_dir, store) = open();
    let commits = Arc::new(GroupCommit::start(Arc::clone(&store)).unwrap());
    const FLOOD: usize = 3_000;
    let mut writes: Vec<_> = (1..=FLOOD).map(|n| ("flood", n)).collect();
    writes.push(("lone", FLOOD + 1));
    let stored = stored_with(&store, &commits, writes, FLOOD + 1);
    assert!(
        stored <= 1 + weft_store::SHARED_BATCH,
        "the lone write waited for {stored} rows of the flood"
    );
    // The flood lands too.
    common_wait(|| store.hosts().unwrap().len() == FLOOD + 2);
}

/// Beside a tenant with a few writes, another tenant's steady writes (not
/// a flood: all that wait fit `SHORT_BATCH`) commit in one batch, not in
/// batches of `SHARED_BATCH`.
#[test]
fn steady_writes_beside_a_lone_tenants_commit_in_one_batch() {
    let (_dir, store) = open();
    let commits = Arc::new(GroupCommit::start(Arc::clone(&store)).unwrap());
    const STEADY: usize = weft_store::SHORT_BATCH - 1;
    let mut writes = vec![("lone", 1)];
    writes.extend((2..STEADY + 2).map(|n| ("steady", n)));
    // Once the first steady write commits, all of them are stored.
    let stored = stored_with(&store, &commits, writes, 2);
    assert_eq!(
        stored,
        STEADY + 2,
        "the steady writes were split into batches of {}",
        weft_store::SHARED_BATCH
    );
}

/// A submitter waits for room only while its own tenant's lane is full:
/// with the committing thread held and a flood's submitter blocked on its
/// full lane, another tenant's write is taken at once, and commits before
/// the rest of the flood.
#[test]
fn a_floods_full_lane_does_not_hold_back_another_tenants_submitter() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (_dir, store) = open();
    let commits = Arc::new(GroupCommit::start(Arc::clone(&store)).unwrap());
    // Hold the committing thread in an answer until `open` is sent.
    let (open_gate, gate) = sync_channel::<()>(1);
    let (held, holding) = sync_channel(1);
    commits.submit(
        renew(0),
        Box::new(move |_| {
            let _ = held.send(());
            let _ = gate.recv();
        }),
    );
    holding.recv_timeout(Duration::from_secs(60)).unwrap();
    const FLOOD: usize = 3_000;
    let submitted = Arc::new(AtomicUsize::new(0));
    let flood = {
        let commits = Arc::clone(&commits);
        let submitted = Arc::clone(&submitted);
        std::thread::spawn(move || {
            for n in 1..=FLOOD {
                commits.submit_as(Arc::from("flood"), renew(n), Box::new(|_| {}));
                submitted.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    // The flood's submitter stops at its full lane.
    let mut last = usize::MAX;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = submitted.load(Ordering::SeqCst);
        if now == last {
            break;
        }
        last = now;
    }
    assert!(last < FLOOD, "the flood's lane has no bound");
    // The lone tenant's submitter returns while the thread is still held.
    let (tell, told) = sync_channel(1);
    let (returned, submit_returned) = sync_channel(1);
    let lone = {
        let commits = Arc::clone(&commits);
        let seen = Arc::clone(&store);
        std::thread::spawn(move || {
            commits.submit_as(
                Arc::from("lone"),
                renew(FLOOD + 1),
                Box::new(move |outcome| {
                    let _ = tell.send((outcome, seen.hosts().map(|h| h.len())));
                }),
            );
            let _ = returned.send(());
        })
    };
    let waited = submit_returned.recv_timeout(Duration::from_secs(10));
    open_gate.send(()).unwrap();
    assert!(
        waited.is_ok(),
        "the lone tenant's submitter waited for the flood's lane"
    );
    let (outcome, stored) = told.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(outcome.is_ok(), "{outcome:?}");
    let stored = stored.unwrap();
    assert!(
        stored < FLOOD / 2,
        "the lone write waited for {stored} rows of the flood"
    );
    flood.join().unwrap();
    lone.join().unwrap();
    common_wait(|| store.hosts().unwrap().len() == FLOOD + 2);
}

/// Waits up to a minute for `done`.
fn common_wait(done: impl Fn() -> bool) {
    let began = std::time::Instant::now();
    while !done() {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "not done in a minute"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
