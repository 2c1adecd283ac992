//! What the web UI reads beyond the plain API: a run's workflow as a
//! graph, the `await` steps waiting for an answer; and the UI itself,
//! whose files are embedded in the binary (`host/weft/ui`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Api, ApiError, Caller, blocking, own_run};
use weft_model::{Step, StepKind};
use weft_store::{RunState, StoreError};

/// The UI's files.
const INDEX: &str = include_str!("../../ui/index.html");
const SCRIPT: &str = include_str!("../../ui/app.js");
const STYLE: &str = include_str!("../../ui/app.css");

/// The UI takes nothing from anywhere but this host.
const POLICY: &str = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'";

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`: the UI's page. It asks for a token itself when the host needs
/// one.
pub(super) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// `GET /ui/app.js`.
pub(super) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /favicon.ico`, which browsers ask for by themselves: no icon
/// (`204`), open to all like the page.
pub(super) async fn favicon() -> axum::http::StatusCode {
    axum::http::StatusCode::NO_CONTENT
}

/// `GET /ui/app.css`.
pub(super) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// A step as a node of the graph: its id, kind, a short label, and its
/// branches (each a sequence of nodes).
fn node(step: &Step) -> Value {
    let branch = |label: &str, steps: &[Step]| json!({ "label": label, "steps": steps.iter().map(node).collect::<Vec<_>>() });
    let (kind, label, mut branches) = match &step.kind {
        StepKind::Call(call) => ("call", call.uses.to_string(), Vec::new()),
        StepKind::Sleep(_) => ("sleep", "sleep".to_owned(), Vec::new()),
        StepKind::Subflow(subflow) => ("subflow", subflow.workflow.clone(), Vec::new()),
        StepKind::Emit(emit) => ("emit", emit.channel.clone(), Vec::new()),
        StepKind::Await(_) => ("await", "await".to_owned(), Vec::new()),
        StepKind::Parallel(children) => (
            "parallel",
            format!("{} branches", children.len()),
            children
                .iter()
                .map(|child| branch(&child.id, std::slice::from_ref(child)))
                .collect(),
        ),
        StepKind::Switch(cases) => (
            "switch",
            format!("{} cases", cases.len()),
            cases
                .iter()
                .enumerate()
                .map(|(n, case)| {
                    let label = match &case.condition {
                        Some(_) => format!("case {}", n + 1),
                        None => "default".to_owned(),
                    };
                    branch(&label, &case.steps)
                })
                .collect(),
        ),
        StepKind::Foreach {
            steps, concurrency, ..
        } => (
            "foreach",
            format!("concurrency {concurrency}"),
            vec![branch("each", steps)],
        ),
        StepKind::While {
            steps,
            max_iterations,
            ..
        } => (
            "while",
            format!("at most {max_iterations}"),
            vec![branch("while", steps)],
        ),
    };
    branches.extend(step.catch.iter().map(|case| branch("catch", &case.steps)));
    json!({ "id": step.id, "kind": kind, "label": label, "branches": branches })
}

/// `GET /v1/runs/{id}/graph`: the workflow the run is pinned to, as a
/// graph of its steps (drawn from the stored definition).
pub(super) async fn graph(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let run = own_run(&api, &caller, &id).await?;
    let store = Arc::clone(api.engine.store());
    let digest = run.definition.clone();
    let definition = blocking(move || store.definition(&digest))
        .await??
        .ok_or_else(|| {
            ApiError::internal(format!("run {id}'s definition {} is gone", run.definition))
        })?;
    let format = if definition.format == "json" {
        weft_model::Format::Json
    } else {
        weft_model::Format::Yaml
    };
    let workflow = weft_model::parse_stored(&definition.source, format, &definition.origin)
        .map_err(|e| ApiError::internal(format!("run {id}'s definition does not parse: {e}")))?;
    let catch: Vec<Value> = workflow
        .catch
        .iter()
        .map(|case| json!({ "label": "catch", "steps": case.steps.iter().map(node).collect::<Vec<_>>() }))
        .collect();
    Ok(Json(json!({
        "workflow": weft_core::tenant::bare(&run.workflow),
        "steps": workflow.steps.iter().map(node).collect::<Vec<_>>(),
        "catch": catch,
    })))
}

/// Running runs looked at for waiting steps, newest first.
const AWAITS_SCANNED: usize = 1000;

/// `GET /v1/awaits`: the `await` steps of the caller's running runs that
/// wait for an answer, newest run first (of its newest 1,000 running
/// runs; finding them reads the tenant's runs newest first).
pub(super) async fn awaits(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let store = Arc::clone(api.engine.store());
    let tenant = caller.tenant.clone();
    let awaits = blocking(move || {
        // Runs that wait are suspended, and out of the index of runs to
        // resume: they are found among the tenant's runs, newest first.
        let filter = weft_store::RunFilter {
            tenant: Some(tenant),
            state: Some(RunState::Running),
            ..weft_store::RunFilter::default()
        };
        let runs = store.runs(&filter, AWAITS_SCANNED)?;
        let mut found = Vec::new();
        for run in runs {
            if run.state != RunState::Running {
                continue;
            }
            // The newest record of each path says whether it waits.
            let mut last = BTreeMap::new();
            for step in store.steps(&run.id)? {
                last.insert(step.path.clone(), step);
            }
            for (path, step) in last {
                if step.awaiting && step.output.is_none() && step.error.is_none() && !step.skipped {
                    found.push(json!({
                        "run": run.id,
                        "workflow": weft_core::tenant::bare(&run.workflow),
                        "path": path,
                        "step_id": step.step_id,
                        "since": step.started_at,
                        "input": step.input,
                    }));
                }
            }
        }
        Ok::<_, StoreError>(found)
    })
    .await??;
    Ok(Json(json!({ "awaits": awaits })))
}
