//! The host's operations, each with one entrance. The HTTP API and the
//! `weft` command are adapters over these: they check who asks and turn
//! the answer into a response or an exit code; the rules of an operation
//! (what must hold before it, what it writes, in which order) live here
//! or below, in the engine. A command that works on a store without a
//! server opens a [`Host`](crate::Host) in maintenance
//! ([`HostConfig::maintenance`](crate::HostConfig::maintenance)) and comes
//! through here too.
//!
//! Not here yet: a run's pause, resume and retry, answers to a waiting
//! step, subscriptions and a delivery's resend; their adapters call the
//! engine (or the hub) directly, each with one call and no rule of its own.
//! The audit entry of an operation is written by its adapter after the
//! operation, except a bulk action's, written here with it.

mod audit;
mod bulk;
pub mod deployments;
mod migrate;
mod plugins;
mod runs;
mod schedules;
mod secrets;
mod snapshots;
mod tenants;
mod tokens;

use std::sync::Arc;

use weft_engine::Engine;

use weft_store::{AccessWrite, StoreError, Write};

use crate::hub::Hub;
use deployments::Deployments;

pub use bulk::{Bulk, BulkAction, BulkDone, BulkRun, MAX_BULK_PAGE};
pub use migrate::{MigrateRefused, Migrated, Unmoved};
pub use schedules::ScheduleRefused;
pub use secrets::{MAX_SECRET_VALUE, Resealed, SecretRefused};
pub use tenants::{TenantRefused, default_row, enforce_quota, release_quota};
pub use tokens::{MAX_LABEL, NewToken, TokenRefused};

/// Whether tenant `name` exists in `store`: `default` always does; another
/// while its row is there (not removed).
pub(crate) fn tenant_exists(store: &dyn weft_store::Store, name: &str) -> Result<bool, StoreError> {
    Ok(name == weft_core::tenant::DEFAULT || store.tenants()?.iter().any(|t| t.name == name))
}

/// The host's operations over its engine, deployments and hub.
#[derive(Debug, Clone)]
pub struct Services {
    engine: Arc<Engine>,
    deployments: Arc<Deployments>,
    hub: Hub,
}

impl Services {
    /// The operations over `engine`, serving `deployments`, delivering
    /// through `hub`.
    pub fn new(engine: Arc<Engine>, deployments: Arc<Deployments>, hub: Hub) -> Self {
        Self {
            engine,
            deployments,
            hub,
        }
    }

    /// The engine the operations drive.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Whether tenant `name` exists: `default` always does; another while
    /// its row is in the store (not removed).
    fn tenant_exists(&self, name: &str) -> Result<bool, StoreError> {
        tenant_exists(self.engine.store().as_ref(), name)
    }

    /// Applies one write to tenants, tokens or secrets, and gives its own
    /// answer.
    fn apply_access(&self, write: AccessWrite) -> Result<(), StoreError> {
        self.engine.store().apply_one(&Write::Access(write))
    }
}
