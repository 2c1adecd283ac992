//! Backup and restore: `weft backup` copies the store while `weft serve`
//! commits beside it; `weft restore` makes a new store from the copy, and
//! `weft serve` there finishes every run that was running, each step once
//! as of the copy (a shared counter comes out exact), with every ended
//! run there.

use serde_json::{Value, json};

use crate::common::Scratch;
use crate::common::server::{run_ended, serve, start_run};

const LOAD: &str = r#"
id: load
steps:
  - { id: first, uses: counter, with: { key: total, by: "${{ inputs.by }}" } }
  - { id: nap, sleep: 300ms }
  - { id: last, uses: counter, with: { key: total, by: "${{ inputs.by }}" } }
outputs: "${{ steps.last.output.value }}"
"#;

#[test]
fn a_backup_taken_under_load_restores_and_every_run_finishes_once() {
    let first = Scratch::new(&["counter"]);
    std::fs::create_dir_all(first.path().join("workflows")).unwrap();
    std::fs::write(first.path().join("workflows/load.yaml"), LOAD).unwrap();
    let mut host = serve(&first, 0);
    for _ in 0..20 {
        start_run(&host, "load", &json!({ "by": 1 }));
    }
    let early = first.path().join("early.weft");
    let taken = first.run(&["backup", early.to_str().unwrap()]);
    assert_eq!(taken.code, Some(0), "{taken:?}");
    for _ in 0..10 {
        start_run(&host, "load", &json!({ "by": 1 }));
    }
    // Under load: runs are napping and waking as it is copied.
    let backup = first.path().join("backup.weft");
    let taken = first.run(&["backup", backup.to_str().unwrap()]);
    assert_eq!(taken.code, Some(0), "{taken:?}");
    host.kill();
    let again = first.run(&["backup", backup.to_str().unwrap()]);
    assert_eq!(
        again.code,
        Some(2),
        "a backup never writes over a file: {again:?}"
    );
    assert!(again.stderr.contains("exists already"), "{again:?}");

    let second = Scratch::new(&["counter"]);
    std::fs::create_dir_all(second.path().join("workflows")).unwrap();
    std::fs::write(second.path().join("workflows/load.yaml"), LOAD).unwrap();
    let restored = second.run(&["restore", backup.to_str().unwrap()]);
    assert_eq!(restored.code, Some(0), "{restored:?}");
    let twice = second.run(&["restore", backup.to_str().unwrap()]);
    assert_eq!(twice.code, Some(2), "{twice:?}");
    let listed = second.run(&["runs", "list", "--limit", "1000", "--json"]);
    assert_eq!(listed.code, Some(0), "{listed:?}");
    let runs: Vec<Value> = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(
        runs.len(),
        30,
        "every run acknowledged before the backup is in it"
    );
    let host = serve(&second, 0);
    for run in &runs {
        let id = run["id"].as_str().unwrap();
        let shown = run_ended(&host, id);
        assert_eq!(shown["run"]["state"], "succeeded", "run {id}: {shown}");
        let calls: Vec<&Value> = shown["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|step| step["step_id"] == "first" || step["step_id"] == "last")
            .collect();
        assert_eq!(
            calls.len(),
            2,
            "run {id}: each counter step once: {calls:?}"
        );
    }
    let probe = start_run(&host, "load", &json!({ "by": 0 }));
    // Deleting a run that has not ended is refused; once it ended, it goes.
    let (status, body) = host.call("DELETE", &format!("/v1/runs/{probe}"), None);
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("run_not_ended")),
        "{body}"
    );
    let shown = run_ended(&host, &probe);
    assert_eq!(
        shown["run"]["outputs"],
        json!(60),
        "two bumps per run, once each"
    );
    let (status, body) = host.call("DELETE", &format!("/v1/runs/{probe}"), None);
    assert_eq!(status, 200, "{body}");
    let (status, _) = host.call("GET", &format!("/v1/runs/{probe}"), None);
    assert_eq!(status, 404);
}
