//! The checks of whole definitions: what `parse` accepts, and the text
//! and place of what it refuses.

use std::time::Duration;

use super::parse;
use crate::{DefinitionError, Format, VersionPin, Workflow};

fn parse_yaml(source: &str) -> Result<Workflow, DefinitionError> {
    parse(source, Format::Yaml, "wf.yaml", false)
}

fn error_of(source: &str) -> String {
    match parse_yaml(source) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

const GOOD: &str = "\
id: greet
inputs: { type: object, required: [name] }
steps:
  - id: render
    uses: template@1
    with:
      template: 'Hello, {{ who }}!'
      vars: { who: '${{ inputs.name }}' }
    timeout: 5s
    memory_limit: 32MiB
  - { id: shape, uses: transform, with: { data: '${{ steps.render.output }}' } }
outputs:
  text: '${{ steps.shape.output.text }}'
";

#[test]
fn a_good_workflow_is_read_in_full() {
    let wf = parse_yaml(GOOD).unwrap();
    assert_eq!(wf.id, "greet");
    assert_eq!(wf.version, 1);
    assert_eq!(wf.steps.len(), 2);
    assert_eq!(
        wf.steps[0].call().unwrap().timeout,
        Some(Duration::from_secs(5))
    );
    assert_eq!(wf.steps[0].call().unwrap().memory_limit, Some(32 << 20));
    assert_eq!(wf.steps[0].line, Some(4));
    assert_eq!(wf.steps[1].line, Some(11));
    assert_eq!(wf.steps[0].call().unwrap().uses.to_string(), "template@^1");
    assert_eq!(wf.steps[1].call().unwrap().uses.version, VersionPin::Any);
}

#[test]
fn yaml_syntax_errors_name_the_line() {
    let e = error_of("id: x\nsteps:\n  - id: a\n    uses: \"unclosed\n");
    assert_eq!(
        e,
        "wf.yaml:5:1: found unexpected end of stream, while scanning a quoted scalar at line 4 column 11"
    );
}

#[test]
fn unknown_fields_are_named_with_their_line() {
    let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    retries: 3\n");
    assert!(e.starts_with("wf.yaml:5:"), "{e}");
    assert!(e.contains("unknown field `retries`"), "{e}");
}

#[test]
fn a_missing_id_is_named() {
    let e = error_of("steps:\n  - id: a\n    uses: echo\n");
    assert!(e.contains("missing field `id`"), "{e}");
}

#[test]
fn duplicate_step_ids_point_at_the_second() {
    let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n  - id: a\n    uses: echo\n");
    assert_eq!(
        e,
        "wf.yaml:5: step `a`: steps[1].id: the id `a` is used by an earlier step"
    );
}

#[test]
fn step_lines_are_found_in_every_style() {
    let wf = parse_yaml(
        "id: same\nsteps:\n  - { id: a, uses: echo }\n  -\n    uses: echo\n    \"id\": 'same'\n  - uses: echo\n    id: b-2\n",
    )
    .unwrap();
    let lines: Vec<_> = wf.steps.iter().map(|s| s.line).collect();
    assert_eq!(lines, [Some(3), Some(6), Some(8)]);
}

#[test]
fn bad_expressions_name_the_step_and_field() {
    let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    with: { n: '${{ 1 + }}' }\n");
    assert!(e.starts_with("wf.yaml:3: step `a`: with.n:"), "{e}");
    assert!(e.contains("1 +"), "{e}");
}

#[test]
fn references_to_later_or_unknown_steps_are_refused() {
    let e = error_of(
        "id: x\nsteps:\n  - id: a\n    uses: echo\n    with: '${{ steps.b.output }}'\n  - id: b\n    uses: echo\n",
    );
    assert!(e.contains("step `a`") && e.contains("`b`"), "{e}");
    let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    with: '${{ input.x }}'\n");
    assert!(e.contains("`input`"), "{e}");
}

#[test]
fn conditions_and_retries_are_read_and_checked() {
    let wf = parse_yaml(
        "id: x\nsteps:\n  - id: a\n    uses: echo\n    if: inputs.go\n    retry: { max_attempts: 3, initial: 10ms, max: 1s, retry_on: [timeout] }\n    continue_on_error: true\n",
    )
    .unwrap();
    let step = &wf.steps[0];
    assert!(step.condition.is_some());
    assert!(step.continue_on_error);
    assert_eq!(step.retry.max_attempts, 3);
    assert_eq!(step.retry.initial, Duration::from_millis(10));
    assert_eq!(
        step.retry.retry_on.as_deref(),
        Some(&["timeout".to_owned()][..])
    );
    let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    retry: { max_attempts: 0 }\n");
    assert!(
        e.contains("retry: max_attempts must be from 1 to 100, not 0"),
        "{e}"
    );
    let e = error_of(
        "id: x\nsteps:\n  - id: a\n    uses: echo\n    retry: { max_attempts: 2, initial: 5s, max: 1s }\n",
    );
    assert!(e.contains("max (1s) is shorter than initial (5s)"), "{e}");
    let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    if: steps.b.output\n");
    assert!(
        e.contains("step `a`: if: `steps.b.output`: refers to step `b`"),
        "{e}"
    );
}

#[test]
fn bad_fields_are_explained() {
    let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    timeout: soon\n");
    assert!(e.contains("timeout: `soon` is not a duration"), "{e}");
    let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    memory_limit: 9GiB\n");
    assert!(e.contains("over the largest limit"), "{e}");
    let e = error_of("id: x\nsteps:\n  - id: a\n    uses: 'echo@not a version'\n");
    assert!(
        e.contains("uses: `not a version` is not a version requirement"),
        "{e}"
    );
    let e = error_of("id: 'has space'\nsteps:\n  - id: a\n    uses: echo\n");
    assert!(e.contains("id: `has space` has ` `"), "{e}");
    let e = error_of("id: x\nsteps: []\n");
    assert!(e.contains("at least one step"), "{e}");
    let e = error_of("id: x\ninputs: { type: 12 }\nsteps:\n  - id: a\n    uses: echo\n");
    assert!(
        e.starts_with("wf.yaml:2: inputs: not a usable JSON Schema"),
        "{e}"
    );
}

#[test]
fn json_definitions_are_accepted_and_located() {
    let wf = parse(
        r#"{"id": "x", "steps": [{"id": "a", "uses": "echo@sha256:ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789"}]}"#,
        Format::Json,
        "wf.json",
        false,
    )
    .unwrap();
    assert!(
        matches!(&wf.steps[0].call().unwrap().uses.version, VersionPin::Digest(d) if d.starts_with("sha256:abcdef"))
    );
    let e = parse(
        "{\"id\": \"x\",\n \"steps\": [}",
        Format::Json,
        "wf.json",
        false,
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("wf.json:2:"), "{e}");
}

#[test]
fn input_schemas_report_every_problem_with_its_place() {
    let wf = parse_yaml(GOOD).unwrap();
    let schema = wf.inputs.unwrap();
    assert!(schema.check(&serde_json::json!({"name": "Ada"})).is_ok());
    let problems = schema
        .check(&serde_json::json!({"nom": "Ada"}))
        .unwrap_err();
    assert_eq!(problems.len(), 1);
    assert!(
        problems[0].contains("at /:") && problems[0].contains("name"),
        "{problems:?}"
    );
}

#[test]
fn brackets_nested_too_deep_are_refused_at_once_with_where() {
    let deep = |open: &str, close: &str, depth: usize| {
        format!(
            "id: x\nsteps:\n  - {{ id: a, uses: echo, with: {}1{} }}\n",
            open.repeat(depth),
            close.repeat(depth)
        )
    };
    // What took the YAML parser most of a minute is refused in a moment.
    let started = std::time::Instant::now();
    let error = error_of(&deep("{a: ", "}", 80_000));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{error}"
    );
    assert!(error.contains(":3:"), "{error}");
    assert!(error.contains("nested deeper than 64 levels"), "{error}");
    assert!(error_of(&deep("[", "]", 65)).contains("nested deeper"));
    // As deep as the limit, and brackets in strings and comments, are fine.
    assert!(parse_yaml(&deep("[", "]", 40)).is_ok());
    let quoted = format!(
        "id: x\nsteps:\n  - {{ id: a, uses: echo, with: '{0}' }} # {0}\n",
        "[".repeat(100)
    );
    assert!(parse_yaml(&quoted).is_ok());
    let json = format!("{{\"id\": \"x\", \"steps\": {}]}}", "[".repeat(200));
    let refused = parse(&json, Format::Json, "wf.json", false)
        .unwrap_err()
        .to_string();
    assert!(refused.contains("wf.json:1:"), "{refused}");
}

