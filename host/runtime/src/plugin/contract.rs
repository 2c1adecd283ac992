//! The contract versions a plugin may be built for, behind one face:
//! [`Pre`] and [`Instance`] call `describe` and `run` the same way whichever
//! version the component exports, and hand back version-neutral values.

use crate::bindings::{v1, v2, v3};
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
pub(super) struct Failure {
    pub(super) retryable: bool,
    pub(super) code: String,
    pub(super) message: String,
    pub(super) details: Option<String>,
}

/// A component linked and ready to instantiate, by contract version.
pub(super) enum Pre {
    V1(v1::PluginPre<StepState>),
    V2(v2::PluginPre<StepState>),
    V3(v3::PluginPre<StepState>),
}

/// One instance of a plugin, by contract version.
pub(super) enum Instance {
    V1(v1::Plugin),
    V2(v2::Plugin),
    V3(v3::Plugin),
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

    pub(super) fn instantiate(&self, store: &mut Store<StepState>) -> wasmtime::Result<Instance> {
        Ok(match self {
            Self::V1(pre) => Instance::V1(pre.instantiate(store)?),
            Self::V2(pre) => Instance::V2(pre.instantiate(store)?),
            Self::V3(pre) => Instance::V3(pre.instantiate(store)?),
        })
    }
}

impl Instance {
    pub(super) fn describe(&self, store: &mut Store<StepState>) -> wasmtime::Result<Info> {
        Ok(match self {
            Self::V1(i) => i.weft_plugin_step().call_describe(store)?.into(),
            Self::V2(i) => i.weft_plugin_step().call_describe(store)?.into(),
            Self::V3(i) => i.weft_plugin_step().call_describe(store)?.into(),
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
        })
    }
}
