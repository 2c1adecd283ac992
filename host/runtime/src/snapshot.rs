//! The `snapshot` capability (contract 0.3): read-only reference data
//! from the snapshot stores the step's workflow names.
//!
//! The runtime only forwards: which stores a step may read, which revision
//! of each it sees, and what has expired are the [`SnapshotSource`]'s
//! to decide (the engine's, which knows the run's pins and the clock).

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::bindings;
use super::sandbox::StepState;

/// The most keys one `keys` call answers.
pub const MAX_KEYS: usize = 10_000;

/// Where a call reads snapshot data. Blocking.
pub trait SnapshotSource: Send + Sync + std::fmt::Debug {
    /// The value (JSON text) of `key` in store `store`, if it has one that
    /// has not expired; an error, naming the store, if the step may not
    /// read it or the read failed.
    fn get(&self, store: &str, key: &str) -> Result<Option<String>, String>;

    /// Up to `limit` keys of `store` starting with `prefix` that have not
    /// expired, in byte order.
    fn keys(&self, store: &str, prefix: &str, limit: usize) -> Result<Vec<String>, String>;
}

/// Links `weft:plugin/snapshot` (0.3 and later) into `linker`.
pub(super) fn add_to_linker(linker: &mut Linker<StepState>) -> wasmtime::Result<()> {
    bindings::v3::weft::plugin::snapshot::add_to_linker::<StepState, HasSelf<StepState>>(
        linker,
        |s| s,
    )
}

/// What a step that may read no store is told.
fn none_named(store: &str) -> String {
    format!(
        "the workflow names no snapshot store, so `{store}` cannot be read; add `snapshots: [{store}]` to it"
    )
}

impl bindings::v3::weft::plugin::snapshot::Host for StepState {
    fn get(&mut self, store: String, key: String) -> Result<Option<String>, String> {
        match &self.snapshots {
            Some(source) => source.get(&store, &key),
            None => Err(none_named(&store)),
        }
    }

    fn keys(&mut self, store: String, prefix: String, limit: u32) -> Result<Vec<String>, String> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX).min(MAX_KEYS);
        match &self.snapshots {
            Some(source) => source.keys(&store, &prefix, limit),
            None => Err(none_named(&store)),
        }
    }
}

/// A call's snapshot source, shared with the runner that made it.
pub type SharedSnapshots = Arc<dyn SnapshotSource>;
