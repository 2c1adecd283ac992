//! Spare instances: for a plugin slow to instantiate, one instance made
//! ahead of its next call by one thread per runtime, off the call's path.
//!
//! A spare is used by exactly one call and dropped with that call's store,
//! like any other instance, so every call still starts from an instance no
//! call has run in. What a spare changes is only *when* the instance is
//! made: while the plugin's last call runs, or after it, instead of at the
//! start of its next. (So a call's deadline covers its instantiation only
//! when it makes its own instance.) And *where* it is dropped: after its
//! call has taken out what it reports, a spare's store goes to the spare
//! thread if that has nothing queued or under way ([`Retired`]), so the
//! instance's teardown is off the path as well; if the thread is busy
//! (making the next spare, most often), the call drops it itself.
//!
//! Only a plugin whose instantiation takes `RuntimeConfig::spare_above` or
//! more, at the least over at least [`SAMPLES`] instantiations, gets spares
//! (an interpreter's: Python's takes about 200 µs): for one that
//! instantiates in microseconds, waking the spare thread costs about what
//! it saves.
//!
//! A spare is kept only if making it entered the host not once (a call
//! hook counts every entry: imports, and also libcalls such as a memory
//! grow, so some components that could have spares get none; none that
//! should not gets one). A component whose instantiation logs, reads a key
//! or a secret would otherwise see the spare's empty reach, not its call's.
//! A spare is made under the limits of the call that asked for it (its
//! memory cap and deadline, which are its tenant's), not the runtime's,
//! and counts toward that call's tenant: one tenant's spares hold at most
//! a quarter of `RuntimeConfig::spare_instances` (at least one). A call
//! uses a spare only if its memory cap allows what the making took.
//! Spares hold at most `RuntimeConfig::spare_instances` instance slots and
//! at most half of them; a call that finds no free slot drops a spare to
//! free one ([`Spares::evict_one`]). A plugin dropped (reloaded, removed)
//! drops its spare.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use weft_core::lock;

use super::Loaded;
use super::call::new_store;
use super::contract::Instance;
use crate::Runtime;
use crate::log::LogSink;
use crate::sandbox::{Reach, StepState};

/// An instance made ahead of its call, in its own store.
pub(super) struct Spare {
    // Dropped in this order: the instance, then its slot.
    pub(super) store: wasmtime::Store<StepState>,
    pub(super) instance: Instance,
    pub(super) slot: SpareSlot,
    /// How long making it took.
    pub(super) made_in: Duration,
}

/// A spare's store after its call: dropped by the spare thread, so the
/// instance's teardown (resetting its memory to the image: about 130 µs
/// for a Python step) is off the next call's path too. The call has taken
/// everything it reports out of the store first.
pub(super) struct Retired {
    // Dropped in this order: the store (its instance), then its slot.
    pub(super) _store: wasmtime::Store<StepState>,
    pub(super) _slot: SpareSlot,
}

/// What a spare is made for: the tenant and the limits of the call that
/// asked for it.
#[derive(Debug, Clone)]
pub(super) struct Ask {
    /// The tenant it counts toward.
    pub(super) tenant: Arc<str>,
    /// The memory cap it is made under.
    pub(super) memory_limit: u64,
    /// The deadline of its making.
    pub(super) timeout: Duration,
}

/// What the spare thread is asked to do.
enum Job {
    /// Make a spare for the plugin, if it still wants one.
    Make(Weak<Loaded>, Ask),
    /// Drop a used spare's store.
    Retire(Retired),
}

/// Instantiations a plugin's estimate needs before it may get spares.
const SAMPLES: u32 = 4;

/// Failed spare instantiations in a row after which a plugin gets no more.
const FAILURES: u32 = 3;

/// What a plugin keeps of spares: the one ready, how its spare
/// instantiations went, and how long it takes to instantiate.
#[derive(Default)]
pub(super) struct PluginSpare {
    ready: Mutex<Option<Spare>>,
    /// Spare instantiations failed in a row; [`FAILURES`] and more (or
    /// `u32::MAX`, set when the making entered the host) refuses spares.
    failures: AtomicU32,
    /// What its instantiation costs, in nanoseconds (see
    /// [`PluginSpare::note`]), and how many it has seen.
    instantiate_ns: AtomicU64,
    samples: AtomicU32,
    /// A request for a spare is queued and not yet taken up: the queue
    /// holds at most one per plugin, however many calls ask.
    requested: AtomicBool,
}

