//! Three `weft serve` hosts on one PostgreSQL database (a schema of its
//! own in the server `WEFT_TEST_POSTGRES` names), under load, one frozen
//! past its lease with SIGSTOP and continued, and one killed with SIGKILL
//! and restarted, three times each, a different host each time. Every run must end once, succeeded, with one success per step
//! and dense record numbers; the shared counter must be bumped exactly
//! twice per run; each run must have emitted one message, and every
//! message must reach the webhook, under the delivery id the store gave
//! it, with its delivery acked.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::Scratch;
use crate::common::receiver::Receiver;
use crate::common::server::agent;

const WORKFLOW: &str = r#"
id: load
steps:
  - { id: first, uses: counter, with: { key: total, by: 1 } }
  - { id: busy, uses: spin, with: { ms: 10 } }
  - { id: tell, emit: done, with: "${{ inputs.n }}" }
  - { id: nap, sleep: 300ms }
  - { id: last, uses: counter, with: { key: total, by: 1 } }
outputs: "${{ steps.last.output.value }}"
"#;

/// A fresh store in the test server: the URL that reaches it.
pub(crate) fn database(name: &str) -> String {
    let url = std::env::var("WEFT_TEST_POSTGRES").expect(
        "WEFT_TEST_POSTGRES names no PostgreSQL server: run scripts/test, or start one with scripts/postgres-dev",
    );
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let schema = format!("{name}_{}_{nanos}", std::process::id());
    // Makes the schema and its tables.
    drop(weft::PostgresStore::open_in(&url, Some(&schema)).unwrap());
    weft::PostgresStore::url_in(&url, &schema)
}

