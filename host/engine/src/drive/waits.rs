//! What a run's busy leaves wait for: timers, or outside actors.
//!
//! The invariant these methods keep: every leaf in `timers` or `awaits` is
//! also in `busy`, so the walk does not offer a leaf that waits. The
//! scheduler changes waits only through them; inside the drive, `plan`,
//! `undo` and `answer` change `busy` and `awaits` too.

use std::collections::HashSet;

use weft_store::{TimerKind, TimerRef};

use super::{Drive, Next, Undo};

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

    /// True while a leaf has an attempt under way that no timer, outside
    /// actor or child run stands for: a call running, or its result not
    /// committed yet.
    pub(crate) fn calls_under_way(&self) -> bool {
        self.busy.iter().any(|path| {
            !self.timers.contains_key(path)
                && !self.awaits.contains(path)
                && self
                    .results
                    .get(path)
                    .and_then(|leaf| leaf.open_child())
                    .is_none()
        })
    }

    /// The busy leaves: a call under way or finished and not committed, a
    /// wait on a timer, an outside actor or a child run.
    #[cfg(feature = "stepped")]
    pub(crate) fn busy_leaves(&self) -> Vec<String> {
        self.busy.iter().cloned().collect()
    }

    /// The attempt at `path` is durable, and the run goes on as `next`
    /// says: the leaf is done with (`Step`), or waits for a timer or an
    /// outside actor. Answers the timer to arm, if any.
    pub(crate) fn committed(&mut self, path: String, next: Next) -> Option<TimerRef> {
        let timer = match next {
            Next::Step | Next::Done => {
                self.busy.remove(&path);
                self.timers.remove(&path);
                self.awaits.remove(&path);
                return None;
            }
            Next::Wait(timer) => Some(timer),
            Next::Await(timer) => {
                self.awaits.insert(path.clone());
                timer
            }
        };
        if let Some(timer) = timer {
            self.timers.insert(path, timer);
        }
        timer
    }

    /// The commit of the fire at `path` was refused because the timer is
    /// gone (fired or cancelled elsewhere): the attempt is undone, and the
    /// leaf keeps waiting as it was.
    pub(crate) fn fire_lost(&mut self, undo: Undo, path: String) {
        self.undo(undo);
        self.busy.insert(path);
    }

    /// Retry delay `timer` at `path` is firing: the leaf stops counting as
    /// waiting, so the run cannot suspend before the fire lands. It stays
    /// busy until [`Drive::retry_fired`]. False when the leaf does not
    /// wait for `timer` (a second fire of a timer armed twice, or of one
    /// that fired already): nothing is to be done.
    pub(crate) fn retry_firing(&mut self, path: &str, timer: TimerRef) -> bool {
        if !self.waits_for(path, timer) {
            return false;
        }
        self.timers.remove(path);
        true
    }

    /// Retry delay `timer` at `path` is over: the leaf is ready for its
    /// next attempt. False, and nothing changes, when the leaf no longer
    /// waits for it: another fire of the same timer made it ready first,
    /// and its attempt may be under way.
    pub(crate) fn retry_fired(&mut self, path: &str, timer: TimerRef) -> bool {
        if !self.waits_for(path, timer) {
            return false;
        }
        self.busy.remove(path);
        if let Some(leaf) = self.results.get_mut(path) {
            leaf.timer = None;
            self.cursor = None;
        }
        true
    }

    /// Whether the leaf at `path` still waits for `timer`.
    fn waits_for(&self, path: &str, timer: TimerRef) -> bool {
        let leaf = self.results.get(path);
        self.busy.contains(path) && leaf.and_then(|leaf| leaf.timer) == Some(timer)
    }

    /// Restores the waits of a run read back from the store, where
    /// `pending` holds the ids of its timers still pending: a leaf whose
    /// timer is pending waits for it, a retry whose timer is gone may run,
    /// and an `await` leaf waits for an outside actor.
    pub(crate) fn restore_waits(&mut self, pending: &HashSet<u64>) {
        self.cursor = None;
        for (path, leaf) in &mut self.results {
            if let Some(timer) = leaf.timer {
                if pending.contains(&timer.id) {
                    self.busy.insert(path.clone());
                    self.timers.insert(path.clone(), timer);
                } else if timer.kind == TimerKind::Retry {
                    leaf.timer = None;
                }
            }
            if leaf.awaiting {
                self.busy.insert(path.clone());
                self.awaits.insert(path.clone());
            }
        }
    }

    /// The keys of the timers the run waits for, its deadline's included:
    /// what to arm when it is taken in.
    pub(crate) fn armed_keys(&self) -> Vec<(u64, u64)> {
        let deadline = self.run.deadline.as_ref();
        let timers = self.timers.values().chain(deadline);
        timers.map(TimerRef::key).collect()
    }

    /// Where the leaf at `path` is, for an answer that cannot be taken.
    pub(crate) fn describe(&self, path: &str) -> String {
        match self.results.get(path) {
            None => "not reached (or not an `await` step)".to_owned(),
            Some(_) if self.busy.contains(path) && !self.awaits.contains(path) => {
                "being answered".to_owned()
            }
            Some(leaf) => super::leaf_state(leaf),
        }
    }
}
