//! Spins: forever by default, only the host's epoch deadline can stop it;
//! or, with `{"ms": N}`, for N milliseconds of wall-clock time and then
//! returns `{"spun_ms": N}`.

use serde_json::{Value, json};
use weft_sdk::{Context, StepError};

fn spin(_ctx: &Context, input: Value) -> Result<Value, StepError> {
    let limit = input.get("ms").and_then(Value::as_u64);
    let started = std::time::Instant::now();
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
        if let Some(ms) = limit
            && n.is_multiple_of(1024)
            && started.elapsed().as_millis() >= u128::from(ms)
        {
            return Ok(json!({ "spun_ms": ms }));
        }
    }
}

weft_sdk::export_step!(spin, name = "spin");
