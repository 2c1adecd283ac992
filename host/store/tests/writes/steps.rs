//! A step's writes and the timers they set and fire: `CommitStep` with the
//! kv writes, spawns and messages it carries, `Act` (an outside answer to
//! an `await`), and `FireTimer`.

use serde_json::json;
use weft_core::{KvEffects, Versioned};
use weft_store::DeliveryState::Created;
use weft_store::RunState::{Failed, Running, Succeeded};
use weft_store::TimerKind::{self, Await, Deadline, Retry, Sleep};
use weft_store::{DEADLINE_PATH, Refused, StepRecord, Store, What, Write};

use crate::common::{
    R, SPACE, armed, at, cancel, changed, commit, commit_with, current, def, dozing, emission,
    emit, ended, exists, glance, is_running, migrated, nap, no_timers, not_found, outbox_row,
    queued, spawn, stale, started, step, stored_run, subscribe, timer, timers, update,
};
use crate::table::{given, put, walk};

fn sleeping(s: &dyn Store) {
    started(s);
    put(s, nap(s, Sleep));
}

fn steps(s: &dyn Store) -> Vec<StepRecord> {
    s.steps(R).unwrap()
}

fn timer_gone(e: &Refused) -> bool {
    matches!(e, Refused::TimerGone(7))
}

fn kv_conflict(e: &Refused, on: &str) -> bool {
    matches!(e, Refused::KvConflict { space, key } if space == SPACE && key == on)
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
        expires: Default::default(),
    })
}

fn kv_commit(s: &dyn Store, effects: Option<KvEffects>) -> Write {
    commit_with(s, R, "kv", |_, _, x| x.kv = effects)
}

