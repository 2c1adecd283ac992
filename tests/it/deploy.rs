//! Deploying over the API: workflows as numbered versions kept in the
//! store, and plugins in a registry by digest. A real `weft serve` on
//! loopback; real components built from source.

use std::time::{Duration, Instant};

use crate::common::server::{Host, serve};
use crate::common::{Scratch, guest_bytes};
use serde_json::{Value, json};

fn start(host: &Host, workflow: &str) -> String {
    let (status, body) = host.call(
        "POST",
        "/v1/runs",
        Some(&json!({ "workflow": workflow }).to_string()),
    );
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

fn ended(host: &Host, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = host.call("GET", &format!("/v1/runs/{id}"), None);
        if status == 200 && body["run"]["state"] != "running" {
            return body["run"].clone();
        }
        assert!(Instant::now() < deadline, "run {id} never ended: {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn deploy(host: &Host, text: &str) -> (u16, Value) {
    host.send("/v1/workflows", "application/yaml", text.as_bytes())
}

/// A workflow whose output says which definition a run followed.
fn marked(mark: u32, nap: &str) -> String {
    format!(
        "id: marked\nversion: {mark}\nsteps:\n  - {{ id: nap, sleep: {nap} }}\n  - {{ id: echo, uses: echo, with: {{ mark: {mark} }} }}\noutputs:\n  mark: \"${{{{ steps.echo.output.mark }}}}\"\n"
    )
}

/// A file written in the served folder while `weft serve` runs is
/// deployed as it lands, as `weft deploy` would; a broken one is refused,
/// said on the serve's stderr naming the file, and the revision before
/// keeps serving.
#[test]
fn a_workflow_file_edited_while_serving_is_deployed_and_a_broken_one_refused() {
    let scratch = Scratch::new(&["echo"]);
    let file = scratch.path().join("workflows/marked.yaml");
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(&file, marked(1, "1ms")).unwrap();
    let host = serve(&scratch, 0);
    let revision =
        || host.call("GET", "/v1/workflows/marked", None).1["workflow"]["revision"].clone();
    assert_eq!(revision(), 1);

    std::fs::write(&file, marked(2, "1ms")).unwrap();
    crate::common::wait(
        Duration::from_secs(20),
        Duration::from_millis(50),
        || {
            if revision() == 2 {
                Ok(())
            } else {
                Err(revision())
            }
        },
        |seen| format!("the edited file was not deployed: revision {seen}"),
    );
    let run = start(&host, "marked");
    assert_eq!(ended(&host, &run)["outputs"]["mark"], 2);
    let (_, shown) = host.call("GET", "/v1/workflows/marked", None);
    assert!(
        shown["workflow"]["origin"]
            .as_str()
            .unwrap()
            .starts_with("file:"),
        "{shown}"
    );

    // Broken: refused, said, and revision 2 serves on. A plugin that does
    // not exist is refused as `weft deploy` refuses it.
    std::fs::write(&file, "id: marked\nsteps: [\n").unwrap();
    let log = scratch.path().join("serve-0.log");
    // Waits until the serve's stderr has `n` lines that hold `needle`.
    let said = |needle: &str, n: usize| {
        crate::common::wait(
            Duration::from_secs(20),
            Duration::from_millis(50),
            || {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.lines().filter(|l| l.contains(needle)).count() >= n {
                    Ok(())
                } else {
                    Err(text)
                }
            },
            |text| format!("no {n} lines with `{needle}` in:\n{text}"),
        )
    };
    said("warning: not deploying", 1);
    std::fs::write(
        &file,
        "id: marked\nsteps:\n  - { id: a, uses: nowhere, with: {} }\n",
    )
    .unwrap();
    said("warning: not deploying", 2);
    // Another file with the same id: refused (the next start would serve
    // one of the two).
    std::fs::write(scratch.path().join("workflows/twin.yaml"), marked(3, "1ms")).unwrap();
    said("also defined by", 1);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("marked.yaml") && text.contains("nowhere"),
        "{text}"
    );
    assert!(text.contains("revision 2 deployed from"), "{text}");
    assert_eq!(revision(), 2);
    let run = start(&host, "marked");
    assert_eq!(ended(&host, &run)["outputs"]["mark"], 2);
}

#[test]
fn workflows_deploy_as_numbered_versions_that_new_runs_take_and_a_restart_keeps() {
    let scratch = Scratch::new(&["echo"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(
        scratch.path().join("workflows/marked.yaml"),
        marked(1, "1500ms"),
    )
    .unwrap();
    let mut host = serve(&scratch, 0);

    let (status, shown) = host.call("GET", "/v1/workflows/marked", None);
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["workflow"]["revision"], 1);
    assert_eq!(shown["workflow"]["served"], true);
    assert!(
        shown["workflow"]["origin"]
            .as_str()
            .unwrap()
            .starts_with("file:"),
        "{shown}"
    );

    // A run in flight on revision 1 while revision 2 is deployed.
    let old = start(&host, "marked");
    let deployed = scratch.file("marked-2.yaml", &marked(2, "10ms"));
    let cli = scratch.run(&["deploy", deployed.to_str().unwrap(), "--server", &host.url]);
    assert_eq!(cli.code, Some(0), "{cli:?}");
    assert!(
        cli.stdout
            .starts_with("deployed marked revision 2 (sha256:"),
        "{cli:?}"
    );
    let again = scratch.run(&["deploy", deployed.to_str().unwrap(), "--server", &host.url]);
    assert!(
        again.stdout.starts_with("unchanged marked revision 2"),
        "{again:?}"
    );
    let new = start(&host, "marked");
    assert_eq!(ended(&host, &old)["outputs"]["mark"], 1, "the old run");
    assert_eq!(ended(&host, &new)["outputs"]["mark"], 2, "the new run");

    let (_, listed) = host.call("GET", "/v1/workflows", None);
    assert_eq!(listed["workflows"][0]["revision"], 2, "{listed}");
    assert_eq!(listed["workflows"][0]["version"], 2, "{listed}");
    let (_, first) = host.call("GET", "/v1/workflows/marked?revision=1", None);
    assert_eq!(first["workflow"]["source"], marked(1, "1500ms"));
    assert_eq!(first["workflow"]["served"], false);
    assert_eq!(first["versions"].as_array().unwrap().len(), 2);
    let (status, missing) = host.call("GET", "/v1/workflows/marked?revision=9", None);
    assert_eq!(status, 404);
    assert_eq!(missing["error"]["code"], "unknown_revision");
    let (status, missing) = host.call("GET", "/v1/workflows/nope", None);
    assert_eq!(status, 404);
    assert_eq!(missing["error"]["code"], "unknown_workflow");

    // The deployed version outlives the process, though the file is older.
    host.kill();
    let mut host = serve(&scratch, 1);
    let (_, shown) = host.call("GET", "/v1/workflows/marked", None);
    assert_eq!(shown["workflow"]["revision"], 2, "{shown}");
    assert_eq!(shown["workflow"]["origin"], "api");
    assert_eq!(ended(&host, &start(&host, "marked"))["outputs"]["mark"], 2);

    // An edited file is the newest version at the next start.
    std::fs::write(
        scratch.path().join("workflows/marked.yaml"),
        marked(3, "10ms"),
    )
    .unwrap();
    host.kill();
    let host = serve(&scratch, 2);
    let (_, shown) = host.call("GET", "/v1/workflows/marked", None);
    assert_eq!(shown["workflow"]["revision"], 3, "{shown}");
    assert_eq!(ended(&host, &start(&host, "marked"))["outputs"]["mark"], 3);

    // A deployed workflow's cron triggers are live at once.
    let (status, body) = deploy(
        &host,
        "id: nightly\non:\n  schedule:\n    - { id: at-two, cron: \"0 0 2 * * *\" }\nsteps:\n  - { id: echo, uses: echo, with: 1 }\n",
    );
    assert_eq!(status, 201, "{body}");
    let (_, schedules) = host.call("GET", "/v1/schedules", None);
    assert!(
        schedules["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["key"] == "nightly/at-two"),
        "{schedules}"
    );
}

#[test]
fn a_bad_deployment_is_refused_with_what_and_where() {
    let scratch = Scratch::new(&["echo"]);
    let host = serve(&scratch, 0);
    let refused = |text: &str, status: u16, code: &str, says: &str| {
        let (got, body) = deploy(&host, text);
        assert_eq!(got, status, "{text}: {body}");
        assert_eq!(body["error"]["code"], code, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "`{says}` not in: {message}");
    };
    refused("", 400, "invalid_request", "the body is empty");
    refused(
        "id: x\nsteps: 5\n",
        400,
        "invalid_workflow",
        "request body:2",
    );
    refused(
        "id: x\nsteps:\n  - { id: a, uses: echo }\n  - { id: b, uses: nope }\n",
        422,
        "unresolved_plugin",
        "request body:4: step `b`: plugin `nope` not found",
    );
    refused(
        "id: x\nsteps:\n  - { id: a, uses: echo@9 }\n",
        422,
        "unresolved_plugin",
        "which does not satisfy `echo@^9`",
    );
    let (status, body) = host.send("/v1/workflows", "application/yaml", &vec![b'#'; 5 << 20]);
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "body_too_large");
    let (status, body) = host.send("/v1/workflows", "application/yaml", &[0xff, 0xfe]);
    assert_eq!(status, 400, "{body}");
    // Nothing refused was deployed.
    let (_, listed) = host.call("GET", "/v1/workflows", None);
    assert_eq!(listed["workflows"], json!([]), "{listed}");
    // JSON is taken when the content type says so.
    let (status, body) = host.send(
        "/v1/workflows",
        "application/json",
        br#"{"id": "j", "steps": [{"id": "a", "uses": "echo"}]}"#,
    );
    assert_eq!(status, 201, "{body}");
}

fn stamped() -> &'static str {
    "id: stamped\nsteps:\n  - { id: first, uses: stamp }\n  - { id: nap, sleep: 1500ms }\n  - { id: second, uses: stamp }\noutputs:\n  first: \"${{ steps.first.output.stamp }}\"\n  second: \"${{ steps.second.output.stamp }}\"\n"
}

#[test]
fn an_uploaded_plugin_serves_new_runs_while_runs_in_flight_keep_their_digest() {
    let scratch = Scratch::new(&[]);
    std::fs::write(
        scratch.plugins_dir().join("stamp.wasm"),
        guest_bytes("stamp_one"),
    )
    .unwrap();
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(scratch.path().join("workflows/stamped.yaml"), stamped()).unwrap();
    let mut host = serve(&scratch, 0);

    let in_flight: Vec<String> = (0..5).map(|_| start(&host, "stamped")).collect();
    // Every run has run its first step on version 1 before the upload.
    std::thread::sleep(Duration::from_millis(300));
    let (status, added) = host.send("/v1/plugins", "application/wasm", &guest_bytes("stamp_two"));
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["plugin"]["name"], "stamp");
    assert_eq!(added["plugin"]["version"], "2.0.0");
    let two = added["plugin"]["digest"].as_str().unwrap().to_owned();
    let (status, again) = host.send("/v1/plugins", "application/wasm", &guest_bytes("stamp_two"));
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["existing"], true);

    let fresh = start(&host, "stamped");
    for id in &in_flight {
        let run = ended(&host, id);
        assert_eq!(run["outputs"], json!({ "first": 1, "second": 1 }), "{run}");
    }
    let run = ended(&host, &fresh);
    assert_eq!(run["outputs"], json!({ "first": 2, "second": 2 }), "{run}");

    let (_, listed) = host.call("GET", "/v1/plugins", None);
    let versions: Vec<(&str, &str)> = listed["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["version"].as_str().unwrap(),
                p["origin"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(versions.len(), 2, "{listed}");
    // Uploaded by the token-less caller, an admin: an owner's build.
    assert_eq!(
        versions[0],
        ("2.0.0", "api:owner"),
        "newest first: {listed}"
    );
    assert_eq!(versions[1].0, "1.0.0");
    let one = listed["plugins"][1]["digest"].as_str().unwrap().to_owned();

    // A version requirement, or a digest, still picks version 1.
    for pin in ["stamp@1".to_owned(), format!("stamp@{one}")] {
        let text = stamped()
            .replace("id: stamped", "id: pinned")
            .replace("uses: stamp }", &format!("uses: \"{pin}\" }}"));
        let (status, body) = deploy(&host, &text);
        assert!(status == 201 || status == 200, "{pin}: {body}");
        let run = ended(&host, &start(&host, "pinned"));
        assert_eq!(run["outputs"]["first"], 1, "{pin}: {run}");
    }

    // Refused components say why; the registry is unchanged.
    let (status, body) = host.send(
        "/v1/plugins",
        "application/wasm",
        &guest_bytes("extra_import"),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_component");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("weft:plugin/telemetry"),
        "{body}"
    );
    let (status, body) = host.send("/v1/plugins", "application/wasm", b"not wasm");
    assert_eq!(status, 400, "{body}");
    let (status, body) = host.send("/v1/plugins", "application/wasm", b"");
    assert_eq!(status, 400, "{body}");
    let (status, body) = host.send("/v1/plugins", "application/wasm", &vec![0; (64 << 20) + 1]);
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "body_too_large");
    // A WASI command is refused until it is given a name and version,
    // which the query records in it.
    let command = guest_bytes("command");
    let (status, body) = host.send("/v1/plugins", "application/wasm", &command);
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--name NAME --version VERSION"),
        "{body}"
    );
    let (status, body) = host.send("/v1/plugins?name=shell", "application/wasm", &command);
    assert_eq!(status, 400, "{body}");
    let (status, body) = host.send(
        "/v1/plugins?name=shell&version=0.2.0",
        "application/wasm",
        &command,
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["plugin"]["name"], "shell");
    assert_eq!(body["plugin"]["version"], "0.2.0");
    let (_, after) = host.call("GET", "/v1/plugins", None);
    assert_eq!(after["plugins"].as_array().unwrap().len(), 3, "{after}");

    // The upload outlives the process; the local registry shows it too.
    host.kill();
    let mut host = serve(&scratch, 1);
    let run = ended(&host, &start(&host, "stamped"));
    assert_eq!(run["outputs"]["first"], 2, "{run}");
    assert!(run["plugins"]["first"]["digest"] == two, "{run}");
    host.kill();
    let listed = scratch.run(&["plugin", "list"]);
    assert_eq!(listed.code, Some(0), "{listed:?}");
    assert!(
        listed.stdout.contains("stamp") && listed.stdout.contains("2.0.0"),
        "{listed:?}"
    );
}

