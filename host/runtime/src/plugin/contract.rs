//! The contract versions a plugin may be built for, behind one face:
//! [`Pre`] and [`Instance`] call `describe` and `run` the same way whichever
//! version the component exports, and hand back version-neutral values. A
//! command ([`crate::command`]) is one more shape behind the same face: it
//! runs `wasi:cli/run`, and its exit status and stdout are turned into the
//! answer a step gives; an HTTP handler ([`crate::handler`]) another, whose
//! response is.

use wasmtime_wasi::p2::bindings::sync::{Command, CommandPre};
use wasmtime_wasi_http::p2::bindings::sync::{Proxy, ProxyPre};

use crate::bindings::{v1, v2, v3};
use crate::budget::OverBudget;
use crate::command::{EXIT_RETRYABLE, Stdout};
use crate::sandbox::StepState;
use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::StepContext;

/// What `describe` answered.
pub(super) struct Info {
    pub(super) name: String,
    pub(super) version: String,
    pub(super) description: String,
    pub(super) input_schema: Option<String>,
    pub(super) output_schema: Option<String>,
}

/// A step's own error: `retryable` or `fatal`, with its failure.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) retryable: bool,
    pub(crate) code: String,
    pub(crate) message: String,
    pub(crate) details: Option<String>,
}

/// A component linked and ready to instantiate, by contract version.
pub(super) enum Pre {
    V1(v1::PluginPre<StepState>),
    V2(v2::PluginPre<StepState>),
    V3(v3::PluginPre<StepState>),
    Command(CommandPre<StepState>),
    Handler(ProxyPre<StepState>),
}

/// One instance of a plugin, by contract version.
pub(super) enum Instance {
    V1(v1::Plugin),
    V2(v2::Plugin),
    V3(v3::Plugin),
    Command(Command),
    Handler(Proxy),
}

/// Converts the WIT records of one contract version; the versions share
/// their shapes, so one body serves all.
macro_rules! convert {
    ($version:ident) => {
        impl From<&StepContext> for $version::StepContext {
            fn from(c: &StepContext) -> Self {
                Self {
                    tenant: c.tenant.clone(),
                    workflow: c.workflow.clone(),
                    run_id: c.run_id.clone(),
                    step_id: c.step_id.clone(),
                    attempt: c.attempt,
                    idempotency_key: c.idempotency_key.clone(),
                }
            }
        }

        impl From<$version::PluginInfo> for Info {
            fn from(i: $version::PluginInfo) -> Self {
                Self {
                    name: i.name,
                    version: i.version,
                    description: i.description,
                    input_schema: i.input_schema,
                    output_schema: i.output_schema,
                }
            }
        }

        impl From<$version::StepError> for Failure {
            fn from(e: $version::StepError) -> Self {
                let (retryable, f) = match e {
                    $version::StepError::Retryable(f) => (true, f),
                    $version::StepError::Fatal(f) => (false, f),
                };
                Self {
                    retryable,
                    code: f.code,
                    message: f.message,
                    details: f.details,
                }
            }
        }
    };
}
convert!(v1);
convert!(v2);
convert!(v3);

impl Pre {
    /// Wraps `pre` in the bindings of the contract `version` (`0.1`, `0.2`
    /// or `0.3`) that [`check_contract`](super::load) found.
    pub(super) fn new(
        version: &semver::Version,
        pre: InstancePre<StepState>,
    ) -> wasmtime::Result<Self> {
        Ok(match version.minor {
            1 => Self::V1(v1::PluginPre::new(pre)?),
            2 => Self::V2(v2::PluginPre::new(pre)?),
            _ => Self::V3(v3::PluginPre::new(pre)?),
        })
    }

    /// Wraps `pre`, a component that exports `wasi:cli/run`.
    pub(super) fn command(pre: InstancePre<StepState>) -> wasmtime::Result<Self> {
        Ok(Self::Command(CommandPre::new(pre)?))
    }

    /// Wraps `pre`, a component that exports `wasi:http/incoming-handler`.
    pub(super) fn handler(pre: InstancePre<StepState>) -> wasmtime::Result<Self> {
        Ok(Self::Handler(ProxyPre::new(pre)?))
    }

    pub(super) fn instantiate(&self, store: &mut Store<StepState>) -> wasmtime::Result<Instance> {
        Ok(match self {
            Self::V1(pre) => Instance::V1(pre.instantiate(store)?),
            Self::V2(pre) => Instance::V2(pre.instantiate(store)?),
            Self::V3(pre) => Instance::V3(pre.instantiate(store)?),
            Self::Command(pre) => Instance::Command(pre.instantiate(store)?),
            Self::Handler(pre) => Instance::Handler(pre.instantiate(store)?),
        })
    }
}

