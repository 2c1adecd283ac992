//! One simulated world: a store, a clock, one or two stepped engines on it,
//! and the choices a seed makes between them.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use serde_json::json;

use weft_core::ids::SplitMix;
use weft_core::{Clock, SimClock, Timestamp};
use weft_engine::plugins::PluginDir;
use weft_engine::sweep::{Pass, Retention};
use weft_engine::{Answer, Answering, Engine, EngineConfig, Quiet, Stepper};
use weft_model::{Format, Retain, Workflow, WorkflowDir};
use weft_store::{RunFilter, Store, StoreError, Write};

use crate::check::Facts;
use crate::store::{Backend, SimStore};

/// How many runs each host holds at most (children aside).
const MAX_RESIDENT: usize = 2;

/// How long a host's leases hold without a renewal.
const LEASE_TTL: std::time::Duration = std::time::Duration::from_secs(5);

/// The most a host's clock is off the world's, either way: two hosts'
/// clocks differ by at most twice this. A host renews its row each third
/// of a lease, so its peers judge it gone too early only past two thirds
/// of a lease of skew (3.3 s here).
const MAX_SKEW_MS: i64 = 1_500;

/// The fastest a skewed host's clock gains or loses, in millionths.
const MAX_DRIFT_PPM: i64 = 5_000;

/// The tenant besides `default` whose runs the simulation starts: at most
/// one of its runs is resident on a host, and it has twice the turns.
const SECOND_TENANT: &str = "second";

/// When every simulation starts.
const START: Timestamp = Timestamp(1_700_000_000_000);

/// The workflows runs are started from. Together they reach every kind of
/// wait: a retry delay, a `sleep`, a step deadline, an `await` with a
/// timeout, a run deadline, a `parallel`, an `emit` and a child run.
const WORKFLOWS: [&str; 3] = [
    "id: chain
steps:
  - { id: a, uses: count }
  - { id: b, uses: flaky, retry: { max_attempts: 3, backoff: fixed, initial: 1s } }
  - { id: nap, sleep: 2s }
  - id: both
    parallel:
      - { id: c, uses: count }
      - { id: d, uses: count, timeout: 1s }
      - { id: e, uses: flaky, retry: { max_attempts: 3, backoff: fixed, initial: 10ms } }
  - { id: tell, emit: done, with: { ok: true } }
",
    "id: gate
timeout: 30s
steps:
  - { id: ask, await: { timeout: 5s } }
  - { id: after, uses: count }
",
    "id: parent
steps:
  - { id: kid, subflow: chain }
  - { id: last, uses: count }
",
];

/// What the seed chose to happen next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Host `host` does its queued piece of work at `index`.
    Work { host: usize, index: usize },
    /// Host `host`'s `count` oldest held writes commit as one batch.
    Commit { host: usize, count: usize },
    /// They fail as one batch whose transaction failed.
    Fail { host: usize, count: usize },
    /// The clock moves on, and every host hands over its due timers.
    Advance { ms: u64 },
    /// A run of workflow `workflow` starts on host `host`.
    Start { host: usize, workflow: usize },
    /// Host `host` is asked to cancel run `run`.
    Cancel { host: usize, run: String },
    /// Host `host` is asked to answer run `run`'s `await` step.
    Answer { host: usize, run: String },
    /// Host `host` is asked to retry run `run`, which failed, timed out or
    /// was cancelled.
    Retry { host: usize, run: String },
    /// Host `host` is asked to pause run `run`.
    Pause { host: usize, run: String },
    /// Host `host` is asked to resume paused run `run`.
    Unpause { host: usize, run: String },
    /// Host `host` arms a pending timer again.
    Rearm { host: usize, key: (u64, u64) },
    /// Host `host` dies and starts again from the store alone.
    Crash { host: usize },
    /// Host `host` looks up the child runs it waits on.
    Poll { host: usize },
    /// The store's next `count` reads fail.
    FailReads { count: usize },
    /// Host `host` takes free work for its places, as its claims thread
    /// does.
    Claim { host: usize },
    /// Host `host`'s sweeper sweeps a page of its pass over the store
    /// (other events may come between its pages), with a retention of one
    /// second for ended runs.
    Sweep { host: usize },
    /// The store's next `count` commits are stored, but each is reported
    /// failed (the connection dropped after `COMMIT`).
    Ambiguous { count: usize },
    /// Host `host` stops taking events (the OS stopped it, or a stall):
    /// it renews nothing, and its leases may lapse and be taken over.
    Freeze { host: usize },
    /// Frozen host `host` goes on with its old state.
    Thaw { host: usize },
    /// Host `host` moves run `run` to the other revision of its workflow
    /// (the same steps, another definition).
    Migrate { host: usize, run: String },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Work { host, index } => write!(f, "host {host}: work #{index}"),
            Event::Commit { host, count } => write!(f, "host {host}: commit {count} writes"),
            Event::Fail { host, count } => write!(f, "host {host}: a batch of {count} fails"),
            Event::Advance { ms } => write!(f, "clock +{ms} ms"),
            Event::Start { host, workflow } => write!(
                f,
                "host {host}: start `{}`{}",
                WORKFLOWS[*workflow % WORKFLOWS.len()]
                    .lines()
                    .next()
                    .unwrap_or_default(),
                if *workflow >= WORKFLOWS.len() {
                    format!(" of tenant `{SECOND_TENANT}`")
                } else {
                    String::new()
                }
            ),
            Event::Cancel { host, run } => write!(f, "host {host}: cancel {run}"),
            Event::Answer { host, run } => write!(f, "host {host}: answer {run}/ask"),
            Event::Retry { host, run } => write!(f, "host {host}: retry {run}"),
            Event::Pause { host, run } => write!(f, "host {host}: pause {run}"),
            Event::Unpause { host, run } => write!(f, "host {host}: resume paused {run}"),
            Event::Rearm { host, key } => write!(f, "host {host}: arm timer {} again", key.1),
            Event::Crash { host } => write!(f, "host {host}: crash, recover"),
            Event::Poll { host } => write!(f, "host {host}: poll child runs"),
            Event::FailReads { count } => write!(f, "the next {count} reads fail"),
            Event::Claim { host } => write!(f, "host {host}: claim free work"),
            Event::Sweep { host } => write!(f, "host {host}: sweep a page"),
            Event::Ambiguous { count } => {
                write!(f, "the next {count} commits are stored but reported failed")
            }
            Event::Freeze { host } => write!(f, "host {host}: frozen"),
            Event::Thaw { host } => write!(f, "host {host}: thawed, goes on"),
            Event::Migrate { host, run } => write!(f, "host {host}: migrate {run}"),
        }
    }
}

