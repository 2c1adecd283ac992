//! Watching a host from outside: `GET /metrics` scraped under load and read
//! with a Prometheus parser, and the run event stream `GET /v1/events`
//! followed, filtered and resumed, through the API and the CLI.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::Scratch;
use crate::common::receiver::Receiver;
use crate::common::server::{Host, agent, run_ended, serve, serve_with, start_run};
use serde_json::{Value, json};

const LOAD: &str = "id: load\nsteps:\n  - { id: one, uses: echo, with: \"${{ inputs }}\" }\n  - { id: nap, sleep: 20ms }\n  - { id: two, uses: echo, with: \"${{ steps.one.output }}\" }\noutputs:\n  got: \"${{ steps.two.output }}\"\n";

const APPROVAL: &str = "id: approval\nsteps:\n  - { id: first, uses: echo, with: 1 }\n  - { id: approve, await: {} }\n  - { id: after, uses: echo, with: \"${{ steps.approve.output }}\" }\n";

fn scratch() -> Scratch {
    let scratch = Scratch::new(&["echo"]);
    let workflows = scratch.path().join("workflows");
    std::fs::create_dir_all(&workflows).unwrap();
    std::fs::write(workflows.join("load.yaml"), LOAD).unwrap();
    std::fs::write(workflows.join("approval.yaml"), APPROVAL).unwrap();
    scratch
}

fn scrape(host: &Host) -> prometheus_parse::Scrape {
    let mut response = agent().get(format!("{}/metrics", host.url)).call().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let kind = response
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    let text = response.body_mut().read_to_string().unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    prometheus_parse::Scrape::parse(lines).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The value of the sample `name` whose labels include `labels`, summed
/// over the rest.
fn sum(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(buckets) => {
                buckets.iter().map(|b| b.count).fold(0.0, f64::max)
            }
            prometheus_parse::Value::Summary(_) => 0.0,
        })
        .sum()
}

#[test]
fn a_scrape_under_load_parses_and_counts_what_ran() {
    let scratch = scratch();
    let host = serve(&scratch, 0);
    const RUNS: usize = 150;
    let (tx, rx) = mpsc::channel();
    let url = host.url.clone();
    let starter = std::thread::spawn(move || {
        let agent = agent();
        for n in 0..RUNS {
            let mut response = agent
                .post(format!("{url}/v1/runs"))
                .send_json(json!({ "workflow": "load", "input": { "n": n } }))
                .unwrap();
            let body: Value = response.body_mut().read_json().unwrap();
            tx.send(body["id"].as_str().unwrap().to_owned()).unwrap();
        }
    });
    // Scrapes while runs start, step and sleep: each parses.
    let mut scrapes = 0;
    while !starter.is_finished() || scrapes < 3 {
        let scrape = scrape(&host);
        // Families without labels are there from the start; labelled
        // ones once they have a sample.
        assert!(
            scrape.docs.contains_key("weft_runs_resident"),
            "{:?}",
            scrape.docs
        );
        scrapes += 1;
    }
    starter.join().unwrap();
    let ids: Vec<String> = rx.iter().collect();
    assert_eq!(ids.len(), RUNS);
    for id in &ids {
        assert_eq!(run_ended(&host, id)["run"]["state"], "succeeded");
    }

    let scrape = scrape(&host);
    let default = ("tenant", "default");
    let load = ("workflow", "load");
    assert_eq!(
        sum(&scrape, "weft_runs_started_total", &[default, load]),
        RUNS as f64
    );
    assert_eq!(
        sum(
            &scrape,
            "weft_runs_ended_total",
            &[default, load, ("state", "succeeded")]
        ),
        RUNS as f64
    );
    let echo = ("plugin", "echo");
    assert_eq!(
        sum(
            &scrape,
            "weft_step_attempts_total",
            &[default, echo, ("outcome", "ok")]
        ),
        2.0 * RUNS as f64
    );
    // Histograms: the count of the last bucket (`+Inf`) is every
    // observation.
    assert_eq!(
        sum(&scrape, "weft_step_seconds", &[default, echo]),
        2.0 * RUNS as f64
    );
    assert_eq!(
        sum(&scrape, "weft_guest_instantiate_seconds", &[default, echo]),
        2.0 * RUNS as f64
    );
    assert_eq!(
        sum(&scrape, "weft_guest_call_seconds", &[default, echo]),
        2.0 * RUNS as f64
    );
    // Each sleep's fire was durable, with its lag noted.
    assert!(sum(&scrape, "weft_timer_fire_lag_seconds", &[]) >= RUNS as f64);
    assert!(sum(&scrape, "weft_commit_batch_writes", &[]) > 0.0);
    assert!(sum(&scrape, "weft_commit_seconds", &[]) > 0.0);
    assert!(sum(&scrape, "weft_component_loads_total", &[]) >= 1.0);
    for gauge in [
        "weft_runs_ready",
        "weft_runs_resident",
        "weft_runs_parked",
        "weft_timers_pending",
    ] {
        assert_eq!(
            sum(&scrape, gauge, &[]),
            0.0,
            "{gauge} once every run ended"
        );
    }
    for state in ["pending", "in_flight", "dead"] {
        assert!(
            scrape
                .samples
                .iter()
                .any(|s| s.metric == "weft_deliveries" && s.labels.get("state") == Some(state)),
            "weft_deliveries{{state={state}}}"
        );
    }
    // Labels are bounded: no run id in any of them.
    for sample in &scrape.samples {
        for id in &ids {
            assert!(
                !format!("{:?}", sample.labels).contains(id.as_str()),
                "{sample:?}"
            );
        }
    }
}

