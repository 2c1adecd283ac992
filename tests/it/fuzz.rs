//! Random requests to every route of the OpenAPI document of a real
//! `weft serve`: bodies shaped by each route's documented fields with
//! values from the edges the host has to bound, odd path segments and
//! query strings. No answer may be a `500` (a `503` or `507` is the host
//! saying it is busy or full, which these requests do not make it), no
//! panic may be counted, and the host answers its health check after.
//! The seed is `WEFT_TEST_SEED` or the clock's, printed; proptest shrinks
//! a failure to its smallest request.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{Map, Value, json};

use crate::common::server::{agent, serve};
use crate::common::{Scratch, test_seed};

/// Strings on the edges: durations, times, ids, expressions, paths.
const EDGES: &[&str] = &[
    "",
    "0",
    "-1",
    "300000000000y",
    "18446744073709551615",
    "9999-12-31T23:59:59Z",
    "10000-01-01T00:00:00Z",
    "${{ 1 / 0 }}",
    "${{",
    "w",
    "echo",
    "default",
    "admin",
    "owner",
    "..",
    "../../etc/passwd",
    "01a00000-0000-7000-8000-000000000000",
    "*/0 * * * * *",
    "http://169.254.169.254/",
    "http://[::1]:1/",
    "id: x\nsteps: [{id: a, uses: echo}]\n",
    "\u{0}",
    "é",
];

/// Path segments for a route's `{...}` parts.
const SEGMENTS: &[&str] = &[
    "w",
    "x",
    "echo",
    "default",
    "a",
    "cancel",
    "01a00000-0000-7000-8000-000000000000",
    "%00",
    "..",
    "a%2Fb",
    "%E2%80%AE",
    "99999999999999999999",
];

const QUERY_KEYS: &[&str] = &[
    "limit", "state", "workflow", "tenant", "channel", "after", "before", "since", "cursor",
    "revision", "from", "to", "step",
];

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        (-1e300f64..1e300).prop_map(|f| json!(f)),
        prop::sample::select(EDGES).prop_map(|s| json!(s)),
        "[a-z0-9_ .:/-]{0,16}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,10}", inner), 0..4)
                .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// One documented operation: its method, its route, and the names of its
/// body's fields.
#[derive(Debug, Clone)]
struct Operation {
    method: String,
    route: String,
    fields: Vec<String>,
}

