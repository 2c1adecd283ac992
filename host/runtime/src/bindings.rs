//! Host bindings for the `weft:plugin` worlds, used only inside
//! [`runtime`](super): `v3` for the current contract (`wit/plugin.wit`),
//! and `v2` and `v1` for components built against 0.2 and 0.1
//! (`wit/v0.2`, `wit/v0.1`), which load unchanged. All are linked into one
//! linker: a component resolves the interfaces of the version it imports.

/// `weft:plugin@0.3.0`.
pub(super) mod v3 {
    wasmtime::component::bindgen!({
        world: "weft:plugin/plugin",
        path: "../../wit",
    });

    pub(crate) use self::exports::weft::plugin::step::{PluginInfo, StepContext, StepError};
}

/// `weft:plugin@0.2.0`, frozen.
pub(super) mod v2 {
    wasmtime::component::bindgen!({
        world: "weft:plugin/plugin",
        path: "../../wit/v0.2",
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

/// Implements a capability's `Host` trait for every contract version with
/// one body, `$interface` being the interface module; with `@before_v3`,
/// for 0.1 and 0.2 only (the interface changed in 0.3).
macro_rules! for_each_contract {
    (@before_v3 $interface:ident => $body:item) => {
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
        mod v3_impl {
            #[allow(unused_imports)]
            use super::*;
            use $crate::bindings::v3::weft::plugin::$interface as contract;
            $body
        }
    };
}
pub(super) use for_each_contract;
