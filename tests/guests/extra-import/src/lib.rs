//! Imports `weft:plugin/telemetry`, which no weft host provides. The host
//! must refuse the component at load time, naming the import.

#[allow(clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "wit", world: "weft:plugin/plugin" });
}

use bindings::exports::weft::plugin::step::Guest;
use bindings::weft::plugin::telemetry;
use bindings::weft::plugin::types::{PluginInfo, StepContext, StepError};

struct ExtraImport;

impl Guest for ExtraImport {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "extra-import".to_owned(),
            version: "0.1.0".to_owned(),
            description: "Imports an interface the host does not provide".to_owned(),
            input_schema: None,
            output_schema: None,
        }
    }

    fn run(_ctx: StepContext, input: String) -> Result<String, StepError> {
        let id = telemetry::beacon(&input);
        Ok(id.to_string())
    }
}

bindings::export!(ExtraImport with_types_in bindings);
