//! Advancing a run: committing its finished attempts one at a time, or
//! starting what is ready; and what each commit leads to.

use std::sync::{Arc, MutexGuard};

use weft_core::lock;
use weft_store::{CANCEL_PATH, OutboxRecord, Refused, StepRecord, StoreError, TimerRef, Write};

use crate::drive::{Completed, Finished, Next, Plan, Reply, Undo};
use crate::launch::NewRun;

use super::{Cell, Live, Scheduler, Task, Work};

/// A step's commit in flight: what its answer is acted on with.
struct Committing {
    /// The leaf's path.
    path: String,
    record: StepRecord,
    next: Next,
    undo: Undo,
    /// The child run the attempt starts, and the outbox row that records
    /// it.
    spawn: Option<Box<NewRun>>,
    row: Option<OutboxRecord>,
    /// The timer whose fire this is.
    fired: Option<TimerRef>,
    /// Told how the commit went.
    reply: Option<Reply>,
    /// The commit carries messages.
    emits: bool,
    /// The child runs this commit fences off (it cancels the run): each is
    /// cancelled once it is durable.
    fenced: Vec<String>,
}

impl Scheduler {
    /// Commits the run's oldest finished attempt; or, with none, starts
    /// every ready attempt, or commits the run's end. Does nothing while a
    /// commit of the run is in flight.
    pub(super) fn advance(self: &Arc<Self>, cell: &Cell) {
        let mut guard = lock(cell);
        let live = &mut *guard;
        loop {
            if live.committing || live.closed {
                return;
            }
            if let Some(finished) = live.finished.pop_front() {
                self.commit_finished(guard, cell, finished);
                return;
            }
            if let Some(actor) = live.pausing.clone() {
                // Nothing new starts; once the calls under way are
                // committed, the pause is, and the run leaves memory.
                if !live.task.drive.calls_under_way() {
                    self.commit_pause(guard, cell, actor);
                }
                return;
            }
            let Task {
                drive, observer, ..
            } = &mut live.task;
            match drive.plan(self.clock.as_ref(), observer.as_mut()) {
                Plan::Wait => return,
                Plan::Start(attempts) => {
                    let mut settled = false;
                    for attempt in attempts {
                        if attempt.awaited().is_some() {
                            self.enqueue(Work::Watch(Arc::clone(cell), Box::new(attempt)));
                        } else if attempt.is_settled() {
                            live.finished.push_back(attempt.run(self.clock.as_ref()));
                            settled = true;
                        } else {
                            self.enqueue(Work::Call(Arc::clone(cell), Box::new(attempt)));
                        }
                    }
                    if !settled {
                        return;
                    }
                }
                Plan::End => {
                    let drive = &live.task.drive;
                    let write = drive.leased(Write::update_run(&drive.run));
                    self.commit(guard, cell, write, |core, _, live, outcome| match outcome {
                        Ok(()) => {
                            let run = live.task.drive.run.clone();
                            core.finish(live, Ok(run));
                        }
                        Err(e) => core.failed(live, e),
                    });
                    return;
                }
            }
        }
    }

    /// Commits `finished`, the run's oldest finished attempt, which `guard`
    /// has taken from the run.
    fn commit_finished(
        self: &Arc<Self>,
        mut guard: MutexGuard<'_, Live>,
        cell: &Cell,
        finished: Finished,
    ) {
        let live = &mut *guard;
        let path = finished.path().to_owned();
        let Completed {
            record,
            next,
            kv,
            undo,
            spawn,
            fired,
            emitted,
            reply,
        } = live.task.drive.complete(finished, self.clock.as_ref());
        // With nothing but timers to wait for, the run leaves memory
        // once this commits.
        let drive = &mut live.task.drive;
        // A run being paused stays until its pause is committed.
        drive.run.suspended = matches!(next, Next::Wait(_) | Next::Await(_))
            && live.finished.is_empty()
            && live.pausing.is_none()
            && drive.only_timers(Some(&path));
        let (row, spawn_write) = match &spawn {
            Some(child) => {
                let (row, write) = child.spawn(self.clock.now());
                (Some(row), Some(write))
            }
            None => (None, None),
        };
        let emits = !emitted.is_empty();
        // A result that stores what a step made (a plugin's output, or
        // key-value writes, messages, a child run) is refused over the
        // tenant's stored bytes, and the step then fails with
        // `storage_quota`. Anything else is small, and stored whatever the
        // quota, as it is when decided in the store: a failure, a wait or
        // a timer's fire, an outside actor's answer, a cancellation.
        let makes = live.task.drive.run.plugins.contains_key(&record.step_id)
            || kv.is_some()
            || spawn.is_some()
            || emits;
        // A cancellation fences off the children its run waits for, in
        // the same transaction: none of their commits lands after it.
        let fenced = if path == CANCEL_PATH {
            live.task.drive.open_children()
        } else {
            Vec::new()
        };
        let write = Write::commit_step(
            &record,
            &live.task.drive.run,
            kv,
            spawn_write,
            fired,
            emitted,
        )
        .fencing(fenced.clone());
        let refusable = makes && record.output.is_some() && reply.is_none() && path != CANCEL_PATH;
        let write = live
            .task
            .drive
            .leased(write)
            .charged(&cell.tenant, refusable);
        let committing = Committing {
            path,
            record,
            next,
            undo,
            spawn,
            row,
            fired,
            reply,
            emits,
            fenced,
        };
        self.commit(guard, cell, write, move |core, cell, live, outcome| {
            core.step_committed(cell, live, committing, outcome);
        });
    }

