//! Error answers: every refusal is `{"error": {"code", "message"}}` with
//! a stable code; the conversions from the engine's and the store's
//! errors pick the status in one place.
use axum::Json;
use axum::extract::Request;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use weft_engine::StartError;
use weft_store::{Refused, StoreError, What};

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
    /// For `429`: the seconds to wait, sent as `Retry-After`.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
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
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

/// How much of an error answer's text [`json_errors`] keeps.
const MAX_ERROR_TEXT: usize = 4096;

/// Every error answer in the JSON shape. The handlers answer
/// [`ApiError`]s; what axum answers by itself before a handler runs (a path
/// segment that does not parse, a method the route does not take) is text,
/// and is rewritten here with its status and headers (`Allow`) kept.
pub(super) async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|kind| kind.starts_with("application/json"));
    if is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_ERROR_TEXT)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let error = match status {
        StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
            status,
            "method_not_allowed",
            format!("this route does not take {method}"),
        ),
        _ if text.is_empty() => ApiError::rejected(status, status.to_string()),
        _ => ApiError::rejected(status, text),
    };
    let mut answer = error.into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            answer.headers_mut().append(name, value.clone());
        }
    }
    answer
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
        Self::rejected(status, without_first_line(rejection.body_text()))
    }
}

/// serde's message without ` at line 1 column N`: a body on one line (what
/// a client program sends) is better named by the field serde names than
/// by a column in text its sender never saw. A place on a later line stays.
fn without_first_line(message: String) -> String {
    match message.rfind(" at line 1 column ") {
        Some(at)
            if message[at + " at line 1 column ".len()..]
                .chars()
                .all(|c| c.is_ascii_digit()) =>
        {
            message[..at].to_owned()
        }
        _ => message,
    }
}

impl From<QueryRejection> for ApiError {
    /// A query string that does not parse, or names an unknown field: 400.
    fn from(rejection: QueryRejection) -> Self {
        Self::bad_request(rejection.body_text())
    }
}

impl ApiError {
    /// `404` for `what`, which does not exist: `unknown_run`,
    /// `unknown_subscription`, `unknown_delivery`, `unknown_schedule` or
    /// `unknown_revision`. Anything else named missing (a delivery's
    /// message) is an inconsistent store: `500 store`.
    pub(super) fn not_found(what: &What) -> Self {
        let code = match what {
            What::Run(_) => "unknown_run",
            What::Subscription(_) => "unknown_subscription",
            What::Delivery(_) => "unknown_delivery",
            What::Schedule(_) => "unknown_schedule",
            What::Revision { .. } => "unknown_revision",
            What::Tenant(_) => "unknown_tenant",
            What::Token(_) => "unknown_token",
            _ => return Self::store(&format!("no {what}")),
        };
        Self::new(StatusCode::NOT_FOUND, code, format!("no {what}"))
    }

    /// `500 store`, logged.
    fn store(message: &str) -> Self {
        tracing::error!("store error answering a request: {message}");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "store", message)
    }
}

impl From<StoreError> for ApiError {
    /// What the store refused, as the client's error: `404` for what does
    /// not exist ([`ApiError::not_found`]); `409` for a write that does not
    /// apply to what is stored (`conflict`, `schedule_exists`,
    /// `run_ended`, `run_busy`, `not_waiting`); `507 storage_quota` for a
    /// write over the tenant's stored bytes; `503 unavailable` when the
    /// engine is stopping; anything else is `500 store`, logged.
    fn from(error: StoreError) -> Self {
        let conflict = |code, message: String| Self::new(StatusCode::CONFLICT, code, message);
        match &error {
            StoreError::Refused(Refused::NotFound(what)) => Self::not_found(what),
            StoreError::Refused(Refused::Exists(what @ What::Subscription(_))) => {
                conflict("conflict", format!("{what} exists with another target"))
            }
            StoreError::Refused(Refused::Exists(what @ What::Schedule(_))) => {
                conflict("schedule_exists", format!("{what} exists already"))
            }
            StoreError::Refused(Refused::Changed(what)) => {
                conflict("conflict", format!("{what} changed since it was read"))
            }
            StoreError::Refused(Refused::DeliveryState { id, state }) => {
                conflict("conflict", format!("delivery `{id}` is {state}"))
            }
            StoreError::Refused(Refused::RunEnded(run)) => {
                conflict("run_ended", format!("run `{run}` has ended"))
            }
            StoreError::Refused(Refused::Needed {
                what: What::Run(run),
                why,
            }) => conflict(
                "run_not_ended",
                format!("run `{run}` cannot be deleted: {why}"),
            ),
            StoreError::Refused(Refused::Needed { what, why }) => {
                conflict("in_use", format!("{what} cannot be deleted: {why}"))
            }
            StoreError::Refused(Refused::Busy { run }) => conflict(
                "run_busy",
                format!("run `{run}` is in progress in another process"),
            ),
            StoreError::Refused(Refused::StorageQuota { .. }) => Self::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "storage_quota",
                error.to_string(),
            ),
            StoreError::Refused(Refused::TimerQuota { .. }) => Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "quota_exceeded",
                error.to_string(),
            ),
            StoreError::Closed => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the host is shutting down; try again",
            ),
            StoreError::NoSpace { .. } => Self::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "insufficient_storage",
                error.to_string(),
            ),
            StoreError::Unavailable { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                error.to_string(),
            ),
            _ => Self::store(&error.to_string()),
        }
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
            StartError::Reach { .. } => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_grant",
                error.to_string(),
            ),
            StartError::Subflow { .. } => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "workflow_unavailable",
                error.to_string(),
            ),
            StartError::Snapshot { .. } => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "snapshot_unavailable",
                error.to_string(),
            ),
            StartError::Store(e) => e.into(),
        }
    }
}
