//! Property tests over everything a tenant's text reaches before a run:
//! the workflow parser (YAML and JSON), the duration and time parsers, and
//! CEL expressions compiled and evaluated. Whatever the input, each answers
//! `Ok` or `Err` and never panics; what it accepts stays within the bounds
//! the host relies on. A failure prints the case and proptest's seed, and
//! the case is kept in `proptest-regressions/` to be tried first next time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use weft_core::Timestamp;
use weft_core::clock::{MAX_DURATION, parse_duration};
use weft_model::{Format, Scope, Template};

/// A workflow that uses every kind of step and most fields: the seed the
/// structured cases mutate.
const WORKFLOW: &str = r#"
id: fuzzed
version: 3
retain: 30d
timeout: 1h
inputs:
  type: object
  properties: { items: { type: array }, n: { type: integer } }
on:
  schedule:
    - { id: hourly, cron: "0 0 * * * *", timezone: Europe/Paris, jitter: 5s, catch_up: latest, overlap: skip, input: { n: 1 } }
steps:
  - id: first
    uses: echo@1
    with: { x: "${{ inputs.n + 1 }}", y: "${{ string(run.id) + 'a' }}" }
    timeout: 5s
    memory_limit: 16MiB
    retry: { max_attempts: 3, backoff: exponential, initial: 10ms, max: 1s, retry_on: [timeout] }
    allow: { http: ["https://example.com"] }
    secrets: [TOKEN]
    continue_on_error: true
  - id: nap
    sleep: "${{ duration('2s') }}"
  - id: until
    sleep_until: "2030-01-01T00:00:00Z"
  - id: approve
    await: { timeout: 1d }
  - id: tell
    emit: news
    with: { n: "${{ steps.first.output.x }}" }
  - id: both
    parallel:
      - { id: left, uses: echo, with: 1 }
      - { id: right, subflow: other, with: { a: 2 } }
  - id: pick
    switch:
      - { if: "${{ inputs.n > 2 }}", steps: [ { id: big, uses: echo } ] }
      - steps: [ { id: small, uses: echo } ]
  - id: each
    foreach: "${{ inputs.items }}"
    concurrency: 4
    steps: [ { id: one, uses: echo, with: "${{ item }}" } ]
  - id: spin
    while: "!has(steps.tick) || steps.tick.output.value < 3"
    max_iterations: 10
    steps: [ { id: tick, uses: echo } ]
catch:
  - if: "${{ error.code == 'timeout' }}"
    steps: [ { id: mend, uses: echo, with: "${{ error }}" } ]
outputs:
  x: "${{ steps.first.output.x }}"
"#;

/// Strings that sit on the edges the host has to bound.
const EDGES: &[&str] = &[
    "",
    " ",
    "0",
    "-1",
    "0s",
    "1ns",
    "300000000000y",
    "18446744073709551615ms",
    "99999999999999999999",
    "100y",
    "101y",
    "9999-12-31T23:59:59Z",
    "10000-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
    "-0001-01-01T00:00:00Z",
    "${{ }}",
    "${{ duration('300000000000y') }}",
    "${{ timestamp('9999-12-31T23:59:59Z') + duration('9999999h') }}",
    "${{ 1 / 0 }}",
    "${{ -9223372036854775808 / -1 }}",
    "${{ 9223372036854775807 + 1 }}",
    "${{ [1,2,3][5] }}",
    "${{ inputs.items.map(x, x * x) }}",
    "${{ 'a' * 3 }}",
    "${{ ((((((((((((1)))))))))))) }}",
    "${{",
    "}}",
    "*/0 * * * * *",
    "0 0 0 31 2 *",
    "Mars/Olympus",
    "a/../../b",
    "\u{0}",
    "é",
    "4294967296GiB",
];

/// A JSON value of small depth, its strings often from [`EDGES`].
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        prop::sample::select(EDGES).prop_map(|s| json!(s)),
        "[a-z_${}(). '0-9]{0,24}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,12}", inner), 0..4)
                .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// How many nodes `value` has, itself included.
fn count(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(fields) => fields.values().map(count).sum(),
        _ => 0,
    }
}

/// Replaces the node `at` places into `node` (depth first) by `with`, or,
/// given a `key` and an object there, sets that field to `with`. True once
/// done.
fn mutate(node: &mut Value, at: &mut usize, with: &Value, key: Option<&str>) -> bool {
    if *at == 0 {
        match (node, key) {
            (Value::Object(fields), Some(key)) => {
                fields.insert(key.to_owned(), with.clone());
            }
            (node, _) => *node = with.clone(),
        }
        return true;
    }
    *at -= 1;
    match node {
        Value::Array(items) => items.iter_mut().any(|item| mutate(item, at, with, key)),
        Value::Object(fields) => fields
            .values_mut()
            .any(|field| mutate(field, at, with, key)),
        _ => false,
    }
}

