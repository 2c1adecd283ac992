//! The runtime against guests built from source: what the sandbox grants,
//! how each kind of misbehaviour ends, and the compiled-code cache.

use std::time::{Duration, Instant};

use crate::common::guest_bytes;
use serde_json::json;
use weft::runtime::{CallError, CallOptions, CodeSource, LoadError, LogSource, StepContext};
use weft::{Runtime, RuntimeConfig};

fn context(step: &str) -> StepContext {
    StepContext {
        tenant: "t".to_owned(),
        workflow: "wf".to_owned(),
        run_id: "run-1".to_owned(),
        step_id: step.to_owned(),
        attempt: 1,
        idempotency_key: format!("run-1:{step}"),
    }
}

#[test]
fn the_sandbox_grants_no_files_network_environment_or_arguments() {
    // SAFETY of the check: the host process itself has environment
    // variables and a readable root, so a leak would show.
    assert!(std::env::vars().count() > 0);
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let probe = runtime.load(&guest_bytes("probe")).unwrap();
    let outcome = probe.call(&context("probe"), "{}", &CallOptions::default());
    assert_eq!(
        outcome.result.unwrap(),
        json!({
            "env": 0,
            "args": 0,
            "read_root": false,
            "read_file": false,
            "tcp_connect": false,
            "clock_works": true,
            "tenant": "t",
            "workflow": "wf",
        })
    );
    let lines: Vec<_> = outcome
        .logs
        .iter()
        .map(|l| (l.source, l.message.as_str()))
        .collect();
    assert_eq!(
        lines,
        [
            (LogSource::Stdout, "probe on stdout"),
            (LogSource::Stderr, "probe on stderr")
        ]
    );
}

#[test]
fn the_host_outlives_guests_that_trap_loop_hog_or_lie() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let echo = runtime.load(&guest_bytes("echo")).unwrap();
    let bad =
        ["trap", "spin", "hog", "bad_json"].map(|name| runtime.load(&guest_bytes(name)).unwrap());

    for round in 0..2 {
        let trap = bad[0].call(&context("trap"), "{}", &CallOptions::default());
        match trap.result {
            Err(CallError::Trap { message }) => {
                assert!(
                    message.contains("boom: this guest panics on purpose"),
                    "{message}"
                )
            }
            other => panic!("round {round}: expected a trap, got {other:?}"),
        }

        let started = Instant::now();
        let spin = bad[1].call(
            &context("spin"),
            "{}",
            &CallOptions {
                timeout: Some(Duration::from_millis(200)),
                ..CallOptions::default()
            },
        );
        assert_eq!(
            spin.result,
            Err(CallError::Timeout {
                limit: Duration::from_millis(200)
            })
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the deadline did not stop the loop"
        );

        let hog = bad[2].call(
            &context("hog"),
            "{}",
            &CallOptions {
                memory_limit: Some(16 << 20),
                ..CallOptions::default()
            },
        );
        match hog.result {
            Err(CallError::MemoryLimit { limit, requested }) => {
                assert_eq!(limit, 16 << 20);
                assert!(requested > limit);
            }
            other => panic!("round {round}: expected a memory limit, got {other:?}"),
        }
        let fits = bad[2].call(
            &context("hog"),
            r#"{"mib": 4}"#,
            &CallOptions {
                memory_limit: Some(16 << 20),
                ..CallOptions::default()
            },
        );
        assert_eq!(fits.result.unwrap()["allocated_mib"], 4);

        let lie = bad[3].call(&context("bad"), "{}", &CallOptions::default());
        assert!(
            matches!(lie.result, Err(CallError::InvalidOutput { .. })),
            "{:?}",
            lie.result
        );

        // After all that, an honest step still runs.
        let ok = echo.call(
            &context("echo"),
            r#"{"still": "here"}"#,
            &CallOptions::default(),
        );
        assert_eq!(ok.result.unwrap(), json!({ "still": "here" }));
    }
}

