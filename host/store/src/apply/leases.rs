//! Leases: who drives a run (or holds a subscription's queue), taking
//! one, freeing one, and the hosts' rows they name.

use super::{Apply, fenced, own};
use crate::rows::{Key, Table, decode};
use crate::{HostRecord, Lease, Refused, StoreError, What, encode};

impl Apply<'_> {
    /// Takes run `id`'s lease from whoever holds it (a run with `expect`
    /// records): it names no host now, at an epoch above the one held and
    /// at least `(expect + 1) << 32`, so the holder's next commit is
    /// refused and whoever claims the run first drives it. A run with no
    /// lease (parked) keeps none.
    pub(super) fn free_lease(&mut self, id: &str, expect: u32) -> Result<(), StoreError> {
        if let Some(current) = self.lease_of(id)? {
            let free = Lease {
                host: String::new(),
                epoch: (current.epoch + 1).max((u64::from(expect) + 1) << 32),
            };
            self.rows.put(Table::Leases, Key::Str(id), &encode(&free))?;
        }
        Ok(())
    }

    /// Refuses a commit of run `id` unless `lease` is its lease now (no
    /// lease: a write of no driver's, not checked).
    pub(super) fn leased(
        &mut self,
        id: &str,
        lease: Option<&Lease>,
    ) -> Result<Result<(), Refused>, StoreError> {
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
            return Ok(Err(Refused::RunEnded(id.to_owned())));
        }
        Ok(Err(fenced(id, current.as_ref())))
    }

    /// Run `id`'s lease now.
    pub(super) fn lease_of(&mut self, id: &str) -> Result<Option<Lease>, StoreError> {
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
    pub(super) fn take(
        &mut self,
        id: &str,
        lease: Option<&Lease>,
        suspended: bool,
    ) -> Result<Result<(), Refused>, StoreError> {
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
    pub(super) fn host_listed(&mut self, host: &str) -> Result<bool, StoreError> {
        let Some(bytes) = self.rows.get(Table::Hosts, Key::Str(host))? else {
            return Ok(false);
        };
        Ok(decode::<HostRecord>(host, &bytes).is_ok())
    }

    /// Takes run `id` under `lease` (see [`Write::Claim`]).
    pub(super) fn claim(
        &mut self,
        id: &str,
        lease: &Lease,
    ) -> Result<Result<(), Refused>, StoreError> {
        // A row that does not decode refuses its own claim, not the batch:
        // the claims of a resume share one.
        let run = match own(self.stored_run(id))? {
            Ok(Some(run)) => run,
            Ok(None) => return Ok(Err(Refused::NotFound(What::Run(id.to_owned())))),
            Err(e) => return Ok(Err(e)),
        };
        if run.state.is_terminal() || self.ended(id)? {
            return Ok(Err(Refused::RunEnded(id.to_owned())));
        }
        self.take(id, Some(lease), run.suspended)
    }

    /// Takes subscription `key`'s queue under `lease` (see
    /// [`Write::HoldQueue`]): as a run is taken, its lease a row of the
    /// leases table beside the runs', never suspended.
    pub(super) fn hold_queue(
        &mut self,
        key: &str,
        lease: &Lease,
    ) -> Result<Result<(), Refused>, StoreError> {
        if !self.rows.has(Table::Subscriptions, Key::Str(key))? {
            return Ok(Err(Refused::NotFound(What::Subscription(key.to_owned()))));
        }
        self.take(&crate::queue_lease(key), Some(lease), false)
    }

    /// Declares host `host` gone (see [`Write::Forget`]).
    pub(super) fn forget(
        &mut self,
        host: &str,
        expires_at: weft_core::Timestamp,
    ) -> Result<Result<(), Refused>, StoreError> {
        let Some(row) = self
            .rows
            .get(Table::Hosts, Key::Str(host))?
            .map(|bytes| decode::<HostRecord>(host, &bytes))
            .transpose()?
        else {
            return Ok(Err(Refused::NotFound(What::Host(host.to_owned()))));
        };
        if row.expires_at != expires_at {
            return Ok(Err(Refused::Changed(What::Host(host.to_owned()))));
        }
        self.rows.delete(Table::Hosts, Key::Str(host))?;
        Ok(Ok(()))
    }
}
