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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::Clock;
use crate::store::{
    GroupCommit, OutboxRecord, RunRecord, StoreError, TimerKind, TimerRecord, Write,
};

use super::drive::{Answer, Attempt, Completed, Drive, Finished, Next, Plan, Reply};
use super::error::ActError;
use super::launch::{Launcher, NewRun};
use super::{Observer, Quiet};

/// A run, before it is admitted.
pub(super) struct Task {
    pub(super) drive: Drive,
    pub(super) observer: Box<dyn Observer + Send>,
    pub(super) done: SyncSender<Result<RunRecord, StoreError>>,
    /// Alive while someone holds the run's handle: a suspended run keeps
    /// its observer and answer only then.
    pub(super) alive: Weak<()>,
}

/// A suspended run's observer and answer, kept for its handle.
type Sleeper = (
    Box<dyn Observer + Send>,
    SyncSender<Result<RunRecord, StoreError>>,
    Weak<()>,
);

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
    /// A timer is due.
    Fire(Box<TimerRecord>),
    /// Bring a run that a timer woke back into memory.
    Wake(String),
}

/// Work to do. Timer fires go first: a fire is one small commit, and its
/// lag should not grow with the work its wakes bring.
#[derive(Default)]
struct Queues {
    fires: VecDeque<Work>,
    other: VecDeque<Work>,
}

