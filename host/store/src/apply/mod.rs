//! How each `Write` changes the tables, written once for every backend
//! against [`Rows`]: `Apply::apply` hands each variant, with its fields,
//! to one function. The run, step, key-value, outbox, timer and schedule
//! writes are here; the message writes are in `queue`, the registry's and
//! the access tables' in `access`, the stored bytes by tenant in `usage`.
//!
//! Each function checks what may refuse its write before its first
//! write, so that a refused write stores nothing. The one exception: a
//! timer that fires for a run that is gone or has ended is removed as it
//! is refused. No function here decides what a record says: the engine
//! builds every run and step record, and a write decided on a run read
//! before names the number of records it saw (`run_at`).
//!
//! What is kept in step across the tables:
//! - `set_run` keeps `Running`, the index of runs to resume, in step with
//!   each run's record: a run is listed while it is running and not
//!   suspended;
//! - a timer has its row in `Timers`, `TimerKeys` and `RunTimers`, or in
//!   none of them, and a run that ended has no timers;
//! - definitions and components are stored once, by digest;
//! - a run has a lease only until it ends;
//! - a parked run (`Parked`) is running and has no lease: whatever takes
//!   it, or cancels it, removes it from `Parked`.

mod access;
mod queue;
mod snapshots;
mod usage;

use std::sync::Arc;

use crate::rows::{Key, Rows, Table, decode, decode_kv, encode_kv, number, read_number};
use crate::{
    Charge, Emitted, HostRecord, Lease, RunRecord, ScheduleRecord, Spawn, StoreError, TimerRef,
    TimerRow, What, Write, encode,
};
use weft_core::{KvEffects, Timestamp};

/// Applies `writes` to `rows` in order, one transaction: the answer for
/// each write (refusals are per write), or the error that failed the
/// transaction.
pub(crate) fn batch(
    rows: &mut dyn Rows,
    writes: &[&Write],
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let mut apply = Apply {
        rows,
        meter: usage::Meter::default(),
        freed: 0,
        subscribers: std::collections::HashMap::new(),
    };
    let mut results = Vec::with_capacity(writes.len());
    for write in writes {
        results.push(apply.apply(write)?);
    }
    apply.flush_usage()?;
    Ok(results)
}

/// Takes parked runs `ids` (each with its tenant, read from `Parked` in
/// this transaction) for `host`, each as a [`Write::Claim`] at its next
/// epoch would: the runs taken, in order. One that cannot be taken (it
/// ended, or a live host holds it) leaves `Parked` all the same.
pub(crate) fn claim_parked(
    rows: &mut dyn Rows,
    host: &str,
    ids: &[(String, String)],
) -> Result<Vec<(String, String)>, StoreError> {
    let mut apply = Apply {
        rows,
        meter: usage::Meter::default(),
        freed: 0,
        subscribers: std::collections::HashMap::new(),
    };
    let mut taken = Vec::with_capacity(ids.len());
    for (id, tenant) in ids {
        let lease = Lease::after(apply.lease_of(id)?.as_ref(), host);
        match apply.claim(id, &lease)? {
            Ok(()) => {
                apply.rows.delete(Table::Parked, Key::Str(id))?;
                taken.push((id.clone(), tenant.clone()));
            }
            // Driven by a host (so never free work), or ended: either way
            // not parked.
            Err(_) => {
                apply.rows.delete(Table::Parked, Key::Str(id))?;
            }
        }
    }
    apply.flush_usage()?;
    Ok(taken)
}

/// The rows [`claim_parked`] reads for `ids`, to fetch at once.
pub(crate) fn claim_reads(ids: &[(String, String)]) -> Vec<(Table, Key<'_>)> {
    let mut into = Vec::with_capacity(ids.len() * 4);
    for (id, _) in ids {
        into.extend([
            (Table::Runs, Key::Str(id.as_str())),
            (Table::Cancelled, Key::Str(id.as_str())),
            (Table::Leases, Key::Str(id.as_str())),
            (Table::Parked, Key::Str(id.as_str())),
        ]);
    }
    into
}

/// Adds to `into` the rows `write` will read when it is applied (most of
/// them): a backend for which each read is a round trip fetches them for
/// a whole batch at once.
pub(crate) fn reads<'w>(write: &'w Write, into: &mut Vec<(Table, Key<'w>)>) {
    let run = |into: &mut Vec<(Table, Key<'w>)>, id: &'w str| {
        into.extend([
            (Table::Runs, Key::Str(id)),
            (Table::Cancelled, Key::Str(id)),
            (Table::Leases, Key::Str(id)),
            (Table::Running, Key::Str(id)),
            (Table::Parked, Key::Str(id)),
        ]);
    };
    match write {
        Write::CreateRun {
            id,
            definition,
            components,
            idempotency,
            ..
        } => {
            into.push((Table::Runs, Key::Str(id)));
            into.push((Table::Definitions, Key::Str(&definition.0)));
            for (digest, _) in components {
                into.push((Table::Components, Key::Str(digest)));
            }
            if let Some(key) = idempotency {
                into.push((Table::Idempotency, Key::Str(key)));
            }
        }
        Write::CommitStep {
            id, seq, fired, kv, ..
        } => {
            into.extend([
                (Table::Cancelled, Key::Str(id)),
                (Table::Leases, Key::Str(id)),
                (Table::Running, Key::Str(id)),
                (Table::Steps, Key::StrU32(id, *seq)),
            ]);
            if let Some(fired) = fired {
                into.push((Table::Timers, timer_key(*fired)));
            }
            if let Some(kv) = kv {
                let space = kv.space.as_str();
                for key in kv.reads.keys().chain(kv.writes.keys()) {
                    into.push((Table::Kv, Key::StrStr(space, key)));
                }
            }
        }
        Write::FireTimer {
            fired,
            run: id,
            expect,
            ..
        } => {
            run(into, id);
            into.push((Table::Timers, timer_key(*fired)));
            into.push((Table::Steps, Key::StrU32(id, *expect)));
        }
        Write::Act {
            run: id,
            expect,
            timer,
            ..
        } => {
            run(into, id);
            into.push((Table::Steps, Key::StrU32(id, *expect)));
            if let Some(timer) = timer {
                into.push((Table::Timers, timer_key(*timer)));
            }
        }
        Write::MigrateRun {
            id,
            expect,
            definition,
            components,
            ..
        } => {
            run(into, id);
            into.push((Table::Steps, Key::StrU32(id, *expect)));
            into.push((Table::Definitions, Key::Str(&definition.0)));
            for (digest, _) in components {
                into.push((Table::Components, Key::Str(digest)));
            }
        }
        Write::CancelRun { id, expect, .. }
        | Write::PauseRun { id, expect, .. }
        | Write::RetryRun {
            run: id, expect, ..
        } => {
            run(into, id);
            into.push((Table::Steps, Key::StrU32(id, *expect)));
        }
        Write::UpdateRun { id, .. } | Write::StartRun { id, .. } | Write::Claim { run: id, .. } => {
            run(into, id);
        }
        Write::Delivery(id, _) => into.push((Table::Deliveries, Key::Str(id))),
        Write::Renew { host, .. } | Write::Forget { host, .. } => {
            into.push((Table::Hosts, Key::Str(host)));
        }
        _ => {}
    }
}

/// One transaction's writes being applied.
pub(crate) struct Apply<'r> {
    rows: &'r mut dyn Rows,
    /// The stored bytes this transaction has counted, by tenant.
    meter: usage::Meter,
    /// The bytes the write being applied gave back (key-value values it
    /// overwrote or deleted).
    freed: u64,
    /// Each channel's subscription keys, as read in this transaction.
    subscribers: std::collections::HashMap<String, Vec<String>>,
}

