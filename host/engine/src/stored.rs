//! What the engine writes to a run it does not hold in memory: a timer's
//! fire, a cancel, an answer to an `await` step. Each record is decided
//! here, on the run as read from the store; the write names the number of
//! records that read saw, so the store refuses it (`Refused::Changed`)
//! if the run moved on meanwhile, and the change is decided again on a
//! fresh read.

use weft_core::ErrorRecord;

use weft_core::clock::Timestamp;
use weft_store::{
    Refused, RunError, RunRecord, RunState, StepRecord, Store, StoreError, TimerKind, TimerRecord,
    Write,
};

/// How many times a change refused because its run moved on is decided
/// again before the caller is told the run is busy.
pub(crate) const ATTEMPTS: usize = 8;

/// The record timer `timer`'s fire leaves in its run, numbered `seq`, if
/// its kind leaves one: a `sleep` has slept, a deadline or an `await`
/// timeout has failed; a retry delay leaves none (its next attempt is the
/// record).
pub(crate) fn fired_record(timer: &TimerRecord, seq: u32) -> Option<StepRecord> {
    let base = StepRecord::empty(
        &timer.run,
        seq,
        (timer.index, &timer.path, &timer.step_id),
        timer.attempt,
        timer.timer.due,
    );
    let due = timer.timer.due;
    match timer.timer.kind {
        TimerKind::Retry => None,
        TimerKind::Sleep => Some(StepRecord {
            output: Some(serde_json::json!({ "slept_until": due.to_string() })),
            ..base
        }),
        TimerKind::Deadline => Some(StepRecord {
            error: Some(ErrorRecord::fatal(
                "run_timeout",
                format!("the run's deadline passed at {due}"),
            )),
            ..base
        }),
        TimerKind::Await => Some(StepRecord {
            error: Some(ErrorRecord::fatal(
                "await_timeout",
                format!("no action came before {due}"),
            )),
            ..base
        }),
    }
}

/// Timer `timer`'s fire, decided on its run as read from `store` now:
/// `None` when the run is gone or has ended, and the timer wakes nothing.
pub(crate) fn decide_fire(
    store: &dyn Store,
    timer: &TimerRecord,
    now: Timestamp,
) -> Result<Option<Write>, StoreError> {
    Ok(decide_fire_on(store, timer, now)?.map(|(write, _)| write))
}

/// [`decide_fire`], with the run the fire was decided on, as stored.
pub(crate) fn decide_fire_on(
    store: &dyn Store,
    timer: &TimerRecord,
    now: Timestamp,
) -> Result<Option<(Write, RunRecord)>, StoreError> {
    let run = store.run(&timer.run)?;
    let run = run.filter(|run| !run.state.is_terminal());
    Ok(run.map(|run| (fire(timer, &run, now), run)))
}

/// Timer `timer`'s fire in `run` as stored: the record it leaves, and the
/// run awake.
fn fire(timer: &TimerRecord, run: &RunRecord, now: Timestamp) -> Write {
    let expect = run.step_records;
    let record = fired_record(timer, expect);
    let wake = woken(run, u32::from(record.is_some()), now);
    Write::fire_timer(timer.timer, expect, record.as_ref(), &wake)
}

/// The answer `record` to an `await` step of suspended `run`: numbered
/// next, with the run awake.
pub(crate) fn act(
    mut record: StepRecord,
    timer: Option<weft_store::TimerRef>,
    run: &RunRecord,
    now: Timestamp,
) -> Write {
    record.seq = run.step_records;
    // An answer is counted, never refused: it is as small as the API
    // lets a request be, and the run waits on it.
    Write::act(&record, timer, &woken(run, 1, now))
        .charged(weft_core::tenant::of(&run.workflow), false)
}

/// `run` awake at `now`, `added` records on.
fn woken(run: &RunRecord, added: u32, now: Timestamp) -> RunRecord {
    let mut wake = run.clone();
    wake.step_records += added;
    // A paused run stays asleep: what woke it waits for its resume.
    wake.suspended = run.paused.is_some();
    wake.updated_at = now;
    wake
}

