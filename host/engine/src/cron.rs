//! Cron triggers: `add_schedule` and `set_paused` (which write the store
//! directly, outside the group commit), and one thread that looks at every
//! trigger row, fires those that
//! are due, and sleeps until the next one (or a second, to see rows that
//! another process changed: `weft schedules pause`, say).
//!
//! A fire is one conditional write: the trigger's row moves to its next
//! fire in the same transaction that records the run it starts, and only
//! if the row is still at the version the fire was decided on. A fire seen
//! twice (two hosts, or a restart between the decision and the write)
//! therefore starts one run.
//!
//! Fires that came due while no host was running (before this thread
//! started) follow the trigger's `catch_up` policy; fires that come due
//! while it runs always fire, late if the host is busy. Either kind then
//! follows the `overlap` policy when the trigger's last run is still
//! running.

use std::collections::HashMap;
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Weak};
use std::time::Duration;

use weft_core::clock::Timestamp;
use weft_model::{CatchUp, Overlap, Schedule};
use weft_store::{Refused, ScheduleRecord, StoreError, TriggerLink, What, Write};

use super::Quiet;
use super::scheduler::{Scheduler, Task};

/// The most missed fires looked at, per trigger, after a downtime.
const MAX_MISSED: usize = 1_000_000;

pub(super) struct Cron {
    core: Arc<Scheduler>,
    /// When this thread started: fires due before it were missed.
    started: Timestamp,
    /// Compiled specs, by key, with the row version they came from.
    compiled: HashMap<String, (u64, Schedule)>,
}

impl Cron {
    pub(super) fn new(core: Arc<Scheduler>) -> Self {
        let started = core.clock.now();
        Self {
            core,
            started,
            compiled: HashMap::new(),
        }
    }

    /// The thread's loop, until the engine stops.
    pub(super) fn run(mut self) {
        while !self.core.is_stopping() {
            let now = self.core.clock.now();
            let mut next = now + Duration::from_secs(1);
            match self.core.launcher.store.schedules() {
                Ok(rows) => {
                    for row in rows {
                        if let Some(at) = self.tend(row, now) {
                            next = next.min(at);
                        }
                    }
                }
                Err(e) => tracing::error!("cannot read the cron triggers: {e}"),
            }
            let wait = self
                .core
                .clock
                .real_wait(next.millis_since(self.core.clock.now()))
                .min(Duration::from_secs(1));
            self.core.pause(wait);
        }
    }

    /// Fires what is due of one trigger; returns when to look at it again.
    fn tend(&mut self, mut row: ScheduleRecord, now: Timestamp) -> Option<Timestamp> {
        if row.paused {
            return None;
        }
        let schedule = self.compiled(&row)?;
        // A buffered fire waits for the trigger's last run to end.
        if let Some(due) = row.buffered {
            if self.last_run_running(&row) {
                return Some(now + Duration::from_millis(100));
            }
            let next_fire = row.next_fire;
            if !self.start(&mut row, due, next_fire) {
                // Another host moved it on: read it again next round.
                return Some(now);
            }
        }
        for _ in 0..10_000 {
            let next = row.next_fire?;
            let at = next + schedule.jitter_for(&row.key, next);
            if at > now {
                return Some(at);
            }
            let following = schedule.next_after(next);
            if next < self.started {
                // Missed while no host ran: keep what the policy keeps.
                let mut missed = 0usize;
                let mut first_live = Some(next);
                let mut window = std::collections::VecDeque::new();
                let keep = match row.spec.catch_up {
                    CatchUp::All => schedule.catch_up_limit() as usize,
                    CatchUp::One => 1,
                    CatchUp::None => 0,
                };
                while let Some(t) = first_live.filter(|t| *t < self.started) {
                    missed += 1;
                    window.push_back(t);
                    if window.len() > keep {
                        window.pop_front();
                    }
                    if missed >= MAX_MISSED {
                        break;
                    }
                    first_live = schedule.next_after(t);
                }
                if missed > keep {
                    let skip_to = window.front().copied().or(first_live);
                    let mut updated = row.clone();
                    updated.next_fire = skip_to;
                    updated.skipped += (missed - keep) as u64;
                    tracing::info!(trigger = %row.key, missed, kept = keep, "catching up after downtime");
                    if !self.write(&mut row, updated, None) {
                        return None;
                    }
                    continue;
                }
            }
            if !self.fire(&mut row, next, following) {
                return Some(now);
            }
        }
        Some(now)
    }

