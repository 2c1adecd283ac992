//! The wasmtime embedding.
//!
//! One [`Runtime`] holds one wasmtime engine with the pooling allocator, a
//! linker with every host capability, and the compiled-code cache. Loading a
//! component ([`Runtime::load`]) compiles it once (or reads it from the
//! cache), checks its contract version, resolves its imports once
//! (`InstancePre`) and asks it to describe itself. Each [`Plugin::call`] gets
//! a fresh instance in a fresh store, bounded by:
//!
//! - an epoch deadline (the step's timeout; the runtime's default otherwise);
//! - a cap on the total linear memory of the instance;
//! - wasmtime's limit on wasm stack size, and caps on instances and tables;
//! - a byte budget for log lines.
//!
//! The runtime never touches the store or the engine's run state: it turns
//! bytes and JSON into JSON, and reports what happened.

mod bindings;
mod budget;
mod cache;
mod command;
mod error;
mod handler;
mod http;
mod kv;
mod limits;
mod log;
mod outbox;
mod plugin;
mod sandbox;
mod secrets;
mod share;
mod slots;
mod snapshot;
mod wait;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{InstanceAllocationStrategy, PoolingAllocationConfig};

pub use cache::{CodeSource, Pruned};
pub use command::{
    CommandLine, DESCRIPTION_SECTION, Description, EXIT_RETRYABLE, describe_command,
};
pub use error::{CallError, LoadError, RuntimeError};
pub use http::HttpLimits;
pub use kv::{KvAccess, KvSource, MAX_KEY, MAX_VALUE, MAX_WRITES};
pub use outbox::{MAX_MESSAGES, MAX_PAYLOAD};
pub use plugin::{CallOptions, CallOutcome, CallTiming, Plugin, PluginMeta, StepContext};
pub use secrets::Secrets;
pub use snapshot::{MAX_KEYS as MAX_SNAPSHOT_KEYS, SharedSnapshots, SnapshotSource};
pub use weft_core::{Digest, HttpCall, KvEffects, LogLevel, LogLine, LogSource, Versioned};

use cache::CodeCache;
use sandbox::StepState;

/// The version of the `weft:plugin` WIT package this host implements.
pub const CONTRACT_VERSION: &str = "0.3.0";

/// The earlier contract versions this host still loads, unchanged.
pub const COMPAT_VERSIONS: &[&str] = &["0.1.0", "0.2.0"];

/// How often the epoch advances; deadlines are rounded up to it.
const EPOCH_TICK: Duration = Duration::from_millis(5);

/// How the runtime runs plugins. Every field has a default suitable for a
/// single host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// A call's deadline when its step sets none. Default: 30 s.
    pub default_timeout: Duration,
    /// A call's memory cap, in bytes, when its step sets none. Default: 64 MiB.
    pub default_memory_limit: u64,
    /// The largest memory cap a step may ask for. Default: 4 GiB.
    pub max_memory_limit: u64,
    /// The wasm stack a call may use, in bytes. Default: 512 KiB.
    pub max_wasm_stack: usize,
    /// The bytes of log lines one call may keep. Default: 64 KiB.
    pub log_limit: usize,
    /// Where compiled code is cached; `None` compiles on every load.
    /// Default: none.
    pub cache_dir: Option<PathBuf>,
    /// Use the pooling allocator (true) or allocate on demand. Default: true.
    pub pooling: bool,
    /// How many instances may be alive at once with pooling; a call waits
    /// for a free one. Default: 1000.
    pub max_instances: u32,
    /// Bytes of each pooled memory (and table) kept resident between calls:
    /// the pages a call dirtied there are reset in place instead of being
    /// unmapped, so the next call does not fault them in again. On Linux 6.7+
    /// only dirtied pages are reset. Costs up to this much RSS per warm pool
    /// slot. Default: 4 MiB (`weft bench` measured 22 µs per call with 0 and
    /// 9 µs with 4 MiB).
    pub memory_keep_resident: usize,
    /// What one call may do over HTTP: requests, response bytes, connect
    /// time. (Where it may go is the step's grant.)
    pub http: HttpLimits,
    /// Instances made ahead of their call, at most one per plugin, by one
    /// thread off the calls' path; each is used by one call only. They hold
    /// at most half of `max_instances`, and one tenant's at most a quarter
    /// of this (at least one); each is made under the memory cap and
    /// deadline of the call that asked for it. 0 makes every instance at
    /// its call. Default: 16.
    pub spare_instances: u32,
    /// Only a plugin that takes this long or longer to instantiate (the
    /// least of its recent instantiations) gets spares: for a quicker one,
    /// waking the spare thread costs about what the spare saves. Default:
    /// 50 µs (Python's interpreter takes about 200 µs; Rust and JavaScript
    /// steps 3 to 8 µs).
    pub spare_above: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(30),
            default_memory_limit: 64 << 20,
            max_memory_limit: 4 << 30,
            max_wasm_stack: 512 << 10,
            log_limit: 64 << 10,
            cache_dir: None,
            pooling: true,
            max_instances: 1000,
            memory_keep_resident: 4 << 20,
            http: HttpLimits::default(),
            spare_instances: 16,
            spare_above: Duration::from_micros(50),
        }
    }
}

