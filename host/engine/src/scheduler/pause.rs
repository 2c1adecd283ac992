//! Pausing a run and resuming it: through its cell when it is resident
//! here, else in the store.

use std::sync::Arc;

use weft_core::lock;
use weft_store::{PauseMark, StoreError, Write};

use super::{Core, Work};
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

impl Core {
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
                let mut live = lock(&cell.live);
                if !live.closed {
                    if live.task.drive.run.paused.is_some() || live.pausing.is_some() {
                        return Err(PauseError::Already {
                            run: id.to_owned(),
                            paused: true,
                        });
                    }
                    live.pausing = Some(actor.to_owned());
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
            let mut paused = run.clone();
            let now = self.clock.now();
            paused.paused = Some(PauseMark {
                at: now,
                actor: actor.to_owned(),
            });
            paused.updated_at = now;
            match self.commits.commit(Write::pause_run(&paused)) {
                Ok(()) => return Ok(Pausing::Paused),
                // It moved on (a fire, an answer, a wake): decided again.
                Err(StoreError::Changed(_) | StoreError::Busy { .. }) => {}
                Err(StoreError::RunEnded(_)) => {}
                Err(StoreError::NotFound(_)) => return Err(PauseError::NotFound(id.to_owned())),
                Err(e) => return Err(e.into()),
            }
        }
        Err(PauseError::Busy {
            run: id.to_owned(),
            why: "it kept moving; try again".to_owned(),
        })
    }

    /// A pause of run `id` that was pending when the run left memory: done
    /// now, in the store or through the cell that holds it again; tried
    /// again after a pause while the run cannot be paused yet (it is being
    /// read back), at most ten times.
    pub(super) fn pause_left(self: &Arc<Self>, id: &str, actor: &str, tries: u32) {
        match self.pause_run(id, actor) {
            Ok(_) | Err(PauseError::Ended { .. } | PauseError::Already { .. }) => {}
            Err(PauseError::NotFound(_)) => {}
            Err(e) if tries < 10 => {
                tracing::debug!(run = %id, "a pending pause waits: {e}");
                let again = Work::Pause(id.to_owned(), actor.to_owned(), tries + 1);
                self.retry_later(tries, super::Later::Work(again));
            }
            Err(e) => tracing::warn!(run = %id, "a pending pause was given up: {e}"),
        }
    }

    /// Takes back a pause of run `id`: one still pending here is dropped
    /// (true); a durable one is lifted in the store (false), and the run
    /// is then to be taken in by whoever claims it first.
    pub(crate) fn unpause_run(self: &Arc<Self>, id: &str) -> Result<bool, PauseError> {
        // The map's lock is let go before the cell's is taken: a commit's
        // callback holds a cell's and then takes the map's.
        let cell = lock(&self.cells).get(id).cloned();
        if let Some(cell) = cell {
            let mut live = lock(&cell.live);
            if !live.closed {
                // Its pause is being committed: what it comes to is not
                // known yet.
                if live.pause_committing {
                    return Err(PauseError::Busy {
                        run: id.to_owned(),
                        why: "its pause is being committed; resume it again in a moment".to_owned(),
                    });
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
        let store = &self.launcher.store;
        for _ in 0..TRIES {
            let run = not_ended(store.as_ref(), id, true)?;
            let mut resumed = run.clone();
            resumed.paused = None;
            resumed.suspended = false;
            resumed.updated_at = self.clock.now();
            match self.commits.commit(Write::pause_run(&resumed)) {
                Ok(()) => return Ok(false),
                Err(StoreError::Changed(_)) => {}
                Err(StoreError::NotFound(_)) => return Err(PauseError::NotFound(id.to_owned())),
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
