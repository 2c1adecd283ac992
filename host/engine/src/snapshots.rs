//! Snapshot stores: publishing a revision from a JSON or JSON Lines file
//! in bounded memory, and what a run's steps read.
//!
//! A publish reads its file once, a value at a time, and stages the
//! entries a page at a time ([`Write::StageSnapshot`]); nothing holds the
//! whole file. It then reads the staged entries back in key order to
//! digest them, and seals them as the store's next revision
//! ([`Write::SealSnapshot`]). A file with an error leaves nothing a run
//! can see: its staged data is dropped, for the sweeper to delete.
//!
//! A run pins, at its start, the newest revision of each store its
//! workflow names (`RunRecord::snapshots`), and every step of it reads
//! that revision, after a crash too; a store named with `revision:
//! latest` is read at its newest revision at each call.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Read};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use serde::de::{DeserializeSeed, MapAccess, Visitor};
use serde_json::Value;

use weft_core::clock::{Clock, Timestamp, millis};
use weft_core::tenant;
use weft_runtime::SnapshotSource;
use weft_store::{Refused, SnapshotEntry, SnapshotRecord, Store, StoreError, What, Write};

use crate::sweep::Commit;

/// Entries staged in one write.
const PAGE: usize = 2_000;
/// Bytes staged in one write, at most (a page ends early past them). A
/// page is one write in the shared commit: a larger one holds the other
/// writes of the batch, every tenant's, behind its sync.
const PAGE_BYTES: usize = 256 << 10;
/// The longest key.
pub const MAX_KEY: usize = 1024;
/// The longest value, as compact JSON: reference data is small, and a
/// page of reads holds a few thousand of them.
pub const MAX_VALUE: usize = 64 << 10;

/// How a snapshot file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// One JSON object, `{"key": value, ...}`.
    Json,
    /// JSON Lines: one object per line, `{"key": ..., "value": ...,
    /// "ttl": ...}` (`ttl` optional).
    Lines,
}

impl FileFormat {
    /// JSON Lines for a name ending in `.jsonl` or `.ndjson`, else JSON.
    pub fn of_path(path: &std::path::Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("jsonl" | "ndjson") => Self::Lines,
            _ => Self::Json,
        }
    }
}

/// How a revision is published.
#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// The time to live of an entry that gives none; `None`: never
    /// expires.
    pub ttl: Option<Duration>,
    /// The store's revisions kept, counting the newest.
    pub keep: u32,
    /// How long a replaced revision is kept, whatever `keep` says.
    pub keep_for: Option<Duration>,
    /// Where the file came from: `file:<path>` or `api`.
    pub origin: String,
}

impl Default for PublishOptions {
    fn default() -> Self {
        Self {
            ttl: None,
            keep: 5,
            keep_for: None,
            origin: "api".to_owned(),
        }
    }
}

