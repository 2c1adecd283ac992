//! How each `Write` changes the tables, written once for every backend
//! against [`Rows`]: `Apply::apply` hands each variant, with its fields,
//! to one function (`dispatch`, here). A run's life and the reads its
//! writes are decided on are in `runs`; key-value spaces in `kv`; leases
//! and hosts' rows in `leases`; timers and triggers in `timers`; deletes of
//! runs, revisions and blobs in `delete`; messages in `queue`; the
//! registry's and the access tables' in `access`; snapshot stores in
//! `snapshots`; the stored bytes by tenant in `usage`.
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
mod delete;
mod kv;
mod leases;
mod queue;
mod runs;
mod snapshots;
mod timers;
mod usage;

use crate::rows::{Key, Rows, Table, decode};
use crate::{Lease, Refused, RunRecord, StoreError, TimerRef, What, Write};

/// Applies `writes` to `rows` in order, one transaction: the answer for
/// each write (refusals are per write), or the error that failed the
/// transaction.
pub(crate) fn batch(
    rows: &mut dyn Rows,
    writes: &[&Write],
) -> Result<Vec<Result<(), Refused>>, StoreError> {
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
fn fenced(id: &str, current: Option<&Lease>) -> Refused {
    Refused::Fenced {
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
    /// Applies one write, charging its tenant for what it stores (see
    /// `usage`). `Ok(Err(_))`: this write is refused and nothing of it was
    /// stored; `Err(_)`: the transaction failed.
    fn apply(&mut self, write: &Write) -> Result<Result<(), Refused>, StoreError> {
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
    fn dispatch(&mut self, write: &Write) -> Result<Result<(), Refused>, StoreError> {
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
}

/// The epoch of the lease a retry of a run with `records` step records
/// leaves (naming no host): above every epoch the run can have had with
/// that many records.
pub fn retry_epoch(records: u32) -> u64 {
    ((u64::from(records) + 1) << 32) + (1 << 31)
}

/// Refuses a write of run `id` as `incoming` (an encoded run record)
/// decided on the run before it was moved to another revision of its
/// workflow, or (with `check_pause`) before it was paused or resumed: none
/// of these adds a record, so the record count alone does not tell, and
/// the write would undo it. With `check_pause`, a record that names a
/// pause must be asleep too: one awake would leave the run's record and
/// the `Running` index at odds. The writer reads the run again and decides
/// anew.
fn decided_on(
    id: &str,
    stored: &RunRecord,
    incoming: &[u8],
    check_pause: bool,
) -> Result<Result<(), Refused>, StoreError> {
    let incoming: RunRecord = match own(decode(id, incoming))? {
        Ok(incoming) => incoming,
        Err(refused) => return Ok(Err(refused)),
    };
    let moved = incoming.definition != stored.definition
        && !weft_core::mutation::on("migration-overwritten");
    let paused = check_pause
        && (incoming.paused != stored.paused || (incoming.paused.is_some() && !incoming.suspended))
        && !weft_core::mutation::on("fire-wakes-paused");
    if moved || paused {
        return Ok(Err(Refused::Changed(What::Run(id.to_owned()))));
    }
    Ok(Ok(()))
}

/// `read`, with a row that does not decode as a refusal of the write that
/// read it (the inner error) rather than a failure of its batch.
fn own<T>(read: Result<T, StoreError>) -> Result<Result<T, Refused>, StoreError> {
    match read {
        Ok(value) => Ok(Ok(value)),
        Err(StoreError::Codec { key, message }) => Ok(Err(Refused::Unreadable { key, message })),
        Err(e) => Err(e),
    }
}
