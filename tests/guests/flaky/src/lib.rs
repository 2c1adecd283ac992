//! Fails until attempt `succeed_on` (default 3), then returns
//! `{"attempt": n}`. `fail_with` picks how: `retryable` (the default),
//! `fatal`, or `trap`.

use serde_json::{Value, json};
use weft_sdk::{Context, StepError};

#[allow(clippy::panic)]
fn flaky(ctx: &Context, input: Value) -> Result<Value, StepError> {
    let succeed_on = input.get("succeed_on").and_then(Value::as_u64).unwrap_or(3);
    if u64::from(ctx.attempt) >= succeed_on {
        return Ok(json!({ "attempt": ctx.attempt }));
    }
    match input
        .get("fail_with")
        .and_then(Value::as_str)
        .unwrap_or("retryable")
    {
        "fatal" => Err(StepError::fatal(
            "broken",
            format!("attempt {} failed for good", ctx.attempt),
        )),
        "trap" => panic!("attempt {} trapped", ctx.attempt),
        _ => Err(StepError::retryable(
            "unavailable",
            format!("attempt {} failed", ctx.attempt),
        )),
    }
}

weft_sdk::export_step!(flaky, name = "flaky");
