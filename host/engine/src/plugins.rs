//! Finding the plugin a step `uses:`: in the registry (the store's plugins,
//! by digest) and in a directory of components.
//!
//! `uses: name[@version]` names the file `name.wasm` in the directory, or
//! `name_with_underscores.wasm` (what cargo produces for a name with `-`).
//! The component must describe itself with that name. A file is loaded
//! again when its size or modification time changes, and bytes loaded from
//! a file for the first time join the registry, so a version that was
//! served stays there for the runs pinned to it. Among the versions of `name` in the registry that
//! satisfy the reference, the highest wins, and between two builds of one
//! version the one added last; `name@sha256:<hex>` picks one exact
//! component. A file that no longer loads is reported and the registry's
//! versions keep serving.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::SystemTime;

use weft_core::clock::{Clock, SystemClock};
use weft_core::lock;
use weft_model::{PluginRef, VersionPin};
use weft_runtime::{LoadError, Plugin, Runtime};
use weft_store::{PluginRecord, Store, StoreError, Write};
/// Why a `uses:` reference could not be satisfied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// No file for that name. The message does not name the directory: it
    /// reaches API callers, to whom the host's paths are none of their
    /// business (`dir` is there for the host's own log).
    #[error("plugin `{name}` not found: no {name}.wasm in the plugins directory{available}")]
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
        /// The file, by its name in the plugins directory (never the
        /// host's path: the message reaches API callers).
        path: String,
        /// Why.
        message: String,
    },
    /// The file is not a usable plugin.
    #[error("plugin {path} {source}")]
    Load {
        /// The file, by its name in the plugins directory, or the stored
        /// build.
        path: String,
        /// Why.
        source: LoadError,
    },
    /// The component calls itself something else.
    #[error("plugin {path} describes itself as `{found}`, not `{wanted}`")]
    WrongName {
        /// The file, by its name in the plugins directory.
        path: String,
        /// The name it gives.
        found: String,
        /// The name asked for.
        wanted: String,
    },
    /// The registry could not be read or written.
    #[error("plugin registry: {0}")]
    Store(String),
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

/// A directory of plugin components and the store's registry, loaded on
/// demand and kept loaded.
#[derive(Debug)]
pub struct PluginDir {
    runtime: Runtime,
    dir: PathBuf,
    /// Files tried, by path, with the size and time they had then.
    files: Mutex<HashMap<PathBuf, (FileStamp, Tried)>>,
    /// One lock per file, so that a run start and the watcher do not both
    /// compile a file that just landed.
    loading: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
    /// Components loaded, by digest.
    loaded: Mutex<HashMap<String, Plugin>>,
    registry: OnceLock<Registry>,
    /// Counts each load, from the compiled-code cache or compiled.
    metrics: OnceLock<Arc<weft_core::metrics::Metrics>>,
}

#[derive(Debug)]
struct Registry {
    store: Arc<dyn Store>,
    /// Stamps each plugin's `added_at`.
    clock: Arc<dyn Clock>,
    /// Every plugin record, by name.
    index: RwLock<HashMap<String, Vec<PluginRecord>>>,
}

type FileStamp = (u64, Option<SystemTime>);

/// What loading a file gave.
type Tried = Result<Plugin, ResolveError>;

/// The most components kept loaded by digest before the cache starts over.
const CACHED: usize = 1024;

impl PluginDir {
    /// Plugins in `dir`, run by `runtime`. Reads nothing yet.
    pub fn new(runtime: Runtime, dir: impl Into<PathBuf>) -> Self {
        Self {
            runtime,
            dir: dir.into(),
            files: Mutex::new(HashMap::new()),
            loading: Mutex::new(HashMap::new()),
            loaded: Mutex::new(HashMap::new()),
            registry: OnceLock::new(),
            metrics: OnceLock::new(),
        }
    }

