//! A step's writes and the timers they set and fire: `CommitStep` with the
//! kv writes, spawns and messages it carries, `Act` (an outside answer to
//! an `await`), and `FireTimer`.

use serde_json::json;
use weft_core::{KvEffects, Versioned};
use weft_store::DeliveryState::Created;
use weft_store::RunState::{Failed, Running, Succeeded};
use weft_store::TimerKind::{self, Await, Deadline, Retry, Sleep};
use weft_store::{DEADLINE_PATH, StepRecord, Store, StoreError, What, Write};

use crate::common::{
    R, SPACE, armed, at, cancel, commit, commit_with, def, dozing, emission, emit, ended, glance,
    nap, no_timers, not_found, outbox_row, queued, spawn, started, step, stored_run, subscribe,
    timer, timers, update,
};
use crate::table::{given, put, walk};

fn sleeping(s: &dyn Store) {
    started(s);
    put(s, nap(s, Sleep));
}

fn steps(s: &dyn Store) -> Vec<StepRecord> {
    s.steps(R).unwrap()
}

fn timer_gone(e: &StoreError) -> bool {
    matches!(e, StoreError::TimerGone(7))
}

fn not_waiting(e: &StoreError, path: &str) -> bool {
    matches!(e, StoreError::NotWaiting { run, step } if run == R && step == path)
}

fn kv_conflict(e: &StoreError, on: &str) -> bool {
    matches!(e, StoreError::KvConflict { space, key } if space == SPACE && key == on)
}

// CommitStep.

/// Run `r`'s next commit fires its sleep and wakes it.
fn wake(s: &dyn Store) -> Write {
    commit_with(s, R, "nap", |_, run, x| {
        (x.fired, run.suspended) = (Some(timer(Sleep)), false);
    })
}

fn kv(reads: &[(&str, u64)], writes: &[(&str, Option<&str>)]) -> Option<KvEffects> {
    let owned = |key: &&str| (*key).to_owned();
    let space = SPACE.to_owned();
    let writes = writes.iter().map(|(k, v)| (owned(k), v.map(str::to_owned)));
    let reads = reads.iter().map(|(k, v)| (owned(k), *v));
    Some(KvEffects {
        space,
        writes: writes.collect(),
        reads: reads.collect(),
    })
}

fn kv_commit(s: &dyn Store, effects: Option<KvEffects>) -> Write {
    commit_with(s, R, "kv", |_, _, x| x.kv = effects)
}

fn versioned(version: u64, value: Option<&str>) -> Versioned {
    let value = value.map(str::to_owned);
    Versioned { version, value }
}

#[test]
fn commit_step() {
    walk(&[
        given("a record, at the run's next seq", started)
            .write(|s| commit(s, R, "one"))
            .stored(|s| {
                assert_eq!(steps(s), [step(R, 0, "one")]);
                assert_eq!(glance(s), (Running, 1, false, true));
            }),
        given("a record that sets a timer; the run asleep", started)
            .write(|s| nap(s, Sleep))
            .stored(|s| {
                assert_eq!(timers(s, R), [armed(Sleep, "nap")]);
                assert_eq!(glance(s), (Running, 1, true, false));
            }),
        given("the record that ends the run", dozing)
            .write(|s| {
                commit_with(s, R, "end", |_, run, _| {
                    (run.state, run.suspended) = (Succeeded, false);
                })
            })
            .stored(|s| {
                assert_eq!(glance(s), (Succeeded, 2, false, false));
                assert!(no_timers(s));
            }),
        given("a record that fires a timer", sleeping)
            .write(wake)
            .stored(|s| {
                assert_eq!(glance(s), (Running, 2, false, true));
                assert!(no_timers(s));
            }),
        given("a timer that fired already", sleeping)
            .then(wake)
            .write(|s| {
                commit_with(s, R, "nap", |_, _, x| {
                    (x.kv, x.fired) = (kv(&[], &[("a", Some("x"))]), Some(timer(Sleep)));
                })
            })
            .refused(timer_gone),
        given("a run cancelled in the store", started)
            .then(|_| cancel(9))
            .write(|s| commit(s, R, "one"))
            .refused(ended),
    ]);
}