/// Why a revision was not published. Nothing a run can read was stored.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The store's name is not one.
    #[error("snapshot store `{name}`: {message}")]
    Name {
        /// The name given.
        name: String,
        /// What is wrong with it.
        message: String,
    },
    /// The file is not JSON (or not JSON Lines) of the expected shape.
    #[error("{source_name}:{line}: {message}")]
    Syntax {
        /// The file, as it was named.
        source_name: String,
        /// The line.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A key appears twice in the revision.
    #[error("{source_name}:{line}: key `{key}` appears twice; a key may appear once in a revision")]
    Duplicate {
        /// The file.
        source_name: String,
        /// The line of its second appearance.
        line: u64,
        /// The key.
        key: String,
    },
    /// The file could not be read.
    #[error("{source_name}: {error}")]
    Read {
        /// The file.
        source_name: String,
        /// Why.
        error: std::io::Error,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl PublishError {
    /// Whether the fault is in what was sent (answered 400), not in the
    /// host.
    pub fn is_input(&self) -> bool {
        !matches!(self, Self::Store(_))
    }
}

/// Parses a time to live: a duration such as `90s`, `12h` or `7d`, or a
/// number of seconds. Zero, negative or unparsable is an error that says
/// which.
pub fn parse_ttl(value: &Value) -> Result<Duration, String> {
    let ttl = match value {
        Value::String(text) => weft_core::clock::parse_duration(text.trim())?,
        Value::Number(n) => {
            let seconds = n.as_f64().unwrap_or(f64::NAN);
            if seconds.is_nan() || seconds < 0.0 {
                return Err(format!("{n} is negative; give a duration such as `1h`"));
            }
            Duration::try_from_secs_f64(seconds)
                .map_err(|e| format!("{n}: {e}"))
                .and_then(|d| {
                    weft_core::clock::check_duration(d).map_err(|m| format!("{n} s {m}"))
                })?
        }
        other => {
            return Err(format!(
                "{other} is not a duration such as `1h`, or a number of seconds"
            ));
        }
    };
    if ttl < Duration::from_millis(1) {
        return Err("must be at least 1ms".to_owned());
    }
    Ok(ttl)
}

/// Counts the lines of what has been read, so that an entry's line can be
/// named, and the bytes since the last key, so that one value cannot take
/// more memory than [`MAX_VALUE`] allows before it is refused.
struct Lines<R> {
    inner: R,
    counts: Rc<Counts>,
}

/// What [`Lines`] has counted.
#[derive(Debug, Default)]
struct Counts {
    line: Cell<u64>,
    since_key: Cell<u64>,
}

impl<R: Read> Read for Lines<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let newlines = buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
        self.counts.line.set(self.counts.line.get() + newlines);
        let since = self.counts.since_key.get() + n as u64;
        self.counts.since_key.set(since);
        if since > (MAX_VALUE + MAX_KEY + 64) as u64 {
            return Err(std::io::Error::other(format!(
                "an entry is over {MAX_VALUE} bytes, the limit of a value"
            )));
        }
        Ok(n)
    }
}

/// One entry read from a file, with its line.
struct Read1 {
    key: String,
    value: Value,
    ttl: Option<Duration>,
    line: u64,
}

/// Stages the entries of one publish, a page at a time.
struct Stager<'a> {
    commit: Commit<'a>,
    clock: &'a dyn Clock,
    store: String,
    data: String,
    /// When the publish started: what entries' expiry counts from.
    at: Timestamp,
    default_ttl: Option<Duration>,
    source_name: String,
    page: Vec<(String, Vec<u8>)>,
    lines: HashMap<String, u64>,
    page_bytes: usize,
    staged: bool,
}