/// The seed workflow with each `(at, with, key)` applied by [`mutate`],
/// `at` taken modulo the node count.
fn mutated(mutations: &[(usize, Value, Option<&'static str>)]) -> Value {
    let mut workflow: Value = serde_yaml_ng::from_str(WORKFLOW).unwrap();
    for (at, with, key) in mutations {
        let mut at = at % count(&workflow);
        mutate(&mut workflow, &mut at, with, *key);
    }
    workflow
}

const KEYS: &[&str] = &[
    "timeout",
    "sleep",
    "sleep_until",
    "retry",
    "memory_limit",
    "with",
    "if",
    "foreach",
    "while",
    "max_iterations",
    "concurrency",
    "retain",
    "jitter",
    "cron",
    "await",
    "uses",
    "subflow",
    "steps",
    "secrets",
    "allow",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// Any text is a workflow or an error, as YAML and as JSON.
    #[test]
    fn any_text_parses_or_is_refused(text in "\\PC{0,400}") {
        let _ = weft_model::parse(&text, Format::Yaml, "fuzz.yaml");
        let _ = weft_model::parse(&text, Format::Json, "fuzz.json");
    }

    /// Text made of YAML's own punctuation: anchors, aliases, tags, flow
    /// and block collections, nested.
    #[test]
    fn yaml_punctuation_parses_or_is_refused(text in "([-:&*!|>{}\\[\\],'\"#?% \n]|a|b|id|steps|uses){0,200}") {
        let _ = weft_model::parse(&text, Format::Yaml, "fuzz.yaml");
    }

    /// The seed workflow with some of its nodes replaced by other values:
    /// each case reaches the checks of whatever field it changed.
    #[test]
    fn a_mutated_workflow_parses_or_is_refused(
        mutations in prop::collection::vec(
            (any::<usize>(), value(), prop::option::of(prop::sample::select(KEYS))),
            1..5,
        )
    ) {
        let workflow = mutated(&mutations);
        let json = serde_json::to_string(&workflow).unwrap();
        let _ = weft_model::parse(&json, Format::Json, "fuzz.json");
        let yaml = serde_yaml_ng::to_string(&workflow).unwrap();
        if let Ok(parsed) = weft_model::parse(&yaml, Format::Yaml, "fuzz.yaml") {
            // What is accepted is within the host's bounds.
            for step in parsed.all_steps() {
                if let Some(call) = step.call() && let Some(timeout) = call.timeout {
                    prop_assert!(timeout <= MAX_DURATION, "step {} timeout {timeout:?}", step.id);
                }
            }
        }
    }

    /// Durations: accepted ones are at most the bound, and a time that
    /// far ahead of any time weft takes is still a time.
    #[test]
    fn durations_are_bounded(text in prop_oneof![
        "\\PC{0,30}",
        "[0-9]{1,25}(ns|us|ms|s|m|h|d|w|y|M|min|sec|years)",
        prop::sample::select(EDGES).prop_map(str::to_owned),
    ]) {
        if let Ok(duration) = parse_duration(&text) {
            prop_assert!(duration <= MAX_DURATION, "{text}: {duration:?}");
            let later = Timestamp::LAST + duration;
            prop_assert!(later >= Timestamp::LAST);
            let _ = later.to_string();
        }
        if let Ok(time) = Timestamp::parse(&text) {
            prop_assert!(time <= Timestamp::LAST);
            let _ = (time + MAX_DURATION).to_string();
        }
    }

    /// An expression compiles or is refused, and a compiled one evaluates
    /// to a value or an error, whatever the inputs.
    #[test]
    fn expressions_compile_and_evaluate_or_are_refused(
        expression in prop_oneof![
            "[a-z0-9_.()\\[\\]+*/%<>=!&|?:,' -]{0,60}",
            prop::sample::select(EDGES).prop_map(str::to_owned),
        ],
        inputs in value(),
    ) {
        let text = if expression.contains("${{") {
            expression
        } else {
            format!("${{{{ {expression} }}}}")
        };
        if let Ok(template) = Template::compile(&json!(text), "with") {
            let scope = Scope::new("fuzzed", "01a00000-0000-7000-8000-000000000000", &inputs);
            let _ = template.eval(&scope);
        }
    }
}

/// Deep nesting, which a recursive parser answers with a stack overflow
/// (an abort no `catch_unwind` stops), is refused by its bound first.
#[test]
fn deep_nesting_is_refused_not_overflowed() {
    for depth in [100, 1_000, 100_000] {
        let open = "(".repeat(depth);
        let close = ")".repeat(depth);
        let expression = json!(format!("${{{{ {open}1{close} }}}}"));
        let compiled = Template::compile(&expression, "with");
        if depth >= 1_000 {
            assert!(compiled.is_err(), "{depth} parentheses");
        }
        let brackets = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let workflow = format!("id: deep\nsteps:\n  - {{ id: a, uses: echo, with: {brackets} }}\n");
        let parsed = weft_model::parse(&workflow, Format::Yaml, "deep.yaml");
        if depth >= 1_000 {
            assert!(parsed.is_err(), "{depth} brackets");
        }
        let json = format!(
            "{{\"id\": \"deep\", \"steps\": [{{\"id\": \"a\", \"uses\": \"echo\", \"with\": {brackets}}}]}}"
        );
        let parsed = weft_model::parse(&json, Format::Json, "deep.json");
        if depth >= 1_000 {
            assert!(parsed.is_err(), "{depth} brackets in JSON");
        }
    }
}
