//! Loading a component as a plugin, and calling it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmtime::Trap;
use wasmtime::component::Component;

use super::bindings::{self, PluginPre};
use super::cache::CodeSource;
use super::error::{CallError, LoadError};
use super::kv::KvAccess;
use super::log::LogSink;
use super::sandbox::StepState;
use super::{CONTRACT_VERSION, Runtime, deadline_ticks};
use weft_core::Digest;
use weft_core::{KvEffects, LogLine};

/// The deadline of a `describe` call at load time.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A loaded plugin: compiled, linked and described. Cheap to clone.
#[derive(Clone)]
pub struct Plugin(Arc<Loaded>);

struct Loaded {
    runtime: Runtime,
    bytes: Arc<[u8]>,
    input_check: Option<weft_core::InputSchema>,
    pre: PluginPre<StepState>,
    digest: Digest,
    meta: PluginMeta,
    code_source: CodeSource,
    load_time: Duration,
    /// The component's imports and exports, by name.
    imports: Vec<String>,
    exports: Vec<String>,
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

/// Where a call comes from; passed to the guest as `step-context`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepContext {
    /// The tenant that owns the run.
    pub tenant: String,
    /// The workflow's id.
    pub workflow: String,
    /// The run's id.
    pub run_id: String,
    /// The step's id.
    pub step_id: String,
    /// 1 on the first attempt.
    pub attempt: u32,
    /// Stable across the attempts of this step in this run.
    pub idempotency_key: String,
}

/// How one call is bounded, and what it may reach.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// The call's deadline; the runtime's default when `None`.
    pub timeout: Option<Duration>,
    /// The cap on the call's memory, in bytes; the runtime's default when
    /// `None`.
    pub memory_limit: Option<u64>,
    /// The key-value space the call sees; with `None`, reads find nothing
    /// and writes fail.
    pub kv: Option<KvAccess>,
    /// When set, the call is interrupted at the next epoch tick (within a
    /// few milliseconds) with [`CallError::Cancelled`]: its run ended.
    pub cancel: Option<Arc<AtomicBool>>,
}

/// The result of one call, with the log lines it produced either way.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The step's output, or why there is none.
    pub result: Result<Value, CallError>,
    /// What the step logged, in order.
    pub logs: Vec<LogLine>,
    /// What the call read and wrote in its key-value space. Only a
    /// successful call's effects may be committed.
    pub kv: KvEffects,
    /// The messages the call emitted, in order. Only a successful call's
    /// messages may be committed.
    pub emitted: Vec<weft_core::Emission>,
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
    /// `weft:plugin/step@<contract version>`.
    pub fn exports(&self) -> &[String] {
        &self.0.exports
    }

    /// The contract version the component was built against.
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

    /// Calls the step once on `input` (JSON text) in a fresh instance,
    /// bounded by `options`.
    ///
    /// Blocking: runs guest code on this thread until it returns, traps or
    /// reaches its deadline. Never panics on guest behaviour; every failure
    /// is a [`CallError`]. Has no effect outside the call: nothing is stored.
    pub fn call(&self, context: &StepContext, input: &str, options: &CallOptions) -> CallOutcome {
        let config = self.0.runtime.config();
        let timeout = options.timeout.unwrap_or(config.default_timeout);
        let memory_limit = options.memory_limit.unwrap_or(config.default_memory_limit);
        let log = LogSink::new(config.log_limit, &self.0.meta.name, &context.step_id);
        let _slot = self.0.runtime.shared.slots.acquire();
        let mut store = new_store(
            &self.0.runtime,
            timeout,
            memory_limit,
            log.clone(),
            options.kv.clone(),
        );
        if let Some(cancel) = options.cancel.clone() {
            // Looked at every tick; the deadline is counted down here.
            let mut ticks_left = deadline_ticks(timeout).saturating_add(1);
            store.set_epoch_deadline(1);
            store.epoch_deadline_callback(move |_| {
                if cancel.load(Ordering::Relaxed) {
                    return Err(wasmtime::Error::new(Cancelled));
                }
                ticks_left = ticks_left.saturating_sub(1);
                Ok(if ticks_left == 0 {
                    wasmtime::UpdateDeadline::Interrupt
                } else {
                    wasmtime::UpdateDeadline::Continue(1)
                })
            });
        }
        let wit_context = bindings::StepContext {
            tenant: context.tenant.clone(),
            workflow: context.workflow.clone(),
            run_id: context.run_id.clone(),
            step_id: context.step_id.clone(),
            attempt: context.attempt,
            idempotency_key: context.idempotency_key.clone(),
        };
        let input = input.to_owned();
        let result = match self.0.pre.instantiate(&mut store) {
            Err(e) => Err(CallError::Instantiate {
                message: format!("{e:#}"),
            }),
            Ok(instance) => {
                match instance
                    .weft_plugin_step()
                    .call_run(&mut store, &wit_context, &input)
                {
                    Ok(Ok(output)) => {
                        serde_json::from_str(&output).map_err(|e| CallError::InvalidOutput {
                            message: e.to_string(),
                        })
                    }
                    Ok(Err(error)) => Err(step_error(error)),
                    Err(trap) => Err(classify_trap(
                        &trap,
                        store.data().limiter.refused,
                        &log,
                        timeout,
                        memory_limit,
                    )),
                }
            }
        };
        let state = store.into_data();
        let result = match (result, state.kv.failed.clone()) {
            (Ok(_), Some(message)) => Err(CallError::Kv { message }),
            (result, _) => result,
        };
        CallOutcome {
            result,
            logs: log.finish(),
            kv: state.kv.into_effects(),
            emitted: state.outbox.emitted,
        }
    }
}

