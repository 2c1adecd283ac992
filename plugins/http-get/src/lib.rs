//! `http-get`: GETs `url` (which the workflow must grant, with `allow:
//! {http: [...]}`) and answers `{status, body}`, the body as JSON when it
//! is JSON and as text otherwise. A `5xx` answer is a retryable failure, so
//! the step's retry policy applies; any other status is an answer.
//!
//! ```yaml
//! - id: rate
//!   uses: http-get
//!   with: { url: "https://api.example.com/v1/rates/EUR" }
//!   allow: { http: ["https://api.example.com/v1/"] }
//! ```

use serde::Deserialize;
use serde_json::{Value, json};
use weft_sdk::{Context, StepError};

const INPUT_SCHEMA: &str = r#"{
  "type": "object",
  "required": ["url"],
  "properties": {
    "url": { "type": "string" },
    "headers": { "type": "object", "additionalProperties": { "type": "string" } }
  }
}"#;

const OUTPUT_SCHEMA: &str = r#"{
  "type": "object",
  "required": ["status", "body"],
  "properties": { "status": { "type": "integer" } }
}"#;

#[derive(Deserialize)]
struct Input {
    url: String,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
}

fn get(ctx: &Context, input: Input) -> Result<Value, StepError> {
    let mut request = weft_sdk::http::Request::new("GET", &input.url)
        .header("idempotency-key", &ctx.idempotency_key);
    for (name, value) in &input.headers {
        request = request.header(name, value);
    }
    let answer = request.send()?;
    if answer.status >= 500 {
        return Err(StepError::retryable(
            "http_status",
            format!("{} answered {}", input.url, answer.status),
        ));
    }
    let body = answer
        .json::<Value>()
        .or_else(|_| answer.text().map(|t| json!(t)))
        .unwrap_or(Value::Null);
    Ok(json!({ "status": answer.status, "body": body }))
}

weft_sdk::export_step!(
    get,
    name = "http-get",
    input_schema = INPUT_SCHEMA,
    output_schema = OUTPUT_SCHEMA
);
