//! Stored bytes by tenant: what each tenant's writes added (their
//! [`Charge`]s, less the key-value bytes they gave back), kept in the
//! `usage` table and held to the tenant's `max_stored_bytes`. And pending
//! timers by tenant, in the same table under `<tenant>/timers` (no
//! tenant's name holds a `/`), held to its `max_timers`; and audit rows,
//! under `<tenant>/audit`, of which it keeps its newest `max_audit_rows`.
//!
//! A transaction reads each tenant's count and quota once, when its first
//! charged write comes, and writes the counts it changed back before it
//! commits ([`Apply::flush_usage`]): a failed transaction leaves them as
//! they were, with everything else.

use super::Apply;
use crate::rows::{Key, Table, decode, number, read_number};
use crate::{Charge, Refused, StoreError, TenantRecord};

/// The counts one transaction has read: a few tenants at most, so a list.
#[derive(Default)]
pub(crate) struct Meter {
    accounts: Vec<Account>,
}

struct Account {
    tenant: String,
    counted: Counted,
    used: u64,
    limit: Option<u64>,
    changed: bool,
}

/// What an account counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// Stored bytes, against `max_stored_bytes`.
    Bytes,
    /// Pending timers, against `max_timers`.
    Timers,
    /// Audit rows, against `max_audit_rows`.
    Audit,
}

impl Counted {
    /// The row of the `usage` table that holds `tenant`'s count.
    fn row(self, tenant: &str) -> String {
        match self {
            Self::Bytes => tenant.to_owned(),
            Self::Timers => format!("{tenant}/timers"),
            Self::Audit => format!("{tenant}/audit"),
        }
    }

    /// The quota of `record` that holds it.
    fn limit(self, record: &TenantRecord) -> Option<u64> {
        match self {
            Self::Bytes => record.quota.max_stored_bytes,
            Self::Timers => record.quota.max_timers,
            Self::Audit => record.quota.max_audit_rows,
        }
    }
}

impl Apply<'_> {
    /// Tenant `tenant`'s account of stored bytes, read on first use.
    fn account(&mut self, tenant: &str) -> Result<&mut Account, StoreError> {
        self.account_of(tenant, Counted::Bytes)
    }

    /// Tenant `tenant`'s account of `counted`, read on first use.
    fn account_of(&mut self, tenant: &str, counted: Counted) -> Result<&mut Account, StoreError> {
        let found = self
            .meter
            .accounts
            .iter()
            .position(|a| a.tenant == tenant && a.counted == counted);
        let at = match found {
            Some(at) => at,
            None => {
                let used = self
                    .rows
                    .get(Table::Usage, Key::Str(&counted.row(tenant)))?
                    .map_or(0, |used| read_number(&used));
                let limit = match self.rows.get(Table::Tenants, Key::Str(tenant))? {
                    Some(bytes) => counted.limit(&decode::<TenantRecord>(tenant, &bytes)?),
                    None => None,
                };
                self.meter.accounts.push(Account {
                    tenant: tenant.to_owned(),
                    counted,
                    used,
                    limit,
                    changed: false,
                });
                self.meter.accounts.len() - 1
            }
        };
        Ok(&mut self.meter.accounts[at])
    }

    /// Refuses a new timer of `tenant`'s when the tenant has its
    /// `max_timers` pending, not counting one the same write removes
    /// (`freeing`: a step that fired a timer sets another).
    pub(super) fn admit_timer(
        &mut self,
        tenant: &str,
        freeing: bool,
    ) -> Result<Result<(), Refused>, StoreError> {
        let account = self.account_of(tenant, Counted::Timers)?;
        let after = account.used.saturating_sub(u64::from(freeing));
        match account.limit {
            Some(limit) if after >= limit => Ok(Err(Refused::TimerQuota {
                tenant: tenant.to_owned(),
                timers: account.used,
                limit,
            })),
            _ => Ok(Ok(())),
        }
    }

    /// Counts an audit row of `tenant`'s: how many it now has past its
    /// `max_audit_rows` (0 within it).
    pub(super) fn count_audit(&mut self, tenant: &str) -> Result<u64, StoreError> {
        let account = self.account_of(tenant, Counted::Audit)?;
        account.used = account.used.saturating_add(1);
        account.changed = true;
        Ok(account
            .limit
            .map_or(0, |limit| account.used.saturating_sub(limit)))
    }

    /// Takes an audit row deleted off `tenant`'s count.
    pub(super) fn uncount_audit(&mut self, tenant: &str) -> Result<(), StoreError> {
        let account = self.account_of(tenant, Counted::Audit)?;
        account.used = account.used.saturating_sub(1);
        account.changed = true;
        Ok(())
    }

    /// Counts a timer of `tenant`'s set (`1`) or gone (`-1`).
    pub(super) fn count_timer(&mut self, tenant: &str, set: bool) -> Result<(), StoreError> {
        let account = self.account_of(tenant, Counted::Timers)?;
        account.used = if set {
            account.used.saturating_add(1)
        } else {
            account.used.saturating_sub(1)
        };
        account.changed = true;
        Ok(())
    }

    /// Refuses `charge`, if it is refusable, when its write would grow its
    /// tenant's count over the tenant's quota. A write that gives back at
    /// least what it adds (`Apply::freed`, noted by the checks before)
    /// is never refused, so a tenant over its quota can make room.
    pub(super) fn admit(
        &mut self,
        charge: Option<&Charge>,
    ) -> Result<Result<(), Refused>, StoreError> {
        let Some(charge) = charge.filter(|c| c.refusable && c.bytes > self.freed) else {
            return Ok(Ok(()));
        };
        let growth = charge.bytes - self.freed;
        let account = self.account(&charge.tenant)?;
        match account.limit {
            Some(limit) if account.used.saturating_add(growth) > limit => {
                Ok(Err(Refused::StorageQuota {
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
        let record = decode::<TenantRecord>(tenant, record)?;
        for account in &mut self.meter.accounts {
            if account.tenant == tenant {
                account.limit = account.counted.limit(&record);
            }
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
                    Key::Str(&account.counted.row(&account.tenant)),
                    &number(account.used),
                )?;
            }
        }
        Ok(())
    }
}
