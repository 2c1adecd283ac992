//! Preparing an attempt of a ready leaf: its condition and input, and what
//! it calls, sleeps for, emits, waits for or starts.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use weft_core::clock::{Clock, Timestamp, parse_duration};
use weft_model::{Await, Call, Emit, Sleep, Subflow};
use weft_runtime::StepContext;
use weft_store::{Emission, ErrorRecord, ParentLink, StepRecord, TimerKind, TimerRef};

use crate::launch::MAX_DEPTH;
use crate::runner::StepCall;

use super::attempt::{Attempt, Invocation};
use super::walk::{Action, Ready};
use super::{Drive, expression_error, timer_id, truth};

/// The code of a step that waits because its tenant's guest time for the
/// minute is spent.
pub(crate) const CPU_QUOTA: &str = "cpu_quota";

impl Drive {
    /// One attempt of a ready call: its condition and input are evaluated
    /// here; the call itself is made by [`Attempt::run`].
    pub(super) fn prepare(&self, ready: &Ready<'_>, clock: &dyn Clock) -> Attempt {
        let run = &self.run;
        let step = ready.step;
        let mut attempt = Attempt {
            path: ready.path.clone(),
            record: StepRecord {
                run_id: run.id.clone(),
                seq: 0,
                index: u32::try_from(ready.top).unwrap_or(u32::MAX),
                path: ready.path.clone(),
                step_id: step.id.clone(),
                attempt: ready.attempt,
                input: Value::Null,
                started_at: clock.now(),
                duration_us: 0,
                output: None,
                error: None,
                skipped: false,
                retry_in_ms: None,
                kv_writes: Default::default(),
                logs: Vec::new(),
                http: Vec::new(),
                child: None,
                timer: None,
                awaiting: false,
                messages: Vec::new(),
                host: Some(self.launcher.host.clone()),
                retry: None,
            },
            retry: step.retry.clone(),
            call: None,
            emitted: Vec::new(),
        };
        if let Some(child) = &ready.child {
            attempt.call = Some(Invocation::Await(child.clone()));
            return attempt;
        }
        let record = &mut attempt.record;
        if let Some(condition) = &step.condition {
            match truth(condition, &ready.scope, "if") {
                Ok(true) => {}
                Ok(false) => {
                    record.skipped = true;
                    return attempt;
                }
                Err(error) => {
                    record.error = Some(error);
                    return attempt;
                }
            }
        }
        let call = match ready.action {
            Action::Call(call) => call,
            Action::Subflow(subflow) => {
                self.prepare_spawn(subflow, ready, &mut attempt);
                return attempt;
            }
            Action::Sleep(sleep) => {
                self.prepare_sleep(sleep, ready, &mut attempt, clock);
                return attempt;
            }
            Action::Emit(emit) => {
                self.prepare_emit(emit, ready, &mut attempt);
                return attempt;
            }
            Action::Await(wait) => {
                self.prepare_await(wait, ready, &mut attempt, clock);
                return attempt;
            }
        };
        self.prepare_call(call, ready, &mut attempt);
        attempt
    }

