//! Calling a plugin: a fresh instance in a fresh store per call, bounded by
//! a deadline, a memory cap and a cancel flag; and what the call hands back.
//! A guest's failure is a [`CallError`], never a panic.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmtime::Trap;

use super::contract::Failure;
use super::{Plugin, spare};
use crate::error::CallError;
use crate::http::Violation;
use crate::kv::KvAccess;
use crate::log::LogSink;
use crate::sandbox::{Reach, StepState};
use crate::secrets::{Redactor, Secrets};
use crate::wait::Cancelled;
use crate::{Runtime, deadline_ticks};
use weft_core::egress::Egress;
use weft_core::{HttpCall, KvEffects, LogLine};

/// Where a call comes from; passed to the guest as `step-context`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepContext {
    /// The tenant that owns the run.
    pub tenant: String,
    /// The workflow's id.
    pub workflow: String,
    /// The run's id.
    pub run_id: String,
    /// The step's id.
    pub step_id: String,
    /// 1 on the first attempt.
    pub attempt: u32,
    /// Stable across the attempts of this step in this run.
    pub idempotency_key: String,
}

/// How one call is bounded, and what it may reach.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// The call's deadline; the runtime's default when `None`. It covers
    /// the instance's making too, unless the call finds a spare instance
    /// (made ahead of it; `RuntimeConfig::spare_instances`).
    pub timeout: Option<Duration>,
    /// The cap on the call's memory, in bytes; the runtime's default when
    /// `None`.
    pub memory_limit: Option<u64>,
    /// The most `timeout` may be, the default included: a tenant's
    /// ceiling.
    pub max_timeout: Option<Duration>,
    /// The most `memory_limit` may be, the default included: a tenant's
    /// ceiling.
    pub max_memory_limit: Option<u64>,
    /// The key-value space the call sees; with `None`, reads find nothing
    /// and writes fail.
    pub kv: Option<KvAccess>,
    /// When set, the call is interrupted at the next epoch tick (within a
    /// few milliseconds) with [`CallError::Cancelled`]: its run ended.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Where the call may send HTTP requests; with `None`, nowhere.
    pub egress: Option<Arc<Egress>>,
    /// The secrets the call may read. Their values are redacted from its
    /// logs, its error and its output.
    pub secrets: Secrets,
    /// The snapshot stores the call may read; with `None`, none.
    pub snapshots: Option<crate::SharedSnapshots>,
    /// A command's arguments and environment ([`Plugin::is_command`]); a
    /// step that is not a command has neither.
    pub command: crate::CommandLine,
}

/// The result of one call, with the log lines it produced either way.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The step's output, or why there is none.
    pub result: Result<Value, CallError>,
    /// What the step logged, in order.
    pub logs: Vec<LogLine>,
    /// What the call read and wrote in its key-value space. Only a
    /// successful call's effects may be committed.
    pub kv: KvEffects,
    /// The messages the call emitted, in order. Only a successful call's
    /// messages may be committed.
    pub emitted: Vec<weft_core::Emission>,
    /// The HTTP requests the call made, refused ones included, in order.
    pub http: Vec<HttpCall>,
    /// How long the instance took to make, and the call to run in it.
    pub timing: CallTiming,
}

/// Where a call's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallTiming {
    /// Making the instance on the call's path (zero if it could not be
    /// made, or was made ahead of the call).
    pub instantiate: Duration,
    /// How long the instance took to make, when it was a spare made ahead
    /// of the call by the runtime's spare thread
    /// (`RuntimeConfig::spare_instances`); `None` when the call made its own.
    pub spare: Option<Duration>,
    /// Running the call in it (zero if it was never made).
    pub call: Duration,
}

