//! The invariants, checked against the store after every event, and at the
//! end once the world has settled.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use weft_core::tenant;

use weft_model::Workflow;
use weft_store::{RunFilter, RunRecord, RunState, StepRecord, Store};

use crate::fake::space;

/// What the checks remember from one event to the next.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    /// Every record seen, by `(run, seq)`, as JSON: none may change.
    records: BTreeMap<(String, u32), String>,
    /// Runs seen ended, with their count of records then.
    ended: BTreeMap<String, (RunState, usize)>,
    /// Runs whose cancellation a host acknowledged.
    cancels: BTreeSet<String>,
    /// Cancelled runs whose children were looked at.
    cancelled: BTreeSet<String>,
    /// Children that had not ended when their parent was first seen
    /// cancelled: each must end `cancelled`.
    doomed: BTreeSet<String>,
    /// Every run seen, with its workflow, its parent, and its `count`
    /// steps that succeeded, as last seen.
    seen: BTreeMap<String, Seen>,
    /// Runs the sweeper deleted: none may come back.
    deleted: BTreeSet<String>,
    /// The `count` steps of deleted runs, by workflow.
    counted_gone: BTreeMap<String, u64>,
    /// Paused runs, with their count of records when first seen paused.
    paused: BTreeMap<String, usize>,
    /// Runs whose pause a host acknowledged as durable, and no resume
    /// since: each stays paused until it ends.
    pauses: BTreeSet<String>,
    /// Runs whose pause a host acknowledged as pending, and no resume
    /// since: each makes no attempt but at the leaves busy then (a call
    /// under way, its commit, a wait that ends), until it is paused or
    /// ends. A pending pause is in the memory of its host alone,
    /// so a crash of that host, its freezing (its runs may be taken
    /// over), or another host's migration of the run takes it back.
    pending: BTreeMap<String, Pending>,
    /// Runs moved to another revision, with its definition's digest: each
    /// stays under it until moved again.
    migrated: BTreeMap<String, String>,
    /// Every step refused for a quota, by `(run, seq)`, with its code: the
    /// sweeper may delete its run later, so they are counted as seen.
    refused: BTreeMap<(String, u32), String>,
}

/// A pause acknowledged as pending.
#[derive(Debug)]
struct Pending {
    /// The host that acknowledged it.
    host: usize,
    /// The run's number of records then.
    records: usize,
    /// The leaves busy then: each may get one record.
    under_way: Vec<String>,
}

/// A run as last seen.
#[derive(Debug)]
struct Seen {
    workflow: String,
    parent: Option<String>,
    counted: u64,
}

/// A record that ends its leaf's attempt with a result: an output, or a
/// skip.
fn succeeded(record: &StepRecord) -> bool {
    record.error.is_none() && !record.awaiting && (record.output.is_some() || record.skipped)
}

impl Facts {
    pub(crate) fn cancel_acknowledged(&mut self, run: &str) {
        self.cancels.insert(run.to_owned());
    }

    /// A host answered that run `run` is paused.
    pub(crate) fn pause_acknowledged(&mut self, run: &str) {
        self.pauses.insert(run.to_owned());
    }

    /// Host `host` answered that run `run`, with `records` records, is to
    /// be paused once the calls under way at `under_way` are committed.
    pub(crate) fn pause_pending(
        &mut self,
        run: &str,
        host: usize,
        records: usize,
        under_way: Vec<String>,
    ) {
        let pending = Pending {
            host,
            records,
            under_way,
        };
        self.pending.insert(run.to_owned(), pending);
    }

    /// A host moved run `run` to the definition with digest `definition`.
    pub(crate) fn migrated(&mut self, run: &str, definition: &str) {
        self.migrated.insert(run.to_owned(), definition.to_owned());
    }

    /// A migration of run `run` may or may not have landed.
    pub(crate) fn migration_unknown(&mut self, run: &str) {
        self.migrated.remove(run);
    }

    /// Host `host` moved run `run` to another revision (or may have): a
    /// pause pending on another host is that host's memory alone, and the
    /// move takes the run from it, so it is forgotten.
    pub(crate) fn moved_by(&mut self, run: &str, host: usize) {
        if self.pending.get(run).is_some_and(|p| p.host != host) {
            self.pending.remove(run);
        }
    }

    /// A host resumed run `run`.
    pub(crate) fn resumed(&mut self, run: &str) {
        self.pauses.remove(run);
        self.pending.remove(run);
    }

