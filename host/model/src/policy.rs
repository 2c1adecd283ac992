//! Per-step retry policy.

use std::time::Duration;

use serde::Deserialize;

/// The most attempts a step may declare.
pub const MAX_ATTEMPTS: u32 = 100;

/// How a failed step is tried again.
///
/// An attempt is retried when it failed with a retryable error (a
/// `retryable` step error, a trap, a timeout, a failed instantiation) and,
/// when `retry_on` is given, its code is listed. `fatal` step errors are
/// never retried, nor are memory-limit hits or output that is not JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; 1 means no retry.
    pub max_attempts: u32,
    /// How the delay grows.
    pub backoff: Backoff,
    /// The delay before the second attempt.
    pub initial: Duration,
    /// The longest delay.
    pub max: Duration,
    /// Only these codes are retried, when given.
    pub retry_on: Option<Vec<String>>,
}

impl Default for RetryPolicy {
    /// One attempt: no retries.
    fn default() -> Self {
        Self {
            max_attempts: 1,
            backoff: Backoff::Exponential,
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
            retry_on: None,
        }
    }
}

/// How retry delays grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    /// Every delay is `initial`.
    Fixed,
    /// `initial`, then doubling, up to `max`.
    Exponential,
}

impl RetryPolicy {
    /// Whether an attempt numbered `attempt` (from 1) that failed with
    /// `code` is tried again.
    pub fn retries(&self, attempt: u32, code: &str, retryable: bool) -> bool {
        retryable
            && attempt < self.max_attempts
            && self
                .retry_on
                .as_ref()
                .is_none_or(|codes| codes.iter().any(|c| c == code))
    }

    /// The delay after failed attempt `attempt` (from 1).
    pub fn delay(&self, attempt: u32) -> Duration {
        match self.backoff {
            Backoff::Fixed => self.initial,
            Backoff::Exponential => {
                let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
                self.initial.saturating_mul(factor).min(self.max)
            }
        }
        .min(self.max.max(self.initial))
    }
}

/// `retry:` as written: how a failed attempt is tried again. An attempt
/// is retried when its error is retryable (a `retryable` step error, a
/// trap, a timeout) and, with `retry_on`, its code is listed. A `fatal`
/// step error, a memory-limit hit and output that is not JSON are never
/// retried.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a retry policy such as { max_attempts: 3, initial: 1s }"
)]
#[schemars(rename = "Retry")]
pub(super) struct RawRetry {
    /// Attempts in all, the first included, from 1 to 100; 1 means no
    /// retry. Required.
    #[schemars(range(min = 1, max = MAX_ATTEMPTS))]
    max_attempts: u32,
    /// How the delay between attempts grows: `exponential` (`initial`,
    /// then doubling, up to `max`) or `fixed` (always `initial`).
    /// `exponential` when not given.
    #[serde(default)]
    backoff: Option<Backoff>,
    /// The delay before the second attempt, a duration such as `200ms` or
    /// `1s`; 1s when not given.
    #[serde(default)]
    #[schemars(schema_with = "crate::parse::shapes::duration_or_zero")]
    initial: Option<String>,
    /// The longest delay, a duration such as `5s`, not shorter than
    /// `initial`; 60s when not given.
    #[serde(default)]
    #[schemars(schema_with = "crate::parse::shapes::duration_or_zero")]
    max: Option<String>,
    /// Only errors with these codes are retried (and only when
    /// retryable), such as `[timeout, rate_limited]`; not empty. Every
    /// retryable error when not given.
    #[serde(default)]
    #[schemars(schema_with = "crate::parse::shapes::codes")]
    retry_on: Option<Vec<String>>,
}

impl RawRetry {
    pub(super) fn check(self) -> Result<RetryPolicy, String> {
        if self.max_attempts == 0 || self.max_attempts > MAX_ATTEMPTS {
            return Err(format!(
                "max_attempts must be from 1 to {MAX_ATTEMPTS}, not {}",
                self.max_attempts
            ));
        }
        let defaults = RetryPolicy::default();
        let duration = |field: &str, text: Option<String>, default: Duration| {
            text.map_or(Ok(default), |text| {
                weft_core::clock::parse_duration(&text)
                    .map_err(|message| format!("{field}: {message}"))
            })
        };
        let initial = duration("initial", self.initial, defaults.initial)?;
        let max = duration("max", self.max, defaults.max)?;
        if max < initial {
            return Err(format!(
                "max ({}) is shorter than initial ({})",
                humantime::format_duration(max),
                humantime::format_duration(initial)
            ));
        }
        if let Some(codes) = &self.retry_on
            && codes.is_empty()
        {
            return Err("retry_on is empty, so nothing would be retried; leave it out to retry every retryable error".to_owned());
        }
        Ok(RetryPolicy {
            max_attempts: self.max_attempts,
            backoff: self.backoff.unwrap_or(defaults.backoff),
            initial,
            max,
            retry_on: self.retry_on,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_delays_double_up_to_the_max() {
        let policy = RetryPolicy {
            max_attempts: 10,
            initial: Duration::from_millis(200),
            max: Duration::from_secs(1),
            ..RetryPolicy::default()
        };
        let delays: Vec<_> = (1..=5).map(|a| policy.delay(a).as_millis()).collect();
        assert_eq!(delays, [200, 400, 800, 1000, 1000]);
        let fixed = RetryPolicy {
            backoff: Backoff::Fixed,
            ..policy.clone()
        };
        assert_eq!(fixed.delay(4), Duration::from_millis(200));
        assert_eq!(policy.delay(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn only_retryable_listed_codes_within_the_budget_are_retried() {
        let policy = RetryPolicy {
            max_attempts: 3,
            retry_on: Some(vec!["timeout".to_owned()]),
            ..RetryPolicy::default()
        };
        assert!(policy.retries(1, "timeout", true));
        assert!(policy.retries(2, "timeout", true));
        assert!(!policy.retries(3, "timeout", true), "out of attempts");
        assert!(!policy.retries(1, "trap", true), "not listed");
        assert!(!policy.retries(1, "timeout", false), "fatal");
        assert!(
            !RetryPolicy::default().retries(1, "trap", true),
            "one attempt by default"
        );
    }
}
