//! Snapshot stores: read-only reference data that the step's workflow
//! names in `snapshots:`. A run reads the revision pinned at its start
//! (unless the workflow asks for `revision: latest`); an expired entry
//! reads as absent.

use serde::de::DeserializeOwned;

use crate::__private::bindings::weft::plugin::snapshot;

/// The value of `key` in store `store`, as JSON text, if it has one.
/// Fails, naming the store, if the workflow does not name it.
pub fn get_raw(store: &str, key: &str) -> Result<Option<String>, String> {
    snapshot::get(store, key)
}

/// The value of `key` in store `store`, decoded into `T`, if it has one.
/// Fails if the workflow does not name the store, or the value does not
/// decode.
pub fn get<T: DeserializeOwned>(store: &str, key: &str) -> Result<Option<T>, String> {
    match snapshot::get(store, key)? {
        Some(json) => serde_json::from_str(&json)
            .map(Some)
            .map_err(|e| format!("snapshot `{store}` key `{key}`: {e}")),
        None => Ok(None),
    }
}

/// Up to `limit` keys of store `store` that start with `prefix`, in byte
/// order.
pub fn keys(store: &str, prefix: &str, limit: u32) -> Result<Vec<String>, String> {
    snapshot::keys(store, prefix, limit)
}