    /// Host `host` lost its memory (a crash), or may lose its runs (it
    /// froze): the pauses pending there are forgotten.
    pub(crate) fn host_lost(&mut self, host: usize) {
        self.pending.retain(|_, pending| pending.host != host);
    }

    /// How many steps were seen refused with quota `code` (`storage_quota`,
    /// `timer_quota`).
    pub(crate) fn refused(&self, code: &str) -> usize {
        self.refused.values().filter(|c| *c == code).count()
    }

    /// The invariants that hold after every event.
    pub(crate) fn check(
        &mut self,
        store: &dyn Store,
        workflows: &[Arc<Workflow>],
        limited: Option<&str>,
    ) -> Result<(), String> {
        let runs = store
            .runs(&RunFilter::default(), usize::MAX)
            .map_err(|e| format!("reading runs: {e}"))?;
        self.deleted_safely(&runs)?;
        let mut counted = self.counted_gone.clone();
        for run in &runs {
            let steps = store
                .steps(&run.id)
                .map_err(|e| format!("reading run {}: {e}", run.id))?;
            self.records_kept(run, &steps)?;
            once_per_leaf(run, &steps)?;
            for (seq, code) in refused_results_store_nothing(run, &steps, limited)? {
                self.refused.insert((run.id.clone(), seq), code);
            }
            self.nothing_after_the_end(run, &steps)?;
            self.nothing_starts_while_paused(run, &steps)?;
            self.migrations_kept(run)?;
            self.cancels_durable(run, &steps)?;
            messages_once(store, run, &steps)?;
            pins_kept(store, run)?;
            let count = steps
                .iter()
                .filter(|r| succeeded(r) && plugin(run, r) == Some("count"))
                .count() as u64;
            *counted.entry(run.workflow.clone()).or_default() += count;
            self.seen.insert(
                run.id.clone(),
                Seen {
                    workflow: run.workflow.clone(),
                    parent: run.parent.as_ref().map(|p| p.run.clone()),
                    counted: count,
                },
            );
        }
        self.children_end_with_their_parent(&runs)?;
        children_in_their_tenant(&runs)?;
        tenants_indexed_and_counted(store, &runs)?;
        for workflow in workflows {
            let space = space(&workflow.id);
            let stored = store
                .kv_get(&space, "n")
                .map_err(|e| format!("reading {space}: {e}"))?;
            let n = stored
                .value
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            let expected = counted.get(&workflow.id).copied().unwrap_or(0);
            if n != expected {
                return Err(format!(
                    "KV read-modify-write not exact: `{space}` n = {n}, but {expected} `count` steps succeeded"
                ));
            }
        }
        Ok(())
    }

