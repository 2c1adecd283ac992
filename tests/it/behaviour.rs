//! One behaviour test, run on the same step written in every language the
//! SDK speaks (`tests/behaviour/`: Rust, Python, JavaScript and C): key-value counting under concurrency,
//! a message emitted once, a granted HTTP call to a loopback server, a
//! denied one, and a secret that never shows.

use serde_json::json;

use crate::common::server::{run_ended as ended, serve_with, start_run as start};
use crate::common::{Scratch, built, guest_bytes};
use crate::egress::Site;

const SECRET: &str = "tok_behave_5e1f9a";

/// The behaviour checks, on the component `bytes` named `plugin`.
fn behaves(language: &str, plugin: &str, bytes: &[u8]) {
    let site = Site::start();
    let other = Site::start();
    let scratch = Scratch::new(&[]);
    std::fs::write(scratch.plugins_dir().join(format!("{plugin}.wasm")), bytes).unwrap();
    let key = scratch.run(&["secrets", "new-key"]);
    let key_file = scratch.file("secrets.key", key.stdout.trim());
    let host = serve_with(
        &scratch,
        0,
        &["--secrets-key-file", key_file.to_str().unwrap()],
    );
    let (status, body) = host.call(
        "PUT",
        "/v1/secrets/TOKEN",
        Some(&json!({ "value": SECRET }).to_string()),
    );
    assert_eq!(status, 200, "{language}: {body}");
    let grant = format!("http://127.0.0.1:{}", site.port);
    let workflow = format!(
        "id: behave\nsteps:\n  - id: act\n    uses: {plugin}\n    with: \"${{{{ inputs }}}}\"\n    allow: {{ http: [\"{grant}\"] }}\n    secrets: [TOKEN]\n"
    );
    let (status, body) = host.send("/v1/workflows", "application/yaml", workflow.as_bytes());
    assert_eq!(status, 201, "{language}: {body}");

    // 50 concurrent runs each add one to `count`: every total from 1 to 50
    // is seen once.
    let ids: Vec<String> = (0..50)
        .map(|_| start(&host, "behave", &json!({ "op": "count" })))
        .collect();
    let mut counts: Vec<u64> = ids
        .iter()
        .map(|id| {
            let run = ended(&host, id);
            assert_eq!(run["run"]["state"], "succeeded", "{language}: {run:#}");
            run["run"]["outputs"]["count"].as_u64().unwrap()
        })
        .collect();
    counts.sort_unstable();
    assert_eq!(counts, (1..=50).collect::<Vec<_>>(), "{language}");

    // One message, sent once.
    let id = start(
        &host,
        "behave",
        &json!({ "op": "emit", "channel": "behave" }),
    );
    let run = ended(&host, &id);
    assert_eq!(run["run"]["state"], "succeeded", "{language}: {run:#}");
    let (_, messages) = host.call("GET", &format!("/v1/runs/{id}/messages"), None);
    let messages = messages["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 1, "{language}: {messages:?}");
    assert_eq!(messages[0]["id"], run["run"]["outputs"]["id"], "{language}");

    // A granted call reaches the loopback server...
    let id = start(
        &host,
        "behave",
        &json!({ "op": "fetch", "url": site.url("/hello") }),
    );
    let run = ended(&host, &id);
    assert_eq!(run["run"]["state"], "succeeded", "{language}: {run:#}");
    assert_eq!(
        run["run"]["outputs"],
        json!({ "status": 200, "body": "hello from loopback" }),
        "{language}"
    );
    assert_eq!(site.hits(), 1, "{language}");
    // ... and one to a host not granted fails with `http_denied`.
    let id = start(
        &host,
        "behave",
        &json!({ "op": "fetch", "url": other.url("/hello") }),
    );
    let run = ended(&host, &id);
    assert_eq!(run["run"]["state"], "failed", "{language}: {run:#}");
    assert_eq!(
        run["steps"][0]["error"]["code"], "http_denied",
        "{language}: {run:#}"
    );
    assert_eq!(other.hits(), 0, "{language}");

    // The secret reads, and shows only as its name.
    let id = start(&host, "behave", &json!({ "op": "secret", "name": "TOKEN" }));
    let run = ended(&host, &id);
    assert_eq!(run["run"]["state"], "succeeded", "{language}: {run:#}");
    assert_eq!(run["run"]["outputs"]["length"], SECRET.len(), "{language}");
    assert!(
        run["steps"][0]["logs"]
            .to_string()
            .contains("the secret is [secret TOKEN]"),
        "{language}: {run:#}"
    );
    assert!(!run.to_string().contains(SECRET), "{language}: {run:#}");
}

#[test]
fn the_rust_step_behaves() {
    behaves("rust", "behave-rs", &guest_bytes("behave"));
}

#[test]
fn the_python_step_behaves() {
    let path = built("tests/behaviour/python");
    behaves("python", "behave-py", &std::fs::read(path).unwrap());
}

#[test]
fn the_javascript_step_behaves() {
    let path = built("tests/behaviour/js");
    behaves("javascript", "behave-js", &std::fs::read(path).unwrap());
}

#[test]
fn the_c_step_behaves() {
    let path = built("tests/behaviour/c");
    behaves("c", "behave-c", &std::fs::read(path).unwrap());
}
