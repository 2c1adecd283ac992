//! The error a run or step ends with, as workflows and people see it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An error, as workflows and people see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorRecord {
    /// A short stable code: the step's own, or one of `timeout`,
    /// `memory_limit`, `trap`, `invalid_output`, `instantiate`, `expression`.
    pub code: String,
    /// A message for people.
    pub message: String,
    /// Whether trying again could help.
    pub retryable: bool,
    /// Structured details from the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl ErrorRecord {
    /// An error that trying again cannot mend, with no details.
    pub fn fatal(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            retryable: false,
            details: None,
        }
    }

    /// What a cancelled run ends with (`cancelled`).
    pub fn cancelled() -> Self {
        Self::fatal("cancelled", "the run was cancelled")
    }

    /// The host's own failure (`internal`), not the step's.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::fatal("internal", message)
    }
}
