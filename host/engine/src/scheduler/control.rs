//! What callers do to a run from outside: cancel it, or answer one of its
//! `await` steps.

use std::sync::Arc;
use std::time::Duration;

use weft_core::lock;
use weft_store::{Refused, StoreError};

use crate::drive::{Answer, Reply};
use crate::error::ActError;

use super::Scheduler;

/// Where one try of a cancellation got to.
pub(crate) enum Cancelling {
    /// Queued with the run's cell: its commit's outcome comes on the
    /// receiver.
    Queued(std::sync::mpsc::Receiver<Result<(), StoreError>>),
    /// Answered.
    Done(Result<(), StoreError>),
}

/// Where one try of an answer got to.
pub(crate) enum Acting {
    /// Queued with the run's cell: its commit's outcome comes on the
    /// receiver (closed if the run ended before the answer landed).
    Queued(std::sync::mpsc::Receiver<Result<(), StoreError>>),
    /// Answered.
    Done(Result<(), ActError>),
    /// Not decided yet: try again after the pause.
    Again(Duration),
}

/// What an answer queued with a run's cell came to, from its commit's
/// outcome (`None`: the run ended before the answer landed).
pub(crate) fn answered(
    id: &str,
    path: &str,
    outcome: Option<Result<(), StoreError>>,
) -> Result<(), ActError> {
    match outcome {
        Some(Ok(())) => Ok(()),
        Some(Err(StoreError::Refused(Refused::TimerGone(_)))) => Err(ActError::NotWaiting {
            run: id.to_owned(),
            step: path.to_owned(),
            state: "timed out".to_owned(),
        }),
        Some(Err(e)) => Err(ActError::Store(e)),
        None => Err(ActError::Ended(id.to_owned())),
    }
}

impl Scheduler {
    /// Cancels run `id`, and returns once the cancellation is durable:
    /// through its cell when it is resident (the walk then ends it, and
    /// the answer waits for that commit), otherwise in the store, looking
    /// for a cell again whenever the run moved on under the cancel (it may
    /// have been taken in meanwhile). `Err(RunEnded)` when it has ended
    /// (first, if it ended while the cancellation waited),
    /// `Err(NotFound)` when the store has no such run, `Err(Busy)` when it
    /// kept moving in another process.
    pub(crate) fn cancel(self: &Arc<Self>, id: &str) -> Result<(), StoreError> {
        for _ in 0..crate::stored::ATTEMPTS {
            let outcome = match self.cancel_once(id)? {
                Cancelling::Queued(told) => self.cancel_answered(id, told.recv().ok()),
                Cancelling::Done(outcome) => outcome,
            };
            match outcome {
                // Let go of by its cell before the cancellation committed
                // (its store failed): cancelled in the store next time.
                Err(StoreError::Refused(Refused::Changed(_))) => continue,
                outcome => return outcome,
            }
        }
        Err(StoreError::Refused(Refused::Busy { run: id.to_owned() }))
    }

    /// One try of [`Scheduler::cancel`] that never waits for a commit of its
    /// own cell: a cancellation queued with the cell answers on the
    /// receiver, which [`Scheduler::cancel_answered`] reads.
    pub(crate) fn cancel_once(self: &Arc<Self>, id: &str) -> Result<Cancelling, StoreError> {
        let mut queued = None;
        let outcome = crate::stored::decide_again(id, || {
            if let Some(told) = self.cancel_resident(id) {
                queued = Some(told);
                return Ok(());
            }
            let store = self.launcher.store.as_ref();
            let commit = |write| self.commits.commit(write);
            let ended = |run: &weft_store::RunRecord| self.ended_in_store(run);
            crate::stored::cancel_once(store, id, self.clock.now(), &commit, &ended)
        });
        Ok(match queued {
            Some(told) => Cancelling::Queued(told),
            None => Cancelling::Done(outcome),
        })
    }

