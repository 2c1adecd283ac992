//! `POST /v1/runs/bulk`: one action on every run of the caller's tenant
//! that a filter matches, a page at a time.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Extension, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Api, ApiError, Caller, blocking};
use crate::services::{Bulk, BulkAction, MAX_BULK_PAGE};
use weft_store::{Right, RunFilter};

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
    action: BulkAction,
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

/// `POST /v1/runs/bulk`: `{"action": "cancel" | "retry" | "pause" | "resume", "filter": {workflow, state,
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
    if f.error.is_some() && request.action == BulkAction::Cancel {
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
    let limit = request
        .limit
        .unwrap_or(MAX_BULK_PAGE)
        .clamp(1, MAX_BULK_PAGE);
    let bulk = Bulk {
        action: request.action,
        filter,
        digest,
        error: f.error.clone(),
        dry_run: request.dry_run,
        limit,
        actor: caller.actor.clone(),
    };
    let services = api.services.clone();
    let mut detail = json!({
        "filter": serde_json::to_value(&request.filter).unwrap_or_default(),
        "before": request.before, "limit": limit,
    });
    let audited = caller.clone();
    let dry_run = request.dry_run;
    let done = blocking(move || {
        let done = services.bulk(bulk)?;
        if !dry_run {
            // Recorded here, so that a caller who hangs up leaves it all the same.
            detail["next"] = json!(done.next);
            detail["matched"] = done.matched.into();
            detail["changed"] = done.changed.into();
            detail["failed"] = done.failed.into();
            services.audit(&audited.tenant, &audited.actor, "runs.bulk", name, detail);
        }
        Ok::<_, weft_store::StoreError>(done)
    })
    .await??;
    if dry_run {
        return Ok(Json(json!({
            "action": name, "dry_run": true, "matched": done.matched,
            "would_change": done.would_change,
        })));
    }
    Ok(Json(json!({
        "action": name,
        "dry_run": false,
        "matched": done.matched,
        "changed": done.changed,
        "failed": done.failed,
        "unchanged": done.unchanged,
        "next": done.next,
    })))
}
