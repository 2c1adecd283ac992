//! Runs: cancel, delete, pause. Each is blocking.

use weft_engine::{PauseError, Pausing};
use weft_store::StoreError;

use super::Services;

impl Services {
    /// Cancels run `id` and the child runs under it: at once if it waits,
    /// or when its calls under way return. Refused with
    /// [`Refused::RunEnded`](weft_store::Refused::RunEnded) if it has ended, [`Refused::NotFound`](weft_store::Refused::NotFound)
    /// if there is no such run.
    pub fn cancel_run(&self, id: &str) -> Result<(), StoreError> {
        self.engine.cancel(id)
    }

    /// Deletes ended run `id` with its step records. Refused with
    /// [`Refused::Needed`] if it has not ended (or its parent has not),
    /// [`Refused::NotFound`] if there is no such run.
    pub fn delete_run(&self, id: &str) -> Result<(), StoreError> {
        self.engine.delete_run(id)
    }

    /// Pauses run `id`, recording `actor`: see [`weft_engine::Engine::pause`].
    pub fn pause_run(&self, id: &str, actor: &str) -> Result<Pausing, PauseError> {
        self.engine.pause(id, actor)
    }
}
