//! The HTTP API, under `/v1`, in its first form: start runs, read them back,
//! list the workflows served, and a health check. JSON in and out; every
//! error is `{"error": {"code": ..., "message": ...}}` with a stable code.
//!
//! | method and path     | what it does                                      |
//! |---------------------|---------------------------------------------------|
//! | `GET /v1/health`    | `{"status": "ok"}`                                |
//! | `GET /v1/workflows` | the workflows served: id, version, steps          |
//! | `POST /v1/runs`     | starts `{"workflow": id, "input": {...}}`; answers `201` once the run is durably recorded |
//! | `GET /v1/runs`      | the newest runs; `?limit=N` (default 20, at most 1000), `&workflow=ID`, `&state=running\|succeeded\|failed` |
//! | `GET /v1/runs/{id}` | one run and its step records                      |
//! | `POST /v1/runs/{id}/cancel` | cancels a run; `409 run_ended` if it had ended |
//! | `GET /v1/schedules` | every cron trigger, with its next fire            |
//! | `POST /v1/schedules` | adds `{"workflow": id, "schedule": {"cron": ..., ...}}` to a served workflow; `201`, or `409 schedule_exists` |
//! | `POST /v1/schedules/{workflow}/{trigger}/pause` (or `/resume`) | pauses or resumes a trigger |

mod error;

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::engine::{Engine, Quiet, StartError};
use crate::store::RunFilter;
use crate::workflows::WorkflowDir;

pub use error::ApiError;

/// The largest request body accepted.
pub const MAX_BODY: usize = 4 << 20;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct Api {
    engine: Arc<Engine>,
    workflows: Arc<WorkflowDir>,
}

impl Api {
    /// An API over `engine`, serving `workflows`.
    pub fn new(engine: Arc<Engine>, workflows: Arc<WorkflowDir>) -> Self {
        Self { engine, workflows }
    }

    /// The routes, ready for `axum::serve`.
    pub fn router(self) -> Router {
        Router::new()
            .route("/v1/health", get(health))
            .route("/v1/workflows", get(list_workflows))
            .route("/v1/runs", get(list_runs).post(start_run))
            .route("/v1/runs/{id}", get(get_run))
            .route("/v1/runs/{id}/cancel", post(cancel_run))
            .route("/v1/schedules", get(list_schedules).post(add_schedule))
            .route(
                "/v1/schedules/{workflow}/{trigger}/{action}",
                post(pause_schedule),
            )
            .fallback(not_found)
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .with_state(self)
    }
}

async fn health() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

async fn list_workflows(State(api): State<Api>) -> Json<Value> {
    let workflows: Vec<Value> = api
        .workflows
        .iter()
        .map(|wf| {
            json!({
                "id": wf.id,
                "version": wf.version,
                "description": wf.description,
                "steps": wf.steps.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            })
        })
        .collect();
    Json(json!({ "workflows": workflows }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StartRequest {
    workflow: String,
    #[serde(default)]
    input: Option<Value>,
}

async fn start_run(
    State(api): State<Api>,
    body: Result<Json<StartRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(request) = body.map_err(ApiError::from)?;
    let workflow = api.workflows.get(&request.workflow).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_workflow",
            format!("no workflow `{}` is served here", request.workflow),
        )
    })?;
    let input = request.input.unwrap_or_else(|| json!({}));
    let engine = Arc::clone(&api.engine);
    // Resolving plugins may compile, and recording waits for a sync.
    let started = tokio::task::spawn_blocking(move || {
        let mut handle = engine.start(workflow, input, Box::new(Quiet))?;
        handle.recorded()?;
        Ok::<_, StartError>(handle.id().to_owned())
    })
    .await
    .map_err(|e| ApiError::internal(format!("the start task failed: {e}")))?;
    let id = started.map_err(ApiError::from)?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "id": id, "workflow": request.workflow, "state": "running" })),
    ))
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
}

