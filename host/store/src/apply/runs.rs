//! A run's life in the store: created, its steps committed, started,
//! updated, cancelled, retried, paused or resumed, moved to another
//! revision, answered; and the reads every such write is decided on.

use std::sync::Arc;

use super::{Apply, decided_on, own, retry_epoch, timer_key};
use crate::rows::{Key, Table, decode, read_number};
use crate::{
    Charge, Emitted, Lease, Refused, RunRecord, Spawn, StoreError, TimerRef, TimerRow, What, encode,
};
use weft_core::KvEffects;

impl Apply<'_> {
    /// A new run, with its definition and components (each stored once),
    /// its deadline timer and the client's key for its start. Refused if a
    /// run with its id exists, or if the key started a run before.
    #[allow(clippy::too_many_arguments)] // One per field of `Write::CreateRun`.
    pub(super) fn create_run(
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
    ) -> Result<Result<(), Refused>, StoreError> {
        if self.rows.has(Table::Runs, Key::Str(id))? {
            return Ok(Err(Refused::Exists(What::Run(id.to_owned()))));
        }
        // A key whose run was deleted is free again.
        if let Some(key) = idempotency
            && let Some(run) = self.rows.get(Table::Idempotency, Key::Str(key))?
            && self
                .rows
                .has(Table::Runs, Key::Str(&String::from_utf8_lossy(&run)))?
        {
            return Ok(Err(Refused::Duplicate {
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
    pub(super) fn commit_step(
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
    ) -> Result<Result<(), Refused>, StoreError> {
        if self.ended(id)? {
            return Ok(Err(Refused::RunEnded(id.to_owned())));
        }
        if let Err(refused) = self.slot_free(id, seq)? {
            return Ok(Err(refused));
        }
        if let Some(fired) = fired
            && !self.rows.has(Table::Timers, timer_key(fired))?
        {
            return Ok(Err(Refused::TimerGone(fired.id)));
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
    pub(super) fn fence(&mut self, children: &[String]) -> Result<(), StoreError> {
        for child in children {
            self.rows.put(Table::Cancelled, Key::Str(child), &[])?;
        }
        Ok(())
    }

    /// Carries out the outbox row `outbox`, which starts run `id`: records
    /// the run unless one with its id exists, and closes the row. Never
    /// refused.
    pub(super) fn start_run(
        &mut self,
        outbox: &str,
        id: &str,
        tenant: &str,
        run: &[u8],
        lease: Option<&Lease>,
    ) -> Result<Result<(), Refused>, StoreError> {
        // A row carried out already (by another host, or by a write whose
        // answer was lost) is not carried out again, and says so
        // (`Exists`): the child may have run, or ended and gone, since. A child fenced off by its parent's
        // cancellation before it was recorded is never started.
        if !self.rows.has(Table::Outbox, Key::Str(outbox))?
            && !weft_core::mutation::on("outbox-row-carried-twice")
        {
            return Ok(Err(Refused::Exists(What::Run(id.to_owned()))));
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
    pub(super) fn update_run(
        &mut self,
        id: &str,
        run: &[u8],
        running: bool,
        leased: bool,
    ) -> Result<Result<(), Refused>, StoreError> {
        // Cancelled, or ended already: a run ends once. A leased write was
        // checked already (a run's lease goes when it ends), so only a
        // write of no driver's, which may come late, reads the record.
        if self.ended(id)? || (!leased && self.run_ended(id)?) {
            return Ok(Err(Refused::RunEnded(id.to_owned())));
        }
        self.set_run(id, run, running, false)?;
        Ok(Ok(()))
    }

    /// Cancels run `id`: stores `ended` as its record and marks it
    /// cancelled; its timers go with it, and children `fence` are fenced
    /// off. Refused if there is no such run, if it has ended, or if it
    /// does not have `expect` records. A run fenced off by its parent's
    /// cancellation may still be cancelled.
    pub(super) fn cancel_run(
        &mut self,
        id: &str,
        expect: u32,
        ended: &[u8],
        fence: &[String],
    ) -> Result<Result<(), Refused>, StoreError> {
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
    pub(super) fn retry_run(
        &mut self,
        id: &str,
        expect: u32,
        record: &[u8],
        wake: &[u8],
        timer: Option<&TimerRow>,
    ) -> Result<Result<(), Refused>, StoreError> {
        let Some(run) = self.stored_run(id)? else {
            return Ok(Err(Refused::NotFound(What::Run(id.to_owned()))));
        };
        if !run.state.is_terminal() {
            return Ok(Err(Refused::Busy { run: id.to_owned() }));
        }
        if run.step_records != expect {
            return Ok(Err(Refused::Changed(What::Run(id.to_owned()))));
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
    pub(super) fn pause_run(
        &mut self,
        id: &str,
        expect: u32,
        run: &[u8],
        pause: bool,
        lease: Option<&Lease>,
    ) -> Result<Result<(), Refused>, StoreError> {
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
                return Ok(Err(Refused::Busy { run: id.to_owned() }));
            }
            self.set_run(id, run, true, true)?;
            return Ok(Ok(()));
        }
        if stored.paused.is_none() {
            return Ok(Err(Refused::Changed(What::Run(id.to_owned()))));
        }
        self.set_run(id, run, true, false)?;
        self.free_lease(id, expect)?;
        Ok(Ok(()))
    }

    /// The move of run `id` to another revision (see [`Write::MigrateRun`]).
    pub(super) fn migrate_run(
        &mut self,
        id: &str,
        expect: u32,
        run: &[u8],
        definition: &(String, Vec<u8>),
        components: &[(String, Arc<[u8]>)],
    ) -> Result<Result<(), Refused>, StoreError> {
        let stored = match self.run_at(id, expect)? {
            Ok(stored) => stored,
            Err(refused) => return Ok(Err(refused)),
        };
        // A fire without a record (a retry delay's) may have woken it, or
        // a pause or a resume landed, since the move was decided.
        match own(decode::<RunRecord>(id, run))? {
            Ok(moved) if moved.suspended == stored.suspended && moved.paused == stored.paused => {}
            Ok(_) => return Ok(Err(Refused::Changed(What::Run(id.to_owned())))),
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

    /// An answer to an `await` step of suspended run `id`, decided on the
    /// run at `expect` records (whether the step waits is the engine's to
    /// say): stores `record` at `(id, expect)` and `wake` as the run, and
    /// removes the wait's timeout. Refused unless the run is suspended with
    /// `expect` records and the pause `wake` names ([`decided_on`]), and the
    /// timeout is pending.
    pub(super) fn act(
        &mut self,
        id: &str,
        expect: u32,
        record: &[u8],
        wake: &[u8],
        timer: Option<TimerRef>,
        lease: Option<&Lease>,
    ) -> Result<Result<(), Refused>, StoreError> {
        let run = match self.run_at(id, expect)? {
            Ok(run) => run,
            Err(refused) => return Ok(Err(refused)),
        };
        if !run.suspended {
            return Ok(Err(Refused::Busy { run: id.to_owned() }));
        }
        if let Err(refused) = decided_on(id, &run, wake, true)? {
            return Ok(Err(refused));
        }
        if let Some(timer) = timer
            && !self.rows.has(Table::Timers, timer_key(timer))?
        {
            return Ok(Err(Refused::TimerGone(timer.id)));
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

    /// The stored run `id`, if it is running (or suspended) with `expect`
    /// step records and its next slot free: the condition of every write
    /// decided on a run read before. `Ok(Err(_))`: [`Refused::NotFound`],
    /// [`Refused::RunEnded`] or [`Refused::Changed`].
    pub(super) fn run_at(
        &mut self,
        id: &str,
        expect: u32,
    ) -> Result<Result<RunRecord, Refused>, StoreError> {
        self.run_in(id, expect, false)
    }

    /// [`Apply::run_at`]; `fenced`: a run marked cancelled whose record
    /// has not ended yet passes (its cancellation is being written).
    pub(super) fn run_in(
        &mut self,
        id: &str,
        expect: u32,
        fenced: bool,
    ) -> Result<Result<RunRecord, Refused>, StoreError> {
        let Some(run) = self.stored_run(id)? else {
            return Ok(Err(Refused::NotFound(What::Run(id.to_owned()))));
        };
        if run.state.is_terminal() || (!fenced && self.ended(id)?) {
            return Ok(Err(Refused::RunEnded(id.to_owned())));
        }
        if run.step_records != expect {
            return Ok(Err(Refused::Changed(What::Run(id.to_owned()))));
        }
        // Not implied by the count: an `UpdateRun` decided on an older
        // record can set `step_records` back (F4).
        if let Err(refused) = self.slot_free(id, expect)? {
            return Ok(Err(refused));
        }
        Ok(Ok(run))
    }

    /// Run `id`'s stored record, decoded.
    pub(super) fn stored_run(&mut self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.rows
            .get(Table::Runs, Key::Str(id))?
            .map(|bytes| decode::<RunRecord>(id, &bytes))
            .transpose()
    }

    /// Whether run `id`'s record says it ended (not only marked cancelled).
    pub(super) fn run_ended(&mut self, id: &str) -> Result<bool, StoreError> {
        Ok(self
            .stored_run(id)?
            .is_none_or(|run| run.state.is_terminal()))
    }

    /// True when run `id` was cancelled in the store, so that the process
    /// driving it must not write it on. (A run ends otherwise only through
    /// the process that drives it.) One lookup in a table that is almost
    /// always empty: this is on every commit's path.
    pub(super) fn ended(&mut self, id: &str) -> Result<bool, StoreError> {
        self.rows.has(Table::Cancelled, Key::Str(id))
    }

    /// Stores run `id`'s record, and keeps the index of runs to resume and
    /// the run's timers in step: a run that ended has no timers.
    pub(super) fn set_run(
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

    pub(super) fn definition(
        &mut self,
        (digest, encoded): &(String, Vec<u8>),
    ) -> Result<(), StoreError> {
        if !self.rows.has(Table::Definitions, Key::Str(digest))? {
            self.rows
                .put(Table::Definitions, Key::Str(digest), encoded)?;
        }
        self.spare(digest)
    }

    pub(super) fn components(&mut self, pinned: &[(String, Arc<[u8]>)]) -> Result<(), StoreError> {
        for (digest, bytes) in pinned {
            if !self.rows.has(Table::Components, Key::Str(digest))? {
                self.rows.put(Table::Components, Key::Str(digest), bytes)?;
            }
            self.spare(digest)?;
        }
        Ok(())
    }

    /// Refuses a record for slot `(id, seq)` when one is there: a stored
    /// record is never replaced.
    pub(super) fn slot_free(
        &mut self,
        id: &str,
        seq: u32,
    ) -> Result<Result<(), Refused>, StoreError> {
        if self.rows.has(Table::Steps, Key::StrU32(id, seq))? {
            let run = id.to_owned();
            return Ok(Err(Refused::Exists(What::Step { run, seq })));
        }
        Ok(Ok(()))
    }
}
