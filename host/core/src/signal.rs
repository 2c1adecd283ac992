//! A counter that threads wait on, and the poison-tolerant lock every
//! shared table uses.

use std::sync::{
    Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use std::time::Duration;

/// Locks `mutex`, taking it over if a thread panicked while holding it: the
/// data behind weft's locks stays consistent between statements, so a
/// panic elsewhere does not make it unusable.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads `lock` the way [`lock`] locks a mutex: a panic elsewhere does not
/// make the data unusable.
pub fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// Writes `lock` the way [`lock`] locks a mutex.
pub fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// A counter that threads wait on: bumped when there is news (messages
/// committed, deliveries acked).
#[derive(Debug, Default)]
pub struct Signal {
    generation: Mutex<u64>,
    wake: Condvar,
}

impl Signal {
    /// Tells every waiter.
    pub fn bump(&self) {
        let mut generation = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *generation = generation.wrapping_add(1);
        drop(generation);
        self.wake.notify_all();
    }

    /// The current generation.
    pub fn current(&self) -> u64 {
        *self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the generation is not `seen`, or `timeout` passes;
    /// returns the generation then.
    pub fn wait_past(&self, seen: u64, timeout: Duration) -> u64 {
        let generation = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (generation, _) = self
            .wake
            .wait_timeout_while(generation, timeout, |g| *g == seen)
            .unwrap_or_else(PoisonError::into_inner);
        *generation
    }
}
