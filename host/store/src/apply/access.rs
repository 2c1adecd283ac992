//! The access writes (tenants, API tokens, secrets and the audit log)
//! and the registry's (deployed workflow versions and plugins).

use std::sync::Arc;

use super::Apply;
use crate::rows::{Key, Table, audit_key, audit_key_of, decode};
use crate::{AccessWrite, Refused, SecretRecord, StoreError, What};

impl Apply<'_> {
    /// Files audit row `key` (its `record` encoded) under its tenant, and
    /// deletes the tenant's oldest rows past its `max_audit_rows`: an
    /// audit log is kept whole up to the quota, then as its newest.
    fn index_audit(&mut self, key: (u64, u64), record: &[u8]) -> Result<(), StoreError> {
        #[derive(serde::Deserialize)]
        struct Tenant {
            tenant: String,
        }
        let tenant = decode::<Tenant>(format!("audit {}/{}", key.0, key.1), record)?.tenant;
        let indexed = audit_key(key);
        self.rows
            .put(Table::AuditTenants, Key::StrStr(&tenant, &indexed), &[])?;
        let past = self.count_audit(&tenant)?;
        if past == 0 {
            return Ok(());
        }
        let oldest = self.rows.first_under(
            Table::AuditTenants,
            &tenant,
            usize::try_from(past).unwrap_or(usize::MAX),
        )?;
        for old in oldest {
            self.rows
                .delete(Table::AuditTenants, Key::StrStr(&tenant, &old))?;
            if let Some((at, n)) = audit_key_of(&old) {
                self.rows.delete(Table::Audit, Key::U64U64(at, n))?;
            }
            self.uncount_audit(&tenant)?;
        }
        Ok(())
    }

    pub(super) fn access(
        &mut self,
        write: &AccessWrite,
    ) -> Result<Result<(), Refused>, StoreError> {
        match write {
            AccessWrite::PutTenant { name, record, new } => {
                let what = || What::Tenant(name.clone());
                let put = self.put_new(Table::Tenants, name, record, *new, what)?;
                if put.is_ok() {
                    self.requota(name, record)?;
                }
                return Ok(put);
            }
            AccessWrite::RemoveTenant(name) => {
                if !self.rows.delete(Table::Tenants, Key::Str(name))? {
                    return Ok(Err(Refused::NotFound(What::Tenant(name.clone()))));
                }
                // A removed tenant's secrets go with it.
                for (secret, _) in self.rows.under(Table::Secrets, name)? {
                    if let crate::rows::Part::Str(secret) = secret {
                        self.rows
                            .delete(Table::Secrets, Key::StrStr(name, &secret))?;
                    }
                }
            }
            AccessWrite::PutToken { id, record, new } => {
                let what = || What::Token(id.clone());
                return self.put_new(Table::Tokens, id, record, *new, what);
            }
            AccessWrite::PutSecret {
                tenant,
                name,
                record,
            } => {
                let key = Key::StrStr(tenant, name);
                let kept = match self.rows.get(Table::Secrets, key)? {
                    Some(old) => {
                        let old: SecretRecord = decode(What::Secret(name.clone()), &old)?;
                        let mut new: SecretRecord = decode(What::Secret(name.clone()), record)?;
                        new.grants = old.grants;
                        Some(crate::encode(&new))
                    }
                    None => None,
                };
                self.rows
                    .put(Table::Secrets, key, kept.as_deref().unwrap_or(record))?;
            }
            AccessWrite::ResealSecret {
                tenant,
                name,
                sealed,
                record,
            } => {
                let key = Key::StrStr(tenant, name);
                let Some(old) = self.rows.get(Table::Secrets, key)? else {
                    return Ok(Err(Refused::NotFound(What::Secret(name.clone()))));
                };
                let old: SecretRecord = decode(What::Secret(name.clone()), &old)?;
                if old.sealed != *sealed {
                    return Ok(Err(Refused::Changed(What::Secret(name.clone()))));
                }
                let mut new: SecretRecord = decode(What::Secret(name.clone()), record)?;
                new.grants = old.grants;
                self.rows.put(Table::Secrets, key, &crate::encode(&new))?;
            }
            AccessWrite::GrantSecret {
                tenant,
                name,
                grant,
                revoke,
            } => {
                let key = Key::StrStr(tenant, name);
                let Some(old) = self.rows.get(Table::Secrets, key)? else {
                    return Ok(Err(Refused::NotFound(What::Secret(name.clone()))));
                };
                let mut secret: SecretRecord = decode(What::Secret(name.clone()), &old)?;
                if *revoke {
                    secret.grants.retain(|g| g.plugin != grant.plugin);
                } else if !secret.granted_to(&grant.digest) {
                    secret.grants.push(grant.clone());
                }
                self.rows
                    .put(Table::Secrets, key, &crate::encode(&secret))?;
            }
            AccessWrite::DeleteSecret { tenant, name } => {
                if !self
                    .rows
                    .delete(Table::Secrets, Key::StrStr(tenant, name))?
                {
                    return Ok(Err(Refused::NotFound(What::Secret(name.clone()))));
                }
            }
            AccessWrite::Audit { key, record } => {
                let (at, n) = *key;
                self.rows.put(Table::Audit, Key::U64U64(at, n), record)?;
                self.index_audit(*key, record)?;
            }
        }
        Ok(Ok(()))
    }

    /// Stores `record` under `key` in `table`: refused with `Exists` if it
    /// must be `new` and is there, with `NotFound` if it must not and is
    /// not.
    fn put_new(
        &mut self,
        table: Table,
        key: &str,
        record: &[u8],
        new: bool,
        what: impl Fn() -> What,
    ) -> Result<Result<(), Refused>, StoreError> {
        let exists = self.rows.has(table, Key::Str(key))?;
        if exists && new {
            return Ok(Err(Refused::Exists(what())));
        }
        if !exists && !new {
            return Ok(Err(Refused::NotFound(what())));
        }
        self.rows.put(table, Key::Str(key), record)?;
        Ok(Ok(()))
    }

    pub(super) fn deploy(
        &mut self,
        workflow: &str,
        revision: u32,
        record: &[u8],
        definition: &(String, Vec<u8>),
    ) -> Result<Result<(), Refused>, StoreError> {
        if self
            .rows
            .has(Table::Deployments, Key::StrU32(workflow, revision))?
        {
            return Ok(Err(Refused::Exists(What::Revision {
                workflow: workflow.to_owned(),
                revision,
            })));
        }
        self.definition(definition)?;
        self.rows
            .put(Table::Deployments, Key::StrU32(workflow, revision), record)?;
        Ok(Ok(()))
    }

    pub(super) fn add_plugin(
        &mut self,
        name: &str,
        digest: &str,
        record: &[u8],
        bytes: &Arc<[u8]>,
    ) -> Result<Result<(), Refused>, StoreError> {
        self.components(&[(digest.to_owned(), Arc::clone(bytes))])?;
        self.rows
            .put(Table::Plugins, Key::StrStr(name, digest), record)?;
        Ok(Ok(()))
    }
}
