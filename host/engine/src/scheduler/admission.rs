//! Admission: the runs resident in the scheduler's hands and the runs
//! parked for a place, and how a run comes into memory and leaves it.
//!
//! A parked run is its id and its handle's ends, nothing more: its record
//! is durable, and it is read from the store when a place frees (on a
//! worker), so a run cancelled while parked never runs another attempt.
//!
//! Places are given tenant by tenant in turn ([`Lanes`]), and a tenant
//! with a resident cap ([`TenantLimits`]) that has that many resident runs
//! has its runs parked, even while the host has places: one tenant's
//! flood waits behind itself.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, Weak};

use weft_core::lock;
use weft_store::{Refused, RunRecord, StoreError, What};

use super::{CellOf, Later, Live, Scheduler, Task, TenantLimits, Work};
use crate::error::ResumeError;
use weft_core::fair::Lanes;

/// A run waiting for a place: its id, and whatever its handle holds.
pub(super) struct Parked {
    id: String,
    pub(super) tenant: Arc<str>,
    observer: Box<dyn crate::Observer + Send>,
    done: std::sync::mpsc::SyncSender<Result<RunRecord, StoreError>>,
    alive: Weak<()>,
}

/// The handle of a run that another host drives, answered from the store
/// when the run ends there ([`Scheduler::follow`]).
pub(super) struct Followed {
    id: String,
    done: std::sync::mpsc::SyncSender<Result<RunRecord, StoreError>>,
    alive: Weak<()>,
    /// Reads of the run that failed in a row.
    failed: u32,
}

/// How many reads of a followed run may fail in a row (about a minute's)
/// before its handle is answered with the last error.
const FOLLOW_FAILURES: u32 = 60;

/// How long the `looks`th look of a followed run waits: 20 ms, doubling,
/// at most a second, so that a short run is answered about as soon as it
/// ends and a long one costs a read a second.
fn follow_delay(looks: u32) -> std::time::Duration {
    std::time::Duration::from_millis(20u64 << looks.min(6)).min(std::time::Duration::from_secs(1))
}

impl Parked {
    /// Run `task` of `tenant`, parked: its id and its handle's ends.
    fn of(task: Task, tenant: &Arc<str>) -> Self {
        Self {
            id: task.drive.run.id.clone(),
            tenant: Arc::clone(tenant),
            observer: task.observer,
            done: task.done,
            alive: task.alive,
        }
    }
}

/// Runs in the scheduler's hands, and runs waiting for a place.
pub(super) struct Admission {
    /// Runs resident, or taking a place they are being read into.
    pub(super) resident: usize,
    pub(super) max: usize,
    pub(super) parked: Lanes<Parked>,
    /// Resident runs per tenant.
    pub(super) by_tenant: HashMap<Arc<str>, usize>,
    /// The tenant of each resident run, by id.
    pub(super) tenant_of: HashMap<String, Arc<str>>,
    /// The ids of every run in this scheduler's hands: resident, parked,
    /// or claimed while it is read or a fire of it is decided. Each notes
    /// whether something asked to look at the run again while it was held
    /// ([`Scheduler::claim_or_note`]): when the claim ends without the run
    /// becoming resident, the run is woken then.
    pub(super) known: HashMap<String, bool>,
}

impl Scheduler {
    /// Marks run `id` as in this scheduler's hands; false if it already
    /// is. A run must be claimed before it is admitted.
    pub(crate) fn claim(&self, id: &str) -> bool {
        let known = &mut lock(&self.admission).known;
        if known.contains_key(id) {
            return false;
        }
        known.insert(id.to_owned(), false);
        true
    }

