//! A hostile tenant's steps against the runtime: each tries to hold what
//! is not its own, and before these bounds each succeeded.
//!
//! - A step in `std::thread::sleep` for an hour waited in the host's
//!   `wasi:io/poll`, where epoch interruption does not reach: its
//!   `timeout: 1s` did nothing, a cancel did nothing, and its worker
//!   thread was gone for the hour. Now the wait ends at the deadline
//!   (`timeout`) or within a few milliseconds of a cancel (`cancelled`).
//! - A step with a 64 MiB memory cap made the host buffer 9 GiB of
//!   key-value writes, or gigabytes of parsed messages and output. Now the
//!   host's holdings for a call are charged to a budget of the step's
//!   memory limit, and the call fails `resource_limit` past it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::server::{agent, serve};
use crate::common::{Scratch, guest_bytes};
use serde_json::json;
use weft::runtime::{CallError, CallOptions, KvAccess, KvSource, StepContext, Versioned};
use weft::{Runtime, RuntimeConfig};

fn context() -> StepContext {
    StepContext {
        tenant: "t".to_owned(),
        workflow: "wf".to_owned(),
        run_id: "run-1".to_owned(),
        step_id: "hostile".to_owned(),
        attempt: 1,
        idempotency_key: "run-1:hostile".to_owned(),
    }
}

/// A key-value space with nothing committed in it.
#[derive(Debug, Default)]
struct NoData;

impl KvSource for NoData {
    fn get(&self, _space: &str, _key: &str) -> Result<Versioned, String> {
        Ok(Versioned::default())
    }

    fn list(&self, _: &str, _: &str, _: usize, _: u64) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }

    fn now(&self) -> u64 {
        0
    }
}

#[test]
fn a_step_asleep_in_the_host_ends_at_its_deadline() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let hostile = runtime.load(&guest_bytes("hostile")).unwrap();
    let started = Instant::now();
    let outcome = hostile.call(
        &context(),
        r#"{"op": "sleep", "seconds": 3600}"#,
        &CallOptions {
            timeout: Some(Duration::from_secs(1)),
            ..CallOptions::default()
        },
    );
    let took = started.elapsed();
    assert_eq!(
        outcome.result,
        Err(CallError::Timeout {
            limit: Duration::from_secs(1)
        })
    );
    assert!(
        took < Duration::from_secs(10),
        "the sleep ended after {took:?}"
    );
    // A short sleep still ends as the guest asked.
    let outcome = hostile.call(
        &context(),
        r#"{"op": "sleep", "seconds": 0}"#,
        &CallOptions::default(),
    );
    assert_eq!(outcome.result, Ok(json!({ "slept": true })));
}

#[test]
fn a_step_asleep_in_the_host_ends_when_cancelled() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let hostile = runtime.load(&guest_bytes("hostile")).unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let setter = {
        let cancel = Arc::clone(&cancel);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            cancel.store(true, Ordering::Relaxed);
            Instant::now()
        })
    };
    let outcome = hostile.call(
        &context(),
        r#"{"op": "sleep", "seconds": 3600}"#,
        &CallOptions {
            timeout: Some(Duration::from_secs(3600)),
            cancel: Some(cancel),
            ..CallOptions::default()
        },
    );
    let ended = Instant::now();
    let cancelled_at = setter.join().unwrap();
    assert_eq!(outcome.result, Err(CallError::Cancelled));
    let after = ended.duration_since(cancelled_at);
    assert!(
        after < Duration::from_secs(5),
        "ended {after:?} after the cancel"
    );
}

