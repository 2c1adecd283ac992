//! Returns its input as its output, and publishes an output-schema that
//! asks for an integer `total`: output without one breaks the contract.

use serde_json::Value;
use weft_sdk::{Context, StepError};

const OUTPUT_SCHEMA: &str = r#"{
  "type": "object",
  "required": ["total"],
  "properties": { "total": { "type": "integer" }, "note": { "type": "string" } }
}"#;

fn shaped(_ctx: &Context, input: Value) -> Result<Value, StepError> {
    Ok(input)
}

weft_sdk::export_step!(shaped, name = "shaped", output_schema = OUTPUT_SCHEMA);
