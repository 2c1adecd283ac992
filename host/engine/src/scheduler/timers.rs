//! Timers: arming them, the timer thread that finds them due, and their
//! fires.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use weft_core::lock;
use weft_store::{Refused, StoreError, TimerKind, TimerRecord};

use super::{Later, Live, Scheduler, Work};

/// How often waits on child runs are checked against the store.
const WATCH_POLL: Duration = Duration::from_secs(1);

impl Scheduler {
    /// Arms the timer `(due, id)`: when it is due, a worker fires it. Arming
    /// one twice is harmless: a fire needs the timer's row.
    pub(super) fn arm(&self, key: (u64, u64)) {
        lock(&self.timers).push(Reverse(key));
        self.timers_wake.notify_one();
    }

    /// Arms many timers at once (a host's start).
    pub(crate) fn arm_all(&self, keys: Vec<(u64, u64)>) {
        // Heapified in place: no copy of a million keys.
        let mut more: BinaryHeap<Reverse<(u64, u64)>> =
            keys.into_iter().map(Reverse).collect::<Vec<_>>().into();
        lock(&self.timers).append(&mut more);
        self.timers_wake.notify_one();
    }

    /// How many timers are armed.
    pub(crate) fn armed(&self) -> usize {
        lock(&self.timers).len()
    }

    /// Fires timer `key`: through its run's cell when the run is resident
    /// (the fire commits as the leaf's result, or, for a retry delay, as
    /// the timer's removal); otherwise in the store, then the run is woken.
    /// The timer's row decides: a fire that finds it gone does nothing.
    /// `tries` of this fire failed before (the store did).
    pub(super) fn fire(self: &Arc<Self>, timer: TimerRecord, tries: u32) {
        let cell = lock(&self.cells).get(&timer.run).cloned();
        if let Some(cell) = cell {
            let mut live = lock(&cell);
            if !live.closed {
                if timer.timer.kind == TimerKind::Retry {
                    // Firing: the leaf no longer counts as waiting, so the
                    // run cannot suspend before the fire lands.
                    if !live.task.drive.retry_firing(&timer.path, timer.timer) {
                        return;
                    }
                    let lease = live.task.drive.lease().cloned();
                    drop(live);
                    self.fire_retry(cell, timer, lease);
                } else {
                    if let Some(finished) = live.task.drive.fired(&timer) {
                        live.finished.push_back(finished);
                    }
                    drop(live);
                    self.advance(&cell);
                }
                return;
            }
        }
        // Claimed while the fire is decided and committed, so that no
        // load of the run here reads it half way. Held already (parked,
        // being loaded, leaving memory, or another fire being decided):
        // noted, so that it is woken, with its timers armed again, if the
        // claim ends without the run becoming resident.
        if !self.claim_or_note(&timer.run) {
            return;
        }
        self.enqueue(Work::Decide(Box::new(timer), tries));
    }

    /// Fires timer `timer` of a run that is not resident, in the store,
    /// then wakes the run; the run is claimed here until the fire's
    /// commit is answered. `tries` of this fire failed before.
    pub(super) fn decide(self: &Arc<Self>, timer: TimerRecord, tries: u32) {
        let store = self.launcher.store.as_ref();
        // The fire takes the run, which only a run nobody drives allows.
        let decided = self.lease_for(&timer.run).and_then(|lease| {
            crate::stored::decide_fire_on(store, &timer, self.clock.now())
                .map(|decided| decided.map(|(write, run)| (write.under(lease), run)))
        });
        let (write, run) = match decided {
            Ok(Some(decided)) => decided,
            // Gone or ended: the timer wakes nothing.
            Ok(None) => return self.unclaim(&timer.run),
            Err(e) => {
                self.unclaim(&timer.run);
                return self.fire_failed(timer, tries, &e);
            }
        };
        let core = Arc::clone(self);
        self.commits.submit(
            write,
            Box::new(move |outcome| {
                tracing::debug!(run = %timer.run, timer = timer.timer.id, ?outcome, "a fire through the store was answered");
                // A fire that leaves a record (a sleep's end, a wait's
                // timeout) finished its step: told before the wake, which
                // tells `resumed`.
                if outcome.is_ok()
                    && let Some(record) = crate::stored::fired_record(&timer, run.step_records)
                {
                    core.telemetry.step(&run, &record, false);
                }
                // A paused run is not woken: the fire waits for its resume.
                // A fire whose answer was lost may have landed: the wake
                // reads the run back (still asleep, it stays so, its timers
                // armed), as the retried fire would find its timer gone
                // and wake nothing.
                if let Err(e) = &outcome {
                    core.answer_lost(e);
                }
                let landed = outcome.as_ref().map_or_else(
                    |e| e.outcome_unknown() && !weft_core::mutation::on("lost-fire-not-woken"),
                    |()| true,
                );
                core.unclaim_waking(&timer.run, landed && run.paused.is_none());
                match outcome {
                    Ok(()) => core.fired(timer.timer.due),
                    // Fired elsewhere; or another host drives the run,
                    // and fires its timers itself.
                    Err(StoreError::Refused(Refused::TimerGone(_) | Refused::Fenced { .. })) => {}
                    // Fenced off by its parent's cancellation: its own
                    // cancellation ends it (and removes the timer).
                    Err(StoreError::Refused(Refused::RunEnded(_))) => core.enqueue(Work::Cancel(timer.run)),
                    // The run moved on since it was read (another host may
                    // be committing it): decide again, after a pause.
                    Err(StoreError::Refused(Refused::Changed(_))) => {
                        let again = Work::Fire(Box::new(timer), tries.saturating_add(1));
                        core.retry_later(tries, Later::Work(again));
                    }
                    Err(e) => core.fire_failed(timer, tries, &e),
                }
            }),
        );
    }

