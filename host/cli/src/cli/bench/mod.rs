//! `weft bench`: what one step costs, measured here and now.
//!
//! With `--runs P --steps S` it measures durable throughput instead: P runs
//! at once, each of S `echo` steps, on a fresh store with every commit
//! synced; and, as the baseline measured in the same invocation, the same
//! workflow one run at a time. With `--store postgres://...`, the same
//! runs on PostgreSQL too, with one, two and three hosts, against redb;
//! and `--failover N` kills a host N times and times the take-over.
//!
//! Without them, for the `echo` plugin it prints:
//! - cold load: compile with Cranelift, link and describe, no cache;
//! - cached load: the same from the compiled-code cache;
//! - instantiate+call: a fresh instance per call, with the pooling
//!   allocator and, as the baseline measured in the same run, with on-demand
//!   allocation; p50, p99 and the ratio between them.

mod goals;
mod http;
mod languages;
mod messages;
mod noisy;
mod postgres;
mod retention;
mod scale;
mod snapshots;
mod startup;
mod tenants;
mod timers;

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use weft::core::lock;
use weft::runtime::{CodeSource, StepContext};
use weft::{Runtime, RuntimeConfig};

use super::PluginArgs;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Instantiate+call iterations per allocator.
    #[arg(long, default_value_t = 20_000)]
    pub iterations: usize,

    /// Loads to time from cold and from the cache.
    #[arg(long, default_value_t = 5)]
    pub loads: usize,

    /// Measure durable throughput with this many concurrent runs.
    #[arg(long, value_name = "P")]
    pub runs: Option<usize>,

    /// Steps per run, with --runs.
    #[arg(long, value_name = "S", default_value_t = 10)]
    pub steps: usize,

    /// Bytes of each pooled memory kept resident between calls (the
    /// runtime's default unless given).
    #[arg(long, value_name = "BYTES")]
    pub keep_resident: Option<usize>,

    /// Measure the timer service: this many pending timers (sleeping runs);
    /// then, in a fresh process, re-arm them and let --fire of them fire.
    #[arg(long, value_name = "N")]
    pub timers: Option<usize>,

    /// With --timers: how many of the timers come due after the restart.
    #[arg(long, value_name = "M", default_value_t = 100_000)]
    pub fire: usize,

    /// With --timers: over how long the fires are spread.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub spread: Duration,

    /// Measure message delivery: each of --runs runs (default 100) emits
    /// this many messages to one SSE subscriber that acks each.
    #[arg(long, value_name = "M")]
    pub messages: Option<usize>,

    /// Measure each language's example plugin (template, wordstats,
    /// headline): compile, cached load, instantiate+call, and the time from
    /// landing in the plugins directory to the first run.
    #[arg(long)]
    pub languages: bool,

    /// Measure what tenants cost and give: API requests per second with
    /// and without a token, and one tenant's lone runs' latency while
    /// another floods the host (--flood runs at once).
    #[arg(long)]
    pub tenants: bool,
    /// Time an outgoing HTTP call through weft (the `http-get` plugin)
    /// against the same request from a native client, to one server on
    /// loopback, `--iterations` times each.
    #[arg(long)]
    pub http: bool,

    /// With `--store postgres://...`: kill a `weft serve` host with SIGKILL
    /// this many times while its runs are in flight, and time each
    /// taken-over run from the kill to its first step on another host.
    #[arg(long, value_name = "KILLS")]
    pub failover: Option<usize>,

    /// Measure what the sweeper costs: step-to-step p50 and p99 with it
    /// off, then on while it deletes a backlog of ended runs.
    #[arg(long)]
    pub sweeper: bool,

    /// Run this many one-step runs through an engine whose sweeper keeps
    /// ended runs --soak-retain, and print the store file's size every
    /// tenth of them.
    #[arg(long, value_name = "N")]
    pub soak: Option<usize>,

    /// With --soak: how long ended runs are kept.
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    pub soak_retain: Duration,

    /// Measure snapshot stores: publish a revision of this many entries
    /// (N/10 first, to compare memory), then time reads of it.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "1000000")]
    pub snapshots: Option<usize>,

    /// With --tenants: how many runs the flooding tenant starts at once.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub flood: usize,

    /// Print every figure of the performance goals, each with its goal:
    /// the scale curve, a guest call in each language, memory per run in
    /// each waiting state and start-up at scale (several minutes).
    #[arg(long)]
    pub goals: bool,

    /// Measure durable steps/s and memory for P in {1, 10, 100, 1000,
    /// 10000} runs at once and S in {1, 10, 100} steps per run.
    #[arg(long)]
    pub curve: bool,

    /// With --curve or --goals: draw the curve to this PNG file.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<std::path::PathBuf>,

    /// Tenant A's ordinary load on a `weft serve`, alone and then beside a
    /// hostile tenant B, with A's throughput, p99 and the server's peak
    /// memory against their goals.
    #[arg(long)]
    pub noisy: bool,

    /// With --noisy: the most the server's peak RSS may be.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 30)]
    pub memory_budget: u64,

    /// With --noisy: tenant B's plugin, the `hostile` test guest.
    #[arg(long, value_name = "FILE", default_value = noisy::HOSTILE)]
    pub hostile: std::path::PathBuf,

    /// Time a guest call in each language (a fresh instance per call),
    /// with its goal.
    #[arg(long)]
    pub latency: bool,

    /// Measure memory per run with this many runs parked, resident waiting
    /// on a step, and suspended.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "100000")]
    pub memory: Option<usize>,

    /// Measure start-up at scale: a store of --ended ended runs and
    /// --running runs of a host killed mid-run, then, in a fresh process,
    /// the time `weft serve`'s start takes to its first step and to every
    /// running run going again.
    #[arg(long)]
    pub startup: bool,

    /// With --startup or --goals: ended runs in the store.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub ended: usize,

    /// With --startup or --goals: running runs in the store, to take over.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub running: usize,

    /// One point of --curve, in its own process.
    #[arg(long, hide = true)]
    pub point: bool,

    /// One state of --memory, in its own process.
    #[arg(long, hide = true, value_name = "STATE")]
    pub memory_of: Option<String>,

    /// The second half of --startup, in its own process: the store.
    #[arg(long, hide = true, value_name = "DIR")]
    pub startup_measure: Option<std::path::PathBuf>,

    /// The second half of --timers, in its own process: the store to
    /// re-arm.
    #[arg(long, hide = true, value_name = "DIR")]
    pub rearm: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub plugins: PluginArgs,
}

