//! What each kind of step checks: a call (`uses`), `sleep` and
//! `sleep_until`, `emit`, `await`, `subflow`, `parallel`, `switch`,
//! `foreach` and `while`; and the values their keys hold (plugin
//! references, durations, memory sizes).

use std::time::Duration;

use serde_json::Value;

use super::RawStep;
use super::check::{Checker, condition_template, invalid_at};
use crate::error::{DefinitionError, Location};
use crate::{Await, Call, Emit, PluginRef, Sleep, StepKind, Subflow, VersionPin, check_id};

/// The most iterations a `while` may declare.
pub(super) const MAX_ITERATIONS: u32 = 10_000;

/// The most iterations of one `foreach` that may be in progress at once.
pub(super) const MAX_CONCURRENCY: u32 = 1_000;

/// The largest memory a wasm32 guest can address.
pub(super) const MAX_MEMORY_LIMIT: u64 = 4 << 30;

impl Checker<'_> {
    /// Checks what a step does, by the one kind its keys name (the keys are
    /// checked already). `here` is where its errors point.
    pub(super) fn kind(
        &mut self,
        raw: RawStep,
        field: &str,
        vars: &[&str],
        here: &Location,
    ) -> Result<StepKind, DefinitionError> {
        let invalid = invalid_at(here);
        let with = raw.with.unwrap_or(Value::Null);
        if let Some(uses) = raw.uses {
            let limits = CallLimits {
                timeout: raw.timeout.as_deref(),
                memory_limit: raw.memory_limit.as_deref(),
                allow_http: raw.allow.map(|allow| allow.http).unwrap_or_default(),
                secrets: raw.secrets.unwrap_or_default(),
                args: raw.args,
                env: raw.env,
            };
            self.call(&uses, &with, limits, vars).map_err(invalid)
        } else if let Some(value) = raw.sleep {
            self.sleep_for(&value, vars).map_err(invalid)
        } else if let Some(value) = raw.sleep_until {
            self.sleep_until(&value, vars).map_err(invalid)
        } else if let Some(channel) = raw.emit {
            self.emit(channel, &with, vars).map_err(invalid)
        } else if let Some(wait) = raw.await_ {
            self.await_(&with, wait.timeout.as_deref(), vars)
                .map_err(invalid)
        } else if let Some(workflow) = raw.subflow {
            self.subflow(workflow, &with, vars).map_err(invalid)
        } else if let Some(branches) = raw.parallel {
            self.parallel(branches, field, vars, here)
        } else if let Some(cases) = raw.switch {
            let cases = self.cases(cases, &format!("{field}.switch"), vars, &raw.id, true)?;
            Ok(StepKind::Switch(cases))
        } else if let Some(items) = raw.foreach {
            self.foreach(&items, raw.concurrency, raw.steps, field, vars, here)
        } else {
            let condition = raw.while_.unwrap_or_default();
            self.while_(&condition, raw.max_iterations, raw.steps, field, vars, here)
        }
    }

    /// `uses:` a plugin, with its input, deadline, memory cap, grants and
    /// secrets.
    fn call(
        &self,
        uses: &str,
        with: &Value,
        limits: CallLimits<'_>,
        vars: &[&str],
    ) -> Result<StepKind, String> {
        let uses = parse_plugin_ref(uses).map_err(|m| format!("uses: {m}"))?;
        let with = self.template(with, "with", vars)?;
        let timeout = limits
            .timeout
            .map(parse_timeout)
            .transpose()
            .map_err(|m| format!("timeout: {m}"))?;
        let memory_limit = limits
            .memory_limit
            .map(parse_memory_limit)
            .transpose()
            .map_err(|m| format!("memory_limit: {m}"))?;
        let allow_http = limits
            .allow_http
            .into_iter()
            .enumerate()
            .map(|(i, rule)| {
                serde_json::from_value::<weft_core::egress::Rule>(rule)
                    .map_err(|e| format!("allow.http[{i}]: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut secrets = Vec::new();
        for name in limits.secrets {
            weft_core::names::check_id(&name).map_err(|m| format!("secrets: the name {m}"))?;
            if secrets.contains(&name) {
                return Err(format!("secrets: `{name}` is named twice"));
            }
            secrets.push(name);
        }
        let args = limits
            .args
            .map(|args| {
                self.template(&Value::from(args), "args", vars)
                    .map(Box::new)
            })
            .transpose()?;
        let env = match limits.env {
            Some(env) => {
                for name in env.keys() {
                    check_env_name(name).map_err(|m| format!("env: {m}"))?;
                }
                let env: serde_json::Map<String, Value> =
                    env.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
                Some(Box::new(self.template(&Value::Object(env), "env", vars)?))
            }
            None => None,
        };
        Ok(StepKind::Call(Call {
            uses,
            with,
            timeout,
            memory_limit,
            allow_http,
            secrets,
            args,
            env,
        }))
    }

    /// `sleep:` a duration; one written without `${{ }}` is checked now.
    /// A bare number is refused, as for every duration (`timeout: 10` is):
    /// a unit says whether 90 is milliseconds or seconds. A stored
    /// definition may carry one from before, read as milliseconds, as an
    /// expression's number is.
    fn sleep_for(&self, value: &Value, vars: &[&str]) -> Result<StepKind, String> {
        let template = self.template(value, "sleep", vars)?;
        match value {
            Value::String(text) if !text.contains("${{") => {
                parse_timeout(text).map_err(|m| format!("sleep: {m}"))?;
            }
            Value::Number(n) if !self.stored => {
                return Err(format!(
                    "sleep: `{n}` has no unit; write `{n}ms`, `{n}s`, `{n}m`, `{n}h` or `{n}d`"
                ));
            }
            _ => {}
        }
        Ok(StepKind::Sleep(Sleep::For(template)))
    }

    /// `sleep_until:` a time; one written without `${{ }}` is checked now.
    fn sleep_until(&self, value: &Value, vars: &[&str]) -> Result<StepKind, String> {
        let template = self.template(value, "sleep_until", vars)?;
        if let Value::String(text) = value
            && !text.contains("${{")
        {
            weft_core::Timestamp::parse(text).map_err(|m| format!("sleep_until: {m}"))?;
        }
        Ok(StepKind::Sleep(Sleep::Until(template)))
    }

    /// `emit:` a message on `channel`, its payload in `with`.
    fn emit(&self, channel: String, with: &Value, vars: &[&str]) -> Result<StepKind, String> {
        if self.stored {
            // The engine refuses the emit when the step runs.
            weft_core::names::check_name("emit: the channel", &channel)?;
        } else {
            weft_core::names::check_emit("emit: the channel", &channel)?;
        }
        let with = self.template(with, "with", vars)?;
        Ok(StepKind::Emit(Emit { channel, with }))
    }

    /// `await:` an outside actor, shown `with`, for at most `timeout`.
    fn await_(
        &self,
        with: &Value,
        timeout: Option<&str>,
        vars: &[&str],
    ) -> Result<StepKind, String> {
        let with = self.template(with, "with", vars)?;
        let timeout = timeout
            .map(parse_timeout)
            .transpose()
            .map_err(|m| format!("await.timeout: {m}"))?;
        Ok(StepKind::Await(Await { with, timeout }))
    }

    /// `subflow:` a child run of `workflow`, its input in `with`.
    fn subflow(&self, workflow: String, with: &Value, vars: &[&str]) -> Result<StepKind, String> {
        check_id(&workflow).map_err(|m| format!("subflow: {m}"))?;
        let with = self.template(with, "with", vars)?;
        Ok(StepKind::Subflow(Subflow { workflow, with }))
    }

    /// `parallel:` branches, at least one.
    fn parallel(
        &mut self,
        branches: Vec<RawStep>,
        field: &str,
        vars: &[&str],
        here: &Location,
    ) -> Result<StepKind, DefinitionError> {
        if branches.is_empty() {
            let invalid = invalid_at(here);
            return Err(invalid("parallel: needs at least one branch".to_owned()));
        }
        let branches = self.branches(branches, &format!("{field}.parallel"), vars)?;
        Ok(StepKind::Parallel(branches))
    }

    /// `foreach:` a list, its body seeing `item` and `index`, up to
    /// `concurrency` iterations at once.
    fn foreach(
        &mut self,
        items: &Value,
        concurrency: Option<u32>,
        body: Option<Vec<RawStep>>,
        field: &str,
        vars: &[&str],
        here: &Location,
    ) -> Result<StepKind, DefinitionError> {
        let invalid = invalid_at(here);
        let items = self.template(items, "foreach", vars).map_err(invalid)?;
        let body_vars = [vars, &["item", "index"]].concat();
        let concurrency = concurrency.unwrap_or(1);
        if concurrency == 0 || concurrency > MAX_CONCURRENCY {
            return Err(invalid(format!(
                "concurrency must be from 1 to {MAX_CONCURRENCY}, not {concurrency}"
            )));
        }
        let steps = self.body(body, field, &body_vars, here)?;
        Ok(StepKind::Foreach {
            items,
            steps,
            concurrency,
        })
    }

    /// `while:` a condition holds, its body seeing `iteration`, at most
    /// `max_iterations` times.
    fn while_(
        &mut self,
        condition: &str,
        max_iterations: Option<u32>,
        body: Option<Vec<RawStep>>,
        field: &str,
        vars: &[&str],
        here: &Location,
    ) -> Result<StepKind, DefinitionError> {
        let invalid = invalid_at(here);
        let body_vars = [vars, &["iteration"]].concat();
        let steps = self.body(body, field, &body_vars, here)?;
        let max_iterations = max_iterations.unwrap_or(0);
        if max_iterations == 0 || max_iterations > MAX_ITERATIONS {
            return Err(invalid(format!(
                "max_iterations must be from 1 to {MAX_ITERATIONS}, not {max_iterations}"
            )));
        }
        // The condition is checked before each iteration; it may name the
        // body's steps, as they were after the previous one.
        let condition = condition_template(
            condition,
            "while",
            &self.known_ids(),
            &body_vars,
            self.stored,
        )
        .map_err(invalid)?;
        Ok(StepKind::While {
            condition,
            steps,
            max_iterations,
        })
    }
}

/// Parses `name`, `name@<semver requirement>` or `name@sha256:<64 hex>`.
impl PluginRef {
    /// A reference as `uses:` takes it: `name`, `name@1.2` or
    /// `name@sha256:<hex>`.
    pub fn parse(text: &str) -> Result<Self, String> {
        parse_plugin_ref(text)
    }
}

pub(crate) fn parse_plugin_ref(text: &str) -> Result<PluginRef, String> {
    let (name, version) = match text.split_once('@') {
        Some((name, version)) => (name, Some(version)),
        None => (text, None),
    };
    check_id(name).map_err(|m| format!("plugin name {m}"))?;
    let version = match version {
        None => VersionPin::Any,
        Some(digest) if digest.starts_with("sha256:") => {
            let hex = &digest["sha256:".len()..];
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "`{digest}` is not a digest; expected `sha256:` and 64 hex digits"
                ));
            }
            VersionPin::Digest(format!("sha256:{}", hex.to_ascii_lowercase()))
        }
        Some(req) => VersionPin::Req(semver::VersionReq::parse(req).map_err(|e| {
            format!("`{req}` is not a version requirement such as `1`, `1.2` or `=1.2.3`: {e}")
        })?),
    };
    Ok(PluginRef {
        name: name.to_owned(),
        version,
    })
}