#[test]
fn the_cli_inspects_and_adds_components() {
    let scratch = Scratch::new(&[]);
    let file = scratch.path().join("stamp.wasm");
    std::fs::write(&file, guest_bytes("stamp_two")).unwrap();
    let shown = scratch.run(&["plugin", "inspect", file.to_str().unwrap(), "--json"]);
    assert_eq!(shown.code, Some(0), "{shown:?}");
    let shown = shown.json();
    assert_eq!(shown["name"], "stamp");
    assert_eq!(shown["version"], "2.0.0");
    assert_eq!(shown["contract"], "0.3.0");
    assert!(
        shown["exports"]
            .as_array()
            .unwrap()
            .contains(&json!("weft:plugin/step@0.3.0")),
        "{shown}"
    );
    assert!(shown["capabilities"].is_array(), "{shown}");
    assert!(
        !shown["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("http")),
        "{shown}"
    );
    assert!(
        shown["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i.as_str().unwrap().starts_with("weft:plugin/types")),
        "{shown}"
    );

    let added = scratch.run(&["plugin", "add", file.to_str().unwrap()]);
    assert_eq!(added.code, Some(0), "{added:?}");
    assert!(
        added.stdout.starts_with("added stamp@2.0.0 sha256:"),
        "{added:?}"
    );
    let listed = scratch.run(&["plugin", "list", "--json"]).json();
    assert_eq!(listed["plugins"][0]["origin"], "cli", "{listed}");

    let bad = scratch.path().join("bad.wasm");
    std::fs::write(&bad, guest_bytes("extra_import")).unwrap();
    for args in [["plugin", "inspect"], ["plugin", "add"]] {
        let refused = scratch.run(&[args[0], args[1], bad.to_str().unwrap()]);
        assert_eq!(refused.code, Some(2), "{refused:?}");
        assert!(
            refused.stderr.contains("imports `weft:plugin/telemetry"),
            "{refused:?}"
        );
    }
}

/// Waits until `log` (a serve's stderr) contains `text`.
fn wait_log(log: &std::path::Path, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = std::fs::read_to_string(log).unwrap_or_default();
        if seen.contains(text) {
            return seen;
        }
        assert!(Instant::now() < deadline, "`{text}` never logged:\n{seen}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_plugin_replaced_on_disk_serves_new_runs_while_fifty_sleeping_runs_finish_on_the_old_one() {
    let scratch = Scratch::new(&[]);
    let file = scratch.plugins_dir().join("stamp.wasm");
    std::fs::write(&file, guest_bytes("stamp_one")).unwrap();
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(
        scratch.path().join("workflows/stamped.yaml"),
        stamped().replace("1500ms", "3s"),
    )
    .unwrap();
    let host = serve(&scratch, 0);
    let log = scratch.path().join("serve-0.log");

    let sleeping: Vec<String> = (0..50).map(|_| start(&host, "stamped")).collect();
    // Every one has run its first step, on version 1, and sleeps.
    let deadline = Instant::now() + Duration::from_secs(30);
    for id in &sleeping {
        loop {
            let (_, body) = host.call("GET", &format!("/v1/runs/{id}"), None);
            if body["run"]["step_records"].as_u64().unwrap_or(0) >= 1 {
                break;
            }
            assert!(Instant::now() < deadline, "{id} never ran its first step");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    // Replaced the way a deploy tool does it: written aside, moved in.
    let aside = scratch.plugins_dir().join("stamp.wasm.new");
    std::fs::write(&aside, guest_bytes("stamp_two")).unwrap();
    std::fs::rename(&aside, &file).unwrap();
    wait_log(&log, "plugin stamp@2.0.0");
    let fresh = start(&host, "stamped");
    for id in &sleeping {
        let run = ended(&host, id);
        assert_eq!(run["outputs"], json!({ "first": 1, "second": 1 }), "{run}");
    }
    assert_eq!(
        ended(&host, &fresh)["outputs"],
        json!({ "first": 2, "second": 2 })
    );

    // A corrupt component written over it is rejected with its reason, and
    // version 2 keeps serving.
    std::fs::write(&file, b"\0asm\x0d\0\x01\0 not really a component").unwrap();
    let seen = wait_log(&log, "rejected plugin file");
    assert!(seen.contains("stamp.wasm"), "{seen}");
    assert_eq!(
        ended(&host, &start(&host, "stamped"))["outputs"],
        json!({ "first": 2, "second": 2 })
    );
    // Removing the file breaks nothing: the registry keeps the bytes.
    std::fs::remove_file(&file).unwrap();
    assert_eq!(
        ended(&host, &start(&host, "stamped"))["outputs"],
        json!({ "first": 2, "second": 2 })
    );
    let (_, listed) = host.call("GET", "/v1/plugins", None);
    assert_eq!(listed["plugins"].as_array().unwrap().len(), 2, "{listed}");
}

#[test]
fn a_workflows_revisions_show_their_unfinished_runs_until_drained() {
    let scratch = Scratch::new(&["echo"]);
    let host = serve(&scratch, 0);
    let waits = |mark: u32| {
        format!(
            "id: gated\nversion: {mark}\nsteps:\n  - {{ id: gate, await: {{}} }}\n  - {{ id: echo, uses: echo, with: {mark} }}\n"
        )
    };
    assert_eq!(deploy(&host, &waits(1)).0, 201);
    let old: Vec<String> = (0..2).map(|_| start(&host, "gated")).collect();
    assert_eq!(deploy(&host, &waits(2)).0, 201);
    let new = start(&host, "gated");
    // `runs show` names the revision a run follows beside the file's
    // version.
    let shown = scratch.run(&["runs", "show", &new]);
    assert!(
        shown
            .stdout
            .contains("workflow  gated (revision 2, version 2, from"),
        "{}\n{}",
        shown.stdout,
        shown.stderr
    );
    let revisions = || {
        let (status, shown) = host.call("GET", "/v1/workflows/gated", None);
        assert_eq!(status, 200, "{shown}");
        shown["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["revision"].as_u64().unwrap(),
                    v["unfinished"].as_u64().unwrap(),
                    v["served"] == true,
                    v["drained"] == true,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(revisions(), [(1, 2, false, false), (2, 1, true, false)]);
    // The CLI's table says the same.
    let shown = scratch.run(&["workflows", "show", "gated", "--server", &host.url]);
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    let lines: Vec<&str> = shown.stdout.lines().collect();
    assert!(
        lines[1].contains("draining") && lines[2].contains("served"),
        "{}",
        shown.stdout
    );
    // Its columns line up: each row's status starts where the header's does.
    let column = lines[0].find("STATUS").unwrap();
    assert_eq!(lines[1].find("draining"), Some(column), "{}", shown.stdout);
    assert_eq!(lines[2].find("served"), Some(column), "{}", shown.stdout);
    let listed = scratch.run(&["workflows", "list", "--server", &host.url]);
    let lines: Vec<&str> = listed.stdout.lines().collect();
    let end = lines[0].find("REVISION").unwrap() + "REVISION".len();
    let row = lines.iter().find(|l| l.starts_with("gated")).unwrap();
    assert_eq!(&row[end - 1..end], "2", "{}", listed.stdout);

    // The old revision's runs end: it is drained.
    for id in &old {
        let (status, body) = host.call(
            "POST",
            &format!("/v1/runs/{id}/steps/gate/actions"),
            Some(r#"{"action": "complete"}"#),
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(ended(&host, id)["state"], "succeeded");
    }
    assert_eq!(revisions(), [(1, 0, false, true), (2, 1, true, false)]);
    let shown = scratch.run(&["workflows", "show", "gated", "--server", &host.url]);
    assert!(
        shown.stdout.lines().nth(1).unwrap().contains("drained"),
        "{}",
        shown.stdout
    );
    let (status, _) = host.call("POST", &format!("/v1/runs/{new}/cancel"), Some("{}"));
    assert_eq!(status, 200);
    assert_eq!(revisions(), [(1, 0, false, true), (2, 0, true, false)]);
}

/// Answers the `await` step `step` of run `id`, once it waits.
fn answer(host: &Host, id: &str, step: &str) {
    crate::common::wait(
        std::time::Duration::from_secs(60),
        std::time::Duration::from_millis(20),
        || {
            let (status, body) = host.call(
                "POST",
                &format!("/v1/runs/{id}/steps/{step}/actions"),
                Some(r#"{"action": "complete", "output": {}}"#),
            );
            if status == 200 { Ok(()) } else { Err(body) }
        },
        |seen| format!("{step} of run {id} never took its answer: {seen}"),
    );
}

#[test]
fn a_migration_moves_the_runs_that_can_move_and_names_the_others() {
    let scratch = Scratch::new(&["echo"]);
    let host = serve(&scratch, 0);
    let first = "id: moving\nsteps:\n  - { id: gate1, await: {} }\n  - { id: a, uses: echo, with: 1 }\n  - { id: gate2, await: {} }\noutputs:\n  rev: 1\n";
    assert_eq!(deploy(&host, first).0, 201);
    let start = || {
        let (status, body) = host.call("POST", "/v1/runs", Some(r#"{"workflow": "moving"}"#));
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_owned()
    };
    // `ahead` has run step `a` and waits at gate2; `behind` waits at gate1.
    let (ahead, behind) = (start(), start());
    answer(&host, &ahead, "gate1");
    crate::common::wait(
        std::time::Duration::from_secs(60),
        std::time::Duration::from_millis(20),
        || {
            let (_, steps) = host.call("GET", &format!("/v1/runs/{ahead}/steps"), None);
            let waits = steps["steps"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|r| r["path"] == "gate2" && r["awaiting"] == true)
            });
            if waits { Ok(()) } else { Err(steps) }
        },
        |seen| format!("gate2 never waited: {seen}"),
    );
    // Revision 2: `a` is a sleep now, and a step `c` comes last.
    let second = "id: moving\nsteps:\n  - { id: gate1, await: {} }\n  - { id: a, sleep: 1s }\n  - { id: gate2, await: {} }\n  - { id: c, uses: echo, with: 2 }\noutputs:\n  rev: 2\n  c: \"${{ steps.c.output }}\"\n";
    assert_eq!(deploy(&host, second).0, 201);

    let migrate = |dry: bool| {
        let mut args = vec![
            "runs",
            "migrate",
            "--workflow",
            "moving",
            "--from-revision",
            "1",
            "--to-revision",
            "2",
            "--server",
            &host.url,
        ];
        if dry {
            args.push("--dry-run");
        }
        scratch.run(&args)
    };
    let dry = migrate(true);
    assert_eq!(dry.code, Some(0), "{}\n{}", dry.stdout, dry.stderr);
    assert!(
        dry.stdout.contains("2 runs on revision 1; 1 can move"),
        "{}",
        dry.stdout
    );
    let said = format!(
        "{ahead} stays: step `a` has run as a `uses` step, and is a `sleep` step in the new revision"
    );
    assert!(dry.stdout.contains(&said), "{}", dry.stdout);
    let (_, run) = host.call("GET", &format!("/v1/runs/{behind}"), None);
    assert!(run["run"]["migrated"].is_null(), "{run}");

    let moved = migrate(false);
    assert_eq!(moved.code, Some(0), "{}\n{}", moved.stdout, moved.stderr);
    assert!(
        moved.stdout.contains("1 moved to revision 2, 1 cannot"),
        "{}",
        moved.stdout
    );
    assert!(moved.stdout.contains(&said), "{}", moved.stdout);
    let (_, run) = host.call("GET", &format!("/v1/runs/{behind}"), None);
    let migrated = &run["run"]["migrated"];
    assert_eq!(
        (
            &migrated["from_revision"],
            &migrated["to_revision"],
            &migrated["actor"]
        ),
        (&json!(1), &json!(2), &json!("local")),
        "{run}"
    );

    // The moved run goes on under revision 2, the other under revision 1.
    answer(&host, &behind, "gate1");
    answer(&host, &behind, "gate2");
    let ended = crate::common::server::run_ended(&host, &behind);
    assert_eq!(ended["run"]["state"], "succeeded", "{ended}");
    assert_eq!(
        ended["run"]["outputs"],
        json!({ "rev": 2, "c": 2 }),
        "{ended}"
    );
    answer(&host, &ahead, "gate2");
    let ended = crate::common::server::run_ended(&host, &ahead);
    assert_eq!(ended["run"]["outputs"], json!({ "rev": 1 }), "{ended}");

    // Revision 1 has nothing left: drained.
    let (_, shown) = host.call("GET", "/v1/workflows/moving", None);
    let first = &shown["versions"][0];
    assert_eq!(
        (&first["unfinished"], &first["drained"]),
        (&json!(0), &json!(true)),
        "{shown}"
    );
}
