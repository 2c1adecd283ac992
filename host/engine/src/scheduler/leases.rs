//! One owner per run: this host's row, renewed while it lives; taking
//! runs in under a lease; and taking over the runs of hosts that are gone.
//!
//! Every run this host makes starts under its lease (epoch 1). A run read
//! back from the store (a resume, a wake, a child found running) is
//! claimed first, which the store allows only if nobody drives it. Every
//! commit names the lease, so a host whose lease was taken over cannot
//! commit that run again. A host is judged gone when its row expired (it
//! did not renew for `lease_ttl`), or at once when its process no longer
//! exists on this machine; the store then forgets it, and its runs are
//! taken over like those of a crash.

use std::collections::HashSet;
use std::sync::Arc;

use weft_core::lock;
use weft_store::{HostRecord, Lease, Refused, StoreError, Wake, Write};

use super::Scheduler;

/// How often a host with places looks for free work: the longest a run
/// parked by a full host waits for another host that has a place.
pub(crate) const CLAIM_EVERY: std::time::Duration = std::time::Duration::from_millis(100);
use crate::drive::Drive;
use crate::error::ResumeError;

/// Where this host runs: the machine (its name, the kernel's boot id and
/// the pid namespace) and the process id (0: a simulated host, whose
/// process is never looked up).
#[derive(Debug, Clone)]
pub(super) struct Process {
    pub(super) machine: String,
    pub(super) pid: u32,
}

impl Process {
    /// This process.
    pub(super) fn this() -> Self {
        Self {
            machine: Machine::here().id(),
            pid: std::process::id(),
        }
    }

    /// A simulated host.
    #[cfg(feature = "stepped")]
    pub(super) fn simulated() -> Self {
        Self {
            machine: "simulated".to_owned(),
            pid: 0,
        }
    }

    /// Whether host `row`, judged from here, is certainly gone: it ran on
    /// this machine and its process no longer exists.
    fn outlived(&self, row: &HostRecord) -> bool {
        row.pid != 0
            && self.pid != 0
            && row.machine == self.machine
            && row.pid != self.pid
            && cfg!(target_os = "linux")
            && !std::path::Path::new(&format!("/proc/{}", row.pid)).exists()
    }
}

/// A machine's identity, as host rows name it ([`Machine::id`]). Its name
/// alone is not one: machines are often named alike, and two that judged
/// each other by pid would take each other's runs every round. The
/// kernel's boot id tells machines (and boots) apart; the pid namespace,
/// containers of one machine, whose processes share pid numbers.
struct Machine {
    name: String,
    boot: Option<String>,
    namespace: Option<String>,
}

impl Machine {
    /// The machine this process runs on.
    fn here() -> Self {
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .map(|text| text.trim().to_owned())
                .ok()
                .filter(|text| !text.is_empty())
        };
        Self {
            name: read("/proc/sys/kernel/hostname")
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_else(|| "unknown".to_owned()),
            boot: read("/proc/sys/kernel/random/boot_id"),
            namespace: std::fs::read_link("/proc/self/ns/pid")
                .ok()
                .map(|namespace| namespace.display().to_string()),
        }
    }

    /// Its parts that are known, in order, one space apart.
    fn id(&self) -> String {
        [
            Some(&self.name),
            self.boot.as_ref(),
            self.namespace.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" ")
    }
}

impl Scheduler {
    /// The lease thread: renews this host's row three times a lease, and
    /// takes over the runs of hosts that are gone, until the engine stops.
    pub(super) fn keep_leases(self: Arc<Self>) {
        loop {
            self.pause(self.lease_ttl / 3);
            if self.is_stopping() {
                return;
            }
            if let Err(e) = self.renew() {
                tracing::error!("cannot renew this host's leases: {e}");
            }
            if self.taking_over.load(std::sync::atomic::Ordering::SeqCst) {
                self.take_over();
            }
        }
    }

