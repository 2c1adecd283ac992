//! The runtime's errors, kept apart: a component that cannot be loaded,
//! a call that failed (a guest's typed error, a trap, a limit), and the
//! runtime itself failing to start.
use std::time::Duration;

use serde_json::Value;

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// wasmtime refused the engine configuration.
    #[error("cannot configure the WebAssembly engine: {0}")]
    Engine(String),
    /// The compiled-code cache directory cannot be used.
    #[error("cannot use the compiled-code cache at {path}: {source}")]
    Cache {
        /// The cache directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Why a component cannot be used as a plugin. Nothing is left behind by a
/// failed load except, possibly, a compiled-code cache entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The bytes are not WebAssembly at all.
    #[error("is not a WebAssembly file (it does not start with the `\\0asm` magic)")]
    NotWasm,
    /// A core module, not a component.
    #[error(
        "is a core WebAssembly module, not a component; build it for `wasm32-wasip2`, or add a \
         preview-1 command module with `weft plugin add FILE --name NAME --version VERSION` \
         (`POST /v1/plugins?name=NAME&version=VERSION`), which wraps it"
    )]
    CoreModule,
    /// wasmtime could not compile the component.
    #[error("cannot compile the component: {0}")]
    Compile(String),
    /// The component does not export the step interface.
    #[error(
        "exports neither `weft:plugin/step` (a step), `wasi:cli/run` (a command) nor \
         `wasi:http/incoming-handler` (an HTTP handler); exports: {exports}"
    )]
    NotAPlugin {
        /// What it does export.
        exports: String,
    },
    /// The component was built for a contract version this host does not
    /// speak.
    #[error(
        "was built for contract `weft:plugin@{found}`, but this host speaks `weft:plugin@{supported}` \
         (and loads `weft:plugin@{}` components); rebuild it against a compatible version",
        crate::COMPAT_VERSIONS.join("`, `weft:plugin@")
    )]
    Contract {
        /// The version the component uses.
        found: String,
        /// The version this host implements.
        supported: String,
    },
    /// The component imports something the host does not provide.
    #[error("imports `{import}`, which weft does not provide to plugins")]
    MissingImport {
        /// The import's name.
        import: String,
    },
    /// The component could not be prepared for instantiation.
    #[error("cannot be linked: {0}")]
    Link(String),
    /// A command (it exports `wasi:cli/run`) or an HTTP handler that does
    /// not describe itself.
    #[error(
        "is a WASI command or HTTP handler with no name or version recorded in it; add it with \
         `weft plugin add FILE --name NAME --version VERSION` \
         (`POST /v1/plugins?name=NAME&version=VERSION`), which records them"
    )]
    Undescribed,
    /// A command's recorded description is unusable, or one cannot be
    /// recorded.
    #[error("has a description that cannot be used: {0}")]
    Description(String),
    /// A preview-1 module could not be wrapped as a command.
    #[error("cannot be wrapped as a preview-1 command: {0}")]
    Wrap(String),
    /// Calling `describe` failed, or its answer is unusable.
    #[error("describe() failed: {0}")]
    Describe(String),
}

/// Why one call of a step did not produce output. Every variant is a normal
/// outcome of running untrusted code, and none of them harms the host.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The step returned an error it understood.
    #[error("{code}: {message}")]
    Step {
        /// True for `retryable`, false for `fatal`.
        retryable: bool,
        /// The step's error code.
        code: String,
        /// The step's message.
        message: String,
        /// Structured details, if the step gave valid JSON.
        details: Option<Value>,
    },
    /// The call ran past its deadline and was interrupted.
    #[error("the step ran longer than its timeout of {} and was stopped", humantime::format_duration(*limit))]
    Timeout {
        /// The deadline.
        limit: Duration,
    },
    /// The guest tried to grow its memory past its limit.
    #[error("the step tried to use {requested} bytes of memory, over its limit of {limit} bytes")]
    MemoryLimit {
        /// The limit, in bytes.
        limit: u64,
        /// What the guest asked for in total, in bytes.
        requested: u64,
    },
    /// The guest trapped: a panic, `unreachable`, an out-of-bounds access...
    #[error("the step trapped: {message}")]
    Trap {
        /// The trap and, when the guest wrote one, its last words on stderr.
        message: String,
    },
    /// The step returned text that is not JSON.
    #[error("the step returned output that is not JSON: {message}")]
    InvalidOutput {
        /// The parser's complaint.
        message: String,
    },
    /// The key-value space could not be read; the call's view of it is
    /// incomplete, so its result is not used.
    #[error("the step's key-value space could not be read: {message}")]
    Kv {
        /// Why.
        message: String,
    },
    /// The call was interrupted because its run ended (cancelled, past
    /// its deadline, or failed elsewhere); what it would have returned is
    /// not wanted.
    #[error("the step was interrupted: its run ended")]
    Cancelled,
    /// An HTTP request of the call was refused by its grants, its tenant's
    /// policy, or the address check.
    #[error("{message}")]
    HttpDenied {
        /// The request and the rule that refused it.
        message: String,
    },
    /// The call went past one of its HTTP limits (requests, response
    /// bytes).
    #[error("{message}")]
    HttpLimit {
        /// The request and the limit.
        message: String,
    },
    /// The host could not instantiate the component for this call.
    #[error("could not start the step: {message}")]
    Instantiate {
        /// Why.
        message: String,
    },
    /// The call made the host hold more for it (key-value writes,
    /// messages, output) than its budget, the step's memory limit.
    #[error("{message}")]
    ResourceLimit {
        /// What was held, and the budget.
        message: String,
    },
}

impl CallError {
    /// A short stable code: the step's own code for [`CallError::Step`], else
    /// one of `timeout`, `memory_limit`, `trap`, `invalid_output`,
    /// `instantiate`, `kv`, `cancelled`, `http_denied`, `http_limit`,
    /// `resource_limit`.
    pub fn code(&self) -> &str {
        match self {
            Self::Step { code, .. } => code,
            Self::Timeout { .. } => "timeout",
            Self::MemoryLimit { .. } => "memory_limit",
            Self::Trap { .. } => "trap",
            Self::InvalidOutput { .. } => "invalid_output",
            Self::Instantiate { .. } => "instantiate",
            Self::Kv { .. } => "kv",
            Self::Cancelled => "cancelled",
            Self::HttpDenied { .. } => "http_denied",
            Self::HttpLimit { .. } => "http_limit",
            Self::ResourceLimit { .. } => "resource_limit",
        }
    }

    /// Whether trying again could help: a retryable step error, a timeout, a
    /// trap, a failed instantiation or key-value read. Fatal step errors, memory-limit hits,
    /// host-budget hits and invalid output are deterministic enough not to retry.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Step { retryable, .. } => *retryable,
            Self::Timeout { .. }
            | Self::Trap { .. }
            | Self::Instantiate { .. }
            | Self::Kv { .. } => true,
            Self::MemoryLimit { .. }
            | Self::InvalidOutput { .. }
            | Self::Cancelled
            | Self::HttpDenied { .. }
            | Self::HttpLimit { .. }
            | Self::ResourceLimit { .. } => false,
        }
    }
}
