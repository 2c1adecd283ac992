//! Loading a component as a plugin: its header and contract version are
//! checked, its imports linked once, and its description asked for and
//! checked.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmtime::component::Component;

use super::call::{classify_trap, new_store};
use super::contract::{Info, Pre};
use super::{Loaded, Plugin, PluginMeta};
use crate::cache::CodeSource;
use crate::error::LoadError;
use crate::log::LogSink;
use crate::{COMPAT_VERSIONS, CONTRACT_VERSION, Runtime};
use weft_core::Digest;

/// The deadline of a `describe` call at load time.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Compiles the component in `bytes` (or reads its code from the cache),
/// checks it, links it and asks it to describe itself: [`Runtime::load`].
pub(crate) fn load(runtime: &Runtime, bytes: &[u8]) -> Result<Plugin, LoadError> {
    let started = Instant::now();
    check_header(bytes)?;
    let shared = &runtime.shared;
    let digest = Digest::of(bytes);
    let (component, code_source) = match &shared.cache {
        Some(cache) => cache.get_or_compile(&shared.engine, &digest, bytes),
        None => Component::new(&shared.engine, bytes).map(|c| (c, CodeSource::Compiled)),
    }
    .map_err(|e| LoadError::Compile(format!("{e:#}")))?;

    let shape = check_contract(&component, &shared.engine)?;
    let instance_pre = shared
        .linker
        .instantiate_pre(&component)
        .map_err(|e| link_error(&component, &shared.engine, &e))?;
    let pre = match &shape {
        Shape::Step(contract) => Pre::new(contract, instance_pre),
        Shape::Command => Pre::command(instance_pre),
        Shape::Handler => Pre::handler(instance_pre),
    }
    .map_err(|e| LoadError::Link(format!("{e:#}")))?;

    let mut plugin = Loaded {
        runtime: runtime.clone(),
        bytes: Arc::from(bytes),
        input_check: None,
        output_check: None,
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
        spare: Default::default(),
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
    plugin.meta = match &shape {
        Shape::Step(_) => {
            if crate::command::read_description(bytes)
                .map_err(LoadError::Description)?
                .is_some()
            {
                return Err(LoadError::Description(
                    "the component exports `weft:plugin/step`, so it describes itself; \
                     a recorded name and version are for a command"
                        .to_owned(),
                ));
            }
            describe(&plugin)?
        }
        Shape::Command | Shape::Handler => described(bytes)?,
    };
    plugin.input_check = plugin
        .meta
        .input_schema
        .clone()
        .map(weft_core::InputSchema::compile)
        .transpose()
        .map_err(|e| {
            LoadError::Describe(format!("input-schema is not a usable JSON Schema: {e}"))
        })?;
    // 0.1 published `output-schema` as documentation only; from 0.2 it is
    // a contract, checked on every output. A 0.1 component loads and runs
    // as it did.
    if !matches!(shape, Shape::Step(ref contract) if contract.minor < 2) {
        plugin.output_check = plugin
            .meta
            .output_schema
            .clone()
            .map(weft_core::InputSchema::compile)
            .transpose()
            .map_err(|e| {
                LoadError::Describe(format!("output-schema is not a usable JSON Schema: {e}"))
            })?;
    }
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

/// What a component is to weft.
enum Shape {
    /// It exports `weft:plugin/step` at this contract version.
    Step(semver::Version),
    /// It exports `wasi:cli/run`: a command ([`crate::command`]).
    Command,
    /// It exports `wasi:http/incoming-handler`: an HTTP handler
    /// ([`crate::handler`]).
    Handler,
}

/// Finds `weft:plugin/step@<version>` among the exports and checks that
/// version against [`CONTRACT_VERSION`] and [`COMPAT_VERSIONS`] by semver: same
/// major, and for 0.x the same minor. Without it, a component that exports
/// `wasi:http/incoming-handler` is an HTTP handler, and one that exports
/// `wasi:cli/run` a command.
fn check_contract(component: &Component, engine: &wasmtime::Engine) -> Result<Shape, LoadError> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    let Some(found) = exports
        .iter()
        .find_map(|name| name.strip_prefix("weft:plugin/step@"))
    else {
        // A component that is both answers requests: `run` of a handler
        // is incidental (a server's own loop, say).
        if exports
            .iter()
            .any(|name| name.starts_with(crate::handler::HANDLER_EXPORT))
        {
            return Ok(Shape::Handler);
        }
        if exports
            .iter()
            .any(|name| name.starts_with(crate::command::RUN_EXPORT))
        {
            return Ok(Shape::Command);
        }
        return Err(LoadError::NotAPlugin {
            exports: if exports.is_empty() {
                "none".to_owned()
            } else {
                exports.join(", ")
            },
        });
    };
    let compatible_with = |supported: &str, found: &semver::Version| {
        semver::Version::parse(supported).is_ok_and(|supported| {
            found.major == supported.major
                && (supported.major > 0 || found.minor == supported.minor)
        })
    };
    match semver::Version::parse(found) {
        Ok(version)
            if compatible_with(CONTRACT_VERSION, &version)
                || COMPAT_VERSIONS
                    .iter()
                    .any(|compat| compatible_with(compat, &version)) =>
        {
            Ok(Shape::Step(version))
        }
        _ => Err(LoadError::Contract {
            found: found.to_owned(),
            supported: CONTRACT_VERSION.to_owned(),
        }),
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
        crate::sandbox::Reach::default(),
    );
    let instance = plugin
        .pre
        .instantiate(&mut store)
        .map_err(|e| LoadError::Describe(format!("cannot instantiate: {e:#}")))?;
    let info = instance.describe(&mut store).map_err(|trap| {
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

/// A command's description, as `weft plugin add` recorded it in its bytes.
fn described(bytes: &[u8]) -> Result<PluginMeta, LoadError> {
    let Some(d) = crate::command::read_description(bytes).map_err(LoadError::Description)? else {
        return Err(LoadError::Undescribed);
    };
    let version = check_name_version(&d.name, &d.version).map_err(LoadError::Description)?;
    Ok(PluginMeta {
        name: d.name,
        version,
        description: d.description,
        input_schema: d.input_schema,
        output_schema: d.output_schema,
    })
}

/// A plugin's name (an id) and its version (a semantic version), as a
/// step's `describe` answers them or a command's description records them.
pub(crate) fn check_name_version(name: &str, version: &str) -> Result<semver::Version, String> {
    weft_core::names::check_id(name).map_err(|m| format!("plugin name {m}"))?;
    semver::Version::parse(version)
        .map_err(|e| format!("version `{version}` is not a semantic version: {e}"))
}

fn check_info(info: Info) -> Result<PluginMeta, String> {
    let version = check_name_version(&info.name, &info.version)?;
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
        let info = |name: &str, version: &str, schema: Option<&str>| Info {
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
