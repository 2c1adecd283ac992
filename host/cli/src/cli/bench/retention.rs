//! `weft bench --sweeper` and `weft bench --soak N`: what the sweeper
//! costs the commits it runs beside, and whether it keeps the store file
//! bounded.
//!
//! - `--sweeper` fills a fresh store with ended runs already past their
//!   retention, then times 10 rounds of 100 runs x 10 `echo` steps with the
//!   sweeper off (the baseline, same store, same invocation) and then on,
//!   deleting that backlog meanwhile: step-to-step p50 and p99 (a call
//!   and its commit) of each, and their ratio.
//! - `--soak N` runs N short runs (one `echo` step each), 1,000 at a time,
//!   through an engine whose sweeper keeps ended runs and settled
//!   messages for `--soak-retain` (1 minute), and prints the store file's
//!   size every tenth of N.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::engine::sweep::Retention;
use weft::model::Retain;

use super::{Round, build_kind, percentile, round, show, tempfile_dir};

/// Ended runs past their retention that the sweeper deletes while
/// `--sweeper` measures.
const BACKLOG: usize = 50_000;

/// Runs started at once by each round of the soak.
const SOAK_ROUND: usize = 1_000;

fn engine(scratch: &Path, plugins: &Path) -> anyhow::Result<Arc<weft::Engine>> {
    let runtime = weft::Runtime::new(weft::RuntimeConfig {
        cache_dir: Some(scratch.join("cache")),
        ..weft::RuntimeConfig::default()
    })?;
    let store = weft::RedbStore::open(scratch.join("weft.redb"))?;
    Ok(Arc::new(weft::Engine::new(
        Arc::new(store),
        weft::PluginDir::new(runtime, plugins),
        Arc::new(weft::SystemClock),
    )?))
}

fn workflow(text: &str) -> anyhow::Result<Arc<weft::Workflow>> {
    Ok(Arc::new(weft::model::parse(
        text,
        weft::model::Format::Yaml,
        "bench.yaml",
    )?))
}

/// Runs `n` runs of `workflow`, `at_once` at a time.
fn fill(
    engine: &weft::Engine,
    workflow: &Arc<weft::Workflow>,
    n: usize,
    at_once: usize,
) -> anyhow::Result<()> {
    let mut done = 0;
    while done < n {
        let batch = at_once.min(n - done);
        round(engine, workflow, batch)?;
        done += batch;
    }
    Ok(())
}

/// Rounds of `runs` runs each for a measurement.
const ROUNDS: usize = 10;

/// [`ROUNDS`] rounds of `runs` runs, their step-to-step gaps together.
fn rounds(
    engine: &weft::Engine,
    workflow: &Arc<weft::Workflow>,
    runs: usize,
) -> anyhow::Result<Round> {
    let mut all = round(engine, workflow, runs)?;
    for _ in 1..ROUNDS {
        let one = round(engine, workflow, runs)?;
        all.elapsed += one.elapsed;
        all.steps += one.steps;
        all.runs += one.runs;
        all.gaps.extend(one.gaps);
    }
    Ok(all)
}

