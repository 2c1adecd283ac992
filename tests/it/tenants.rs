//! Tenants, end to end, on a real `weft serve`: tokens and roles, and a
//! walk of every route of the OpenAPI document with tenant B's token
//! against tenant A's objects. Each answers `404` as if the object did not
//! exist, lists never show A's objects, and A's objects are as they were
//! afterwards. A route the table does not cover fails the test.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::server::{Host, agent, run_ended, serve, serve_with, start_run};
use crate::common::{Scratch, guest_bytes, wait};

/// `method path [body]` with `token` (none: no header): the status, the
/// JSON answer, and its `Retry-After`.
pub(crate) fn call_as(
    host: &Host,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let (status, body, _) = call_full(host, token, method, path, body);
    (status, body)
}

fn call_full(
    host: &Host,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value, Option<String>) {
    let url = format!("{}{path}", host.url);
    let agent = agent();
    let bearer = token.map(|t| format!("Bearer {t}"));
    let sent = match (method, body) {
        ("POST", Some(body)) => {
            let mut request = agent.post(&url).header("content-type", "application/json");
            if let Some(b) = &bearer {
                request = request.header("authorization", b);
            }
            request.send(body.to_string())
        }
        ("POST", None) => {
            let mut request = agent.post(&url);
            if let Some(b) = &bearer {
                request = request.header("authorization", b);
            }
            request.send_empty()
        }
        ("PUT", Some(body)) => {
            let mut request = agent.put(&url).header("content-type", "application/json");
            if let Some(b) = &bearer {
                request = request.header("authorization", b);
            }
            request.send(body.to_string())
        }
        ("DELETE", _) => {
            let mut request = agent.delete(&url);
            if let Some(b) = &bearer {
                request = request.header("authorization", b);
            }
            request.call()
        }
        _ => {
            let mut request = agent.get(&url);
            if let Some(b) = &bearer {
                request = request.header("authorization", b);
            }
            request.call()
        }
    };
    let mut response = sent.unwrap();
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        retry,
    )
}

/// POSTs raw bytes as `content_type` with `token`.
pub(crate) fn send_as(
    host: &Host,
    token: &str,
    path: &str,
    content_type: &str,
    bytes: &[u8],
) -> (u16, Value) {
    let mut response = agent()
        .post(format!("{}{path}", host.url))
        .header("content-type", content_type)
        .header("authorization", format!("Bearer {token}"))
        .send(bytes)
        .unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Makes a token over the API as `by`: the whole token and its id.
fn token(
    host: &Host,
    by: &str,
    tenant: &str,
    role: &str,
    expires: Option<&str>,
) -> (String, String) {
    let (status, body) = call_as(
        host,
        Some(by),
        "POST",
        "/v1/tokens",
        Some(&json!({ "tenant": tenant, "role": role, "expires": expires })),
    );
    assert_eq!(status, 201, "{body}");
    let made = &body["token"];
    assert!(
        made.get("hash").is_none(),
        "the hash is never shown: {made}"
    );
    (
        made["token"].as_str().unwrap().to_owned(),
        made["id"].as_str().unwrap().to_owned(),
    )
}

fn start(host: &Host, token: &str, workflow: &str, key: Option<&str>) -> (u16, Value) {
    call_as(
        host,
        Some(token),
        "POST",
        "/v1/runs",
        Some(&json!({ "workflow": workflow, "idempotency_key": key })),
    )
}

/// Waits for run `id` (seen with `token`) to pass `ready`.
fn wait_run(host: &Host, token: &str, id: &str, ready: impl Fn(&Value) -> bool) -> Value {
    wait(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            let (status, body) = call_as(host, Some(token), "GET", &format!("/v1/runs/{id}"), None);
            if status == 200 && ready(&body) {
                Ok(body)
            } else {
                Err(body)
            }
        },
        |body| format!("run {id} never got there: {body}"),
    )
}

/// The output of step `step` of a run's answer.
fn output<'a>(run: &'a Value, step: &str) -> &'a Value {
    run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|s| s["step_id"] == step && !s["output"].is_null())
        .map_or(&Value::Null, |s| &s["output"])
}

const A_FLOW: &str = "id: a-flow\nsteps:\n  - { id: count, uses: counter, with: { key: hits } }\n  - { id: who, uses: probe }\n  - { id: tell, emit: a-news, with: { n: 1 } }\n  - { id: approve, await: {} }\n";

/// What a route must answer to tenant B.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// `/v1/health`, the document: no token needed.
    Open,
    /// A listing: `200`, and nothing of A's in it.
    List,
    /// `404`, with the code a made-up id gets.
    Missing,
    /// `403`: an admin's route, which an owner may not use.
    Forbidden,
    /// B's own object is made: `2xx`.
    Own,
    /// An event stream of B's own channel: nothing of A's comes.
    Stream,
}

/// One request of the walk: the route as the document names it, the
/// request with A's objects in it, the same request with made-up ones.
struct Probe {
    method: &'static str,
    route: &'static str,
    path: String,
    twin: Option<String>,
    body: Option<Value>,
    expect: Expect,
}