    /// The fire due at `due`: starts a run, unless the overlap policy says
    /// otherwise. False if the row had moved on (another host fired it).
    fn fire(
        &mut self,
        row: &mut ScheduleRecord,
        due: Timestamp,
        following: Option<Timestamp>,
    ) -> bool {
        if self.last_run_running(row) {
            let mut updated = row.clone();
            updated.last_fire = Some(due);
            updated.next_fire = following;
            match row.spec.overlap {
                Overlap::Skip => {
                    updated.skipped += 1;
                    return self.write(row, updated, None);
                }
                Overlap::BufferOne => {
                    updated.skipped += u64::from(row.buffered.is_some());
                    updated.buffered = Some(due);
                    return self.write(row, updated, None);
                }
                Overlap::CancelPrevious => {
                    if let Some(previous) = &row.last_run {
                        match self.core.cancel(previous) {
                            Ok(()) | Err(StoreError::Refused(Refused::RunEnded(_))) => {}
                            // Gone meanwhile.
                            Err(StoreError::Refused(Refused::NotFound(What::Run(_)))) => {}
                            Err(e) => tracing::error!(run = %previous, "cannot cancel: {e}"),
                        }
                    }
                }
                Overlap::Allow => {}
            }
        }
        self.start(row, due, following)
    }

    /// Starts the run of the fire due at `due`, in the commit that moves
    /// the trigger on to `next_fire`. False if the row had moved on.
    fn start(
        &mut self,
        row: &mut ScheduleRecord,
        due: Timestamp,
        next_fire: Option<Timestamp>,
    ) -> bool {
        let mut updated = row.clone();
        updated.next_fire = next_fire;
        if row.buffered == Some(due) {
            updated.buffered = None;
        } else {
            updated.last_fire = Some(due);
        }
        let launcher = &self.core.launcher;
        let made = match launcher.workflow(&row.workflow) {
            None => Err(format!("workflow `{}` is not deployed", row.workflow)),
            Some(workflow) => launcher
                .make(workflow, row.spec.input.clone(), None)
                .map_err(|e| e.to_string()),
        };
        let mut new = match made {
            Ok(new) => new,
            Err(e) => {
                tracing::warn!(trigger = %row.key, "a fire starts nothing: {e}");
                updated.skipped += 1;
                return self.write(row, updated, None);
            }
        };
        new.drive.run.trigger = Some(TriggerLink {
            schedule: row.key.clone(),
            fire: due,
        });
        updated.last_run = Some(new.drive.run.id.clone());
        updated.started += 1;
        let tenant = weft_core::tenant::of(&new.drive.run.workflow);
        let create = Write::create_run(&new.drive.run, &new.definition, new.components);
        // Free work if this host has no place for it (see `Engine::start`).
        let parked = self.core.start_parked(&new.drive.run.id, tenant);
        let create = if parked {
            create.parked(tenant)
        } else {
            new.drive.leased(create)
        };
        // Counted, never refused: a fire over the tenant's stored bytes
        // still starts its run, whose steps' results are refused.
        let create = create.charged(tenant, false);
        if !self.write(row, updated, Some(create)) {
            if parked {
                self.core.unclaim(&new.drive.run.id);
            }
            return false;
        }
        tracing::info!(trigger = %row.key, run = %new.drive.run.id, fire = %due, "cron fire");
        let (done, _) = sync_channel(1);
        let task = Task {
            drive: new.drive,
            observer: Box::new(Quiet),
            done,
            alive: Weak::new(),
        };
        if parked {
            self.core.park(task);
        } else if self.core.claim(&task.drive.run.id) {
            self.core.admit(task);
        }
        true
    }

