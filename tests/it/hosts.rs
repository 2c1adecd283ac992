//! Several `weft serve` processes on one data directory, each taking runs
//! and owning the runs it drives by a lease. One is killed with SIGKILL
//! while runs are in flight, and another takes its runs over; then a third
//! joins and the second is killed; then a fourth joins and the third stops
//! cleanly (its runs are free at once). Every run must end once: one success
//! per step, record numbers dense (none overwritten), and a shared counter
//! bumped exactly twice per run.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::Scratch;
use crate::common::server::{address_file, wait_for_address};

const WORKFLOW: &str = r#"
id: pair
steps:
  - { id: first, uses: counter, with: { key: total, by: 1 } }
  - { id: s1, uses: spin, with: { ms: 10 } }
  - { id: s2, uses: spin, with: { ms: 10 } }
  - { id: s3, uses: spin, with: { ms: 10 } }
  - { id: nap, sleep: 1s }
  - { id: last, uses: counter, with: { key: total, by: 1 } }
outputs: "${{ steps.last.output.value }}"
"#;

/// A `weft serve` process, killed when dropped, so that a failing test
/// leaves none behind.
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Serving {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Serving {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// Starts `weft serve` number `n` with short leases.
fn serve(scratch: &Scratch, n: usize) -> (Serving, String) {
    let _ = std::fs::remove_file(address_file(scratch));
    let log = scratch.path().join(format!("host-{n}.log"));
    let mut child = scratch
        .weft()
        .args(["serve", "--listen", "127.0.0.1:0", "--lease-ttl", "1s"])
        .env("WEFT_LOG", "info,weft_engine=debug")
        .arg("--workflows")
        .arg(scratch.path().join("workflows"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let Some(url) = wait_for_address(scratch) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("weft serve {n} did not start");
    };
    (Serving(child), url)
}

/// What the hosts' logs say of run `id`, for a failure's message.
fn told_of(scratch: &Scratch, id: &str) -> String {
    let mut told = String::new();
    for n in 0..4 {
        let log = scratch.path().join(format!("host-{n}.log"));
        let Ok(text) = std::fs::read_to_string(log) else {
            continue;
        };
        for line in text.lines().filter(|line| line.contains(id)) {
            told.push_str(&format!("host {n}: {line}\n"));
        }
    }
    told
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

fn start(agent: &ureq::Agent, url: &str) -> String {
    let mut answer = agent
        .post(format!("{url}/v1/runs"))
        .send_json(json!({ "workflow": "pair", "input": {} }))
        .unwrap();
    assert_eq!(answer.status(), 201);
    let body: Value = answer.body_mut().read_json().unwrap();
    body["id"].as_str().unwrap().to_owned()
}

fn show(agent: &ureq::Agent, url: &str, id: &str) -> Value {
    let mut answer = agent.get(format!("{url}/v1/runs/{id}")).call().unwrap();
    assert_eq!(answer.status(), 200, "run {id} was lost");
    answer.body_mut().read_json().unwrap()
}

#[test]
fn hosts_share_a_store_and_finish_the_runs_of_one_that_dies_or_stops() {
    let scratch = Scratch::new(&["counter", "spin"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(scratch.path().join("workflows/pair.yaml"), WORKFLOW).unwrap();
    let agent = agent();
    let (mut first, first_url) = serve(&scratch, 0);
    let (mut second, second_url) = serve(&scratch, 1);

    let mut ids = Vec::new();
    for n in 0..160 {
        let url = if n % 2 == 0 { &first_url } else { &second_url };
        ids.push(start(&agent, url));
    }
    // The first host dies with runs in flight; the second takes them over
    // and keeps taking runs of its own.
    first.kill().unwrap();
    first.wait().unwrap();
    for _ in 0..40 {
        ids.push(start(&agent, &second_url));
    }
    // A third host joins; then the second dies with runs in flight.
    let (mut third, third_url) = serve(&scratch, 2);
    for n in 0..80 {
        let url = if n % 2 == 0 { &second_url } else { &third_url };
        ids.push(start(&agent, url));
    }
    second.kill().unwrap();
    second.wait().unwrap();

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut unfinished_at_kill = 0;
    for id in &ids {
        let mut looked = false;
        let shown = loop {
            let shown = show(&agent, &third_url, id);
            if shown["run"]["state"] != "running" {
                break shown;
            }
            if !looked {
                unfinished_at_kill += 1;
                looked = true;
            }
            assert!(
                Instant::now() < deadline,
                "run {id} never finished: {shown}\n{}",
                told_of(&scratch, id)
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(shown["run"]["state"], "succeeded", "run {id}: {shown}");
        let steps = shown["steps"].as_array().unwrap();
        let mut done: Vec<&str> = steps
            .iter()
            .filter(|s| s["error"].is_null() && !s["output"].is_null())
            .map(|s| s["step_id"].as_str().unwrap())
            .collect();
        done.sort_unstable();
        assert_eq!(
            done,
            ["first", "last", "nap", "s1", "s2", "s3"],
            "run {id}: one success per step: {steps:?}"
        );
        let seqs: Vec<u64> = steps.iter().map(|s| s["seq"].as_u64().unwrap()).collect();
        assert_eq!(
            seqs,
            (0..steps.len() as u64).collect::<Vec<_>>(),
            "run {id}: record numbers"
        );
    }
    eprintln!(
        "{} runs; {unfinished_at_kill} still running after the second kill",
        ids.len()
    );
    assert!(
        unfinished_at_kill > 0,
        "no kill landed while runs were in flight"
    );

    // Each run bumped the shared counter exactly twice, across the hosts.
    let last = start(&agent, &third_url);
    let counted = loop {
        let shown = show(&agent, &third_url, &last);
        if shown["run"]["state"] != "running" {
            break shown["run"]["outputs"].clone();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(counted, json!(2 * ids.len() + 2), "the shared counter");
    for n in [1, 2] {
        let log = std::fs::read_to_string(scratch.path().join(format!("host-{n}.log"))).unwrap();
        assert!(log.contains("host gone"), "host {n} took over:\n{log}");
    }

    // A fourth host joins, and the third stops cleanly on SIGTERM (what a
    // service manager sends) with runs in flight: its leases go with it,
    // and the fourth finishes them. The address file names the fourth,
    // and the third leaves it so.
    let mut late = Vec::new();
    for _ in 0..40 {
        late.push(start(&agent, &third_url));
    }
    let (mut fourth, fourth_url) = serve(&scratch, 3);
    let status = std::process::Command::new("kill")
        .args(["-TERM", &third.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(third.wait().unwrap().success());
    let named = std::fs::read_to_string(address_file(&scratch)).unwrap();
    assert_eq!(named.trim(), fourth_url);
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in &late {
        loop {
            let shown = show(&agent, &fourth_url, id);
            if shown["run"]["state"] != "running" {
                assert_eq!(shown["run"]["state"], "succeeded", "run {id}: {shown}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "run {id} never finished: {shown}\n{}",
                told_of(&scratch, id)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // The last serve stops on SIGTERM too, and takes its address file
    // with it.
    let status = std::process::Command::new("kill")
        .args(["-TERM", &fourth.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(fourth.wait().unwrap().success());
    assert!(!address_file(&scratch).exists());
}
