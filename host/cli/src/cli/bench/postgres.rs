//! `weft bench --runs P --store postgres://...`: the durable throughput
//! of the same P runs on PostgreSQL, with one, two and three hosts on one
//! database, each as a ratio to redb's figure from the same invocation.
//!
//! The hosts are engines in this process, each with its own store handle
//! (its own connection pool) and its own host id and leases, as separate
//! `weft serve` processes would have; the runs are dealt out over them.
//! On a 2-core machine the hosts, the database server and the bench
//! share the two cores.

use std::path::Path;
use std::sync::Arc;

use std::process::ExitCode;

use anyhow::Context;
use weft::{Runtime, RuntimeConfig, Store};

use super::{Round, percentile, round_on, show};

pub(super) fn throughput(
    plugins: &Path,
    scratch: &Path,
    url: &str,
    workflow: &Arc<weft::Workflow>,
    runs: usize,
    redb: f64,
) -> anyhow::Result<()> {
    out!();
    out!(
        "the same on PostgreSQL ({}), every commit synced:",
        super::super::shown_postgres(url)
    );
    for hosts in 1..=3 {
        let schema = format!("bench_{}_{hosts}", std::process::id());
        let stores: Vec<Arc<weft::PostgresStore>> = (0..hosts)
            .map(|_| weft::PostgresStore::open_in(url, Some(&schema)).map(Arc::new))
            .collect::<Result<_, _>>()?;
        let engines = hosts_on(&stores, plugins, scratch)?;
        // Load the plugin on every host, and touch the store, first.
        round_on(&engines, workflow, hosts)?;
        let before: Vec<weft::store::BatchCosts> = stores.iter().map(|s| s.batch_costs()).collect();
        let mut measured: Round = round_on(&engines, workflow, runs)?;
        let costs = stores.iter().zip(&before).fold(
            weft::store::BatchCosts::default(),
            |sum, (store, before)| {
                let now = store.batch_costs();
                weft::store::BatchCosts {
                    batches: sum.batches + (now.batches - before.batches),
                    took: sum.took + (now.took - before.took),
                    locking: sum.locking + (now.locking - before.locking),
                    trips: sum.trips + (now.trips - before.trips),
                }
            },
        );
        let rate = measured.steps as f64 / measured.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        out!(
            "  {hosts} host{} {:>9.0} steps/s   {:.2}x redb's   step-to-step p50 {:>9} p99 {:>9}",
            if hosts == 1 { " " } else { "s" },
            rate,
            rate / redb.max(f64::MIN_POSITIVE),
            show(percentile(&mut measured.gaps, 50.0)),
            show(percentile(&mut measured.gaps, 99.0)),
        );
        let batches = costs.batches.max(1);
        out!(
            "           {} batches, {:.1} steps a batch, {:.1} round trips a batch; taking the lock (a round trip, and the wait for other hosts' batches) {:.0}% of a batch's {}",
            costs.batches,
            measured.steps as f64 / batches as f64,
            costs.trips as f64 / batches as f64,
            100.0 * costs.locking.as_secs_f64() / costs.took.as_secs_f64().max(f64::MIN_POSITIVE),
            show(costs.took / u32::try_from(batches).unwrap_or(u32::MAX)),
        );
        drop(engines);
        if let Some(store) = stores.first() {
            store.discard()?;
        }
    }
    Ok(())
}

/// A host on each of `stores`: an engine with a runtime of its own, as a
/// `weft serve` process would have.
fn hosts_on(
    stores: &[Arc<weft::PostgresStore>],
    plugins: &Path,
    scratch: &Path,
) -> anyhow::Result<Vec<weft::Engine>> {
    stores
        .iter()
        .map(|store| {
            let runtime = Runtime::new(RuntimeConfig {
                cache_dir: Some(scratch.join("cache")),
                ..RuntimeConfig::default()
            })?;
            let store: Arc<dyn weft::Store> = Arc::clone(store) as Arc<dyn weft::Store>;
            Ok(weft::Engine::new(
                store,
                weft::PluginDir::new(runtime, plugins),
                Arc::new(weft::SystemClock),
            )?)
        })
        .collect()
}