impl Plugin {
    /// For `weft bench` only: times `n` calls of `run` on `input` in *one*
    /// instance, as instance reuse would do. weft never does this for runs:
    /// a reused instance keeps what one call left in its memory for the
    /// next, which breaks the isolation between runs and attempts.
    #[doc(hidden)]
    pub fn time_reused_calls(&self, input: &str, n: usize) -> Result<Vec<Duration>, CallError> {
        let config = self.0.runtime.config();
        let log = LogSink::new(config.log_limit, &self.0.meta.name, "bench");
        let mut store = new_store(
            &self.0.runtime,
            Duration::from_secs(3600),
            config.default_memory_limit,
            log,
            None,
        );
        let context = bindings::StepContext {
            tenant: "bench".to_owned(),
            workflow: "bench".to_owned(),
            run_id: "bench".to_owned(),
            step_id: "bench".to_owned(),
            attempt: 1,
            idempotency_key: "bench".to_owned(),
        };
        let instance = self
            .0
            .pre
            .instantiate(&mut store)
            .map_err(|e| CallError::Instantiate {
                message: format!("{e:#}"),
            })?;
        let input = input.to_owned();
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let started = Instant::now();
            let answer = instance
                .weft_plugin_step()
                .call_run(&mut store, &context, &input);
            times.push(started.elapsed());
            match answer {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => return Err(step_error(error)),
                Err(trap) => {
                    return Err(CallError::Instantiate {
                        message: format!("{trap:#}"),
                    });
                }
            }
        }
        Ok(times)
    }
}

/// A store for one call: fresh state, the memory cap, and a deadline of one
/// tick more than `timeout` (the first tick may come at once).
fn new_store(
    runtime: &Runtime,
    timeout: Duration,
    memory_limit: u64,
    log: LogSink,
    kv: Option<KvAccess>,
) -> wasmtime::Store<StepState> {
    let mut store = wasmtime::Store::new(
        &runtime.shared.engine,
        StepState::new(memory_limit, log, kv),
    );
    store.limiter(|state| &mut state.limiter);
    store.set_epoch_deadline(deadline_ticks(timeout).saturating_add(1));
    store.epoch_deadline_trap();
    store
}

