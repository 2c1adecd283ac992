//! The sweeper: ended runs are deleted once their retention has passed,
//! a page of runs at a time, so that a host that runs for months keeps a
//! bounded store.
//!
//! A run's retention is its workflow's `retain:` (the revision served
//! now, or the one the run followed if its workflow is not served), else
//! the host's. It counts from the run's end (its record's last update). The store refuses to delete a run that has not ended, or a
//! child whose parent has not (`StoreError::Needed`): those are kept, and
//! looked at again on the next pass.

use std::collections::HashMap;

use weft_model::{Format, Retain};
use weft_store::{RunRecord, StoreError, Write};

use crate::Engine;

/// How many runs one page of the sweeper reads.
pub const PAGE: usize = 256;

/// How many runs one commit of the sweeper deletes at most.
const DELETES: usize = 32;

/// What a page or a pass of the sweeper deleted (or, dry, would delete).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// The runs looked at.
    pub examined: u64,
    /// The ended runs deleted.
    pub runs: u64,
    /// Their step records.
    pub steps: u64,
    /// Ended runs past their retention kept because a run that has not
    /// ended needs them (a child whose parent waits).
    pub kept: u64,
}

impl std::ops::AddAssign for Swept {
    fn add_assign(&mut self, other: Self) {
        self.examined += other.examined;
        self.runs += other.runs;
        self.steps += other.steps;
        self.kept += other.kept;
    }
}

impl Engine {
    /// Run `run`'s retention: its workflow's `retain:` (the revision
    /// served now), else `host`'s. A workflow not served (its file gone,
    /// a revision that does not parse, its tenant removed) is judged by
    /// the definition the run followed (`pinned`, by digest, read once),
    /// and a run whose definition cannot be read is kept.
    fn retention(
        &self,
        run: &RunRecord,
        host: Retain,
        pinned: &mut HashMap<String, Option<Option<Retain>>>,
    ) -> Retain {
        if let Some(workflow) = self.core.launcher.workflow(&run.workflow) {
            return workflow.retain.unwrap_or(host);
        }
        let read = pinned.entry(run.definition.clone()).or_insert_with(|| {
            let definition = self.store().definition(&run.definition).ok().flatten()?;
            let format = Format::from_name(&definition.format).unwrap_or(Format::Yaml);
            weft_model::parse(&definition.source, format, &definition.origin)
                .ok()
                .map(|workflow| workflow.retain)
        });
        match read {
            Some(Some(retain)) => *retain,
            Some(None) => host,
            None => Retain::Forever,
        }
    }

    /// One page of the sweeper: the `PAGE` runs after `after` (in id
    /// order, oldest first), each ended run among them whose retention
    /// (`host` by default) has passed deleted, or with `dry_run` counted.
    /// Returns what it did, and the last id it looked at (`None` when the
    /// pass is over). Blocking.
    pub fn sweep_page(
        &self,
        after: Option<&str>,
        host: Retain,
        dry_run: bool,
    ) -> Result<(Swept, Option<String>), StoreError> {
        let store = self.store();
        let (page, next) = store.runs_from(after, PAGE)?;
        let now = self.core.clock.now();
        let mut swept = Swept {
            examined: page.len() as u64,
            ..Swept::default()
        };
        let mut pinned = HashMap::new();
        let due: Vec<RunRecord> = page
            .into_iter()
            .filter(|run| run.state.is_terminal())
            .filter(|run| match self.retention(run, host, &mut pinned) {
                Retain::Forever => false,
                Retain::For(keep) => run.updated_at + keep <= now,
            })
            .collect();
        if dry_run {
            for run in due {
                let parent = match &run.parent {
                    Some(link) => store.run(&link.run)?,
                    None => None,
                };
                if parent.is_some_and(|parent| !parent.state.is_terminal()) {
                    swept.kept += 1;
                } else {
                    swept.runs += 1;
                    swept.steps += u64::from(run.step_records);
                }
            }
            return Ok((swept, next));
        }
        for chunk in due.chunks(DELETES) {
            let writes = chunk
                .iter()
                .map(|run| Write::DeleteRun(run.id.clone()))
                .collect();
            for (run, answer) in chunk.iter().zip(self.core.commits.commit_all(writes)) {
                match answer {
                    Ok(()) => {
                        swept.runs += 1;
                        swept.steps += u64::from(run.step_records);
                    }
                    Err(StoreError::Needed { .. }) => swept.kept += 1,
                    // Deleted meanwhile (by another host's sweeper).
                    Err(StoreError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok((swept, next))
    }

    /// A whole pass of the sweeper over the store, page by page (see
    /// [`Engine::sweep_page`]). Blocking.
    pub fn sweep(&self, host: Retain, dry_run: bool) -> Result<Swept, StoreError> {
        let mut total = Swept::default();
        let mut after: Option<String> = None;
        loop {
            let (swept, next) = self.sweep_page(after.as_deref(), host, dry_run)?;
            total += swept;
            match next {
                Some(next) => after = Some(next),
                None => return Ok(total),
            }
        }
    }

    /// Deletes run `id`, which has ended, with its step records (see
    /// [`Write::DeleteRun`]). Blocking.
    pub fn delete_run(&self, id: &str) -> Result<(), StoreError> {
        self.core.commits.commit(Write::DeleteRun(id.to_owned()))
    }
}
