//! Cron triggers as written: what a workflow's `on: schedule:` (or `weft
//! schedules add`) says. A spec is plain data, kept as written in the
//! trigger's row; weft-model checks and compiles it (`Schedule::compile`)
//! where it is used.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A cron trigger, as written: when it fires, in which time zone, and the
/// input of the run each fire starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// The trigger's name within its workflow; `cron-<n>` (its position,
    /// from 1) when not given. An id: a letter or `_`, then letters,
    /// digits, `_` and `-`, at most 128 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("^[A-Za-z_][A-Za-z0-9_-]{0,127}$"))]
    pub id: Option<String>,
    /// Six fields, seconds first: `sec min hour day-of-month month
    /// day-of-week` (a seventh, the year, is allowed). Example:
    /// `0 30 2 * * *` fires at 02:30:00 every day.
    pub cron: String,
    /// An IANA time zone (`Europe/Berlin`); UTC when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Each fire starts its run up to this much later (`30s`), by an
    /// amount fixed for that fire, so that many triggers do not start at
    /// once. No jitter when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_or_zero")]
    pub jitter: Option<String>,
    /// The started run's input, any JSON value; `null` when not given.
    #[serde(default)]
    pub input: Value,
    /// What a fire does while the trigger's previous run is still running.
    #[serde(default)]
    pub overlap: Overlap,
    /// What happens to fires missed while no host was running.
    #[serde(default)]
    pub catch_up: CatchUp,
    /// For `catch_up: all`: at most this many missed fires are started,
    /// the latest ones (default 100, at most 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000))]
    pub catch_up_limit: Option<u32>,
}

/// The JSON Schema of `jitter`: a duration, or a plain `0`, which YAML
/// reads as the text `0` (a duration too).
fn duration_or_zero(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "anyOf": [{ "type": ["string", "null"] }, { "const": 0 }] })
}

/// What a fire does while the previous run is still running.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// The fire starts nothing.
    #[default]
    Skip,
    /// The fire is kept, one at most, and starts when the previous run
    /// ends.
    BufferOne,
    /// The previous run is cancelled, and the fire starts a new one.
    CancelPrevious,
    /// The fire starts a run anyway.
    Allow,
}

/// What happens to fires missed while no host was running.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Each missed fire starts a run (the latest `catch_up_limit`).
    All,
    /// The latest missed fire starts one run.
    #[default]
    One,
    /// Missed fires start nothing.
    None,
}