    /// A run that is gone was deleted by the sweeper: it had been seen
    /// ended, its parent (if any) has ended or is gone too, and it never
    /// comes back. Its `count` steps still count.
    fn deleted_safely(&mut self, runs: &[RunRecord]) -> Result<(), String> {
        let now: BTreeMap<&str, &RunRecord> = runs.iter().map(|r| (r.id.as_str(), r)).collect();
        if let Some(back) = runs.iter().find(|r| self.deleted.contains(&r.id)) {
            return Err(format!("run {} came back after it was deleted", back.id));
        }
        let gone: Vec<String> = self
            .seen
            .keys()
            .filter(|id| !now.contains_key(id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            let Some(seen) = self.seen.remove(&id) else {
                continue;
            };
            if !self.ended.contains_key(&id) {
                return Err(format!(
                    "run {id} ({}) was deleted before it was seen to end",
                    seen.workflow
                ));
            }
            if let Some(parent) = &seen.parent
                && let Some(parent) = now.get(parent.as_str())
                && !parent.state.is_terminal()
            {
                return Err(format!(
                    "run {id} was deleted while its parent {} had not ended",
                    parent.id
                ));
            }
            *self.counted_gone.entry(seen.workflow).or_default() += seen.counted;
            self.deleted.insert(id);
        }
        Ok(())
    }

    /// No record at `(run, seq)` is ever replaced, and `seq`s are dense.
    fn records_kept(&mut self, run: &RunRecord, steps: &[StepRecord]) -> Result<(), String> {
        for (n, record) in steps.iter().enumerate() {
            if record.seq as usize != n {
                return Err(format!(
                    "run {}: record #{n} has seq {} (not dense)",
                    run.id, record.seq
                ));
            }
            let text = serde_json::to_string(record).unwrap_or_default();
            let key = (run.id.clone(), record.seq);
            match self.records.get(&key) {
                Some(seen) if *seen != text => {
                    return Err(format!(
                        "run {}: record {} was overwritten:\n  was {seen}\n  now {text}",
                        run.id, record.seq
                    ));
                }
                Some(_) => {}
                None => {
                    self.records.insert(key, text);
                }
            }
        }
        Ok(())
    }

    /// A run that ended gets no more records, and keeps its end, unless a
    /// retry of that very end comes next: its `@retry` record, telling how
    /// the run had ended, is the first after the end.
    fn nothing_after_the_end(
        &mut self,
        run: &RunRecord,
        steps: &[StepRecord],
    ) -> Result<(), String> {
        if let Some((state, count)) = self.ended.get(&run.id)
            && let Some(next) = steps.get(*count)
            && next.retry.as_ref().is_some_and(|mark| mark.was == *state)
            && next.path == weft_store::RETRY_PATH
        {
            self.ended.remove(&run.id);
        }
        if let Some((state, count)) = self.ended.get(&run.id) {
            if steps.len() != *count || run.state != *state {
                return Err(format!(
                    "run {} ended {state:?} with {count} records, and now is {:?} with {}",
                    run.id,
                    run.state,
                    steps.len()
                ));
            }
        } else if run.state.is_terminal() {
            self.ended.insert(run.id.clone(), (run.state, steps.len()));
        }
        Ok(())
    }

    /// The children of a cancelled run that had not ended when it was
    /// cancelled end `cancelled` too: none of their commits lands after
    /// their parent's cancellation (their end is the cancellation).
    fn children_end_with_their_parent(&mut self, runs: &[RunRecord]) -> Result<(), String> {
        for parent in runs {
            // Each cancellation once (a retried run may be cancelled again,
            // with more records).
            let cancellation = format!("{}#{}", parent.id, parent.step_records);
            if parent.state != RunState::Cancelled || !self.cancelled.insert(cancellation) {
                continue;
            }
            for child in runs {
                if child.parent.as_ref().is_some_and(|p| p.run == parent.id)
                    && !child.state.is_terminal()
                {
                    self.doomed.insert(child.id.clone());
                }
            }
        }
        for run in runs {
            if self.doomed.contains(&run.id)
                && run.state.is_terminal()
                && run.state != RunState::Cancelled
            {
                return Err(format!(
                    "run {} was cancelled while its child {} ran, and the child went on to end {:?}",
                    run.parent.as_ref().map_or("?", |p| p.run.as_str()),
                    run.id,
                    run.state
                ));
            }
        }
        Ok(())
    }

    /// A paused run starts no step: every record it gets while paused was
    /// decided in the store (a timer's fire, an answer), none is a call's
    /// (which names its host).
    fn nothing_starts_while_paused(
        &mut self,
        run: &RunRecord,
        steps: &[StepRecord],
    ) -> Result<(), String> {
        // An end takes the pause back (a retry then runs it unpaused).
        if run.state.is_terminal() {
            self.pauses.remove(&run.id);
        }
        if self.pauses.contains(&run.id) && run.paused.is_none() {
            return Err(format!(
                "run {}: its pause was acknowledged, and it is running unpaused with no resume",
                run.id
            ));
        }
        // Ended, paused, or suspended (out of its host's memory: that host
        // pauses it in the store, and until then a fire or a migration may
        // take it elsewhere, where the pause is not known): no longer held
        // by the cell that answered.
        if run.state.is_terminal() || run.paused.is_some() || run.suspended {
            self.pending.remove(&run.id);
        }
        if let Some(pending) = self.pending.get(&run.id) {
            let mut under_way = pending.under_way.clone();
            for record in steps.iter().skip(pending.records) {
                // Ended and retried since: the pause went with the end.
                if record.path == weft_store::RETRY_PATH {
                    break;
                }
                if record.host.is_none() {
                    continue;
                }
                let Some(at) = under_way.iter().position(|path| *path == record.path) else {
                    return Err(format!(
                        "run {}: host {} acknowledged its pause as pending (at record {}, with {:?} under way), yet leaf `{}` made attempt {} at seq {}",
                        run.id,
                        pending.host,
                        pending.records,
                        pending.under_way,
                        record.path,
                        record.attempt,
                        record.seq
                    ));
                };
                under_way.swap_remove(at);
            }
        }
        if run.paused.is_none() || run.state.is_terminal() {
            self.paused.remove(&run.id);
            return Ok(());
        }
        let since = *self.paused.entry(run.id.clone()).or_insert(steps.len());
        if let Some(record) = steps.iter().skip(since).find(|r| r.host.is_some()) {
            return Err(format!(
                "run {} is paused (since record {since}), yet leaf `{}` made attempt {} at seq {}",
                run.id, record.path, record.attempt, record.seq
            ));
        }
        Ok(())
    }

    /// A migration acknowledged is durable: no write decided on the run as
    /// it was before (a fire, an answer, a pause decided in the store)
    /// puts the old definition back.
    fn migrations_kept(&self, run: &RunRecord) -> Result<(), String> {
        match self.migrated.get(&run.id) {
            Some(definition) if *definition != run.definition => Err(format!(
                "run {}: it was migrated to definition {definition}, and is under {} now",
                run.id, run.definition
            )),
            _ => Ok(()),
        }
    }

    /// A cancellation acknowledged is durable: the run is `cancelled`,
    /// unless a retry of its cancellation came since.
    fn cancels_durable(&self, run: &RunRecord, steps: &[StepRecord]) -> Result<(), String> {
        let retried = steps.iter().any(|r| {
            r.retry
                .as_ref()
                .is_some_and(|m| m.was == RunState::Cancelled)
        });
        if self.cancels.contains(&run.id) && run.state != RunState::Cancelled && !retried {
            return Err(format!(
                "run {}: its cancellation was acknowledged, yet it is {:?}",
                run.id, run.state
            ));
        }
        Ok(())
    }

    /// Once the world settled: every run ended, and a cancelled parent's
    /// children did not go on without it.
    pub(crate) fn ended(&self, store: &dyn Store) -> Result<(), String> {
        let runs = store
            .runs(&RunFilter::default(), usize::MAX)
            .map_err(|e| format!("reading runs: {e}"))?;
        for run in &runs {
            if !run.state.is_terminal() {
                let timers = store.run_timers(&run.id).map(|t| t.len()).unwrap_or(0);
                let records: Vec<String> = store
                    .steps(&run.id)
                    .unwrap_or_default()
                    .iter()
                    .map(|r| {
                        let outcome = if let Some(mark) = &r.retry {
                            format!("retry of {}: {:?}", mark.was, mark.reset)
                        } else if r.awaiting {
                            "awaiting".to_owned()
                        } else if let Some(e) = &r.error {
                            format!(
                                "error {}{}",
                                e.code,
                                if r.retry_in_ms.is_some() {
                                    " (again)"
                                } else {
                                    ""
                                }
                            )
                        } else if r.skipped {
                            "skipped".to_owned()
                        } else if r.output.is_some() {
                            "output".to_owned()
                        } else if let Some(child) = &r.child {
                            let state = match store.run(child) {
                                Ok(Some(child)) => format!("{:?}", child.state),
                                Ok(None) => "not recorded".to_owned(),
                                Err(e) => e.to_string(),
                            };
                            let outbox = store.outbox().map(|o| o.len()).unwrap_or(0);
                            format!("child {child} ({state}; {outbox} outbox rows)")
                        } else {
                            "waits".to_owned()
                        };
                        format!("\n  #{} {} attempt {}: {outcome}", r.seq, r.path, r.attempt)
                    })
                    .collect();
                let lease = store.lease(&run.id).ok().flatten();
                let indexed = store
                    .running()
                    .is_ok_and(|running| running.iter().any(|r| r.id == run.id));
                let parked = store
                    .parked(usize::MAX)
                    .is_ok_and(|parked| parked.iter().any(|(id, _)| *id == run.id));
                return Err(format!(
                    "run {} ({}) stalled: {:?}{}{}, lease {lease:?}, running index {indexed}, parked {parked}, {} records, {timers} timers pending, and nothing left to do:{}",
                    run.id,
                    run.workflow,
                    run.state,
                    if run.suspended { " (suspended)" } else { "" },
                    if run.paused.is_some() {
                        " (paused)"
                    } else {
                        ""
                    },
                    run.step_records,
                    records.concat()
                ));
            }
        }
        Ok(())
    }
}

/// The plugin step `record` calls, if it is a call step.
fn plugin<'r>(run: &'r RunRecord, record: &StepRecord) -> Option<&'r str> {
    run.plugins.get(&record.step_id).map(|p| p.name.as_str())
}