impl Stager<'_> {
    fn add(&mut self, entry: Read1) -> Result<(), PublishError> {
        let syntax = |message: String| PublishError::Syntax {
            source_name: self.source_name.clone(),
            line: entry.line,
            message,
        };
        if entry.key.is_empty() || entry.key.len() > MAX_KEY {
            return Err(syntax(format!(
                "key `{}` is {} bytes; a key is 1 to {MAX_KEY}",
                entry.key.chars().take(40).collect::<String>(),
                entry.key.len()
            )));
        }
        let value = entry.value.to_string();
        if value.len() > MAX_VALUE {
            return Err(syntax(format!(
                "the value of `{}` is {} bytes; the limit is {MAX_VALUE}",
                entry.key,
                value.len()
            )));
        }
        let ttl = entry.ttl.or(self.default_ttl);
        let encoded = SnapshotEntry {
            value,
            expires_at: ttl.map(|ttl| self.at.0.saturating_add(millis(ttl))),
        }
        .encode();
        if self.lines.insert(entry.key.clone(), entry.line).is_some() {
            return Err(PublishError::Duplicate {
                source_name: self.source_name.clone(),
                line: entry.line,
                key: entry.key,
            });
        }
        self.page_bytes += entry.key.len() + encoded.len();
        self.page.push((entry.key, encoded));
        if self.page.len() >= PAGE || self.page_bytes >= PAGE_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), PublishError> {
        if self.page.is_empty() && self.staged {
            return Ok(());
        }
        let entries = std::mem::take(&mut self.page);
        let lines = std::mem::take(&mut self.lines);
        self.page_bytes = 0;
        let write = Write::StageSnapshot {
            data: self.data.clone(),
            store: self.store.clone(),
            // Each page says the publish is alive: an hour without one,
            // the sweeper may take it for abandoned.
            at: self.clock.now(),
            first: !self.staged,
            entries,
        };
        match (self.commit)(vec![write])
            .pop()
            .unwrap_or(Err(StoreError::Closed))
        {
            Ok(()) => {
                self.staged = true;
                Ok(())
            }
            Err(StoreError::Refused(Refused::Exists(What::SnapshotKey(key)))) => {
                Err(PublishError::Duplicate {
                    source_name: self.source_name.clone(),
                    line: lines.get(&key).copied().unwrap_or(0),
                    key,
                })
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Reads a JSON object's entries one at a time, handing each to `on`. An
/// error of `on`'s is kept in `failed`, and the parse stopped.
struct Entries<'f, F> {
    on: &'f mut F,
    counts: Rc<Counts>,
    failed: &'f mut Option<PublishError>,
}

impl<'de, F> Visitor<'de> for Entries<'_, F>
where
    F: FnMut(Read1) -> Result<(), PublishError>,
{
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object of keys to values")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            // Read at the key's closing quote: the key's line.
            let line = self.counts.line.get() + 1;
            self.counts.since_key.set(0);
            let value: Value = map.next_value()?;
            if let Err(e) = (self.on)(Read1 {
                key,
                value,
                ttl: None,
                line,
            }) {
                *self.failed = Some(e);
                return Err(serde::de::Error::custom("stopped"));
            }
        }
        Ok(())
    }
}