/// The refusal of a write by a host that does not hold run `id`'s lease.
fn fenced(id: &str, current: Option<&Lease>) -> StoreError {
    StoreError::Fenced {
        run: id.to_owned(),
        owner: current.map_or_else(|| "none".to_owned(), |lease| lease.host.clone()),
    }
}

/// The key of timer `timer`'s row.
fn timer_key(timer: TimerRef) -> Key<'static> {
    let (due, id) = timer.key();
    Key::U64U64(due, id)
}

impl Apply<'_> {
    /// True when run `id` was cancelled in the store, so that the process
    /// driving it must not write it on. (A run ends otherwise only through
    /// the process that drives it.) One lookup in a table that is almost
    /// always empty: this is on every commit's path.
    fn ended(&mut self, id: &str) -> Result<bool, StoreError> {
        self.rows.has(Table::Cancelled, Key::Str(id))
    }

    /// Stores run `id`'s record, and keeps the index of runs to resume and
    /// the run's timers in step: a run that ended has no timers.
    fn set_run(
        &mut self,
        id: &str,
        run: &[u8],
        running: bool,
        suspended: bool,
    ) -> Result<(), StoreError> {
        self.rows.put(Table::Runs, Key::Str(id), run)?;
        // Most commits leave the index as it was: look before writing.
        let listed = self.rows.has(Table::Running, Key::Str(id))?;
        if running && !suspended {
            if !listed {
                self.rows.put(Table::Running, Key::Str(id), &[])?;
            }
        } else if listed {
            self.rows.delete(Table::Running, Key::Str(id))?;
        }
        if !running {
            let timers = self.rows.under(Table::RunTimers, id)?;
            if !timers.is_empty() {
                // The tenant whose count the timers leave, from the run's
                // record rather than a read of each timer's.
                #[derive(serde::Deserialize)]
                struct Workflow {
                    workflow: String,
                }
                let workflow: Workflow = decode(id, run)?;
                let tenant = weft_core::tenant::of(&workflow.workflow);
                for (timer, due) in timers {
                    let key = (read_number(&due), timer.number());
                    self.remove_timer_of(id, key, Some(tenant))?;
                }
            }
            // Nobody drives a run that ended.
            self.rows.delete(Table::Leases, Key::Str(id))?;
        }
        Ok(())
    }

    fn insert_timer(&mut self, timer: &TimerRow) -> Result<(), StoreError> {
        let (due, id) = timer.key;
        self.rows
            .put(Table::Timers, Key::U64U64(due, id), &timer.record)?;
        self.rows.put(Table::TimerKeys, Key::U64U64(due, id), &[])?;
        self.rows
            .put(Table::RunTimers, Key::StrU64(&timer.run, id), &number(due))?;
        if let Some(tenant) = &timer.tenant {
            self.count_timer(tenant, true)?;
        }
        Ok(())
    }

    /// Removes run `run`'s timer `(due, id)`, and takes it off its
    /// tenant's count, which its record names (one written before timers
    /// were counted names none, and is in no count).
    fn remove_timer(&mut self, run: &str, (due, id): (u64, u64)) -> Result<(), StoreError> {
        #[derive(serde::Deserialize)]
        struct Counted {
            tenant: Option<String>,
        }
        let tenant = match self.rows.get(Table::Timers, Key::U64U64(due, id))? {
            Some(record) => serde_json::from_slice::<Counted>(&record)
                .ok()
                .and_then(|c| c.tenant),
            None => None,
        };
        self.remove_timer_of(run, (due, id), tenant.as_deref())
    }

    /// Removes run `run`'s timer `(due, id)`, and takes it off `tenant`'s
    /// count. (A timer written before timers were counted is taken off
    /// too: a count only ever errs low, never below zero.)
    fn remove_timer_of(
        &mut self,
        run: &str,
        (due, id): (u64, u64),
        tenant: Option<&str>,
    ) -> Result<(), StoreError> {
        if let Some(tenant) = tenant
            && !weft_core::mutation::on("timer-count-kept")
        {
            self.count_timer(tenant, false)?;
        }
        self.rows.delete(Table::Timers, Key::U64U64(due, id))?;
        self.rows.delete(Table::TimerKeys, Key::U64U64(due, id))?;
        self.rows.delete(Table::RunTimers, Key::StrU64(run, id))?;
        Ok(())
    }

    fn definition(&mut self, (digest, encoded): &(String, Vec<u8>)) -> Result<(), StoreError> {
        if !self.rows.has(Table::Definitions, Key::Str(digest))? {
            self.rows
                .put(Table::Definitions, Key::Str(digest), encoded)?;
        }
        self.spare(digest)
    }

    fn components(&mut self, pinned: &[(String, Arc<[u8]>)]) -> Result<(), StoreError> {
        for (digest, bytes) in pinned {
            if !self.rows.has(Table::Components, Key::Str(digest))? {
                self.rows.put(Table::Components, Key::Str(digest), bytes)?;
            }
            self.spare(digest)?;
        }
        Ok(())
    }
}

