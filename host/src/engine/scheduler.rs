//! Worker threads that drive runs, one step attempt at a time per worker.
//!
//! A resident run is a cell: its [`Drive`], the attempts that finished and
//! wait for their commit, and whether a commit is in flight. Work on the
//! ready queue is either "advance this run" or "run this attempt". To
//! advance a run, a worker commits its oldest finished attempt or, when
//! there is none, plans it: every ready call becomes an attempt on the
//! queue, so the branches of a `parallel` run on several workers at once.
//! A run has at most one commit in flight, and is not planned while it has
//! one; attempts that finish meanwhile wait their turn. The commit goes to
//! the group commit with a callback, and the worker moves on at once; the
//! callback advances the run again (or delays a leaf for its retry, or
//! answers the run's handle). No thread waits for a sync, and no thread
//! belongs to a run.
//!
//! Admission: at most `max_resident` runs are in the scheduler's hands at
//! once. A run started (or resumed) beyond that is parked, in arrival order;
//! its record is already durable. When a resident run ends, the oldest
//! parked run is admitted. A resident run is never evicted.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::store::{GroupCommit, OutboxRecord, RunRecord, StoreError, Write};

use super::drive::{Attempt, Completed, Drive, Finished, Next, Plan};
use super::launch::{Launcher, NewRun};
use super::{Observer, Quiet};

/// A run, before it is admitted.
pub(super) struct Task {
    pub(super) drive: Drive,
    pub(super) observer: Box<dyn Observer + Send>,
    pub(super) done: SyncSender<Result<RunRecord, StoreError>>,
}

/// A resident run.
struct Live {
    task: Task,
    /// Attempts that ran and wait for their commit, oldest first.
    finished: VecDeque<Finished>,
    /// A commit of this run is in flight: nothing else is committed or
    /// planned until it is answered.
    committing: bool,
    /// The run ended (or its store failed): what finishes late is dropped.
    closed: bool,
}

type Cell = Arc<Mutex<Live>>;

/// An attempt waiting for a child run, and its run.
type Waiting = (Cell, Box<Attempt>);

enum Work {
    /// Commit what finished, or start what is ready.
    Advance(Cell),
    /// Run one attempt.
    Call(Cell, Box<Attempt>),
    /// Wait for the child run an attempt started.
    Watch(Cell, Box<Attempt>),
    /// A child run ended: end the waits on it.
    ChildEnded(Box<RunRecord>),
}

/// A leaf waiting out its retry delay.
struct Delayed {
    due: Instant,
    seq: u64,
    cell: Cell,
    path: String,
}

impl PartialEq for Delayed {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}

impl Eq for Delayed {}

impl PartialOrd for Delayed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Delayed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// Runs in the scheduler's hands, and runs waiting for a place.
struct Admission {
    resident: usize,
    max: usize,
    parked: VecDeque<Task>,
    /// The ids of every run resident or parked here.
    known: HashSet<String>,
}

