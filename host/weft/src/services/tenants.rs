//! Tenants: add one, set its quota, remove it. Which caller may is the
//! adapter's to check (an admin's, over the API). Blocking.

use weft_core::tenant;
use weft_store::{
    AccessWrite, Quota, Refused, RunFilter, RunState, StoreError, TenantRecord, Write,
};

use super::Services;
use crate::hub::HubError;

/// Why a tenant was not added, changed or removed.
#[derive(Debug, thiserror::Error)]
pub enum TenantRefused {
    /// The name does not check; the message says why.
    #[error("name: {0}")]
    BadName(String),
    /// A quota field does not check; the message names it.
    #[error("{0}")]
    BadQuota(String),
    /// A tenant of that name exists (`default` always does).
    #[error("tenant `{0}` exists already")]
    Exists(String),
    /// No such tenant.
    #[error("no tenant `{0}`")]
    Unknown(String),
    /// Tenant `default` is asked to go.
    #[error("tenant `default` cannot be removed")]
    Default,
    /// The tenant has runs that have not ended, and removal was not forced.
    #[error(
        "tenant `{tenant}` has {live} runs that have not ended; cancel them, or remove it with force"
    )]
    Busy {
        /// The tenant asked to go.
        tenant: String,
        /// Its runs that have not ended.
        live: usize,
    },
    /// Pausing one of its triggers failed.
    #[error("pausing trigger `{key}`: {reason}")]
    Trigger {
        /// The trigger.
        key: String,
        /// Why.
        reason: String,
    },
    /// Removing one of its subscriptions failed.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Tenant `default`'s row while it has none (until its quota is set).
pub fn default_row() -> TenantRecord {
    TenantRecord {
        name: tenant::DEFAULT.to_owned(),
        created_at: weft_core::clock::Timestamp(0),
        quota: Quota::default(),
    }
}

/// Whether `quota` checks: its durations are ones the host can hold, its
/// retention reads.
fn check_quota(quota: &Quota) -> Result<(), TenantRefused> {
    for (field, millis) in [
        ("max_step_timeout_ms", quota.max_step_timeout_ms),
        ("guest_ms_per_minute", quota.guest_ms_per_minute),
    ] {
        if let Some(millis) = millis {
            weft_core::clock::check_duration(std::time::Duration::from_millis(millis))
                .map_err(|m| TenantRefused::BadQuota(format!("{field}: {millis} ms {m}")))?;
        }
    }
    if let Some(retain) = &quota.retain
        && let Err(e) = weft_model::Retain::parse(retain)
    {
        return Err(TenantRefused::BadQuota(format!("retain `{retain}`: {e}")));
    }
    Ok(())
}

impl Services {
    /// Tenant `name`'s row: stored, or [`default_row`] for `default`
    /// without one; `None` if there is no such tenant.
    pub fn tenant(&self, name: &str) -> Result<Option<TenantRecord>, StoreError> {
        let found = self
            .engine
            .store()
            .tenants()?
            .into_iter()
            .find(|t| t.name == name);
        Ok(match found {
            Some(found) => Some(found),
            None if name == tenant::DEFAULT => Some(default_row()),
            None => None,
        })
    }

    /// Adds tenant `name` with `quota` (or [`Quota::tenant_default`]), and
    /// holds it to that quota from now on.
    pub fn add_tenant(
        &self,
        name: &str,
        quota: Option<Quota>,
    ) -> Result<TenantRecord, TenantRefused> {
        tenant::check(name).map_err(TenantRefused::BadName)?;
        if name == tenant::DEFAULT {
            return Err(TenantRefused::Exists(name.to_owned()));
        }
        let quota = quota.unwrap_or_else(Quota::tenant_default);
        check_quota(&quota)?;
        let record = TenantRecord {
            name: name.to_owned(),
            created_at: self.engine.clock().now(),
            quota,
        };
        match self.apply_access(AccessWrite::put_tenant(&record, true)) {
            Ok(()) => {}
            Err(StoreError::Refused(Refused::Exists(_))) => {
                return Err(TenantRefused::Exists(name.to_owned()));
            }
            Err(e) => return Err(e.into()),
        }
        enforce_quota(&self.engine, name, &record.quota);
        Ok(record)
    }