/// An open event stream, read on a thread: its events as `(name, data)`.
struct Stream {
    events: mpsc::Receiver<(String, Value)>,
}

impl Stream {
    fn open(host: &Host, query: &str, last: Option<&str>) -> Stream {
        let mut request = agent().get(format!("{}/v1/events?{query}", host.url));
        if let Some(id) = last {
            request = request.header("last-event-id", id);
        }
        let response = request.call().unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let (tx, events) = mpsc::channel();
        std::thread::spawn(move || {
            let reader = BufReader::new(response.into_body().into_reader());
            let mut name = String::new();
            for line in reader.lines() {
                let Ok(line) = line else { return };
                if let Some(value) = line.strip_prefix("event:") {
                    name = value.trim().to_owned();
                } else if let Some(data) = line.strip_prefix("data:") {
                    let data: Value = serde_json::from_str(data.trim()).unwrap();
                    if tx.send((name.clone(), data)).is_err() {
                        return;
                    }
                }
            }
        });
        Stream { events }
    }

    /// Events until `done` says so (that one included).
    fn until(&self, done: impl Fn(&str, &Value) -> bool) -> Vec<(String, Value)> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut got = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (name, data) = self
                .events
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no more events; got {got:?}"));
            let stop = done(&name, &data);
            got.push((name, data));
            if stop {
                return got;
            }
        }
    }

    /// Whatever comes within `wait`.
    fn drain(&self, wait: Duration) -> Vec<(String, Value)> {
        let deadline = Instant::now() + wait;
        let mut got = Vec::new();
        while let Ok(event) = self
            .events
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            got.push(event);
        }
        got
    }
}

fn names(events: &[(String, Value)]) -> Vec<String> {
    events
        .iter()
        .map(|(name, data)| match data["step"]["path"].as_str() {
            Some(path) => format!("{name} {path}"),
            None => name.clone(),
        })
        .collect()
}

