//! Cron triggers: when a workflow starts by itself. A spec
//! ([`ScheduleSpec`], in weft-core) is what a workflow's `on: schedule:` (or
//! `weft schedules add`) says; it is kept as written in the trigger's row
//! and compiled here ([`Schedule::compile`]) where it is used.

use std::str::FromStr;
use std::time::Duration;

use chrono::{LocalResult, TimeZone, Utc};

use weft_core::ScheduleSpec;
use weft_core::clock::Timestamp;

/// The most missed fires `catch_up: all` starts.
pub const MAX_CATCH_UP: u32 = 1_000;

/// A spec, checked and compiled.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// As written.
    pub spec: ScheduleSpec,
    cron: cron::Schedule,
    timezone: chrono_tz::Tz,
    jitter: Duration,
}

/// The first five fields of a cron expression, with the values each takes.
const RANGES: [(&str, u32, u32); 5] = [
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
];

/// Refuses a number outside its field's range in `cron` (`0 0 24 * * *`)
/// with the field and the range, before the cron parser words it its way.
/// Names (`MON`, `JAN`) and the day of week are left to the parser.
fn check_ranges(cron: &str) -> Result<(), String> {
    for (field, (name, low, high)) in cron.split_whitespace().zip(RANGES) {
        for part in field.split(',') {
            // `a-b/step`: the step is a count, not a value of the field.
            let values = part.split('/').next().unwrap_or(part);
            for value in values.split('-') {
                if let Ok(number) = value.parse::<u32>()
                    && !(low..=high).contains(&number)
                {
                    return Err(format!(
                        "cron: the {name} `{number}` is not from {low} to {high} (in `{cron}`)"
                    ));
                }
            }
        }
    }
    Ok(())
}

impl Schedule {
    /// Checks and compiles `spec`; the error names the field.
    pub fn compile(spec: &ScheduleSpec) -> Result<Self, String> {
        let fields = spec.cron.split_whitespace().count();
        if !(6..=7).contains(&fields) {
            return Err(format!(
                "cron: `{}` has {fields} fields; weft's cron has six, seconds first \
                 (`0 */5 * * * *` is every five minutes)",
                spec.cron
            ));
        }
        check_ranges(&spec.cron)?;
        let cron = cron::Schedule::from_str(&spec.cron)
            .map_err(|e| format!("cron: `{}` is not a cron expression: {e}", spec.cron))?;
        let timezone = match &spec.timezone {
            None => chrono_tz::UTC,
            Some(name) => name.parse::<chrono_tz::Tz>().map_err(|_| {
                format!("timezone: `{name}` is not an IANA time zone such as `Europe/Berlin`")
            })?,
        };
        let jitter = match &spec.jitter {
            None => Duration::ZERO,
            Some(text) => weft_core::clock::parse_duration(text)
                .map_err(|message| format!("jitter: {message}"))?,
        };
        if let Some(id) = &spec.id {
            crate::check_id(id).map_err(|m| format!("id: {m}"))?;
        }
        if let Some(limit) = spec.catch_up_limit
            && !(1..=MAX_CATCH_UP).contains(&limit)
        {
            return Err(format!(
                "catch_up_limit: must be from 1 to {MAX_CATCH_UP}, not {limit}"
            ));
        }
        if cron.upcoming(timezone).next().is_none() {
            return Err(format!("cron: `{}` never fires again", spec.cron));
        }
        Ok(Self {
            spec: spec.clone(),
            cron,
            timezone,
            jitter,
        })
    }

