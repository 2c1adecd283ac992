//! One action on every run a filter matches, a page at a time
//! (`POST /v1/runs/bulk`). Blocking.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use weft_engine::{Engine, PauseError, Quiet, RetryError};
use weft_store::{Refused, RunFilter, RunRecord, RunState, StoreError};

use super::Services;

/// The most runs one call acts on (a dry run counts them all).
pub const MAX_BULK_PAGE: usize = 10_000;

/// The runs acted on at once: the group commit batches their writes.
const WORKERS: usize = 8;

/// Runs not changed, listed in an answer, at most.
const MAX_LISTED: usize = 100;

/// What to do to each run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// Cancel a running run (and the children under it).
    Cancel,
    /// Retry a failed, timed-out or cancelled top-level run from its
    /// failed step.
    Retry,
    /// Pause a running run.
    Pause,
    /// Resume a paused run.
    Resume,
}

impl BulkAction {
    /// Its name, as the API spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Retry => "retry",
            Self::Pause => "pause",
            Self::Resume => "resume",
        }
    }

    /// Whether the action would change `run`, as far as its record says.
    fn would_change(self, run: &RunRecord) -> bool {
        match self {
            Self::Cancel => run.state == RunState::Running,
            Self::Pause => run.state == RunState::Running && run.paused.is_none(),
            Self::Resume => run.state == RunState::Running && run.paused.is_some(),
            Self::Retry => {
                matches!(
                    run.state,
                    RunState::Failed | RunState::TimedOut | RunState::Cancelled
                ) && run.parent.is_none()
            }
        }
    }
}

/// A bulk action to take. Which runs the caller may see is in `filter`
/// (its tenant), the adapter's to set.
#[derive(Debug, Clone)]
pub struct Bulk {
    /// What to do to each run.
    pub action: BulkAction,
    /// The runs, as far as the store can filter them; `before` continues
    /// after a previous page's `next`.
    pub filter: RunFilter,
    /// Only runs following the revision with this definition digest.
    pub digest: Option<String>,
    /// Only runs that ended with this error code.
    pub error: Option<String>,
    /// Count what would change, and change nothing.
    pub dry_run: bool,
    /// Act on at most this many runs (clamped to 1 to [`MAX_BULK_PAGE`]).
    pub limit: usize,
    /// Who acts, for runs' records (retry, pause).
    pub actor: String,
}

/// A run the action left as it was, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BulkRun {
    /// The run.
    pub run: String,
    /// Why it did not change.
    pub reason: String,
    /// Whether it should have changed and the host failed.
    pub failed: bool,
}

/// What a bulk action did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BulkDone {
    /// The runs the filter matched in this page.
    pub matched: usize,
    /// Of those, the runs a dry run would change.
    pub would_change: usize,
    /// The runs changed.
    pub changed: usize,
    /// The runs that should have changed, where the host failed.
    pub failed: usize,
    /// Runs left as they were: failures first, at most 100.
    pub unchanged: Vec<BulkRun>,
    /// Where the next page starts, if runs are left past this one.
    pub next: Option<String>,
}

/// What the action did to one run.
enum Outcome {
    /// Changed.
    Changed,
    /// Left as it was, and why (nothing went wrong).
    Unchanged(String),
    /// It should have changed, and the host failed.
    Failed(String),
}