#[test]
fn each_kind_of_trap_is_reported_as_what_it_is() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let trap = runtime.load(&guest_bytes("trap")).unwrap();
    let cases = [
        ("stack", "call stack exhausted"),
        ("shadow", "out of bounds memory access"),
        // WASI preview 2's `exit` carries only success or failure, so
        // `exit(3)` arrives as status 1.
        ("exit", "the guest exited with status 1"),
        ("divide", "attempt to divide by zero"),
    ];
    for (mode, expected) in cases {
        let input = json!({ "mode": mode }).to_string();
        match trap
            .call(&context("trap"), &input, &CallOptions::default())
            .result
        {
            Err(CallError::Trap { message }) => {
                assert!(
                    message.contains(expected),
                    "{mode}: `{expected}` not in `{message}`"
                )
            }
            other => panic!("{mode}: expected a trap, got {other:?}"),
        }
    }
}

#[test]
fn typed_step_errors_keep_their_kind_code_and_details() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let validate = runtime.load(&guest_bytes("validate_order")).unwrap();
    let outcome = validate.call(
        &context("v"),
        r#"{"id": "", "currency": "EUR", "items": []}"#,
        &CallOptions::default(),
    );
    match outcome.result {
        Err(e @ CallError::Step { .. }) => {
            assert!(!e.is_retryable());
            assert_eq!(e.code(), "invalid_order");
            let CallError::Step { details, .. } = e else {
                unreachable!()
            };
            assert_eq!(
                details.unwrap()["problems"],
                json!(["id is empty", "the order has no items"])
            );
        }
        other => panic!("expected a step error, got {other:?}"),
    }
    // Input that does not fit the step's type is reported by the SDK.
    let outcome = validate.call(&context("v"), r#"{"id": 5}"#, &CallOptions::default());
    match outcome.result {
        Err(CallError::Step { code, message, .. }) => {
            assert_eq!(code, "invalid_input");
            assert!(message.contains("invalid type"), "{message}");
        }
        other => panic!("expected invalid_input, got {other:?}"),
    }
}

#[test]
fn plugins_describe_themselves_and_bad_components_are_refused() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let template = runtime.load(&guest_bytes("template")).unwrap();
    assert_eq!(template.meta().name, "template");
    assert_eq!(template.meta().version.to_string(), "1.0.0");
    assert_eq!(
        template.meta().input_schema.as_ref().unwrap()["required"],
        json!(["template"])
    );
    assert!(template.digest().to_string().starts_with("sha256:"));

    assert_eq!(runtime.load(b"garbage").unwrap_err(), LoadError::NotWasm);
    assert_eq!(
        runtime.load(b"\0asm\x01\0\0\0").unwrap_err(),
        LoadError::CoreModule
    );
    assert_eq!(
        runtime.load(&guest_bytes("future_contract")).unwrap_err(),
        LoadError::Contract {
            found: "9.0.0".to_owned(),
            supported: "0.3.0".to_owned()
        }
    );
    assert_eq!(
        runtime.load(&guest_bytes("extra_import")).unwrap_err(),
        LoadError::MissingImport {
            import: "weft:plugin/telemetry@0.1.0".to_owned()
        }
    );
    let mut torn = guest_bytes("echo");
    torn.truncate(torn.len() / 2);
    assert!(matches!(runtime.load(&torn), Err(LoadError::Compile(_))));
}