/// Where the outcome of something queued with a run's cell comes.
type Told = std::sync::mpsc::Receiver<Result<(), StoreError>>;

/// A host: an engine driven by its stepper, and the answers it owes.
struct Host {
    engine: Engine,
    stepper: Stepper,
    /// Answers queued with a run's cell, not yet decided.
    answers: Vec<(String, Told)>,
    /// Cancellations queued with a run's cell, not yet decided.
    cancels: Vec<(String, Told)>,
    /// Where its sweeper's pass is.
    pass: Pass,
    /// Its clock, which may be off the world's.
    clock: Arc<dyn Clock>,
    /// Since when (world time) it takes no events, if it is frozen.
    frozen: Option<u64>,
    /// Whether it was ever frozen: it may then hold runs another host took
    /// over, until its next commit of each is refused.
    zombie: bool,
}

/// A host's clock: the world's, off by an offset that drifts, never past
/// [`MAX_SKEW_MS`] either way. It never goes back.
#[derive(Debug)]
struct Skewed {
    world: Arc<SimClock>,
    offset_ms: i64,
    drift_ppm: i64,
}

impl Clock for Skewed {
    fn now(&self) -> Timestamp {
        let now = self.world.now().as_millis();
        let elapsed = i64::try_from(now.saturating_sub(START.as_millis())).unwrap_or(i64::MAX);
        let off = self
            .offset_ms
            .saturating_add(elapsed.saturating_mul(self.drift_ppm) / 1_000_000)
            .clamp(-MAX_SKEW_MS, MAX_SKEW_MS);
        Timestamp(now.saturating_add_signed(off))
    }

    fn real_wait(&self, millis: u64) -> std::time::Duration {
        self.world.real_wait(millis)
    }
}

/// How a simulation is shaped.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Chosen events before the world is left to settle.
    pub events: usize,
    /// At most this many runs are started.
    pub runs: usize,
    /// How often a commit's answer is lost: the chance, in thousandths,
    /// that an event is an [`Event::Ambiguous`]. Raised to look for the
    /// bugs only lost answers show.
    pub lost_answers: usize,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            events: 300,
            runs: 6,
            lost_answers: 15,
        }
    }
}

pub(crate) struct World {
    rng: SplitMix,
    /// Draws for the faults added after the first ones (ambiguous commits,
    /// frozen hosts, skewed clocks), apart, so that `rng` draws as before
    /// them and old seeds play much as they did.
    extra: SplitMix,
    /// Each host's clock: its offset from the world's (ms), and its drift
    /// (millionths). Kept across crashes: the machine's clock.
    clocks: Vec<(i64, i64)>,
    sim_store: Arc<SimStore>,
    /// The same, as the engines see it.
    store: Arc<dyn Store>,
    clock: Arc<SimClock>,
    /// Batches applied when the invariants were last checked.
    checked: Option<u64>,
    plugins: Arc<PluginDir>,
    workflows: Vec<Arc<Workflow>>,
    /// The other revision of each of `workflows`, at the same index.
    revised: Vec<Arc<Workflow>>,
    /// With `WEFT_SIM_WATCH=ID` (and `WEFT_SIM_LOG`), the cells holding
    /// runs whose id contains `ID` are logged after every event.
    watch: Option<String>,
    /// Runs migrated, with their lease's epoch after the last migration:
    /// a lease below it is stale.
    moved: BTreeMap<String, u64>,
    served: Arc<WorkflowDir>,
    hosts: Vec<Host>,
    /// Whether a failed batch, a crash or a re-armed timer may be chosen.
    faults: bool,
    pub(crate) facts: Facts,
    pub(crate) trace: Vec<Event>,
    /// The second tenant's quota of stored bytes, if it has one.
    stored_quota: Option<u64>,
    started: usize,
    /// Runs retried so far.
    retried: usize,
    /// Hosts thawed after their lease lapsed.
    pub(crate) zombies: usize,
    shape: Shape,
}

/// One plugin directory for every world: it needs a runtime, which is
/// costly to make, and the simulated plugins never use it.
fn plugins() -> Result<Arc<PluginDir>, String> {
    static PLUGINS: OnceLock<Result<Arc<PluginDir>, String>> = OnceLock::new();
    PLUGINS
        .get_or_init(|| {
            let config = weft_runtime::RuntimeConfig {
                pooling: false,
                // No thread making instances beside the simulated ones.
                spare_instances: 0,
                ..weft_runtime::RuntimeConfig::default()
            };
            let runtime = weft_runtime::Runtime::new(config)
                .map_err(|e| format!("a wasmtime runtime: {e}"))?;
            let dir = std::env::temp_dir().join("weft-sim-plugins");
            Ok(Arc::new(PluginDir::new(runtime, dir)))
        })
        .clone()
}

/// The simulated workflows, their other revisions, and those served.
type Parsed = Result<(Vec<Arc<Workflow>>, Vec<Arc<Workflow>>, Arc<WorkflowDir>), String>;

