//! `weft bench --languages`: what a step costs in each language, for the
//! example plugins `template` (Rust), `wordstats` (Python) and `headline`
//! (JavaScript) in the plugins directory:
//! - compile: Cranelift, link and describe, no cache;
//! - cached load: the same from the compiled-code cache;
//! - instantiate+call p50/p99, a fresh instance per call, with the pooling
//!   allocator and, as the baseline measured in the same run, on-demand
//!   allocation;
//! - landing: from a component moved into a watched plugins directory to
//!   the first run recorded on it, uncached and cached.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use weft::engine::{Engine, Quiet};
use weft::runtime::CodeSource;
use weft::{PluginDir, RedbStore, Runtime, RuntimeConfig, SystemClock, model};

use super::{build_kind, percentile, ratio, show, timed_calls};

/// The example plugins, each with an input it accepts.
fn examples() -> Vec<(&'static str, &'static str, Value)> {
    let text = "Ada writes about durability. Why durability? Because durability is where the work is, says Ada.";
    vec![
        (
            "Rust",
            "template",
            json!({ "template": "Hello, {{ name }}!", "vars": { "name": "Ada" } }),
        ),
        ("Python", "wordstats", json!({ "text": text, "top": 2 })),
        (
            "JavaScript",
            "headline",
            json!({ "text": text, "words": 15, "top": ["durability", "ada"] }),
        ),
    ]
}

/// The input [`examples`] gives the example plugin `name` (`{}` for
/// another).
pub fn example(name: &str) -> Value {
    examples()
        .into_iter()
        .find(|(_, n, _)| *n == name)
        .map_or_else(|| json!({}), |(_, _, input)| input)
}

/// How much each language is measured, the same for all.
struct Rounds {
    /// Instantiate+call iterations per allocator.
    iterations: usize,
    /// Loads from the cache.
    loads: usize,
    /// Bytes of each pooled memory kept resident between calls.
    keep_resident: usize,
}

/// One language's row of the table.
struct Row {
    size: usize,
    compile: Duration,
    /// The cached load's p50.
    cached: Duration,
    /// p50 and p99 of instantiate+call with the pooling allocator.
    pooled: (Duration, Duration),
    /// p50 and p99 of instantiate+call with on-demand allocation.
    on_demand: (Duration, Duration),
    /// p50 and p99 of calls to one instance, reused.
    reused: (Duration, Duration),
}

pub fn languages(
    plugins: &Path,
    iterations: usize,
    loads: usize,
    keep_resident: Option<usize>,
) -> anyhow::Result<ExitCode> {
    let keep_resident = keep_resident.unwrap_or(RuntimeConfig::default().memory_keep_resident);
    out!(
        "weft bench --languages: {} calls per allocator, {loads} cached loads, pooled memory kept resident {} KiB; build: {}",
        iterations,
        keep_resident / 1024,
        build_kind()
    );
    let scratch = tempfile::tempdir()?;
    out!();
    print_table_header()?;
    let rounds = Rounds {
        iterations,
        loads,
        keep_resident,
    };
    for (language, name, input) in examples() {
        let bytes = read_example(plugins, name)?;
        let cache = scratch.path().join(format!("cache-{name}"));
        let row = measure(name, &bytes, &input, &cache, &rounds)?;
        print_row(language, &row)?;
    }

    out!();
    out!("landing: a component moved into the watched plugins directory, to the first run on it");
    for (language, name, input) in examples() {
        let bytes = std::fs::read(plugins.join(format!("{name}.wasm")))?;
        let uncached = landing(scratch.path(), name, &bytes, &input, false)?;
        let cached = landing(scratch.path(), name, &bytes, &input, true)?;
        out!(
            "  {:<11} uncached {:>10}   cached {:>10}",
            language,
            show(uncached),
            show(cached)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The example plugin `name` from the plugins directory.
pub fn read_example(plugins: &Path, name: &str) -> anyhow::Result<Vec<u8>> {
    let path = plugins.join(format!("{name}.wasm"));
    std::fs::read(&path).with_context(|| {
        format!(
            "cannot read {}; build the example plugins first (scripts/build-plugins)",
            path.display()
        )
    })
}

/// Measures one component on `input`: compiled into the empty cache
/// `cache`, loaded from it, then instantiated and called with each
/// allocator and in one reused instance.
fn measure(
    name: &str,
    bytes: &[u8],
    input: &Value,
    cache: &Path,
    rounds: &Rounds,
) -> anyhow::Result<Row> {
    let cached_runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.to_path_buf()),
        memory_keep_resident: rounds.keep_resident,
        ..RuntimeConfig::default()
    })?;
    let started = Instant::now();
    let plugin = cached_runtime.load(bytes)?;
    let compile = started.elapsed();
    anyhow::ensure!(plugin.code_source() == CodeSource::Compiled);
    let cached = cached_load_p50(&cached_runtime, bytes, rounds.loads)?;
    let input = input.to_string();
    let mut pooled = timed_calls(&cached_runtime, bytes, &input, rounds.iterations)?;
    let on_demand_runtime = Runtime::new(RuntimeConfig {
        pooling: false,
        cache_dir: Some(cache.to_path_buf()),
        ..RuntimeConfig::default()
    })?;
    let mut on_demand = timed_calls(&on_demand_runtime, bytes, &input, rounds.iterations)?;
    // What reusing one instance would save (weft does not: see
    // `time_reused_calls`).
    let mut reused = cached_runtime
        .load(bytes)?
        .time_reused_calls(&input, rounds.iterations)
        .map_err(|e| anyhow::anyhow!("{name} failed in a reused instance: {e}"))?;
    Ok(Row {
        size: bytes.len(),
        compile,
        cached,
        pooled: p50_p99(&mut pooled),
        on_demand: p50_p99(&mut on_demand),
        reused: p50_p99(&mut reused),
    })
}

