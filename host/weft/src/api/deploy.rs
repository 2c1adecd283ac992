//! Deploying: workflows (every deployment a new version) and plugins (the
//! registry, by digest).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Api, ApiError, Caller, blocking, shown as named};
use weft_core::tenant;
use weft_model::{Format, Workflow};
use weft_store::{DeploymentRecord, Right};

use crate::services::MigrateRefused;
use crate::services::deployments::DeployError;

/// The largest component `POST /v1/plugins` accepts.
pub const MAX_COMPONENT: usize = 64 << 20;

fn summary(workflow: &Workflow, head: Option<&DeploymentRecord>) -> Value {
    json!({
        "id": tenant::bare(&workflow.id),
        "version": workflow.version,
        "description": workflow.description,
        "steps": workflow.steps.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        "revision": head.map(|h| h.revision),
        "digest": head.map(|h| h.digest.as_str()),
    })
}

/// A raw body that could not be read: over the limit, or cut short.
fn unreadable(rejection: BytesRejection) -> ApiError {
    ApiError::rejected(rejection.status(), rejection.body_text())
}

use super::unknown_workflow;

/// The stored names in a deployment's record.
const DEPLOYMENT_NAMES: &[&str] = &["workflow"];

/// `GET /v1/workflows`: every workflow of the caller's tenant served,
/// with its newest revision.
pub(super) async fn list_workflows(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let deployments = Arc::clone(&api.workflows);
    let listed = blocking(move || {
        let heads: std::collections::HashMap<String, DeploymentRecord> = deployments
            .all_versions()?
            .into_iter()
            .map(|r| (r.workflow.clone(), r))
            .collect();
        let current = deployments.current();
        Ok::<_, weft_store::StoreError>(
            current
                .iter()
                .filter(|wf| caller.owns(&wf.id))
                .map(|wf| summary(wf, heads.get(&wf.id)))
                .collect::<Vec<_>>(),
        )
    })
    .await??;
    Ok(Json(json!({ "workflows": listed })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RevisionQuery {
    #[serde(default)]
    revision: Option<u32>,
}

/// `GET /v1/workflows/{id}`: the served version with its text, and every
/// version; `?revision=N` shows that version's text instead.
pub(super) async fn get_workflow(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    query: Result<Query<RevisionQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    let deployments = Arc::clone(&api.workflows);
    let asked = caller.name(&id).ok_or_else(|| unknown_workflow(&id))?;
    let stored = asked.clone();
    let store = Arc::clone(api.engine.store());
    let (versions, shown, unfinished) = blocking(move || {
        let versions = deployments.versions(&asked)?;
        // Only a workflow with revisions has runs to count.
        let unfinished = if versions.is_empty() {
            std::collections::HashMap::new()
        } else {
            unfinished_by_digest(store.as_ref(), &asked)?
        };
        let revision = match query.revision {
            Some(revision) => Some(revision),
            None if deployments.current().get(&asked).is_some() => {
                versions.last().map(|v| v.revision)
            }
            None => None,
        };
        let shown = match revision {
            Some(revision) => deployments.definition(&asked, revision)?,
            None => None,
        };
        Ok::<_, weft_store::StoreError>((versions, shown, unfinished))
    })
    .await??;
    let served = api.workflows.current().get(&stored);
    let Some((record, definition)) = shown else {
        return Err(match query.revision {
            Some(revision) if !versions.is_empty() => ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_revision",
                format!(
                    "workflow `{id}` has no revision {revision} (it has 1 to {})",
                    versions.len()
                ),
            ),
            _ => unknown_workflow(&id),
        });
    };
    let served_revision = served
        .as_ref()
        .and_then(|_| versions.last().map(|v| v.revision));
    Ok(Json(json!({
        "workflow": {
            "id": id,
            "revision": record.revision,
            "version": record.version,
            "digest": record.digest,
            "deployed_at": record.deployed_at,
            "origin": record.origin,
            "format": definition.format,
            "source": definition.source,
            "served": served_revision == Some(record.revision),
        },
        "versions": versions
            .iter()
            .enumerate()
            .map(|(n, v)| {
                // Runs follow a definition, named by its digest: a text
                // deployed twice counts toward its newest revision.
                let newest = !versions[n + 1..].iter().any(|later| later.digest == v.digest);
                let serving = served_revision == Some(v.revision);
                // Runs recorded before definitions were kept name none:
                // counted with the served revision.
                let count = if newest { unfinished.get(&v.digest).copied().unwrap_or(0) } else { 0 }
                    + if serving { unfinished.get("").copied().unwrap_or(0) } else { 0 };
                let mut shown = named(v, DEPLOYMENT_NAMES);
                shown["unfinished"] = count.into();
                shown["served"] = serving.into();
                shown["drained"] = (count == 0 && !serving).into();
                shown
            })
            .collect::<Vec<_>>(),
    })))
}

/// How many runs of `workflow` (stored name) are unfinished, by the digest
/// of the definition each follows.
fn unfinished_by_digest(
    store: &dyn weft_store::Store,
    workflow: &str,
) -> Result<std::collections::HashMap<String, u64>, weft_store::StoreError> {
    let filter = weft_store::RunFilter {
        workflow: Some(workflow.to_owned()),
        state: Some(weft_store::RunState::Running),
        ..weft_store::RunFilter::default()
    };
    let mut counts = std::collections::HashMap::new();
    for run in store.runs(&filter, usize::MAX)? {
        *counts.entry(run.definition).or_default() += 1;
    }
    Ok(counts)
}

/// `POST /v1/workflows`: deploys the definition in the body (YAML, or
/// JSON when the content type says so) as the newest version of its id.
/// `201` with the new revision; `200` with `unchanged: true` when it is the
/// version served already. Every `uses:` must resolve now, so a workflow
/// that cannot start is refused at deployment.
pub(super) async fn deploy_workflow(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.need(Right::Deploy)?;
    let body = body.map_err(unreadable)?;
    let text = std::str::from_utf8(&body)
        .map_err(|e| ApiError::bad_request(format!("the definition is not UTF-8 text: {e}")))?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "the body is empty; send a workflow definition (YAML or JSON)",
        ));
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"));
    let format = if is_json { Format::Json } else { Format::Yaml };
    let engine = Arc::clone(&api.engine);
    let deployments = Arc::clone(&api.workflows);
    let text = text.to_owned();
    let tenant = caller.tenant.clone();
    let owner = caller.role.grants(Right::Own);
    let access = Arc::clone(&api.access);
    let deployed = blocking(move || {
        let quota = super::quota_of(engine.store().as_ref(), &tenant)?;
        if let Some(rate) = quota.deploys_per_second {
            access.take(&tenant, "deploys_per_second", rate)?;
        }
        within_ceilings(&quota, &tenant, &text, format)?;
        deployments
            .deploy_checked(
                &engine,
                &tenant,
                &text,
                format,
                "request body",
                crate::services::deployments::DeployedBy {
                    owner,
                    max_revisions: quota.max_revisions,
                },
            )
            .map_err(deploy_error)
    })
    .await??;
    for (secret, grant) in &deployed.granted {
        api.audit(
            &caller,
            "secret.grant",
            secret,
            json!({ "plugin": grant.plugin, "digest": grant.digest, "by": "deploy" }),
        )
        .await;
    }
    if deployed.created {
        api.audit(
            &caller,
            "workflow.deploy",
            tenant::bare(&deployed.record.workflow),
            json!({ "revision": deployed.record.revision, "digest": deployed.record.digest }),
        )
        .await;
    }
    let current = api.workflows.current();
    let served = current
        .get(&deployed.record.workflow)
        .ok_or_else(|| ApiError::internal("the deployed workflow is not served"))?;
    let mut body = json!({ "workflow": summary(&served, Some(&deployed.record)) });
    if deployed.created {
        Ok((StatusCode::CREATED, Json(body)))
    } else {
        body["unchanged"] = json!(true);
        Ok((StatusCode::OK, Json(body)))
    }
}

