use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use weft_engine::StartError;
use weft_store::StoreError;

/// An error answer: a status, a stable code and a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code.
    pub code: &'static str,
    /// A message for people.
    pub message: String,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub(super) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// `404 unknown_run` for run `id`.
    pub(super) fn unknown_run(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown_run",
            format!("no run `{id}`"),
        )
    }

    /// A body that could not be taken: `413 body_too_large` over the
    /// limit, else `invalid_request` with `status`.
    pub(super) fn rejected(status: StatusCode, message: String) -> Self {
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            _ => "invalid_request",
        };
        Self::new(status, code, message)
    }

    pub(super) fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        (self.status, Json(body)).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    /// Malformed JSON, a wrong type or an unknown field: 400, naming the
    /// field where serde does; a body over the limit: 413.
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let status = if status == StatusCode::UNPROCESSABLE_ENTITY {
            StatusCode::BAD_REQUEST
        } else {
            status
        };
        Self::rejected(status, rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    /// A query string that does not parse, or names an unknown field: 400.
    fn from(rejection: QueryRejection) -> Self {
        Self::bad_request(rejection.body_text())
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        tracing::error!("store error answering a request: {error}");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "store",
            error.to_string(),
        )
    }
}

impl From<StartError> for ApiError {
    fn from(error: StartError) -> Self {
        match error {
            StartError::Input { .. } => {
                Self::new(StatusCode::BAD_REQUEST, "invalid_input", error.to_string())
            }
            StartError::Plugin { .. } => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "plugin_unavailable",
                error.to_string(),
            ),
            StartError::Subflow { .. } => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "workflow_unavailable",
                error.to_string(),
            ),
            StartError::Store(e) => e.into(),
        }
    }
}
