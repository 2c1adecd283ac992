//! Child runs: starting the ones `subflow` steps make, and ending the
//! waits on them.

use std::sync::{Arc, Weak};

use weft_core::lock;
use weft_store::{OutboxRecord, Refused, RunRecord, StoreError, Write};

use crate::Quiet;
use crate::drive::Attempt;
use crate::launch::NewRun;

use super::{Cell, Later, Scheduler, Task, Work};

impl Scheduler {
    /// Carries out the outbox row that records a child run, then admits the
    /// child; `tries` of this failed before. If it fails, the row stays,
    /// and it is tried again after a backoff (and by the next start of a
    /// host on this store).
    pub(super) fn start_child(self: &Arc<Self>, child: NewRun, row: OutboxRecord, tries: u32) {
        let Some(write) = Write::start_run(&row) else {
            return;
        };
        let write = child.drive.leased(write);
        let core = Arc::clone(self);
        let tenant = Arc::from(weft_core::tenant::of(&child.drive.run.workflow));
        self.commits.submit_as(
            tenant,
            write,
            Box::new(move |outcome| match outcome {
                // Claimed here (in memory), so that a watch or a wake in
                // the meantime is noted rather than taking it in too; its
                // lease is read on a worker: a store read here would hold
                // up every tenant's commits.
                Ok(()) => {
                    if core.claim(&child.drive.run.id) {
                        core.enqueue(Work::AdmitChild(Box::new(child)));
                    }
                }
                // Carried out already: by a try of this write whose answer
                // was lost, by the parent's watch, or by another host. The
                // child may have moved on since: it is read back, not
                // admitted as it was made.
                Err(StoreError::Refused(Refused::Exists(_))) => {
                    core.enqueue(Work::Wake(child.drive.run.id.clone(), 0));
                }
                Err(e) => {
                    tracing::warn!(outbox = %row.id, tries = tries + 1, "cannot record a child run, trying again: {e}");
                    let again = Work::StartChild(Box::new(child), Box::new(row), tries + 1);
                    core.retry_later(tries, Later::Work(again));
                }
            }),
        );
    }

    /// Admits a child run this host recorded: only if it is under the
    /// lease it was made with, as this host's write left it; not if another
    /// host carried its row out first (it drives the child), nor if the
    /// child was fenced off since.
    /// The child is claimed here already.
    pub(super) fn admit_child(&self, child: NewRun) {
        let id = &child.drive.run.id;
        let ours = match self.launcher.store.lease(id) {
            Ok(ours) => ours,
            // Read back instead, as it is now.
            Err(_) => return self.unclaim_waking(id, true),
        };
        if ours.as_ref() != child.drive.lease() {
            self.unclaim(id);
        } else {
            self.telemetry.started(&child.drive.run, self.clock.now());
            let (done, _) = std::sync::mpsc::sync_channel(1);
            self.admit(Task {
                drive: child.drive,
                observer: Box::new(Quiet),
                done,
                alive: Weak::new(),
            });
        }
    }

    /// Registers a wait on a child run, then looks the child up: it may
    /// have ended already, or be recorded but not resident here (after a
    /// restart), in which case it is resumed.
    pub(super) fn watch(self: &Arc<Self>, cell: Cell, attempt: Box<Attempt>) {
        let Some(child) = attempt.awaited().map(str::to_owned) else {
            return;
        };
        lock(&self.watchers)
            .entry(child.clone())
            .or_default()
            .push((cell, attempt));
        match self.launcher.store.run(&child) {
            Ok(Some(run)) if run.state.is_terminal() => self.child_ended(&run),
            // A suspended child is woken by its timers, not here.
            Ok(Some(run)) if run.suspended => {}
            Ok(Some(run)) => {
                if self.claim_or_note(&run.id) {
                    match self.take_in(&run.id) {
                        Ok(drive) => {
                            let (done, _) = std::sync::mpsc::sync_channel(1);
                            self.admit_awake(Task {
                                drive,
                                observer: Box::new(Quiet),
                                done,
                                alive: Weak::new(),
                            });
                        }
                        Err(e) => {
                            self.unclaim(&child);
                            tracing::error!(run = %child, "cannot resume a child run: {e}");
                        }
                    }
                }
            }
            // Its outbox row is not carried out yet: by the write made
            // when the parent's commit was answered, unless that answer was
            // lost (the commit landed, but failed as far as this host knows,
            // and the parent was read back). Then it is carried out here.
            Ok(None) if weft_core::mutation::on("open-outbox-row-left") => {}
            // Looked at after a pause: `start_child`'s write is usually
            // in flight now.
            Ok(None) => self.retry_later(0, Later::Work(Work::CarryOut(child, 0))),
            // Looked at again after the backoff: its outbox row is carried
            // out if it is still open, and the child is woken, which takes
            // it in if it runs and nobody drives it (left alone, a child
            // recorded but not resident would wait forever).
            Err(e) => {
                tracing::warn!(run = %child, "cannot read a child run, trying again: {e}");
                let again = if weft_core::mutation::on("open-outbox-row-left") {
                    Work::Wake(child, 0)
                } else {
                    Work::CarryOut(child, 0)
                };
                self.retry_later(0, Later::Work(again));
            }
        }
    }

