//! Deleting what is no longer needed: an ended run with its records, a
//! workflow revision, and definitions and components no longer referred to.

use super::Apply;
use crate::rows::{Key, Table, decode, number, read_number};
use crate::{Refused, RunRecord, StoreError, What, encode};
use weft_core::Timestamp;

impl Apply<'_> {
    /// Deletes ended run `id` and what is only its (see
    /// [`Write::DeleteRun`]).
    pub(super) fn delete_run(&mut self, id: &str) -> Result<Result<(), Refused>, StoreError> {
        let Some(bytes) = self.rows.get(Table::Runs, Key::Str(id))? else {
            return Ok(Err(Refused::NotFound(What::Run(id.to_owned()))));
        };
        let run: RunRecord = decode(id, &bytes)?;
        let needed = |why: String| {
            Ok(Err(Refused::Needed {
                what: What::Run(id.to_owned()),
                why,
            }))
        };
        if !run.state.is_terminal() {
            return needed("it has not ended".to_owned());
        }
        // A parent that has not ended may still read how its child ended.
        if let Some(parent) = &run.parent
            && let Some(parent) = self.stored_run(&parent.run)?
            && !parent.state.is_terminal()
        {
            return needed(format!("its parent `{}` has not ended", parent.id));
        }
        // What was counted for it: its record as it started (its start
        // was charged, not its later updates) and its step records (each
        // counted as it was written: charged to its step, or, a fire's
        // and a retry's, counted without a check).
        let mut started = run.clone();
        (started.outputs, started.error, started.state) = (None, None, crate::RunState::Running);
        let mut freed = encode(&started).len() + id.len();
        for (seq, record) in self.rows.under(Table::Steps, id)? {
            let seq = u32::try_from(seq.number()).unwrap_or(u32::MAX);
            self.rows.delete(Table::Steps, Key::StrU32(id, seq))?;
            freed += record.len();
        }
        for (seq, _) in self.rows.under(Table::RunMessages, id)? {
            self.rows
                .delete(Table::RunMessages, Key::StrU64(id, seq.number()))?;
        }
        // A cancelled run's mark stays: a host that still holds the run
        // in memory learns from it that the run ended, and a child's
        // start tried again does not record the child anew.
        for table in [Table::Runs, Table::Running, Table::Leases] {
            self.rows.delete(table, Key::Str(id))?;
        }
        let tenant = weft_core::tenant::of(&run.workflow);
        self.rows
            .delete(Table::TenantRuns, Key::StrStr(tenant, id))?;
        self.give_back(tenant, u64::try_from(freed).unwrap_or(u64::MAX))?;
        Ok(Ok(()))
    }

    /// Deletes a revision that a newer one replaces (see
    /// [`Write::DeleteRevision`]).
    pub(super) fn delete_revision(
        &mut self,
        workflow: &str,
        revision: u32,
    ) -> Result<Result<(), Refused>, StoreError> {
        let what = What::Revision {
            workflow: workflow.to_owned(),
            revision,
        };
        let revisions = self.rows.under(Table::Deployments, workflow)?;
        if !revisions
            .iter()
            .any(|(r, _)| r.number() == u64::from(revision))
        {
            return Ok(Err(Refused::NotFound(what)));
        }
        let newest = revisions.iter().map(|(r, _)| r.number()).max();
        let needed = |why: String| {
            Ok(Err(Refused::Needed {
                what: what.clone(),
                why,
            }))
        };
        if newest == Some(u64::from(revision)) {
            return needed("it is the workflow's newest revision".to_owned());
        }
        self.rows
            .delete(Table::Deployments, Key::StrU32(workflow, revision))?;
        Ok(Ok(()))
    }

    /// Marks a stored definition or component that a pass found unused
    /// (see [`Write::MarkBlob`]).
    pub(super) fn mark_blob(
        &mut self,
        blob: crate::Blob,
        digest: &str,
        at: Timestamp,
    ) -> Result<Result<(), Refused>, StoreError> {
        let table = match blob {
            crate::Blob::Definition => Table::Definitions,
            crate::Blob::Component => Table::Components,
        };
        if self.rows.has(table, Key::Str(digest))?
            && !self.rows.has(Table::Doomed, Key::Str(digest))?
        {
            self.rows
                .put(Table::Doomed, Key::Str(digest), &number(at.0))?;
        }
        Ok(Ok(()))
    }

    /// `digest` is stored again, for a run or a deployment: a mark of the
    /// sweeper's on it goes.
    pub(super) fn spare(&mut self, digest: &str) -> Result<(), StoreError> {
        if self.rows.has(Table::Doomed, Key::Str(digest))? {
            self.rows.delete(Table::Doomed, Key::Str(digest))?;
        }
        Ok(())
    }

    /// Deletes a stored definition or component that an earlier pass
    /// marked and nothing refers to (see [`Write::DeleteBlob`]).
    pub(super) fn delete_blob(
        &mut self,
        blob: crate::Blob,
        digest: &str,
        marked_by: Timestamp,
    ) -> Result<Result<(), Refused>, StoreError> {
        let (table, referrers) = match blob {
            crate::Blob::Definition => (Table::Definitions, Table::Deployments),
            crate::Blob::Component => (Table::Components, Table::Plugins),
        };
        let needed = |why: String| {
            Ok(Err(Refused::Needed {
                what: What::Blob(digest.to_owned()),
                why,
            }))
        };
        if !self.rows.has(table, Key::Str(digest))? {
            return Ok(Ok(()));
        }
        let marked = self.rows.get(Table::Doomed, Key::Str(digest))?;
        if marked.is_none_or(|at| read_number(&at) > marked_by.0) {
            return needed("no pass has found it unused long enough".to_owned());
        }
        #[derive(serde::Deserialize)]
        struct Referrer {
            digest: String,
        }
        for bytes in self.rows.values(referrers)? {
            if decode::<Referrer>(digest, &bytes)?.digest == digest {
                return needed(match blob {
                    crate::Blob::Definition => "a revision refers to it".to_owned(),
                    crate::Blob::Component => "a registry plugin refers to it".to_owned(),
                });
            }
        }
        self.rows.delete(table, Key::Str(digest))?;
        self.rows.delete(Table::Doomed, Key::Str(digest))?;
        Ok(Ok(()))
    }
}