    /// A fire failed in the store (a read or its commit): it is tried
    /// again after a backoff, so a timer never needs a restart to fire.
    fn fire_failed(&self, timer: TimerRecord, tries: u32, error: &StoreError) {
        tracing::warn!(
            run = %timer.run, timer = timer.timer.id, tries = tries + 1,
            "cannot fire a timer, trying again: {error}"
        );
        self.retry_later(tries, Later::Work(Work::Fire(Box::new(timer), tries + 1)));
    }

    /// Fires retry delay `timer` of resident run `cell`: the store removes
    /// the timer row and marks the stored run awake, then the leaf is ready
    /// for its next attempt.
    fn fire_retry(
        self: &Arc<Self>,
        cell: super::Cell,
        timer: TimerRecord,
        lease: Option<weft_store::Lease>,
    ) {
        let store = self.launcher.store.as_ref();
        let write = match crate::stored::decide_fire(store, &timer, self.clock.now()) {
            Ok(Some(write)) => match lease {
                Some(lease) => write.under(lease),
                None => write,
            },
            // Ended in the store: the run's next commit is refused and
            // closes it.
            Ok(None) => {
                let mut live = lock(&cell);
                if !live.closed {
                    self.retry_ready(&mut live, &cell, &timer);
                }
                return;
            }
            Err(e) => {
                let mut live = lock(&cell);
                if !live.closed {
                    self.failed(&mut live, e);
                }
                return;
            }
        };
        let core = Arc::clone(self);
        // In the run's lane, so that it commits in order with the run's
        // other writes (a step commit queued before it, say).
        self.commits.submit_as(
            Arc::clone(&cell.tenant),
            write,
            Box::new(move |outcome| {
                let mut live = lock(&cell);
                if live.closed {
                    match outcome {
                        Ok(()) => core.retried_elsewhere(&timer),
                        // The run left memory first: its row is still
                        // pending, and fires through the store.
                        Err(StoreError::Refused(Refused::Changed(_))) => {
                            core.arm(timer.timer.key())
                        }
                        Err(_) => {}
                    }
                    return;
                }
                match outcome {
                    Ok(()) | Err(StoreError::Refused(Refused::TimerGone(_))) => {
                        core.retry_ready(&mut live, &cell, &timer);
                    }
                    // A commit of the run landed since it was read: decide
                    // again (unless another fire made the leaf ready).
                    Err(StoreError::Refused(Refused::Changed(_))) => {
                        core.enqueue(Work::Fire(Box::new(timer), 0))
                    }
                    Err(e) => core.failed(&mut live, e),
                }
            }),
        );
    }

    /// Retry delay `timer` fired after the cell that fired it let its run
    /// go: the run's cell now, if it was taken in again meanwhile, makes
    /// the leaf ready; otherwise the run is woken.
    fn retried_elsewhere(self: &Arc<Self>, timer: &TimerRecord) {
        let cell = lock(&self.cells).get(&timer.run).cloned();
        match cell {
            Some(cell) => {
                let mut live = lock(&cell);
                if !live.closed {
                    self.retry_ready(&mut live, &cell, timer);
                }
            }
            None => self.enqueue(Work::Wake(timer.run.clone(), 0)),
        }
    }

