//! Messages, deliveries, await steps and the HTTP API, end to end: a real
//! `weft serve` on loopback, real SSE and webhook receivers.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::receiver::Receiver;
use crate::common::server::{Host, agent, serve};
use crate::common::{Scratch, wait};
use serde_json::{Value, json};

fn scratch(workflows: &[(&str, &str)]) -> Scratch {
    let scratch = Scratch::new(&["emitter", "echo"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    for (name, text) in workflows {
        std::fs::write(scratch.path().join("workflows").join(name), text).unwrap();
    }
    scratch
}

/// `method path [body]`: the status and the JSON answer.
fn call(host: &Host, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    host.call(method, path, body)
}

fn start(host: &Host, workflow: &str, input: Value) -> String {
    let (status, body) = call(
        host,
        "POST",
        "/v1/runs",
        Some(&json!({ "workflow": workflow, "input": input }).to_string()),
    );
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

fn wait_run(host: &Host, id: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let look = || {
        let (status, body) = call(host, "GET", &format!("/v1/runs/{id}"), None);
        if status == 200 && ready(&body) {
            Ok(body)
        } else {
            Err(body)
        }
    };
    wait(
        Duration::from_secs(60),
        Duration::from_millis(20),
        look,
        |body| format!("run {id} never {what}: {body}"),
    )
}

fn ended(host: &Host, id: &str) -> Value {
    wait_run(host, id, "ended", |b| b["run"]["state"] != "running")
}

/// An SSE connection, read line by line.
struct Events {
    lines: std::io::Lines<BufReader<Box<dyn Read + Send>>>,
}

impl Events {
    fn open(host: &Host, channel: &str, consumer: &str, last: Option<u64>) -> Self {
        let mut request = agent().get(format!(
            "{}/v1/channels/{channel}/events?consumer={consumer}",
            host.url
        ));
        if let Some(last) = last {
            request = request.header("last-event-id", last.to_string());
        }
        let response = request.call().unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let reader: Box<dyn Read + Send> = Box::new(response.into_body().into_reader());
        Self {
            lines: BufReader::new(reader).lines(),
        }
    }

    /// The next event's data.
    fn next(&mut self) -> Value {
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            if let Some(data) = line.strip_prefix("data:") {
                return serde_json::from_str(data.trim()).unwrap();
            }
        }
        panic!("the event stream ended");
    }
}

fn ack(host: &Host, delivery: &str) -> Value {
    let (status, body) = call(
        host,
        "POST",
        &format!("/v1/deliveries/{delivery}/ack"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    body["delivery"].clone()
}

#[test]
fn a_thousand_messages_reach_an_sse_consumer_in_order_and_an_unacked_one_comes_back_with_its_id() {
    let scratch = scratch(&[(
        "emits.yaml",
        "id: emits\nsteps:\n  - { id: many, uses: emitter, with: { channel: orders, count: 1000 } }\n  - { id: done, emit: orders, with: { last: true, total: \"${{ steps.many.output.emitted }}\" } }\n",
    )]);
    let host = serve(&scratch, 0);
    let (status, made) = call(
        &host,
        "POST",
        "/v1/subscriptions",
        Some(r#"{"channel": "orders", "name": "tail", "ack_timeout": "60s"}"#),
    );
    assert_eq!(status, 201, "{made}");

    let id = start(&host, "emits", json!({}));
    let run = ended(&host, &id);
    assert_eq!(run["run"]["state"], "succeeded", "{run}");
    let (_, messages) = call(&host, "GET", &format!("/v1/runs/{id}/messages"), None);
    assert_eq!(messages["messages"].as_array().unwrap().len(), 1001);

    // The first delivery, not acked, then the connection drops.
    let mut events = Events::open(&host, "orders", "tail", None);
    let first = events.next();
    assert_eq!(first["payload"], json!({ "n": 0, "run": id }));
    assert_eq!(first["attempt"], 1);
    drop(events);

    // Reconnecting: the same delivery, its second attempt, then the rest in
    // order; each acked.
    let mut events = Events::open(&host, "orders", "tail", None);
    let again = events.next();
    assert_eq!(again["delivery"], first["delivery"]);
    assert_eq!(again["attempt"], 2);
    ack(&host, again["delivery"].as_str().unwrap());
    let mut seqs = vec![again["seq"].as_u64().unwrap()];
    for n in 1..1000 {
        let event = events.next();
        assert_eq!(event["payload"]["n"], n, "out of order: {event}");
        // The first connection may have been sent it too, unacked.
        assert!(event["attempt"] == 1 || event["attempt"] == 2, "{event}");
        seqs.push(event["seq"].as_u64().unwrap());
        ack(&host, event["delivery"].as_str().unwrap());
    }
    let last = events.next();
    assert_eq!(last["payload"], json!({ "last": true, "total": 1000 }));
    assert_eq!(last["step"], "done");
    let acked = ack(&host, last["delivery"].as_str().unwrap());
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    // The only subscription acked it: the message is complete.
    assert_eq!(acked["state"], "completed", "{acked}");
    // A late ack changes nothing.
    let late = ack(&host, first["delivery"].as_str().unwrap());
    assert_eq!(late["state"], "completed");
    assert_eq!(late["attempts"], 2);
    let (_, queue) = call(
        &host,
        "GET",
        "/v1/deliveries?subscription=orders/tail",
        None,
    );
    assert_eq!(queue["deliveries"], json!([]), "nothing left unsettled");
}

#[test]
fn a_step_that_fails_after_emitting_commits_no_message() {
    let scratch = scratch(&[(
        "fails.yaml",
        "id: fails\nsteps:\n  - id: emit\n    uses: emitter\n    with: { channel: c, count: 3, fail: true }\n    retry: { max_attempts: 2, initial: 10ms }\n",
    )]);
    let host = serve(&scratch, 0);
    let (status, _) = call(
        &host,
        "POST",
        "/v1/subscriptions",
        Some(r#"{"channel": "c"}"#),
    );
    assert_eq!(status, 201);
    let id = start(&host, "fails", json!({}));
    let run = ended(&host, &id);
    assert_eq!(run["run"]["state"], "failed");
    assert_eq!(run["steps"].as_array().unwrap().len(), 2, "two attempts");
    let (_, messages) = call(&host, "GET", &format!("/v1/runs/{id}/messages"), None);
    assert_eq!(messages["messages"], json!([]));
    let (_, queue) = call(&host, "GET", "/v1/deliveries?subscription=c/default", None);
    assert_eq!(queue["deliveries"], json!([]));
}

fn webhook(host: &Host, channel: &str, receiver: &Receiver, extra: Value) -> Value {
    let mut spec = json!({
        "channel": channel,
        "name": "hook",
        "webhook": { "url": receiver.url, "secret": "s3cret" },
        "backoff": "20ms",
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    let (status, made) = call(host, "POST", "/v1/subscriptions", Some(&spec.to_string()));
    assert_eq!(status, 201, "{made}");
    made
}

/// The server's threads now.
fn threads(host: &Host) -> usize {
    std::fs::read_dir(format!("/proc/{}/task", host.child.id()))
        .map(|tasks| tasks.count())
        .unwrap_or(0)
}

#[test]
fn sixty_webhook_subscriptions_are_served_by_a_pool_not_a_thread_each() {
    let scratch = scratch(&[(
        "one.yaml",
        "id: one\nsteps:\n  - { id: tell, emit: events, with: { hello: world } }\n",
    )]);
    let host = serve(&scratch, 0);
    let receiver = Receiver::start(|_| 200);
    let before = threads(&host);
    for n in 0..60 {
        webhook(
            &host,
            "events",
            &receiver,
            json!({ "name": format!("hook{n}") }),
        );
    }
    let id = start(&host, "one", json!({}));
    assert_eq!(ended(&host, &id)["run"]["state"], "succeeded");
    // Every subscription gets the message, once.
    let got = receiver.wait_for(60);
    let deliveries: std::collections::HashSet<_> = got
        .iter()
        .map(|r| r.header("weft-delivery").to_owned())
        .collect();
    assert_eq!(deliveries.len(), 60, "one delivery each");
    // The pool's threads, and a few of the async runtime's for blocking
    // work that the requests above may have started.
    let grown = threads(&host).saturating_sub(before);
    assert!(
        grown <= weft::hub::WEBHOOK_THREADS + 8,
        "{grown} more threads for 60 webhook subscriptions (the pool holds {})",
        weft::hub::WEBHOOK_THREADS
    );
}

#[test]
fn a_webhook_that_fails_three_times_gets_the_message_four_times_with_one_id_and_a_valid_signature()
{
    let scratch = scratch(&[(
        "one.yaml",
        "id: one\nsteps:\n  - { id: tell, emit: events, with: { hello: world } }\n",
    )]);
    let host = serve(&scratch, 0);
    let receiver = Receiver::start(|n| if n < 3 { 500 } else { 200 });
    let made = webhook(&host, "events", &receiver, json!({}));
    // The secret is shown when the subscription is made, not listed later.
    assert_eq!(made["subscription"]["target"]["secret"], "s3cret");
    let (_, listed) = call(&host, "GET", "/v1/subscriptions?channel=events", None);
    assert!(listed["subscriptions"][0]["target"].get("secret").is_none());

    let id = start(&host, "one", json!({}));
    assert_eq!(ended(&host, &id)["run"]["state"], "succeeded");
    let got = receiver.wait_for(4);
    let delivery = got[0].header("weft-delivery").to_owned();
    for (n, request) in got.iter().enumerate() {
        assert_eq!(request.header("weft-delivery"), delivery);
        assert_eq!(request.header("weft-attempt"), (n + 1).to_string());
        assert_eq!(
            request.header("weft-signature"),
            weft::hub::sign("s3cret", &request.body),
            "the signature is the HMAC-SHA256 of the body"
        );
        assert_eq!(request.json()["payload"], json!({ "hello": "world" }));
        assert_eq!(request.json()["delivery"], delivery.as_str());
    }
    assert_ne!(
        weft::hub::sign("other", &got[0].body),
        got[0].header("weft-signature")
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, shown) = call(&host, "GET", &format!("/v1/deliveries/{delivery}"), None);
        if shown["delivery"]["state"] == "completed" {
            assert_eq!(shown["delivery"]["attempts"], 4);
            break;
        }
        assert!(Instant::now() < deadline, "never completed: {shown}");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(receiver.got().len(), 4, "acked: no fifth request");
}

#[test]
fn a_message_whose_retries_run_out_is_a_dead_letter_that_can_be_resent_or_cleared() {
    let scratch = scratch(&[(
        "two.yaml",
        "id: two\nsteps:\n  - { id: a, emit: jobs, with: 1 }\n  - { id: b, emit: jobs, with: 2 }\n",
    )]);
    let host = serve(&scratch, 0);
    let healthy = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&healthy);
    let receiver = Receiver::start(move |_| {
        if flag.load(Ordering::SeqCst) {
            200
        } else {
            503
        }
    });
    webhook(&host, "jobs", &receiver, json!({ "max_attempts": 2 }));
    let id = start(&host, "two", json!({}));
    assert_eq!(ended(&host, &id)["run"]["state"], "succeeded");

    let deadline = Instant::now() + Duration::from_secs(30);
    let dead = loop {
        let (_, dead) = call(&host, "GET", "/v1/deliveries?state=error", None);
        let dead = dead["deliveries"].as_array().unwrap().clone();
        if dead.len() == 2 {
            break dead;
        }
        assert!(Instant::now() < deadline, "not dead-lettered: {dead:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        dead.iter()
            .all(|d| d["attempts"] == 2 && d["state"] == "error")
    );
    assert!(
        dead[0]["last_error"].as_str().unwrap().contains("503"),
        "{dead:?}"
    );
    assert_eq!(receiver.got().len(), 4, "two attempts each");
    let listed = scratch.run(&["deliveries", "list", "--dead", "--server", &host.url]);
    assert_eq!(listed.code, Some(0), "{listed:?}");
    assert!(
        listed.stdout.contains(dead[0]["id"].as_str().unwrap()),
        "{}",
        listed.stdout
    );

    // Clear the second; re-send the first to a receiver that now answers.
    let second = dead[1]["id"].as_str().unwrap();
    let (status, _) = call(&host, "DELETE", &format!("/v1/deliveries/{second}"), None);
    assert_eq!(status, 200);
    let (status, _) = call(&host, "DELETE", &format!("/v1/deliveries/{second}"), None);
    assert_eq!(status, 404, "cleared once");
    healthy.store(true, Ordering::SeqCst);
    let first = dead[0]["id"].as_str().unwrap();
    let resent = scratch.run(&["deliveries", "resend", first, "--server", &host.url]);
    assert_eq!(resent.code, Some(0), "{resent:?}");
    let got = receiver.wait_for(5);
    assert_eq!(got[4].header("weft-delivery"), first, "the same id");
    assert_eq!(got[4].header("weft-attempt"), "1");
    assert_eq!(got[4].json()["payload"], 1);
    let (status, body) = call(
        &host,
        "POST",
        &format!("/v1/deliveries/{first}/resend"),
        None,
    );
    assert_eq!(status, 409, "only a dead letter is re-sent: {body}");
}

#[test]
fn an_await_step_waits_for_an_action_and_one_with_a_timeout_fails_cleanly() {
    let scratch = scratch(&[
        (
            "approval.yaml",
            "id: approval\nsteps:\n  - { id: approve, await: {}, with: { amount: \"${{ inputs.amount }}\" } }\n  - { id: after, uses: echo, with: \"${{ steps.approve.output }}\" }\n",
        ),
        (
            "hurry.yaml",
            "id: hurry\nsteps:\n  - { id: approve, await: { timeout: 1s } }\n",
        ),
    ]);
    let host = serve(&scratch, 0);
    let id = start(&host, "approval", json!({ "amount": 5 }));
    let waiting = wait_run(&host, &id, "waited", |b| {
        b["run"]["suspended"] == true && b["steps"][0]["awaiting"] == true
    });
    assert_eq!(waiting["steps"][0]["input"], json!({ "amount": 5 }));

    // Not waiting, unknown, malformed: clear answers, nothing changes.
    let (status, body) = call(
        &host,
        "POST",
        &format!("/v1/runs/{id}/steps/after/actions"),
        Some(r#"{"action": "complete"}"#),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("not_waiting")),
        "{body}"
    );
    let (status, _) = call(
        &host,
        "POST",
        "/v1/runs/no-such-run/steps/approve/actions",
        Some(r#"{"action": "skip"}"#),
    );
    assert_eq!(status, 404);
    let (status, body) = call(
        &host,
        "POST",
        &format!("/v1/runs/{id}/steps/approve/actions"),
        Some(r#"{"action": "complete", "outptu": 1}"#),
    );
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("outptu"),
        "{body}"
    );

    // Completing needs an output, and a bad one is blamed on --output.
    let refused = scratch.run(&["act", &id, "approve", "complete", "--server", &host.url]);
    assert_eq!(refused.code, Some(2), "{refused:?}");
    assert!(
        refused.stderr.contains("--output null"),
        "{}",
        refused.stderr
    );
    let refused = scratch.run(&[
        "act", &id, "approve", "complete", "--output", "{ok", "--server", &host.url,
    ]);
    assert_eq!(refused.code, Some(2), "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("--output: the text given is not valid JSON"),
        "{}",
        refused.stderr
    );

    // The server given as host:port, without its scheme.
    let bare = host.url.trim_start_matches("http://");
    assert_ne!(bare, host.url);
    let acted = scratch.run(&[
        "act",
        &id,
        "approve",
        "complete",
        "--output",
        r#"{"ok": true}"#,
        "--server",
        bare,
    ]);
    assert_eq!(acted.code, Some(0), "{acted:?}");
    assert_eq!(
        acted.stdout.trim(),
        format!("step approve of run {id} completed; the run goes on")
    );
    let done = ended(&host, &id);
    assert_eq!(done["run"]["state"], "succeeded", "{done}");
    assert_eq!(done["run"]["outputs"], json!({ "ok": true }));
    let (status, body) = call(
        &host,
        "POST",
        &format!("/v1/runs/{id}/steps/approve/actions"),
        Some(r#"{"action": "complete"}"#),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("run_ended")),
        "{body}"
    );

    // A wait with a timeout that passes.
    let id = start(&host, "hurry", json!({}));
    let done = ended(&host, &id);
    assert_eq!(done["run"]["state"], "failed");
    assert_eq!(
        done["run"]["error"]["error"]["code"], "await_timeout",
        "{done}"
    );
    let (status, _) = call(
        &host,
        "POST",
        &format!("/v1/runs/{id}/steps/approve/actions"),
        Some(r#"{"action": "skip"}"#),
    );
    assert_eq!(status, 409);

    // A failure answer is the step's error.
    let id = start(&host, "approval", json!({ "amount": 7 }));
    wait_run(&host, &id, "waited", |b| b["run"]["suspended"] == true);
    let (status, body) = call(
        &host,
        "POST",
        &format!("/v1/runs/{id}/steps/approve/actions"),
        Some(r#"{"action": "fail", "error": {"code": "denied", "message": "too much"}}"#),
    );
    assert_eq!(status, 200, "{body}");
    let done = ended(&host, &id);
    assert_eq!(done["run"]["error"]["error"]["code"], "denied");
}

#[test]
fn a_killed_and_restarted_serve_loses_no_delivery_and_repeats_only_with_the_same_id() {
    let scratch = scratch(&[(
        "burst.yaml",
        "id: burst\nsteps:\n  - { id: many, uses: emitter, with: { channel: burst, count: 300 } }\n",
    )]);
    let mut host = serve(&scratch, 0);
    let received = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&received);
    let receiver = Receiver::start(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        200
    });
    webhook(&host, "burst", &receiver, json!({}));
    let id = start(&host, "burst", json!({}));
    // Kill it while deliveries are under way.
    let deadline = Instant::now() + Duration::from_secs(60);
    while received.load(Ordering::SeqCst) < 50 {
        assert!(Instant::now() < deadline, "no deliveries");
        std::thread::sleep(Duration::from_millis(1));
    }
    host.child.kill().unwrap();
    host.child.wait().unwrap();
    let before = receiver.got().len();
    assert!(
        before < 300,
        "all delivered before the kill; nothing tested"
    );
    host = serve(&scratch, 1);
    // 300 distinct deliveries (the one in flight at the kill may come
    // twice, so counting requests would stop one short), then a while for
    // any late repeat.
    let distinct = || {
        let got = receiver.got();
        let ids: HashSet<_> = got
            .iter()
            .map(|r| r.header("weft-delivery").to_owned())
            .collect();
        if ids.len() >= 300 {
            Ok(())
        } else {
            Err(ids.len())
        }
    };
    wait(
        Duration::from_secs(60),
        Duration::from_millis(10),
        distinct,
        |n| format!("the receiver got {n} distinct deliveries, not 300"),
    );
    std::thread::sleep(Duration::from_millis(500));
    let got_all = receiver.got();
    let mut first_seen = Vec::new();
    let mut ids = HashSet::new();
    for request in &got_all {
        if ids.insert(request.header("weft-delivery").to_owned()) {
            first_seen.push(request.json()["payload"]["n"].as_u64().unwrap());
        }
    }
    assert_eq!(ids.len(), 300, "every message, once by id");
    assert_eq!(first_seen, (0..300).collect::<Vec<u64>>(), "in order");
    assert!(
        got_all.len() - 300 <= 1,
        "at most the one in flight at the kill is sent twice: {} requests",
        got_all.len()
    );
    let (_, shown) = call(&host, "GET", &format!("/v1/runs/{id}/messages"), None);
    assert_eq!(shown["messages"].as_array().unwrap().len(), 300);
}

#[test]
fn every_route_refuses_bad_input_clearly_and_the_openapi_document_matches() {
    let scratch = scratch(&[(
        "one.yaml",
        "id: one\nsteps:\n  - { id: tell, emit: events, with: 1 }\n",
    )]);
    let host = serve(&scratch, 0);
    let code = |(status, body): (u16, Value)| {
        (
            status,
            body["error"]["code"].as_str().unwrap_or("").to_owned(),
        )
    };
    let bad = |s: &str| (400, s.to_owned());
    assert_eq!(
        code(call(&host, "POST", "/v1/runs", Some("{"))),
        bad("invalid_request")
    );
    assert_eq!(
        code(call(&host, "POST", "/v1/runs", Some(r#"{"workflow": 1}"#))),
        bad("invalid_request")
    );
    // A one-line body's error names the field, not a column of it.
    let (_, body) = call(&host, "POST", "/v1/runs", Some(r#"{"input": {}}"#));
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("missing field `workflow`") && !message.contains("column"),
        "{body}"
    );
    let (_, body) = call(
        &host,
        "POST",
        "/v1/runs",
        Some(r#"{"workflow": "one", "inptu": {}}"#),
    );
    assert!(
        body["error"]["message"].as_str().unwrap().contains("inptu"),
        "{body}"
    );
    let big = format!(
        r#"{{"workflow": "one", "input": "{}"}}"#,
        "x".repeat(5 << 20)
    );
    assert_eq!(
        code(call(&host, "POST", "/v1/runs", Some(&big))),
        (413, "body_too_large".to_owned())
    );
    assert_eq!(
        code(call(&host, "POST", "/v1/subscriptions", Some("[]"))),
        bad("invalid_request")
    );
    let (status, body) = call(
        &host,
        "POST",
        "/v1/subscriptions",
        Some(r#"{"channel": "a/b"}"#),
    );
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("channel"),
        "{body}"
    );
    let (status, body) = call(
        &host,
        "POST",
        "/v1/subscriptions",
        Some(r#"{"channel": "a", "webhook": {"url": "ftp://x"}}"#),
    );
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("webhook.url"),
        "{body}"
    );
    for path in [
        "/v1/runs/nope",
        "/v1/runs/nope/steps",
        "/v1/runs/nope/messages",
    ] {
        assert_eq!(
            code(call(&host, "GET", path, None)),
            (404, "unknown_run".to_owned()),
            "{path}"
        );
    }
    assert_eq!(
        code(call(&host, "POST", "/v1/runs/nope/cancel", None)),
        (404, "unknown_run".to_owned())
    );
    for (method, path) in [
        ("GET", "/v1/deliveries/nope"),
        ("POST", "/v1/deliveries/nope/ack"),
        ("POST", "/v1/deliveries/nope/resend"),
        ("DELETE", "/v1/deliveries/nope"),
    ] {
        assert_eq!(
            code(call(&host, method, path, None)),
            (404, "unknown_delivery".to_owned()),
            "{method} {path}"
        );
    }
    assert_eq!(
        code(call(&host, "GET", "/v1/deliveries?state=lost", None)),
        bad("invalid_request")
    );
    assert_eq!(
        code(call(&host, "GET", "/v1/runs?since=yesterday", None)),
        bad("invalid_request")
    );
    // Actions on a finished run.
    let id = start(&host, "one", json!({}));
    ended(&host, &id);
    assert_eq!(
        code(call(
            &host,
            "POST",
            &format!("/v1/runs/{id}/steps/tell/actions"),
            Some(r#"{"action": "skip"}"#)
        )),
        (409, "run_ended".to_owned())
    );
    assert_eq!(
        code(call(&host, "POST", &format!("/v1/runs/{id}/cancel"), None)),
        (409, "run_ended".to_owned())
    );

    // Idempotent starts: one run per key.
    let start_keyed = || {
        call(
            &host,
            "POST",
            "/v1/runs",
            Some(r#"{"workflow": "one", "idempotency_key": "order-17"}"#),
        )
    };
    let (first, a) = start_keyed();
    let (second, b) = start_keyed();
    assert_eq!((first, second), (201, 200), "{a} {b}");
    assert_eq!(a["id"], b["id"]);
    assert_eq!(b["existing"], true);

    // Every operation in the document answers (not 405, not the fallback).
    let (status, spec) = call(&host, "GET", "/v1/openapi.json", None);
    assert_eq!(status, 200);
    let (mut operations, mut malformed_refused) = (0, 0);
    for (path, item) in spec["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let concrete = path
                .replace("{id}", "x")
                .replace("{step}", "s")
                .replace("{workflow}", "one")
                .replace("{trigger}", "t")
                .replace(
                    "{action}",
                    if path.starts_with("/v1/deliveries") {
                        "ack"
                    } else {
                        "pause"
                    },
                )
                .replace("{channel}", "c")
                .replace("{revision}", "1")
                .replace("{name}", "n");
            if path.ends_with("/events") {
                continue; // a stream; opened above
            }
            let body = (method == "post").then_some("{}");
            let (status, answer) = call(&host, &method.to_uppercase(), &concrete, body);
            assert_ne!(status, 405, "{method} {path}");
            assert_ne!(
                answer["error"]["code"], "not_found",
                "{method} {path}: {answer}"
            );
            // With a malformed query, every error is the JSON error and its
            // status is in the document.
            let malformed = format!("{concrete}?limit=many&keep=null&tenant=%FF&bogus=1");
            let (status, answer) = call(&host, &method.to_uppercase(), &malformed, body);
            if status >= 400 {
                assert!(
                    answer["error"]["code"].is_string(),
                    "{method} {malformed}: {status} is not the JSON error: {answer}"
                );
                let documented = item[method.as_str()]["responses"].as_object().unwrap();
                assert!(
                    documented.contains_key(&status.to_string()),
                    "{method} {path}: {status} {answer} is not in the document"
                );
                malformed_refused += usize::from(status == 400);
            }
            operations += 1;
        }
    }
    assert!(operations >= 20, "{operations}");
    // The routes that read a query refuse the malformed one.
    assert!(malformed_refused >= 15, "{malformed_refused}");
    // And a route it does not name is the fallback.
    assert_eq!(
        code(call(&host, "GET", "/v1/nothing", None)),
        (404, "not_found".to_owned())
    );
    // What axum refuses before a handler runs is the JSON error too: a
    // method the route does not take, a path segment that does not parse.
    assert_eq!(
        code(call(&host, "DELETE", "/v1/health", None)),
        (405, "method_not_allowed".to_owned())
    );
    assert_eq!(
        code(call(&host, "GET", "/v1/snapshots/n/revisions/first", None)),
        bad("invalid_request")
    );
    // A browser's own request for an icon is answered, with nothing.
    assert_eq!(call(&host, "GET", "/favicon.ico", None).0, 204);
}

#[test]
fn an_embedder_consumes_and_acks_in_process() {
    use weft::engine::Quiet;
    use weft::{Engine, PluginDir, RedbStore, Runtime, RuntimeConfig, SystemClock};

    let scratch = Scratch::new(&[]);
    let store = Arc::new(RedbStore::open(scratch.data_dir().join("weft.redb")).unwrap());
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let engine = Arc::new(
        Engine::new(
            store,
            PluginDir::new(runtime, scratch.plugins_dir()),
            Arc::new(SystemClock),
        )
        .unwrap(),
    );
    let hub = weft::hub::Hub::new(
        engine.committer(),
        Arc::clone(engine.egress()),
        engine.vault().clone(),
    );
    let mut consumer = hub
        .consumer(weft::core::tenant::DEFAULT, "inproc", "me", None)
        .unwrap();
    let workflow = Arc::new(
        weft::model::parse(
            "id: e\nsteps:\n  - { id: a, emit: inproc, with: 1 }\n  - { id: b, emit: inproc, with: 2 }\n",
            weft::model::Format::Yaml,
            "e.yaml",
        )
        .unwrap(),
    );
    let run = engine.run(workflow, json!({}), Box::new(Quiet)).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 2 {
        assert!(Instant::now() < deadline, "got {got:?}");
        got.extend(consumer.next(Duration::from_secs(1)).unwrap().unwrap());
    }
    let payloads: Vec<Value> = got.iter().map(|d| d.payload.clone()).collect();
    assert_eq!(payloads, [json!(1), json!(2)]);
    assert!(got.iter().all(|d| d.run == run.id && d.attempt == 1));
    let ids: Vec<String> = got.iter().map(|d| d.delivery.clone()).collect();
    for acked in hub.ack_all(&ids) {
        assert_eq!(acked.unwrap().state, weft::store::DeliveryState::Completed);
    }
    // Nothing is sent again once acked, even after its time to ack.
    assert!(
        consumer
            .next(Duration::from_millis(300))
            .unwrap()
            .unwrap()
            .is_empty()
    );
    let unknown = hub.ack("no-such-delivery").unwrap_err();
    assert!(
        unknown.to_string().contains("no-such-delivery"),
        "{unknown}"
    );
}

/// With a secrets key, a webhook's signing key is sealed in the store like
/// a secret: the store file never holds it in the clear, deliveries are
/// still signed with it, and the same subscription made again is kept.
#[test]
fn a_webhooks_signing_key_is_sealed_at_rest() {
    let scratch = scratch(&[(
        "one.yaml",
        "id: one\nsteps:\n  - { id: tell, emit: events, with: { hello: world } }\n",
    )]);
    let key = scratch.run(&["secrets", "new-key"]);
    assert_eq!(key.code, Some(0), "{key:?}");
    let key_file = scratch.file("secrets.key", key.stdout.trim());
    let host = crate::common::server::serve_with(
        &scratch,
        0,
        &["--secrets-key-file", key_file.to_str().unwrap()],
    );
    let receiver = Receiver::start(|_| 200);
    let signing = "wh-signing-5f3a9c71";
    let spec = json!({
        "channel": "events",
        "name": "hook",
        "webhook": { "url": receiver.url, "secret": signing },
    });
    let (status, made) = call(&host, "POST", "/v1/subscriptions", Some(&spec.to_string()));
    assert_eq!(status, 201, "{made}");
    // Shown once, in the clear, and never as sealed bytes.
    assert_eq!(made["subscription"]["target"]["secret"], signing);
    assert!(
        made["subscription"]["target"].get("sealed").is_none(),
        "{made}"
    );
    let (status, again) = call(&host, "POST", "/v1/subscriptions", Some(&spec.to_string()));
    assert_eq!(status, 201, "the same subscription again is kept: {again}");
    let (_, listed) = call(&host, "GET", "/v1/subscriptions?channel=events", None);
    assert!(
        listed["subscriptions"][0]["target"].get("sealed").is_none(),
        "{listed}"
    );

    let id = start(&host, "one", json!({}));
    assert_eq!(ended(&host, &id)["run"]["state"], "succeeded");
    let got = receiver.wait_for(1);
    assert_eq!(
        got[0].header("weft-signature"),
        weft::hub::sign(signing, &got[0].body)
    );
    drop(host);
    let store = std::fs::read(scratch.data_dir().join("weft.redb")).unwrap();
    assert!(
        !store
            .windows(signing.len())
            .any(|w| w == signing.as_bytes()),
        "the store holds the webhook's signing key in the clear"
    );

    // A rotation: the new key current, the old one previous; reseal; then
    // the new key alone still signs the webhook's deliveries.
    let new_key = scratch.run(&["secrets", "new-key"]);
    let new_file = scratch.file("secrets-2.key", new_key.stdout.trim());
    let host = crate::common::server::serve_with(
        &scratch,
        1,
        &[
            "--secrets-key-file",
            new_file.to_str().unwrap(),
            "--secrets-previous-key-file",
            key_file.to_str().unwrap(),
        ],
    );
    let address = crate::common::server::wait_for_address(&scratch).unwrap();
    let resealed = scratch.run(&["secrets", "reseal", "--server", &address]);
    assert_eq!(resealed.code, Some(0), "{resealed:?}");
    assert!(
        resealed.stdout.contains("and 1 webhook signing key(s)"),
        "{}",
        resealed.stdout
    );
    drop(host);
    let host = crate::common::server::serve_with(
        &scratch,
        2,
        &["--secrets-key-file", new_file.to_str().unwrap()],
    );
    let id = start(&host, "one", json!({}));
    assert_eq!(ended(&host, &id)["run"]["state"], "succeeded");
    let got = receiver.wait_for(2);
    assert_eq!(
        got[1].header("weft-signature"),
        weft::hub::sign(signing, &got[1].body)
    );
}

/// `weft tail` says what it follows, prints what comes after its
/// subscription, and its consumer is listed and removed with `weft
/// subscriptions`.
#[test]
fn weft_tail_follows_a_channel_and_its_consumer_can_be_removed() {
    let scratch = scratch(&[(
        "one.yaml",
        "id: one\nsteps:\n  - { id: tell, emit: news, with: { n: 1 } }\n",
    )]);
    let host = serve(&scratch, 0);
    let tail = scratch
        .weft()
        .args(["tail", "news", "--count", "1", "--server", &host.url])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once its subscription is there, a run's message reaches it.
    wait(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            let (_, listed) = call(&host, "GET", "/v1/subscriptions", None);
            if listed.to_string().contains("news/default") {
                Ok(())
            } else {
                Err(listed)
            }
        },
        |listed| format!("weft tail made no subscription: {listed}"),
    );
    ended(&host, &start(&host, "one", json!({})));
    let done = tail.wait_with_output().unwrap();
    assert!(done.status.success(), "{done:?}");
    let printed = String::from_utf8_lossy(&done.stdout);
    assert!(printed.contains(r#""n":1"#), "{printed}");
    let said = String::from_utf8_lossy(&done.stderr);
    assert!(
        said.contains("following channel news as consumer default")
            && said.contains("weft subscriptions remove news/default"),
        "{said}"
    );

    let listed = scratch.run(&["subscriptions", "list", "--server", &host.url]);
    assert!(listed.stdout.contains("news/default"), "{}", listed.stdout);
    let removed = scratch.run(&[
        "subscriptions",
        "remove",
        "news/default",
        "--server",
        &host.url,
    ]);
    assert_eq!(removed.code, Some(0), "{removed:?}");
    let listed = scratch.run(&["subscriptions", "list", "--server", &host.url]);
    assert_eq!(
        listed.stdout.trim(),
        "no subscriptions",
        "{}",
        listed.stdout
    );
    let again = scratch.run(&[
        "subscriptions",
        "remove",
        "news/default",
        "--server",
        &host.url,
    ]);
    assert_eq!(again.code, Some(2), "{again:?}");
}
