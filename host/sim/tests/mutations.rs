//! The simulator finds every deliberate bug of `weft_sim::mutations::LIST`
//! within its stated seeds. Run with `--features mutations`; without the
//! feature this file is empty.
#![cfg(feature = "mutations")]

use weft_sim::mutations;

#[test]
fn the_simulator_finds_every_mutation() {
    // `WEFT_MUTATION=NAME` plays that one alone, and `WEFT_MUTATION_FROM`
    // and `WEFT_MUTATION_SEEDS` other seeds than its own.
    let only = std::env::var("WEFT_MUTATION").ok();
    let seeds: Option<u64> = std::env::var("WEFT_MUTATION_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok());
    let from: Option<u64> = std::env::var("WEFT_MUTATION_FROM")
        .ok()
        .and_then(|n| n.parse().ok());
    let mut missed = Vec::new();
    for mutation in mutations::LIST {
        if only.as_deref().is_some_and(|name| name != mutation.name) {
            continue;
        }
        weft_core::mutation::set(mutation.switches);
        let first = from.unwrap_or(mutation.from);
        let found = (first..first + seeds.unwrap_or(mutation.within))
            .find_map(|seed| weft_sim::run(seed, mutation.shape).err());
        weft_core::mutation::set(&[]);
        // The seed that found it passes without it: it was the mutation.
        if let Some(failure) = &found
            && let Err(baseline) = weft_sim::run(failure.seed, mutation.shape)
        {
            missed.push(format!(
                "{}: seed {} fails without it too: {}",
                mutation.name, failure.seed, baseline.violation
            ));
            continue;
        }
        match found {
            Some(failure) => println!(
                "{}: found by seed {}: {}",
                mutation.name,
                failure.seed,
                failure.violation.lines().next().unwrap_or_default()
            ),
            None => missed.push(format!(
                "{} ({}) in seeds {first}..{}",
                mutation.name,
                mutation.undoes,
                first + seeds.unwrap_or(mutation.within)
            )),
        }
    }
    assert!(
        missed.is_empty(),
        "the simulator did not find these mutations:\n  {}",
        missed.join("\n  ")
    );
}
