//! Plugins in Rust, Python and JavaScript, built with `weft plugin build`
//! by the toolchains it installs (componentize-py from PyPI,
//! componentize-js from npm), run in one workflow; and `weft plugin new`'s
//! templates, each built, tested and run.

use std::path::Path;
use std::process::Command;

use crate::common::{Scratch, built, root, shared_cache, toolchains};
use serde_json::json;

fn scratch_with_languages() -> Scratch {
    let scratch = Scratch::new(&["template"]);
    for dir in ["plugins/wordstats-py", "plugins/headline-js"] {
        let component = built(dir);
        std::fs::copy(
            &component,
            scratch.plugins_dir().join(component.file_name().unwrap()),
        )
        .unwrap();
    }
    scratch
}

fn weft(scratch: &Scratch) -> Command {
    let mut command = scratch.weft();
    command
        .env("WEFT_TOOLCHAINS", toolchains())
        .env("WEFT_CACHE_DIR", shared_cache());
    command
}

#[test]
fn one_workflow_passes_data_through_rust_python_and_javascript_steps() {
    let scratch = scratch_with_languages();
    let example = root().join("examples/polyglot.yaml");
    let run: crate::common::Run = weft(&scratch)
        .arg("run")
        .arg(&example)
        .args(["--input", r#"{"author": "Ada", "topic": "durability"}"#])
        .output()
        .unwrap()
        .into();
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.json(),
        json!({
            "note": "Ada writes about durability. Why durability? Because durability is where the work is, says Ada.",
            "words": 15,
            "headline": "Durability, Ada: 15 words",
        })
    );
    // Each step's record names the exact component it ran, and the Python
    // and JavaScript steps' log lines are in the run's log.
    let shown = scratch
        .run(&["runs", "show", &run.run_id(), "--json"])
        .json();
    let logs = shown["steps"].to_string();
    assert!(logs.contains("15 words, 11 distinct"), "{logs}");
    assert!(logs.contains("headline from 2 words"), "{logs}");

    // The host checks input against the Python plugin's schema before the
    // call, naming the field.
    let bad = scratch.file(
        "bad.yaml",
        "id: bad\nsteps:\n  - { id: stats, uses: wordstats, with: { text: 5 } }\n",
    );
    let refused: crate::common::Run = weft(&scratch).arg("run").arg(&bad).output().unwrap().into();
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert!(refused.stderr.contains("/text"), "{refused:?}");

    // A JavaScript step's typed error reaches the run as written.
    let empty = scratch.file(
        "empty.yaml",
        "id: empty\nsteps:\n  - { id: title, uses: headline, with: { text: '', top: [] } }\n",
    );
    let failed: crate::common::Run = weft(&scratch)
        .arg("run")
        .arg(&empty)
        .output()
        .unwrap()
        .into();
    assert_eq!(failed.code, Some(1), "{failed:?}");
    assert!(
        failed
            .stderr
            .contains("no_words: there is nothing to make a headline of"),
        "{failed:?}"
    );
}

/// Runs `program args` in `dir`; panics with its output if it fails.
fn check(dir: &Path, program: &str, args: &[&str], env: &[(&str, &Path)]) -> String {
    let mut command = Command::new(program);
    command.current_dir(dir).args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{program} {args:?} in {} failed:\n{text}",
        dir.display()
    );
    text
}