/// What the engine, its workers and the commit callbacks share.
pub(super) struct Core {
    pub(super) launcher: Arc<Launcher>,
    admission: Mutex<Admission>,
    /// Attempts waiting for a child run, by the child's id.
    watchers: Mutex<HashMap<String, Vec<Waiting>>>,
    pub(super) commits: GroupCommit,
    pub(super) clock: Arc<dyn Clock>,
    ready: Mutex<VecDeque<Work>>,
    ready_wake: Condvar,
    delayed: Mutex<BinaryHeap<Reverse<Delayed>>>,
    delayed_wake: Condvar,
    next_seq: AtomicU64,
    stopping: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Core {
    pub(super) fn new(launcher: Arc<Launcher>, commits: GroupCommit, max_resident: usize) -> Self {
        let clock = Arc::clone(&launcher.clock);
        Self {
            launcher,
            admission: Mutex::new(Admission {
                resident: 0,
                max: max_resident.max(1),
                parked: VecDeque::new(),
                known: HashSet::new(),
            }),
            watchers: Mutex::new(HashMap::new()),
            commits,
            clock,
            ready: Mutex::new(VecDeque::new()),
            ready_wake: Condvar::new(),
            delayed: Mutex::new(BinaryHeap::new()),
            delayed_wake: Condvar::new(),
            next_seq: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
        }
    }

    /// Starts `workers` workers and the delay thread.
    pub(super) fn start(self: &Arc<Self>, workers: usize) -> std::io::Result<Vec<JoinHandle<()>>> {
        let mut threads = Vec::with_capacity(workers + 1);
        for n in 0..workers.max(1) {
            let core = Arc::clone(self);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("weft-worker-{n}"))
                    .stack_size(8 << 20)
                    .spawn(move || core.work())?,
            );
        }
        let core = Arc::clone(self);
        threads.push(
            std::thread::Builder::new()
                .name("weft-delays".to_owned())
                .spawn(move || core.release_delayed())?,
        );
        Ok(threads)
    }

    /// Asks every thread to stop; queued runs are dropped, and their
    /// handles answer [`StoreError::Closed`].
    pub(super) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ready = lock(&self.ready);
        self.ready_wake.notify_all();
        drop(_ready);
        let _delayed = lock(&self.delayed);
        self.delayed_wake.notify_all();
    }

    /// Marks run `id` as in this scheduler's hands; false if it already
    /// is. A run must be claimed before it is admitted.
    pub(super) fn claim(&self, id: &str) -> bool {
        lock(&self.admission).known.insert(id.to_owned())
    }

    /// Takes back a claim on a run that could not be admitted.
    pub(super) fn unclaim(&self, id: &str) {
        lock(&self.admission).known.remove(id);
    }

    /// Takes a claimed run into the scheduler, or parks it until a
    /// resident run ends. A child run is never parked: its parent holds a
    /// place and waits for it, so parking it could wait forever.
    pub(super) fn admit(&self, task: Task) {
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
    pub(super) fn load(&self) -> (usize, usize) {
        let admission = lock(&self.admission);
        (admission.resident, admission.parked.len())
    }

    /// Makes an admitted run resident.
    fn take(&self, task: Task) {
        let cell = Arc::new(Mutex::new(Live {
            task,
            finished: VecDeque::new(),
            committing: false,
            closed: false,
        }));
        self.enqueue(Work::Advance(cell));
    }

    /// Ends a resident run: gives its place to the oldest parked run, if
    /// any, then answers its handle (so a caller who sees the answer also
    /// sees the place freed).
    fn finish(&self, live: &mut Live, outcome: Result<RunRecord, StoreError>) {
        live.closed = true;
        live.finished.clear();
        if let Ok(run) = &outcome
            && run.parent.is_some()
        {
            self.enqueue(Work::ChildEnded(Box::new(run.clone())));
        }
        let next = {
            let mut admission = lock(&self.admission);
            admission.known.remove(&live.task.drive.run.id);
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
        let _ = live.task.done.send(outcome);
    }

    fn enqueue(&self, work: Work) {
        lock(&self.ready).push_back(work);
        self.ready_wake.notify_one();
    }

    fn retry_after(&self, cell: Cell, path: String, delay: Duration) {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let due = Instant::now() + delay;
        lock(&self.delayed).push(Reverse(Delayed {
            due,
            seq,
            cell,
            path,
        }));
        self.delayed_wake.notify_one();
    }

    fn next(&self) -> Option<Work> {
        let mut ready = lock(&self.ready);
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return None;
            }
            if let Some(work) = ready.pop_front() {
                return Some(work);
            }
            ready = self
                .ready_wake
                .wait(ready)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn work(self: Arc<Self>) {
        while let Some(work) = self.next() {
            match work {
                Work::Advance(cell) => self.advance(&cell),
                Work::Watch(cell, attempt) => self.watch(cell, attempt),
                Work::ChildEnded(child) => self.child_ended(&child),
                Work::Call(cell, attempt) => {
                    let finished = attempt.run(self.clock.as_ref());
                    {
                        let mut live = lock(&cell);
                        if live.closed {
                            continue;
                        }
                        live.finished.push_back(finished);
                    }
                    self.advance(&cell);
                }
            }
        }
    }

    /// Commits the run's oldest finished attempt; or, with none, starts
    /// every ready attempt, or commits the run's end. Does nothing while a
    /// commit of the run is in flight.
    fn advance(self: &Arc<Self>, cell: &Cell) {
        let mut guard = lock(cell);
        let live = &mut *guard;
        loop {
            if live.committing || live.closed {
                return;
            }
            if let Some(finished) = live.finished.pop_front() {
                let path = finished.path().to_owned();
                let Completed {
                    record,
                    next,
                    kv,
                    undo,
                    spawn,
                } = live.task.drive.complete(finished, self.clock.as_ref());
                let (row, spawn_write) = match &spawn {
                    Some(child) => {
                        let (row, write) = child.spawn(self.clock.now());
                        (Some(row), Some(write))
                    }
                    None => (None, None),
                };
                let write = Write::commit_step(&record, &live.task.drive.run, kv, spawn_write);
                live.committing = true;
                drop(guard);
                let core = Arc::clone(self);
                let cell = Arc::clone(cell);
                self.commits.submit(
                    write,
                    Box::new(move |outcome| {
                        let mut live = lock(&cell);
                        live.committing = false;
                        match outcome {
                            Err(StoreError::KvConflict { space, key }) => {
                                // Another run changed what this attempt
                                // read: run it again on fresh data, as the
                                // same attempt.
                                tracing::debug!(run = %live.task.drive.run.id, %space, %key, "key-value conflict; running the step again");
                                live.task.drive.undo(undo);
                                core.enqueue(Work::Advance(Arc::clone(&cell)));
                            }
                            Err(e) => core.finish(&mut live, Err(e)),
                            Ok(()) => {
                                live.task.observer.step_finished(&record);
                                if let (Some(child), Some(row)) = (spawn, row) {
                                    core.start_child(*child, row);
                                }
                                match next {
                                    Next::Step => {
                                        live.task.drive.busy.remove(&path);
                                        core.enqueue(Work::Advance(Arc::clone(&cell)));
                                    }
                                    Next::RetryAfter(delay) => {
                                        core.retry_after(Arc::clone(&cell), path, delay);
                                        core.enqueue(Work::Advance(Arc::clone(&cell)));
                                    }
                                    Next::Done => {
                                        let run = live.task.drive.run.clone();
                                        core.finish(&mut live, Ok(run));
                                    }
                                }
                            }
                        }
                    }),
                );
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
                    let write = Write::update_run(&live.task.drive.run);
                    live.committing = true;
                    drop(guard);
                    let core = Arc::clone(self);
                    let cell = Arc::clone(cell);
                    self.commits.submit(
                        write,
                        Box::new(move |outcome| {
                            let mut live = lock(&cell);
                            live.committing = false;
                            let outcome = outcome.map(|()| live.task.drive.run.clone());
                            core.finish(&mut live, outcome);
                        }),
                    );
                    return;
                }
            }
        }
    }

    /// Carries out the outbox row that records a child run, then admits the
    /// child. If this fails, the row stays, and the next start of a host on
    /// this store carries it out.
    fn start_child(self: &Arc<Self>, child: NewRun, row: OutboxRecord) {
        let Some(write) = Write::start_run(&row) else {
            return;
        };
        let core = Arc::clone(self);
        self.commits.submit(
            write,
            Box::new(move |outcome| match outcome {
                Ok(()) => {
                    if core.claim(&child.drive.run.id) {
                        let (done, _) = std::sync::mpsc::sync_channel(1);
                        core.admit(Task {
                            drive: child.drive,
                            observer: Box::new(Quiet),
                            done,
                        });
                    }
                }
                Err(e) => {
                    tracing::error!(outbox = %row.id, "cannot record a child run: {e}");
                }
            }),
        );
    }

    /// Registers a wait on a child run, then looks the child up: it may
    /// have ended already, or be recorded but not resident here (after a
    /// restart), in which case it is resumed.
    fn watch(self: &Arc<Self>, cell: Cell, attempt: Box<Attempt>) {
        let Some(child) = attempt.awaited().map(str::to_owned) else {
            return;
        };
        lock(&self.watchers)
            .entry(child.clone())
            .or_default()
            .push((cell, attempt));
        match self.launcher.store.run(&child) {
            Ok(Some(run)) if run.state.is_terminal() => self.child_ended(&run),
            Ok(Some(run)) => {
                if self.claim(&run.id) {
                    match self.launcher.load(run) {
                        Ok(drive) => {
                            let (done, _) = std::sync::mpsc::sync_channel(1);
                            self.admit(Task {
                                drive,
                                observer: Box::new(Quiet),
                                done,
                            });
                        }
                        Err(e) => {
                            self.unclaim(&child);
                            tracing::error!(run = %child, "cannot resume a child run: {e}");
                        }
                    }
                }
            }
            // Its outbox row is not carried out yet.
            Ok(None) => {}
            Err(e) => tracing::error!(run = %child, "cannot read a child run: {e}"),
        }
    }

    /// Ends every wait on `child`, which has ended.
    fn child_ended(&self, child: &RunRecord) {
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

    /// Makes delayed leaves ready again when they are due.
    fn release_delayed(self: Arc<Self>) {
        let mut delayed = lock(&self.delayed);
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            let now = Instant::now();
            match delayed.peek().map(|Reverse(d)| d.due) {
                Some(due) if due <= now => {
                    if let Some(Reverse(item)) = delayed.pop() {
                        // A commit callback holds a run's lock while it
                        // takes this one: never take them the other way.
                        drop(delayed);
                        let mut live = lock(&item.cell);
                        if !live.closed {
                            live.task.drive.busy.remove(&item.path);
                            drop(live);
                            self.enqueue(Work::Advance(item.cell));
                        }
                        delayed = lock(&self.delayed);
                    }
                }
                Some(due) => {
                    delayed = self
                        .delayed_wake
                        .wait_timeout(delayed, due - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                None => {
                    delayed = self
                        .delayed_wake
                        .wait(delayed)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }
}
