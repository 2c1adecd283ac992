//! Exports `weft:plugin/step@9.0.0`, a contract version no host speaks yet.
//! The host must refuse it by name before instantiating it.

#[allow(clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "wit", world: "weft:plugin/plugin@9.0.0" });
}

use bindings::exports::weft::plugin::step::Guest;
use bindings::weft::plugin::types::{PluginInfo, StepContext, StepError};

struct Future;

impl Guest for Future {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "future-contract".to_owned(),
            version: "9.0.0".to_owned(),
            description: "From the future".to_owned(),
            input_schema: None,
            output_schema: None,
        }
    }

    fn run(_ctx: StepContext, input: String) -> Result<String, StepError> {
        Ok(input)
    }
}

bindings::export!(Future with_types_in bindings);