#[test]
fn compiled_code_is_cached_and_a_corrupt_entry_is_rebuilt_not_loaded() {
    let cache = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(cache.path().to_owned()),
        ..RuntimeConfig::default()
    };
    let bytes = guest_bytes("echo");
    let load = || {
        let runtime = Runtime::new(config.clone()).unwrap();
        let plugin = runtime.load(&bytes).unwrap();
        let ok = plugin.call(&context("echo"), "[1]", &CallOptions::default());
        assert_eq!(ok.result.unwrap(), json!([1]));
        plugin.code_source()
    };
    assert_eq!(load(), CodeSource::Compiled);
    assert_eq!(load(), CodeSource::Cache);

    let entries: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "one entry, no temporary files: {entries:?}"
    );
    let entry = &entries[0];
    let mut data = std::fs::read(entry).unwrap();
    let middle = data.len() / 2;
    data[middle] ^= 0xff;
    std::fs::write(entry, &data).unwrap();
    assert_eq!(
        load(),
        CodeSource::Compiled,
        "a corrupt entry must be rebuilt"
    );
    assert_eq!(load(), CodeSource::Cache);

    let data = std::fs::read(entry).unwrap();
    std::fs::write(entry, &data[..data.len() / 3]).unwrap();
    assert_eq!(load(), CodeSource::Compiled, "a torn entry must be rebuilt");
    assert_eq!(load(), CodeSource::Cache);
}

#[test]
fn concurrent_calls_get_separate_instances() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let echo = runtime.load(&guest_bytes("echo")).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let echo = echo.clone();
            s.spawn(move || {
                for i in 0..50 {
                    let input = json!({ "thread": t, "i": i });
                    let out = echo.call(
                        &context("echo"),
                        &input.to_string(),
                        &CallOptions::default(),
                    );
                    assert_eq!(out.result.unwrap(), input);
                }
            });
        }
    });
}

