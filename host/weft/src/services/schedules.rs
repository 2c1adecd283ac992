//! Cron triggers added by hand: added, paused, resumed, removed. Each is
//! blocking.

use weft_engine::ScheduleError;
use weft_store::{ScheduleRecord, StoreError};

use super::Services;

/// Why a trigger was not added, paused or resumed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleRefused {
    /// No such workflow here: on a serving host, none served now; on a
    /// host in maintenance, none deployed to the store.
    #[error("no workflow `{0}` is deployed here")]
    UnknownWorkflow(String),
    /// No such trigger.
    #[error("no trigger `{0}`")]
    UnknownTrigger(String),
    /// The trigger was refused, or the store failed.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
}

impl From<StoreError> for ScheduleRefused {
    fn from(e: StoreError) -> Self {
        Self::Schedule(ScheduleError::Store(e))
    }
}

impl Services {
    /// Adds a trigger for `workflow` (its stored id), `origin` naming who
    /// adds it (`api`, `cli`). The workflow must be deployed here: served
    /// now on a serving host; on a host in maintenance, deployed to the
    /// store at some time, by a tenant that is not removed (it serves
    /// nothing itself).
    pub fn add_schedule(
        &self,
        workflow: &str,
        spec: weft_model::ScheduleSpec,
        origin: &str,
    ) -> Result<ScheduleRecord, ScheduleRefused> {
        if !self.deployed(workflow)? {
            return Err(ScheduleRefused::UnknownWorkflow(workflow.to_owned()));
        }
        Ok(self.engine.add_schedule(workflow, spec, origin)?)
    }

    /// Pauses (or resumes) trigger `key`; resuming starts over from now.
    pub fn set_schedule_paused(
        &self,
        key: &str,
        paused: bool,
    ) -> Result<ScheduleRecord, ScheduleRefused> {
        self.engine
            .set_schedule_paused(key, paused)?
            .ok_or_else(|| ScheduleRefused::UnknownTrigger(key.to_owned()))
    }

    /// Removes trigger `key`, one added by hand (a workflow's own are
    /// removed by deploying the workflow without them).
    pub fn remove_schedule(&self, key: &str) -> Result<ScheduleRecord, ScheduleRefused> {
        self.engine
            .remove_schedule(key)?
            .ok_or_else(|| ScheduleRefused::UnknownTrigger(key.to_owned()))
    }

    /// Whether workflow `id` is deployed here (see
    /// [`Services::add_schedule`]): a removed tenant's is not.
    fn deployed(&self, id: &str) -> Result<bool, StoreError> {
        if self.deployments.serving() {
            return Ok(self.deployments.current().get(id).is_some());
        }
        if self.deployments.versions(id)?.is_empty() {
            return Ok(false);
        }
        self.tenant_exists(weft_core::tenant::of(id))
    }
}
