//! Reads of the registry tables: deployed workflow versions and plugins.

use redb::{ReadTransaction, ReadableTable};

use super::{DEPLOYMENTS, PLUGINS, decode, kept};
use crate::{Damaged, DeploymentRecord, PluginRecord, StoreError};

pub(super) fn deployments(
    txn: &ReadTransaction,
    workflow: Option<&str>,
) -> Result<Vec<DeploymentRecord>, StoreError> {
    let Some(table) = exists(txn.open_table(DEPLOYMENTS))? else {
        return Ok(Vec::new());
    };
    let entries = match workflow {
        Some(id) => backend!(table.range((id, 0)..=(id, u32::MAX)))?,
        None => backend!(table.range::<(&str, u32)>(..))?,
    };
    let mut found = Vec::new();
    for entry in entries {
        let (key, value) = backend!(entry)?;
        let (id, revision) = key.value();
        found.extend(kept(
            "deployments",
            &format!("{id}#{revision}"),
            value.value(),
        ));
    }
    Ok(found)
}

pub(super) fn plugins(txn: &ReadTransaction) -> Result<Vec<PluginRecord>, StoreError> {
    let Some(table) = exists(txn.open_table(PLUGINS))? else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for entry in backend!(table.iter())? {
        let (key, value) = backend!(entry)?;
        let (name, digest) = key.value();
        found.extend(kept("plugins", &format!("{name}@{digest}"), value.value()));
    }
    Ok(found)
}

/// The rows of the registry tables that do not decode (see
/// [`crate::Store::damaged`]).
pub(super) fn damaged(txn: &ReadTransaction) -> Result<Vec<Damaged>, StoreError> {
    let mut found = Vec::new();
    if let Some(table) = exists(txn.open_table(DEPLOYMENTS))? {
        for entry in backend!(table.iter())? {
            let (key, value) = backend!(entry)?;
            let (id, revision) = key.value();
            let key = format!("{id}#{revision}");
            let outcome = decode::<DeploymentRecord>(&key, value.value()).map(drop);
            found.extend(Damaged::of("deployments", key, outcome));
        }
    }
    if let Some(table) = exists(txn.open_table(PLUGINS))? {
        for entry in backend!(table.iter())? {
            let (key, value) = backend!(entry)?;
            let (name, digest) = key.value();
            let key = format!("{name}@{digest}");
            let outcome = decode::<PluginRecord>(&key, value.value()).map(drop);
            found.extend(Damaged::of("plugins", key, outcome));
        }
    }
    Ok(found)
}

/// A table, or none if it was never made.
fn exists<T>(opened: Result<T, redb::TableError>) -> Result<Option<T>, StoreError> {
    match opened {
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        other => Ok(Some(backend!(other)?)),
    }
}
