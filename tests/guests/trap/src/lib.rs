//! Fails on purpose, in the way its input's `mode` asks:
//! - `panic` (the default): a Rust panic, which aborts with `unreachable`;
//! - `stack`: unbounded recursion, until the wasm stack is exhausted;
//! - `exit`: `std::process::exit(3)`, through `wasi:cli/exit`;
//! - `divide`: an integer division by zero.
//!
//! The host must record each as a trap that says what happened, and keep
//! running.

use serde_json::Value;
use weft_sdk::{Context, StepError};

#[allow(clippy::panic)]
fn trap(_ctx: &Context, input: Value) -> Result<Value, StepError> {
    match input.get("mode").and_then(Value::as_str).unwrap_or("panic") {
        "stack" => Ok(Value::from(recurse(std::hint::black_box(1)))),
        "exit" => std::process::exit(3),
        "divide" => {
            let zero = std::hint::black_box(0i32);
            Ok(Value::from(std::hint::black_box(7i32).wrapping_div(zero)))
        }
        _ => panic!("boom: this guest panics on purpose"),
    }
}

#[allow(unconditional_recursion)]
fn recurse(n: u64) -> u64 {
    let mut pad = [n; 64];
    pad[(n % 64) as usize] = recurse(std::hint::black_box(n + 1));
    std::hint::black_box(pad).iter().sum()
}

weft_sdk::export_step!(trap, name = "trap");
