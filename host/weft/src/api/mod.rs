//! The HTTP API, under `/v1`: deploy workflows and plugins, start runs and
//! read them back, act on waiting steps, receive messages, and manage
//! deliveries and cron triggers, tenants and tokens. JSON in and out;
//! every error is `{"error": {"code": ..., "message": ...}}` with a stable
//! code. The routes are listed once, in [`routes`]; `GET
//! /v1/openapi.json` describes each (a test holds the two together).
//!
//! Every route but health and the document is made by a [`Caller`] (see
//! [`auth`]) and sees only its tenant's objects.

pub mod auth;
mod bulk;
mod deliver;
mod deploy;
mod error;
mod observe;
mod openapi;
mod secrets;
mod snapshots;
mod tenancy;
mod views;

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{MethodRouter, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::hub::Hub;
use crate::services::ScheduleRefused;
use crate::services::deployments::Deployments;
use weft_engine::{Engine, Quiet, ScheduleError};
use weft_store::{Right, RunFilter};

pub use auth::{Access, Caller};
pub use error::ApiError;
pub use snapshots::{options as snapshot_options, revision_json as snapshot_json};

/// The largest request body accepted.
pub const MAX_BODY: usize = 4 << 20;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct Api {
    engine: Arc<Engine>,
    workflows: Arc<Deployments>,
    /// The operations that have moved to the service layer go through it.
    services: crate::Services,
    hub: Hub,
    /// Places for open event streams.
    streams: Arc<tokio::sync::Semaphore>,
    /// Open event streams per tenant: each may hold at most
    /// [`deliver::MAX_TENANT_STREAMS`] of the places.
    tenant_streams: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    /// Tokens, and the starts quota.
    access: Arc<Access>,
}

impl Api {
    /// An API over `engine`, serving and deploying `workflows`, delivering
    /// through `hub`.
    pub fn new(engine: Arc<Engine>, workflows: Arc<Deployments>, hub: Hub) -> Self {
        let access = Access::new(Arc::clone(engine.store()), Arc::clone(engine.clock()));
        Self {
            services: crate::Services::new(
                Arc::clone(&engine),
                Arc::clone(&workflows),
                hub.clone(),
            ),
            engine,
            workflows,
            hub,
            streams: Arc::new(tokio::sync::Semaphore::new(deliver::MAX_STREAMS)),
            tenant_streams: Arc::default(),
            access: Arc::new(access),
        }
    }

    /// Requires a token on every request (`weft serve --auth`), even
    /// while none exists in the store.
    pub fn require_auth(self) -> Self {
        self.access.require();
        self
    }

    /// The routes, ready for `axum::serve`.
    pub fn router(self) -> Router {
        // The web UI's files: not part of the API, and open to all (the
        // page asks for a token when the host needs one).
        let mut router = Router::new()
            .route("/", get(views::index))
            .route("/ui/app.js", get(views::script))
            .route("/ui/app.css", get(views::style))
            .route("/favicon.ico", get(views::favicon));
        for (path, methods) in routes() {
            router = router.route(path, methods);
        }
        router
            .fallback(not_found)
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                auth::authenticate,
            ))
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .layer(axum::middleware::from_fn(error::json_errors))
            .layer(axum::middleware::from_fn(observe::traced))
            .with_state(self)
    }

    /// Appends what `caller` changed to the audit log (off the async
    /// threads).
    async fn audit(&self, caller: &Caller, action: &str, object: &str, detail: Value) {
        let services = self.services.clone();
        let (caller, action, object) = (caller.clone(), action.to_owned(), object.to_owned());
        let _ = blocking(move || {
            services.audit(&caller.tenant, &caller.actor, &action, &object, detail)
        })
        .await;
    }
}

