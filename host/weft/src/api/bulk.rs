//! `POST /v1/runs/bulk`: one action on every run of the caller's tenant
//! that a filter matches, a page at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Extension, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Api, ApiError, Caller, blocking};
use weft_store::{Right, RunFilter, RunRecord, RunState, StoreError};

/// The most runs one request acts on (a dry run counts them all).
pub(super) const MAX_PAGE: usize = 10_000;

/// The runs cancelled at once: the group commit batches their writes.
const WORKERS: usize = 8;

/// Runs not changed, listed in an answer, at most.
const MAX_LISTED: usize = 100;

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Action {
    Cancel,
    Retry,
    Pause,
    Resume,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Retry => "retry",
            Self::Pause => "pause",
            Self::Resume => "resume",
        }
    }

    /// Whether the action would change `run`, as far as its record says.
    fn would_change(self, run: &RunRecord) -> bool {
        match self {
            Self::Cancel => run.state == RunState::Running,
            Self::Pause => run.state == RunState::Running && run.paused.is_none(),
            Self::Resume => run.state == RunState::Running && run.paused.is_some(),
            Self::Retry => {
                matches!(
                    run.state,
                    RunState::Failed | RunState::TimedOut | RunState::Cancelled
                ) && run.parent.is_none()
            }
        }
    }
}

/// What the action did to one run.
enum Outcome {
    Changed,
    /// Left as it was, and why (nothing went wrong).
    Unchanged(String),
    /// It should have changed, and the host failed.
    Failed(String),
}

#[derive(Debug, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Filter {
    /// Only this workflow's runs.
    #[serde(default)]
    workflow: Option<String>,
    /// Only runs in this state.
    #[serde(default)]
    state: Option<String>,
    /// Only runs created at or after this time (RFC 3339).
    #[serde(default)]
    since: Option<String>,
    /// Only runs created before this time.
    #[serde(default)]
    until: Option<String>,
    /// Only runs following this revision of `workflow`.
    #[serde(default)]
    revision: Option<u32>,
    /// Only runs that ended with this error code.
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Request {
    action: Action,
    #[serde(default)]
    filter: Filter,
    /// Count what would change, and change nothing.
    #[serde(default)]
    dry_run: bool,
    /// Act on at most this many runs (default and most: 10,000); the
    /// answer's `next` continues.
    #[serde(default)]
    limit: Option<usize>,
    /// Continue after this run (a previous answer's `next`).
    #[serde(default)]
    before: Option<String>,
}

/// Whether `run` passes what the store's filter cannot say.
fn keeps(run: &RunRecord, digest: Option<&str>, error: Option<&str>) -> bool {
    digest.is_none_or(|d| run.definition == d)
        && error.is_none_or(|code| run.error.as_ref().is_some_and(|e| e.error.code == code))
}