/// `422 quota_exceeded` when a step of the definition `text` asks for a
/// longer timeout or more memory than its tenant's ceiling. A text that
/// does not parse is left for the deployment to refuse.
fn within_ceilings(
    quota: &weft_store::Quota,
    tenant: &str,
    text: &str,
    format: Format,
) -> Result<(), ApiError> {
    if quota.max_step_timeout_ms.is_none() && quota.max_step_memory.is_none() {
        return Ok(());
    }
    let Ok(workflow) = weft_model::parse(text, format, "request body") else {
        return Ok(());
    };
    for step in workflow.all_steps() {
        let Some(call) = step.call() else { continue };
        let over = |field: &str, asked: u64, most: u64, unit: &str| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "quota_exceeded",
                format!(
                    "step `{}`: {field} {asked} {unit} is over tenant `{tenant}`'s ceiling of {most} {unit}",
                    step.id
                ),
            )
        };
        if let (Some(asked), Some(most)) = (call.timeout, quota.max_step_timeout_ms) {
            let asked = u64::try_from(asked.as_millis()).unwrap_or(u64::MAX);
            if asked > most {
                return Err(over("timeout", asked, most, "ms"));
            }
        }
        if let (Some(asked), Some(most)) = (call.memory_limit, quota.max_step_memory)
            && asked > most
        {
            return Err(over("memory_limit", asked, most, "bytes"));
        }
    }
    Ok(())
}

