//! Reads of the access tables: tenants, API tokens, secrets and the
//! audit log.

use redb::{ReadTransaction, ReadableTable};

use super::{AUDIT, SECRETS, TENANTS, TOKENS, decode};
use crate::{AuditRecord, SecretRecord, StoreError, TenantRecord, TokenRecord};

pub(super) fn tenants(txn: &ReadTransaction) -> Result<Vec<TenantRecord>, StoreError> {
    let table = backend!(txn.open_table(TENANTS))?;
    let mut found = Vec::new();
    for entry in backend!(table.iter())? {
        let (name, bytes) = backend!(entry)?;
        found.push(decode(name.value(), bytes.value())?);
    }
    Ok(found)
}

pub(super) fn token(txn: &ReadTransaction, id: &str) -> Result<Option<TokenRecord>, StoreError> {
    let table = backend!(txn.open_table(TOKENS))?;
    backend!(table.get(id))?
        .map(|bytes| decode(id, bytes.value()))
        .transpose()
}

pub(super) fn tokens(txn: &ReadTransaction) -> Result<Vec<TokenRecord>, StoreError> {
    let table = backend!(txn.open_table(TOKENS))?;
    let mut found = Vec::new();
    for entry in backend!(table.iter())? {
        let (id, bytes) = backend!(entry)?;
        found.push(decode(id.value(), bytes.value())?);
    }
    Ok(found)
}

pub(super) fn audit(
    txn: &ReadTransaction,
    tenant: Option<&str>,
    limit: usize,
) -> Result<Vec<AuditRecord>, StoreError> {
    let table = backend!(txn.open_table(AUDIT))?;
    let mut found = Vec::new();
    for entry in backend!(table.iter())?.rev() {
        if found.len() >= limit {
            break;
        }
        let (key, bytes) = backend!(entry)?;
        let (at, n) = key.value();
        let record: AuditRecord = decode(format!("{at}/{n}"), bytes.value())?;
        if tenant.is_none_or(|t| t == record.tenant) {
            found.push(record);
        }
    }
    Ok(found)
}

pub(super) fn secret(
    txn: &ReadTransaction,
    tenant: &str,
    name: &str,
) -> Result<Option<SecretRecord>, StoreError> {
    let table = backend!(txn.open_table(SECRETS))?;
    backend!(table.get((tenant, name)))?
        .map(|bytes| decode(name, bytes.value()))
        .transpose()
}

pub(super) fn secrets(
    txn: &ReadTransaction,
    tenant: &str,
) -> Result<Vec<SecretRecord>, StoreError> {
    let table = backend!(txn.open_table(SECRETS))?;
    let mut found = Vec::new();
    for entry in backend!(table.range((tenant, "")..))? {
        let (key, bytes) = backend!(entry)?;
        let (owner, name) = key.value();
        if owner != tenant {
            break;
        }
        found.push(decode(name, bytes.value())?);
    }
    Ok(found)
}
