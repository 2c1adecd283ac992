//! Group commit: one thread turns every write that is waiting into one
//! transaction and one sync, then answers each writer.
//!
//! A writer hands over its write with a callback that the committing thread
//! calls once the batch is synced ([`GroupCommit::submit`]). While one batch syncs, the next one
//! fills up, so throughput grows with the number of writers instead of being
//! held to one sync per write.
//!
//! The committing thread never waits for itself: a write submitted from an
//! answer (which runs on that thread) joins the next batch without waiting
//! for room, and a blocking commit from there is refused.
//!
//! Writes wait by tenant ([`GroupCommit::submit_as`]): each batch takes
//! the tenants in turn; while a tenant with a few writes waits beside
//! another, and for a while after, a batch holds at most [`SHARED_BATCH`]
//! writes beside a flood and [`SHORT_BATCH`] beside steady work; and a
//! submitter waits for room only while its own tenant has a full lane. So
//! one tenant's flood of writes holds another tenant's commit back by a
//! short batch or two, not by the flood.
//!
//! A simulation holds the writes instead ([`GroupCommit::held`]): nothing
//! commits until the simulator says which writes make the next batch, and
//! whether that batch fails.

use std::cell::Cell;
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weft_core::fair::Lanes;
use weft_core::lock;

use super::{Store, StoreError, Write};

/// The most writes in one transaction.
const MAX_BATCH: usize = 512;

/// The most writes in one transaction while a tenant with a few writes
/// waits beside another tenant's flood (a lane of more than
/// [`SHORT_BATCH`]).
pub const SHARED_BATCH: usize = 8;

/// The most writes in one transaction while a tenant with a few writes
/// waits beside another tenant's steady work: a lane of none of them holds
/// more than this. Such a batch is still short, and steady work
/// commits in the syncs the device gives. At [`SHARED_BATCH`] then too,
/// another tenant's trickle of starts held a busy tenant to 8 writes per
/// sync and took a quarter of its throughput (`weft bench --noisy`). The
/// test is one tenant's lane, not all the writes that wait: a tenant with
/// more waiting than one such batch takes is a flood, and steady work (a
/// few dozen runs in flight) has fewer, while the writes of all tenants
/// together often have more.
pub const SHORT_BATCH: usize = 64;

/// How long batches stay short after a tenant with a few writes last
/// waited beside another.
const SHARED_FOR: Duration = Duration::from_millis(100);

/// The most writes of one tenant that wait: a submitter of that tenant
/// waits for room beyond it. The bound is per tenant (and one more lane for
/// writes of no tenant), so the writes held in memory grow with the
/// number of tenants that flood at once.
const LANE: usize = 2 * MAX_BATCH;

/// What the committing thread calls with the outcome of a write: `Ok` once
/// it is durable. It runs on the committing thread, so it must be quick.
pub type Done = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

struct Job {
    write: Write,
    done: Done,
    /// Whose turn it waits for.
    tenant: Arc<str>,
}

thread_local! {
    /// Which group commit this thread answers for (its address; 0: none).
    /// Set on a committing thread, and on a simulator's thread while it
    /// answers a batch: where a wait for that group commit would be a
    /// wait for the thread itself.
    static ANSWERING: Cell<usize> = const { Cell::new(0) };
}

/// The address that stands for a group commit in [`ANSWERING`].
fn address<T>(shared: &Arc<T>) -> usize {
    Arc::as_ptr(shared) as usize
}

/// Whether this thread answers for the group commit at `group`.
fn answering(group: usize) -> bool {
    ANSWERING.with(Cell::get) == group
}

/// Marks this thread as answering for one group commit until dropped.
struct Answering(usize);

impl Answering {
    fn mark(group: usize) -> Self {
        Self(ANSWERING.with(|flag| flag.replace(group)))
    }
}

impl Drop for Answering {
    /// Restores the mark as it was, on a panic too.
    fn drop(&mut self) {
        ANSWERING.with(|flag| flag.set(self.0));
    }
}

/// The committing thread of one store.
pub struct GroupCommit {
    /// What the committing thread takes its batches from.
    queue: Arc<Queue>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Set when writes are held for a simulator instead.
    held: Option<Arc<Held>>,
}

