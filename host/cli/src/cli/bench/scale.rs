//! The scale curve and memory per run.
//!
//! `weft bench --curve` measures durable steps per second for P in {1, 10,
//! 100, 1000, 10000} concurrent runs and S in {1, 10, 100} `echo` steps per
//! run, each point in a fresh process on a fresh redb file with every
//! commit synced, with that process's resident memory: after the first run
//! (its base) and at its peak (`VmHWM`).
//!
//! `weft bench --memory N` measures what a run costs in memory in each of
//! its three waiting states, each in a fresh process, as the growth of its
//! resident memory from a warm start (after a tenth as many runs) to N more
//! runs, divided by N:
//! - parked: the host has no place for it (`--max-resident`), so the run
//!   is a row in the store and an id in the host's turns;
//! - resident, waiting on a step: in memory, its first step due and queued
//!   for a worker (the stepped engine, with no work done, holds every run
//!   there);
//! - suspended: waiting on an `await` with no timeout, out of memory.
//!
//! redb's page cache is held to 4 MiB in the memory processes, so that
//! what the store caches of the written pages is not counted as the runs'.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use weft::engine::{EngineConfig, Quiet, WasmPlugins};
use weft::{Engine, PluginDir, RedbStore, Runtime, RuntimeConfig, SystemClock};

/// Concurrent runs at each point of the curve.
pub const RUNS: [usize; 5] = [1, 10, 100, 1_000, 10_000];
/// Steps per run at each point of the curve.
pub const STEPS: [usize; 3] = [1, 10, 100];
/// A point repeats its round until it has run this long.
const POINT_TIME: Duration = Duration::from_millis(1_500);
/// redb's page cache in the memory processes.
const CACHE: usize = 4 << 20;

/// One point of the curve.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub runs: usize,
    pub steps: usize,
    pub rate: f64,
    /// Resident memory after the warm-up run.
    pub base: u64,
    /// The process's peak resident memory.
    pub peak: u64,
}

/// The text of a workflow of `steps` `echo` steps.
pub fn echo_workflow(steps: usize) -> String {
    std::iter::once("id: bench\nsteps:\n".to_owned())
        .chain((0..steps).map(|i| format!("  - {{ id: s{i}, uses: echo, with: {{ i: {i} }} }}\n")))
        .collect()
}

/// Runs `weft bench` again with `args`, and returns the fields of the line
/// it printed last that begins with `tag`.
fn child(args: &[String], tag: &str) -> anyhow::Result<Vec<String>> {
    let exe = std::env::current_exe().context("cannot find the weft binary")?;
    let output = std::process::Command::new(exe)
        .arg("bench")
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot start a bench process")?;
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "`weft bench {}` failed: {}",
        args.join(" "),
        text.trim()
    );
    text.lines()
        .rev()
        .find_map(|line| line.strip_prefix(tag))
        .map(|rest| rest.split_whitespace().map(str::to_owned).collect())
        .with_context(|| format!("`weft bench {}` printed no `{tag}` line", args.join(" ")))
}

fn field<T: std::str::FromStr>(fields: &[String], n: usize) -> anyhow::Result<T> {
    fields
        .get(n)
        .and_then(|f| f.parse().ok())
        .with_context(|| format!("bad figure {n} in {fields:?}"))
}

/// Every point of the curve, each in its own process, printed as it comes.
pub fn curve(plugins: &Path) -> anyhow::Result<Vec<Point>> {
    out!(
        "scale curve: durable steps/s, P runs at once x S echo steps, each point a fresh process and redb file"
    );
    out!(
        "  {:>6} {:>4} {:>12} {:>12} {:>12}",
        "P",
        "S",
        "steps/s",
        "base RSS",
        "peak RSS"
    );
    let mut points = Vec::new();
    for steps in STEPS {
        for runs in RUNS {
            let args = [
                "--point".to_owned(),
                "--runs".to_owned(),
                runs.to_string(),
                "--steps".to_owned(),
                steps.to_string(),
                "--plugins".to_owned(),
                plugins.display().to_string(),
            ];
            let fields = child(&args, "point ")?;
            let point = Point {
                runs,
                steps,
                rate: field(&fields, 0)?,
                base: field(&fields, 1)?,
                peak: field(&fields, 2)?,
            };
            out!(
                "  {:>6} {:>4} {:>12.0} {:>9} MiB {:>9} MiB",
                runs,
                steps,
                point.rate,
                point.base >> 20,
                point.peak >> 20
            );
            points.push(point);
        }
    }
    Ok(points)
}

/// One point, in this process: rounds of `runs` runs of `steps` steps
/// until [`POINT_TIME`] has passed; prints `point RATE BASE PEAK`.
pub fn point(plugins: &Path, runs: usize, steps: usize) -> anyhow::Result<ExitCode> {
    let scratch = tempfile::tempdir()?;
    let workflow = Arc::new(weft::model::parse(
        &echo_workflow(steps),
        weft::model::Format::Yaml,
        "bench.yaml",
    )?);
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let engine = Engine::new(
        Arc::new(RedbStore::open(scratch.path().join("weft.redb"))?),
        PluginDir::new(runtime, plugins),
        Arc::new(SystemClock),
    )?;
    super::round(&engine, &workflow, 1)?;
    let base = super::status_bytes("VmRSS:").unwrap_or(0);
    // As in `--runs`: a first round at P, untimed, where it is short.
    if runs * steps <= 100_000 {
        super::round(&engine, &workflow, runs)?;
    }
    let (mut elapsed, mut done) = (Duration::ZERO, 0usize);
    while elapsed < POINT_TIME {
        let round = super::round(&engine, &workflow, runs)?;
        elapsed += round.elapsed;
        done += round.steps;
    }
    let peak = super::status_bytes("VmHWM:").unwrap_or(0);
    drop(engine);
    out!(
        "point {:.1} {base} {peak}",
        done as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    );
    Ok(ExitCode::SUCCESS)
}

