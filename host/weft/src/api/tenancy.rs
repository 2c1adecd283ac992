//! Routes for tenants, their quotas and usage, API tokens, and the audit
//! log.
//!
//! - Tenants and quotas are an `admin`'s; an `owner` reads its own
//!   tenant's usage.
//! - An `owner` makes and revokes its tenant's tokens, up to its own
//!   role; an `admin`, any tenant's, of any role.
//! - The audit log is read by an `owner` (its tenant's) or an `admin`.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Api, ApiError, Caller, blocking};
use crate::services::{NewToken, TenantRefused, TokenRefused};
use weft_core::tenant;
use weft_store::{Quota, Right, Role, RunFilter, TokenRecord, What};

fn unknown_tenant(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_tenant",
        format!("no tenant `{name}`"),
    )
}

/// The API's answer to a refusal of the tenants' service.
fn tenant_refused(refused: TenantRefused) -> ApiError {
    let message = refused.to_string();
    match refused {
        TenantRefused::BadName(_) | TenantRefused::BadQuota(_) => ApiError::bad_request(message),
        TenantRefused::Exists(_) => ApiError::new(StatusCode::CONFLICT, "tenant_exists", message),
        TenantRefused::Unknown(name) => unknown_tenant(&name),
        TenantRefused::Default | TenantRefused::Busy { .. } => {
            ApiError::new(StatusCode::CONFLICT, "tenant_busy", message)
        }
        TenantRefused::Hub(e) => e.into(),
        TenantRefused::Store(e) => e.into(),
        TenantRefused::Trigger { .. } => ApiError::internal(message),
    }
}