/// The writes waiting for the committing thread, by tenant.
#[derive(Default)]
struct Queue {
    waiting: Mutex<Waiting>,
    /// The committing thread waits on it for writes.
    filled: Condvar,
    /// Submitters wait on it for room in their tenant's lane.
    room: Condvar,
    /// Where each batch's size and time are counted.
    metrics: std::sync::OnceLock<Arc<weft_core::metrics::Metrics>>,
}

#[derive(Default)]
struct Waiting {
    lanes: Lanes<Job>,
    /// No write is taken any more; the thread commits what waits, then
    /// stops.
    closed: bool,
}

/// Writes submitted to a held group commit, waiting for the simulator to
/// commit them ([`Held::commit`]), fail them ([`Held::fail`]) or lose them
/// in a crash ([`Held::lose`]).
pub struct Held {
    store: Arc<dyn Store>,
    /// Waiting by tenant, as on the committing thread: a batch takes the
    /// tenants in turn, so the simulator sees writes of different tenants
    /// commit out of their submission order.
    jobs: Arc<Mutex<Lanes<Job>>>,
    /// Writes submitted, or committed blocking, from an answer: with a
    /// committing thread, each could have waited for that thread itself.
    self_waits: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("pending", &self.pending())
            .finish_non_exhaustive()
    }
}

impl Held {
    /// How many writes wait.
    pub fn pending(&self) -> usize {
        lock(&self.jobs).len()
    }

