//! Renders a text template: `{{ name }}` and `{{ customer.email }}` are
//! replaced by values from `vars`, looked up by dotted path.
//!
//! A placeholder with no value fails the step with the fatal code
//! `missing_variable`, naming the placeholder, rather than rendering a blank.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weft_sdk::{Context, StepError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    template: String,
    #[serde(default)]
    vars: Map<String, Value>,
}

#[derive(Serialize)]
struct Output {
    text: String,
}

const INPUT_SCHEMA: &str = r#"{
  "type": "object",
  "required": ["template"],
  "properties": {
    "template": { "type": "string" },
    "vars": { "type": "object" }
  },
  "additionalProperties": false
}"#;

fn render(_ctx: &Context, input: Input) -> Result<Output, StepError> {
    let mut text = String::with_capacity(input.template.len());
    let mut rest = input.template.as_str();
    while let Some(start) = rest.find("{{") {
        text.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| {
            StepError::fatal(
                "unclosed_placeholder",
                format!("placeholder at byte {start} has no closing `}}}}`"),
            )
        })?;
        let path = after[..end].trim();
        let value = lookup(&input.vars, path).ok_or_else(|| {
            StepError::fatal(
                "missing_variable",
                format!("the template uses `{path}`, which is not in vars"),
            )
            .with_details(&serde_json::json!({ "variable": path }))
        })?;
        match value {
            Value::String(s) => text.push_str(s),
            other => text.push_str(&other.to_string()),
        }
        rest = &after[end + 2..];
    }
    text.push_str(rest);
    weft_sdk::log::debug(format!("rendered {} bytes", text.len()));
    Ok(Output { text })
}

fn lookup<'a>(vars: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut value = vars.get(parts.next()?)?;
    for part in parts {
        value = match value {
            Value::Object(map) => map.get(part)?,
            Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

weft_sdk::export_step!(render, name = "template", input_schema = INPUT_SCHEMA);