/// The workflows, parsed once for every world: those served, and the
/// other revision of each (the same steps, a comment more), which a
/// migration moves runs to and back.
fn workflows() -> Parsed {
    static PARSED: OnceLock<Parsed> = OnceLock::new();
    PARSED
        .get_or_init(|| {
            let mut workflows = Vec::new();
            let mut revised = Vec::new();
            let mut served = WorkflowDir::default();
            let parse = |tenant: &str, text: &str| {
                let mut workflow = weft_model::parse(text, Format::Yaml, "sim")
                    .map_err(|e| format!("a simulated workflow: {e}"))?;
                workflow.id = weft_core::tenant::qualify(tenant, &workflow.id);
                Ok::<_, String>(Arc::new(workflow))
            };
            // Each workflow twice: as tenant `default`'s, and as a second
            // tenant's, held to a resident cap and a weight (`host`).
            for tenant in [weft_core::tenant::DEFAULT, SECOND_TENANT] {
                for text in WORKFLOWS {
                    let workflow = parse(tenant, text)?;
                    served.insert(Arc::clone(&workflow));
                    workflows.push(workflow);
                    revised.push(parse(tenant, &format!("{text}# revision 2\n"))?);
                }
            }
            Ok((workflows, revised, Arc::new(served)))
        })
        .clone()
}

impl World {
    pub(crate) fn new(seed: u64, shape: Shape, backend: &Backend) -> Result<Self, String> {
        weft_engine::verify_walks();
        weft_core::ids::repeatable(Some(seed ^ 0x5EED));
        let mut rng = SplitMix::new(seed);
        let sim_store = Arc::new(
            SimStore::new(backend, seed).map_err(|e| format!("the simulated store: {e}"))?,
        );
        let store: Arc<dyn Store> = Arc::clone(&sim_store) as Arc<dyn Store>;
        let (workflows, revised, served) = workflows()?;
        let hosts = 1 + usize::from(rng.chance(30));
        let mut extra = SplitMix::new(seed ^ 0x0FA1_7ED5_u64);
        // A third of the worlds have skewed clocks.
        let skewed = extra.chance(33);
        let clocks = (0..hosts)
            .map(|_| {
                if !skewed {
                    return (0, 0);
                }
                let offset = extra.below(13) as i64 * 250 - MAX_SKEW_MS;
                let drift = extra.below(5) as i64 * 2_500 - MAX_DRIFT_PPM;
                (offset, drift)
            })
            .collect();
        let mut world = Self {
            rng,
            extra,
            clocks,
            sim_store,
            store,
            checked: None,
            clock: Arc::new(SimClock::new(START)),
            plugins: plugins()?,
            workflows,
            revised,
            moved: BTreeMap::new(),
            watch: std::env::var("WEFT_SIM_WATCH").ok(),
            served,
            hosts: Vec::new(),
            faults: true,
            facts: Facts::default(),
            trace: Vec::new(),
            started: 0,
            retried: 0,
            zombies: 0,
            shape,
            stored_quota: None,
        };
        // Some worlds hold the second tenant to 500 bytes to 3 KB of stored
        // bytes (a run's record is some 500), so that some of its starts
        // and results are refused, and to 1 to 3 pending timers (a run's
        // deadline is one), so that some of its sleeps and awaits are.
        if world.rng.chance(30) {
            let limit = 500 + 250 * world.rng.below(12) as u64;
            world.limit_stored_bytes(limit)?;
        }
        world.subscribe_to_ends()?;
        for n in 0..hosts {
            let host = world.host(n);
            world.hosts.push(host);
        }
        Ok(world)
    }

    /// Tenant `default` (and not the second tenant) subscribes to its
    /// runs' ends, so that each of its runs that ends leaves one notice,
    /// and no run of the second tenant leaves any.
    fn subscribe_to_ends(&mut self) -> Result<(), String> {
        let channel = weft_core::names::RUNS_ENDED;
        let write = Write::Subscribe(Box::new(weft_store::SubscriptionRecord {
            key: format!("{channel}/sim"),
            channel: channel.to_owned(),
            name: "sim".to_owned(),
            target: weft_store::Target::Sse,
            max_attempts: 3,
            backoff_ms: 1000,
            max_backoff_ms: 60_000,
            ack_timeout_ms: 30_000,
            created_at: START,
        }));
        match self.sim_store.inner().apply(&[&write]) {
            Ok(answers) if answers.iter().all(Result::is_ok) => Ok(()),
            other => Err(format!("the subscription to ends: {other:?}")),
        }
    }

    /// The second tenant's quota: `limit` stored bytes, and 1 to 3
    /// pending timers, as `limit` says (no draw of its own, so that the
    /// seeds play as before it).
    fn limit_stored_bytes(&mut self, limit: u64) -> Result<(), String> {
        let record = weft_store::TenantRecord {
            name: SECOND_TENANT.to_owned(),
            created_at: START,
            quota: weft_store::Quota {
                max_stored_bytes: Some(limit),
                max_timers: Some(1 + (limit / 250) % 3),
                ..weft_store::Quota::default()
            },
        };
        let write = Write::Access(weft_store::AccessWrite::put_tenant(&record, true));
        self.stored_quota = Some(limit);
        match self.sim_store.inner().apply(&[&write]) {
            Ok(answers) if answers.iter().all(Result::is_ok) => Ok(()),
            other => Err(format!("the second tenant's quota: {other:?}")),
        }
    }

    /// How many hosts have a clock off the world's.
    pub(crate) fn skewed(&self) -> usize {
        self.clocks.iter().filter(|c| **c != (0, 0)).count()
    }

