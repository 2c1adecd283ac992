//! `weft bench --snapshots N`: publishing a snapshot revision of N entries
//! (1,000,000 by default) and reading it back.
//!
//! - Publish: a JSON Lines file of N entries is written, then published
//!   into a fresh store through the engine's committer, synced. It prints
//!   the time and entries per second, against the baseline of parsing the
//!   same file alone (same invocation), and the process's peak resident
//!   memory while publishing N/10 entries and then N: memory that does not
//!   grow with N is bounded.
//! - Read: 200,000 reads of random keys as a step's `snapshot.get` makes
//!   them host-side (the run's pinned revision, expiry checked), p50, p99
//!   and p99.9, against the store's raw read of other random keys, taking
//!   turns, as the baseline; and `snapshot.keys` of a 100-key prefix.

use std::io::{BufWriter, Write as _};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weft::Store;
use weft::engine::snapshots::{FileFormat, PublishOptions, RunSnapshots};
use weft::runtime::SnapshotSource;

use super::{build_kind, percentile, show, tempfile_dir};

/// Reads timed.
const READS: usize = 200_000;

/// redb's page cache in this bench.
const CACHE: usize = 16 << 20;

/// The process's resident memory, in bytes.
fn rss() -> u64 {
    super::status_bytes("VmRSS:").unwrap_or(0)
}

