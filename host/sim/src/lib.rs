//! weft's deterministic simulator.
//!
//! The real engine runs stepped ([`weft_engine::Engine::stepped`]): no
//! threads, writes held until the simulator commits them. One seed then
//! decides everything that the threads, the disk and the clock would
//! otherwise decide:
//! - which queued piece of work runs next (so step results come back in any
//!   order, late ones included);
//! - when held writes commit, in which batches, and which batches fail;
//! - when the clock moves, and so which timers come due;
//! - cancellations, answers to `await` steps, timers armed twice;
//! - crashes, each followed by a recovery from the store alone;
//! - one or two hosts on one store.
//!
//! After every event the invariants are checked against the store (see
//! `check.rs`). The world is then left to settle with no more faults, and
//! every run must end. The store is a real redb database, held in memory,
//! or a real PostgreSQL database ([`run_on`]).
//!
//! A failing seed replays exactly: ids and random numbers come from the
//! seed too ([`weft_core::ids::repeatable`]). [`shrink`] finds the shortest
//! run of chosen events, for that seed, that still fails.

mod check;
mod fake;
pub mod mutations;
mod store;
mod world;

use std::collections::BTreeMap;

pub use store::Backend;
pub use world::{Event, Shape};

/// A seed that broke an invariant.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// How many events were chosen before the world settled.
    pub events: usize,
    /// Which invariant broke, and how.
    pub violation: String,
    /// Every event up to the failure, in order.
    pub trace: Vec<Event>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "seed {} fails: {}", self.seed, self.violation)?;
        writeln!(f, "after {} events:", self.trace.len())?;
        for (n, event) in self.trace.iter().enumerate() {
            writeln!(f, "  {n:>4}  {event}")?;
        }
        write!(
            f,
            "replay: weft sim --seed {} --events {}",
            self.seed, self.events
        )
    }
}

/// What a passing seed did.
#[derive(Debug, Clone)]
pub struct Passed {
    /// How many events of each kind happened.
    pub tally: BTreeMap<&'static str, usize>,
}

/// Plays seed `seed` in a world of shape `shape`, on a redb store in
/// memory.
pub fn run(seed: u64, shape: Shape) -> Result<Passed, Failure> {
    run_on(seed, shape, &Backend::Memory)
}

/// Plays seed `seed` in a world of shape `shape`, on a store of `backend`.
pub fn run_on(seed: u64, shape: Shape, backend: &Backend) -> Result<Passed, Failure> {
    // The engine's warnings about the faults the seed injects are noise
    // here: what broke, if anything, is in the failure.
    if std::env::var_os("WEFT_SIM_LOG").is_some() {
        return play(seed, shape, backend);
    }
    let quiet = tracing::subscriber::NoSubscriber::default();
    tracing::subscriber::with_default(quiet, || play(seed, shape, backend))
}

fn play(seed: u64, shape: Shape, backend: &Backend) -> Result<Passed, Failure> {
    let failure = |violation, trace| Failure {
        seed,
        events: shape.events,
        violation,
        trace,
    };
    let mut world = match world::World::new(seed, shape, backend) {
        Ok(world) => world,
        Err(e) => return Err(failure(e, Vec::new())),
    };
    let outcome = world.play();
    weft_core::ids::repeatable(None);
    match outcome {
        Ok(()) => {
            let mut tally = world::tally(&world.trace);
            tally.insert("results over quota", world.facts.refused("storage_quota"));
            tally.insert("timers over quota", world.facts.refused("timer_quota"));
            tally.insert("skewed hosts", world.skewed());
            tally.insert("zombies", world.zombies);
            Ok(Passed { tally })
        }
        Err(violation) => Err(failure(violation, std::mem::take(&mut world.trace))),
    }
}

/// The shortest failure of `failure`'s seed: the fewest chosen events
/// before settling that still break an invariant (not always the same
/// one), found by trying each count up to the one that failed.
pub fn shrink(failure: &Failure, shape: Shape) -> Failure {
    shrink_on(failure, shape, &Backend::Memory)
}

/// [`shrink`], on a store of `backend`.
pub fn shrink_on(failure: &Failure, shape: Shape, backend: &Backend) -> Failure {
    for events in 0..failure.events {
        if let Err(shorter) = run_on(failure.seed, Shape { events, ..shape }, backend) {
            return shorter;
        }
    }
    failure.clone()
}
