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
    /// then ends it), otherwise in the store. `Err(RunEnded)` when it has
    /// already ended, `Err(NotFound)` when the store has no such run.
    pub(crate) fn cancel(self: &Arc<Self>, id: &str) -> Result<(), StoreError> {
        let cell = lock(&self.cells).get(id).cloned();
        if let Some(cell) = cell {
            let mut live = lock(&cell);
            if !live.closed {
                let cancelled = live.task.drive.cancelled(self.clock.as_ref());
                live.finished.push_back(cancelled);
                drop(live);
                self.advance(&cell);
                return Ok(());
            }
        }
        crate::stored::cancel_in_store(
            self.launcher.store.as_ref(),
            id,
            self.clock.now(),
            |write| self.commits.commit(write),
        )
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
            // Parked or being loaded: it has a cell soon.
            if lock(&self.admission).known.contains(id) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            break;
        }
        self.act_in_store(id, path, answer)
    }

    /// [`Core::act`] for a run that is not in memory.
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
            // The run moved on after it was read above: another process
            // answered the step, or the run woke.
            Err(StoreError::Changed(_)) => Err(ActError::NotWaiting {
                run: id.to_owned(),
                step: path.to_owned(),
                state: "no longer waiting".to_owned(),
            }),
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