    /// [`Scheduler::claim`], for work that must not be lost when the run is
    /// held already (a wake, a fire through the store, a take-over): then
    /// it is noted, and the run is woken once the claim ends without the
    /// run becoming resident. A claim held only while a fire is decided
    /// would otherwise swallow the wake that follows another fire's
    /// commit, and leave a woken run with nobody driving it.
    ///
    /// A run resident here is not noted: its drive was read after every
    /// change this host made in the store, and it arms its own timers.
    pub(crate) fn claim_or_note(&self, id: &str) -> bool {
        if self.claim(id) {
            return true;
        }
        let cell = lock(&self.cells).get(id).cloned();
        if cell.is_some_and(|cell| !lock(&cell).closed) {
            return false;
        }
        if let Some(noted) = lock(&self.admission).known.get_mut(id) {
            *noted = true;
        } else {
            // Let go of since: claimed now, or woken by whoever holds it.
            return self.claim_or_note(id);
        }
        false
    }

    /// Takes back a claim on a run that could not be admitted; the run is
    /// woken if something was noted meanwhile.
    pub(crate) fn unclaim(&self, id: &str) {
        self.unclaim_waking(id, false);
    }

    /// Takes back a claim on run `id`, then wakes the run once if `wake`
    /// (what the claim was held for changed the run in the store) or if
    /// something was noted meanwhile: after the claim is let go, so that
    /// the wake finds it free.
    pub(crate) fn unclaim_waking(&self, id: &str, wake: bool) {
        let noted = lock(&self.admission).known.remove(id) == Some(true);
        if noted || wake {
            self.enqueue(Work::Wake(id.to_owned(), 0));
        }
    }

    /// Takes a claimed run into the scheduler, or parks it until a
    /// resident run ends (keeping only its id and handle; its drive is
    /// read again then). A child run is never parked: its parent holds a
    /// place and waits for it, so parking it could wait forever.
    pub(crate) fn admit(&self, task: Task) {
        let tenant: Arc<str> = Arc::from(weft_core::tenant::of(&task.drive.run.workflow));
        let mut admission = lock(&self.admission);
        // Read under the admission lock, as `next_parked` does: a cap
        // raised meanwhile then finds this run parked, or this run finds
        // it raised.
        let limits = self.limits(&tenant);
        if admission.has_place(&tenant, limits) || task.drive.run.parent.is_some() {
            admission.seat(&task.drive.run.id, &tenant);
            drop(admission);
            self.take(task);
        } else {
            admission.parked.push(&tenant, Parked::of(task, &tenant));
        }
    }

    /// Whether a run of `tenant` started now, `id`, waits for a place: then
    /// it is held here (claimed) from now, and stored as free work.
    pub(crate) fn start_parked(&self, id: &str, tenant: &str) -> bool {
        let mut admission = lock(&self.admission);
        let limits = self.limits(tenant);
        if admission.has_place(tenant, limits) {
            return false;
        }
        admission.known.insert(id.to_owned(), false);
        true
    }

    /// Parks run `task`, started as free work ([`Scheduler::start_parked`],
    /// claimed then): it waits here for a place, unless another host takes
    /// it first, which its seating then finds.
    pub(crate) fn park(&self, task: Task) {
        let tenant: Arc<str> = Arc::from(weft_core::tenant::of(&task.drive.run.workflow));
        lock(&self.admission)
            .parked
            .push(&tenant, Parked::of(task, &tenant));
        self.fill_places();
    }

