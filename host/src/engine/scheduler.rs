//! Worker threads that drive runs one step attempt at a time.
//!
//! A run is a [`Task`] on the ready queue. A worker takes it, runs one
//! attempt of its next step, and hands the attempt's commit to the group
//! commit with a callback; the worker moves on at once. When the batch is
//! durable, the callback puts the task back on the ready queue, on the delay
//! queue for a retry, or answers the run's handle. No thread waits for a
//! sync, and no thread belongs to a run.
//!
//! Admission: at most `max_resident` runs are in the scheduler's hands at
//! once. A run started (or resumed) beyond that is parked, in arrival order;
//! its record is already durable. When a resident run ends, the oldest
//! parked run is admitted. A resident run is never evicted.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::store::{GroupCommit, RunRecord, StoreError, Write};

use super::Observer;
use super::drive::{Drive, Next};

/// A run in the scheduler's hands.
pub(super) struct Task {
    pub(super) drive: Drive,
    pub(super) observer: Box<dyn Observer + Send>,
    pub(super) done: SyncSender<Result<RunRecord, StoreError>>,
}

impl Task {
    fn finish(self, outcome: Result<RunRecord, StoreError>) {
        let _ = self.done.send(outcome);
    }
}

struct Delayed {
    due: Instant,
    seq: u64,
    task: Task,
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
}

/// What the engine, its workers and the commit callbacks share.
pub(super) struct Core {
    admission: Mutex<Admission>,
    pub(super) commits: GroupCommit,
    pub(super) clock: Arc<dyn Clock>,
    ready: Mutex<VecDeque<Task>>,
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
    pub(super) fn new(commits: GroupCommit, clock: Arc<dyn Clock>, max_resident: usize) -> Self {
        Self {
            admission: Mutex::new(Admission {
                resident: 0,
                max: max_resident.max(1),
                parked: VecDeque::new(),
            }),
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

    /// Takes a new or resumed run into the scheduler, or parks it until a
    /// resident run ends.
    pub(super) fn admit(&self, task: Task) {
        let mut admission = lock(&self.admission);
        if admission.resident < admission.max {
            admission.resident += 1;
            drop(admission);
            self.enqueue(task);
        } else {
            admission.parked.push_back(task);
        }
    }

    /// How many runs are resident, and how many are parked.
    pub(super) fn load(&self) -> (usize, usize) {
        let admission = lock(&self.admission);
        (admission.resident, admission.parked.len())
    }

    /// Ends a resident run: gives its place to the oldest parked run, if
    /// any, then answers its handle (so a caller who sees the answer also
    /// sees the place freed).
    fn finish(&self, task: Task, outcome: Result<RunRecord, StoreError>) {
        let next = {
            let mut admission = lock(&self.admission);
            match admission.parked.pop_front() {
                Some(next) => Some(next),
                None => {
                    admission.resident = admission.resident.saturating_sub(1);
                    None
                }
            }
        };
        if let Some(next) = next {
            self.enqueue(next);
        }
        task.finish(outcome);
    }

    fn enqueue(&self, task: Task) {
        lock(&self.ready).push_back(task);
        self.ready_wake.notify_one();
    }

    fn enqueue_after(&self, task: Task, delay: Duration) {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let due = Instant::now() + delay;
        lock(&self.delayed).push(Reverse(Delayed { due, seq, task }));
        self.delayed_wake.notify_one();
    }

    fn next(&self) -> Option<Task> {
        let mut ready = lock(&self.ready);
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return None;
            }
            if let Some(task) = ready.pop_front() {
                return Some(task);
            }
            ready = self
                .ready_wake
                .wait(ready)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn work(self: Arc<Self>) {
        while let Some(task) = self.next() {
            self.advance(task);
        }
    }

    /// Runs the task's next attempt and submits its commit.
    fn advance(self: &Arc<Self>, mut task: Task) {
        let (record, next, kv, undo) = task
            .drive
            .attempt(self.clock.as_ref(), task.observer.as_mut());
        let write = match &record {
            Some(record) => Write::commit_step(record, &task.drive.run, kv),
            None => Write::update_run(&task.drive.run),
        };
        let core = Arc::clone(self);
        self.commits.submit(
            write,
            Box::new(move |outcome| match outcome {
                Err(StoreError::KvConflict { space, key }) => {
                    // Another run changed what this attempt read: run it
                    // again on fresh data, as the same attempt.
                    tracing::debug!(run = %task.drive.run.id, %space, %key, "key-value conflict; running the step again");
                    task.drive.undo(undo);
                    core.enqueue(task);
                }
                Err(e) => core.finish(task, Err(e)),
                Ok(()) => {
                    if let Some(record) = &record {
                        task.observer.step_finished(record);
                    }
                    match next {
                        Next::Step => core.enqueue(task),
                        Next::RetryAfter(delay) => core.enqueue_after(task, delay),
                        Next::Done => {
                            let run = task.drive.run.clone();
                            core.finish(task, Ok(run));
                        }
                    }
                }
            }),
        );
    }

    /// Moves delayed tasks to the ready queue when they are due.
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
                        self.enqueue(item.task);
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
