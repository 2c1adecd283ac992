//! Worker threads that drive runs, one step attempt at a time per worker.
//!
//! A resident run is a cell: its [`Drive`], the attempts that finished and
//! wait for their commit, and whether a commit is in flight. Work on the
//! ready queue is either "advance this run" or "run this attempt". To
//! advance a run, a worker commits its oldest finished attempt or, when
//! there is none, plans it: every ready call becomes an attempt on the
//! queue, so the branches of a `parallel` run on several workers at once.
//! A run has at most one commit of an attempt in flight, and is not
//! planned while it has one; attempts that finish meanwhile wait their
//! turn. (A resident run's retry fire commits its `FireTimer` beside it.) The commit goes to
//! the group commit with a callback, and the worker moves on at once; the
//! callback advances the run again (or delays a leaf for its retry, or
//! answers the run's handle). No thread waits for a sync, and no thread
//! belongs to a run.
//!
//! Admission: at most `max_resident` runs are in the scheduler's hands at
//! once. A run started (or resumed) beyond that is parked, in arrival order,
//! as its id; its record is already durable. When a resident run leaves,
//! the oldest parked run is read back from the store and admitted. A
//! resident run is never evicted.

mod admission;
mod children;
mod commit;
mod control;
pub(crate) mod created;
mod leases;
mod pause;
pub use pause::Pausing;
#[cfg(feature = "stepped")]
pub mod stepped;
mod timers;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use weft_core::clock::Clock;
use weft_core::lock;
use weft_store::{GroupCommit, OutboxRecord, RunRecord, StoreError, TimerRecord};

use super::Observer;
use super::drive::{Attempt, Drive, Finished};
use super::launch::{Launcher, NewRun};

use admission::Admission;

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

/// The [`Sleeper`]s of suspended runs, by run id. A handle dropped after
/// its run suspended leaves its entry behind until the run wakes, which
/// for a run waiting on an answer may be never: so each time the map has
/// doubled, the entries whose handle is gone are dropped, and a suspended
/// run nobody holds a handle to keeps nothing in memory for long.
#[derive(Default)]
struct Sleepers {
    by_run: HashMap<String, Sleeper>,
    /// The size at which the next insert drops the entries of dropped
    /// handles.
    prune_at: usize,
}

impl Sleepers {
    fn keep(&mut self, id: String, sleeper: Sleeper) {
        self.by_run.insert(id, sleeper);
        if self.by_run.len() >= self.prune_at {
            self.by_run
                .retain(|_, (_, _, alive)| alive.strong_count() > 0);
            self.prune_at = (2 * self.by_run.len()).max(1_024);
        }
    }

    fn take(&mut self, id: &str) -> Option<Sleeper> {
        self.by_run.remove(id)
    }
}

/// A pause asked for of a run that left memory before it was committed.
struct PendingPause {
    /// Who asked.
    actor: String,
    /// `pause_left` is committing it in the store: a resume waits for the
    /// outcome.
    committing: bool,
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
    /// Commits of this run that failed in a row: the next try waits the
    /// longer.
    failures: u32,
    /// A pause asked for, by whom: the run starts nothing new, and once
    /// no call is under way its pause is committed and it leaves memory.
    pausing: Option<String>,
    /// The run's pause is the commit in flight.
    pause_committing: bool,
}

type Cell = Arc<CellOf>;

/// A resident run, and its tenant, which the ready queue takes in turn
/// without locking the run.
struct CellOf {
    tenant: Arc<str>,
    live: Mutex<Live>,
}

impl std::ops::Deref for CellOf {
    type Target = Mutex<Live>;

    fn deref(&self) -> &Mutex<Live> {
        &self.live
    }
}

/// How a tenant is held: its weight in the ready queue's turns, and the
/// most runs it may have resident (beyond it, its runs are parked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantLimits {
    /// Items of work taken in a row in the tenant's turn; at least 1.
    pub weight: u32,
    /// The most resident runs; `None`: only the host's `max_resident`.
    pub max_resident: Option<usize>,
    /// The longest a step's call may run, its default included.
    pub max_step_timeout: Option<Duration>,
    /// The most memory a step's call may have, in bytes, its default
    /// included.
    pub max_step_memory: Option<u64>,
    /// Guest time the tenant's calls may take per minute of the clock, on
    /// this host. A step due once it is spent waits, with a timer, for the
    /// next minute (its record says `cpu_quota`).
    pub guest_time_per_minute: Option<Duration>,
}

