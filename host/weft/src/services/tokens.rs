//! API tokens: made here for `POST /v1/tokens` and `weft tokens create
//! --local` alike, and revoked. Blocking.

use std::time::Duration;

use weft_store::{AccessWrite, Role, StoreError, TokenRecord};

use super::Services;
use crate::api::auth::{hash, new_token};

/// The longest label a token may carry, in bytes.
pub const MAX_LABEL: usize = 256;

/// A token to make. Whether the one asking may make it (its role, its
/// tenant) is the adapter's to check before.
#[derive(Debug, Clone)]
pub struct NewToken {
    /// The tenant it acts for.
    pub tenant: String,
    /// What it may do.
    pub role: Role,
    /// A note for people, at most [`MAX_LABEL`] bytes.
    pub label: String,
    /// How long it works, from now; `None`: until revoked.
    pub expires: Option<Duration>,
    /// Who makes it: the asking token's actor, or `local`.
    pub created_by: String,
}

/// Why a token was not made. Nothing was stored.
#[derive(Debug, thiserror::Error)]
pub enum TokenRefused {
    /// No such tenant.
    #[error("no tenant `{0}`")]
    UnknownTenant(String),
    /// The label is longer than [`MAX_LABEL`].
    #[error("label: at most {MAX_LABEL} bytes")]
    LabelTooLong,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Services {
    /// Makes token `new` and stores its hash; returns its record and the
    /// token itself, which is shown once and kept nowhere.
    pub fn create_token(&self, new: NewToken) -> Result<(TokenRecord, String), TokenRefused> {
        if new.label.len() > MAX_LABEL {
            return Err(TokenRefused::LabelTooLong);
        }
        if !self.tenant_exists(&new.tenant)? {
            return Err(TokenRefused::UnknownTenant(new.tenant));
        }
        let now = self.engine.clock().now();
        let (id, token) = new_token();
        let record = TokenRecord {
            id: id.clone(),
            hash: hash(&token),
            tenant: new.tenant,
            role: new.role,
            label: new.label,
            created_at: now,
            expires_at: new.expires.map(|d| now + d),
            revoked_at: None,
            created_by: new.created_by,
        };
        self.apply_access(AccessWrite::PutToken {
            id,
            record: weft_store::encode(&record),
            new: true,
        })?;
        Ok((record, token))
    }

    /// Revokes token `record` (as read), unless it is revoked already;
    /// answers its record after, and whether this call revoked it. Which
    /// caller may revoke which token is the adapter's to check.
    pub fn revoke_token(&self, record: TokenRecord) -> Result<(TokenRecord, bool), StoreError> {
        if record.revoked_at.is_some() {
            return Ok((record, false));
        }
        let mut record = record;
        record.revoked_at = Some(self.engine.clock().now());
        self.apply_access(AccessWrite::PutToken {
            id: record.id.clone(),
            record: weft_store::encode(&record),
            new: false,
        })?;
        Ok((record, true))
    }
}