#[test]
fn the_event_stream_follows_a_run_and_resumes_after_the_last_id() {
    let scratch = scratch();
    let host = serve(&scratch, 0);
    let all = Stream::open(&host, "workflow=approval", None);
    let id = start_run(&host, "approval", &json!({}));
    let first = all.until(|name, _| name == "waiting");
    assert_eq!(
        names(&first),
        // The await's record starts a wait: it is told as `waiting` alone.
        ["started", "step_finished first", "waiting approve"],
        "{first:?}"
    );
    for (_, data) in &first {
        assert_eq!(
            (&data["run"], &data["workflow"]),
            (&json!(id), &json!("approval"))
        );
    }
    let ids: Vec<u64> = first
        .iter()
        .map(|(_, d)| d["id"].as_u64().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let last = ids.last().unwrap().to_string();
    drop(all);

    // While nobody listens, the run is answered and ends.
    let (status, body) = host.call(
        "POST",
        &format!("/v1/runs/{id}/steps/approve/actions"),
        Some(r#"{"action": "complete", "output": {"ok": true}}"#),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(run_ended(&host, &id)["run"]["state"], "succeeded");

    // Resumed after the last id seen: what happened meanwhile, once, in
    // order, ending with the run's end.
    let resumed = Stream::open(&host, "", Some(&last));
    let rest = resumed.until(|name, _| name == "ended");
    let rest_names = names(&rest);
    assert_eq!(
        rest_names.first().map(String::as_str),
        Some("step_finished approve"),
        "{rest:?}"
    );
    assert!(
        rest_names.contains(&"step_finished after".to_owned()),
        "{rest:?}"
    );
    assert_eq!(rest.last().unwrap().1["state"], "succeeded");
    let rest_ids: Vec<u64> = rest
        .iter()
        .map(|(_, d)| d["id"].as_u64().unwrap())
        .collect();
    assert!(rest_ids[0] > ids[ids.len() - 1], "{rest_ids:?}");
    assert!(rest_ids.windows(2).all(|w| w[0] < w[1]), "{rest_ids:?}");

    // Filters: only ends, only of one workflow; an id no host told is a
    // reset.
    let ends = Stream::open(&host, "kind=ended&workflow=load", None);
    let load = start_run(&host, "load", &json!({}));
    let other = start_run(&host, "approval", &json!({}));
    let got = ends.until(|name, _| name == "ended");
    assert_eq!(names(&got), ["ended"]);
    assert_eq!(got[0].1["run"], json!(load));
    assert!(
        ends.drain(Duration::from_millis(300))
            .iter()
            .all(|(_, d)| d["run"] != json!(other))
    );
    let lost = Stream::open(&host, "", Some("1"));
    let got = lost.until(|_, _| true);
    assert_eq!(got[0].0, "reset", "{got:?}");
    let (status, body) = host.call("GET", "/v1/events?kind=finished", None);
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_request")),
        "{body}"
    );
}

#[test]
fn weft_start_wait_and_runs_watch_follow_the_stream() {
    let scratch = scratch();
    let host = serve(&scratch, 0);
    let server = host.url.clone();

    // `weft runs watch RUN` prints each event of the run, and stops at its
    // end.
    let id = start_run(&host, "approval", &json!({}));
    let watch = scratch
        .weft()
        .args(["runs", "watch", &id, "--server", &server])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // It is open once the run is waiting; then the answer ends the run.
    crate::common::wait(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            let (_, body) = host.call("GET", &format!("/v1/runs/{id}/steps"), None);
            let waiting = body["steps"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["awaiting"] == true));
            if waiting { Ok(()) } else { Err(body) }
        },
        |body| format!("the run never waited: {body}"),
    );
    std::thread::sleep(Duration::from_millis(500));
    let (status, body) = host.call(
        "POST",
        &format!("/v1/runs/{id}/steps/approve/actions"),
        Some(r#"{"action": "complete"}"#),
    );
    assert_eq!(status, 200, "{body}");
    let output = watch.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.contains(&id) && last.contains("ended") && last.ends_with("succeeded"),
        "{stdout}"
    );
    assert!(stdout.contains("step_finished after"), "{stdout}");

    // A run that ended before the watch opens ends it at once.
    let watched = scratch.run(&["runs", "watch", &id, "--server", &server]);
    assert!(
        watched.stdout.contains("has ended: succeeded"),
        "{}",
        watched.stdout
    );

    // `weft start` prints the run's id (the answer with --json).
    let started = scratch.run(&["start", "load", "--server", &server]);
    assert_eq!(started.code, Some(0), "{}", started.stderr);
    let id = started.stdout.trim();
    assert_eq!(id.len(), 36, "{}", started.stdout);
    assert!(
        started.stderr.contains(&format!("weft runs watch {id}")),
        "{}",
        started.stderr
    );
    let started = scratch.run(&["start", "load", "--json", "--server", &server]);
    assert!(started.json()["id"].is_string(), "{}", started.stdout);

    // `weft start --wait` prints the outputs once the run ends.
    let started = scratch.run(&[
        "start",
        "load",
        "--input",
        r#"{"k": 7}"#,
        "--wait",
        "--server",
        &server,
    ]);
    assert_eq!(started.code, Some(0), "{}", started.stderr);
    assert_eq!(
        started.json(),
        json!({ "got": { "k": 7 } }),
        "{}",
        started.stdout
    );
}