/// `POST /v1/runs/bulk`: `{"action": "cancel" | "retry", "filter": {workflow, state,
/// since, until, revision, error}, "dry_run", "limit", "before"}`. Answers
/// how many runs matched and how many changed, the first runs that did
/// not change with why, and `next` when runs are left past this page.
pub(super) async fn bulk(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<Request>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(request) = body.map_err(ApiError::from)?;
    caller.need(Right::Operate)?;
    let name = request.action.name();
    let f = &request.filter;
    if f.error.is_some() && matches!(request.action, Action::Cancel) {
        return Err(ApiError::bad_request(
            "filter.error: only ended runs have an error, and cancel acts on running ones",
        ));
    }
    // A name no workflow of the caller's can have matches nothing: it is
    // answered as a made-up name is, and nothing is looked up.
    if f.workflow
        .as_deref()
        .is_some_and(|w| caller.name(w).is_none())
    {
        return Ok(Json(json!({
            "action": name, "dry_run": request.dry_run, "matched": 0, "changed": 0,
            "would_change": 0, "failed": 0, "unchanged": [], "next": null,
        })));
    }
    let filter = super::run_filter(
        &caller,
        super::RunsAsked {
            workflow: f.workflow.as_deref(),
            state: f.state.as_deref(),
            since: f.since.as_deref(),
            until: f.until.as_deref(),
        },
        "filter.",
    )?;
    let digest = match (f.revision, &filter.workflow) {
        (None, _) => None,
        (Some(_), None) => {
            return Err(ApiError::bad_request(
                "filter.revision: name the workflow too (filter.workflow)",
            ));
        }
        (Some(revision), Some(stored)) => {
            let deployments = Arc::clone(&api.workflows);
            let stored = stored.clone();
            let shown = blocking(move || deployments.definition(&stored, revision)).await??;
            match shown {
                Some((record, _)) => Some(record.digest),
                // The same answer whether the workflow exists or not.
                None => {
                    return Err(ApiError::bad_request(format!(
                        "filter.revision: workflow `{}` has no revision {revision}",
                        f.workflow.as_deref().unwrap_or_default()
                    )));
                }
            }
        }
    };
    let filter = RunFilter {
        before: request.before.clone(),
        ..filter
    };
    let limit = request.limit.unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE);
    let error = f.error.clone();
    let store = Arc::clone(api.engine.store());
    let dry_run = request.dry_run;
    let matched: Vec<RunRecord> = blocking(move || {
        let mut matched = Vec::new();
        // The store filters all but the revision and the error: without
        // those, one more than a page tells whether a next page exists.
        let read = if dry_run || digest.is_some() || error.is_some() {
            usize::MAX
        } else {
            limit + 1
        };
        for run in store.runs(&filter, read)? {
            if keeps(&run, digest.as_deref(), error.as_deref()) {
                matched.push(run);
                if !dry_run && matched.len() > limit {
                    break;
                }
            }
        }
        Ok::<_, StoreError>(matched)
    })
    .await??;
    let mut matched = matched;
    // One more than a page was read: there is a next page.
    let next = (!dry_run && matched.len() > limit).then(|| {
        matched.truncate(limit);
        matched.last().map(|run| run.id.clone())
    });
    let next = next.flatten();
    let count = matched.len();
    if dry_run {
        let action = request.action;
        let would = matched.iter().filter(|r| action.would_change(r)).count();
        return Ok(Json(json!({
            "action": name, "dry_run": true, "matched": count, "would_change": would,
        })));
    }
    let engine = Arc::clone(&api.engine);
    let action = request.action;
    let access = Arc::clone(&api.access);
    let audit_caller = caller.clone();
    let detail = json!({
        "filter": serde_json::to_value(&request.filter).unwrap_or_default(),
        "before": request.before, "limit": limit, "next": next,
    });
    // A child whose parent is cancelled here goes with it: cancelled on
    // its own first, it would fail its parent's step instead. Only a
    // running parent is cancelled, and takes its children along.
    let page: std::collections::HashSet<String> = matched
        .iter()
        .filter(|r| !r.state.is_terminal())
        .map(|r| r.id.clone())
        .collect();
    let actor = caller.actor.clone();
    let (changed, failed, unchanged) = blocking(move || {
        let next_run = AtomicUsize::new(0);
        let changed = AtomicUsize::new(0);
        let failed = AtomicUsize::new(0);
        let unchanged = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..WORKERS.min(matched.len()) {
                scope.spawn(|| {
                    loop {
                        let n = next_run.fetch_add(1, Ordering::Relaxed);
                        let Some(run) = matched.get(n) else { break };
                        let outcome = match action {
                            Action::Cancel => cancel(&engine, run, &page),
                            Action::Retry => retry(&engine, run, &actor),
                            Action::Pause => pause(&engine, run, &actor),
                            Action::Resume => resume(&engine, run),
                        };
                        let (why, failure) = match outcome {
                            Outcome::Changed => {
                                changed.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            Outcome::Unchanged(why) => (why, false),
                            Outcome::Failed(why) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                (why, true)
                            }
                        };
                        let mut unchanged = weft_core::lock(&unchanged);
                        // Failures first: they are what a caller must see.
                        if unchanged.len() < MAX_LISTED || failure {
                            unchanged
                                .push(json!({ "run": run.id, "reason": why, "failed": failure }));
                        }
                    }
                });
            }
        });
        let (changed, failed) = (changed.into_inner(), failed.into_inner());
        let mut unchanged = unchanged.into_inner().unwrap_or_else(|e| e.into_inner());
        unchanged.sort_by_key(|u| u["failed"] != true);
        unchanged.truncate(MAX_LISTED);
        // Recorded here, so that a caller who hangs up leaves it all the same.
        let mut detail = detail;
        detail["matched"] = count.into();
        detail["changed"] = changed.into();
        detail["failed"] = failed.into();
        access.audit(&audit_caller, "runs.bulk", name, detail);
        (changed, failed, unchanged)
    })
    .await?;
    Ok(Json(json!({
        "action": name,
        "dry_run": false,
        "matched": count,
        "changed": changed,
        "failed": failed,
        "unchanged": unchanged,
        "next": next,
    })))
}

/// Cancels `run`, unless it ended, or its parent is cancelled in this page
/// (which takes it along: counted as changed).
fn cancel(
    engine: &weft_engine::Engine,
    run: &RunRecord,
    page: &std::collections::HashSet<String>,
) -> Outcome {
    if run.state.is_terminal() {
        return Outcome::Unchanged("ended".to_owned());
    }
    if run.parent.as_ref().is_some_and(|p| page.contains(&p.run)) {
        return Outcome::Changed;
    }
    match engine.cancel(&run.id) {
        Ok(()) => Outcome::Changed,
        Err(StoreError::RunEnded(_)) => Outcome::Unchanged("ended".to_owned()),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// Retries `run` from its failed step, as `actor`.
fn retry(engine: &weft_engine::Engine, run: &RunRecord, actor: &str) -> Outcome {
    use weft_engine::RetryError;
    match engine.retry(&run.id, None, actor, Box::new(weft_engine::Quiet)) {
        // Taken in here, or durable and driven wherever it is claimed.
        Ok(_) | Err(RetryError::Resume { .. }) => Outcome::Changed,
        Err(RetryError::Store(e)) => Outcome::Failed(e.to_string()),
        Err(e) => Outcome::Unchanged(e.to_string()),
    }
}

/// Pauses `run`, as `actor`: now, or once its calls under way are done.
fn pause(engine: &weft_engine::Engine, run: &RunRecord, actor: &str) -> Outcome {
    use weft_engine::PauseError;
    match engine.pause(&run.id, actor) {
        Ok(_) => Outcome::Changed,
        Err(PauseError::Store(e)) => Outcome::Failed(e.to_string()),
        Err(e) => Outcome::Unchanged(e.to_string()),
    }
}

/// Resumes paused `run`.
fn resume(engine: &weft_engine::Engine, run: &RunRecord) -> Outcome {
    use weft_engine::PauseError;
    match engine.unpause(&run.id, Box::new(weft_engine::Quiet)) {
        Ok(_) => Outcome::Changed,
        Err(PauseError::Store(e)) => Outcome::Failed(e.to_string()),
        Err(e) => Outcome::Unchanged(e.to_string()),
    }
}
