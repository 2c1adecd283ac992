//! What callers do to a run from outside: cancel it, or answer one of its
//! `await` steps.

use std::sync::Arc;
use std::time::Duration;

use weft_core::lock;
use weft_store::StoreError;

use crate::drive::{Answer, Reply};
use crate::error::ActError;

use super::{Core, Work};

impl Core {
    /// Cancels run `id`: through its cell when it is resident (the walk
    /// then ends it), otherwise in the store, looking for a cell again
    /// whenever the run moved on under the cancel (it may have been taken
    /// in meanwhile). `Err(RunEnded)` when it has already ended,
    /// `Err(NotFound)` when the store has no such run, `Err(Busy)` when it
    /// kept moving in another process.
    pub(crate) fn cancel(self: &Arc<Self>, id: &str) -> Result<(), StoreError> {
        crate::stored::decide_again(id, || {
            if self.cancel_resident(id) {
                return Ok(());
            }
            let store = self.launcher.store.as_ref();
            let commit = |write| self.commits.commit(write);
            crate::stored::cancel_once(store, id, self.clock.now(), commit)
        })
    }

    /// Cancels run `id` through its cell, if it is resident.
    fn cancel_resident(self: &Arc<Self>, id: &str) -> bool {
        let Some(cell) = lock(&self.cells).get(id).cloned() else {
            return false;
        };
        let mut live = lock(&cell);
        if live.closed {
            return false;
        }
        let cancelled = live.task.drive.cancelled(self.clock.as_ref());
        live.finished.push_back(cancelled);
        drop(live);
        self.advance(&cell);
        true
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
                            match told.recv() {
                                Ok(Ok(())) => Ok(()),
                                Ok(Err(StoreError::TimerGone(_))) => Err(ActError::NotWaiting {
                                    run: id.to_owned(),
                                    step: path.to_owned(),
                                    state: "timed out".to_owned(),
                                }),
                                Ok(Err(e)) => Err(ActError::Store(e)),
                                // The run ended before the answer landed.
                                Err(_) => Err(ActError::Ended(id.to_owned())),
                            }
                        }
                        Err(_) => Err(ActError::NotWaiting {
                            run: id.to_owned(),
                            step: path.to_owned(),
                            state: live.task.drive.describe(path),
                        }),
                    };
                }
            }
            let waited = std::time::Instant::now() >= deadline;
            // Parked or being loaded: it has a cell soon.
            if lock(&self.admission).known.contains(id) && !waited {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            match self.act_in_store(id, path, answer) {
                // The run moved on after it was read (another record
                // landed, or it woke): look again.
                Err(ActError::Store(StoreError::Changed(_))) if !waited => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(ActError::Store(StoreError::Changed(_))) => {
                    return Err(ActError::Busy(format!(
                        "run `{id}` kept moving while the answer was decided; try again"
                    )));
                }
                outcome => return outcome,
            }
        }
    }

    /// [`Core::act`] for a run that is not in memory;
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
        let mut leaf = crate::drive::Leaf::default();
        let mut seen = false;
        for record in store.steps(id)? {
            if record.path == path {
                leaf.apply(&record);
                seen = true;
            }
        }
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
        match self
            .commits
            .commit(crate::stored::act(record, leaf.timer, &run, now))
        {
            Ok(()) => {
                self.enqueue(Work::Wake(id.to_owned()));
                Ok(())
            }
            Err(StoreError::TimerGone(_)) => Err(ActError::NotWaiting {
                run: id.to_owned(),
                step: path.to_owned(),
                state: "timed out".to_owned(),
            }),
            Err(StoreError::RunEnded(_)) => Err(ActError::Ended(id.to_owned())),
            Err(StoreError::Busy { run }) => Err(ActError::Busy(format!(
                "run `{run}` is in progress in another process"
            ))),
            Err(StoreError::NotFound(weft_store::What::Run(_))) => {
                Err(ActError::NotFound(id.to_owned()))
            }
            Err(e) => Err(ActError::Store(e)),
        }
    }
}