impl Default for TenantLimits {
    fn default() -> Self {
        Self {
            weight: 1,
            max_resident: None,
            max_step_timeout: None,
            max_step_memory: None,
            guest_time_per_minute: None,
        }
    }
}

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
    /// A timer is due: its fire, and how many tries of it failed.
    Fire(Box<TimerRecord>, u32),
    /// The fire of a timer whose run is not resident, claimed here: decide
    /// it in the store and commit it.
    Decide(Box<TimerRecord>, u32),
    /// Bring a run that a timer woke back into memory (or one whose commit
    /// failed); how many tries of it failed.
    Wake(String, u32),
    /// Record a child run a step started, then admit it; how many tries
    /// of it failed.
    StartChild(Box<NewRun>, Box<OutboxRecord>, u32),
    /// Admit a child run this host recorded, if it is still under the
    /// lease it was made with (read here, not on the committing thread).
    AdmitChild(Box<NewRun>),
    /// A resident run whose commit found it ended elsewhere left memory:
    /// read it, and answer its handle (this) with what the store holds.
    EndedElsewhere(String, SyncSender<Result<RunRecord, StoreError>>),
    /// Carry out the outbox row of this child run, if it is still open,
    /// then wake the child; how many tries of it failed.
    CarryOut(String, u32),
    /// Cancel these children if their parent (this run) has ended: a
    /// commit of its end, which fenced them off, was answered with an
    /// error that may hide it landed.
    Fenced(String, Vec<String>),
    /// Read back a run whose creating commit failed with this error (its
    /// outcome unknown), then admit it or tell its caller; how many tries
    /// of it failed.
    Recheck(Box<created::Created>, Box<StoreError>, u32),
    /// Cancel this run in the store: a child of a cancelled run.
    Cancel(String),
    /// Read in a parked run that was given a place; how many tries of it
    /// failed.
    Admit(Box<admission::Parked>, u32),
    /// Pause this run, as this actor asked, after it left memory with its
    /// pause still pending; how many tries of it failed.
    Pause(String, String, u32),
    /// Look in the store for the end of a run another host drives, for
    /// its handle here; how many looks found it going on.
    Follow(Box<admission::Followed>, u32),
}

/// What waits for a time before it is done: the next try of something
/// that failed.
enum Later {
    /// Queue this work.
    Work(Work),
    /// Arm this timer again (its row could not be read).
    Arm((u64, u64)),
}

/// How long the next try waits after `failed` tries failed: 200 ms,
/// doubling, at most 30 s (the backoff of the seed engine's timer bridge).
fn backoff(failed: u32) -> Duration {
    Duration::from_millis(200u64.saturating_mul(1 << failed.min(8))).min(Duration::from_secs(30))
}

/// Work to do. Timer fires go first: a fire is one small commit, and its
/// lag should not grow with the work its wakes bring. The rest is taken
/// tenant by tenant, in turn ([`weft_core::fair::Lanes`]).
#[derive(Default)]
struct Queues {
    fires: VecDeque<Work>,
    other: weft_core::fair::Lanes<Work>,
    /// Workers waiting for work: a wake costs a system call, and the
    /// committing thread queues a run's next piece of work for each step
    /// it commits, mostly while every worker is busy.
    idle: usize,
    /// Workers busy with each tenant's work, and the most one tenant may
    /// hold ([`worker_cap`]; 0 until the workers start): a tenant whose
    /// steps wait or run long cannot take every worker from the others.
    busy: HashMap<Arc<str>, usize>,
    cap: usize,
}

/// The most workers one tenant's work may hold at once: all but a quarter
/// of them (at least one kept free), so that other tenants' work always
/// finds one; all of one or two.
fn worker_cap(workers: usize) -> usize {
    if workers <= 2 {
        return workers.max(1);
    }
    workers - (workers / 4).max(1)
}

