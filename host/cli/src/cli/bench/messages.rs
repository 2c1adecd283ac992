//! `weft bench --messages M`: delivery to one SSE subscriber, with acks.
//!
//! An in-process host (engine, delivery hub, the HTTP API on loopback)
//! over a fresh store. `--runs P` (default 100) runs at once each emit M
//! messages, one `emit:` step per message, every commit synced.
//!
//! - Baseline, measured first in the same invocation: the same runs with
//!   no subscriber, so the figure is how fast the engine commits messages.
//! - Then the same with one consumer reading the channel's SSE stream over
//!   HTTP and acking every delivery over HTTP (4 threads, each acking what is waiting in one batch request): the
//!   end-to-end rate, and each message's latency from its step's commit to
//!   the consumer reading it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use weft::engine::{EngineConfig, Quiet};
use weft::hub::Hub;
use weft::{Engine, PluginDir, RedbStore, Runtime, RuntimeConfig, SystemClock, WorkflowDir, model};

const WORKFLOW: &str = "id: burst\nsteps:\n  - id: each\n    foreach: \"${{ inputs.items }}\"\n    steps:\n      - { id: tell, emit: bench, with: { n: \"${{ item }}\", run: \"${{ run.id }}\" } }\n";

/// The acking threads; each acks what is waiting in one request.
const ACKERS: usize = 4;

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

struct Host {
    engine: Arc<Engine>,
    url: String,
    _runtime: tokio::runtime::Runtime,
}

fn host(dir: &Path) -> anyhow::Result<Host> {
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let store = RedbStore::open(dir.join("weft.redb"))?;
    let engine = Arc::new(Engine::with_config(
        Arc::new(store),
        PluginDir::new(runtime, dir),
        Arc::new(SystemClock),
        EngineConfig::default(),
    )?);
    let workflows_dir = dir.join("workflows");
    std::fs::create_dir_all(&workflows_dir)?;
    std::fs::write(workflows_dir.join("burst.yaml"), WORKFLOW)?;
    let (workflows, errors) = WorkflowDir::load(&workflows_dir)?;
    anyhow::ensure!(errors.is_empty(), "the bench workflow does not load");
    let (deployments, _) = weft::Deployments::open(
        Arc::clone(engine.store()),
        Arc::clone(engine.clock()),
        &workflows,
    )?;
    let hub = Hub::new(engine.committer());
    let api = weft::api::Api::new(Arc::clone(&engine), Arc::new(deployments), hub);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = tokio.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio.spawn(async move {
        let _ = axum::serve(listener, api.router()).await;
    });
    Ok(Host {
        engine,
        url,
        _runtime: tokio,
    })
}