/// A duration longer than zero, such as `30s`.
pub(super) fn parse_timeout(text: &str) -> Result<Duration, String> {
    let duration = weft_core::clock::parse_duration(text)?;
    if duration.is_zero() {
        return Err("must be longer than zero".to_owned());
    }
    Ok(duration)
}

/// A memory cap, such as `64MiB`, from 1MiB to 4GiB.
fn parse_memory_limit(text: &str) -> Result<u64, String> {
    let size: bytesize::ByteSize = text
        .parse()
        .map_err(|e| format!("`{text}` is not a size such as `64MiB`: {e}"))?;
    let bytes = size.as_u64();
    if bytes < (1 << 20) {
        return Err(format!("`{text}` is under the smallest limit, 1MiB"));
    }
    if bytes > MAX_MEMORY_LIMIT {
        return Err(format!("`{text}` is over the largest limit, 4GiB"));
    }
    Ok(bytes)
}

/// A call step's settings beside `uses` and `with`, as written.
struct CallLimits<'a> {
    timeout: Option<&'a str>,
    memory_limit: Option<&'a str>,
    allow_http: Vec<Value>,
    secrets: Vec<String>,
    args: Option<Vec<String>>,
    env: Option<std::collections::BTreeMap<String, String>>,
}

/// An environment variable's name: not empty, without `=` or NUL.
fn check_env_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(format!(
            "`{}` is not a variable name (not empty, no `=`)",
            name.escape_debug()
        ));
    }
    Ok(())
}
