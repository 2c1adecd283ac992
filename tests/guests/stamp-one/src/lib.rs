//! `stamp` version 1.0.0: answers `{"stamp": 1}`, so a test can tell which
//! version of a plugin a step ran.

use serde_json::{Value, json};
use weft_sdk::{Context, StepError};

fn stamp(_ctx: &Context, _input: Value) -> Result<Value, StepError> {
    Ok(json!({ "stamp": 1 }))
}

weft_sdk::export_step!(stamp, name = "stamp", version = "1.0.0");