impl<'de, F> DeserializeSeed<'de> for Entries<'_, F>
where
    F: FnMut(Read1) -> Result<(), PublishError>,
{
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

/// The longest line of a JSON Lines file: a value, its key and room for
/// the rest.
const MAX_LINE: usize = MAX_VALUE + MAX_KEY + 256;

/// Reads `reader` (`format`, named `source_name` in errors), handing each
/// entry to `on`.
fn read_entries(
    mut reader: impl BufRead,
    format: FileFormat,
    source_name: &str,
    mut on: impl FnMut(Read1) -> Result<(), PublishError>,
) -> Result<(), PublishError> {
    match format {
        FileFormat::Json => {
            let counts = Rc::new(Counts::default());
            let counted = Lines {
                inner: reader,
                counts: Rc::clone(&counts),
            };
            let mut de = serde_json::Deserializer::from_reader(counted);
            let mut failed = None;
            let seed = Entries {
                on: &mut on,
                counts: Rc::clone(&counts),
                failed: &mut failed,
            };
            let syntax = |e: serde_json::Error| PublishError::Syntax {
                source_name: source_name.to_owned(),
                // A read's error has no position of serde's: the line read.
                line: if e.is_io() {
                    counts.line.get() + 1
                } else {
                    e.line() as u64
                },
                message: format!("not JSON of the form {{\"key\": value, ...}}: {e}"),
            };
            let parsed = seed.deserialize(&mut de);
            // An entry's own error (a duplicate, a key too long, the store)
            // comes first: the parse stopped because of it.
            if let Some(e) = failed {
                return Err(e);
            }
            parsed.map_err(syntax)?;
            de.end().map_err(syntax)
        }
        FileFormat::Lines => {
            let mut bytes = Vec::new();
            let mut line = 0u64;
            loop {
                bytes.clear();
                line += 1;
                let read = (&mut reader)
                    .take(MAX_LINE as u64 + 1)
                    .read_until(b'\n', &mut bytes)
                    .map_err(|error| PublishError::Read {
                        source_name: source_name.to_owned(),
                        error,
                    })?;
                if read == 0 {
                    return Ok(());
                }
                let syntax = |message: String| PublishError::Syntax {
                    source_name: source_name.to_owned(),
                    line,
                    message,
                };
                if bytes.len() > MAX_LINE {
                    return Err(syntax(format!(
                        "the line is over {MAX_LINE} bytes; a value may be at most {MAX_VALUE}"
                    )));
                }
                let text = std::str::from_utf8(&bytes)
                    .map_err(|e| syntax(format!("not UTF-8 text: {e}")))?;
                if text.trim().is_empty() {
                    continue;
                }
                let row: Value =
                    serde_json::from_str(text).map_err(|e| syntax(format!("not JSON: {e}")))?;
                let Value::Object(mut row) = row else {
                    return Err(syntax(
                        "not an object of the form {\"key\": ..., \"value\": ..., \"ttl\": ...}"
                            .to_owned(),
                    ));
                };
                let key = match row.remove("key") {
                    Some(Value::String(key)) => key,
                    Some(other) => return Err(syntax(format!("`key` is {other}, not a string"))),
                    None => return Err(syntax("no `key`".to_owned())),
                };
                let value = row
                    .remove("value")
                    .ok_or_else(|| syntax(format!("`{key}` has no `value`")))?;
                let ttl = row
                    .remove("ttl")
                    .filter(|v| !v.is_null())
                    .map(|v| parse_ttl(&v).map_err(|m| syntax(format!("ttl of `{key}`: {m}"))))
                    .transpose()?;
                if let Some(field) = row.keys().next() {
                    return Err(syntax(format!(
                        "unknown field `{field}`; a line has `key`, `value` and optionally `ttl`"
                    )));
                }
                on(Read1 {
                    key,
                    value,
                    ttl,
                    line,
                })?;
            }
        }
    }
}

/// Entries read back at a time, for the digest: at most this many values
/// of [`MAX_VALUE`] are in memory at once.
const READ_BACK: usize = 1_000;

/// Publishes the entries in `reader` as the next revision of snapshot
/// store `name` of `tenant`, committing through `commit`. Blocking.
#[allow(clippy::too_many_arguments)]
pub(crate) fn publish(
    store: &dyn Store,
    commit: Commit<'_>,
    clock: &dyn Clock,
    tenant: &str,
    name: &str,
    reader: impl BufRead,
    format: FileFormat,
    source_name: &str,
    options: &PublishOptions,
) -> Result<SnapshotRecord, PublishError> {
    weft_core::names::check_id(name).map_err(|message| PublishError::Name {
        name: name.to_owned(),
        message,
    })?;
    let qualified = tenant::qualify(tenant, name);
    let at = clock.now();
    let data = format!("{:016x}", weft_core::ids::random_u64());
    let mut stager = Stager {
        commit,
        clock,
        store: qualified.clone(),
        data: data.clone(),
        at,
        default_ttl: options.ttl,
        source_name: source_name.to_owned(),
        page: Vec::new(),
        lines: HashMap::new(),
        page_bytes: 0,
        staged: false,
    };
    let staged = read_entries(reader, format, source_name, |entry| stager.add(entry))
        .and_then(|()| stager.flush());
    if let Err(e) = staged {
        // What was staged is nobody's: the sweeper deletes it.
        let _ = commit(vec![Write::AbandonSnapshot(data)]);
        return Err(e);
    }
    // The digest, entries and bytes, from the staged entries in key order.
    let mut hashing = weft_core::Hashing::default();
    let (mut entries, mut bytes, mut expiring) = (0u64, 0u64, 0u64);
    let mut after: Option<String> = None;
    loop {
        let page = store.snapshot_entries(&data, after.as_deref(), "", READ_BACK)?;
        let Some((last, _)) = page.last() else { break };
        let last = last.clone();
        for (key, entry) in &page {
            hashing.piece(key.as_bytes());
            hashing.piece(entry.value.as_bytes());
            hashing.piece(&entry.expires_at.unwrap_or(0).to_le_bytes());
            entries += 1;
            expiring += u64::from(entry.expires_at.is_some());
            bytes += (key.len() + entry.value.len()) as u64;
        }
        after = Some(last);
    }
    let mut record = SnapshotRecord {
        store: qualified.clone(),
        revision: 0,
        digest: hashing.finish().to_string(),
        data: data.clone(),
        entries,
        bytes,
        expiring,
        published_at: at,
        ttl_ms: options.ttl.map(millis),
        keep: options.keep.max(1),
        keep_for_ms: options.keep_for.map(millis),
        origin: options.origin.clone(),
    };
    // Another publish may take the next number first: take the one after.
    for _ in 0..16 {
        let newest = store
            .snapshots(Some(&qualified))?
            .last()
            .map_or(0, |r| r.revision);
        record.revision = newest + 1;
        // The time it is sealed: what replaces the revision before it, from
        // which the sweeper's margin counts.
        record.published_at = clock.now();
        match commit(vec![Write::SealSnapshot(Box::new(record.clone()))])
            .pop()
            .unwrap_or(Err(StoreError::Closed))
        {
            Ok(()) => return Ok(record),
            Err(StoreError::Refused(Refused::Exists(_))) => continue,
            Err(e) => {
                let _ = commit(vec![Write::AbandonSnapshot(data)]);
                return Err(e.into());
            }
        }
    }
    let _ = commit(vec![Write::AbandonSnapshot(data)]);
    Err(StoreError::Refused(Refused::Changed(What::Snapshot {
        store: name.to_owned(),
        revision: record.revision,
    }))
    .into())
}

/// Which revision of a store a run reads.
#[derive(Debug, Clone)]
enum Pin {
    /// This data (the pinned revision's), or `None` if the revision is
    /// gone (which the sweeper never does to a run that has not ended).
    Data(Option<String>, u32),
    /// The newest revision at each call.
    Latest,
}

/// What the steps of one run read: the stores its workflow names, at
/// their pinned revisions.
#[derive(Debug)]
pub struct RunSnapshots {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    tenant: String,
    stores: BTreeMap<String, Pin>,
}

impl RunSnapshots {
    /// The view of a run of `workflow` pinned to `pins` (store to
    /// revision; a store named `latest` has none).
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        workflow: &weft_model::Workflow,
        pins: &BTreeMap<String, u32>,
    ) -> Result<Self, StoreError> {
        let tenant = tenant::of(&workflow.id).to_owned();
        let mut stores = BTreeMap::new();
        for used in &workflow.snapshots {
            let pin = match (used.latest, pins.get(&used.name)) {
                (true, _) | (false, None) => Pin::Latest,
                (false, Some(revision)) => {
                    let data = store
                        .snapshots(Some(&tenant::qualify(&tenant, &used.name)))?
                        .into_iter()
                        .find(|r| r.revision == *revision)
                        .map(|r| r.data);
                    Pin::Data(data, *revision)
                }
            };
            stores.insert(used.name.clone(), pin);
        }
        Ok(Self {
            store,
            clock,
            tenant,
            stores,
        })
    }

    /// The data store `name` is read from now.
    fn data(&self, name: &str) -> Result<String, String> {
        match self.stores.get(name) {
            None => Err(format!(
                "the workflow does not name the snapshot store `{name}`; add it to `snapshots:`"
            )),
            Some(Pin::Data(Some(data), _)) => Ok(data.clone()),
            Some(Pin::Data(None, revision)) => Err(format!(
                "revision {revision} of snapshot store `{name}`, which the run is pinned to, is gone"
            )),
            Some(Pin::Latest) => self
                .store
                .snapshots(Some(&tenant::qualify(&self.tenant, name)))
                .map_err(|e| e.to_string())?
                .pop()
                .map(|r| r.data)
                .ok_or_else(|| format!("snapshot store `{name}` has no revision")),
        }
    }
}

