//! Writes, encoded on the caller's thread, so the one thread that commits
//! does no more than insert bytes and sync.

use std::sync::Arc;

use super::{DefinitionRecord, RunRecord, RunState, StepRecord};
use crate::runtime::KvEffects;

/// One durable change. A batch of writes commits as one transaction.
#[derive(Debug, Clone)]
pub enum Write {
    /// A new run, with its definition and the components it is pinned to.
    CreateRun {
        /// The run's id.
        id: String,
        /// The encoded [`RunRecord`].
        run: Vec<u8>,
        /// The definition's digest and encoded [`DefinitionRecord`].
        definition: (String, Vec<u8>),
        /// Each pinned component's digest and bytes.
        components: Vec<(String, Arc<[u8]>)>,
    },
    /// A step attempt's record and the run's next state.
    CommitStep {
        /// The run's id.
        id: String,
        /// The record's number within the run.
        seq: u32,
        /// The encoded [`StepRecord`].
        step: Vec<u8>,
        /// The encoded [`RunRecord`].
        run: Vec<u8>,
        /// Whether the run is still `running` after this write.
        running: bool,
        /// The step's key-value effects: refused as a whole, with
        /// [`StoreError::KvConflict`](super::StoreError::KvConflict), if a
        /// key it read has changed since.
        kv: Option<KvEffects>,
    },
    /// The run's new state alone (a run that ended on an expression).
    UpdateRun {
        /// The run's id.
        id: String,
        /// The encoded [`RunRecord`].
        run: Vec<u8>,
        /// Whether the run is still `running` after this write.
        running: bool,
    },
}

impl Write {
    /// A new run.
    pub fn create_run(
        run: &RunRecord,
        definition: &DefinitionRecord,
        components: Vec<(String, Arc<[u8]>)>,
    ) -> Self {
        Self::CreateRun {
            id: run.id.clone(),
            run: encode(run),
            definition: (definition.digest.clone(), encode(definition)),
            components,
        }
    }

    /// A step attempt's result, its key-value effects, and the run's next
    /// state.
    pub fn commit_step(step: &StepRecord, run: &RunRecord, kv: Option<KvEffects>) -> Self {
        Self::CommitStep {
            id: run.id.clone(),
            seq: step.seq,
            step: encode(step),
            run: encode(run),
            running: run.state == RunState::Running,
            kv: kv.filter(|kv| !kv.writes.is_empty() || !kv.reads.is_empty()),
        }
    }
}

impl Write {
    /// The run's new state alone.
    pub fn update_run(run: &RunRecord) -> Self {
        Self::UpdateRun {
            id: run.id.clone(),
            run: encode(run),
            running: run.state == RunState::Running,
        }
    }
}

/// Records are plain data (strings, numbers, JSON values): encoding them
/// cannot fail.
pub(super) fn encode(value: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}