    /// A plugin call: the step's pinned plugin, and its input, checked
    /// against the plugin's input schema.
    fn prepare_call(&self, call: &Call, ready: &Ready<'_>, attempt: &mut Attempt) {
        let run = &self.run;
        let step = ready.step;
        let record = &mut attempt.record;
        let Some(plugin) = self.runner.plugin(&step.id) else {
            record.error = Some(ErrorRecord::internal(format!(
                "no plugin is pinned for step `{}`",
                step.id
            )));
            return;
        };
        let input = match call.with.eval(&ready.scope) {
            Ok(input) => input,
            Err(e) => {
                record.error = Some(expression_error(e.to_string()));
                return;
            }
        };
        if let Err(problems) = self.runner.check_input(&step.id, &input) {
            record.error = Some(ErrorRecord {
                code: "invalid_input".to_owned(),
                message: format!(
                    "the input does not match the input schema of plugin `{}`: {}",
                    plugin,
                    problems.join("; ")
                ),
                retryable: false,
                details: Some(json!({ "problems": problems })),
            });
            record.input = input;
            return;
        }
        let command = match command_line(call, ready) {
            Ok(command) => command,
            Err(message) => {
                record.error = Some(expression_error(message));
                record.input = input;
                return;
            }
        };
        let tenant = weft_core::tenant::of(&run.workflow);
        if let Some(wait) = self.launcher.guest_time_wait(tenant) {
            // The tenant's guest time for this minute is spent: the step
            // waits for the next minute, on a retry timer set here (so no
            // guest's error can ask for one), and is not called.
            record.retry_in_ms = Some(weft_core::clock::millis(wait));
            record.timer = Some(TimerRef {
                id: timer_id(),
                due: self.launcher.clock.now() + wait,
                kind: TimerKind::Retry,
            });
            record.error = Some(ErrorRecord {
                code: CPU_QUOTA.to_owned(),
                message: format!(
                    "tenant `{tenant}` spent its guest time for this minute; the step waits {} ms",
                    wait.as_millis()
                ),
                retryable: true,
                details: Some(
                    json!({ "wait_ms": u64::try_from(wait.as_millis()).unwrap_or(u64::MAX) }),
                ),
            });
            record.input = input;
            return;
        }
        let context = StepContext {
            tenant: weft_core::tenant::of(&run.workflow).to_owned(),
            workflow: weft_core::tenant::bare(&run.workflow).to_owned(),
            run_id: run.id.clone(),
            step_id: step.id.clone(),
            attempt: ready.attempt,
            idempotency_key: format!("{}:{}", run.id, ready.path),
        };
        attempt.call = Some(Invocation::Plugin {
            launcher: Arc::clone(&self.launcher),
            runner: Arc::clone(&self.runner),
            call: Box::new(StepCall {
                context,
                path: ready.path.to_string(),
                input: input.to_string(),
                timeout: call.timeout,
                memory_limit: call.memory_limit,
                ceilings: {
                    let limits = self.launcher.limits(weft_core::tenant::of(&run.workflow));
                    (limits.max_step_timeout, limits.max_step_memory)
                },
                cancel: Arc::clone(&self.cancel),
                grants: call.allow_http.clone(),
                secrets: call.secrets.clone(),
                command,
            }),
        });
        attempt.record.input = input;
    }

    /// The message an `emit` step sends, committed with its record.
    fn prepare_emit(&self, emit: &Emit, ready: &Ready<'_>, attempt: &mut Attempt) {
        let record = &mut attempt.record;
        // The host's channels are refused on deploy; a definition stored
        // before they were may still name one.
        if let Err(message) = weft_core::names::check_emit("emit: the channel", &emit.channel) {
            record.error = Some(ErrorRecord::fatal("reserved_channel", message));
            return;
        }
        match emit.with.eval(&ready.scope) {
            Ok(payload) => {
                let id = weft_core::ids::uuid_v7(record.started_at);
                record.output = Some(json!({ "message": id, "channel": emit.channel }));
                record.messages = vec![id.clone()];
                record.input = payload.clone();
                attempt.emitted.push(Emission {
                    id,
                    // A run emits to its own tenant's channel.
                    channel: if weft_core::mutation::on("emit-unqualified") {
                        emit.channel.clone()
                    } else {
                        weft_core::tenant::sibling(&self.run.workflow, &emit.channel)
                    },
                    payload,
                });
            }
            Err(e) => record.error = Some(expression_error(e.to_string())),
        }
    }

    /// An `await` step's wait: its input for the outside actor, and the
    /// timer of its timeout, if it has one.
    fn prepare_await(
        &self,
        wait: &Await,
        ready: &Ready<'_>,
        attempt: &mut Attempt,
        clock: &dyn Clock,
    ) {
        let record = &mut attempt.record;
        match wait.with.eval(&ready.scope) {
            Ok(input) => {
                record.input = input;
                record.awaiting = true;
                record.timer = wait.timeout.map(|timeout| TimerRef {
                    id: timer_id(),
                    due: clock.now() + timeout,
                    kind: TimerKind::Await,
                });
            }
            Err(e) => record.error = Some(expression_error(e.to_string())),
        }
    }

    /// The due time of a `sleep`: the attempt records it and sets its
    /// timer; the step ends when the timer fires.
    fn prepare_sleep(
        &self,
        sleep: &Sleep,
        ready: &Ready<'_>,
        attempt: &mut Attempt,
        clock: &dyn Clock,
    ) {
        let record = &mut attempt.record;
        if let Some(timer) = ready.stale_timer {
            record.output = Some(json!({ "slept_until": timer.due.to_string() }));
            return;
        }
        let now = clock.now();
        let due = match sleep {
            Sleep::For(template) => template
                .eval(&ready.scope)
                .map_err(|e| e.to_string())
                .and_then(|value| sleep_for(&value))
                .map(|duration| now + duration),
            Sleep::Until(template) => template
                .eval(&ready.scope)
                .map_err(|e| e.to_string())
                .and_then(|value| sleep_until(&value)),
        };
        match due {
            Ok(due) => {
                record.input = json!({ "until": due.to_string() });
                record.timer = Some(TimerRef {
                    id: timer_id(),
                    due,
                    kind: TimerKind::Sleep,
                });
            }
            Err(message) => record.error = Some(expression_error(message)),
        }
    }