impl SnapshotSource for RunSnapshots {
    fn get(&self, store: &str, key: &str) -> Result<Option<String>, String> {
        let data = self.data(store)?;
        let now = self.clock.now().0;
        Ok(self
            .store
            .snapshot_entry(&data, key)
            .map_err(|e| e.to_string())?
            .filter(|entry| !entry.expired(now))
            .map(|entry| entry.value))
    }

    fn keys(&self, store: &str, prefix: &str, limit: usize) -> Result<Vec<String>, String> {
        let data = self.data(store)?;
        let now = self.clock.now().0;
        let mut keys = Vec::new();
        let mut after: Option<String> = None;
        while keys.len() < limit {
            let page = self
                .store
                .snapshot_keys(&data, after.as_deref(), prefix, limit - keys.len())
                .map_err(|e| e.to_string())?;
            let Some((last, _)) = page.last() else { break };
            after = Some(last.clone());
            keys.extend(
                page.into_iter()
                    .filter(|(_, expires)| expires.is_none_or(|at| at > now))
                    .map(|(key, _)| key),
            );
        }
        Ok(keys)
    }
}

/// The newest revision of each store `workflow` pins (those it names
/// without `revision: latest`), or the first store that has none.
pub(crate) fn pins(
    store: &dyn Store,
    workflow: &weft_model::Workflow,
) -> Result<BTreeMap<String, u32>, (String, Option<StoreError>)> {
    let tenant = tenant::of(&workflow.id);
    let mut pins = BTreeMap::new();
    for used in workflow.snapshots.iter().filter(|u| !u.latest) {
        let newest = store
            .snapshots(Some(&tenant::qualify(tenant, &used.name)))
            .map_err(|e| (used.name.clone(), Some(e)))?
            .last()
            .map(|r| r.revision)
            .ok_or_else(|| (used.name.clone(), None))?;
        pins.insert(used.name.clone(), newest);
    }
    Ok(pins)
}

