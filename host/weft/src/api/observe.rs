//! Watching a host: `GET /metrics` in the Prometheus text format, and
//! `GET /v1/events`, a Server-Sent Events stream of what happens to the
//! caller's runs.

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use super::deliver::{MAX_STREAMS, TenantStream};
use super::{Api, ApiError, Caller, blocking};
use weft_engine::{RunEvent, RunEventKind, Subscription};
use weft_store::{Right, RunState};

/// Each request in a span of its own (target
/// [`HOST_SPANS`](crate::traces::HOST_SPANS), which `--otlp-endpoint`
/// exports): a server span named for its route, with its method, route and
/// status, and the child of the caller's `traceparent` if it sent one. A
/// host that exports nothing makes no span.
pub(super) async fn traced(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use tracing::Instrument as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |path| path.as_str())
        .to_owned();
    let method = request.method().clone();
    let span = tracing::info_span!(
        target: crate::traces::HOST_SPANS,
        "request",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
        weft.run = tracing::field::Empty,
    );
    if span.is_disabled() {
        return next.run(request).await;
    }
    // A `traceparent` that does not parse leaves the span a root.
    let _ = span.set_parent(crate::traces::remote_parent(request.headers()));
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}

/// The media type of the exposition.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `GET /metrics`: every metric of this host, for an admin (the labels
/// name every tenant).
pub(super) async fn metrics(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, ApiError> {
    caller.need(Right::Admin)?;
    let engine = Arc::clone(&api.engine);
    if engine.metrics().is_none() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "metrics_off",
            "this host counts nothing: it was started without metrics",
        ));
    }
    let hub = api.hub.clone();
    let text = blocking(move || {
        engine.read_gauges();
        if let Err(e) = hub.count_deliveries() {
            tracing::warn!("cannot count deliveries for the metrics: {e}");
        }
        engine.metrics().map(|m| m.encode()).unwrap_or_default()
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    /// Only this workflow's runs.
    #[serde(default)]
    workflow: Option<String>,
    /// Only this run.
    #[serde(default)]
    run: Option<String>,
    /// Only events of these kinds, comma-separated.
    #[serde(default)]
    kind: Option<String>,
    /// Only events after which the run is in one of these states,
    /// comma-separated.
    #[serde(default)]
    state: Option<String>,
    /// Resume after this event id (as `Last-Event-ID`, which wins).
    #[serde(default)]
    after: Option<u64>,
}

/// Which events a stream passes.
#[derive(Debug)]
struct Filter {
    tenant: String,
    workflow: Option<String>,
    run: Option<String>,
    kinds: Option<HashSet<RunEventKind>>,
    states: Option<HashSet<RunState>>,
}

impl Filter {
    fn passes(&self, event: &RunEvent) -> bool {
        event.tenant() == self.tenant
            && self.workflow.as_ref().is_none_or(|w| *w == event.workflow)
            && self.run.as_ref().is_none_or(|r| *r == event.run)
            && self.kinds.as_ref().is_none_or(|k| k.contains(&event.kind))
            && self
                .states
                .as_ref()
                .is_none_or(|s| s.contains(&event.state))
    }
}

const KINDS: [RunEventKind; 5] = [
    RunEventKind::Started,
    RunEventKind::StepFinished,
    RunEventKind::Waiting,
    RunEventKind::Resumed,
    RunEventKind::Ended,
];

fn kinds(text: &str) -> Result<HashSet<RunEventKind>, ApiError> {
    text.split(',')
        .map(|name| {
            KINDS
                .into_iter()
                .find(|k| k.name() == name.trim())
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "kind: `{name}` is not an event kind \
                         (started, step_finished, waiting, resumed, ended)"
                    ))
                })
        })
        .collect()
}

fn states(text: &str) -> Result<HashSet<RunState>, ApiError> {
    text.split(',')
        .map(|name| {
            name.trim()
                .parse::<RunState>()
                .map_err(|e| ApiError::bad_request(format!("state: {e}")))
        })
        .collect()
}

/// An event as a client sees it.
fn shown(event: &RunEvent) -> Event {
    let step = event.step.as_ref().map(|step| {
        json!({
            "path": step.path,
            "step_id": step.step_id,
            "attempt": step.attempt,
            "duration_us": step.duration_us,
            "error": step.error,
            "awaiting": step.awaiting,
        })
    });
    let data = json!({
        "id": event.id,
        "event": event.kind.name(),
        "run": event.run,
        "workflow": weft_core::tenant::bare(&event.workflow),
        "state": event.state.to_string(),
        "at": event.at,
        "step": step,
    });
    Event::default()
        .event(event.kind.name())
        .id(event.id.to_string())
        .data(data.to_string())
}