/// Tries `change` until the run it is decided on does not move on under it
/// (`Err(Changed)`), at most [`ATTEMPTS`] times; then run `id` is busy.
pub(crate) fn decide_again(
    id: &str,
    mut change: impl FnMut() -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    for _ in 0..ATTEMPTS {
        match change() {
            Err(StoreError::Refused(Refused::Changed(_))) => continue,
            outcome => return outcome,
        }
    }
    Err(StoreError::Refused(Refused::Busy { run: id.to_owned() }))
}

/// Cancels run `id`, which this process does not drive, through `commit`:
/// the run ends `cancelled`, with error `cancelled`, and is marked so that
/// whoever drives it stops at its next commit. Decided again while the run
/// moves on under it, up to [`ATTEMPTS`] times. `Err(NotFound)` when there
/// is no such run, `Err(RunEnded)` when it has ended, `Err(Busy)` when it
/// kept moving. `ended` is told each run it cancelled (the run, then its
/// children, each once its cancellation committed): the cancellation of
/// each child goes through `commit` and `ended` again.
pub(crate) fn cancel_tree(
    store: &dyn Store,
    id: &str,
    now: Timestamp,
    commit: &dyn Fn(Write) -> Result<(), StoreError>,
    ended: &dyn Fn(&RunRecord),
) -> Result<(), StoreError> {
    decide_again(id, || cancel_once(store, id, now, commit, ended))
}

/// One try of [`cancel_tree`], decided on the run as read now:
/// `Err(Changed)` when it moved on before the commit.
pub(crate) fn cancel_once(
    store: &dyn Store,
    id: &str,
    now: Timestamp,
    commit: &dyn Fn(Write) -> Result<(), StoreError>,
    ended: &dyn Fn(&RunRecord),
) -> Result<(), StoreError> {
    let run = store.run(id)?.ok_or_else(|| {
        StoreError::Refused(Refused::NotFound(weft_store::What::Run(id.to_owned())))
    })?;
    if run.state.is_terminal() {
        return Err(StoreError::Refused(Refused::RunEnded(id.to_owned())));
    }
    let children = open_children(&store.steps(id)?);
    let cancelled = cancelled(&run, now);
    match commit(Write::cancel_run(run.step_records, &cancelled).fencing(children.clone())) {
        Ok(()) => {}
        // The cancellation may have landed, fencing its children off: read
        // back, its children are cancelled as if it was answered (else
        // nothing would ever end them).
        Err(e) if e.outcome_unknown() && !weft_core::mutation::on("lost-cancel-children-left") => {
            match store.run(id)? {
                Some(stored) if stored.state == RunState::Cancelled => {
                    tracing::info!(run = %id, "a cancellation whose commit failed ({e}) landed all the same");
                }
                _ => return Err(e),
            }
        }
        Err(e) => return Err(e),
    }
    ended(&cancelled);
    // Fenced off with the run: each is cancelled in turn (and its own).
    for child in children {
        match cancel_tree(store, &child, now, commit, ended) {
            Ok(()) | Err(StoreError::Refused(Refused::RunEnded(_) | Refused::NotFound(_))) => {}
            Err(e) => tracing::warn!(run = %child, "cannot cancel a child run: {e}"),
        }
    }
    Ok(())
}

/// The child runs that a run's records show its leaves waiting for.
fn open_children(records: &[StepRecord]) -> Vec<String> {
    crate::drive::fold(records)
        .values()
        .filter_map(|leaf| leaf.open_child().map(str::to_owned))
        .collect()
}

