//! Group commit: one thread turns every write that is waiting into one
//! transaction and one sync, then answers each writer.
//!
//! A writer calls [`GroupCommit::commit`] and blocks until its write is
//! durable. While the committing thread syncs one batch, the next one fills
//! up, so throughput grows with the number of writers instead of being held
//! to one sync per write.

use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use super::{Store, StoreError, Write};

/// The most writes in one transaction.
const MAX_BATCH: usize = 4096;

struct Job {
    write: Write,
    done: SyncSender<Result<(), StoreError>>,
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

    /// Commits `write` with whatever else is waiting, and blocks until it is
    /// durable (`Ok`) or refused. A refused write changed nothing; a failed
    /// batch changed nothing for any of its writes.
    pub fn commit(&self, write: Write) -> Result<(), StoreError> {
        let (done, answer) = sync_channel(1);
        let jobs = self
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(StoreError::Closed)?;
        jobs.send(Job { write, done })
            .map_err(|_| StoreError::Closed)?;
        answer.recv().map_err(|_| StoreError::Closed)?
    }
}

impl Drop for GroupCommit {
    /// Lets the thread commit what is queued, then joins it.
    fn drop(&mut self) {
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
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
                for (job, result) in batch.drain(..).zip(results) {
                    let _ = job.done.send(result);
                }
            }
            Err(e) => {
                tracing::error!("a commit of {} writes failed: {e}", batch.len());
                let message = e.to_string();
                for job in batch.drain(..) {
                    let _ = job.done.send(Err(StoreError::Commit(message.clone())));
                }
            }
        }
    }
}