/// `GET /v1/tenants`: every tenant (an admin's).
pub(super) async fn list_tenants(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    caller.need(Right::Admin)?;
    let store = Arc::clone(api.engine.store());
    let mut tenants = blocking(move || store.tenants()).await??;
    if !tenants.iter().any(|t| t.name == tenant::DEFAULT) {
        tenants.insert(0, crate::services::default_row());
    }
    Ok(Json(json!({ "tenants": tenants })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AddTenant {
    name: String,
    #[serde(default)]
    quota: Option<Quota>,
}

/// `POST /v1/tenants`: adds a tenant (an admin's).
pub(super) async fn add_tenant(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<AddTenant>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.need(Right::Admin)?;
    let Json(request) = body?;
    let services = api.services.clone();
    let record = blocking(move || services.add_tenant(&request.name, request.quota))
        .await?
        .map_err(tenant_refused)?;
    let audited = caller.in_tenant(&record.name);
    api.audit(&audited, "tenant.add", &record.name, Value::Null)
        .await;
    Ok((StatusCode::CREATED, Json(json!({ "tenant": record }))))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RemoveQuery {
    #[serde(default)]
    force: bool,
}

/// `DELETE /v1/tenants/{tenant}`: removes a tenant (an admin's). Refused
/// with `409 tenant_busy` while it has runs that have not ended, unless
/// `?force=true`. Then its workflows stop being served, its triggers are
/// paused, its subscriptions removed, its live runs cancelled, and its
/// tokens revoked in the transaction that removes it. Its ended runs and
/// revisions stay in the store, unreachable; a tenant added later with
/// the same name sees them, but none of the old tokens.
pub(super) async fn remove_tenant(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    query: Result<Query<RemoveQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.need(Right::Admin)?;
    let Query(query) = query?;
    let services = api.services.clone();
    let asked = name.clone();
    let cancelled = blocking(move || services.remove_tenant(&asked, query.force))
        .await?
        .map_err(tenant_refused)?;
    api.access.revoked();
    let audited = caller.in_tenant(&name);
    api.audit(
        &audited,
        "tenant.remove",
        &name,
        json!({ "cancelled": cancelled }),
    )
    .await;
    Ok(Json(json!({ "removed": name, "cancelled": cancelled })))
}

/// `POST /v1/tenants/{tenant}/quota`: sets a tenant's quota (an admin's);
/// the body is the whole quota, each field absent for no limit.
pub(super) async fn set_quota(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Result<Json<Quota>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.need(Right::Admin)?;
    let Json(quota) = body?;
    let services = api.services.clone();
    let asked = name.clone();
    let record = blocking(move || services.set_quota(&asked, quota))
        .await?
        .map_err(tenant_refused)?;
    let audited = caller.in_tenant(&name);
    api.audit(&audited, "tenant.quota", &name, json!(record.quota))
        .await;
    Ok(Json(json!({ "tenant": record })))
}

/// `GET /v1/tenants/{tenant}/usage`: a tenant's quota and what it uses
/// (its owner's, or an admin's).
pub(super) async fn usage(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    // Another tenant is one that does not exist, unless asked by an admin.
    if name != caller.tenant && caller.role != Role::Admin {
        return Err(unknown_tenant(&name));
    }
    let engine = Arc::clone(&api.engine);
    let services = api.services.clone();
    let workflows = api.workflows.current();
    let asked = name.clone();
    let usage = blocking(move || {
        let store = engine.store();
        let record = services.tenant(&asked)?.ok_or_else(|| unknown_tenant(&asked))?;
        let filter = RunFilter {
            tenant: Some(asked.clone()),
            ..RunFilter::default()
        };
        let mut runs = serde_json::Map::new();
        for run in store.runs(&filter, usize::MAX)? {
            let count = runs.entry(run.state.to_string()).or_insert(json!(0));
            *count = json!(count.as_u64().unwrap_or(0) + 1);
        }
        let owned = |stored: &str| tenant::of(stored) == asked;
        let (resident, parked, guest) = engine.tenant_usage(&asked);
        let plugins: Vec<_> = engine
            .plugins()
            .list()
            .into_iter()
            .filter(|p| owned(&p.name))
            .collect();
        Ok::<_, ApiError>(json!({
            "tenant": asked,
            "quota": record.quota,
            "usage": {
                "runs": runs,
                "workflows": workflows.iter().filter(|w| owned(&w.id)).count(),
                "plugins": plugins.len(),
                "plugin_bytes": plugins.iter().map(|p| p.size).sum::<u64>(),
                "subscriptions": store.subscriptions(None)?.iter().filter(|s| owned(&s.key)).count(),
                "schedules": store.schedules()?.iter().filter(|s| owned(&s.workflow)).count(),
                "resident_here": resident,
                "parked_here": parked,
                "guest_ms_this_minute": u64::try_from(guest.as_millis()).unwrap_or(u64::MAX),
                "stored_bytes": store.stored_bytes(&asked)?,
                "timers": store.pending_timers(&asked)?,
                "audit_rows": store.audit_rows(&asked)?,
                "revisions": store.deployments(None)?.iter().filter(|d| owned(&d.workflow)).count(),
                "snapshot_bytes": store.snapshots(None)?.iter().filter(|s| owned(&s.store)).map(|s| s.bytes).sum::<u64>(),
            },
        }))
    })
    .await??;
    caller.need(Right::Own)?;
    Ok(Json(usage))
}

/// A token as listings show it: never its hash.
fn token_shown(record: &TokenRecord) -> Value {
    let mut value = serde_json::to_value(record).unwrap_or(Value::Null);
    if let Some(fields) = value.as_object_mut() {
        fields.remove("hash");
    }
    value
}

/// `GET /v1/tokens`: the caller's tenant's tokens (an owner's).
pub(super) async fn list_tokens(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    caller.need(Right::Own)?;
    let store = Arc::clone(api.engine.store());
    let tokens = blocking(move || store.tokens()).await??;
    // An owner sees its tenant's tokens up to its own role.
    let shown: Vec<Value> = tokens
        .iter()
        .filter(|t| t.tenant == caller.tenant && t.role <= caller.role)
        .map(token_shown)
        .collect();
    Ok(Json(json!({ "tokens": shown })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateToken {
    /// Default: the caller's tenant. Another is an admin's.
    #[serde(default)]
    tenant: Option<String>,
    role: String,
    /// Such as `30d`; default: never.
    #[serde(default)]
    expires: Option<String>,
    #[serde(default)]
    label: Option<String>,
}

/// `POST /v1/tokens`: makes a token and shows it, once.
pub(super) async fn create_token(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<CreateToken>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.need(Right::Own)?;
    let Json(request) = body?;
    let role: Role = request
        .role
        .parse()
        .map_err(|m: String| ApiError::bad_request(format!("role: {m}")))?;
    let tenant_name = request.tenant.unwrap_or_else(|| caller.tenant.clone());
    if tenant_name != caller.tenant && caller.role != Role::Admin {
        return Err(unknown_tenant(&tenant_name));
    }
    if role > caller.role {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "role `{}` may not make a token of role `{role}`",
                caller.role
            ),
        ));
    }
    let expires = match &request.expires {
        None => None,
        Some(text) => Some(
            weft_core::clock::parse_duration(text)
                .map_err(|m| ApiError::bad_request(format!("expires: {m}")))?,
        ),
    };
    let new = NewToken {
        tenant: tenant_name.clone(),
        role,
        label: request.label.unwrap_or_default(),
        expires,
        created_by: caller.actor.clone(),
    };
    let services = api.services.clone();
    let (record, token) = match blocking(move || services.create_token(new)).await? {
        Ok(made) => made,
        Err(TokenRefused::UnknownTenant(name)) => return Err(unknown_tenant(&name)),
        Err(e @ TokenRefused::LabelTooLong) => return Err(ApiError::bad_request(e.to_string())),
        Err(TokenRefused::Store(e)) => return Err(e.into()),
    };
    let mut audited = caller.clone();
    audited.tenant = tenant_name;
    api.audit(
        &audited,
        "token.create",
        &record.id,
        json!({ "role": role }),
    )
    .await;
    let mut shown = token_shown(&record);
    shown["token"] = json!(token);
    Ok((StatusCode::CREATED, Json(json!({ "token": shown }))))
}

/// `POST /v1/tokens/{id}/revoke`: revokes a token of the caller's tenant
/// (an owner's); it stops working at once, open streams included.
pub(super) async fn revoke_token(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = Arc::clone(api.engine.store());
    let asked = id.clone();
    let admin = caller.role == Role::Admin;
    let (tenant_name, role) = (caller.tenant.clone(), caller.role);
    let found = blocking(move || store.token(&asked))
        .await??
        .filter(|t| admin || (t.tenant == tenant_name && t.role <= role))
        .ok_or_else(|| ApiError::not_found(&What::Token(id.clone())))?;
    caller.need(Right::Own)?;
    let services = api.services.clone();
    let (record, revoked) = blocking(move || services.revoke_token(found)).await??;
    if revoked {
        api.access.revoked();
        let audited = caller.in_tenant(&record.tenant);
        api.audit(&audited, "token.revoke", &id, Value::Null).await;
    }
    Ok(Json(json!({ "token": token_shown(&record) })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    #[serde(default)]
    limit: Option<usize>,
}

/// `GET /v1/audit`: the caller's tenant's audit log, newest first (an
/// owner's).
pub(super) async fn list_audit(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.need(Right::Own)?;
    let Query(query) = query?;
    let limit = query.limit.unwrap_or(100).min(10_000);
    let store = Arc::clone(api.engine.store());
    let tenant_name = caller.tenant.clone();
    let entries = blocking(move || store.audit(Some(&tenant_name), limit)).await??;
    Ok(Json(json!({ "audit": entries })))
}