/// Run `run` cancelled at `now`, as its cancellation writes it.
fn cancelled(run: &RunRecord, now: Timestamp) -> RunRecord {
    let mut ended = run.clone();
    ended.state = RunState::Cancelled;
    ended.suspended = false;
    ended.paused = None;
    ended.updated_at = now;
    ended.error = Some(RunError {
        step: None,
        error: ErrorRecord::cancelled(),
    });
    ended
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use serde_json::json;
    use weft_store::{TimerRef, encode};

    use super::*;

    const NOW: Timestamp = Timestamp(90_000);

    fn run() -> RunRecord {
        serde_json::from_value(json!({
            "id": "r", "workflow": "wf", "workflow_version": 1, "origin": "test",
            "state": "running", "input": {}, "next_step": 0, "step_records": 3,
            "step_count": 2, "plugins": {}, "definition": "d0", "created_at": Timestamp(0),
            "updated_at": Timestamp(0), "suspended": true,
        }))
        .unwrap()
    }

    fn timer(kind: TimerKind) -> TimerRecord {
        TimerRecord {
            timer: TimerRef {
                id: 7,
                due: Timestamp(60_000),
                kind,
            },
            run: "r".to_owned(),
            path: "nap".to_owned(),
            step_id: "nap".to_owned(),
            index: 1,
            attempt: 2,
            tenant: None,
        }
    }

    #[test]
    fn each_kind_of_fire_leaves_its_record() {
        assert!(fired_record(&timer(TimerKind::Retry), 3).is_none());
        let slept = fired_record(&timer(TimerKind::Sleep), 3).unwrap();
        let until = Timestamp(60_000).to_string();
        assert_eq!(slept.output, Some(json!({ "slept_until": until })));
        assert_eq!(
            (slept.seq, slept.path.as_str(), slept.attempt),
            (3, "nap", 2)
        );
        let late = fired_record(&timer(TimerKind::Deadline), 3).unwrap();
        assert_eq!(late.error.unwrap().code, "run_timeout");
        let unanswered = fired_record(&timer(TimerKind::Await), 3).unwrap();
        let error = unanswered.error.unwrap();
        assert_eq!(
            (error.code.as_str(), error.retryable),
            ("await_timeout", false)
        );
    }

    #[test]
    fn a_fire_wakes_the_run_one_record_on_when_it_leaves_one() {
        let Write::FireTimer {
            expect,
            record,
            wake,
            ..
        } = fire(&timer(TimerKind::Sleep), &run(), NOW)
        else {
            panic!("not a fire");
        };
        let fired = fired_record(&timer(TimerKind::Sleep), 3).unwrap();
        assert_eq!((expect, record), (3, Some(encode(&fired))));
        let mut woken = run();
        (woken.step_records, woken.suspended, woken.updated_at) = (4, false, NOW);
        assert_eq!(wake, encode(&woken));
        let Write::FireTimer { record, wake, .. } = fire(&timer(TimerKind::Retry), &run(), NOW)
        else {
            panic!("not a fire");
        };
        woken.step_records = 3;
        assert_eq!((record, wake), (None, encode(&woken)));
    }

    #[test]
    fn an_answer_is_numbered_next_and_wakes_the_run() {
        let answer = StepRecord::empty("r", 0, (1, "ask", "ask"), 1, NOW);
        let Write::Act {
            expect,
            record,
            wake,
            ..
        } = act(answer.clone(), None, &run(), NOW)
        else {
            panic!("not an answer");
        };
        let numbered = StepRecord { seq: 3, ..answer };
        assert_eq!((expect, record), (3, encode(&numbered)));
        let mut woken = run();
        (woken.step_records, woken.suspended, woken.updated_at) = (4, false, NOW);
        assert_eq!(wake, encode(&woken));
    }

    #[test]
    fn a_cancel_ends_the_run_and_says_why() {
        let ended = cancelled(&run(), NOW);
        assert_eq!(
            (ended.step_records, ended.state, ended.suspended),
            (3, RunState::Cancelled, false)
        );
        let error = ended.error.unwrap();
        assert_eq!((error.step, error.error.code.as_str()), (None, "cancelled"));
        assert_eq!(ended.updated_at, NOW);
    }
}