    /// A step's commit is answered: the answer is passed on, then a
    /// conflict runs the attempt again, a fire that lost its race leaves
    /// the leaf waiting, a failed store ends the run, and a durable commit
    /// goes on in [`Scheduler::step_durable`].
    fn step_committed(
        self: &Arc<Self>,
        cell: &Cell,
        live: &mut Live,
        mut committing: Committing,
        outcome: Result<(), StoreError>,
    ) {
        if let Some(reply) = committing.reply.take() {
            reply(outcome.clone());
        }
        if committing.emits && outcome.is_ok() {
            self.messages.bump();
        }
        match outcome {
            Err(StoreError::Refused(Refused::KvConflict { space, key })) => {
                // Another run changed what this attempt
                // read: run it again on fresh data, as the
                // same attempt.
                tracing::debug!(
                    run = %live.task.drive.run.id, %space, %key,
                    "key-value conflict; running the step again"
                );
                live.task.drive.undo(committing.undo);
                self.enqueue(Work::Advance(Arc::clone(cell)));
            }
            Err(StoreError::Refused(Refused::StorageQuota { .. } | Refused::TimerQuota { .. })) => {
                // The result would take the tenant over its stored bytes
                // or its pending timers: the attempt fails instead, and its
                // failure is stored.
                if !weft_core::mutation::on("refusal-not-undone") {
                    live.task.drive.undo(committing.undo);
                }
                let code = match &outcome {
                    Err(StoreError::Refused(Refused::TimerQuota { .. })) => "timer_quota",
                    _ => "storage_quota",
                };
                let refused = outcome.err().map(|e| e.to_string()).unwrap_or_default();
                live.finished.push_front(Finished::over_quota(
                    committing.path,
                    committing.record,
                    committing.fired,
                    code,
                    refused,
                ));
                self.enqueue(Work::Advance(Arc::clone(cell)));
            }
            Err(StoreError::Refused(Refused::TimerGone(id))) => {
                // Fired or cancelled elsewhere (through the store, or by
                // a host that took the run while it slept): what this
                // drive holds is behind the store, so it is read back.
                tracing::debug!(
                    run = %live.task.drive.run.id, timer = id,
                    "a timer's fire lost its race; the run is read back"
                );
                live.task.drive.fire_lost(committing.undo, committing.path);
                self.reread(live);
            }
            Err(e) => {
                // An end that fenced children off may have landed: they
                // are cancelled if it did (else nothing would end them).
                if e.outcome_unknown()
                    && !committing.fenced.is_empty()
                    && !weft_core::mutation::on("lost-end-children-left")
                {
                    let id = live.task.drive.run.id.clone();
                    self.enqueue(Work::Fenced(id, committing.fenced));
                }
                self.failed(live, e);
            }
            Ok(()) => {
                live.failures = 0;
                self.step_durable(cell, live, committing);
            }
        }
    }

