//! Steps that reach the network, behind grants: a real HTTP server on
//! loopback, the `fetch` guest (the Rust SDK over `wasi:http`), the probes
//! the egress check must refuse, secrets, and output contracts.
//!
//! Only loopback is ever connected to. The refusal of private, link-local
//! and metadata ranges is proven by the unit tests of the address check
//! (`weft_core::egress`), never by sending traffic there.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::common::Scratch;
use crate::common::server::{run_ended, serve_with, start_run, wait_for_address};
use crate::tenants::{call_as, send_as};

/// A small HTTP/1.1 server on loopback:
///
/// - `GET /hello` answers `hello from loopback`;
/// - `GET /redirect?to=URL` answers `302` to URL;
/// - `GET /big?bytes=N` answers N bytes with a `content-length`;
/// - `GET /stream?bytes=N` answers N bytes, chunked, with no length;
/// - `POST /echo` answers the body it got;
/// - `GET /traceparent` answers the request's `traceparent` header.
///
/// It counts the requests it gets, by path.
pub(crate) struct Site {
    pub(crate) port: u16,
    paths: Arc<Mutex<Vec<String>>>,
}

impl Site {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let paths = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&paths);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || answer(stream, &seen));
            }
        });
        Self { port, paths }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub(crate) fn hits(&self) -> usize {
        self.paths.lock().unwrap().len()
    }
}

fn answer(stream: std::net::TcpStream, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or("").to_owned(),
        parts.next().unwrap_or("/").to_owned(),
    );
    let mut length = 0usize;
    let mut traceparent = String::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.trim().split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
            if name.eq_ignore_ascii_case("traceparent") {
                value.trim().clone_into(&mut traceparent);
            }
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    seen.lock().unwrap().push(target.clone());
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .unwrap_or("")
            .to_owned()
    };
    let mut stream = reader.into_inner();
    let reply = |stream: &mut std::net::TcpStream, status: &str, extra: &str, body: &[u8]| {
        let _ = write!(
            stream,
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n",
            body.len()
        );
        let _ = stream.write_all(body);
    };
    match (method.as_str(), path) {
        ("GET", "/hello") => reply(&mut stream, "200 OK", "", b"hello from loopback"),
        ("GET", "/traceparent") => reply(&mut stream, "200 OK", "", traceparent.as_bytes()),
        ("GET", "/redirect") => reply(
            &mut stream,
            "302 Found",
            &format!("location: {}\r\n", param("to")),
            b"",
        ),
        ("GET", "/big") => {
            let n: usize = param("bytes").parse().unwrap_or(0);
            reply(&mut stream, "200 OK", "", &vec![b'x'; n]);
        }
        ("GET", "/stream") => {
            let n: usize = param("bytes").parse().unwrap_or(0);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            );
            let chunk = vec![b'y'; 64 << 10];
            let mut left = n;
            while left > 0 {
                let size = left.min(chunk.len());
                if write!(stream, "{size:x}\r\n").is_err()
                    || stream.write_all(&chunk[..size]).is_err()
                    || stream.write_all(b"\r\n").is_err()
                {
                    return;
                }
                left -= size;
            }
            let _ = stream.write_all(b"0\r\n\r\n");
        }
        ("POST", "/echo") => reply(&mut stream, "200 OK", "", &body),
        _ => reply(&mut stream, "404 Not Found", "", b"no such page"),
    }
}

/// Runs `workflow` (YAML) with `input` through `weft run`; answers the
/// run's exit code, its outputs (on success), and `runs show --json`.
fn run(scratch: &Scratch, workflow: &str, input: &Value) -> (Option<i32>, Value, Value) {
    let file = scratch.file("wf.yaml", workflow);
    let input = input.to_string();
    let ran = scratch.run(&["run", file.to_str().unwrap(), "--input", &input]);
    let outputs = if ran.code == Some(0) {
        ran.json()
    } else {
        Value::Null
    };
    let id = ran.run_id();
    let shown = scratch.run(&["runs", "show", &id, "--json"]);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    (ran.code, outputs, shown.json())
}