    /// The first fire strictly after `after`, or `None` if there is none.
    ///
    /// Fire times are wall-clock times in the trigger's time zone. Across
    /// a daylight-saving change, a time that does not exist (the clocks
    /// jump over it) does not fire that day, and a time that happens twice
    /// (the clocks go back) fires once, the first time.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let millis = i64::try_from(after.as_millis()).ok()?;
        let start = Utc
            .timestamp_millis_opt(millis)
            .single()?
            .with_timezone(&self.timezone);
        self.cron
            .after(&start)
            .find(
                |candidate| match self.timezone.from_local_datetime(&candidate.naive_local()) {
                    LocalResult::Ambiguous(first, _) => first == *candidate,
                    _ => true,
                },
            )
            .and_then(|next| u64::try_from(next.timestamp_millis()).ok())
            .map(Timestamp)
    }

    /// How long after its due time the fire due at `due` starts: fixed
    /// for that fire (so a restart agrees), below the jitter.
    pub fn jitter_for(&self, key: &str, due: Timestamp) -> Duration {
        let jitter = weft_core::clock::millis(self.jitter);
        if jitter == 0 {
            return Duration::ZERO;
        }
        // FNV-1a over the trigger and the fire time.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in key.bytes().chain(due.as_millis().to_le_bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        Duration::from_millis(hash % jitter)
    }

    /// The most missed fires `catch_up: all` starts.
    pub fn catch_up_limit(&self) -> u32 {
        self.spec.catch_up_limit.unwrap_or(100)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use weft_core::{CatchUp, Overlap};

    use super::*;

    fn at(text: &str) -> Timestamp {
        let time = humantime::parse_rfc3339(text).unwrap();
        Timestamp(
            u64::try_from(
                time.duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis(),
            )
            .unwrap(),
        )
    }

    fn written(cron: &str, timezone: Option<&str>) -> ScheduleSpec {
        ScheduleSpec {
            id: None,
            cron: cron.to_owned(),
            timezone: timezone.map(str::to_owned),
            jitter: None,
            input: Value::Null,
            overlap: Overlap::default(),
            catch_up: CatchUp::default(),
            catch_up_limit: None,
        }
    }

    fn spec(cron: &str, timezone: Option<&str>) -> Schedule {
        Schedule::compile(&written(cron, timezone)).unwrap()
    }

    #[test]
    fn a_value_outside_its_field_names_the_field_and_range() {
        let refused = |cron: &str| Schedule::compile(&written(cron, None)).err().unwrap();
        assert_eq!(
            refused("0 0 24 * * *"),
            "cron: the hour `24` is not from 0 to 23 (in `0 0 24 * * *`)"
        );
        assert!(refused("0 60 * * * *").contains("the minute `60` is not from 0 to 59"));
        assert!(refused("0 0 0 0 * *").contains("the day of month `0` is not from 1 to 31"));
        assert!(refused("0 0 0 1 1-13 *").contains("the month `13`"));
        // Steps are counts, and names are the parser's.
        assert!(Schedule::compile(&written("0 10-50/15 * * * *", None)).is_ok());
        assert!(Schedule::compile(&written("0 0 9 * JAN-MAR MON-FRI", None)).is_ok());
    }

    #[test]
    fn fires_follow_the_seconds_field() {
        let every_5s = spec("*/5 * * * * *", None);
        assert_eq!(
            every_5s.next_after(at("2026-11-30T10:00:03Z")),
            Some(at("2026-11-30T10:00:05Z"))
        );
        assert_eq!(
            every_5s.next_after(at("2026-11-30T10:00:05Z")),
            Some(at("2026-11-30T10:00:10Z"))
        );
    }

    #[test]
    fn a_skipped_wall_time_does_not_fire_and_a_repeated_one_fires_once() {
        // Europe/Berlin: 2026-03-29 02:00 CET jumps to 03:00 CEST; 2026-10-25
        // 03:00 CEST goes back to 02:00 CET.
        let daily = spec("0 30 2 * * *", Some("Europe/Berlin"));
        assert_eq!(
            daily.next_after(at("2026-03-28T12:00:00Z")),
            Some(at("2026-03-30T00:30:00Z")),
            "02:30 does not exist on March 29"
        );
        let first = daily.next_after(at("2026-10-24T12:00:00Z")).unwrap();
        assert_eq!(first, at("2026-10-25T00:30:00Z"), "02:30 CEST");
        assert_eq!(
            daily.next_after(first),
            Some(at("2026-10-26T01:30:00Z")),
            "not again at 02:30 CET"
        );
        // An hourly trigger fires on each wall-clock hour once, the
        // repeated 02:00 included: 01:00 to 22:00 local, 22 fires.
        let hourly = spec("0 0 * * * *", Some("Europe/Berlin"));
        let mut t = at("2026-10-24T22:00:00Z");
        let mut fires = Vec::new();
        while let Some(next) = hourly.next_after(t) {
            if next >= at("2026-10-25T22:00:00Z") {
                break;
            }
            fires.push(next);
            t = next;
        }
        assert_eq!(fires.len(), 22);
        assert!(fires.contains(&at("2026-10-25T00:00:00Z")), "02:00 CEST");
        assert!(!fires.contains(&at("2026-10-25T01:00:00Z")), "02:00 CET");
    }

    #[test]
    fn bad_specs_name_their_field() {
        let bad = |cron: &str, timezone: Option<&str>| {
            Schedule::compile(&written(cron, timezone)).unwrap_err()
        };
        assert!(bad("*/5 * * * *", None).starts_with("cron: `*/5 * * * *` has 5 fields"));
        assert!(bad("0 0 25 * * *", None).starts_with("cron:"));
        assert!(bad("0 0 * * * *", Some("Mars/Olympus")).starts_with("timezone:"));
    }

    #[test]
    fn jitter_is_fixed_per_fire_and_below_its_bound() {
        let mut schedule = spec("* * * * * *", None);
        schedule.jitter = Duration::from_secs(10);
        let due = at("2026-11-30T10:00:00Z");
        let a = schedule.jitter_for("wf/t", due);
        assert_eq!(a, schedule.jitter_for("wf/t", due));
        assert!(a < Duration::from_secs(10));
        let spread: std::collections::HashSet<_> = (0..50)
            .map(|i| schedule.jitter_for("wf/t", Timestamp(due.as_millis() + i * 1000)))
            .collect();
        assert!(spread.len() > 10, "{spread:?}");
    }
}