/// Runs plugins. Cheap to clone; clones share the engine, linker and cache.
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

struct Shared {
    engine: wasmtime::Engine,
    slots: slots::Slots,
    linker: Linker<StepState>,
    cache: Option<CodeCache>,
    spares: plugin::Spares,
    config: RuntimeConfig,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Builds the engine and linker, opens the cache, and starts the thread
    /// that advances the epoch (it stops when the last clone is dropped).
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        let mut wasm = wasmtime::Config::new();
        wasm.wasm_component_model(true)
            .epoch_interruption(true)
            .max_wasm_stack(config.max_wasm_stack)
            .parallel_compilation(true)
            .cranelift_opt_level(wasmtime::OptLevel::Speed);
        if config.pooling {
            let mut pool = PoolingAllocationConfig::default();
            pool.total_component_instances(config.max_instances)
                .total_core_instances(config.max_instances.saturating_mul(8))
                .total_memories(config.max_instances.saturating_mul(2))
                .total_tables(config.max_instances.saturating_mul(8))
                .max_memory_size(usize::try_from(config.max_memory_limit).unwrap_or(usize::MAX))
                .linear_memory_keep_resident(config.memory_keep_resident)
                .table_keep_resident(config.memory_keep_resident)
                // With keep-resident set, reset only the pages a call dirtied
                // (Linux 6.7+); elsewhere wasmtime falls back to `memset`.
                .pagemap_scan(wasmtime::Enabled::Auto);
            wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        let engine =
            wasmtime::Engine::new(&wasm).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;

        let mut linker = Linker::new(&engine);
        sandbox::add_to_linker(&mut linker).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        log::add_to_linker(&mut linker).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        kv::add_to_linker(&mut linker).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        outbox::add_to_linker(&mut linker).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        secrets::add_to_linker(&mut linker).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        snapshot::add_to_linker(&mut linker).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;

        let cache = config
            .cache_dir
            .as_deref()
            .map(|dir| {
                CodeCache::open(dir, &engine).map_err(|source| RuntimeError::Cache {
                    path: dir.display().to_string(),
                    source,
                })
            })
            .transpose()?;

        start_epoch_ticker(&engine);
        Ok(Self {
            shared: Arc::new(Shared {
                slots: slots::Slots::new(if config.pooling {
                    config.max_instances
                } else {
                    u32::MAX
                }),
                engine,
                linker,
                cache,
                spares: plugin::Spares::new(config.spare_instances),
                config,
            }),
        })
    }

    /// The configuration this runtime was built with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.config
    }

    /// Removes from the compiled-code cache every entry whose component's
    /// digest (its hex) `keep` does not keep, and the entries of other
    /// engine configurations; with `dry_run`, only counts them. Nothing
    /// without a cache. Blocking.
    pub fn prune_cache(
        &self,
        keep: &dyn Fn(&str) -> bool,
        dry_run: bool,
    ) -> std::io::Result<Pruned> {
        match &self.shared.cache {
            Some(cache) => cache.prune(keep, dry_run),
            None => Ok(Pruned::default()),
        }
    }

    /// Prepares the component in `bytes` to be called. Blocking: compiling
    /// takes about a second for a small component in a debug build, a load
    /// from the cache a few milliseconds.
    pub fn load(&self, bytes: &[u8]) -> Result<Plugin, LoadError> {
        plugin::load(self, bytes)
    }
}

/// Advances the engine's epoch every [`EPOCH_TICK`] on one thread, for as long
/// as the engine lives.
fn start_epoch_ticker(engine: &wasmtime::Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("weft-epoch".to_owned())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        });
    if let Err(e) = spawned {
        // Without the ticker no deadline fires; say so loudly rather than fail
        // every call.
        tracing::error!("cannot start the epoch thread; step timeouts will not fire: {e}");
    }
}

/// The number of epoch ticks that covers `timeout`, rounded up.
fn deadline_ticks(timeout: Duration) -> u64 {
    let tick = EPOCH_TICK.as_nanos();
    // Bounded, so wasmtime's sum of the current epoch and this never
    // overflows.
    let ticks = timeout
        .min(weft_core::clock::MAX_DURATION)
        .as_nanos()
        .div_ceil(tick);
    u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_version_matches_the_wit() {
        let wit = include_str!("../../../wit/plugin.wit");
        assert!(
            wit.contains(&format!("package weft:plugin@{CONTRACT_VERSION};")),
            "wit/plugin.wit and CONTRACT_VERSION disagree"
        );
    }

    #[test]
    fn deadlines_round_up_to_whole_ticks() {
        assert_eq!(deadline_ticks(Duration::ZERO), 1);
        assert_eq!(deadline_ticks(Duration::from_millis(5)), 1);
        assert_eq!(deadline_ticks(Duration::from_millis(6)), 2);
        assert_eq!(deadline_ticks(Duration::from_secs(30)), 6000);
    }
}
