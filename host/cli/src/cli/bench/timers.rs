//! `weft bench --timers N --fire M`: the timer service at scale.
//!
//! First N runs are started, each sleeping on one timer: N - M of them
//! until tomorrow, M of them until a moment spread over `--spread` shortly
//! after. Every run suspends (a row, nothing in memory). Then a second
//! process, started fresh so that its memory is its own, opens the store,
//! re-arms every timer (the time it takes, and the resident memory it
//! adds per timer), and waits for the M fires, noting each one's lag from
//! its due time to its durable fire.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use weft::engine::{EngineConfig, Quiet};
use weft::{Clock, Engine, PluginDir, RedbStore, Runtime, RuntimeConfig, SystemClock, Workflow};

const NAP: &str = "id: nap\nsteps:\n  - { id: nap, sleep_until: \"${{ inputs.at }}\" }\n";

fn engine(dir: &Path, measure_fires: bool) -> anyhow::Result<Engine> {
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let store = RedbStore::open(dir.join("weft.redb"))?;
    Ok(Engine::with_config(
        Arc::new(store),
        PluginDir::new(runtime, dir),
        Arc::new(SystemClock),
        EngineConfig {
            measure_fires,
            ..EngineConfig::default()
        },
    )?)
}

/// Resident memory of this process, in bytes (Linux).
fn rss() -> Option<u64> {
    super::status_bytes("VmRSS:")
}

pub fn timers(n: usize, m: usize, spread: Duration) -> anyhow::Result<ExitCode> {
    let m = m.min(n);
    let dir = std::env::temp_dir().join(format!("weft-bench-timers-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = (|| {
        out!("weft bench: {n} pending timers (sleeping runs), {m} of them firing after a restart");
        out!("build: {}", super::build_kind());
        create_sleeping_runs(&dir, n, m, spread)?;
        rearm_in_new_process(&dir, m)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Starts `n` runs in the store in `dir`, each sleeping on one timer:
/// `n - m` until tomorrow, `m` until moments spread over `spread` that come
/// due once the next process has re-armed. Returns when every run has
/// suspended, with the engine closed.
fn create_sleeping_runs(dir: &Path, n: usize, m: usize, spread: Duration) -> anyhow::Result<()> {
    let engine = engine(dir, false)?;
    let workflow = Arc::new(weft::model::parse(
        NAP,
        weft::model::Format::Yaml,
        "nap.yaml",
    )?);
    let now = || SystemClock.now().as_millis();
    let began = Instant::now();
    let tomorrow = now() + 86_400_000;
    start_all(
        &engine,
        &workflow,
        &mut std::iter::repeat_n(tomorrow, n - m),
    )?;
    // Due shortly after this process ends and the next has re-armed.
    let rate = (n - m) as f64 / began.elapsed().as_secs_f64().max(1e-3);
    let lead = Duration::from_secs_f64(2.0 * m as f64 / rate.max(1.0)) + Duration::from_secs(15);
    let base = now() + u64::try_from(lead.as_millis()).unwrap_or(u64::MAX);
    let spread = u64::try_from(spread.as_millis()).unwrap_or(0);
    let m64 = m.max(1) as u64;
    start_all(
        &engine,
        &workflow,
        &mut (0..m as u64).map(|i| base + i * spread / m64),
    )?;
    while engine.load() != (0, 0) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = began.elapsed();
    out!(
        "  created        {n} sleeping runs in {:.1}s ({:.0} runs/s, each two durable commits)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
    // The re-arm process opens the store: this one lets it go first.
    drop(engine);
    Ok(())
}

/// Starts a run of `workflow` for each due time, in batches whose records
/// share their syncs, and holds back while more than 20,000 runs are in
/// memory or parked.
fn start_all(
    engine: &Engine,
    workflow: &Arc<Workflow>,
    dues: &mut dyn Iterator<Item = u64>,
) -> anyhow::Result<()> {
    loop {
        let handles = dues
            .take(2_000)
            .map(|at| {
                engine.start(
                    Arc::clone(workflow),
                    serde_json::json!({ "at": at }),
                    Box::new(Quiet),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        if handles.is_empty() {
            return Ok(());
        }
        for mut handle in handles {
            handle.recorded()?;
        }
        while {
            let (resident, parked) = engine.load();
            resident + parked > 20_000
        } {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Runs `weft bench --rearm DIR --fire M` in a fresh process, so that the
/// memory it measures is its own; its exit is this one's.
fn rearm_in_new_process(dir: &Path, m: usize) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the weft binary")?;
    let status = std::process::Command::new(exe)
        .arg("bench")
        .arg("--rearm")
        .arg(dir)
        .arg("--fire")
        .arg(m.to_string())
        .status()
        .context("cannot start the re-arm process")?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub fn rearm(dir: &Path, m: usize) -> anyhow::Result<ExitCode> {
    let engine = engine(dir, true)?;
    let before = rss();
    let began = Instant::now();
    let armed = engine.arm_timers()?;
    let took = began.elapsed();
    let after = rss();
    out!(
        "  re-armed       {armed} timers in {} ({:.0} timers/s)",
        super::show(took),
        armed as f64 / took.as_secs_f64().max(1e-9)
    );
    if let (Some(before), Some(after)) = (before, after) {
        out!(
            "  memory         {:.1} bytes resident per pending timer beyond its row ({} MiB in all, page cache of the scan included)",
            after.saturating_sub(before) as f64 / armed.max(1) as f64,
            after.saturating_sub(before) >> 20
        );
    }
    let mut lags: Vec<i64> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut quiet_since = Instant::now();
    while lags.len() < m && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let more = engine.take_fire_lags();
        if more.is_empty() {
            if !lags.is_empty() && quiet_since.elapsed() > Duration::from_secs(30) {
                break;
            }
        } else {
            quiet_since = Instant::now();
        }
        lags.extend(more);
    }
    lags.sort_unstable();
    let pick = |p: f64| {
        let rank = ((p / 100.0) * (lags.len() as f64 - 1.0)).round() as usize;
        lags.get(rank).copied().unwrap_or_default()
    };
    let ms = |us: i64| format!("{:.2}ms", us as f64 / 1000.0);
    out!(
        "  fire lag       p50 {} p99 {} max {} over {} fires (due time to durable fire)",
        ms(pick(50.0)),
        ms(pick(99.0)),
        ms(lags.last().copied().unwrap_or_default()),
        lags.len()
    );
    if lags.len() < m {
        out!(
            "  note: {} of the {m} timers fired before the restart (they came due early)",
            m - lags.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
