//! The sweeper: what has outlived its retention is deleted, a page at a
//! time, so that a host that runs for months keeps a bounded store.
//!
//! A pass goes over three tables in turn, each in key order:
//! - **runs.** An ended run is deleted with its step records once its
//!   retention has passed, counted from its end (its record's last
//!   update). Its retention is its workflow's `retain:` (the revision
//!   served now, or the one the run followed if its workflow is not
//!   served), else its tenant's (`quota.retain`), else the host's. The
//!   store refuses to delete a run that has not ended, or a child whose
//!   parent has not (`Refused::Needed`): those are kept, and looked at
//!   again on the next pass.
//! - **messages.** A message whose deliveries are all settled is deleted
//!   with them once its tenant's retention (else the host's) has passed
//!   since its commit. A dead letter is cleared once the host's
//!   dead-letter retention has passed since its last attempt: it then
//!   counts as settled, and its message goes on a later pass. The store
//!   keeps a message with a delivery not settled, and the newest message.
//! - **key-value tombstones.** A deleted key's row is dropped, and so is
//!   the row of a key whose value has expired (`kv.set` with a TTL). Its version
//!   is kept as its space's floor, so a key made again never repeats a
//!   version that a step may have read (see `Write::ForgetKv`).
//!
//! - **revisions, definitions and components.** A workflow revision that
//!   is not its workflow's newest, was replaced longer than the host's run
//!   retention ago, and that no run follows (ended or not: a run's page
//!   shows its definition) is deleted. A stored definition that no
//!   revision, no run and no child waiting to start (the outbox) refers
//!   to, and a stored component that no registry plugin, no plugin file
//!   this host loaded, no run and no child waiting to start pins, is
//!   found *unused*. An unused digest is marked (`Write::MarkBlob`), and
//!   deleted (`Write::DeleteBlob`) by a pass that finds it unused again
//!   and started at least [`MARK_MARGIN`] after the mark. Whatever stores
//!   the digest again (a run, a spawn, a deployment) takes the mark away,
//!   in its own transaction. So a run that needs a digest either existed
//!   before the mark, and the later pass read it, or took the mark away:
//!   a run started while a pass reads the runs keeps what it needs.
//!
//! - **snapshot stores.** A revision that is not its store's newest, was
//!   replaced at least [`MARK_MARGIN`] before the pass started, and that
//!   no run which has not ended pins (no run read, no child waiting to
//!   start) is deleted once it is past the store's `keep` newest
//!   revisions or was replaced longer than its `keep_for` ago. A run pins
//!   the newest revision at its start, so one that pins a revision
//!   replaced before the margin was recorded before the pass read the
//!   runs. The entries of deleted revisions (and of publishes that failed,
//!   or stopped for an hour) go a page at a time, then their data's row;
//!   an expired entry of a revision goes likewise.
//!
//! A page's deletes go to the committer together, at most [`DELETES`]
//! at a time. The committer puts them in its batches beside every other
//! write, as it does any writes (at most 512 to a transaction), so the
//! sweeper never holds a write transaction of its own, and never waits
//! for one commit per delete.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use weft_core::clock::{Timestamp, millis};
use weft_model::{Format, Retain};
use weft_store::{
    Blob, DeliveryOp, DeliveryState, DeploymentRecord, MessageRecord, Refused, RunRecord,
    StoreError, Write,
};

use crate::Engine;

/// Commits a sweeper's writes, answering each.
pub type Commit<'c> = &'c dyn Fn(Vec<Write>) -> Vec<Result<(), StoreError>>;

/// How long after a digest is marked unused a pass must start to delete
/// it: more than any clock skew between hosts.
pub const MARK_MARGIN: Duration = Duration::from_secs(60);

/// How many rows one page of the sweeper reads.
pub const PAGE: usize = 256;

/// How many deletes the sweeper hands the committer at once.
const DELETES: usize = PAGE;

