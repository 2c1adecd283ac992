//! The engine's tests' fake plugins, on the engine's fake runner
//! (`weft_engine::fake`, which the simulator uses too): `echo`, `fatal`,
//! `flaky`, and the [`Gate`], a plugin that holds its calls until it is
//! opened or their run tells them to stop.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::json;

use weft_core::ErrorRecord;
use weft_engine::{StepCall, StepOutcome};

pub(crate) use weft_engine::fake::{Behaviour, FakeSource, Seen};

use crate::common::eventually;

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap()
}

/// Waits until `n` loads of `source` wait.
pub(crate) fn wait_loads_held(source: &FakeSource, n: usize) {
    eventually("loads to wait", || source.loads_waiting() >= n);
}

/// A source of the fake plugins `echo`, `fatal` and `flaky` (fails twice,
/// retryably), and of `extra`.
pub(crate) fn source(extra: Vec<(&str, Behaviour)>) -> FakeSource {
    let fatal: Behaviour = Arc::new(|_, _| StepOutcome::of(Err(broken())));
    let defaults = [("echo", echo()), ("fatal", fatal), ("flaky", flaky())];
    FakeSource::new(defaults.into_iter().chain(extra)).checking_pins()
}

pub(crate) fn echo() -> Behaviour {
    Arc::new(|_, input| StepOutcome::of(Ok(input)))
}

pub(crate) fn broken() -> ErrorRecord {
    ErrorRecord::fatal("broken", "broken for good")
}

pub(crate) fn unavailable(attempt: u32) -> ErrorRecord {
    let mut error = ErrorRecord::fatal("unavailable", format!("attempt {attempt} failed"));
    error.retryable = true;
    error
}

/// Fails its first two attempts retryably, then gives its attempt.
fn flaky() -> Behaviour {
    Arc::new(|call, _| match call.context.attempt {
        n @ 1..=2 => StepOutcome::of(Err(unavailable(n))),
        n => StepOutcome::of(Ok(json!({ "attempt": n }))),
    })
}

/// Holds calls until it is opened, or until their run tells them to stop.
#[derive(Default)]
pub(crate) struct Gate {
    entered: AtomicUsize,
    open: AtomicBool,
    cancelled: AtomicUsize,
}

impl Gate {
    /// True once the gate is open; false if the call was told to stop (or
    /// after 5 s, so that a failing test does not hang).
    pub(crate) fn pass(&self, call: &StepCall) -> bool {
        self.entered.fetch_add(1, SeqCst);
        let give_up = Instant::now() + Duration::from_secs(5);
        while !self.open.load(SeqCst) && Instant::now() < give_up {
            if call.cancel.load(SeqCst) {
                self.cancelled.fetch_add(1, SeqCst);
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.open.load(SeqCst)
    }

    pub(crate) fn wait_entered(&self, calls: usize) {
        eventually("the gate", || self.entered.load(SeqCst) >= calls);
    }

    pub(crate) fn open(&self) {
        self.open.store(true, SeqCst);
    }

    pub(crate) fn wait_cancelled(&self) {
        eventually("a stop", || self.cancelled.load(SeqCst) == 1);
    }

    /// A plugin that passes this gate, then echoes its input.
    pub(crate) fn plugin(self: &Arc<Self>) -> Behaviour {
        let gate = Arc::clone(self);
        Arc::new(move |call, input| {
            let stopped = ErrorRecord::fatal("stopped", "told to stop");
            StepOutcome::of(gate.pass(call).then_some(input).ok_or(stopped))
        })
    }
}

pub(crate) fn calls(source: &FakeSource) -> Vec<Seen> {
    source.calls()
}
