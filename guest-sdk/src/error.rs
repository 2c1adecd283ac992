use serde::Serialize;

use crate::__private::{Failure, WitStepError};

/// An error a step understood, returned as data the workflow can handle.
///
/// A panic in a step is not a `StepError`: the host sees it as a trap and
/// records a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepError {
    /// Trying again may succeed.
    Retryable {
        /// A short, stable code such as `upstream_unavailable`.
        code: String,
        /// A message for people.
        message: String,
        /// Structured details as JSON text.
        details: Option<String>,
    },
    /// Trying again cannot help.
    Fatal {
        /// A short, stable code such as `invalid_order`.
        code: String,
        /// A message for people.
        message: String,
        /// Structured details as JSON text.
        details: Option<String>,
    },
}

impl StepError {
    /// An error that retrying cannot fix.
    pub fn fatal(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Fatal {
            code: code.into(),
            message: message.into(),
            details: None,
        }
    }

    /// An error that a retry may fix.
    pub fn retryable(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Retryable {
            code: code.into(),
            message: message.into(),
            details: None,
        }
    }

    /// Attaches structured details, visible to the workflow's error handlers.
    /// Details that cannot be encoded as JSON are replaced by their error.
    pub fn with_details(mut self, details: &impl Serialize) -> Self {
        let encoded = serde_json::to_string(details).unwrap_or_else(|e| {
            serde_json::json!({ "unencodable_details": e.to_string() }).to_string()
        });
        match &mut self {
            Self::Retryable { details, .. } | Self::Fatal { details, .. } => {
                *details = Some(encoded)
            }
        }
        self
    }

    /// The error's code.
    pub fn code(&self) -> &str {
        match self {
            Self::Retryable { code, .. } | Self::Fatal { code, .. } => code,
        }
    }
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Retryable { code, message, .. } => write!(f, "{code} (retryable): {message}"),
            Self::Fatal { code, message, .. } => write!(f, "{code}: {message}"),
        }
    }
}

impl std::error::Error for StepError {}

impl From<StepError> for WitStepError {
    fn from(error: StepError) -> Self {
        match error {
            StepError::Retryable {
                code,
                message,
                details,
            } => WitStepError::Retryable(Failure {
                code,
                message,
                details,
            }),
            StepError::Fatal {
                code,
                message,
                details,
            } => WitStepError::Fatal(Failure {
                code,
                message,
                details,
            }),
        }
    }
}
