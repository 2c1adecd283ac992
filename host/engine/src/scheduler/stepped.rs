//! The stepped engine: the scheduler with no threads of its own, driven
//! one piece of work at a time by a simulator.
//!
//! Everything a worker, the timer thread or the commit thread would do is
//! still done by the same code; only the choice of what happens next moves
//! to the simulator: which queued work runs, when the held writes commit
//! (and whether their batch fails), and when the clock moves and the due
//! timers are handed over.

use std::sync::Arc;

use weft_core::lock;
use weft_store::{Held, StoreError};

use crate::drive::Answer;

use super::Scheduler;
use super::control::{Acting, Cancelling};

/// The handle a simulator drives a stepped engine by.
pub struct Stepper {
    core: Arc<Scheduler>,
    held: Arc<Held>,
}

impl std::fmt::Debug for Stepper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stepper")
            .field("ready", &self.ready())
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

/// Where an answer to an `await` step got to, without blocking.
#[derive(Debug)]
pub enum Answering {
    /// Queued with the run's cell: poll it with [`Answering::outcome`].
    Queued(std::sync::mpsc::Receiver<Result<(), StoreError>>),
    /// Answered.
    Done(Result<(), crate::ActError>),
    /// Not decided yet (the run is parked, or kept moving).
    Again,
}

impl Stepper {
    pub(crate) fn new(core: Arc<Scheduler>, held: Arc<Held>) -> Self {
        Self { core, held }
    }

    /// How many pieces of work are queued.
    pub fn ready(&self) -> usize {
        let ready = lock(&self.core.ready);
        ready.fires.len() + ready.other.len()
    }

    /// Does the queued piece of work at `index` (fires first, in arrival
    /// order, then the rest, tenant by tenant in their turn's order);
    /// false if there is none there.
    pub fn run_ready(&self, index: usize) -> bool {
        let work = {
            let mut ready = lock(&self.core.ready);
            let fires = ready.fires.len();
            if index < fires {
                ready.fires.remove(index)
            } else {
                ready.other.remove(index - fires)
            }
        };
        match work {
            Some(work) => {
                self.core.execute(work);
                true
            }
            None => false,
        }
    }

    /// The ids of the runs resident here, in order.
    pub fn resident(&self) -> Vec<String> {
        let mut ids: Vec<String> = lock(&self.core.cells).keys().cloned().collect();
        ids.sort();
        ids
    }

    /// The ids of the runs resident here, in order, each with the epoch of
    /// the lease its drive holds (0 for none).
    pub fn resident_epochs(&self) -> Vec<(String, u64)> {
        let cells: Vec<(String, super::Cell)> = lock(&self.core.cells)
            .iter()
            .map(|(id, cell)| (id.clone(), Arc::clone(cell)))
            .collect();
        let mut runs: Vec<(String, u64)> = cells
            .into_iter()
            .map(|(id, cell)| {
                let epoch = lock(&cell.live).task.drive.lease().map_or(0, |l| l.epoch);
                (id, epoch)
            })
            .collect();
        runs.sort();
        runs
    }

    /// The busy leaves of run `id` (a call under way, or finished and not
    /// committed yet; a wait), if it is resident here.
    pub fn busy_leaves(&self, id: &str) -> Option<Vec<String>> {
        let cell = lock(&self.core.cells).get(id).cloned()?;
        let live = lock(&cell.live);
        (!live.closed).then(|| live.task.drive.busy_leaves())
    }

    /// This host's id, as leases name it.
    pub fn host(&self) -> String {
        self.core.host().to_owned()
    }

    /// What each resident run's cell holds, one line each: for a
    /// simulator's log when a run stalls.
    pub fn describe(&self) -> Vec<String> {
        let cells: Vec<(String, super::Cell)> = lock(&self.core.cells)
            .iter()
            .map(|(id, cell)| (id.clone(), Arc::clone(cell)))
            .collect();
        let resident: Vec<String> = cells.iter().map(|(id, _)| id.clone()).collect();
        let claimed: Vec<String> = lock(&self.core.admission)
            .known
            .iter()
            .filter(|(id, _)| !resident.contains(id))
            .map(|(id, noted)| format!("{id}: claimed, not resident (noted {noted})"))
            .collect();
        cells
            .into_iter()
            .map(|(id, cell)| {
                let live = lock(&cell.live);
                format!(
                    "{id}: lease {:?}, state {:?}, suspended {}, committing {}, closed {}, {} finished, failures {}, pausing {:?}, pause committing {}",
                    live.task.drive.lease(),
                    live.task.drive.run.state,
                    live.task.drive.run.suspended,
                    live.committing,
                    live.closed,
                    live.finished.len(),
                    live.failures,
                    live.pausing,
                    live.pause_committing,
                )
            })
            .chain(claimed)
            .collect()
    }

