//! Panics on purpose. A panic in a Rust guest aborts with `unreachable`; the
//! host must record a trap with the panic message, and keep running.

use serde_json::Value;
use weft_sdk::{Context, StepError};

#[allow(clippy::panic)]
fn trap(_ctx: &Context, _input: Value) -> Result<Value, StepError> {
    panic!("boom: this guest panics on purpose");
}

weft_sdk::export_step!(trap, name = "trap");