impl Work {
    /// The tenant whose turn this work waits for.
    fn tenant(&self) -> Arc<str> {
        match self {
            Work::Advance(cell) | Work::Call(cell, _) | Work::Watch(cell, _) => {
                Arc::clone(&cell.tenant)
            }
            Work::ChildEnded(run) => Arc::from(weft_core::tenant::of(&run.workflow)),
            Work::StartChild(child, _, _) | Work::AdmitChild(child) => {
                Arc::from(weft_core::tenant::of(&child.drive.run.workflow))
            }
            Work::Admit(parked, _) => Arc::clone(&parked.tenant),
            // Named by a run's id only: the lane of no tenant.
            Work::Fire(..)
            | Work::Decide(..)
            | Work::Wake(..)
            | Work::CarryOut(..)
            | Work::Fenced(..)
            | Work::Recheck(..)
            | Work::Cancel(_)
            | Work::EndedElsewhere(..)
            | Work::Follow(..)
            | Work::Pause(..) => weft_core::fair::untenanted(),
        }
    }
}

/// What the engine, its workers and the commit callbacks share.
pub(super) struct Scheduler {
    pub(super) launcher: Arc<Launcher>,
    admission: Mutex<Admission>,
    /// Attempts waiting for a child run, by the child's id (in order, so
    /// a simulation sees them in the same order every time).
    watchers: Mutex<BTreeMap<String, Vec<Waiting>>>,
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
    sleepers: Mutex<Sleepers>,
    /// What waits for its next try, with when (milliseconds by the clock).
    later: Mutex<Vec<(u64, Later)>>,
    /// Runs let go of after a failed commit, by id: how many failed in a
    /// row, for the backoff once they are back.
    retries: Mutex<HashMap<String, u32>>,
    /// Pauses asked for of runs that left memory before their pause was
    /// committed (a commit of the run failed, or was refused as having
    /// moved on), by run id, with who asked: the cell that reads the run
    /// back takes the pause up before it starts anything, and a run that
    /// stays out is paused in the store (`Work::Pause`).
    pending_pauses: Mutex<HashMap<String, PendingPause>>,
    stopping: AtomicBool,
    /// Whether this host is listed in the store's hosts (see
    /// `EngineConfig::listed`): set as its threads start.
    listed: AtomicBool,
    /// Wakes threads that pause between rounds (the cron thread) on stop.
    pauses: Mutex<()>,
    pauses_wake: Condvar,
    /// When measuring: each durable fire's lag behind its due time, in
    /// microseconds of the system clock.
    fire_lags: Option<Mutex<Vec<i64>>>,
    /// Bumped after every commit that carries messages, for whoever
    /// delivers them.
    pub(super) messages: Arc<weft_core::Signal>,
    /// How long this host's leases hold without a renewal.
    lease_ttl: Duration,
    /// Where this host runs.
    process: leases::Process,
    /// Until when its row holds its leases, in milliseconds.
    renewed: std::sync::atomic::AtomicU64,
    /// How many times this host's row lapsed before it was renewed (it
    /// was stopped past its lease): what it held before may be another's.
    lapses: std::sync::atomic::AtomicU64,
    /// Whether the lease thread takes over the runs of hosts that are gone.
    taking_over: AtomicBool,
    /// The hosts seen in the last round (or when this host joined): one
    /// that vanished (gone, or stopped cleanly) left runs to take over.
    seen_hosts: Mutex<HashSet<String>>,
    /// The next lease round looks at every run: set after a round that
    /// could not settle every run it found without a driver.
    sweep: AtomicBool,
    started_at: weft_core::Timestamp,
    /// Run events and metrics.
    pub(crate) telemetry: crate::telemetry::Telemetry,
    /// Where the committing thread sends the cells of runs that left
    /// memory, to be freed on the `weft-reaper` thread (a cell holds the
    /// run's whole drive, and the committing thread is the engine's limit
    /// under load); unset in a stepped engine, which frees them in place.
    reaper: Mutex<Option<std::sync::mpsc::Sender<Cell>>>,
    /// The reaper thread, joined when the engine is dropped (after which
    /// a cell is freed where it is let go of).
    reaper_thread: Mutex<Option<JoinHandle<()>>>,
}