/// A `weft serve` host, killed when dropped.
struct Node {
    child: Child,
    url: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts host `n` on `store`, with a data directory of its own.
fn start(scratch: &Scratch, store: &str, n: usize, life: usize) -> Node {
    start_with(scratch, store, n, life, &[])
}

/// [`start`], with more arguments for `weft serve`.
fn start_with(scratch: &Scratch, store: &str, n: usize, life: usize, more: &[&str]) -> Node {
    let dir: PathBuf = scratch.path().join(format!("host-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    let addr = dir.join("serve.addr");
    let _ = std::fs::remove_file(&addr);
    let log = scratch.path().join(format!("host-{n}-{life}.log"));
    let child = scratch
        .weft()
        .args(["serve", "--listen", "127.0.0.1:0", "--lease-ttl", "1s"])
        .arg("--data-dir")
        .arg(&dir)
        .args(["--store", store])
        .args(more)
        .arg("--workflows")
        .arg(scratch.path().join("workflows"))
        .env("WEFT_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let url = loop {
        if let Ok(text) = std::fs::read_to_string(&addr)
            && text.ends_with('\n')
        {
            break text.trim().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "host {n} did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    Node { child, url }
}

/// A GET of `path` on `url`, or a POST of `body`: its status and JSON.
fn call(url: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let agent = agent();
    let mut answer = match body {
        Some(body) => agent.post(format!("{url}{path}")).send_json(body),
        None => agent.get(format!("{url}{path}")).call(),
    }
    .unwrap_or_else(|e| panic!("{url}{path}: {e}"));
    let status = answer.status().as_u16();
    let body = answer.body_mut().read_json().unwrap_or(Value::Null);
    (status, body)
}

/// Waits for run `id` to end, asking `url`: `{run, steps}`.
fn ended(url: &str, id: &str, deadline: Instant) -> Value {
    loop {
        let (status, shown) = call(url, &format!("/v1/runs/{id}"), None);
        assert_eq!(status, 200, "run {id} was lost: {shown}");
        if shown["run"]["state"] != "running" {
            return shown;
        }
        assert!(Instant::now() < deadline, "run {id} never ended: {shown}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Checks that run `id` (`{run, steps}`) has one success per step of
/// `load`, and adds the counter values its two bumps saw to `counted`:
/// its step records.
fn check_steps<'a>(id: &str, shown: &'a Value, counted: &mut Vec<u64>) -> &'a Vec<Value> {
    let steps = shown["steps"].as_array().unwrap();
    let mut done: Vec<&str> = steps
        .iter()
        .filter(|s| s["error"].is_null())
        .map(|s| s["step_id"].as_str().unwrap())
        .collect();
    done.sort_unstable();
    // The sleep leaves two records: its start and its timer's fire.
    assert_eq!(
        done,
        ["busy", "first", "last", "nap", "nap", "tell"],
        "run {id}: {steps:?}"
    );
    for step in steps
        .iter()
        .filter(|s| s["step_id"] == "first" || s["step_id"] == "last")
    {
        counted.push(step["output"]["value"].as_u64().unwrap());
    }
    steps
}

/// Waits for run `id` (started with input `n`) of `load` to end, asking
/// `url`, and checks it: succeeded, one success per step (the counter
/// values its bumps saw go to `counted`), records dense, one message, with
/// `n` as payload. Returns the message.
fn check_run(url: &str, id: &str, n: u64, deadline: Instant, counted: &mut Vec<u64>) -> Value {
    let shown = ended(url, id, deadline);
    assert_eq!(
        shown["run"]["state"], "succeeded",
        "run {id} (n = {n}): {shown}"
    );
    let steps = check_steps(id, &shown, counted);
    let seqs: Vec<u64> = steps.iter().map(|s| s["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (0..steps.len() as u64).collect::<Vec<_>>(),
        "run {id}: record numbers"
    );
    let (status, messages) = call(url, &format!("/v1/runs/{id}/messages"), None);
    assert_eq!(status, 200, "{messages}");
    let messages = messages["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        1,
        "run {id}: one message per emit: {messages:?}"
    );
    assert_eq!(messages[0]["payload"], json!(n), "run {id}");
    messages[0].clone()
}

/// Stops host `node`'s process (`SIGSTOP`) for `pause`, past its lease:
/// its peers judge it gone and take its runs over; continued, it goes on
/// with what it held, a zombie whose writes the store must fence off.
fn freeze(node: &Node, pause: Duration) {
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(node.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name} failed");
    };
    signal("STOP");
    std::thread::sleep(pause);
    signal("CONT");
}

/// Three hosts on one database, under load; in each round one host is
/// frozen past its lease (`SIGSTOP`, then `SIGCONT`) and one is killed
/// (`SIGKILL`) and started again, different hosts in turn. Three rounds;
/// `WEFT_CLUSTER_ROUNDS` asks for more.
#[test]
fn three_hosts_on_postgres_lose_nothing_when_each_in_turn_is_killed() {
    let scratch = Scratch::new(&["counter", "spin"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(scratch.path().join("workflows/load.yaml"), WORKFLOW).unwrap();
    let store = database("cluster");
    let seed = crate::common::test_seed();
    eprintln!("cluster seed: {seed} (WEFT_TEST_SEED={seed} replays its kill times)");
    let mut random = seed;
    let mut next = |below: u64| {
        random = random
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (random >> 33) % below
    };

    let mut lives = [0; 3];
    let mut nodes: Vec<Node> = (0..3).map(|n| start(&scratch, &store, n, 0)).collect();
    let receiver = Receiver::start(|_| 200);
    let spec = json!({
        "channel": "done",
        "name": "hook",
        "webhook": { "url": receiver.url, "secret": "s3cret" },
        "backoff": "20ms",
    });
    let (status, made) = call(&nodes[0].url, "/v1/subscriptions", Some(spec));
    assert_eq!(status, 201, "{made}");

    let rounds: u64 = std::env::var("WEFT_CLUSTER_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let total = 50 * rounds;
    let freezes: Vec<u64> = (0..rounds).map(|r| 50 * r + 10 + next(10)).collect();
    let kills: Vec<u64> = (0..rounds).map(|r| 50 * r + 30 + next(10)).collect();
    let mut acked: HashMap<String, u64> = HashMap::new();
    for n in 0..total {
        if let Some(r) = freezes.iter().position(|at| *at == n) {
            // Host f stops with runs in flight, for two and a half leases,
            // while the others go on taking runs.
            let f = (r + 1) % 3;
            std::thread::sleep(Duration::from_millis(next(50)));
            let others: Vec<String> = (1..3).map(|d| nodes[(f + d) % 3].url.clone()).collect();
            let frozen = std::thread::scope(|scope| {
                let frozen = scope.spawn(|| freeze(&nodes[f], Duration::from_millis(2_500)));
                for m in 0..4u64 {
                    let (status, body) = call(
                        &others[(m % 2) as usize],
                        "/v1/runs",
                        Some(json!({ "workflow": "load", "input": { "n": 500_000 + n * 10 + m } })),
                    );
                    assert_eq!(status, 201, "{body}");
                    acked.insert(
                        body["id"].as_str().unwrap().to_owned(),
                        500_000 + n * 10 + m,
                    );
                }
                frozen.join()
            });
            frozen.unwrap();
        }
        if let Some(r) = kills.iter().position(|at| *at == n) {
            let k = r % 3;
            // Host k dies with runs in flight, then comes back.
            std::thread::sleep(Duration::from_millis(next(50)));
            nodes[k].child.kill().unwrap();
            nodes[k].child.wait().unwrap();
            // The others go on taking runs while it is down.
            for m in 0..4u64 {
                let url = &nodes[(k + 1 + (m % 2) as usize) % 3].url;
                let (status, body) = call(
                    url,
                    "/v1/runs",
                    Some(json!({ "workflow": "load", "input": { "n": 1000 + n * 10 + m } })),
                );
                assert_eq!(status, 201, "{body}");
                acked.insert(body["id"].as_str().unwrap().to_owned(), 1000 + n * 10 + m);
            }
            lives[k] += 1;
            nodes[k] = start(&scratch, &store, k, lives[k]);
        }
        let url = &nodes[(n % 3) as usize].url;
        let (status, body) = call(
            url,
            "/v1/runs",
            Some(json!({ "workflow": "load", "input": { "n": n } })),
        );
        assert_eq!(status, 201, "run {n}: {body}");
        acked.insert(body["id"].as_str().unwrap().to_owned(), n);
    }

    let deadline = Instant::now() + Duration::from_secs(240 + 20 * rounds);
    let mut delivery_ids = HashMap::new();
    let mut counted = Vec::new();
    for (i, (id, n)) in acked.iter().enumerate() {
        // Any host answers for any run.
        let url = &nodes[i % 3].url;
        let message = check_run(url, id, *n, deadline, &mut counted);
        let deliveries = message["deliveries"].as_array().unwrap();
        assert_eq!(deliveries.len(), 1, "run {id}: {deliveries:?}");
        delivery_ids.insert(deliveries[0].as_str().unwrap().to_owned(), *n);
    }

    // The shared counter: bumped twice per run, exactly, so the values
    // the bumps saw are 1 to 2N, each once.
    counted.sort_unstable();
    let expected: Vec<u64> = (1..=2 * acked.len() as u64).collect();
    assert_eq!(counted, expected, "the shared counter's bumps");

    // Every message reached the webhook under its delivery's id (a resend
    // after a kill keeps the id), and every delivery is acked.
    let got = loop {
        let got = receiver.got();
        let ids: HashSet<String> = got
            .iter()
            .map(|r| r.header("weft-delivery").to_owned())
            .collect();
        if delivery_ids.keys().all(|id| ids.contains(id)) {
            break got;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} deliveries arrived",
            ids.len(),
            delivery_ids.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // In order: the queue's holder sends its head until it is acked, so
    // each message arrives first in order, and a request may repeat the
    // newest message sent (the host that sent it died, or lost the queue,
    // before it recorded the answer). An older one may come again only as
    // a repeat of one that arrived before: a host stopped past its lease in
    // the middle of its POST sends the head it held once it runs again,
    // after the peer that took the queue delivered that head and more
    // (nothing can fence a request already on its way; the receiver keeps
    // the highest `seq`, or dedupes by `weft-delivery`). 100 rounds of
    // this test met it once.
    let mut newest = 0;
    let mut arrived = HashSet::new();
    let mut late = 0;
    for request in &got {
        let id = request.header("weft-delivery");
        let n = delivery_ids
            .get(id)
            .unwrap_or_else(|| panic!("a delivery no run made: {id}"));
        let body = request.json();
        assert_eq!(body["payload"], json!(n), "delivery {id}");
        let seq = body["seq"].as_u64().unwrap();
        if seq < newest {
            assert!(
                arrived.contains(id),
                "message {seq} first arrived after message {newest}: out of order"
            );
            late += 1;
            continue;
        }
        arrived.insert(id.to_owned());
        newest = seq;
    }
    if late > 0 {
        eprintln!("{late} late repeats of messages delivered before");
    }
    for id in delivery_ids.keys() {
        let acked = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = call(&nodes[2].url, &format!("/v1/deliveries/{id}"), None);
            assert_eq!(status, 200, "{body}");
            let state = body["delivery"]["state"].as_str().unwrap_or("").to_owned();
            if state == "acked" || state == "completed" {
                break;
            }
            assert!(Instant::now() < acked, "delivery {id} is {state}: {body}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // The kills landed with runs in flight: other hosts took runs over.
    let mut taken = 0;
    for entry in std::fs::read_dir(scratch.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "log") {
            let log = std::fs::read_to_string(&path).unwrap();
            taken += log.matches("host gone; its runs are taken over").count();
        }
    }
    eprintln!(
        "{} runs, {} webhook requests for {} deliveries, {taken} hosts seen gone",
        acked.len(),
        got.len(),
        delivery_ids.len()
    );
    assert!(
        taken >= 3,
        "no host took over a killed or frozen host's runs"
    );
}

/// A PostgreSQL cluster of one test's own (`scripts/postgres-dev`), to
/// stop and start again; removed when dropped.
struct OwnCluster {
    dir: PathBuf,
    url: String,
}

impl OwnCluster {
    fn start(dir: PathBuf) -> Self {
        let out = Self::script(&["start"], &dir);
        let url = String::from_utf8(out).unwrap().trim().to_owned();
        Self { dir, url }
    }

    fn script(args: &[&str], dir: &std::path::Path) -> Vec<u8> {
        let out = std::process::Command::new(crate::common::root().join("scripts/postgres-dev"))
            .args(args)
            .arg(dir)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "scripts/postgres-dev {args:?} failed");
        out.stdout
    }

    fn down(&self) {
        Self::script(&["down"], &self.dir);
    }

    fn up(&self) {
        Self::script(&["up"], &self.dir);
    }

    /// Runs `statement` on the cluster as its superuser.
    fn sql(&self, statement: &str) {
        let out = std::process::Command::new(crate::common::root().join("scripts/postgres-dev"))
            .arg("sql")
            .arg(&self.dir)
            .arg(statement)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/postgres-dev sql {statement:?} failed"
        );
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new(crate::common::root().join("scripts/postgres-dev"))
            .arg("stop")
            .arg(&self.dir)
            .output();
    }
}

#[test]
fn runs_wait_while_the_database_is_away_and_go_on_when_it_returns() {
    let scratch = Scratch::new(&["counter", "spin"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(scratch.path().join("workflows/load.yaml"), WORKFLOW).unwrap();
    let cluster = OwnCluster::start(scratch.path().join("postgres"));
    let node = start(&scratch, &cluster.url, 0, 0);
    let mut acked = Vec::new();
    for n in 0..30 {
        let (status, body) = call(
            &node.url,
            "/v1/runs",
            Some(json!({ "workflow": "load", "input": { "n": n } })),
        );
        assert_eq!(status, 201, "run {n}: {body}");
        acked.push(body["id"].as_str().unwrap().to_owned());
    }
    // The runs are in flight (asleep, or between steps) when the database
    // goes away for three seconds.
    cluster.down();
    std::thread::sleep(Duration::from_secs(3));
    cluster.up();

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut counted = Vec::new();
    for id in &acked {
        let shown = ended(&node.url, id, deadline);
        assert_eq!(shown["run"]["state"], "succeeded", "run {id}: {shown}");
        check_steps(id, &shown, &mut counted);
    }
    counted.sort_unstable();
    let expected: Vec<u64> = (1..=2 * acked.len() as u64).collect();
    assert_eq!(counted, expected, "the shared counter's bumps");
    // The outage hit the host: it saw its store fail, and waited.
    let log = std::fs::read_to_string(scratch.path().join("host-0-0.log")).unwrap();
    assert!(
        [
            "cannot renew",
            "cannot fire a timer",
            "a commit of the run failed"
        ]
        .iter()
        .any(|failure| log.contains(failure)),
        "the host never saw the database go: {log}"
    );
    // And the host goes on taking runs.
    let (status, body) = call(
        &node.url,
        "/v1/runs",
        Some(json!({ "workflow": "load", "input": { "n": 99 } })),
    );
    assert_eq!(status, 201, "{body}");
    let shown = ended(&node.url, body["id"].as_str().unwrap(), deadline);
    assert_eq!(shown["run"]["state"], "succeeded", "{shown}");
}

/// Posts a start of `load` until the answer passes `wanted`, for up to
/// 30 s (a configuration reload reaches the server's sessions in its own
/// time): the last answer.
fn start_until(url: &str, wanted: impl Fn(u16) -> bool) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = call(
            url,
            "/v1/runs",
            Some(json!({ "workflow": "load", "input": { "n": 1 } })),
        );
        if wanted(answer.0) || Instant::now() > deadline {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_database_that_refuses_writes_is_an_episode_the_host_comes_out_of() {
    let scratch = Scratch::new(&["counter", "spin"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(scratch.path().join("workflows/load.yaml"), WORKFLOW).unwrap();
    let cluster = OwnCluster::start(scratch.path().join("postgres"));
    let node = start(&scratch, &cluster.url, 0, 0);
    let (status, body) = start_until(&node.url, |s| s == 201);
    assert_eq!(status, 201, "{body}");
    let before = body["id"].as_str().unwrap().to_owned();

    // The database turns read-only (as a standby, or a server an operator
    // locked, does): writes are refused by name and the host says so.
    cluster.sql("ALTER SYSTEM SET default_transaction_read_only = on");
    cluster.sql("SELECT pg_reload_conf()");
    let (status, body) = start_until(&node.url, |s| s != 201);
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("read-only"),
        "{body}"
    );
    let (status, health) = call(&node.url, "/v1/health", None);
    assert_eq!(
        (status, &health["status"]),
        (503, &json!("degraded")),
        "{health}"
    );

    // Writable again, the host goes on by itself: new runs start, and the
    // run in flight before ends.
    cluster.sql("ALTER SYSTEM RESET default_transaction_read_only");
    cluster.sql("SELECT pg_reload_conf()");
    let (status, body) = start_until(&node.url, |s| s == 201);
    assert_eq!(status, 201, "{body}");
    let after = body["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in [before, after] {
        let shown = ended(&node.url, &id, deadline);
        assert_eq!(shown["run"]["state"], "succeeded", "run {id}: {shown}");
    }
    let (status, health) = call(&node.url, "/v1/health", None);
    assert_eq!(status, 200, "{health}");
    let metrics = agent()
        .get(format!("{}/metrics", node.url))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let failures: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("weft_store_failures_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(failures > 0.0, "{metrics}");
}

#[test]
fn a_store_url_that_cannot_be_used_exits_3_saying_why() {
    let scratch = Scratch::new(&[]);
    for (store, says) in [
        // Nothing listens on port 1.
        (
            "postgres://weft@127.0.0.1:1/weft",
            "cannot open the store in PostgreSQL at 127.0.0.1:1/weft",
        ),
        ("postgres://weft@[bad", "not a PostgreSQL URL"),
        (
            "postgres://weft@127.0.0.1:1/weft?sslmode=verify",
            "sslmode `verify` is not one of disable, prefer, require, verify-ca, verify-full",
        ),
    ] {
        let out = scratch
            .weft()
            .args(["serve", "--listen", "127.0.0.1:0", "--store", store])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{store}: {stderr}");
        assert!(stderr.contains(says), "{store}: {stderr}");
    }
}

const SLOW: &str = r#"
id: slow
steps:
  - { id: work, uses: spin, with: { ms: 300 } }
outputs: "${{ inputs.n }}"
"#;

/// Each host's attempts of `work` in the ended runs `shown`: the
/// `(start, end)` of each, in microseconds, by host id.
fn attempts_by_host(shown: &[Value]) -> HashMap<String, Vec<(u64, u64)>> {
    let mut by_host: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    for shown in shown {
        for step in shown["steps"].as_array().unwrap() {
            let host = step["host"]
                .as_str()
                .expect("a call's record names its host");
            // Whole milliseconds: the start may be up to 1 ms late, so it
            // is taken 1 ms later, and an attempt seated as another ended
            // cannot seem to overlap it.
            let millis = step["started_at"].as_u64().unwrap();
            let end = millis * 1000 + step["duration_us"].as_u64().unwrap();
            let start = (millis + 1) * 1000;
            by_host
                .entry(host.to_owned())
                .or_default()
                .push((start, end));
        }
    }
    by_host
}

/// The most intervals of `spans` that overlap at one instant.
fn most_at_once(spans: &[(u64, u64)]) -> usize {
    let mut edges: Vec<(u64, i32)> = spans
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    // An end and a start at one instant do not overlap.
    edges.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

#[test]
fn runs_started_on_one_host_spread_over_every_host_within_its_places() {
    let scratch = Scratch::new(&["spin"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(scratch.path().join("workflows/slow.yaml"), SLOW).unwrap();
    let store = database("spread");
    let places = ["--max-resident", "2"];
    let mut nodes: Vec<Node> = (0..3)
        .map(|n| start_with(&scratch, &store, n, 0, &places))
        .collect();
    let post = |url: &str, n: u64| {
        let (status, body) = call(
            url,
            "/v1/runs",
            Some(json!({ "workflow": "slow", "input": { "n": n } })),
        );
        assert_eq!(status, 201, "run {n}: {body}");
        body["id"].as_str().unwrap().to_owned()
    };
    let wait_all = |url: &str, ids: &[String]| -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(120);
        ids.iter()
            .enumerate()
            .map(|(n, id)| {
                let shown = ended(url, id, deadline);
                assert_eq!(shown["run"]["state"], "succeeded", "run {id}: {shown}");
                assert_eq!(shown["run"]["outputs"], json!(n), "run {id}: {shown}");
                let steps = shown["steps"].as_array().unwrap();
                assert_eq!(steps.len(), 1, "run {id}: one attempt, once: {steps:?}");
                shown
            })
            .collect()
    };

    // Twelve runs started on host 0, which has two places: the other two
    // hosts take what it has no place for.
    let ids: Vec<String> = (0..12).map(|n| post(&nodes[0].url, n)).collect();
    let shown = wait_all(&nodes[1].url, &ids);
    let by_host = attempts_by_host(&shown);
    assert_eq!(by_host.len(), 3, "every host took runs: {by_host:?}");
    for (host, spans) in &by_host {
        assert!(
            most_at_once(spans) <= 2,
            "host {host} ran more than its two places at once: {spans:?}"
        );
    }

    // Twelve more, and host 0 is killed at once: the runs it parked are
    // free work in the store, and those it held are taken over; every one
    // ends once, within the places of the two hosts left.
    let ids: Vec<String> = (0..12).map(|n| post(&nodes[0].url, n)).collect();
    nodes[0].child.kill().unwrap();
    nodes[0].child.wait().unwrap();
    let shown = wait_all(&nodes[2].url, &ids);
    let by_host = attempts_by_host(&shown);
    for (host, spans) in &by_host {
        assert!(
            most_at_once(spans) <= 2,
            "host {host} ran more than its two places at once: {spans:?}"
        );
    }
    let took: usize = by_host.values().map(Vec::len).sum();
    assert_eq!(took, 12, "one attempt per run: {by_host:?}");
}

/// What one host commits reaches the others as news (`LISTEN`/`NOTIFY`),
/// not at their next look at the store, which is every 5 s on
/// PostgreSQL: a workflow deployed through host 0 is served by host 1
/// within a second, and a tenant's quota set through host 0 holds on host
/// 1 within a second (a step ceiling cuts the default deadline of a step
/// that host 1 runs).
#[test]
fn a_deployment_and_a_quota_set_through_one_host_hold_on_the_others_within_a_second() {
    let scratch = Scratch::new(&["spin"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(
        scratch.path().join("workflows/spins.yaml"),
        "id: spins\nsteps:\n  - { id: s, uses: spin }\n",
    )
    .unwrap();
    let store = database("news");
    let mut nodes: Vec<Node> = (0..2).map(|n| start(&scratch, &store, n, 0)).collect();

    let deployed = {
        let yaml = "id: fresh\nsteps:\n  - { id: s, uses: spin, with: { ms: 1 } }\n";
        let answer = agent()
            .post(format!("{}/v1/workflows", nodes[0].url))
            .header("content-type", "application/yaml")
            .send(yaml)
            .unwrap();
        let status = answer.status().as_u16();
        assert!(status == 201 || status == 200, "deploy: {status}");
        Instant::now()
    };
    let served = loop {
        let (status, body) = call(
            &nodes[1].url,
            "/v1/runs",
            Some(json!({ "workflow": "fresh" })),
        );
        if status == 201 {
            break deployed.elapsed();
        }
        assert!(
            deployed.elapsed() < Duration::from_secs(1),
            "host 1 did not serve the workflow host 0 deployed within a second: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    eprintln!("a deployment through host 0 was served by host 1 after {served:?}");

    let (status, body) = call(
        &nodes[0].url,
        "/v1/tenants/default/quota",
        Some(json!({ "max_step_timeout_ms": 300 })),
    );
    assert_eq!(status, 200, "{body}");
    std::thread::sleep(Duration::from_secs(1));
    // Host 0 goes, so that host 1 drives the run.
    nodes[0].child.kill().unwrap();
    nodes[0].child.wait().unwrap();
    let began = Instant::now();
    let (status, body) = call(
        &nodes[1].url,
        "/v1/runs",
        Some(json!({ "workflow": "spins" })),
    );
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap();
    let shown = ended(&nodes[1].url, id, began + Duration::from_secs(60));
    assert_eq!(shown["run"]["state"], "failed", "{shown}");
    assert_eq!(shown["run"]["error"]["error"]["code"], "timeout", "{shown}");
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "host 1 kept the 30 s default deadline, not the tenant's 300 ms: {:?}",
        began.elapsed()
    );
}

/// Two hosts on PostgreSQL through a proxy that closes a connection as
/// the server answers one `COMMIT` in six, before the answer arrives:
/// each such transaction is stored, and its host told it failed (step
/// commits, creations, claims, lease renewals, deliveries alike). Every
/// run started must end once, succeeded, with one success per step; the
/// shared counter must be bumped exactly twice per run, and each run must
/// have emitted one message.
#[test]
fn commits_whose_answer_is_lost_lose_nothing() {
    let scratch = Scratch::new(&["counter", "spin"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(scratch.path().join("workflows/load.yaml"), WORKFLOW).unwrap();
    let store = database("ambiguous");
    // postgres://user@HOST:PORT/db?...: the proxy goes in front of
    // HOST:PORT.
    let authority = store.split('@').nth(1).unwrap().split('/').next().unwrap();
    let cutter = crate::common::cutter::CommitCutter::start(authority, 6);
    // In plain text, so that the proxy can read the server's answers.
    let through = format!(
        "{}&sslmode=disable",
        store.replacen(authority, &format!("127.0.0.1:{}", cutter.port), 1)
    );
    let nodes: Vec<Node> = (0..2).map(|n| start(&scratch, &through, n, 0)).collect();
    cutter.arm();

    let mut acked = HashMap::new();
    for n in 0..20u64 {
        let url = &nodes[(n % 2) as usize].url;
        let (status, body) = call(
            url,
            "/v1/runs",
            Some(json!({ "workflow": "load", "input": { "n": n } })),
        );
        assert_eq!(status, 201, "run {n}: {body}");
        acked.insert(body["id"].as_str().unwrap().to_owned(), n);
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut counted = Vec::new();
    for (i, (id, n)) in acked.iter().enumerate() {
        let url = &nodes[i % 2].url;
        check_run(url, id, *n, deadline, &mut counted);
    }
    counted.sort_unstable();
    let expected: Vec<u64> = (1..=2 * acked.len() as u64).collect();
    assert_eq!(counted, expected, "the shared counter's bumps");
    let (status, listed) = call(&nodes[0].url, "/v1/runs?limit=1000", None);
    assert_eq!(status, 200, "{listed}");
    let listed = listed["runs"].as_array().map_or(0, Vec::len);
    assert_eq!(listed, acked.len(), "a run no start was answered for");
    eprintln!(
        "{} runs; {} of {} commit answers cut",
        acked.len(),
        cutter.cuts(),
        cutter.commits()
    );
    assert!(
        cutter.cuts() >= 10,
        "only {} commit answers were cut",
        cutter.cuts()
    );
}