/// Every route: the router is built from this list, and a test checks
/// that the OpenAPI document describes each of them.
fn routes() -> Vec<(&'static str, MethodRouter<Api>)> {
    use axum::routing::delete;
    vec![
        ("/v1/health", get(health)),
        ("/v1/openapi.json", get(openapi::document)),
        ("/metrics", get(observe::metrics)),
        ("/v1/events", get(observe::events)),
        (
            "/v1/workflows",
            get(deploy::list_workflows).post(deploy::deploy_workflow),
        ),
        ("/v1/workflows/{id}", get(deploy::get_workflow)),
        ("/v1/workflows/{id}/migrate", post(deploy::migrate_runs)),
        (
            "/v1/plugins",
            get(deploy::list_plugins)
                .post(deploy::add_plugin)
                .layer(DefaultBodyLimit::max(deploy::MAX_COMPONENT)),
        ),
        ("/v1/runs", get(list_runs).post(start_run)),
        ("/v1/runs/bulk", post(bulk::bulk)),
        ("/v1/runs/{id}", get(get_run).delete(delete_run)),
        ("/v1/runs/{id}/steps", get(get_steps)),
        ("/v1/runs/{id}/graph", get(views::graph)),
        ("/v1/awaits", get(views::awaits)),
        ("/v1/runs/{id}/steps/{*rest}", post(deliver::act)),
        ("/v1/runs/{id}/messages", get(deliver::run_messages)),
        ("/v1/runs/{id}/cancel", post(cancel_run)),
        ("/v1/runs/{id}/retry", post(retry_run)),
        ("/v1/runs/{id}/pause", post(pause_run)),
        ("/v1/runs/{id}/resume", post(resume_run)),
        ("/v1/schedules", get(list_schedules).post(add_schedule)),
        (
            "/v1/schedules/{workflow}/{trigger}",
            delete(remove_schedule),
        ),
        (
            "/v1/schedules/{workflow}/{trigger}/{action}",
            post(pause_schedule),
        ),
        ("/v1/channels/{channel}/events", get(deliver::events)),
        (
            "/v1/subscriptions",
            get(deliver::list_subscriptions).post(deliver::add_subscription),
        ),
        (
            "/v1/subscriptions/{channel}/{name}",
            delete(deliver::remove_subscription),
        ),
        ("/v1/deliveries", get(deliver::list_deliveries)),
        ("/v1/acks", post(deliver::ack_many)),
        (
            "/v1/deliveries/{id}",
            get(deliver::get_delivery).delete(deliver::clear_delivery),
        ),
        (
            "/v1/deliveries/{id}/{action}",
            post(deliver::change_delivery),
        ),
        (
            "/v1/tenants",
            get(tenancy::list_tenants).post(tenancy::add_tenant),
        ),
        ("/v1/tenants/{tenant}", delete(tenancy::remove_tenant)),
        ("/v1/tenants/{tenant}/quota", post(tenancy::set_quota)),
        ("/v1/tenants/{tenant}/usage", get(tenancy::usage)),
        (
            "/v1/tokens",
            get(tenancy::list_tokens).post(tenancy::create_token),
        ),
        ("/v1/tokens/{id}/revoke", post(tenancy::revoke_token)),
        ("/v1/secrets", get(secrets::list_secrets)),
        ("/v1/secrets/reseal", post(secrets::reseal_secrets)),
        (
            "/v1/secrets/{name}",
            axum::routing::put(secrets::set_secret).delete(secrets::delete_secret),
        ),
        ("/v1/secrets/{name}/grants", post(secrets::grant_secret)),
        (
            "/v1/secrets/{name}/grants/{plugin}",
            axum::routing::delete(secrets::revoke_secret),
        ),
        ("/v1/audit", get(tenancy::list_audit)),
        ("/v1/snapshots", get(snapshots::list)),
        (
            "/v1/snapshots/{name}",
            get(snapshots::revisions)
                .post(snapshots::publish)
                .layer(DefaultBodyLimit::disable()),
        ),
        (
            "/v1/snapshots/{name}/revisions/{revision}",
            get(snapshots::show),
        ),
        ("/v1/snapshots/{name}/diff", get(snapshots::diff)),
    ]
}

/// Runs blocking work (the store, the engine) off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::internal(format!("a blocking task failed: {e}")))
}