/// The host's retention: how long each kind of thing the sweeper deletes
/// is kept, when neither its workflow nor its tenant says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Ended runs, with their step records and logs, from their end.
    pub runs: Retain,
    /// Messages whose deliveries are all settled, with their
    /// deliveries, from their commit.
    pub messages: Retain,
    /// Dead letters, from their last attempt.
    pub dead_letters: Retain,
}

impl Default for Retention {
    /// 30 days for runs and dead letters, 7 for settled messages.
    fn default() -> Self {
        const DAY: u64 = 86_400;
        Self {
            runs: Retain::For(Duration::from_secs(30 * DAY)),
            messages: Retain::For(Duration::from_secs(7 * DAY)),
            dead_letters: Retain::For(Duration::from_secs(30 * DAY)),
        }
    }
}

/// Where a pass of the sweeper is: the table, and the last key looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Cursor {
    /// The first run.
    #[default]
    Start,
    /// Runs after this id.
    Runs(String),
    /// Messages after this seq.
    Messages(u64),
    /// Key-value rows after this `(space, key)` (from the first if
    /// `None`).
    Kv(Option<(String, String)>),
    /// Revisions, definitions and components, in one page.
    Blobs,
    /// Snapshot revisions, in one page.
    Snapshots,
    /// Snapshot entries after `(data, key)` (from the first if `None`).
    SnapshotEntries(Option<(String, String)>),
    /// The pass is over.
    Done,
}

/// One pass of the sweeper over the store: where it is, and what the runs
/// it read pin.
#[derive(Debug, Clone, Default)]
pub struct Pass {
    cursor: Cursor,
    /// When it started (set on its first page).
    started: Option<Timestamp>,
    /// The definitions the runs read follow.
    definitions: HashSet<String>,
    /// The components the runs read pin.
    components: HashSet<String>,
    /// The snapshot revisions the runs read that have not ended pin:
    /// `(store with its tenant, revision)`.
    snapshots: HashSet<(String, u32)>,
}

impl Pass {
    /// A pass from the start.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the pass is over.
    pub fn is_done(&self) -> bool {
        self.cursor == Cursor::Done
    }

    /// What the pass reads next: `runs`, `messages`, `kv`, `blobs`
    /// (revisions, definitions and components), `snapshots`, or `done`.
    pub fn reading(&self) -> &'static str {
        match self.cursor {
            Cursor::Start | Cursor::Runs(_) => "runs",
            Cursor::Messages(_) => "messages",
            Cursor::Kv(_) => "kv",
            Cursor::Blobs => "blobs",
            Cursor::Snapshots | Cursor::SnapshotEntries(_) => "snapshots",
            Cursor::Done => "done",
        }
    }

    /// What `run` needs is in use. An ended run pins its snapshot
    /// revisions too, until it is deleted: a retry of it reads them again.
    fn pin(&mut self, run: &RunRecord) {
        self.definitions.insert(run.definition.clone());
        self.components
            .extend(run.plugins.values().map(|pin| pin.digest.clone()));
        self.snapshots.extend(
            run.snapshots.iter().map(|(name, revision)| {
                (weft_core::tenant::sibling(&run.workflow, name), *revision)
            }),
        );
    }
}

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
    /// Settled messages deleted, with their deliveries.
    pub messages: u64,
    /// Dead letters cleared.
    pub dead_letters: u64,
    /// Key-value tombstones, and keys whose value expired, dropped.
    pub tombstones: u64,
    /// Workflow revisions deleted.
    pub revisions: u64,
    /// Stored definitions and components deleted.
    pub blobs: u64,
    /// Snapshot revisions deleted.
    pub snapshot_revisions: u64,
    /// Snapshot entries deleted: of deleted revisions, and expired ones.
    pub snapshot_entries: u64,
}