    /// The claims thread: while this host takes runs over (a server),
    /// takes free work from the store as places free, every
    /// [`CLAIM_EVERY`], and as soon as the store tells of a run parked
    /// elsewhere ([`weft_store::Wakes`], on PostgreSQL), until the engine
    /// stops.
    pub(super) fn claim_free_work_while_running(self: Arc<Self>) {
        let wakes = self.launcher.store.wakes();
        let mut seen = wakes
            .as_ref()
            .map_or(0, |wakes| wakes.seen(&[Wake::Parked]));
        loop {
            match &wakes {
                Some(wakes) => seen = wakes.wait(&[Wake::Parked], seen, CLAIM_EVERY),
                None => self.pause(CLAIM_EVERY),
            }
            if self.is_stopping() {
                return;
            }
            if self.taking_over.load(std::sync::atomic::Ordering::SeqCst) {
                self.claim_free_work();
            }
        }
    }

    /// Whether the lease thread takes runs over.
    pub(crate) fn set_take_over(&self, on: bool) {
        self.taking_over
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Renews this host's row if a third of a lease has passed since it
    /// last did: a long round of take-overs must not let its own lapse.
    pub(super) fn renew_if_due(&self) {
        let until = self.renewed.load(std::sync::atomic::Ordering::SeqCst);
        let third = weft_core::clock::millis(self.lease_ttl / 3);
        let due = until.saturating_sub(weft_core::clock::millis(self.lease_ttl) - third);
        if self.clock.now().as_millis() >= due
            && let Err(e) = self.renew()
        {
            tracing::error!("cannot renew this host's leases: {e}");
        }
    }

    /// A write of this host's failed with `error`: if it may have landed
    /// all the same (a claim, a wake) it may have left a run under this
    /// host's lease that this host does not hold, so the next take-over
    /// round looks for such runs too.
    pub(crate) fn answer_lost(&self, error: &StoreError) {
        if error.outcome_unknown() && !weft_core::mutation::on("own-lease-left") {
            self.sweep.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A mark of this host's tenure: it changes when the host's row
    /// lapses ([`Scheduler::holds_since`]).
    pub(crate) fn tenure(&self) -> u64 {
        self.lapses.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether this host's row has held without a lapse since `tenure`
    /// was read, and holds now: if not, a peer may have judged this host
    /// gone and taken what it held.
    pub(crate) fn holds_since(&self, tenure: u64) -> bool {
        let until = self.renewed.load(std::sync::atomic::Ordering::SeqCst);
        self.tenure() == tenure && self.clock.now().as_millis() < until
    }

    /// This host's id.
    pub(crate) fn host(&self) -> &str {
        &self.launcher.host
    }

    /// Writes this host's row, holding its leases for another
    /// `lease_ttl`. Blocking.
    pub(crate) fn renew(&self) -> Result<(), StoreError> {
        let now = self.clock.now();
        // Renewed after the row's lease ran out: another host may have
        // judged this one gone and taken its runs over.
        let until = self.renewed.load(std::sync::atomic::Ordering::SeqCst);
        let lapsed = until > 0 && now.as_millis() >= until;
        let row = HostRecord {
            id: self.host().to_owned(),
            machine: self.process.machine.clone(),
            pid: self.process.pid,
            started_at: self.started_at,
            expires_at: now + self.lease_ttl,
        };
        self.commits.commit(Write::renew(&row))?;
        self.renewed.store(
            row.expires_at.as_millis(),
            std::sync::atomic::Ordering::SeqCst,
        );
        if lapsed {
            self.lapses
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        if lapsed && !weft_core::mutation::on("zombie-keeps-runs") {
            tracing::warn!(
                "this host's row lapsed before it was renewed (the process was stopped, or stalled); its runs are checked against the store"
            );
            self.revalidate();
        }
        Ok(())
    }

    /// Lets go of every resident run whose lease in the store is no longer
    /// the one its drive holds (another host took it over while this one
    /// was stopped; or it ended, and may be deleted), as a refused commit
    /// would: left alone, such a run would hold its place here until its
    /// next commit was refused, which for a run that waits may be never.
    /// It is not woken here: a wake could take it back from the host that
    /// drives it now. A run with a commit in flight is left to that
    /// commit.
    fn revalidate(&self) {
        let cells: Vec<(String, super::Cell)> = lock(&self.cells)
            .iter()
            .map(|(id, cell)| (id.clone(), Arc::clone(cell)))
            .collect();
        for (id, cell) in cells {
            let current = match self.launcher.store.lease(&id) {
                Ok(current) => current,
                Err(e) => {
                    tracing::warn!(run = %id, "cannot read a run's lease: {e}");
                    continue;
                }
            };
            let mut live = lock(&cell);
            if live.closed || live.committing || current.as_ref() == live.task.drive.lease() {
                continue;
            }
            tracing::warn!(run = %id, lease = ?current, "taken over or ended while this host was stopped; let go");
            let refused = match current {
                Some(owner) => StoreError::Refused(Refused::Fenced {
                    run: id,
                    owner: owner.host,
                }),
                None => StoreError::Refused(Refused::RunEnded(id)),
            };
            self.finish(&mut live, Err(refused));
        }
    }

    /// Writes this host's row, then notes the other hosts on the store:
    /// one that is gone by the first lease round (a clean stop, say) left
    /// runs to take over. Blocking.
    pub(crate) fn join(&self) -> Result<(), StoreError> {
        self.renew()?;
        let hosts = self.launcher.store.hosts()?;
        *lock(&self.seen_hosts) = hosts.into_iter().map(|row| row.id).collect();
        Ok(())
    }

    /// Gives this host's leases up as it stops: its row goes, so the runs
    /// it drove are free for any other host at once. Blocking.
    pub(crate) fn retire(&self) {
        let expires_at =
            weft_core::Timestamp(self.renewed.load(std::sync::atomic::Ordering::SeqCst));
        let forget = Write::Forget {
            host: self.host().to_owned(),
            expires_at,
        };
        // A transaction fails as a whole: the forget may have shared one
        // with a write that failed (a child's record the disk refused,
        // left in the queue by a thread stopped since). The threads that
        // write are stopped, so a second try goes alone or with what was
        // queued already; a refusal (the row changed) is final.
        for tries in 1..=3 {
            match self.commits.commit(forget.clone()) {
                Ok(()) => return,
                Err(StoreError::Refused(e)) => {
                    tracing::debug!("this host's row stays until it expires: {e}");
                    return;
                }
                Err(e) if tries == 3 => {
                    tracing::debug!("this host's row stays until it expires: {e}");
                }
                Err(_) => {}
            }
        }
    }

    /// Forgets the hosts that are gone, then takes over their runs: every
    /// running run whose host is gone is claimed and resumed here, and
    /// every pending timer is armed again (a suspended run's timers may
    /// have been armed only by its host). Returns how many runs it took.
    /// Blocking.
    ///
    /// A round looks at the runs when a host was forgotten, when one seen
    /// in the last round (or when this host joined) vanished: forgotten by
    /// another host, or stopped cleanly; and after a round that could not
    /// settle every run it found without a driver (the store failed).
    pub(crate) fn take_over(self: &Arc<Self>) -> usize {
        let Ok((gone, alive)) = self.forget_gone() else {
            self.sweep.store(true, std::sync::atomic::Ordering::SeqCst);
            return 0;
        };
        let vanished = {
            let mut seen = lock(&self.seen_hosts);
            let vanished = seen.iter().any(|host| !alive.contains(host));
            seen.clone_from(&alive);
            vanished
        };
        let sweep = self.sweep.swap(false, std::sync::atomic::Ordering::SeqCst);
        if gone == 0 && !vanished && !sweep {
            return 0;
        }
        let (taken, settled) = self.take_orphans(&alive);
        if !settled {
            self.sweep.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        taken
    }

    /// Takes every running run whose host is not in `alive`, and arms
    /// every pending timer. Returns how many runs it took, and whether
    /// every such run was settled (taken here, held here, taken by another
    /// host, or ended); a store that failed leaves the round unsettled.
    fn take_orphans(self: &Arc<Self>, alive: &HashSet<String>) -> (usize, bool) {
        let store = &self.launcher.store;
        let Ok(running) = store.running() else {
            return (0, false);
        };
        // Free work is claimed, place by place, not taken over.
        let Ok(parked) = store.parked(usize::MAX) else {
            return (0, false);
        };
        let parked: HashSet<String> = parked.into_iter().map(|(id, _)| id).collect();
        let mut taken = 0;
        let mut settled = true;
        for run in running {
            if parked.contains(&run.id) {
                continue;
            }
            let Ok(current) = store.lease(&run.id) else {
                settled = false;
                continue;
            };
            // A run this host's lease names, and that it does not hold,
            // was claimed by a write whose answer was lost: it is taken
            // in as an orphan is (the claim finds the lease its own).
            let free = current.as_ref().is_none_or(|lease| {
                !alive.contains(&lease.host)
                    || (lease.host == self.host()
                        && !weft_core::mutation::on("own-lease-left")
                        && !lock(&self.admission).known.contains_key(&run.id))
            });
            if free {
                match self.take_over_run(&run.id, current) {
                    Ok(true) => taken += 1,
                    Ok(false) => {}
                    Err(()) => settled = false,
                }
            }
            self.renew_if_due();
        }
        match store.timer_keys() {
            Ok(keys) => self.arm_all(keys),
            Err(_) => settled = false,
        }
        (taken, settled)
    }

    /// Forgets every other host that is gone: its row expired, or its
    /// process no longer exists on this machine. Returns how many it
    /// forgot, and the ids of the hosts that are left. Blocking.
    fn forget_gone(&self) -> Result<(usize, HashSet<String>), StoreError> {
        let now = self.clock.now();
        let mut gone = 0;
        let mut alive = HashSet::new();
        for row in self.launcher.store.hosts()? {
            if row.id != self.host() && (row.expires_at < now || self.process.outlived(&row)) {
                let forget = Write::Forget {
                    host: row.id.clone(),
                    expires_at: row.expires_at,
                };
                if self.commits.commit(forget).is_ok() {
                    tracing::warn!(host = %row.id, "host gone; its runs are taken over");
                    // Forgotten outside a round too (a take-in that found
                    // it gone): the next round takes its other runs over,
                    // which no host may have seen it hold.
                    if !weft_core::mutation::on("forgotten-host-left") {
                        self.sweep.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    gone += 1;
                    continue;
                }
            }
            alive.insert(row.id);
        }
        Ok((gone, alive))
    }

    /// Claims run `id`, whose lease was read as `current`, and admits it
    /// here: `Ok(true)` if it did; `Ok(false)` if the run is held here
    /// already (noted, so it is woken once the hold ends), another host
    /// took it first, or it ended; `Err(())` if the store failed.
    fn take_over_run(self: &Arc<Self>, id: &str, current: Option<Lease>) -> Result<bool, ()> {
        if !self.claim_or_note(id) {
            tracing::debug!(run = %id, "to take over once it is let go here");
            return Ok(false);
        }
        // The round forgot the hosts that are gone already.
        match self.claim_and_load(id, current) {
            Ok(drive) => {
                tracing::debug!(run = %id, "taken over");
                if !drive.run.suspended {
                    self.telemetry.resumed(&drive.run, self.clock.now());
                }
                // A run of this host's own that a lost answer left out of
                // memory may have a handle kept for it (`keep_handle`): the
                // handle gets its observer and answer back, as a wake's does.
                let (observer, done, alive) = lock(&self.sleepers).take(id).unwrap_or_else(|| {
                    let (done, _) = std::sync::mpsc::sync_channel(1);
                    (Box::new(crate::Quiet), done, std::sync::Weak::new())
                });
                self.admit_awake(super::Task {
                    drive,
                    observer,
                    done,
                    alive,
                });
                Ok(true)
            }
            Err(e) => {
                self.unclaim(id);
                tracing::debug!(run = %id, "not taken over: {e}");
                match e {
                    // A row that does not decode is set aside (`weft
                    // doctor` lists it); another failure is tried again.
                    ResumeError::Store(e) if e.unreadable() => Ok(false),
                    ResumeError::Store(_) => Err(()),
                    _ => Ok(false),
                }
            }
        }
    }

    /// Loads run `id`, claimed in this scheduler, to drive it here: under
    /// the lease this host holds on it, or else one it takes now, which
    /// the store allows only if nobody drives the run. Blocking.
    pub(crate) fn take_in(&self, id: &str) -> Result<Drive, ResumeError> {
        // Its host may be gone without anyone having noticed yet (a
        // process killed on this machine).
        let current = self.launcher.store.lease(id)?;
        if current
            .as_ref()
            .is_some_and(|lease| lease.host != self.host())
        {
            self.forget_gone()?;
        }
        self.claim_and_load(id, current)
    }

    /// [`Scheduler::take_in`] of a run whose lease was read as `current`, with
    /// the gone hosts already forgotten.
    fn claim_and_load(&self, id: &str, current: Option<Lease>) -> Result<Drive, ResumeError> {
        let store = &self.launcher.store;
        let lease = match current {
            Some(lease) if lease.host == self.host() => lease,
            current => {
                let lease = Lease::after(current.as_ref(), self.host());
                let claim = Write::Claim {
                    run: id.to_owned(),
                    lease: lease.clone(),
                };
                match self.commits.commit(claim) {
                    Ok(()) => lease,
                    Err(StoreError::Refused(Refused::Fenced { owner, .. })) => {
                        return Err(ResumeError::Driven {
                            run: id.to_owned(),
                            host: owner,
                        });
                    }
                    Err(StoreError::Refused(Refused::NotFound(_))) => {
                        return Err(ResumeError::NotFound(id.to_owned()));
                    }
                    // Ended, or fenced off by its parent's cancellation:
                    // then it is cancelled now.
                    Err(StoreError::Refused(Refused::RunEnded(_))) => {
                        let stored = store.run(id)?;
                        let state = match &stored {
                            Some(run) if run.state.is_terminal() => run.state,
                            // A top-level run running again was retried.
                            Some(run) if run.parent.is_none() => run.state,
                            _ => {
                                self.enqueue(super::Work::Cancel(id.to_owned()));
                                weft_store::RunState::Cancelled
                            }
                        };
                        return Err(ResumeError::NotRunning {
                            id: id.to_owned(),
                            state,
                        });
                    }
                    Err(e) => {
                        self.answer_lost(&e);
                        return Err(e.into());
                    }
                }
            }
        };
        let loaded = match store.run(id) {
            Ok(Some(run)) => self.launcher.load(run),
            Ok(None) => Err(ResumeError::NotFound(id.to_owned())),
            Err(e) => Err(e.into()),
        };
        match loaded {
            Ok(mut drive) => {
                drive.hold(lease);
                Ok(drive)
            }
            // The run holds this host's lease, and is not in its memory: a
            // take-over round takes it in (as after a claim whose answer
            // was lost), since no peer takes a run of a live host. Not for
            // a row that does not decode, which no round would read better.
            Err(e) => {
                let failed = matches!(&e, ResumeError::Store(failed) if !failed.unreadable());
                if failed && !weft_core::mutation::on("own-lease-left") {
                    self.sweep.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                Err(e)
            }
        }
    }

    /// The lease this host writes a run not in its memory under: the one
    /// it holds, or the next one, to take the run with the write.
    pub(super) fn lease_for(&self, id: &str) -> Result<Lease, StoreError> {
        Ok(match self.launcher.store.lease(id)? {
            Some(lease) if lease.host == self.host() => lease,
            current => Lease::after(current.as_ref(), self.host()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(machine: &str, pid: u32) -> HostRecord {
        HostRecord {
            id: "other".to_owned(),
            machine: machine.to_owned(),
            pid,
            started_at: weft_core::clock::Timestamp(0),
            expires_at: weft_core::clock::Timestamp(u64::MAX),
        }
    }

    /// A pid no process has here: above the kernel's largest.
    const NO_PROCESS: u32 = 1 << 23;

    /// A host of another machine with the same name (and the same
    /// namespace id, as every machine's first one has) is not judged gone
    /// because its pid is not a process here; one of this machine is.
    #[test]
    fn a_host_of_another_machine_with_this_ones_name_is_not_judged_gone() {
        let here = Process::this();
        let machine = Machine::here();
        if let Some(boot) = &machine.boot {
            assert!(here.machine.contains(boot.as_str()), "{}", here.machine);
        }
        let elsewhere = Machine {
            boot: Some("00000000-0000-0000-0000-000000000000".to_owned()),
            ..machine
        }
        .id();
        assert_ne!(elsewhere, here.machine);
        assert!(!here.outlived(&row(&elsewhere, NO_PROCESS)));
        if cfg!(target_os = "linux") {
            assert!(here.outlived(&row(&here.machine, NO_PROCESS)));
        }
    }
}
