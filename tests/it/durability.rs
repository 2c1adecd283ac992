//! The store under a real process that dies: `kill -9` in the middle of a
//! step must leave every committed step, and the run resumable at the step it
//! had reached, in a store that still opens.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::Scratch;
use serde_json::json;

#[test]
fn kill_9_mid_step_keeps_every_committed_step() {
    let scratch = Scratch::new(&["echo", "spin"]);
    let wf = scratch.file(
        "wf.yaml",
        "id: doomed\nsteps:\n  - { id: first, uses: echo, with: { kept: true } }\n  - { id: stuck, uses: spin, with: { ms: 3000 }, timeout: 5m }\n  - { id: last, uses: echo, with: '${{ [steps.first.output, steps.stuck.output] }}' }\n",
    );
    let mut child = scratch
        .weft()
        .args(["run", wf.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    // Read the store while the run holds it, until the first step's commit
    // is visible.
    let deadline = Instant::now() + Duration::from_secs(60);
    let run = loop {
        assert!(Instant::now() < deadline, "the first step never committed");
        let listed = scratch.run(&["runs", "list", "--json"]);
        if listed.code == Some(0)
            && let Some(run) = listed
                .json()
                .as_array()
                .and_then(|runs| runs.first().cloned())
            && run["next_step"] == 1
        {
            break run;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let id = run["id"].as_str().unwrap();
    let shown = scratch.run(&["runs", "show", id, "--json"]);
    assert_eq!(
        shown.code,
        Some(0),
        "the store opens after the kill: {shown:?}"
    );
    assert!(shown.stderr.is_empty(), "{}", shown.stderr);
    let shown = shown.json();
    assert_eq!(shown["run"]["state"], "running");
    assert_eq!(
        shown["run"]["next_step"], 1,
        "resumable at the step in flight"
    );
    let steps = shown["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0]["step_id"], "first");
    assert_eq!(steps[0]["output"], json!({ "kept": true }));

    // Resume it from the store alone: the workflow file and the plugins are
    // gone, and the finished step is not run again.
    std::fs::remove_file(&wf).unwrap();
    std::fs::remove_dir_all(scratch.plugins_dir()).unwrap();
    let resumed = scratch.run(&["runs", "resume", id]);
    assert_eq!(resumed.code, Some(0), "{resumed:?}");
    assert!(
        resumed
            .stderr
            .contains(&format!("run {id} of doomed resumed at step 2 of 3")),
        "{}",
        resumed.stderr
    );
    assert_eq!(
        resumed.json(),
        json!([{ "kept": true }, { "spun_ms": 3000 }])
    );
    let shown = scratch.run(&["runs", "show", id, "--json"]).json();
    assert_eq!(shown["run"]["state"], "succeeded");
    let ids: Vec<_> = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_id"].clone())
        .collect();
    assert_eq!(
        ids,
        [json!("first"), json!("stuck"), json!("last")],
        "each step recorded once"
    );

    let again = scratch.run(&["runs", "resume", id]);
    assert_eq!(again.code, Some(2), "{again:?}");
    assert!(
        again.stderr.contains("is succeeded, not running"),
        "{}",
        again.stderr
    );
    let none = scratch.run(&["runs", "resume", "--all"]);
    assert_eq!(none.code, Some(0), "{none:?}");
    assert!(
        none.stderr.contains("no interrupted runs"),
        "{}",
        none.stderr
    );

    // The data dir is still fully usable.
    scratch.add_plugin("echo");
    let ok = scratch.file(
        "ok.yaml",
        "id: ok\nsteps:\n  - { id: a, uses: echo, with: 7 }\n",
    );
    let run = scratch.run(&["run", ok.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.json(), json!(7));
}

#[test]
fn two_processes_can_run_workflows_in_one_data_dir_at_once() {
    let scratch = Scratch::new(&["echo"]);
    let steps: String = (0..20)
        .map(|i| format!("  - {{ id: s{i}, uses: echo, with: {i} }}\n"))
        .collect();
    let wf = scratch.file("wf.yaml", &format!("id: busy\nsteps:\n{steps}"));
    let children: Vec<_> = (0..2)
        .map(|_| {
            scratch
                .weft()
                .args(["run", wf.to_str().unwrap()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let run = crate::common::Run::from(child.wait_with_output().unwrap());
        assert_eq!(run.code, Some(0), "{run:?}");
        assert_eq!(run.json(), json!(19));
    }
    let runs = scratch.run(&["runs", "list", "--json"]).json();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert!(
        runs.iter()
            .all(|r| r["state"] == "succeeded" && r["step_records"] == 20)
    );
}
