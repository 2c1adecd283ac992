//! Returns output that is not JSON, bypassing the SDK's encoder, as a guest in
//! another language might.

use weft_sdk::__private::{Guest, PluginInfo, StepContext, WitStepError, export};

struct BadJson;

impl Guest for BadJson {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "bad-json".to_owned(),
            version: "0.1.0".to_owned(),
            description: "Returns text that is not JSON".to_owned(),
            input_schema: None,
            output_schema: None,
        }
    }

    fn run(_ctx: StepContext, _input: String) -> Result<String, WitStepError> {
        Ok("{\"unterminated\": ".to_owned())
    }
}

export!(BadJson with_types_in weft_sdk::__private::bindings);
