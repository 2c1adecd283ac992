//! The tables of one write transaction, and what is kept in step across
//! them:
//!
//! - `set_run` keeps `running`, the index of runs to resume, in step with
//!   each run's record: a run is listed while it is running and not
//!   suspended;
//! - a timer has its row in `timers`, `timer_keys` and `run_timers`, or in
//!   none of them, and a run that ended has no timers;
//! - definitions and components are stored once, by digest;
//! - a run has a lease only until it ends.
//!
//! How each write changes the tables is in `apply`, `queue` and
//! `registry`.

use std::sync::Arc;

use redb::{ReadableTable, Table, WriteTransaction};

use crate::{StoreError, TimerRow};

/// The tables of one write transaction.
pub(super) struct Tables<'t> {
    /// For the tables opened only by the writes that need them.
    pub(super) txn: &'t WriteTransaction,
    pub(super) runs: Table<'t, &'static str, &'static [u8]>,
    pub(super) running: Table<'t, &'static str, ()>,
    pub(super) steps: Table<'t, (&'static str, u32), &'static [u8]>,
    pub(super) definitions: Table<'t, &'static str, &'static [u8]>,
    pub(super) components: Table<'t, &'static str, &'static [u8]>,
    pub(super) kv: Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(super) outbox: Table<'t, &'static str, &'static [u8]>,
    pub(super) timers: Table<'t, (u64, u64), &'static [u8]>,
    pub(super) run_timers: Table<'t, (&'static str, u64), u64>,
    pub(super) timer_keys: Table<'t, (u64, u64), ()>,
    pub(super) schedules: Table<'t, &'static str, &'static [u8]>,
    pub(super) cancelled: Table<'t, &'static str, ()>,
    pub(super) messages: Table<'t, u64, &'static [u8]>,
    pub(super) run_messages: Table<'t, (&'static str, u64), ()>,
    pub(super) subscriptions: Table<'t, &'static str, &'static [u8]>,
    pub(super) deliveries: Table<'t, &'static str, &'static [u8]>,
    pub(super) queue: Table<'t, (&'static str, u64), &'static str>,
    pub(super) dead: Table<'t, (&'static str, u64), &'static str>,
    pub(super) idempotency: Table<'t, &'static str, &'static str>,
    pub(super) deployments: Table<'t, (&'static str, u32), &'static [u8]>,
    pub(super) plugins: Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(super) leases: Table<'t, &'static str, &'static [u8]>,
    pub(super) hosts: Table<'t, &'static str, &'static [u8]>,
    /// The stored bytes this transaction has counted, by tenant.
    pub(super) meter: super::usage::Meter,
    /// The bytes the write being applied gave back (key-value values it
    /// overwrote or deleted).
    pub(super) freed: u64,
}

impl<'t> Tables<'t> {
    /// Opens every table in `txn`, each created by `RedbStore::open`.
    pub(super) fn open(txn: &'t WriteTransaction) -> Result<Self, StoreError> {
        Ok(Self {
            txn,
            runs: backend!(txn.open_table(super::RUNS))?,
            running: backend!(txn.open_table(super::RUNNING))?,
            steps: backend!(txn.open_table(super::STEPS))?,
            definitions: backend!(txn.open_table(super::DEFINITIONS))?,
            components: backend!(txn.open_table(super::COMPONENTS))?,
            kv: backend!(txn.open_table(super::KV))?,
            outbox: backend!(txn.open_table(super::OUTBOX))?,
            timers: backend!(txn.open_table(super::TIMERS))?,
            run_timers: backend!(txn.open_table(super::RUN_TIMERS))?,
            timer_keys: backend!(txn.open_table(super::TIMER_KEYS))?,
            schedules: backend!(txn.open_table(super::SCHEDULES))?,
            cancelled: backend!(txn.open_table(super::CANCELLED))?,
            messages: backend!(txn.open_table(super::MESSAGES))?,
            run_messages: backend!(txn.open_table(super::RUN_MESSAGES))?,
            subscriptions: backend!(txn.open_table(super::SUBSCRIPTIONS))?,
            deliveries: backend!(txn.open_table(super::DELIVERIES))?,
            queue: backend!(txn.open_table(super::QUEUE))?,
            dead: backend!(txn.open_table(super::DEAD))?,
            idempotency: backend!(txn.open_table(super::IDEMPOTENCY))?,
            deployments: backend!(txn.open_table(super::DEPLOYMENTS))?,
            plugins: backend!(txn.open_table(super::PLUGINS))?,
            leases: backend!(txn.open_table(super::LEASES))?,
            hosts: backend!(txn.open_table(super::HOSTS))?,
            meter: super::usage::Meter::default(),
            freed: 0,
        })
    }
}

impl Tables<'_> {
    /// True when run `id` was cancelled in the store, so that the process
    /// driving it must not write it on. (A run ends otherwise only through
    /// the process that drives it.) One lookup in a table that is almost
    /// always empty: this is on every commit's path.
    pub(super) fn ended(&self, id: &str) -> Result<bool, StoreError> {
        Ok(backend!(self.cancelled.get(id))?.is_some())
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
        backend!(self.runs.insert(id, run))?;
        // Most commits leave the index as it was: look before writing.
        let listed = backend!(self.running.get(id))?.is_some();
        if running && !suspended {
            if !listed {
                backend!(self.running.insert(id, ()))?;
            }
        } else if listed {
            backend!(self.running.remove(id))?;
        }
        if !running {
            let mut keys = Vec::new();
            for entry in backend!(self.run_timers.range((id, 0)..=(id, u64::MAX)))? {
                let (key, due) = backend!(entry)?;
                keys.push((due.value(), key.value().1));
            }
            for key in keys {
                self.remove_timer(id, key)?;
            }
            // Nobody drives a run that ended.
            backend!(self.leases.remove(id))?;
        }
        Ok(())
    }

    pub(super) fn insert_timer(&mut self, timer: &TimerRow) -> Result<(), StoreError> {
        backend!(self.timers.insert(timer.key, timer.record.as_slice()))?;
        backend!(self.timer_keys.insert(timer.key, ()))?;
        backend!(
            self.run_timers
                .insert((timer.run.as_str(), timer.key.1), timer.key.0)
        )?;
        Ok(())
    }

    pub(super) fn remove_timer(&mut self, run: &str, key: (u64, u64)) -> Result<(), StoreError> {
        backend!(self.timers.remove(key))?;
        backend!(self.timer_keys.remove(key))?;
        backend!(self.run_timers.remove((run, key.1)))?;
        Ok(())
    }

    pub(super) fn definition(
        &mut self,
        (digest, encoded): &(String, Vec<u8>),
    ) -> Result<(), StoreError> {
        if backend!(self.definitions.get(digest.as_str()))?.is_none() {
            backend!(self.definitions.insert(digest.as_str(), encoded.as_slice()))?;
        }
        Ok(())
    }

    pub(super) fn components(&mut self, pinned: &[(String, Arc<[u8]>)]) -> Result<(), StoreError> {
        for (digest, bytes) in pinned {
            if backend!(self.components.get(digest.as_str()))?.is_none() {
                backend!(self.components.insert(digest.as_str(), &bytes[..]))?;
            }
        }
        Ok(())
    }
}
