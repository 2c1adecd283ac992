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

/// Counts a visit, then fails for good on its first attempt (and succeeds
/// on any later one), then reads the count.
const AGAIN: &str = "\
id: again
steps:
  - { id: count, uses: counter, with: { key: visits } }
  - { id: shaky, uses: flaky, with: { succeed_on: 2, fail_with: fatal } }
  - { id: read, uses: counter, with: { key: visits, by: 0 } }
outputs:
  counted: \"${{ steps.count.output.value }}\"
  attempt: \"${{ steps.shaky.output.attempt }}\"
  read: \"${{ steps.read.output.value }}\"
";

#[test]
fn a_retry_goes_on_from_the_failed_step_and_counts_once() {
    let scratch = Scratch::new(&["counter", "flaky"]);
    let workflow = scratch.file("again.yaml", AGAIN);
    let ran = scratch.run(&["run", workflow.to_str().unwrap()]);
    assert_eq!(ran.code, Some(1), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("failed at step `shaky`: broken"),
        "{}",
        ran.stderr
    );
    let id = ran.run_id();

    // A step that succeeded is never run again.
    let refused = scratch.run(&["runs", "retry", &id, "--from", "count"]);
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("step `count`") && refused.stderr.contains("never runs again"),
        "{}",
        refused.stderr
    );
    let refused = scratch.run(&["runs", "retry", &id, "--from", "nowhere"]);
    assert!(
        refused.stderr.contains("no step `nowhere` (failed: shaky)"),
        "{}",
        refused.stderr
    );

    let retried = scratch.run(&["runs", "retry", &id]);
    assert_eq!(retried.code, Some(0), "{}", retried.stderr);
    // The counter was added once: the retry went on from `shaky`, as its
    // second attempt, and `count`'s result and write stood.
    assert_eq!(
        retried.json(),
        json!({ "counted": 1, "attempt": 2, "read": 1 }),
        "{}",
        retried.stderr
    );

    let shown = scratch.run(&["runs", "show", &id]);
    assert!(
        shown.stdout.contains("retry   by cli")
            && shown.stdout.contains("(the run had failed); again: shaky"),
        "{}",
        shown.stdout
    );
    let shown = scratch.run(&["runs", "show", &id, "--json"]).json();
    let records = shown["steps"].as_array().unwrap();
    let at = |path: &str| -> Vec<&Value> { records.iter().filter(|r| r["path"] == path).collect() };
    assert_eq!(at("count").len(), 1, "{shown:#}");
    let shaky = at("shaky");
    assert_eq!(shaky.len(), 2, "{shown:#}");
    assert_eq!(shaky[0]["error"]["code"], "broken");
    assert_eq!(shaky[1]["attempt"], 2);
    assert_eq!(shaky[1]["output"]["attempt"], 2);
    assert_eq!(at("@retry")[0]["retry"]["actor"], "cli");
    assert_eq!(shown["run"]["state"], "succeeded");
    // Records stay dense, the retry's among them.
    for (n, record) in records.iter().enumerate() {
        assert_eq!(record["seq"], n, "{shown:#}");
    }

    // A run that succeeded is not retried.
    let again = scratch.run(&["runs", "retry", &id]);
    assert_eq!(again.code, Some(2), "{}", again.stderr);
    assert!(again.stderr.contains("is succeeded"), "{}", again.stderr);
}

#[test]
fn a_cancelled_run_is_retried_over_the_api_and_goes_on_waiting() {
    let scratch = Scratch::new(&["counter"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    scratch.file(
        "workflows/gated.yaml",
        "id: gated\nsteps:\n  - { id: count, uses: counter, with: { key: k } }\n  - { id: gate, await: {} }\n  - { id: read, uses: counter, with: { key: k, by: 0 } }\noutputs:\n  read: \"${{ steps.read.output.value }}\"\n",
    );
    let host = serve(&scratch, 0);
    let (status, started) = host.call(
        "POST",
        "/v1/runs",
        Some(&json!({ "workflow": "gated" }).to_string()),
    );
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    crate::common::wait(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            let (_, steps) = host.call("GET", &format!("/v1/runs/{id}/steps"), None);
            if steps.to_string().contains("\"awaiting\":true") {
                Ok(())
            } else {
                Err(steps)
            }
        },
        |seen| format!("the gate never waited: {seen}"),
    );
    let (status, body) = host.call("POST", &format!("/v1/runs/{id}/cancel"), None);
    assert_eq!(status, 200, "{body}");
    let ended = crate::common::server::run_ended(&host, &id);
    assert_eq!(ended["run"]["state"], "cancelled", "{ended}");

    // A running run is not retried; a cancelled one is.
    let (status, body) = host.call(
        "POST",
        &format!("/v1/runs/{id}/retry"),
        Some("{\"form\": 1}"),
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = host.call("POST", &format!("/v1/runs/{id}/retry"), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "running", "{body}");
    let (status, body) = host.call("POST", &format!("/v1/runs/{id}/retry"), None);
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "run_not_ended", "{body}");

    // The gate waits again, and its answer finishes the run; the counter
    // was added once.
    crate::common::wait(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            let (status, body) = host.call(
                "POST",
                &format!("/v1/runs/{id}/steps/gate/actions"),
                Some(&json!({ "action": "complete", "output": {} }).to_string()),
            );
            if status == 200 { Ok(()) } else { Err(body) }
        },
        |seen| format!("the gate never took its answer: {seen}"),
    );
    let ended = crate::common::server::run_ended(&host, &id);
    assert_eq!(ended["run"]["state"], "succeeded", "{ended}");
    assert_eq!(ended["run"]["outputs"], json!({ "read": 1 }), "{ended}");
}

