//! A workflow's or plugin's input contract: a compiled JSON Schema.

use serde_json::Value;

/// A compiled JSON Schema for a workflow's input.
pub struct InputSchema {
    schema: Value,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for InputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputSchema")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl InputSchema {
    /// Compiles `schema`; `Err` holds the reason it is not a usable schema.
    pub fn compile(schema: Value) -> Result<Self, String> {
        let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string())?;
        Ok(Self { schema, validator })
    }

    /// The schema as written.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Checks `input`; `Err` lists every problem, each with the JSON Pointer of
    /// the offending value (`/order/items/0`, or `/` for the whole input).
    pub fn check(&self, input: &Value) -> Result<(), Vec<String>> {
        let problems: Vec<String> = self
            .validator
            .iter_errors(input)
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_owned() } else { at };
                format!("at {at}: {e}")
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}
