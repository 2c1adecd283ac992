//! Host bindings for the `weft:plugin/plugin` world, used only inside
//! [`runtime`](super).

wasmtime::component::bindgen!({
    world: "weft:plugin/plugin",
    path: "../../wit",
});

pub(super) use self::exports::weft::plugin::step::{PluginInfo, StepContext, StepError};
pub(super) use self::weft::plugin::log::Level;