/// At most one success per leaf, and a call step's attempt numbers are
/// unique per leaf.
fn once_per_leaf(run: &RunRecord, steps: &[StepRecord]) -> Result<(), String> {
    let mut successes: BTreeMap<&str, u32> = BTreeMap::new();
    let mut attempts: BTreeSet<(&str, u32)> = BTreeSet::new();
    for record in steps {
        if succeeded(record) {
            let seen = successes.entry(&record.path).or_default();
            *seen += 1;
            if *seen > 1 {
                return Err(format!(
                    "run {}: leaf `{}` succeeded twice (second at seq {})",
                    run.id, record.path, record.seq
                ));
            }
        }
        if plugin(run, record).is_some() && !attempts.insert((&record.path, record.attempt)) {
            return Err(format!(
                "run {}: leaf `{}` has two records of attempt {} (second at seq {})",
                run.id, record.path, record.attempt, record.seq
            ));
        }
    }
    Ok(())
}

/// Each message the store holds for a run was committed with exactly one
/// successful record, and each such record's messages are stored. A run
/// of tenant `default` (subscribed to its runs' ends) that ended left
/// exactly one notice of its end, telling its state; a run that has not
/// ended, or of the second tenant (not subscribed), left none.
fn messages_once(store: &dyn Store, run: &RunRecord, steps: &[StepRecord]) -> Result<(), String> {
    let (notices, stored): (Vec<_>, Vec<_>) = store
        .run_messages(&run.id)
        .map_err(|e| format!("reading run {}'s messages: {e}", run.id))?
        .into_iter()
        .partition(|m| m.step == weft_store::END_PATH);
    let subscribed = tenant::of(&run.workflow) == tenant::DEFAULT;
    // One notice per end: each end a retry took back (its `@retry` record
    // tells how it had ended), and the run's own if it has ended.
    let mut ends: Vec<String> = steps
        .iter()
        .filter_map(|r| r.retry.as_ref().map(|mark| mark.was.to_string()))
        .collect();
    if run.state.is_terminal() {
        ends.push(run.state.to_string());
    }
    if !subscribed {
        ends.clear();
    }
    let mut told: Vec<String> = Vec::new();
    for notice in &notices {
        if (notice.channel.as_str(), notice.payload["run"].as_str())
            != (weft_core::names::RUNS_ENDED, Some(run.id.as_str()))
        {
            return Err(format!(
                "run {}: a notice of its end names {} on {}",
                run.id, notice.payload["run"], notice.channel
            ));
        }
        told.push(notice.payload["state"].as_str().unwrap_or("?").to_owned());
    }
    ends.sort();
    told.sort();
    if told != ends {
        return Err(format!(
            "run {} of `{}` is {:?} and its notices tell {told:?}, not {ends:?}",
            run.id, run.workflow, run.state
        ));
    }
    let mut claimed: BTreeMap<&str, u32> = BTreeMap::new();
    for record in steps.iter().filter(|r| succeeded(r)) {
        for id in &record.messages {
            *claimed.entry(id).or_default() += 1;
        }
    }
    if stored.len() != claimed.len() || claimed.values().any(|n| *n != 1) {
        return Err(format!(
            "run {}: {} messages stored, {} claimed by successful records ({:?})",
            run.id,
            stored.len(),
            claimed.len(),
            claimed
        ));
    }
    for message in &stored {
        if !claimed.contains_key(message.id.as_str()) {
            return Err(format!(
                "run {}: message {} is stored, but no successful record sent it",
                run.id, message.id
            ));
        }
        // A run emits to its own tenant's channels only.
        if tenant::of(&message.channel) != tenant::of(&run.workflow) {
            return Err(format!(
                "run {} of `{}` emitted message {} to channel `{}` of another tenant",
                run.id, run.workflow, message.id, message.channel
            ));
        }
    }
    Ok(())
}

