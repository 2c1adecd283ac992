//! `weft bench --tenants`: what tenants cost and what their turns give.
//!
//! - Auth: requests per second of `GET /v1/runs/{id}` (the same run) on
//!   an in-process host's HTTP API over loopback, first on a host with no
//!   token (the open loopback default), then with a token on every
//!   request: the cost of checking it.
//! - Fairness: one tenant's flood against another's lone runs. Tenant B
//!   runs 3-step `echo` runs one after another, first on an idle engine
//!   (the baseline), then while tenant A starts `--flood` runs at once,
//!   and again with A held to a resident cap. The figure is B's p99
//!   latency under the flood as a ratio of its idle p99, measured in this
//!   invocation.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use weft::engine::{EngineConfig, Quiet, TenantLimits};
use weft::store::{Role, Store};
use weft::{Engine, PluginDir, RedbStore, Runtime, RuntimeConfig, SystemClock, Workflow};

use super::{build_kind, percentile, show, tempfile_dir};

/// Requests per client thread in each auth phase.
const REQUESTS: usize = 5_000;
/// Client threads in each auth phase.
const CLIENTS: usize = 2;
/// B's runs in each fairness phase.
const LONE_RUNS: usize = 300;

pub fn tenants(plugins: &Path, flood: usize) -> anyhow::Result<ExitCode> {
    let scratch = tempfile_dir()?;
    let result = (|| {
        out!("weft bench --tenants: fresh redb files, every commit synced");
        out!("build: {}", build_kind());
        auth(&scratch.join("auth"))?;
        fairness(plugins, &scratch.join("fair"), flood)?;
        Ok(ExitCode::SUCCESS)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// An in-process host serving the HTTP API on loopback over a fresh
/// store in `dir`, with one run recorded; with `token`, a reader's token
/// in its store (so every request needs one). The URL of the run, the
/// token, and what keeps the host alive.
fn api_host(
    dir: &Path,
    token: bool,
) -> anyhow::Result<(String, Option<String>, tokio::runtime::Runtime)> {
    std::fs::create_dir_all(dir)?;
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(dir.join("weft.redb"))?);
    let engine = Arc::new(Engine::with_config(
        Arc::clone(&store),
        PluginDir::new(runtime, dir),
        Arc::new(SystemClock),
        EngineConfig::default(),
    )?);
    let workflow = parse("id: one\nsteps:\n  - { id: tell, emit: bench, with: 1 }\n")?;
    let run = engine.run(workflow, json!({}), Box::new(Quiet))?;
    let deployments = Arc::new(weft::Deployments::none(
        Arc::clone(&store),
        Arc::new(SystemClock),
    ));
    let hub = weft::hub::Hub::new(
        engine.committer(),
        Arc::clone(engine.egress()),
        engine.vault().clone(),
    );
    let services = weft::Services::new(Arc::clone(&engine), Arc::clone(&deployments), hub.clone());
    let token = if token {
        let new = weft::services::NewToken {
            tenant: weft::core::tenant::DEFAULT.to_owned(),
            role: Role::Reader,
            label: "bench".to_owned(),
            expires: None,
            created_by: "bench".to_owned(),
        };
        Some(services.create_token(new)?.1)
    } else {
        None
    };
    let api = weft::api::Api::new(Arc::clone(&engine), deployments, hub);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = tokio.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let url = format!("http://{}/v1/runs/{}", listener.local_addr()?, run.id);
    tokio.spawn(async move {
        super::super::listen::serve_plain(listener, api.router()).await;
    });
    Ok((url, token, tokio))
}

/// Requests per second with and without a token: two hosts, one with no
/// token in its store (the open loopback default) and one whose every
/// request carries a token, measured in turn three times; the best round
/// of each counts.
fn auth(dir: &Path) -> anyhow::Result<()> {
    let (open_url, _, _open_host) = api_host(&dir.join("open"), false)?;
    let (token_url, token, _token_host) = api_host(&dir.join("token"), true)?;
    out!();
    out!(
        "auth: GET /v1/runs/{{id}} (the same run), {CLIENTS} clients x {REQUESTS} requests, keep-alive, best of 3 rounds"
    );
    let (mut open, mut with) = (0f64, 0f64);
    for _ in 0..3 {
        open = open.max(requests(&open_url, None)?);
        with = with.max(requests(&token_url, token.as_deref())?);
    }
    out!("  no token (open loopback host)  {open:>8.0} requests/s");
    out!("  with a token                   {with:>8.0} requests/s");
    out!(
        "  with a token: {:.2}x the requests/s ({:+.1} us per request)",
        with / open,
        1e6 / with - 1e6 / open
    );
    Ok(())
}

/// Requests per second of `url` from [`CLIENTS`] threads.
fn requests(url: &str, token: Option<&str>) -> anyhow::Result<f64> {
    let began = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let url = url.to_owned();
            let bearer = token.map(|t| format!("Bearer {t}"));
            std::thread::spawn(move || -> anyhow::Result<()> {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .build()
                    .into();
                for _ in 0..REQUESTS {
                    let mut request = agent.get(&url);
                    if let Some(bearer) = &bearer {
                        request = request.header("authorization", bearer);
                    }
                    let mut response = request.call()?;
                    anyhow::ensure!(
                        response.status() == 200,
                        "the bench request was refused: {}",
                        response.body_mut().read_to_string().unwrap_or_default()
                    );
                    response.body_mut().read_to_string()?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("a bench client panicked"))??;
    }
    Ok((CLIENTS * REQUESTS) as f64 / began.elapsed().as_secs_f64())
}

fn parse(text: &str) -> anyhow::Result<Arc<Workflow>> {
    Ok(Arc::new(weft::model::parse(
        text,
        weft::model::Format::Yaml,
        "bench.yaml",
    )?))
}

/// `text` as tenant `tenant`'s workflow.
fn of_tenant(tenant: &str, text: &str) -> anyhow::Result<Arc<Workflow>> {
    let mut workflow = weft::model::parse(text, weft::model::Format::Yaml, "bench.yaml")?;
    workflow.id = weft::core::tenant::qualify(tenant, &workflow.id);
    Ok(Arc::new(workflow))
}

/// B's lone runs' latency, idle and under A's flood.
fn fairness(plugins: &Path, dir: &Path, flood: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let text = "id: work\nsteps:\n  - { id: a, uses: echo, with: { n: 1 } }\n  - { id: b, uses: echo, with: { n: 2 } }\n  - { id: c, uses: echo, with: { n: 3 } }\n";
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.join("cache")),
        ..RuntimeConfig::default()
    })?;
    let engine = Engine::with_config(
        Arc::new(RedbStore::open(dir.join("weft.redb"))?),
        PluginDir::new(runtime, plugins),
        Arc::new(SystemClock),
        EngineConfig::default(),
    )
    .with_context(|| format!("cannot start the engine over {}", plugins.display()))?;
    let a = of_tenant("tenant-a", text)?;
    let b = of_tenant("tenant-b", text)?;
    // Load the plugin and touch the store before timing.
    engine
        .run(Arc::clone(&b), json!({}), Box::new(Quiet))
        .context("the echo plugin does not run; build the example plugins first (see README)")?;

    out!();
    out!(
        "fairness: tenant B runs {LONE_RUNS} 3-step echo runs one after another; tenant A starts {flood} such runs at once"
    );
    let mut idle = lone_runs(&engine, &b, LONE_RUNS, None)?;
    let idle_p99 = percentile(&mut idle, 99.0);
    out!(
        "  idle host                       B p50 {:>9}  p99 {:>9}",
        show(percentile(&mut idle, 50.0)),
        show(idle_p99)
    );
    for (label, cap) in [
        ("A's flood, turns only", None),
        ("A's flood, A capped at 100", Some(100)),
    ] {
        engine.set_tenant_limits(
            "tenant-a",
            TenantLimits {
                weight: 1,
                max_resident: cap,
                ..TenantLimits::default()
            },
        );
        let (mut under, flood_secs) = flooded(&engine, &a, &b, flood)?;
        let p99 = percentile(&mut under, 99.0);
        out!(
            "  {label:<31} B p50 {:>9}  p99 {:>9}  ({:.1}x idle p99; A's {flood} runs took {flood_secs:.1} s)",
            show(percentile(&mut under, 50.0)),
            show(p99),
            p99.as_secs_f64() / idle_p99.as_secs_f64().max(f64::MIN_POSITIVE)
        );
    }
    Ok(())
}

