//! Cron triggers as written: what a workflow's `on: schedule:` (or `weft
//! schedules add`) says. A spec is plain data, kept as written in the
//! trigger's row; weft-model checks and compiles it (`Schedule::compile`)
//! where it is used.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A cron trigger, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// The trigger's name within its workflow; `cron-<n>` (its position,
    /// from 1) when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Six fields, seconds first: `sec min hour day-of-month month
    /// day-of-week` (a seventh, the year, is allowed).
    pub cron: String,
    /// An IANA time zone (`Europe/Berlin`); UTC when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Each fire starts its run up to this much later (`30s`), by an
    /// amount fixed for that fire, so that many triggers do not start at
    /// once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    /// The started run's input.
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
    pub catch_up_limit: Option<u32>,
}

/// What a fire does while the previous run is still running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
