//! `{{name}}`: a weft step. Build it with `weft plugin build`, test it
//! with `cargo test`.

use serde::{Deserialize, Serialize};
use weft_sdk::{Context, StepError};

#[derive(Debug, Deserialize)]
struct Input {
    name: String,
}

#[derive(Debug, PartialEq, Serialize)]
struct Output {
    greeting: String,
    /// How many greetings this workflow has given, kept in its durable
    /// key-value space.
    greetings: u64,
}

fn greeting(name: &str) -> Result<String, StepError> {
    if name.trim().is_empty() {
        return Err(StepError::fatal("empty_name", "name must not be empty"));
    }
    Ok(format!("Hello, {name}!"))
}

fn run(_ctx: &Context, input: Input) -> Result<Output, StepError> {
    let greeting = greeting(&input.name)?;
    // Key-value writes commit with the step's result, exactly once.
    let greetings = weft_sdk::kv::get("greetings")
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0)
        + 1;
    weft_sdk::kv::set("greetings", &greetings.to_string())
        .map_err(|e| StepError::fatal("kv", e))?;
    // HTTP calls (`weft_sdk::http`) go to destinations the workflow grants
    // (`allow: {http: [...]}`); see "Outgoing HTTP" in docs/steps.md.
    Ok(Output {
        greeting,
        greetings,
    })
}

weft_sdk::export_step!(run, name = "{{name}}");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greets_by_name_and_refuses_an_empty_one() {
        assert_eq!(greeting("Ada").ok().as_deref(), Some("Hello, Ada!"));
        assert!(greeting(" ").is_err());
    }
}