impl Apply<'_> {
    /// Applies one write, charging its tenant for what it stores (see
    /// `usage`). `Ok(Err(_))`: this write is refused and nothing of it was
    /// stored; `Err(_)`: the transaction failed.
    fn apply(&mut self, write: &Write) -> Result<Result<(), StoreError>, StoreError> {
        self.freed = 0;
        let outcome = self.dispatch(write)?;
        if outcome.is_ok()
            && let Some(charge) = write.charge()
        {
            self.count(charge)?;
        }
        Ok(outcome)
    }

    /// Hands `write` to the function for its variant. A charged write
    /// that may be refused is checked against its tenant's quota there,
    /// after the write's own refusals and before its first write.
    fn dispatch(&mut self, write: &Write) -> Result<Result<(), StoreError>, StoreError> {
        match write {
            Write::DeleteRun(id) => self.delete_run(id),
            Write::DeleteMessage(seq) => self.delete_message(*seq),
            Write::DeleteRevision { workflow, revision } => {
                self.delete_revision(workflow, *revision)
            }
            Write::MarkBlob { blob, digest, at } => self.mark_blob(*blob, digest, *at),
            Write::DeleteBlob {
                blob,
                digest,
                marked_by,
            } => self.delete_blob(*blob, digest, *marked_by),
            Write::ForgetKv {
                space,
                key,
                version,
                now,
            } => self.forget_kv(space, key, *version, *now),
            Write::CreateRun {
                id,
                tenant,
                run,
                definition,
                components,
                timer,
                idempotency,
                lease,
                parked,
                charge,
            } => self.create_run(
                id,
                tenant,
                run,
                definition,
                components,
                timer.as_ref(),
                idempotency.as_deref(),
                lease.as_ref(),
                parked.as_deref(),
                charge.as_ref(),
            ),
            Write::CommitStep {
                id,
                seq,
                step,
                run,
                running,
                suspended,
                timer,
                fired,
                kv,
                spawn,
                emitted,
                notice,
                fence,
                lease,
                charge,
            } => match self.leased(id, lease.as_ref())? {
                Err(refused) => Ok(Err(refused)),
                Ok(()) => self
                    .commit_step(
                        id,
                        *seq,
                        step,
                        run,
                        *running,
                        *suspended,
                        timer.as_ref(),
                        *fired,
                        kv.as_ref(),
                        spawn.as_deref(),
                        emitted.as_deref(),
                        fence,
                        charge.as_ref(),
                    )
                    .and_then(|outcome| self.notify_if(outcome, id, notice.as_deref())),
            },
            Write::Subscribe(row) => self.subscribe(row),
            Write::Retarget { key, from, to } => self.retarget(key, from, to),
            Write::Unsubscribe(key) => self.unsubscribe(key),
            Write::Delivery(id, op) => self.delivery(id, op),
            Write::Act {
                run,
                expect,
                record,
                wake,
                timer,
                lease,
                charge: _,
            } => self.act(run, *expect, record, wake, *timer, lease.as_ref()),
            Write::StartRun {
                outbox,
                id,
                tenant,
                run,
                lease,
            } => self.start_run(outbox, id, tenant, run, lease.as_ref()),
            Write::UpdateRun {
                id,
                run,
                running,
                notice,
                lease,
            } => match self.leased(id, lease.as_ref())? {
                Err(refused) => Ok(Err(refused)),
                Ok(()) => self
                    .update_run(id, run, *running, lease.is_some())
                    .and_then(|outcome| self.notify_if(outcome, id, notice.as_deref())),
            },
            Write::FireTimer {
                fired,
                run,
                expect,
                record,
                wake,
                lease,
            } => self.fire_timer(
                *fired,
                run,
                *expect,
                record.as_deref(),
                wake,
                lease.as_ref(),
            ),
            Write::Claim { run, lease } => self.claim(run, lease),
            Write::HoldQueue {
                subscription,
                lease,
            } => self.hold_queue(subscription, lease),
            Write::Renew { host, record } => {
                self.rows.put(Table::Hosts, Key::Str(host), record)?;
                Ok(Ok(()))
            }
            Write::Forget { host, expires_at } => self.forget(host, *expires_at),
            Write::CancelRun {
                id,
                expect,
                ended,
                notice,
                fence,
            } => self
                .cancel_run(id, *expect, ended, fence)
                .and_then(|outcome| self.notify_if(outcome, id, notice.as_deref())),
            Write::RetryRun {
                run,
                expect,
                record,
                wake,
                timer,
            } => self.retry_run(run, *expect, record, wake, timer.as_ref()),
            Write::MigrateRun {
                id,
                expect,
                run,
                definition,
                components,
            } => self.migrate_run(id, *expect, run, definition, components),
            Write::PauseRun {
                id,
                expect,
                run,
                pause,
                lease,
            } => self.pause_run(id, *expect, run, *pause, lease.as_ref()),
            Write::Schedule {
                key,
                expect,
                row,
                start,
            } => self.schedule(key, *expect, row.as_deref(), start.as_deref()),
            Write::Deploy {
                workflow,
                revision,
                record,
                definition,
            } => self.deploy(workflow, *revision, record, definition),
            Write::Access(write) => self.access(write),
            Write::AddPlugin {
                name,
                digest,
                record,
                bytes,
            } => self.add_plugin(name, digest, record, bytes),
            Write::StageSnapshot {
                data,
                store,
                at,
                first,
                entries,
            } => self.stage_snapshot(data, store, *at, *first, entries),
            Write::SealSnapshot(record) => self.seal_snapshot(record),
            Write::AbandonSnapshot(data) => self.abandon_snapshot(data),
            Write::DeleteSnapshot { store, revision } => self.delete_snapshot(store, *revision),
            Write::DropSnapshotEntries { data, keys, now } => {
                self.drop_snapshot_entries(data, keys, *now)
            }
            Write::ForgetSnapshotData { data, now } => self.forget_snapshot_data(data, *now),
        }
    }

    /// A new run, with its definition and components (each stored once),
    /// its deadline timer and the client's key for its start. Refused if a
    /// run with its id exists, or if the key started a run before.
    #[allow(clippy::too_many_arguments)] // One per field of `Write::CreateRun`.
    fn create_run(
        &mut self,
        id: &str,
        tenant: &str,
        run: &[u8],
        definition: &(String, Vec<u8>),
        components: &[(String, Arc<[u8]>)],
        timer: Option<&TimerRow>,
        idempotency: Option<&str>,
        lease: Option<&Lease>,
        parked: Option<&str>,
        charge: Option<&Charge>,
    ) -> Result<Result<(), StoreError>, StoreError> {
        if self.rows.has(Table::Runs, Key::Str(id))? {
            return Ok(Err(StoreError::Exists(What::Run(id.to_owned()))));
        }
        // A key whose run was deleted is free again.
        if let Some(key) = idempotency
            && let Some(run) = self.rows.get(Table::Idempotency, Key::Str(key))?
            && self
                .rows
                .has(Table::Runs, Key::Str(&String::from_utf8_lossy(&run)))?
        {
            return Ok(Err(StoreError::Duplicate {
                key: key.to_owned(),
                run: String::from_utf8_lossy(&run).into_owned(),
            }));
        }
        if let Err(refused) = self.admit(charge)? {
            return Ok(Err(refused));
        }
        if let Some(key) = idempotency {
            self.rows
                .put(Table::Idempotency, Key::Str(key), id.as_bytes())?;
        }
        self.definition(definition)?;
        self.components(components)?;
        self.rows.put(Table::Runs, Key::Str(id), run)?;
        if !weft_core::mutation::on("tenant-index-dropped") {
            self.rows
                .put(Table::TenantRuns, Key::StrStr(tenant, id), &[])?;
        }
        self.rows.put(Table::Running, Key::Str(id), &[])?;
        if let Some(timer) = timer {
            self.insert_timer(timer)?;
        }
        if let Some(lease) = lease {
            self.rows.put(Table::Leases, Key::Str(id), &encode(lease))?;
        } else if let Some(tenant) = parked {
            self.rows
                .put(Table::Parked, Key::Str(id), tenant.as_bytes())?;
        }
        Ok(Ok(()))
    }

    /// A step attempt's record and the run's next state, with what else
    /// the step did: its key-value writes, the child run it starts, the
    /// timer it fired and the one it set, the messages it emitted. Refused
    /// if the run was cancelled in the store, if its slot `(id, seq)` holds
    /// a record, if the timer it fired is gone, or if a key it read has
    /// changed since.
    #[allow(clippy::too_many_arguments)] // One per field of `Write::CommitStep`.
    fn commit_step(
        &mut self,
        id: &str,
        seq: u32,
        step: &[u8],
        run: &[u8],
        running: bool,
        suspended: bool,
        timer: Option<&TimerRow>,
        fired: Option<TimerRef>,
        kv: Option<&KvEffects>,
        spawn: Option<&Spawn>,
        emitted: Option<&Emitted>,
        fence: &[String],
        charge: Option<&Charge>,
    ) -> Result<Result<(), StoreError>, StoreError> {
        if self.ended(id)? {
            return Ok(Err(StoreError::RunEnded(id.to_owned())));
        }
        if let Err(refused) = self.slot_free(id, seq)? {
            return Ok(Err(refused));
        }
        if let Some(fired) = fired
            && !self.rows.has(Table::Timers, timer_key(fired))?
        {
            return Ok(Err(StoreError::TimerGone(fired.id)));
        }
        let versions = match kv {
            Some(effects) => match self.read_kv(effects)? {
                Ok(versions) => versions,
                Err(refused) => return Ok(Err(refused)),
            },
            None => Vec::new(),
        };
        if let Err(refused) = self.admit(charge)? {
            return Ok(Err(refused));
        }
        if let Some(TimerRow {
            tenant: Some(tenant),
            refusable: true,
            ..
        }) = timer
            && let Err(refused) = self.admit_timer(tenant, fired.is_some())?
        {
            return Ok(Err(refused));
        }
        if let Some(effects) = kv {
            self.write_kv(effects, &versions)?;
        }
        if let Some(spawn) = spawn {
            self.definition(&spawn.definition)?;
            self.components(&spawn.components)?;
            let (row, encoded) = &spawn.outbox;
            self.rows.put(Table::Outbox, Key::Str(row), encoded)?;
        }
        if let Some(fired) = fired {
            self.remove_timer(id, fired.key())?;
        }
        if let Some(timer) = timer {
            self.insert_timer(timer)?;
        }
        if let Some(emitted) = emitted {
            self.emit(id, emitted)?;
        }
        self.rows.put(Table::Steps, Key::StrU32(id, seq), step)?;
        self.set_run(id, run, running, suspended)?;
        self.fence(fence)?;
        Ok(Ok(()))
    }

    /// Marks child runs `children` so that none of their commits lands
    /// from now on, but their cancellation.
    fn fence(&mut self, children: &[String]) -> Result<(), StoreError> {
        for child in children {
            self.rows.put(Table::Cancelled, Key::Str(child), &[])?;
        }
        Ok(())
    }

    /// Checks `effects`' reads: refused if a key it read has changed
    /// since. Answers the version of each key it writes, in order, and
    /// notes the bytes of the values it will overwrite or delete (they are
    /// given back: `Apply::freed`).
    fn read_kv(&mut self, effects: &KvEffects) -> Result<Result<Vec<u64>, StoreError>, StoreError> {
        let space = effects.space.as_str();
        for (key, read) in &effects.reads {
            let now = self
                .rows
                .get(Table::Kv, Key::StrStr(space, key))?
                .map_or(0, |v| decode_kv(&v).version);
            if now != *read {
                return Ok(Err(StoreError::KvConflict {
                    space: space.to_owned(),
                    key: key.clone(),
                }));
            }
        }
        let mut versions = Vec::with_capacity(effects.writes.len());
        let mut floor = None;
        for key in effects.writes.keys() {
            let (version, old) = match self.rows.get(Table::Kv, Key::StrStr(space, key))? {
                Some(v) => {
                    let old = decode_kv(&v);
                    (old.version, old.value)
                }
                // A key with no row (never set, or its tombstone
                // forgotten) starts above the space's floor.
                None => (*floor.get_or_insert(self.kv_floor(space)?), None),
            };
            if let Some(old) = old {
                self.freed += u64::try_from(key.len() + old.len()).unwrap_or(0);
            }
            versions.push(version);
        }
        Ok(Ok(versions))
    }

    /// The highest version of a tombstone forgotten in `space` (see
    /// [`Write::ForgetKv`]).
    fn kv_floor(&mut self, space: &str) -> Result<u64, StoreError> {
        Ok(self
            .rows
            .get(Table::Kv, Key::StrStr("", space))?
            .map_or(0, |v| decode_kv(&v).version))
    }

    /// Drops tombstone `key` of `space` at `version` (see
    /// [`Write::ForgetKv`]). Never refused.
    fn forget_kv(
        &mut self,
        space: &str,
        key: &str,
        version: u64,
        now: u64,
    ) -> Result<Result<(), StoreError>, StoreError> {
        if space.is_empty() {
            return Ok(Ok(()));
        }
        let Some(row) = self.rows.get(Table::Kv, Key::StrStr(space, key))? else {
            return Ok(Ok(()));
        };
        let row = decode_kv(&row);
        // A live value, or another version than the one found gone, stays.
        if row.live(now).is_some() || row.version != version {
            return Ok(Ok(()));
        }
        if self.kv_floor(space)? < version {
            self.rows.put(
                Table::Kv,
                Key::StrStr("", space),
                &encode_kv(version, None, None),
            )?;
        }
        self.rows.delete(Table::Kv, Key::StrStr(space, key))?;
        // A deleted key was charged its key's bytes; an expired one, its
        // value's too.
        let bytes = key.len() + row.value.as_ref().map_or(0, String::len);
        self.give_back(
            weft_core::tenant::of(space.strip_prefix("workflow/").unwrap_or(space)),
            u64::try_from(bytes).unwrap_or(u64::MAX),
        )?;
        Ok(Ok(()))
    }

    /// Writes `effects`' keys, each at the version after the one
    /// [`Apply::read_kv`] answered.
    fn write_kv(&mut self, effects: &KvEffects, versions: &[u64]) -> Result<(), StoreError> {
        let space = effects.space.as_str();
        for ((key, value), version) in effects.writes.iter().zip(versions) {
            let expires_at = effects.expires.get(key).copied();
            let encoded = encode_kv(version + 1, value.as_deref(), expires_at);
            self.rows
                .put(Table::Kv, Key::StrStr(space, key), &encoded)?;
        }
        Ok(())
    }

    /// Carries out the outbox row `outbox`, which starts run `id`: records
    /// the run unless one with its id exists, and closes the row. Never
    /// refused.
    fn start_run(
        &mut self,
        outbox: &str,
        id: &str,
        tenant: &str,
        run: &[u8],
        lease: Option<&Lease>,
    ) -> Result<Result<(), StoreError>, StoreError> {
        // A row carried out already (by another host, or by a write whose
        // answer was lost) is not carried out again, and says so
        // (`Exists`): the child may have run, or ended and gone, since. A child fenced off by its parent's
        // cancellation before it was recorded is never started.
        if !self.rows.has(Table::Outbox, Key::Str(outbox))?
            && !weft_core::mutation::on("outbox-row-carried-twice")
        {
            return Ok(Err(StoreError::Exists(What::Run(id.to_owned()))));
        }
        if !self.rows.has(Table::Runs, Key::Str(id))? && !self.ended(id)? {
            self.rows.put(Table::Runs, Key::Str(id), run)?;
            self.rows
                .put(Table::TenantRuns, Key::StrStr(tenant, id), &[])?;
            self.rows.put(Table::Running, Key::Str(id), &[])?;
            if let Some(lease) = lease {
                self.rows.put(Table::Leases, Key::Str(id), &encode(lease))?;
            }
        }
        self.rows.delete(Table::Outbox, Key::Str(outbox))?;
        Ok(Ok(()))
    }

    /// Run `id`'s new state alone (`leased`: written under the driver's
    /// lease). Refused if the run was cancelled in the store, or has ended.
    fn update_run(
        &mut self,
        id: &str,
        run: &[u8],
        running: bool,
        leased: bool,
    ) -> Result<Result<(), StoreError>, StoreError> {
        // Cancelled, or ended already: a run ends once. A leased write was
        // checked already (a run's lease goes when it ends), so only a
        // write of no driver's, which may come late, reads the record.
        if self.ended(id)? || (!leased && self.run_ended(id)?) {
            return Ok(Err(StoreError::RunEnded(id.to_owned())));
        }
        self.set_run(id, run, running, false)?;
        Ok(Ok(()))
    }

    /// Fires timer `fired` of run `id`: stores the fire's `record` at
    /// `(id, expect)` and `wake` as the run, awake, and removes the timer.
    /// Refused unless the timer is pending, its run is running, and the run
    /// has `expect` records.
    fn fire_timer(
        &mut self,
        fired: TimerRef,
        id: &str,
        expect: u32,
        record: Option<&[u8]>,
        wake: &[u8],
        lease: Option<&Lease>,
    ) -> Result<Result<(), StoreError>, StoreError> {
        if !self.rows.has(Table::Timers, timer_key(fired))? {
            return Ok(Err(StoreError::TimerGone(fired.id)));
        }
        let (paused, workflow) = match self.run_at(id, expect)? {
            Ok(run) => {
                if let Err(refused) = decided_on(id, &run, wake, true)? {
                    return Ok(Err(refused));
                }
                if let Err(refused) = self.take(id, lease, run.suspended)? {
                    return Ok(Err(refused));
                }
                (run.paused, run.workflow)
            }
            // Fenced off by its parent's cancellation, not cancelled yet:
            // the timer stays for the cancellation to remove.
            Err(StoreError::RunEnded(_)) if !self.run_ended(id)? => {
                return Ok(Err(StoreError::RunEnded(id.to_owned())));
            }
            Err(StoreError::NotFound(_) | StoreError::RunEnded(_)) => {
                // Its run is gone or ended: the timer wakes nothing.
                self.remove_timer(id, fired.key())?;
                return Ok(Err(StoreError::TimerGone(fired.id)));
            }
            Err(refused) => return Ok(Err(refused)),
        };
        if let Some(record) = record {
            self.rows
                .put(Table::Steps, Key::StrU32(id, expect), record)?;
            // Counted, never refused (a run must be able to wake), so
            // that deleting the run gives back only what was counted.
            self.add_use(weft_core::tenant::of(&workflow), record.len() as u64)?;
        }
        self.remove_timer(id, fired.key())?;
        // A paused run stays asleep: its fire waits for its resume (the
        // fire was decided with the pause it has now).
        self.set_run(id, wake, true, paused.is_some())?;
        Ok(Ok(()))
    }

    /// Cancels run `id`: stores `ended` as its record and marks it
    /// cancelled; its timers go with it, and children `fence` are fenced
    /// off. Refused if there is no such run, if it has ended, or if it
    /// does not have `expect` records. A run fenced off by its parent's
    /// cancellation may still be cancelled.
    fn cancel_run(
        &mut self,
        id: &str,
        expect: u32,
        ended: &[u8],
        fence: &[String],
    ) -> Result<Result<(), StoreError>, StoreError> {
        if let Err(refused) = self.run_in(id, expect, true)? {
            return Ok(Err(refused));
        }
        self.set_run(id, ended, false, false)?;
        self.rows.put(Table::Cancelled, Key::Str(id), &[])?;
        // A parked run ends here too, never taken.
        self.rows.delete(Table::Parked, Key::Str(id))?;
        self.fence(fence)?;
        Ok(Ok(()))
    }

    /// The retry of ended run `id` (see [`Write::RetryRun`]).
    fn retry_run(
        &mut self,
        id: &str,
        expect: u32,
        record: &[u8],
        wake: &[u8],
        timer: Option<&TimerRow>,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let Some(run) = self.stored_run(id)? else {
            return Ok(Err(StoreError::NotFound(What::Run(id.to_owned()))));
        };
        if !run.state.is_terminal() {
            return Ok(Err(StoreError::Busy { run: id.to_owned() }));
        }
        if run.step_records != expect {
            return Ok(Err(StoreError::Changed(What::Run(id.to_owned()))));
        }
        if let Err(refused) = self.slot_free(id, expect)? {
            return Ok(Err(refused));
        }
        self.rows
            .put(Table::Steps, Key::StrU32(id, expect), record)?;
        // Counted, never refused, as a fire's record is.
        self.add_use(weft_core::tenant::of(&run.workflow), record.len() as u64)?;
        // A cancelled run is cancelled no more. Its lease names no host, so
        // whoever claims it first drives it, at an epoch above any the run
        // had before its end (which took its lease row): epochs move on by
        // one per hold, and a lease freed by a resume or a move starts at
        // 2^32 times the run's record count plus one; a retry's, 2^31
        // above that. A host that still holds the run in memory from before
        // its end is refused.
        self.rows.delete(Table::Cancelled, Key::Str(id))?;
        self.set_run(id, wake, true, false)?;
        let free = Lease {
            host: String::new(),
            epoch: retry_epoch(expect),
        };
        self.rows.put(Table::Leases, Key::Str(id), &encode(&free))?;
        if let Some(timer) = timer {
            self.insert_timer(timer)?;
        }
        Ok(Ok(()))
    }

    /// A pause or a resume of run `id` (see [`Write::PauseRun`]).
    fn pause_run(
        &mut self,
        id: &str,
        expect: u32,
        run: &[u8],
        pause: bool,
        lease: Option<&Lease>,
    ) -> Result<Result<(), StoreError>, StoreError> {
        if let Err(refused) = self.leased(id, lease)? {
            return Ok(Err(refused));
        }
        let stored = match self.run_at(id, expect)? {
            Ok(stored) => stored,
            Err(refused) => return Ok(Err(refused)),
        };
        if let Err(refused) = decided_on(id, &stored, run, false)? {
            return Ok(Err(refused));
        }
        if pause {
            // Without a lease, only a run nobody holds in memory.
            if lease.is_none() && (!stored.suspended || stored.paused.is_some()) {
                return Ok(Err(StoreError::Busy { run: id.to_owned() }));
            }
            self.set_run(id, run, true, true)?;
            return Ok(Ok(()));
        }
        if stored.paused.is_none() {
            return Ok(Err(StoreError::Changed(What::Run(id.to_owned()))));
        }
        self.set_run(id, run, true, false)?;
        self.free_lease(id, expect)?;
        Ok(Ok(()))
    }

    /// The move of run `id` to another revision (see [`Write::MigrateRun`]).
    fn migrate_run(
        &mut self,
        id: &str,
        expect: u32,
        run: &[u8],
        definition: &(String, Vec<u8>),
        components: &[(String, Arc<[u8]>)],
    ) -> Result<Result<(), StoreError>, StoreError> {
        let stored = match self.run_at(id, expect)? {
            Ok(stored) => stored,
            Err(refused) => return Ok(Err(refused)),
        };
        // A fire without a record (a retry delay's) may have woken it, or
        // a pause or a resume landed, since the move was decided.
        match own(decode::<RunRecord>(id, run))? {
            Ok(moved) if moved.suspended == stored.suspended && moved.paused == stored.paused => {}
            Ok(_) => return Ok(Err(StoreError::Changed(What::Run(id.to_owned())))),
            Err(refused) => return Ok(Err(refused)),
        }
        self.definition(definition)?;
        self.components(components)?;
        self.set_run(id, run, true, stored.suspended)?;
        // Whoever drives it now is behind the store: its next commit is
        // refused, and the next claim reads the new revision.
        self.free_lease(id, expect)?;
        Ok(Ok(()))
    }

    /// Takes run `id`'s lease from whoever holds it (a run with `expect`
    /// records): it names no host now, at an epoch above the one held and
    /// at least `(expect + 1) << 32`, so the holder's next commit is
    /// refused and whoever claims the run first drives it. A run with no
    /// lease (parked) keeps none.
    fn free_lease(&mut self, id: &str, expect: u32) -> Result<(), StoreError> {
        if let Some(current) = self.lease_of(id)? {
            let free = Lease {
                host: String::new(),
                epoch: (current.epoch + 1).max((u64::from(expect) + 1) << 32),
            };
            self.rows.put(Table::Leases, Key::Str(id), &encode(&free))?;
        }
        Ok(())
    }

    /// An answer to an `await` step of suspended run `id`, decided on the
    /// run at `expect` records (whether the step waits is the engine's to
    /// say): stores `record` at `(id, expect)` and `wake` as the run, and
    /// removes the wait's timeout. Refused unless the run is suspended with
    /// `expect` records and the timeout is pending.
    pub(super) fn act(
        &mut self,
        id: &str,
        expect: u32,
        record: &[u8],
        wake: &[u8],
        timer: Option<TimerRef>,
        lease: Option<&Lease>,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let run = match self.run_at(id, expect)? {
            Ok(run) => run,
            Err(refused) => return Ok(Err(refused)),
        };
        if !run.suspended {
            return Ok(Err(StoreError::Busy { run: id.to_owned() }));
        }
        if let Err(refused) = decided_on(id, &run, wake, true)? {
            return Ok(Err(refused));
        }
        if let Some(timer) = timer
            && !self.rows.has(Table::Timers, timer_key(timer))?
        {
            return Ok(Err(StoreError::TimerGone(timer.id)));
        }
        if let Err(refused) = self.take(id, lease, true)? {
            return Ok(Err(refused));
        }
        if let Some(timer) = timer {
            self.remove_timer(id, timer.key())?;
        }
        self.rows
            .put(Table::Steps, Key::StrU32(id, expect), record)?;
        // A paused run stays asleep: the answer waits for its resume (it
        // was decided with the pause the run has now).
        self.set_run(id, wake, true, run.paused.is_some())?;
        Ok(Ok(()))
    }

    /// Refuses a commit of run `id` unless `lease` is its lease now (no
    /// lease: a write of no driver's, not checked).
    fn leased(
        &mut self,
        id: &str,
        lease: Option<&Lease>,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let Some(lease) = lease else {
            return Ok(Ok(()));
        };
        let current = match own(self.lease_of(id))? {
            Ok(current) => current,
            Err(e) => return Ok(Err(e)),
        };
        if current.as_ref() == Some(lease) || weft_core::mutation::on("lease-unchecked") {
            return Ok(Ok(()));
        }
        // Cancelled (which drops the lease) says more than "not yours".
        if self.ended(id)? {
            return Ok(Err(StoreError::RunEnded(id.to_owned())));
        }
        Ok(Err(fenced(id, current.as_ref())))
    }

    /// Whether run `id`'s record says it ended (not only marked cancelled).
    fn run_ended(&mut self, id: &str) -> Result<bool, StoreError> {
        Ok(self
            .stored_run(id)?
            .is_none_or(|run| run.state.is_terminal()))
    }

    /// Run `id`'s stored record, decoded.
    fn stored_run(&mut self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.rows
            .get(Table::Runs, Key::Str(id))?
            .map(|bytes| decode::<RunRecord>(id, &bytes))
            .transpose()
    }

    /// Run `id`'s lease now.
    fn lease_of(&mut self, id: &str) -> Result<Option<Lease>, StoreError> {
        self.rows
            .get(Table::Leases, Key::Str(id))?
            .map(|bytes| decode::<Lease>(id, &bytes))
            .transpose()
    }

    /// Gives run `id` to `lease` (none: not checked), the last check of a
    /// write that wakes the run: no change if it holds the lease already;
    /// else refused unless nobody drives the run (`suspended`, no lease,
    /// or its host gone) and `lease` is the next epoch. Writes only when
    /// it passes, so call it after the write's other checks.
    fn take(
        &mut self,
        id: &str,
        lease: Option<&Lease>,
        suspended: bool,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let Some(lease) = lease else {
            return Ok(Ok(()));
        };
        let current = match own(self.lease_of(id))? {
            Ok(current) => current,
            Err(e) => return Ok(Err(e)),
        };
        if current.as_ref() == Some(lease) {
            return Ok(Ok(()));
        }
        let free = match &current {
            None => true,
            Some(held) => suspended || !self.host_listed(&held.host)?,
        };
        if !free || *lease != Lease::after(current.as_ref(), &lease.host) {
            return Ok(Err(fenced(id, current.as_ref())));
        }
        self.rows.put(Table::Leases, Key::Str(id), &encode(lease))?;
        // Only a run without a lease can be parked: taken, it is not.
        if current.is_none() {
            self.rows.delete(Table::Parked, Key::Str(id))?;
        }
        Ok(Ok(()))
    }

    /// Whether host `host` has a row that decodes. A row that does not is
    /// set aside by the listing of hosts, so no host ever judges it gone
    /// and forgets it: its runs are free, as a gone host's are (a live
    /// host's next commit of one is fenced).
    fn host_listed(&mut self, host: &str) -> Result<bool, StoreError> {
        let Some(bytes) = self.rows.get(Table::Hosts, Key::Str(host))? else {
            return Ok(false);
        };
        Ok(decode::<HostRecord>(host, &bytes).is_ok())
    }

    /// Deletes ended run `id` and what is only its (see
    /// [`Write::DeleteRun`]).
    fn delete_run(&mut self, id: &str) -> Result<Result<(), StoreError>, StoreError> {
        let Some(bytes) = self.rows.get(Table::Runs, Key::Str(id))? else {
            return Ok(Err(StoreError::NotFound(What::Run(id.to_owned()))));
        };
        let run: RunRecord = decode(id, &bytes)?;
        let needed = |why: String| {
            Ok(Err(StoreError::Needed {
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
    fn delete_revision(
        &mut self,
        workflow: &str,
        revision: u32,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let what = What::Revision {
            workflow: workflow.to_owned(),
            revision,
        };
        let revisions = self.rows.under(Table::Deployments, workflow)?;
        if !revisions
            .iter()
            .any(|(r, _)| r.number() == u64::from(revision))
        {
            return Ok(Err(StoreError::NotFound(what)));
        }
        let newest = revisions.iter().map(|(r, _)| r.number()).max();
        let needed = |why: String| {
            Ok(Err(StoreError::Needed {
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
    fn mark_blob(
        &mut self,
        blob: crate::Blob,
        digest: &str,
        at: Timestamp,
    ) -> Result<Result<(), StoreError>, StoreError> {
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
    fn spare(&mut self, digest: &str) -> Result<(), StoreError> {
        if self.rows.has(Table::Doomed, Key::Str(digest))? {
            self.rows.delete(Table::Doomed, Key::Str(digest))?;
        }
        Ok(())
    }

    /// Deletes a stored definition or component that an earlier pass
    /// marked and nothing refers to (see [`Write::DeleteBlob`]).
    fn delete_blob(
        &mut self,
        blob: crate::Blob,
        digest: &str,
        marked_by: Timestamp,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let (table, referrers) = match blob {
            crate::Blob::Definition => (Table::Definitions, Table::Deployments),
            crate::Blob::Component => (Table::Components, Table::Plugins),
        };
        let needed = |why: String| {
            Ok(Err(StoreError::Needed {
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

    /// Takes run `id` under `lease` (see [`Write::Claim`]).
    fn claim(&mut self, id: &str, lease: &Lease) -> Result<Result<(), StoreError>, StoreError> {
        // A row that does not decode refuses its own claim, not the batch:
        // the claims of a resume share one.
        let run = match own(self.stored_run(id))? {
            Ok(Some(run)) => run,
            Ok(None) => return Ok(Err(StoreError::NotFound(What::Run(id.to_owned())))),
            Err(e) => return Ok(Err(e)),
        };
        if run.state.is_terminal() || self.ended(id)? {
            return Ok(Err(StoreError::RunEnded(id.to_owned())));
        }
        self.take(id, Some(lease), run.suspended)
    }

    /// Takes subscription `key`'s queue under `lease` (see
    /// [`Write::HoldQueue`]): as a run is taken, its lease a row of the
    /// leases table beside the runs', never suspended.
    fn hold_queue(
        &mut self,
        key: &str,
        lease: &Lease,
    ) -> Result<Result<(), StoreError>, StoreError> {
        if !self.rows.has(Table::Subscriptions, Key::Str(key))? {
            return Ok(Err(StoreError::NotFound(What::Subscription(
                key.to_owned(),
            ))));
        }
        self.take(&crate::queue_lease(key), Some(lease), false)
    }

    /// Declares host `host` gone (see [`Write::Forget`]).
    fn forget(
        &mut self,
        host: &str,
        expires_at: weft_core::Timestamp,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let Some(row) = self
            .rows
            .get(Table::Hosts, Key::Str(host))?
            .map(|bytes| decode::<HostRecord>(host, &bytes))
            .transpose()?
        else {
            return Ok(Err(StoreError::NotFound(What::Host(host.to_owned()))));
        };
        if row.expires_at != expires_at {
            return Ok(Err(StoreError::Changed(What::Host(host.to_owned()))));
        }
        self.rows.delete(Table::Hosts, Key::Str(host))?;
        Ok(Ok(()))
    }

    /// Refuses a record for slot `(id, seq)` when one is there: a stored
    /// record is never replaced.
    fn slot_free(&mut self, id: &str, seq: u32) -> Result<Result<(), StoreError>, StoreError> {
        if self.rows.has(Table::Steps, Key::StrU32(id, seq))? {
            let run = id.to_owned();
            return Ok(Err(StoreError::Exists(What::Step { run, seq })));
        }
        Ok(Ok(()))
    }

    /// The stored run `id`, if it is running (or suspended) with `expect`
    /// step records and its next slot free: the condition of every write
    /// decided on a run read before. `Ok(Err(_))`: [`StoreError::NotFound`],
    /// [`StoreError::RunEnded`] or [`StoreError::Changed`].
    pub(super) fn run_at(
        &mut self,
        id: &str,
        expect: u32,
    ) -> Result<Result<RunRecord, StoreError>, StoreError> {
        self.run_in(id, expect, false)
    }

    /// [`Apply::run_at`]; `fenced`: a run marked cancelled whose record
    /// has not ended yet passes (its cancellation is being written).
    fn run_in(
        &mut self,
        id: &str,
        expect: u32,
        fenced: bool,
    ) -> Result<Result<RunRecord, StoreError>, StoreError> {
        let Some(run) = self.stored_run(id)? else {
            return Ok(Err(StoreError::NotFound(What::Run(id.to_owned()))));
        };
        if run.state.is_terminal() || (!fenced && self.ended(id)?) {
            return Ok(Err(StoreError::RunEnded(id.to_owned())));
        }
        if run.step_records != expect {
            return Ok(Err(StoreError::Changed(What::Run(id.to_owned()))));
        }
        // Not implied by the count: an `UpdateRun` decided on an older
        // record can set `step_records` back (F4).
        if let Err(refused) = self.slot_free(id, expect)? {
            return Ok(Err(refused));
        }
        Ok(Ok(run))
    }

    /// Writes cron trigger `key`'s row (`None` removes it), with the run
    /// its fire starts. With `expect`, refused unless the stored row is at
    /// that version (0: there is none); a refusal of `start` is this
    /// write's.
    fn schedule(
        &mut self,
        key: &str,
        expect: Option<u64>,
        row: Option<&[u8]>,
        start: Option<&Write>,
    ) -> Result<Result<(), StoreError>, StoreError> {
        if let Some(expect) = expect {
            let stored = self
                .rows
                .get(Table::Schedules, Key::Str(key))?
                .map(|bytes| decode::<ScheduleRecord>(key, &bytes))
                .transpose();
            // Version 0 stands for "no such row yet". A row that does not
            // decode counts as none: it never fires (listings set it
            // aside), and a trigger made again replaces it.
            let found = match own(stored)? {
                Ok(stored) => stored.map_or(0, |s| s.version),
                Err(_) => 0,
            };
            if found != expect {
                let what = What::Schedule(key.to_owned());
                return Ok(Err(if expect == 0 {
                    StoreError::Exists(what)
                } else {
                    StoreError::Changed(what)
                }));
            }
        }
        if let Some(start) = start
            && let Err(refused) = self.apply(start)?
        {
            return Ok(Err(refused));
        }
        match row {
            Some(row) => self.rows.put(Table::Schedules, Key::Str(key), row)?,
            None => {
                self.rows.delete(Table::Schedules, Key::Str(key))?;
            }
        };
        Ok(Ok(()))
    }
}

/// The epoch of the lease a retry of a run with `records` step records
/// leaves (naming no host): above every epoch the run can have had with
/// that many records.
pub fn retry_epoch(records: u32) -> u64 {
    ((u64::from(records) + 1) << 32) + (1 << 31)
}

/// Refuses a write of run `id` as `incoming` (an encoded run record)
/// decided on the run before it was moved to another revision of its
/// workflow, or (with `pause`) before it was paused or resumed: none of
/// these adds a record, so the record count alone does not tell, and the
/// write would undo it. The writer reads the run again and decides anew.
fn decided_on(
    id: &str,
    stored: &RunRecord,
    incoming: &[u8],
    pause: bool,
) -> Result<Result<(), StoreError>, StoreError> {
    let incoming: RunRecord = match own(decode(id, incoming))? {
        Ok(incoming) => incoming,
        Err(refused) => return Ok(Err(refused)),
    };
    let moved = incoming.definition != stored.definition
        && !weft_core::mutation::on("migration-overwritten");
    let paused =
        pause && incoming.paused != stored.paused && !weft_core::mutation::on("fire-wakes-paused");
    if moved || paused {
        return Ok(Err(StoreError::Changed(What::Run(id.to_owned()))));
    }
    Ok(Ok(()))
}

/// `read`, with a row that does not decode as a refusal of the write that
/// read it (the inner error) rather than a failure of its batch.
fn own<T>(read: Result<T, StoreError>) -> Result<Result<T, StoreError>, StoreError> {
    match read {
        Ok(value) => Ok(Ok(value)),
        Err(e @ StoreError::Codec { .. }) => Ok(Err(e)),
        Err(e) => Err(e),
    }
}
