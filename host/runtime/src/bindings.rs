//! Host bindings for the `weft:plugin` worlds, used only inside
//! [`runtime`](super): `v2` for the current contract (`wit/plugin.wit`) and
//! `v1` for components built against 0.1 (`wit/v0.1/plugin.wit`), which load
//! unchanged. Both are linked into one linker: a component resolves the
//! interfaces of the version it imports.

/// `weft:plugin@0.2.0`.
pub(super) mod v2 {
    wasmtime::component::bindgen!({
        world: "weft:plugin/plugin",
        path: "../../wit",
    });

    pub(crate) use self::exports::weft::plugin::step::{PluginInfo, StepContext, StepError};
}

/// `weft:plugin@0.1.0`, frozen.
pub(super) mod v1 {
    wasmtime::component::bindgen!({
        world: "weft:plugin/plugin",
        path: "../../wit/v0.1",
    });

    pub(crate) use self::exports::weft::plugin::step::{PluginInfo, StepContext, StepError};
}

/// Implements a capability's `Host` trait for both contract versions with
/// one body: `$version` is `v1` or `v2`, `$interface` the interface module.
macro_rules! for_each_contract {
    ($interface:ident => $body:item) => {
        mod v1_impl {
            #[allow(unused_imports)]
            use super::*;
            use $crate::bindings::v1::weft::plugin::$interface as contract;
            $body
        }
        mod v2_impl {
            #[allow(unused_imports)]
            use super::*;
            use $crate::bindings::v2::weft::plugin::$interface as contract;
            $body
        }
    };
}
pub(super) use for_each_contract;
