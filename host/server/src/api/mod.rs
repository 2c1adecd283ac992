//! The HTTP API, under `/v1`: deploy workflows and plugins, start runs and
//! read them back, act on waiting steps, receive messages, and manage
//! deliveries and cron triggers. JSON in and out; every error is
//! `{"error": {"code": ..., "message": ...}}` with a stable code. The routes
//! are listed once, in [`routes`]; `GET /v1/openapi.json` describes each
//! (a test holds the two together).

mod deliver;
mod deploy;
mod error;
mod openapi;

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{MethodRouter, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::hub::Hub;
use crate::workflows::Deployments;
use weft_engine::{Engine, Quiet, StartError};
use weft_store::RunFilter;

pub use error::ApiError;

/// The largest request body accepted.
pub const MAX_BODY: usize = 4 << 20;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct Api {
    engine: Arc<Engine>,
    workflows: Arc<Deployments>,
    hub: Hub,
    /// Places for open event streams.
    streams: Arc<tokio::sync::Semaphore>,
}

impl Api {
    /// An API over `engine`, serving and deploying `workflows`, delivering
    /// through `hub`.
    pub fn new(engine: Arc<Engine>, workflows: Arc<Deployments>, hub: Hub) -> Self {
        Self {
            engine,
            workflows,
            hub,
            streams: Arc::new(tokio::sync::Semaphore::new(deliver::MAX_STREAMS)),
        }
    }

    /// The routes, ready for `axum::serve`.
    pub fn router(self) -> Router {
        let mut router = Router::new();
        for (path, methods) in routes() {
            router = router.route(path, methods);
        }
        router
            .fallback(not_found)
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .with_state(self)
    }
}

/// Every route: the router is built from this list, and a test checks
/// that the OpenAPI document describes each of them.
fn routes() -> Vec<(&'static str, MethodRouter<Api>)> {
    use axum::routing::delete;
    vec![
        ("/v1/health", get(health)),
        ("/v1/openapi.json", get(openapi::document)),
        (
            "/v1/workflows",
            get(deploy::list_workflows).post(deploy::deploy_workflow),
        ),
        ("/v1/workflows/{id}", get(deploy::get_workflow)),
        (
            "/v1/plugins",
            get(deploy::list_plugins)
                .post(deploy::add_plugin)
                .layer(DefaultBodyLimit::max(deploy::MAX_COMPONENT)),
        ),
        ("/v1/runs", get(list_runs).post(start_run)),
        ("/v1/runs/{id}", get(get_run)),
        ("/v1/runs/{id}/steps", get(get_steps)),
        ("/v1/runs/{id}/steps/{*rest}", post(deliver::act)),
        ("/v1/runs/{id}/messages", get(deliver::run_messages)),
        ("/v1/runs/{id}/cancel", post(cancel_run)),
        ("/v1/schedules", get(list_schedules).post(add_schedule)),
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

async fn health() -> Json<Value> {
    Json(json!({ "status": "ok" }))
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

async fn start_run(
    State(api): State<Api>,
    body: Result<Json<StartRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(request) = body.map_err(ApiError::from)?;
    let workflow = api
        .workflows
        .current()
        .get(&request.workflow)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_workflow",
                format!("no workflow `{}` is served here", request.workflow),
            )
        })?;
    let input = request.input.unwrap_or_else(|| json!({}));
    if let Some(key) = &request.idempotency_key
        && (key.is_empty() || key.len() > 256)
    {
        return Err(ApiError::bad_request(
            "idempotency_key: must be 1 to 256 bytes long",
        ));
    }
    let engine = Arc::clone(&api.engine);
    let key = request.idempotency_key.clone();
    // Resolving plugins may compile, and recording waits for a sync.
    let started = blocking(move || {
        if let Some(key) = &key
            && let Some(run) = engine.store().idempotent_run(key)?
        {
            return Ok::<_, StartError>(Err(run));
        }
        let mut handle = engine.start_keyed(workflow, input, Box::new(Quiet), key)?;
        match handle.recorded() {
            Ok(()) => Ok(Ok(handle.id().to_owned())),
            Err(weft_store::StoreError::Duplicate { run, .. }) => Ok(Err(run)),
            Err(e) => Err(e.into()),
        }
    })
    .await?;
    match started? {
        Ok(id) => Ok((
            StatusCode::CREATED,
            Json(json!({ "id": id, "workflow": request.workflow, "state": "running" })),
        )),
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
}

/// An RFC 3339 time or milliseconds since the epoch, from a query.
fn parse_time(field: &str, text: &str) -> Result<weft_core::clock::Timestamp, ApiError> {
    weft_core::clock::Timestamp::parse(text)
        .map_err(|message| ApiError::bad_request(format!("{field}: {message}")))
}

async fn list_runs(
    State(api): State<Api>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    let limit = query.limit.unwrap_or(20).min(1000);
    let state = query
        .state
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(|e: String| ApiError::bad_request(format!("state: {e}")))?;
    let filter = RunFilter {
        workflow: query.workflow,
        state,
        since: query
            .since
            .as_deref()
            .map(|t| parse_time("since", t))
            .transpose()?,
        until: query
            .until
            .as_deref()
            .map(|t| parse_time("until", t))
            .transpose()?,
    };
    let store = Arc::clone(api.engine.store());
    let runs = blocking(move || store.runs(&filter, limit))
        .await?
        .map_err(ApiError::from)?;
    Ok(Json(json!({ "runs": runs })))
}

async fn get_run(State(api): State<Api>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let store = Arc::clone(api.engine.store());
    let found = blocking(move || {
        let run = store.run(&id)?;
        let steps = match &run {
            Some(run) => store.steps(&run.id)?,
            None => Vec::new(),
        };
        Ok::<_, weft_store::StoreError>((id, run, steps))
    })
    .await?
    .map_err(ApiError::from)?;
    match found {
        (_, Some(run), steps) => Ok(Json(json!({ "run": run, "steps": steps }))),
        (id, None, _) => Err(ApiError::unknown_run(&id)),
    }
}

/// `GET /v1/runs/{id}/steps`: the run's step records in commit order, each
/// with its input, output or error, timing and logs.
async fn get_steps(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = Arc::clone(api.engine.store());
    let asked = id.clone();
    let found = blocking(move || {
        Ok::<_, weft_store::StoreError>(match store.run(&asked)? {
            Some(_) => Some(store.steps(&asked)?),
            None => None,
        })
    })
    .await??;
    match found {
        Some(steps) => Ok(Json(json!({ "steps": steps }))),
        None => Err(ApiError::unknown_run(&id)),
    }
}

async fn cancel_run(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let engine = Arc::clone(&api.engine);
    let asked = id.clone();
    let outcome = blocking(move || engine.cancel(&asked)).await?;
    match outcome {
        Ok(()) => Ok(Json(json!({ "id": id, "cancelled": true }))),
        Err(weft_store::StoreError::RunEnded(_)) => {
            let store = Arc::clone(api.engine.store());
            let asked = id.clone();
            let state = blocking(move || store.run(&asked))
                .await?
                .ok()
                .flatten()
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

async fn list_schedules(State(api): State<Api>) -> Result<Json<Value>, ApiError> {
    let store = Arc::clone(api.engine.store());
    let rows = blocking(move || store.schedules())
        .await?
        .map_err(ApiError::from)?;
    Ok(Json(json!({ "schedules": rows })))
}

async fn pause_schedule(
    State(api): State<Api>,
    Path((workflow, trigger, action)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let paused = match action.as_str() {
        "pause" => true,
        "resume" => false,
        _ => return Err(not_found().await),
    };
    let key = format!("{workflow}/{trigger}");
    let store = Arc::clone(api.engine.store());
    let now = api.engine.clock().now();
    let asked = key.clone();
    let row =
        blocking(move || weft_engine::set_schedule_paused(store.as_ref(), &asked, paused, now))
            .await?
            .map_err(|e| match e {
                weft_engine::ScheduleError::Store(e) => ApiError::from(e),
                e @ weft_engine::ScheduleError::Contended(_) => {
                    ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
                }
                // The stored spec no longer compiles: not the request's
                // fault.
                e => ApiError::internal(e.to_string()),
            })?;
    match row {
        Some(row) => Ok(Json(json!({ "schedule": row }))),
        None => Err(ApiError::not_found(&weft_store::What::Schedule(key))),
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
    body: Result<Json<AddScheduleRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(request) = body.map_err(ApiError::from)?;
    if api.workflows.current().get(&request.workflow).is_none() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_workflow",
            format!("no workflow `{}` is served here", request.workflow),
        ));
    }
    let store = Arc::clone(api.engine.store());
    let now = api.engine.clock().now();
    let added = blocking(move || {
        weft_engine::add_schedule(
            store.as_ref(),
            &request.workflow,
            request.schedule,
            "api",
            now,
        )
    })
    .await?;
    match added {
        Ok(row) => Ok((StatusCode::CREATED, Json(json!({ "schedule": row })))),
        Err(weft_engine::ScheduleError::Invalid(message)) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_schedule",
            format!("schedule.{message}"),
        )),
        Err(e @ weft_engine::ScheduleError::Exists(_)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "schedule_exists",
            e.to_string(),
        )),
        Err(e @ weft_engine::ScheduleError::Contended(_)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            e.to_string(),
        )),
        Err(weft_engine::ScheduleError::Store(e)) => Err(e.into()),
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
