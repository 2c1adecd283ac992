//! Cores shared between tenants. A guest call that has run for
//! [`LONG`] is a long call: while more than one tenant has made calls
//! lately (within 50 ms), the long calls of each tenant run at most its share of the
//! cores at once (the cores over the tenants, at least one), in turns of
//! [`QUANTUM`], and after each turn the tenant's long calls rest for
//! [`REST`] (they are batch work: the short calls of every tenant, and the
//! host's own work, go first). The others wait at an epoch tick, off the CPU. A
//! tenant alone, and every short call, is never held back.
//!
//! Without this a tenant whose steps spin to their deadline on most of the
//! workers takes most of the CPU from another's short steps: the workers
//! are capped per tenant, the cores were not.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a call runs before it counts as long.
pub(crate) const LONG: Duration = Duration::from_millis(20);

/// How long a long call keeps its turn while another long call of its
/// tenant waits.
pub(crate) const QUANTUM: Duration = Duration::from_millis(50);

/// How long a tenant's long calls rest after a turn, while other tenants
/// call: they run at most half the time then.
pub(crate) const REST: Duration = QUANTUM;

/// How lately a tenant must have started or ended a call to count as
/// running now: a tenant with steady work calls far more often, and one
/// whose calls are rare (a cron trigger) holds no one back for long.
const RECENT: Duration = Duration::from_millis(50);

/// How often a waiting call looks at its deadline and its cancel flag.
const WAKE: Duration = Duration::from_millis(5);

#[derive(Default)]
struct State {
    /// When each tenant last started or ended a call.
    seen: HashMap<Arc<str>, Instant>,
    /// The long calls of each tenant that hold a turn.
    holding: HashMap<Arc<str>, usize>,
    /// The long calls of each tenant waiting for one.
    waiting: HashMap<Arc<str>, usize>,
    /// Until when each tenant's long calls rest after a turn.
    resting: HashMap<Arc<str>, Instant>,
}

impl State {
    /// How many long calls of `tenant` may run at once now.
    fn allowed(&mut self, tenant: &str, cores: usize, now: Instant) -> usize {
        if self.seen.len() > 64 {
            self.seen.retain(|_, at| now.duration_since(*at) < RECENT);
            self.resting.retain(|_, until| now < *until);
        }
        let active = self
            .seen
            .iter()
            .filter(|(name, at)| &***name == tenant || now.duration_since(**at) < RECENT)
            .count();
        if active <= 1 {
            usize::MAX
        } else {
            (cores / active).max(1)
        }
    }

    /// Whether `tenant`'s long calls rest now.
    fn rests(&self, tenant: &str, now: Instant) -> bool {
        self.resting.get(tenant).is_some_and(|until| now < *until)
    }
}

/// The share of the cores, for every runtime of the process (they share
/// the cores too).
pub(crate) struct Share {
    state: Mutex<State>,
    freed: Condvar,
    cores: usize,
}

impl Share {
    fn global() -> &'static Share {
        static SHARE: OnceLock<Share> = OnceLock::new();
        SHARE.get_or_init(|| Share {
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
            cores: std::thread::available_parallelism().map_or(1, usize::from),
        })
    }

    fn touch(&self, tenant: &Arc<str>) {
        weft_core::lock(&self.state)
            .seen
            .insert(Arc::clone(tenant), Instant::now());
    }
}

/// Why a long call stops waiting for its turn.
pub(crate) enum Stop {
    /// Its deadline passed.
    Deadline,
    /// It was cancelled.
    Cancelled,
}

/// One call's place in the share: made as the call starts, given back
/// when its [`Ending`] is dropped (the call's end) and while it waits in
/// the host.
#[derive(Debug)]
pub(crate) struct Turn {
    tenant: Arc<str>,
    started: Instant,
    /// When it took its turn, while it holds one.
    since: Mutex<Option<Instant>>,
}

impl Turn {
    /// A call of `tenant` starting now.
    pub(crate) fn begin(tenant: &str) -> Arc<Turn> {
        let tenant: Arc<str> = Arc::from(tenant);
        Share::global().touch(&tenant);
        Arc::new(Turn {
            tenant,
            started: Instant::now(),
            since: Mutex::new(None),
        })
    }

