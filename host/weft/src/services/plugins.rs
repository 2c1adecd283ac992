//! The plugin registry: adding a component, for `POST /v1/plugins` and
//! `weft plugin add` without a server alike. Blocking.

use weft_runtime::{LoadError, Plugin};
use weft_store::PluginRecord;

use super::Services;

impl Services {
    /// Checks and compiles component `bytes` and adds it to the registry
    /// as a plugin of `tenant` (`origin`: who brought it, such as `cli`, or
    /// [`PluginRecord::BY_OWNER`]). Adding a component that is there
    /// already is harmless. The tenant's quotas are the adapter's to check.
    pub fn add_plugin(
        &self,
        tenant: &str,
        bytes: &[u8],
        origin: &str,
    ) -> Result<(Plugin, PluginRecord), LoadError> {
        self.engine.plugins().add_for(tenant, bytes, origin)
    }
}
