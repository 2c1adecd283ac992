//! A full disk is an episode, not an outage. With the data directory on a
//! small file system filled under load, redb's failed write left it
//! refusing every call (`500 store: Previous I/O error occurred. Please
//! close and re-open the database.`), `/v1/health` still said ok, and once
//! space was freed every start was still refused until the host was
//! restarted. Now a start refused for lack of space is `507
//! insufficient_storage` naming the data directory, `/v1/health` is `503
//! degraded`, and once space is back the store opens itself again: starts
//! work, and every run acknowledged before, during and after ends
//! succeeded, with no restart.
//!
//! The file system is a 32 MiB tmpfs mounted over the scratch's data
//! directory, which needs root (as CI has); elsewhere the test says so and
//! passes without running.

use std::io::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::Scratch;
use crate::common::server::{Host, serve};

/// The tmpfs, unmounted when dropped (after the server is).
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn start(host: &Host, n: usize) -> (u16, Value) {
    // 64 KiB of input each, so that the store's file must grow.
    let body = json!({ "workflow": "disk", "input": { "n": n, "pad": "x".repeat(64 << 10) } });
    host.call("POST", "/v1/runs", Some(&body.to_string()))
}

#[test]
fn a_full_disk_refuses_writes_by_name_and_the_host_goes_on_once_space_is_back() {
    let scratch = Scratch::new(&["echo"]);
    let data = scratch.data_dir();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=32m", "tmpfs"])
        .arg(&data)
        .output();
    if !mounted.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!("not run: cannot mount a tmpfs here (it needs root): {mounted:?}");
        return;
    }
    let _mounted = Mounted(data.clone());
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(
        scratch.path().join("workflows/disk.yaml"),
        "id: disk\nsteps:\n  - { id: a, uses: echo, with: { n: \"${{ inputs.n }}\" } }\n",
    )
    .unwrap();
    let host = serve(&scratch, 0);
    let mut acknowledged = Vec::new();
    for n in 0..5 {
        let (status, body) = start(&host, n);
        assert_eq!(status, 201, "{body}");
        acknowledged.push(body["id"].as_str().unwrap().to_owned());
    }

    // Fill what is left, then start runs until one is refused.
    let filler = data.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0u8; 1 << 20];
    while file.write_all(&chunk).is_ok() {}
    let _ = file.write_all(&[0u8; 4096]);
    drop(file);
    let mut refused = None;
    for n in 5..2_000 {
        let (status, body) = start(&host, n);
        match status {
            201 => acknowledged.push(body["id"].as_str().unwrap().to_owned()),
            507 => {
                refused = Some(body);
                break;
            }
            other => panic!("start {n}: {other} {body}"),
        }
    }
    let refused = refused.expect("no start was refused on a full disk");
    assert_eq!(
        refused["error"]["code"], "insufficient_storage",
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains(data.to_str().unwrap()), "{message}");
    let (status, health) = host.call("GET", "/v1/health", None);
    assert_eq!(
        (status, health["status"].as_str()),
        (503, Some("degraded")),
        "{health}"
    );
    // Still not a 500. The store opens itself again a second after the
    // failure, and a start may then fit in pages its file already has
    // (201); with the file system full, starts are refused again soon.
    let mut refused_again = false;
    for n in 9_000..9_200 {
        let (status, body) = start(&host, n);
        match status {
            201 => acknowledged.push(body["id"].as_str().unwrap().to_owned()),
            507 => {
                assert_eq!(body["error"]["code"], "insufficient_storage", "{body}");
                refused_again = true;
                break;
            }
            other => panic!("start {n} on a full disk: {other} {body}"),
        }
    }
    assert!(refused_again, "200 more starts fitted on a full disk");

    // Space back: the store opens itself again, without a restart.
    std::fs::remove_file(&filler).unwrap();
    let began = Instant::now();
    let id = loop {
        let (status, body) = start(&host, 10_000);
        if status == 201 {
            break body["id"].as_str().unwrap().to_owned();
        }
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "still refused: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    acknowledged.push(id);
    let (status, health) = host.call("GET", "/v1/health", None);
    assert_eq!(
        (status, health["status"].as_str()),
        (200, Some("ok")),
        "{health}"
    );
    // Nothing acknowledged is lost: every run ends succeeded.
    for id in &acknowledged {
        let began = Instant::now();
        loop {
            let (_, run) = host.call("GET", &format!("/v1/runs/{id}"), None);
            match run["run"]["state"].as_str() {
                Some("succeeded") => break,
                Some("running") if began.elapsed() < Duration::from_secs(90) => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                other => panic!("run {id} is {other:?}: {run}"),
            }
        }
    }
    drop(host);
}