    /// Host `n` starting on the store, recovering as `Host::start` does.
    fn host(&self, n: usize) -> Host {
        let (offset_ms, drift_ppm) = self.clocks[n];
        let clock: Arc<dyn Clock> = if (offset_ms, drift_ppm) == (0, 0) {
            Arc::clone(&self.clock) as Arc<dyn Clock>
        } else {
            Arc::new(Skewed {
                world: Arc::clone(&self.clock),
                offset_ms,
                drift_ppm,
            })
        };
        let source = Arc::new(crate::fake::source(Arc::clone(&self.store)));
        let config = EngineConfig {
            workers: 1,
            max_resident: MAX_RESIDENT,
            lease_ttl: LEASE_TTL,
            ..EngineConfig::default()
        };
        let (engine, stepper) = Engine::stepped(
            Arc::clone(&self.store),
            Arc::clone(&self.plugins),
            source,
            Arc::clone(&clock),
            config,
        );
        engine.set_workflows(Arc::clone(&self.served) as Arc<dyn weft_model::Workflows>);
        engine.set_tenant_limits(
            SECOND_TENANT,
            weft_engine::TenantLimits {
                weight: 2,
                max_resident: Some(1),
                ..weft_engine::TenantLimits::default()
            },
        );
        // `Host::start`'s recovery, on this thread in the store's order.
        // `Host::start` stops when it fails, and the process starts again:
        // here the host tries again (the store fails a few reads at most);
        // each step of a recovery is safe to take again. A host that went
        // on without its outbox carried out would leave a child recorded
        // nowhere.
        for _ in 0..10 {
            if engine.recover(1).is_ok() {
                break;
            }
        }
        Host {
            engine,
            stepper,
            answers: Vec::new(),
            cancels: Vec::new(),
            pass: Pass::new(),
            clock,
            frozen: None,
            zombie: false,
        }
    }

    /// Runs the chosen events, checking every invariant after each, then
    /// lets the world settle and checks that every run ended.
    pub(crate) fn play(&mut self) -> Result<(), String> {
        self.play_events()
            .map_err(|violation| match self.stored_quota {
                Some(limit) => {
                    format!("{violation} (tenant `{SECOND_TENANT}` may store {limit} bytes)")
                }
                None => violation,
            })
    }

    fn play_events(&mut self) -> Result<(), String> {
        self.check()?;
        for n in 0..self.shape.events {
            let event = self.choose();
            // With `WEFT_SIM_LOG`, the engine's log reads between them.
            tracing::info!(target: "weft_sim", "event {n}: {event}");
            self.trace.push(event.clone());
            self.apply(event);
            if let Some(watch) = &self.watch {
                for (n, host) in self.hosts.iter().enumerate() {
                    for line in host.stepper.describe() {
                        if line.contains(watch.as_str()) {
                            tracing::info!(target: "weft_sim", "  host {n} holds {line}");
                        }
                    }
                }
            }
            self.check()?;
        }
        self.settle()?;
        for (n, host) in self.hosts.iter().enumerate() {
            tracing::info!(target: "weft_sim", "host {n} is {}", host.stepper.host());
            for cell in host.stepper.describe() {
                tracing::info!(target: "weft_sim", "host {n} holds {cell}");
            }
            for id in host.stepper.resident() {
                let inner = self.sim_store.inner();
                let run = inner.run(&id).ok().flatten();
                let steps: Vec<String> = inner
                    .steps(&id)
                    .unwrap_or_default()
                    .iter()
                    .map(|r| {
                        format!(
                            "{}#{} {:?} {:?} child {:?} awaiting {}",
                            r.path,
                            r.seq,
                            r.output,
                            r.error.as_ref().map(|e| &e.code),
                            r.child,
                            r.awaiting
                        )
                    })
                    .collect();
                tracing::info!(target: "weft_sim", "  {id}: {:?} {:?} {steps:?}", run.as_ref().map(|r| &r.workflow), run.as_ref().map(|r| r.state));
            }
        }
        self.facts.ended(self.sim_store.inner())
    }

    /// Checks the invariants, if anything was written or acknowledged
    /// since they were last checked.
    fn check(&mut self) -> Result<(), String> {
        let acknowledged = self.collect_answers();
        let writes = self.sim_store.writes();
        if self.checked == Some(writes) && !acknowledged {
            return Ok(());
        }
        self.checked = Some(writes);
        self.one_driver()?;
        self.free_work()?;
        self.no_self_waits()?;
        self.walks_agree()?;
        let limited = self.stored_quota.map(|_| SECOND_TENANT);
        self.facts
            .check(self.sim_store.inner(), &self.workflows, limited)
    }