#[test]
fn a_tenant_sees_none_of_another_tenants_objects_on_any_route() {
    let scratch = Scratch::new(&["counter", "probe", "echo", "emitter"]);
    // The first token, written into the store before the host starts: from
    // then on every request needs one.
    let made = scratch.run(&["tokens", "create", "--local", "--role", "admin"]);
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    let admin = made.stdout.trim().to_owned();
    let key = scratch.run(&["secrets", "new-key"]);
    let key_file = scratch.file("secrets.key", key.stdout.trim());
    let host = serve_with(
        &scratch,
        0,
        &["--secrets-key-file", key_file.to_str().unwrap()],
    );

    // No token, or a bad one: 401 with a code that says which.
    for (header, code) in [
        (None, "missing_token"),
        (Some("garbage"), "malformed_token"),
        (Some("weft_0123456789ab_00"), "unknown_token"),
    ] {
        let (status, body) = call_as(&host, header, "GET", "/v1/runs", None);
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (401, Some(code)),
            "{body}"
        );
    }
    let (status, _) = call_as(&host, None, "GET", "/v1/health", None);
    assert_eq!(status, 200);

    for name in ["tenant-a", "tenant-b"] {
        let (status, body) = call_as(
            &host,
            Some(&admin),
            "POST",
            "/v1/tenants",
            Some(&json!({ "name": name })),
        );
        assert_eq!(status, 201, "{body}");
    }
    // Tenant A's webhook goes to a loopback address, which a tenant other
    // than the host's own reaches only if its egress policy names it.
    let (status, body) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tenants/tenant-a/quota",
        Some(&json!({ "egress": ["http://127.0.0.1:9"] })),
    );
    assert_eq!(status, 200, "{body}");
    let (a, a_token_id) = token(&host, &admin, "tenant-a", "owner", None);
    let (b, _) = token(&host, &admin, "tenant-b", "owner", None);

    // Tenant A: a workflow, its own plugin, a run waiting at an await
    // step, an SSE subscription and a webhook whose delivery dies, a
    // trigger, and a reader's token.
    let (status, body) = send_as(
        &host,
        &a,
        "/v1/workflows",
        "application/yaml",
        A_FLOW.as_bytes(),
    );
    assert_eq!(status, 201, "{body}");
    let a_digest = body["workflow"]["digest"].as_str().unwrap().to_owned();
    let (status, body) = send_as(
        &host,
        &a,
        "/v1/plugins",
        "application/wasm",
        &guest_bytes("flaky"),
    );
    assert_eq!(status, 201, "{body}");
    let a_plugin = body["plugin"]["digest"].as_str().unwrap().to_owned();
    for subscription in [
        json!({ "channel": "a-news", "name": "a-reader" }),
        json!({ "channel": "a-news", "name": "a-hook", "max_attempts": 1, "webhook": { "url": "http://127.0.0.1:9/a-hook-url" } }),
    ] {
        let (status, body) = call_as(
            &host,
            Some(&a),
            "POST",
            "/v1/subscriptions",
            Some(&subscription),
        );
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = call_as(
        &host,
        Some(&a),
        "POST",
        "/v1/schedules",
        Some(
            &json!({ "workflow": "a-flow", "schedule": { "id": "a-nightly", "cron": "0 0 0 1 1 *" } }),
        ),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = start(&host, &a, "a-flow", Some("k1"));
    assert_eq!(status, 201, "{body}");
    let a_run = body["id"].as_str().unwrap().to_owned();
    let seen = wait_run(&host, &a, &a_run, |r| {
        r["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["step_id"] == "approve")
    });
    assert_eq!(output(&seen, "count")["value"], 1);
    assert_eq!(
        output(&seen, "who")["tenant"],
        "tenant-a",
        "the step context carries the tenant"
    );
    assert_eq!(
        output(&seen, "who")["workflow"],
        "a-flow",
        "and the workflow's bare id"
    );
    assert_eq!(seen["run"]["workflow"], "a-flow");
    let dead = wait(
        Duration::from_secs(60),
        Duration::from_millis(50),
        || {
            let (_, body) = call_as(&host, Some(&a), "GET", "/v1/deliveries?state=error", None);
            match body["deliveries"].as_array() {
                Some(list) if !list.is_empty() => Ok(list[0]["id"].as_str().unwrap().to_owned()),
                _ => Err(body),
            }
        },
        |body| format!("A's webhook delivery never died: {body}"),
    );
    let (_, body) = call_as(&host, Some(&a), "GET", "/v1/deliveries", None);
    let a_deliveries: Vec<String> = body["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(a_deliveries.len(), 2, "{body}");
    let live = a_deliveries.iter().find(|d| **d != dead).unwrap().clone();
    let (_, body) = call_as(
        &host,
        Some(&a),
        "GET",
        &format!("/v1/runs/{a_run}/messages"),
        None,
    );
    let a_message = body["messages"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(body["messages"][0]["channel"], "a-news", "{body}");
    // And a secret.
    let (status, body) = call_as(
        &host,
        Some(&a),
        "PUT",
        "/v1/secrets/a-stripe",
        Some(&json!({ "value": "a-secret-value-5c2e" })),
    );
    assert_eq!(status, 200, "{body}");
    let a_secret_set = body["secret"]["updated_at"].clone();
    // And a snapshot store, in two revisions.
    for text in [
        r#"{"a-rate-key": "a-rate-value-9f1"}"#,
        r#"{"a-rate-key": "a-rate-value-9f2"}"#,
    ] {
        let (status, body) = send_as(
            &host,
            &a,
            "/v1/snapshots/a-rates",
            "application/json",
            text.as_bytes(),
        );
        assert_eq!(status, 201, "{body}");
    }

    // What must never show in an answer to B.
    let secrets: Vec<String> = [
        a_run.clone(),
        a_token_id.clone(),
        a_digest.clone(),
        a_plugin.clone(),
        a_message.clone(),
        "a-hook-url".to_owned(),
        "flaky".to_owned(),
        "a-nightly".to_owned(),
        "tenant-a".to_owned(),
        "a-stripe".to_owned(),
        "a-secret-value-5c2e".to_owned(),
        "a-rates".to_owned(),
        "a-rate-key".to_owned(),
        "a-rate-value-9f".to_owned(),
    ]
    .into_iter()
    .chain(a_deliveries.iter().cloned())
    .collect();
    let leaks = |answer: &Value| -> Vec<String> {
        let text = answer.to_string();
        secrets
            .iter()
            .filter(|s| text.contains(s.as_str()))
            .cloned()
            .collect()
    };

    let made_up = "01a00000-0000-7000-8000-000000000000";
    let probes = vec![
        Probe {
            method: "GET",
            route: "/v1/health",
            path: "/v1/health".into(),
            twin: None,
            body: None,
            expect: Expect::Open,
        },
        Probe {
            method: "GET",
            route: "/v1/openapi.json",
            path: "/v1/openapi.json".into(),
            twin: None,
            body: None,
            expect: Expect::Open,
        },
        Probe {
            method: "GET",
            route: "/v1/workflows",
            path: "/v1/workflows".into(),
            twin: None,
            body: None,
            expect: Expect::List,
        },
        Probe {
            method: "GET",
            route: "/v1/plugins",
            path: "/v1/plugins".into(),
            twin: None,
            body: None,
            expect: Expect::List,
        },
        Probe {
            method: "GET",
            route: "/v1/runs",
            path: "/v1/runs?workflow=a-flow".into(),
            twin: None,
            body: None,
            expect: Expect::List,
        },
        Probe {
            method: "GET",
            route: "/v1/schedules",
            path: "/v1/schedules".into(),
            twin: None,
            body: None,
            expect: Expect::List,
        },
        Probe {
            method: "GET",
            route: "/v1/subscriptions",
            path: "/v1/subscriptions?channel=a-news".into(),
            twin: None,
            body: None,
            expect: Expect::List,
        },
        Probe {
            method: "GET",
            route: "/v1/deliveries",
            path: "/v1/deliveries?subscription=a-news/a-reader".into(),
            twin: None,
            body: None,
            expect: Expect::List,
        },
        Probe {
            method: "GET",
            route: "/v1/tokens",
            path: "/v1/tokens".into(),
            twin: None,
            body: None,
            expect: Expect::List,
        },
        Probe {
            method: "GET",
            route: "/v1/audit",
            path: "/v1/audit".into(),
            twin: None,
            body: None,
            expect: Expect::List,
        },
        Probe {
            method: "POST",
            route: "/v1/acks",
            path: "/v1/acks".into(),
            twin: None,
            body: Some(json!({ "deliveries": [live] })),
            expect: Expect::List,
        },
        Probe {
            method: "GET",
            route: "/v1/workflows/{id}",
            path: "/v1/workflows/a-flow".into(),
            twin: Some("/v1/workflows/no-such-flow".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/workflows/{id}/migrate",
            path: "/v1/workflows/a-flow/migrate".into(),
            twin: Some("/v1/workflows/no-such-flow/migrate".into()),
            body: Some(json!({ "from_revision": 1, "to_revision": 2 })),
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/runs",
            path: "/v1/runs".into(),
            twin: None,
            body: Some(json!({ "workflow": "a-flow" })),
            expect: Expect::Missing,
        },
        Probe {
            method: "GET",
            route: "/v1/runs/{id}",
            path: format!("/v1/runs/{a_run}"),
            twin: Some(format!("/v1/runs/{made_up}")),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "GET",
            route: "/v1/runs/{id}/steps",
            path: format!("/v1/runs/{a_run}/steps"),
            twin: Some(format!("/v1/runs/{made_up}/steps")),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "GET",
            route: "/v1/runs/{id}/graph",
            path: format!("/v1/runs/{a_run}/graph"),
            twin: Some(format!("/v1/runs/{made_up}/graph")),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "GET",
            route: "/v1/awaits",
            path: "/v1/awaits".into(),
            twin: None,
            body: None,
            expect: Expect::List,
        },
        Probe {
            method: "POST",
            route: "/v1/runs/{id}/steps/{step}/actions",
            path: format!("/v1/runs/{a_run}/steps/approve/actions"),
            twin: Some(format!("/v1/runs/{made_up}/steps/approve/actions")),
            body: Some(json!({ "action": "complete", "output": 1 })),
            expect: Expect::Missing,
        },
        Probe {
            method: "GET",
            route: "/v1/runs/{id}/messages",
            path: format!("/v1/runs/{a_run}/messages"),
            twin: Some(format!("/v1/runs/{made_up}/messages")),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/runs/bulk",
            path: "/v1/runs/bulk".into(),
            twin: None,
            body: Some(json!({ "action": "cancel", "filter": { "workflow": "a-flow" } })),
            expect: Expect::List,
        },
        Probe {
            method: "POST",
            route: "/v1/runs/{id}/cancel",
            path: format!("/v1/runs/{a_run}/cancel"),
            twin: Some(format!("/v1/runs/{made_up}/cancel")),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/runs/{id}/retry",
            path: format!("/v1/runs/{a_run}/retry"),
            twin: Some(format!("/v1/runs/{made_up}/retry")),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/runs/{id}/pause",
            path: format!("/v1/runs/{a_run}/pause"),
            twin: Some(format!("/v1/runs/{made_up}/pause")),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/runs/{id}/resume",
            path: format!("/v1/runs/{a_run}/resume"),
            twin: Some(format!("/v1/runs/{made_up}/resume")),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "DELETE",
            route: "/v1/runs/{id}",
            path: format!("/v1/runs/{a_run}"),
            twin: Some(format!("/v1/runs/{made_up}")),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/schedules",
            path: "/v1/schedules".into(),
            twin: None,
            body: Some(
                json!({ "workflow": "a-flow", "schedule": { "id": "x", "cron": "0 0 0 1 1 *" } }),
            ),
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/schedules/{workflow}/{trigger}/{action}",
            path: "/v1/schedules/a-flow/a-nightly/pause".into(),
            twin: Some("/v1/schedules/no-flow/a-nightly/pause".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "DELETE",
            route: "/v1/schedules/{workflow}/{trigger}",
            path: "/v1/schedules/a-flow/a-nightly".into(),
            twin: Some("/v1/schedules/no-flow/a-nightly".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "DELETE",
            route: "/v1/subscriptions/{channel}/{name}",
            path: "/v1/subscriptions/a-news/a-reader".into(),
            twin: Some("/v1/subscriptions/no-news/a-reader".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "GET",
            route: "/v1/deliveries/{id}",
            path: format!("/v1/deliveries/{live}"),
            twin: Some(format!("/v1/deliveries/{made_up}")),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "DELETE",
            route: "/v1/deliveries/{id}",
            path: format!("/v1/deliveries/{dead}"),
            twin: Some(format!("/v1/deliveries/{made_up}")),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/deliveries/{id}/{action}",
            path: format!("/v1/deliveries/{dead}/resend"),
            twin: Some(format!("/v1/deliveries/{made_up}/resend")),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/tokens/{id}/revoke",
            path: format!("/v1/tokens/{a_token_id}/revoke"),
            twin: Some("/v1/tokens/0123456789ab/revoke".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "GET",
            route: "/v1/tenants/{tenant}/usage",
            path: "/v1/tenants/tenant-a/usage".into(),
            twin: Some("/v1/tenants/no-tenant/usage".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "GET",
            route: "/v1/tenants",
            path: "/v1/tenants".into(),
            twin: None,
            body: None,
            expect: Expect::Forbidden,
        },
        Probe {
            method: "POST",
            route: "/v1/tenants",
            path: "/v1/tenants".into(),
            twin: None,
            body: Some(json!({ "name": "tenant-c" })),
            expect: Expect::Forbidden,
        },
        Probe {
            method: "DELETE",
            route: "/v1/tenants/{tenant}",
            path: "/v1/tenants/tenant-a".into(),
            twin: None,
            body: None,
            expect: Expect::Forbidden,
        },
        Probe {
            method: "POST",
            route: "/v1/tenants/{tenant}/quota",
            path: "/v1/tenants/tenant-a/quota".into(),
            twin: None,
            body: Some(json!({ "max_plugins": 0 })),
            expect: Expect::Forbidden,
        },
        Probe {
            method: "POST",
            route: "/v1/workflows",
            path: "/v1/workflows".into(),
            twin: None,
            body: None,
            expect: Expect::Own,
        },
        Probe {
            method: "POST",
            route: "/v1/plugins",
            path: "/v1/plugins".into(),
            twin: None,
            body: None,
            expect: Expect::Own,
        },
        Probe {
            method: "POST",
            route: "/v1/subscriptions",
            path: "/v1/subscriptions".into(),
            twin: None,
            body: Some(json!({ "channel": "a-news", "name": "a-reader" })),
            expect: Expect::Own,
        },
        Probe {
            method: "POST",
            route: "/v1/tokens",
            path: "/v1/tokens".into(),
            twin: None,
            body: Some(json!({ "role": "reader" })),
            expect: Expect::Own,
        },
        Probe {
            method: "GET",
            route: "/v1/secrets",
            path: "/v1/secrets".into(),
            twin: None,
            body: None,
            expect: Expect::List,
        },
        Probe {
            method: "GET",
            route: "/v1/secrets",
            path: "/v1/secrets?tenant=tenant-a".into(),
            twin: Some("/v1/secrets?tenant=no-tenant".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "PUT",
            route: "/v1/secrets/{name}",
            path: "/v1/secrets/a-stripe?tenant=tenant-a".into(),
            twin: Some("/v1/secrets/a-stripe?tenant=no-tenant".into()),
            body: Some(json!({ "value": "from-b" })),
            expect: Expect::Missing,
        },
        Probe {
            method: "DELETE",
            route: "/v1/secrets/{name}",
            path: "/v1/secrets/a-stripe?tenant=tenant-a".into(),
            twin: Some("/v1/secrets/a-stripe?tenant=no-tenant".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "DELETE",
            route: "/v1/secrets/{name}",
            path: "/v1/secrets/a-stripe".into(),
            twin: Some("/v1/secrets/no-such-secret".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/secrets/{name}/grants",
            path: "/v1/secrets/a-stripe/grants".into(),
            twin: Some("/v1/secrets/no-such-secret/grants".into()),
            body: Some(json!({ "plugin": "echo" })),
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/secrets/{name}/grants",
            path: "/v1/secrets/a-stripe/grants?tenant=tenant-a".into(),
            twin: Some("/v1/secrets/a-stripe/grants?tenant=no-tenant".into()),
            body: Some(json!({ "plugin": "echo" })),
            expect: Expect::Missing,
        },
        Probe {
            method: "DELETE",
            route: "/v1/secrets/{name}/grants/{plugin}",
            path: "/v1/secrets/a-stripe/grants/echo".into(),
            twin: Some("/v1/secrets/no-such-secret/grants/echo".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/secrets/reseal",
            path: "/v1/secrets/reseal?tenant=tenant-a".into(),
            twin: Some("/v1/secrets/reseal?tenant=no-tenant".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "PUT",
            route: "/v1/secrets/{name}",
            path: "/v1/secrets/a-stripe".into(),
            twin: None,
            body: Some(json!({ "value": "b-own-value" })),
            expect: Expect::Own,
        },
        Probe {
            method: "GET",
            route: "/v1/snapshots",
            path: "/v1/snapshots".into(),
            twin: None,
            body: None,
            expect: Expect::List,
        },
        Probe {
            method: "GET",
            route: "/v1/snapshots/{name}",
            path: "/v1/snapshots/a-rates".into(),
            twin: Some("/v1/snapshots/no-such-store".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "GET",
            route: "/v1/snapshots/{name}/revisions/{revision}",
            path: "/v1/snapshots/a-rates/revisions/1".into(),
            twin: Some("/v1/snapshots/no-such-store/revisions/1".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "GET",
            route: "/v1/snapshots/{name}/diff",
            path: "/v1/snapshots/a-rates/diff?from=1&to=2".into(),
            twin: Some("/v1/snapshots/no-such-store/diff?from=1&to=2".into()),
            body: None,
            expect: Expect::Missing,
        },
        Probe {
            method: "POST",
            route: "/v1/snapshots/{name}",
            path: "/v1/snapshots/b-rates".into(),
            twin: None,
            body: Some(json!({ "b-key": 1 })),
            expect: Expect::Own,
        },
        Probe {
            method: "GET",
            route: "/v1/channels/{channel}/events",
            path: "/v1/channels/a-news/events?consumer=a-reader".into(),
            twin: None,
            body: None,
            expect: Expect::Stream,
        },
        // Every event this host kept, and those of A's run by name.
        Probe {
            method: "GET",
            route: "/v1/events",
            path: "/v1/events?after=0".into(),
            twin: None,
            body: None,
            expect: Expect::Stream,
        },
        Probe {
            method: "GET",
            route: "/v1/events",
            path: format!("/v1/events?after=0&run={a_run}"),
            twin: None,
            body: None,
            expect: Expect::Stream,
        },
        Probe {
            method: "GET",
            route: "/metrics",
            path: "/metrics".into(),
            twin: None,
            body: None,
            expect: Expect::Forbidden,
        },
    ];

    // The table covers every operation of the document, and no other.
    let (_, document) = call_as(&host, None, "GET", "/v1/openapi.json", None);
    let documented: BTreeSet<(String, String)> = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(|method| (method.to_uppercase(), path.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    let covered: BTreeSet<(String, String)> = probes
        .iter()
        .map(|p| (p.method.to_owned(), p.route.to_owned()))
        .collect();
    assert_eq!(
        covered, documented,
        "the walk must cover every route of the document"
    );

    for probe in &probes {
        let what = format!("{} {} (as {})", probe.method, probe.path, probe.route);
        let (status, body) = match (probe.route, probe.expect) {
            ("/v1/workflows", Expect::Own) => send_as(
                &host,
                &b,
                "/v1/workflows",
                "application/yaml",
                b"id: b-flow\nsteps:\n  - { id: who, uses: probe }\n",
            ),
            ("/v1/plugins", Expect::Own) => send_as(
                &host,
                &b,
                "/v1/plugins",
                "application/wasm",
                &guest_bytes("echo"),
            ),
            (_, Expect::Stream) => {
                assert!(
                    stream_is_empty(&host, &b, &probe.path),
                    "{what}: A's message reached B"
                );
                continue;
            }
            _ => call_as(
                &host,
                Some(&b),
                probe.method,
                &probe.path,
                probe.body.as_ref(),
            ),
        };
        // What B sent may come back (an ack's answer names its id).
        let sent = format!(
            "{}{}",
            probe.path,
            probe
                .body
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default()
        );
        let leaked: Vec<String> = leaks(&body)
            .into_iter()
            .filter(|s| !sent.contains(s.as_str()))
            .collect();
        assert!(leaked.is_empty(), "{what} shows A's {leaked:?}: {body}");
        match probe.expect {
            Expect::Open | Expect::List => assert_eq!(status, 200, "{what}: {body}"),
            Expect::Forbidden => assert_eq!(status, 403, "{what}: {body}"),
            Expect::Own => assert!((200..300).contains(&status), "{what}: {body}"),
            Expect::Missing => {
                assert_eq!(status, 404, "{what}: {body}");
                if let Some(twin) = &probe.twin {
                    let (twin_status, twin_body) =
                        call_as(&host, Some(&b), probe.method, twin, probe.body.as_ref());
                    assert_eq!(
                        (twin_status, &twin_body["error"]["code"]),
                        (status, &body["error"]["code"]),
                        "{what}: A's object must answer as a made-up one does: {twin_body}"
                    );
                }
            }
            Expect::Stream => unreachable!(),
        }
        if probe.route == "/v1/acks" {
            assert_eq!(body["acks"][0]["error"], "unknown_delivery", "{body}");
        }
    }

    // A's own stream has its run's events: the walk's empty streams of B
    // are not empty for want of events.
    assert!(
        !stream_is_empty(&host, &a, &format!("/v1/events?after=0&run={a_run}")),
        "A hears its run's events"
    );

    // A's objects are as they were.
    let (_, stores) = call_as(&host, Some(&a), "GET", "/v1/snapshots", None);
    let stores = stores["snapshots"].as_array().unwrap().clone();
    assert_eq!(stores.len(), 1, "{stores:?}");
    assert_eq!(
        (&stores[0]["store"], &stores[0]["revision"]),
        (&json!("a-rates"), &json!(2))
    );
    let (_, listed) = call_as(&host, Some(&a), "GET", "/v1/secrets", None);
    assert_eq!(
        listed["secrets"],
        json!([{ "name": "a-stripe", "updated_at": a_secret_set, "grants": [] }]),
        "{listed}"
    );
    let (_, run) = call_as(&host, Some(&a), "GET", &format!("/v1/runs/{a_run}"), None);
    assert_eq!(run["run"]["state"], "running", "{run}");
    let (_, workflow) = call_as(&host, Some(&a), "GET", "/v1/workflows/a-flow", None);
    assert_eq!(workflow["workflow"]["revision"], 1, "{workflow}");
    let (_, schedules) = call_as(&host, Some(&a), "GET", "/v1/schedules", None);
    assert_eq!(schedules["schedules"][0]["paused"], false, "{schedules}");
    assert_eq!(
        schedules["schedules"][0]["key"], "a-flow/a-nightly",
        "{schedules}"
    );
    let (_, subscriptions) = call_as(&host, Some(&a), "GET", "/v1/subscriptions", None);
    assert_eq!(
        subscriptions["subscriptions"].as_array().unwrap().len(),
        2,
        "{subscriptions}"
    );
    let (_, delivery) = call_as(
        &host,
        Some(&a),
        "GET",
        &format!("/v1/deliveries/{dead}"),
        None,
    );
    assert_eq!(delivery["delivery"]["state"], "error", "{delivery}");
    let (_, delivery) = call_as(
        &host,
        Some(&a),
        "GET",
        &format!("/v1/deliveries/{live}"),
        None,
    );
    assert_ne!(delivery["delivery"]["state"], "acked", "{delivery}");
    let (_, plugins) = call_as(&host, Some(&a), "GET", "/v1/plugins", None);
    let names: Vec<&str> = plugins["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"flaky") && !names.iter().any(|n| n.contains(':')),
        "{plugins}"
    );

    // The same names in B are B's own: its `a-flow` has its own key space,
    // its key `k1` starts its own run, and A's plugin is not B's.
    let (status, body) = send_as(
        &host,
        &b,
        "/v1/workflows",
        "application/yaml",
        A_FLOW.as_bytes(),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = start(&host, &b, "a-flow", Some("k1"));
    assert_eq!(status, 201, "B's key k1 is not A's: {body}");
    let b_run = body["id"].as_str().unwrap().to_owned();
    assert_ne!(b_run, a_run);
    let seen = wait_run(&host, &b, &b_run, |r| {
        r["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["step_id"] == "approve")
    });
    assert_eq!(
        output(&seen, "count")["value"],
        1,
        "B counts in its own key space"
    );
    assert_eq!(output(&seen, "who")["tenant"], "tenant-b");
    let (status, body) = start(&host, &a, "a-flow", Some("k1"));
    assert_eq!(
        (status, body["id"].as_str()),
        (200, Some(a_run.as_str())),
        "{body}"
    );
    let (status, body) = send_as(
        &host,
        &b,
        "/v1/workflows",
        "application/yaml",
        b"id: uses-a\nsteps:\n  - { id: e, uses: flaky, with: {} }\n",
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("unresolved_plugin")),
        "{body}"
    );

    // Messages a shared plugin emits land in the emitting run's tenant: B
    // emits to `a-news` with `emitter`; A's subscriptions get nothing new,
    // B's own subscription of that name gets it.
    let (_, before) = call_as(&host, Some(&a), "GET", "/v1/deliveries", None);
    let (status, body) = call_as(
        &host,
        Some(&b),
        "POST",
        "/v1/subscriptions",
        Some(&json!({ "channel": "a-news", "name": "b-own" })),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = send_as(
        &host,
        &b,
        "/v1/workflows",
        "application/yaml",
        b"id: b-emits\nsteps:\n  - { id: e, uses: emitter, with: { channel: a-news, count: 2 } }\n",
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = start(&host, &b, "b-emits", None);
    assert_eq!(status, 201, "{body}");
    let emits = body["id"].as_str().unwrap().to_owned();
    wait_run(&host, &b, &emits, |r| r["run"]["state"] == "succeeded");
    let (_, mine) = call_as(
        &host,
        Some(&b),
        "GET",
        "/v1/deliveries?subscription=a-news/b-own",
        None,
    );
    assert_eq!(mine["deliveries"].as_array().unwrap().len(), 2, "{mine}");
    let (_, after) = call_as(&host, Some(&a), "GET", "/v1/deliveries", None);
    assert_eq!(
        after["deliveries"], before["deliveries"],
        "B's messages reached A's channel"
    );

    // Roles: a reader of A reads A's run and may not cancel it (403); to B's
    // reader the same run does not exist (404).
    let (a_reader, a_reader_id) = token(&host, &a, "tenant-a", "reader", None);
    let (b_reader, _) = token(&host, &b, "tenant-b", "reader", None);
    let (status, _) = call_as(
        &host,
        Some(&a_reader),
        "GET",
        &format!("/v1/runs/{a_run}"),
        None,
    );
    assert_eq!(status, 200);
    let (status, body) = call_as(
        &host,
        Some(&a_reader),
        "POST",
        &format!("/v1/runs/{a_run}/cancel"),
        None,
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    let (status, _) = call_as(
        &host,
        Some(&b_reader),
        "POST",
        &format!("/v1/runs/{a_run}/cancel"),
        None,
    );
    assert_eq!(status, 404);
    let (status, body) = call_as(
        &host,
        Some(&a),
        "POST",
        "/v1/tokens",
        Some(&json!({ "role": "admin" })),
    );
    assert_eq!(status, 403, "an owner may not make an admin: {body}");

    // A GET makes no subscription: a consumer name not used before is
    // unknown, to a reader as to anyone. A reader follows one that exists.
    let (status, body) = call_as(
        &host,
        Some(&a_reader),
        "GET",
        "/v1/channels/a-news/events?consumer=fresh",
        None,
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("unknown_subscription")),
        "{body}"
    );

    // A revoked token stops at once, its open stream too; an expired one
    // stops by itself.
    let stream = open_stream(
        &host,
        &a_reader,
        "/v1/channels/a-news/events?consumer=a-reader",
    );
    let (status, _) = call_as(
        &host,
        Some(&a),
        "POST",
        &format!("/v1/tokens/{a_reader_id}/revoke"),
        None,
    );
    assert_eq!(status, 200);
    let (status, body) = call_as(&host, Some(&a_reader), "GET", "/v1/runs", None);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("revoked_token")),
        "{body}"
    );
    let closed = stream.join().unwrap();
    assert!(
        closed < Duration::from_secs(5),
        "the stream of a revoked token stayed open {closed:?}"
    );
    let (short, _) = token(&host, &a, "tenant-a", "reader", Some("1s"));
    std::thread::sleep(Duration::from_millis(1200));
    let (status, body) = call_as(&host, Some(&short), "GET", "/v1/runs", None);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("expired_token")),
        "{body}"
    );

    // The audit log: A's changes in A's, none in B's.
    let (_, audit) = call_as(&host, Some(&a), "GET", "/v1/audit", None);
    let actions: BTreeSet<&str> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for action in [
        "workflow.deploy",
        "plugin.add",
        "subscription.add",
        "schedule.add",
        "token.create",
        "token.revoke",
    ] {
        assert!(
            actions.contains(action),
            "{action} is not in A's audit log: {audit}"
        );
    }
    let (_, audit) = call_as(&host, Some(&b), "GET", "/v1/audit", None);
    assert!(
        audit["audit"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["tenant"] == "tenant-b"),
        "{audit}"
    );

    // A quota on starts: beyond it, 429 naming the quota, with Retry-After.
    let (status, body) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tenants/tenant-b/quota",
        Some(&json!({ "starts_per_second": 2 })),
    );
    assert_eq!(status, 200, "{body}");
    let mut refused = None;
    for _ in 0..5 {
        let (status, body, retry) = call_full(
            &host,
            Some(&b),
            "POST",
            "/v1/runs",
            Some(&json!({ "workflow": "b-flow" })),
        );
        if status == 429 {
            refused = Some((body, retry));
            break;
        }
        assert_eq!(status, 201, "{body}");
    }
    let (body, retry) = refused.expect("a third start within a second is refused");
    assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("starts_per_second"),
        "{body}"
    );
    assert!(retry.is_some_and(|r| r.parse::<u64>().is_ok_and(|s| s >= 1)));

    // Removing a tenant with live runs is refused, unless forced; then
    // its runs are cancelled and its tokens stop.
    let (status, body) = call_as(&host, Some(&admin), "DELETE", "/v1/tenants/tenant-b", None);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("tenant_busy")),
        "{body}"
    );
    let (status, body) = call_as(
        &host,
        Some(&admin),
        "DELETE",
        "/v1/tenants/tenant-b?force=true",
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body["cancelled"].as_u64().unwrap() >= 1, "{body}");
    let (_, run) = call_as(
        &host,
        Some(&admin),
        "GET",
        &format!("/v1/runs/{b_run}"),
        None,
    );
    assert_eq!(
        run["error"]["code"], "unknown_run",
        "the admin acts in default: {run}"
    );
    let (status, _) = call_as(&host, Some(&b), "GET", "/v1/runs", None);
    assert_eq!(status, 401);
    let (_, run) = call_as(&host, Some(&a), "GET", &format!("/v1/runs/{a_run}"), None);
    assert_eq!(run["run"]["state"], "running", "A's run goes on: {run}");
    // A tenant added again with the name is a new one: the old tokens
    // stay revoked, and its old subscriptions and workflows are gone.
    let (status, _) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tenants",
        Some(&json!({ "name": "tenant-b" })),
    );
    assert_eq!(status, 201);
    let (status, body) = call_as(&host, Some(&b), "GET", "/v1/runs", None);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("revoked_token")),
        "{body}"
    );
    let (new_b, _) = token(&host, &admin, "tenant-b", "owner", None);
    let (_, subscriptions) = call_as(&host, Some(&new_b), "GET", "/v1/subscriptions", None);
    assert_eq!(subscriptions["subscriptions"], json!([]), "{subscriptions}");
    let (_, workflows) = call_as(&host, Some(&new_b), "GET", "/v1/workflows", None);
    assert_eq!(workflows["workflows"], json!([]), "{workflows}");
}

/// Reads B's stream for a moment: true if no event came.
fn stream_is_empty(host: &Host, token: &str, path: &str) -> bool {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_millis(1500)))
        .build()
        .into();
    let response = agent
        .get(format!("{}{path}", host.url))
        .header("authorization", format!("Bearer {token}"))
        .call()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let reader = BufReader::new(response.into_body().into_reader());
    for line in reader.lines() {
        match line {
            Ok(line) if line.starts_with("data:") => return false,
            Ok(_) => {}
            // The timeout ends the read.
            Err(_) => break,
        }
    }
    true
}

/// Opens an event stream and reads it on a thread until it ends: how long
/// after the thread started it ended.
fn open_stream(host: &Host, token: &str, path: &str) -> std::thread::JoinHandle<Duration> {
    let response = agent()
        .get(format!("{}{path}", host.url))
        .header("authorization", format!("Bearer {token}"))
        .call()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    std::thread::spawn(move || {
        let began = Instant::now();
        let reader = BufReader::new(response.into_body().into_reader());
        for line in reader.lines() {
            if line.is_err() {
                break;
            }
        }
        began.elapsed()
    })
}

/// `weft serve` on an address other than loopback needs `--auth`; with
/// `--tls-cert` and `--tls-key` it serves HTTPS, which the CLI reaches
/// with `--ca-cert`, and plain HTTP to it gets no answer.
#[test]
fn serve_refuses_a_public_address_without_auth_and_serves_tls() {
    let scratch = Scratch::new(&["echo"]);
    let refused = scratch.run(&["serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(refused.stderr.contains("--auth"), "{}", refused.stderr);
    // A host name other than localhost is not resolved, and says what is
    // taken instead.
    let refused = scratch.run(&["serve", "--listen", "example.com:7614"]);
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("localhost:7614"),
        "{}",
        refused.stderr
    );

    let made =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    let cert = scratch.file("cert.pem", &made.cert.pem());
    let key = scratch.file("key.pem", &made.signing_key.serialize_pem());
    let bad = scratch.run(&[
        "serve",
        "--tls-cert",
        key.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    assert_eq!(bad.code.map(|c| c != 0), Some(true), "{}", bad.stderr);
    assert!(bad.stderr.contains("--tls-cert"), "{}", bad.stderr);

    let host = serve_with(
        &scratch,
        0,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    assert!(host.url.starts_with("https://"), "{}", host.url);
    let trusted = scratch.run(&[
        "--ca-cert",
        cert.to_str().unwrap(),
        "deliveries",
        "list",
        "--server",
        &host.url,
    ]);
    assert_eq!(trusted.code, Some(0), "{}", trusted.stderr);
    let untrusted = scratch.run(&["deliveries", "list", "--server", &host.url]);
    assert_ne!(untrusted.code, Some(0), "{}", untrusted.stdout);
    let plain = host.url.replacen("https://", "http://", 1);
    let answered = agent()
        .get(format!("{plain}/v1/health"))
        .call()
        .map(|r| r.status().as_u16());
    assert!(
        answered.is_err() || answered.as_ref().is_ok_and(|s| *s != 200),
        "{answered:?}"
    );
}

/// A web page of another site gets nothing done on a token-less host
/// (where a request needs no credential a browser would have to hold): a
/// request its page made (`Origin`, `Sec-Fetch-Site`) is refused, and so is
/// one addressed to a name other than localhost (a page may point a name of
/// its own at the machine). Once a token exists, the token decides.
#[test]
fn a_page_of_another_site_gets_nothing_done_on_a_token_less_host() {
    let scratch = Scratch::new(&["echo"]);
    let host = serve(&scratch, 0);
    let port = host.url.rsplit_once(':').unwrap().1.to_owned();
    let yaml = |n: usize| format!("id: planted\nsteps:\n  - {{ id: a, uses: echo, with: {n} }}\n");
    // `method path` with `headers`, and for a POST `body` as `text/plain`
    // (what a form or a `no-cors` fetch sends without asking first), or
    // none: the status and the error's code.
    let send = |method: &str, path: &str, body: Option<&str>, headers: &[(&str, &str)]| {
        let url = format!("{}{path}", host.url);
        let mut response = if method == "GET" {
            let mut request = agent().get(url);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            request.call()
        } else {
            let mut request = agent().post(url);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            match body {
                Some(body) => request.header("content-type", "text/plain").send(body),
                None => request.send_empty(),
            }
        }
        .unwrap();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        (response.status().as_u16(), body["error"]["code"].clone())
    };
    let evil = format!("evil.example:{port}");
    let evil_origin = format!("http://{evil}");
    for (headers, want) in [
        (vec![("origin", "https://evil.example")], "cross_origin"),
        (vec![("origin", "null")], "cross_origin"),
        (vec![("sec-fetch-site", "cross-site")], "cross_origin"),
        // Another port of the machine is another site.
        (vec![("sec-fetch-site", "same-site")], "cross_origin"),
        // A name rebound to the machine is of the page's own origin.
        (
            vec![
                ("origin", evil_origin.as_str()),
                ("sec-fetch-site", "same-origin"),
                ("host", evil.as_str()),
            ],
            "not_local",
        ),
        (vec![("host", evil.as_str())], "not_local"),
    ] {
        let (status, code) = send("POST", "/v1/workflows", Some(&yaml(1)), &headers);
        assert_eq!((status, code), (403, json!(want)), "{headers:?}");
    }
    // An `<img>`'s GET carries no `Origin`, but says whose page made it.
    let (status, code) = send(
        "GET",
        "/v1/channels/news/events?consumer=stolen",
        None,
        &[("sec-fetch-site", "cross-site")],
    );
    assert_eq!((status, code), (403, json!("cross_origin")));
    let (status, body) = host.call("GET", "/v1/workflows/planted", None);
    assert_eq!(status, 404, "nothing was deployed: {body}");
    let (_, body) = host.call("GET", "/v1/subscriptions", None);
    assert!(!body.to_string().contains("stolen"), "{body}");

    // The host's own page, and clients that name localhost or no origin.
    let own = host.url.clone();
    let localhost = format!("localhost:{port}");
    for (n, headers) in [
        vec![("origin", own.as_str()), ("sec-fetch-site", "same-origin")],
        vec![("host", localhost.as_str())],
        vec![],
    ]
    .into_iter()
    .enumerate()
    {
        let (status, code) = send("POST", "/v1/workflows", Some(&yaml(n + 2)), &headers);
        assert_eq!(status, 201, "{headers:?}: {code}");
    }
    let id = start_run(&host, "planted", &json!(null));
    run_ended(&host, &id);
    let (status, code) = send(
        "POST",
        &format!("/v1/runs/{id}/retry"),
        None,
        &[("origin", "http://evil.example")],
    );
    assert_eq!((status, code), (403, json!("cross_origin")));

    // With a token, the token decides: it is sent only by whoever holds it.
    let (status, made) = call_as(
        &host,
        None,
        "POST",
        "/v1/tokens",
        Some(&json!({ "tenant": "default", "role": "admin" })),
    );
    assert_eq!(status, 201, "{made}");
    let owner = made["token"]["token"].as_str().unwrap().to_owned();
    let bearer = format!("Bearer {owner}");
    let named = [
        ("host", evil.as_str()),
        ("origin", evil_origin.as_str()),
        ("sec-fetch-site", "cross-site"),
    ];
    let (status, code) = send("GET", "/v1/workflows", None, &named);
    assert_eq!((status, code), (401, json!("missing_token")));
    let mut with_token = named.to_vec();
    with_token.push(("authorization", bearer.as_str()));
    let (status, code) = send("GET", "/v1/workflows", None, &with_token);
    assert_eq!(status, 200, "{code}");
}

/// A tenant's step ceilings: a deployment whose step asks for more is
/// refused, and a step's default deadline is cut to the ceiling.
#[test]
fn a_tenants_step_ceilings_refuse_more_and_cut_the_defaults() {
    let scratch = Scratch::new(&["spin"]);
    let made = scratch.run(&["tokens", "create", "--local", "--role", "admin"]);
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    let admin = made.stdout.trim().to_owned();
    let host = serve(&scratch, 0);
    let (status, body) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tenants",
        Some(
            &json!({ "name": "tight", "quota": { "max_step_timeout_ms": 300, "max_step_memory": 33554432 } }),
        ),
    );
    assert_eq!(status, 201, "{body}");
    let (owner, _) = token(&host, &admin, "tight", "owner", None);
    for (text, field) in [
        (
            "id: slow\nsteps:\n  - { id: s, uses: spin, timeout: 5s }\n",
            "timeout",
        ),
        (
            "id: big\nsteps:\n  - { id: s, uses: spin, memory_limit: 128MiB }\n",
            "memory_limit",
        ),
    ] {
        let (status, body) = send_as(
            &host,
            &owner,
            "/v1/workflows",
            "application/yaml",
            text.as_bytes(),
        );
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (422, Some("quota_exceeded")),
            "{body}"
        );
        assert!(
            body["error"]["message"].as_str().unwrap().contains(field),
            "{body}"
        );
    }
    let (status, body) = send_as(
        &host,
        &owner,
        "/v1/workflows",
        "application/yaml",
        b"id: spins\nsteps:\n  - { id: s, uses: spin }\n",
    );
    assert_eq!(status, 201, "{body}");
    let began = Instant::now();
    let (status, body) = start(&host, &owner, "spins", None);
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let ended = wait_run(&host, &owner, &id, |r| r["run"]["state"] != "running");
    assert_eq!(ended["run"]["state"], "failed", "{ended}");
    assert_eq!(ended["run"]["error"]["error"]["code"], "timeout", "{ended}");
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "the 30 s default was not cut to the ceiling: {:?}",
        began.elapsed()
    );

    // Stored bytes: the run above is counted; a start that would take the
    // tenant over its quota is 507, naming the quota, and stores nothing.
    let stored = |host: &Host| {
        let (status, body) = call_as(host, Some(&owner), "GET", "/v1/tenants/tight/usage", None);
        assert_eq!(status, 200, "{body}");
        body["usage"]["stored_bytes"].as_u64().unwrap()
    };
    let used = stored(&host);
    assert!(used > 0, "the run was not counted");
    let (status, body) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tenants/tight/quota",
        Some(&json!({ "max_stored_bytes": used + 2_000 })),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = call_as(
        &host,
        Some(&owner),
        "POST",
        "/v1/runs",
        Some(&json!({ "workflow": "spins", "input": { "pad": "x".repeat(5_000) } })),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (507, Some("storage_quota")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_stored_bytes"),
        "{body}"
    );
    assert_eq!(stored(&host), used, "the refused start was counted");
    let (status, body) = start(&host, &owner, "spins", None);
    assert_eq!(status, 201, "a small start still fits: {body}");
}

/// The bytes of a component with a custom section appended: the same
/// plugin, another digest (what a new build of it looks like).
fn rebuilt(mut bytes: Vec<u8>) -> Vec<u8> {
    let name = b"rebuilt";
    let payload = b"by the deployer";
    let size = 1 + name.len() + payload.len();
    bytes.push(0);
    bytes.push(u8::try_from(size).unwrap());
    bytes.push(u8::try_from(name.len()).unwrap());
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload);
    bytes
}

#[test]
fn a_deployer_reads_no_secret_an_owner_did_not_grant_to_its_plugin() {
    let scratch = Scratch::new(&[]);
    let made = scratch.run(&["tokens", "create", "--local", "--role", "admin"]);
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    let admin = made.stdout.trim().to_owned();
    let key = scratch.run(&["secrets", "new-key"]);
    let key_file = scratch.file("secrets.key", key.stdout.trim());
    let host = serve_with(
        &scratch,
        0,
        &["--secrets-key-file", key_file.to_str().unwrap()],
    );
    let (status, body) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tenants",
        Some(&json!({ "name": "acme" })),
    );
    assert_eq!(status, 201, "{body}");
    let (owner, _) = token(&host, &admin, "acme", "owner", None);
    let (deployer, _) = token(&host, &admin, "acme", "deployer", None);
    let (operator, _) = token(&host, &admin, "acme", "operator", None);
    let value = "sk-acme-4f1d77";
    let (status, body) = call_as(
        &host,
        Some(&owner),
        "PUT",
        "/v1/secrets/stripe",
        Some(&json!({ "value": value })),
    );
    assert_eq!(status, 200, "{body}");

    // The deployer's own plugin, which would hand the secret out.
    let (status, body) = send_as(
        &host,
        &deployer,
        "/v1/plugins",
        "application/wasm",
        &guest_bytes("fetch"),
    );
    assert_eq!(status, 201, "{body}");
    let flow = b"id: steal\nsteps:\n  - id: take\n    uses: fetch\n    with: { secret: stripe }\n    allow: { http: [\"https://example.com\"] }\n    secrets: [stripe]\n";
    let (status, body) = send_as(&host, &deployer, "/v1/workflows", "application/yaml", flow);
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "secret_not_granted", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("weft secrets grant stripe --plugin fetch"),
        "{body}"
    );
    // An owner's deployment grants no build a deployer uploaded.
    let (status, body) = send_as(&host, &owner, "/v1/workflows", "application/yaml", flow);
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("a deployer uploaded this build"),
        "{body}"
    );
    // Granting is an owner's.
    let grant = json!({ "plugin": "fetch" });
    let (status, body) = call_as(
        &host,
        Some(&deployer),
        "POST",
        "/v1/secrets/stripe/grants",
        Some(&grant),
    );
    assert_eq!(status, 403, "{body}");
    let (status, body) = call_as(
        &host,
        Some(&owner),
        "POST",
        "/v1/secrets/stripe/grants",
        Some(&grant),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["secret"]["grants"][0]["plugin"], "fetch", "{body}");

    // Granted, the deployer's workflow deploys and its step reads it.
    let (status, body) = send_as(&host, &deployer, "/v1/workflows", "application/yaml", flow);
    assert_eq!(status, 201, "{body}");
    let (status, body) = start(&host, &operator, "steal", None);
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let run = wait_run(&host, &deployer, &id, |r| r["run"]["state"] == "succeeded");
    assert_eq!(output(&run, "take")["secret_length"], value.len(), "{run}");

    // A new build of the plugin, by the deployer, is not granted: the
    // runs that pick it up are refused the secret.
    let (status, body) = send_as(
        &host,
        &deployer,
        "/v1/plugins",
        "application/wasm",
        &rebuilt(guest_bytes("fetch")),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = start(&host, &operator, "steal", None);
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let run = wait_run(&host, &deployer, &id, |r| r["run"]["state"] == "failed");
    assert!(run.to_string().contains("secret_not_granted"), "{run:#}");
    assert!(!run.to_string().contains(value), "{run:#}");

    // Revoked, the first build is refused too; the audit log names both.
    let (status, body) = call_as(
        &host,
        Some(&owner),
        "DELETE",
        "/v1/secrets/stripe/grants/fetch",
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["secret"]["grants"], json!([]), "{body}");
    let (_, audit) = call_as(&host, Some(&owner), "GET", "/v1/audit", None);
    let audit = audit.to_string();
    assert!(
        audit.contains("secret.grant") && audit.contains("secret.revoke"),
        "{audit}"
    );
}

#[test]
fn a_tenant_keeps_no_more_revisions_or_snapshot_bytes_than_its_quota() {
    let scratch = Scratch::new(&["echo"]);
    let made = scratch.run(&["tokens", "create", "--local", "--role", "admin"]);
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    let admin = made.stdout.trim().to_owned();
    let host = serve(&scratch, 0);
    let (status, body) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tenants",
        Some(&json!({ "name": "small" })),
    );
    assert_eq!(status, 201, "{body}");
    // Added without a quota, it has the default one: ten deployments a
    // second, among them.
    assert_eq!(body["tenant"]["quota"]["max_revisions"], 1000, "{body}");
    assert_eq!(body["tenant"]["quota"]["deploys_per_second"], 10, "{body}");
    let (busy, _) = token(&host, &admin, "small", "owner", None);
    let refused: Vec<Value> = (0..15)
        .map(|n| {
            let text = format!("id: burst\nsteps:\n  - {{ id: a, uses: echo, with: {n} }}\n");
            send_as(
                &host,
                &busy,
                "/v1/workflows",
                "application/yaml",
                text.as_bytes(),
            )
        })
        .filter(|(status, _)| *status == 429)
        .map(|(_, body)| body)
        .collect();
    assert!(!refused.is_empty(), "15 deployments at once were all taken");
    assert!(
        refused[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deploys_per_second"),
        "{refused:?}"
    );
    let (owner, _) = token(&host, &admin, "small", "owner", None);

    // The burst's revisions count: 2 is below them already. Those of a
    // new tenant start from none.
    let (status, body) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tenants/small/quota",
        Some(&json!({ "max_revisions": 12, "max_snapshot_bytes": 100 })),
    );
    assert_eq!(status, 200, "{body}");
    let kept = call_as(&host, Some(&owner), "GET", "/v1/tenants/small/usage", None).1["usage"]["revisions"]
        .as_u64()
        .unwrap();
    assert!(
        (10..=12).contains(&kept),
        "{kept} revisions after the burst"
    );
    let (status, body) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tenants/small/quota",
        Some(&json!({ "max_revisions": kept + 2, "max_snapshot_bytes": 100 })),
    );
    assert_eq!(status, 200, "{body}");

    let flow = |n: u32| format!("id: w\nsteps:\n  - {{ id: a, uses: echo, with: {n} }}\n");
    for n in 0..2 {
        let (status, body) = send_as(
            &host,
            &owner,
            "/v1/workflows",
            "application/yaml",
            flow(n).as_bytes(),
        );
        assert_eq!(status, 201, "{body}");
    }
    // The served definition again makes no revision, so it is taken.
    let (status, body) = send_as(
        &host,
        &owner,
        "/v1/workflows",
        "application/yaml",
        flow(1).as_bytes(),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = send_as(
        &host,
        &owner,
        "/v1/workflows",
        "application/yaml",
        flow(2).as_bytes(),
    );
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_revisions"),
        "{body}"
    );

    let small = format!("{{\"k\": \"{}\"}}", "v".repeat(60));
    let (status, body) = send_as(
        &host,
        &owner,
        "/v1/snapshots/rates",
        "application/json",
        small.as_bytes(),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = send_as(
        &host,
        &owner,
        "/v1/snapshots/rates",
        "application/json",
        small.as_bytes(),
    );
    assert_eq!(status, 507, "{body}");
    assert_eq!(body["error"]["code"], "storage_quota", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_snapshot_bytes"),
        "{body}"
    );

    let (status, usage) = call_as(&host, Some(&owner), "GET", "/v1/tenants/small/usage", None);
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["usage"]["revisions"], kept + 2, "{usage}");
    assert!(
        usage["usage"]["snapshot_bytes"].as_u64().unwrap() > 40,
        "{usage}"
    );
}