/// Writes `n` entries as JSON Lines to `path`.
fn write_file(path: &Path, n: usize) -> anyhow::Result<u64> {
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    for i in 0..n {
        writeln!(
            out,
            r#"{{"key": "sku-{i:08}", "value": {{"price": {}, "currency": "EUR", "tier": "t{}"}}}}"#,
            i % 10_000,
            i % 7
        )?;
    }
    out.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

/// Publishes `file` as store `name`: how long it took, and the peak
/// resident memory of the process meanwhile.
fn publish(engine: &weft::Engine, name: &str, file: &Path) -> anyhow::Result<(Duration, u64)> {
    let before = rss();
    let peak = Arc::new(AtomicU64::new(before));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let started = Instant::now();
    let reader = std::io::BufReader::with_capacity(1 << 16, std::fs::File::open(file)?);
    let record = engine.publish_snapshot(
        "default",
        name,
        reader,
        FileFormat::Lines,
        &file.display().to_string(),
        &PublishOptions::default(),
    )?;
    let took = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    anyhow::ensure!(record.revision == 1, "a fresh store's first revision");
    Ok((took, peak.load(Ordering::Relaxed)))
}

/// Parses `file` as a publish does, storing nothing: the baseline.
fn parse_only(file: &Path) -> anyhow::Result<(Duration, usize)> {
    use std::io::BufRead as _;
    let started = Instant::now();
    let reader = std::io::BufReader::with_capacity(1 << 16, std::fs::File::open(file)?);
    let mut n = 0;
    for line in reader.lines() {
        let value: serde_json::Value = serde_json::from_str(&line?)?;
        n += usize::from(value.get("key").is_some());
    }
    Ok((started.elapsed(), n))
}

pub fn snapshots(plugins: &Path, n: usize) -> anyhow::Result<ExitCode> {
    let scratch = tempfile_dir()?;
    let result = run(&scratch, plugins, n);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn run(scratch: &Path, plugins: &Path, n: usize) -> anyhow::Result<ExitCode> {
    println!("snapshot stores ({} build): {n} entries", build_kind());
    let small = scratch.join("small.jsonl");
    let large = scratch.join("large.jsonl");
    write_file(&small, (n / 10).max(1))?;
    let bytes = write_file(&large, n)?;
    let runtime = weft::Runtime::new(weft::RuntimeConfig::default())?;
    // The page cache is held small, so that what the resident memory
    // shows is the publish's own, not the pages redb caches (up to 1 GiB
    // by default, whatever publishes).
    let store = Arc::new(weft::RedbStore::open_with_cache(
        scratch.join("weft.redb"),
        CACHE,
    )?);
    let engine = weft::Engine::new(
        store.clone(),
        weft::PluginDir::new(runtime, plugins),
        Arc::new(weft::SystemClock),
    )?;

    let (parsed, count) = parse_only(&large)?;
    anyhow::ensure!(count == n, "the file holds {count} entries");
    let idle = rss();
    let (small_took, small_peak) = publish(&engine, "small", &small)?;
    let (took, peak) = publish(&engine, "prices", &large)?;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "publish: {n} entries ({:.1} MiB of JSON Lines) in {:.2}s, {:.0} entries/s, synced",
        mib(bytes),
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
    println!(
        "  baseline, parsing the file alone: {:.2}s; publish / parse = {:.2}x",
        parsed.as_secs_f64(),
        took.as_secs_f64() / parsed.as_secs_f64()
    );
    println!(
        "  peak resident memory of the process while publishing (redb's page cache held to {} MiB; {:.1} MiB before): {:.1} MiB for {} entries, {:.1} MiB for {n} ({:.2}x for 10x the entries)",
        CACHE >> 20,
        mib(idle),
        mib(small_peak),
        (n / 10).max(1),
        mib(peak),
        peak as f64 / small_peak.max(1) as f64
    );
    let _ = small_took;

    // Reads, as a pinned run's step makes them.
    let workflow = weft::model::parse(
        "id: bench\nsnapshots: [prices]\nsteps:\n  - { id: a, uses: echo }\n",
        weft::model::Format::Yaml,
        "bench.yaml",
    )?;
    let pins = [("prices".to_owned(), 1)].into();
    let source = RunSnapshots::new(store.clone(), Arc::new(weft::SystemClock), &workflow, &pins)?;
    let data = store
        .snapshots(Some("prices"))?
        .pop()
        .map(|r| r.data)
        .unwrap_or_default();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next_key = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        format!("sku-{:08}", state % n as u64)
    };
    let mut raw = Vec::with_capacity(READS);
    let mut host = Vec::with_capacity(READS);
    // Each read of its own key; the two kinds take turns.
    for i in 0..READS * 2 {
        let key = next_key();
        let started = Instant::now();
        let found = if i % 2 == 0 {
            store.snapshot_entry(&data, &key)?.map(|e| e.value)
        } else {
            source.get("prices", &key).map_err(anyhow::Error::msg)?
        };
        let took = started.elapsed();
        anyhow::ensure!(found.is_some(), "key {key} is there");
        if i % 2 == 0 {
            raw.push(took)
        } else {
            host.push(took)
        }
    }
    let mut keys = Vec::with_capacity(10_000);
    for _ in 0..10_000 {
        let key = next_key();
        let prefix = &key[..key.len() - 2];
        let started = Instant::now();
        let found = source
            .keys("prices", prefix, 100)
            .map_err(anyhow::Error::msg)?;
        keys.push(started.elapsed());
        anyhow::ensure!(!found.is_empty(), "keys under {prefix}");
    }
    let (host50, host99, host999) = (
        percentile(&mut host, 50.0),
        percentile(&mut host, 99.0),
        percentile(&mut host, 99.9),
    );
    let (raw50, raw99) = (percentile(&mut raw, 50.0), percentile(&mut raw, 99.0));
    println!(
        "read (snapshot.get, host-side, pinned revision, random keys of {n}): p50 {} p99 {} p99.9 {}",
        show(host50),
        show(host99),
        show(host999)
    );
    println!(
        "  baseline, the store's raw read: p50 {} p99 {}; p99 ratio {:.2}x",
        show(raw50),
        show(raw99),
        host99.as_secs_f64() / raw99.as_secs_f64().max(1e-9)
    );
    println!(
        "snapshot.keys (100 keys under a prefix): p50 {} p99 {}",
        show(percentile(&mut keys, 50.0)),
        show(percentile(&mut keys, 99.0))
    );
    println!(
        "goal: read p99 under 20µs: {}",
        if host99 < Duration::from_micros(20) {
            "met"
        } else {
            "not met"
        }
    );
    Ok(ExitCode::SUCCESS)
}
