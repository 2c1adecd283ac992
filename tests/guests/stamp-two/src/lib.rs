//! `stamp` version 2.0.0: answers `{"stamp": 2}`, so a test can tell which
//! version of a plugin a step ran.

use serde_json::{Value, json};
use weft_sdk::{Context, StepError};

fn stamp(_ctx: &Context, _input: Value) -> Result<Value, StepError> {
    Ok(json!({ "stamp": 2 }))
}

weft_sdk::export_step!(stamp, name = "stamp", version = "2.0.0");
