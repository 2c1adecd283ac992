//! Reshapes a JSON document: each output field is selected from `data` by a
//! JSON Pointer (RFC 6901), with an optional default when it is absent.
//!
//! ```yaml
//! with:
//!   data: "${{ steps.fetch.output }}"
//!   select: { city: /address/city, first_item: /items/0/sku }
//!   defaults: { city: unknown }
//! ```
//!
//! A pointer that matches nothing and has no default fails the step with the
//! fatal code `missing_field`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};
use weft_sdk::{Context, StepError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    data: Value,
    select: BTreeMap<String, String>,
    #[serde(default)]
    defaults: Map<String, Value>,
}

fn transform(_ctx: &Context, input: Input) -> Result<Value, StepError> {
    let mut output = Map::new();
    for (field, pointer) in &input.select {
        if !pointer.is_empty() && !pointer.starts_with('/') {
            return Err(StepError::fatal(
                "invalid_pointer",
                format!("`{field}`: `{pointer}` is not a JSON Pointer (it must start with `/`)"),
            ));
        }
        let value = match input.data.pointer(pointer) {
            Some(value) => value.clone(),
            None => input.defaults.get(field).cloned().ok_or_else(|| {
                StepError::fatal(
                    "missing_field",
                    format!("`{field}`: nothing at `{pointer}` and no default"),
                )
            })?,
        };
        output.insert(field.clone(), value);
    }
    Ok(Value::Object(output))
}

weft_sdk::export_step!(transform, name = "transform");