    /// Writes `updated` over `row` if the stored row is still `row`, with
    /// the run `start` creates; true (and `row` updated) when it landed.
    fn write(
        &mut self,
        row: &mut ScheduleRecord,
        mut updated: ScheduleRecord,
        start: Option<Write>,
    ) -> bool {
        updated.version = row.version + 1;
        match self
            .core
            .commits
            .commit(Write::schedule(&updated, Some(row.version), start))
        {
            Ok(()) => {
                if let Some((version, _)) = self.compiled.get_mut(&row.key) {
                    *version = updated.version;
                }
                *row = updated;
                true
            }
            // The row moved on: another host fired it.
            Err(StoreError::Refused(Refused::Changed(_))) => false,
            Err(e) => {
                tracing::error!(trigger = %row.key, "cannot move the trigger on: {e}");
                false
            }
        }
    }

    fn last_run_running(&self, row: &ScheduleRecord) -> bool {
        row.last_run.as_ref().is_some_and(|id| {
            self.core
                .launcher
                .store
                .run(id)
                .ok()
                .flatten()
                .is_some_and(|run| !run.state.is_terminal())
        })
    }

    fn compiled(&mut self, row: &ScheduleRecord) -> Option<Schedule> {
        if let Some((_, schedule)) = self.compiled.get(&row.key)
            && schedule.spec == row.spec
        {
            return Some(schedule.clone());
        }
        match Schedule::compile(&row.spec) {
            Ok(schedule) => {
                self.compiled
                    .insert(row.key.clone(), (row.version, schedule.clone()));
                Some(schedule)
            }
            Err(e) => {
                tracing::error!(trigger = %row.key, "a trigger that does not compile: {e}");
                None
            }
        }
    }
}

/// Pauses (or resumes) trigger `key` in `store`; `Ok(None)` if there is no
/// such trigger. Resuming starts over from `now`: fires missed while
/// paused are not caught up.
pub(crate) fn set_paused(
    store: &dyn weft_store::Store,
    key: &str,
    paused: bool,
    now: Timestamp,
) -> Result<Option<ScheduleRecord>, ScheduleError> {
    for _ in 0..10 {
        let Some(row) = store.schedules()?.into_iter().find(|r| r.key == key) else {
            return Ok(None);
        };
        let mut updated = row.clone();
        updated.paused = paused;
        updated.version += 1;
        if !paused {
            let schedule = Schedule::compile(&row.spec)
                .map_err(|e| ScheduleError::Invalid(format!("trigger `{key}`: {e}")))?;
            updated.next_fire = schedule.next_after(now);
            updated.buffered = None;
        }
        let write = Write::schedule(&updated, Some(row.version), None);
        match store.apply(&[&write])?.pop().unwrap_or(Ok(())) {
            Ok(()) => return Ok(Some(updated)),
            // A host moved it on (or removed it) meanwhile: read it again.
            Err(Refused::Changed(_)) => continue,
            Err(e) => return Err(StoreError::from(e).into()),
        }
    }
    Err(ScheduleError::Contended(key.to_owned()))
}

/// Removes trigger `key` from `store`, one added by hand: the removed row,
/// or `Ok(None)` if there is no such trigger. One its workflow's file
/// declares is refused ([`ScheduleError::Declared`]), checked on the row
/// the removal is conditioned on, so that a deploy that declares the key
/// meanwhile is not undone. A run it started goes on.
pub(crate) fn remove(
    store: &dyn weft_store::Store,
    key: &str,
) -> Result<Option<ScheduleRecord>, ScheduleError> {
    for _ in 0..10 {
        let Some(row) = store.schedules()?.into_iter().find(|r| r.key == key) else {
            return Ok(None);
        };
        if row.origin == "workflow" {
            return Err(ScheduleError::Declared(key.to_owned()));
        }
        let write = Write::Schedule {
            key: key.to_owned(),
            expect: Some(row.version),
            row: None,
            start: None,
        };
        match store.apply(&[&write])?.pop().unwrap_or(Ok(())) {
            Ok(()) => return Ok(Some(row)),
            // A host moved it on meanwhile: read it again.
            Err(Refused::Changed(_)) => continue,
            Err(e) => return Err(StoreError::from(e).into()),
        }
    }
    Err(ScheduleError::Contended(key.to_owned()))
}