/// Starts long-lived blocking work off the async threads and does not wait
/// for it: an event stream's loop, which feeds its stream through a channel
/// and ends on its own once the stream is gone. Unlike [`blocking`], no
/// answer comes back, so a panic in `work` ends only that stream.
fn spawn_detached(work: impl FnOnce() + Send + 'static) {
    tokio::task::spawn_blocking(work);
}

/// `GET /v1/health`: `200 {"status": "ok"}`, or `503 {"status":
/// "degraded", "store": why}` while the store fails (a full disk), which it
/// recovers from by itself.
async fn health(State(api): State<Api>) -> (StatusCode, Json<Value>) {
    match api.engine.store().degraded() {
        None => (StatusCode::OK, Json(json!({ "status": "ok" }))),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "degraded", "store": why })),
        ),
    }
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StartRequest {
    workflow: String,
    #[serde(default)]
    input: Option<Value>,
    /// A start with a key used before starts nothing and answers with the
    /// run that key started.
    #[serde(default)]
    idempotency_key: Option<String>,
}

fn unknown_workflow(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_workflow",
        format!("no workflow `{id}` is served here"),
    )
}

/// The stored form of a client's idempotency key: tenant `default`'s as
/// they are, another tenant's behind its name and a control character,
/// which no key may hold.
fn idempotency_key(tenant: &str, key: &str) -> String {
    if tenant == weft_core::tenant::DEFAULT {
        key.to_owned()
    } else {
        format!("{tenant}\u{1f}{key}")
    }
}

/// `value` with the stored names at `fields` (`a` or `a.b`) shown bare:
/// a caller sees only its own tenant's objects, by the names it gave.
fn bare(mut value: Value, fields: &[&str]) -> Value {
    for field in fields {
        let mut at = Some(&mut value);
        for part in field.split('.') {
            at = at.and_then(|v| v.get_mut(part));
        }
        if let Some(slot) = at
            && let Some(text) = slot.as_str()
        {
            *slot = Value::String(weft_core::tenant::bare(text).to_owned());
        }
    }
    value
}

/// A record as the API shows it, with its stored names at `fields` bare.
fn shown<T: serde::Serialize>(record: &T, fields: &[&str]) -> Value {
    bare(serde_json::to_value(record).unwrap_or(Value::Null), fields)
}

/// The stored names in a run's record.
const RUN_NAMES: &[&str] = &["workflow", "trigger.schedule"];

/// The tenant's quota, if it has a row.
fn quota_of(store: &dyn weft_store::Store, tenant: &str) -> Result<weft_store::Quota, ApiError> {
    Ok(store
        .tenants()?
        .into_iter()
        .find(|t| t.name == tenant)
        .map(|t| t.quota)
        .unwrap_or_default())
}

