//! `weft bench --noisy`: one tenant's ordinary load, alone and then beside
//! a hostile tenant, on a real `weft serve` (a child process of this one)
//! over loopback.
//!
//! Tenant A (its starts not capped) starts 10,000 runs of three `echo`
//! steps, 32 at a time, over kept-alive connections, and learns of their
//! ends from `GET /v1/events`. The figures are its throughput (runs ended
//! per second, from the first start to the last end) and its p99 run
//! latency (each run's end less its start, from the run records). The
//! baseline is A alone, measured first in the same invocation. Then A's
//! load again while tenant B, with a new tenant's default quota, from its
//! own uploaded plugin (`hostile`, a test guest) and its own token, does
//! all at once: steps that sleep in the host past a 10-minute timeout,
//! steps that compute without end until that timeout, steps that try to
//! make the host buffer gigabytes of key-value writes, messages and
//! output, starts at five times its quota, and at five times its quota on
//! deployments: alias-bomb and 300000000000-year deployments, 1 MiB
//! snapshot publishes and subscriptions; and 1,000 connections that send
//! half a header and hold it, opened again as the server closes them. B
//! opens a new connection for each request. Printed: A's figures beside the baseline, the
//! server's peak RSS (`VmHWM`), B's answers by status and code, panics
//! (`weft_panics_total`) and A's runs that never ended, each beside its
//! goal.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Child, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::{build_kind, percentile, show};

/// A's runs in each phase.
const RUNS: usize = 10_000;
/// A's runs in flight at once.
const IN_FLIGHT: usize = 32;
/// How long A's runs get to end before the ones left count as stuck.
const STUCK_AFTER: Duration = Duration::from_secs(120);
/// Half-sent connections B holds.
const SLOW_CLIENTS: usize = 1_000;
/// B's floods send this many times what its quotas take: a flood, and one
/// whose cost to the machine the bench runs on (the attacker's own, which
/// would be elsewhere) does not depend on how fast that machine is.
const FLOOD: u32 = 5;

/// The guest B uploads, as the tests' guest build leaves it.
pub const HOSTILE: &str = "target/guests/wasm32-wasip2/guest/hostile.wasm";

