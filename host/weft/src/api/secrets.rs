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

use super::tenancy::apply;
use super::{Api, ApiError, Caller, blocking};
use weft_engine::SecretError;
use weft_store::{
    AccessWrite, Right, Role, SecretGrant, SecretRecord, Store, StoreError, Target, What, Write,
};

/// The largest value a secret may have.
const MAX_VALUE: usize = 64 << 10;

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

fn secret_error(error: SecretError) -> ApiError {
    match error {
        SecretError::Store(e) => e.into(),
        SecretError::NoKey => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_secrets_key",
            error.to_string(),
        ),
        other => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "secrets",
            other.to_string(),
        ),
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
    weft_core::names::check_id(&name)
        .map_err(|m| ApiError::bad_request(format!("the secret's name {m}")))?;
    if name == "reseal" {
        return Err(ApiError::bad_request(
            "`reseal` is not a secret's name: `POST /v1/secrets/reseal` is the rotation's route",
        ));
    }
    let Json(SetSecret { value }) = body?;
    if value.is_empty() || value.len() > MAX_VALUE {
        return Err(ApiError::bad_request(format!(
            "a secret's value is 1 to {MAX_VALUE} bytes; this one is {}",
            value.len()
        )));
    }
    let record = api
        .engine
        .vault()
        .seal(&tenant, &name, &value, api.engine.clock().now())
        .map_err(secret_error)?;
    drop(value);
    let access = Arc::clone(&api.access);
    let store = Arc::clone(api.engine.store());
    let write = AccessWrite::PutSecret {
        tenant: tenant.clone(),
        name: name.clone(),
        record: weft_store::encode(&record),
    };
    let asked = tenant.clone();
    blocking(move || {
        if !access.tenant_exists(&asked)? {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_tenant",
                format!("no tenant `{asked}`"),
            ));
        }
        apply(store.as_ref(), write)?;
        Ok::<_, ApiError>(())
    })
    .await??;
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
    let store = Arc::clone(api.engine.store());
    let write = AccessWrite::DeleteSecret {
        tenant: tenant.clone(),
        name: name.clone(),
    };
    match blocking(move || apply(store.as_ref(), write)).await? {
        Ok(()) => {}
        Err(StoreError::NotFound(_)) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_secret",
                format!("no {}", What::Secret(name)),
            ));
        }
        Err(e) => return Err(e.into()),
    }
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
    let engine = Arc::clone(&api.engine);
    let asked = tenant.clone();
    let secret = name.clone();
    let (grant, record) = blocking(move || {
        let component = engine
            .plugins()
            .resolve_in(&asked, &reference)
            .map_err(|e| {
                ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "unresolved_plugin",
                    e.to_string(),
                )
            })?;
        let grant = SecretGrant {
            plugin: component.meta().name.clone(),
            digest: component.digest().to_string(),
        };
        let store = engine.store();
        let write = AccessWrite::GrantSecret {
            tenant: asked.clone(),
            name: secret.clone(),
            grant: grant.clone(),
            revoke: false,
        };
        granted(store.as_ref(), write, &secret)?;
        let record = store
            .secret(&asked, &secret)?
            .ok_or_else(|| unknown_secret(&secret))?;
        Ok::<_, ApiError>((grant, record))
    })
    .await??;
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
    let store = Arc::clone(api.engine.store());
    let asked = tenant.clone();
    let secret = name.clone();
    let named = plugin.clone();
    let record = blocking(move || {
        let record = store
            .secret(&asked, &secret)?
            .ok_or_else(|| unknown_secret(&secret))?;
        let Some(plugin) = record
            .grants
            .iter()
            .map(|g| g.plugin.clone())
            .find(|p| *p == named)
        else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_grant",
                format!("secret `{secret}` is not granted to plugin `{named}`"),
            ));
        };
        let write = AccessWrite::GrantSecret {
            tenant: asked.clone(),
            name: secret.clone(),
            grant: SecretGrant {
                plugin,
                digest: String::new(),
            },
            revoke: true,
        };
        granted(store.as_ref(), write, &secret)?;
        store
            .secret(&asked, &secret)?
            .ok_or_else(|| unknown_secret(&secret))
    })
    .await??;
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

fn unknown_secret(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_secret",
        format!("no {}", What::Secret(name.to_owned())),
    )
}

/// Applies a grant or a revocation of secret `name`.
fn granted(store: &dyn Store, write: AccessWrite, name: &str) -> Result<(), ApiError> {
    match apply(store, write) {
        Ok(()) => Ok(()),
        Err(StoreError::NotFound(_)) => Err(unknown_secret(name)),
        Err(e) => Err(e.into()),
    }
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
    let store = Arc::clone(api.engine.store());
    let vault = api.engine.vault().clone();
    let asked = tenant.clone();
    let (resealed, total, webhooks) = blocking(move || {
        let secrets = store.secrets(&asked)?;
        let total = secrets.len();
        let mut writes = Vec::new();
        for record in &secrets {
            if let Some(again) = vault.reseal(&asked, record).map_err(secret_error)? {
                writes.push(Write::Access(AccessWrite::ResealSecret {
                    tenant: asked.clone(),
                    name: again.name.clone(),
                    sealed: record.sealed.clone(),
                    record: weft_store::encode(&again),
                }));
            }
        }
        let mut resealed = 0;
        let secrets_resealed = writes.len();
        // Webhooks' signing keys too: those under an earlier key, and those
        // kept in the clear from before keys were sealed.
        for subscription in store.subscriptions(None)? {
            if weft_core::tenant::of(&subscription.key) != asked {
                continue;
            }
            let Target::Webhook {
                url,
                secret,
                sealed,
            } = &subscription.target
            else {
                continue;
            };
            let again =
                match vault.reseal_webhook(&asked, &subscription.key, secret, sealed.as_deref()) {
                    Ok(again) => again,
                    // One that does not open (its key dropped already) is
                    // left as it is; the others, and the secrets, go on.
                    Err(e @ (SecretError::UnknownKey { .. } | SecretError::Damaged(_))) => {
                        tracing::warn!(subscription = %subscription.key, "cannot seal a webhook's key again: {e}");
                        continue;
                    }
                    Err(e) => return Err(secret_error(e)),
                };
            if let Some(again) = again {
                writes.push(Write::Retarget {
                    key: subscription.key.clone(),
                    from: Box::new(subscription.target.clone()),
                    to: Box::new(Target::Webhook {
                        url: url.clone(),
                        secret: String::new(),
                        sealed: Some(again),
                    }),
                });
            }
        }
        let mut webhooks = 0;
        if !writes.is_empty() {
            let refs: Vec<&Write> = writes.iter().collect();
            for (n, answer) in store.apply(&refs)?.into_iter().enumerate() {
                match answer {
                    Ok(()) if n < secrets_resealed => resealed += 1,
                    Ok(()) => webhooks += 1,
                    // Deleted or set again since it was read: nothing to
                    // seal again (a value set since is sealed under the
                    // current key already).
                    Err(StoreError::NotFound(_) | StoreError::Changed(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok::<_, ApiError>((resealed, total, webhooks))
    })
    .await??;
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
