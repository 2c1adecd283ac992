//! Allocates `mib` MiB (default 1024) one MiB at a time, touching every page,
//! so that it reaches any memory limit the host sets.

use serde_json::{Value, json};
use weft_sdk::{Context, StepError};

fn hog(_ctx: &Context, input: Value) -> Result<Value, StepError> {
    let mib = input.get("mib").and_then(Value::as_u64).unwrap_or(1024);
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    for i in 0..mib {
        chunks.push(vec![(i % 251) as u8 + 1; 1 << 20]);
    }
    let sum: u64 = chunks.iter().map(|c| u64::from(c[c.len() - 1])).sum();
    Ok(json!({ "allocated_mib": mib, "checksum": sum }))
}

weft_sdk::export_step!(hog, name = "hog");
