//! Cores shared between tenants. A guest call that has run for [`LONG`]
//! is a long call, and for [`BATCH`] after that every call of its tenant
//! counts as long from its first epoch tick. While more than one tenant
//! has made calls lately (within 50 ms), the long calls of each tenant run
//! at most its share of the cores at once (the cores over the tenants, at
//! least one), in turns of [`QUANTUM`], and after each turn the tenant's
//! long calls rest for [`REST`]. They are batch work: the short calls of
//! every tenant, and the host's own work, go first, and a call holding a
//! turn runs at the least OS priority ([`priority`]), so the kernel takes
//! its core away whenever other work of the host can run. The others wait
//! at an epoch tick, off the CPU. A tenant alone, and every short call of
//! a tenant whose calls have not run long, is never held back.
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

/// How long after one of its calls was long a tenant's every call counts
/// as long from its first epoch tick: a tenant that starts many calls
/// which compute does not get [`LONG`] of free time with each.
const BATCH: Duration = Duration::from_secs(1);

/// How long a long call keeps its turn while another long call of its
/// tenant waits.
pub(crate) const QUANTUM: Duration = Duration::from_millis(50);

/// How long a tenant's long calls rest after a turn, while other tenants
/// call: they run at most a quarter of the time then. Long calls are batch
/// work: the short calls of every tenant and the host's own work (the
/// requests, the commits), which the share does not see, go first.
pub(crate) const REST: Duration = QUANTUM.saturating_mul(3);

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
    /// When each tenant last had a call that ran past [`LONG`].
    long: HashMap<Arc<str>, Instant>,
}