    /// One claim of free work: if this host has places that none of its
    /// own parked runs can take (those wait for their tenant's cap, if
    /// any), takes up to that many parked runs from the store, oldest
    /// first, none beyond a tenant's cap here, and reads them in. The
    /// places are held while the store answers, so that runs started here
    /// meanwhile wait. Returns how many runs it took. Blocking.
    pub(crate) fn claim_free_work(&self) -> usize {
        // A place that a parked run here can take goes to it first.
        self.fill_places();
        let (places, rooms) = {
            let mut admission = lock(&self.admission);
            if admission.resident >= admission.max {
                return 0;
            }
            let places = admission.max - admission.resident;
            let tenants = weft_core::read(&self.launcher.tenants);
            let rooms: Vec<(String, usize)> = tenants
                .iter()
                .filter_map(|(tenant, limits)| {
                    let cap = limits.max_resident?;
                    let held = admission.by_tenant.get(tenant.as_str()).copied();
                    Some((tenant.clone(), cap.saturating_sub(held.unwrap_or(0))))
                })
                .collect();
            admission.resident += places;
            (places, rooms)
        };
        /// Gives the held places back however the store's call ends.
        struct Held<'c>(&'c Scheduler, usize);
        impl Drop for Held<'_> {
            fn drop(&mut self) {
                lock(&self.0.admission).resident -= self.1;
            }
        }
        let held = Held(self, places);
        let store = &self.launcher.store;
        // A look first, so that an idle host does not write.
        let taken = match store.parked(1) {
            Ok(first) if first.is_empty() => Ok(Vec::new()),
            Ok(_) => store.claim_parked(self.host(), places, &rooms),
            Err(e) => Err(e),
        };
        drop(held);
        let taken = taken.unwrap_or_else(|e| {
            tracing::warn!("cannot claim free work: {e}");
            self.answer_lost(&e);
            Vec::new()
        });
        let count = taken.len();
        if count > 0 {
            tracing::debug!(host = %self.host(), runs = ?taken, "claimed free work");
        }
        for (id, tenant) in taken {
            // Held here already (parked here, or a fire of it is being
            // decided): it goes on there, under this host's lease now.
            if !self.claim_or_note(&id) {
                continue;
            }
            let tenant: Arc<str> = Arc::from(tenant);
            let (done, _) = std::sync::mpsc::sync_channel(1);
            let parked = Parked {
                id,
                tenant: Arc::clone(&tenant),
                observer: Box::new(crate::Quiet),
                done,
                alive: Weak::new(),
            };
            let mut admission = lock(&self.admission);
            if admission.has_place(&tenant, self.limits(&tenant)) {
                admission.seat(&parked.id, &tenant);
                drop(admission);
                self.enqueue(Work::Admit(Box::new(parked), 0));
            } else {
                admission.parked.push(&tenant, parked);
            }
        }
        self.fill_places();
        count
    }

    /// Gives places to parked runs while some may have one (after a
    /// tenant's cap was raised, say).
    pub(super) fn fill_places(&self) {
        loop {
            let next = {
                let mut admission = lock(&self.admission);
                self.next_parked(&mut admission)
            };
            match next {
                Some(next) => self.enqueue(Work::Admit(Box::new(next), 0)),
                None => return,
            }
        }
    }

    /// The parked run whose turn it is among the tenants with a place,
    /// seated.
    fn next_parked(&self, admission: &mut Admission) -> Option<Parked> {
        if admission.resident >= admission.max || admission.parked.is_empty() {
            return None;
        }
        let tenants = weft_core::read(&self.launcher.tenants);
        let limits = |t: &str| tenants.get(t).copied().unwrap_or_default();
        let by_tenant = &admission.by_tenant;
        let next = admission.parked.pop_where(
            |t| limits(t).weight,
            |t| {
                limits(t)
                    .max_resident
                    .is_none_or(|cap| by_tenant.get(t).copied().unwrap_or(0) < cap)
            },
        )?;
        admission.seat(&next.id, &next.tenant);
        Some(next)
    }

    /// Reads parked run `parked`, which was given a place, from the store
    /// and makes it resident; `tries` of this failed before. One that
    /// ended while parked (cancelled), or that another host took, gives
    /// its place on.
    pub(super) fn admit_parked(&self, parked: Parked, tries: u32) {
        match self.take_in(&parked.id) {
            // Taken by another host while it was parked here, and waiting
            // for timers now: it stays out of memory, as a suspended run
            // taken in does, and its place goes on.
            Ok(drive) if drive.run.suspended => {
                let keys = drive.armed_keys();
                if parked.alive.upgrade().is_some() {
                    lock(&self.sleepers).keep(
                        parked.id.clone(),
                        (parked.observer, parked.done, parked.alive),
                    );
                }
                self.vacate(&parked.id);
                for key in keys {
                    self.arm(key);
                }
            }
            Ok(drive) => self.take(Task {
                drive,
                observer: parked.observer,
                done: parked.done,
                alive: parked.alive,
            }),
            Err(ResumeError::Store(e)) => {
                tracing::warn!(run = %parked.id, tries = tries + 1, "cannot read a parked run, trying again: {e}");
                let again = Work::Admit(Box::new(parked), tries + 1);
                self.retry_later(tries, Later::Work(again));
            }
            Err(e) => {
                self.vacate(&parked.id);
                let id = parked.id;
                let outcome = match e {
                    // Cancelled while parked: its handle hears how it ended.
                    ResumeError::NotRunning { .. } => {
                        self.launcher.store.run(&id).and_then(|run| {
                            run.ok_or(StoreError::Refused(Refused::NotFound(What::Run(
                                id.clone(),
                            ))))
                        })
                    }
                    // Taken by another host while it was parked here: its
                    // handle, if one still waits, follows it in the store
                    // to its end there.
                    ResumeError::Driven { .. } => {
                        if parked.alive.upgrade().is_some() {
                            self.follow(Followed {
                                id,
                                done: parked.done,
                                alive: parked.alive,
                                failed: 0,
                            });
                        }
                        return;
                    }
                    ResumeError::NotFound(_) => Err(StoreError::Refused(Refused::NotFound(
                        What::Run(id.clone()),
                    ))),
                    // Its definition or a component can no longer be used:
                    // it stays running in the store, for a host that can.
                    e => {
                        tracing::error!(run = %id, "cannot admit a parked run: {e}");
                        return;
                    }
                };
                let _ = parked.done.send(outcome);
            }
        }
    }

    /// Answers the handle of run `followed`, which another host drives,
    /// once the store holds its end: read now, then again at
    /// [`follow_delay`]s while the handle is held. A read that fails is
    /// tried again the same way, up to [`FOLLOW_FAILURES`] in a row; then
    /// the handle is answered with the error, as when the store fails
    /// before a run here ends.
    pub(super) fn follow(&self, followed: Followed) {
        self.follow_after(Box::new(followed), 0);
    }

    /// One look of [`Scheduler::follow`]; `looks` before it found the run
    /// going on.
    pub(super) fn follow_after(&self, mut followed: Box<Followed>, looks: u32) {
        if followed.alive.upgrade().is_none() {
            return;
        }
        let outcome = match self.launcher.store.run(&followed.id) {
            Ok(Some(run)) if run.state.is_terminal() => Ok(run),
            Ok(None) => Err(StoreError::Refused(Refused::NotFound(What::Run(
                followed.id.clone(),
            )))),
            Ok(Some(_)) => {
                followed.failed = 0;
                return self.later_by(follow_delay(looks), Work::Follow(followed, looks + 1));
            }
            Err(e) if followed.failed + 1 < FOLLOW_FAILURES => {
                tracing::debug!(run = %followed.id, "cannot read a run another host drives: {e}");
                followed.failed += 1;
                return self.later_by(follow_delay(looks), Work::Follow(followed, looks + 1));
            }
            Err(e) => Err(e),
        };
        // Never blocks (see `ended_in_store`).
        let _ = followed.done.try_send(outcome);
    }

    /// How many of `tenant`'s runs are resident, and how many parked.
    pub(crate) fn tenant_load(&self, tenant: &str) -> (usize, usize) {
        let admission = lock(&self.admission);
        (
            admission.by_tenant.get(tenant).copied().unwrap_or(0),
            admission.parked.len_of(tenant),
        )
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
        // Resident now, with every timer armed: what was noted is seen.
        if let Some(noted) = lock(&self.admission).known.get_mut(&id) {
            *noted = false;
        }
        let failures = {
            let mut retries = lock(&self.retries);
            if retries.is_empty() {
                0
            } else {
                retries.remove(&id).unwrap_or(0)
            }
        };
        // A pause asked for before the run left memory is taken up before
        // anything starts (one being committed in the store too: if that
        // lands first, this one is refused as the run having moved on). The
        // map stays locked until the cell is in `cells`, so that a resume
        // finds the pause in one or the other (see `unpause_run`).
        let mut pending = lock(&self.pending_pauses);
        let pausing = match pending.get(&id) {
            None => None,
            Some(kept) if kept.committing => Some(kept.actor.clone()),
            Some(_) => pending.remove(&id).map(|kept| kept.actor),
        };
        tracing::trace!(run = %id, ?pausing, "resident");
        let tenant = Arc::from(weft_core::tenant::of(&task.drive.run.workflow));
        let cell = Arc::new(CellOf {
            tenant,
            live: Mutex::new(Live {
                task,
                finished: VecDeque::new(),
                committing: false,
                closed: false,
                failures,
                pausing,
                pause_committing: false,
            }),
        });
        lock(&self.cells).insert(id, Arc::clone(&cell));
        drop(pending);
        for key in keys {
            self.arm(key);
        }
        self.enqueue(Work::Advance(cell));
    }

    /// A resident run leaves memory, and gives its place up.
    fn release(&self, live: &mut Live) {
        self.release_as(live, true);
    }

    /// [`Scheduler::release`]; `durable`: whether the run's state in memory is
    /// the store's. It is not after a failed commit, whose outcome is
    /// unknown: an end decided in memory (a cancellation) may not have
    /// landed, so a pause asked for before it is kept all the same, and
    /// whoever reads the run back (or `pause_left`) decides on the store's.
    fn release_as(&self, live: &mut Live, durable: bool) {
        live.closed = true;
        live.finished.clear();
        live.task.drive.stop_calls();
        let id = &live.task.drive.run.id;
        // A pause asked for and not committed yet is kept: the cell that
        // reads the run back takes it up before it starts anything, and a
        // run that stays out (suspended) is paused in the store.
        if let Some(actor) = live.pausing.take()
            && (!durable || !live.task.drive.run.state.is_terminal())
            && !weft_core::mutation::on("pending-pause-dropped")
        {
            tracing::debug!(run = %id, "left memory with its pause pending");
            let kept = super::PendingPause {
                actor: actor.clone(),
                committing: false,
            };
            lock(&self.pending_pauses).insert(id.clone(), kept);
            self.enqueue(Work::Pause(id.clone(), actor, 0));
        }
        lock(&self.cells).remove(id);
        self.vacate(id);
    }

    /// Run `id` leaves the scheduler's hands, and its place goes to the
    /// oldest parked run, if any, which a worker reads in.
    fn vacate(&self, id: &str) {
        let (next, noted) = {
            let mut admission = lock(&self.admission);
            let noted = admission.known.remove(id) == Some(true);
            admission.unseat(id);
            (self.next_parked(&mut admission), noted)
        };
        if noted {
            self.enqueue(Work::Wake(id.to_owned(), 0));
        }
        if let Some(next) = next {
            self.enqueue(Work::Admit(Box::new(next), 0));
        }
    }

    /// Takes a run that waits for timers only out of memory; a fire brings
    /// it back ([`Work::Wake`]). Its observer and answer are kept only if
    /// someone holds its handle.
    pub(super) fn suspend(&self, live: &mut Live) {
        tracing::debug!(run = %live.task.drive.run.id, "suspended until a timer fires");
        if live.task.alive.upgrade().is_some() {
            self.keep_handle(live);
        }
        self.release(live);
    }

    /// A commit of the run failed (the store did, not a condition): the
    /// run leaves memory, keeping its handle's observer and answer, and is
    /// read back from the store after a backoff, to go on from what is
    /// durable. Any other refusal ends it with the error.
    pub(super) fn failed(&self, live: &mut Live, error: StoreError) {
        if !matches!(
            error,
            StoreError::Commit(_)
                | StoreError::Backend(_)
                | StoreError::NoSpace { .. }
                | StoreError::Unavailable { .. }
        ) {
            return self.finish(live, Err(error));
        }
        self.answer_lost(&error);
        self.reread_later(live, &format!("a commit of the run failed ({error})"));
    }

    /// Run `id` was retried in the store. If this engine still holds it
    /// from before its end (a cancellation or a timeout decided elsewhere
    /// reaches a resident run at its next commit), that cell is behind the
    /// store: it leaves, and the run is read back (a commit in flight is
    /// refused, its lease having moved on, which closes the cell; the run
    /// is woken then). True if so; false if the run is not held here.
    pub(crate) fn retried(&self, id: &str) -> bool {
        let cell = lock(&self.cells).get(id).cloned();
        let Some(cell) = cell else {
            return false;
        };
        let mut live = lock(&cell.live);
        if live.closed {
            return false;
        }
        if live.committing {
            if let Some(noted) = lock(&self.admission).known.get_mut(id) {
                *noted = true;
            }
        } else {
            self.reread(&mut live);
        }
        true
    }

    /// A retried run that could not be taken in (the store failed) is
    /// woken after a pause, as a failed commit's run is.
    pub(crate) fn wake_later(&self, id: &str) {
        self.retry_later(0, Later::Work(Work::Wake(id.to_owned(), 0)));
    }

    /// The resident run is behind the store: it leaves memory, keeping its
    /// handle's observer and answer, and is read back at once.
    pub(super) fn reread(&self, live: &mut Live) {
        let id = live.task.drive.run.id.clone();
        self.keep_handle(live);
        self.release(live);
        self.enqueue(Work::Wake(id, 0));
    }

    /// The resident run is behind the store (a commit of it failed, or it
    /// waits on a child that will never be recorded): it leaves memory, keeping its handle's observer and answer, and is read back
    /// after a pause that grows as this repeats.
    pub(super) fn reread_later(&self, live: &mut Live, why: &str) {
        let id = live.task.drive.run.id.clone();
        let failures = live.failures;
        tracing::warn!(run = %id, failures = failures + 1, "{why}; the run is read back from the store after a pause");
        self.keep_handle(live);
        lock(&self.retries).insert(id.clone(), failures + 1);
        self.release_as(live, weft_core::mutation::on("failed-end-drops-pause"));
        self.retry_later(failures, Later::Work(Work::Wake(id, 0)));
    }

    /// Keeps a run's observer and answer for its handle while it is out of
    /// memory: a wake that takes it in again gives them back.
    fn keep_handle(&self, live: &mut Live) {
        let observer = std::mem::replace(&mut live.task.observer, Box::new(crate::Quiet));
        lock(&self.sleepers).keep(
            live.task.drive.run.id.clone(),
            (observer, live.task.done.clone(), live.task.alive.clone()),
        );
    }

    /// Takes a claimed run in, as [`Scheduler::admit`], unless the store says it
    /// is suspended: then it stays out of memory, with its timers armed
    /// here and its handle kept for the wake that takes it in.
    pub(crate) fn admit_awake(&self, task: Task) {
        if !task.drive.run.suspended {
            return self.admit(task);
        }
        let id = task.drive.run.id.clone();
        if task.alive.upgrade().is_some() {
            lock(&self.sleepers).keep(id.clone(), (task.observer, task.done, task.alive));
        }
        let keys = task.drive.armed_keys();
        self.unclaim(&id);
        for key in keys {
            self.arm(key);
        }
    }

    /// Run `run` has ended, durably: it is told, and the hub looks for
    /// the notice its end may have left on its tenant's `weft.runs.ended`.
    pub(super) fn ended(&self, run: &RunRecord) {
        self.telemetry.ended(run, self.clock.now());
        self.messages.bump();
    }

    /// Run `run` was ended by a cancellation this host decided in the
    /// store: it is told, and a handle still kept while it slept is
    /// answered (a wake that read it before finds no handle, and its
    /// cell's next commit finds the run ended). A handle kept only after
    /// this look is answered by its cell, or not at all if nothing reads
    /// the run here again.
    pub(super) fn ended_in_store(&self, run: &RunRecord) {
        self.ended(run);
        if let Some((_, done, _)) = lock(&self.sleepers).take(&run.id) {
            // Never blocks: a handle is answered once; a clone of its end
            // kept by a closed cell whose commit was in flight may try
            // again, and finds it answered.
            let _ = done.try_send(Ok(run.clone()));
        }
    }

    /// Ends a resident run: gives its place to the oldest parked run, if
    /// any, then answers its handle (so a caller who sees the answer also
    /// sees the place freed).
    pub(super) fn finish(&self, live: &mut Live, outcome: Result<RunRecord, StoreError>) {
        if let Ok(run) = &outcome
            && run.state.is_terminal()
        {
            self.ended(run);
        }
        if let Ok(run) = &outcome
            && run.parent.is_some()
        {
            self.enqueue(Work::ChildEnded(Box::new(run.clone())));
        }
        self.release(live);
        // Never blocks (see `ended_in_store`).
        let _ = live.task.done.try_send(outcome);
    }

    /// A commit of the resident run found it ended without this engine
    /// (cancelled in the store): it leaves memory, and a worker reads what
    /// the store holds and answers its handle ([`Scheduler::ended_elsewhere`]):
    /// not this thread, the committing one, where a store read would hold
    /// up every tenant's commits. The handle goes with the work, not into
    /// the kept ones, which a retry of the run may fill meanwhile.
    pub(super) fn left_ended(&self, live: &mut Live) {
        let id = live.task.drive.run.id.clone();
        let done = live.task.done.clone();
        self.release(live);
        self.enqueue(Work::EndedElsewhere(id, done));
    }

    /// Run `id` ended without this engine and left memory
    /// ([`Scheduler::left_ended`]): `done`, its handle, is answered with what
    /// the store holds. One fenced off by its parent's cancellation, and
    /// not cancelled itself yet, is cancelled.
    pub(super) fn ended_elsewhere(
        &self,
        id: &str,
        done: &SyncSender<Result<RunRecord, StoreError>>,
    ) {
        let stored = self.launcher.store.run(id).and_then(|run| {
            run.ok_or(StoreError::Refused(Refused::NotFound(
                weft_store::What::Run(id.to_owned()),
            )))
        });
        let outcome = match stored {
            // Fenced off by its parent's cancellation. (A top-level run
            // running again was retried since it ended: whoever claimed it
            // drives it.)
            Ok(run) if !run.state.is_terminal() => {
                if run.parent.is_some() {
                    self.enqueue(Work::Cancel(id.to_owned()));
                }
                Err(StoreError::Refused(Refused::RunEnded(id.to_owned())))
            }
            stored => stored,
        };
        if let Ok(run) = &outcome {
            self.ended(run);
            if run.parent.is_some() {
                self.enqueue(Work::ChildEnded(Box::new(run.clone())));
            }
        }
        // Never blocks (see `ended_in_store`).
        let _ = done.try_send(outcome);
    }

    /// Brings run `id` back into memory after a timer woke it (or a
    /// failed commit let it go); `tries` of this failed before.
    pub(super) fn wake(&self, id: &str, tries: u32) {
        if !self.claim_or_note(id) {
            return;
        }
        match self.take_in(id) {
            Ok(drive) => {
                let (observer, done, alive) = lock(&self.sleepers).take(id).unwrap_or_else(|| {
                    let (done, _) = std::sync::mpsc::sync_channel(1);
                    (Box::new(crate::Quiet), done, Weak::new())
                });
                if !drive.run.suspended {
                    self.telemetry.resumed(&drive.run, self.clock.now());
                }
                self.admit_awake(Task {
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

impl Admission {
    /// Whether a run of `tenant` may be resident now.
    fn has_place(&self, tenant: &str, limits: TenantLimits) -> bool {
        self.resident < self.max
            && limits
                .max_resident
                .is_none_or(|cap| self.by_tenant.get(tenant).copied().unwrap_or(0) < cap)
    }

    /// Counts run `id` of `tenant` as resident.
    fn seat(&mut self, id: &str, tenant: &Arc<str>) {
        self.resident += 1;
        *self.by_tenant.entry(Arc::clone(tenant)).or_default() += 1;
        self.tenant_of.insert(id.to_owned(), Arc::clone(tenant));
    }

    /// Run `id` gives its place up.
    fn unseat(&mut self, id: &str) {
        // Only a run seated here gives a place up, once.
        let Some(tenant) = self.tenant_of.remove(id) else {
            return;
        };
        self.resident = self.resident.saturating_sub(1);
        if let Some(count) = self.by_tenant.get_mut(&tenant) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.by_tenant.remove(&tenant);
            }
        }
    }
}