impl std::ops::AddAssign for Swept {
    fn add_assign(&mut self, other: Self) {
        self.examined += other.examined;
        self.runs += other.runs;
        self.steps += other.steps;
        self.kept += other.kept;
        self.messages += other.messages;
        self.dead_letters += other.dead_letters;
        self.tombstones += other.tombstones;
        self.revisions += other.revisions;
        self.blobs += other.blobs;
        self.snapshot_revisions += other.snapshot_revisions;
        self.snapshot_entries += other.snapshot_entries;
    }
}

impl Swept {
    /// Whether it deleted (or kept) anything.
    pub fn is_empty(&self) -> bool {
        *self
            == Self {
                examined: self.examined,
                ..Self::default()
            }
    }
}

/// Whether something retained `retain` from `since` is due at `now`.
fn due(retain: Retain, since: Timestamp, now: Timestamp) -> bool {
    match retain {
        Retain::Forever => false,
        Retain::For(keep) => since + keep <= now,
    }
}

/// What one page knows of the tenants: each one's `quota.retain`.
struct Tenants(HashMap<String, Retain>);

impl Tenants {
    fn read(engine: &Engine) -> Result<Self, StoreError> {
        let retains = engine
            .store()
            .tenants()?
            .into_iter()
            .filter_map(|tenant| {
                let retain = Retain::parse(tenant.quota.retain.as_deref()?).ok()?;
                Some((tenant.name, retain))
            })
            .collect();
        Ok(Self(retains))
    }

    /// The retention of `tenant`, else `host`.
    fn of(&self, tenant: &str, host: Retain) -> Retain {
        self.0.get(tenant).copied().unwrap_or(host)
    }
}

impl Engine {
    /// Run `run`'s retention: its workflow's `retain:` (the revision
    /// served now), else its tenant's, else `host`'s. A workflow not
    /// served (its file gone, a revision that does not parse, its tenant
    /// removed) is judged by the definition the run followed (`pinned`,
    /// by digest, read once), and a run whose definition cannot be read is
    /// kept.
    fn retention(
        &self,
        run: &RunRecord,
        host: Retain,
        tenants: &Tenants,
        pinned: &mut HashMap<String, Option<Option<Retain>>>,
    ) -> Retain {
        let otherwise = tenants.of(weft_core::tenant::of(&run.workflow), host);
        if let Some(workflow) = self.core.launcher.workflow(&run.workflow) {
            return workflow.retain.unwrap_or(otherwise);
        }
        let read = pinned.entry(run.definition.clone()).or_insert_with(|| {
            let definition = self.store().definition(&run.definition).ok().flatten()?;
            let format = Format::from_name(&definition.format).unwrap_or(Format::Yaml);
            weft_model::parse_stored(&definition.source, format, &definition.origin)
                .ok()
                .map(|workflow| workflow.retain)
        });
        match read {
            Some(Some(retain)) => *retain,
            Some(None) => otherwise,
            None => Retain::Forever,
        }
    }

    /// One page of `pass`: up to [`PAGE`] rows of its table read, and
    /// what is due among them deleted through the committer or, with
    /// `dry_run`, counted. Returns what it did; `pass` moves on (see
    /// [`Pass::is_done`]). Blocking.
    pub fn sweep_page(
        &self,
        pass: &mut Pass,
        retention: &Retention,
        dry_run: bool,
    ) -> Result<Swept, StoreError> {
        self.sweep_page_with(pass, retention, dry_run, &|writes| {
            self.core.commits.commit_all(writes)
        })
    }

