//! Per-call resource limits, enforced by the call's wasmtime `Store`.

use wasmtime::ResourceLimiter;

/// Table elements a call may hold across all its tables.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;
/// Instances, memories and tables per store. A Rust component has a handful
/// of core instances; this bounds a hostile one.
const MAX_OBJECTS: usize = 64;

/// Caps the total linear memory of one call, and remembers a refusal so the
/// host can tell a memory-limit trap from any other.
#[derive(Debug)]
pub(super) struct CallLimiter {
    limit: usize,
    used: usize,
    pub(super) refused: Option<usize>,
}

/// Returned as the trap when a guest grows its memory past its limit.
#[derive(Debug, thiserror::Error)]
#[error("memory limit exceeded")]
pub(super) struct MemoryLimitExceeded;

impl CallLimiter {
    pub(super) fn new(limit: u64) -> Self {
        Self {
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            used: 0,
            refused: None,
        }
    }
}

impl CallLimiter {
    /// The bytes of memory granted so far.
    pub(super) fn used(&self) -> usize {
        self.used
    }

    /// Carries over what an instance made under another limiter was
    /// granted: the instance keeps that memory.
    pub(super) fn carry(&mut self, used: usize) {
        self.used = used;
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.used.saturating_add(desired.saturating_sub(current));
        if total > self.limit {
            self.refused = Some(total);
            // An error, not `Ok(false)`: the call traps here instead of the
            // guest seeing a failed `memory.grow` and failing obscurely later.
            return Err(MemoryLimitExceeded.into());
        }
        self.used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        MAX_OBJECTS
    }

    fn tables(&self) -> usize {
        MAX_OBJECTS
    }

    fn memories(&self) -> usize {
        MAX_OBJECTS
    }
}