/// A call that tries to make the host buffer 9 GiB of key-value writes
/// (9,216 distinct keys of 1 MiB, going on after each refusal) fails
/// `resource_limit`, and the host held no more than its budget.
#[test]
fn a_call_cannot_make_the_host_hold_more_than_its_memory_limit() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let hostile = runtime.load(&guest_bytes("hostile")).unwrap();
    let limit: u64 = 64 << 20;
    let kv = KvAccess {
        space: "workflow/wf".to_owned(),
        source: Arc::new(NoData),
    };
    let outcome = hostile.call(
        &context(),
        r#"{"op": "kv", "count": 9216, "kib": 1024}"#,
        &CallOptions {
            memory_limit: Some(limit),
            kv: Some(kv),
            ..CallOptions::default()
        },
    );
    match &outcome.result {
        Err(error @ CallError::ResourceLimit { message }) => {
            assert_eq!(error.code(), "resource_limit");
            assert!(!error.is_retryable());
            assert!(message.contains("budget of 67108864 bytes"), "{message}");
        }
        other => panic!("expected resource_limit, got {other:?}"),
    }
    let held: usize = outcome
        .kv
        .writes
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, String::len))
        .sum();
    assert!(held as u64 <= limit, "the host held {held} bytes");
    assert!(
        outcome.kv.writes.len() >= 32,
        "{} writes",
        outcome.kv.writes.len()
    );

    // Messages are charged as parsed: 10,000 lists of 100,000 numbers is
    // about 10 GiB of parsed values from 2 GB of text.
    let outcome = hostile.call(
        &context(),
        r#"{"op": "emit", "count": 10000, "values": 100000}"#,
        &CallOptions {
            memory_limit: Some(limit),
            ..CallOptions::default()
        },
    );
    assert_eq!(
        outcome.result.as_ref().map_err(CallError::code),
        Err("resource_limit")
    );
    assert!(
        outcome.emitted.len() < 20,
        "{} messages",
        outcome.emitted.len()
    );

    // So is the output: 1.4 million numbers, 2.8 MB of text, are about
    // 70 MB parsed (the guest holds them in about 45 MB).
    let outcome = hostile.call(
        &context(),
        r#"{"op": "output", "values": 1400000}"#,
        &CallOptions {
            memory_limit: Some(limit),
            ..CallOptions::default()
        },
    );
    assert_eq!(
        outcome.result.as_ref().map_err(CallError::code),
        Err("resource_limit")
    );
    // Under the budget, the same step succeeds.
    let outcome = hostile.call(
        &context(),
        r#"{"op": "output", "values": 1000}"#,
        &CallOptions::default(),
    );
    assert_eq!(
        outcome.result.map(|v| v.as_array().map(Vec::len)),
        Ok(Some(1000))
    );
}

/// `a` holds 2,000 zeros, `b` 200 aliases of `a`, `c` 200 of `b`: 80
/// million values written in under 8 KB.
fn alias_bomb() -> String {
    let a = vec!["0"; 2000].join(", ");
    let b = vec!["*a"; 200].join(", ");
    let c = vec!["*b"; 200].join(", ");
    format!(
        "id: bomb\ninputs:\n  a: &a [{a}]\n  b: &b [{b}]\n  c: [{c}]\nsteps:\n  - id: s\n    uses: echo\n"
    )
}

#[test]
fn an_alias_bomb_and_a_timeout_of_ages_are_refused_by_check_and_by_deploy() {
    let scratch = Scratch::new(&["echo"]);
    let bomb = alias_bomb();
    assert!(bomb.len() < 8_000, "{} bytes", bomb.len());
    let ages = "id: ages\nsteps:\n  - id: s\n    uses: echo\n    timeout: 300000000000y\n";
    let cases = [
        (
            "bomb.yaml",
            bomb.as_str(),
            "values, twice its size plus 16384",
        ),
        (
            "ages.yaml",
            ages,
            "longer than the longest duration weft takes, 100 years",
        ),
    ];
    for (name, text, expected) in cases {
        let path = scratch.file(name, text);
        let started = Instant::now();
        let run = scratch.run(&["check", path.to_str().unwrap()]);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{name}: {:?}",
            started.elapsed()
        );
        assert_eq!(run.code, Some(2), "{name}: {run:?}");
        assert!(run.stderr.contains(expected), "{name}: {}", run.stderr);
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    }
    let host = serve(&scratch, 0);
    for (name, text, expected) in cases {
        let (status, body) = host.send("/v1/workflows", "application/yaml", text.as_bytes());
        assert_eq!(status, 400, "{name}: {body}");
        assert_eq!(body["error"]["code"], "invalid_workflow", "{name}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(expected), "{name}: {body}");
    }
    let (status, _) = host.call("GET", "/v1/health", None);
    assert_eq!(status, 200);
}

/// Clients that open a connection and send half a request's header are
/// cut off after the header timeout (10 s), and the host answers others
/// all along. Before, 3,000 such connections were all open 45 s later.
#[test]
fn slow_clients_are_cut_off_and_others_are_served_meanwhile() {
    use std::io::{Read, Write};
    let scratch = Scratch::new(&["echo"]);
    let host = serve(&scratch, 0);
    let address = host.url.trim_start_matches("http://").to_owned();
    let mut slow: Vec<std::net::TcpStream> = (0..200)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(&address).unwrap();
            stream
                .write_all(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .unwrap();
            stream
        })
        .collect();
    let (status, _) = host.call("GET", "/v1/health", None);
    assert_eq!(status, 200, "a client with a whole request is served");
    std::thread::sleep(Duration::from_secs(11));
    for (i, stream) in slow.iter_mut().enumerate() {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut answer = Vec::new();
        // The server ends the connection: a read of 0 bytes (or a reset),
        // after at most a 408 it may send first.
        match stream.read_to_end(&mut answer) {
            Ok(_) => {}
            Err(e) => assert_ne!(
                e.kind(),
                std::io::ErrorKind::WouldBlock,
                "connection {i} is still open"
            ),
        }
    }
    let (status, _) = host.call("GET", "/v1/health", None);
    assert_eq!(status, 200);
}

