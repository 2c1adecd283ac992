//! A loaded plugin: what it is and what it says about itself. Loading and
//! checking a component is in `load.rs`; calling it, in the store each call
//! gets, is in `call.rs`.

mod call;
mod contract;
mod load;
mod spare;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::Runtime;
use crate::cache::CodeSource;
use weft_core::Digest;

pub use call::{CallOptions, CallOutcome, CallTiming, StepContext};
pub(crate) use contract::Failure;
pub(crate) use load::{check_name_version, load};
pub(crate) use spare::Spares;

/// A loaded plugin: compiled, linked and described. Cheap to clone.
#[derive(Clone)]
pub struct Plugin(Arc<Loaded>);

struct Loaded {
    runtime: Runtime,
    bytes: Arc<[u8]>,
    input_check: Option<weft_core::InputSchema>,
    output_check: Option<weft_core::InputSchema>,
    pre: contract::Pre,
    digest: Digest,
    meta: PluginMeta,
    code_source: CodeSource,
    load_time: Duration,
    /// The component's imports and exports, by name.
    imports: Vec<String>,
    exports: Vec<String>,
    /// An instance made ahead of the next call.
    spare: spare::PluginSpare,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.0.meta.name)
            .field("version", &self.0.meta.version)
            .field("digest", &self.0.digest)
            .finish_non_exhaustive()
    }
}

/// What a plugin says about itself, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginMeta {
    /// The name workflows use in `uses:`.
    pub name: String,
    /// The plugin's version.
    pub version: semver::Version,
    /// One line for people.
    pub description: String,
    /// The JSON Schema of the step's input, if published.
    pub input_schema: Option<Value>,
    /// The JSON Schema of the step's output, if published.
    pub output_schema: Option<Value>,
}

impl Plugin {
    /// The plugin's checked description.
    pub fn meta(&self) -> &PluginMeta {
        &self.0.meta
    }

    /// The digest of the component's bytes.
    pub fn digest(&self) -> Digest {
        self.0.digest
    }

    /// Checks `input` against the plugin's published input schema, if any;
    /// `Err` lists every problem with the JSON Pointer of the value.
    pub fn check_input(&self, input: &Value) -> Result<(), Vec<String>> {
        match &self.0.input_check {
            Some(schema) => schema.check(input),
            None => Ok(()),
        }
    }

    /// Checks a call's `output` against the plugin's published output
    /// schema, if any: a mismatch is [`CallError::InvalidOutput`], naming
    /// each offending value by its JSON Pointer.
    fn check_output(&self, output: Value) -> Result<Value, crate::CallError> {
        match &self.0.output_check {
            Some(schema) => match schema.check(&output) {
                Ok(()) => Ok(output),
                Err(problems) => Err(crate::CallError::InvalidOutput {
                    message: format!(
                        "the output does not match the plugin's output-schema: {}",
                        problems.join("; ")
                    ),
                }),
            },
            None => Ok(output),
        }
    }

    /// Whether the component imports `wasi:http` (the outgoing handler or
    /// its types): it makes HTTP requests, and its steps need a grant.
    pub fn imports_http(&self) -> bool {
        self.0.imports.iter().any(|name| {
            name.starts_with("wasi:http/outgoing-handler@") || name.starts_with("wasi:http/types@")
        })
    }

    /// The capabilities the component imports, by short name: `log`, `kv`,
    /// `outbox`, `secrets`, `http`.
    pub fn capabilities(&self) -> Vec<&'static str> {
        let has = |prefix: &str| self.0.imports.iter().any(|name| name.starts_with(prefix));
        [
            ("weft:plugin/log@", "log"),
            ("weft:plugin/kv@", "kv"),
            ("weft:plugin/outbox@", "outbox"),
            ("weft:plugin/secrets@", "secrets"),
            ("weft:plugin/snapshot@", "snapshot"),
            ("wasi:http/", "http"),
        ]
        .into_iter()
        .filter(|(prefix, _)| has(prefix))
        .map(|(_, name)| name)
        .collect()
    }

    /// The component's bytes, as loaded.
    pub fn bytes(&self) -> Arc<[u8]> {
        self.0.bytes.clone()
    }

    /// Whether the code was compiled at load or read from the cache.
    pub fn code_source(&self) -> CodeSource {
        self.0.code_source
    }

    /// The names of the component's imports (interfaces and functions).
    pub fn imports(&self) -> &[String] {
        &self.0.imports
    }

    /// The names of the component's exports; one is
    /// `weft:plugin/step@<contract version>`, or for a command
    /// `wasi:cli/run@<version>`, or for a handler
    /// `wasi:http/incoming-handler@<version>`.
    pub fn exports(&self) -> &[String] {
        &self.0.exports
    }

    /// Whether the plugin is a command: a WASI program that exports
    /// `wasi:cli/run`, its input on stdin and its output on stdout
    /// ([`crate::command`]).
    pub fn is_command(&self) -> bool {
        matches!(self.0.pre, contract::Pre::Command(_))
    }

    /// Whether the plugin is an HTTP handler: a component that exports
    /// `wasi:http/incoming-handler`, its input the request and its output
    /// the response ([`crate::handler`]).
    pub fn is_handler(&self) -> bool {
        matches!(self.0.pre, contract::Pre::Handler(_))
    }

    /// What the plugin is to weft: `step` (it exports `weft:plugin/step`),
    /// `command` or `handler`.
    pub fn kind(&self) -> &'static str {
        match self.0.pre {
            contract::Pre::Command(_) => "command",
            contract::Pre::Handler(_) => "handler",
            _ => "step",
        }
    }

    /// The contract version the component was built against; none for a
    /// command or a handler.
    pub fn contract(&self) -> Option<&str> {
        self.0
            .exports
            .iter()
            .find_map(|name| name.strip_prefix("weft:plugin/step@"))
    }

    /// How long [`Runtime::load`] took for this plugin.
    pub fn load_time(&self) -> Duration {
        self.0.load_time
    }
}
