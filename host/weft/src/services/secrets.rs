//! A tenant's secrets: set, delete, grant to a plugin, take a grant back,
//! seal again under the current key. Values go in and never come out.
//! Which caller may act on which tenant is the adapter's to check.
//! Blocking.

use weft_engine::SecretError;
use weft_model::PluginRef;
use weft_store::{
    AccessWrite, Refused, SecretGrant, SecretRecord, StoreError, Target, What, Write,
};

use super::Services;

/// The largest value a secret may have, in bytes.
pub const MAX_SECRET_VALUE: usize = 64 << 10;

/// Why a secret was not set, deleted, granted or sealed again.
#[derive(Debug, thiserror::Error)]
pub enum SecretRefused {
    /// The name does not check; the message says why.
    #[error("the secret's name {0}")]
    BadName(String),
    /// `reseal` names the rotation's route, not a secret.
    #[error("`reseal` is not a secret's name: `POST /v1/secrets/reseal` is the rotation's route")]
    Reserved,
    /// The value is empty or longer than [`MAX_SECRET_VALUE`].
    #[error("a secret's value is 1 to {MAX_SECRET_VALUE} bytes; this one is {0}")]
    BadValue(usize),
    /// No such tenant.
    #[error("no tenant `{0}`")]
    UnknownTenant(String),
    /// No such secret.
    #[error("no {}", What::Secret(.0.clone()))]
    UnknownSecret(String),
    /// The secret is not granted to that plugin.
    #[error("secret `{secret}` is not granted to plugin `{plugin}`")]
    UnknownGrant {
        /// The secret.
        secret: String,
        /// The plugin named.
        plugin: String,
    },
    /// The plugin reference resolves to no component of the tenant's.
    #[error("{0}")]
    UnresolvedPlugin(String),
    /// Sealing or opening failed (no key, a key dropped, damage).
    #[error(transparent)]
    Vault(SecretError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<SecretError> for SecretRefused {
    fn from(error: SecretError) -> Self {
        match error {
            SecretError::Store(e) => Self::Store(e),
            other => Self::Vault(other),
        }
    }
}

/// What [`Services::reseal_secrets`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resealed {
    /// Secrets sealed again under the current key.
    pub resealed: usize,
    /// The tenant's secrets.
    pub secrets: usize,
    /// Webhooks' signing keys sealed again.
    pub webhooks: usize,
}

impl Services {
    /// Sets `tenant`'s secret `name` to `value`, sealed with the host's
    /// secrets key; answers its record.
    pub fn set_secret(
        &self,
        tenant: &str,
        name: &str,
        value: &str,
    ) -> Result<SecretRecord, SecretRefused> {
        weft_core::names::check_id(name).map_err(SecretRefused::BadName)?;
        if name == "reseal" {
            return Err(SecretRefused::Reserved);
        }
        if value.is_empty() || value.len() > MAX_SECRET_VALUE {
            return Err(SecretRefused::BadValue(value.len()));
        }
        if !self.tenant_exists(tenant)? {
            return Err(SecretRefused::UnknownTenant(tenant.to_owned()));
        }
        let now = self.engine.clock().now();
        let record = self.engine.vault().seal(tenant, name, value, now)?;
        self.apply_access(AccessWrite::PutSecret {
            tenant: tenant.to_owned(),
            name: name.to_owned(),
            record: weft_store::encode(&record),
        })?;
        Ok(record)
    }

    /// Deletes `tenant`'s secret `name`.
    pub fn delete_secret(&self, tenant: &str, name: &str) -> Result<(), SecretRefused> {
        let write = AccessWrite::DeleteSecret {
            tenant: tenant.to_owned(),
            name: name.to_owned(),
        };
        self.secret_write(write, name)
    }

    /// Lets the steps of the component `plugin` resolves to now (in
    /// `tenant`) read `tenant`'s secret `name`; answers the grant and the
    /// secret as it is after.
    pub fn grant_secret(
        &self,
        tenant: &str,
        name: &str,
        plugin: &PluginRef,
    ) -> Result<(SecretGrant, SecretRecord), SecretRefused> {
        let component = self
            .engine
            .plugins()
            .resolve_in(tenant, plugin)
            .map_err(|e| SecretRefused::UnresolvedPlugin(e.to_string()))?;
        let grant = SecretGrant {
            plugin: component.meta().name.clone(),
            digest: component.digest().to_string(),
        };
        self.secret_write(
            AccessWrite::GrantSecret {
                tenant: tenant.to_owned(),
                name: name.to_owned(),
                grant: grant.clone(),
                revoke: false,
            },
            name,
        )?;
        Ok((grant, self.secret(tenant, name)?))
    }