/// The `fresh` guest fails any call that finds state a call before it
/// left (a static counter, a heap value behind a static, a grown page):
/// every call, one after another, from several threads at once, and
/// with the pooling allocator reusing the same slots, must see its
/// instance as it was instantiated.
#[test]
fn every_call_sees_its_instance_fresh() {
    let runtime = Runtime::new(RuntimeConfig {
        spare_instances: 0,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let spares = all_fresh(&runtime);
    assert_eq!(spares, 0, "spare instances when none may be made");
}

/// The same with spare instances for every plugin (made ahead of the
/// call, on the runtime's own thread): some calls get one, and every
/// call still sees its instance fresh.
#[test]
fn every_call_on_a_spare_instance_sees_it_fresh() {
    let runtime = Runtime::new(RuntimeConfig {
        spare_above: Duration::ZERO,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let spares = all_fresh(&runtime);
    assert!(spares > 0, "no call found a spare instance");
}

/// A spare instance is made under the runtime's default memory cap; a
/// call with a lower cap than its making took does not use it, and fails
/// as a fresh instance would.
#[test]
fn a_spare_is_not_used_past_a_calls_memory_cap() {
    let runtime = Runtime::new(RuntimeConfig {
        spare_above: Duration::ZERO,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let fresh = runtime.load(&guest_bytes("fresh")).unwrap();
    let first = fresh.call(&context("first"), "{}", &CallOptions::default());
    assert_eq!(first.result.unwrap()["fresh"], true);
    // The spare thread makes one in microseconds; wait for it.
    let mut spared = false;
    for i in 0..200 {
        std::thread::sleep(Duration::from_millis(10));
        let tight = fresh.call(
            &context(&format!("tight-{i}")),
            "{}",
            &CallOptions {
                memory_limit: Some(64 << 10),
                ..CallOptions::default()
            },
        );
        assert!(
            tight.timing.spare.is_none(),
            "a spare past the call's cap was used"
        );
        // What a fresh instance says when its making passes the cap.
        assert!(
            matches!(&tight.result, Err(CallError::Instantiate { message }) if message.contains("memory limit")),
            "{:?}",
            tight.result
        );
        std::thread::sleep(Duration::from_millis(10));
        let roomy = fresh.call(
            &context(&format!("roomy-{i}")),
            "{}",
            &CallOptions::default(),
        );
        assert_eq!(roomy.result.unwrap()["fresh"], true);
        if roomy.timing.spare.is_some() {
            spared = true;
            break;
        }
    }
    assert!(spared, "no call found a spare instance");
}

/// The reset of a slot's linear memory keeps the pages a call wrote
/// resident and copies the image back over them, so the next instance in
/// the slot does not fault them in again. The `fresh` guest writes 160
/// disjoint pages a call, far more runs than the kernel's page scan
/// answers at once: `vendor/patches/0001` makes the reset scan on past a
/// full answer, and without it about 128 of those pages are released and
/// faulted in again at every call. A count of page faults, not a time.
#[test]
fn a_reset_keeps_the_pages_a_call_wrote_resident() {
    // The kernel's page scan (PAGEMAP_SCAN) came in Linux 6.7; before it,
    // wasmtime releases the pages it does not copy, with or without the
    // patch, and there is nothing to check.
    if !kernel_at_least(6, 7) {
        eprintln!("skipped: Linux before 6.7 has no PAGEMAP_SCAN");
        return;
    }
    let runtime = Runtime::new(RuntimeConfig {
        spare_instances: 0,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let fresh = runtime.load(&guest_bytes("fresh")).unwrap();
    let call = |i: usize| {
        let out = fresh.call(&context(&format!("c{i}")), "{}", &CallOptions::default());
        assert_eq!(out.result.unwrap()["fresh"], true);
    };
    // Warm: the slot's pages, the host's allocations, the compiled code.
    (0..20).for_each(call);
    let calls = 50;
    let before = minor_faults_of_this_thread();
    (0..calls).for_each(call);
    let per_call = (minor_faults_of_this_thread() - before) / calls as u64;
    eprintln!("{per_call} page faults a call of `fresh`");
    assert!(
        per_call < 32,
        "{per_call} page faults a call: the reset released pages the guest wrote"
    );
}

/// Minor page faults of the calling thread (`/proc/thread-self/stat`,
/// field 10); a call of the runtime runs on the caller's thread.
fn minor_faults_of_this_thread() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // The command name, in parentheses, may hold spaces: count after it.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(7).unwrap().parse().unwrap()
}

fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    found >= (major, minor)
}

/// 600 calls of the `fresh` guest, 150 on each of four threads, each
/// checked fresh; the calls that found a spare instance.
fn all_fresh(runtime: &Runtime) -> usize {
    let fresh = runtime.load(&guest_bytes("fresh")).unwrap();
    let spares = std::sync::atomic::AtomicUsize::new(0);
    let pages = std::sync::Mutex::new(std::collections::BTreeSet::new());
    std::thread::scope(|s| {
        for t in 0..4 {
            let fresh = fresh.clone();
            let (pages, spares) = (&pages, &spares);
            s.spawn(move || {
                for i in 0..150 {
                    let out = fresh.call(
                        &context(&format!("s{t}-{i}")),
                        "{}",
                        &CallOptions::default(),
                    );
                    if out.timing.spare.is_some() {
                        spares.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    let output = out
                        .result
                        .unwrap_or_else(|e| panic!("call {i} on thread {t}: {e}"));
                    assert_eq!(output["fresh"], true);
                    pages
                        .lock()
                        .unwrap()
                        .insert(output["pages"].as_u64().unwrap());
                }
            });
        }
    });
    // A call that found a page grown by another would see more pages.
    let pages = pages.into_inner().unwrap();
    assert_eq!(pages.len(), 1, "memory sizes seen: {pages:?}");
    spares.into_inner()
}

/// The same through the engine: a run of many `fresh` steps, each
/// a fresh instance.
#[test]
fn a_run_of_many_steps_sees_each_instance_fresh() {
    let scratch = crate::common::Scratch::new(&["fresh"]);
    let steps: String = (0..12)
        .map(|i| format!("  - {{ id: s{i}, uses: fresh }}\n"))
        .collect();
    let wf = scratch.file("fresh.yaml", &format!("id: fresh\nsteps:\n{steps}"));
    let run = scratch.run(&["run", wf.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let shown = scratch
        .run(&["runs", "show", &run.run_id(), "--json"])
        .json();
    let outputs = shown["steps"].as_array().unwrap();
    assert_eq!(outputs.len(), 12);
    for step in outputs {
        assert_eq!(step["output"]["fresh"], true, "{step}");
    }
}
