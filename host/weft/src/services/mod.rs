//! The host's operations, each with one entrance. The HTTP API and the
//! `weft` command are adapters over these: they check who asks and turn
//! the answer into a response or an exit code; the rules of an operation
//! (what must hold before it, what it writes, in which order) live here
//! or below, in the engine. A command that works on a store without a
//! server opens a [`Host`](crate::Host) in maintenance
//! ([`HostConfig::maintenance`](crate::HostConfig::maintenance)) and comes
//! through here too.
//!
//! The operations move here area by area; `docs/architecture.md` lists
//! which are here and which are still written in an adapter.

mod plugins;
mod runs;
mod schedules;
mod snapshots;
mod tokens;

use std::sync::Arc;

use weft_engine::Engine;

use crate::workflows::Deployments;

pub use schedules::ScheduleRefused;
pub use tokens::{MAX_LABEL, NewToken, TokenRefused};

/// The host's operations over its engine and deployments.
#[derive(Debug, Clone)]
pub struct Services {
    engine: Arc<Engine>,
    deployments: Arc<Deployments>,
}

impl Services {
    /// The operations over `engine`, serving `deployments`.
    pub fn new(engine: Arc<Engine>, deployments: Arc<Deployments>) -> Self {
        Self {
            engine,
            deployments,
        }
    }

    /// The engine the operations drive.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Whether tenant `name` exists: `default` always does; another while
    /// its row is in the store (not removed).
    fn tenant_exists(&self, name: &str) -> Result<bool, weft_store::StoreError> {
        Ok(name == weft_core::tenant::DEFAULT
            || self
                .engine
                .store()
                .tenants()?
                .iter()
                .any(|t| t.name == name))
    }
}