impl Plugin {
    /// Calls the step once on `input` (JSON text) in a fresh instance,
    /// bounded by `options`.
    ///
    /// Blocking: runs guest code on this thread until it returns, traps or
    /// reaches its deadline. Never panics on guest behaviour; every failure
    /// is a [`CallError`]. Has no effect outside the call: nothing is stored.
    pub fn call(&self, context: &StepContext, input: &str, options: &CallOptions) -> CallOutcome {
        let config = self.0.runtime.config();
        let timeout = options
            .timeout
            .unwrap_or(config.default_timeout)
            .min(options.max_timeout.unwrap_or(Duration::MAX));
        let memory_limit = options
            .memory_limit
            .unwrap_or(config.default_memory_limit)
            .min(options.max_memory_limit.unwrap_or(u64::MAX));
        let redactor = options.secrets.redactor();
        let log = LogSink::new(config.log_limit, &self.0.meta.name, &context.step_id)
            .redacting(redactor.clone());
        let turn = crate::share::Turn::begin(&context.tenant);
        let _ending = crate::share::Ending(Arc::clone(&turn));
        let reach = Reach {
            kv: options.kv.clone(),
            egress: options.egress.clone(),
            http_limits: config.http,
            secrets: options.secrets.clone(),
            snapshots: options.snapshots.clone(),
            // Only a call that may make requests needs one.
            traceparent: options.egress.as_ref().map(|_| {
                let prefix = format!("{}:", context.run_id);
                let path = context
                    .idempotency_key
                    .strip_prefix(&prefix)
                    .unwrap_or(&context.step_id);
                weft_core::trace::traceparent(&context.run_id, path, context.attempt)
            }),
            cancel: options.cancel.clone(),
            turn: Some(Arc::clone(&turn)),
            stdio: self.is_command().then(|| crate::sandbox::Stdio {
                program: self.0.meta.name.clone(),
                stdin: bytes::Bytes::copy_from_slice(input.as_bytes()),
                line: options.command.clone(),
            }),
        };
        let spare = self.0.spare.take(memory_limit);
        let ask = spare::Ask {
            tenant: Arc::from(context.tenant.as_str()),
            memory_limit,
            timeout,
        };
        if spare.is_some() {
            // The next call's instance is made while this one runs.
            self.0.runtime.shared.spares.request(&self.0, ask.clone());
        }
        let mut timing = CallTiming {
            spare: spare.as_ref().map(|spare| spare.made_in),
            ..CallTiming::default()
        };
        // Declared before the store, so dropped after it: the instance goes
        // back to the pool before its slot is given back.
        let held: Held<'_>;
        let (mut store, instance) = match spare {
            Some(spare::Spare {
                mut store,
                instance,
                slot,
                ..
            }) => {
                held = Held::Spare { _slot: slot };
                // The instance keeps the memory its making took; the rest of
                // the state is this call's.
                let used = store.data().limiter.used();
                *store.data_mut() =
                    StepState::new(memory_limit, log.clone(), reach, deadline(timeout));
                store.data_mut().limiter.carry(used);
                arm(&mut store, timeout);
                watch_host_calls(&mut store, Arc::clone(&turn));
                if let Some(cancel) = options.cancel.clone() {
                    watch_cancel(&mut store, cancel, timeout, Arc::clone(&turn));
                }
                (store, Ok(instance))
            }
            None => {
                let shared = &self.0.runtime.shared;
                let slot = shared.slots.try_acquire().unwrap_or_else(|| {
                    // A ready spare gives its slot to a call that needs one.
                    shared.spares.evict_one();
                    shared.slots.acquire()
                });
                held = Held::Slot { _slot: slot };
                let mut store =
                    new_store(&self.0.runtime, timeout, memory_limit, log.clone(), reach);
                watch_host_calls(&mut store, Arc::clone(&turn));
                if let Some(cancel) = options.cancel.clone() {
                    watch_cancel(&mut store, cancel, timeout, Arc::clone(&turn));
                }
                let started = Instant::now();
                let instance = self.0.pre.instantiate(&mut store);
                timing.instantiate = started.elapsed();
                self.0.spare.note(timing.instantiate);
                self.0.runtime.shared.spares.request(&self.0, ask.clone());
                (store, instance)
            }
        };
        let input = input.to_owned();
        let ran = instance.map(|instance| {
            let started = Instant::now();
            let ran = instance.run(&mut store, context, &input);
            crate::share::priority::restore();
            timing.call = started.elapsed();
            ran
        });
        let result = match ran {
            Err(e) => Err(CallError::Instantiate {
                message: format!("{e:#}"),
            }),
            Ok(ran) => match ran {
                Ok(Ok(output)) => store
                    .data_mut()
                    .held
                    .refused()
                    .and_then(|()| {
                        let weight = crate::budget::json_weight(&output);
                        store.data_mut().held.charge("the output", weight)
                    })
                    .map_err(|message| CallError::ResourceLimit { message })
                    .and_then(|()| {
                        serde_json::from_str(&output).map_err(|e| CallError::InvalidOutput {
                            message: e.to_string(),
                        })
                    })
                    .map(|mut output| {
                        // Inside strings only: a secret that looks like a
                        // number leaves the JSON around it alone.
                        if !redactor.is_empty() {
                            redactor.redact_value(&mut output);
                        }
                        output
                    })
                    .and_then(|output| self.check_output(output)),
                Ok(Err(error)) => Err(step_error(error, &redactor)),
                Err(trap) => Err(
                    match classify_trap(
                        &trap,
                        store.data().limiter.refused,
                        &log,
                        timeout,
                        memory_limit,
                    ) {
                        CallError::Trap { message } if !redactor.is_empty() => CallError::Trap {
                            message: redactor.redact(&message),
                        },
                        other => other,
                    },
                ),
            },
        };
        let state = match held {
            // A spare's store goes to the spare thread to be dropped; what
            // the call reports is taken out of it first, and the store keeps
            // an empty state with a log of its own.
            Held::Spare { _slot: slot } => {
                let log = LogSink::new(0, &self.0.meta.name, "retired");
                let spent = StepState::new(0, log, Reach::default(), Instant::now());
                let state = std::mem::replace(store.data_mut(), spent);
                self.0.runtime.shared.spares.retire(spare::Retired {
                    _store: store,
                    _slot: slot,
                });
                state
            }
            Held::Slot { .. } => store.into_data(),
        };
        let (mut http, mut violation) = state.http.finish();
        if !redactor.is_empty() {
            for call in &mut http {
                call.url = redactor.redact(&call.url);
                call.error = call.error.as_deref().map(|e| redactor.redact(e));
            }
            violation = violation.map(|v| match v {
                Violation::Denied(m) => Violation::Denied(redactor.redact(&m)),
                Violation::Limit(m) => Violation::Limit(redactor.redact(&m)),
            });
        }
        let result = match (result, state.kv.failed.clone(), violation) {
            // Past the host's budget for the call, the call fails, whatever
            // the guest made of the refusal.
            _ if state.held.over().is_some() => Err(CallError::ResourceLimit {
                message: state.held.over().unwrap_or_default(),
            }),
            // A request refused or over a limit fails the call, whatever the
            // guest made of it.
            (_, _, Some(Violation::Denied(message))) => Err(CallError::HttpDenied { message }),
            (_, _, Some(Violation::Limit(message))) => Err(CallError::HttpLimit { message }),
            (Ok(_), Some(message), None) => Err(CallError::Kv { message }),
            (result, _, None) => result,
        };
        CallOutcome {
            result,
            logs: log.finish(),
            kv: state.kv.into_effects(),
            emitted: state.outbox.emitted,
            http,
            timing,
        }
    }