pub fn noisy(plugins: &Path, hostile: &Path, memory_budget: u64) -> anyhow::Result<ExitCode> {
    let hostile = std::fs::read(hostile).with_context(|| {
        format!(
            "cannot read tenant B's plugin {}; build it with `CARGO_TARGET_DIR=target/guests \
             cargo build --profile guest --target wasm32-wasip2 -p weft-guest-hostile`",
            hostile.display()
        )
    })?;
    let scratch = super::tempfile_dir()?.join("noisy");
    std::fs::create_dir_all(scratch.join("plugins"))?;
    std::fs::copy(plugins.join("echo.wasm"), scratch.join("plugins/echo.wasm"))
        .with_context(|| format!("no echo.wasm in {}", plugins.display()))?;
    let result = (|| {
        let server = Server::start(&scratch)?;
        let figures = measure(&server, &hostile);
        let peak = server.peak_rss();
        let panics = server.panics();
        drop(server);
        report(figures?, peak, panics, memory_budget)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// A `weft serve` child, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(scratch: &Path) -> anyhow::Result<Self> {
        let data = scratch.join("data");
        std::fs::create_dir_all(scratch.join("workflows"))?;
        let exe = std::env::current_exe().context("cannot find the weft binary")?;
        let child = std::process::Command::new(exe)
            .arg("--data-dir")
            .arg(&data)
            .args(["serve", "--listen", "127.0.0.1:0", "--plugins"])
            .arg(scratch.join("plugins"))
            .arg("--workflows")
            .arg(scratch.join("workflows"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start weft serve")?;
        let mut server = Self {
            child,
            url: String::new(),
        };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            if let Ok(text) = std::fs::read_to_string(data.join("serve.addr")) {
                server.url = text.trim().to_owned();
                return Ok(server);
            }
            if let Some(status) = server.child.try_wait()? {
                bail!("weft serve ended at its start: {status}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("weft serve did not listen within 60 s")
    }

    /// The server's peak resident memory, in bytes.
    fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()));
        status
            .ok()
            .and_then(|text| {
                let line = text.lines().find(|l| l.starts_with("VmHWM:"))?.to_owned();
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map_or(0, |kib| kib * 1024)
    }

    /// Panics the server contained, from its metrics.
    fn panics(&self) -> u64 {
        let Ok(mut answer) = agent().get(format!("{}/metrics", self.url)).call() else {
            return u64::MAX;
        };
        let text = answer.body_mut().read_to_string().unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with("weft_panics_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// A call as `token` (none when empty): the status and the JSON answer
/// (`Null` if none).
fn call(url: &str, token: &str, method: &str, path: &str, body: Option<Body<'_>>) -> (u16, Value) {
    let agent = agent();
    let url = format!("{url}{path}");
    let bearer = format!("Bearer {token}");
    let sent = match (method, body) {
        ("POST", Some(Body::Json(body))) => {
            with_token(agent.post(&url), token, &bearer).send_json(body)
        }
        ("POST", Some(Body::Bytes(kind, bytes))) => with_token(agent.post(&url), token, &bearer)
            .header("content-type", kind)
            .send(bytes),
        ("POST", None) => with_token(agent.post(&url), token, &bearer).send_empty(),
        _ => with_token(agent.get(&url), token, &bearer).call(),
    };
    match sent {
        Ok(mut answer) => {
            let status = answer.status().as_u16();
            (status, answer.body_mut().read_json().unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

fn with_token<B>(
    request: ureq::RequestBuilder<B>,
    token: &str,
    bearer: &str,
) -> ureq::RequestBuilder<B> {
    if token.is_empty() {
        request
    } else {
        request.header("authorization", bearer)
    }
}

enum Body<'a> {
    Json(Value),
    Bytes(&'a str, &'a [u8]),
}

/// What the two phases measured.
struct Figures {
    alone: Phase,
    noisy: Phase,
    refusals: BTreeMap<String, u64>,
}

/// A's load in one phase.
struct Phase {
    per_second: f64,
    p99: Duration,
    stuck: usize,
}

fn measure(server: &Server, hostile: &[u8]) -> anyhow::Result<Figures> {
    let url = server.url.as_str();
    // Token-less, the caller is an admin: the tenants and their tokens
    // first (after which every request needs a token).
    for name in ["a", "b"] {
        let (status, body) = call(
            url,
            "",
            "POST",
            "/v1/tenants",
            Some(Body::Json(json!({ "name": name }))),
        );
        anyhow::ensure!(status == 201, "cannot add tenant {name}: {body}");
    }
    // The first token ends the token-less mode: the admin's, which makes
    // the others.
    let token = |tenant: &str, role: &str, by: &str| -> anyhow::Result<String> {
        let body = json!({ "tenant": tenant, "role": role });
        let (status, answer) = call(url, by, "POST", "/v1/tokens", Some(Body::Json(body)));
        anyhow::ensure!(status == 201, "cannot make {tenant}'s token: {answer}");
        Ok(answer["token"]["token"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    };
    let admin = token("default", "admin", "")?;
    // A's ordinary load is not held back by its own quota: its starts are
    // not capped; B keeps the default quota a tenant is added with.
    let (status, body) = call(
        url,
        &admin,
        "POST",
        "/v1/tenants/a/quota",
        Some(Body::Json(json!({ "max_resident": 2000 }))),
    );
    anyhow::ensure!(status == 200, "cannot set A's quota: {body}");
    let (a, b) = (token("a", "owner", &admin)?, token("b", "owner", &admin)?);
    let deploy = |token: &str, text: &str| {
        call(
            url,
            token,
            "POST",
            "/v1/workflows",
            Some(Body::Bytes("application/yaml", text.as_bytes())),
        )
    };
    let (status, body) = deploy(
        &a,
        "id: work\nsteps:\n  - { id: one, uses: echo, with: { n: 1 } }\n  - { id: two, uses: echo, with: { n: 2 } }\n  - { id: three, uses: echo, with: { n: 3 } }\n",
    );
    anyhow::ensure!(
        status == 200 || status == 201,
        "cannot deploy A's workflow: {body}"
    );

    let alone = load(url, &a, "alone")?;

    // B's plugin and workflows.
    let (status, body) = call(
        url,
        &b,
        "POST",
        "/v1/plugins",
        Some(Body::Bytes("application/wasm", hostile)),
    );
    anyhow::ensure!(
        status == 201 || status == 200,
        "cannot upload B's plugin: {body}"
    );
    let attacks = [
        ("sleep", r#"{op: sleep, seconds: 3600}"#),
        ("kv", r#"{op: kv, count: 9216, kib: 1024}"#),
        ("emit", r#"{op: emit, count: 10000, values: 100000}"#),
        ("output", r#"{op: output, values: 1400000}"#),
        ("spin", r#"{op: spin}"#),
    ];
    for (name, with) in attacks {
        let text = format!(
            "id: b-{name}\nsteps:\n  - {{ id: s, uses: hostile, timeout: 10m, with: {with} }}\n"
        );
        let (status, body) = deploy(&b, &text);
        anyhow::ensure!(
            status == 200 || status == 201,
            "cannot deploy B's `{name}`: {body}"
        );
    }

    let stop = Arc::new(AtomicBool::new(false));
    let refusals: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let mut threads = Vec::new();
    let count = {
        let refusals = Arc::clone(&refusals);
        move |status: u16, body: &Value| {
            if status >= 400 || status == 0 {
                let code = body["error"]["code"].as_str().unwrap_or("(no code)");
                *refusals
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entry(format!("{status} {code}"))
                    .or_insert(0) += 1;
            }
        }
    };
    // Starts of every attack, five times as many as B's quota takes.
    // B keeps a new tenant's default quota.
    let quota = weft::store::Quota::tenant_default();
    let per_attack = FLOOD * quota.starts_per_second.unwrap_or(200) / attacks.len() as u32;
    let deploys = FLOOD * quota.deploys_per_second.unwrap_or(10);
    for (name, _) in attacks {
        let (stop, count, b, url) = (Arc::clone(&stop), count.clone(), b.clone(), url.to_owned());
        threads.push(std::thread::spawn(move || {
            let mut pace = Pace::new(per_attack);
            while !stop.load(Ordering::Relaxed) {
                pace.wait();
                let body = json!({ "workflow": format!("b-{name}") });
                let (status, answer) = call(&url, &b, "POST", "/v1/runs", Some(Body::Json(body)));
                count(status, &answer);
            }
        }));
    }
    // Bombs and ages at deploy, snapshot publishes and subscriptions,
    // five times as many as B's quota on deployments takes.
    {
        let (stop, count, b, url) = (Arc::clone(&stop), count.clone(), b.clone(), url.to_owned());
        threads.push(std::thread::spawn(move || {
            let bomb = bomb();
            let ages = "id: ages\nsteps:\n  - { id: s, uses: echo, timeout: 300000000000y }\n";
            let snapshot = snapshot();
            let mut pace = Pace::new(deploys);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for text in [bomb.as_str(), ages] {
                    pace.wait();
                    let (status, answer) = call(
                        &url,
                        &b,
                        "POST",
                        "/v1/workflows",
                        Some(Body::Bytes("application/yaml", text.as_bytes())),
                    );
                    count(status, &answer);
                }
                n += 1;
                pace.wait();
                let (status, answer) = call(
                    &url,
                    &b,
                    "POST",
                    &format!("/v1/snapshots/flood{}?keep=1000", n % 100),
                    Some(Body::Bytes("application/json", snapshot.as_bytes())),
                );
                count(status, &answer);
                pace.wait();
                let body = json!({ "channel": "flood", "name": format!("s{n}") });
                let (status, answer) = call(
                    &url,
                    &b,
                    "POST",
                    "/v1/subscriptions",
                    Some(Body::Json(body)),
                );
                count(status, &answer);
            }
        }));
    }
    // Half-sent headers, held, and opened again when closed.
    {
        let (stop, address) = (
            Arc::clone(&stop),
            url.trim_start_matches("http://").to_owned(),
        );
        threads.push(std::thread::spawn(move || {
            let mut held: Vec<std::net::TcpStream> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                held.retain(|stream| {
                    let mut byte = [0u8; 1];
                    let _ = stream.set_nonblocking(true);
                    !matches!(std::io::Read::read(&mut &*stream, &mut byte), Ok(0))
                });
                while held.len() < SLOW_CLIENTS {
                    let Ok(mut stream) = std::net::TcpStream::connect(&address) else {
                        break;
                    };
                    let _ = stream.write_all(b"GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n");
                    held.push(stream);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }));
    }
    // Let B's attacks take hold, then A's load beside them.
    std::thread::sleep(Duration::from_secs(2));
    let noisy = load(url, &a, "beside B");
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    let refusals = std::mem::take(
        &mut *refusals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    Ok(Figures {
        alone,
        noisy: noisy?,
        refusals,
    })
}

/// A snapshot of 1 MiB: 1,024 entries of 1 KiB.
fn snapshot() -> String {
    let entries: serde_json::Map<String, Value> = (0..1024)
        .map(|i| (format!("k{i}"), Value::String("x".repeat(1024))))
        .collect();
    Value::Object(entries).to_string()
}

/// The runs whose end A's client has seen on its events stream.
#[derive(Default)]
struct Ends {
    ended: Mutex<std::collections::HashSet<String>>,
    changed: std::sync::Condvar,
}

impl Ends {
    /// Follows `GET /v1/events` for A's runs' ends on a thread of its own,
    /// which ends with the stream once `stop` is set and the next event
    /// (or keep-alive) comes. Returns once the stream is open.
    fn follow(
        self: &Arc<Self>,
        url: &str,
        token: &str,
        stop: &Arc<AtomicBool>,
    ) -> anyhow::Result<std::thread::JoinHandle<()>> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let answer = agent
            .get(format!("{url}/v1/events?workflow=work&kind=ended"))
            .header("authorization", format!("Bearer {token}"))
            .call()
            .context("cannot follow A's events")?;
        anyhow::ensure!(
            answer.status() == 200,
            "cannot follow A's events: {}",
            answer.status()
        );
        let (ends, stop) = (Arc::clone(self), Arc::clone(stop));
        Ok(std::thread::spawn(move || {
            use std::io::BufRead as _;
            let lines = std::io::BufReader::new(answer.into_body().into_reader()).lines();
            for line in lines {
                let Ok(line) = line else { break };
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let Some(data) = line.strip_prefix("data:") else {
                    continue;
                };
                let event: Value = serde_json::from_str(data.trim()).unwrap_or(Value::Null);
                if let Some(run) = event["run"].as_str() {
                    ends.ended
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(run.to_owned());
                    ends.changed.notify_all();
                }
            }
        }))
    }

    /// Waits until run `id` has ended, or [`STUCK_AFTER`] has passed. A
    /// run whose end the stream has not shown is read back once a second
    /// (the stream drops what it falls behind on).
    fn wait(&self, agent: &ureq::Agent, url: &str, bearer: &str, id: &str) {
        let begun = Instant::now();
        let mut check = begun + Duration::from_secs(1);
        loop {
            let mut ended = self
                .ended
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            loop {
                if ended.remove(id) {
                    return;
                }
                let now = Instant::now();
                if now >= check || begun.elapsed() >= STUCK_AFTER {
                    break;
                }
                ended = self
                    .changed
                    .wait_timeout(ended, check - now)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
            drop(ended);
            if begun.elapsed() >= STUCK_AFTER {
                return;
            }
            let read = agent
                .get(format!("{url}/v1/runs/{id}?steps=false"))
                .header("authorization", bearer)
                .call();
            let state = read
                .ok()
                .and_then(|mut answer| answer.body_mut().read_json::<Value>().ok())
                .and_then(|run| run["run"]["state"].as_str().map(str::to_owned));
            if state.is_some_and(|s| s != "running") {
                return;
            }
            check = Instant::now() + Duration::from_secs(1);
        }
    }
}

/// Paces a loop at a rate: [`wait`](Self::wait) sleeps until the next
/// send is due, and a loop that falls behind goes on at once, without a
/// burst to catch up.
struct Pace {
    every: Duration,
    next: Instant,
}

impl Pace {
    fn new(per_second: u32) -> Self {
        Self {
            every: Duration::from_secs(1) / per_second.max(1),
            next: Instant::now(),
        }
    }

    fn wait(&mut self) {
        let now = Instant::now();
        match self.next.checked_duration_since(now) {
            Some(wait) => std::thread::sleep(wait),
            None => self.next = now,
        }
        self.next += self.every;
    }
}

/// An alias bomb in 8 KB: 80 million values.
fn bomb() -> String {
    let a = vec!["0"; 2000].join(", ");
    let b = vec!["*a"; 200].join(", ");
    let c = vec!["*b"; 200].join(", ");
    format!(
        "id: bomb\ninputs:\n  a: &a [{a}]\n  b: &b [{b}]\n  c: [{c}]\nsteps:\n  - {{ id: s, uses: echo }}\n"
    )
}

/// A's [`RUNS`] runs, [`IN_FLIGHT`] at a time: its throughput, its p99 run
/// latency from the records, and how many had not ended by
/// [`STUCK_AFTER`]. A's client is the kind the docs suggest: it starts
/// runs over kept-alive connections and learns of their ends from
/// `GET /v1/events`, reading a run back only when the stream may have
/// missed its end.
fn load(url: &str, token: &str, label: &str) -> anyhow::Result<Phase> {
    let ends = Arc::new(Ends::default());
    let stop = Arc::new(AtomicBool::new(false));
    let reader = ends.follow(url, token, &stop)?;
    let started = Instant::now();
    let ids: Arc<Mutex<Vec<String>>> = Arc::default();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let threads: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let (ids, next, ends, url, token, label) = (
                Arc::clone(&ids),
                Arc::clone(&next),
                Arc::clone(&ends),
                url.to_owned(),
                token.to_owned(),
                label.to_owned(),
            );
            std::thread::spawn(move || {
                let agent = agent();
                let bearer = format!("Bearer {token}");
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= RUNS {
                        break;
                    }
                    // Started, then waited for: IN_FLIGHT runs in flight.
                    let trying = Instant::now();
                    let (status, answer) = loop {
                        // A start tried again is the same run.
                        let body = json!({
                            "workflow": "work",
                            "input": {},
                            "idempotency_key": format!("{label}-{n}"),
                        });
                        let sent = agent
                            .post(format!("{url}/v1/runs"))
                            .header("authorization", &bearer)
                            .send_json(body);
                        let (status, answer) = match sent {
                            Ok(mut answer) => (
                                answer.status().as_u16(),
                                answer.body_mut().read_json().unwrap_or(Value::Null),
                            ),
                            Err(_) => (0, Value::Null),
                        };
                        // Refused for its rate, or not taken at all: again,
                        // for as long as a run may take.
                        if (status != 429 && status != 0) || trying.elapsed() >= STUCK_AFTER {
                            break (status, answer);
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    };
                    let started = status == 201 || status == 200;
                    let Some(id) = answer["id"].as_str().filter(|_| started) else {
                        continue;
                    };
                    ends.wait(&agent, &url, &bearer, id);
                    ids.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(id.to_owned());
                }
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    drop(reader);
    let ids = std::mem::take(
        &mut *ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let mut latencies = Vec::with_capacity(ids.len());
    let mut stuck = RUNS.saturating_sub(ids.len());
    for id in &ids {
        let (_, run) = call(url, token, "GET", &format!("/v1/runs/{id}"), None);
        let run = &run["run"];
        match (
            run["state"].as_str(),
            run["created_at"].as_u64(),
            run["updated_at"].as_u64(),
        ) {
            (Some("succeeded"), Some(from), Some(to)) => {
                latencies.push(Duration::from_millis(to.saturating_sub(from)));
            }
            _ => stuck += 1,
        }
    }
    let per_second = latencies.len() as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
    let p99 = percentile(&mut latencies, 99.0);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "A {label}: {} of {RUNS} runs succeeded in {}, {per_second:.0} runs/s, p99 {}",
        latencies.len(),
        show(elapsed),
        show(p99)
    )?;
    Ok(Phase {
        per_second,
        p99,
        stuck,
    })
}

fn report(figures: Figures, peak: u64, panics: u64, budget: u64) -> anyhow::Result<ExitCode> {
    let Figures {
        alone,
        noisy,
        refusals,
    } = figures;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "weft bench --noisy ({} build): tenant A alone, then beside hostile tenant B",
        build_kind()
    )?;
    writeln!(out, "B's answers, by status and code:")?;
    for (code, n) in &refusals {
        writeln!(out, "  {code}: {n}")?;
    }
    let kept = noisy.per_second / alone.per_second.max(f64::MIN_POSITIVE);
    let slower = noisy.p99.as_secs_f64() / alone.p99.as_secs_f64().max(1e-3);
    let met = |ok: bool| if ok { "met" } else { "MISSED" };
    writeln!(out, "| goal | measured | |")?;
    writeln!(out, "|---|---|---|")?;
    writeln!(
        out,
        "| A's throughput beside B >= 80% of alone | {:.0} of {:.0} runs/s, {:.0}% | {} |",
        noisy.per_second,
        alone.per_second,
        kept * 100.0,
        met(kept >= 0.8)
    )?;
    writeln!(
        out,
        "| A's p99 beside B <= 2x alone | {} against {}, {slower:.2}x | {} |",
        show(noisy.p99),
        show(alone.p99),
        met(slower <= 2.0)
    )?;
    writeln!(
        out,
        "| the server's peak RSS <= {} MiB | {} MiB | {} |",
        budget >> 20,
        peak >> 20,
        met(peak > 0 && peak <= budget)
    )?;
    writeln!(out, "| panics = 0 | {panics} | {} |", met(panics == 0))?;
    let stuck = alone.stuck + noisy.stuck;
    writeln!(
        out,
        "| A's runs stuck = 0 | {stuck} | {} |",
        met(stuck == 0)
    )?;
    Ok(ExitCode::SUCCESS)
}