    /// How many writes were submitted, or committed blocking, from an
    /// answer to a commit. On a committing thread, such a write joins the
    /// next batch (or, blocking, is refused), so nothing waits; but the
    /// engine keeps answers to quick hand-offs, and a simulator checks
    /// that this stays 0.
    pub fn self_waits(&self) -> usize {
        self.self_waits.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Commits the next `n` waiting writes, taken tenant by tenant in turn
    /// (each tenant's oldest first), as one batch (fewer if fewer wait),
    /// and answers each, here; returns how many there were. The
    /// answers may submit more writes: they wait for the next batch.
    pub fn commit(&self, n: usize) -> usize {
        let batch = self.take(n);
        let count = batch.len();
        let _answering = Answering::mark(address(&self.jobs));
        apply_batch(self.store.as_ref(), batch, None);
        count
    }

    /// Fails the next `n` waiting writes (as [`Held::commit`] takes them)
    /// as one batch whose transaction
    /// failed: nothing of them is stored, and each answers
    /// [`StoreError::Commit`].
    pub fn fail(&self, n: usize) -> usize {
        let batch = self.take(n);
        let count = batch.len();
        let _answering = Answering::mark(address(&self.jobs));
        for job in batch {
            (job.done)(Err(StoreError::Commit("simulated failure".to_owned())));
        }
        count
    }

    /// Drops every waiting write unanswered, as a crash would.
    pub fn lose(&self) -> usize {
        let lost = std::mem::take(&mut *lock(&self.jobs));
        let count = lost.len();
        drop(lost);
        count
    }

    /// Counts a write submitted or committed from here, if this thread is
    /// answering for these held writes.
    fn count_self_wait(&self) {
        if answering(address(&self.jobs)) {
            self.self_waits
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn take(&self, n: usize) -> Vec<Job> {
        let mut jobs = lock(&self.jobs);
        std::iter::from_fn(|| jobs.pop(|_| 1)).take(n).collect()
    }
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit").finish_non_exhaustive()
    }
}

impl GroupCommit {
    /// Starts the committing thread for `store`.
    pub fn start(store: Arc<dyn Store>) -> std::io::Result<Self> {
        let queue = Arc::new(Queue::default());
        let thread = {
            let queue = Arc::clone(&queue);
            std::thread::Builder::new()
                .name("weft-commit".to_owned())
                .spawn(move || {
                    let _answering = Answering::mark(address(&queue));
                    let _stopped = Stopped(&queue);
                    commit_loop(store.as_ref(), &queue);
                })?
        };
        Ok(Self {
            queue,
            thread: Mutex::new(Some(thread)),
            held: None,
        })
    }

    /// The same group commit, counting each batch's writes and time in
    /// `metrics`.
    pub fn metered(self, metrics: Option<Arc<weft_core::metrics::Metrics>>) -> Self {
        if let Some(metrics) = metrics {
            let _ = self.queue.metrics.set(metrics);
        }
        self
    }

    /// A group commit with no thread: submitted writes wait until the
    /// returned [`Held`] commits them. The blocking [`GroupCommit::commit`]
    /// and [`GroupCommit::commit_all`] commit at once, as a batch of their
    /// own, so a single-threaded caller does not wait for itself.
    pub fn held(store: Arc<dyn Store>) -> (Self, Arc<Held>) {
        let held = Arc::new(Held {
            store,
            jobs: Arc::default(),
            self_waits: std::sync::atomic::AtomicUsize::new(0),
        });
        let door = Self {
            queue: Arc::default(),
            thread: Mutex::new(None),
            held: Some(Arc::clone(&held)),
        };
        (door, held)
    }

    /// The held writes, if this group commit holds them.
    pub fn holding(&self) -> Option<&Arc<Held>> {
        self.held.as_ref()
    }

    /// Queues `write` and returns at once; `done` is called with the
    /// outcome, on the committing thread (or here, with
    /// [`StoreError::Closed`], if that thread has stopped). Blocks only while
    /// its tenant's lane is full, and never on the committing thread itself.
    pub fn submit(&self, write: Write, done: Done) {
        self.submit_as(weft_core::fair::untenanted(), write, done);
    }

    /// [`submit`](Self::submit), as a write of `tenant`, which waits for
    /// its tenant's turn, and, while [`LANE`] writes of its tenant wait,
    /// for room: one tenant's flood holds back its own submitters, not
    /// another tenant's.
    pub fn submit_as(&self, tenant: Arc<str>, write: Write, done: Done) {
        let job = Job {
            write,
            done,
            tenant,
        };
        if let Some(held) = &self.held {
            held.count_self_wait();
            lock(&held.jobs).push(&Arc::clone(&job.tenant), job);
            return;
        }
        let mut waiting = lock(&self.queue.waiting);
        // From an answer, a write never waits for room (only this thread
        // makes room), and is taken even once the queue is closed: the
        // thread commits it before it stops.
        let from_answer = answering(address(&self.queue));
        if !from_answer {
            while !waiting.closed && waiting.lanes.len_of(&job.tenant) >= LANE {
                waiting = self
                    .queue
                    .room
                    .wait(waiting)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        }
        if waiting.closed && !from_answer {
            drop(waiting);
            return (job.done)(Err(StoreError::Closed));
        }
        waiting.lanes.push(&Arc::clone(&job.tenant), job);
        drop(waiting);
        self.queue.filled.notify_one();
    }

    /// Commits `write` and waits until it is durable, or refused. Blocking.
    pub fn commit(&self, write: Write) -> Result<(), StoreError> {
        self.commit_all(vec![write])
            .pop()
            .unwrap_or(Err(StoreError::Closed))
    }

    /// Commits every write (they usually share a transaction) and waits
    /// for all; one answer per write, in order. Blocking; refused on the
    /// committing thread, which would wait for itself.
    pub fn commit_all(&self, writes: Vec<Write>) -> Vec<Result<(), StoreError>> {
        if let Some(held) = &self.held {
            held.count_self_wait();
            let refs: Vec<&Write> = writes.iter().collect();
            return match held.store.apply(&refs) {
                Ok(results) => results
                    .into_iter()
                    .map(|answer| answer.map_err(StoreError::from))
                    .collect(),
                Err(e) => vec![Err(StoreError::Commit(e.to_string())); writes.len()],
            };
        }
        if answering(address(&self.queue)) {
            tracing::error!("a blocking commit from the committing thread was refused");
            let refused = StoreError::Commit(
                "a blocking commit from the committing thread would wait for itself".to_owned(),
            );
            return vec![Err(refused); writes.len()];
        }
        let answers: Vec<_> = writes
            .into_iter()
            .map(|write| {
                let (tell, answer) = sync_channel(1);
                self.submit(
                    write,
                    Box::new(move |outcome| {
                        let _ = tell.send(outcome);
                    }),
                );
                answer
            })
            .collect();
        answers
            .into_iter()
            .map(|answer| answer.recv().unwrap_or(Err(StoreError::Closed)))
            .collect()
    }
}

impl Drop for GroupCommit {
    /// Lets the thread commit what is queued, then joins it (unless this
    /// is that thread, dropping the last owner from a callback).
    fn drop(&mut self) {
        lock(&self.queue.waiting).closed = true;
        self.queue.filled.notify_all();
        self.queue.room.notify_all();
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
    }
}

/// Closes the queue when the committing thread stops, on a panic too: no
/// write is taken any more, and each one waiting (or submitted by these
/// answers) is answered [`StoreError::Closed`], so nobody waits for a
/// thread that is gone.
struct Stopped<'q>(&'q Queue);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        loop {
            let left = {
                let mut waiting = lock(&self.0.waiting);
                waiting.closed = true;
                std::mem::take(&mut waiting.lanes)
            };
            self.0.room.notify_all();
            if left.is_empty() {
                break;
            }
            let mut left = left;
            while let Some(job) = left.pop(|_| 1) {
                (job.done)(Err(StoreError::Closed));
            }
        }
    }
}

