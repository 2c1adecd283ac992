//! Support for [`export_step!`](crate::export_step). Not a public API: its
//! items may change in any release.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Context, Meta, StepError};

#[allow(missing_debug_implementations, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "weft:plugin/plugin",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "weft_sdk::__private::bindings",
    });
}

pub use bindings::export;
pub use bindings::exports::weft::plugin::step::Guest;
pub use bindings::weft::plugin::types::{
    Failure, PluginInfo, StepContext, StepError as WitStepError,
};

/// Converts a value written in `export_step!(f, key = value)` into the type of
/// the [`Meta`] field it sets.
pub trait MetaField<T> {
    fn into_field(self) -> T;
}

impl MetaField<&'static str> for &'static str {
    fn into_field(self) -> &'static str {
        self
    }
}

impl MetaField<Option<&'static str>> for &'static str {
    fn into_field(self) -> Option<&'static str> {
        Some(self)
    }
}

impl MetaField<Option<&'static str>> for Option<&'static str> {
    fn into_field(self) -> Option<&'static str> {
        self
    }
}

pub fn plugin_info(meta: &Meta) -> PluginInfo {
    PluginInfo {
        name: meta.name.to_owned(),
        version: meta.version.to_owned(),
        description: meta.description.to_owned(),
        input_schema: meta.input_schema.map(str::to_owned),
        output_schema: meta.output_schema.map(str::to_owned),
    }
}

/// Decodes the input, calls the step and encodes its result.
pub fn run_step<I, O>(
    ctx: StepContext,
    input: &str,
    step: fn(&Context, I) -> Result<O, StepError>,
) -> Result<String, WitStepError>
where
    I: DeserializeOwned,
    O: Serialize,
{
    let ctx = Context {
        tenant: ctx.tenant,
        workflow: ctx.workflow,
        run_id: ctx.run_id,
        step_id: ctx.step_id,
        attempt: ctx.attempt,
        idempotency_key: ctx.idempotency_key,
    };
    let input: I = serde_json::from_str(input).map_err(|e| {
        WitStepError::from(StepError::fatal(
            "invalid_input",
            format!("the step's input does not fit its type: {e}"),
        ))
    })?;
    let output = step(&ctx, input).map_err(WitStepError::from)?;
    serde_json::to_string(&output).map_err(|e| {
        WitStepError::from(StepError::fatal(
            "invalid_output",
            format!("the step's output could not be encoded as JSON: {e}"),
        ))
    })
}