/// `weft bench --sweeper`.
pub fn sweeper(plugins: &Path) -> anyhow::Result<ExitCode> {
    let scratch = tempfile_dir()?;
    let result = (|| {
        let engine = engine(&scratch, plugins)?;
        let old = workflow("id: old\nretain: 1s\nsteps:\n  - { id: a, uses: echo, with: 1 }\n")?;
        let steps: String = std::iter::once("id: bench\nsteps:\n".to_owned())
            .chain((0..10).map(|i| format!("  - {{ id: s{i}, uses: echo, with: {{ i: {i} }} }}\n")))
            .collect();
        let bench = workflow(&steps)?;
        out!(
            "weft bench: the sweeper's cost: 100 runs x 10 echo steps at once, {ROUNDS} rounds, with the sweeper off, then on while it deletes {BACKLOG} ended runs past their retention; fresh redb file, every commit synced"
        );
        out!("build: {}", build_kind());
        fill(&engine, &old, BACKLOG, 500)?;
        std::thread::sleep(Duration::from_millis(1_100));
        round(&engine, &bench, 1)?;

        let mut off = rounds(&engine, &bench, 100)?;
        anyhow::ensure!(
            count_old(&engine)? == BACKLOG,
            "the backlog is in the store"
        );
        let began = Instant::now();
        weft::start_sweeper(&engine, Retention::default())?;
        // The sweeper's first page comes after its 10 ms rest.
        std::thread::sleep(Duration::from_millis(50));
        let mut on = rounds(&engine, &bench, 100)?;
        let during = began.elapsed();
        let left = count_old(&engine)?;
        out!();
        for (label, r) in [("sweeper off", &mut off), ("sweeper on", &mut on)] {
            let secs = r.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
            out!(
                "  {label:<12} {:>9.0} steps/s   step-to-step p50 {:>9} p99 {:>9}",
                r.steps as f64 / secs,
                show(percentile(&mut r.gaps, 50.0)),
                show(percentile(&mut r.gaps, 99.0)),
            );
        }
        let p99 = |r: &mut Round| percentile(&mut r.gaps, 99.0).as_secs_f64();
        out!(
            "  the sweeper deleted {} of the {BACKLOG} ended runs in the {:.2} s the rounds took with it on",
            BACKLOG - left,
            during.as_secs_f64()
        );
        anyhow::ensure!(
            left < BACKLOG,
            "the sweeper deleted nothing while the rounds ran: the figures would not show its cost"
        );
        out!(
            "step-to-step p99 with the sweeper on: {:.2}x its p99 with it off",
            p99(&mut on) / p99(&mut off).max(f64::MIN_POSITIVE)
        );
        Ok(ExitCode::SUCCESS)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// How many runs of workflow `old` are in the store.
fn count_old(engine: &weft::Engine) -> anyhow::Result<usize> {
    let mut after: Option<String> = None;
    let mut n = 0;
    loop {
        let (page, next) = engine.store().runs_from(after.as_deref(), 4_096)?;
        n += page.iter().filter(|run| run.workflow == "old").count();
        match next {
            Some(next) => after = Some(next),
            None => return Ok(n),
        }
    }
}

/// `weft bench --soak N`.
pub fn soak(plugins: &Path, runs: usize, retain: Duration) -> anyhow::Result<ExitCode> {
    let scratch = tempfile_dir()?;
    let result = (|| {
        let engine = engine(&scratch, plugins)?;
        let short = workflow("id: short\nsteps:\n  - { id: a, uses: echo, with: 1 }\n")?;
        let retention = Retention {
            runs: Retain::For(retain),
            messages: Retain::For(retain),
            ..Retention::default()
        };
        out!(
            "weft bench: soak: {runs} runs of one echo step, {SOAK_ROUND} at a time, ended runs kept {}, the sweeper on; fresh redb file, every commit synced",
            humantime::format_duration(retain)
        );
        out!("build: {}", build_kind());
        weft::start_sweeper(&engine, retention)?;
        let file = scratch.join("weft.redb");
        let every = (runs / 10).max(SOAK_ROUND);
        let began = Instant::now();
        let mut window = Instant::now();
        let mut done = 0;
        let mut sizes = Vec::new();
        out!();
        out!(
            "  {:>10} {:>9} {:>10} {:>12}",
            "runs",
            "elapsed",
            "runs/s",
            "file size"
        );
        while done < runs {
            let batch = SOAK_ROUND.min(runs - done);
            round(&engine, &short, batch)?;
            done += batch;
            if done % every == 0 || done == runs {
                let size = std::fs::metadata(&file)?.len();
                sizes.push(size);
                out!(
                    "  {done:>10} {:>8.0}s {:>10.0} {:>9.1} MB",
                    began.elapsed().as_secs_f64(),
                    every as f64 / window.elapsed().as_secs_f64().max(f64::MIN_POSITIVE),
                    size as f64 / 1e6
                );
                window = Instant::now();
            }
        }
        let half = sizes.len() / 2;
        if let (Some(mid), Some(last)) = (sizes.get(half.saturating_sub(1)), sizes.last()) {
            out!(
                "file size at the end: {:.2}x its size at half the runs",
                *last as f64 / (*mid).max(1) as f64
            );
        }
        Ok(ExitCode::SUCCESS)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}