pub(super) fn load(runtime: &Runtime, bytes: &[u8]) -> Result<Plugin, LoadError> {
    let started = Instant::now();
    check_header(bytes)?;
    let shared = &runtime.shared;
    let digest = Digest::of(bytes);
    let (component, code_source) = match &shared.cache {
        Some(cache) => cache.get_or_compile(&shared.engine, &digest, bytes),
        None => Component::new(&shared.engine, bytes).map(|c| (c, CodeSource::Compiled)),
    }
    .map_err(|e| LoadError::Compile(format!("{e:#}")))?;

    check_contract(&component, &shared.engine)?;
    let instance_pre = shared
        .linker
        .instantiate_pre(&component)
        .map_err(|e| link_error(&component, &shared.engine, &e))?;
    let pre = PluginPre::new(instance_pre).map_err(|e| LoadError::Link(format!("{e:#}")))?;

    let mut plugin = Loaded {
        runtime: runtime.clone(),
        bytes: Arc::from(bytes),
        input_check: None,
        pre,
        digest,
        meta: PluginMeta {
            name: String::new(),
            version: semver::Version::new(0, 0, 0),
            description: String::new(),
            input_schema: None,
            output_schema: None,
        },
        code_source,
        load_time: Duration::ZERO,
        imports: {
            let ty = component.component_type();
            ty.imports(&shared.engine)
                .map(|(name, _)| name.to_owned())
                .collect()
        },
        exports: {
            let ty = component.component_type();
            ty.exports(&shared.engine)
                .map(|(name, _)| name.to_owned())
                .collect()
        },
    };
    plugin.meta = describe(&plugin)?;
    plugin.input_check = plugin
        .meta
        .input_schema
        .clone()
        .map(weft_core::InputSchema::compile)
        .transpose()
        .map_err(|e| {
            LoadError::Describe(format!("input-schema is not a usable JSON Schema: {e}"))
        })?;
    plugin.load_time = started.elapsed();
    Ok(Plugin(Arc::new(plugin)))
}

/// Tells apart "not wasm" and "a core module" before wasmtime's parser does,
/// for a clearer message.
fn check_header(bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm);
    }
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(LoadError::CoreModule);
    }
    Ok(())
}

/// Finds `weft:plugin/step@<version>` among the exports and checks that
/// version against [`CONTRACT_VERSION`] by semver: same major, and for 0.x the
/// same minor.
fn check_contract(component: &Component, engine: &wasmtime::Engine) -> Result<(), LoadError> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    let Some(found) = exports
        .iter()
        .find_map(|name| name.strip_prefix("weft:plugin/step@"))
    else {
        return Err(LoadError::NotAPlugin {
            exports: if exports.is_empty() {
                "none".to_owned()
            } else {
                exports.join(", ")
            },
        });
    };
    let supported =
        semver::Version::parse(CONTRACT_VERSION).unwrap_or(semver::Version::new(0, 0, 0));
    let compatible = semver::Version::parse(found).is_ok_and(|found| {
        found.major == supported.major && (supported.major > 0 || found.minor == supported.minor)
    });
    if compatible {
        Ok(())
    } else {
        Err(LoadError::Contract {
            found: found.to_owned(),
            supported: CONTRACT_VERSION.to_owned(),
        })
    }
}

/// Names the import that failed to link, when the component has one whose
/// name appears in wasmtime's error.
fn link_error(
    component: &Component,
    engine: &wasmtime::Engine,
    error: &wasmtime::Error,
) -> LoadError {
    let message = format!("{error:#}");
    let imports = component.component_type();
    let missing = imports
        .imports(engine)
        .map(|(name, _)| name)
        .find(|name| message.contains(&format!("`{name}`")));
    match missing {
        Some(import) => LoadError::MissingImport {
            import: import.to_owned(),
        },
        None => LoadError::Link(message),
    }
}

fn describe(plugin: &Loaded) -> Result<PluginMeta, LoadError> {
    let config = plugin.runtime.config();
    let log = LogSink::new(config.log_limit, "(loading)", "describe");
    let _slot = plugin.runtime.shared.slots.acquire();
    let mut store = new_store(
        &plugin.runtime,
        DESCRIBE_TIMEOUT,
        config.default_memory_limit,
        log.clone(),
        None,
    );
    let instance = plugin
        .pre
        .instantiate(&mut store)
        .map_err(|e| LoadError::Describe(format!("cannot instantiate: {e:#}")))?;
    let info = instance
        .weft_plugin_step()
        .call_describe(&mut store)
        .map_err(|trap| {
            let error = classify_trap(
                &trap,
                store.data().limiter.refused,
                &log,
                DESCRIBE_TIMEOUT,
                config.default_memory_limit,
            );
            LoadError::Describe(error.to_string())
        })?;
    check_info(info).map_err(LoadError::Describe)
}

