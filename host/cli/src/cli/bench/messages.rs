//! `weft bench --messages M`: delivery to one SSE subscriber, with acks.
//!
//! An in-process host (engine, delivery hub, the HTTP API on loopback)
//! over a fresh store. `--runs P` (default 100) runs at once each emit M
//! messages, one `emit:` step per message, every commit synced.
//!
//! - Baseline, measured first in the same invocation: the same runs with
//!   no subscriber, so the figure is how fast the engine commits messages.
//! - Then the same with one consumer reading the channel's SSE stream over
//!   HTTP and acking every delivery over HTTP (4 threads, each acking what
//!   is waiting in one batch request): the end-to-end rate, and each
//!   message's latency from its step's commit to the consumer reading it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::ExitCode;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use ureq::http::Response;
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
    let hub = Hub::new(
        engine.committer(),
        Arc::clone(engine.egress()),
        engine.vault().clone(),
    );
    let api = weft::api::Api::new(Arc::clone(&engine), Arc::new(deployments), hub);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = tokio.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio.spawn(async move {
        super::super::listen::serve_plain(listener, api.router()).await;
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
    let baseline = no_subscriber(&scratch, runs, per_run)?;
    let baseline_rate = total as f64 / baseline.as_secs_f64();
    out!(
        "  no subscriber        {:>8.0} messages/s committed ({} in {})",
        baseline_rate,
        total,
        super::show(baseline)
    );

    // One SSE consumer, acking everything.
    let host = scratch_host(&scratch, "sse")?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let delivered = one_subscriber(&host, &agent, runs, per_run)?;
    report_delivered(delivered, total, baseline_rate)?;
    drop(host);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(ExitCode::SUCCESS)
}

/// A fresh host in the folder `name` of `scratch`.
fn scratch_host(scratch: &Path, name: &str) -> anyhow::Result<Host> {
    let dir = scratch.join(name);
    std::fs::create_dir_all(&dir).context("cannot make a scratch directory")?;
    host(&dir)
}

/// The baseline: how long the runs take to commit every message with no
/// subscriber.
fn no_subscriber(scratch: &Path, runs: usize, per_run: usize) -> anyhow::Result<Duration> {
    let base = scratch_host(scratch, "baseline")?;
    let started = Instant::now();
    emit_all(&base.engine, runs, per_run)?;
    let baseline = started.elapsed();
    drop(base);
    Ok(baseline)
}

/// What the runs with one SSE subscriber measured.
struct Delivered {
    /// From the first run's start to the last ack landing.
    elapsed: Duration,
    /// From the first run's start to every run's end.
    committed: Duration,
    /// Microseconds from each message's commit to the consumer reading it,
    /// first attempts only.
    latencies: Vec<u64>,
}

/// Runs the bench with one consumer reading the channel's SSE stream and
/// acking every delivery, and waits until every ack has landed.
fn one_subscriber(
    host: &Host,
    agent: &ureq::Agent,
    runs: usize,
    per_run: usize,
) -> anyhow::Result<Delivered> {
    let response = subscribe(agent, &host.url)?;
    let (acks, ack_queue) = std::sync::mpsc::sync_channel::<String>(100_000);
    let ack_queue = Arc::new(Mutex::new(ack_queue));
    let ackers: Vec<_> = (0..ACKERS)
        .map(|_| {
            let queue = Arc::clone(&ack_queue);
            let agent = agent.clone();
            let url = host.url.clone();
            std::thread::spawn(move || ack_until_closed(&queue, &agent, &url))
        })
        .collect();
    let reader = spawn_reader(response, runs * per_run, acks);
    let started = Instant::now();
    emit_all(&host.engine, runs, per_run)?;
    let committed = started.elapsed();
    let (latencies, _read_all) = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the reading thread panicked"))??;
    for acker in ackers {
        let _ = acker.join();
    }
    wait_for_acks(agent, &host.url)?;
    Ok(Delivered {
        elapsed: started.elapsed(),
        committed,
        latencies,
    })
}

/// Subscribes `bench` to the channel `bench`, and opens the subscription's
/// SSE stream.
fn subscribe(agent: &ureq::Agent, url: &str) -> anyhow::Result<Response<ureq::Body>> {
    let made = agent
        .post(format!("{url}/v1/subscriptions"))
        .send_json(json!({ "channel": "bench", "name": "bench" }))?;
    anyhow::ensure!(
        made.status().is_success(),
        "cannot subscribe: {}",
        made.status()
    );
    let response = agent
        .get(format!("{url}/v1/channels/bench/events?consumer=bench"))
        .call()?;
    Ok(response)
}

/// Acks what is waiting in `queue`, everything up to 500 in one batch
/// request, until the queue's sender is gone.
fn ack_until_closed(queue: &Mutex<Receiver<String>>, agent: &ureq::Agent, url: &str) {
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
}

/// Reads the SSE stream on a thread of its own until `total` first
/// deliveries have come, noting each one's latency from its commit and
/// sending its id to be acked. The thread answers the latencies and when
/// it read the last.
fn spawn_reader(
    response: Response<ureq::Body>,
    total: usize,
    acks: SyncSender<String>,
) -> JoinHandle<anyhow::Result<(Vec<u64>, Instant)>> {
    std::thread::spawn(move || -> anyhow::Result<(Vec<u64>, Instant)> {
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
    })
}

/// Waits until no delivery of the subscription is left unacked: every ack
/// has landed. An error after a minute.
fn wait_for_acks(agent: &ureq::Agent, url: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut answer = agent
            .get(format!(
                "{url}/v1/deliveries?subscription=bench/bench&limit=1"
            ))
            .call()?;
        let body: Value = answer.body_mut().read_json()?;
        if body["deliveries"].as_array().is_some_and(Vec::is_empty) {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "acks did not all land");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Prints the rate delivered and acked, each message's latency from commit
/// to subscriber, and the rate against the baseline's.
fn report_delivered(delivered: Delivered, total: usize, baseline_rate: f64) -> anyhow::Result<()> {
    let Delivered {
        elapsed,
        committed,
        mut latencies,
    } = delivered;
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
    Ok(())
}