async fn start_run(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<StartRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(request) = body.map_err(ApiError::from)?;
    let workflow = caller
        .name(&request.workflow)
        .and_then(|id| api.workflows.current().get(&id))
        .ok_or_else(|| unknown_workflow(&request.workflow))?;
    caller.need(Right::Operate)?;
    let input = request.input.unwrap_or_else(|| json!({}));
    if let Some(key) = &request.idempotency_key
        && (key.is_empty() || key.len() > 256 || key.chars().any(char::is_control))
    {
        return Err(ApiError::bad_request(
            "idempotency_key: must be 1 to 256 bytes long, without control characters",
        ));
    }
    let engine = Arc::clone(&api.engine);
    let access = Arc::clone(&api.access);
    let key = request
        .idempotency_key
        .as_deref()
        .map(|key| idempotency_key(&caller.tenant, key));
    let tenant = caller.tenant.clone();
    // Resolving plugins may compile, and recording waits for a sync.
    let started = blocking(move || {
        if let Some(key) = &key
            && let Some(run) = engine.store().idempotent_run(key)?
        {
            return Ok::<_, ApiError>(Err(run));
        }
        if let Some(rate) = quota_of(engine.store().as_ref(), &tenant)?.starts_per_second {
            access.take_start(&tenant, rate)?;
        }
        let mut handle = engine.start_keyed(workflow, input, Box::new(Quiet), key)?;
        match handle.recorded() {
            Ok(()) => Ok(Ok(handle.id().to_owned())),
            Err(weft_store::StoreError::Refused(weft_store::Refused::Duplicate {
                run, ..
            })) => Ok(Err(run)),
            Err(e) => Err(e.into()),
        }
    })
    .await?;
    match started? {
        Ok(id) => {
            // The request's span (if exported) names the run, and links to
            // the run's own trace.
            let span = tracing::Span::current();
            span.record("weft.run", id.as_str());
            tracing_opentelemetry::OpenTelemetrySpanExt::add_link(
                &span,
                crate::traces::run_span(&id),
            );
            Ok((
                StatusCode::CREATED,
                Json(json!({ "id": id, "workflow": request.workflow, "state": "running" })),
            ))
        }
        // Started before with this key: the same answer, and nothing new.
        Err(id) => {
            let store = Arc::clone(api.engine.store());
            let asked = id.clone();
            let state = blocking(move || store.run(&asked))
                .await??
                .map(|r| r.state.to_string())
                .unwrap_or_default();
            Ok((
                StatusCode::OK,
                Json(
                    json!({ "id": id, "workflow": request.workflow, "state": state, "existing": true }),
                ),
            ))
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    workflow: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    until: Option<String>,
    /// The next page: runs older than this one (the last of a page).
    #[serde(default)]
    before: Option<String>,
}

/// An RFC 3339 time or milliseconds since the epoch, from a query.
fn parse_time(field: &str, text: &str) -> Result<weft_core::clock::Timestamp, ApiError> {
    weft_core::clock::Timestamp::parse(text)
        .map_err(|message| ApiError::bad_request(format!("{field}: {message}")))
}

/// A filter of runs as a request writes it.
struct RunsAsked<'q> {
    workflow: Option<&'q str>,
    state: Option<&'q str>,
    since: Option<&'q str>,
    until: Option<&'q str>,
}

/// The caller's runs that `query` names; `prefix` leads each field's name
/// in errors (`filter.`).
fn run_filter(caller: &Caller, query: RunsAsked<'_>, prefix: &str) -> Result<RunFilter, ApiError> {
    let time = |field: &str, text: Option<&str>| {
        text.map(|t| parse_time(&format!("{prefix}{field}"), t))
            .transpose()
    };
    let filter = RunFilter {
        tenant: Some(caller.tenant.clone()),
        // A name no workflow can have (it holds `:`) is kept as it is: it
        // matches no run of the caller's tenant.
        workflow: query
            .workflow
            .map(|name| caller.name(name).unwrap_or_else(|| name.to_owned())),
        since: time("since", query.since)?,
        until: time("until", query.until)?,
        ..RunFilter::default()
    };
    match query.state {
        Some(name) => filter
            .state_named(name)
            .map_err(|e| ApiError::bad_request(format!("{prefix}state: {e}"))),
        None => Ok(filter),
    }
}

async fn list_runs(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    let limit = query.limit.unwrap_or(20).min(1000);
    let filter = run_filter(
        &caller,
        RunsAsked {
            workflow: query.workflow.as_deref(),
            state: query.state.as_deref(),
            since: query.since.as_deref(),
            until: query.until.as_deref(),
        },
        "",
    )?;
    let filter = RunFilter {
        before: query.before,
        ..filter
    };
    let store = Arc::clone(api.engine.store());
    let runs = blocking(move || store.runs(&filter, limit))
        .await?
        .map_err(ApiError::from)?;
    // A full page may have more after it.
    let next = (runs.len() == limit && limit > 0)
        .then(|| runs.last().map(|r| r.id.clone()))
        .flatten();
    let runs: Vec<Value> = runs.iter().map(|r| shown(r, RUN_NAMES)).collect();
    Ok(Json(json!({ "runs": runs, "next": next })))
}

/// Run `id`, if it is the caller's.
async fn own_run(api: &Api, caller: &Caller, id: &str) -> Result<weft_store::RunRecord, ApiError> {
    let store = Arc::clone(api.engine.store());
    let asked = id.to_owned();
    blocking(move || store.run(&asked))
        .await??
        .filter(|run| caller.owns(&run.workflow))
        .ok_or_else(|| ApiError::unknown_run(id))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunQuery {
    /// `false`: the run alone, without its step records.
    #[serde(default)]
    steps: Option<bool>,
}

async fn get_run(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    query: Result<Query<RunQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    let run = own_run(&api, &caller, &id).await?;
    if query.steps == Some(false) {
        return Ok(Json(json!({ "run": shown(&run, RUN_NAMES) })));
    }
    let store = Arc::clone(api.engine.store());
    let steps = blocking(move || store.steps(&id)).await??;
    Ok(Json(
        json!({ "run": shown(&run, RUN_NAMES), "steps": steps }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepsQuery {
    /// Records after this one (its `seq`).
    #[serde(default)]
    after: Option<u32>,
    /// At most this many (default: every one, with neither `after` nor
    /// `failed`; else 200; at most 1,000).
    #[serde(default)]
    limit: Option<usize>,
    /// Only records with an error.
    #[serde(default)]
    failed: Option<bool>,
}

/// Records read from the store at a time while looking for failed ones.
const STEPS_PAGE: usize = 500;

/// `GET /v1/runs/{id}/steps`: the run's step records in commit order, each
/// with its input, output or error, timing and logs; paged with `after`
/// and `limit` (then `next` is the `after` of the next page), and only the
/// failed ones with `failed=true`.
async fn get_steps(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    query: Result<Query<StepsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    own_run(&api, &caller, &id).await?;
    let store = Arc::clone(api.engine.store());
    let failed = query.failed == Some(true);
    if query.after.is_none() && query.limit.is_none() && !failed {
        let steps = blocking(move || store.steps(&id)).await??;
        return Ok(Json(json!({ "steps": steps, "next": null })));
    }
    let limit = query.limit.unwrap_or(200).clamp(1, 1000);
    let (steps, next) = blocking(move || {
        let mut found = Vec::new();
        let mut after = query.after;
        loop {
            let page = store.steps_page(&id, after, if failed { STEPS_PAGE } else { limit })?;
            let ended = page.len() < if failed { STEPS_PAGE } else { limit };
            for step in page {
                after = Some(step.seq);
                if !failed || step.error.is_some() {
                    found.push(step);
                    if found.len() == limit {
                        return Ok::<_, weft_store::StoreError>((found, after));
                    }
                }
            }
            if ended {
                return Ok((found, None));
            }
        }
    })
    .await??;
    Ok(Json(json!({ "steps": steps, "next": next })))
}

async fn cancel_run(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    own_run(&api, &caller, &id).await?;
    caller.need(Right::Operate)?;
    let services = api.services.clone();
    let asked = id.clone();
    let outcome = blocking(move || services.cancel_run(&asked)).await?;
    match outcome {
        Ok(()) => {
            api.audit(&caller, "run.cancel", &id, Value::Null).await;
            Ok(Json(json!({ "id": id, "cancelled": true })))
        }
        Err(weft_store::StoreError::Refused(weft_store::Refused::RunEnded(_))) => {
            let state = own_run(&api, &caller, &id)
                .await
                .map(|run| run.state.to_string())
                .unwrap_or_default();
            Err(ApiError::new(
                StatusCode::CONFLICT,
                "run_ended",
                format!("run `{id}` has already ended: {state}"),
            ))
        }
        // `NotFound` is `404 unknown_run`.
        Err(e) => Err(e.into()),
    }
}

/// A refused pause or resume, as the API answers it.
fn pause_refused(e: weft_engine::PauseError) -> ApiError {
    use weft_engine::PauseError;
    match e {
        PauseError::NotFound(id) => ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_run",
            format!("no run `{id}`"),
        ),
        e @ PauseError::Ended { .. } => {
            ApiError::new(StatusCode::CONFLICT, "run_ended", e.to_string())
        }
        e @ PauseError::Already { paused: true, .. } => {
            ApiError::new(StatusCode::CONFLICT, "run_paused", e.to_string())
        }
        e @ PauseError::Already { paused: false, .. } => {
            ApiError::new(StatusCode::CONFLICT, "run_not_paused", e.to_string())
        }
        e @ PauseError::Busy { .. } => {
            ApiError::new(StatusCode::CONFLICT, "run_busy", e.to_string())
        }
        PauseError::Store(e) => e.into(),
    }
}

/// `POST /v1/runs/{id}/pause`: the run finishes the attempts under way,
/// starts nothing new, and waits; its timers fire into the store.
async fn pause_run(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    own_run(&api, &caller, &id).await?;
    caller.need(Right::Operate)?;
    let engine = Arc::clone(&api.engine);
    let (asked, actor) = (id.clone(), caller.actor.clone());
    let pausing = blocking(move || engine.pause(&asked, &actor))
        .await?
        .map_err(pause_refused)?;
    api.audit(&caller, "run.pause", &id, Value::Null).await;
    let pending = pausing == weft_engine::Pausing::Pending;
    Ok(Json(
        json!({ "id": id, "paused": !pending, "pending": pending }),
    ))
}

/// `POST /v1/runs/{id}/resume`: a paused run goes on, first with what its
/// timers and answers recorded while it was paused.
async fn resume_run(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    own_run(&api, &caller, &id).await?;
    caller.need(Right::Operate)?;
    let engine = Arc::clone(&api.engine);
    let asked = id.clone();
    blocking(move || engine.unpause(&asked, Box::new(Quiet)).map(|_handle| ()))
        .await?
        .map_err(pause_refused)?;
    api.audit(&caller, "run.resume", &id, Value::Null).await;
    Ok(Json(json!({ "id": id, "paused": false })))
}

/// The body of `POST /v1/runs/{id}/retry`; none is `{}`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryRequest {
    /// The leaf to go on from (its path).
    #[serde(default)]
    from: Option<String>,
}

/// `POST /v1/runs/{id}/retry`: a failed, timed-out or cancelled run goes
/// on from its failed step (or `from`), keeping every result that stands.
async fn retry_run(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    own_run(&api, &caller, &id).await?;
    caller.need(Right::Operate)?;
    let request: RetryRequest = if body.iter().all(u8::is_ascii_whitespace) {
        RetryRequest::default()
    } else if !headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
    {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body was not sent as `application/json`",
        ));
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the body is not a retry: {e}")))?
    };
    let engine = Arc::clone(&api.engine);
    let (asked, from, actor) = (id.clone(), request.from.clone(), caller.actor.clone());
    let outcome = blocking(move || {
        engine
            .retry(&asked, from.as_deref(), &actor, Box::new(Quiet))
            .map(|_handle| ())
    })
    .await?;
    use weft_engine::RetryError;
    let refused = |status, code: &'static str, e: &RetryError| {
        Err(ApiError::new(status, code, e.to_string()))
    };
    match outcome {
        // Taken in here, or durable and left to whichever host claims it.
        Ok(()) | Err(RetryError::Resume { .. }) => {
            api.audit(&caller, "run.retry", &id, json!({ "from": request.from }))
                .await;
            let run = own_run(&api, &caller, &id).await?;
            Ok(Json(
                json!({ "id": id, "retried": true, "state": run.state }),
            ))
        }
        Err(RetryError::NotFound(_)) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_run",
            format!("no run `{id}`"),
        )),
        Err(e @ RetryError::UnknownStep { .. }) => {
            refused(StatusCode::NOT_FOUND, "unknown_step", &e)
        }
        Err(e @ RetryError::NotEnded { .. }) => refused(StatusCode::CONFLICT, "run_not_ended", &e),
        Err(e @ RetryError::NotFailed { .. }) => refused(StatusCode::CONFLICT, "not_failed", &e),
        Err(e @ (RetryError::NotRetryable { .. } | RetryError::Child { .. })) => {
            refused(StatusCode::CONFLICT, "not_retryable", &e)
        }
        Err(RetryError::Store(e)) => Err(e.into()),
    }
}

