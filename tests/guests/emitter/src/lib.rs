//! Emits `count` messages `{"n": i, "run": ...}` on `channel`, in order;
//! with `fail`, fails after emitting (so nothing may be committed).

use serde::Deserialize;
use serde_json::{Value, json};
use weft_sdk::{Context, StepError};

#[derive(Deserialize)]
struct Input {
    channel: String,
    count: u32,
    #[serde(default)]
    fail: bool,
}

fn emit(ctx: &Context, input: Input) -> Result<Value, StepError> {
    let mut ids = Vec::new();
    for n in 0..input.count {
        let id = weft_sdk::outbox::emit(&input.channel, &json!({ "n": n, "run": ctx.run_id }))
            .map_err(|e| StepError::fatal("emit", e))?;
        ids.push(id);
    }
    if input.fail {
        return Err(StepError::retryable(
            "asked_to_fail",
            "failing after emitting",
        ));
    }
    Ok(json!({ "emitted": ids.len(), "first": ids.first(), "last": ids.last() }))
}

weft_sdk::export_step!(emit, name = "emitter");
