//! Routes for a tenant's secrets (an owner's; an admin's for any tenant
//! with `?tenant=`). Values go in and never come out: the answers name
//! secrets and say when each was set, and the audit log records who set or
//! deleted which.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Api, ApiError, Caller, blocking};
use crate::services::SecretRefused;
use weft_engine::SecretError;
use weft_store::{Right, Role, SecretRecord};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Scope {
    #[serde(default)]
    tenant: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SetSecret {
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GrantSecret {
    plugin: String,
}

/// The tenant a request acts on: its own, or (an admin's) the one it
/// names.
fn tenant_of(caller: &Caller, scope: Scope) -> Result<String, ApiError> {
    caller.need(Right::Own)?;
    match scope.tenant {
        Some(tenant) if tenant != caller.tenant && caller.role != Role::Admin => {
            Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_tenant",
                format!("no tenant `{tenant}`"),
            ))
        }
        Some(tenant) => Ok(tenant),
        None => Ok(caller.tenant.clone()),
    }
}

/// A secret as answered: never its value.
fn shown(secret: &SecretRecord) -> Value {
    let grants: Vec<Value> = secret
        .grants
        .iter()
        .map(|g| json!({ "plugin": g.plugin, "digest": g.digest }))
        .collect();
    json!({ "name": secret.name, "updated_at": secret.updated_at, "grants": grants })
}

/// The API's answer to a refusal of the secrets' service.
fn secret_refused(refused: SecretRefused) -> ApiError {
    let message = refused.to_string();
    match refused {
        SecretRefused::BadName(_) | SecretRefused::Reserved | SecretRefused::BadValue(_) => {
            ApiError::bad_request(message)
        }
        SecretRefused::UnknownTenant(_) => {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_tenant", message)
        }
        SecretRefused::UnknownSecret(_) => {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_secret", message)
        }
        SecretRefused::UnknownGrant { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_grant", message)
        }
        SecretRefused::UnresolvedPlugin(_) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unresolved_plugin",
            message,
        ),
        SecretRefused::Vault(SecretError::NoKey) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no_secrets_key", message)
        }
        SecretRefused::Vault(_) => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "secrets", message)
        }
        SecretRefused::Store(e) => e.into(),
    }
}

/// `GET /v1/secrets`: the tenant's secrets, by name, without values.
pub(super) async fn list_secrets(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    scope: Result<Query<Scope>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(scope) = scope?;
    let tenant = tenant_of(&caller, scope)?;
    let store = Arc::clone(api.engine.store());
    let secrets = blocking(move || store.secrets(&tenant)).await??;
    let shown: Vec<Value> = secrets.iter().map(shown).collect();
    Ok(Json(json!({ "secrets": shown })))
}

/// `PUT /v1/secrets/{name}`: sets a secret to `{"value": ...}`, sealed
/// with the host's secrets key.
pub(super) async fn set_secret(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    scope: Result<Query<Scope>, QueryRejection>,
    body: Result<Json<SetSecret>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(scope) = scope?;
    let tenant = tenant_of(&caller, scope)?;
    let Json(SetSecret { value }) = body?;
    let services = api.services.clone();
    let (asked, secret) = (tenant.clone(), name.clone());
    let record = blocking(move || services.set_secret(&asked, &secret, &value))
        .await?
        .map_err(secret_refused)?;
    let audited = caller.in_tenant(&tenant);
    api.audit(&audited, "secret.set", &name, Value::Null).await;
    Ok(Json(
        json!({ "secret": { "name": name, "updated_at": record.updated_at } }),
    ))
}

/// `DELETE /v1/secrets/{name}`: deletes a secret.
pub(super) async fn delete_secret(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    scope: Result<Query<Scope>, QueryRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Query(scope) = scope?;
    let tenant = tenant_of(&caller, scope)?;
    let services = api.services.clone();
    let (asked, secret) = (tenant.clone(), name.clone());
    blocking(move || services.delete_secret(&asked, &secret))
        .await?
        .map_err(secret_refused)?;
    let audited = caller.in_tenant(&tenant);
    api.audit(&audited, "secret.delete", &name, Value::Null)
        .await;
    Ok((StatusCode::OK, Json(json!({ "deleted": name }))))
}

/// `POST /v1/secrets/{name}/grants` with `{"plugin": "name[@version]"}`:
/// lets the steps of the component that reference resolves to now read
/// the secret. Only an owner grants: a deployer's workflow that names a
/// secret is refused unless its plugin was granted it.
pub(super) async fn grant_secret(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    scope: Result<Query<Scope>, QueryRejection>,
    body: Result<Json<GrantSecret>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(scope) = scope?;
    let tenant = tenant_of(&caller, scope)?;
    let Json(GrantSecret { plugin }) = body?;
    let reference = weft_model::PluginRef::parse(&plugin)
        .map_err(|m| ApiError::bad_request(format!("plugin: {m}")))?;
    let services = api.services.clone();
    let (asked, secret) = (tenant.clone(), name.clone());
    let (grant, record) = blocking(move || services.grant_secret(&asked, &secret, &reference))
        .await?
        .map_err(secret_refused)?;
    let audited = caller.in_tenant(&tenant);
    api.audit(
        &audited,
        "secret.grant",
        &name,
        json!({ "plugin": grant.plugin, "digest": grant.digest }),
    )
    .await;
    Ok(Json(json!({ "secret": shown(&record) })))
}

/// `DELETE /v1/secrets/{name}/grants/{plugin}`: takes back every grant of
/// the secret to plugin `plugin` (any of its components).
pub(super) async fn revoke_secret(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path((name, plugin)): Path<(String, String)>,
    scope: Result<Query<Scope>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(scope) = scope?;
    let tenant = tenant_of(&caller, scope)?;
    let services = api.services.clone();
    let (asked, secret, named) = (tenant.clone(), name.clone(), plugin.clone());
    let record = blocking(move || services.revoke_secret_grant(&asked, &secret, &named))
        .await?
        .map_err(secret_refused)?;
    let audited = caller.in_tenant(&tenant);
    api.audit(
        &audited,
        "secret.revoke",
        &name,
        json!({ "plugin": plugin }),
    )
    .await;
    Ok(Json(json!({ "secret": shown(&record) })))
}

/// `POST /v1/secrets/reseal`: seals every secret of the tenant sealed
/// under an earlier key (`--secrets-previous-key-file`) again under the
/// current one, after a key rotation. Answers how many it resealed.
pub(super) async fn reseal_secrets(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    scope: Result<Query<Scope>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(scope) = scope?;
    let tenant = tenant_of(&caller, scope)?;
    let services = api.services.clone();
    let asked = tenant.clone();
    let done = blocking(move || services.reseal_secrets(&asked))
        .await?
        .map_err(secret_refused)?;
    let (resealed, total, webhooks) = (done.resealed, done.secrets, done.webhooks);
    let audited = caller.in_tenant(&tenant);
    api.audit(
        &audited,
        "secret.reseal",
        "*",
        json!({ "resealed": resealed, "webhooks": webhooks }),
    )
    .await;
    Ok(Json(
        json!({ "resealed": resealed, "secrets": total, "webhooks": webhooks }),
    ))
}