/// Run `r` wrote `a` (version 1); `ch/a` subscribes to `ch`.
fn wrote_a(s: &dyn Store) {
    started(s);
    put(s, kv_commit(s, kv(&[], &[("a", Some("x"))])));
    put(s, subscribe("ch/a"));
}

/// Run `r` emitted `m0` on `ch`; then `ch/a`, `ch/b` and `other/x`
/// subscribed.
fn subscribed_late(s: &dyn Store) {
    started(s);
    put(s, emit(s, vec![emission("m0", "ch")]));
    for key in ["ch/a", "ch/b", "other/x"] {
        put(s, subscribe(key));
    }
}

/// Run `r`'s messages: seq, deliveries pending, deliveries.
fn messages(s: &dyn Store) -> Vec<(u64, u32, usize)> {
    let messages = s.run_messages(R).unwrap().into_iter();
    messages
        .map(|m| (m.seq, m.pending, m.deliveries.len()))
        .collect()
}

#[test]
fn commit_step_effects() {
    walk(&[
        given("kv writes bump versions, deletes too", wrote_a)
            .write(|s| kv_commit(s, kv(&[("a", 1)], &[("a", None), ("b", Some("y"))])))
            .stored(|s| {
                assert_eq!(s.kv_get(SPACE, "a").unwrap(), versioned(2, None));
                assert_eq!(s.kv_get(SPACE, "b").unwrap(), versioned(1, Some("y")));
                assert_eq!(s.kv_list(SPACE, "", 10).unwrap(), ["b"]);
            }),
        given("a stale kv read, with a spawn and a message", wrote_a)
            .write(|s| {
                commit_with(s, R, "kv", |_, _, x| {
                    x.kv = kv(&[("a", 0)], &[("b", Some("y"))]);
                    (x.spawn, x.emitted) = (Some(spawn()), vec![emission("m1", "ch")]);
                })
            })
            .refused(|e| kv_conflict(e, "a")),
        given("a spawn: the child's outbox row and code", started)
            .write(|s| commit_with(s, R, "spawn", |_, _, x| x.spawn = Some(spawn())))
            .stored(|s| {
                assert_eq!(s.outbox().unwrap(), [outbox_row()]);
                assert_eq!(s.definition("d2").unwrap(), Some(def("d2", "id: child")));
                assert_eq!(s.component("c2").unwrap().unwrap(), b"child");
                assert_eq!(s.run("c").unwrap(), None);
            }),
        given("messages: the next seqs, their deliveries", subscribed_late)
            .write(|s| emit(s, vec![emission("m1", "ch"), emission("m2", "other")]))
            .stored(|s| {
                // (seq, pending, deliveries): m0 reached nobody.
                assert_eq!(messages(s), [(1, 0, 0), (2, 2, 2), (3, 1, 1)]);
                let m1 = s.message(2).unwrap().unwrap();
                let from = (m1.id.as_str(), m1.channel.as_str(), m1.step.as_str());
                assert_eq!(
                    (from, &m1.payload),
                    (("m1", "ch", "say"), &json!({ "id": "m1" }))
                );
                for key in ["ch/a", "ch/b"] {
                    let [d] = <[_; 1]>::try_from(queued(s, key, false)).unwrap();
                    assert_eq!((d.seq, d.run.as_str(), d.state), (2, R, Created));
                    assert!(m1.deliveries.contains(&d.id));
                }
                assert_eq!(queued(s, "other/x", false)[0].seq, 3);
            }),
    ]);
}

// Act.

/// Run `r`, asleep at an `await` step `ask`, with its timeout.
fn awaiting(s: &dyn Store) {
    started(s);
    let wait = commit_with(s, R, "ask", |step, run, _| {
        (step.output, step.awaiting) = (None, true);
        (step.timer, run.suspended) = (Some(timer(Await)), true);
    });
    put(s, wait);
}