    /// Retry delay `timer` is over: its leaf is ready for its next attempt,
    /// unless another fire of it made the leaf ready already.
    fn retry_ready(self: &Arc<Self>, live: &mut Live, cell: &super::Cell, timer: &TimerRecord) {
        if live.task.drive.retry_fired(&timer.path, timer.timer) {
            self.enqueue(Work::Advance(Arc::clone(cell)));
        }
    }

    /// Notes a durable fire's lag in the metrics and, when measuring, against the system
    /// clock, on purpose, since the benchmark reports real time.
    pub(super) fn fired(&self, due: weft_core::clock::Timestamp) {
        let lag = self.clock.now().millis_since(due);
        self.telemetry.fired(std::time::Duration::from_millis(lag));
        if let Some(lags) = &self.fire_lags {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
            let due = i64::try_from(due.as_millis()).unwrap_or(i64::MAX) * 1000;
            lock(lags).push(now - due);
        }
    }

    /// The fire lags noted so far, taken.
    #[cfg(feature = "bench")]
    pub(crate) fn take_fire_lags(&self) -> Vec<i64> {
        self.fire_lags
            .as_ref()
            .map(|lags| std::mem::take(&mut *lock(lags)))
            .unwrap_or_default()
    }

    /// Timer `key` is due: a deadline fires here, on the timer thread,
    /// since every worker may be inside a long guest call that it is to
    /// interrupt; other timers go to the workers, ahead of other work.
    fn due(self: &Arc<Self>, key: (u64, u64)) {
        match self.launcher.store.timer(key) {
            Ok(Some(timer)) if timer.timer.kind == TimerKind::Deadline => self.fire(timer, 0),
            Ok(Some(timer)) => self.enqueue(Work::Fire(Box::new(timer), 0)),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(timer = key.1, "cannot read a due timer, trying again: {e}");
                self.retry_later(0, Later::Arm(key));
            }
        }
    }

    /// Hands every armed timer that is due by the clock to [`Scheduler::due`],
    /// and returns how many there were: the timer thread's round, for a
    /// simulation that has no such thread.
    #[cfg(feature = "stepped")]
    pub(super) fn tick(self: &Arc<Self>) -> usize {
        let now = self.clock.now().as_millis();
        self.run_later(now);
        let mut fired = 0;
        loop {
            let key = {
                let mut timers = lock(&self.timers);
                match timers.peek() {
                    Some(Reverse(key)) if key.0 <= now => timers.pop().map(|Reverse(key)| key),
                    _ => None,
                }
            };
            let Some(key) = key else {
                return fired;
            };
            self.due(key);
            fired += 1;
        }
    }

    /// When the soonest armed timer is due.
    #[cfg(feature = "stepped")]
    pub(super) fn next_due(&self) -> Option<u64> {
        let timer = lock(&self.timers).peek().map(|Reverse((due, _))| *due);
        let later = lock(&self.later).iter().map(|(at, _)| *at).min();
        timer.into_iter().chain(later).min()
    }

    /// The timer thread: each due timer to [`Scheduler::due`]. It reads the
    /// injected clock; a simulated clock is polled every millisecond.
    pub(super) fn run_timers(self: Arc<Self>) {
        let mut timers = lock(&self.timers);
        let mut polled = std::time::Instant::now();
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            if polled.elapsed() >= WATCH_POLL {
                drop(timers);
                self.poll_watches();
                polled = std::time::Instant::now();
                timers = lock(&self.timers);
            }
            let now = self.clock.now().as_millis();
            drop(timers);
            // Retries that are due go back to work; the next one bounds
            // the wait.
            let later = self.run_later(now);
            timers = lock(&self.timers);
            match timers.peek().map(|Reverse(key)| *key) {
                Some(key) if key.0 <= now => {
                    timers.pop();
                    drop(timers);
                    self.due(key);
                    timers = lock(&self.timers);
                }
                soonest => {
                    let next = soonest.map(|(due, _)| due).into_iter().chain(later).min();
                    let wait = next.map_or(WATCH_POLL, |due| {
                        self.clock
                            .real_wait(due.saturating_sub(now))
                            .min(Duration::from_secs(1))
                    });
                    timers = self
                        .timers_wake
                        .wait_timeout(timers, wait)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
    }
}
