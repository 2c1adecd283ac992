//! Group commit: one thread turns every write that is waiting into one
//! transaction and one sync, then answers each writer.
//!
//! A writer hands over its write with a callback that the committing thread
//! calls once the batch is synced ([`GroupCommit::submit`]). While one batch syncs, the next one
//! fills up, so throughput grows with the number of writers instead of being
//! held to one sync per write.
//!
//! A simulation holds the writes instead ([`GroupCommit::held`]): nothing
//! commits until the simulator says which writes make the next batch, and
//! whether that batch fails.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use weft_core::lock;

use super::{Store, StoreError, Write};

/// The most writes in one transaction.
const MAX_BATCH: usize = 4096;

/// What the committing thread calls with the outcome of a write: `Ok` once
/// it is durable. It runs on the committing thread, so it must be quick.
pub type Done = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

struct Job {
    write: Write,
    done: Done,
}

/// The committing thread of one store.
pub struct GroupCommit {
    jobs: Mutex<Option<SyncSender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Set when writes are held for a simulator instead.
    held: Option<Arc<Held>>,
}

/// Writes submitted to a held group commit, waiting for the simulator to
/// commit them ([`Held::commit`]), fail them ([`Held::fail`]) or lose them
/// in a crash ([`Held::lose`]).
pub struct Held {
    store: Arc<dyn Store>,
    jobs: Mutex<VecDeque<Job>>,
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

    /// Commits the `n` oldest waiting writes as one batch (fewer if fewer
    /// wait), and answers each, here; returns how many there were. The
    /// answers may submit more writes: they wait for the next batch.
    pub fn commit(&self, n: usize) -> usize {
        let batch = self.take(n);
        let count = batch.len();
        apply_batch(self.store.as_ref(), batch);
        count
    }

    /// Fails the `n` oldest waiting writes as one batch whose transaction
    /// failed: nothing of them is stored, and each answers
    /// [`StoreError::Commit`].
    pub fn fail(&self, n: usize) -> usize {
        let batch = self.take(n);
        let count = batch.len();
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

    fn take(&self, n: usize) -> Vec<Job> {
        let mut jobs = lock(&self.jobs);
        let n = n.min(jobs.len());
        jobs.drain(..n).collect()
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
        let (jobs, queue) = sync_channel::<Job>(MAX_BATCH);
        let thread = std::thread::Builder::new()
            .name("weft-commit".to_owned())
            .spawn(move || commit_loop(store.as_ref(), &queue))?;
        Ok(Self {
            jobs: Mutex::new(Some(jobs)),
            thread: Mutex::new(Some(thread)),
            held: None,
        })
    }

    /// A group commit with no thread: submitted writes wait until the
    /// returned [`Held`] commits them. The blocking [`GroupCommit::commit`]
    /// and [`GroupCommit::commit_all`] commit at once, as a batch of their
    /// own, so a single-threaded caller does not wait for itself.
    pub fn held(store: Arc<dyn Store>) -> (Self, Arc<Held>) {
        let held = Arc::new(Held {
            store,
            jobs: Mutex::new(VecDeque::new()),
        });
        let door = Self {
            jobs: Mutex::new(None),
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
    /// the queue is full.
    pub fn submit(&self, write: Write, done: Done) {
        if let Some(held) = &self.held {
            lock(&held.jobs).push_back(Job { write, done });
            return;
        }
        let jobs = lock(&self.jobs).clone();
        let Some(jobs) = jobs else {
            return done(Err(StoreError::Closed));
        };
        if let Err(refused) = jobs.send(Job { write, done }) {
            (refused.0.done)(Err(StoreError::Closed));
        }
    }

    /// Commits `write` and waits until it is durable, or refused. Blocking.
    pub fn commit(&self, write: Write) -> Result<(), StoreError> {
        self.commit_all(vec![write])
            .pop()
            .unwrap_or(Err(StoreError::Closed))
    }

    /// Commits every write (they usually share a transaction) and waits
    /// for all; one answer per write, in order. Blocking.
    pub fn commit_all(&self, writes: Vec<Write>) -> Vec<Result<(), StoreError>> {
        if let Some(held) = &self.held {
            let refs: Vec<&Write> = writes.iter().collect();
            return match held.store.apply(&refs) {
                Ok(results) => results,
                Err(e) => vec![Err(StoreError::Commit(e.to_string())); writes.len()],
            };
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
        lock(&self.jobs).take();
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
    }
}

fn commit_loop(store: &dyn Store, queue: &Receiver<Job>) {
    let mut batch: Vec<Job> = Vec::new();
    while let Ok(first) = queue.recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        apply_batch(store, std::mem::take(&mut batch));
    }
}

/// Commits `batch` in one transaction and answers each of its writes.
fn apply_batch(store: &dyn Store, batch: Vec<Job>) {
    if batch.is_empty() {
        return;
    }
    let writes: Vec<&Write> = batch.iter().map(|job| &job.write).collect();
    match store.apply(&writes) {
        Ok(results) => {
            let mut results = results.into_iter();
            for job in batch {
                let result = results.next().unwrap_or(Err(StoreError::Closed));
                (job.done)(result);
            }
        }
        Err(e) => {
            tracing::error!("a commit of {} writes failed: {e}", batch.len());
            let message = e.to_string();
            for job in batch {
                (job.done)(Err(StoreError::Commit(message.clone())));
            }
        }
    }
}
