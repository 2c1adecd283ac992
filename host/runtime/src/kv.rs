//! The `kv` capability: a workflow's durable key-value space, seen through
//! the call's own buffered writes.
//!
//! The runtime never stores anything. It reads through a [`KvSource`] (the
//! store, in the engine) and returns the call's writes, and the versions of
//! the keys it read, in the [`CallOutcome`](super::CallOutcome); the engine
//! commits them with the step's result, and refuses the commit if a key
//! read has changed since.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::bindings;
use super::budget::HostBytes;
use super::sandbox::StepState;
use weft_core::{KvEffects, Versioned};

/// The longest key.
pub const MAX_KEY: usize = 1024;
/// The longest value.
pub const MAX_VALUE: usize = 1 << 20;
/// The most keys one call may write.
pub const MAX_WRITES: usize = 10_000;

/// Where committed key-value data is read from. Blocking.
pub trait KvSource: Send + Sync + std::fmt::Debug {
    /// The committed state of `key` in `space`.
    fn get(&self, space: &str, key: &str) -> Result<Versioned, String>;
    /// Up to `limit` committed keys of `space` starting with `prefix`
    /// whose values have not expired by `now`, in byte order.
    fn list(
        &self,
        space: &str,
        prefix: &str,
        limit: usize,
        now: u64,
    ) -> Result<Vec<String>, String>;
    /// Now, in milliseconds since the epoch, by the host's clock: what
    /// expiry is measured against.
    fn now(&self) -> u64;
}

/// A call's access to a key space.
#[derive(Debug, Clone)]
pub struct KvAccess {
    /// The space, such as `workflow/order`.
    pub space: String,
    /// Where committed data is read.
    pub source: Arc<dyn KvSource>,
}

/// The kv state of one call.
#[derive(Debug, Default)]
pub(super) struct KvState {
    access: Option<KvAccess>,
    effects: KvEffects,
    /// Set when a read of committed data failed: the call's view is not
    /// trustworthy, so the call must fail.
    pub(super) failed: Option<String>,
}

impl KvState {
    pub(super) fn new(access: Option<KvAccess>) -> Self {
        let space = access.as_ref().map(|a| a.space.clone()).unwrap_or_default();
        Self {
            access,
            effects: KvEffects {
                space,
                ..KvEffects::default()
            },
            failed: None,
        }
    }

    pub(super) fn into_effects(self) -> KvEffects {
        self.effects
    }

    fn get(&mut self, key: &str) -> Option<String> {
        if let Some(write) = self.effects.writes.get(key) {
            return write.clone();
        }
        let access = self.access.as_ref()?;
        match access.source.get(&access.space, key) {
            Ok(found) => {
                self.effects
                    .reads
                    .entry(key.to_owned())
                    .or_insert(found.version);
                // An expired value reads as absent; its version is still
                // the one read, so a write of it conflicts as any would.
                found.live(access.source.now()).map(str::to_owned)
            }
            Err(e) => {
                self.failed.get_or_insert(e);
                None
            }
        }
    }

    /// Buffers a write of `key` (`None` deletes), expiring `ttl`
    /// milliseconds from now if given.
    fn write(
        &mut self,
        key: String,
        value: Option<String>,
        ttl: Option<u64>,
        held: &HostBytes,
    ) -> Result<(), String> {
        let Some(access) = &self.access else {
            return Err("this step has no key-value space".to_owned());
        };
        if ttl == Some(0) {
            return Err(format!(
                "the time to live of `{key}` is 0; give at least 1 ms, or none"
            ));
        }
        let expires_at = ttl.map(|ttl| access.source.now().saturating_add(ttl));
        if key.len() > MAX_KEY {
            return Err(format!(
                "the key is {} bytes; the limit is {MAX_KEY}",
                key.len()
            ));
        }
        if let Some(value) = &value
            && value.len() > MAX_VALUE
        {
            return Err(format!(
                "the value of `{key}` is {} bytes; the limit is {MAX_VALUE}",
                value.len()
            ));
        }
        if self.effects.writes.len() >= MAX_WRITES && !self.effects.writes.contains_key(&key) {
            return Err(format!("a step may write at most {MAX_WRITES} keys"));
        }
        // A key written again holds only its last value: only what it adds
        // is charged.
        let weight = write_weight(key.len(), value.as_deref());
        let before = self
            .effects
            .writes
            .get(&key)
            .map_or(0, |v| write_weight(key.len(), v.as_deref()));
        held.charge("a key-value write", weight.saturating_sub(before))?;
        held.release(before.saturating_sub(weight));
        match expires_at {
            Some(at) => self.effects.expires.insert(key.clone(), at),
            None => self.effects.expires.remove(&key),
        };
        self.effects.writes.insert(key, value);
        Ok(())
    }

