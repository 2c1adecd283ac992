//! Adds `by` (default 1) to the counter `key` in the workflow's key-value
//! space and returns its new value. `by: 0` reads it.
//!
//! The write commits with the step's result: if the step fails afterwards
//! (`fail: true` makes it fail on purpose), or the host dies before the
//! commit, the counter is unchanged, and a retried step adds once. Runs that
//! count at the same moment are serialised by the host: each adds once.
//!
//! With `ttl` (seconds), the counter expires that long after the write: it
//! then reads as absent, so the next count starts from 0 (a rate window).

use serde::{Deserialize, Serialize};
use weft_sdk::{Context, StepError, kv};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    key: String,
    #[serde(default = "one")]
    by: i64,
    #[serde(default)]
    fail: bool,
    #[serde(default)]
    ttl: Option<f64>,
}

fn one() -> i64 {
    1
}

#[derive(Serialize)]
struct Output {
    key: String,
    value: i64,
}

fn count(_ctx: &Context, input: Input) -> Result<Output, StepError> {
    let current = match kv::get(&input.key) {
        None => 0,
        Some(text) => text.parse::<i64>().map_err(|e| {
            StepError::fatal(
                "not_a_counter",
                format!("`{}` holds `{text}`: {e}", input.key),
            )
        })?,
    };
    let value = current
        .checked_add(input.by)
        .ok_or_else(|| StepError::fatal("overflow", format!("`{}` would overflow", input.key)))?;
    if input.by != 0 {
        let written = match input.ttl {
            Some(seconds) if seconds.is_finite() && seconds > 0.0 => kv::set_with_ttl(
                &input.key,
                &value.to_string(),
                std::time::Duration::from_secs_f64(seconds),
            ),
            Some(seconds) => {
                return Err(StepError::fatal(
                    "invalid_input",
                    format!("ttl: {seconds} is not a number of seconds above 0"),
                ));
            }
            None => kv::set(&input.key, &value.to_string()),
        };
        written.map_err(|e| StepError::fatal("kv", e))?;
    }
    if input.fail {
        return Err(StepError::fatal(
            "asked_to_fail",
            "failing after the write, on purpose",
        ));
    }
    Ok(Output {
        key: input.key,
        value,
    })
}

weft_sdk::export_step!(count, name = "counter");
