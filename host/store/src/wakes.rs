//! What a store tells its hosts as other processes commit: that there is
//! new work of a kind to look at (a run parked, a workflow deployed, a
//! plugin added, a tenant's settings changed). A host that waits for
//! one of these ([`Wakes::wait`]) looks at once instead of at its next
//! poll. A wake is a hint: it may come when nothing changed (after the
//! store reconnects, every kind is woken), and its look reads the store
//! as a poll would; the polls stay, slower, for a wake that is lost.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A kind of news.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A run was parked as free work.
    Parked,
    /// A workflow was deployed or a deployment removed.
    Deployed,
    /// A plugin was added to the registry.
    Plugins,
    /// A tenant, token, quota or secret changed.
    Settings,
}

impl Wake {
    pub(crate) const ALL: [Wake; 4] = [Wake::Parked, Wake::Deployed, Wake::Plugins, Wake::Settings];

    fn index(self) -> usize {
        self as usize
    }

    /// Its name in a notification.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Parked => "parked",
            Self::Deployed => "deployed",
            Self::Plugins => "plugins",
            Self::Settings => "settings",
        }
    }

    /// The kind a notification names.
    pub(crate) fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// Counts of the news of each kind so far, and the waits on them.
#[derive(Debug, Default)]
pub struct Wakes {
    counts: Mutex<[u64; 4]>,
    changed: Condvar,
}

impl Wakes {
    /// How much news of `kind` there has been: what a waiter passes to
    /// [`Wakes::wait`] as what it has seen.
    pub fn seen(&self, kinds: &[Wake]) -> u64 {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        kinds.iter().map(|kind| counts[kind.index()]).sum()
    }

    /// Waits until there is news of one of `kinds` beyond `seen`, or for
    /// `timeout`; returns what is seen now.
    pub fn wait(&self, kinds: &[Wake], seen: u64, timeout: Duration) -> u64 {
        let until = Instant::now() + timeout;
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let now: u64 = kinds.iter().map(|kind| counts[kind.index()]).sum();
            let left = until.saturating_duration_since(Instant::now());
            if now != seen || left.is_zero() {
                return now;
            }
            counts = self
                .changed
                .wait_timeout(counts, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// There is news of `kind`.
    pub fn wake(&self, kind: Wake) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts[kind.index()] += 1;
        self.changed.notify_all();
    }

    /// There may be news of every kind (the news was not heard for a
    /// while).
    pub fn wake_all(&self) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        for count in counts.iter_mut() {
            *count += 1;
        }
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_wait_ends_at_news_of_its_kinds_and_not_of_others() {
        let wakes = Arc::new(Wakes::default());
        let seen = wakes.seen(&[Wake::Parked]);
        wakes.wake(Wake::Deployed);
        let start = Instant::now();
        assert_eq!(
            wakes.wait(&[Wake::Parked], seen, Duration::from_millis(50)),
            seen
        );
        assert!(start.elapsed() >= Duration::from_millis(50));
        let waker = Arc::clone(&wakes);
        let woken = std::thread::spawn(move || {
            waker.wait(
                &[Wake::Parked, Wake::Settings],
                seen,
                Duration::from_secs(30),
            )
        });
        std::thread::sleep(Duration::from_millis(20));
        wakes.wake(Wake::Settings);
        assert_eq!(woken.join().unwrap(), seen + 1);
        wakes.wake_all();
        assert_eq!(wakes.seen(&[Wake::Parked, Wake::Settings]), seen + 3);
    }
}