impl State {
    /// How many long calls of `tenant` may run at once now.
    fn allowed(&mut self, tenant: &str, cores: usize, now: Instant) -> usize {
        if self.seen.len() > 64 {
            self.seen.retain(|_, at| now.duration_since(*at) < RECENT);
            self.resting.retain(|_, until| now < *until);
            self.long.retain(|_, at| now.duration_since(*at) < BATCH);
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
}

/// Why a long call stops waiting for its turn.
pub(crate) enum Stop {
    /// Its deadline passed.
    Deadline,
    /// It was cancelled.
    Cancelled,
}

/// The most guest time one epoch tick adds to a call's count: two ticks'
/// worth. A call's time between ticks is counted up to this, so the time
/// it waited for a slot, for its instance, in the host or for a turn is
/// not counted as computing.
const TICK_MOST: Duration = Duration::from_millis(10);

/// One call's place in the share: made as the call starts, given back
/// when its [`Ending`] is dropped (the call's end) and while it waits in
/// the host.
#[derive(Debug)]
pub(crate) struct Turn {
    tenant: Arc<str>,
    /// Whether its tenant had a long call lately when it began, so that it
    /// counts as long from its first tick.
    batch: bool,
    clock: Mutex<Clock>,
}

#[derive(Debug)]
struct Clock {
    /// When it took its turn, while it holds one.
    since: Option<Instant>,
    /// Its last tick (at first, its start).
    last: Instant,
    /// Its guest time as the ticks count it.
    ran: Duration,
    /// Whether it holds its turn while other tenants call: its thread
    /// runs at the least priority while it runs guest code.
    lowered: bool,
}

/// What a tick decided about the thread's priority, done once no lock is
/// held: a thread lowered while holding the share's lock would keep every
/// other call waiting for it.
fn set_priority(lowered: bool) {
    if lowered {
        priority::lower();
    } else {
        priority::restore();
    }
}

impl Turn {
    /// A call of `tenant` starting now.
    pub(crate) fn begin(tenant: &str) -> Arc<Turn> {
        let tenant: Arc<str> = Arc::from(tenant);
        let now = Instant::now();
        let batch = {
            let mut state = weft_core::lock(&Share::global().state);
            state.seen.insert(Arc::clone(&tenant), now);
            state
                .long
                .get(&*tenant)
                .is_some_and(|at| now.duration_since(*at) < BATCH)
        };
        Arc::new(Turn {
            tenant,
            batch,
            clock: Mutex::new(Clock {
                since: None,
                last: now,
                ran: Duration::ZERO,
                lowered: false,
            }),
        })
    }

    /// At an epoch tick of the call: `Ok` to go on (at once for a short
    /// call or one whose turn holds, after a wait otherwise).
    pub(crate) fn tick(&self, deadline: Instant, cancel: &AtomicBool) -> Result<(), Stop> {
        let now = Instant::now();
        let mut clock = weft_core::lock(&self.clock);
        let step = now.duration_since(clock.last).min(TICK_MOST);
        clock.ran += step;
        clock.last = now;
        let long = clock.ran >= LONG;
        if !long && !self.batch {
            return Ok(());
        }
        // Raised before it takes the share's lock, which every call's
        // start and end take too, and lowered again (below) once it is
        // let go: a thread at the least priority must not hold it.
        if clock.lowered {
            priority::restore();
        }
        let share = Share::global();
        let mut state = weft_core::lock(&share.state);
        if long {
            state.long.insert(Arc::clone(&self.tenant), now);
        }
        let allowed = state.allowed(&self.tenant, share.cores, now);
        let shared = allowed != usize::MAX;
        if let Some(taken) = clock.since {
            let holding = state.holding.get(&*self.tenant).copied().unwrap_or(0);
            let waiting = state.waiting.get(&*self.tenant).copied().unwrap_or(0);
            let turn_over = now.duration_since(taken) >= QUANTUM;
            if holding <= allowed && !(turn_over && (shared || waiting > 0)) {
                // It goes on, at the least priority only while it shares.
                drop(state);
                clock.lowered = shared;
                drop(clock);
                set_priority(shared);
                return Ok(());
            }
            // Its turn is over: give it back, rest while others call, and
            // wait behind the tenant's other long calls.
            give_back(&mut state, &self.tenant);
            clock.since = None;
            clock.lowered = false;
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
                clock.since = Some(now);
                clock.lowered = allowed != usize::MAX;
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
        drop(state);
        // The wait is not guest time.
        clock.last = Instant::now();
        let lowered = clock.lowered;
        drop(clock);
        set_priority(lowered);
        stopped.map_or(Ok(()), Err)
    }

    /// As the call's guest code calls into the host (`true`) or the host
    /// returns to it. The guest's time up to the host call is counted, and
    /// the host call's is not (a step that waits on HTTP does not become
    /// long). Host work runs at the thread's own priority, and the guest's
    /// again at the least while it holds a shared turn.
    pub(crate) fn in_host(&self, entering: bool) {
        let now = Instant::now();
        let mut clock = weft_core::lock(&self.clock);
        if entering {
            let step = now.duration_since(clock.last).min(TICK_MOST);
            clock.ran += step;
        }
        clock.last = now;
        let lowered = clock.lowered;
        drop(clock);
        if lowered {
            set_priority(!entering);
        }
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
        priority::restore();
        {
            let mut clock = weft_core::lock(&self.clock);
            clock.lowered = false;
            if clock.since.take().is_none() {
                return;
            }
        }
        let share = Share::global();
        give_back(&mut weft_core::lock(&share.state), &self.tenant);
        share.freed.notify_all();
    }
}

/// Ends its call's [`Turn`] when dropped, at the end of the call on its
/// thread (also when it unwinds): the turn goes back at once, and the
/// thread has its own priority back.
pub(crate) struct Ending(pub(crate) Arc<Turn>);

impl Drop for Ending {
    fn drop(&mut self) {
        priority::restore();
        let share = Share::global();
        let held = weft_core::lock(&self.0.clock).since.take().is_some();
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

/// The OS priority of the thread a long call runs on, while it holds a
/// turn beside other tenants: lowered to the least (nice 19), so the
/// kernel gives a core to the host's threads and to short calls the
/// moment they can run, and to the long call only what they leave.
/// Restored when the turn goes back or the call ends. A thread may always
/// lower its priority, but raising it back needs `CAP_SYS_NICE` or an
/// `RLIMIT_NICE` that allows it; where the host may not, priorities are
/// left alone and turns and rests are the whole share.
pub(crate) mod priority {
    use std::cell::Cell;
    use std::sync::OnceLock;

    thread_local! {
        /// The priority this thread had before a long call lowered it.
        static LOWERED_FROM: Cell<Option<i32>> = const { Cell::new(None) };
    }

    /// The least priority, as a nice value.
    pub(super) const LEAST: i32 = 19;

    /// Whether this process may lower a thread's priority and raise it
    /// back: tried once, on a thread of its own.
    pub(crate) fn may_change() -> bool {
        static MAY: OnceLock<bool> = OnceLock::new();
        *MAY.get_or_init(|| {
            std::thread::Builder::new()
                .name("weft-nice-probe".to_owned())
                .spawn(|| {
                    let Some(was) = get() else { return false };
                    was < LEAST && set(LEAST) && set(was)
                })
                .ok()
                .and_then(|probe| probe.join().ok())
                .unwrap_or(false)
        })
    }

    /// Lowers this thread's priority, if the process may raise it back.
    pub(crate) fn lower() {
        if LOWERED_FROM.get().is_some() || !may_change() {
            return;
        }
        if let Some(was) = get()
            && set(LEAST)
        {
            LOWERED_FROM.set(Some(was));
        }
    }

    /// Gives this thread back the priority [`lower`] took, if it did.
    pub(crate) fn restore() {
        if let Some(was) = LOWERED_FROM.take()
            && !set(was)
        {
            tracing::warn!(
                nice = was,
                "could not restore a worker thread's priority after a long call"
            );
        }
    }

    #[cfg(target_os = "linux")]
    pub(super) fn get() -> Option<i32> {
        // SAFETY: `getpriority` on this thread's id reads a number and
        // touches no memory of ours. -1 is also a valid priority, so errno
        // tells a failure apart.
        unsafe {
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, this_thread());
            (nice != -1 || *libc::__errno_location() == 0).then_some(nice)
        }
    }

    #[cfg(target_os = "linux")]
    fn set(nice: i32) -> bool {
        // SAFETY: as in `get`; on Linux a thread id names one thread.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, this_thread(), nice) == 0 }
    }

    #[cfg(target_os = "linux")]
    fn this_thread() -> libc::id_t {
        // SAFETY: `gettid` has no preconditions.
        let id = unsafe { libc::gettid() };
        libc::id_t::try_from(id).unwrap_or(0)
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn get() -> Option<i32> {
        None
    }

    #[cfg(not(target_os = "linux"))]
    fn set(_: i32) -> bool {
        false
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

    #[test]
    fn a_call_counts_its_guest_time_and_marks_its_tenant_long() {
        let cancel = AtomicBool::new(false);
        let deadline = Instant::now() + Duration::from_secs(60);
        let turn = Turn::begin("share-test-long");
        assert!(!turn.batch);
        // A wait between ticks (in the host, for a slot) counts at most
        // TICK_MOST.
        std::thread::sleep(LONG);
        turn.tick(deadline, &cancel).ok().unwrap();
        assert!(weft_core::lock(&turn.clock).ran <= TICK_MOST);
        // Ticks of computing add up to LONG, and mark the tenant.
        while weft_core::lock(&turn.clock).ran < LONG {
            std::thread::sleep(Duration::from_millis(5));
            turn.tick(deadline, &cancel).ok().unwrap();
        }
        assert!(Turn::begin("share-test-long").batch);
        assert!(!Turn::begin("share-test-other").batch);
    }

    #[test]
    fn a_lowered_thread_gets_its_priority_back() {
        std::thread::spawn(|| {
            let was = priority::get();
            priority::lower();
            if priority::may_change() {
                assert_eq!(priority::get(), Some(priority::LEAST));
            }
            priority::restore();
            assert_eq!(priority::get(), was);
        })
        .join()
        .unwrap();
    }
}