/// The three waiting states [`memory`] measures.
pub const STATES: [&str; 3] = ["parked", "resident", "suspended"];

/// Bytes of resident memory per run in each of [`STATES`], `runs` runs
/// each, each in its own process.
pub fn memory(plugins: &Path, runs: usize) -> anyhow::Result<Vec<(&'static str, f64)>> {
    out!(
        "memory per run: {runs} runs in each state, each state a fresh process (redb's cache held to {} MiB)",
        CACHE >> 20
    );
    let mut figures = Vec::new();
    for state in STATES {
        let args = [
            "--memory-of".to_owned(),
            state.to_owned(),
            "--memory".to_owned(),
            runs.to_string(),
            "--plugins".to_owned(),
            plugins.display().to_string(),
        ];
        let fields = child(&args, "memory ")?;
        let bytes: f64 = field(&fields, 0)?;
        let (resident, parked): (usize, usize) = (field(&fields, 1)?, field(&fields, 2)?);
        out!(
            "  {state:<10} {bytes:>9.0} bytes/run   (in memory then: {resident} resident, {parked} parked)"
        );
        figures.push((state, bytes));
    }
    Ok(figures)
}

/// One state of [`memory`], in this process: `runs / 10` runs to warm up,
/// then `runs` more; prints `memory BYTES_PER_RUN RESIDENT PARKED`.
pub fn memory_of(plugins: &Path, state: &str, runs: usize) -> anyhow::Result<ExitCode> {
    let scratch = tempfile::tempdir()?;
    let warm = (runs / 10).max(1);
    let store = Arc::new(RedbStore::open_with_cache(
        scratch.path().join("weft.redb"),
        CACHE,
    )?);
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let plugins = PluginDir::new(runtime, plugins);
    let (bytes, load) = match state {
        "parked" | "resident" => {
            let workflow = Arc::new(weft::model::parse(
                &echo_workflow(1),
                weft::model::Format::Yaml,
                "bench.yaml",
            )?);
            let plugins = Arc::new(plugins);
            let source = Arc::new(WasmPlugins::new(Arc::clone(&plugins), store.clone()));
            let config = EngineConfig {
                max_resident: if state == "parked" {
                    1
                } else {
                    warm + runs + 1
                },
                ..EngineConfig::default()
            };
            let (engine, stepper) =
                Engine::stepped(store, plugins, source, Arc::new(SystemClock), config);
            let start = |n: usize| -> anyhow::Result<()> {
                for _ in 0..n {
                    drop(engine.start(
                        Arc::clone(&workflow),
                        serde_json::json!({}),
                        Box::new(Quiet),
                    )?);
                    if stepper.commits().pending() >= 512 {
                        stepper.commits().commit(usize::MAX);
                    }
                }
                while stepper.commits().pending() > 0 {
                    stepper.commits().commit(usize::MAX);
                }
                Ok(())
            };
            start(warm)?;
            let before = super::status_bytes("VmRSS:").unwrap_or(0);
            start(runs)?;
            let after = super::status_bytes("VmRSS:").unwrap_or(0);
            let load = engine.load();
            anyhow::ensure!(
                stepper.ready() > 0 || state == "parked",
                "the runs were not waiting on their steps"
            );
            (after as i64 - before as i64, load)
        }
        "suspended" => {
            let workflow = Arc::new(weft::model::parse(
                "id: wait\nsteps:\n  - { id: approve, await: {} }\n",
                weft::model::Format::Yaml,
                "wait.yaml",
            )?);
            let engine = Engine::new(store, plugins, Arc::new(SystemClock))?;
            let start = |n: usize| -> anyhow::Result<()> {
                let mut left = n;
                while left > 0 {
                    let batch = left.min(2_000);
                    left -= batch;
                    let handles = (0..batch)
                        .map(|_| {
                            engine.start(
                                Arc::clone(&workflow),
                                serde_json::json!({}),
                                Box::new(Quiet),
                            )
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    drop(handles);
                    let began = Instant::now();
                    while engine.load() != (0, 0) {
                        anyhow::ensure!(
                            began.elapsed() < Duration::from_secs(60),
                            "the runs did not suspend: {:?} in memory",
                            engine.load()
                        );
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                Ok(())
            };
            start(warm)?;
            let before = super::status_bytes("VmRSS:").unwrap_or(0);
            start(runs)?;
            let after = super::status_bytes("VmRSS:").unwrap_or(0);
            (after as i64 - before as i64, engine.load())
        }
        other => anyhow::bail!("no such state: {other} (one of {})", STATES.join(", ")),
    };
    out!(
        "memory {:.1} {} {}",
        bytes as f64 / runs as f64,
        load.0,
        load.1
    );
    Ok(ExitCode::SUCCESS)
}