    /// A step's commit is durable: the fire's lag is noted, the observer
    /// told, the child run started; then the run goes on, waits (leaving
    /// memory if it waits for timers only), or ends.
    fn step_durable(self: &Arc<Self>, cell: &Cell, live: &mut Live, committing: Committing) {
        let Committing {
            path,
            record,
            next,
            spawn,
            row,
            fired,
            fenced,
            ..
        } = committing;
        for child in fenced {
            self.enqueue(Work::Cancel(child));
        }
        if let Some(fired) = fired {
            self.fired(fired.due);
        }
        live.task.observer.step_finished(&record);
        if path != CANCEL_PATH {
            let waiting = matches!(next, Next::Wait(_) | Next::Await(_));
            self.telemetry.step(&live.task.drive.run, &record, waiting);
        }
        if let (Some(child), Some(row)) = (spawn, row) {
            // On a worker: this is the committing thread, which must never
            // wait for its own queue.
            self.enqueue(Work::StartChild(child, Box::new(row), 0));
        }
        match next {
            Next::Step => {
                live.task.drive.committed(path, next);
                self.enqueue(Work::Advance(Arc::clone(cell)));
            }
            Next::Wait(_) | Next::Await(_) => {
                if let Some(timer) = live.task.drive.committed(path, next) {
                    self.arm(timer.key());
                }
                if live.task.drive.run.suspended {
                    // The store says nobody drives the run now, so another
                    // host may take it: it leaves memory even if something
                    // came up meanwhile. A fire that came up fires again
                    // through the store; an answer or a cancellation is
                    // told to try again.
                    // Something under way that no timer stands for (a
                    // retry made ready meanwhile): it is read back at once.
                    let busy = !live.task.drive.only_timers(None);
                    for finished in std::mem::take(&mut live.finished) {
                        if let Some(timer) = finished.abandon() {
                            self.arm(timer.key());
                        }
                    }
                    let id = live.task.drive.run.id.clone();
                    self.suspend(live);
                    if busy {
                        // After a pause, so that a retry fire in flight has
                        // landed and the load sees its row gone.
                        self.retry_later(0, super::Later::Work(Work::Wake(id, 0)));
                    }
                } else {
                    self.enqueue(Work::Advance(Arc::clone(cell)));
                }
            }
            Next::Done => {
                let run = live.task.drive.run.clone();
                self.finish(live, Ok(run));
            }
        }
    }

    /// Commits the run's pause, asked for by `actor`: it is kept out of the
    /// runs to resume, and leaves memory with its timers armed (their
    /// fires are recorded in the store, and it is not woken).
    fn commit_pause(self: &Arc<Self>, guard: MutexGuard<'_, Live>, cell: &Cell, actor: String) {
        let now = self.clock.now();
        let mut paused = guard.task.drive.run.clone();
        paused.paused = Some(weft_store::PauseMark { at: now, actor });
        paused.suspended = true;
        paused.updated_at = now;
        let write = guard.task.drive.leased(Write::pause_run(&paused));
        let mut guard = guard;
        guard.pause_committing = true;
        self.commit(guard, cell, write, move |core, _, live, outcome| {
            tracing::debug!(run = %paused.id, "its pause's commit: {outcome:?}");
            live.pausing = None;
            live.pause_committing = false;
            match outcome {
                Ok(()) => {
                    tracing::debug!(run = %paused.id, "paused");
                    live.task.drive.run = paused;
                    // What came up meanwhile goes through the store: a
                    // fire fires again there, an answer is told to try
                    // again.
                    for finished in std::mem::take(&mut live.finished) {
                        if let Some(timer) = finished.abandon() {
                            core.arm(timer.key());
                        }
                    }
                    core.suspend(live);
                }
                // It moved on under the pause (a retry's fire, say): read
                // back, and paused again from there.
                Err(StoreError::Refused(Refused::Changed(_) | Refused::Exists(_))) => {
                    live.pausing = Some(paused.paused.map(|m| m.actor).unwrap_or_default());
                    core.reread(live);
                }
                // The pause is still asked for: the run leaves memory with
                // it pending, and it is done in the store, or through the
                // cell that reads the run back (see `Scheduler::release`).
                Err(e) => {
                    if !weft_core::mutation::on("pending-pause-dropped") {
                        live.pausing = paused.paused.map(|m| m.actor);
                    }
                    core.failed(live, e);
                }
            }
        });
    }

    /// Submits `write` as the run's one commit in flight. `then` runs on
    /// the committing thread, with the run locked and no commit in flight;
    /// a commit refused because the run ended elsewhere (cancelled) closes
    /// the run instead.
    fn commit(
        self: &Arc<Self>,
        mut guard: MutexGuard<'_, Live>,
        cell: &Cell,
        write: Write,
        then: impl FnOnce(&Arc<Scheduler>, &Cell, &mut Live, Result<(), StoreError>) + Send + 'static,
    ) {
        guard.committing = true;
        drop(guard);
        let core = Arc::clone(self);
        let cell = Arc::clone(cell);
        self.commits.submit_as(
            Arc::clone(&cell.tenant),
            write,
            Box::new(move |outcome| {
                let mut live = lock(&cell);
                live.committing = false;
                if let Err(StoreError::Refused(Refused::RunEnded(_))) = outcome {
                    core.left_ended(&mut live);
                } else if let Err(panic) =
                    weft_core::panics::contain("commit", || then(&core, &cell, &mut live, outcome))
                {
                    // A bug in what follows the commit: the run leaves memory
                    // and is read back from what is durable, rather than
                    // staying here with nothing queued for it.
                    if !live.closed {
                        let failed = StoreError::Commit(format!("after a commit: {panic}"));
                        core.failed(&mut live, failed);
                    }
                }
                drop(live);
                // The last holder of a run that left memory: its drive is
                // freed off this thread.
                if Arc::strong_count(&cell) == 1 {
                    core.discard(cell);
                }
            }),
        );
    }
}
