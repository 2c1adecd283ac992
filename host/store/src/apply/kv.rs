//! The key-value spaces: reads checked against the versions a step saw,
//! writes, and forgetting keys past a space's floor.

use super::Apply;
use crate::rows::{Key, Table, decode_kv, encode_kv};
use crate::{Refused, StoreError};
use weft_core::KvEffects;

impl Apply<'_> {
    /// Checks `effects`' reads: refused if a key it read has changed
    /// since. Answers the version of each key it writes, in order, and
    /// notes the bytes of the values it will overwrite or delete (they are
    /// given back: `Apply::freed`).
    pub(super) fn read_kv(
        &mut self,
        effects: &KvEffects,
    ) -> Result<Result<Vec<u64>, Refused>, StoreError> {
        let space = effects.space.as_str();
        for (key, read) in &effects.reads {
            let now = self
                .rows
                .get(Table::Kv, Key::StrStr(space, key))?
                .map_or(0, |v| decode_kv(&v).version);
            if now != *read {
                return Ok(Err(Refused::KvConflict {
                    space: space.to_owned(),
                    key: key.clone(),
                }));
            }
        }
        let mut versions = Vec::with_capacity(effects.writes.len());
        let mut floor = None;
        for key in effects.writes.keys() {
            let (version, old) = match self.rows.get(Table::Kv, Key::StrStr(space, key))? {
                Some(v) => {
                    let old = decode_kv(&v);
                    (old.version, old.value)
                }
                // A key with no row (never set, or its tombstone
                // forgotten) starts above the space's floor.
                None => (*floor.get_or_insert(self.kv_floor(space)?), None),
            };
            if let Some(old) = old {
                self.freed += u64::try_from(key.len() + old.len()).unwrap_or(0);
            }
            versions.push(version);
        }
        Ok(Ok(versions))
    }

    /// The highest version of a tombstone forgotten in `space` (see
    /// [`Write::ForgetKv`]).
    pub(super) fn kv_floor(&mut self, space: &str) -> Result<u64, StoreError> {
        Ok(self
            .rows
            .get(Table::Kv, Key::StrStr("", space))?
            .map_or(0, |v| decode_kv(&v).version))
    }

    /// Drops tombstone `key` of `space` at `version` (see
    /// [`Write::ForgetKv`]). Never refused.
    pub(super) fn forget_kv(
        &mut self,
        space: &str,
        key: &str,
        version: u64,
        now: u64,
    ) -> Result<Result<(), Refused>, StoreError> {
        if space.is_empty() {
            return Ok(Ok(()));
        }
        let Some(row) = self.rows.get(Table::Kv, Key::StrStr(space, key))? else {
            return Ok(Ok(()));
        };
        let row = decode_kv(&row);
        // A live value, or another version than the one found gone, stays.
        if row.live(now).is_some() || row.version != version {
            return Ok(Ok(()));
        }
        if self.kv_floor(space)? < version {
            self.rows.put(
                Table::Kv,
                Key::StrStr("", space),
                &encode_kv(version, None, None),
            )?;
        }
        self.rows.delete(Table::Kv, Key::StrStr(space, key))?;
        // A deleted key was charged its key's bytes; an expired one, its
        // value's too.
        let bytes = key.len() + row.value.as_ref().map_or(0, String::len);
        self.give_back(
            weft_core::tenant::of(space.strip_prefix("workflow/").unwrap_or(space)),
            u64::try_from(bytes).unwrap_or(u64::MAX),
        )?;
        Ok(Ok(()))
    }

    /// Writes `effects`' keys, each at the version after the one
    /// [`Apply::read_kv`] answered.
    pub(super) fn write_kv(
        &mut self,
        effects: &KvEffects,
        versions: &[u64],
    ) -> Result<(), StoreError> {
        let space = effects.space.as_str();
        for ((key, value), version) in effects.writes.iter().zip(versions) {
            let expires_at = effects.expires.get(key).copied();
            let encoded = encode_kv(version + 1, value.as_deref(), expires_at);
            self.rows
                .put(Table::Kv, Key::StrStr(space, key), &encoded)?;
        }
        Ok(())
    }
}