    fn list(&mut self, prefix: &str, limit: usize) -> Vec<String> {
        let mut keys: std::collections::BTreeSet<String> = match &self.access {
            // Deleted keys may hide committed ones: ask for enough to fill
            // the limit after they are taken out.
            Some(access) => match access.source.list(
                &access.space,
                prefix,
                limit.saturating_add(self.effects.writes.len()),
                access.source.now(),
            ) {
                Ok(keys) => keys.into_iter().collect(),
                Err(e) => {
                    self.failed.get_or_insert(e);
                    return Vec::new();
                }
            },
            None => return Vec::new(),
        };
        for (key, value) in self.effects.writes.range(prefix.to_owned()..) {
            if !key.starts_with(prefix) {
                break;
            }
            match value {
                Some(_) => keys.insert(key.clone()),
                None => keys.remove(key),
            };
        }
        keys.into_iter().take(limit).collect()
    }
}

/// What a buffered write of a key to `value` costs the host: the key twice
/// (in the writes and the expiries), the value, and the maps' entries.
fn write_weight(key_len: usize, value: Option<&str>) -> usize {
    2 * key_len + value.map_or(0, str::len) + 96
}

/// Links `weft:plugin/kv` of every contract version into `linker`.
pub(super) fn add_to_linker(linker: &mut Linker<StepState>) -> wasmtime::Result<()> {
    bindings::v1::weft::plugin::kv::add_to_linker::<StepState, HasSelf<StepState>>(linker, |s| s)?;
    bindings::v2::weft::plugin::kv::add_to_linker::<StepState, HasSelf<StepState>>(linker, |s| s)?;
    bindings::v3::weft::plugin::kv::add_to_linker::<StepState, HasSelf<StepState>>(linker, |s| s)
}

bindings::for_each_contract!(@before_v3 kv => impl contract::Host for StepState {
    fn get(&mut self, key: String) -> Option<String> {
        self.kv.get(&key)
    }

    fn set(&mut self, key: String, value: String) -> Result<(), String> {
        self.kv.write(key, Some(value), None, &self.held)
    }

    fn delete(&mut self, key: String) -> Result<(), String> {
        self.kv.write(key, None, None, &self.held)
    }

    fn keys(&mut self, prefix: String, limit: u32) -> Vec<String> {
        self.kv.list(
            &prefix,
            usize::try_from(limit).unwrap_or(usize::MAX).min(10_000),
        )
    }
});

/// 0.3: `set` takes a time to live.
impl bindings::v3::weft::plugin::kv::Host for StepState {
    fn get(&mut self, key: String) -> Option<String> {
        self.kv.get(&key)
    }

    fn set(&mut self, key: String, value: String, ttl_ms: Option<u64>) -> Result<(), String> {
        self.kv.write(key, Some(value), ttl_ms, &self.held)
    }

    fn delete(&mut self, key: String) -> Result<(), String> {
        self.kv.write(key, None, None, &self.held)
    }