#[test]
fn snapshots_are_named_pinned_or_latest_and_a_bad_one_is_named_with_its_line() {
    let with = |snapshots: &str| {
        format!("id: wf\nsnapshots: {snapshots}\nsteps:\n  - {{ id: a, uses: echo }}\n")
    };
    let workflow = parse_yaml(&with("[prices, { name: flags, revision: latest }]")).unwrap();
    assert_eq!(
        workflow.snapshots,
        [
            crate::SnapshotUse {
                name: "prices".to_owned(),
                latest: false
            },
            crate::SnapshotUse {
                name: "flags".to_owned(),
                latest: true
            }
        ]
    );
    assert!(parse_yaml(GOOD).unwrap().snapshots.is_empty());
    for (bad, said) in [
        ("[{ name: p, revison: latest }]", "unknown field `revison`"),
        ("[{ name: p, revision: 3 }]", "revision `3` is not one"),
        ("[p, p]", "`p` is named twice"),
        ("[\"a b\"]", "`a b`"),
        ("[{ revision: latest }]", "no `name`"),
        ("[7]", "7 is not a store"),
    ] {
        let error = parse_yaml(&with(bad)).unwrap_err().to_string();
        assert!(
            error.contains("wf.yaml:2") && error.contains(said),
            "{bad}: {error}"
        );
    }
}