    /// Counts each component this directory loads in `metrics`, by where
    /// its compiled code came from; the first call holds.
    pub fn meter(&self, metrics: Arc<weft_core::metrics::Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// Loads a component, counting where its code came from.
    fn load(&self, bytes: &[u8]) -> Result<Plugin, LoadError> {
        let plugin = self.runtime.load(bytes)?;
        if let Some(metrics) = self.metrics.get() {
            let source = match plugin.code_source() {
                weft_runtime::CodeSource::Cache => "cache",
                weft_runtime::CodeSource::Compiled => "compiled",
            };
            metrics
                .component_loads
                .get_or_create(&weft_core::metrics::LoadLabels { source })
                .inc();
        }
        Ok(plugin)
    }

    /// Keeps the registry in `store`: reads its plugins now, and adds
    /// every plugin loaded from then on, stamped by `clock`. Done once;
    /// later calls do nothing.
    /// Blocking.
    pub fn attach(&self, store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Result<(), StoreError> {
        if self.registry.get().is_some() {
            return Ok(());
        }
        let mut index: HashMap<String, Vec<PluginRecord>> = HashMap::new();
        for record in store.plugins()? {
            index.entry(record.name.clone()).or_default().push(record);
        }
        let _ = self.registry.set(Registry {
            store,
            clock,
            index: RwLock::new(index),
        });
        Ok(())
    }

    /// Reads the registry's records again: plugins that other hosts on the
    /// store added become resolvable here (their components load from the
    /// store when first used). Returns how many records are new. Blocking.
    pub fn reload_registry(&self) -> Result<usize, StoreError> {
        let Some(registry) = self.registry.get() else {
            return Ok(0);
        };
        let records = registry.store.plugins()?;
        let mut index = weft_core::write(&registry.index);
        let mut added = 0;
        for record in records {
            let versions = index.entry(record.name.clone()).or_default();
            match versions.iter_mut().find(|r| r.digest == record.digest) {
                Some(known) => *known = record,
                None => {
                    versions.push(record);
                    added += 1;
                }
            }
        }
        Ok(added)
    }

    /// The directory searched.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The runtime that loads the plugins.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The digests of the components loaded from files of the directory.
    pub fn file_digests(&self) -> Vec<String> {
        lock(&self.files)
            .values()
            .filter_map(|(_, tried)| tried.as_ref().ok())
            .map(|plugin| plugin.digest().to_string())
            .collect()
    }

    /// Every plugin in the registry, by name, newest version first.
    pub fn list(&self) -> Vec<PluginRecord> {
        let Some(registry) = self.registry.get() else {
            return Vec::new();
        };
        let index = weft_core::read(&registry.index);
        let mut all: Vec<PluginRecord> = index.values().flatten().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| newer(b, a)));
        all
    }

    /// Checks and loads the component `bytes` (compiling it, which can take
    /// seconds) and adds it to the registry, marked as coming from
    /// `origin`. Adding bytes that are there already refreshes their row,
    /// so they win over another build of the same version. Blocking.
    pub fn add(&self, bytes: &[u8], origin: &str) -> Result<(Plugin, PluginRecord), LoadError> {
        self.add_for(weft_core::tenant::DEFAULT, bytes, origin)
    }

    /// [`add`](Self::add), as a plugin of `tenant`: only that tenant's
    /// workflows resolve it. Tenant `default`'s plugins (and the
    /// directory's) are shared: every tenant resolves them.
    pub fn add_for(
        &self,
        tenant: &str,
        bytes: &[u8],
        origin: &str,
    ) -> Result<(Plugin, PluginRecord), LoadError> {
        let plugin = self.load(bytes)?;
        let name = weft_core::tenant::qualify(tenant, &plugin.meta().name);
        let record = self.register(&plugin, &name, origin);
        Ok((plugin, record))
    }

    /// Finds the plugin for `reference` as a workflow of `tenant` sees
    /// it: the tenant's own plugin of that name when one satisfies the
    /// reference, else the shared one ([`resolve`](Self::resolve)).
    /// Blocking.
    pub fn resolve_in(&self, tenant: &str, reference: &PluginRef) -> Result<Plugin, ResolveError> {
        if tenant != weft_core::tenant::DEFAULT
            && let Some(registry) = self.registry.get()
        {
            let own = PluginRef {
                name: weft_core::tenant::qualify(tenant, &reference.name),
                version: reference.version.clone(),
            };
            if let Some(best) = self.newest(registry, &own) {
                return self.by_digest(&best.digest);
            }
        }
        self.resolve(reference)
    }