    /// Sets tenant `name`'s whole quota, and holds it to it from now on.
    pub fn set_quota(&self, name: &str, quota: Quota) -> Result<TenantRecord, TenantRefused> {
        check_quota(&quota)?;
        let stored = self
            .engine
            .store()
            .tenants()?
            .iter()
            .any(|t| t.name == name);
        let mut record = self
            .tenant(name)?
            .ok_or_else(|| TenantRefused::Unknown(name.to_owned()))?;
        record.quota = quota;
        self.apply_access(AccessWrite::put_tenant(&record, !stored))?;
        enforce_quota(&self.engine, name, &record.quota);
        Ok(record)
    }

    /// Removes tenant `name`; answers how many of its runs were cancelled.
    /// Refused with [`TenantRefused::Busy`] while it has runs that have
    /// not ended, unless `force`. Then its workflows stop being served,
    /// its triggers are paused, its subscriptions removed, its live runs
    /// cancelled, and its tokens revoked in the transaction that removes
    /// it. Its ended runs and revisions stay in the store, unreachable.
    pub fn remove_tenant(&self, name: &str, force: bool) -> Result<usize, TenantRefused> {
        if name == tenant::DEFAULT {
            return Err(TenantRefused::Default);
        }
        let store = self.engine.store();
        if self.tenant(name)?.is_none() {
            return Err(TenantRefused::Unknown(name.to_owned()));
        }
        let filter = RunFilter {
            tenant: Some(name.to_owned()),
            state: Some(RunState::Running),
            ..RunFilter::default()
        };
        let live = store.runs(&filter, usize::MAX)?.len();
        if live > 0 && !force {
            return Err(TenantRefused::Busy {
                tenant: name.to_owned(),
                live,
            });
        }
        // Nothing new starts: not over the API, not by a trigger.
        self.deployments.withdraw(name);
        for row in store.schedules()? {
            if tenant::of(&row.workflow) == name && !row.paused {
                self.engine
                    .set_schedule_paused(&row.key, true)
                    .map_err(|e| TenantRefused::Trigger {
                        key: row.key.clone(),
                        reason: e.to_string(),
                    })?;
            }
        }
        for subscription in store.subscriptions(None)? {
            if tenant::of(&subscription.key) == name {
                self.hub.unsubscribe(&subscription.key)?;
            }
        }
        let mut cancelled = 0;
        for run in store.runs(&filter, usize::MAX)? {
            match self.engine.cancel(&run.id) {
                Ok(()) => cancelled += 1,
                // Ended meanwhile: nothing to cancel.
                Err(StoreError::Refused(Refused::RunEnded(_))) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Its tokens are revoked with it, in one transaction.
        let now = self.engine.clock().now();
        let mut writes = vec![Write::Access(AccessWrite::RemoveTenant(name.to_owned()))];
        for mut token in store.tokens()? {
            if token.tenant == name && token.revoked_at.is_none() {
                token.revoked_at = Some(now);
                writes.push(Write::Access(AccessWrite::PutToken {
                    id: token.id.clone(),
                    record: weft_store::encode(&token),
                    new: false,
                }));
            }
        }
        let refs: Vec<&Write> = writes.iter().collect();
        for outcome in store.apply(&refs)? {
            match outcome {
                Ok(()) | Err(Refused::NotFound(_)) => {}
                Err(e) => return Err(StoreError::from(e).into()),
            }
        }
        release_quota(&self.engine, name);
        Ok(cancelled)
    }
}

/// Holds tenant `name` to `quota` from now on: its limits and its egress
/// policy.
pub fn enforce_quota(engine: &weft_engine::Engine, name: &str, quota: &weft_store::Quota) {
    engine.set_tenant_limits(name, limits_of(quota));
    engine.egress().set_tenant(name, quota.egress.clone());
}

/// Lets tenant `name`, removed, go: no limits and no egress rules of its
/// own from now on.
pub fn release_quota(engine: &weft_engine::Engine, name: &str) {
    engine.set_tenant_limits(name, weft_engine::TenantLimits::default());
    engine.egress().set_tenant(name, None);
}

/// What the engine holds a tenant with `quota` to.
fn limits_of(quota: &weft_store::Quota) -> weft_engine::TenantLimits {
    weft_engine::TenantLimits {
        weight: quota.weight.unwrap_or(1).clamp(1, 1000),
        max_resident: quota.max_resident.map(|n| n as usize),
        max_step_timeout: quota
            .max_step_timeout_ms
            .map(std::time::Duration::from_millis),
        max_step_memory: quota.max_step_memory,
        guest_time_per_minute: quota
            .guest_ms_per_minute
            .map(std::time::Duration::from_millis),
    }
}
