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
