//! Fails on purpose, in the way its input's `mode` asks:
//! - `panic` (the default): a Rust panic, which aborts with `unreachable`;
//! - `stack`: unbounded recursion in wasm locals, until wasmtime's wasm
//!   stack limit stops it;
//! - `shadow`: unbounded recursion with a buffer on Rust's stack in linear
//!   memory, until that stack runs off the start of memory;
//! - `exit`: `std::process::exit(3)`, through `wasi:cli/exit`;
//! - `divide`: an integer division by zero, which Rust checks: a panic.
//!
//! The host must record each as a trap that says what happened, and keep
//! running.

use serde_json::Value;
use weft_sdk::{Context, StepError};

#[allow(clippy::panic)]
fn trap(_ctx: &Context, input: Value) -> Result<Value, StepError> {
    match input.get("mode").and_then(Value::as_str).unwrap_or("panic") {
        "stack" => Ok(Value::from(deep(std::hint::black_box(u64::MAX)))),
        "shadow" => Ok(Value::from(recurse(std::hint::black_box(1)))),
        "exit" => std::process::exit(3),
        "divide" => {
            let zero = std::hint::black_box(0i32);
            Ok(Value::from(std::hint::black_box(7i32).wrapping_div(zero)))
        }
        _ => panic!("boom: this guest panics on purpose"),
    }
}

fn deep(n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        deep(std::hint::black_box(n - 1)).wrapping_add(std::hint::black_box(n))
    }
}

#[allow(unconditional_recursion)]
fn recurse(n: u64) -> u64 {
    let mut pad = [n; 64];
    pad[(n % 64) as usize] = recurse(std::hint::black_box(n + 1));
    std::hint::black_box(pad).iter().sum()
}

weft_sdk::export_step!(trap, name = "trap");