async fn list_runs(
    State(api): State<Api>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
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
        ..RunFilter::default()
    };
    let store = Arc::clone(api.engine.store());
    let runs = tokio::task::spawn_blocking(move || store.runs(&filter, limit))
        .await
        .map_err(|e| ApiError::internal(format!("the read task failed: {e}")))?
        .map_err(ApiError::from)?;
    Ok(Json(json!({ "runs": runs })))
}

async fn get_run(State(api): State<Api>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let store = Arc::clone(api.engine.store());
    let found = tokio::task::spawn_blocking(move || {
        let run = store.run(&id)?;
        let steps = match &run {
            Some(run) => store.steps(&run.id)?,
            None => Vec::new(),
        };
        Ok::<_, crate::store::StoreError>((id, run, steps))
    })
    .await
    .map_err(|e| ApiError::internal(format!("the read task failed: {e}")))?
    .map_err(ApiError::from)?;
    match found {
        (_, Some(run), steps) => Ok(Json(json!({ "run": run, "steps": steps }))),
        (id, None, _) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_run",
            format!("no run `{id}`"),
        )),
    }
}

async fn cancel_run(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let engine = Arc::clone(&api.engine);
    let asked = id.clone();
    let outcome = tokio::task::spawn_blocking(move || engine.cancel(&asked))
        .await
        .map_err(|e| ApiError::internal(format!("the cancel task failed: {e}")))?;
    match outcome {
        Ok(()) => Ok(Json(json!({ "id": id, "cancelled": true }))),
        Err(crate::store::StoreError::RunEnded(_)) => {
            let state = api
                .engine
                .store()
                .run(&id)
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
        Err(crate::store::StoreError::Conflict(_)) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_run",
            format!("no run `{id}`"),
        )),
        Err(e) => Err(e.into()),
    }
}

async fn list_schedules(State(api): State<Api>) -> Result<Json<Value>, ApiError> {
    let store = Arc::clone(api.engine.store());
    let rows = tokio::task::spawn_blocking(move || store.schedules())
        .await
        .map_err(|e| ApiError::internal(format!("the read task failed: {e}")))?
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
    let now = crate::clock::Clock::now(&crate::clock::SystemClock);
    let asked = key.clone();
    let row = tokio::task::spawn_blocking(move || {
        crate::engine::set_schedule_paused(store.as_ref(), &asked, paused, now)
    })
    .await
    .map_err(|e| ApiError::internal(format!("the write task failed: {e}")))?
    .map_err(ApiError::from)?;
    match row {
        Some(row) => Ok(Json(json!({ "schedule": row }))),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_schedule",
            format!("no trigger `{key}`"),
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddScheduleRequest {
    workflow: String,
    schedule: crate::model::ScheduleSpec,
}

async fn add_schedule(
    State(api): State<Api>,
    body: Result<Json<AddScheduleRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(request) = body.map_err(ApiError::from)?;
    if api.workflows.get(&request.workflow).is_none() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_workflow",
            format!("no workflow `{}` is served here", request.workflow),
        ));
    }
    let store = Arc::clone(api.engine.store());
    let now = crate::clock::Clock::now(&crate::clock::SystemClock);
    let added = tokio::task::spawn_blocking(move || {
        crate::engine::add_schedule(
            store.as_ref(),
            &request.workflow,
            request.schedule,
            "api",
            now,
        )
    })
    .await
    .map_err(|e| ApiError::internal(format!("the write task failed: {e}")))?;
    match added {
        Ok(row) => Ok((StatusCode::CREATED, Json(json!({ "schedule": row })))),
        Err(crate::engine::AddScheduleError::Invalid(message)) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_schedule",
            format!("schedule.{message}"),
        )),
        Err(e @ crate::engine::AddScheduleError::Exists(_)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "schedule_exists",
            e.to_string(),
        )),
        Err(crate::engine::AddScheduleError::Store(e)) => Err(e.into()),
    }
}
