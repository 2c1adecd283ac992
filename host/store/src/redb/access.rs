//! The access tables: tenants, API tokens and the audit log. They are
//! opened only by the writes and reads that need them, not with every
//! transaction's [`Tables`].

use redb::{ReadTransaction, ReadableTable, TableDefinition};

use super::{AUDIT, SECRETS, TENANTS, TOKENS, Tables, decode};
use crate::{AccessWrite, AuditRecord, SecretRecord, StoreError, TenantRecord, TokenRecord, What};

impl Tables<'_> {
    pub(super) fn access(
        &mut self,
        write: &AccessWrite,
    ) -> Result<Result<(), StoreError>, StoreError> {
        match write {
            AccessWrite::PutTenant { name, record, new } => {
                let what = || What::Tenant(name.clone());
                let put = self.put(TENANTS, name, record, *new, what)?;
                if put.is_ok() {
                    self.requota(name, record)?;
                }
                return Ok(put);
            }
            AccessWrite::RemoveTenant(name) => {
                let mut tenants = backend!(self.txn.open_table(TENANTS))?;
                if backend!(tenants.remove(name.as_str()))?.is_none() {
                    return Ok(Err(StoreError::NotFound(What::Tenant(name.clone()))));
                }
                // A removed tenant's secrets go with it.
                let mut secrets = backend!(self.txn.open_table(SECRETS))?;
                backend!(secrets.retain_in(
                    (name.as_str(), "")..=(name.as_str(), "\u{10FFFF}"),
                    |_, _| false
                ))?;
            }
            AccessWrite::PutToken { id, record, new } => {
                let what = || What::Token(id.clone());
                return self.put(TOKENS, id, record, *new, what);
            }
            AccessWrite::PutSecret {
                tenant,
                name,
                record,
            } => {
                let mut secrets = backend!(self.txn.open_table(SECRETS))?;
                backend!(secrets.insert((tenant.as_str(), name.as_str()), record.as_slice()))?;
            }
            AccessWrite::DeleteSecret { tenant, name } => {
                let mut secrets = backend!(self.txn.open_table(SECRETS))?;
                if backend!(secrets.remove((tenant.as_str(), name.as_str())))?.is_none() {
                    return Ok(Err(StoreError::NotFound(What::Secret(name.clone()))));
                }
            }
            AccessWrite::Audit { key, record } => {
                let mut audit = backend!(self.txn.open_table(AUDIT))?;
                backend!(audit.insert(*key, record.as_slice()))?;
            }
        }
        Ok(Ok(()))
    }

    /// Stores `record` under `key` in `table`: refused with `Exists` if it
    /// must be `new` and is there, with `NotFound` if it must not and is
    /// not.
    fn put(
        &mut self,
        table: TableDefinition<&'static str, &'static [u8]>,
        key: &str,
        record: &[u8],
        new: bool,
        what: impl Fn() -> What,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let mut rows = backend!(self.txn.open_table(table))?;
        let exists = backend!(rows.get(key))?.is_some();
        if exists && new {
            return Ok(Err(StoreError::Exists(what())));
        }
        if !exists && !new {
            return Ok(Err(StoreError::NotFound(what())));
        }
        backend!(rows.insert(key, record))?;
        Ok(Ok(()))
    }
}

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