fn check_info(info: bindings::PluginInfo) -> Result<PluginMeta, String> {
    weft_core::names::check_id(&info.name).map_err(|m| format!("plugin name {m}"))?;
    let version = semver::Version::parse(&info.version)
        .map_err(|e| format!("version `{}` is not a semantic version: {e}", info.version))?;
    let schema = |field: &str, text: Option<String>| {
        text.map(|text| {
            serde_json::from_str::<Value>(&text).map_err(|e| format!("{field} is not JSON: {e}"))
        })
        .transpose()
    };
    Ok(PluginMeta {
        input_schema: schema("input-schema", info.input_schema)?,
        output_schema: schema("output-schema", info.output_schema)?,
        name: info.name,
        version,
        description: info.description,
    })
}

fn step_error(error: bindings::StepError) -> CallError {
    let (retryable, failure) = match error {
        bindings::StepError::Retryable(failure) => (true, failure),
        bindings::StepError::Fatal(failure) => (false, failure),
    };
    let details = failure.details.map(|text| {
        serde_json::from_str(&text).unwrap_or_else(|_| serde_json::json!({ "unparsed": text }))
    });
    CallError::Step {
        retryable,
        code: failure.code,
        message: failure.message,
        details,
    }
}

/// Turns the error of a failed guest call into what happened, in the
/// guest author's terms.
/// Why a cancelled call stopped.
#[derive(Debug)]
struct Cancelled;

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call was cancelled")
    }
}

impl std::error::Error for Cancelled {}

fn classify_trap(
    error: &wasmtime::Error,
    memory_refused: Option<usize>,
    log: &LogSink,
    timeout: Duration,
    memory_limit: u64,
) -> CallError {
    if let Some(requested) = memory_refused {
        return CallError::MemoryLimit {
            limit: memory_limit,
            requested: u64::try_from(requested).unwrap_or(u64::MAX),
        };
    }
    if let Some(Trap::Interrupt) = error.downcast_ref::<Trap>() {
        return CallError::Timeout { limit: timeout };
    }
    if error.downcast_ref::<Cancelled>().is_some() {
        return CallError::Cancelled;
    }
    let mut message = if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        format!("the guest exited with status {}", exit.0)
    } else if let Some(trap) = error.downcast_ref::<Trap>() {
        trap.to_string()
    } else {
        format!("{error:#}")
    };
    if let Some(tail) = log.stderr_tail() {
        message.push_str("; the guest wrote: ");
        message.push_str(&tail);
    }
    CallError::Trap { message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_tell_modules_from_components() {
        assert_eq!(check_header(b"hello world"), Err(LoadError::NotWasm));
        assert_eq!(check_header(b"\0asm\x01\0\0\0"), Err(LoadError::CoreModule));
        assert_eq!(check_header(b"\0asm\x0d\0\x01\0"), Ok(()));
    }

    #[test]
    fn plugin_info_is_checked() {
        let info = |name: &str, version: &str, schema: Option<&str>| bindings::PluginInfo {
            name: name.to_owned(),
            version: version.to_owned(),
            description: String::new(),
            input_schema: schema.map(str::to_owned),
            output_schema: None,
        };
        assert!(check_info(info("echo", "1.2.3", Some("{}"))).is_ok());
        assert!(
            check_info(info("", "1.0.0", None))
                .unwrap_err()
                .contains("name")
        );
        assert!(
            check_info(info("a b", "1.0.0", None))
                .unwrap_err()
                .contains("name")
        );
        assert!(
            check_info(info("echo", "one", None))
                .unwrap_err()
                .contains("semantic version")
        );
        assert!(
            check_info(info("echo", "1.0.0", Some("{")))
                .unwrap_err()
                .contains("input-schema is not JSON")
        );
    }
}