#[test]
fn every_template_builds_passes_its_own_test_and_runs_in_a_workflow() {
    let scratch = Scratch::new(&[]);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    // The Rust template's dependencies are built once per machine.
    let target = root().join("target").join("templates");
    // Go's tests need Go before the first build installs it.
    let setup = weft(&scratch)
        .args(["plugin", "setup", "--lang", "go"])
        .output()
        .unwrap();
    assert!(setup.status.success(), "{setup:?}");
    let go = toolchains().join("go").join("bin").join("go");
    let go = go.to_str().unwrap();
    for (lang, name, test) in [
        ("python", "hello-py", vec!["python3", "-m", "unittest"]),
        ("js", "hello-js", vec!["node", "--test"]),
        ("rust", "hello-rs", vec![cargo.as_str(), "test"]),
        ("c", "hello-c", vec!["make", "test"]),
        ("go", "hello-go", vec![go, "test", "./..."]),
    ] {
        let created = weft(&scratch)
            .args(["plugin", "new", name, "--lang", lang, "--dir"])
            .arg(scratch.path())
            .output()
            .unwrap();
        assert!(created.status.success(), "{created:?}");
        let dir = scratch.path().join(name);
        if lang == "rust" {
            // The SDK is named relative to the project, not by this
            // machine's absolute path.
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
            assert!(manifest.contains("weft-sdk = { path = \"../"), "{manifest}");
        }
        let tested = check(
            &dir,
            test[0],
            &test[1..],
            &[
                ("CARGO_TARGET_DIR", &target),
                // Go builds offline, with the Go it was given.
                ("GOTOOLCHAIN", Path::new("local")),
                ("GOPROXY", Path::new("off")),
            ],
        );
        assert!(
            tested.contains("OK")
                || tested.contains("# pass 2")
                || tested.contains("1 passed")
                || tested.contains(&format!("ok  \t{name}\t")),
            "{lang}: {tested}"
        );
        let build: crate::common::Run = weft(&scratch)
            .args(["plugin", "build"])
            .arg(&dir)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .unwrap()
            .into();
        assert_eq!(build.code, Some(0), "{lang}: {build:?}");
        assert!(
            build
                .stdout
                .starts_with(&format!("built {name}@0.1.0 sha256:")),
            "{lang}: {build:?}"
        );
        let run: crate::common::Run = weft(&scratch)
            .arg("run")
            .arg(dir.join("example.yaml"))
            .arg("--plugins")
            .arg(dir.join("dist"))
            .args(["--input", r#"{"name": "Ada"}"#])
            .output()
            .unwrap()
            .into();
        assert_eq!(run.code, Some(0), "{lang}: {run:?}");
        assert_eq!(run.json(), json!({ "greeting": "Hello, Ada!" }), "{lang}");
        // A template imports only what it uses: no `wasi:http`, so a
        // workflow of one's own needs no `allow:` for it.
        let component = dir.join("dist").join(format!("{name}.wasm"));
        let shown = scratch.run(&["plugin", "inspect", "--json", component.to_str().unwrap()]);
        let imports = shown.json()["imports"].to_string();
        assert!(!imports.contains("wasi:http"), "{lang}: {imports}");
        if lang == "go" {
            // A Go step is a command: `plugin inspect` says so, and a build
            // of the same sources is the same component.
            let inspect = scratch.run(&["plugin", "inspect", component.to_str().unwrap()]);
            assert!(
                inspect.stdout.contains("contract:    command"),
                "{inspect:?}"
            );
            let again: crate::common::Run = weft(&scratch)
                .args(["plugin", "build"])
                .arg(&dir)
                .output()
                .unwrap()
                .into();
            assert_eq!(
                again.stdout.split(' ').nth(1),
                build.stdout.split(' ').nth(1),
                "a Go build is reproducible: {again:?}"
            );
        }
        let empty: crate::common::Run = weft(&scratch)
            .arg("run")
            .arg(dir.join("example.yaml"))
            .arg("--plugins")
            .arg(dir.join("dist"))
            .args(["--input", r#"{"name": " "}"#])
            .output()
            .unwrap()
            .into();
        assert!(
            empty.stderr.contains("empty_name: name must not be empty"),
            "{lang}: {empty:?}"
        );
    }
    // A JavaScript syntax error is named with its file and line in the
    // project, before componentize-js (which names neither) runs.
    let js = scratch.path().join("hello-js");
    std::fs::write(
        js.join("greet.js"),
        "export function greeting(name) {\n  return 'Hello, ' +;\n}\n",
    )
    .unwrap();
    let broken: crate::common::Run = weft(&scratch)
        .args(["plugin", "build"])
        .arg(&js)
        .output()
        .unwrap()
        .into();
    assert_eq!(broken.code, Some(2), "{broken:?}");
    let at = format!("{}:2", js.join("greet.js").display());
    assert!(
        broken.stderr.contains(&at) && broken.stderr.contains("SyntaxError"),
        "{broken:?}"
    );
    // The Go helper's own tests: output, typed errors, bad input.
    let sdk = check(
        &root().join("guest-sdk").join("go"),
        go,
        &["test", "./..."],
        &[
            ("GOTOOLCHAIN", Path::new("local")),
            ("GOPROXY", Path::new("off")),
        ],
    );
    assert!(sdk.contains("ok  \tweft\t"), "{sdk}");
    // A name that is not an id, and a folder that exists, are refused.
    let bad = scratch.run(&["plugin", "new", "9lives", "--lang", "js"]);
    assert_eq!(bad.code, Some(2), "{bad:?}");
    let again = weft(&scratch)
        .args(["plugin", "new", "hello-js", "--lang", "js", "--dir"])
        .arg(scratch.path())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
}

#[test]
fn the_c_helpers_json_reading_holds_on_hostile_input() {
    let sdk = root().join("guest-sdk").join("c");
    let out = tempfile::tempdir().unwrap();
    let binary = out.path().join("test_json");
    let built = std::process::Command::new("cc")
        .args(["-Wall", "-Werror", "-fsanitize=address,undefined", "-I"])
        .arg(&sdk)
        .arg(sdk.join("test_json.c"))
        .arg(sdk.join("weft_json.c"))
        .arg("-o")
        .arg(&binary)
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    let ran = std::process::Command::new(&binary).output().unwrap();
    assert!(ran.status.success(), "{ran:?}");
    assert_eq!(String::from_utf8_lossy(&ran.stdout).trim(), "OK");
}

/// Python and JavaScript steps read a snapshot store and keep a key that
/// expires, through their helpers: the same contract as Rust's, on the
/// engine's (simulated) clock.
#[test]
fn python_and_javascript_steps_read_snapshots_and_keep_keys_that_expire() {
    use std::sync::Arc;
    use std::time::Duration;
    use weft::engine::snapshots::{FileFormat, PublishOptions};
    use weft::engine::{EngineConfig, Quiet};

    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    for project in ["tests/lang/refdata-py", "tests/lang/refdata-js"] {
        let component = built(project);
        std::fs::copy(&component, plugins.join(component.file_name().unwrap())).unwrap();
    }
    let store = Arc::new(weft::RedbStore::open(dir.path().join("weft.redb")).unwrap());
    let clock = Arc::new(weft::SimClock::new(weft::Timestamp(1_795_996_800_000)));
    let runtime = weft::Runtime::new(weft::RuntimeConfig {
        cache_dir: Some(shared_cache()),
        ..weft::RuntimeConfig::default()
    })
    .unwrap();
    let engine = weft::Engine::with_config(
        store,
        weft::PluginDir::new(runtime, &plugins),
        clock.clone(),
        EngineConfig::default(),
    )
    .unwrap();
    engine
        .publish_snapshot(
            "default",
            "tiers",
            r#"{"acme": {"tier": "gold"}, "acme-eu": 1, "zeta": 2}"#.as_bytes(),
            FileFormat::Json,
            "tiers.json",
            &PublishOptions::default(),
        )
        .unwrap();
    let run = |ttl: bool| {
        let (py, js) = if ttl {
            (", ttl: 60", ", ttlMs: 60000")
        } else {
            ("", "")
        };
        let text = format!(
            "id: refdata\nsnapshots: [tiers]\nsteps:\n  \
             - {{ id: py, uses: refdata-py, with: {{ store: tiers, key: acme, prefix: acme{py} }} }}\n  \
             - {{ id: js, uses: refdata-js, with: {{ store: tiers, key: acme, prefix: acme{js} }} }}\n\
             outputs: {{ py: \"${{{{ steps.py.output }}}}\", js: \"${{{{ steps.js.output }}}}\" }}\n"
        );
        let workflow = weft::model::parse(&text, weft::model::Format::Yaml, "wf.yaml").unwrap();
        let handle = engine
            .start(Arc::new(workflow), json!({}), Box::new(Quiet))
            .unwrap();
        let ended = handle.wait().unwrap();
        assert_eq!(
            ended.state,
            weft::store::RunState::Succeeded,
            "{:?}",
            ended.error
        );
        ended.outputs.unwrap()
    };
    let read = |seen: Option<&str>| json!({ "value": { "tier": "gold" }, "keys": ["acme", "acme-eu"], "seen": seen });
    let first = run(true);
    assert_eq!(first["py"], read(None), "{first}");
    assert_eq!(first["js"], read(None), "{first}");
    let second = run(false);
    assert_eq!(second["py"], read(Some("yes")), "{second}");
    assert_eq!(second["js"], read(Some("yes")), "{second}");
    clock.advance(Duration::from_secs(61));
    let later = run(false);
    assert_eq!(later["py"], read(None), "expired: {later}");
    assert_eq!(later["js"], read(None), "expired: {later}");
}

/// A Python and a JavaScript step that keep state in their modules, in
/// the standard library and on the standard classes, called 120 times each
/// on two threads, with spare instances for both (some calls find one):
/// every call starts from the build's snapshot (which holds what `weft
/// plugin build` warmed up) and finds nothing another call left.
#[test]
fn python_and_javascript_steps_see_their_instance_fresh_every_call() {
    use weft::runtime::{CallOptions, StepContext};

    let runtime = weft::Runtime::new(weft::RuntimeConfig {
        cache_dir: Some(shared_cache()),
        spare_above: std::time::Duration::ZERO,
        ..weft::RuntimeConfig::default()
    })
    .unwrap();
    for project in ["tests/lang/fresh-py", "tests/lang/fresh-js"] {
        let plugin = runtime
            .load(&std::fs::read(built(project)).unwrap())
            .unwrap();
        let found = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..2 {
                let (plugin, found) = (plugin.clone(), &found);
                s.spawn(move || {
                    for i in 0..60 {
                        let context = StepContext {
                            tenant: "default".to_owned(),
                            workflow: "fresh".to_owned(),
                            run_id: format!("run-{t}"),
                            step_id: format!("s{i}"),
                            attempt: 1,
                            idempotency_key: format!("run-{t}:s{i}"),
                        };
                        let out = plugin.call(
                            &context,
                            &json!({ "n": t * 100 + i }).to_string(),
                            &CallOptions::default(),
                        );
                        let output = out
                            .result
                            .unwrap_or_else(|e| panic!("{project}: call {i} on thread {t}: {e}"));
                        let mut expected = json!({ "n": t * 100 + i, "fresh": true });
                        if project.ends_with("-py") {
                            // It warmed up at build time, and its calls
                            // found that warm-up's state, and nothing more.
                            expected["warmed"] = json!(true);
                        }
                        assert_eq!(output, expected, "{project}");
                        if out.timing.spare.is_some() {
                            found.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert!(found.into_inner() > 0, "{project}: no call found a spare");
    }
}

/// A Python step's build-time warm-up (`warmup=`) that reaches the host
/// fails the build, even when the step catches the error, and the error
/// names the step, its input and what it reached; its log lines go nowhere
/// (at build time there is no host). A warm-up named after the module read
/// `weft.Step` fails the build too.
#[test]
fn a_python_warm_up_that_reaches_the_host_or_comes_too_late_fails_the_build() {
    let scratch = Scratch::new(&[]);
    let out = scratch.path().join("out");
    // Builds a project of one `app.py` into `out`.
    let build = |name: &str, app: &str| -> crate::common::Run {
        let dir = scratch.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("app.py"), app).unwrap();
        weft(&scratch)
            .args(["plugin", "build"])
            .arg(&dir)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap()
            .into()
    };

    let reached = build(
        "warm-kv",
        r#"import weft


@weft.step(name="warm-kv", version="1.0.0", warmup=[{"k": "a"}])
def run(ctx, input):
    ctx.log("info", "nowhere at build time")
    try:
        return {"v": weft.kv.get(input["k"])}
    except weft.StepError:
        return {"v": None}


Step = weft.Step
"#,
    );
    assert_ne!(reached.code, Some(0), "{reached:?}");
    assert!(
        reached
            .stderr
            .contains("the warm-up of step `warm-kv` failed on input 0 ({'k': 'a'})")
            && reached
                .stderr
                .contains("weft.kv is not available to a warm-up call, at build time"),
        "{reached:?}"
    );

    // A module that reads `weft.Step` before it names a warm-up would never
    // make it: the build fails rather than skip it.
    let early = build(
        "warm-early",
        r#"import weft
from weft import Step


@weft.step(name="warm-early", version="1.0.0", warmup=[{}])
def run(ctx, input):
    return {}
"#,
    );
    assert_ne!(early.code, Some(0), "{early:?}");
    assert!(
        early
            .stderr
            .contains("the warm-up of step `warm-early` would never run"),
        "{early:?}"
    );

    // Neither build wrote a component.
    let written: Vec<_> = std::fs::read_dir(&out)
        .map(|dir| dir.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(written.is_empty(), "{written:?} in {}", out.display());
}
