//! Reads of the registry tables: deployed workflow versions and plugins.

use redb::{ReadTransaction, ReadableTable};

use super::{DEPLOYMENTS, PLUGINS, decode};
use crate::{DeploymentRecord, PluginRecord, StoreError};

pub(super) fn deployments(
    txn: &ReadTransaction,
    workflow: Option<&str>,
) -> Result<Vec<DeploymentRecord>, StoreError> {
    let table = match txn.open_table(DEPLOYMENTS) {
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        other => backend!(other)?,
    };
    let entries = match workflow {
        Some(id) => backend!(table.range((id, 0)..=(id, u32::MAX)))?,
        None => backend!(table.range::<(&str, u32)>(..))?,
    };
    let mut found = Vec::new();
    for entry in entries {
        let (key, value) = backend!(entry)?;
        let (id, revision) = key.value();
        found.push(decode(format!("{id}#{revision}"), value.value())?);
    }
    Ok(found)
}

pub(super) fn plugins(txn: &ReadTransaction) -> Result<Vec<PluginRecord>, StoreError> {
    let table = match txn.open_table(PLUGINS) {
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        other => backend!(other)?,
    };
    let mut found = Vec::new();
    for entry in backend!(table.iter())? {
        let (key, value) = backend!(entry)?;
        let (name, digest) = key.value();
        found.push(decode(format!("{name}@{digest}"), value.value())?);
    }
    Ok(found)
}