impl Scheduler {
    pub(super) fn new(
        launcher: Arc<Launcher>,
        commits: GroupCommit,
        max_resident: usize,
        measure_fires: bool,
        lease_ttl: Duration,
        metrics: Option<Arc<weft_core::metrics::Metrics>>,
    ) -> Self {
        let clock = Arc::clone(&launcher.clock);
        #[cfg(feature = "stepped")]
        let process = if commits.holding().is_some() {
            leases::Process::simulated()
        } else {
            leases::Process::this()
        };
        #[cfg(not(feature = "stepped"))]
        let process = leases::Process::this();
        Self {
            lease_ttl,
            process,
            renewed: std::sync::atomic::AtomicU64::new(0),
            lapses: std::sync::atomic::AtomicU64::new(0),
            taking_over: AtomicBool::new(true),
            seen_hosts: Mutex::new(HashSet::new()),
            sweep: AtomicBool::new(false),
            started_at: clock.now(),
            // Ids rise across the host's restarts, by the clock.
            telemetry: crate::telemetry::Telemetry::new(
                clock.now().as_millis().saturating_mul(1000),
                metrics,
            ),
            fire_lags: measure_fires.then(|| Mutex::new(Vec::new())),
            launcher,
            admission: Mutex::new(Admission {
                resident: 0,
                max: max_resident.max(1),
                parked: weft_core::fair::Lanes::default(),
                known: HashMap::new(),
                by_tenant: HashMap::new(),
                tenant_of: HashMap::new(),
            }),
            watchers: Mutex::new(BTreeMap::new()),
            commits,
            clock,
            ready: Mutex::new(Queues::default()),
            ready_wake: Condvar::new(),
            cells: Mutex::new(HashMap::new()),
            timers: Mutex::new(BinaryHeap::new()),
            timers_wake: Condvar::new(),
            sleepers: Mutex::new(Sleepers::default()),
            later: Mutex::new(Vec::new()),
            retries: Mutex::new(HashMap::new()),
            pending_pauses: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            listed: AtomicBool::new(true),
            pauses: Mutex::new(()),
            pauses_wake: Condvar::new(),
            messages: Arc::default(),
            reaper: Mutex::new(None),
            reaper_thread: Mutex::new(None),
        }
    }

    /// Frees `cell`, the last hold on a run that left memory, on the
    /// reaper thread, or here without one.
    fn discard(&self, cell: Cell) {
        let reaper = lock(&self.reaper).clone();
        if let Some(reaper) = reaper {
            // A send fails only once the reaper is gone: the cell is then
            // freed here.
            let _ = reaper.send(cell);
        }
    }