fn commit_loop(store: &dyn Store, queue: &Queue) {
    let mut shared_until = Instant::now();
    loop {
        let mut waiting = lock(&queue.waiting);
        while waiting.lanes.is_empty() && !waiting.closed {
            waiting = queue
                .filled
                .wait(waiting)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        if waiting.lanes.is_empty() {
            // Closed, and nothing left to commit.
            break;
        }
        // A host is shared while a tenant with a few writes waits beside
        // another one's: short batches then keep the few from waiting
        // behind the many. Writes without a tenant (fires, deliveries,
        // leases) do not count; nor do tenants that all have many writes
        // waiting, which gain nothing from short batches.
        let lanes = &mut waiting.lanes;
        let untenanted = weft_core::fair::UNTENANTED;
        let tenants = lanes.tenants() - usize::from(lanes.len_of(untenanted) > 0);
        let few = lanes
            .shortest(untenanted)
            .is_some_and(|n| n <= SHARED_BATCH);
        // It stays shared for a while: a lone run's next write comes a
        // step later, and must not find a flood's long batch in its way.
        let now = Instant::now();
        if tenants > 1 && few {
            shared_until = now + SHARED_FOR;
        }
        let most = if now >= shared_until {
            MAX_BATCH
        } else if lanes.longest() <= SHORT_BATCH {
            SHORT_BATCH
        } else {
            SHARED_BATCH
        };
        let batch: Vec<Job> = std::iter::from_fn(|| lanes.pop(|_| 1)).take(most).collect();
        drop(waiting);
        queue.room.notify_all();
        apply_batch(store, batch, queue.metrics.get().map(Arc::as_ref));
    }
}

/// Commits `batch` in one transaction, counting it in `metrics`, and
/// answers each of its writes.
fn apply_batch(store: &dyn Store, batch: Vec<Job>, metrics: Option<&weft_core::metrics::Metrics>) {
    if batch.is_empty() {
        return;
    }
    let writes: Vec<&Write> = batch.iter().map(|job| &job.write).collect();
    let started = Instant::now();
    // A panic in the store's code (a bug) fails this batch as a failed
    // commit would: the transaction was dropped, so nothing of it is
    // durable, and each writer reads its state back. The thread goes on.
    let applied = weft_core::panics::contain("commit", || store.apply(&writes))
        .unwrap_or_else(|panic| Err(StoreError::Commit(format!("the store panicked: {panic}"))));
    if let Some(metrics) = metrics {
        metrics.commit_batch_writes.observe(writes.len() as f64);
        metrics
            .commit_seconds
            .observe(started.elapsed().as_secs_f64());
    }
    match applied {
        Ok(results) => {
            let mut results = results.into_iter();
            for job in batch {
                let result = results.next().map_or(Err(StoreError::Closed), |answer| {
                    answer.map_err(StoreError::from)
                });
                // One writer's panicking answer leaves the others answered.
                let _ = weft_core::panics::contain("commit", || (job.done)(result));
            }
        }
        Err(e) => {
            tracing::error!("a commit of {} writes failed: {e}", batch.len());
            let message = e.to_string();
            for job in batch {
                // Out of space and a database that takes no writes are said
                // as such (`507`, `503` to a client); any other failure is
                // a failed commit, to be read back.
                let failed = Err(match &e {
                    StoreError::NoSpace { .. } | StoreError::Unavailable { .. } => e.clone(),
                    _ => StoreError::Commit(message.clone()),
                });
                let _ = weft_core::panics::contain("commit", || (job.done)(failed));
            }
        }
    }
}