/// The answer to a refused deployment.
fn deploy_error(error: DeployError) -> ApiError {
    let (status, code) = match error {
        DeployError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_workflow"),
        DeployError::UnresolvedPlugin { .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, "unresolved_plugin")
        }
        DeployError::Reach { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_grant"),
        DeployError::UnknownSubflow { .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, "unresolved_subflow")
        }
        DeployError::UnknownSnapshot { .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, "unknown_snapshot")
        }
        DeployError::SecretNotGranted { .. } => (StatusCode::FORBIDDEN, "secret_not_granted"),
        DeployError::Quota(_) => (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded"),
        DeployError::Store(e) => return ApiError::from(e),
    };
    ApiError::new(status, code, error.to_string())
}

/// A plugin as `caller` sees it: its own by their bare names, and the
/// shared ones (tenant `default`'s) marked `shared`.
fn plugin_shown(caller: &Caller, record: &weft_store::PluginRecord) -> Value {
    let mut value = named(record, &["name"]);
    if caller.tenant != tenant::DEFAULT && tenant::of(&record.name) == tenant::DEFAULT {
        value["shared"] = json!(true);
    }
    value
}

/// `GET /v1/plugins`: the plugins the caller's workflows may use (its
/// tenant's own and the shared ones), by name, newest version first.
pub(super) async fn list_plugins(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Json<Value> {
    let listed: Vec<Value> = api
        .engine
        .plugins()
        .list()
        .iter()
        .filter(|r| caller.owns(&r.name) || tenant::of(&r.name) == tenant::DEFAULT)
        .map(|r| plugin_shown(&caller, r))
        .collect();
    Json(json!({ "plugins": listed }))
}

/// The query of `POST /v1/plugins`: what to record in a command, which
/// does not describe itself.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AddQuery {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

/// `POST /v1/plugins`: adds the component in the body to the registry once
/// it loads (compiled, linked, described). `201`, or `200` with `existing:
/// true` for bytes that were there already; `400 invalid_component` says
/// why a component was refused (a missing import is named). A WASI command
/// (or a preview-1 command module, wrapped first) takes `?name=&version=`
/// (and `&description=`), recorded in the component added.
pub(super) async fn add_plugin(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<AddQuery>, axum::extract::rejection::QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.need(Right::Deploy)?;
    let Query(query) = query?;
    // Tenant `default`'s plugins are every tenant's: publishing one is an
    // admin's (the caller of a host without tokens is one).
    if caller.tenant == tenant::DEFAULT {
        caller.need(Right::Admin)?;
    }
    let body = body.map_err(unreadable)?;
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the body is empty; send a component's bytes (application/wasm)",
        ));
    }
    // A command's description, recorded once the quotas allow the work.
    let describe = match (query.name, query.version) {
        (None, None) if query.description.is_none() => None,
        (Some(name), Some(version)) => Some(weft_runtime::Description {
            name,
            version,
            description: query.description.unwrap_or_default(),
            input_schema: None,
            output_schema: None,
        }),
        _ => {
            return Err(ApiError::bad_request(
                "a command is described by `name` and `version` together (`description` needs them)",
            ));
        }
    };
    let engine = Arc::clone(&api.engine);
    let tenant = caller.tenant.clone();
    // Who vouches for the build: an owner's deployment grants secrets only
    // to builds an owner (or an admin, or the host's files) brought.
    let origin = if caller.role.grants(Right::Own) {
        weft_store::PluginRecord::BY_OWNER
    } else {
        "api"
    };
    let access = Arc::clone(&api.access);
    let services = api.services.clone();
    let (record, existed) = blocking(move || {
        let quota = super::quota_of(engine.store().as_ref(), &tenant)?;
        if let Some(rate) = quota.deploys_per_second {
            access.take(&tenant, "deploys_per_second", rate)?;
        }
        if let Some(max) = quota.max_plugin_bytes
            && body.len() as u64 > max
        {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "quota_exceeded",
                format!(
                    "the component is {} bytes; tenant `{tenant}`'s quota `max_plugin_bytes` is {max}",
                    body.len()
                ),
            ));
        }
        let body = match &describe {
            Some(description) => weft_runtime::describe_command(&body, description)
                .map(Bytes::from)
                .map_err(|e| {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "invalid_component",
                        format!("the command was refused: it {e}"),
                    )
                })?,
            None => body,
        };
        let digest = weft_runtime::Digest::of(&body).to_string();
        let own: Vec<_> = engine
            .plugins()
            .list()
            .into_iter()
            .filter(|r| tenant::of(&r.name) == tenant)
            .collect();
        let existed = own.iter().any(|r| r.digest == digest);
        if let Some(max) = quota.max_plugins
            && !existed
            && own.len() >= max as usize
        {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "quota_exceeded",
                format!("tenant `{tenant}` is at its quota `max_plugins` ({max})"),
            ));
        }
        services
            .add_plugin(&tenant, &body, origin)
            .map(|(_, record)| (record, existed))
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_component",
                    format!("the component was refused: it {e}"),
                )
            })
    })
    .await??;
    tracing::info!(plugin = %record.name, version = %record.version, digest = %record.digest, "plugin added over the API");
    let shown = plugin_shown(&caller, &record);
    if existed {
        Ok((
            StatusCode::OK,
            Json(json!({ "plugin": shown, "existing": true })),
        ))
    } else {
        api.audit(
            &caller,
            "plugin.add",
            tenant::bare(&record.name),
            json!({ "version": record.version, "digest": record.digest }),
        )
        .await;
        Ok((StatusCode::CREATED, Json(json!({ "plugin": shown }))))
    }
}