    /// Carries out the outbox row that records child run `child`, if it
    /// is still open, under this host's lease; then wakes the child here
    /// (recorded before or now). `tries` of this failed before. Carrying
    /// out a row twice does nothing the second time.
    pub(super) fn carry_out(self: &Arc<Self>, child: &str, tries: u32) {
        let again = |e: &StoreError| {
            tracing::warn!(run = %child, tries = tries + 1, "cannot record a child run, trying again: {e}");
            self.retry_later(
                tries,
                Later::Work(Work::CarryOut(child.to_owned(), tries + 1)),
            );
        };
        // Recorded meanwhile, as a rule: then it is only woken.
        match self.launcher.store.run(child) {
            Ok(Some(_)) => return self.enqueue(Work::Wake(child.to_owned(), 0)),
            Ok(None) => {}
            Err(e) => return again(&e),
        }
        let key = format!("run:{child}");
        let row = match self.launcher.store.outbox() {
            Ok(rows) => rows.into_iter().find(|row| row.id == key),
            Err(e) => return again(&e),
        };
        if let Some(write) = row.as_ref().and_then(Write::start_run) {
            let write = write.under(weft_store::Lease::after(None, self.host()));
            match self.commits.commit(write) {
                Ok(()) | Err(StoreError::Refused(Refused::Exists(_))) => {}
                Err(e) => return again(&e),
            }
        }
        match self.launcher.store.run(child) {
            Ok(Some(_)) => self.enqueue(Work::Wake(child.to_owned(), 0)),
            // Neither recorded nor to be: its parent's cancellation fenced
            // it off. What waits on it is behind the store.
            Ok(None) => self.never_recorded(child),
            Err(e) => again(&e),
        }
    }

    /// Child run `child` will never be recorded: every run waiting on it
    /// here is read back from the store (cancelled, as a rule, which its
    /// read finds).
    fn never_recorded(&self, child: &str) {
        if weft_core::mutation::on("fenced-child-awaited") {
            return;
        }
        let waiting = lock(&self.watchers).remove(child).unwrap_or_default();
        for (cell, attempt) in waiting {
            let mut live = lock(&cell);
            if live.closed {
                continue;
            }
            // A commit in flight answers first: looked at again after it.
            if live.committing {
                drop(live);
                lock(&self.watchers)
                    .entry(child.to_owned())
                    .or_default()
                    .push((cell, attempt));
                self.retry_later(1, Later::Work(Work::CarryOut(child.to_owned(), 1)));
                continue;
            }
            self.reread_later(
                &mut live,
                &format!("child run {child} will never be recorded"),
            );
        }
    }

    /// Looks up every child run waited on: one that ended where this
    /// process could not see it (cancelled in the store while suspended,
    /// say) ends its waits.
    pub(super) fn poll_watches(&self) {
        let children: Vec<String> = lock(&self.watchers).keys().cloned().collect();
        for child in children {
            if let Ok(Some(run)) = self.launcher.store.run(&child)
                && run.state.is_terminal()
            {
                self.child_ended(&run);
            }
        }
    }

    /// Cancels child run `id` in the store (with its own children), its
    /// parent having been cancelled; the store fenced it off already, so
    /// only its cancellation can land. Tried again after a store failure.
    pub(super) fn cancel_child(&self, id: &str) {
        let store = self.launcher.store.as_ref();
        let commit = |write| self.commits.commit(write);
        let ended = |run: &RunRecord| self.ended_in_store(run);
        match crate::stored::cancel_tree(store, id, self.clock.now(), &commit, &ended) {
            Ok(()) | Err(StoreError::Refused(Refused::RunEnded(_) | Refused::NotFound(_))) => {}
            Err(e) => {
                tracing::warn!(run = %id, "cannot cancel a child run, trying again: {e}");
                self.retry_later(1, Later::Work(Work::Cancel(id.to_owned())));
            }
        }
    }

    /// Cancels `children` if run `parent`, whose end fenced them off, has
    /// ended in the store; read again after a pause if the store fails.
    pub(super) fn cancel_fenced(&self, parent: &str, children: Vec<String>) {
        match self.launcher.store.run(parent) {
            Ok(Some(run)) if run.state.is_terminal() => {
                for child in children {
                    self.enqueue(Work::Cancel(child));
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(run = %parent, "cannot read a run whose end may have landed, trying again: {e}");
                let again = Work::Fenced(parent.to_owned(), children);
                self.retry_later(1, Later::Work(again));
            }
        }
    }

    /// Ends every wait on `child`, which has ended.
    pub(super) fn child_ended(&self, child: &RunRecord) {
        let waiting = lock(&self.watchers).remove(&child.id).unwrap_or_default();
        for (cell, attempt) in waiting {
            let finished = attempt.resolve(child);
            let mut live = lock(&cell);
            if live.closed {
                continue;
            }
            live.finished.push_back(finished);
            drop(live);
            self.enqueue(Work::Advance(cell));
        }
    }
}
