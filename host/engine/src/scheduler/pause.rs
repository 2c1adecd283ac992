//! Pausing a run and resuming it: through its cell when it is resident
//! here, else in the store.

use std::sync::Arc;

use weft_core::lock;
use weft_store::{PauseMark, Refused, StoreError, Write};

use super::{Scheduler, Work};
use crate::error::PauseError;

/// Where a pause got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pausing {
    /// Durable: the run is paused.
    Paused,
    /// The run is resident here with a call under way: it starts nothing
    /// new, and is paused once what is under way is committed.
    Pending,
}

/// How many times a change decided on a run that moved on is decided again.
const TRIES: usize = 5;

impl Scheduler {
    /// Pauses run `id`, as `actor` asks.
    pub(crate) fn pause_run(
        self: &Arc<Self>,
        id: &str,
        actor: &str,
    ) -> Result<Pausing, PauseError> {
        let store = &self.launcher.store;
        for _ in 0..TRIES {
            // The map's lock is let go before the cell's is taken: a commit's
            // callback holds a cell's and then takes the map's.
            let cell = lock(&self.cells).get(id).cloned();
            if let Some(cell) = cell {
                // A host stopped past its lease may hold a run another host
                // took meanwhile, until it lets such runs go: the cell's
                // lease must be the store's.
                let stored = store.lease(id)?;
                let mut live = lock(&cell.live);
                if !live.closed && stored.as_ref() != live.task.drive.lease() {
                    drop(live);
                    return Err(PauseError::Busy {
                        run: id.to_owned(),
                        why: match stored {
                            Some(lease) if !lease.host.is_empty() => {
                                format!("host {} drives it; pause it through that host", lease.host)
                            }
                            _ => "it is being taken in; try again in a moment".to_owned(),
                        },
                    });
                }
                if !live.closed {
                    // Its end is being committed (a cancellation, a
                    // deadline, its last step).
                    let state = live.task.drive.run.state;
                    if state.is_terminal() {
                        return Err(PauseError::Ended {
                            run: id.to_owned(),
                            state,
                        });
                    }
                    if live.task.drive.run.paused.is_some() || live.pausing.is_some() {
                        return Err(PauseError::Already {
                            run: id.to_owned(),
                            paused: true,
                        });
                    }
                    live.pausing = Some(actor.to_owned());
                    tracing::debug!(run = %id, "a pause is pending");
                    drop(live);
                    self.enqueue(Work::Advance(cell));
                    return Ok(Pausing::Pending);
                }
            }
            let run = not_ended(store.as_ref(), id, false)?;
            if !run.suspended {
                let lease = store.lease(id)?;
                // Being taken in here (just started, or read back): held
                // in a moment.
                if lease.as_ref().is_some_and(|l| l.host == self.host()) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    continue;
                }
                let why = match lease {
                    None => "it waits for a place (parked); pause it once it runs".to_owned(),
                    Some(lease) => format!(
                        "host {} drives it; pause it through that host",
                        if lease.host.is_empty() {
                            "(none yet)"
                        } else {
                            &lease.host
                        }
                    ),
                };
                return Err(PauseError::Busy {
                    run: id.to_owned(),
                    why,
                });
            }
            match self.commits.commit(self.pause_in_store(run, actor)) {
                Ok(()) => return Ok(Pausing::Paused),
                // It moved on (a fire, an answer, a wake): decided again.
                Err(StoreError::Refused(Refused::Changed(_) | Refused::Busy { .. })) => {}
                Err(StoreError::Refused(Refused::RunEnded(_))) => {}
                Err(StoreError::Refused(Refused::NotFound(_))) => {
                    return Err(PauseError::NotFound(id.to_owned()));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(PauseError::Busy {
            run: id.to_owned(),
            why: "it kept moving; try again".to_owned(),
        })
    }

    /// A pause of run `id` that was pending when the run left memory, kept
    /// in `pending_pauses` (see `Scheduler::release`): the cell that holds the
    /// run again takes it up, and a run suspended in the store is paused
    /// there. Nothing is done once the entry is gone (taken up, or taken
    /// back by a resume). While the run is being read back or waits for a
    /// place here, it is looked at again later; a run another host drives
    /// now loses the pause (it was this host's memory alone), as does one
    /// that could not be paused in ten tries.
    pub(super) fn pause_left(self: &Arc<Self>, id: &str, actor: &str, tries: u32) {
        let again = |tries: u32| {
            let work = Work::Pause(id.to_owned(), actor.to_owned(), tries);
            self.retry_later(tries, super::Later::Work(work));
        };
        let give_up = |why: &str| {
            if lock(&self.pending_pauses).remove(id).is_some() {
                tracing::warn!(run = %id, "a pending pause was given up: {why}");
            }
        };
        // The map's lock is let go before the cell's is taken (see
        // `pause_run`); the cell's is held while the entry is taken.
        let cell = lock(&self.cells).get(id).cloned();
        if let Some(cell) = cell {
            let mut live = lock(&cell.live);
            if !live.closed {
                let pending = lock(&self.pending_pauses).remove(id).is_some();
                if pending && live.pausing.is_none() && live.task.drive.run.paused.is_none() {
                    live.pausing = Some(actor.to_owned());
                    drop(live);
                    self.enqueue(Work::Advance(cell));
                }
                return;
            }
        }
        if !lock(&self.pending_pauses).contains_key(id) {
            return;
        }
        let store = &self.launcher.store;
        let run = match not_ended(store.as_ref(), id, false) {
            Ok(run) => run,
            Err(
                PauseError::Ended { .. } | PauseError::Already { .. } | PauseError::NotFound(_),
            ) => {
                lock(&self.pending_pauses).remove(id);
                return;
            }
            Err(_) if tries < 10 => return again(tries + 1),
            Err(e) => return give_up(&e.to_string()),
        };
        if !run.suspended {
            match store.lease(id) {
                // Being read back, or waiting for a place here: its cell
                // takes the pause up. Looked at again, for longer.
                Ok(Some(lease)) if lease.host == self.host() && tries < 30 => again(tries + 1),
                Ok(Some(lease)) if !lease.host.is_empty() => {
                    give_up(&format!("host {} drives the run now", lease.host));
                }
                // Free work, or a lease a resume or a migration freed:
                // whoever claims it first drives it (here, its cell takes
                // the pause up).
                _ if tries < 10 => again(tries + 1),
                _ => give_up("nobody has taken the run in"),
            }
            return;
        }
        // Marked as being committed: a resume meanwhile waits for the
        // outcome (see `unpause_run`).
        match lock(&self.pending_pauses).get_mut(id) {
            Some(kept) => kept.committing = true,
            None => return,
        }
        match self.commits.commit(self.pause_in_store(run, actor)) {
            Ok(()) | Err(StoreError::Refused(Refused::RunEnded(_) | Refused::NotFound(_))) => {
                lock(&self.pending_pauses).remove(id);
            }
            // It moved on (a fire, a wake), or the store failed (if the
            // pause landed, the next try finds the run paused): pending
            // again.
            Err(e) => {
                if let Some(kept) = lock(&self.pending_pauses).get_mut(id) {
                    kept.committing = false;
                }
                if tries < 10 {
                    again(tries + 1);
                } else {
                    give_up(&e.to_string());
                }
            }
        }
    }

    /// The write that pauses suspended run `run`, as stored, in the
    /// store, as `actor` asks.
    fn pause_in_store(&self, mut run: weft_store::RunRecord, actor: &str) -> Write {
        let now = self.clock.now();
        run.paused = Some(PauseMark {
            at: now,
            actor: actor.to_owned(),
        });
        run.updated_at = now;
        Write::pause_run(&run)
    }

    /// Takes back a pause of run `id`: one still pending here is dropped
    /// (true); a durable one is lifted in the store (false), and the run
    /// is then to be taken in by whoever claims it first.
    pub(crate) fn unpause_run(self: &Arc<Self>, id: &str) -> Result<bool, PauseError> {
        let busy = || PauseError::Busy {
            run: id.to_owned(),
            why: "its pause is being committed; resume it again in a moment".to_owned(),
        };
        // A pause pending for a run out of memory (see `pause_left`), or
        // the cell that took it up: looked for under the pending pauses'
        // lock, which `take` holds until the cell is in `cells`. Both
        // locks are let go before the cell's is taken: a commit's callback
        // holds a cell's and then takes each.
        let (dropped, cell) = {
            let mut pending = lock(&self.pending_pauses);
            match pending.get(id) {
                Some(kept) if kept.committing => return Err(busy()),
                Some(_) => {
                    pending.remove(id);
                    (true, None)
                }
                None => (false, lock(&self.cells).get(id).cloned()),
            }
        };
        if let Some(cell) = cell {
            let mut live = lock(&cell.live);
            if !live.closed {
                // Its pause is being committed: what it comes to is not
                // known yet.
                if live.pause_committing {
                    return Err(busy());
                }
                if live.pausing.take().is_none() {
                    return Err(PauseError::Already {
                        run: id.to_owned(),
                        paused: false,
                    });
                }
                drop(live);
                self.enqueue(Work::Advance(cell));
                return Ok(true);
            }
        }
        // A pending pause dropped: unless it landed after all, the run is
        // not paused.
        let store = &self.launcher.store;
        for _ in 0..TRIES {
            let run = match not_ended(store.as_ref(), id, true) {
                Err(PauseError::Already { paused: false, .. }) if dropped => return Ok(true),
                other => other?,
            };
            let mut resumed = run.clone();
            resumed.paused = None;
            resumed.suspended = false;
            resumed.updated_at = self.clock.now();
            match self.commits.commit(Write::pause_run(&resumed)) {
                Ok(()) => return Ok(false),
                Err(StoreError::Refused(Refused::Changed(_))) => {}
                Err(StoreError::Refused(Refused::NotFound(_))) => {
                    return Err(PauseError::NotFound(id.to_owned()));
                }
                // The resume may have landed: if it did, the run is free to
                // go on with no driver, and is woken after a pause (a wake
                // of a run still paused leaves it as it is).
                Err(e)
                    if e.outcome_unknown() && !weft_core::mutation::on("lost-resume-not-woken") =>
                {
                    self.wake_later(id);
                    return Err(e.into());
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(PauseError::Busy {
            run: id.to_owned(),
            why: "it kept moving; try again".to_owned(),
        })
    }
}

/// Run `id` as stored, if it has not ended and is `paused` (or not).
fn not_ended(
    store: &dyn weft_store::Store,
    id: &str,
    paused: bool,
) -> Result<weft_store::RunRecord, PauseError> {
    let run = store
        .run(id)?
        .ok_or_else(|| PauseError::NotFound(id.to_owned()))?;
    if run.state.is_terminal() {
        return Err(PauseError::Ended {
            run: id.to_owned(),
            state: run.state,
        });
    }
    if run.paused.is_some() != paused {
        return Err(PauseError::Already {
            run: id.to_owned(),
            paused: run.paused.is_some(),
        });
    }
    Ok(run)
}