    /// At an epoch tick of the call: `Ok` to go on (at once for a short
    /// call or one whose turn holds, after a wait otherwise).
    pub(crate) fn tick(&self, deadline: Instant, cancel: &AtomicBool) -> Result<(), Stop> {
        let now = Instant::now();
        if now.duration_since(self.started) < LONG {
            return Ok(());
        }
        let share = Share::global();
        let mut since = weft_core::lock(&self.since);
        let mut state = weft_core::lock(&share.state);
        let allowed = state.allowed(&self.tenant, share.cores, now);
        if let Some(taken) = *since {
            let holding = state.holding.get(&*self.tenant).copied().unwrap_or(0);
            let waiting = state.waiting.get(&*self.tenant).copied().unwrap_or(0);
            let shared = allowed != usize::MAX;
            let turn_over = now.duration_since(taken) >= QUANTUM;
            if holding <= allowed && !(turn_over && (shared || waiting > 0)) {
                return Ok(());
            }
            // Its turn is over: give it back, rest while others call, and
            // wait behind the tenant's other long calls.
            give_back(&mut state, &self.tenant);
            *since = None;
            if shared && turn_over {
                let until = now + REST;
                let resting = state
                    .resting
                    .entry(Arc::clone(&self.tenant))
                    .or_insert(until);
                *resting = (*resting).max(until);
            }
            share.freed.notify_all();
        }
        *state.waiting.entry(Arc::clone(&self.tenant)).or_default() += 1;
        let stopped = loop {
            let now = Instant::now();
            let allowed = state.allowed(&self.tenant, share.cores, now);
            let rests = allowed != usize::MAX && state.rests(&self.tenant, now);
            let holding = state.holding.entry(Arc::clone(&self.tenant)).or_default();
            if *holding < allowed && !rests {
                *holding += 1;
                *since = Some(now);
                break None;
            }
            if cancel.load(Ordering::Relaxed) {
                break Some(Stop::Cancelled);
            }
            if now >= deadline {
                break Some(Stop::Deadline);
            }
            state = share
                .freed
                .wait_timeout(state, WAKE)
                .map_or_else(|e| e.into_inner().0, |(state, _)| state);
        };
        if let Some(waiting) = state.waiting.get_mut(&*self.tenant) {
            *waiting = waiting.saturating_sub(1);
        }
        stopped.map_or(Ok(()), Err)
    }
}

fn give_back(state: &mut State, tenant: &str) {
    if let Some(holding) = state.holding.get_mut(tenant) {
        *holding = holding.saturating_sub(1);
    }
}

impl Turn {
    /// Gives the call's turn back, if it holds one: it waits in the host,
    /// off the CPU.
    pub(crate) fn pause(&self) {
        if weft_core::lock(&self.since).take().is_none() {
            return;
        }
        let share = Share::global();
        give_back(&mut weft_core::lock(&share.state), &self.tenant);
        share.freed.notify_all();
    }
}

/// Ends its call's [`Turn`] when dropped: the turn goes back at once,
/// whenever the call's store (which the epoch callback holding the turn
/// lives in) is dropped.
pub(crate) struct Ending(pub(crate) Arc<Turn>);

impl Drop for Ending {
    fn drop(&mut self) {
        let share = Share::global();
        let held = weft_core::lock(&self.0.since).take().is_some();
        let mut state = weft_core::lock(&share.state);
        state
            .seen
            .insert(Arc::clone(&self.0.tenant), Instant::now());
        if held {
            give_back(&mut state, &self.0.tenant);
            drop(state);
            share.freed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_alone_may_run_on_every_core_and_two_share_them() {
        let mut state = State::default();
        let now = Instant::now();
        state.seen.insert(Arc::from("a"), now);
        assert_eq!(state.allowed("a", 2, now), usize::MAX);
        state.seen.insert(Arc::from("b"), now);
        assert_eq!(state.allowed("a", 2, now), 1);
        assert_eq!(state.allowed("a", 8, now), 4);
        // A tenant not seen lately no longer counts.
        let later = now + RECENT + Duration::from_millis(1);
        state.seen.insert(Arc::from("a"), later);
        assert_eq!(state.allowed("a", 2, later), usize::MAX);
    }
}