    /// What a cancellation queued with run `id`'s cell came to, from its
    /// commit's outcome (`None`: the cell let the run go first). A run that
    /// ended before the cancellation landed is `Err(RunEnded)`, unless it
    /// was cancelled elsewhere; one let go of while still running is
    /// `Err(Changed)`: try again.
    pub(crate) fn cancel_answered(
        &self,
        id: &str,
        outcome: Option<Result<(), StoreError>>,
    ) -> Result<(), StoreError> {
        match outcome {
            Some(Ok(())) => Ok(()),
            Some(Err(StoreError::Refused(Refused::RunEnded(_)))) | None => {
                match self.launcher.store.run(id)? {
                    Some(run) if run.state == weft_store::RunState::Cancelled => Ok(()),
                    Some(run) if run.state.is_terminal() => {
                        Err(StoreError::Refused(Refused::RunEnded(run.id)))
                    }
                    Some(_) => Err(StoreError::Refused(Refused::Changed(
                        weft_store::What::Run(id.to_owned()),
                    ))),
                    None => Err(StoreError::Refused(Refused::NotFound(
                        weft_store::What::Run(id.to_owned()),
                    ))),
                }
            }
            Some(Err(e)) => Err(e),
        }
    }

    /// Cancels run `id` through its cell, if it is resident: the
    /// cancellation's outcome comes on the receiver.
    fn cancel_resident(
        self: &Arc<Self>,
        id: &str,
    ) -> Option<std::sync::mpsc::Receiver<Result<(), StoreError>>> {
        let cell = lock(&self.cells).get(id).cloned()?;
        let mut live = lock(&cell);
        if live.closed {
            return None;
        }
        let (tell, told) = std::sync::mpsc::sync_channel(1);
        let cancelled = live.task.drive.cancelled(self.clock.as_ref());
        let cancelled = cancelled.telling(Box::new(move |outcome| {
            let _ = tell.send(outcome);
        }));
        live.finished.push_back(cancelled);
        drop(live);
        self.advance(&cell);
        Some(told)
    }