    /// Stops the reaper once it has freed every cell sent to it; cells
    /// let go of from now on are freed in place.
    pub(super) fn stop_reaper(&self) {
        drop(lock(&self.reaper).take());
        let thread = lock(&self.reaper_thread).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    /// Starts `workers` workers and the timer thread; for a `listed` host,
    /// the threads that keep its leases and claim free work too.
    pub(super) fn start(
        self: &Arc<Self>,
        workers: usize,
        listed: bool,
    ) -> std::io::Result<Vec<JoinHandle<()>>> {
        self.listed.store(listed, Ordering::SeqCst);
        lock(&self.ready).cap = worker_cap(workers.max(1));
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
        if listed {
            let core = Arc::clone(self);
            threads.push(
                std::thread::Builder::new()
                    .name("weft-leases".to_owned())
                    .spawn(move || core.keep_leases())?,
            );
            let core = Arc::clone(self);
            threads.push(
                std::thread::Builder::new()
                    .name("weft-claims".to_owned())
                    .spawn(move || core.claim_free_work_while_running())?,
            );
        }
        // Joined by `stop_reaper`, once the workers are.
        let (reaper, cells) = std::sync::mpsc::channel::<Cell>();
        let thread = std::thread::Builder::new()
            .name("weft-reaper".to_owned())
            .spawn(move || cells.into_iter().for_each(drop))?;
        *lock(&self.reaper) = Some(reaper);
        *lock(&self.reaper_thread) = Some(thread);
        Ok(threads)
    }

    /// Whether this host is listed in the store's hosts.
    pub(crate) fn listed(&self) -> bool {
        self.listed.load(Ordering::SeqCst)
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

    /// `tenant`'s limits.
    fn limits(&self, tenant: &str) -> TenantLimits {
        self.launcher.limits(tenant)
    }

    /// Sets `tenant`'s limits, and gives places to parked runs that may
    /// have one now.
    pub(super) fn set_limits(&self, tenant: &str, limits: TenantLimits) {
        weft_core::write(&self.launcher.tenants).insert(tenant.to_owned(), limits);
        self.fill_places();
    }

    fn enqueue(&self, work: Work) {
        let mut ready = lock(&self.ready);
        // A tenant at its cap wakes no worker: none could take its work
        // (`given_back` wakes one when it may).
        let may_go = match work {
            Work::Fire(..) | Work::Decide(..) => {
                ready.fires.push_back(work);
                true
            }
            work => {
                let tenant = work.tenant();
                let may_go =
                    ready.cap == 0 || ready.busy.get(&tenant).copied().unwrap_or(0) < ready.cap;
                ready.other.push(&tenant, work);
                may_go
            }
        };
        let wake = ready.idle > 0 && may_go;
        drop(ready);
        if wake {
            self.ready_wake.notify_one();
        }
    }

    /// Items of work waiting for a worker.
    pub(super) fn ready_len(&self) -> usize {
        let ready = lock(&self.ready);
        ready.fires.len() + ready.other.len()
    }

    fn next(&self) -> Option<Work> {
        let mut ready = lock(&self.ready);
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return None;
            }
            if let Some(work) = ready.fires.pop_front() {
                return Some(work);
            }
            if !ready.other.is_empty() {
                let tenants = weft_core::read(&self.launcher.tenants);
                let weight = |t: &str| tenants.get(t).map_or(1, |l| l.weight);
                let queues = &mut *ready;
                let (cap, busy) = (queues.cap, &queues.busy);
                let room = |t: &str| cap == 0 || busy.get(t).copied().unwrap_or(0) < cap;
                if let Some(work) = queues.other.pop_where(weight, room) {
                    if cap > 0 {
                        *queues.busy.entry(work.tenant()).or_insert(0) += 1;
                    }
                    return Some(work);
                }
            }
            ready.idle += 1;
            ready = self
                .ready_wake
                .wait(ready)
                .unwrap_or_else(PoisonError::into_inner);
            ready.idle -= 1;
        }
    }

    /// Does `later` once `failed` tries have failed and their backoff is
    /// over.
    fn retry_later(&self, failed: u32, later: Later) {
        self.later_at(backoff(failed), later);
    }

    /// Queues `work` once `wait` has passed.
    fn later_by(&self, wait: Duration, work: Work) {
        self.later_at(wait, Later::Work(work));
    }

    fn later_at(&self, wait: Duration, later: Later) {
        let at = (self.clock.now() + wait).as_millis();
        lock(&self.later).push((at, later));
        let _timers = lock(&self.timers);
        self.timers_wake.notify_one();
    }

    /// Hands on what waited for its next try and is due by `now`; returns
    /// when the next one is due.
    fn run_later(&self, now: u64) -> Option<u64> {
        let due: Vec<Later> = {
            let mut later = lock(&self.later);
            if later.is_empty() {
                return None;
            }
            let (due, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut *later)
                .into_iter()
                .partition(|(at, _)| *at <= now);
            *later = wait;
            due.into_iter().map(|(_, l)| l).collect()
        };
        for item in due {
            match item {
                Later::Work(work) => self.enqueue(work),
                Later::Arm(key) => self.arm(key),
            }
        }
        lock(&self.later).iter().map(|(at, _)| *at).min()
    }

