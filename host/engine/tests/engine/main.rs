//! The engine's walk and scheduler, driven through its public API with a
//! fake [`StepRunner`] and a simulated clock: no WebAssembly, no real waits.
//!
//! Proves, by the calls the fake runner receives and the records the store
//! holds: every control-flow construct (sequence, `parallel`, `if`,
//! `foreach` with `concurrency`, `while`, `catch`, `retry`, `sleep`,
//! `await`, `subflow`, a run's `timeout`, cancellation); admission beyond
//! `max_resident`; resumption from records (a committed step is not called
//! again, the call in flight is); and that a failed attempt's effects are
//! never committed.
//!
//! One test binary, `engine`, in modules:
//! - `fake`: the fake runner, its plugins and the gate that holds calls;
//! - `common`: the host around the engine, and the shared reads and
//!   assertions;
//! - `control_flow`: sequence, `parallel`, `if`, `foreach`, `while`,
//!   `catch`;
//! - `time`: retries, sleeps and deadlines on the simulated clock;
//! - `actors`: outside actors, `await` and cancel;
//! - `runs`: child runs, admission, resumption, and a failed attempt's
//!   effects.
//!
//! [`StepRunner`]: weft_engine::StepRunner

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// Asserts that `$value` matches `$pattern`, showing it if not. Defined
/// before the modules, so that every one of them can use it.
macro_rules! assert_matches {
    ($value:expr, $pattern:pat) => {{
        let value = $value;
        assert!(matches!(value, $pattern), "{value:?}");
    }};
}

mod actors;
mod common;
mod control_flow;
mod fake;
mod panics;
mod runs;
mod time;