    /// The input and the parent link of an attempt that starts a child.
    fn prepare_spawn(&self, subflow: &Subflow, ready: &Ready<'_>, attempt: &mut Attempt) {
        let record = &mut attempt.record;
        let input = match subflow.with.eval(&ready.scope) {
            Ok(input) => input,
            Err(e) => {
                record.error = Some(expression_error(e.to_string()));
                return;
            }
        };
        record.input = input.clone();
        let depth = self.run.parent.as_ref().map_or(0, |p| p.depth) + 1;
        if depth > MAX_DEPTH {
            record.error = Some(ErrorRecord::fatal(
                "subflow_depth",
                format!(
                    "starting `{}` would nest child runs {depth} deep; the limit is {MAX_DEPTH}",
                    subflow.workflow
                ),
            ));
            return;
        }
        attempt.call = Some(Invocation::Spawn {
            launcher: Arc::clone(&self.launcher),
            workflow: weft_core::tenant::sibling(&self.run.workflow, &subflow.workflow),
            input,
            parent: ParentLink {
                run: self.run.id.clone(),
                path: ready.path.clone(),
                depth,
            },
        });
    }
}

/// A `sleep`'s duration: text such as `90s`, or a whole number of
/// milliseconds.
fn sleep_for(value: &Value) -> Result<Duration, String> {
    match value {
        Value::String(text) => parse_duration(text).map_err(|message| format!("sleep: {message}")),
        Value::Number(n) => n
            .as_u64()
            .map(Duration::from_millis)
            .ok_or_else(|| format!("sleep: {n} is not a whole number of milliseconds"))
            .and_then(|d| {
                weft_core::clock::check_duration(d).map_err(|m| format!("sleep: {n} ms {m}"))
            }),
        other => Err(format!("sleep: expected a duration, got {other}")),
    }
}

/// A `sleep_until`'s time: text such as `2026-12-01T09:00:00Z`, or
/// milliseconds since the epoch.
fn sleep_until(value: &Value) -> Result<Timestamp, String> {
    match value {
        Value::String(text) => {
            Timestamp::parse(text).map_err(|message| format!("sleep_until: {message}"))
        }
        Value::Number(n) => n
            .as_u64()
            .filter(|&millis| millis <= Timestamp::LAST.0)
            .map(Timestamp)
            .ok_or_else(|| {
                format!(
                    "sleep_until: {n} is not milliseconds since the epoch up to {}",
                    Timestamp::LAST
                )
            }),
        other => Err(format!("sleep_until: expected a time, got {other}")),
    }
}

/// The most bytes a command's `args` and `env` may hold together, once
/// evaluated (each string and one for its end).
const MAX_COMMAND_LINE: usize = 1 << 20;

/// A command step's `args` and `env`, evaluated: strings, and numbers and
/// booleans written as JSON; anything else is refused, naming where.
fn command_line(call: &Call, ready: &Ready<'_>) -> Result<weft_runtime::CommandLine, String> {
    let text = |value: Value, at: &str| match value {
        Value::String(text) => Ok(text),
        Value::Number(_) | Value::Bool(_) => Ok(value.to_string()),
        Value::Null => Err(format!("{at} is null, not a string")),
        Value::Array(_) => Err(format!("{at} is a list, not a string")),
        Value::Object(_) => Err(format!("{at} is an object, not a string")),
    };
    let mut line = weft_runtime::CommandLine::default();
    let mut bytes = 0usize;
    let mut count = |text: &str| {
        bytes = bytes.saturating_add(text.len().saturating_add(1));
        if bytes > MAX_COMMAND_LINE {
            Err(format!(
                "args and env hold more than {MAX_COMMAND_LINE} bytes, the most a command line may"
            ))
        } else {
            Ok(())
        }
    };
    if let Some(args) = &call.args {
        let args = args.eval(&ready.scope).map_err(|e| e.to_string())?;
        for (i, arg) in args.as_array().into_iter().flatten().enumerate() {
            let arg = text(arg.clone(), &format!("args[{i}]"))?;
            count(&arg)?;
            line.args.push(arg);
        }
    }
    if let Some(env) = &call.env {
        let env = env.eval(&ready.scope).map_err(|e| e.to_string())?;
        for (name, value) in env.as_object().into_iter().flatten() {
            let value = text(value.clone(), &format!("env.{name}"))?;
            count(name)?;
            count(&value)?;
            line.env.push((name.clone(), value));
        }
    }
    Ok(line)
}