    /// Answers the `await` leaf at `path` of run `id`: through its cell
    /// when it is resident, otherwise in the store (the run must be
    /// suspended there), then wakes it. Blocks until the answer is
    /// durable, or refused.
    pub(crate) fn act(
        self: &Arc<Self>,
        id: &str,
        path: &str,
        answer: &Answer,
    ) -> Result<(), ActError> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let last = std::time::Instant::now() >= deadline;
            match self.act_once(id, path, answer, last) {
                Acting::Queued(told) => match answered(id, path, told.recv().ok()) {
                    // The run left memory before the answer was committed:
                    // it goes through the store now.
                    Err(ActError::Store(StoreError::Refused(Refused::Changed(_)))) if !last => {}
                    outcome => return outcome,
                },
                Acting::Done(outcome) => return outcome,
                Acting::Again(pause) => std::thread::sleep(pause),
            }
        }
    }

    /// One try of [`Scheduler::act`], which never blocks on a commit of its
    /// own cell: an answer through the cell is queued, and its outcome
    /// comes later on the receiver. `last`: this is the last try, so a
    /// run that is parked or keeps moving is answered `Busy` or through
    /// the store, not tried again.
    pub(crate) fn act_once(
        self: &Arc<Self>,
        id: &str,
        path: &str,
        answer: &Answer,
        last: bool,
    ) -> Acting {
        let cell = lock(&self.cells).get(id).cloned();
        if let Some(cell) = cell {
            let mut live = lock(&cell);
            if !live.closed {
                let (tell, told) = std::sync::mpsc::sync_channel(1);
                let reply: Reply = Box::new(move |outcome| {
                    let _ = tell.send(outcome);
                });
                return match live
                    .task
                    .drive
                    .answer(path, answer, self.clock.as_ref(), reply)
                {
                    Ok(finished) => {
                        live.finished.push_back(finished);
                        drop(live);
                        self.advance(&cell);
                        Acting::Queued(told)
                    }
                    Err(_) => Acting::Done(Err(ActError::NotWaiting {
                        run: id.to_owned(),
                        step: path.to_owned(),
                        state: live.task.drive.describe(path),
                    })),
                };
            }
        }
        // Claimed while the answer is decided and committed, so that no
        // load of the run here reads it half way. Parked, being loaded, or
        // a fire of it being decided: it has a cell soon.
        if !self.claim(id) {
            return if last {
                Acting::Done(Err(ActError::Busy(format!(
                    "run `{id}` is being taken in; try again"
                ))))
            } else {
                Acting::Again(Duration::from_millis(10))
            };
        }
        let outcome = self.act_in_store(id, path, answer);
        // An answer whose commit's answer was lost may have landed: the
        // wake reads the run back (still waiting, it stays asleep).
        if let Err(ActError::Store(e)) = &outcome {
            self.answer_lost(e);
        }
        let landed = match &outcome {
            Ok(()) => true,
            Err(ActError::Store(e)) => {
                e.outcome_unknown() && !weft_core::mutation::on("lost-answer-not-woken")
            }
            Err(_) => false,
        };
        self.unclaim_waking(id, landed);
        match outcome {
            // The run moved on after it was read (another record
            // landed, or it woke): look again.
            Err(ActError::Store(StoreError::Refused(Refused::Changed(_)))) if !last => {
                Acting::Again(Duration::from_millis(5))
            }
            Err(ActError::Store(StoreError::Refused(Refused::Changed(_)))) => {
                Acting::Done(Err(ActError::Busy(format!(
                    "run `{id}` kept moving while the answer was decided; try again"
                ))))
            }
            outcome => Acting::Done(outcome),
        }
    }

    /// [`Scheduler::act`] for a run that is not in memory, claimed here; the
    /// caller wakes it once the answer landed;
    /// `Err(Store(Changed))` when the run moved on between its read and the
    /// answer's commit.
    fn act_in_store(
        self: &Arc<Self>,
        id: &str,
        path: &str,
        answer: &Answer,
    ) -> Result<(), ActError> {
        let store = &self.launcher.store;
        let run = store
            .run(id)?
            .ok_or_else(|| ActError::NotFound(id.to_owned()))?;
        if run.state.is_terminal() {
            return Err(ActError::Ended(id.to_owned()));
        }
        let found = crate::drive::fold(&store.steps(id)?).remove(path);
        let seen = found.is_some();
        let leaf = found.unwrap_or_default();
        if !seen || !leaf.awaiting {
            let state = if !seen {
                "not reached (or not an `await` step)".to_owned()
            } else {
                crate::drive::leaf_state(&leaf)
            };
            return Err(ActError::NotWaiting {
                run: id.to_owned(),
                step: path.to_owned(),
                state,
            });
        }
        let now = self.clock.now();
        let record = answer.record(id, path, &leaf, now);
        let told = record.clone();
        // The answer takes the run (it is suspended: nobody drives it).
        let lease = self.lease_for(id)?;
        match self
            .commits
            .commit(crate::stored::act(record, leaf.timer, &run, now).under(lease))
        {
            Ok(()) => {
                self.telemetry.step(&run, &told, false);
                Ok(())
            }
            Err(StoreError::Refused(Refused::TimerGone(_))) => Err(ActError::NotWaiting {
                run: id.to_owned(),
                step: path.to_owned(),
                state: "timed out".to_owned(),
            }),
            Err(StoreError::Refused(Refused::RunEnded(_))) => Err(ActError::Ended(id.to_owned())),
            Err(StoreError::Refused(Refused::Busy { run })) => Err(ActError::Busy(format!(
                "run `{run}` is in progress in another process"
            ))),
            Err(StoreError::Refused(Refused::Fenced { run, owner })) => Err(ActError::Busy(
                format!("run `{run}` is driven by host `{owner}`"),
            )),
            Err(StoreError::Refused(Refused::NotFound(weft_store::What::Run(_)))) => {
                Err(ActError::NotFound(id.to_owned()))
            }
            Err(e) => Err(ActError::Store(e)),
        }
    }
}
