//! A fixed set of seeds, run by `cargo test`: each plays the real engine
//! through one interleaving and checks every invariant after every event.
//! `weft sim --seeds N` runs more; a failure prints its seed and shortest
//! trace, and `weft sim --seed S` replays it.

use weft_sim::{Backend, Shape, run, run_on, shrink, shrink_on};

/// How many seeds `cargo test` runs: `WEFT_SIM_SEEDS` overrides.
fn seeds() -> u64 {
    std::env::var("WEFT_SIM_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300)
}

#[test]
fn every_invariant_holds_over_the_fixed_seeds() {
    let shape = Shape::default();
    for seed in 0..seeds() {
        if let Err(failure) = run(seed, shape) {
            panic!("{}", shrink(&failure, shape));
        }
    }
}

/// Seeds no earlier run of the suite played: a batch whose first seed
/// comes from the commit under test (`git rev-parse HEAD`; or
/// `WEFT_SIM_FRESH_FROM`), so each commit explores interleavings of its
/// own. The first seed is printed; a failure prints its own, which
/// `weft sim --seed S` replays. `WEFT_SIM_FRESH_SEEDS` sets how many.
#[test]
fn every_invariant_holds_over_fresh_seeds_of_this_commit() {
    let from = std::env::var("WEFT_SIM_FRESH_FROM")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(commit_seed);
    let count: u64 = std::env::var("WEFT_SIM_FRESH_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    eprintln!(
        "fresh seeds {from}..{} (WEFT_SIM_FRESH_FROM={from} plays them again)",
        from.saturating_add(count)
    );
    let shape = Shape::default();
    for seed in from..from.saturating_add(count) {
        if let Err(failure) = run(seed, shape) {
            panic!("{}", shrink(&failure, shape));
        }
    }
}

/// The first fresh seed of the commit checked out here: its id's first 48
/// bits, above every fixed seed; without git, the time's.
fn commit_seed() -> u64 {
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| {
            let hex = std::str::from_utf8(out.stdout.get(..12)?).ok()?;
            u64::from_str_radix(hex, 16).ok()
        });
    let bits = head.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    });
    (1 << 48) | (bits & ((1 << 48) - 1))
}

/// The same invariants with PostgreSQL as the store (the server
/// `WEFT_TEST_POSTGRES` names), over fewer seeds: each costs round trips,
/// where redb in memory costs none. `WEFT_SIM_POSTGRES_SEEDS` overrides.
#[test]
fn every_invariant_holds_on_postgres() {
    let url = std::env::var("WEFT_TEST_POSTGRES").expect(
        "WEFT_TEST_POSTGRES names no PostgreSQL server: run scripts/test, or start one with scripts/postgres-dev",
    );
    let backend = Backend::Postgres(url);
    let seeds: u64 = std::env::var("WEFT_SIM_POSTGRES_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(40);
    let shape = Shape::default();
    for seed in 0..seeds {
        if let Err(failure) = run_on(seed, shape, &backend) {
            panic!("on PostgreSQL: {}", shrink_on(&failure, shape, &backend));
        }
    }
}

#[test]
fn a_seed_replays_exactly() {
    let shape = Shape::default();
    let first = format!("{:?}", run(7, shape).map(|p| p.tally));
    let again = format!("{:?}", run(7, shape).map(|p| p.tally));
    assert_eq!(first, again);
}

/// Not a check: lists the first violation of every failing seed, for
/// whoever is fixing them (`cargo test -p weft-sim survey -- --ignored`).
#[test]
#[ignore = "a tool, not a check"]
fn survey() {
    let shape = Shape::default();
    let mut kinds = std::collections::BTreeMap::<String, Vec<u64>>::new();
    for seed in 0..seeds() {
        if let Err(failure) = run(seed, shape) {
            let kind: String = failure
                .violation
                .split_whitespace()
                .filter(|w| !w.contains('-') || w.len() < 30)
                .take(8)
                .collect::<Vec<_>>()
                .join(" ");
            kinds.entry(kind).or_default().push(seed);
        }
    }
    for (kind, seeds) in &kinds {
        println!(
            "{:>5}  {kind}  (seeds {:?})",
            seeds.len(),
            &seeds[..seeds.len().min(8)]
        );
    }
}