impl PluginSpare {
    /// Notes how long an instantiation took. The estimate is a minimum
    /// that rises by a sixteenth at each sample above it: a thread
    /// preempted in the middle of an instantiation (a loaded host) makes it
    /// look slow, never fast, so the least recent time is the plugin's cost.
    pub(super) fn note(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1);
        // Only the plugin's callers and the spare thread write it; a lost
        // update among racing writers is one sample less.
        let old = self.instantiate_ns.load(Ordering::Relaxed);
        let new = if old == 0 {
            ns
        } else {
            ns.min(old.saturating_add(old / 16).max(old + 1))
        };
        self.instantiate_ns.store(new, Ordering::Relaxed);
        let _ = self
            .samples
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
    }

    /// Whether the plugin may get a spare: its spare instantiations have
    /// not been refused, and it takes `above` or more to instantiate, at
    /// the least over [`SAMPLES`] or more.
    fn worth_it(&self, above: Duration) -> bool {
        let ns = u64::try_from(above.as_nanos()).unwrap_or(u64::MAX);
        self.failures.load(Ordering::Relaxed) < FAILURES
            && self.samples.load(Ordering::Relaxed) >= SAMPLES
            && self.instantiate_ns.load(Ordering::Relaxed) >= ns
    }

    /// The spare, if one is ready and a call capped at `memory_limit`
    /// bytes may use it; one that does not fit stays for the next call.
    pub(super) fn take(&self, memory_limit: u64) -> Option<Spare> {
        let mut ready = lock(&self.ready);
        let used = ready.as_ref()?.store.data().limiter.used();
        if u64::try_from(used).unwrap_or(u64::MAX) > memory_limit {
            return None;
        }
        ready.take()
    }

    /// Drops the spare, if any; whether there was one.
    fn drop_spare(&self) -> bool {
        // Taken out under the lock, dropped after it.
        let spare = lock(&self.ready).take();
        spare.is_some()
    }
}

/// The runtime's maker of spares: a thread, started at the first request,
/// that ends when the runtime is dropped, after the jobs queued then (a
/// queued retirement holds the runtime until it is done).
pub(crate) struct Spares {
    max: u32,
    made: AtomicU32,
    /// Spares held per tenant: at most [`Spares::per_tenant`] each.
    by_tenant: Mutex<std::collections::HashMap<Arc<str>, u32>>,
    jobs: Mutex<Option<Sender<Job>>>,
    /// Jobs queued or under way on the spare thread.
    pending: Arc<AtomicU32>,
    /// The plugins a spare was made for, to drop one when calls need its
    /// slot; entries whose spare is gone are skipped and pruned.
    holders: Mutex<Vec<Weak<Loaded>>>,
}

impl Spares {
    pub(crate) fn new(max: u32) -> Self {
        Self {
            max,
            made: AtomicU32::new(0),
            by_tenant: Mutex::new(std::collections::HashMap::new()),
            jobs: Mutex::new(None),
            pending: Arc::new(AtomicU32::new(0)),
            holders: Mutex::new(Vec::new()),
        }
    }

    /// The most spares one tenant holds: a quarter of them, at least one.
    fn per_tenant(&self) -> u32 {
        (self.max / 4).max(1)
    }

    /// Drops one spare, if any is held, to give its slot to a call;
    /// whether one was dropped.
    pub(super) fn evict_one(&self) -> bool {
        let holders = std::mem::take(&mut *lock(&self.holders));
        let mut kept = Vec::with_capacity(holders.len());
        let mut dropped = false;
        for holder in holders {
            let Some(plugin) = holder.upgrade() else {
                continue;
            };
            if !dropped && plugin.spare.drop_spare() {
                dropped = true;
                continue;
            }
            if lock(&plugin.spare.ready).is_some() {
                kept.push(holder);
            }
        }
        lock(&self.holders).extend(kept);
        dropped
    }

