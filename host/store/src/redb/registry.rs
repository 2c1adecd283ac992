//! The registry tables: deployed workflow versions and plugins.

use std::sync::Arc;

use redb::{ReadTransaction, ReadableTable};

use super::{DEPLOYMENTS, PLUGINS, Tables, decode};
use crate::{DeploymentRecord, PluginRecord, StoreError, What};

impl Tables<'_> {
    pub(super) fn deploy(
        &mut self,
        workflow: &str,
        revision: u32,
        record: &[u8],
        definition: &(String, Vec<u8>),
    ) -> Result<Result<(), StoreError>, StoreError> {
        if backend!(self.deployments.get((workflow, revision)))?.is_some() {
            return Ok(Err(StoreError::Exists(What::Revision {
                workflow: workflow.to_owned(),
                revision,
            })));
        }
        self.definition(definition)?;
        backend!(self.deployments.insert((workflow, revision), record))?;
        Ok(Ok(()))
    }

    pub(super) fn add_plugin(
        &mut self,
        name: &str,
        digest: &str,
        record: &[u8],
        bytes: &Arc<[u8]>,
    ) -> Result<Result<(), StoreError>, StoreError> {
        self.components(&[(digest.to_owned(), Arc::clone(bytes))])?;
        backend!(self.plugins.insert((name, digest), record))?;
        Ok(Ok(()))
    }
}

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