/// A step fails with `storage_quota` or `timer_quota` only in a tenant
/// held to those quotas (`limited`), and then with nothing of its result
/// stored: no output, key-value writes, messages, child, timer or wait.
/// Returns each refused step's seq and code.
fn refused_results_store_nothing(
    run: &RunRecord,
    steps: &[StepRecord],
    limited: Option<&str>,
) -> Result<Vec<(u32, String)>, String> {
    let mut refused = Vec::new();
    for record in steps {
        let Some(code) = record
            .error
            .as_ref()
            .map(|e| e.code.as_str())
            .filter(|code| matches!(*code, "storage_quota" | "timer_quota"))
        else {
            continue;
        };
        if limited != Some(tenant::of(&run.workflow)) {
            return Err(format!(
                "run {} of `{}`: step `{}` failed with {code}, but its tenant has no such quota",
                run.id, run.workflow, record.path
            ));
        }
        if record.output.is_some()
            || !record.kv_writes.is_empty()
            || !record.messages.is_empty()
            || record.child.is_some()
            || record.timer.is_some()
            || record.awaiting
        {
            return Err(format!(
                "run {}: step `{}` at seq {} failed with {code} but keeps part of its result",
                run.id, record.path, record.seq
            ));
        }
        refused.push((record.seq, code.to_owned()));
    }
    Ok(refused)
}

