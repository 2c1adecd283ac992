//! Messages out of the run, to a channel's subscribers. A message is
//! committed with the step's result, only if the step succeeds, exactly
//! once; see `outbox` in the WIT for the full contract.

use serde::Serialize;

use crate::__private::bindings::weft::plugin::outbox;

/// Emits `payload`, as JSON, on `channel`, and returns the message's id.
pub fn emit(channel: &str, payload: &impl Serialize) -> Result<String, String> {
    let payload = serde_json::to_string(payload).map_err(|e| e.to_string())?;
    outbox::emit(channel, &payload)
}
