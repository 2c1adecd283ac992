//! What a run's busy leaves wait for: timers, or outside actors.

use super::Drive;

impl Drive {
    /// True when every leaf under way waits for a timer (and one does): the
    /// run has nothing to do until one fires. `also` counts as waiting.
    pub(crate) fn only_timers(&self, also: Option<&str>) -> bool {
        !self.busy.is_empty()
            && self.busy.iter().all(|path| {
                self.timers.contains_key(path)
                    || self.awaits.contains(path)
                    || Some(path.as_str()) == also
            })
    }
}
