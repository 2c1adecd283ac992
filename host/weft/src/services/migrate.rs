//! Moving a workflow's unfinished runs from one revision to a newer one
//! (`POST /v1/workflows/{id}/migrate`). Blocking.

use weft_engine::MigrateError;
use weft_store::{Refused, RunFilter, RunState, StoreError};

use super::Services;

/// Why no run was looked at.
#[derive(Debug, thiserror::Error)]
pub enum MigrateRefused {
    /// `to` is not newer than `from`.
    #[error("to_revision ({to}) must be newer than from_revision ({from})")]
    NotNewer {
        /// The revision the runs follow.
        from: u32,
        /// The revision asked for.
        to: u32,
    },
    /// The workflow has no revision at all.
    #[error("no such workflow")]
    UnknownWorkflow,
    /// The workflow has no revision `missing`; its newest is `newest`.
    #[error("no revision {missing} (it has 1 to {newest})")]
    UnknownRevision {
        /// The revision asked for that is not there.
        missing: u32,
        /// The workflow's newest revision.
        newest: u32,
    },
    /// Revision `revision` is stored but does not read.
    #[error("revision {revision} does not read: {reason}")]
    UnreadableRevision {
        /// The revision.
        revision: u32,
        /// Why.
        reason: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A run that did not move, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unmoved {
    /// The run.
    pub run: String,
    /// Why it stays.
    pub reason: String,
    /// Whether it could have moved and the host failed.
    pub failed: bool,
}

/// What a migration did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Migrated {
    /// The unfinished runs of the older revision.
    pub matched: usize,
    /// The runs moved (or, for a dry run, that would move).
    pub moved: Vec<String>,
    /// The runs that stay, with why.
    pub unmoved: Vec<Unmoved>,
}

impl Services {
    /// Moves every unfinished run of `workflow` (its stored id) that
    /// follows revision `from` to revision `to`, at its next step
    /// boundary, if every step it has a record of is a step of `to` with
    /// the same id and kind ([`weft_engine::Engine::migrate`]). With
    /// `dry_run`, checks each and moves none. `actor` is recorded.
    pub fn migrate_runs(
        &self,
        workflow: &str,
        (from, to): (u32, u32),
        actor: &str,
        dry_run: bool,
    ) -> Result<Migrated, MigrateRefused> {
        if to <= from {
            return Err(MigrateRefused::NotNewer { from, to });
        }
        let versions = self.deployments.versions(workflow)?;
        let newest = versions
            .last()
            .map(|v| v.revision)
            .ok_or(MigrateRefused::UnknownWorkflow)?;
        let find = |revision: u32| versions.iter().find(|v| v.revision == revision);
        let from_digest = match (find(from), find(to)) {
            (Some(head), Some(_)) => head.digest.clone(),
            (None, _) => {
                return Err(MigrateRefused::UnknownRevision {
                    missing: from,
                    newest,
                });
            }
            (_, None) => {
                return Err(MigrateRefused::UnknownRevision {
                    missing: to,
                    newest,
                });
            }
        };
        let target = match self.deployments.revision(workflow, to) {
            Ok(Some((_, target))) => target,
            Ok(None) => return Err(MigrateRefused::UnknownWorkflow),
            Err(e) => {
                return Err(MigrateRefused::UnreadableRevision {
                    revision: to,
                    reason: e,
                });
            }
        };
        let filter = RunFilter {
            workflow: Some(workflow.to_owned()),
            state: Some(RunState::Running),
            ..RunFilter::default()
        };
        let runs: Vec<String> = self
            .engine
            .store()
            .runs(&filter, usize::MAX)?
            .into_iter()
            .filter(|run| run.definition == from_digest)
            .map(|run| run.id)
            .collect();
        let mut done = Migrated {
            matched: runs.len(),
            ..Migrated::default()
        };
        for run in runs {
            let (reason, failed) =
                match self
                    .engine
                    .migrate(&run, &target, (from, to), actor, dry_run)
                {
                    Ok(()) => {
                        done.moved.push(run);
                        continue;
                    }
                    // Ended since it was listed: nothing to move.
                    Err(MigrateError::NotFound(_)) => continue,
                    Err(e @ MigrateError::Unmovable(_)) => (e.to_string(), false),
                    // Woken, paused or resumed under each of the tries: a
                    // busy run, not a failure of the host's.
                    Err(MigrateError::Store(StoreError::Refused(Refused::Changed(_)))) => (
                        "it kept moving while the move was decided; try again".to_owned(),
                        false,
                    ),
                    Err(MigrateError::Store(e)) => (e.to_string(), true),
                };
            done.unmoved.push(Unmoved {
                run,
                reason,
                failed,
            });
        }
        Ok(done)
    }
}