    /// [`Engine::sweep_page`], its deletes committed by `commit` (the
    /// simulator applies them to the store in an event of their own).
    pub fn sweep_page_with(
        &self,
        pass: &mut Pass,
        retention: &Retention,
        dry_run: bool,
        commit: Commit<'_>,
    ) -> Result<Swept, StoreError> {
        let (swept, next) = match &pass.cursor {
            Cursor::Start => {
                pass.started = Some(self.core.clock.now());
                for row in self.store().outbox()? {
                    let weft_store::Effect::StartRun { run } = row.effect;
                    pass.pin(&run);
                }
                self.sweep_runs(None, pass, retention, dry_run, commit)?
            }
            Cursor::Runs(after) => {
                let after = after.clone();
                self.sweep_runs(Some(&after), pass, retention, dry_run, commit)?
            }
            Cursor::Messages(after) => self.sweep_messages(*after, retention, dry_run, commit)?,
            Cursor::Kv(after) => self.sweep_kv(
                after
                    .as_ref()
                    .map(|(space, key)| (space.as_str(), key.as_str())),
                dry_run,
                commit,
            )?,
            Cursor::Blobs => (
                self.sweep_blobs(pass, retention, dry_run, commit)?,
                Cursor::Snapshots,
            ),
            Cursor::Snapshots => (
                self.sweep_snapshots(pass, dry_run, commit)?,
                Cursor::SnapshotEntries(None),
            ),
            Cursor::SnapshotEntries(after) => {
                let after = after.clone();
                self.sweep_snapshot_entries(after, dry_run, commit)?
            }
            Cursor::Done => (Swept::default(), Cursor::Done),
        };
        pass.cursor = next;
        Ok(swept)
    }

