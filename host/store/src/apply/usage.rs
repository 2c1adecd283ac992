//! Stored bytes by tenant: what each tenant's writes added (their
//! [`Charge`]s, less the key-value bytes they gave back), kept in the
//! `usage` table and held to the tenant's `max_stored_bytes`.
//!
//! A transaction reads each tenant's count and quota once, when its first
//! charged write comes, and writes the counts it changed back before it
//! commits ([`Apply::flush_usage`]): a failed transaction leaves them as
//! they were, with everything else.

use super::Apply;
use crate::rows::{Key, Table, decode, number, read_number};
use crate::{Charge, StoreError, TenantRecord};

/// The counts one transaction has read: a few tenants at most, so a list.
#[derive(Default)]
pub(crate) struct Meter {
    accounts: Vec<Account>,
}

struct Account {
    tenant: String,
    used: u64,
    limit: Option<u64>,
    changed: bool,
}

impl Apply<'_> {
    /// Tenant `tenant`'s account, read on first use.
    fn account(&mut self, tenant: &str) -> Result<&mut Account, StoreError> {
        let at = match self.meter.accounts.iter().position(|a| a.tenant == tenant) {
            Some(at) => at,
            None => {
                let used = self
                    .rows
                    .get(Table::Usage, Key::Str(tenant))?
                    .map_or(0, |used| read_number(&used));
                let limit = match self.rows.get(Table::Tenants, Key::Str(tenant))? {
                    Some(bytes) => {
                        decode::<TenantRecord>(tenant, &bytes)?
                            .quota
                            .max_stored_bytes
                    }
                    None => None,
                };
                self.meter.accounts.push(Account {
                    tenant: tenant.to_owned(),
                    used,
                    limit,
                    changed: false,
                });
                self.meter.accounts.len() - 1
            }
        };
        Ok(&mut self.meter.accounts[at])
    }

    /// Refuses `charge`, if it is refusable, when its write would grow its
    /// tenant's count over the tenant's quota. A write that gives back at
    /// least what it adds (`Apply::freed`, noted by the checks before)
    /// is never refused, so a tenant over its quota can make room.
    pub(super) fn admit(
        &mut self,
        charge: Option<&Charge>,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let Some(charge) = charge.filter(|c| c.refusable && c.bytes > self.freed) else {
            return Ok(Ok(()));
        };
        let growth = charge.bytes - self.freed;
        let account = self.account(&charge.tenant)?;
        match account.limit {
            Some(limit) if account.used.saturating_add(growth) > limit => {
                Ok(Err(StoreError::StorageQuota {
                    tenant: charge.tenant.clone(),
                    used: account.used,
                    limit,
                    bytes: growth,
                }))
            }
            _ => Ok(Ok(())),
        }
    }

    /// Counts `charge`, whose write was stored, less what the write gave
    /// back.
    pub(super) fn count(&mut self, charge: &Charge) -> Result<(), StoreError> {
        let freed = std::mem::take(&mut self.freed);
        let account = self.account(&charge.tenant)?;
        account.used = account
            .used
            .saturating_add(charge.bytes)
            .saturating_sub(freed);
        account.changed = true;
        Ok(())
    }

    /// Adds `bytes` the host stored for `tenant` (a run's end notice) to
    /// its count, whatever its quota.
    pub(super) fn add_use(&mut self, tenant: &str, bytes: u64) -> Result<(), StoreError> {
        let account = self.account(tenant)?;
        account.used = account.used.saturating_add(bytes);
        account.changed = true;
        Ok(())
    }

    /// Takes `bytes` a deletion gave back off `tenant`'s count.
    pub(super) fn give_back(&mut self, tenant: &str, bytes: u64) -> Result<(), StoreError> {
        let account = self.account(tenant)?;
        account.used = account.used.saturating_sub(bytes);
        account.changed = true;
        Ok(())
    }

    /// A tenant's record written in this transaction: its quota holds for
    /// the writes after it.
    pub(super) fn requota(&mut self, tenant: &str, record: &[u8]) -> Result<(), StoreError> {
        if let Some(account) = self.meter.accounts.iter_mut().find(|a| a.tenant == tenant) {
            account.limit = decode::<TenantRecord>(tenant, record)?
                .quota
                .max_stored_bytes;
        }
        Ok(())
    }

    /// Writes back the counts this transaction changed.
    pub(super) fn flush_usage(&mut self) -> Result<(), StoreError> {
        if self.meter.accounts.iter().all(|a| !a.changed) {
            return Ok(());
        }
        for account in &self.meter.accounts {
            if account.changed {
                self.rows.put(
                    Table::Usage,
                    Key::Str(&account.tenant),
                    &number(account.used),
                )?;
            }
        }
        Ok(())
    }
}