fn versioned(version: u64, value: Option<&str>) -> Versioned {
    let value = value.map(str::to_owned);
    Versioned {
        version,
        value,
        expires_at: None,
    }
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
            .then(|s| cancel(s, 9))
            .write(|s| commit(s, R, "one"))
            .refused(ended),
        given("a record for a slot another record took", started)
            .write(|s| stale(s, |s| commit(s, R, "one")))
            .refused(|e| {
                exists(
                    e,
                    What::Step {
                        run: R.into(),
                        seq: 0,
                    },
                )
            }),
        given("a fire decided on a run a stale record set back", sleeping)
            .then(|s| update(s, Running))
            .then(|s| {
                // The run's record from before the sleep: one record fewer.
                let mut back = stored_run(s, R);
                (back.step_records, back.suspended) = (0, true);
                Write::update_run(&back)
            })
            .write(|s| fire(s, Sleep))
            .refused(|e| {
                exists(
                    e,
                    What::Step {
                        run: R.into(),
                        seq: 0,
                    },
                )
            }),
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
                assert_eq!(s.kv_list(SPACE, "", 10, 0).unwrap(), ["b"]);
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

/// An outside actor's answer to the wait at `path`, decided on run `r` as
/// stored.
fn answer(s: &dyn Store, path: &str) -> Write {
    let run = current(s);
    let mut record = StepRecord::empty(R, run.step_records, (0, path, path), 1, at(5));
    record.output = Some(json!({ "approved": true }));
    let mut wake = run;
    // A paused run stays asleep, as the engine decides it.
    (wake.step_records, wake.suspended) = (wake.step_records + 1, wake.paused.is_some());
    wake.updated_at = at(5);
    Write::act(&record, Some(timer(Await)), &wake)
}

#[test]
fn act() {
    walk(&[
        given("an answer to a waiting step", awaiting)
            .write(|s| answer(s, "ask"))
            .stored(|s| {
                let last = steps(s).pop().unwrap();
                assert_eq!((last.seq, last.path.as_str()), (1, "ask"));
                assert_eq!(last.output, Some(json!({ "approved": true })));
                assert_eq!(glance(s), (Running, 2, false, true));
                assert_eq!(stored_run(s, R).updated_at, at(5));
                assert!(no_timers(s));
            }),
        given("no such run", |_| {})
            .write(|s| answer(s, "ask"))
            .refused(|e| not_found(e, What::Run(R.into()))),
        given("a run that ended", awaiting)
            .then(|s| update(s, Failed))
            .write(|s| answer(s, "ask"))
            .refused(ended),
        given("a run cancelled in the store", awaiting)
            .then(|s| cancel(s, 9))
            .write(|s| answer(s, "ask"))
            .refused(ended),
        given("a run awake in a process", awaiting)
            .then(|s| update(s, Running))
            .write(|s| answer(s, "ask"))
            .refused(|e| matches!(e, Refused::Busy { run } if run == R)),
        given("an answer decided before the run moved on", awaiting)
            .write(|s| stale(s, |s| answer(s, "ask")))
            .refused(changed),
        given("an answer decided before the run was migrated", awaiting)
            .write(|s| migrated(s, |s| answer(s, "ask")))
            .refused(changed),
        given(
            "an answer to a paused run: recorded, it stays asleep",
            awaiting,
        )
        .then(pause)
        .write(|s| answer(s, "ask"))
        .stored(|s| {
            assert_eq!(steps(s).pop().unwrap().path, "ask");
            let run = stored_run(s, R);
            assert!(run.paused.is_some() && run.suspended, "{run:?}");
        }),
        given("an answer to a paused run that would wake it", awaiting)
            .then(pause)
            .write(|s| {
                let run = current(s);
                let record = StepRecord::empty(R, run.step_records, (0, "ask", "ask"), 1, at(5));
                let mut wake = run;
                // Names its pause, yet awake: refused, never stored so.
                (wake.step_records, wake.suspended) = (wake.step_records + 1, false);
                Write::act(&record, Some(timer(Await)), &wake)
            })
            .refused(changed),
        given("an answer decided before the run was paused", awaiting)
            .write(|s| paused_since(s, |s| answer(s, "ask")))
            .refused(changed),
        given("a wait whose timeout fired", awaiting)
            .then(|s| {
                commit_with(s, R, "side", |_, run, x| {
                    (x.fired, run.suspended) = (Some(timer(Await)), true);
                })
            })
            .write(|s| answer(s, "ask"))
            .refused(timer_gone),
    ]);
}

// FireTimer.

/// Timer `kind`'s fire at 61 s, decided on run `r` as stored: every kind
/// but a retry leaves a record, at the timer's path.
fn fire(s: &dyn Store, kind: TimerKind) -> Write {
    let run = current(s);
    let seq = run.step_records;
    let path = if kind == Deadline {
        DEADLINE_PATH
    } else {
        "nap"
    };
    let record = (kind != Retry).then(|| {
        let mut record = step(R, seq, path);
        record.output = Some(json!({ "fired": seq }));
        record
    });
    let mut wake = run;
    wake.step_records += u32::from(record.is_some());
    // A paused run stays asleep, as the engine decides it.
    (wake.suspended, wake.updated_at) = (wake.paused.is_some(), at(61));
    Write::fire_timer(timer(kind), seq, record.as_ref(), &wake)
}

/// Run `r`'s last record: at `path`, numbered `seq`, the fire's.
fn fired_at(s: &dyn Store, seq: u32, path: &str) {
    let last = steps(s).pop().unwrap();
    assert_eq!((last.seq, last.path.as_str()), (seq, path));
    assert_eq!(last.output, Some(json!({ "fired": seq })));
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
            .write(|s| fire(s, Sleep))
            .stored(|s| {
                fired_at(s, 1, "nap");
                assert!(no_timers(s));
                woke(s, 2);
            }),
        given("a retry's: wakes the run alone", started)
            .then(|s| nap(s, Retry))
            .write(|s| fire(s, Retry))
            .stored(|s| {
                assert!(no_timers(s));
                woke(s, 1);
            }),
        given("a deadline's: records run_timeout", dozing)
            .write(|s| fire(s, Deadline))
            .stored(|s| {
                fired_at(s, 1, DEADLINE_PATH);
                assert_eq!(timers(s, R), [armed(Sleep, "nap")]);
                woke(s, 2);
            }),
        given("an await's: records await_timeout", started)
            .then(|s| nap(s, Await))
            .write(|s| fire(s, Await))
            .stored(|s| {
                fired_at(s, 1, "nap");
                woke(s, 2);
            }),
        given("a timer that fired already", sleeping)
            .then(|s| fire(s, Sleep))
            .write(|s| fire(s, Sleep))
            .refused(timer_gone),
        given("a fire decided before the run moved on", sleeping)
            .write(|s| stale(s, |s| fire(s, Sleep)))
            .refused(changed),
        given("a fire decided before the run was migrated", sleeping)
            .write(|s| migrated(s, |s| fire(s, Sleep)))
            .refused(changed),
        given(
            "a fire of a paused run: recorded, the run stays asleep",
            sleeping,
        )
        .then(pause)
        .write(|s| fire(s, Sleep))
        .stored(|s| {
            fired_at(s, 1, "nap");
            let run = stored_run(s, R);
            assert!(run.paused.is_some() && run.suspended, "{run:?}");
        }),
        given("a fire decided before the run was paused", sleeping)
            .write(|s| paused_since(s, |s| fire(s, Sleep)))
            .refused(changed),
        given("a fire decided before the run was resumed", sleeping)
            .then(pause)
            .write(|s| resumed_since(s, |s| fire(s, Sleep)))
            .refused(changed),
        given("a timer its run's cancel removed", sleeping)
            .then(|s| cancel(s, 9))
            .write(|s| fire(s, Sleep))
            .refused(timer_gone),
    ]);
}

// PauseRun.

/// A pause of run `r` by no driver (it waits suspended), decided on the
/// run as stored.
fn pause(s: &dyn Store) -> Write {
    let mut paused = current(s);
    paused.paused = Some(weft_store::PauseMark {
        at: at(5),
        actor: "test".to_owned(),
    });
    paused.updated_at = at(5);
    Write::pause_run(&paused)
}

/// A resume of paused run `r` by no driver, decided on the run as stored.
fn resume(s: &dyn Store) -> Write {
    let mut resumed = current(s);
    (resumed.paused, resumed.suspended) = (None, false);
    resumed.updated_at = at(6);
    Write::pause_run(&resumed)
}