    /// The writes waiting to commit.
    pub fn commits(&self) -> &Held {
        &self.held
    }

    /// Hands every timer that is due by the clock to its fire; returns how
    /// many there were.
    pub fn tick(&self) -> usize {
        self.core.tick()
    }

    /// When the soonest armed timer is due, in milliseconds.
    pub fn next_due(&self) -> Option<u64> {
        self.core.next_due()
    }

    /// Arms timer `key` (again): what a duplicate entry in the heap does.
    pub fn arm(&self, key: (u64, u64)) {
        self.core.arm(key);
    }

    /// Renews this host's row, as its lease thread does.
    pub fn renew(&self) -> Result<(), StoreError> {
        self.core.renew()
    }

    /// Renews this host's row if a third of a lease has passed since it
    /// last did: the lease thread's pace.
    pub fn renew_if_due(&self) {
        self.core.renew_if_due();
    }

    /// Takes over the runs of hosts that are gone, as the lease thread
    /// does; returns how many it took.
    pub fn take_over(&self) -> usize {
        self.core.take_over()
    }

    /// Takes free work from the store for this host's places, as the
    /// claims thread does; returns how many runs it took.
    pub fn claim_free_work(&self) -> usize {
        self.core.claim_free_work()
    }

    /// Looks up the child runs waited on, as the timer thread does every
    /// second.
    pub fn poll_watches(&self) {
        self.core.poll_watches();
    }

    /// One try at answering the `await` step at `path` of run `id`, never
    /// blocking.
    pub fn act(&self, id: &str, path: &str, answer: &Answer) -> Answering {
        match self.core.act_once(id, path, answer, true) {
            Acting::Queued(told) => Answering::Queued(told),
            Acting::Done(outcome) => Answering::Done(outcome),
            Acting::Again(_) => Answering::Again,
        }
    }

    /// One try at cancelling run `id`, never blocking: `Ok(None)` while
    /// the cancellation waits for its commit, which [`Stepper::cancelled`]
    /// then reads.
    pub fn cancel(
        &self,
        id: &str,
    ) -> Result<Option<std::sync::mpsc::Receiver<Result<(), StoreError>>>, StoreError> {
        match self.core.cancel_once(id)? {
            Cancelling::Queued(told) => Ok(Some(told)),
            Cancelling::Done(outcome) => outcome.map(|()| None),
        }
    }

    /// What a cancellation queued with a cell came to (`None` while it
    /// waits): `Err(Changed)` when the cell let the run go first and it
    /// is still running.
    pub fn cancelled(
        &self,
        id: &str,
        told: &std::sync::mpsc::Receiver<Result<(), StoreError>>,
    ) -> Option<Result<(), StoreError>> {
        match told.try_recv() {
            Ok(outcome) => Some(self.core.cancel_answered(id, Some(outcome))),
            Err(std::sync::mpsc::TryRecvError::Empty) => None,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                Some(self.core.cancel_answered(id, None))
            }
        }
    }

    /// The process dies: queued work and held writes are dropped
    /// unanswered. Drop the engine after this; only the store remains.
    pub fn crash(&self) {
        let work = std::mem::take(&mut *lock(&self.core.ready));
        drop(work);
        self.held.lose();
        self.core.stop();
    }
}

impl Answering {
    /// An answer queued with a cell: what it came to, once its commit was
    /// answered (`None` while it waits).
    pub fn outcome(
        told: &std::sync::mpsc::Receiver<Result<(), StoreError>>,
        id: &str,
        path: &str,
    ) -> Option<Result<(), crate::ActError>> {
        match told.try_recv() {
            Ok(outcome) => Some(super::control::answered(id, path, Some(outcome))),
            Err(std::sync::mpsc::TryRecvError::Empty) => None,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                Some(super::control::answered(id, path, None))
            }
        }
    }
}
