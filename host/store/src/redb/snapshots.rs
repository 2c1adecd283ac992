//! Reads of the snapshot tables (see [`crate::snapshots`]).

use redb::{ReadTransaction, ReadableTable};

use super::{SNAPSHOT_DATA, SNAPSHOT_ENTRIES, SNAPSHOTS, decode};
use crate::StoreError;
use crate::rows::read_number;
use crate::snapshots::{SnapshotData, SnapshotEntry, SnapshotRecord};

pub(super) fn revisions(
    txn: &ReadTransaction,
    store: Option<&str>,
) -> Result<Vec<SnapshotRecord>, StoreError> {
    let table = match txn.open_table(SNAPSHOTS) {
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        other => backend!(other)?,
    };
    let entries = match store {
        Some(name) => backend!(table.range((name, 0)..=(name, u32::MAX)))?,
        None => backend!(table.range::<(&str, u32)>(..))?,
    };
    let mut found = Vec::new();
    for entry in entries {
        let (key, value) = backend!(entry)?;
        let (name, revision) = key.value();
        found.push(decode(format!("{name}#{revision}"), value.value())?);
    }
    Ok(found)
}

pub(super) fn entry(
    txn: &ReadTransaction,
    data: &str,
    key: &str,
) -> Result<Option<SnapshotEntry>, StoreError> {
    let table = match txn.open_table(SNAPSHOT_ENTRIES) {
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        other => backend!(other)?,
    };
    Ok(backend!(table.get((data, key)))?.map(|bytes| SnapshotEntry::decode(bytes.value())))
}

pub(super) fn entries(
    txn: &ReadTransaction,
    data: &str,
    after: Option<&str>,
    prefix: &str,
    limit: usize,
) -> Result<Vec<(String, SnapshotEntry)>, StoreError> {
    walk(txn, data, after, prefix, limit, SnapshotEntry::decode)
}

pub(super) fn keys(
    txn: &ReadTransaction,
    data: &str,
    after: Option<&str>,
    prefix: &str,
    limit: usize,
) -> Result<Vec<(String, Option<u64>)>, StoreError> {
    walk(txn, data, after, prefix, limit, |bytes| {
        let at = read_number(bytes);
        (at != 0).then_some(at)
    })
}

/// Up to `limit` entries of `data` after `after` under `prefix`, each
/// key with what `read` makes of its stored bytes.
fn walk<T>(
    txn: &ReadTransaction,
    data: &str,
    after: Option<&str>,
    prefix: &str,
    limit: usize,
    read: impl Fn(&[u8]) -> T,
) -> Result<Vec<(String, T)>, StoreError> {
    let table = match txn.open_table(SNAPSHOT_ENTRIES) {
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        other => backend!(other)?,
    };
    let from = match after {
        Some(after) if after >= prefix => after,
        _ => prefix,
    };
    let mut found = Vec::new();
    for row in backend!(table.range((data, from)..))? {
        if found.len() >= limit {
            break;
        }
        let (key, value) = backend!(row)?;
        let (owner, key) = key.value();
        if owner != data || !key.starts_with(prefix) {
            break;
        }
        if after == Some(key) {
            continue;
        }
        found.push((key.to_owned(), read(value.value())));
    }
    Ok(found)
}

pub(super) fn data(txn: &ReadTransaction) -> Result<Vec<(String, SnapshotData)>, StoreError> {
    let table = match txn.open_table(SNAPSHOT_DATA) {
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        other => backend!(other)?,
    };
    let mut found = Vec::new();
    for row in backend!(table.iter())? {
        let (key, value) = backend!(row)?;
        found.push((key.value().to_owned(), decode(key.value(), value.value())?));
    }
    Ok(found)
}