    /// Adds every `.wasm` file of the directory to the registry (loading
    /// those not loaded yet). Returns the path and error of each file that
    /// does not load. Blocking.
    pub fn scan(&self) -> Vec<(PathBuf, ResolveError)> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "wasm") && path.is_file())
            .collect();
        paths.sort();
        paths
            .into_iter()
            .filter_map(|path| self.load_file(&path).err().map(|e| (path, e)))
            .collect()
    }

    /// Finds, loads and checks the plugin for `reference`. Blocking: may read
    /// and compile a component.
    pub fn resolve(&self, reference: &PluginRef) -> Result<Plugin, ResolveError> {
        // The directory's file first: loading it (again, once it changed)
        // adds it to the registry.
        let (shown, loaded) = match self.find(&reference.name) {
            Ok(path) => (shown_file(&path), self.load_file(&path)),
            Err(not_found) => {
                let Some(registry) = self.registry.get() else {
                    return Err(not_found);
                };
                return match self.newest(registry, reference) {
                    Some(best) => self.by_digest(&best.digest),
                    None => Err(self.not_in_registry(registry, reference, not_found)),
                };
            }
        };
        let Some(registry) = self.registry.get() else {
            return check(&shown, reference, loaded?);
        };
        match (self.newest(registry, reference), loaded) {
            (Some(best), Ok(plugin)) if best.digest == plugin.digest().to_string() => Ok(plugin),
            (Some(best), Ok(_)) => self.by_digest(&best.digest),
            (Some(best), Err(error)) => {
                tracing::warn!(
                    plugin = %reference,
                    digest = %best.digest,
                    "{error}; serving the registry's version"
                );
                self.by_digest(&best.digest)
            }
            // Nothing satisfies the reference: the file says why.
            (None, loaded) => check(&shown, reference, loaded?),
        }
    }

    /// The error for a reference that no file and no registry entry
    /// satisfies.
    fn not_in_registry(
        &self,
        registry: &Registry,
        reference: &PluginRef,
        not_found: ResolveError,
    ) -> ResolveError {
        let index = weft_core::read(&registry.index);
        match index.get(&reference.name) {
            Some(versions) if !versions.is_empty() => ResolveError::WrongVersion {
                path: "the registry".to_owned(),
                name: reference.name.clone(),
                found: versions
                    .iter()
                    .map(|r| r.version.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                wanted: reference.to_string(),
            },
            _ => not_found,
        }
    }

    /// The loaded component with `digest`, from memory or the store.
    /// Blocking: may read and compile it.
    pub fn by_digest(&self, digest: &str) -> Result<Plugin, ResolveError> {
        if let Some(plugin) = lock(&self.loaded).get(digest) {
            return Ok(plugin.clone());
        }
        let shown = format!("component {digest}");
        let store = &self
            .registry
            .get()
            .ok_or_else(|| ResolveError::Store(format!("no registry to read {shown} from")))?
            .store;
        let bytes = store
            .component(digest)
            .map_err(|e| ResolveError::Store(e.to_string()))?
            .ok_or_else(|| ResolveError::Store(format!("{shown} is not in the store")))?;
        let plugin = self.load(&bytes).map_err(|source| ResolveError::Load {
            path: shown.clone(),
            source,
        })?;
        if plugin.digest().to_string() != digest {
            return Err(ResolveError::Store(format!(
                "the stored {shown} has digest {}",
                plugin.digest()
            )));
        }
        self.keep(&plugin);
        Ok(plugin)
    }

    /// The registry's best version for `reference`.
    fn newest(&self, registry: &Registry, reference: &PluginRef) -> Option<PluginRecord> {
        let index = weft_core::read(&registry.index);
        index
            .get(&reference.name)?
            .iter()
            .filter(|record| match &reference.version {
                VersionPin::Any => true,
                VersionPin::Req(req) => record
                    .version
                    .parse::<semver::Version>()
                    .is_ok_and(|v| req.matches(&v)),
                VersionPin::Digest(digest) => record.digest == *digest,
            })
            .max_by(|a, b| newer(a, b))
            .cloned()
    }

    fn keep(&self, plugin: &Plugin) {
        let mut loaded = lock(&self.loaded);
        if loaded.len() >= CACHED {
            loaded.clear();
        }
        loaded.insert(plugin.digest().to_string(), plugin.clone());
    }

    /// Adds `plugin` to the registry (if there is one) and to the loaded
    /// components. A failure to record it is logged: the plugin still
    /// serves, and runs pinned to it store its bytes themselves.
    fn register(&self, plugin: &Plugin, name: &str, origin: &str) -> PluginRecord {
        let meta = plugin.meta();
        let bytes = plugin.bytes();
        let record = PluginRecord {
            name: name.to_owned(),
            version: meta.version.to_string(),
            digest: plugin.digest().to_string(),
            size: bytes.len() as u64,
            description: meta.description.clone(),
            input_schema: meta.input_schema.clone(),
            output_schema: meta.output_schema.clone(),
            // Not kept anywhere without a registry: any stamp will do.
            added_at: self
                .registry
                .get()
                .map_or_else(|| SystemClock.now(), |registry| registry.clock.now()),
            origin: origin.to_owned(),
        };
        self.keep(plugin);
        let Some(registry) = self.registry.get() else {
            return record;
        };
        let write = Write::AddPlugin {
            name: record.name.clone(),
            digest: record.digest.clone(),
            record: weft_store::encode(&record),
            bytes,
        };
        match registry.store.apply(&[&write]) {
            Ok(results) if results.iter().all(Result::is_ok) => {
                let mut index = weft_core::write(&registry.index);
                let versions = index.entry(record.name.clone()).or_default();
                versions.retain(|r| r.digest != record.digest);
                versions.push(record.clone());
            }
            Ok(results) => tracing::warn!(
                plugin = %record.name,
                "cannot add the plugin to the registry: {:?}",
                results.into_iter().find_map(Result::err)
            ),
            Err(e) => tracing::warn!(
                plugin = %record.name,
                "cannot add the plugin to the registry: {e}"
            ),
        }
        record
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

    /// Loads the file at `path` again if it changed since it was last
    /// loaded (checking, compiling and adding it to the registry when its
    /// bytes are new): what a watcher calls when the file changes.
    /// Blocking.
    pub fn refresh(&self, path: &Path) -> Result<Plugin, ResolveError> {
        self.load_file(path)
    }

    /// The plugin in the file at `path`, loaded again when the file has
    /// changed since it was last tried (a failure is kept too, so a bad
    /// file is not read again for every run).
    fn load_file(&self, path: &Path) -> Result<Plugin, ResolveError> {
        let read_error = |e: std::io::Error| ResolveError::Read {
            path: shown_file(path),
            message: e.to_string(),
        };
        let stamp = std::fs::metadata(path)
            .map(|m| (m.len(), m.modified().ok()))
            .map_err(read_error)?;
        let tried = |stamp: &FileStamp| {
            lock(&self.files)
                .get(path)
                .filter(|(seen, _)| seen == stamp)
                .map(|(_, tried)| tried.clone())
        };
        if let Some(tried) = tried(&stamp) {
            return tried;
        }
        let file_lock = Arc::clone(lock(&self.loading).entry(path.to_owned()).or_default());
        let _loading = lock(&file_lock);
        // Another thread may have loaded it while this one waited.
        if let Some(tried) = tried(&stamp) {
            return tried;
        }
        let loaded = self.read_file(path);
        lock(&self.files).insert(path.to_owned(), (stamp, loaded.clone()));
        loaded
    }

    fn read_file(&self, path: &Path) -> Result<Plugin, ResolveError> {
        let bytes = std::fs::read(path).map_err(|e| ResolveError::Read {
            path: shown_file(path),
            message: e.to_string(),
        })?;
        let digest = weft_runtime::Digest::of(&bytes).to_string();
        let known = lock(&self.loaded).get(&digest).cloned();
        let plugin = match known {
            Some(plugin) => plugin,
            None => self.load(&bytes).map_err(|source| ResolveError::Load {
                path: shown_file(path),
                source,
            })?,
        };
        tracing::debug!(
            path = %path.display(),
            name = %plugin.meta().name,
            version = %plugin.meta().version,
            digest = %plugin.digest(),
            source = ?plugin.code_source(),
            millis = plugin.load_time().as_millis(),
            "loaded plugin"
        );
        // A file joins the registry once: bytes added before keep their
        // row (an upload of them stays the newest).
        let listed = self.registry.get().is_some_and(|registry| {
            weft_core::read(&registry.index)
                .get(&plugin.meta().name)
                .is_some_and(|versions| versions.iter().any(|r| r.digest == digest))
        });
        if listed {
            self.keep(&plugin);
        } else {
            self.register(
                &plugin,
                &plugin.meta().name,
                &format!("file:{}", path.display()),
            );
        }
        Ok(plugin)
    }
}

/// Watches a plugins directory; dropping it stops watching.
#[derive(Debug)]
pub struct DirWatcher {
    _watcher: notify::RecommendedWatcher,
}

/// How long a file must be left alone before it is loaded: a copy in
/// progress sends many events.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

/// Calls `changed` with each `.wasm` file in `dir` that is created,
/// written or moved in, once its events have settled, on a thread of its
/// own. Removals are ignored: the registry keeps what runs are pinned to.
pub fn watch(dir: &Path, changed: impl Fn(PathBuf) + Send + 'static) -> notify::Result<DirWatcher> {
    watch_files(
        dir,
        "weft-plugin-watch",
        |path| path.extension().is_some_and(|ext| ext == "wasm"),
        changed,
    )
}

/// Calls `changed` with each file in `dir` that `wanted` accepts and that
/// is created, written or moved in, once its events have settled, on a
/// thread named `thread`. Removals are ignored.
pub fn watch_files(
    dir: &Path,
    thread: &str,
    wanted: impl Fn(&Path) -> bool + Send + 'static,
    changed: impl Fn(PathBuf) + Send + 'static,
) -> notify::Result<DirWatcher> {
    use notify::event::ModifyKind;
    use notify::{EventKind, RecursiveMode, Watcher as _};
    let (tell, events) = std::sync::mpsc::channel::<PathBuf>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        // A change of metadata alone (a `touch`, a `chmod`) changes
        // nothing to load.
        if matches!(event.kind, EventKind::Create(_) | EventKind::Modify(_))
            && !matches!(event.kind, EventKind::Modify(ModifyKind::Metadata(_)))
        {
            for path in event.paths {
                if wanted(&path) {
                    let _ = tell.send(path);
                }
            }
        }
    })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    std::thread::Builder::new()
        .name(thread.to_owned())
        .spawn(move || {
            // Ends when the watcher, and with it the sender, is dropped.
            while let Ok(first) = events.recv() {
                let mut paths = std::collections::BTreeSet::from([first]);
                while let Ok(more) = events.recv_timeout(SETTLE) {
                    paths.insert(more);
                }
                for path in paths {
                    if path.is_file() {
                        changed(path);
                    }
                }
            }
        })
        .map_err(|e| notify::Error::generic(&e.to_string()))?;
    Ok(DirWatcher { _watcher: watcher })
}

/// Orders two records of one plugin: the higher version, then the one
/// added last.
pub fn newer(a: &PluginRecord, b: &PluginRecord) -> std::cmp::Ordering {
    let version = |r: &PluginRecord| r.version.parse::<semver::Version>().ok();
    version(a)
        .cmp(&version(b))
        .then(a.added_at.cmp(&b.added_at))
}

/// A plugin file as errors name it: its name in the plugins directory,
/// never the host's path to it. Errors reach API callers, to whom the
/// host's paths are none of their business; the operator knows where the
/// plugins directory is.
fn shown_file(path: &Path) -> String {
    let name = path
        .file_name()
        .map_or_else(|| "?".into(), |name| name.to_string_lossy());
    format!("{name} (in the plugins directory)")
}

/// `plugin` if it is the one `reference` asks for.
fn check(path: &str, reference: &PluginRef, plugin: Plugin) -> Result<Plugin, ResolveError> {
    let meta = plugin.meta();
    if meta.name != reference.name {
        return Err(ResolveError::WrongName {
            path: path.to_owned(),
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
            path: path.to_owned(),
            name: meta.name.clone(),
            found,
            wanted: reference.to_string(),
        });
    }
    Ok(plugin)
}
