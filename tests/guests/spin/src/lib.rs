//! Loops forever. Only the host's epoch deadline can stop it.

use serde_json::Value;
use weft_sdk::{Context, StepError};

fn spin(_ctx: &Context, _input: Value) -> Result<Value, StepError> {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

weft_sdk::export_step!(spin, name = "spin");