    /// A page of runs (see the module's documentation).
    fn sweep_runs(
        &self,
        after: Option<&str>,
        pass: &mut Pass,
        retention: &Retention,
        dry_run: bool,
        commit: Commit<'_>,
    ) -> Result<(Swept, Cursor), StoreError> {
        let store = self.store();
        let (page, next) = store.runs_from(after, PAGE)?;
        let next = next.map_or(Cursor::Messages(0), Cursor::Runs);
        for run in &page {
            pass.pin(run);
        }
        let now = self.core.clock.now();
        let mut swept = Swept {
            examined: page.len() as u64,
            ..Swept::default()
        };
        let tenants = Tenants::read(self)?;
        let mut pinned = HashMap::new();
        let due: Vec<RunRecord> = page
            .into_iter()
            .filter(|run| run.state.is_terminal())
            .filter(|run| {
                let retain = self.retention(run, retention.runs, &tenants, &mut pinned);
                due(retain, run.updated_at, now)
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
            for (run, answer) in chunk.iter().zip(commit(writes)) {
                match answer {
                    Ok(()) => {
                        swept.runs += 1;
                        swept.steps += u64::from(run.step_records);
                    }
                    Err(StoreError::Refused(Refused::Needed { .. })) => swept.kept += 1,
                    // Deleted meanwhile (by another host's sweeper).
                    Err(StoreError::Refused(Refused::NotFound(_))) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok((swept, next))
    }

    /// A page of messages (see the module's documentation).
    fn sweep_messages(
        &self,
        after: u64,
        retention: &Retention,
        dry_run: bool,
        commit: Commit<'_>,
    ) -> Result<(Swept, Cursor), StoreError> {
        let store = self.store();
        let page = store.messages_from(after, PAGE)?;
        let next = match page.last() {
            Some(last) if page.len() == PAGE => Cursor::Messages(last.seq),
            _ => Cursor::Kv(None),
        };
        let now = self.core.clock.now();
        let tenants = Tenants::read(self)?;
        let newest = page.last().map(|m| m.seq);
        let mut settled = Vec::new();
        let mut dead = Vec::new();
        for message in &page {
            let committed = Timestamp(message.committed_us / 1000);
            if message.pending == 0 {
                let tenant = weft_core::tenant::of(&message.channel);
                if due(tenants.of(tenant, retention.messages), committed, now)
                    // The newest message stays (its seq numbers the next).
                    && (Some(message.seq) != newest || page.len() == PAGE)
                {
                    settled.push(message.seq);
                }
            } else if due(retention.dead_letters, committed, now) {
                dead.extend(self.dead_letters_due(message, retention.dead_letters, now)?);
            }
        }
        let mut swept = Swept::default();
        if dry_run {
            swept.messages = settled.len() as u64;
            swept.dead_letters = dead.len() as u64;
            return Ok((swept, next));
        }
        let clear = dead
            .into_iter()
            .map(|id| Write::Delivery(id, DeliveryOp::Clear));
        swept.dead_letters = self.delete_all(clear, commit)?;
        swept.messages = self.delete_all(settled.into_iter().map(Write::DeleteMessage), commit)?;
        Ok((swept, next))
    }

    /// The ids of `message`'s dead letters whose last attempt is
    /// `retain` before `now`.
    fn dead_letters_due(
        &self,
        message: &MessageRecord,
        retain: Retain,
        now: Timestamp,
    ) -> Result<Vec<String>, StoreError> {
        let mut ids = Vec::new();
        for id in &message.deliveries {
            if let Some(delivery) = self.store().delivery(id)?
                && delivery.state == DeliveryState::Error
                && due(
                    retain,
                    delivery.delivered_at.unwrap_or(delivery.created_at),
                    now,
                )
            {
                ids.push(delivery.id);
            }
        }
        Ok(ids)
    }

    /// A page of key-value rows: every tombstone among them dropped.
    fn sweep_kv(
        &self,
        after: Option<(&str, &str)>,
        dry_run: bool,
        commit: Commit<'_>,
    ) -> Result<(Swept, Cursor), StoreError> {
        let page = self.store().kv_from(after, PAGE)?;
        let next = match page.last() {
            Some((space, key, _)) if page.len() == PAGE => {
                Cursor::Kv(Some((space.clone(), key.clone())))
            }
            _ => Cursor::Blobs,
        };
        let now = self.core.clock.now().0;
        let writes: Vec<Write> = page
            .into_iter()
            // Space "" holds the spaces' floors.
            .filter(|(space, _, row)| !space.is_empty() && row.live(now).is_none())
            .map(|(space, key, row)| Write::ForgetKv {
                space,
                key,
                version: row.version,
                now,
            })
            .collect();
        let mut swept = Swept::default();
        if dry_run {
            swept.tombstones = writes.len() as u64;
            return Ok((swept, next));
        }
        swept.tombstones = self.delete_all(writes, commit)?;
        Ok((swept, next))
    }

    /// Revisions, definitions and components (see the module's
    /// documentation), in one page: there are few of them.
    fn sweep_blobs(
        &self,
        pass: &Pass,
        retention: &Retention,
        dry_run: bool,
        commit: Commit<'_>,
    ) -> Result<Swept, StoreError> {
        let store = self.store();
        let now = self.core.clock.now();
        let mut by_workflow: BTreeMap<String, Vec<DeploymentRecord>> = BTreeMap::new();
        for deployed in store.deployments(None)? {
            by_workflow
                .entry(deployed.workflow.clone())
                .or_default()
                .push(deployed);
        }
        let mut revisions = Vec::new();
        let mut referred = HashSet::new();
        for deployed in by_workflow.values_mut() {
            deployed.sort_by_key(|d| d.revision);
            for pair in deployed.windows(2) {
                let (old, next) = (&pair[0], &pair[1]);
                if due(retention.runs, next.deployed_at, now)
                    && !pass.definitions.contains(&old.digest)
                {
                    revisions.push(old);
                } else {
                    referred.insert(old.digest.clone());
                }
            }
            referred.extend(deployed.last().map(|d| d.digest.clone()));
        }
        let definitions: Vec<String> = store
            .digests(Blob::Definition)?
            .into_iter()
            .filter(|d| !referred.contains(d) && !pass.definitions.contains(d))
            .collect();
        let mut kept: HashSet<String> = pass.components.clone();
        kept.extend(store.plugins()?.into_iter().map(|p| p.digest));
        kept.extend(self.plugins().file_digests());
        let components: Vec<String> = store
            .digests(Blob::Component)?
            .into_iter()
            .filter(|d| !kept.contains(d))
            .collect();
        let mut swept = Swept::default();
        let unused: Vec<(Blob, String)> = definitions
            .into_iter()
            .map(|digest| (Blob::Definition, digest))
            .chain(
                components
                    .into_iter()
                    .map(|digest| (Blob::Component, digest)),
            )
            .collect();
        // Those marked long enough before this pass go; the others are
        // marked.
        let started = pass.started.unwrap_or(now);
        let marked_by = Timestamp(started.0.saturating_sub(millis(MARK_MARGIN)));
        let marks: HashMap<String, Timestamp> = store.marks()?.into_iter().collect();
        let (due, unmarked): (Vec<_>, Vec<_>) = unused
            .into_iter()
            .partition(|(_, digest)| marks.get(digest).is_some_and(|at| *at <= marked_by));
        if dry_run {
            swept.revisions = revisions.len() as u64;
            swept.blobs = due.len() as u64;
            return Ok(swept);
        }
        let writes = revisions.iter().map(|d| Write::DeleteRevision {
            workflow: d.workflow.clone(),
            revision: d.revision,
        });
        swept.revisions = self.delete_all(writes, commit)?;
        let deletes = due.into_iter().map(|(blob, digest)| Write::DeleteBlob {
            blob,
            digest,
            marked_by,
        });
        swept.blobs = self.delete_all(deletes, commit)?;
        let marks = unmarked
            .into_iter()
            .filter(|(_, digest)| !marks.contains_key(digest))
            .map(|(blob, digest)| Write::MarkBlob {
                blob,
                digest,
                at: now,
            });
        self.delete_all(marks, commit)?;
        Ok(swept)
    }

    /// Snapshot revisions (see the module's documentation), in one page:
    /// there are few of them.
    fn sweep_snapshots(
        &self,
        pass: &Pass,
        dry_run: bool,
        commit: Commit<'_>,
    ) -> Result<Swept, StoreError> {
        let now = self.core.clock.now();
        let started = pass.started.unwrap_or(now);
        let mut by_store: BTreeMap<String, Vec<weft_store::SnapshotRecord>> = BTreeMap::new();
        for record in self.store().snapshots(None)? {
            by_store
                .entry(record.store.clone())
                .or_default()
                .push(record);
        }
        let mut due = Vec::new();
        for revisions in by_store.values_mut() {
            revisions.sort_by_key(|r| std::cmp::Reverse(r.revision));
            let Some(newest) = revisions.first() else {
                continue;
            };
            let (keep, keep_for) = (newest.keep.max(1) as usize, newest.keep_for_ms);
            for (at, pair) in revisions.windows(2).enumerate() {
                let (next, old) = (&pair[0], &pair[1]);
                let replaced = next.published_at;
                let counted_out = at + 1 >= keep;
                let aged_out = keep_for.is_some_and(|ms| replaced.0.saturating_add(ms) <= now.0);
                if replaced.0.saturating_add(millis(MARK_MARGIN)) <= started.0
                    && (counted_out || aged_out)
                    && !pass.snapshots.contains(&(old.store.clone(), old.revision))
                {
                    due.push(Write::DeleteSnapshot {
                        store: old.store.clone(),
                        revision: old.revision,
                    });
                }
            }
        }
        let mut swept = Swept::default();
        if dry_run {
            swept.snapshot_revisions = due.len() as u64;
            return Ok(swept);
        }
        swept.snapshot_revisions = self.delete_all(due, commit)?;
        Ok(swept)
    }

    /// A page of snapshot entries: of the first data id at or after the
    /// cursor's whose entries may go (dropped, abandoned, or sealed with
    /// entries that expire), those that may go are deleted. A dropped
    /// data's row goes once a page read from its first key finds no entry
    /// (one read from the middle goes back to the first key, for entries
    /// another host's pass may have left before it).
    fn sweep_snapshot_entries(
        &self,
        after: Option<(String, String)>,
        dry_run: bool,
        commit: Commit<'_>,
    ) -> Result<(Swept, Cursor), StoreError> {
        let store = self.store();
        let now = self.core.clock.now();
        let expiring: HashSet<String> = store
            .snapshots(None)?
            .into_iter()
            .filter(|r| r.expiring > 0)
            .map(|r| r.data)
            .collect();
        let mut swept = Swept::default();
        // An empty key: from the data's first key (keys are never empty).
        let (from_data, from_key) = match &after {
            Some((data, key)) => (data.as_str(), key.as_str()),
            None => ("", ""),
        };
        for (data, row) in store.snapshot_data()? {
            if data.as_str() < from_data {
                continue;
            }
            let deletable = row.deletable(now);
            if !deletable && !expiring.contains(&data) {
                continue;
            }
            let key = if data == from_data { from_key } else { "" };
            let page = store.snapshot_keys(&data, (!key.is_empty()).then_some(key), "", PAGE)?;
            let Some((last, _)) = page.last() else {
                if deletable && !key.is_empty() && !dry_run {
                    // Read again from the first key before the row goes.
                    return Ok((swept, Cursor::SnapshotEntries(Some((data, String::new())))));
                }
                if deletable && !dry_run {
                    let forget = Write::ForgetSnapshotData {
                        data: data.clone(),
                        now,
                    };
                    self.delete_all([forget], commit)?;
                }
                // The next data id, from its first key.
                let next = format!("{data}\0");
                return Ok((swept, Cursor::SnapshotEntries(Some((next, String::new())))));
            };
            let next = Cursor::SnapshotEntries(Some((data.clone(), last.clone())));
            let keys: Vec<String> = page
                .into_iter()
                .filter(|(_, expires)| deletable || expires.is_some_and(|at| at <= now.0))
                .map(|(key, _)| key)
                .collect();
            swept.snapshot_entries = keys.len() as u64;
            if !dry_run && !keys.is_empty() {
                self.delete_all(
                    [Write::DropSnapshotEntries {
                        data: data.clone(),
                        keys,
                        now,
                    }],
                    commit,
                )?;
            }
            return Ok((swept, next));
        }
        Ok((swept, Cursor::Done))
    }

    /// Commits `writes`, [`DELETES`] at a time: how many were applied.
    /// One refused as needed, gone already, or changed meanwhile (a dead
    /// letter re-sent) is passed over.
    fn delete_all(
        &self,
        writes: impl IntoIterator<Item = Write>,
        commit: Commit<'_>,
    ) -> Result<u64, StoreError> {
        let mut writes = writes.into_iter().peekable();
        let mut done = 0;
        while writes.peek().is_some() {
            let chunk: Vec<Write> = writes.by_ref().take(DELETES).collect();
            for answer in commit(chunk) {
                match answer {
                    Ok(()) => done += 1,
                    Err(
                        StoreError::Refused(Refused::Needed { .. } | Refused::NotFound(_))
                        | StoreError::Refused(Refused::DeliveryState { .. }),
                    ) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(done)
    }

    /// A whole pass of the sweeper over the store, page by page (see
    /// [`Engine::sweep_page`]). Blocking.
    pub fn sweep(&self, retention: &Retention, dry_run: bool) -> Result<Swept, StoreError> {
        let mut total = Swept::default();
        let mut pass = Pass::new();
        while !pass.is_done() {
            total += self.sweep_page(&mut pass, retention, dry_run)?;
        }
        Ok(total)
    }

    /// Deletes run `id`, which has ended, with its step records (see
    /// [`Write::DeleteRun`]). Blocking.
    pub fn delete_run(&self, id: &str) -> Result<(), StoreError> {
        self.core.commits.commit(Write::DeleteRun(id.to_owned()))
    }
}