    /// Asks for a spare of `plugin`, made as `ask` says, unless it has one
    /// or may not.
    pub(super) fn request(&self, plugin: &Arc<Loaded>, ask: Ask) {
        if self.max == 0
            || !plugin.spare.worth_it(plugin.runtime.config().spare_above)
            || lock(&plugin.spare.ready).is_some()
            || plugin.spare.requested.swap(true, Ordering::AcqRel)
        {
            return;
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        if self.send(Job::Make(Arc::downgrade(plugin), ask)).is_err() {
            // No thread: no spare, no harm; the flag is not left set.
            self.pending.fetch_sub(1, Ordering::AcqRel);
            plugin.spare.requested.store(false, Ordering::Release);
        }
    }

    /// Has the spare thread drop `retired` if it has no job queued or under
    /// way; else drops it here, so that a spare being made for the next call
    /// is not queued behind it. (A spare asked for after this one was
    /// queued still waits for it: about 130 µs for a Python step.)
    pub(super) fn retire(&self, retired: Retired) {
        // One retirement at a time, and only onto an idle thread: it takes
        // `pending` from 0 to 1.
        if self
            .pending
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            drop(retired);
            return;
        }
        if let Err(unsent) = self.send(Job::Retire(retired)) {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            // Dropped here, out of the lock.
            drop(unsent);
        }
    }

    /// Queues `job` (counted in `pending` by the caller) for the spare
    /// thread, started first if need be; gives it back if it could not be
    /// queued.
    fn send(&self, job: Job) -> Result<(), Job> {
        let mut jobs = lock(&self.jobs);
        if jobs.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            let pending = self.pending.clone();
            let spawned = std::thread::Builder::new()
                .name("weft-spares".to_owned())
                .spawn(move || {
                    // Ends when the runtime drops its sender.
                    for job in rx {
                        // A job that panics is logged, counted in
                        // `weft_panics_total`, and done; the thread goes on
                        // with the next.
                        let _ = weft_core::panics::contain("spares", || match job {
                            Job::Make(plugin, ask) => {
                                if let Some(plugin) = plugin.upgrade() {
                                    prepare(&plugin, &ask);
                                }
                            }
                            Job::Retire(retired) => drop(retired),
                        });
                        pending.fetch_sub(1, Ordering::AcqRel);
                    }
                });
            if let Err(e) = spawned {
                // Tried again at the next job.
                tracing::warn!(error = %e, "no thread for spare instances; calls make their own");
                return Err(job);
            }
            *jobs = Some(tx);
        }
        let Some(tx) = jobs.as_ref() else {
            return Err(job);
        };
        tx.send(job).map_err(|unsent| unsent.0)
    }
}

/// Makes a spare for `plugin`, as `ask` says, if it has none and a slot is
/// free, under the spares' and its tenant's caps.
fn prepare(plugin: &Arc<Loaded>, ask: &Ask) {
    // Taken up: a call from now on may ask again.
    plugin.spare.requested.store(false, Ordering::Release);
    if lock(&plugin.spare.ready).is_some() {
        return;
    }
    let runtime = &plugin.runtime;
    let Some(slot) = SpareSlot::take(runtime, &ask.tenant) else {
        return;
    };
    let config = runtime.config();
    let log = LogSink::new(config.log_limit, &plugin.meta.name, "spare");
    // Under the asking call's cap: a later call takes the spare only if
    // its own cap allows what the making took.
    let mut store = new_store(
        runtime,
        ask.timeout,
        ask.memory_limit,
        log,
        Reach::default(),
    );
    store.call_hook(|mut store, hook| {
        if matches!(hook, wasmtime::CallHook::CallingHost) {
            store.data_mut().host_calls += 1;
        }
        Ok(())
    });
    let started = std::time::Instant::now();
    let made = plugin.pre.instantiate(&mut store);
    let made_in = started.elapsed();
    plugin.spare.note(made_in);
    let instance = match made {
        Ok(instance) => instance,
        Err(e) => {
            // Its calls make their own, and say why if it fails there too.
            tracing::debug!(plugin = %plugin.meta.name, error = %format!("{e:#}"), "no spare instance");
            let _ = plugin
                .spare
                .failures
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    Some(n.saturating_add(1))
                });
            return;
        }
    };
    if store.data().host_calls > 0 {
        tracing::debug!(plugin = %plugin.meta.name, "its instantiation enters the host: no spare instances");
        plugin.spare.failures.store(u32::MAX, Ordering::Relaxed);
        return;
    }
    plugin.spare.failures.store(0, Ordering::Relaxed);
    *lock(&plugin.spare.ready) = Some(Spare {
        store,
        instance,
        slot,
        made_in,
    });
    let mut holders = lock(&runtime.shared.spares.holders);
    // Plugins dropped since (reloaded, removed) leave no entry behind.
    holders.retain(|h| h.strong_count() > 0);
    let me = Arc::downgrade(plugin);
    if !holders.iter().any(|h| h.ptr_eq(&me)) {
        holders.push(me);
    }
}

/// One of the runtime's instance slots, and one of its spares, held by a
/// spare until its call ends.
pub(super) struct SpareSlot {
    runtime: Runtime,
    tenant: Arc<str>,
}

