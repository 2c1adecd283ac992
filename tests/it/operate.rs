//! Operating on runs in bulk: `POST /v1/runs/bulk` and `weft runs bulk`
//! against a real `weft serve`.

use std::time::Duration;

use crate::common::Scratch;
use crate::common::server::{Host, agent, serve};
use serde_json::{Value, json};

const GATED: &str =
    "id: gated\nsteps:\n  - { id: gate, await: {} }\n  - { id: after, uses: echo, with: 1 }\n";

fn bulk(host: &Host, body: Value) -> Value {
    let (status, answer) = host.call("POST", "/v1/runs/bulk", Some(&body.to_string()));
    assert_eq!(status, 200, "{answer}");
    answer
}

/// Starts `n` runs of `workflow` over the API, from four threads.
fn start_many(host: &Host, workflow: &str, n: usize) {
    std::thread::scope(|scope| {
        for part in 0..4 {
            scope.spawn(move || {
                let agent = agent();
                for _ in (part..n).step_by(4) {
                    let response = agent
                        .post(format!("{}/v1/runs", host.url))
                        .header("content-type", "application/json")
                        .send(json!({ "workflow": workflow }).to_string())
                        .unwrap();
                    assert_eq!(response.status().as_u16(), 201);
                }
            });
        }
    });
}

#[test]
fn a_bulk_cancel_of_ten_thousand_waiting_runs_cancels_each_once() {
    let scratch = Scratch::new(&["echo"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    scratch.file("workflows/gated.yaml", GATED);
    scratch.file(
        "workflows/quick.yaml",
        "id: quick\nsteps:\n  - { id: one, uses: echo, with: 1 }\n",
    );
    let host = serve(&scratch, 0);
    start_many(&host, "gated", 10_000);
    // Runs of another workflow, which the filter leaves alone.
    start_many(&host, "quick", 20);
    crate::common::wait(
        Duration::from_secs(120),
        Duration::from_millis(200),
        || {
            let counted = bulk(
                &host,
                json!({ "action": "cancel", "filter": { "workflow": "gated", "state": "running" }, "dry_run": true }),
            );
            if counted["matched"] == 10_000 {
                Ok(())
            } else {
                Err(counted)
            }
        },
        |counted| format!("the runs never all started: {counted}"),
    );

    // A dry run changes nothing.
    let counted = bulk(
        &host,
        json!({ "action": "cancel", "filter": { "workflow": "gated" }, "dry_run": true }),
    );
    assert_eq!(counted["would_change"], 10_000, "{counted}");
    let (_, still) = host.call(
        "GET",
        "/v1/runs?workflow=gated&state=cancelled&limit=1",
        None,
    );
    assert_eq!(still["runs"], json!([]), "{still}");

    // Bad filters are named.
    let (status, refused) = host.call(
        "POST",
        "/v1/runs/bulk",
        Some(&json!({ "action": "cancel", "filter": { "revision": 1 } }).to_string()),
    );
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("filter.revision")
    );
    let (status, refused) = host.call(
        "POST",
        "/v1/runs/bulk",
        Some(&json!({ "action": "explode", "filter": {} }).to_string()),
    );
    assert_eq!(status, 400, "{refused}");
    let (status, refused) = host.call(
        "POST",
        "/v1/runs/bulk",
        Some(&json!({ "action": "cancel", "filter": { "error": "boom" } }).to_string()),
    );
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("filter.error")
    );
    // Another tenant's name (it holds `:`) matches nothing, whatever it
    // names, and its revisions are not looked up.
    for name in ["other:gated", "nobody:x"] {
        let answer = bulk(
            &host,
            json!({ "action": "cancel", "filter": { "workflow": name, "revision": 1 } }),
        );
        assert_eq!(
            (answer["matched"].as_u64(), answer["changed"].as_u64()),
            (Some(0), Some(0))
        );
    }
    // No filter at all needs --all.
    let out = scratch.run(&["runs", "bulk", "cancel", "--server", &host.url]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--all"), "{}", out.stderr);

    let started = std::time::Instant::now();
    let out = scratch.run(&[
        "runs",
        "bulk",
        "cancel",
        "--workflow",
        "gated",
        "--server",
        &host.url,
    ]);
    let took = started.elapsed();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("10000 runs matched, 10000 changed, 0 failed"),
        "{}",
        out.stdout
    );
    eprintln!("bulk cancel of 10,000 runs: {took:?}");

    // Every one is cancelled, and none of the other workflow's.
    let counted = bulk(
        &host,
        json!({ "action": "cancel", "filter": { "workflow": "gated", "state": "cancelled" }, "dry_run": true }),
    );
    assert_eq!(counted["matched"], 10_000, "{counted}");
    let counted = bulk(
        &host,
        json!({ "action": "cancel", "filter": { "workflow": "gated", "state": "running" }, "dry_run": true }),
    );
    assert_eq!(counted["matched"], 0, "{counted}");
    let counted = bulk(
        &host,
        json!({ "action": "cancel", "filter": { "workflow": "quick", "state": "cancelled" }, "dry_run": true }),
    );
    assert_eq!(counted["matched"], 0, "{counted}");

    // Again: each matches, none changes, each says why.
    let again = bulk(
        &host,
        json!({ "action": "cancel", "filter": { "workflow": "gated" }, "limit": 50 }),
    );
    assert_eq!(
        (again["matched"].as_u64(), again["changed"].as_u64()),
        (Some(50), Some(0)),
        "{again}"
    );
    assert_eq!(again["unchanged"][0]["reason"], "ended", "{again}");
    assert!(again["next"].is_string(), "{again}");
}