    /// A worker's loop: the next piece of work in turn, until the engine
    /// stops.
    fn work(self: Arc<Self>) {
        while let Some(work) = self.next() {
            let _held = TenantHeld::new(&self, &work);
            // A panic in one piece of work (a host bug; an attempt's own
            // panics are caught closer, in `Attempt::run`) fails it alone:
            // the worker goes on, and a run it held leaves memory to be
            // read back from the store, as after a failed commit.
            let cell = match &work {
                Work::Advance(cell) | Work::Watch(cell, _) | Work::Call(cell, _) => {
                    Some(Arc::clone(cell))
                }
                _ => None,
            };
            if let Err(panic) = weft_core::panics::contain("worker", || self.execute(work))
                && let Some(cell) = cell
            {
                let mut live = lock(&cell);
                // With a commit in flight, its answer decides (a failure
                // reads the run back); releasing the run under it would
                // let the answer act on a run already gone.
                if !live.closed && !live.committing {
                    self.failed(
                        &mut live,
                        StoreError::Commit(format!("a worker panicked: {panic}")),
                    );
                }
            }
        }
    }

    /// A worker given back by `tenant`'s work: the tenant's work waiting
    /// for it, held back at its cap, may go now.
    fn given_back(&self, tenant: &Arc<str>) {
        let mut ready = lock(&self.ready);
        let cap = ready.cap;
        let Some(count) = ready.busy.get_mut(tenant) else {
            return;
        };
        let was_at_cap = *count >= cap;
        *count -= 1;
        if *count == 0 {
            ready.busy.remove(tenant);
        }
        let wake = was_at_cap && ready.idle > 0 && ready.other.len_of(tenant) > 0;
        drop(ready);
        if wake {
            self.ready_wake.notify_one();
        }
    }

    /// Does one piece of work, on a worker (or the simulator's thread).
    fn execute(self: &Arc<Self>, work: Work) {
        match work {
            Work::Advance(cell) => self.advance(&cell),
            Work::Watch(cell, attempt) => self.watch(cell, attempt),
            Work::Wake(id, tries) => self.wake(&id, tries),
            Work::Fire(timer, tries) => self.fire(*timer, tries),
            Work::Decide(timer, tries) => self.decide(*timer, tries),
            Work::StartChild(child, row, tries) => self.start_child(*child, *row, tries),
            Work::AdmitChild(child) => self.admit_child(*child),
            Work::EndedElsewhere(id, done) => self.ended_elsewhere(&id, &done),
            Work::CarryOut(id, tries) => self.carry_out(&id, tries),
            Work::Fenced(parent, children) => self.cancel_fenced(&parent, children),
            Work::Recheck(created, error, tries) => self.recheck(*created, *error, tries),
            Work::Cancel(id) => self.cancel_child(&id),
            Work::Admit(parked, tries) => self.admit_parked(*parked, tries),
            Work::Pause(id, actor, tries) => self.pause_left(&id, &actor, tries),
            Work::Follow(followed, looks) => self.follow_after(followed, looks),
            Work::ChildEnded(child) => self.child_ended(&child),
            Work::Call(cell, attempt) => {
                let finished = attempt.run(self.clock.as_ref());
                {
                    let mut live = lock(&cell);
                    if live.closed {
                        return;
                    }
                    live.finished.push_back(finished);
                }
                self.advance(&cell);
            }
        }
    }
}

/// A worker held by a tenant's work, given back when dropped (a panic
/// contained or not).
struct TenantHeld<'a> {
    core: &'a Scheduler,
    tenant: Option<Arc<str>>,
}

impl<'a> TenantHeld<'a> {
    fn new(core: &'a Scheduler, work: &Work) -> Self {
        // Fires and decisions are not counted (`next` takes them first).
        let counted = !matches!(work, Work::Fire(..) | Work::Decide(..));
        Self {
            core,
            tenant: counted.then(|| work.tenant()),
        }
    }
}

impl Drop for TenantHeld<'_> {
    fn drop(&mut self) {
        if let Some(tenant) = &self.tenant {
            self.core.given_back(tenant);
        }
    }
}
