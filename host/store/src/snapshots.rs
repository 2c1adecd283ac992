//! Snapshot stores as the store keeps them: each store's sealed revisions
//! (`SnapshotRecord`, by store and number), the data of each revision under
//! its own id (`SnapshotData`), and the entries of that data, by key.
//!
//! A revision is published in two steps, so that a million entries never
//! sit in one transaction or in memory: its entries are *staged* under a
//! new data id, a page per write ([`Write::StageSnapshot`]), then the data
//! is *sealed* as the store's next revision ([`Write::SealSnapshot`]).
//! Readers only ever see sealed data. Data whose revision is deleted, or
//! whose publish stopped half way, is *dropped*: the sweeper deletes its
//! entries a page at a time, then its row.
//!
//! [`Write::StageSnapshot`]: crate::Write::StageSnapshot
//! [`Write::SealSnapshot`]: crate::Write::SealSnapshot

use serde::{Deserialize, Serialize};

use weft_core::clock::Timestamp;

use crate::rows::read_number;

/// How long a publish may go without staging a page before its data
/// counts as abandoned, and the sweeper may delete it.
pub const ABANDONED_AFTER_MS: u64 = 60 * 60 * 1000;

/// One sealed revision of a snapshot store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// The store's name, with its tenant (see `weft_core::tenant`).
    pub store: String,
    /// 1 for the store's first revision, then one more each time.
    pub revision: u32,
    /// `sha256:<hex>` of the entries in key order (see
    /// `weft_engine::snapshots`): the same data has the same digest.
    pub digest: String,
    /// The id its entries are kept under.
    pub data: String,
    /// How many entries it was published with.
    pub entries: u64,
    /// The bytes of their keys and values.
    pub bytes: u64,
    /// How many of them expire.
    #[serde(default)]
    pub expiring: u64,
    /// When it was published.
    pub published_at: Timestamp,
    /// The time to live of an entry that gives none, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The store's revisions kept, counting the newest (revisions that a
    /// run which has not ended pins are kept beyond it).
    pub keep: u32,
    /// How long a replaced revision is kept, in milliseconds, whatever
    /// `keep` says; `None`: `keep` alone decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_for_ms: Option<u64>,
    /// Where it came from: `file:<path>` or `api`.
    pub origin: String,
}

/// Where a data id is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataState {
    /// Entries are being staged; nothing reads them.
    Staging,
    /// A revision's: read by runs.
    Sealed,
    /// Its revision was deleted: its entries go.
    Dropped,
}

/// The row of one data id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotData {
    /// The store it is (or was to be) a revision of.
    pub store: String,
    /// Its state.
    pub state: DataState,
    /// When a page was last staged, or it changed state.
    pub touched_at: Timestamp,
}

impl SnapshotData {
    /// Whether the sweeper may delete its entries at `now`: dropped, or
    /// staged and left alone for [`ABANDONED_AFTER_MS`].
    pub fn deletable(&self, now: Timestamp) -> bool {
        match self.state {
            DataState::Dropped => true,
            DataState::Staging => self.touched_at.0.saturating_add(ABANDONED_AFTER_MS) <= now.0,
            DataState::Sealed => false,
        }
    }
}

/// One entry of a revision: its value, as JSON text, and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotEntry {
    /// The value, JSON.
    pub value: String,
    /// When it expires, in milliseconds since the epoch; `None`: never.
    pub expires_at: Option<u64>,
}

impl SnapshotEntry {
    /// Whether it has expired at `now` (milliseconds).
    pub fn expired(&self, now: u64) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }

    /// As the entries table stores it: when it expires (8 bytes,
    /// little-endian, 0 for never), then the value.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(8 + self.value.len());
        bytes.extend_from_slice(&self.expires_at.unwrap_or(0).to_le_bytes());
        bytes.extend_from_slice(self.value.as_bytes());
        bytes
    }

    /// An entry stored by [`SnapshotEntry::encode`].
    pub fn decode(bytes: &[u8]) -> Self {
        let expires_at = read_number(bytes);
        Self {
            value: String::from_utf8_lossy(bytes.get(8..).unwrap_or_default()).into_owned(),
            expires_at: (expires_at != 0).then_some(expires_at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_encode_and_expire() {
        for entry in [
            SnapshotEntry {
                value: r#"{"p":1}"#.to_owned(),
                expires_at: None,
            },
            SnapshotEntry {
                value: "2".to_owned(),
                expires_at: Some(10),
            },
        ] {
            assert_eq!(SnapshotEntry::decode(&entry.encode()), entry);
        }
        let entry = SnapshotEntry {
            value: "2".to_owned(),
            expires_at: Some(10),
        };
        assert!(!entry.expired(9));
        assert!(entry.expired(10));
    }
}
