//! Time, injected. The engine reads the wall clock only through [`Clock`], so
//! tests can drive it with a clock of their own.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

impl Timestamp {
    /// Reads an RFC 3339 time (`2026-12-01T09:00:00Z`) or a whole number
    /// of milliseconds since the epoch; `Err` says why `text` is neither.
    pub fn parse(text: &str) -> Result<Self, String> {
        let time = match text.trim().parse::<u64>() {
            Ok(millis) => Self(millis),
            Err(_) => humantime::parse_rfc3339_weak(text)
                .map(|time| Self(time.duration_since(UNIX_EPOCH).map_or(0, millis)))
                .map_err(|e| {
                    format!("`{text}` is not a time such as `2026-12-01T09:00:00Z`: {e}")
                })?,
        };
        if time > Self::LAST {
            return Err(format!(
                "`{text}` is after the last time weft takes, {}",
                Self::LAST
            ));
        }
        Ok(time)
    }

    /// The last time weft reads or writes: 9999-12-31T23:59:59.999Z.
    pub const LAST: Timestamp = Timestamp(253_402_300_799_999);
}

impl std::ops::Add<Duration> for Timestamp {
    type Output = Timestamp;

    /// `by` later; the end of time rather than an overflow.
    fn add(self, by: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(millis(by)))
    }
}

/// `duration` in whole milliseconds, saturating.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The longest duration weft reads: 100 years (of 365.25 days). Every
/// duration a user gives passes [`parse_duration`] or [`check_duration`],
/// so a sum of one with a time of this century never overflows.
pub const MAX_DURATION: Duration = Duration::from_secs(36_525 * 86_400);

/// Reads a duration such as `500ms`, `30s`, `2m` or `1h 30m`, at most
/// [`MAX_DURATION`]; `Err` says why `text` is not one.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text)
        .map_err(|e| format!("`{text}` is not a duration such as `500ms`, `30s` or `2m`: {e}"))?;
    check_duration(duration).map_err(|m| format!("`{text}` {m}"))
}

/// `duration` when it is at most [`MAX_DURATION`]; `Err` names the bound.
pub fn check_duration(duration: Duration) -> Result<Duration, String> {
    if duration > MAX_DURATION {
        return Err("is longer than the longest duration weft takes, 100 years".to_owned());
    }
    Ok(duration)
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC, to the millisecond.
    /// A time after [`Timestamp::LAST`] (a saturated sum) is written as
    /// that.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let time = UNIX_EPOCH + std::time::Duration::from_millis(self.0.min(Self::LAST.0));
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
        self.0
            .fetch_add(millis(by), std::sync::atomic::Ordering::SeqCst);
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
        Timestamp(millis(since_epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_from_rfc3339_or_milliseconds() {
        assert_eq!(Timestamp::parse("1000"), Ok(Timestamp(1000)));
        assert_eq!(
            Timestamp::parse("1970-01-01T00:00:01.500Z"),
            Ok(Timestamp(1500))
        );
        let refused = Timestamp::parse("soon").unwrap_err();
        assert!(refused.starts_with("`soon` is not a time"), "{refused}");
    }

    #[test]
    fn adding_a_duration_saturates() {
        assert_eq!(Timestamp(1) + Duration::from_secs(1), Timestamp(1001));
        assert_eq!(
            Timestamp(u64::MAX - 1) + Duration::from_secs(1),
            Timestamp(u64::MAX)
        );
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert!(
            parse_duration("soon")
                .unwrap_err()
                .contains("`soon` is not a duration")
        );
    }

    #[test]
    fn durations_and_times_past_the_bounds_are_refused_by_name() {
        assert_eq!(
            parse_duration("100y"),
            Ok(Duration::from_secs(3_155_760_000))
        );
        let refused = parse_duration("300000000000y").unwrap_err();
        assert!(refused.contains("100 years"), "{refused}");
        let refused = parse_duration("101y").unwrap_err();
        assert!(refused.contains("100 years"), "{refused}");
        let refused = Timestamp::parse("18446744073709551615").unwrap_err();
        assert!(refused.contains("9999-12-31T23:59:59.999Z"), "{refused}");
        assert_eq!(
            Timestamp::parse(&Timestamp::LAST.0.to_string()),
            Ok(Timestamp::LAST)
        );
    }

    #[test]
    fn timestamps_print_as_rfc3339_utc() {
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00.000Z");
        // A saturated sum prints as the last time, not a formatter's error.
        assert_eq!(Timestamp(u64::MAX).to_string(), "9999-12-31T23:59:59.999Z");
        assert_eq!(
            Timestamp(1_700_000_000_123).to_string(),
            "2023-11-14T22:13:20.123Z"
        );
    }
}