/// A workflow of one `fetch` step granted `grants`.
fn fetching(grants: &[&str]) -> String {
    let grants: Vec<String> = grants.iter().map(|g| format!("\"{g}\"")).collect();
    format!(
        "id: fetching\nsteps:\n  - id: call\n    uses: fetch\n    with: \"${{{{ inputs }}}}\"\n    allow:\n      http: [{}]\n",
        grants.join(", ")
    )
}

fn requests(urls: &[String]) -> Value {
    json!({ "requests": urls.iter().map(|u| json!({ "url": u })).collect::<Vec<_>>() })
}

/// The failed run's step error.
fn step_error(shown: &Value) -> Value {
    assert_eq!(shown["run"]["state"], "failed", "{shown:#}");
    shown["steps"][0]["error"].clone()
}

#[test]
fn a_granted_request_reaches_the_loopback_server_and_is_recorded_without_query_values() {
    let site = Site::start();
    let scratch = Scratch::new(&["fetch"]);
    let grant = format!("http://127.0.0.1:{}", site.port);
    let (code, outputs, shown) = run(
        &scratch,
        &fetching(&[&grant]),
        &json!({ "requests": [
            { "url": site.url("/hello?token=s3cret&page=2") },
            { "method": "POST", "url": site.url("/echo"), "body": "ping" },
            { "url": site.url("/traceparent") },
        ] }),
    );
    assert_eq!(code, Some(0), "{shown:#}");
    assert_eq!(outputs["answers"][0]["status"], 200);
    assert_eq!(outputs["answers"][0]["body"], "hello from loopback");
    assert_eq!(outputs["answers"][1]["body"], "ping");
    assert_eq!(site.hits(), 3);
    // The request carries the run's trace (its id's bits) and a span of
    // its own.
    let run = shown["run"]["id"].as_str().unwrap().replace('-', "");
    let traceparent = outputs["answers"][2]["body"].as_str().unwrap();
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(
        (parts[0], parts[1], parts[3]),
        ("00", run.as_str(), "01"),
        "{traceparent}"
    );
    assert!(
        parts[2].len() == 16 && parts[2] != "0000000000000000",
        "{traceparent}"
    );

    let http = &shown["steps"][0]["http"];
    assert_eq!(http.as_array().unwrap().len(), 3, "{shown:#}");
    assert_eq!(http[0]["method"], "GET");
    assert_eq!(
        http[0]["url"],
        format!("http://127.0.0.1:{}/hello?token=…&page=…", site.port)
    );
    assert_eq!(http[0]["status"], 200);
    assert_eq!(http[0]["bytes"], 19);
    assert!(http[0]["duration_ms"].is_u64());
    assert_eq!(http[1]["method"], "POST");
    assert!(!http.to_string().contains("s3cret"), "{http:#}");

    // `runs show` prints each request.
    let text = scratch.run(&["runs", "show", shown["run"]["id"].as_str().unwrap()]);
    assert!(
        text.stdout.contains(&format!(
            "http GET http://127.0.0.1:{}/hello?token=…&page=… -> 200, 19 bytes",
            site.port
        )),
        "{}",
        text.stdout
    );
}