#[test]
fn a_token_less_host_refuses_what_a_proxy_forwards_and_names_it_does_not_answer() {
    let scratch = Scratch::new(&["echo"]);
    let host = serve(&scratch, 0);
    let get = |headers: &[(&str, &str)]| {
        let mut request = agent().get(format!("{}/v1/runs", host.url));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut response = request.call().unwrap();
        let status = response.status().as_u16();
        let body: serde_json::Value = response.body_mut().read_json().unwrap_or_default();
        (
            status,
            body["error"]["code"].as_str().unwrap_or("").to_owned(),
        )
    };
    assert_eq!(get(&[]), (200, String::new()));
    assert_eq!(get(&[("host", "localhost")]), (200, String::new()));
    for header in ["x-forwarded-for", "x-forwarded-host", "forwarded"] {
        assert_eq!(
            get(&[(header, "203.0.113.9")]),
            (403, "forwarded".to_owned()),
            "{header}"
        );
    }
    for name in ["10.0.0.1", "weft.example", "app.localhost"] {
        assert_eq!(
            get(&[("host", name)]),
            (403, "not_local".to_owned()),
            "{name}"
        );
    }
}

/// Tenant `default` has no egress policy unless the host sets one, so a
/// webhook's URL was its own grant: any of its deployers could subscribe
/// `http://169.254.169.254/` and have the host post to the cloud's
/// metadata service. A loopback webhook (a local receiver) still works.
#[test]
fn the_default_tenant_cannot_subscribe_a_webhook_to_the_metadata_service() {
    let scratch = Scratch::new(&["echo"]);
    let host = serve(&scratch, 0);
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://169.254.10.10:8080/",
    ] {
        let body = json!({ "channel": "news", "name": "meta", "webhook": { "url": url } });
        let (status, answer) = host.call("POST", "/v1/subscriptions", Some(&body.to_string()));
        assert_eq!(status, 403, "{url}: {answer}");
        assert_eq!(answer["error"]["code"], "http_denied", "{url}: {answer}");
    }
    let body = json!({ "channel": "news", "name": "local", "webhook": { "url": "http://127.0.0.1:9/hook" } });
    let (status, answer) = host.call("POST", "/v1/subscriptions", Some(&body.to_string()));
    assert_eq!(status, 201, "{answer}");
}

/// A step that makes 100,000 header maps of 8 KB each and keeps them
/// would make the host hold 800 MB of `wasi:http` fields for a call capped
/// at 64 MiB. Each map is charged for what it may hold as it is made, and
/// the call fails `resource_limit` naming the header map; a step that
/// makes a few succeeds.
#[test]
fn header_maps_a_step_makes_are_charged_to_its_call() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let fetch = runtime.load(&guest_bytes("fetch")).unwrap();
    let options = CallOptions {
        memory_limit: Some(64 << 20),
        ..CallOptions::default()
    };
    let outcome = fetch.call(
        &context(),
        r#"{"header_maps": 100000, "header_bytes": 8000}"#,
        &options,
    );
    match &outcome.result {
        Err(CallError::ResourceLimit { message }) => {
            assert!(message.contains("a header map"), "{message}");
            assert!(message.contains("budget of 67108864 bytes"), "{message}");
        }
        other => panic!("expected resource_limit, got {other:?}"),
    }
    let outcome = fetch.call(
        &context(),
        r#"{"header_maps": 100, "header_bytes": 8000}"#,
        &options,
    );
    assert_eq!(
        outcome.result.map(|v| v["header_maps"].clone()),
        Ok(json!(100))
    );
}

/// A plugin file in the host's plugins directory that does not load: a
/// deployment that names it is refused, and the error names the file as
/// it is in the plugins directory, never the host's path to it.
#[test]
fn errors_about_plugin_files_do_not_print_the_hosts_paths() {
    let scratch = Scratch::new(&["echo"]);
    std::fs::write(
        scratch.path().join("plugins/broken.wasm"),
        b"not a component",
    )
    .unwrap();
    let host = serve(&scratch, 0);
    let text = "id: uses-broken\nsteps:\n  - { id: a, uses: broken }\n";
    let (status, answer) = host.send("/v1/workflows", "application/yaml", text.as_bytes());
    assert!((400..500).contains(&status), "{status} {answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("broken.wasm"), "{answer}");
    let root = scratch.path().to_str().unwrap();
    assert!(!answer.to_string().contains(root), "{answer}");
}