/// A child run is of its parent's tenant.
/// A run that has not ended keeps its definition and its pinned
/// components in the store: a host that loads it again reads them there.
fn pins_kept(store: &dyn Store, run: &RunRecord) -> Result<(), String> {
    if run.state.is_terminal() {
        return Ok(());
    }
    let read = |e: weft_store::StoreError| format!("reading run {}'s pins: {e}", run.id);
    if store.definition(&run.definition).map_err(read)?.is_none() {
        return Err(format!(
            "run {} has not ended, and its definition {} is gone",
            run.id, run.definition
        ));
    }
    for pin in run.plugins.values() {
        if store.component(&pin.digest).map_err(read)?.is_none() {
            return Err(format!(
                "run {} has not ended, and its component {} ({}) is gone",
                run.id, pin.digest, pin.name
            ));
        }
    }
    Ok(())
}

fn children_in_their_tenant(runs: &[RunRecord]) -> Result<(), String> {
    let by_id: BTreeMap<&str, &RunRecord> = runs.iter().map(|r| (r.id.as_str(), r)).collect();
    for run in runs {
        let Some(parent) = run.parent.as_ref().and_then(|p| by_id.get(p.run.as_str())) else {
            continue;
        };
        if tenant::of(&parent.workflow) != tenant::of(&run.workflow) {
            return Err(format!(
                "child run {} of `{}` has a parent {} of `{}`, another tenant",
                run.id, run.workflow, parent.id, parent.workflow
            ));
        }
    }
    Ok(())
}

/// Each tenant's index of runs lists exactly its runs, newest first, and
/// its count of pending timers is exactly the timers its runs have: the
/// rows kept beside the runs (`tenant_runs`, the `usage` table's
/// `<tenant>/timers`) never drift from them, whatever crashed or failed.
fn tenants_indexed_and_counted(store: &dyn Store, runs: &[RunRecord]) -> Result<(), String> {
    let mut tenants: BTreeMap<&str, (Vec<&str>, u64)> = BTreeMap::new();
    for run in runs {
        let timers = store
            .run_timers(&run.id)
            .map_err(|e| format!("reading run {}'s timers: {e}", run.id))?;
        let entry = tenants.entry(tenant::of(&run.workflow)).or_default();
        entry.0.push(run.id.as_str());
        entry.1 += timers.len() as u64;
    }
    for (tenant, (mut ids, timers)) in tenants {
        ids.sort_unstable_by(|a, b| b.cmp(a));
        let filter = RunFilter {
            tenant: Some(tenant.to_owned()),
            ..RunFilter::default()
        };
        let listed = store
            .runs(&filter, usize::MAX)
            .map_err(|e| format!("listing tenant {tenant}'s runs: {e}"))?;
        let listed: Vec<&str> = listed.iter().map(|r| r.id.as_str()).collect();
        if listed != ids {
            return Err(format!(
                "tenant {tenant}'s index of runs lists {listed:?}, but its runs are {ids:?}"
            ));
        }
        let counted = store
            .pending_timers(tenant)
            .map_err(|e| format!("reading tenant {tenant}'s timers: {e}"))?;
        if counted != timers {
            return Err(format!(
                "tenant {tenant} has {timers} timers pending, but its count says {counted}"
            ));
        }
    }
    Ok(())
}
