//! What is deployed: every version of every workflow, and every plugin in
//! the registry, as the store keeps them.
//!
//! A workflow's versions are numbered from 1 in deployment order
//! (`revision`); each names its definition by digest (the text is stored
//! once, in the definitions). A plugin is stored once by the digest of its
//! component's bytes, with what its `describe` said; its bytes live with
//! the components that runs are pinned to.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use weft_core::clock::Timestamp;

/// One deployed version of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeploymentRecord {
    /// The workflow's id.
    pub workflow: String,
    /// 1 for the first deployment of this id, then one more each time.
    pub revision: u32,
    /// The definition's digest (`sha256:<hex>` of its text).
    pub digest: String,
    /// The `version:` the definition declares.
    pub version: u32,
    /// When it was deployed.
    pub deployed_at: Timestamp,
    /// Where it came from: `file:<path>` or `api`.
    pub origin: String,
}

impl DeploymentRecord {
    /// Whether this version was read from the file at `path`.
    pub fn from_file(&self) -> Option<&str> {
        self.origin.strip_prefix("file:")
    }
}

/// One plugin version in the registry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginRecord {
    /// The name workflows use in `uses:`.
    pub name: String,
    /// Its semantic version.
    pub version: String,
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    /// The component's size in bytes.
    pub size: u64,
    /// One line for people.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of the step's input, if published.
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// The JSON Schema of the step's output, if published.
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// When it was last added (adding the same bytes again refreshes it).
    pub added_at: Timestamp,
    /// How it came: `file:<path>`, `api` (a deployer's upload) or
    /// [`BY_OWNER`](Self::BY_OWNER).
    pub origin: String,
}

impl PluginRecord {
    /// The origin of a build uploaded by a tenant owner or an admin.
    pub const BY_OWNER: &str = "api:owner";

    /// Whether an owner, an admin or the host's operator brought this
    /// build: a shared plugin (only an admin publishes one), a file of the
    /// plugins directory, or an owner's upload.
    pub fn vouched(&self) -> bool {
        weft_core::tenant::of(&self.name) == weft_core::tenant::DEFAULT
            || self.origin.starts_with("file:")
            || self.origin == Self::BY_OWNER
    }
}