/// How often waits on child runs are checked against the store.
const WATCH_POLL: Duration = Duration::from_secs(1);

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
    ready: Mutex<Queues>,
    ready_wake: Condvar,
    /// Resident runs by id, for timer fires.
    cells: Mutex<HashMap<String, Cell>>,
    /// Armed timers, `(due, id)`, soonest first: 16 bytes each.
    timers: Mutex<BinaryHeap<Reverse<(u64, u64)>>>,
    timers_wake: Condvar,
    /// Suspended runs whose handle someone holds.
    sleepers: Mutex<HashMap<String, Sleeper>>,
    stopping: AtomicBool,
    /// Wakes threads that pause between rounds (the cron thread) on stop.
    pauses: Mutex<()>,
    pauses_wake: Condvar,
    /// When measuring: each durable fire's lag behind its due time, in
    /// microseconds of the system clock.
    fire_lags: Option<Mutex<Vec<i64>>>,
    /// Bumped after every commit that carries messages, for whoever
    /// delivers them.
    pub(super) messages: Arc<crate::hub::Signal>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Core {
    pub(super) fn new(
        launcher: Arc<Launcher>,
        commits: GroupCommit,
        max_resident: usize,
        measure_fires: bool,
    ) -> Self {
        let clock = Arc::clone(&launcher.clock);
        Self {
            fire_lags: measure_fires.then(|| Mutex::new(Vec::new())),
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
            ready: Mutex::new(Queues::default()),
            ready_wake: Condvar::new(),
            cells: Mutex::new(HashMap::new()),
            timers: Mutex::new(BinaryHeap::new()),
            timers_wake: Condvar::new(),
            sleepers: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            pauses: Mutex::new(()),
            pauses_wake: Condvar::new(),
            messages: Arc::default(),
        }
    }

    /// Starts `workers` workers and the timer thread.
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
                .name("weft-timers".to_owned())
                .spawn(move || core.run_timers())?,
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
        let _timers = lock(&self.timers);
        self.timers_wake.notify_all();
        drop(_timers);
        let _pauses = lock(&self.pauses);
        self.pauses_wake.notify_all();
    }

    pub(super) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Waits `wait`, or until the engine stops.
    pub(super) fn pause(&self, wait: Duration) {
        let pauses = lock(&self.pauses);
        if self.is_stopping() {
            return;
        }
        let _ = self
            .pauses_wake
            .wait_timeout(pauses, wait)
            .unwrap_or_else(PoisonError::into_inner);
    }

    /// Arms the timer `(due, id)`: when it is due, a worker fires it. Arming
    /// one twice is harmless: a fire needs the timer's row.
    pub(super) fn arm(&self, key: (u64, u64)) {
        lock(&self.timers).push(Reverse(key));
        self.timers_wake.notify_one();
    }

    /// Arms many timers at once (a host's start).
    pub(super) fn arm_all(&self, keys: Vec<(u64, u64)>) {
        // Heapified in place: no copy of a million keys.
        let mut more: BinaryHeap<Reverse<(u64, u64)>> =
            keys.into_iter().map(Reverse).collect::<Vec<_>>().into();
        lock(&self.timers).append(&mut more);
        self.timers_wake.notify_one();
    }

    /// How many timers are armed.
    pub(super) fn armed(&self) -> usize {
        lock(&self.timers).len()
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

    /// Makes an admitted run resident, and arms its pending timers (which
    /// may have come due while it was parked or loading).
    fn take(&self, task: Task) {
        let drive = &task.drive;
        let keys: Vec<(u64, u64)> = drive
            .timers
            .values()
            .chain(drive.run.deadline.as_ref())
            .map(|timer| timer.key())
            .collect();
        let id = drive.run.id.clone();
        let cell = Arc::new(Mutex::new(Live {
            task,
            finished: VecDeque::new(),
            committing: false,
            closed: false,
        }));
        lock(&self.cells).insert(id, Arc::clone(&cell));
        for key in keys {
            self.arm(key);
        }
        self.enqueue(Work::Advance(cell));
    }

    /// Gives a run's place up: to the oldest parked run, if any.
    fn release(&self, live: &mut Live) {
        live.closed = true;
        live.finished.clear();
        live.task
            .drive
            .cancel
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let id = &live.task.drive.run.id;
        lock(&self.cells).remove(id);
        let next = {
            let mut admission = lock(&self.admission);
            admission.known.remove(id);
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
    }

    /// Takes a run that waits for timers only out of memory; a fire brings
    /// it back ([`Work::Wake`]). Its observer and answer are kept only if
    /// someone holds its handle.
    fn suspend(&self, live: &mut Live) {
        tracing::debug!(run = %live.task.drive.run.id, "suspended until a timer fires");
        if live.task.alive.upgrade().is_some() {
            let observer = std::mem::replace(&mut live.task.observer, Box::new(super::Quiet));
            lock(&self.sleepers).insert(
                live.task.drive.run.id.clone(),
                (observer, live.task.done.clone(), live.task.alive.clone()),
            );
        }
        self.release(live);
    }

    /// Ends a resident run: gives its place to the oldest parked run, if
    /// any, then answers its handle (so a caller who sees the answer also
    /// sees the place freed).
    fn finish(&self, live: &mut Live, outcome: Result<RunRecord, StoreError>) {
        if let Ok(run) = &outcome
            && run.parent.is_some()
        {
            self.enqueue(Work::ChildEnded(Box::new(run.clone())));
        }
        self.release(live);
        let _ = live.task.done.send(outcome);
    }

    /// The run ended without this engine (cancelled in the store): it
    /// leaves, answering with what the store holds.
    fn ended_elsewhere(&self, live: &mut Live) {
        let id = live.task.drive.run.id.clone();
        let stored = self
            .launcher
            .store
            .run(&id)
            .and_then(|run| run.ok_or(StoreError::RunEnded(id)));
        self.finish(live, stored);
    }

    /// Cancels run `id`: through its cell when it is resident (the walk
    /// then ends it), otherwise in the store. `Err(RunEnded)` when it has
    /// already ended.
    pub(super) fn cancel(self: &Arc<Self>, id: &str) -> Result<(), StoreError> {
        let cell = lock(&self.cells).get(id).cloned();
        if let Some(cell) = cell {
            let mut live = lock(&cell);
            if !live.closed {
                let cancelled = live.task.drive.cancelled(self.clock.as_ref());
                live.finished.push_back(cancelled);
                drop(live);
                self.advance(&cell);
                return Ok(());
            }
        }
        let (tell, answer) = std::sync::mpsc::sync_channel(1);
        self.commits.submit(
            Write::CancelRun(id.to_owned(), self.clock.now()),
            Box::new(move |outcome| {
                let _ = tell.send(outcome);
            }),
        );
        answer.recv().map_err(|_| StoreError::Closed)?
    }

    /// Answers the `await` leaf at `path` of run `id`: through its cell
    /// when it is resident, otherwise in the store (the run must be
    /// suspended there), then wakes it. Blocks until the answer is
    /// durable, or refused.
    pub(super) fn act(
        self: &Arc<Self>,
        id: &str,
        path: &str,
        answer: &Answer,
    ) -> Result<(), ActError> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let cell = lock(&self.cells).get(id).cloned();
            if let Some(cell) = cell {
                let mut live = lock(&cell);
                if !live.closed {
                    let (tell, told) = std::sync::mpsc::sync_channel(1);
                    let reply: Reply = Box::new(move |outcome| {
                        let _ = tell.send(outcome);
                    });
                    return match live
                        .task
                        .drive
                        .answer(path, answer, self.clock.as_ref(), reply)
                    {
                        Ok(finished) => {
                            live.finished.push_back(finished);
                            drop(live);
                            self.advance(&cell);
                            match told.recv() {
                                Ok(Ok(())) => Ok(()),
                                Ok(Err(StoreError::TimerGone(_))) => Err(ActError::NotWaiting {
                                    run: id.to_owned(),
                                    step: path.to_owned(),
                                    state: "timed out".to_owned(),
                                }),
                                Ok(Err(e)) => Err(ActError::Store(e)),
                                // The run ended before the answer landed.
                                Err(_) => Err(ActError::Ended(id.to_owned())),
                            }
                        }
                        Err(_) => Err(ActError::NotWaiting {
                            run: id.to_owned(),
                            step: path.to_owned(),
                            state: describe_leaf(&live.task.drive, path),
                        }),
                    };
                }
            }
            // Parked or being loaded: it has a cell soon.
            if lock(&self.admission).known.contains(id) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            break;
        }
        self.act_in_store(id, path, answer)
    }

    /// [`Core::act`] for a run that is not in memory.
    fn act_in_store(
        self: &Arc<Self>,
        id: &str,
        path: &str,
        answer: &Answer,
    ) -> Result<(), ActError> {
        let store = &self.launcher.store;
        let run = store
            .run(id)?
            .ok_or_else(|| ActError::NotFound(id.to_owned()))?;
        if run.state.is_terminal() {
            return Err(ActError::Ended(id.to_owned()));
        }
        let mut leaf = super::drive::Leaf::default();
        let mut seen = false;
        for record in store.steps(id)? {
            if record.path == path {
                leaf.apply(&record);
                seen = true;
            }
        }
        if !seen || !leaf.awaiting {
            let state = if !seen {
                "not reached (or not an `await` step)".to_owned()
            } else {
                super::drive::leaf_state(&leaf)
            };
            return Err(ActError::NotWaiting {
                run: id.to_owned(),
                step: path.to_owned(),
                state,
            });
        }
        let record = answer.record(id, path, &leaf, self.clock.now());
        let (tell, told) = std::sync::mpsc::sync_channel(1);
        self.commits.submit(
            Write::Act {
                run: id.to_owned(),
                record: Box::new(record),
                timer: leaf.timer,
                now: self.clock.now(),
            },
            Box::new(move |outcome| {
                let _ = tell.send(outcome);
            }),
        );
        match told.recv().map_err(|_| StoreError::Closed)? {
            Ok(()) => {
                self.enqueue(Work::Wake(id.to_owned()));
                Ok(())
            }
            Err(StoreError::TimerGone(_)) => Err(ActError::NotWaiting {
                run: id.to_owned(),
                step: path.to_owned(),
                state: "timed out".to_owned(),
            }),
            Err(StoreError::RunEnded(_)) => Err(ActError::Ended(id.to_owned())),
            Err(StoreError::Conflict(message)) => Err(ActError::Busy(message)),
            Err(e) => Err(ActError::Store(e)),
        }
    }

    fn enqueue(&self, work: Work) {
        let mut ready = lock(&self.ready);
        match work {
            Work::Fire(_) => ready.fires.push_back(work),
            work => ready.other.push_back(work),
        }
        drop(ready);
        self.ready_wake.notify_one();
    }

    fn next(&self) -> Option<Work> {
        let mut ready = lock(&self.ready);
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return None;
            }
            if let Some(work) = ready.fires.pop_front().or_else(|| ready.other.pop_front()) {
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
                Work::Wake(id) => self.wake(&id),
                Work::Fire(timer) => self.fire(*timer),
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
                    fired,
                    emitted,
                    reply,
                } = live.task.drive.complete(finished, self.clock.as_ref());
                // With nothing but timers to wait for, the run leaves memory
                // once this commits.
                let drive = &mut live.task.drive;
                drive.run.suspended = matches!(next, Next::Wait(_) | Next::Await(_))
                    && live.finished.is_empty()
                    && drive.only_timers(Some(&path));
                let (row, spawn_write) = match &spawn {
                    Some(child) => {
                        let (row, write) = child.spawn(self.clock.now());
                        (Some(row), Some(write))
                    }
                    None => (None, None),
                };
                let emits = !emitted.is_empty();
                let write = Write::commit_step(
                    &record,
                    &live.task.drive.run,
                    kv,
                    spawn_write,
                    fired,
                    emitted,
                );
                self.commit(guard, cell, write, move |core, cell, live, outcome| {
                        if let Some(reply) = reply {
                            reply(outcome.as_ref().map(|_| ()).map_err(copy_error));
                        }
                        if emits && outcome.is_ok() {
                            core.messages.bump();
                        }
                        match outcome {
                            Err(StoreError::KvConflict { space, key }) => {
                                // Another run changed what this attempt
                                // read: run it again on fresh data, as the
                                // same attempt.
                                tracing::debug!(run = %live.task.drive.run.id, %space, %key, "key-value conflict; running the step again");
                                live.task.drive.undo(undo);
                                core.enqueue(Work::Advance(Arc::clone(cell)));
                            }
                            Err(StoreError::TimerGone(id)) => {
                                // Fired or cancelled elsewhere: the leaf
                                // keeps waiting as it was.
                                tracing::debug!(run = %live.task.drive.run.id, timer = id, "a timer's fire lost its race");
                                live.task.drive.undo(undo);
                                live.task.drive.busy.insert(path);
                            }
                            Err(e) => core.finish(live, Err(e)),
                            Ok(()) => {
                                if let Some(fired) = fired {
                                    core.fired(fired.due);
                                }
                                live.task.observer.step_finished(&record);
                                if let (Some(child), Some(row)) = (spawn, row) {
                                    core.start_child(*child, row);
                                }
                                match next {
                                    Next::Step => {
                                        live.task.drive.busy.remove(&path);
                                        live.task.drive.timers.remove(&path);
                                        live.task.drive.awaits.remove(&path);
                                        core.enqueue(Work::Advance(Arc::clone(cell)));
                                    }
                                    Next::Wait(_) | Next::Await(_) => {
                                        let timer = match next {
                                            Next::Wait(timer) => Some(timer),
                                            Next::Await(timer) => {
                                                live.task.drive.awaits.insert(path.clone());
                                                timer
                                            }
                                            _ => None,
                                        };
                                        if let Some(timer) = timer {
                                            live.task.drive.timers.insert(path, timer);
                                            core.arm(timer.key());
                                        }
                                        if live.task.drive.run.suspended
                                            && live.finished.is_empty()
                                            && live.task.drive.only_timers(None)
                                        {
                                            core.suspend(live);
                                        } else {
                                            // Something came up meanwhile:
                                            // the next commit says awake.
                                            live.task.drive.run.suspended = false;
                                            core.enqueue(Work::Advance(Arc::clone(cell)));
                                        }
                                    }
                                    Next::Done => {
                                        let run = live.task.drive.run.clone();
                                        core.finish(live, Ok(run));
                                    }
                                }
                            }
                        }
                });
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
                    self.commit(guard, cell, write, |core, _, live, outcome| {
                        let outcome = outcome.map(|()| live.task.drive.run.clone());
                        core.finish(live, outcome);
                    });
                    return;
                }
            }
        }
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
        then: impl FnOnce(&Arc<Core>, &Cell, &mut Live, Result<(), StoreError>) + Send + 'static,
    ) {
        guard.committing = true;
        drop(guard);
        let core = Arc::clone(self);
        let cell = Arc::clone(cell);
        self.commits.submit(
            write,
            Box::new(move |outcome| {
                let mut live = lock(&cell);
                live.committing = false;
                if let Err(StoreError::RunEnded(_)) = outcome {
                    return core.ended_elsewhere(&mut live);
                }
                then(&core, &cell, &mut live, outcome);
            }),
        );
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
                            alive: Weak::new(),
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
            // A suspended child is woken by its timers, not here.
            Ok(Some(run)) if run.suspended => {}
            Ok(Some(run)) => {
                if self.claim(&run.id) {
                    match self.launcher.load(run) {
                        Ok(drive) => {
                            let (done, _) = std::sync::mpsc::sync_channel(1);
                            self.admit(Task {
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
            // Its outbox row is not carried out yet.
            Ok(None) => {}
            Err(e) => tracing::error!(run = %child, "cannot read a child run: {e}"),
        }
    }

    /// Looks up every child run waited on: one that ended where this
    /// process could not see it (cancelled in the store while suspended,
    /// say) ends its waits.
    fn poll_watches(&self) {
        let children: Vec<String> = lock(&self.watchers).keys().cloned().collect();
        for child in children {
            if let Ok(Some(run)) = self.launcher.store.run(&child)
                && run.state.is_terminal()
            {
                self.child_ended(&run);
            }
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

    /// Fires timer `key`: through its run's cell when the run is resident
    /// (the fire commits as the leaf's result, or, for a retry delay, as
    /// the timer's removal); otherwise in the store, then the run is woken.
    /// The timer's row decides: a fire that finds it gone does nothing.
    fn fire(self: &Arc<Self>, timer: TimerRecord) {
        let cell = lock(&self.cells).get(&timer.run).cloned();
        if let Some(cell) = cell {
            let mut live = lock(&cell);
            if !live.closed {
                if timer.timer.kind == TimerKind::Retry {
                    // Firing: the leaf no longer counts as waiting, so the
                    // run cannot suspend before the fire lands.
                    live.task.drive.timers.remove(&timer.path);
                    drop(live);
                    let core = Arc::clone(self);
                    let write = Write::FireTimer(timer.timer, self.clock.now());
                    self.commits.submit(
                        write,
                        Box::new(move |outcome| {
                            let mut live = lock(&cell);
                            if live.closed {
                                if outcome.is_ok() {
                                    core.enqueue(Work::Wake(timer.run));
                                }
                                return;
                            }
                            match outcome {
                                Ok(()) | Err(StoreError::TimerGone(_)) => {
                                    let drive = &mut live.task.drive;
                                    drive.busy.remove(&timer.path);
                                    if let Some(leaf) = drive.results.get_mut(&timer.path) {
                                        leaf.timer = None;
                                    }
                                    core.enqueue(Work::Advance(Arc::clone(&cell)));
                                }
                                Err(e) => core.finish(&mut live, Err(e)),
                            }
                        }),
                    );
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
        // Parked or being loaded: its timers are armed again when it is
        // taken in.
        if lock(&self.admission).known.contains(&timer.run) {
            return;
        }
        let core = Arc::clone(self);
        let run = timer.run.clone();
        self.commits.submit(
            Write::FireTimer(timer.timer, self.clock.now()),
            Box::new(move |outcome| match outcome {
                Ok(()) => {
                    core.fired(timer.timer.due);
                    core.enqueue(Work::Wake(run));
                }
                Err(StoreError::TimerGone(_)) => {}
                Err(e) => tracing::error!(%run, "cannot fire a timer: {e}"),
            }),
        );
    }

    /// Notes a durable fire's lag, when measuring.
    fn fired(&self, due: crate::clock::Timestamp) {
        if let Some(lags) = &self.fire_lags {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
            let due = i64::try_from(due.as_millis()).unwrap_or(i64::MAX) * 1000;
            lock(lags).push(now - due);
        }
    }

    /// The fire lags noted so far, taken.
    pub(super) fn take_fire_lags(&self) -> Vec<i64> {
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
            Ok(Some(timer)) if timer.timer.kind == TimerKind::Deadline => self.fire(timer),
            Ok(Some(timer)) => self.enqueue(Work::Fire(Box::new(timer))),
            Ok(None) => {}
            Err(e) => tracing::error!(timer = key.1, "cannot read a due timer: {e}"),
        }
    }

    /// Brings run `id` back into memory after a timer woke it.
    fn wake(&self, id: &str) {
        if !self.claim(id) {
            return;
        }
        let loaded = self
            .launcher
            .store
            .run(id)
            .map_err(super::ResumeError::from)
            .and_then(|run| {
                let run = run.ok_or_else(|| super::ResumeError::NotFound(id.to_owned()))?;
                self.launcher.load(run)
            });
        match loaded {
            Ok(drive) => {
                let (observer, done, alive) =
                    lock(&self.sleepers).remove(id).unwrap_or_else(|| {
                        let (done, _) = std::sync::mpsc::sync_channel(1);
                        (Box::new(super::Quiet), done, Weak::new())
                    });
                self.admit(Task {
                    drive,
                    observer,
                    done,
                    alive,
                });
            }
            Err(super::ResumeError::NotRunning { .. }) => self.unclaim(id),
            Err(e) => {
                self.unclaim(id);
                tracing::error!(run = %id, "cannot wake a run: {e}");
            }
        }
    }

    /// The timer thread: each due timer to [`Core::due`]. It reads the
    /// injected clock; a simulated clock is polled every millisecond.
    fn run_timers(self: Arc<Self>) {
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
            match timers.peek().map(|Reverse(key)| *key) {
                Some(key) if key.0 <= now => {
                    timers.pop();
                    drop(timers);
                    self.due(key);
                    timers = lock(&self.timers);
                }
                Some((due, _)) => {
                    let wait = self.clock.real_wait(due - now).min(Duration::from_secs(1));
                    timers = self
                        .timers_wake
                        .wait_timeout(timers, wait)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                None => {
                    timers = self
                        .timers_wake
                        .wait_timeout(timers, WATCH_POLL)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
    }
}

/// A copy of `error` for a second listener: the same kind where the
/// listener acts on it, else its message.
fn copy_error(error: &StoreError) -> StoreError {
    match error {
        StoreError::TimerGone(id) => StoreError::TimerGone(*id),
        StoreError::RunEnded(id) => StoreError::RunEnded(id.clone()),
        StoreError::Closed => StoreError::Closed,
        other => StoreError::Commit(other.to_string()),
    }
}

/// Where the leaf at `path` of a resident run is, for an answer that
/// cannot be taken.
fn describe_leaf(drive: &Drive, path: &str) -> String {
    match drive.results.get(path) {
        None => "not reached (or not an `await` step)".to_owned(),
        Some(_) if drive.busy.contains(path) && !drive.awaits.contains(path) => {
            "being answered".to_owned()
        }
        Some(leaf) => super::drive::leaf_state(leaf),
    }
}
