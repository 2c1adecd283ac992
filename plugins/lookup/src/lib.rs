//! Looks up reference data in a snapshot store that the step's workflow
//! names in `snapshots:`: the value of `key`, or, with `prefix`, the keys
//! that start with it (at most `limit`, 100 by default) and their values.
//!
//! A run reads the revision of the store that was the newest when it
//! started, in every step and after a crash too, unless the workflow asks
//! for `revision: latest`. A key that is absent, or whose entry has
//! expired, is `found: false`.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use weft_sdk::{Context, StepError, snapshot};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    store: String,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default = "hundred")]
    limit: u32,
}

fn hundred() -> u32 {
    100
}

fn lookup(_ctx: &Context, input: Input) -> Result<Value, StepError> {
    let failed = |e: String| StepError::fatal("snapshot", e);
    match (input.key, input.prefix) {
        (Some(key), None) => {
            let value: Option<Value> = snapshot::get(&input.store, &key).map_err(failed)?;
            Ok(json!({ "key": key, "found": value.is_some(), "value": value }))
        }
        (None, Some(prefix)) => {
            let keys = snapshot::keys(&input.store, &prefix, input.limit).map_err(failed)?;
            let mut values = Map::new();
            for key in keys {
                // An entry may expire between the listing and the read.
                if let Some(value) = snapshot::get::<Value>(&input.store, &key).map_err(failed)? {
                    values.insert(key, value);
                }
            }
            Ok(json!({ "prefix": prefix, "count": values.len(), "values": values }))
        }
        _ => Err(StepError::fatal(
            "invalid_input",
            "give `key` (one entry) or `prefix` (the entries under it), not both",
        )),
    }
}

weft_sdk::export_step!(lookup, name = "lookup");