#[test]
fn each_run_is_a_trace_sent_to_an_otlp_collector() {
    let scratch = scratch();
    // A collector on loopback: it takes OTLP/HTTP JSON and keeps it.
    let collector = Receiver::start(|_| 200);
    let base = collector.url.trim_end_matches("/hook").to_owned();
    let host = serve_with(&scratch, 0, &["--otlp-endpoint", &base]);
    // The caller's trace, which the request's span joins.
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let mut response = agent()
        .post(format!("{}/v1/runs", host.url))
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .header("content-type", "application/json")
        .send(json!({ "workflow": "approval", "input": {} }).to_string())
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let started: Value = serde_json::from_reader(response.body_mut().as_reader()).unwrap();
    let id = started["id"].as_str().unwrap().to_owned();
    crate::common::wait(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            let (_, body) = host.call("GET", "/v1/awaits", None);
            let waiting = body["awaits"].as_array().is_some_and(|a| !a.is_empty());
            if waiting { Ok(()) } else { Err(body) }
        },
        |body| format!("the run never waited: {body}"),
    );
    let (status, body) = host.call(
        "POST",
        &format!("/v1/runs/{id}/steps/approve/actions"),
        Some(r#"{"action": "complete", "output": 5}"#),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(run_ended(&host, &id)["run"]["state"], "succeeded");

    // Every span of a trace, as the collector got them.
    let trace = id.replace('-', "");
    let spans_of = |trace: &str| -> Vec<Value> {
        let mut spans = Vec::new();
        for request in collector.got() {
            assert!(
                request.header("content-type").contains("json"),
                "{request:?}"
            );
            let body = request.json();
            for resource in body["resourceSpans"].as_array().into_iter().flatten() {
                let service = &resource["resource"]["attributes"];
                assert!(service.to_string().contains("\"weft\""), "{service}");
                for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                    for span in scope["spans"].as_array().into_iter().flatten() {
                        if span["traceId"].as_str() == Some(trace) {
                            spans.push(span.clone());
                        }
                    }
                }
            }
        }
        spans
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let spans = loop {
        let spans = spans_of(&trace);
        if spans.iter().any(|s| s["name"] == "run approval") {
            break spans;
        }
        assert!(Instant::now() < deadline, "no root span; got {spans:#?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let root = spans.iter().find(|s| s["name"] == "run approval").unwrap();
    let names: BTreeSet<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from(["run approval", "step first", "step approve", "step after"]),
        "{spans:#?}"
    );
    // The attempts are the root's children, within its time.
    let root_id = root["spanId"].as_str().unwrap();
    let time = |s: &Value, field: &str| -> u128 {
        match &s[field] {
            Value::String(text) => text.parse().unwrap(),
            other => other.as_u64().unwrap().into(),
        }
    };
    for span in spans.iter().filter(|s| s["name"] != "run approval") {
        assert_eq!(span["parentSpanId"], root_id, "{span:#}");
        assert!(
            time(span, "startTimeUnixNano") >= time(root, "startTimeUnixNano")
                && time(span, "endTimeUnixNano") <= time(root, "endTimeUnixNano"),
            "{span:#} is not within {root:#}"
        );
    }
    // The wait and the resume are events of the root.
    let events: Vec<&str> = root["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(
        events.contains(&"waiting") && events.contains(&"resumed"),
        "{root:#}"
    );

    // The host's own span of the request that started the run: a server
    // span in the caller's trace, the child of the caller's span, naming
    // the route and its answer, and linked to the run's root span.
    let deadline = Instant::now() + Duration::from_secs(30);
    let request = loop {
        if let Some(span) = spans_of(caller_trace)
            .into_iter()
            .find(|s| s["name"] == "POST /v1/runs")
        {
            break span;
        }
        assert!(Instant::now() < deadline, "no span of the request");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(request["parentSpanId"], caller_span, "{request:#}");
    assert_eq!(request["kind"], 2, "a server span: {request:#}");
    let attribute = |name: &str| -> Value {
        request["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == name)
            .map(|a| a["value"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(
        attribute("http.route"),
        json!({ "stringValue": "/v1/runs" })
    );
    assert_eq!(
        attribute("http.request.method"),
        json!({ "stringValue": "POST" })
    );
    let status = attribute("http.response.status_code");
    assert_eq!(status, json!({ "intValue": "201" }), "{request:#}");
    assert_eq!(attribute("weft.run"), json!({ "stringValue": id }));
    let links = request["links"].as_array().unwrap();
    assert!(
        links
            .iter()
            .any(|l| l["traceId"] == trace.as_str() && l["spanId"] == root_id),
        "{request:#}"
    );
}

#[test]
fn each_run_that_ends_is_told_once_to_a_webhook_on_weft_runs_ended() {
    let scratch = scratch();
    // Fails on its outputs, after its steps: the end is the run's record
    // alone.
    scratch.file(
        "workflows/broken.yaml",
        "id: broken\nsteps:\n  - { id: one, uses: echo, with: 1 }\noutputs:\n  x: \"${{ steps.one.output.nope.deeper }}\"\n",
    );
    let host = serve(&scratch, 0);
    // A run that ended before anyone subscribed left no notice.
    let before = start_run(&host, "load", &json!({ "n": -1 }));
    run_ended(&host, &before);

    let receiver = Receiver::start(|n| if n % 7 == 3 { 503 } else { 200 });
    let (status, made) = host.call(
        "POST",
        "/v1/subscriptions",
        Some(
            &json!({
                "channel": "weft.runs.ended",
                "name": "ends",
                "webhook": { "url": receiver.url, "secret": "s3cret" },
                "backoff": "20ms",
            })
            .to_string(),
        ),
    );
    assert_eq!(status, 201, "{made}");
    // Only the host emits there: a workflow that would is refused.
    let (status, refused) = host.send(
        "/v1/workflows",
        "application/yaml",
        b"id: forger\nsteps:\n  - { id: tell, emit: weft.runs.ended, with: {} }\n",
    );
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("weft.runs.ended"),
        "{refused}"
    );

    let mut expected = std::collections::BTreeMap::new();
    for n in 0..12 {
        let id = start_run(&host, "load", &json!({ "n": n }));
        expected.insert(id, "succeeded");
    }
    for _ in 0..4 {
        let id = start_run(&host, "broken", &json!({}));
        expected.insert(id, "failed");
    }
    let mut waiting = Vec::new();
    for _ in 0..3 {
        waiting.push(start_run(&host, "approval", &json!({})));
    }
    for id in &expected.keys().cloned().collect::<Vec<_>>() {
        run_ended(&host, id);
    }
    for id in waiting {
        crate::common::wait(
            Duration::from_secs(30),
            Duration::from_millis(20),
            || {
                let (_, run) = host.call("GET", &format!("/v1/runs/{id}?steps=false"), None);
                if run["run"]["suspended"] == true {
                    Ok(())
                } else {
                    Err(run)
                }
            },
            |run| format!("run {id} never waited: {run}"),
        );
        let (status, body) = host.call("POST", &format!("/v1/runs/{id}/cancel"), Some("{}"));
        assert_eq!(status, 200, "{body}");
        expected.insert(id, "cancelled");
    }

    // Each run is told once, whatever the receiver's failures cost in
    // retries (a retry keeps its delivery id).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut told = std::collections::BTreeMap::new();
    while told.len() < expected.len() {
        assert!(
            Instant::now() < deadline,
            "told {told:#?}, expected {expected:#?}"
        );
        told.clear();
        for request in receiver.got() {
            assert_eq!(
                request.header("weft-signature"),
                weft::hub::sign("s3cret", &request.body)
            );
            let body = request.json();
            let payload = &body["payload"];
            let run = payload["run"].as_str().unwrap().to_owned();
            let delivery = request.header("weft-delivery").to_owned();
            let seen = told
                .entry(run.clone())
                .or_insert((delivery.clone(), payload.clone()));
            assert_eq!(seen.0, delivery, "run {run} was told in two deliveries");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !told.contains_key(&before),
        "a run ended before the subscription"
    );
    for (run, state) in &expected {
        let (_, payload) = &told[run];
        assert_eq!(payload["state"], *state, "{payload}");
        assert!(
            payload["ended_at"].is_u64() && payload["created_at"].is_u64(),
            "{payload}"
        );
        match *state {
            "succeeded" => {
                assert_eq!(payload["workflow"], "load");
                assert!(payload["outputs"]["got"]["n"].is_i64(), "{payload}");
            }
            "failed" => {
                assert_eq!(payload["workflow"], "broken");
                assert!(payload["error"]["error"]["code"].is_string(), "{payload}");
            }
            _ => assert_eq!(payload["workflow"], "approval"),
        }
    }
    // The notices are messages of the runs that ended, listed with them.
    let some = expected.keys().next().unwrap();
    let (_, messages) = host.call("GET", &format!("/v1/runs/{some}/messages"), None);
    assert_eq!(
        messages["messages"][0]["channel"], "weft.runs.ended",
        "{messages}"
    );
    assert_eq!(messages["messages"][0]["step"], "@end", "{messages}");
}
