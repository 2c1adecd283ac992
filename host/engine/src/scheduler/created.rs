//! A run's creating commit, answered: the run is admitted (or parked), or
//! its caller hears why not. An answer that may hide a commit that landed
//! is settled by reading the run back first.

use std::sync::Arc;
use std::sync::mpsc::SyncSender;

use weft_store::StoreError;

use super::{Later, Scheduler, Task, Work};
use crate::Observer;

/// A run whose creating commit was submitted, and what its answer
/// decides.
pub(crate) struct Created {
    pub(crate) task: Task,
    pub(crate) observer: Box<dyn Observer + Send>,
    /// Where the caller hears whether the run was recorded.
    pub(crate) recorded: SyncSender<Result<(), StoreError>>,
    /// Started as free work ([`Scheduler::start_parked`]). Parked or not, the
    /// run is claimed here from before its commit is submitted, so that no
    /// take-over round takes it in while its answer is awaited.
    pub(crate) parked: bool,
}

impl Scheduler {
    /// The creating commit of `created` was answered `outcome`. A failure
    /// whose outcome is unknown is read back, on a worker, before anyone
    /// is told: a run that landed all the same runs, under this host's
    /// lease (left alone, no host would ever drive it: its lease names a
    /// live host).
    pub(crate) fn created(self: &Arc<Self>, created: Created, outcome: Result<(), StoreError>) {
        if let Err(e) = &outcome {
            self.answer_lost(e);
        }
        match outcome {
            Ok(()) => self.recorded(created),
            Err(e)
                if e.outcome_unknown() && !weft_core::mutation::on("lost-start-not-read-back") =>
            {
                self.enqueue(Work::Recheck(Box::new(created), Box::new(e), 0));
            }
            Err(e) => self.not_recorded(created, e),
        }
    }

    /// Reads back the run of `created`, whose creating commit failed with
    /// `error`; `tries` of this failed before.
    pub(super) fn recheck(self: &Arc<Self>, created: Created, error: StoreError, tries: u32) {
        let id = created.task.drive.run.id.clone();
        match self.launcher.store.run(&id) {
            Ok(Some(_)) => {
                tracing::info!(run = %id, "a run whose commit failed ({error}) was stored all the same; it goes on");
                self.recorded(created);
            }
            Ok(None) => self.not_recorded(created, error),
            Err(e) => {
                tracing::warn!(run = %id, tries = tries + 1, "cannot read back a run whose commit failed, trying again: {e}");
                let again = Work::Recheck(Box::new(created), Box::new(error), tries + 1);
                self.retry_later(tries, Later::Work(again));
            }
        }
    }

    /// The run of `created` is recorded: its caller hears so, and it is
    /// admitted, or parked.
    fn recorded(&self, created: Created) {
        let Created {
            mut task,
            mut observer,
            recorded,
            parked,
        } = created;
        let _ = recorded.send(Ok(()));
        self.telemetry.started(&task.drive.run, self.clock.now());
        observer.run_created(&task.drive.run);
        task.observer = observer;
        if parked {
            self.park(task);
        } else {
            // Claimed since its commit was submitted.
            self.admit(task);
        }
    }

    /// The run of `created` was not recorded (a `Duplicate` names the run
    /// its key started before): both of its caller's listeners hear why.
    fn not_recorded(&self, created: Created, error: StoreError) {
        self.unclaim(&created.task.drive.run.id);
        let _ = created.recorded.send(Err(error.clone()));
        let _ = created.task.done.send(Err(error));
    }
}