/// Starts `runs` runs of `per_run` messages each and waits for them all.
fn emit_all(engine: &Engine, runs: usize, per_run: usize) -> anyhow::Result<()> {
    let workflow = Arc::new(model::parse(WORKFLOW, model::Format::Yaml, "burst.yaml")?);
    let items: Vec<usize> = (0..per_run).collect();
    let handles = (0..runs)
        .map(|_| {
            engine.start(
                Arc::clone(&workflow),
                json!({ "items": items }),
                Box::new(Quiet),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    for handle in handles {
        let run = handle.wait()?;
        anyhow::ensure!(
            run.state == weft::store::RunState::Succeeded,
            "a bench run ended {}",
            run.state
        );
    }
    Ok(())
}

pub fn messages(runs: usize, per_run: usize) -> anyhow::Result<ExitCode> {
    let total = runs * per_run;
    out!(
        "weft bench: {runs} runs at once, {per_run} messages each ({total} in all), one `emit` step per message, every commit synced"
    );
    out!("build: {}", super::build_kind());

    // Baseline: no subscriber.
    let scratch = std::env::temp_dir().join(format!("weft-bench-messages-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let dir = scratch.join("baseline");
    std::fs::create_dir_all(&dir).context("cannot make a scratch directory")?;
    let base = host(&dir)?;
    let started = Instant::now();
    emit_all(&base.engine, runs, per_run)?;
    let baseline = started.elapsed();
    drop(base);
    let baseline_rate = total as f64 / baseline.as_secs_f64();
    out!(
        "  no subscriber        {:>8.0} messages/s committed ({} in {})",
        baseline_rate,
        total,
        super::show(baseline)
    );

    // One SSE consumer, acking everything.
    let dir = scratch.join("sse");
    std::fs::create_dir_all(&dir).context("cannot make a scratch directory")?;
    let host = host(&dir)?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let made = agent
        .post(format!("{}/v1/subscriptions", host.url))
        .send_json(json!({ "channel": "bench", "name": "bench" }))?;
    anyhow::ensure!(
        made.status().is_success(),
        "cannot subscribe: {}",
        made.status()
    );
    let response = agent
        .get(format!(
            "{}/v1/channels/bench/events?consumer=bench",
            host.url
        ))
        .call()?;
    let (acks, ack_queue) = std::sync::mpsc::sync_channel::<String>(100_000);
    let ack_queue = Arc::new(std::sync::Mutex::new(ack_queue));
    let ackers: Vec<_> = (0..ACKERS)
        .map(|_| {
            let queue = Arc::clone(&ack_queue);
            let agent = agent.clone();
            let url = host.url.clone();
            std::thread::spawn(move || {
                loop {
                    // Everything waiting, up to 500, in one batch ack.
                    let batch: Vec<String> = {
                        let Ok(queue) = queue.lock() else { return };
                        let Ok(first) = queue.recv() else { return };
                        std::iter::once(first)
                            .chain(std::iter::from_fn(|| queue.try_recv().ok()).take(499))
                            .collect()
                    };
                    let _ = agent
                        .post(format!("{url}/v1/acks"))
                        .send_json(json!({ "deliveries": batch }));
                }
            })
        })
        .collect();
    let reader = std::thread::spawn(move || -> anyhow::Result<(Vec<u64>, Instant)> {
        let mut latencies = Vec::with_capacity(total);
        let lines = BufReader::new(response.into_body().into_reader()).lines();
        for line in lines {
            let line = line?;
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let got = now_us();
            let delivery: Value = serde_json::from_str(data.trim())?;
            if delivery["attempt"] == 1 {
                latencies
                    .push(got.saturating_sub(delivery["committed_us"].as_u64().unwrap_or(got)));
            }
            if let Some(id) = delivery["delivery"].as_str() {
                acks.send(id.to_owned())?;
            }
            if latencies.len() >= total {
                break;
            }
        }
        drop(acks);
        Ok((latencies, Instant::now()))
    });
    let started = Instant::now();
    emit_all(&host.engine, runs, per_run)?;
    let committed = started.elapsed();
    let (mut latencies, read_all) = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the reading thread panicked"))??;
    for acker in ackers {
        let _ = acker.join();
    }
    // Every ack has landed once the queue is empty.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut answer = agent
            .get(format!(
                "{}/v1/deliveries?subscription=bench/bench&limit=1",
                host.url
            ))
            .call()?;
        let body: Value = answer.body_mut().read_json()?;
        if body["deliveries"].as_array().is_some_and(Vec::is_empty) {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "acks did not all land");
        std::thread::sleep(Duration::from_millis(10));
    }
    let elapsed = started.elapsed();
    let _ = read_all;
    let rate = total as f64 / elapsed.as_secs_f64();
    latencies.sort_unstable();
    let at = |p: f64| {
        let i = ((latencies.len() as f64 - 1.0) * p).round() as usize;
        Duration::from_micros(latencies.get(i).copied().unwrap_or(0))
    };
    out!(
        "  one SSE subscriber   {:>8.0} messages/s delivered and acked ({} in {}; emitting took {})",
        rate,
        total,
        super::show(elapsed),
        super::show(committed)
    );
    out!(
        "  commit to subscriber p50 {} p99 {} max {}",
        super::show(at(0.5)),
        super::show(at(0.99)),
        super::show(at(1.0))
    );
    out!(
        "  delivered and acked vs committed with no subscriber: {:.2}x",
        rate / baseline_rate
    );
    drop(host);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(ExitCode::SUCCESS)
}