    /// For `weft bench` only: times `n` calls of `run` on `input` in *one*
    /// instance, as instance reuse would do. weft never does this for runs:
    /// a reused instance keeps what one call left in its memory for the
    /// next, which breaks the isolation between runs and attempts.
    #[doc(hidden)]
    pub fn time_reused_calls(&self, input: &str, n: usize) -> Result<Vec<Duration>, CallError> {
        let config = self.0.runtime.config();
        let log = LogSink::new(config.log_limit, &self.0.meta.name, "bench");
        let mut store = new_store(
            &self.0.runtime,
            Duration::from_secs(3600),
            config.default_memory_limit,
            log,
            Reach::default(),
        );
        let context = StepContext {
            tenant: "bench".to_owned(),
            workflow: "bench".to_owned(),
            run_id: "bench".to_owned(),
            step_id: "bench".to_owned(),
            attempt: 1,
            idempotency_key: "bench".to_owned(),
        };
        let instance = self
            .0
            .pre
            .instantiate(&mut store)
            .map_err(|e| CallError::Instantiate {
                message: format!("{e:#}"),
            })?;
        let input = input.to_owned();
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let started = Instant::now();
            let answer = instance.run(&mut store, &context, &input);
            times.push(started.elapsed());
            match answer {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => return Err(step_error(error, &Redactor::default())),
                Err(trap) => {
                    return Err(CallError::Instantiate {
                        message: format!("{trap:#}"),
                    });
                }
            }
        }
        Ok(times)
    }
}

/// A store for one call: fresh state, the memory cap, and a deadline of one
/// tick more than `timeout` (the first tick may come at once).
pub(super) fn new_store(
    runtime: &Runtime,
    timeout: Duration,
    memory_limit: u64,
    log: LogSink,
    reach: Reach,
) -> wasmtime::Store<StepState> {
    let mut store = wasmtime::Store::new(
        &runtime.shared.engine,
        StepState::new(memory_limit, log, reach, deadline(timeout)),
    );
    store.limiter(|state| &mut state.limiter);
    arm(&mut store, timeout);
    store
}