/// Runs `count` runs of `workflow` one after another (or until `stop`):
/// each one's time from start to end.
fn lone_runs(
    engine: &Engine,
    workflow: &Arc<Workflow>,
    count: usize,
    stop: Option<&AtomicBool>,
) -> anyhow::Result<Vec<Duration>> {
    let mut took = Vec::with_capacity(count);
    for _ in 0..count {
        if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
            break;
        }
        let began = Instant::now();
        engine.run(Arc::clone(workflow), json!({}), Box::new(Quiet))?;
        took.push(began.elapsed());
    }
    Ok(took)
}

/// A's `flood` runs started at once, and B's lone runs while they go: B's
/// latencies, and how long A's runs took.
fn flooded(
    engine: &Engine,
    a: &Arc<Workflow>,
    b: &Arc<Workflow>,
    flood: usize,
) -> anyhow::Result<(Vec<Duration>, f64)> {
    let done = AtomicBool::new(false);
    let began = Instant::now();
    std::thread::scope(|scope| {
        let flooding = scope.spawn(|| -> anyhow::Result<f64> {
            let handles = (0..flood)
                .map(|_| engine.start(Arc::clone(a), json!({}), Box::new(Quiet)))
                .collect::<Result<Vec<_>, _>>()?;
            for handle in handles {
                handle.wait()?;
            }
            done.store(true, Ordering::SeqCst);
            Ok(began.elapsed().as_secs_f64())
        });
        // B starts once A's starts are under way.
        std::thread::sleep(Duration::from_millis(50));
        let lone = lone_runs(engine, b, LONE_RUNS, Some(&done));
        let flood_secs = flooded_join(flooding)?;
        Ok((lone?, flood_secs))
    })
}

fn flooded_join(
    thread: std::thread::ScopedJoinHandle<'_, anyhow::Result<f64>>,
) -> anyhow::Result<f64> {
    thread
        .join()
        .map_err(|_| anyhow::anyhow!("the flood thread panicked"))?
}
