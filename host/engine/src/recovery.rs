//! What a host does with the store's state when it starts, in the one order
//! recovery needs: the outbox is carried out first (a parent resumed before
//! the children it decided on are recorded would wait on nothing), then
//! every pending timer is armed (a suspended run resumed before its timer
//! would sleep forever), then the interrupted runs are resumed. `Host::start`
//! and the simulator both call [`Engine::recover`], so the order lives here.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use weft_store::StoreError;

use crate::{Engine, Quiet, ResumeError};

/// What a recovery did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Outbox rows carried out.
    pub outbox_rows: usize,
    /// Pending timers armed.
    pub timers: usize,
    /// Interrupted runs resumed here.
    pub resumed: usize,
}

/// A recovery step failed in the store. Every step is durable and safe to
/// take again, so a recovery that failed may simply be started again.
#[derive(Debug, thiserror::Error)]
#[error("cannot {step}: {error}")]
pub struct RecoveryError {
    /// The step, such as "carry out the store's outbox".
    pub step: &'static str,
    /// What the store said.
    #[source]
    pub error: StoreError,
}

impl Engine {
    /// Recovers the store's state into this engine: carries out the outbox,
    /// arms the pending timers, and resumes each interrupted run that is not
    /// parked (parked runs are free work, claimed as places free), on
    /// `resumers` threads (one: on this thread, in the store's order).
    ///
    /// A run whose resume the store failed is tried again later, as a
    /// failed commit is; a run resident already, or ended since, is left
    /// alone; any other refusal is logged.
    pub fn recover(&self, resumers: usize) -> Result<Recovered, RecoveryError> {
        let step = |step: &'static str| move |error| RecoveryError { step, error };
        let outbox_rows = self
            .replay_outbox()
            .map_err(step("carry out the store's outbox"))?;
        let timers = self.arm_timers().map_err(step("read the store's timers"))?;
        let interrupted = self
            .store()
            .running_ids()
            .map_err(step("read the interrupted runs"))?;
        let parked: HashSet<String> = self
            .store()
            .parked(usize::MAX)
            .map_err(step("read the parked runs"))?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let interrupted: Vec<&str> = interrupted
            .iter()
            .filter(|id| !parked.contains(*id))
            .map(String::as_str)
            .collect();
        let resumed = self.resume_all(&interrupted, resumers);
        Ok(Recovered {
            outbox_rows,
            timers,
            resumed,
        })
    }

    /// Resumes each of `ids` on `resumers` threads; returns how many it
    /// resumed. Each resume claims its run with a synced commit, and the
    /// group commit puts the claims made at once in one transaction, so a
    /// hundred thousand runs take seconds, not one sync each.
    fn resume_all(&self, ids: &[&str], resumers: usize) -> usize {
        let next = AtomicUsize::new(0);
        let resumed = AtomicUsize::new(0);
        let resume = || {
            while let Some(id) = ids.get(next.fetch_add(1, Ordering::Relaxed)) {
                if self.resume_interrupted(id) {
                    resumed.fetch_add(1, Ordering::Relaxed);
                }
            }
        };
        if resumers <= 1 {
            resume();
            return resumed.into_inner();
        }
        std::thread::scope(|threads| {
            for _ in 0..resumers.min(ids.len()) {
                let spawned = std::thread::Builder::new()
                    .name("weft-resume".to_owned())
                    .spawn_scoped(threads, resume);
                if spawned.is_err() {
                    // No more threads: this one resumes what is left.
                    resume();
                    break;
                }
            }
        });
        resumed.into_inner()
    }

    /// Resumes interrupted run `id`; whether it resumed here.
    fn resume_interrupted(&self, id: &str) -> bool {
        match self.resume(id, Box::new(Quiet)) {
            Ok(_) => {
                tracing::info!(run = %id, "resumed an interrupted run");
                true
            }
            // A child its parent resumed first, or one that ended since.
            Err(ResumeError::Resident(_) | ResumeError::NotRunning { .. }) => false,
            // A row that does not decode is set aside (`weft doctor` lists
            // it); it would fail again.
            Err(ResumeError::Store(e)) if e.unreadable() => {
                tracing::warn!(run = %id, "cannot resume: {e}");
                false
            }
            // The store failed: tried again, as a failed commit is.
            Err(e @ ResumeError::Store(_)) => {
                tracing::warn!(run = %id, "cannot resume yet, will try again: {e}");
                self.resume_later(id);
                false
            }
            Err(e) => {
                tracing::warn!(run = %id, "cannot resume: {e}");
                false
            }
        }
    }
}
