//! Returns its input unchanged: the smallest useful step.

use serde_json::Value;
use weft_sdk::{Context, StepError};

fn echo(_ctx: &Context, input: Value) -> Result<Value, StepError> {
    Ok(input)
}

weft_sdk::export_step!(echo, name = "echo");
