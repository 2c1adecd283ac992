//! Finding the plugin a step `uses:` in a directory of components.
//!
//! `uses: name[@version]` names the file `name.wasm` in the directory, or
//! `name_with_underscores.wasm` (what cargo produces for a name with `-`).
//! The component must describe itself with that name, and its version must
//! satisfy the requirement; `name@sha256:<hex>` must match the file's digest.
//! Each file is loaded at most once per `PluginDir`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::model::{PluginRef, VersionPin};
use crate::runtime::{LoadError, Plugin, Runtime};

/// Why a `uses:` reference could not be satisfied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// No file for that name.
    #[error("plugin `{name}` not found: no {name}.wasm in {dir}{available}")]
    NotFound {
        /// The plugin's name.
        name: String,
        /// The directory searched.
        dir: String,
        /// The plugins that are there, as ` (available: a, b)`.
        available: String,
    },
    /// The file could not be read.
    #[error("cannot read plugin {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The file is not a usable plugin.
    #[error("plugin {path} {source}")]
    Load {
        /// The file.
        path: String,
        /// Why.
        source: LoadError,
    },
    /// The component calls itself something else.
    #[error("plugin {path} describes itself as `{found}`, not `{wanted}`")]
    WrongName {
        /// The file.
        path: String,
        /// The name it gives.
        found: String,
        /// The name asked for.
        wanted: String,
    },
    /// The component's version does not satisfy the reference.
    #[error("plugin {path} is `{name}` version {found}, which does not satisfy `{wanted}`")]
    WrongVersion {
        /// The file.
        path: String,
        /// The plugin's name.
        name: String,
        /// Its version or digest.
        found: String,
        /// The reference as written.
        wanted: String,
    },
}

/// A directory of plugin components, loaded on demand and kept loaded.
#[derive(Debug)]
pub struct PluginDir {
    runtime: Runtime,
    dir: PathBuf,
    loaded: Mutex<HashMap<PathBuf, Plugin>>,
}

impl PluginDir {
    /// Plugins in `dir`, run by `runtime`. Reads nothing yet.
    pub fn new(runtime: Runtime, dir: impl Into<PathBuf>) -> Self {
        Self {
            runtime,
            dir: dir.into(),
            loaded: Mutex::new(HashMap::new()),
        }
    }

    /// The directory searched.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The runtime that loads the plugins.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Finds, loads and checks the plugin for `reference`. Blocking: may read
    /// and compile a component.
    pub fn resolve(&self, reference: &PluginRef) -> Result<Plugin, ResolveError> {
        let path = self.find(&reference.name)?;
        let plugin = self.load(&path)?;
        let shown = path.display().to_string();
        let meta = plugin.meta();
        if meta.name != reference.name {
            return Err(ResolveError::WrongName {
                path: shown,
                found: meta.name.clone(),
                wanted: reference.name.clone(),
            });
        }
        let satisfied = match &reference.version {
            VersionPin::Any => true,
            VersionPin::Req(req) => req.matches(&meta.version),
            VersionPin::Digest(digest) => plugin.digest().to_string() == *digest,
        };
        if !satisfied {
            let found = match &reference.version {
                VersionPin::Digest(_) => format!("{} ({})", meta.version, plugin.digest()),
                _ => meta.version.to_string(),
            };
            return Err(ResolveError::WrongVersion {
                path: shown,
                name: meta.name.clone(),
                found,
                wanted: reference.to_string(),
            });
        }
        Ok(plugin)
    }

    fn find(&self, name: &str) -> Result<PathBuf, ResolveError> {
        let candidates = [
            format!("{name}.wasm"),
            format!("{}.wasm", name.replace('-', "_")),
        ];
        for candidate in &candidates {
            let path = self.dir.join(candidate);
            if path.is_file() {
                return Ok(path);
            }
        }
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let path = entry.path();
                (path.extension()? == "wasm")
                    .then(|| path.file_stem()?.to_str().map(str::to_owned))?
            })
            .collect();
        names.sort();
        let available = if !self.dir.is_dir() {
            " (no such directory)".to_owned()
        } else if names.is_empty() {
            " (the directory has no .wasm files)".to_owned()
        } else {
            format!(" (available: {})", names.join(", "))
        };
        Err(ResolveError::NotFound {
            name: name.to_owned(),
            dir: self.dir.display().to_string(),
            available,
        })
    }

    fn load(&self, path: &Path) -> Result<Plugin, ResolveError> {
        let mut loaded = self
            .loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(plugin) = loaded.get(path) {
            return Ok(plugin.clone());
        }
        let bytes = std::fs::read(path).map_err(|e| ResolveError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let plugin = self
            .runtime
            .load(&bytes)
            .map_err(|source| ResolveError::Load {
                path: path.display().to_string(),
                source,
            })?;
        tracing::debug!(
            path = %path.display(),
            name = %plugin.meta().name,
            version = %plugin.meta().version,
            digest = %plugin.digest(),
            source = ?plugin.code_source(),
            millis = plugin.load_time().as_millis(),
            "loaded plugin"
        );
        loaded.insert(path.to_owned(), plugin.clone());
        Ok(plugin)
    }
}
