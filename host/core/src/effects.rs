//! What a step attempt did besides its result, buffered until its commit:
//! key-value reads and writes, log lines, emitted messages. The runtime
//! produces them, the engine carries them, the store commits them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A committed key: its version (how many times it has been written or
/// deleted; 0 if never) and its value, if it has one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Versioned {
    /// How many times the key has been written or deleted.
    pub version: u64,
    /// The value; `None` if the key has none.
    pub value: Option<String>,
    /// When the value expires, in milliseconds since the epoch: from then
    /// on it reads as absent. `None`: never.
    pub expires_at: Option<u64>,
}

impl Versioned {
    /// The value as a read at `now` (milliseconds) sees it: `None` once
    /// it has expired.
    pub fn live(&self, now: u64) -> Option<&str> {
        match self.expires_at {
            Some(at) if at <= now => None,
            _ => self.value.as_deref(),
        }
    }
}

/// What a call did to its key space: its writes (`None` deletes), and the
/// version of every key it read from the committed data (0: absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvEffects {
    /// The space.
    pub space: String,
    /// Key to new value, or `None` to delete.
    pub writes: BTreeMap<String, Option<String>>,
    /// Key to the version that was read.
    pub reads: BTreeMap<String, u64>,
    /// Key to when its new value expires (milliseconds since the epoch),
    /// for the keys written with a time to live.
    pub expires: BTreeMap<String, u64>,
}

/// One line of a step's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// How important the line is.
    pub level: LogLevel,
    /// Where the line came from.
    pub source: LogSource,
    /// The text, without its newline.
    pub message: String,
}

/// A log line's level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// Which channel a log line came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogSource {
    /// The `weft:plugin/log` interface.
    Log,
    /// The guest's stdout.
    Stdout,
    /// The guest's stderr.
    Stderr,
    /// The host, about this call (such as dropped lines).
    Host,
}

/// A message a run emitted, before it is committed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Emission {
    /// The message's id (a UUIDv7), given when it was emitted.
    pub id: String,
    /// The channel.
    pub channel: String,
    /// The payload.
    pub payload: Value,
}

/// One outgoing HTTP request a step made, as its record keeps it. Query
/// values, headers and bodies are never kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpCall {
    /// The method, uppercase.
    pub method: String,
    /// The URL, with the values of its query replaced by `…`.
    pub url: String,
    /// The response's status, if one came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The bytes of response body the step read.
    pub bytes: u64,
    /// From the request to the end of its response (or to the end of the
    /// call, if the step did not read the body to its end).
    pub duration_ms: u64,
    /// Why the request failed or was refused, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
