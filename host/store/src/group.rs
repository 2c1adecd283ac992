//! Group commit: one thread turns every write that is waiting into one
//! transaction and one sync, then answers each writer.
//!
//! A writer hands over its write with a callback that the committing thread
//! calls once the batch is synced ([`GroupCommit::submit`]). While one batch syncs, the next one
//! fills up, so throughput grows with the number of writers instead of being
//! held to one sync per write.

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
        })
    }

    /// Queues `write` and returns at once; `done` is called with the
    /// outcome, on the committing thread (or here, with
    /// [`StoreError::Closed`], if that thread has stopped). Blocks only while
    /// the queue is full.
    pub fn submit(&self, write: Write, done: Done) {
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
        let writes: Vec<&Write> = batch.iter().map(|job| &job.write).collect();
        match store.apply(&writes) {
            Ok(results) => {
                let mut results = results.into_iter();
                for job in batch.drain(..) {
                    let result = results.next().unwrap_or(Err(StoreError::Closed));
                    (job.done)(result);
                }
            }
            Err(e) => {
                tracing::error!("a commit of {} writes failed: {e}", batch.len());
                let message = e.to_string();
                for job in batch.drain(..) {
                    (job.done)(Err(StoreError::Commit(message.clone())));
                }
            }
        }
    }
}