/// The API's answer to a refused migration of workflow `id`'s runs.
fn migrate_refused(refused: MigrateRefused, id: &str) -> ApiError {
    match refused {
        MigrateRefused::NotNewer { .. } => ApiError::bad_request(refused.to_string()),
        MigrateRefused::UnknownWorkflow => unknown_workflow(id),
        MigrateRefused::UnknownRevision { .. } => ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_revision",
            format!("workflow `{id}` has {refused}"),
        ),
        MigrateRefused::UnreadableRevision { .. } => ApiError::new(
            StatusCode::CONFLICT,
            "unreadable_revision",
            format!("{refused} (workflow `{id}`)"),
        ),
        MigrateRefused::Store(e) => e.into(),
    }
}

/// The body of `POST /v1/workflows/{id}/migrate`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MigrateRequest {
    /// The revision the runs to move follow.
    from_revision: u32,
    /// The newer revision they move to.
    to_revision: u32,
    /// Check each run, move none.
    #[serde(default)]
    dry_run: bool,
}

/// `POST /v1/workflows/{id}/migrate`: every unfinished run of revision
/// `from_revision` moves to `to_revision` at its next step boundary, if
/// every step it has a record of is a step of the new revision with the
/// same id and kind. Answers the runs moved and, for each that could not
/// move, why.
pub(super) async fn migrate_runs(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Result<Json<MigrateRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(request) = body.map_err(ApiError::from)?;
    let stored = caller.name(&id).ok_or_else(|| unknown_workflow(&id))?;
    caller.need(Right::Operate)?;
    let services = api.services.clone();
    let actor = caller.actor.clone();
    let asked = stored.clone();
    let revisions = (request.from_revision, request.to_revision);
    let dry_run = request.dry_run;
    let done = blocking(move || services.migrate_runs(&asked, revisions, &actor, dry_run))
        .await?
        .map_err(|refused| migrate_refused(refused, &id))?;
    let (matched, moved, unmoved) = (done.matched, done.moved, done.unmoved);
    if !dry_run {
        api.audit(
            &caller,
            "runs.migrate",
            tenant::bare(&stored),
            json!({
                "from_revision": revisions.0, "to_revision": revisions.1,
                "matched": matched, "moved": moved.len(), "unmoved": unmoved.len(),
            }),
        )
        .await;
    }
    Ok(Json(json!({
        "workflow": tenant::bare(&stored),
        "from_revision": revisions.0,
        "to_revision": revisions.1,
        "dry_run": dry_run,
        "matched": matched,
        "moved": moved,
        "unmoved": unmoved,
    })))
}