/// How soon a run parked on one host starts on another: host A holds no
/// place for the tenant (a resident cap of 0), so each run started there
/// is parked as free work, and host B, told by the store's news
/// (`NOTIFY`), claims it. One run every 20 ms, `count` runs; the pickup is
/// a run's first step's start less its creation (both read off this
/// machine's clock, in milliseconds).
pub(super) fn pickup(
    plugins: &Path,
    scratch: &Path,
    url: &str,
    workflow: &Arc<weft::Workflow>,
    count: usize,
) -> anyhow::Result<()> {
    let schema = format!("bench_{}_pickup", std::process::id());
    let stores: Vec<Arc<weft::PostgresStore>> = (0..2)
        .map(|_| weft::PostgresStore::open_in(url, Some(&schema)).map(Arc::new))
        .collect::<Result<_, _>>()?;
    let engines = hosts_on(&stores, plugins, scratch)?;
    // B loads the plugin first.
    round_on(&engines[1..], workflow, 1)?;
    let tenant = weft::core::tenant::of(&workflow.id).to_owned();
    engines[0].set_tenant_limits(
        &tenant,
        weft::engine::TenantLimits {
            max_resident: Some(0),
            ..weft::engine::TenantLimits::default()
        },
    );
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        let mut handle = engines[0].start(
            Arc::clone(workflow),
            serde_json::json!({}),
            Box::new(weft::engine::Quiet),
        )?;
        handle.recorded()?;
        ids.push(handle.id().to_owned());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let store = &stores[1];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut pickups = Vec::with_capacity(count);
    for id in &ids {
        let run = loop {
            match store.run(id)? {
                Some(run) if run.state.is_terminal() => break run,
                _ => {
                    anyhow::ensure!(
                        std::time::Instant::now() < deadline,
                        "run {id} did not end in 2 minutes"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
        };
        let first = store
            .steps(id)?
            .into_iter()
            .next()
            .with_context(|| format!("run {id} has no step"))?;
        let waited = first
            .started_at
            .as_millis()
            .saturating_sub(run.created_at.as_millis());
        pickups.push(std::time::Duration::from_millis(waited));
    }
    out!(
        "  a run parked on one host starts on another after p50 {:>9} p99 {:>9} max {:>9} ({count} runs, one every 20 ms; the look that is left is every 100 ms)",
        show(percentile(&mut pickups, 50.0)),
        show(percentile(&mut pickups, 99.0)),
        show(pickups.iter().max().copied().unwrap_or_default()),
    );
    drop(engines);
    if let Some(store) = stores.first() {
        store.discard()?;
    }
    Ok(())
}

/// Steps of the failover bench's workflow: an `echo`, then a short sleep,
/// twenty times, so that a killed host's runs are always mid-way.
fn hopping() -> String {
    let mut text = "id: hop\nsteps:\n".to_owned();
    for i in 0..20 {
        text.push_str(&format!(
            "  - {{ id: e{i}, uses: echo, with: {i} }}\n  - {{ id: z{i}, sleep: 100ms }}\n"
        ));
    }
    text
}

/// The lease of the failover bench's hosts.
const LEASE: &str = "2s";

/// Runs started on the host about to die, per kill.
const IN_FLIGHT: usize = 40;

/// A `weft serve` of this binary, killed when dropped.
struct Serve {
    child: std::process::Child,
    url: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path, plugins: &Path, store: &str, workflows: &Path) -> anyhow::Result<Serve> {
    std::fs::create_dir_all(dir)?;
    let addr = dir.join("serve.addr");
    let _ = std::fs::remove_file(&addr);
    let child = std::process::Command::new(std::env::current_exe()?)
        .args(["serve", "--listen", "127.0.0.1:0", "--lease-ttl", LEASE])
        .arg("--data-dir")
        .arg(dir)
        .arg("--plugins")
        .arg(plugins)
        .arg("--workflows")
        .arg(workflows)
        .args(["--store", store])
        .env_remove("WEFT_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("serve.log"))?)
        .spawn()?;
    let mut serve = Serve {
        child,
        url: String::new(),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(&addr)
            && text.ends_with('\n')
        {
            serve.url = text.trim().to_owned();
            return Ok(serve);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "weft serve did not start; see {}",
            dir.join("serve.log").display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Two hosts on a fresh schema; `kills` times, runs start on the first,
/// it is killed with SIGKILL while they are in flight, and each of them is
/// timed from the kill to its first step record after it (the other host
/// took it over). The killed host is started again before the next kill.
pub(super) fn failover(plugins: &Path, url: &str, kills: usize) -> anyhow::Result<ExitCode> {
    let scratch = std::env::temp_dir().join(format!("weft-bench-failover-{}", std::process::id()));
    let result = (|| {
        let workflows = scratch.join("workflows");
        std::fs::create_dir_all(&workflows)?;
        std::fs::write(workflows.join("hop.yaml"), hopping())?;
        let schema = format!("failover_{}", std::process::id());
        let made = weft::PostgresStore::open_in(url, Some(&schema))?;
        let store = weft::PostgresStore::url_in(url, &schema);
        out!(
            "weft bench --failover: 2 hosts on PostgreSQL, lease {LEASE}, {IN_FLIGHT} runs in flight on the host killed, {kills} kill(s)"
        );
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let survivor = serve(&scratch.join("survivor"), plugins, &store, &workflows)?;
        let mut times = Vec::new();
        for kill in 0..kills {
            let mut victim = serve(
                &scratch.join(format!("victim-{kill}")),
                plugins,
                &store,
                &workflows,
            )?;
            let mut ids = Vec::new();
            for _ in 0..IN_FLIGHT {
                let mut answer = agent
                    .post(format!("{}/v1/runs", victim.url))
                    .send_json(serde_json::json!({ "workflow": "hop" }))?;
                let body: serde_json::Value = answer.body_mut().read_json()?;
                let id = body["id"].as_str().context("no run id")?.to_owned();
                ids.push(id);
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
            let killed_at = now_ms();
            victim.child.kill()?;
            victim.child.wait()?;
            let mut round = Vec::new();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
            for id in &ids {
                let first = loop {
                    let mut answer = agent.get(format!("{}/v1/runs/{id}", survivor.url)).call()?;
                    let shown: serde_json::Value = answer.body_mut().read_json()?;
                    let after = shown["steps"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s["started_at"].as_u64())
                        .filter(|at| *at >= killed_at)
                        .min();
                    if let Some(at) = after {
                        break Some(at);
                    }
                    if shown["run"]["state"] != "running" {
                        // It ended before the kill.
                        break None;
                    }
                    anyhow::ensure!(
                        std::time::Instant::now() < deadline,
                        "run {id} was never taken over"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(10));
                };
                if let Some(at) = first {
                    round.push(std::time::Duration::from_millis(at - killed_at));
                }
            }
            out!(
                "  kill {}: {} runs taken over, first step after {} (p50) to {} (max)",
                kill + 1,
                round.len(),
                show(percentile(&mut round.clone(), 50.0)),
                show(percentile(&mut round.clone(), 100.0)),
            );
            times.extend(round);
        }
        out!(
            "failover, kill to a taken-over run's first step: p50 {}  p99 {}  ({} runs; lease {LEASE}, a host on the same machine is seen gone at the next lease round, one on another machine once its lease lapses)",
            show(percentile(&mut times, 50.0)),
            show(percentile(&mut times, 99.0)),
            times.len()
        );
        drop(survivor);
        made.discard()?;
        Ok(ExitCode::SUCCESS)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}
