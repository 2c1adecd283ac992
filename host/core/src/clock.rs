//! Time, injected. The engine reads the wall clock only through [`Clock`], so
//! tests can drive it with a clock of their own.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A point in time: milliseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// Milliseconds since the Unix epoch.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// Milliseconds from `earlier` to `self`, or 0 if `earlier` is later.
    pub fn millis_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC, to the millisecond.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let time = UNIX_EPOCH + std::time::Duration::from_millis(self.0);
        write!(f, "{}", humantime::format_rfc3339_millis(time))
    }
}

/// The source of wall-clock time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time. Never blocks.
    fn now(&self) -> Timestamp;

    /// How long to really wait for `millis` of this clock to pass, before
    /// looking again. The system clock: that long; a simulated clock: a
    /// moment, as it moves when its test says so.
    fn real_wait(&self, millis: u64) -> std::time::Duration {
        std::time::Duration::from_millis(millis)
    }
}

/// A clock that moves only when told to: for tests, which must not sleep
/// for real durations.
#[derive(Debug, Default)]
pub struct SimClock(std::sync::atomic::AtomicU64);

impl SimClock {
    /// A clock that reads `start`.
    pub fn new(start: Timestamp) -> Self {
        Self(std::sync::atomic::AtomicU64::new(start.0))
    }

    /// Moves the clock `by` forward.
    pub fn advance(&self, by: std::time::Duration) {
        let millis = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.0
            .fetch_add(millis, std::sync::atomic::Ordering::SeqCst);
    }

    /// Sets the clock to `to` (it may go back, as a wall clock can).
    pub fn set(&self, to: Timestamp) {
        self.0.store(to.0, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(std::sync::atomic::Ordering::SeqCst))
    }

    fn real_wait(&self, _millis: u64) -> std::time::Duration {
        std::time::Duration::from_millis(1)
    }
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_print_as_rfc3339_utc() {
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Timestamp(1_700_000_000_123).to_string(),
            "2023-11-14T22:13:20.123Z"
        );
    }
}