/// `DELETE /v1/runs/{id}`: an ended run goes, with its step records.
async fn delete_run(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    own_run(&api, &caller, &id).await?;
    caller.need(Right::Operate)?;
    let services = api.services.clone();
    let asked = id.clone();
    match blocking(move || services.delete_run(&asked)).await? {
        Ok(()) => {
            api.audit(&caller, "run.delete", &id, Value::Null).await;
            Ok(Json(json!({ "id": id, "deleted": true })))
        }
        Err(weft_store::StoreError::Refused(weft_store::Refused::Needed { why, .. })) => {
            Err(ApiError::new(
                StatusCode::CONFLICT,
                "run_not_ended",
                format!("run `{id}` cannot be deleted: {why}"),
            ))
        }
        // `NotFound` is `404 unknown_run`.
        Err(e) => Err(e.into()),
    }
}

/// The stored names in a trigger's record.
const SCHEDULE_NAMES: &[&str] = &["key", "workflow"];

async fn list_schedules(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let store = Arc::clone(api.engine.store());
    let rows = blocking(move || store.schedules())
        .await?
        .map_err(ApiError::from)?;
    let rows: Vec<Value> = rows
        .iter()
        .filter(|row| caller.owns(&row.workflow))
        .map(|row| shown(row, SCHEDULE_NAMES))
        .collect();
    Ok(Json(json!({ "schedules": rows })))
}