#[test]
fn every_probe_is_refused_with_http_denied_and_reaches_nothing() {
    let site = Site::start();
    let other = Site::start();
    let scratch = Scratch::new(&["fetch"]);
    let literal = format!("http://127.0.0.1:{}", site.port);
    let port = site.port;
    let probes: Vec<(&str, String, Vec<String>, bool)> = vec![
        (
            "an ungranted port on loopback",
            literal.clone(),
            vec![other.url("/hello")],
            false,
        ),
        (
            "a name that resolves to 127.0.0.1, where only the address is granted",
            literal.clone(),
            vec![format!("http://localhost:{port}/hello")],
            false,
        ),
        (
            "a name that resolves to 127.0.0.1, granted by name",
            format!("http://localhost:{port}"),
            vec![format!("http://localhost:{port}/hello")],
            false,
        ),
        (
            "a redirect from the granted address to an ungranted one",
            literal.clone(),
            vec![site.url(&format!("/redirect?to={}", other.url("/hello")))],
            true,
        ),
        (
            "[::1]",
            literal.clone(),
            vec![format!("http://[::1]:{port}/hello")],
            false,
        ),
        (
            "a decimal-encoded loopback address",
            literal.clone(),
            vec![format!("http://2130706433:{port}/hello")],
            false,
        ),
        (
            "a path that climbs out of the granted prefix",
            format!("{literal}/api/"),
            vec![site.url("/api/../hello")],
            false,
        ),
    ];
    for (what, grant, urls, follow) in probes {
        let before = (site.hits(), other.hits());
        let mut input = requests(&urls);
        input["follow"] = json!(follow);
        let (code, _, shown) = run(&scratch, &fetching(&[&grant]), &input);
        assert_ne!(code, Some(0), "{what}: {shown:#}");
        let error = step_error(&shown);
        assert_eq!(error["code"], "http_denied", "{what}: {shown:#}");
        assert_eq!(error["retryable"], false, "{what}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("is not allowed"),
            "{what}: {error}"
        );
        let http = shown["steps"][0]["http"].as_array().unwrap().clone();
        let refused = http.last().unwrap();
        assert!(
            refused["error"]
                .as_str()
                .unwrap()
                .starts_with("http_denied"),
            "{what}: {refused}"
        );
        assert!(refused["status"].is_null(), "{what}: {refused}");
        // Only the redirect's first hop, which was granted, got through.
        let expected = if follow { 1 } else { 0 };
        assert_eq!(
            (site.hits() - before.0, other.hits() - before.1),
            (expected, 0),
            "{what}"
        );
    }
}

#[test]
fn a_response_over_the_byte_limit_fails_the_step_with_http_limit() {
    let site = Site::start();
    let scratch = Scratch::new(&["fetch"]);
    let grant = format!("http://127.0.0.1:{}", site.port);
    // 17 MiB against the default limit of 16 MiB a call: declared up front,
    // and streamed without a length.
    for path in ["/big?bytes=17825792", "/stream?bytes=17825792"] {
        let (code, _, shown) = run(&scratch, &fetching(&[&grant]), &requests(&[site.url(path)]));
        assert_ne!(code, Some(0));
        let error = step_error(&shown);
        assert_eq!(error["code"], "http_limit", "{path}: {shown:#}");
        assert!(
            error["message"].as_str().unwrap().contains("16777216"),
            "{path}: {error}"
        );
    }
    // Under the limit, the same server answers in full.
    let (code, outputs, _) = run(
        &scratch,
        &fetching(&[&grant]),
        &requests(&[site.url("/stream?bytes=1048576")]),
    );
    assert_eq!(code, Some(0));
    assert_eq!(outputs["answers"][0]["bytes"], 1_048_576);
}

#[test]
fn a_plugin_that_imports_http_needs_a_grant_before_any_run_starts() {
    let scratch = Scratch::new(&["fetch"]);
    let file = scratch.file(
        "ungranted.yaml",
        "id: ungranted\nsteps:\n  - { id: call, uses: fetch, with: {} }\n",
    );
    let ran = scratch.run(&["run", file.to_str().unwrap()]);
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(
        ran.stderr
            .contains("imports `wasi:http/outgoing-handler` (it makes HTTP requests)"),
        "{}",
        ran.stderr
    );
    // `plugin inspect` says what it imports.
    let wasm = scratch.plugins_dir().join("fetch.wasm");
    let shown = scratch.run(&["plugin", "inspect", wasm.to_str().unwrap(), "--json"]);
    let capabilities = shown.json()["capabilities"].clone();
    assert!(
        capabilities.as_array().unwrap().contains(&json!("http")),
        "{capabilities}"
    );
    // A grant that is not a URL prefix is refused when the file is read.
    let bad = scratch.file(
        "bad.yaml",
        "id: bad\nsteps:\n  - id: call\n    uses: fetch\n    allow: { http: [\"ftp://x.org\"] }\n",
    );
    let ran = scratch.run(&["run", bad.to_str().unwrap()]);
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(ran.stderr.contains("allow.http[0]"), "{}", ran.stderr);
}