/// `postgres`: the URL of `--store`, when it names a PostgreSQL database.
pub fn main(
    plugins: &Path,
    args: &BenchArgs,
    postgres: Option<String>,
) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &args.rearm {
        return timers::rearm(dir, args.fire);
    }
    if let Some(dir) = &args.startup_measure {
        return startup::measure(dir, plugins, args.running.max(1));
    }
    if let Some(state) = &args.memory_of {
        return scale::memory_of(plugins, state, args.memory.unwrap_or(100_000).max(1));
    }
    if args.point {
        return scale::point(plugins, args.runs.unwrap_or(1).max(1), args.steps.max(1));
    }
    if args.goals {
        let sizes = goals::Sizes {
            calls: args.iterations.clamp(100, 2_000),
            memory: args.memory.unwrap_or(100_000).max(1),
            ended: args.ended.max(1),
            running: args.running.max(1),
        };
        return goals::goals(plugins, &sizes, args.plot.as_deref());
    }
    if args.curve {
        let points = scale::curve(plugins)?;
        if let Some(path) = &args.plot {
            goals::draw(&points, path)?;
            out!("drawn: {}", path.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.noisy {
        return noisy::noisy(plugins, &args.hostile, args.memory_budget);
    }
    if args.latency {
        return goals::latency_only(plugins, args.iterations.clamp(100, 2_000));
    }
    if let Some(runs) = args.memory {
        scale::memory(plugins, runs.max(1))?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.startup {
        return startup::startup(plugins, args.ended.max(1), args.running.max(1));
    }
    if let Some(timers) = args.timers {
        return timers::timers(timers.max(1), args.fire, args.spread);
    }
    if let Some(per_run) = args.messages {
        return messages::messages(args.runs.unwrap_or(100).max(1), per_run.max(1));
    }
    if args.tenants {
        return tenants::tenants(plugins, args.flood.max(1));
    }
    if args.http {
        return http::http(plugins, args.iterations.clamp(100, 100_000));
    }
    if args.sweeper {
        return retention::sweeper(plugins);
    }
    if let Some(entries) = args.snapshots {
        return snapshots::snapshots(plugins, entries.max(10));
    }
    if let Some(runs) = args.soak {
        return retention::soak(plugins, runs.max(1), args.soak_retain);
    }
    if args.languages {
        return languages::languages(
            plugins,
            args.iterations.clamp(100, 2_000),
            args.loads.max(1),
            args.keep_resident,
        );
    }
    if let Some(kills) = args.failover {
        let Some(url) = postgres else {
            anyhow::bail!("--failover needs a PostgreSQL store: --store postgres://...");
        };
        return postgres::failover(plugins, &url, kills.max(1));
    }
    if let Some(runs) = args.runs {
        return throughput(plugins, runs.max(1), args.steps.max(1), postgres);
    }
    step_cost(plugins, args)
}

/// The default bench: what loading the `echo` plugin costs, cold and
/// from the cache, then what an instantiate+call costs with each
/// allocator.
fn step_cost(plugins: &Path, args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let path = plugins.join("echo.wasm");
    let bytes = std::fs::read(&path).with_context(|| {
        format!(
            "cannot read {}; build the example plugins first (see README)",
            path.display()
        )
    })?;
    let loads = args.loads.max(1);
    let iterations = args.iterations.max(100);
    out!(
        "weft bench: {} ({} KiB), {} loads, {} calls per allocator",
        path.display(),
        bytes.len() / 1024,
        loads,
        iterations
    );
    out!("build: {}", build_kind());

    // Both runtimes stay alive to the end, through the timed calls.
    let cold_runtime = Runtime::new(RuntimeConfig::default())?;
    let mut cold = cold_loads(&cold_runtime, &bytes, loads)?;
    let cache_dir = tempfile_dir()?;
    let cached_runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache_dir.clone()),
        ..RuntimeConfig::default()
    })?;
    cached_runtime.load(&bytes)?; // fills the cache
    let mut cached = cached_loads(&cached_runtime, &bytes, loads)?;
    let _ = std::fs::remove_dir_all(&cache_dir);
    report_loads(percentile(&mut cold, 50.0), percentile(&mut cached, 50.0))?;

    let keep_resident = args
        .keep_resident
        .unwrap_or(RuntimeConfig::default().memory_keep_resident);
    let pooled = call_latencies(&bytes, true, keep_resident, iterations)?;
    let on_demand = call_latencies(&bytes, false, 0, iterations)?;
    report_calls(keep_resident, pooled, on_demand)?;
    Ok(ExitCode::SUCCESS)
}