#[test]
fn a_bulk_retry_retries_each_failed_run_once() {
    let scratch = Scratch::new(&["counter", "flaky"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    scratch.file("workflows/again.yaml", AGAIN);
    let host = serve(&scratch, 0);
    let mut ids = Vec::new();
    for _ in 0..5 {
        let (status, started) = host.call(
            "POST",
            "/v1/runs",
            Some(&json!({ "workflow": "again" }).to_string()),
        );
        assert_eq!(status, 201, "{started}");
        ids.push(started["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let ended = crate::common::server::run_ended(&host, id);
        assert_eq!(ended["run"]["state"], "failed", "{ended}");
    }
    let filter = json!({ "workflow": "again", "state": "failed", "error": "broken" });
    let counted = bulk(
        &host,
        json!({ "action": "retry", "filter": filter, "dry_run": true }),
    );
    assert_eq!(
        (
            counted["matched"].as_u64(),
            counted["would_change"].as_u64()
        ),
        (Some(5), Some(5))
    );

    let done = scratch.run(&[
        "runs",
        "bulk",
        "retry",
        "--workflow",
        "again",
        "--state",
        "failed",
        "--server",
        &host.url,
    ]);
    assert_eq!(done.code, Some(0), "{}\n{}", done.stdout, done.stderr);
    assert!(
        done.stdout
            .contains("retry: 5 runs matched, 5 changed, 0 failed"),
        "{}",
        done.stdout
    );
    // Each run counted once: five visits in all, each run's own number
    // kept from its first attempt.
    let mut counted: Vec<u64> = Vec::new();
    let mut read = 0;
    for id in &ids {
        let ended = crate::common::server::run_ended(&host, id);
        assert_eq!(ended["run"]["state"], "succeeded", "{ended}");
        counted.push(ended["run"]["outputs"]["counted"].as_u64().unwrap());
        read = read.max(ended["run"]["outputs"]["read"].as_u64().unwrap());
    }
    counted.sort_unstable();
    assert_eq!(counted, [1, 2, 3, 4, 5]);
    assert_eq!(read, 5);
    // Nothing is left to retry: they succeeded.
    let again = bulk(
        &host,
        json!({ "action": "retry", "filter": { "workflow": "again" } }),
    );
    assert_eq!(
        (again["matched"].as_u64(), again["changed"].as_u64()),
        (Some(5), Some(0)),
        "{again}"
    );
    assert!(
        again["unchanged"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("is succeeded"),
        "{again}"
    );
}

#[test]
fn a_paused_run_stays_paused_across_a_restart_and_its_fire_waits_for_the_resume() {
    let scratch = Scratch::new(&["counter"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    scratch.file(
        "workflows/napping.yaml",
        "id: napping\nsteps:\n  - { id: count, uses: counter, with: { key: n } }\n  - { id: nap, sleep: 2s }\n  - { id: after, uses: counter, with: { key: n } }\noutputs:\n  after: \"${{ steps.after.output.value }}\"\n",
    );
    let mut host = serve(&scratch, 0);
    let (status, started) = host.call("POST", "/v1/runs", Some(r#"{"workflow": "napping"}"#));
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let steps = |host: &Host| -> Vec<Value> {
        let (_, body) = host.call("GET", &format!("/v1/runs/{id}/steps"), None);
        body["steps"].as_array().cloned().unwrap_or_default()
    };
    crate::common::wait(
        Duration::from_secs(60),
        Duration::from_millis(10),
        || {
            let seen = steps(&host);
            if seen.iter().any(|r| r["path"] == "nap") {
                Ok(())
            } else {
                Err(seen)
            }
        },
        |seen| format!("the nap never started: {seen:?}"),
    );
    let paused = scratch.run(&["runs", "pause", &id, "--server", &host.url]);
    assert_eq!(paused.code, Some(0), "{}\n{}", paused.stdout, paused.stderr);
    let (_, run) = host.call("GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(run["run"]["paused"]["actor"], "local", "{run}");
    assert_eq!(run["run"]["state"], "running", "{run}");
    // Listed as paused, from the store and from the serve.
    for server in [None, Some(host.url.as_str())] {
        let mut args = vec!["runs", "list", "--state", "paused"];
        args.extend(server.map(|url| ["--server", url]).into_iter().flatten());
        let listed = scratch.run(&args);
        assert_eq!(listed.code, Some(0), "{listed:?}");
        assert!(listed.stdout.contains(&id), "{server:?}: {}", listed.stdout);
    }
    let (_, listed) = host.call("GET", "/v1/runs?state=paused", None);
    assert_eq!(listed["runs"][0]["id"], json!(id), "{listed}");
    let (_, listed) = host.call("GET", "/v1/runs?state=succeeded", None);
    assert!(!listed.to_string().contains(&id), "{listed}");
    let (status, body) = host.call("POST", &format!("/v1/runs/{id}/pause"), None);
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("run_paused")),
        "{body}"
    );

    // The nap's timer fires while the run is paused: its end is recorded,
    // and nothing starts.
    crate::common::wait(
        Duration::from_secs(60),
        Duration::from_millis(50),
        || {
            let seen = steps(&host);
            let slept = seen
                .iter()
                .any(|r| r["path"] == "nap" && !r["output"].is_null());
            if slept { Ok(()) } else { Err(seen) }
        },
        |seen| format!("the nap never fired: {seen:?}"),
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !steps(&host).iter().any(|r| r["path"] == "after"),
        "{:?}",
        steps(&host)
    );

    // Across a restart (a kill), the run stays paused.
    host.kill();
    let host = serve(&scratch, 1);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !steps(&host).iter().any(|r| r["path"] == "after"),
        "{:?}",
        steps(&host)
    );
    let listed = scratch.run(&["runs", "list", "--server", &host.url]);
    assert!(
        listed
            .stdout
            .lines()
            .any(|l| l.contains(&id[..8]) && l.contains("paused")),
        "{}",
        listed.stdout
    );

    let resumed = scratch.run(&["runs", "resume", &id, "--server", &host.url]);
    assert_eq!(
        resumed.code,
        Some(0),
        "{}\n{}",
        resumed.stdout,
        resumed.stderr
    );
    let ended = crate::common::server::run_ended(&host, &id);
    assert_eq!(ended["run"]["state"], "succeeded", "{ended}");
    assert!(ended["run"]["paused"].is_null(), "{ended}");
    // Each counter step ran once: the second read 2.
    assert_eq!(ended["run"]["outputs"], json!({ "after": 2 }), "{ended}");
    let all = steps(&host);
    assert_eq!(
        all.iter().filter(|r| r["path"] == "count").count(),
        1,
        "{all:?}"
    );
    assert_eq!(
        all.iter().filter(|r| r["path"] == "after").count(),
        1,
        "{all:?}"
    );
    let (status, body) = host.call("POST", &format!("/v1/runs/{id}/resume"), None);
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("run_ended")),
        "{body}"
    );
}

#[test]
fn a_bulk_pause_and_resume_hold_and_free_waiting_runs() {
    let scratch = Scratch::new(&["echo"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    scratch.file("workflows/gated.yaml", GATED);
    let host = serve(&scratch, 0);
    start_many(&host, "gated", 3);
    let filter = json!({ "workflow": "gated" });
    let runs = || -> Vec<Value> {
        let (_, listed) = host.call("GET", "/v1/runs?workflow=gated", None);
        listed["runs"].as_array().cloned().unwrap_or_default()
    };
    // Each run waits at its gate first (its first record).
    crate::common::wait(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            let seen = runs();
            if seen.len() == 3 && seen.iter().all(|r| r["step_records"].as_u64() >= Some(1)) {
                Ok(())
            } else {
                Err(seen)
            }
        },
        |seen| format!("not every gate waits: {seen:?}"),
    );
    let paused = bulk(&host, json!({ "action": "pause", "filter": filter }));
    assert_eq!(
        (paused["matched"].as_u64(), paused["changed"].as_u64()),
        (Some(3), Some(3)),
        "{paused}"
    );
    crate::common::wait(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            let seen = runs();
            if seen.iter().all(|r| !r["paused"].is_null()) {
                Ok(())
            } else {
                Err(seen)
            }
        },
        |seen| format!("not every run paused: {seen:?}"),
    );
    // A paused run's gate takes an answer, which waits for the resume.
    let id = runs()[0]["id"].as_str().unwrap().to_owned();
    let (status, body) = host.call(
        "POST",
        &format!("/v1/runs/{id}/steps/gate/actions"),
        Some(r#"{"action": "complete"}"#),
    );
    assert_eq!(status, 200, "{body}");
    std::thread::sleep(Duration::from_millis(300));
    let (_, run) = host.call("GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(run["run"]["state"], "running", "{run}");

    let counted = bulk(
        &host,
        json!({ "action": "resume", "filter": filter, "dry_run": true }),
    );
    assert_eq!(counted["would_change"].as_u64(), Some(3), "{counted}");
    let resumed = bulk(&host, json!({ "action": "resume", "filter": filter }));
    assert_eq!(resumed["changed"].as_u64(), Some(3), "{resumed}");
    let ended = crate::common::server::run_ended(&host, &id);
    assert_eq!(ended["run"]["state"], "succeeded", "{ended}");
    for run in runs() {
        assert!(run["paused"].is_null(), "{run}");
    }
}
