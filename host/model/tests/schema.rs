//! The JSON Schema of the workflow format (`weft schema workflow`): every
//! example validates against it, the copy in `docs/` is the one the code
//! makes, and it refuses what the parser refuses for its shape.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn validator() -> jsonschema::Validator {
    let schema = weft_model::workflow_schema();
    assert_eq!(
        schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
        "{schema:#}"
    );
    jsonschema::validator_for(&schema).expect("the schema is itself valid")
}

/// `text` (YAML, or JSON) as the JSON an editor checks.
fn as_json(text: &str) -> Value {
    serde_yaml_ng::from_str(text).unwrap()
}

/// Every workflow file under `dir`, recursively.
fn workflows(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            workflows(&path, into);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml")
            && !weft_model::cases::is_test_file(&path)
        {
            into.push(path);
        }
    }
}

#[test]
fn every_example_validates_against_the_schema() {
    let validator = validator();
    let mut files = Vec::new();
    workflows(&root().join("examples"), &mut files);
    assert!(files.len() >= 4, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // Editors find the schema from the file's first line.
        assert!(
            text.starts_with("# yaml-language-server: $schema=../docs/workflow.schema.json\n"),
            "{}",
            file.display()
        );
        takes(&validator, &text, &file.display().to_string());
    }
}

/// Asserts that the schema takes `text`, a workflow the parser takes.
fn takes(validator: &jsonschema::Validator, text: &str, origin: &str) {
    weft_model::parse(text, weft_model::Format::Yaml, origin)
        .unwrap_or_else(|e| panic!("{origin}: {e}"));
    let errors: Vec<String> = validator
        .iter_errors(&as_json(text))
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{origin}: {errors:#?}");
}

#[test]
fn the_template_and_every_workflow_in_the_readme_and_docs_validate() {
    let validator = validator();
    let template = std::fs::read_to_string(root().join("templates/example.yaml")).unwrap();
    takes(
        &validator,
        &template.replace("{{name}}", "demo"),
        "templates/example.yaml",
    );
    // Each YAML block of the README and of docs/ that is a whole workflow.
    let mut checked = 0;
    for (name, text) in documents() {
        for block in text.split("```yaml\n").skip(1) {
            let block = &block[..block.find("```").unwrap()];
            if weft_model::parse(block, weft_model::Format::Yaml, &name).is_ok() {
                takes(&validator, block, &name);
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 3,
        "only {checked} workflows in the README and docs/"
    );
}

/// The README and every page of docs/, by name, with their text.
fn documents() -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_owned()];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            names.push(format!("docs/{name}"));
        }
    }
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(root().join(&name)).unwrap();
            (name, text)
        })
        .collect()
}

#[test]
fn the_schema_in_docs_is_the_one_the_code_makes() {
    let path = root().join("docs/workflow.schema.json");
    let made = serde_json::to_string_pretty(&weft_model::workflow_schema()).unwrap() + "\n";
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        kept == made,
        "docs/workflow.schema.json is stale: write it again with \
         `weft schema workflow > docs/workflow.schema.json`"
    );
}

#[test]
fn every_field_has_a_description() {
    fn walk(schema: &Value, at: &str, missing: &mut Vec<String>) {
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                let described = property.get("description").is_some()
                    || property
                        .get("$ref")
                        .is_some_and(|_| property.get("description").is_some());
                if !described {
                    missing.push(format!("{at}.{name}"));
                }
                walk(property, &format!("{at}.{name}"), missing);
            }
        }
        if let Some(defs) = schema.get("$defs").and_then(Value::as_object) {
            for (name, def) in defs {
                walk(def, name, missing);
            }
        }
    }
    let mut missing = Vec::new();
    walk(&weft_model::workflow_schema(), "workflow", &mut missing);
    assert!(
        missing.is_empty(),
        "fields without a description: {missing:#?}"
    );
}

#[test]
fn the_schema_refuses_what_is_not_a_workflow() {
    let validator = validator();
    let good = json!({ "id": "w", "steps": [{ "id": "a", "uses": "echo", "with": 1 }] });
    assert!(validator.is_valid(&good));
    for bad in [
        // An unknown key, at the top and in a step.
        json!({ "id": "w", "steps": [{ "id": "a", "uses": "echo" }], "stesp": [] }),
        json!({ "id": "w", "steps": [{ "id": "a", "usse": "echo" }] }),
        // No steps, or a step without an id.
        json!({ "id": "w" }),
        json!({ "id": "w", "steps": [{ "uses": "echo" }] }),
        // A retry without max_attempts.
        json!({ "id": "w", "steps": [{ "id": "a", "uses": "echo", "retry": { "initial": "1s" } }] }),
    ] {
        assert!(!validator.is_valid(&bad), "{bad} passed");
    }
}

#[test]
fn every_example_test_file_validates_against_the_test_schema() {
    let schema = weft_model::cases::test_schema();
    let validator = jsonschema::validator_for(&schema).expect("the test schema is valid");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root().join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if weft_model::cases::is_test_file(&path) {
            files.push(path);
        }
    }
    assert!(files.len() >= 4, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("# yaml-language-server: $schema=../docs/test.schema.json\n"),
            "{}",
            file.display()
        );
        weft_model::cases::parse_tests(&text, &file.display().to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        let errors: Vec<String> = validator
            .iter_errors(&as_json(&text))
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", file.display());
    }
    // What the parser refuses for its shape, the schema refuses too.
    for bad in [
        json!({ "cases": [{ "name": "a", "oops": 1 }] }),
        json!({ "cases": [{ "input": {} }] }),
        json!({ "cases": [{ "name": "a", "do": [{ "wait": "1h" }] }] }),
    ] {
        assert!(!validator.is_valid(&bad), "{bad} passed");
    }
}

#[test]
fn the_test_schema_in_docs_is_the_one_the_code_makes() {
    let path = root().join("docs/test.schema.json");
    let made = serde_json::to_string_pretty(&weft_model::cases::test_schema()).unwrap() + "\n";
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        kept == made,
        "docs/test.schema.json is stale: write it again with \
         `weft schema test > docs/test.schema.json`"
    );
}
