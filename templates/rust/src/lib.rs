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
}

fn greeting(name: &str) -> Result<String, StepError> {
    if name.trim().is_empty() {
        return Err(StepError::fatal("empty_name", "name must not be empty"));
    }
    Ok(format!("Hello, {name}!"))
}

fn run(_ctx: &Context, input: Input) -> Result<Output, StepError> {
    Ok(Output {
        greeting: greeting(&input.name)?,
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