    /// Takes back every grant of `tenant`'s secret `name` to plugin
    /// `plugin` (any of its components); answers the secret as it is after.
    pub fn revoke_secret_grant(
        &self,
        tenant: &str,
        name: &str,
        plugin: &str,
    ) -> Result<SecretRecord, SecretRefused> {
        let record = self.secret(tenant, name)?;
        if !record.grants.iter().any(|g| g.plugin == plugin) {
            return Err(SecretRefused::UnknownGrant {
                secret: name.to_owned(),
                plugin: plugin.to_owned(),
            });
        }
        self.secret_write(
            AccessWrite::GrantSecret {
                tenant: tenant.to_owned(),
                name: name.to_owned(),
                grant: SecretGrant {
                    plugin: plugin.to_owned(),
                    digest: String::new(),
                },
                revoke: true,
            },
            name,
        )?;
        self.secret(tenant, name)
    }

    /// Seals every secret of `tenant` sealed under an earlier key again
    /// under the current one, and its webhooks' signing keys too (those
    /// under an earlier key, and those kept in the clear from before keys
    /// were sealed). A webhook's key that no longer opens is left as it is
    /// and logged; the others go on.
    pub fn reseal_secrets(&self, tenant: &str) -> Result<Resealed, SecretRefused> {
        let store = self.engine.store();
        let vault = self.engine.vault();
        let secrets = store.secrets(tenant)?;
        let mut writes = Vec::new();
        for record in &secrets {
            if let Some(again) = vault.reseal(tenant, record)? {
                writes.push(Write::Access(AccessWrite::ResealSecret {
                    tenant: tenant.to_owned(),
                    name: again.name.clone(),
                    sealed: record.sealed.clone(),
                    record: weft_store::encode(&again),
                }));
            }
        }
        let secrets_resealed = writes.len();
        for subscription in store.subscriptions(None)? {
            if weft_core::tenant::of(&subscription.key) != tenant {
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
            let again = match vault.reseal_webhook(
                tenant,
                &subscription.key,
                secret,
                sealed.as_deref(),
            ) {
                Ok(again) => again,
                Err(e @ (SecretError::UnknownKey { .. } | SecretError::Damaged(_))) => {
                    tracing::warn!(subscription = %subscription.key, "cannot seal a webhook's key again: {e}");
                    continue;
                }
                Err(e) => return Err(e.into()),
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
        let mut done = Resealed {
            resealed: 0,
            secrets: secrets.len(),
            webhooks: 0,
        };
        if writes.is_empty() {
            return Ok(done);
        }
        let refs: Vec<&Write> = writes.iter().collect();
        for (n, answer) in store.apply(&refs)?.into_iter().enumerate() {
            match answer {
                Ok(()) if n < secrets_resealed => done.resealed += 1,
                Ok(()) => done.webhooks += 1,
                // Deleted or set again since it was read: nothing to seal
                // again (a value set since is sealed under the current key
                // already).
                Err(Refused::NotFound(_) | Refused::Changed(_)) => {}
                Err(e) => return Err(StoreError::from(e).into()),
            }
        }
        Ok(done)
    }

    /// `tenant`'s secret `name`, or [`SecretRefused::UnknownSecret`].
    fn secret(&self, tenant: &str, name: &str) -> Result<SecretRecord, SecretRefused> {
        self.engine
            .store()
            .secret(tenant, name)?
            .ok_or_else(|| SecretRefused::UnknownSecret(name.to_owned()))
    }

    /// Applies a write to secret `name`: its not being there is
    /// [`SecretRefused::UnknownSecret`].
    fn secret_write(&self, write: AccessWrite, name: &str) -> Result<(), SecretRefused> {
        match self.apply_access(write) {
            Ok(()) => Ok(()),
            Err(StoreError::Refused(Refused::NotFound(_))) => {
                Err(SecretRefused::UnknownSecret(name.to_owned()))
            }
            Err(e) => Err(e.into()),
        }
    }
}