/// Decides `decide` on run `r`, then pauses the run (a pause adds no
/// record): the write as decided before the pause.
fn paused_since(s: &dyn Store, decide: fn(&dyn Store) -> Write) -> Write {
    let write = decide(s);
    put(s, pause(s));
    write
}

/// Decides `decide` on paused run `r`, then resumes it (a resume adds no
/// record): the write as decided before the resume.
fn resumed_since(s: &dyn Store, decide: fn(&dyn Store) -> Write) -> Write {
    let write = decide(s);
    put(s, resume(s));
    write
}

/// Run `r` moved to revision `d1`, decided on it as stored.
fn migrate(s: &dyn Store) -> Write {
    let mut moved = current(s);
    moved.definition = "d1".to_owned();
    Write::migrate_run(&moved, &def("d1", "id: wf"), Vec::new())
}

#[test]
fn migrate_run() {
    walk(&[
        given("a move of a run asleep", sleeping)
            .write(migrate)
            .stored(|s| {
                let run = stored_run(s, R);
                assert_eq!(run.definition, "d1");
                assert!(run.suspended, "{run:?}");
            }),
        given("a move decided before the run moved on", sleeping)
            .write(|s| stale(s, migrate))
            .refused(changed),
        given("a move decided before the run was paused", sleeping)
            .write(|s| paused_since(s, migrate))
            .refused(changed),
        given("a move of a paused run: it stays paused", sleeping)
            .then(pause)
            .write(migrate)
            .stored(|s| {
                let run = stored_run(s, R);
                assert_eq!(run.definition, "d1");
                assert!(run.paused.is_some() && run.suspended, "{run:?}");
            }),
    ]);
}

#[test]
fn pause_run() {
    walk(&[
        given("a pause of a run asleep", sleeping)
            .write(pause)
            .stored(|s| {
                let run = stored_run(s, R);
                assert!(run.paused.is_some() && run.suspended, "{run:?}");
                assert_eq!(run.definition, "d0");
            }),
        given("a pause decided before the run moved on", sleeping)
            .write(|s| stale(s, pause))
            .refused(changed),
        given("a pause decided before the run was migrated", sleeping)
            .write(|s| migrated(s, pause))
            .refused(changed),
        given(
            "a resume of a paused run: awake, listed to resume",
            sleeping,
        )
        .then(pause)
        .write(resume)
        .stored(|s| {
            let run = stored_run(s, R);
            assert!(run.paused.is_none() && !run.suspended, "{run:?}");
            assert!(is_running(s, R));
        }),
        given("a resume of a run not paused", sleeping)
            .write(resume)
            .refused(changed),
    ]);
}

/// Run `r` with five records, `one` to `five`.
fn five_records(s: &dyn Store) {
    started(s);
    for path in ["one", "two", "three", "four", "five"] {
        put(s, commit(s, R, path));
    }
}

#[test]
fn step_records_are_read_a_page_at_a_time() {
    walk(&[given("five records", five_records)
        .write(|s| commit(s, R, "six"))
        .stored(|s| {
            let seqs = |after, limit| -> Vec<u32> {
                s.steps_page(R, after, limit)
                    .unwrap()
                    .iter()
                    .map(|r| r.seq)
                    .collect()
            };
            assert_eq!(seqs(None, 2), [0, 1]);
            assert_eq!(seqs(Some(1), 2), [2, 3]);
            assert_eq!(seqs(Some(3), 10), [4, 5]);
            assert_eq!(seqs(Some(5), 10), [] as [u32; 0]);
            assert_eq!(seqs(Some(u32::MAX), 10), [] as [u32; 0]);
            assert_eq!(seqs(None, 100), (0..6).collect::<Vec<_>>());
            assert!(s.steps_page("no-such-run", None, 10).unwrap().is_empty());
            assert_eq!(s.steps_page(R, Some(2), 1).unwrap()[0], step(R, 3, "four"));
        })]);
}

/// A fire's record and a retry's are counted to the run's tenant as they
/// are written (never refused), so deleting the run gives back only what
/// was counted.
#[test]
fn a_fires_record_and_a_retrys_are_counted_to_the_runs_tenant() {
    let (_dir, s) = crate::table::open();
    sleeping(&*s);
    let write = fire(&*s, Sleep);
    let Write::FireTimer {
        record: Some(record),
        ..
    } = &write
    else {
        panic!("a sleep's fire leaves a record");
    };
    let (before, len) = (s.stored_bytes("default").unwrap(), record.len() as u64);
    put(&*s, write);
    assert_eq!(s.stored_bytes("default").unwrap(), before + len);

    put(&*s, update(&*s, Failed));
    let run = stored_run(&*s, R);
    let mut wake = run.clone();
    (wake.state, wake.step_records) = (Running, run.step_records + 1);
    let write = Write::retry_run(&step(R, run.step_records, "@retry"), &wake);
    let Write::RetryRun { record, .. } = &write else {
        unreachable!()
    };
    let (before, len) = (s.stored_bytes("default").unwrap(), record.len() as u64);
    put(&*s, write);
    assert_eq!(s.stored_bytes("default").unwrap(), before + len);
}
