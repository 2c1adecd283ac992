//! Retrying an ended run: which leaves run again, and the `@retry` record
//! and run record that say so. The decision reads the store only; the
//! engine commits it ([`weft_store::Write::RetryRun`]) and then takes the
//! run in like any run to resume.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use weft_core::clock::Timestamp;
use weft_store::{
    RETRY_PATH, RetryMark, RunRecord, RunState, StepRecord, Store, TimerKind, TimerRef,
};

use crate::drive::fold;
use crate::error::RetryError;

/// What a retry of `run` (with its `steps`, as read) stores: the `@retry`
/// record, and the run running again. `from` names the leaf to go on from;
/// without it, a failed run goes on from the leaf whose failure ended it,
/// and a timed-out or cancelled one from where it stood. `timeout` is its
/// workflow's, which gives it a new deadline from `now`.
pub(crate) fn decide(
    store: &dyn Store,
    run: &RunRecord,
    steps: &[StepRecord],
    from: Option<&str>,
    actor: &str,
    timeout: Option<Duration>,
    now: Timestamp,
) -> Result<(StepRecord, RunRecord), RetryError> {
    if matches!(run.state, RunState::Running | RunState::Succeeded) {
        return Err(RetryError::NotEnded {
            run: run.id.clone(),
            state: run.state,
        });
    }
    if let Some(parent) = &run.parent {
        return Err(RetryError::Child {
            run: run.id.clone(),
            parent: parent.run.clone(),
        });
    }
    let leaves = fold(steps);
    // Each leaf's last record, by number: what ended last.
    let mut last: BTreeMap<&str, u32> = BTreeMap::new();
    for record in steps {
        let path = if record.path.is_empty() {
            &record.step_id
        } else {
            &record.path
        };
        last.insert(path, record.seq);
    }
    let failed: Vec<String> = leaves
        .iter()
        .filter(|(path, leaf)| leaf.failed() && !path.starts_with('@'))
        .map(|(path, _)| path.clone())
        .collect();
    let mut reset: BTreeSet<String> = BTreeSet::new();
    if let Some(path) = from {
        let Some(leaf) = leaves.get(path).filter(|_| !path.starts_with('@')) else {
            return Err(RetryError::UnknownStep {
                run: run.id.clone(),
                step: path.to_owned(),
                failed,
            });
        };
        if leaf.stands() {
            return Err(RetryError::NotFailed {
                run: run.id.clone(),
                step: path.to_owned(),
                state: crate::drive::leaf_state(leaf),
            });
        }
        // With it, every failure that came after it (its handlers', the
        // one that ended the run): the walk reaches them again.
        let at = last.get(path).copied().unwrap_or(0);
        reset.insert(path.to_owned());
        reset.extend(
            failed
                .iter()
                .filter(|other| last.get(other.as_str()).is_some_and(|seq| *seq > at))
                .cloned(),
        );
    } else if run.state == RunState::Failed {
        // The leaf whose failure ended the run: the run's error names its
        // step, and it failed last.
        let step = run.error.as_ref().and_then(|e| e.step.as_deref());
        let ended_it = failed
            .iter()
            .filter(|path| step.is_some_and(|step| leaves[path.as_str()].step() == step))
            .max_by_key(|path| last.get(path.as_str()).copied().unwrap_or(0));
        match ended_it {
            Some(path) => {
                reset.insert(path.clone());
            }
            None => {
                return Err(RetryError::NotRetryable {
                    run: run.id.clone(),
                    why: "it failed on an expression or its outputs, not on a step, and the \
                          definition it follows is pinned, so it would fail the same way; \
                          name a step with --from"
                        .to_owned(),
                });
            }
        }
    }
    // What the end broke off: its cancellation and deadline records, the
    // waits whose timers went with it, and the children that did not
    // succeed (a new child starts).
    for (path, leaf) in &leaves {
        if path == weft_store::CANCEL_PATH || path == weft_store::DEADLINE_PATH || leaf.waits() {
            reset.insert(path.clone());
        } else if let Some(child) = leaf.open_child() {
            let ended_badly = store.run(child)?.is_none_or(|child| {
                child.state.is_terminal() && child.state != RunState::Succeeded
            });
            if ended_badly {
                reset.insert(path.clone());
            }
        }
    }
    let retries = steps.iter().filter(|r| r.path == RETRY_PATH).count();
    let mut record = StepRecord::empty(
        &run.id,
        run.step_records,
        (run.next_step, RETRY_PATH, RETRY_PATH),
        u32::try_from(retries + 1).unwrap_or(u32::MAX),
        now,
    );
    record.retry = Some(RetryMark {
        actor: actor.to_owned(),
        from: from.map(str::to_owned),
        was: run.state,
        error: run.error.clone(),
        reset: reset.into_iter().collect(),
    });
    let mut wake = run.clone();
    wake.state = RunState::Running;
    wake.error = None;
    wake.outputs = None;
    wake.suspended = false;
    wake.paused = None;
    wake.step_records += 1;
    wake.updated_at = now;
    // A new deadline, a whole timeout from now: a run that timed out had
    // passed its old one.
    wake.deadline = timeout.map(|timeout| TimerRef {
        id: weft_core::ids::random_u64(),
        due: now + timeout,
        kind: TimerKind::Deadline,
    });
    Ok((record, wake))
}