impl crate::Engine {
    /// Publishes the entries in `reader` as the next revision of snapshot
    /// store `name` of `tenant` (see [`publish`]). Blocking.
    pub fn publish_snapshot(
        &self,
        tenant: &str,
        name: &str,
        reader: impl BufRead,
        format: FileFormat,
        source_name: &str,
        options: &PublishOptions,
    ) -> Result<SnapshotRecord, PublishError> {
        publish(
            self.store().as_ref(),
            &|writes| self.core.commits.commit_all(writes),
            self.core.clock.as_ref(),
            tenant,
            name,
            reader,
            format,
            source_name,
            options,
        )
    }
}

/// `tenant`'s snapshot stores, by name: each one's newest revision, and
/// how many revisions it has.
pub fn stores(store: &dyn Store, tenant: &str) -> Result<Vec<(SnapshotRecord, usize)>, StoreError> {
    let mut found: BTreeMap<String, (SnapshotRecord, usize)> = BTreeMap::new();
    for record in store.snapshots(None)? {
        if tenant::of(&record.store) != tenant {
            continue;
        }
        let entry = found
            .entry(record.store.clone())
            .or_insert_with(|| (record.clone(), 0));
        entry.1 += 1;
        if record.revision > entry.0.revision {
            entry.0 = record;
        }
    }
    Ok(found.into_values().collect())
}

/// How one revision differs from another.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Diff {
    /// The store.
    pub store: String,
    /// The revision compared from.
    pub from: u32,
    /// The revision compared to.
    pub to: u32,
    /// How many keys `to` has that `from` has not.
    pub added: u64,
    /// How many keys `from` has that `to` has not.
    pub removed: u64,
    /// How many keys both have, with other values (or expiry).
    pub changed: u64,
    /// The first changes, in key order: `{key, change, from, to}`.
    pub changes: Vec<Value>,
    /// Whether there were more changes than listed.
    pub truncated: bool,
}