    fn keys(&mut self, prefix: String, limit: u32) -> Vec<String> {
        self.kv.list(
            &prefix,
            usize::try_from(limit).unwrap_or(usize::MAX).min(10_000),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    #[derive(Debug, Default)]
    struct Memory(Mutex<BTreeMap<String, Versioned>>);

    impl KvSource for Memory {
        fn get(&self, _space: &str, key: &str) -> Result<Versioned, String> {
            Ok(self.0.lock().unwrap().get(key).cloned().unwrap_or_default())
        }

        fn list(
            &self,
            _space: &str,
            prefix: &str,
            limit: usize,
            now: u64,
        ) -> Result<Vec<String>, String> {
            Ok(self
                .0
                .lock()
                .unwrap()
                .iter()
                .filter(|(k, v)| k.starts_with(prefix) && v.live(now).is_some())
                .take(limit)
                .map(|(k, _)| k.clone())
                .collect())
        }

        fn now(&self) -> u64 {
            NOW
        }
    }

    const NOW: u64 = 1_000_000;

    fn room() -> HostBytes {
        HostBytes::new(1 << 30)
    }

    fn state() -> KvState {
        let memory = Memory::default();
        for (key, value, expires_at) in [
            ("a/1", "one", None),
            ("a/2", "two", Some(NOW + 1)),
            ("a/old", "gone", Some(NOW)),
            ("b", "bee", None),
        ] {
            memory.0.lock().unwrap().insert(
                key.to_owned(),
                Versioned {
                    value: Some(value.to_owned()),
                    version: 3,
                    expires_at,
                },
            );
        }
        KvState::new(Some(KvAccess {
            space: "s".to_owned(),
            source: Arc::new(memory),
        }))
    }

    #[test]
    fn reads_see_the_calls_own_writes_and_record_versions() {
        let mut kv = state();
        assert_eq!(kv.get("a/1").as_deref(), Some("one"));
        kv.write("a/1".to_owned(), Some("uno".to_owned()), None, &room())
            .unwrap();
        assert_eq!(kv.get("a/1").as_deref(), Some("uno"));
        assert_eq!(kv.get("a/2").as_deref(), Some("two"));
        kv.write("a/2".to_owned(), None, None, &room()).unwrap();
        assert_eq!(kv.get("a/2"), None);
        assert_eq!(kv.get("zz"), None);
        kv.write(
            "a/3".to_owned(),
            Some("three".to_owned()),
            Some(500),
            &room(),
        )
        .unwrap();
        assert_eq!(kv.list("a/", 10), ["a/1", "a/3"]);
        assert_eq!(kv.list("a/", 1), ["a/1"]);
        let effects = kv.into_effects();
        assert_eq!(
            effects.reads,
            BTreeMap::from([
                ("a/1".to_owned(), 3),
                ("a/2".to_owned(), 3),
                ("zz".to_owned(), 0)
            ])
        );
        assert_eq!(effects.writes.len(), 3);
        assert_eq!(
            effects.expires,
            BTreeMap::from([("a/3".to_owned(), NOW + 500)])
        );
    }

    #[test]
    fn an_expired_value_reads_as_absent_but_keeps_its_version() {
        let mut kv = state();
        assert_eq!(kv.get("a/old"), None);
        assert_eq!(kv.list("a/", 10), ["a/1", "a/2"]);
        let e = kv
            .write("k".to_owned(), Some("v".to_owned()), Some(0), &room())
            .unwrap_err();
        assert!(e.contains("time to live"), "{e}");
        assert_eq!(kv.into_effects().reads["a/old"], 3);
    }

    #[test]
    fn limits_are_enforced_with_a_clear_error() {
        let mut kv = state();
        let e = kv
            .write("k".repeat(MAX_KEY + 1), Some(String::new()), None, &room())
            .unwrap_err();
        assert!(e.contains("the limit is 1024"), "{e}");
        let e = kv
            .write(
                "k".to_owned(),
                Some("v".repeat(MAX_VALUE + 1)),
                None,
                &room(),
            )
            .unwrap_err();
        assert!(e.contains("the limit is 1048576"), "{e}");
        let mut none = KvState::new(None);
        assert!(none.write("k".to_owned(), None, None, &room()).is_err());
        assert_eq!(none.get("k"), None);
    }

    #[test]
    fn buffered_writes_are_charged_to_the_call_and_a_rewrite_only_once() {
        let mut kv = state();
        let held = HostBytes::new(3 * (MAX_VALUE as u64));
        let value = "v".repeat(MAX_VALUE);
        for _ in 0..10 {
            kv.write("same".to_owned(), Some(value.clone()), None, &held)
                .unwrap();
        }
        kv.write("other".to_owned(), Some(value.clone()), None, &held)
            .unwrap();
        let e = kv
            .write("third".to_owned(), Some(value.clone()), None, &held)
            .unwrap_err();
        assert!(e.contains("over its budget of 3145728 bytes"), "{e}");
        assert!(held.over().is_some());
        // The refused write is not buffered.
        assert_eq!(kv.into_effects().writes.len(), 2);
    }
}
