//! The workflow's durable key-value space. Writes commit with the step's
//! result, exactly once; see `kv` in the WIT for the full contract.

use crate::__private::bindings::weft::plugin::kv;

/// The value of `key`, if it has one.
pub fn get(key: &str) -> Option<String> {
    kv::get(key)
}

/// Sets `key` to `value`; committed with the step's result.
pub fn set(key: &str, value: &str) -> Result<(), String> {
    kv::set(key, value, None)
}

/// Sets `key` to `value` until `ttl` has passed: from then on it reads as
/// absent. Committed with the step's result.
pub fn set_with_ttl(key: &str, value: &str, ttl: std::time::Duration) -> Result<(), String> {
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
    kv::set(key, value, Some(ms))
}

/// Removes `key`; committed with the step's result.
pub fn delete(key: &str) -> Result<(), String> {
    kv::delete(key)
}

/// Up to `limit` keys that start with `prefix`, in byte order.
pub fn keys(prefix: &str, limit: u32) -> Vec<String> {
    kv::keys(prefix, limit)
}