impl Instance {
    pub(super) fn describe(&self, store: &mut Store<StepState>) -> wasmtime::Result<Info> {
        Ok(match self {
            Self::V1(i) => i.weft_plugin_step().call_describe(store)?.into(),
            Self::V2(i) => i.weft_plugin_step().call_describe(store)?.into(),
            Self::V3(i) => i.weft_plugin_step().call_describe(store)?.into(),
            Self::Command(_) => wasmtime::bail!("a command does not describe itself"),
            Self::Handler(_) => wasmtime::bail!("an HTTP handler does not describe itself"),
        })
    }

    pub(super) fn run(
        &self,
        store: &mut Store<StepState>,
        context: &StepContext,
        input: &String,
    ) -> wasmtime::Result<Result<String, Failure>> {
        Ok(match self {
            Self::V1(i) => i
                .weft_plugin_step()
                .call_run(store, &context.into(), input)?
                .map_err(Failure::from),
            Self::V2(i) => i
                .weft_plugin_step()
                .call_run(store, &context.into(), input)?
                .map_err(Failure::from),
            Self::V3(i) => i
                .weft_plugin_step()
                .call_run(store, &context.into(), input)?
                .map_err(Failure::from),
            Self::Command(command) => return run_command(command, store),
            Self::Handler(proxy) => {
                return crate::handler::run_handler(proxy, store, context, input);
            }
        })
    }
}

/// The most a failed command's stdout may be to be read as its typed error.
const MAX_TYPED_ERROR: usize = 64 << 10;

/// The typed error a failed command wrote to stdout, if it wrote one:
/// `{"error": {"code": ..., "message": ..., "retryable": ..., "details":
/// ...}}` (what weft's Go helper writes). `retryable` is also true for
/// [`EXIT_RETRYABLE`]. A toolchain whose exit carries only failure (a
/// preview-1 program through the command adapter) still tells a retryable
/// error this way.
fn typed_failure(written: &[u8], status: i32) -> Option<Failure> {
    #[derive(serde::Deserialize)]
    struct Written {
        error: Typed,
    }
    #[derive(serde::Deserialize)]
    struct Typed {
        code: String,
        message: String,
        #[serde(default)]
        retryable: bool,
        #[serde(default)]
        details: Option<serde_json::Value>,
    }
    // An error is small: a larger stdout is not read as one, and the
    // failure is the exit status's.
    if written.len() > MAX_TYPED_ERROR {
        return None;
    }
    let Written { error } = serde_json::from_slice(written).ok()?;
    Some(Failure {
        retryable: error.retryable || status == EXIT_RETRYABLE,
        code: error.code,
        message: error.message,
        details: error.details.map(|d| d.to_string()),
    })
}

/// Runs a command to its end: its exit status and what it wrote are the
/// step's answer. The input is on its stdin already (the store's state was
/// made with it).
fn run_command(
    command: &Command,
    store: &mut Store<StepState>,
) -> wasmtime::Result<Result<String, Failure>> {
    let status = match command.wasi_cli_run().call_run(&mut *store) {
        Ok(Ok(())) => 0,
        // `run` answered an error: a Rust `main` that returned `Err`.
        Ok(Err(())) => 1,
        Err(trap) => match trap.downcast_ref::<wasmtime_wasi::I32Exit>() {
            Some(exit) => exit.0,
            None => return Err(trap),
        },
    };
    let state = store.data_mut();
    let written = match state.stdout.as_ref().map(Stdout::take).transpose() {
        Ok(written) => written.unwrap_or_default(),
        // Past the budget: the call fails `resource_limit`, naming it.
        Err(_) => return Err(wasmtime::Error::new(OverBudget)),
    };
    if status != 0 {
        if let Some(failure) = typed_failure(&written, status) {
            return Ok(Err(failure));
        }
        let message = state.log.stderr_tail().unwrap_or_else(|| {
            format!("the command exited with status {status} and wrote nothing to stderr")
        });
        return Ok(Err(Failure {
            retryable: status == EXIT_RETRYABLE,
            code: format!("exit_{status}"),
            message,
            details: Some(format!("{{\"exit_status\":{status}}}")),
        }));
    }
    if written.iter().all(u8::is_ascii_whitespace) {
        return Ok(Err(Failure {
            retryable: false,
            code: "no_output".to_owned(),
            message: "the command exited 0 but wrote nothing to stdout; a command step writes \
                      its output there, as one JSON value"
                .to_owned(),
            details: None,
        }));
    }
    match String::from_utf8(written) {
        Ok(text) => Ok(Ok(text)),
        Err(e) => Ok(Err(Failure {
            retryable: false,
            code: "invalid_output".to_owned(),
            message: format!(
                "the command wrote to stdout what is not UTF-8 text (at byte {}), so not JSON",
                e.utf8_error().valid_up_to()
            ),
            details: None,
        })),
    }
}