/// A request: an operation, its path segments, its query, its body.
#[derive(Debug, Clone)]
struct Request {
    operation: Operation,
    segments: Vec<&'static str>,
    query: Vec<(&'static str, Value)>,
    body: Option<Value>,
}

impl Request {
    fn path(&self) -> String {
        let mut path = String::new();
        let mut segments = self.segments.iter();
        for part in self.operation.route.split('/').skip(1) {
            path.push('/');
            if part.starts_with('{') {
                path.push_str(segments.next().copied().unwrap_or("x"));
            } else {
                path.push_str(part);
            }
        }
        for (i, (key, value)) in self.query.iter().enumerate() {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let encoded: String = text
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect();
            path.push(if i == 0 { '?' } else { '&' });
            path.push_str(&format!("{key}={encoded}"));
        }
        path
    }
}

/// A request to one of `operations`: documented fields set to random
/// values, sometimes a field of another name, sometimes a body that is
/// not an object at all.
fn request(operations: Vec<Operation>) -> impl Strategy<Value = Request> {
    prop::sample::select(operations).prop_flat_map(|operation| {
        let fields = operation.fields.clone();
        let body = prop_oneof![
            4 => prop::collection::vec(
                (prop::sample::select(if fields.is_empty() { vec!["x".to_owned()] } else { fields }), value()),
                0..6,
            )
            .prop_map(|set| Some(Value::Object(set.into_iter().collect::<Map<_, _>>()))),
            1 => value().prop_map(Some),
            1 => Just(None),
        ];
        (
            Just(operation),
            prop::collection::vec(prop::sample::select(SEGMENTS), 3),
            prop::collection::vec((prop::sample::select(QUERY_KEYS), value()), 0..3),
            body,
        )
            .prop_map(|(operation, segments, query, body)| Request {
                operation,
                segments,
                query,
                body,
            })
    })
}

/// The operations of the document, streams left out (they answer by
/// staying open).
fn operations(document: &Value) -> Vec<Operation> {
    let mut all = Vec::new();
    for (route, methods) in document["paths"].as_object().unwrap() {
        if route.ends_with("/events") {
            continue;
        }
        for (method, operation) in methods.as_object().unwrap() {
            let schema = &operation["requestBody"]["content"]["application/json"]["schema"];
            let fields = schema["properties"]
                .as_object()
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            all.push(Operation {
                method: method.to_uppercase(),
                route: route.clone(),
                fields,
            });
        }
    }
    all
}

fn send(url: &str, request: &Request) -> (u16, String) {
    let url = format!("{url}{}", request.path());
    let agent = agent();
    let body = request.body.as_ref().map(Value::to_string);
    let sent = match (request.operation.method.as_str(), body) {
        ("GET", _) => agent.get(&url).call(),
        ("DELETE", _) => agent.delete(&url).call(),
        ("POST", Some(body)) => agent
            .post(&url)
            .header("content-type", "application/json")
            .send(body),
        ("POST", None) => agent.post(&url).send_empty(),
        ("PUT", Some(body)) => agent
            .put(&url)
            .header("content-type", "application/json")
            .send(body),
        ("PUT", None) => agent.put(&url).send_empty(),
        (method, _) => panic!("no {method} in the document's methods"),
    };
    match sent {
        Ok(mut response) => (
            response.status().as_u16(),
            response.body_mut().read_to_string().unwrap_or_default(),
        ),
        Err(e) => (0, e.to_string()),
    }
}

#[test]
fn random_requests_to_every_route_answer_without_a_500_or_a_panic() {
    let scratch = Scratch::new(&["echo"]);
    let host = serve(&scratch, 0);
    let (status, body) = host.send(
        "/v1/workflows",
        "application/yaml",
        b"id: w\nsteps:\n  - { id: a, uses: echo }\n  - { id: wait, await: {} }\n",
    );
    assert_eq!(status, 201, "{body}");
    let (_, document) = host.call("GET", "/v1/openapi.json", None);
    let operations = operations(&document);
    assert!(operations.len() > 40, "{} operations", operations.len());

    let seed = test_seed();
    println!("WEFT_TEST_SEED={seed}");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases: 3000,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, usize>::new());
    let answered = runner.run(&request(operations), |request| {
        let (status, body) = send(&host.url, &request);
        *statuses.lock().unwrap().entry(status).or_default() += 1;
        if status == 0 || status == 500 || (status > 500 && status != 503 && status != 507) {
            return Err(TestCaseError::fail(format!(
                "{} {} {}: {status} {body}",
                request.operation.method,
                request.path(),
                request.body.map(|b| b.to_string()).unwrap_or_default(),
            )));
        }
        Ok(())
    });
    if let Err(failure) = answered {
        panic!("WEFT_TEST_SEED={seed}: {failure}");
    }
    // The requests reach past the router: some are served, many refused
    // for what their bodies say.
    let statuses = statuses.into_inner().unwrap();
    println!("answers by status: {statuses:?}");
    let of = |status: u16| statuses.get(&status).copied().unwrap_or(0);
    assert!(of(200) + of(201) + of(202) > 50, "{statuses:?}");
    assert!(of(400) + of(422) > 200, "{statuses:?}");

    let (status, health) = host.call("GET", "/v1/health", None);
    assert_eq!(status, 200, "{health}");
    let mut metrics = agent().get(format!("{}/metrics", host.url)).call().unwrap();
    let text = metrics.body_mut().read_to_string().unwrap();
    let panics: f64 = text
        .lines()
        .filter(|l| l.starts_with("weft_panics_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(panics, 0.0, "panics counted:\n{text}");
}