/// Why a diff could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// The store or a revision does not exist.
    #[error("snapshot store `{store}` has no revision {revision}")]
    NoRevision {
        /// The store.
        store: String,
        /// The revision.
        revision: u32,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Walks the entries of revisions `from` and `to` of `tenant`'s store
/// `name` side by side, a page at a time, and lists up to `limit` of their
/// differences. Blocking.
pub fn diff(
    store: &dyn Store,
    tenant: &str,
    name: &str,
    from: u32,
    to: u32,
    limit: usize,
) -> Result<Diff, DiffError> {
    let revisions = store.snapshots(Some(&tenant::qualify(tenant, name)))?;
    let data = |revision: u32| {
        revisions
            .iter()
            .find(|r| r.revision == revision)
            .map(|r| r.data.clone())
            .ok_or_else(|| DiffError::NoRevision {
                store: name.to_owned(),
                revision,
            })
    };
    let (a, b) = (data(from)?, data(to)?);
    let mut diff = Diff {
        store: name.to_owned(),
        from,
        to,
        ..Diff::default()
    };
    let mut left = Pages::new(store, &a);
    let mut right = Pages::new(store, &b);
    let value = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let note = |diff: &mut Diff, change: Value| {
        if diff.changes.len() < limit {
            diff.changes.push(change);
        } else {
            diff.truncated = true;
        }
    };
    loop {
        let (l, r) = (left.peek()?, right.peek()?);
        match (l, r) {
            (None, None) => break,
            (Some((key, entry)), None) => {
                diff.removed += 1;
                note(
                    &mut diff,
                    json_change(&key, "removed", Some(value(&entry.value)), None),
                );
                left.next();
            }
            (None, Some((key, entry))) => {
                diff.added += 1;
                note(
                    &mut diff,
                    json_change(&key, "added", None, Some(value(&entry.value))),
                );
                right.next();
            }
            (Some((lk, le)), Some((rk, re))) => match lk.cmp(&rk) {
                std::cmp::Ordering::Less => {
                    diff.removed += 1;
                    note(
                        &mut diff,
                        json_change(&lk, "removed", Some(value(&le.value)), None),
                    );
                    left.next();
                }
                std::cmp::Ordering::Greater => {
                    diff.added += 1;
                    note(
                        &mut diff,
                        json_change(&rk, "added", None, Some(value(&re.value))),
                    );
                    right.next();
                }
                std::cmp::Ordering::Equal => {
                    if le != re {
                        diff.changed += 1;
                        let change = json_change(
                            &lk,
                            "changed",
                            Some(value(&le.value)),
                            Some(value(&re.value)),
                        );
                        note(&mut diff, change);
                    }
                    left.next();
                    right.next();
                }
            },
        }
    }
    Ok(diff)
}

fn json_change(key: &str, change: &str, from: Option<Value>, to: Option<Value>) -> Value {
    serde_json::json!({ "key": key, "change": change, "from": from, "to": to })
}

/// The entries of one data id, read a page at a time.
struct Pages<'s> {
    store: &'s dyn Store,
    data: String,
    page: std::collections::VecDeque<(String, SnapshotEntry)>,
    after: Option<String>,
    done: bool,
}

impl<'s> Pages<'s> {
    fn new(store: &'s dyn Store, data: &str) -> Self {
        Self {
            store,
            data: data.to_owned(),
            page: Default::default(),
            after: None,
            done: false,
        }
    }

    fn peek(&mut self) -> Result<Option<(String, SnapshotEntry)>, StoreError> {
        if self.page.is_empty() && !self.done {
            let page =
                self.store
                    .snapshot_entries(&self.data, self.after.as_deref(), "", READ_BACK)?;
            self.done = page.len() < READ_BACK;
            self.after = page.last().map(|(k, _)| k.clone());
            self.page.extend(page);
        }
        Ok(self.page.front().cloned())
    }

    fn next(&mut self) {
        self.page.pop_front();
    }
}