impl Services {
    /// Takes `bulk`'s action on each run it matches: a page of at most
    /// `bulk.limit` runs, eight at a time.
    pub fn bulk(&self, bulk: Bulk) -> Result<BulkDone, StoreError> {
        let limit = bulk.limit.clamp(1, MAX_BULK_PAGE);
        let mut matched = self.matched(&bulk, limit)?;
        if bulk.dry_run {
            let would_change = matched
                .iter()
                .filter(|r| bulk.action.would_change(r))
                .count();
            return Ok(BulkDone {
                matched: matched.len(),
                would_change,
                ..BulkDone::default()
            });
        }
        // One more than a page was read: there is a next page.
        let next = (matched.len() > limit).then(|| {
            matched.truncate(limit);
            matched.last().map(|run| run.id.clone())
        });
        // A child whose parent is cancelled here goes with it: cancelled on
        // its own first, it would fail its parent's step instead. Only a
        // running parent is cancelled, and takes its children along.
        let page: HashSet<String> = matched
            .iter()
            .filter(|r| !r.state.is_terminal())
            .map(|r| r.id.clone())
            .collect();
        let next_run = AtomicUsize::new(0);
        let changed = AtomicUsize::new(0);
        let failed = AtomicUsize::new(0);
        let unchanged = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..WORKERS.min(matched.len()) {
                scope.spawn(|| {
                    while let Some(run) = matched.get(next_run.fetch_add(1, Ordering::Relaxed)) {
                        let (reason, failure) = match self.act(bulk.action, run, &page, &bulk.actor)
                        {
                            Outcome::Changed => {
                                changed.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            Outcome::Unchanged(why) => (why, false),
                            Outcome::Failed(why) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                (why, true)
                            }
                        };
                        let mut unchanged = weft_core::lock(&unchanged);
                        // Failures first: they are what a caller must see.
                        if unchanged.len() < MAX_LISTED || failure {
                            unchanged.push(BulkRun {
                                run: run.id.clone(),
                                reason,
                                failed: failure,
                            });
                        }
                    }
                });
            }
        });
        let mut unchanged = unchanged.into_inner().unwrap_or_else(|e| e.into_inner());
        unchanged.sort_by_key(|u| !u.failed);
        unchanged.truncate(MAX_LISTED);
        Ok(BulkDone {
            matched: matched.len(),
            would_change: 0,
            changed: changed.into_inner(),
            failed: failed.into_inner(),
            unchanged,
            next: next.flatten(),
        })
    }

    /// The runs `bulk` matches: every one for a dry run, else one more
    /// than a page (which tells whether a next page exists).
    fn matched(&self, bulk: &Bulk, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        let (digest, error) = (bulk.digest.as_deref(), bulk.error.as_deref());
        let keeps = |run: &RunRecord| {
            digest.is_none_or(|d| run.definition == d)
                && error.is_none_or(|code| run.error.as_ref().is_some_and(|e| e.error.code == code))
        };
        // The store filters all but the revision and the error.
        let read = if bulk.dry_run || digest.is_some() || error.is_some() {
            usize::MAX
        } else {
            limit + 1
        };
        let mut matched = Vec::new();
        for run in self.engine.store().runs(&bulk.filter, read)? {
            if keeps(&run) {
                matched.push(run);
                if !bulk.dry_run && matched.len() > limit {
                    break;
                }
            }
        }
        Ok(matched)
    }

    /// Takes `action` on `run`, as `actor`.
    fn act(
        &self,
        action: BulkAction,
        run: &RunRecord,
        page: &HashSet<String>,
        actor: &str,
    ) -> Outcome {
        let engine: &Engine = &self.engine;
        match action {
            BulkAction::Cancel => cancel(engine, run, page),
            BulkAction::Retry => match engine.retry(&run.id, None, actor, Box::new(Quiet)) {
                // Taken in here, or durable and driven wherever it is claimed.
                Ok(_) | Err(RetryError::Resume { .. }) => Outcome::Changed,
                Err(RetryError::Store(e)) => Outcome::Failed(e.to_string()),
                Err(e) => Outcome::Unchanged(e.to_string()),
            },
            BulkAction::Pause => paused(engine.pause(&run.id, actor).map(drop)),
            BulkAction::Resume => paused(engine.unpause(&run.id, Box::new(Quiet)).map(drop)),
        }
    }
}

/// Cancels `run`, unless it ended, or its parent is cancelled in this page
/// (which takes it along: counted as changed).
fn cancel(engine: &Engine, run: &RunRecord, page: &HashSet<String>) -> Outcome {
    if run.state.is_terminal() {
        return Outcome::Unchanged("ended".to_owned());
    }
    if run.parent.as_ref().is_some_and(|p| page.contains(&p.run)) {
        return Outcome::Changed;
    }
    match engine.cancel(&run.id) {
        Ok(()) => Outcome::Changed,
        Err(StoreError::Refused(Refused::RunEnded(_))) => Outcome::Unchanged("ended".to_owned()),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// The outcome of a pause or a resume.
fn paused(answer: Result<(), PauseError>) -> Outcome {
    match answer {
        Ok(()) => Outcome::Changed,
        Err(PauseError::Store(e)) => Outcome::Failed(e.to_string()),
        Err(e) => Outcome::Unchanged(e.to_string()),
    }
}