/// `loads` times to compile, link and describe the component, with no
/// cache.
fn cold_loads(runtime: &Runtime, bytes: &[u8], loads: usize) -> anyhow::Result<Vec<Duration>> {
    let mut cold = Vec::new();
    for _ in 0..loads {
        let started = Instant::now();
        runtime.load(bytes)?;
        cold.push(started.elapsed());
    }
    Ok(cold)
}

/// `loads` times to load the component from the filled cache; an error if
/// one of them compiled instead.
fn cached_loads(runtime: &Runtime, bytes: &[u8], loads: usize) -> anyhow::Result<Vec<Duration>> {
    let mut cached = Vec::new();
    for _ in 0..loads {
        let started = Instant::now();
        let plugin = runtime.load(bytes)?;
        cached.push(started.elapsed());
        anyhow::ensure!(
            plugin.code_source() == CodeSource::Cache,
            "the cache was not used"
        );
    }
    Ok(cached)
}

/// Prints the cold and the cached load's p50, and how much faster the
/// cache is.
fn report_loads(cold_p50: Duration, cached_p50: Duration) -> anyhow::Result<()> {
    out!();
    out!(
        "load (compile, link, describe)    p50 {:>10}",
        show(cold_p50)
    );
    out!(
        "load from compiled-code cache     p50 {:>10}   {:.0}x faster than compiling",
        show(cached_p50),
        ratio(cold_p50, cached_p50)
    );
    Ok(())
}

