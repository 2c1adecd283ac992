//! What a hostile tenant's step does to the host, by `op`:
//!
//! - `sleep`: `std::thread::sleep` for `seconds` (a wait in the host's
//!   `wasi:io/poll`, where epoch interruption does not reach).
//! - `kv`: writes `count` distinct keys of `kib` KiB each, going on after
//!   refusals, and says how many were taken.
//! - `emit`: emits `count` messages, each a list of `values` numbers,
//!   going on after refusals.
//! - `output`: returns a list of `values` numbers.
//! - `spin`: computes without end, until its deadline stops it.

use serde_json::{Value, json};
use weft_sdk::{Context, StepError};

fn number(input: &Value, field: &str, default: u64) -> u64 {
    input.get(field).and_then(Value::as_u64).unwrap_or(default)
}

fn hostile(_ctx: &Context, input: Value) -> Result<Value, StepError> {
    match input.get("op").and_then(Value::as_str).unwrap_or("") {
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_secs(number(
                &input, "seconds", 3600,
            )));
            Ok(json!({ "slept": true }))
        }
        "kv" => {
            let value = "v".repeat(number(&input, "kib", 1024) as usize * 1024);
            let mut taken = 0;
            for i in 0..number(&input, "count", 9216) {
                if weft_sdk::kv::set(&format!("key-{i}"), &value).is_ok() {
                    taken += 1;
                }
            }
            Ok(json!({ "taken": taken }))
        }
        "emit" => {
            let payload = Value::Array(vec![json!(0); number(&input, "values", 100_000) as usize]);
            let mut taken = 0;
            for _ in 0..number(&input, "count", 10_000) {
                if weft_sdk::outbox::emit("flood", &payload).is_ok() {
                    taken += 1;
                }
            }
            Ok(json!({ "taken": taken }))
        }
        "output" => Ok(Value::Array(vec![
            json!(0);
            number(&input, "values", 1_000_000)
                as usize
        ])),
        "spin" => {
            let mut x: u64 = 1;
            loop {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
            }
        }
        other => Err(StepError::fatal("unknown_op", format!("no op `{other}`"))),
    }
}

weft_sdk::export_step!(hostile, name = "hostile");