/// The p50 of `loads` loads from the filled cache; an error if one of them
/// compiled instead.
fn cached_load_p50(runtime: &Runtime, bytes: &[u8], loads: usize) -> anyhow::Result<Duration> {
    let mut cached = Vec::new();
    for _ in 0..loads {
        let started = Instant::now();
        let plugin = runtime.load(bytes)?;
        cached.push(started.elapsed());
        anyhow::ensure!(plugin.code_source() == CodeSource::Cache);
    }
    Ok(percentile(&mut cached, 50.0))
}

fn p50_p99(times: &mut [Duration]) -> (Duration, Duration) {
    (percentile(times, 50.0), percentile(times, 99.0))
}

fn print_table_header() -> anyhow::Result<()> {
    out!(
        "{:<11} {:>9} {:>10} {:>10} {:>9}   {:>22}   {:>22}   {:>8}   {:>22}",
        "language",
        "size",
        "compile",
        "cached",
        "speedup",
        "pooled p50 / p99",
        "on-demand p50 / p99",
        "p50 gain",
        "one instance reused"
    );
    Ok(())
}

fn print_row(language: &str, row: &Row) -> anyhow::Result<()> {
    out!(
        "{:<11} {:>6} MB {:>10} {:>10} {:>8.0}x   {:>10} / {:>9}   {:>10} / {:>9}   {:>7.2}x   {:>10} / {:>9}",
        language,
        row.size / 1_000_000,
        show(row.compile),
        show(row.cached),
        ratio(row.compile, row.cached),
        show(row.pooled.0),
        show(row.pooled.1),
        show(row.on_demand.0),
        show(row.on_demand.1),
        ratio(row.on_demand.0, row.pooled.0),
        show(row.reused.0),
        show(row.reused.1)
    );
    Ok(())
}

/// Moves the component into a watched, empty plugins directory of a fresh
/// host and starts runs of a workflow that uses it until one is recorded:
/// the time from the move to that record. With `cached`, the component's
/// compiled code is in the cache already.
fn landing(
    scratch: &Path,
    name: &str,
    bytes: &[u8],
    input: &Value,
    cached: bool,
) -> anyhow::Result<Duration> {
    let root = scratch.join(format!("landing-{name}-{cached}"));
    let dir = root.join("plugins");
    std::fs::create_dir_all(&dir)?;
    let cache = scratch.join(format!("landing-cache-{name}"));
    if !cached {
        let _ = std::fs::remove_dir_all(&cache);
    }
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache),
        ..RuntimeConfig::default()
    })?;
    let engine = Arc::new(Engine::new(
        Arc::new(RedbStore::open(root.join("weft.redb"))?),
        PluginDir::new(runtime, &dir),
        Arc::new(SystemClock),
    )?);
    let _watcher = weft::plugins::watch(&dir, {
        let engine = Arc::clone(&engine);
        move |path| {
            let _ = engine.plugins().refresh(&path);
        }
    })?;
    let workflow = Arc::new(model::parse(
        &format!("id: landing\nsteps:\n  - {{ id: s, uses: {name}, with: {input} }}\n"),
        model::Format::Yaml,
        "bench",
    )?);
    let aside = root.join(format!("{name}.wasm"));
    std::fs::write(&aside, bytes)?;
    let landed = Instant::now();
    std::fs::rename(&aside, dir.join(format!("{name}.wasm")))?;
    let deadline = landed + Duration::from_secs(600);
    loop {
        match engine.start(Arc::clone(&workflow), json!({}), Box::new(Quiet)) {
            Ok(mut handle) => {
                handle.recorded()?;
                let took = landed.elapsed();
                handle.wait()?;
                return Ok(took);
            }
            Err(e) if Instant::now() < deadline => {
                tracing::debug!("not yet: {e}");
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => bail!("no run started on {name} within 10 minutes: {e}"),
        }
    }
}