/// An outside actor's answer to the wait at `path`.
fn answer(path: &str) -> Write {
    let mut record = StepRecord::empty(R, 0, (0, path, path), 1, at(5));
    record.output = Some(json!({ "approved": true }));
    let (run, record, timer) = (R.to_owned(), Box::new(record), Some(timer(Await)));
    Write::Act {
        run,
        record,
        timer,
        now: at(5),
    }
}

#[test]
fn act() {
    walk(&[
        given("an answer to a waiting step", awaiting)
            .write(|_| answer("ask"))
            .stored(|s| {
                let last = steps(s).pop().unwrap();
                assert_eq!((last.seq, last.path.as_str()), (1, "ask"));
                assert_eq!(last.output, Some(json!({ "approved": true })));
                assert_eq!(glance(s), (Running, 2, false, true));
                assert_eq!(stored_run(s, R).updated_at, at(5));
                assert!(no_timers(s));
            }),
        given("no such run", |_| {})
            .write(|_| answer("ask"))
            .refused(|e| not_found(e, What::Run(R.into()))),
        given("a run that ended", awaiting)
            .then(|s| update(s, Failed))
            .write(|_| answer("ask"))
            .refused(ended),
        given("a run cancelled in the store", awaiting)
            .then(|_| cancel(9))
            .write(|_| answer("ask"))
            .refused(ended),
        given("a run awake in a process", awaiting)
            .then(|s| update(s, Running))
            .write(|_| answer("ask"))
            .refused(|e| matches!(e, StoreError::Busy { run } if run == R)),
        given("a step answered already", awaiting)
            .then(|s| commit_with(s, R, "ask", |_, run, _| run.suspended = true))
            .write(|_| answer("ask"))
            .refused(|e| not_waiting(e, "ask")),
        given("a wait whose timeout fired", awaiting)
            .then(|s| {
                commit_with(s, R, "side", |_, run, x| {
                    (x.fired, run.suspended) = (Some(timer(Await)), true);
                })
            })
            .write(|_| answer("ask"))
            .refused(timer_gone),
    ]);
}

// FireTimer.

fn fire(kind: TimerKind) -> Write {
    Write::FireTimer(timer(kind), at(61))
}

/// Run `r`'s last record's error code.
fn last_error(s: &dyn Store) -> String {
    steps(s).pop().unwrap().error.unwrap().code
}

/// Run `r` woke at 61 s, with `records` records.
fn woke(s: &dyn Store, records: u32) {
    assert_eq!(glance(s), (Running, records, false, true));
    assert_eq!(stored_run(s, R).updated_at, at(61));
}

#[test]
fn fire_timer() {
    walk(&[
        given("a sleep's: records its end, wakes the run", sleeping)
            .write(|_| fire(Sleep))
            .stored(|s| {
                let last = steps(s).pop().unwrap();
                assert_eq!((last.seq, last.path.as_str(), last.error), (1, "nap", None));
                let until = timer(Sleep).due.to_string();
                assert_eq!(last.output, Some(json!({ "slept_until": until })));
                assert!(no_timers(s));
                woke(s, 2);
            }),
        given("a retry's: wakes the run alone", started)
            .then(|s| nap(s, Retry))
            .write(|_| fire(Retry))
            .stored(|s| {
                assert!(no_timers(s));
                woke(s, 1);
            }),
        given("a deadline's: records run_timeout", dozing)
            .write(|_| fire(Deadline))
            .stored(|s| {
                assert_eq!(steps(s).pop().unwrap().path, DEADLINE_PATH);
                assert_eq!(last_error(s), "run_timeout");
                assert_eq!(timers(s, R), [armed(Sleep, "nap")]);
                woke(s, 2);
            }),
        given("an await's: records await_timeout", started)
            .then(|s| nap(s, Await))
            .write(|_| fire(Await))
            .stored(|s| {
                assert_eq!(last_error(s), "await_timeout");
                woke(s, 2);
            }),
        given("a timer that fired already", sleeping)
            .then(|_| fire(Sleep))
            .write(|_| fire(Sleep))
            .refused(timer_gone),
        given("a timer its run's cancel removed", sleeping)
            .then(|_| cancel(9))
            .write(|_| fire(Sleep))
            .refused(timer_gone),
    ]);
}
