//! Admission: the runs resident in the scheduler's hands and the runs
//! parked for a place, and how a run comes into memory and leaves it.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use weft_core::lock;
use weft_store::{RunRecord, StoreError};

use super::{Core, Later, Live, Task, Work};

/// Runs in the scheduler's hands, and runs waiting for a place.
pub(super) struct Admission {
    pub(super) resident: usize,
    pub(super) max: usize,
    pub(super) parked: VecDeque<Task>,
    /// The ids of every run resident or parked here.
    pub(super) known: HashSet<String>,
}

impl Core {
    /// Marks run `id` as in this scheduler's hands; false if it already
    /// is. A run must be claimed before it is admitted.
    pub(crate) fn claim(&self, id: &str) -> bool {
        lock(&self.admission).known.insert(id.to_owned())
    }

    /// Takes back a claim on a run that could not be admitted.
    pub(crate) fn unclaim(&self, id: &str) {
        lock(&self.admission).known.remove(id);
    }

    /// Takes a claimed run into the scheduler, or parks it until a
    /// resident run ends. A child run is never parked: its parent holds a
    /// place and waits for it, so parking it could wait forever.
    pub(crate) fn admit(&self, task: Task) {
        let mut admission = lock(&self.admission);
        if admission.resident < admission.max || task.drive.run.parent.is_some() {
            admission.resident += 1;
            drop(admission);
            self.take(task);
        } else {
            admission.parked.push_back(task);
        }
    }

    /// How many runs are resident, and how many are parked.
    pub(crate) fn load(&self) -> (usize, usize) {
        let admission = lock(&self.admission);
        (admission.resident, admission.parked.len())
    }

    /// Makes an admitted run resident, and arms its pending timers (which
    /// may have come due while it was parked or loading).
    fn take(&self, task: Task) {
        let drive = &task.drive;
        let keys = drive.armed_keys();
        let id = drive.run.id.clone();
        let failures = {
            let mut retries = lock(&self.retries);
            if retries.is_empty() {
                0
            } else {
                retries.remove(&id).unwrap_or(0)
            }
        };
        let cell = Arc::new(Mutex::new(Live {
            task,
            finished: VecDeque::new(),
            committing: false,
            closed: false,
            failures,
        }));
        lock(&self.cells).insert(id, Arc::clone(&cell));
        for key in keys {
            self.arm(key);
        }
        self.enqueue(Work::Advance(cell));
    }

    /// Gives a run's place up: to the oldest parked run, if any.
    fn release(&self, live: &mut Live) {
        live.closed = true;
        live.finished.clear();
        live.task.drive.stop_calls();
        let id = &live.task.drive.run.id;
        lock(&self.cells).remove(id);
        let next = {
            let mut admission = lock(&self.admission);
            admission.known.remove(id);
            admission.resident = admission.resident.saturating_sub(1);
            if admission.resident < admission.max {
                let next = admission.parked.pop_front();
                admission.resident += usize::from(next.is_some());
                next
            } else {
                None
            }
        };
        if let Some(next) = next {
            self.take(next);
        }
    }

    /// Takes a run that waits for timers only out of memory; a fire brings
    /// it back ([`Work::Wake`]). Its observer and answer are kept only if
    /// someone holds its handle.
    pub(super) fn suspend(&self, live: &mut Live) {
        tracing::debug!(run = %live.task.drive.run.id, "suspended until a timer fires");
        if live.task.alive.upgrade().is_some() {
            let observer = std::mem::replace(&mut live.task.observer, Box::new(crate::Quiet));
            lock(&self.sleepers).insert(
                live.task.drive.run.id.clone(),
                (observer, live.task.done.clone(), live.task.alive.clone()),
            );
        }
        self.release(live);
    }

    /// A commit of the run failed (the store did, not a condition): the
    /// run leaves memory, keeping its handle's observer and answer, and is
    /// read back from the store after a backoff, to go on from what is
    /// durable. Any other refusal ends it with the error.
    pub(super) fn failed(&self, live: &mut Live, error: StoreError) {
        if !matches!(error, StoreError::Commit(_) | StoreError::Backend(_)) {
            return self.finish(live, Err(error));
        }
        let id = live.task.drive.run.id.clone();
        let failures = live.failures;
        tracing::warn!(
            run = %id, failures = failures + 1,
            "a commit of the run failed ({error}); it is read back from the store and goes on after a pause"
        );
        let observer = std::mem::replace(&mut live.task.observer, Box::new(crate::Quiet));
        lock(&self.sleepers).insert(
            id.clone(),
            (observer, live.task.done.clone(), live.task.alive.clone()),
        );
        lock(&self.retries).insert(id.clone(), failures + 1);
        self.release(live);
        self.retry_later(failures, Later::Work(Work::Wake(id, 0)));
    }

    /// Ends a resident run: gives its place to the oldest parked run, if
    /// any, then answers its handle (so a caller who sees the answer also
    /// sees the place freed).
    pub(super) fn finish(&self, live: &mut Live, outcome: Result<RunRecord, StoreError>) {
        if let Ok(run) = &outcome
            && run.parent.is_some()
        {
            self.enqueue(Work::ChildEnded(Box::new(run.clone())));
        }
        self.release(live);
        let _ = live.task.done.send(outcome);
    }

    /// The run ended without this engine (cancelled in the store): it
    /// leaves, answering with what the store holds. One fenced off by its
    /// parent's cancellation, and not cancelled itself yet, is cancelled.
    pub(super) fn ended_elsewhere(&self, live: &mut Live) {
        let id = live.task.drive.run.id.clone();
        let stored = self
            .launcher
            .store
            .run(&id)
            .and_then(|run| run.ok_or(StoreError::NotFound(weft_store::What::Run(id.clone()))));
        match stored {
            Ok(run) if !run.state.is_terminal() => {
                self.enqueue(Work::Cancel(id.clone()));
                self.finish(live, Err(StoreError::RunEnded(id)));
            }
            stored => self.finish(live, stored),
        }
    }

    /// Brings run `id` back into memory after a timer woke it (or a
    /// failed commit let it go); `tries` of this failed before.
    pub(super) fn wake(&self, id: &str, tries: u32) {
        if !self.claim(id) {
            return;
        }
        match self.take_in(id) {
            Ok(drive) => {
                let (observer, done, alive) =
                    lock(&self.sleepers).remove(id).unwrap_or_else(|| {
                        let (done, _) = std::sync::mpsc::sync_channel(1);
                        (Box::new(crate::Quiet), done, Weak::new())
                    });
                self.admit(Task {
                    drive,
                    observer,
                    done,
                    alive,
                });
            }
            // Ended, or another host drives it (it woke there too).
            Err(crate::ResumeError::NotRunning { .. } | crate::ResumeError::Driven { .. }) => {
                self.unclaim(id);
            }
            Err(crate::ResumeError::Store(e)) => {
                self.unclaim(id);
                tracing::warn!(run = %id, tries = tries + 1, "cannot wake a run, trying again: {e}");
                self.retry_later(tries, Later::Work(Work::Wake(id.to_owned(), tries + 1)));
            }
            Err(e) => {
                self.unclaim(id);
                tracing::error!(run = %id, "cannot wake a run: {e}");
            }
        }
    }
}