    /// No run is resident in two hosts at once: one owner per run.
    fn one_driver(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeMap::new();
        let inner = self.sim_store.inner();
        for (n, host) in self.hosts.iter().enumerate() {
            for (id, epoch) in host.stepper.resident_epochs() {
                // A frozen host, or a zombie, may hold a run whose lease
                // was taken over while it was frozen: that drive is stale
                // (its commits are refused), unless it holds the current
                // lease.
                if host.zombie || host.frozen.is_some() {
                    let current = inner.lease(&id).ok().flatten().map(|l| l.epoch);
                    if current != Some(epoch) {
                        continue;
                    }
                }
                if let Some((other, theirs)) = seen.insert(id.clone(), (n, epoch)) {
                    // A host may still hold a run that ended elsewhere, until
                    // its next commit is refused; if the run was retried
                    // since, another host may hold it too. The stale one
                    // holds a lease from before the retry, below the epoch
                    // the retry left.
                    let retried = inner
                        .steps(&id)
                        .unwrap_or_default()
                        .iter()
                        .filter(|r| r.path == weft_store::RETRY_PATH)
                        .map(|r| weft_store::retry_epoch(r.seq))
                        .max();
                    if retried.is_some_and(|floor| epoch.min(theirs) < floor) {
                        continue;
                    }
                    // A migration frees the run's lease: a host that held
                    // it before holds a stale lease until its next commit
                    // is refused.
                    if self
                        .moved
                        .get(&id)
                        .is_some_and(|floor| epoch.min(theirs) < *floor)
                    {
                        continue;
                    }
                    let lease = inner.lease(&id).ok().flatten();
                    let run = inner.run(&id).ok().flatten();
                    return Err(format!(
                        "run {id} is driven by hosts {other} and {n} at once (at epochs {theirs} and {epoch}; lease {lease:?}, {} suspended {:?}, parent {:?})",
                        run.as_ref().map_or("-", |r| r.workflow.as_str()),
                        run.as_ref().map(|r| r.suspended),
                        run.as_ref()
                            .and_then(|r| r.parent.as_ref())
                            .map(|p| p.run.clone()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Free work is free: every parked run in the store is running with no
    /// lease. And no host holds more runs than its places, nor more of the
    /// second tenant's than its cap of one, children aside (a child is
    /// never parked: its parent holds a place for it).
    fn free_work(&self) -> Result<(), String> {
        let inner = self.sim_store.inner();
        let read = |e: StoreError| format!("reading the parked runs: {e}");
        for (id, tenant) in inner.parked(usize::MAX).map_err(read)? {
            let run = inner.run(&id).map_err(read)?;
            let lease = inner.lease(&id).map_err(read)?;
            let running = run.as_ref().is_some_and(|r| !r.state.is_terminal());
            if !running || lease.is_some() {
                return Err(format!(
                    "run {id} of tenant `{tenant}` is parked, but its state is {:?} and its lease {lease:?}",
                    run.map(|r| r.state)
                ));
            }
        }
        for (n, host) in self.hosts.iter().enumerate() {
            let mut held = Vec::new();
            for id in host.stepper.resident() {
                if let Some(run) = inner.run(&id).map_err(read)?
                    && run.parent.is_none()
                {
                    held.push(run);
                }
            }
            if held.len() > MAX_RESIDENT {
                return Err(format!(
                    "host {n} holds {} runs that are not children, over its {MAX_RESIDENT} places",
                    held.len()
                ));
            }
            let second = held
                .iter()
                .filter(|run| weft_core::tenant::of(&run.workflow) == SECOND_TENANT)
                .count();
            if second > 1 {
                return Err(format!(
                    "host {n} holds {second} runs of tenant `{SECOND_TENANT}`, over its cap of one"
                ));
            }
        }
        Ok(())
    }

    /// Every walk that started from a run's cursor (the top-level steps
    /// found done before) found what a walk from the start finds. Counted
    /// per thread, which steps every host of this world.
    fn walks_agree(&self) -> Result<(), String> {
        match weft_engine::walk_mismatches() {
            0 => Ok(()),
            n => Err(format!(
                "{n} walks from a run's cursor differed from a walk from the start"
            )),
        }
    }

    /// No answer to a commit submits or commits a write itself: on a
    /// committing thread, that could wait for the thread itself.
    fn no_self_waits(&self) -> Result<(), String> {
        for (n, host) in self.hosts.iter().enumerate() {
            let waits = host.stepper.commits().self_waits();
            if waits > 0 {
                return Err(format!(
                    "host {n}: {waits} writes submitted from an answer to a commit (the committing thread could wait for itself)"
                ));
            }
        }
        Ok(())
    }

    /// Picks the next event among those that can happen.
    fn choose(&mut self) -> Event {
        if let Some(event) = self.choose_extra() {
            return event;
        }
        loop {
            let host = self.rng.below(self.hosts.len());
            if self.hosts[host].frozen.is_some() {
                // A frozen host takes no events; the clock still moves.
                match self.rng.below(100) {
                    62..=71 => return Event::Advance { ms: 1000 },
                    _ => continue,
                }
            }
            let stepper = &self.hosts[host].stepper;
            let (ready, held) = (stepper.ready(), stepper.commits().pending());
            match self.rng.below(100) {
                0..=34 if ready > 0 => {
                    let index = self.rng.below(ready);
                    return Event::Work { host, index };
                }
                35..=59 if held > 0 => {
                    let count = 1 + self.rng.below(held);
                    return Event::Commit { host, count };
                }
                60..=61 if held > 0 && self.faults => {
                    let count = 1 + self.rng.below(held);
                    return Event::Fail { host, count };
                }
                62..=71 => {
                    let ms = [1, 10, 100, 500, 1000, 3000][self.rng.below(6)];
                    return Event::Advance { ms };
                }
                74..=79 if self.started < self.shape.runs => {
                    let workflow = self.rng.below(self.workflows.len());
                    return Event::Start { host, workflow };
                }
                80..=81 => {
                    if let Some(run) = self.some_run(None) {
                        return Event::Cancel { host, run };
                    }
                }
                82 => {
                    if let Some(run) = self.some_ended_run() {
                        return Event::Retry { host, run };
                    }
                }
                83..=86 => {
                    if let Some(run) = self.some_run(Some("gate")) {
                        return Event::Answer { host, run };
                    }
                }
                87 => {
                    if let Some(run) = self.some_run(None) {
                        return Event::Pause { host, run };
                    }
                }
                88 => {
                    if let Some(run) = self.some_paused_run() {
                        return Event::Unpause { host, run };
                    }
                }
                89..=91 if self.faults => {
                    let keys = self.store.timer_keys().unwrap_or_default();
                    if !keys.is_empty() {
                        let key = keys[self.rng.below(keys.len())];
                        return Event::Rearm { host, key };
                    }
                }
                92 if self.faults => return Event::Crash { host },
                96 if self.faults => {
                    let count = 1 + self.rng.below(3);
                    return Event::FailReads { count };
                }
                93..=94 => return Event::Poll { host },
                97..=98 => return Event::Claim { host },
                72..=73 | 95 | 99 => return Event::Sweep { host },
                _ => {}
            }
        }
    }

    /// The faults drawn from `extra`, if one is chosen: an ambiguous
    /// commit, a host frozen, a frozen host thawed (most often once its
    /// lease lapsed), and while one is frozen, more time passing.
    fn choose_extra(&mut self) -> Option<Event> {
        if self.extra.below(1000) < 8 {
            let host = self.extra.below(self.hosts.len());
            if self.hosts[host].frozen.is_none()
                && let Some(run) = self.some_unended_run()
            {
                return Some(Event::Migrate { host, run });
            }
        }
        if !self.faults {
            return None;
        }
        let now = self.clock.now().as_millis();
        let ttl = u64::try_from(LEASE_TTL.as_millis()).unwrap_or(u64::MAX);
        for host in 0..self.hosts.len() {
            if let Some(since) = self.hosts[host].frozen {
                let lapsed = now >= since.saturating_add(ttl);
                if self.extra.chance(if lapsed { 8 } else { 1 }) {
                    return Some(Event::Thaw { host });
                }
                if self.extra.chance(10) {
                    return Some(Event::Advance { ms: 1000 });
                }
            }
        }
        let lost = self.shape.lost_answers.min(996);
        match self.extra.below(1000) {
            n if n < lost => Some(Event::Ambiguous {
                count: 1 + self.extra.below(2),
            }),
            n if n < lost + 4 => {
                let host = self.extra.below(self.hosts.len());
                self.hosts[host]
                    .frozen
                    .is_none()
                    .then_some(Event::Freeze { host })
            }
            _ => None,
        }
    }

    /// Host `host` moves run `run` to the other revision of its workflow:
    /// from the one served to the revised one, or back. A migration that
    /// lands is noted: the run stays under that revision (no write decided
    /// on what it read before may undo it) until moved again.
    fn migrate(&mut self, host: usize, run: &str) {
        let Ok(Some(stored)) = self.sim_store.inner().run(run) else {
            return;
        };
        let Some(index) = self.workflows.iter().position(|w| w.id == stored.workflow) else {
            return;
        };
        let digest = |w: &Workflow| {
            weft_store::DefinitionRecord::new(&w.origin, w.format.name(), &w.source).digest
        };
        let (to, revisions) = if stored.definition == digest(&self.workflows[index]) {
            (Arc::clone(&self.revised[index]), (1, 2))
        } else {
            (Arc::clone(&self.workflows[index]), (2, 1))
        };
        let moved = match self.hosts[host]
            .engine
            .migrate(run, &to, revisions, "sim", false)
        {
            Ok(()) => {
                self.facts.migrated(run, &digest(&to));
                true
            }
            Err(e) => {
                tracing::info!(target: "weft_sim", "not migrated: {e}");
                // It may have landed all the same: either revision holds.
                let unknown =
                    matches!(&e, weft_engine::MigrateError::Store(e) if e.outcome_unknown());
                if unknown {
                    self.facts.migration_unknown(run);
                }
                unknown
            }
        };
        // A pause pending on another host is lost only if the move landed
        // (an unknown outcome may be a read that failed before any write).
        let landed = moved
            && self
                .sim_store
                .inner()
                .run(run)
                .ok()
                .flatten()
                .is_some_and(|stored| stored.definition == digest(&to));
        if landed {
            self.facts.moved_by(run, host);
        }
        // The lease a move left: those below it are stale.
        if moved && let Ok(Some(lease)) = self.sim_store.inner().lease(run) {
            let floor = self.moved.entry(run.to_owned()).or_default();
            *floor = (*floor).max(lease.epoch);
            self.checked = None;
        }
    }

    /// Thaws host `host`. It may hold runs taken over while it was frozen
    /// (its row lapses two thirds of a lease after its last renewal, by
    /// the clock of whoever judges it), so it is held to the rules of a
    /// zombie from now on; it is counted as one if a whole lease passed.
    fn thaw(&mut self, host: usize) {
        let ttl = u64::try_from(LEASE_TTL.as_millis()).unwrap_or(u64::MAX);
        if let Some(since) = self.hosts[host].frozen.take() {
            self.hosts[host].zombie = true;
            if self.clock.now().as_millis() >= since.saturating_add(ttl) {
                self.zombies += 1;
            }
        }
    }

    /// A page of host `host`'s sweeper: ended runs are kept one second,
    /// the rest as by default. Its deletes are applied to the store
    /// directly, as a batch of their own. A failed read ends the pass, as
    /// it does the sweeper's; the next page starts another.
    fn sweep(&mut self, host: usize) {
        let retention = Retention {
            runs: Retain::For(std::time::Duration::from_secs(1)),
            ..Retention::default()
        };
        let store = Arc::clone(&self.store);
        let commit = move |writes: Vec<Write>| {
            let refs: Vec<&Write> = writes.iter().collect();
            match store.apply(&refs) {
                Ok(answers) => answers
                    .into_iter()
                    .map(|answer| answer.map_err(StoreError::from))
                    .collect(),
                Err(e) => writes.iter().map(|_| Err(e.clone())).collect(),
            }
        };
        let host = &mut self.hosts[host];
        let page = host
            .engine
            .sweep_page_with(&mut host.pass, &retention, false, &commit);
        if page.is_err() || host.pass.is_done() {
            host.pass = Pass::new();
        }
    }

    /// A run that has not ended, of `workflow` if given.
    fn some_run(&mut self, workflow: Option<&str>) -> Option<String> {
        let runs: Vec<String> = self
            .store
            .runs(&RunFilter::default(), usize::MAX)
            .unwrap_or_default()
            .into_iter()
            .filter(|run| !run.state.is_terminal())
            .filter(|run| workflow.is_none_or(|w| run.workflow == w))
            .map(|run| run.id)
            .collect();
        (!runs.is_empty()).then(|| runs[self.rng.below(runs.len())].clone())
    }

    /// A run that has not ended, drawn with `extra`, read past the
    /// store's faults.
    fn some_unended_run(&mut self) -> Option<String> {
        let runs: Vec<String> = self
            .sim_store
            .inner()
            .runs(&RunFilter::default(), usize::MAX)
            .unwrap_or_default()
            .into_iter()
            .filter(|run| !run.state.is_terminal())
            .map(|run| run.id)
            .collect();
        (!runs.is_empty()).then(|| runs[self.extra.below(runs.len())].clone())
    }

    /// A paused run.
    fn some_paused_run(&mut self) -> Option<String> {
        let runs: Vec<String> = self
            .store
            .runs(&RunFilter::default(), usize::MAX)
            .unwrap_or_default()
            .into_iter()
            .filter(|run| run.paused.is_some() && !run.state.is_terminal())
            .map(|run| run.id)
            .collect();
        (!runs.is_empty()).then(|| runs[self.rng.below(runs.len())].clone())
    }

    /// A top-level run that ended other than succeeded and was retried
    /// fewer than twice, while the world has retried fewer runs than it
    /// may start.
    fn some_ended_run(&mut self) -> Option<String> {
        if self.retried >= self.shape.runs {
            return None;
        }
        let runs: Vec<String> = self
            .store
            .runs(&RunFilter::default(), usize::MAX)
            .unwrap_or_default()
            .into_iter()
            .filter(|run| {
                run.state.is_terminal()
                    && run.state != weft_store::RunState::Succeeded
                    && run.parent.is_none()
            })
            .filter(|run| {
                let steps = self.store.steps(&run.id).unwrap_or_default();
                steps
                    .iter()
                    .filter(|r| r.path == weft_store::RETRY_PATH)
                    .count()
                    < 2
            })
            .map(|run| run.id)
            .collect();
        (!runs.is_empty()).then(|| runs[self.rng.below(runs.len())].clone())
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::Work { host, index } => {
                self.hosts[host].stepper.run_ready(index);
            }
            Event::Commit { host, count } => {
                self.hosts[host].stepper.commits().commit(count);
            }
            Event::Fail { host, count } => {
                self.hosts[host].stepper.commits().fail(count);
            }
            Event::Advance { ms } => {
                self.clock.advance(std::time::Duration::from_millis(ms));
                // Every live host renews in time (each third of a lease, as
                // its lease thread does); then each takes over the runs of
                // hosts that are gone (crashed ones).
                for host in self.hosts.iter().filter(|h| h.frozen.is_none()) {
                    host.stepper.renew_if_due();
                }
                for host in self.hosts.iter().filter(|h| h.frozen.is_none()) {
                    host.stepper.take_over();
                    host.stepper.claim_free_work();
                    host.stepper.tick();
                }
            }
            Event::Start { host, workflow } => {
                self.started += 1;
                let workflow = Arc::clone(&self.workflows[workflow]);
                let _ = self.hosts[host]
                    .engine
                    .start(workflow, json!({}), Box::new(Quiet));
            }
            Event::Cancel { host, run } => match self.hosts[host].stepper.cancel(&run) {
                Ok(Some(told)) => self.hosts[host].cancels.push((run, told)),
                Ok(None) => {
                    self.facts.cancel_acknowledged(&run);
                    self.checked = None;
                }
                Err(_) => {}
            },
            Event::Answer { host, run } => {
                let answer = Answer::Complete(json!({ "approved": true }));
                let host = &mut self.hosts[host];
                if let Answering::Queued(told) = host.stepper.act(&run, "ask", &answer) {
                    host.answers.push((run, told));
                }
            }
            Event::Retry { host, run } => {
                self.retried += 1;
                for cell in self.hosts[host].stepper.describe() {
                    tracing::debug!(target: "weft_sim", "before the retry, host {host} holds {cell}");
                }
                // Refused (it moved on, a read failed) or taken in here.
                let retried = self.hosts[host]
                    .engine
                    .retry(&run, None, "sim", Box::new(Quiet));
                tracing::info!(target: "weft_sim", "retried: {:?}", retried.map(|h| h.id().to_owned()));
            }
            Event::Pause { host, run } => {
                // Refused (ended, parked, driven elsewhere), pending, or
                // durable: then it must hold until a resume.
                // What is under way as the pause is asked for, and the
                // records then: nothing else may start while it is pending.
                let records = self
                    .sim_store
                    .inner()
                    .steps(&run)
                    .map_or(0, |steps| steps.len());
                let under_way = self.hosts[host].stepper.busy_leaves(&run);
                match self.hosts[host].engine.pause(&run, "sim") {
                    Ok(weft_engine::Pausing::Paused) => {
                        self.facts.pause_acknowledged(&run);
                        self.checked = None;
                    }
                    // A host once frozen may answer for a run another
                    // host took meanwhile, until it renews: not counted.
                    Ok(weft_engine::Pausing::Pending) if !self.hosts[host].zombie => {
                        let under_way = under_way.unwrap_or_default();
                        self.facts.pause_pending(&run, host, records, under_way);
                        self.checked = None;
                    }
                    Ok(weft_engine::Pausing::Pending) => {}
                    Err(_) => {}
                }
            }
            Event::Unpause { host, run } => {
                // Taken back before the call: a pause that lands after it
                // is a pause of its own.
                self.facts.resumed(&run);
                let resumed = self.hosts[host].engine.unpause(&run, Box::new(Quiet));
                tracing::info!(target: "weft_sim", "resumed: {:?}", resumed.map(|h| h.is_some()));
            }
            Event::Rearm { host, key } => self.hosts[host].stepper.arm(key),
            Event::Crash { host } => {
                self.facts.host_lost(host);
                self.hosts[host].stepper.crash();
                // Only the store survives: the new host recovers from it.
                let fresh = self.host(host);
                self.hosts[host] = fresh;
            }
            Event::Poll { host } => self.hosts[host].stepper.poll_watches(),
            Event::FailReads { count } => self.sim_store.fail_reads(count),
            Event::Claim { host } => {
                self.hosts[host].stepper.claim_free_work();
            }
            Event::Sweep { host } => self.sweep(host),
            Event::Ambiguous { count } => self.sim_store.lose_answers(count),
            Event::Freeze { host } => {
                self.facts.host_lost(host);
                self.hosts[host].frozen = Some(self.clock.now().as_millis());
            }
            Event::Thaw { host } => self.thaw(host),
            Event::Migrate { host, run } => self.migrate(host, &run),
        }
    }

    /// Polls the answers and cancellations queued with cells; a
    /// cancellation is acknowledged when its outcome is `Ok`. True if one
    /// was.
    fn collect_answers(&mut self) -> bool {
        let mut acknowledged = false;
        for host in &mut self.hosts {
            host.answers
                .retain(|(run, told)| Answering::outcome(told, run, "ask").is_none());
            let stepper = &host.stepper;
            let facts = &mut self.facts;
            host.cancels
                .retain(|(run, told)| match stepper.cancelled(run, told) {
                    None => true,
                    Some(Ok(())) => {
                        facts.cancel_acknowledged(run);
                        acknowledged = true;
                        false
                    }
                    Some(Err(_)) => false,
                });
        }
        acknowledged
    }

    /// No more faults: everything queued is done, every write commits,
    /// waiting `await` steps are answered and time moves to each next
    /// timer, until nothing is left to do.
    fn settle(&mut self) -> Result<(), String> {
        self.faults = false;
        self.sim_store.heal();
        for host in 0..self.hosts.len() {
            if self.hosts[host].frozen.is_some() {
                let event = Event::Thaw { host };
                self.trace.push(event.clone());
                self.apply(event);
            }
        }
        let mut stalled = 0;
        for _ in 0..10_000 {
            let mut busy = false;
            for host in 0..self.hosts.len() {
                let stepper = &self.hosts[host].stepper;
                if stepper.ready() > 0 {
                    stepper.run_ready(0);
                    busy = true;
                } else if stepper.commits().pending() > 0 {
                    stepper.commits().commit(usize::MAX);
                    busy = true;
                }
            }
            self.check()?;
            if busy {
                stalled = 0;
                continue;
            }
            if let Some(run) = self.some_run(Some("gate")) {
                let event = Event::Answer { host: 0, run };
                self.trace.push(event.clone());
                self.apply(event);
            }
            // Paused runs are resumed, to end. Time goes on all the same:
            // a resume may be refused until something due later lands (a
            // child fenced off by its parent's cancellation is paused
            // until the cancellation, tried again after a failure, ends
            // it).
            if let Some(run) = self.some_paused_run() {
                let event = Event::Unpause { host: 0, run };
                self.trace.push(event.clone());
                self.apply(event);
                if self.hosts.iter().any(|h| h.stepper.ready() > 0) {
                    stalled = 0;
                    continue;
                }
            }
            for host in &self.hosts {
                host.stepper.poll_watches();
            }
            // How long until each host's next timer is due by its own
            // clock.
            let next = self
                .hosts
                .iter()
                .filter_map(|h| {
                    let due = h.stepper.next_due()?;
                    Some(due.saturating_sub(h.clock.now().as_millis()))
                })
                .min();
            let ready: usize = self.hosts.iter().map(|h| h.stepper.ready()).sum();
            match next {
                Some(wait) if ready == 0 => {
                    let ms = wait.max(1);
                    let event = Event::Advance { ms };
                    self.trace.push(event.clone());
                    self.apply(event);
                }
                Some(_) => {}
                // Nothing armed anywhere: a run may still wait for a gone
                // host's leases to lapse. Three leases pass, a third at a
                // time, so that live hosts renew as their lease threads
                // would (a whole lease at once would be a stall).
                None if ready == 0 => {
                    if stalled >= 9 {
                        return Ok(());
                    }
                    stalled += 1;
                    let ms = u64::try_from(LEASE_TTL.as_millis() / 3 + 1).unwrap_or(u64::MAX);
                    let event = Event::Advance { ms };
                    self.trace.push(event.clone());
                    self.apply(event);
                }
                None => {}
            }
        }
        Ok(())
    }
}

/// The name of each kind of event, as tallies count them.
pub(crate) const KINDS: [&str; 20] = [
    "work",
    "commit",
    "failed batch",
    "clock",
    "start",
    "cancel",
    "answer",
    "retry",
    "pause",
    "resume paused",
    "re-arm",
    "crash",
    "poll",
    "failed reads",
    "claims",
    "sweeps",
    "ambiguous commits",
    "freezes",
    "thaws",
    "migrations",
];

/// The name of `event`'s kind, one of [`KINDS`].
fn kind(event: &Event) -> &'static str {
    match event {
        Event::Work { .. } => KINDS[0],
        Event::Commit { .. } => KINDS[1],
        Event::Fail { .. } => KINDS[2],
        Event::Advance { .. } => KINDS[3],
        Event::Start { .. } => KINDS[4],
        Event::Cancel { .. } => KINDS[5],
        Event::Answer { .. } => KINDS[6],
        Event::Retry { .. } => KINDS[7],
        Event::Pause { .. } => KINDS[8],
        Event::Unpause { .. } => KINDS[9],
        Event::Rearm { .. } => KINDS[10],
        Event::Crash { .. } => KINDS[11],
        Event::Poll { .. } => KINDS[12],
        Event::FailReads { .. } => KINDS[13],
        Event::Claim { .. } => KINDS[14],
        Event::Sweep { .. } => KINDS[15],
        Event::Ambiguous { .. } => KINDS[16],
        Event::Freeze { .. } => KINDS[17],
        Event::Thaw { .. } => KINDS[18],
        Event::Migrate { .. } => KINDS[19],
    }
}

/// How many events of each kind `trace` holds; every kind is named, the
/// ones that did not happen with 0.
pub(crate) fn tally(trace: &[Event]) -> BTreeMap<&'static str, usize> {
    let mut tally: BTreeMap<&'static str, usize> = KINDS.iter().map(|k| (*k, 0)).collect();
    for event in trace {
        *tally.entry(kind(event)).or_default() += 1;
    }
    tally
}