/// Prints each allocator's instantiate+call p50, p99 and rate, and how
/// the pooling allocator compares with on-demand allocation.
fn report_calls(
    keep_resident: usize,
    mut pooled: Vec<Duration>,
    mut on_demand: Vec<Duration>,
) -> anyhow::Result<()> {
    out!();
    out!(
        "instantiate+call (fresh instance each call; pooled memory kept resident: {} KiB)",
        keep_resident / 1024
    );
    let p50 = (
        percentile(&mut pooled, 50.0),
        percentile(&mut on_demand, 50.0),
    );
    let p99 = (
        percentile(&mut pooled, 99.0),
        percentile(&mut on_demand, 99.0),
    );
    out!(
        "  pooling allocator    p50 {:>10}   p99 {:>10}   {:>8.0} calls/s",
        show(p50.0),
        show(p99.0),
        per_second(&pooled)
    );
    out!(
        "  on-demand (baseline) p50 {:>10}   p99 {:>10}   {:>8.0} calls/s",
        show(p50.1),
        show(p99.1),
        per_second(&on_demand)
    );
    out!(
        "  pooling vs on-demand: p50 {:.2}x, p99 {:.2}x faster",
        ratio(p50.1, p50.0),
        ratio(p99.1, p99.0)
    );
    Ok(())
}

/// Figures from a debug build are not comparable with a release build's.
pub fn build_kind() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

fn call_latencies(
    bytes: &[u8],
    pooling: bool,
    memory_keep_resident: usize,
    iterations: usize,
) -> anyhow::Result<Vec<Duration>> {
    let runtime = Runtime::new(RuntimeConfig {
        pooling,
        memory_keep_resident,
        ..RuntimeConfig::default()
    })?;
    timed_calls(&runtime, bytes, "{}", iterations)
}

