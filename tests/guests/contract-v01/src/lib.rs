//! Exports `weft:plugin/step@0.1.0` and imports 0.1's `log` and `kv`, built
//! straight from `wit/v0.1/plugin.wit` as a component made before 0.2
//! would be: the host must load and run it unchanged.

#[allow(clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit/v0.1", world: "weft:plugin/plugin" });
}

use bindings::exports::weft::plugin::step::Guest;
use bindings::weft::plugin::types::{Failure, PluginInfo, StepContext, StepError};
use bindings::weft::plugin::{kv, log};

struct Old;

impl Guest for Old {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "contract_v01".to_owned(),
            version: "0.1.0".to_owned(),
            description: "A 0.1 component".to_owned(),
            input_schema: None,
            output_schema: None,
        }
    }

    fn run(ctx: StepContext, input: String) -> Result<String, StepError> {
        log::log(log::Level::Info, &format!("0.1 step {} ran", ctx.step_id));
        let seen = kv::get("runs")
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        kv::set("runs", &(seen + 1).to_string()).map_err(|message| {
            StepError::Fatal(Failure {
                code: "kv".to_owned(),
                message,
                details: None,
            })
        })?;
        Ok(format!("{{\"input\":{input},\"runs\":{}}}", seen + 1))
    }
}

bindings::export!(Old with_types_in bindings);
