//! Compiled code on disk, keyed by component digest and engine configuration.
//!
//! Each entry is the serialized component followed by the SHA-256 of those
//! bytes. An entry is written to a temporary file, synced, then renamed into
//! place, so a reader sees a whole entry or none; concurrent writers of one
//! key race harmlessly (last rename wins, both are whole). A torn or corrupt
//! entry fails its checksum, is reported, and is rebuilt; it is never loaded.
//!
//! Trust: loading an entry runs native code that this host compiled. The
//! cache directory must be writable only by whoever may run the host.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;

use weft_core::Digest;

const CHECKSUM_LEN: usize = 32;

/// Where a plugin's compiled code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeSource {
    /// Compiled now (no cache, a cache miss, or a rebuilt bad entry).
    Compiled,
    /// Loaded from the on-disk cache.
    Cache,
}

#[derive(Debug)]
pub(super) struct CodeCache {
    dir: PathBuf,
    engine_key: u64,
}

impl CodeCache {
    /// Opens (creating if needed) the cache in `dir` for `engine`'s settings.
    pub(super) fn open(dir: &Path, engine: &wasmtime::Engine) -> std::io::Result<Self> {
        // Entries are loaded as native code: the owner's alone.
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(dir)?;
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            dir: dir.to_owned(),
            engine_key: hasher.finish(),
        })
    }

    fn path_for(&self, digest: &Digest) -> PathBuf {
        self.dir
            .join(format!("{}-{:016x}.cwasm", digest.hex(), self.engine_key))
    }

    /// Returns the compiled component for `bytes`, from the cache when a
    /// whole, matching entry is there, else by compiling and storing it.
    /// Blocking: reads and writes files, and compiling can take seconds.
    pub(super) fn get_or_compile(
        &self,
        engine: &wasmtime::Engine,
        digest: &Digest,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, CodeSource)> {
        let path = self.path_for(digest);
        match std::fs::read(&path) {
            Ok(entry) => match verified_body(&entry) {
                // SAFETY: the body was written by `store` below from
                // `Component::serialize` on an engine with the same
                // compatibility hash (it is part of the file name), and its
                // checksum matches, so it is the bytes that were written.
                // wasmtime also checks the header against this engine.
                Some(body) => match unsafe { Component::deserialize(engine, body) } {
                    Ok(component) => return Ok((component, CodeSource::Cache)),
                    Err(e) => tracing::warn!(
                        path = %path.display(),
                        "compiled-code cache entry is unusable, rebuilding it: {e:#}"
                    ),
                },
                None => tracing::warn!(
                    path = %path.display(),
                    "compiled-code cache entry fails its checksum, rebuilding it"
                ),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                path = %path.display(),
                "cannot read compiled-code cache entry, compiling instead: {e}"
            ),
        }
        let component = Component::new(engine, bytes)?;
        match component.serialize() {
            Ok(body) => {
                if let Err(e) = self.store(&path, &body) {
                    tracing::warn!(
                        path = %path.display(),
                        "cannot write compiled-code cache entry: {e}"
                    );
                }
            }
            Err(e) => tracing::warn!("cannot serialize compiled component: {e:#}"),
        }
        Ok((component, CodeSource::Compiled))
    }

    fn store(&self, path: &Path, body: &[u8]) -> std::io::Result<()> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let tmp = path.with_extension(format!(
            "tmp.{}.{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let result = (|| {
            let mut file = std::os::unix::fs::OpenOptionsExt::mode(
                std::fs::OpenOptions::new().write(true).create_new(true),
                0o600,
            )
            .open(&tmp)?;
            file.write_all(body)?;
            file.write_all(&Sha256::digest(body))?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

/// What a prune of the cache removed (or, dry, would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Entries removed.
    pub entries: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A temporary file older than this was left by a writer that died.
const STALE_TMP: std::time::Duration = std::time::Duration::from_secs(3600);

impl CodeCache {
    /// Removes every entry whose component `keep` does not keep (by its
    /// digest's hex) and every entry of another engine configuration (an
    /// older wasmtime's), and temporary files a dead writer left; with
    /// `dry_run`, only counts them. Blocking.
    pub(super) fn prune(
        &self,
        keep: &dyn Fn(&str) -> bool,
        dry_run: bool,
    ) -> std::io::Result<Pruned> {
        let mut pruned = Pruned::default();
        let suffix = format!("-{:016x}.cwasm", self.engine_key);
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            // A file renamed or removed meanwhile (a writer's temporary
            // file, another prune) is no longer this pass's.
            let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
            let meta = match entry.metadata() {
                Ok(meta) => meta,
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(e),
            };
            let dead = if let Some(hex) = name.strip_suffix(&suffix) {
                !keep(hex)
            } else if name.ends_with(".cwasm") {
                true
            } else if name.contains(".tmp.") {
                meta.modified()
                    .ok()
                    .and_then(|at| at.elapsed().ok())
                    .is_some_and(|age| age > STALE_TMP)
            } else {
                false
            };
            if dead && meta.is_file() {
                if !dry_run {
                    match std::fs::remove_file(entry.path()) {
                        Ok(()) => {}
                        Err(e) if gone(&e) => continue,
                        Err(e) => return Err(e),
                    }
                }
                pruned.entries += 1;
                pruned.bytes += meta.len();
            }
        }
        Ok(pruned)
    }
}

fn verified_body(entry: &[u8]) -> Option<&[u8]> {
    let split = entry.len().checked_sub(CHECKSUM_LEN)?;
    let (body, checksum) = entry.split_at(split);
    (Sha256::digest(body).as_slice() == checksum).then_some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_entries_verify() {
        let body = b"compiled code".to_vec();
        let mut entry = body.clone();
        entry.extend_from_slice(&Sha256::digest(&body));
        assert_eq!(verified_body(&entry), Some(body.as_slice()));
        assert_eq!(verified_body(&entry[..entry.len() - 1]), None);
        let mut flipped = entry.clone();
        flipped[0] ^= 1;
        assert_eq!(verified_body(&flipped), None);
        assert_eq!(verified_body(b"short"), None);
    }

    #[test]
    fn a_prune_removes_what_is_not_kept_and_other_engines_entries() {
        let dir = tempfile::tempdir().unwrap();
        let engine = wasmtime::Engine::default();
        let cache = CodeCache::open(dir.path(), &engine).unwrap();
        let kept = Digest::of(b"kept");
        let gone = Digest::of(b"gone");
        for digest in [&kept, &gone] {
            std::fs::write(cache.path_for(digest), b"1234").unwrap();
        }
        let other = dir
            .path()
            .join(format!("{}-0000000000000001.cwasm", kept.hex()));
        std::fs::write(&other, b"12").unwrap();
        let fresh_tmp = dir.path().join("x.tmp.1.2");
        std::fs::write(&fresh_tmp, b"1").unwrap();
        let keep = |hex: &str| hex == kept.hex();
        let counted = cache.prune(&keep, true).unwrap();
        assert_eq!(
            counted,
            Pruned {
                entries: 2,
                bytes: 6
            }
        );
        assert!(other.exists());
        assert_eq!(cache.prune(&keep, false).unwrap(), counted);
        assert!(cache.path_for(&kept).exists() && fresh_tmp.exists());
        assert!(!cache.path_for(&gone).exists() && !other.exists());
    }
}