#[test]
fn a_component_built_for_the_0_1_contract_still_loads_and_runs() {
    let scratch = Scratch::new(&["contract_v01"]);
    let wasm = scratch.plugins_dir().join("contract_v01.wasm");
    let shown = scratch.run(&["plugin", "inspect", wasm.to_str().unwrap(), "--json"]);
    assert_eq!(shown.json()["contract"], "0.1.0", "{shown:?}");
    let file = scratch.file(
        "old.yaml",
        "id: old\nsteps:\n  - { id: one, uses: contract_v01, with: { a: 1 } }\n  - { id: two, uses: contract_v01, with: { b: 2 } }\n",
    );
    let ran = scratch.run(&["run", file.to_str().unwrap()]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert_eq!(ran.json(), json!({ "input": { "b": 2 }, "runs": 2 }));
}

#[test]
fn plugin_output_and_workflow_outputs_are_held_to_their_schemas() {
    let scratch = Scratch::new(&["shaped"]);
    // The plugin's output-schema: a mismatch fails the attempt, fatally.
    let one = "id: shapes\nsteps:\n  - { id: s, uses: shaped, with: \"${{ inputs }}\" }\n";
    let (code, _, shown) = run(&scratch, one, &json!({ "total": "many" }));
    assert_ne!(code, Some(0));
    let error = step_error(&shown);
    assert_eq!(error["code"], "invalid_output", "{shown:#}");
    assert_eq!(error["retryable"], false);
    assert!(
        error["message"].as_str().unwrap().contains("/total"),
        "{error}"
    );
    let (code, outputs, _) = run(&scratch, one, &json!({ "total": 3 }));
    assert_eq!(code, Some(0));
    assert_eq!(outputs, json!({ "total": 3 }));

    // The workflow's outputs_schema: a mismatch fails the run with
    // `invalid_outputs`, naming the field...
    let strict = "id: strict\noutputs_schema: { type: object, required: [note], properties: { note: { type: string } } }\nsteps:\n  - { id: s, uses: shaped, with: \"${{ inputs }}\" }\n";
    let (code, _, shown) = run(&scratch, strict, &json!({ "total": 1 }));
    assert_ne!(code, Some(0));
    assert_eq!(
        shown["run"]["error"]["error"]["code"], "invalid_outputs",
        "{shown:#}"
    );
    assert!(shown["run"]["error"]["step"].is_null());
    assert!(
        shown["run"]["error"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("note"),
        "{shown:#}"
    );
    let (code, outputs, _) = run(&scratch, strict, &json!({ "total": 1, "note": "ok" }));
    assert_eq!(code, Some(0));
    assert_eq!(outputs["note"], "ok");
    // ... which a workflow-level catch can handle.
    let caught = "id: caught\noutputs_schema: { type: object, required: [note] }\nsteps:\n  - { id: s, uses: shaped, with: \"${{ inputs }}\" }\ncatch:\n  - if: \"${{ error.code == 'invalid_outputs' }}\"\n    steps:\n      - { id: fix, uses: shaped, with: { total: 0, note: \"fixed after ${{ error.code }}\" } }\n";
    let (code, outputs, shown) = run(&scratch, caught, &json!({ "total": 1 }));
    assert_eq!(code, Some(0), "{shown:#}");
    assert_eq!(outputs["note"], "fixed after invalid_outputs");
}

#[test]
fn secrets_are_sealed_at_rest_read_only_where_granted_and_never_shown() {
    let site = Site::start();
    let scratch = Scratch::new(&["fetch"]);
    let key = scratch.run(&["secrets", "new-key"]);
    assert_eq!(key.code, Some(0), "{key:?}");
    let key_file = scratch.file("secrets.key", key.stdout.trim());
    let host = serve_with(
        &scratch,
        1,
        &["--secrets-key-file", key_file.to_str().unwrap()],
    );
    let address = wait_for_address(&scratch).unwrap();
    let secret_value = "sk_live_8f2b1c9d";
    let mut set = scratch
        .weft()
        .args(["secrets", "set", "STRIPE_KEY", "--server", &address])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    set.stdin
        .take()
        .unwrap()
        .write_all(format!("{secret_value}\n").as_bytes())
        .unwrap();
    let set = set.wait_with_output().unwrap();
    assert!(set.status.success(), "{set:?}");
    let listed = scratch.run(&["secrets", "list", "--json", "--server", &address]);
    assert_eq!(listed.json()[0]["name"], "STRIPE_KEY", "{listed:?}");
    assert!(!listed.stdout.contains(secret_value));

    let grant = format!("http://127.0.0.1:{}", site.port);
    let workflow = format!(
        "id: charge\nsteps:\n  - id: charge\n    uses: fetch\n    with: {{ secret: STRIPE_KEY, requests: [{{ url: \"{}\" }}] }}\n    allow: {{ http: [\"{grant}\"] }}\n    secrets: [STRIPE_KEY]\n  - id: sneaky\n    uses: fetch\n    with: {{ secret: STRIPE_KEY }}\n    allow: {{ http: [\"{grant}\"] }}\n",
        site.url("/hello")
    );
    let (status, deployed) = host.send("/v1/workflows", "application/yaml", workflow.as_bytes());
    assert_eq!(status, 201, "{deployed}");
    let shown = run_ended(&host, &start_run(&host, "charge", &json!({})));
    // The granted step read it; the ungranted one was refused.
    let steps = shown["steps"].as_array().unwrap();
    let charge = steps.iter().find(|s| s["step_id"] == "charge").unwrap();
    assert_eq!(
        charge["output"]["secret_length"],
        secret_value.len(),
        "{shown:#}"
    );
    assert_eq!(charge["output"]["secret"], "[secret STRIPE_KEY]");
    assert!(
        charge["logs"]
            .to_string()
            .contains("the secret is [secret STRIPE_KEY]"),
        "{charge:#}"
    );
    let sneaky = steps.iter().find(|s| s["step_id"] == "sneaky").unwrap();
    assert_eq!(sneaky["error"]["code"], "secret", "{sneaky:#}");
    assert!(
        sneaky["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not granted the secret `STRIPE_KEY`"),
        "{sneaky:#}"
    );
    // Nowhere in the run, its logs, the audit log, or the store's file.
    assert!(!shown.to_string().contains(secret_value), "{shown:#}");
    let (_, audit) = host.call("GET", "/v1/audit", None);
    assert!(audit.to_string().contains("secret.set"), "{audit}");
    assert!(!audit.to_string().contains(secret_value));

    // The deployment (the token-less caller's, an admin's) granted it to
    // `fetch`; revoked, the step is refused it; granted again, it reads it.
    let listed = scratch.run(&["secrets", "list", "--server", &address]);
    assert!(listed.stdout.contains("  fetch sha256:"), "{listed:?}");
    let charge_of = |shown: &Value| {
        shown["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["step_id"] == "charge")
            .unwrap()
            .clone()
    };
    let revoked = scratch.run(&[
        "secrets",
        "revoke",
        "STRIPE_KEY",
        "--plugin",
        "fetch",
        "--server",
        &address,
    ]);
    assert_eq!(revoked.code, Some(0), "{revoked:?}");
    assert!(
        revoked.stdout.contains("no plugin may read it"),
        "{revoked:?}"
    );
    let refused = charge_of(&run_ended(&host, &start_run(&host, "charge", &json!({}))));
    assert_eq!(
        refused["error"]["code"], "secret_not_granted",
        "{refused:#}"
    );
    let granted = scratch.run(&[
        "secrets",
        "grant",
        "STRIPE_KEY",
        "--plugin",
        "fetch",
        "--server",
        &address,
    ]);
    assert_eq!(granted.code, Some(0), "{granted:?}");
    let again = charge_of(&run_ended(&host, &start_run(&host, "charge", &json!({}))));
    assert_eq!(
        again["output"]["secret_length"],
        secret_value.len(),
        "{again:#}"
    );
    drop(host);
    let store = std::fs::read(scratch.data_dir().join("weft.redb")).unwrap();
    assert!(
        !store
            .windows(secret_value.len())
            .any(|w| w == secret_value.as_bytes()),
        "the store holds the secret in the clear"
    );

    // A rotation: the new key current, the old one previous; reseal; then
    // the new key alone still opens the secret.
    let new_key = scratch.run(&["secrets", "new-key"]);
    let new_file = scratch.file("secrets-2.key", new_key.stdout.trim());
    let host = serve_with(
        &scratch,
        2,
        &[
            "--secrets-key-file",
            new_file.to_str().unwrap(),
            "--secrets-previous-key-file",
            key_file.to_str().unwrap(),
        ],
    );
    let address = wait_for_address(&scratch).unwrap();
    let resealed = scratch.run(&["secrets", "reseal", "--server", &address]);
    assert_eq!(resealed.code, Some(0), "{resealed:?}");
    assert!(
        resealed.stdout.contains("resealed 1 of 1"),
        "{}",
        resealed.stdout
    );
    drop(host);
    let host = serve_with(
        &scratch,
        3,
        &["--secrets-key-file", new_file.to_str().unwrap()],
    );
    let shown = run_ended(&host, &start_run(&host, "charge", &json!({})));
    let charge = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step_id"] == "charge")
        .unwrap()
        .clone();
    assert_eq!(
        charge["output"]["secret_length"],
        secret_value.len(),
        "{shown:#}"
    );
}

#[test]
fn webhooks_and_tenants_are_held_to_the_egress_policy() {
    let site = Site::start();
    let scratch = Scratch::new(&["fetch"]);
    let made = scratch.run(&["tokens", "create", "--local", "--role", "admin"]);
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    let admin = made.stdout.trim().to_owned();
    let host = serve_with(&scratch, 1, &[]);
    let hook = |url: String| json!({ "channel": "orders", "name": "h", "webhook": { "url": url } });

    // The host's own tenant may name a loopback address, but not a name
    // that resolves to one.
    let (status, refused) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/subscriptions",
        Some(&hook(format!("http://localhost:{}/hook", site.port))),
    );
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["error"]["code"], "http_denied", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("loopback"),
        "{refused}"
    );
    let (status, made) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/subscriptions",
        Some(&hook(site.url("/hook"))),
    );
    assert_eq!(status, 201, "{made}");

    // Another tenant reaches public addresses only...
    let (status, _) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tenants",
        Some(&json!({ "name": "acme" })),
    );
    assert_eq!(status, 201);
    let (status, token) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tokens",
        Some(&json!({ "tenant": "acme", "role": "owner" })),
    );
    assert_eq!(status, 201, "{token}");
    let acme = token["token"]["token"].as_str().unwrap().to_owned();
    for url in [
        site.url("/hook"),
        format!("http://[::1]:{}/hook", site.port),
        format!("http://2130706433:{}/hook", site.port),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.0.0.1/hook".to_owned(),
    ] {
        let (status, refused) = call_as(
            &host,
            Some(&acme),
            "POST",
            "/v1/subscriptions",
            Some(&hook(url.clone())),
        );
        assert_eq!(status, 403, "{url}: {refused}");
        assert_eq!(refused["error"]["code"], "http_denied", "{url}");
    }
    // ... and its workflows may grant nothing outside them.
    let grant = site.url("");
    let workflow = fetching(&[&grant]);
    let (status, refused) = send_as(
        &host,
        &acme,
        "/v1/workflows",
        "application/yaml",
        workflow.as_bytes(),
    );
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_grant", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("outside the tenant's egress policy"),
        "{refused}"
    );

    // A policy that names the address lets both through.
    let (status, set) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tenants/acme/quota",
        Some(&json!({ "egress": [format!("http://127.0.0.1:{}", site.port)] })),
    );
    assert_eq!(status, 200, "{set}");
    let (status, made) = call_as(
        &host,
        Some(&acme),
        "POST",
        "/v1/subscriptions",
        Some(&hook(site.url("/hook"))),
    );
    assert_eq!(status, 201, "{made}");
    let (status, deployed) = send_as(
        &host,
        &acme,
        "/v1/workflows",
        "application/yaml",
        workflow.as_bytes(),
    );
    assert_eq!(status, 201, "{deployed}");
    // A policy that is not a list of rules is refused.
    let (status, refused) = call_as(
        &host,
        Some(&admin),
        "POST",
        "/v1/tenants/acme/quota",
        Some(&json!({ "egress": ["gopher://x"] })),
    );
    assert_eq!(status, 400, "{refused}");
}
