//! Timers: a row in `Timers`, `TimerKeys` and `RunTimers`, or in none;
//! a fire; the cron triggers' rows.

use super::{Apply, decided_on, own, timer_key};
use crate::rows::{Key, Table, decode, number};
use crate::{Lease, Refused, ScheduleRecord, StoreError, TimerRef, TimerRow, What, Write};

impl Apply<'_> {
    /// Arms timer `timer`: its row in the three tables, counted to its
    /// tenant when its record names one.
    pub(super) fn insert_timer(&mut self, timer: &TimerRow) -> Result<(), StoreError> {
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
    pub(super) fn remove_timer(
        &mut self,
        run: &str,
        (due, id): (u64, u64),
    ) -> Result<(), StoreError> {
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
    pub(super) fn remove_timer_of(
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

    /// Fires timer `fired` of run `id`: stores the fire's `record` at
    /// `(id, expect)` and `wake` as the run (awake, or asleep if paused),
    /// and removes the timer. Refused unless the timer is pending, its run
    /// is running, and the run has `expect` records and the pause `wake`
    /// names ([`decided_on`]).
    pub(super) fn fire_timer(
        &mut self,
        fired: TimerRef,
        id: &str,
        expect: u32,
        record: Option<&[u8]>,
        wake: &[u8],
        lease: Option<&Lease>,
    ) -> Result<Result<(), Refused>, StoreError> {
        if !self.rows.has(Table::Timers, timer_key(fired))? {
            return Ok(Err(Refused::TimerGone(fired.id)));
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
            Err(Refused::RunEnded(_)) if !self.run_ended(id)? => {
                return Ok(Err(Refused::RunEnded(id.to_owned())));
            }
            Err(Refused::NotFound(_) | Refused::RunEnded(_)) => {
                // Its run is gone or ended: the timer wakes nothing.
                self.remove_timer(id, fired.key())?;
                return Ok(Err(Refused::TimerGone(fired.id)));
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

    /// Writes cron trigger `key`'s row (`None` removes it), with the run
    /// its fire starts. With `expect`, refused unless the stored row is at
    /// that version (0: there is none); a refusal of `start` is this
    /// write's.
    pub(super) fn schedule(
        &mut self,
        key: &str,
        expect: Option<u64>,
        row: Option<&[u8]>,
        start: Option<&Write>,
    ) -> Result<Result<(), Refused>, StoreError> {
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
                    Refused::Exists(what)
                } else {
                    Refused::Changed(what)
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
