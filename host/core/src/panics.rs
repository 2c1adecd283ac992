//! Panics contained. A panic is a host bug, never a guest's doing; when one
//! happens in a unit of work (a step attempt, a batch, a timer's turn), that
//! unit fails and the thread goes on serving the others. Each one is
//! logged with its message and counted in `weft_panics_total`, by thread.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// The thread a panic was contained on.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ThreadLabels {
    /// `worker`, `commit`, `timers`, `spares`, `hub`, ...
    pub thread: &'static str,
}

/// Panics contained in this process, by thread. Process-wide, since a
/// panic is the process's, whichever host it served.
pub(crate) static PANICS: LazyLock<Family<ThreadLabels, Counter>> = LazyLock::new(Family::default);

/// Runs `work`; a panic in it is caught, logged, counted under `thread`,
/// and returned as its message. `work` must leave nothing half-changed
/// that others read when it unwinds (a unit of work that owns its state),
/// which is why this asserts unwind safety.
pub fn contain<T>(thread: &'static str, work: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(work)).map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        PANICS.get_or_create(&ThreadLabels { thread }).inc();
        tracing::error!(thread, panic = %message, "a unit of work panicked; it failed alone");
        message
    })
}

/// Panics contained so far on `thread`, in this process.
pub fn count(thread: &'static str) -> u64 {
    PANICS.get_or_create(&ThreadLabels { thread }).get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_returned_counted_and_the_caller_goes_on() {
        let before = count("test");
        assert_eq!(contain("test", || 7), Ok(7));
        #[allow(clippy::panic)]
        let caught = contain("test", || -> u8 { panic!("boom {}", 1) });
        assert_eq!(caught, Err("boom 1".to_owned()));
        assert_eq!(count("test"), before + 1);
    }
}