async fn pause_schedule(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path((workflow, trigger, action)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let paused = match action.as_str() {
        "pause" => true,
        "resume" => false,
        _ => return Err(not_found().await),
    };
    let shown_key = format!("{workflow}/{trigger}");
    let missing = || unknown_trigger(&workflow, &trigger);
    let key = trigger_key(&caller, &workflow, &trigger)?;
    let store = Arc::clone(api.engine.store());
    let asked = key.clone();
    let exists = blocking(move || store.schedules())
        .await??
        .iter()
        .any(|row| row.key == asked);
    if !exists {
        return Err(missing());
    }
    caller.need(Right::Deploy)?;
    let services = api.services.clone();
    let asked = key.clone();
    match blocking(move || services.set_schedule_paused(&asked, paused)).await? {
        Ok(row) => {
            api.audit(
                &caller,
                &format!("schedule.{action}"),
                &shown_key,
                Value::Null,
            )
            .await;
            Ok(Json(json!({ "schedule": shown(&row, SCHEDULE_NAMES) })))
        }
        Err(ScheduleRefused::UnknownTrigger(_)) => Err(missing()),
        // The stored spec no longer compiles: not the request's fault.
        Err(ScheduleRefused::Schedule(e @ ScheduleError::Invalid(_))) => {
            Err(ApiError::internal(e.to_string()))
        }
        Err(e) => Err(schedule_refused(e, &shown_key)),
    }
}

/// `DELETE /v1/schedules/{workflow}/{trigger}`: removes a trigger added
/// by hand.
async fn remove_schedule(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path((workflow, trigger)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let shown_key = format!("{workflow}/{trigger}");
    let missing = || unknown_trigger(&workflow, &trigger);
    let key = trigger_key(&caller, &workflow, &trigger)?;
    caller.need(Right::Deploy)?;
    let services = api.services.clone();
    match blocking(move || services.remove_schedule(&key)).await? {
        Ok(row) => {
            api.audit(&caller, "schedule.remove", &shown_key, Value::Null)
                .await;
            Ok(Json(json!({ "schedule": shown(&row, SCHEDULE_NAMES) })))
        }
        Err(ScheduleRefused::UnknownTrigger(_)) => Err(missing()),
        Err(e) => Err(schedule_refused(e, &shown_key)),
    }
}

/// `404 unknown_schedule` for trigger `trigger` of `workflow`, as the
/// caller names them.
fn unknown_trigger(workflow: &str, trigger: &str) -> ApiError {
    ApiError::not_found(&weft_store::What::Schedule(format!("{workflow}/{trigger}")))
}

/// The store's key of trigger `trigger` of the caller's workflow
/// `workflow`; a name no workflow of the caller can have is unknown.
fn trigger_key(caller: &Caller, workflow: &str, trigger: &str) -> Result<String, ApiError> {
    caller
        .name(workflow)
        .map(|id| format!("{id}/{trigger}"))
        .ok_or_else(|| unknown_trigger(workflow, trigger))
}

/// A refused trigger operation as the API answers it.
fn schedule_refused(e: ScheduleRefused, workflow: &str) -> ApiError {
    match e {
        ScheduleRefused::UnknownWorkflow(_) => unknown_workflow(workflow),
        ScheduleRefused::UnknownTrigger(key) => {
            ApiError::not_found(&weft_store::What::Schedule(key))
        }
        ScheduleRefused::Schedule(ScheduleError::Invalid(message)) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_schedule",
            format!("schedule.{message}"),
        ),
        ScheduleRefused::Schedule(ScheduleError::Exists(key)) => ApiError::new(
            StatusCode::CONFLICT,
            "schedule_exists",
            format!("trigger `{}` exists already", weft_core::tenant::bare(&key)),
        ),
        ScheduleRefused::Schedule(ScheduleError::Declared(_)) => ApiError::new(
            StatusCode::CONFLICT,
            "schedule_declared",
            format!(
                "trigger `{workflow}` is declared in its workflow's file; remove it there and deploy"
            ),
        ),
        ScheduleRefused::Schedule(e @ ScheduleError::Contended(_)) => {
            ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
        }
        ScheduleRefused::Schedule(ScheduleError::Store(e)) => e.into(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddScheduleRequest {
    workflow: String,
    schedule: weft_model::ScheduleSpec,
}

async fn add_schedule(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<AddScheduleRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(request) = body.map_err(ApiError::from)?;
    let workflow = caller
        .name(&request.workflow)
        .ok_or_else(|| unknown_workflow(&request.workflow))?;
    caller.need(Right::Deploy)?;
    let services = api.services.clone();
    let added = blocking(move || services.add_schedule(&workflow, request.schedule, "api")).await?;
    match added {
        Ok(row) => {
            api.audit(
                &caller,
                "schedule.add",
                weft_core::tenant::bare(&row.key),
                Value::Null,
            )
            .await;
            Ok((
                StatusCode::CREATED,
                Json(json!({ "schedule": shown(&row, SCHEDULE_NAMES) })),
            ))
        }
        Err(e) => Err(schedule_refused(e, &request.workflow)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{name}` matches one segment, `{*name}` the rest of the path.
    fn matches(route: &str, documented: &str) -> bool {
        let route: Vec<&str> = route.split('/').collect();
        let documented: Vec<&str> = documented.split('/').collect();
        for (i, segment) in route.iter().enumerate() {
            if segment.starts_with("{*") {
                return documented.len() > i;
            }
            match documented.get(i) {
                Some(d) if d == segment => {}
                Some(d) if d.starts_with('{') && segment.starts_with('{') => {}
                _ => return false,
            }
        }
        route.len() == documented.len()
    }

    #[test]
    fn the_openapi_document_holds_the_workflow_schema_with_every_reference_resolved() {
        let spec = openapi::spec();
        let schemas = &spec["components"]["schemas"];
        assert_eq!(schemas["Workflow"]["title"], "weft workflow");
        assert_eq!(
            spec["paths"]["/v1/workflows"]["post"]["requestBody"]["content"]["application/yaml"]["schema"]
                ["$ref"],
            "#/components/schemas/Workflow"
        );
        // Every reference names a component that exists.
        let text = spec.to_string();
        assert!(!text.contains("#/$defs/"));
        for part in text.split("\"#/components/schemas/").skip(1) {
            let name = &part[..part.find('"').unwrap()];
            assert!(schemas.get(name).is_some(), "no component {name}");
        }
    }

    #[test]
    fn every_route_is_in_the_openapi_document() {
        let spec = openapi::spec();
        let paths = spec["paths"].as_object().unwrap();
        for (route, _) in routes() {
            assert!(
                paths.keys().any(|documented| matches(route, documented)),
                "route {route} is not in the OpenAPI document"
            );
        }
        assert!(!matches("/v1/runs/{id}", "/v1/runs/{id}/steps"));
        assert!(matches(
            "/v1/runs/{id}/steps/{*rest}",
            "/v1/runs/{id}/steps/{step}/actions"
        ));
    }
}