impl crate::Engine {
    /// Adds a trigger for `workflow` (its stored id; `origin`: who adds it,
    /// such as `cli` or `api`; without an id it gets `<origin>-<n>`). Its
    /// first fire is the next after now. A running host picks it up within
    /// a second. Blocking.
    pub fn add_schedule(
        &self,
        workflow: &str,
        spec: weft_model::ScheduleSpec,
        origin: &str,
    ) -> Result<ScheduleRecord, ScheduleError> {
        add_schedule(
            self.store().as_ref(),
            workflow,
            spec,
            origin,
            self.clock().now(),
        )
    }

    /// Pauses (or resumes) trigger `key`; `Ok(None)` if there is no such
    /// trigger. Resuming starts over from now: fires missed while paused
    /// are not caught up. Blocking.
    pub fn set_schedule_paused(
        &self,
        key: &str,
        paused: bool,
    ) -> Result<Option<ScheduleRecord>, ScheduleError> {
        set_paused(self.store().as_ref(), key, paused, self.clock().now())
    }

    /// Removes trigger `key`: the row it had, or `Ok(None)` if there is no
    /// such trigger. A running host stops firing it within a second; runs
    /// it started go on. Blocking.
    pub fn remove_schedule(&self, key: &str) -> Result<Option<ScheduleRecord>, ScheduleError> {
        remove(self.store().as_ref(), key)
    }
}

/// Why a trigger could not be added ([`add_schedule`]), paused or resumed
/// ([`set_paused`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ScheduleError {
    /// The spec, or the workflow id, does not check; the message names the
    /// field. On resuming: the stored spec no longer compiles, and the
    /// message names the trigger.
    #[error("{0}")]
    Invalid(String),
    /// The trigger is declared in its workflow's file (`on: schedule:`),
    /// which would add it again: it is removed there.
    #[error("trigger `{0}` is declared in its workflow's file; remove it there and deploy")]
    Declared(String),
    /// A trigger with that key exists.
    #[error("trigger `{0}` exists already")]
    Exists(String),
    /// The trigger kept changing under the write (other hosts moving it
    /// on); trying again later may succeed.
    #[error("trigger `{0}` keeps changing; try again")]
    Contended(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Adds a trigger for `workflow` (its stored id) to `store` (`origin`: who adds it, such
/// as `cli` or `api`; without an id it gets `<origin>-<n>`). Its first
/// fire is the next after `now`. A running host picks it up within a
/// second.
pub(crate) fn add_schedule(
    store: &dyn weft_store::Store,
    workflow: &str,
    mut spec: weft_model::ScheduleSpec,
    origin: &str,
    now: Timestamp,
) -> Result<ScheduleRecord, ScheduleError> {
    // `workflow` is the stored id: its tenant's name, then its bare id.
    weft_model::check_id(weft_core::tenant::bare(workflow))
        .map_err(|m| ScheduleError::Invalid(format!("workflow: {m}")))?;
    let existing = store.schedules()?;
    let id = spec.id.clone().unwrap_or_else(|| {
        (1..)
            .map(|n| format!("{origin}-{n}"))
            .find(|id| !existing.iter().any(|r| r.key == format!("{workflow}/{id}")))
            .unwrap_or_default()
    });
    spec.id = Some(id.clone());
    let schedule = Schedule::compile(&spec).map_err(ScheduleError::Invalid)?;
    let key = format!("{workflow}/{id}");
    let row = new_row(key.clone(), workflow, &schedule, origin, now);
    // Version 0: only if there is no such row yet.
    match store.apply(&[&Write::schedule(&row, Some(0), None)])?.pop() {
        Some(Err(Refused::Exists(What::Schedule(_)))) => Err(ScheduleError::Exists(key)),
        Some(Err(e)) => Err(StoreError::from(e).into()),
        _ => Ok(row),
    }
}

/// A trigger row for `spec`, new.
pub(super) fn new_row(
    key: String,
    workflow: &str,
    schedule: &Schedule,
    origin: &str,
    now: Timestamp,
) -> ScheduleRecord {
    ScheduleRecord {
        key,
        workflow: workflow.to_owned(),
        spec: schedule.spec.clone(),
        origin: origin.to_owned(),
        paused: false,
        last_fire: None,
        next_fire: schedule.next_after(now),
        last_run: None,
        buffered: None,
        started: 0,
        skipped: 0,
        version: 1,
    }
}