/// The event that says events were lost: the client reads the state again.
fn reset() -> Event {
    Event::default().event("reset").data(
        json!({
            "message": "events since the id given were lost (older than this host keeps, \
                        or from before it started); read the runs again"
        })
        .to_string(),
    )
}

/// A stream's state between events.
struct Feed {
    api: Api,
    caller: Caller,
    filter: Filter,
    receiver: tokio::sync::broadcast::Receiver<Arc<RunEvent>>,
    ready: VecDeque<Event>,
    /// The last event id this stream passed or skipped.
    last: u64,
    revocations: u64,
    checked: Instant,
    _places: (tokio::sync::OwnedSemaphorePermit, TenantStream),
}

impl Feed {
    /// Takes on a subscription's backlog.
    fn take(&mut self, subscription: Subscription) {
        if subscription.gap {
            self.ready.push_back(reset());
            self.last = subscription
                .backlog
                .first()
                .map_or(subscription.next, |e| e.id)
                .saturating_sub(1);
        }
        for event in subscription.backlog {
            self.pass(&event);
        }
        self.receiver = subscription.receiver;
    }

    fn pass(&mut self, event: &RunEvent) {
        if event.id <= self.last {
            return;
        }
        self.last = event.id;
        if self.filter.passes(event) {
            self.ready.push_back(shown(event));
        }
    }

    /// The next event to send, or `None` once the stream ends (the
    /// engine's events end, or the caller's token is no longer good).
    async fn next(&mut self) -> Option<Event> {
        loop {
            // A revoked or expired token ends the stream: checked at once
            // after any revocation (before anything more is sent), and
            // every few seconds for expiry.
            let revocations = self.api.access.revocations();
            if revocations != self.revocations || self.checked.elapsed() >= Duration::from_secs(5) {
                self.revocations = revocations;
                self.checked = Instant::now();
                let (access, caller) = (Arc::clone(&self.api.access), self.caller.clone());
                if !blocking(move || access.still_valid(&caller))
                    .await
                    .unwrap_or(false)
                {
                    return None;
                }
            }
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            match tokio::time::timeout(Duration::from_secs(1), self.receiver.recv()).await {
                Err(_) => {}
                Ok(Ok(event)) => self.pass(&event),
                // Fell behind: catch up from the events kept.
                Ok(Err(RecvError::Lagged(_))) => {
                    let subscription = self.api.engine.events().subscribe(Some(self.last));
                    self.take(subscription);
                }
                Ok(Err(RecvError::Closed)) => return None,
            }
        }
    }
}

/// `GET /v1/events`: Server-Sent Events of the caller's runs: `started`,
/// `step_finished`, `waiting`, `resumed` and `ended`, each with an `id`.
/// With `Last-Event-ID` (or `?after=`), the stream resumes after that
/// event; if events since were lost, it starts with an `event: reset`.
pub(super) async fn events(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<EventsQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<
    Sse<impl futures_util::Stream<Item = Result<Event, Infallible>> + Send + 'static>,
    ApiError,
> {
    let Query(query) = query?;
    caller.need(Right::Read)?;
    let after = match headers.get("last-event-id") {
        None => query.after,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    ApiError::bad_request("Last-Event-ID: expected an event id, a number")
                })?,
        ),
    };
    let filter = Filter {
        tenant: caller.tenant.clone(),
        // A name no workflow can have (it holds `:`) matches nothing.
        workflow: query
            .workflow
            .as_ref()
            .map(|name| caller.name(name).unwrap_or_else(|| format!(":{name}"))),
        run: query.run,
        kinds: query.kind.as_deref().map(kinds).transpose()?,
        states: query.state.as_deref().map(states).transpose()?,
    };
    let store = Arc::clone(api.engine.store());
    let shared = !blocking(move || store.tenants()).await??.is_empty();
    let place = TenantStream::take(&api, &caller.tenant, shared)?;
    let permit = Arc::clone(&api.streams).try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            format!("at most {MAX_STREAMS} event streams may be open at once"),
        )
    })?;
    let subscription = api.engine.events().subscribe(after);
    let mut feed = Feed {
        receiver: subscription.receiver.resubscribe(),
        // Without `after`, only what comes: a catch-up after a lag starts
        // from here, not from the oldest kept.
        last: after.unwrap_or_else(|| subscription.next.saturating_sub(1)),
        revocations: api.access.revocations(),
        checked: Instant::now(),
        api,
        caller,
        filter,
        ready: VecDeque::new(),
        _places: (permit, place),
    };
    feed.take(subscription);
    let stream = futures_util::stream::unfold(feed, |mut feed| async move {
        let event = feed.next().await?;
        Some((Ok(event), feed))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
