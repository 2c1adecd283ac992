#![doc = include_str!("../README.md")]

mod error;
pub mod http;
pub mod kv;
pub mod log;
pub mod outbox;
pub mod secrets;
pub mod snapshot;

pub use error::StepError;

#[doc(hidden)]
pub mod __private;

/// Where a call comes from; see `step-context` in the WIT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// The tenant that owns the run.
    pub tenant: String,
    /// The id of the workflow being run.
    pub workflow: String,
    /// The id of the run.
    pub run_id: String,
    /// The id of the step within the workflow.
    pub step_id: String,
    /// 1 on the first attempt.
    pub attempt: u32,
    /// Stable across every attempt of this step in this run; send it to remote
    /// APIs that deduplicate.
    pub idempotency_key: String,
}

/// A plugin's description of itself, filled by [`export_step!`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// The name workflows use in `uses:`.
    pub name: &'static str,
    /// A semantic version.
    pub version: &'static str,
    /// One line for people.
    pub description: &'static str,
    /// A JSON Schema for the input, as JSON text.
    pub input_schema: Option<&'static str>,
    /// A JSON Schema for the output, as JSON text.
    pub output_schema: Option<&'static str>,
}

/// Exports a step function as this component's `weft:plugin/step`.
///
/// The function has the shape `fn(&Context, I) -> Result<O, StepError>` where
/// `I: DeserializeOwned` and `O: Serialize`. Optional `key = value` pairs set
/// the fields of [`Meta`]; `name`, `version` and `description` default to the
/// crate's `Cargo.toml`.
///
/// ```ignore
/// weft_sdk::export_step!(render, name = "template", input_schema = INPUT_SCHEMA);
/// ```
///
/// Input that does not deserialise into `I` fails the step with the fatal code
/// `invalid_input` and serde's message, without calling the function.
#[macro_export]
macro_rules! export_step {
    ($run:path $(, $key:ident = $value:expr)* $(,)?) => {
        const _: () = {
            struct WeftStep;

            impl $crate::__private::Guest for WeftStep {
                fn describe() -> $crate::__private::PluginInfo {
                    #[allow(unused_mut)]
                    let mut meta = $crate::Meta {
                        name: env!("CARGO_PKG_NAME"),
                        version: env!("CARGO_PKG_VERSION"),
                        description: env!("CARGO_PKG_DESCRIPTION"),
                        input_schema: None,
                        output_schema: None,
                    };
                    $( meta.$key = $crate::__private::MetaField::into_field($value); )*
                    $crate::__private::plugin_info(&meta)
                }

                fn run(
                    ctx: $crate::__private::StepContext,
                    input: String,
                ) -> Result<String, $crate::__private::WitStepError> {
                    $crate::__private::run_step(ctx, &input, $run)
                }
            }

            $crate::__private::export!(WeftStep with_types_in $crate::__private::bindings);
        };
    };
}
