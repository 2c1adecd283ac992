//! `weft sim`: the deterministic simulator, over many seeds or one.

use std::process::ExitCode;

#[cfg(feature = "sim")]
use std::{collections::BTreeMap, time::Instant};

#[cfg(feature = "sim")]
use weft::sim::{Backend, Shape, run_on, shrink_on};

/// Runs the real engine through seeded interleavings (steps in any order,
/// failed and slow commits, crashes, duplicate timers, two hosts on one
/// store), checking every invariant after every event. On redb in memory,
/// or with `--store postgres://...` on that database, each seed in a
/// schema of its own.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Play this many seeds, from --from.
    #[arg(long, default_value_t = 1_000, conflicts_with = "seed")]
    seeds: u64,
    /// The first seed of --seeds (or of --hours).
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Play seeds from --from until this many hours have passed (instead
    /// of --seeds), then say how many passed and how fast.
    #[arg(long, conflicts_with_all = ["seed", "seeds"])]
    hours: Option<f64>,
    /// Replay this one seed, printing what it did.
    #[arg(long)]
    seed: Option<u64>,
    /// Chosen events per seed before the world settles (default: the
    /// simulator's shape).
    #[arg(long)]
    events: Option<usize>,
    /// How often a commit is stored but answered as failed: the chance,
    /// in thousandths, that an event makes the next commits so.
    /// Default: the simulator's shape.
    #[arg(long)]
    lost_answers: Option<usize>,
}

/// Without the `sim` feature: says how to build a `weft` that has it.
#[cfg(not(feature = "sim"))]
pub fn main(_: &SimArgs, _: Option<String>) -> anyhow::Result<ExitCode> {
    anyhow::bail!(
        "this weft was built without the simulator; build one with it: \
         cargo build --release -p weft-cli --features sim (scripts/setup does)"
    )
}

/// Plays on redb in memory, or with `--store postgres://...` on that
/// database (each seed in a schema of its own, dropped after it).
#[cfg(feature = "sim")]
pub fn main(args: &SimArgs, postgres: Option<String>) -> anyhow::Result<ExitCode> {
    let defaults = Shape::default();
    let shape = Shape {
        events: args.events.unwrap_or(defaults.events),
        lost_answers: args.lost_answers.unwrap_or(defaults.lost_answers),
        ..defaults
    };
    let backend = postgres.map_or(Backend::Memory, Backend::Postgres);
    let run = |seed, shape| run_on(seed, shape, &backend);
    let shrink = |failure: &weft::sim::Failure, shape| shrink_on(failure, shape, &backend);
    if let Some(seed) = args.seed {
        return Ok(match run(seed, shape) {
            Ok(passed) => {
                out!("seed {seed} passed: {:?}", passed.tally);
                ExitCode::SUCCESS
            }
            Err(failure) => {
                out!("{failure}");
                ExitCode::FAILURE
            }
        });
    }
    let started = Instant::now();
    let mut last = Instant::now();
    let mut injected: BTreeMap<&'static str, usize> = BTreeMap::new();
    let until = match args.hours {
        Some(hours) if hours.is_finite() && hours > 0.0 && hours <= 24.0 * 365.0 => {
            Some(started + std::time::Duration::from_secs_f64(hours * 3600.0))
        }
        Some(hours) => {
            eprintln!("error: --hours {hours}: give a number of hours above 0, at most a year's");
            return Ok(ExitCode::from(super::EXIT_INVALID));
        }
        None => None,
    };
    let end = if until.is_some() {
        u64::MAX
    } else {
        args.from.saturating_add(args.seeds)
    };
    let mut played: u64 = 0;
    for (n, seed) in (args.from..end).enumerate() {
        if until.is_some_and(|until| Instant::now() >= until) {
            break;
        }
        played += 1;
        match run(seed, shape) {
            Ok(passed) => {
                for (kind, count) in passed.tally {
                    *injected.entry(kind).or_default() += count;
                }
            }
            Err(failure) => {
                eprintln!("seed {seed} failed; looking for its shortest trace");
                out!("{}", shrink(&failure, shape));
                return Ok(ExitCode::FAILURE);
            }
        }
        if last.elapsed().as_secs() >= 10 {
            last = Instant::now();
            eprintln!("{} seeds passed ({:.0}/s)", n + 1, rate(n + 1, started));
        }
    }
    out!(
        "{played} seeds passed in {:.1} s: {:.0} seeds/s (seeds {}..{}, {} events each)",
        started.elapsed().as_secs_f64(),
        rate(usize::try_from(played).unwrap_or(usize::MAX), started),
        args.from,
        args.from.saturating_add(played),
        shape.events
    );
    // Every kind, so that a kind none of the seeds produced shows as 0.
    let kinds: Vec<String> = injected
        .iter()
        .map(|(kind, count)| format!("{kind} {count}"))
        .collect();
    out!("events and faults over those seeds: {}", kinds.join(", "));
    let none: Vec<&str> = injected
        .iter()
        .filter(|(_, count)| **count == 0)
        .map(|(kind, _)| *kind)
        .collect();
    if !none.is_empty() {
        out!("none of: {}", none.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(feature = "sim")]
fn rate(seeds: usize, since: Instant) -> f64 {
    seeds as f64 / since.elapsed().as_secs_f64().max(1e-9)
}
