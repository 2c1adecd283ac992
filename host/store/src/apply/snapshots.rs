//! The writes of snapshot stores: staging a revision's entries, sealing
//! it, deleting a revision, and the sweeper's deletes of dropped data
//! (see [`crate::snapshots`]).

use super::Apply;
use crate::rows::{Key, Table, decode};
use crate::snapshots::{DataState, SnapshotData, SnapshotEntry, SnapshotRecord};
use crate::{Refused, StoreError, What};
use weft_core::Timestamp;

/// A write's answer: refused on its own, or failed as a whole.
type Answer = Result<Result<(), Refused>, StoreError>;

impl Apply<'_> {
    /// The row of data `data`.
    fn data_row(&mut self, data: &str) -> Result<Option<SnapshotData>, StoreError> {
        self.rows
            .get(Table::SnapshotData, Key::Str(data))?
            .map(|bytes| decode(data, &bytes))
            .transpose()
    }

    fn put_data_row(&mut self, data: &str, row: &SnapshotData) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(row).map_err(|e| StoreError::Codec {
            key: data.to_owned(),
            message: e.to_string(),
        })?;
        self.rows.put(Table::SnapshotData, Key::Str(data), &bytes)
    }

    /// See [`crate::Write::StageSnapshot`].
    pub(super) fn stage_snapshot(
        &mut self,
        data: &str,
        store: &str,
        at: Timestamp,
        first: bool,
        entries: &[(String, Vec<u8>)],
    ) -> Answer {
        let goes_on = match self.data_row(data)? {
            None => first,
            Some(row) => !first && row.state == DataState::Staging && row.store == store,
        };
        if !goes_on {
            return Ok(Err(Refused::Changed(What::SnapshotData(data.to_owned()))));
        }
        for (key, _) in entries {
            if self
                .rows
                .has(Table::SnapshotEntries, Key::StrStr(data, key))?
            {
                return Ok(Err(Refused::Exists(What::SnapshotKey(key.clone()))));
            }
        }
        for (key, entry) in entries {
            self.rows
                .put(Table::SnapshotEntries, Key::StrStr(data, key), entry)?;
        }
        self.put_data_row(
            data,
            &SnapshotData {
                store: store.to_owned(),
                state: DataState::Staging,
                touched_at: at,
            },
        )?;
        Ok(Ok(()))
    }

    /// The revisions of `store`, by number.
    fn revisions(&mut self, store: &str) -> Result<Vec<u64>, StoreError> {
        Ok(self
            .rows
            .under(Table::Snapshots, store)?
            .into_iter()
            .map(|(part, _)| part.number())
            .collect())
    }

    /// See [`crate::Write::SealSnapshot`].
    pub(super) fn seal_snapshot(&mut self, record: &SnapshotRecord) -> Answer {
        let (_, bare) = weft_core::tenant::split(&record.store);
        let newest = self
            .revisions(&record.store)?
            .into_iter()
            .max()
            .unwrap_or(0);
        if u64::from(record.revision) != newest + 1 {
            return Ok(Err(Refused::Exists(What::Snapshot {
                store: bare.to_owned(),
                revision: record.revision,
            })));
        }
        match self.data_row(&record.data)? {
            Some(row) if row.state == DataState::Staging && row.store == record.store => {}
            _ => {
                return Ok(Err(Refused::Changed(What::SnapshotData(
                    record.data.clone(),
                ))));
            }
        }
        let bytes = serde_json::to_vec(record).map_err(|e| StoreError::Codec {
            key: record.store.clone(),
            message: e.to_string(),
        })?;
        self.rows.put(
            Table::Snapshots,
            Key::StrU32(&record.store, record.revision),
            &bytes,
        )?;
        self.put_data_row(
            &record.data,
            &SnapshotData {
                store: record.store.clone(),
                state: DataState::Sealed,
                touched_at: record.published_at,
            },
        )?;
        Ok(Ok(()))
    }

    /// See [`crate::Write::AbandonSnapshot`].
    pub(super) fn abandon_snapshot(&mut self, data: &str) -> Answer {
        if let Some(mut row) = self.data_row(data)?
            && row.state == DataState::Staging
        {
            row.state = DataState::Dropped;
            self.put_data_row(data, &row)?;
        }
        Ok(Ok(()))
    }

    /// See [`crate::Write::DeleteSnapshot`].
    pub(super) fn delete_snapshot(&mut self, store: &str, revision: u32) -> Answer {
        let what = What::Snapshot {
            store: weft_core::tenant::bare(store).to_owned(),
            revision,
        };
        let Some(bytes) = self
            .rows
            .get(Table::Snapshots, Key::StrU32(store, revision))?
        else {
            return Ok(Err(Refused::NotFound(what)));
        };
        let newest = self.revisions(store)?.into_iter().max().unwrap_or(0);
        if newest == u64::from(revision) {
            return Ok(Err(Refused::Needed {
                what,
                why: "it is the store's newest revision".to_owned(),
            }));
        }
        let record: SnapshotRecord = decode(store, &bytes)?;
        self.rows
            .delete(Table::Snapshots, Key::StrU32(store, revision))?;
        if let Some(mut row) = self.data_row(&record.data)? {
            row.state = DataState::Dropped;
            self.put_data_row(&record.data, &row)?;
        }
        Ok(Ok(()))
    }

    /// See [`crate::Write::DropSnapshotEntries`].
    pub(super) fn drop_snapshot_entries(
        &mut self,
        data: &str,
        keys: &[String],
        now: Timestamp,
    ) -> Answer {
        let all = match self.data_row(data)? {
            Some(row) if row.state == DataState::Sealed => false,
            Some(row) if row.deletable(now) => true,
            // A publish that goes on, or a row gone: its entries are not
            // this write's to delete.
            Some(_) => return Ok(Ok(())),
            None => true,
        };
        for key in keys {
            let row = Key::StrStr(data, key);
            if all {
                self.rows.delete(Table::SnapshotEntries, row)?;
            } else if let Some(bytes) = self.rows.get(Table::SnapshotEntries, row)?
                && SnapshotEntry::decode(&bytes).expired(now.0)
            {
                self.rows.delete(Table::SnapshotEntries, row)?;
            }
        }
        Ok(Ok(()))
    }

    /// See [`crate::Write::ForgetSnapshotData`].
    pub(super) fn forget_snapshot_data(&mut self, data: &str, now: Timestamp) -> Answer {
        match self.data_row(data)? {
            None => Ok(Ok(())),
            Some(row) if row.deletable(now) => {
                self.rows.delete(Table::SnapshotData, Key::Str(data))?;
                Ok(Ok(()))
            }
            Some(_) => Ok(Err(Refused::Needed {
                what: What::SnapshotData(data.to_owned()),
                why: "it is sealed, or being published".to_owned(),
            })),
        }
    }
}