impl SpareSlot {
    /// A slot for a spare of `tenant`, if spares hold fewer than their
    /// maximum and fewer than half the runtime's slots, and the tenant's
    /// fewer than [`Spares::per_tenant`].
    fn take(runtime: &Runtime, tenant: &Arc<str>) -> Option<Self> {
        let spares = &runtime.shared.spares;
        {
            let mut by_tenant = lock(&spares.by_tenant);
            let held = by_tenant.entry(Arc::clone(tenant)).or_insert(0);
            if *held >= spares.per_tenant() {
                return None;
            }
            *held += 1;
        }
        // From here on, a refusal gives the tenant's count back as the
        // slot's drop would.
        let give_back = || Self::forget(spares, tenant);
        let made = spares.made.fetch_add(1, Ordering::Relaxed);
        if made >= spares.max {
            spares.made.fetch_sub(1, Ordering::Relaxed);
            give_back();
            return None;
        }
        if !runtime.shared.slots.try_acquire_below_half() {
            spares.made.fetch_sub(1, Ordering::Relaxed);
            give_back();
            return None;
        }
        Some(Self {
            runtime: runtime.clone(),
            tenant: Arc::clone(tenant),
        })
    }

    /// Takes one spare off `tenant`'s count; the entry goes with its last.
    fn forget(spares: &Spares, tenant: &Arc<str>) {
        let mut by_tenant = lock(&spares.by_tenant);
        if let Some(held) = by_tenant.get_mut(tenant) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                by_tenant.remove(tenant);
            }
        }
    }
}

impl Drop for SpareSlot {
    fn drop(&mut self) {
        let spares = &self.runtime.shared.spares;
        self.runtime.shared.slots.release();
        spares.made.fetch_sub(1, Ordering::Relaxed);
        Self::forget(spares, &self.tenant);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::RuntimeConfig;

    /// A store (with no instance in it) and a spare's slot, as a call on
    /// a spare leaves them.
    fn retired(runtime: &Runtime) -> Retired {
        let slot = SpareSlot::take(runtime, &Arc::from("test")).expect("a free slot");
        let log = LogSink::new(0, "test", "retired");
        let store = new_store(
            runtime,
            Duration::from_secs(1),
            1 << 20,
            log,
            Reach::default(),
        );
        Retired {
            _store: store,
            _slot: slot,
        }
    }

    /// The spare slots held: a retired store's is given back when it is
    /// dropped.
    fn held(runtime: &Runtime) -> u32 {
        runtime.shared.spares.made.load(Ordering::Relaxed)
    }

    #[test]
    fn one_tenants_spares_hold_at_most_a_quarter_of_them() {
        let config = RuntimeConfig {
            pooling: false,
            ..RuntimeConfig::default()
        };
        let runtime = Runtime::new(config).unwrap();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let mut held: Vec<SpareSlot> = (0..4)
            .map(|_| SpareSlot::take(&runtime, &a).expect("a slot for a"))
            .collect();
        assert!(SpareSlot::take(&runtime, &a).is_none(), "a fifth for a");
        let for_b = SpareSlot::take(&runtime, &b).expect("a slot for b");
        assert_eq!(self::held(&runtime), 5);
        held.pop();
        let again = SpareSlot::take(&runtime, &a).expect("a slot for a, once one went");
        drop((held, again, for_b));
        assert_eq!(self::held(&runtime), 0);
        assert!(lock(&runtime.shared.spares.by_tenant).is_empty());
    }

    #[test]
    fn an_idle_spare_thread_drops_a_retired_store() {
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let spares = &runtime.shared.spares;
        let store = retired(&runtime);
        assert_eq!(held(&runtime), 1);
        spares.retire(store);
        assert!(lock(&spares.jobs).is_some(), "no spare thread was started");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while held(&runtime) > 0 || spares.pending.load(Ordering::Acquire) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the retired store was not dropped"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_busy_spare_thread_leaves_the_drop_to_the_caller() {
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let spares = &runtime.shared.spares;
        // A job queued or under way, as a spare being made.
        spares.pending.store(1, Ordering::Release);
        spares.retire(retired(&runtime));
        assert_eq!(held(&runtime), 0, "the store was not dropped at once");
        assert!(
            lock(&spares.jobs).is_none(),
            "a thread was asked to drop it"
        );
        assert_eq!(spares.pending.load(Ordering::Acquire), 1);
    }
}
