//! A bound on live instances: a call waits for a free slot rather than fail
//! when the pooling allocator is full.

use std::sync::{Condvar, Mutex, PoisonError};

/// A counting semaphore over instance slots.
#[derive(Debug)]
pub(super) struct Slots {
    max: u32,
    used: Mutex<u32>,
    freed: Condvar,
}

/// A held slot; dropping it frees the slot.
#[derive(Debug)]
pub(super) struct Slot<'a>(&'a Slots);

impl Slots {
    pub(super) fn new(max: u32) -> Self {
        Self {
            max: max.max(1),
            used: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// Takes a slot, blocking until one is free.
    pub(super) fn acquire(&self) -> Slot<'_> {
        let mut used = weft_core::lock(&self.used);
        while *used >= self.max {
            used = self
                .freed
                .wait(used)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *used += 1;
        Slot(self)
    }
}

impl Slots {
    /// A slot, if one is free now.
    pub(super) fn try_acquire(&self) -> Option<Slot<'_>> {
        let mut used = weft_core::lock(&self.used);
        if *used >= self.max {
            return None;
        }
        *used += 1;
        Some(Slot(self))
    }

    /// Takes a slot for a spare instance if fewer than half are in use,
    /// so that spares never hold the slots calls wait for.
    pub(super) fn try_acquire_below_half(&self) -> bool {
        let mut used = weft_core::lock(&self.used);
        if *used >= self.max / 2 {
            return false;
        }
        *used += 1;
        true
    }

    /// Gives back a slot taken with [`Slots::try_acquire_below_half`].
    pub(super) fn release(&self) {
        let mut used = weft_core::lock(&self.used);
        *used = used.saturating_sub(1);
        self.freed.notify_one();
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_set_of_slots_blocks_until_one_is_freed() {
        let slots = Slots::new(2);
        let a = slots.acquire();
        let _b = slots.acquire();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let _c = slots.acquire();
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!waiter.is_finished(), "a third slot was handed out");
            drop(a);
            waiter.join().unwrap();
        });
    }
}