/// `iterations` instantiate+call times of the component on `input`, a
/// fresh instance each, after a tenth as many calls to warm up.
/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`; Linux).
pub fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The step context every bench call runs under.
pub fn bench_context() -> StepContext {
    StepContext {
        tenant: "bench".to_owned(),
        workflow: "bench".to_owned(),
        run_id: "bench".to_owned(),
        step_id: "bench".to_owned(),
        attempt: 1,
        idempotency_key: "bench:step".to_owned(),
    }
}

pub fn timed_calls(
    runtime: &Runtime,
    bytes: &[u8],
    input: &str,
    iterations: usize,
) -> anyhow::Result<Vec<Duration>> {
    let plugin = runtime.load(bytes)?;
    let context = bench_context();
    let warmup = iterations / 10;
    let mut times = Vec::with_capacity(iterations);
    for i in 0..warmup + iterations {
        let started = Instant::now();
        let outcome = plugin.call(&context, input, &weft::runtime::CallOptions::default());
        let took = started.elapsed();
        if let Err(e) = outcome.result {
            anyhow::bail!("{} failed: {e}", plugin.meta().name);
        }
        if i >= warmup {
            times.push(took);
        }
    }
    Ok(times)
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("weft-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

pub fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort_unstable();
    let rank = ((p / 100.0) * (times.len() as f64 - 1.0)).round() as usize;
    times.get(rank).copied().unwrap_or_default()
}

fn per_second(times: &[Duration]) -> f64 {
    let total: Duration = times.iter().sum();
    times.len() as f64 / total.as_secs_f64().max(f64::MIN_POSITIVE)
}

pub fn ratio(slow: Duration, fast: Duration) -> f64 {
    slow.as_secs_f64() / fast.as_secs_f64().max(f64::MIN_POSITIVE)
}

pub fn show(d: Duration) -> String {
    let micros = d.as_secs_f64() * 1e6;
    if micros < 1000.0 {
        format!("{micros:.1}µs")
    } else if micros < 1e6 {
        format!("{:.2}ms", micros / 1e3)
    } else {
        format!("{:.2}s", micros / 1e6)
    }
}

/// What one round of runs did.
struct Round {
    elapsed: Duration,
    steps: usize,
    runs: usize,
    gaps: Vec<Duration>,
}

/// P concurrent runs of S echo steps, fully durable; then the baseline of
/// one run at a time. With `postgres`, the same P runs again on that
/// database, with one, two and three hosts, each figure against redb's.
fn throughput(
    plugins: &Path,
    runs: usize,
    steps: usize,
    postgres: Option<String>,
) -> anyhow::Result<ExitCode> {
    let scratch = tempfile_dir()?;
    let result = (|| {
        let workflow_text: String = std::iter::once("id: bench\nsteps:\n".to_owned())
            .chain(
                (0..steps).map(|i| format!("  - {{ id: s{i}, uses: echo, with: {{ i: {i} }} }}\n")),
            )
            .collect();
        let workflow = std::sync::Arc::new(weft::model::parse(
            &workflow_text,
            weft::model::Format::Yaml,
            "bench.yaml",
        )?);
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: Some(scratch.join("cache")),
            ..RuntimeConfig::default()
        })?;
        let store = weft::RedbStore::open(scratch.join("weft.redb"))?;
        let engine = weft::Engine::new(
            std::sync::Arc::new(store),
            weft::PluginDir::new(runtime.clone(), plugins),
            std::sync::Arc::new(weft::SystemClock),
        )?;
        out!(
            "weft bench: {runs} concurrent runs x {steps} echo steps, fresh redb file, every commit synced"
        );
        out!("build: {}", build_kind());
        // Load and compile the plugin, and touch the store, before timing.
        round(&engine, &workflow, 1)?;

        let baseline_runs = runs.clamp(1, 20);
        let mut baseline = Round {
            elapsed: Duration::ZERO,
            steps: 0,
            runs: 0,
            gaps: Vec::new(),
        };
        for _ in 0..baseline_runs {
            let one = round(&engine, &workflow, 1)?;
            baseline.elapsed += one.elapsed;
            baseline.steps += one.steps;
            baseline.runs += one.runs;
            baseline.gaps.extend(one.gaps);
        }
        // A first round at P grows the allocator's and the store's memory
        // (fresh pages cost this machine's kernel much); the figure is
        // the median of the three rounds after it.
        round(&engine, &workflow, runs)?;
        let mut rounds = (0..3)
            .map(|_| round(&engine, &workflow, runs))
            .collect::<anyhow::Result<Vec<_>>>()?;
        rounds.sort_by(|a, b| {
            let rate = |r: &Round| r.steps as f64 / r.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
            rate(a).total_cmp(&rate(b))
        });
        let mut concurrent = rounds.swap_remove(1);

        out!();
        for (label, r) in [
            ("1 run at a time", &mut baseline),
            (&*format!("{runs} at once"), &mut concurrent),
        ] {
            let secs = r.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
            out!(
                "  {label:<16} {:>9.0} steps/s {:>8.1} runs/s   step-to-step p50 {:>9} p99 {:>9}",
                r.steps as f64 / secs,
                r.runs as f64 / secs,
                show(percentile(&mut r.gaps, 50.0)),
                show(percentile(&mut r.gaps, 99.0)),
            );
        }
        let rate = |r: &Round| r.steps as f64 / r.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        out!(
            "  group commit gain: {:.1}x the steps/s of one run at a time",
            rate(&concurrent) / rate(&baseline)
        );
        out!("durable steps/s: {:.0}", rate(&concurrent));
        metrics_cost(&engine, &runtime, plugins, &scratch, &workflow, runs)?;
        if let Some(url) = postgres {
            postgres::throughput(plugins, &scratch, &url, &workflow, runs, rate(&concurrent))?;
            postgres::pickup(plugins, &scratch, &url, &workflow, 200)?;
        }
        Ok(ExitCode::SUCCESS)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// The cost of metrics: `runs` runs at once on `engine` (which counts
/// nothing) and on a second engine that counts everything (`GET /metrics`
/// of `weft serve`), on its own redb file, taking turns three times each.
fn metrics_cost(
    engine: &weft::Engine,
    runtime: &Runtime,
    plugins: &Path,
    scratch: &Path,
    workflow: &std::sync::Arc<weft::Workflow>,
    runs: usize,
) -> anyhow::Result<()> {
    let metrics = std::sync::Arc::new(weft::engine::Metrics::default());
    let metered = weft::Engine::with_config(
        std::sync::Arc::new(weft::RedbStore::open(scratch.join("metered.redb"))?),
        weft::PluginDir::new(runtime.clone(), plugins),
        std::sync::Arc::new(weft::SystemClock),
        weft::engine::EngineConfig {
            metrics: Some(std::sync::Arc::clone(&metrics)),
            ..weft::engine::EngineConfig::default()
        },
    )?;
    round(&metered, workflow, 1)?;
    let (mut off, mut on) = ((Duration::ZERO, 0), (Duration::ZERO, 0));
    for _ in 0..3 {
        for (engine, total) in [(engine, &mut off), (&metered, &mut on)] {
            let r = round(engine, workflow, runs)?;
            total.0 += r.elapsed;
            total.1 += r.steps;
        }
    }
    let rate = |(elapsed, steps): (Duration, usize)| {
        steps as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    };
    out!(
        "  metrics: off {:.0} steps/s, on {:.0} steps/s (3 rounds each, in turn): on/off {:.3}; a scrape is {} bytes",
        rate(off),
        rate(on),
        rate(on) / rate(off),
        metrics.encode().len()
    );
    Ok(())
}

/// Starts `runs` runs of `workflow` at once and waits for all of them.
fn round(
    engine: &weft::Engine,
    workflow: &std::sync::Arc<weft::Workflow>,
    runs: usize,
) -> anyhow::Result<Round> {
    round_on(std::slice::from_ref(engine), workflow, runs)
}

/// [`round`], with the runs dealt out over `engines` in turn.
fn round_on(
    engines: &[weft::Engine],
    workflow: &std::sync::Arc<weft::Workflow>,
    runs: usize,
) -> anyhow::Result<Round> {
    let gaps = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let began = Instant::now();
    let handles = (0..runs)
        .map(|n| {
            let timing = StepTiming {
                last: Instant::now(),
                all: std::sync::Arc::clone(&gaps),
            };
            engines[n % engines.len()].start(
                std::sync::Arc::clone(workflow),
                serde_json::json!({}),
                Box::new(timing),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut round = Round {
        elapsed: Duration::ZERO,
        steps: 0,
        runs: 0,
        gaps: Vec::new(),
    };
    for handle in handles {
        let run = handle.wait()?;
        anyhow::ensure!(
            run.state == weft::store::RunState::Succeeded,
            "run {} ended {}: {:?}",
            run.id,
            run.state,
            run.error
        );
        round.runs += 1;
        round.steps += run.step_records as usize;
    }
    round.elapsed = began.elapsed();
    round.gaps = std::mem::take(&mut *lock(&gaps));
    Ok(round)
}

/// The time between one step's commit and the next one's, within a run
/// (the first from the run's creation), noted as each step commits: a run's
/// observer may outlive the answer to its handle.
struct StepTiming {
    last: Instant,
    all: std::sync::Arc<std::sync::Mutex<Vec<Duration>>>,
}

impl weft::engine::Observer for StepTiming {
    fn run_created(&mut self, _run: &weft::store::RunRecord) {
        self.last = Instant::now();
    }

    fn step_finished(&mut self, _record: &weft::store::StepRecord) {
        let now = Instant::now();
        lock(&self.all).push(now - self.last);
        self.last = now;
    }
}
