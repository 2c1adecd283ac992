//! `behave-rs`: the behaviour test's step in Rust (see
//! `tests/behaviour/README.md`), the same as in every other language.

use serde::Deserialize;
use serde_json::{Value, json};
use weft_sdk::{Context, StepError};

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Input {
    Count,
    Emit { channel: String },
    Fetch { url: String },
    Secret { name: String },
}

fn behave(ctx: &Context, input: Input) -> Result<Value, StepError> {
    match input {
        Input::Count => {
            let count = weft_sdk::kv::get("count")
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
                + 1;
            weft_sdk::kv::set("count", &count.to_string())
                .map_err(|e| StepError::fatal("kv", e))?;
            Ok(json!({ "count": count }))
        }
        Input::Emit { channel } => {
            let id =
                weft_sdk::outbox::emit(&channel, &json!({ "from": "rust", "run": ctx.run_id }))
                    .map_err(|e| StepError::fatal("emit", e))?;
            Ok(json!({ "id": id }))
        }
        Input::Fetch { url } => {
            let answer = weft_sdk::http::get(&url)?;
            Ok(json!({ "status": answer.status, "body": answer.text()? }))
        }
        Input::Secret { name } => {
            let value = weft_sdk::secrets::get(&name).map_err(|e| StepError::fatal("secret", e))?;
            weft_sdk::log::info(format!("the secret is {value}"));
            Ok(json!({ "length": value.len() }))
        }
    }
}

weft_sdk::export_step!(behave, name = "behave-rs");