/// `timeout` from now; a century from now at most, so the sum never
/// overflows (a user's durations are bounded to 100 years where read).
fn deadline(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout.min(weft_core::clock::MAX_DURATION))
        .unwrap_or(now)
}

/// Sets `store`'s deadline to one tick more than `timeout` from now (the
/// first tick may come at once), at which the call traps.
fn arm(store: &mut wasmtime::Store<StepState>, timeout: Duration) {
    store.set_epoch_deadline(deadline_ticks(timeout).saturating_add(1));
    store.epoch_deadline_trap();
}

/// The instance slot a call holds: its own, or the one its spare came with.
enum Held<'a> {
    Slot { _slot: crate::slots::Slot<'a> },
    Spare { _slot: spare::SpareSlot },
}

/// Watches the calls of `store`'s guest into the host, from before it is
/// instantiated. Past the host's budget, the call stops as the refused
/// host call returns: the guest cannot go on making the host copy what it
/// refuses (a refused 1 MiB write is still a 1 MiB copy). And the call's
/// [`Turn`](crate::share::Turn) counts guest time without the host's, and
/// runs host work at the thread's own priority.
fn watch_host_calls(store: &mut wasmtime::Store<StepState>, turn: Arc<crate::share::Turn>) {
    store.call_hook(move |store, hook| {
        match hook {
            wasmtime::CallHook::CallingHost => turn.in_host(true),
            wasmtime::CallHook::ReturningFromHost => {
                if store.data().held.over().is_some() {
                    return Err(wasmtime::Error::new(crate::budget::OverBudget));
                }
                turn.in_host(false);
            }
            _ => {}
        }
        Ok(())
    });
}

/// Makes the call in `store` stop with [`Cancelled`] at the next epoch tick
/// once `cancel` is set. The store then looks at the flag every tick, and
/// at the clock for the deadline of `timeout` (ticks are not counted: those
/// that pass while the guest waits in the host come as one). A long call
/// takes its tenant's turn on the cores there ([`crate::share`]).
fn watch_cancel(
    store: &mut wasmtime::Store<StepState>,
    cancel: Arc<AtomicBool>,
    timeout: Duration,
    turn: Arc<crate::share::Turn>,
) {
    let deadline = deadline(timeout);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if cancel.load(Ordering::Relaxed) {
            return Err(wasmtime::Error::new(Cancelled));
        }
        if Instant::now() >= deadline {
            return Ok(wasmtime::UpdateDeadline::Interrupt);
        }
        match turn.tick(deadline, &cancel) {
            Ok(()) => Ok(wasmtime::UpdateDeadline::Continue(1)),
            Err(crate::share::Stop::Cancelled) => Err(wasmtime::Error::new(Cancelled)),
            Err(crate::share::Stop::Deadline) => Ok(wasmtime::UpdateDeadline::Interrupt),
        }
    });
}

fn step_error(mut failure: Failure, redactor: &Redactor) -> CallError {
    if !redactor.is_empty() {
        failure.code = redactor.redact(&failure.code);
        failure.message = redactor.redact(&failure.message);
        failure.details = failure.details.map(|text| redactor.redact(&text));
    }
    let details = failure.details.map(|text| {
        serde_json::from_str(&text).unwrap_or_else(|_| serde_json::json!({ "unparsed": text }))
    });
    CallError::Step {
        retryable: failure.retryable,
        code: failure.code,
        message: failure.message,
        details,
    }
}

/// Turns the error of a failed guest call into what happened, in the
/// guest author's terms.
pub(super) fn classify_trap(
    error: &wasmtime::Error,
    memory_refused: Option<usize>,
    log: &LogSink,
    timeout: Duration,
    memory_limit: u64,
) -> CallError {
    if let Some(requested) = memory_refused {
        return CallError::MemoryLimit {
            limit: memory_limit,
            requested: u64::try_from(requested).unwrap_or(u64::MAX),
        };
    }
    if let Some(Trap::Interrupt) = error.downcast_ref::<Trap>() {
        return CallError::Timeout { limit: timeout };
    }
    if error.downcast_ref::<Cancelled>().is_some() {
        return CallError::Cancelled;
    }
    let mut message = if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        format!("the guest exited with status {}", exit.0)
    } else if let Some(trap) = error.downcast_ref::<Trap>() {
        trap.to_string()
    } else {
        format!("{error:#}")
    };
    if let Some(tail) = log.stderr_tail() {
        message.push_str("; the guest wrote: ");
        message.push_str(&tail);
    }
    CallError::Trap { message }
}