#[test]
fn retain_is_a_duration_or_forever_and_a_bad_one_is_named_with_its_line() {
    let with =
        |retain: &str| format!("id: wf\nretain: {retain}\nsteps:\n  - {{ id: a, uses: echo }}\n");
    let workflow = parse_yaml(&with("30d")).unwrap();
    assert_eq!(
        workflow.retain,
        Some(crate::Retain::For(Duration::from_secs(30 * 86_400)))
    );
    assert_eq!(
        parse_yaml(&with("forever")).unwrap().retain,
        Some(crate::Retain::Forever)
    );
    assert_eq!(parse_yaml(GOOD).unwrap().retain, None);
    for bad in ["-5s", "soon", "0s"] {
        let error = error_of(&with(bad));
        assert!(
            error.contains("wf.yaml:2") && error.contains("retain:"),
            "{bad}: {error}"
        );
    }
}

#[test]
fn the_hosts_channels_are_refused_to_new_definitions_only() {
    let source = "id: wf\nsteps:\n  - { id: tell, emit: weft.runs.ended, with: {} }\n";
    let error = error_of(source);
    assert!(
        error.contains("weft.runs.ended") && error.contains("reserved"),
        "{error}"
    );
    // A definition deployed before the name was reserved still reads, so
    // that its runs go on (the engine refuses the emit itself).
    assert!(parse(source, Format::Yaml, "wf.yaml", true).is_ok());
    assert!(parse_yaml("id: wf\nsteps:\n  - { id: tell, emit: weftish, with: {} }\n").is_ok());
}

#[test]
fn a_sleep_needs_a_unit_unless_stored_before() {
    let bare = "id: nap\nsteps:\n  - { id: nap, sleep: 90 }\n";
    let error = error_of(bare);
    assert!(error.contains("sleep: `90` has no unit"), "{error}");
    assert!(error.contains("`90s`"), "{error}");
    // A definition stored before the rule still loads.
    assert!(parse(bare, Format::Yaml, "wf.yaml", true).is_ok());
    assert!(parse_yaml("id: nap\nsteps:\n  - { id: nap, sleep: 90s }\n").is_ok());
    assert!(parse_yaml("id: nap\nsteps:\n  - { id: nap, sleep: \"${{ 90 }}\" }\n").is_ok());
}

#[test]
fn serde_names_of_private_types_are_said_as_what_to_write() {
    let error = error_of("id: ask\nsteps:\n  - { id: approve, await: 5 }\n");
    assert!(
        error.contains("a map such as `{}` or `{timeout: 24h}`"),
        "{error}"
    );
    assert!(!error.contains("Raw"), "{error}");
    let error = error_of("id: x\nsteps:\n  - 5\n");
    assert!(error.contains("a step: a map with `id`"), "{error}");
}

#[test]
fn a_condition_that_can_never_be_true_or_false_is_refused() {
    let with_if = |condition: &str| {
        format!("id: x\nsteps:\n  - id: a\n    uses: echo\n    if: {condition}\n")
    };
    let e = error_of(&with_if("\"n is ${{ inputs.n }}\""));
    assert!(
        e.contains("text around an expression") && e.contains("wf.yaml:"),
        "{e}"
    );
    let e = error_of(&with_if("\"${{ 1 + 1 }}\""));
    assert!(e.contains("`if` is always 2"), "{e}");
    let e = error_of(&with_if("\"'yes'\""));
    assert!(e.contains("always \"yes\""), "{e}");
    // What depends on the run is known only then.
    for fine in [
        "true",
        "\"inputs.n > 1\"",
        "\"${{ inputs.flag }}\"",
        "\"1 < 2\"",
        "|\n      ${{ inputs.flag }}\n",
    ] {
        parse_yaml(&with_if(fine)).unwrap_or_else(|e| panic!("{fine}: {e}"));
    }
    // A definition stored before the rule still loads: its runs resume.
    let stored = with_if("\"${{ 1 + 1 }}\"");
    assert!(parse(&stored, Format::Yaml, "wf.yaml", true).is_ok());
}
