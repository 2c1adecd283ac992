//! The crash harness: a real `weft serve` on a real redb file is killed with
//! SIGKILL at random moments while runs are in flight, and restarted, four
//! times. Every run the server acknowledged must then finish, with the right
//! outputs, and with exactly one successful record per step: nothing lost,
//! nothing committed twice.

use std::collections::HashMap;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::Scratch;
use crate::common::server::{address_file, wait_for_address};
use serde_json::{Value, json};

const WORKFLOW: &str = r#"
id: mix
inputs: { type: object, required: [n] }
steps:
  - id: first
    uses: echo
    with: { n: "${{ inputs.n }}" }
  - id: shaky
    uses: flaky
    with: { succeed_on: 2 }
    retry: { max_attempts: 3, backoff: fixed, initial: 5ms }
  - id: busy
    foreach: "${{ [1, 2, 3] }}"
    concurrency: 2
    steps:
      - { id: spin, uses: spin, with: { ms: 5 } }
  - id: skipped
    uses: echo
    if: inputs.n < 0
  - id: fan
    parallel:
      - id: count
        uses: counter
        with: { key: total, by: "${{ inputs.n >= 0 ? 1 : 0 }}" }
      - { id: sub, subflow: inner, with: { n: "${{ inputs.n }}" } }
  - id: last
    uses: echo
    with: "${{ [steps.first.output.n * 2, steps.shaky.output.attempt, steps.sub.output.n] }}"
outputs:
  doubled: "${{ steps.last.output[0] }}"
  attempt: "${{ steps.last.output[1] }}"
  child: "${{ steps.last.output[2] }}"
  count: "${{ steps.count.output.value }}"
"#;

/// The child each run starts: it counts itself in its own key space.
const INNER: &str = r#"
id: inner
steps:
  - { id: copy, uses: echo, with: "${{ inputs }}" }
  - { id: tally, uses: counter, with: { key: children, by: 1 } }
outputs: "${{ {'n': steps.copy.output.n, 'tally': steps.tally.output.value} }}"
"#;

struct Server {
    child: Child,
    url: String,
    log: std::path::PathBuf,
}

impl Server {
    /// How many interrupted runs this server said it resumed on start.
    fn resumed(&self) -> u64 {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .find_map(|line| {
                let (_, rest) = line.split_once("; ")?;
                rest.strip_suffix(" interrupted run(s) resumed")?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no start line in the server's log:\n{log}"))
    }
}

// The child is handed back inside `Server`; the test kills and waits for it.
#[allow(clippy::zombie_processes)]
fn start_server(scratch: &Scratch, n: usize) -> Server {
    let _ = std::fs::remove_file(address_file(scratch));
    let workflows = scratch.path().join("workflows");
    let log = scratch.path().join(format!("serve-{n}.log"));
    let mut child = scratch
        .weft()
        .args(["serve", "--listen", "127.0.0.1:0", "--workflows"])
        .arg(&workflows)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // The address file is written after recovery and the start line.
    let Some(url) = wait_for_address(scratch) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("weft serve did not start");
    };
    Server { child, url, log }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// A small deterministic generator, so a failure can be replayed from the
/// seed the test prints.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

#[test]
fn runs_survive_repeated_kill_9_of_the_server() {
    let scratch = Scratch::new(&["echo", "flaky", "spin", "counter"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(scratch.path().join("workflows/mix.yaml"), WORKFLOW).unwrap();
    std::fs::write(scratch.path().join("workflows/inner.yaml"), INNER).unwrap();
    let seed = crate::common::test_seed();
    eprintln!("crash harness seed: {seed} (WEFT_TEST_SEED={seed} replays its kill times)");
    let mut random = Lcg(seed);

    let total = 240;
    let kills = [
        60 + random.next(20),
        120 + random.next(20),
        180 + random.next(20),
    ];
    let agent = agent();
    let mut starts = 0;
    let mut resumed = 0;
    let mut server = start_server(&scratch, starts);
    let mut acked: HashMap<String, i64> = HashMap::new();
    for n in 0..total {
        if kills.contains(&n) {
            // Let some runs get going, then pull the plug mid-flight.
            std::thread::sleep(Duration::from_millis(random.next(40)));
            server.child.kill().unwrap();
            server.child.wait().unwrap();
            starts += 1;
            server = start_server(&scratch, starts);
            resumed += server.resumed();
        }
        let answer = agent
            .post(format!("{}/v1/runs", server.url))
            .send_json(json!({ "workflow": "mix", "input": { "n": n } }));
        let mut answer =
            answer.unwrap_or_else(|e| panic!("run {n}: the server did not answer: {e}"));
        assert_eq!(answer.status(), 201, "run {n}");
        let body: Value = answer.body_mut().read_json().unwrap();
        acked.insert(body["id"].as_str().unwrap().to_owned(), n as i64);
    }

    // One more kill with everything in flight, then let it all finish.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let mut server = start_server(&scratch, starts + 1);
    resumed += server.resumed();
    eprintln!(
        "{} runs acknowledged; {resumed} resumed after kills",
        acked.len()
    );
    assert!(resumed > 0, "no kill landed while a run was in flight");

    let deadline = Instant::now() + Duration::from_secs(180);
    for (id, n) in &acked {
        let shown = loop {
            let mut answer = agent
                .get(format!("{}/v1/runs/{id}", server.url))
                .call()
                .unwrap();
            assert_eq!(answer.status(), 200, "run {id} (n = {n}) was lost");
            let shown: Value = answer.body_mut().read_json().unwrap();
            if shown["run"]["state"] != "running" {
                break shown;
            }
            assert!(
                Instant::now() < deadline,
                "run {id} never finished: {shown}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(shown["run"]["state"], "succeeded", "run {id}: {shown}");
        assert_eq!(shown["run"]["outputs"]["doubled"], n * 2, "run {id}");
        assert_eq!(shown["run"]["outputs"]["attempt"], 2, "run {id}");
        assert_eq!(shown["run"]["outputs"]["child"], *n, "run {id}");
        // Exactly one successful (or skipped) record per step (the branches
        // and iterations in the order they finished), and for the subflow,
        // one record of its start and one of its result; the only other
        // records are shaky's first, failed attempt(s).
        let steps = shown["steps"].as_array().unwrap();
        let mut done: Vec<&str> = steps
            .iter()
            .filter(|s| s["error"].is_null())
            .map(|s| s["step_id"].as_str().unwrap())
            .collect();
        done.sort_unstable();
        assert_eq!(
            done,
            [
                "count", "first", "last", "shaky", "skipped", "spin", "spin", "spin", "sub", "sub"
            ],
            "run {id}: {steps:?}"
        );
        let children: Vec<&Value> = steps
            .iter()
            .filter(|s| s["step_id"] == "sub")
            .map(|s| &s["child"])
            .collect();
        assert!(
            children[0].is_string() && children[0] == children[1],
            "run {id}: one child: {children:?}"
        );
        let seqs: Vec<u64> = steps.iter().map(|s| s["seq"].as_u64().unwrap()).collect();
        assert_eq!(
            seqs,
            (0..steps.len() as u64).collect::<Vec<_>>(),
            "run {id}: record numbers"
        );
        for failed in steps.iter().filter(|s| !s["error"].is_null()) {
            assert_eq!(failed["step_id"], "shaky", "run {id}: {failed}");
        }
    }

    // Every acknowledged run added one to the shared counter, exactly once,
    // across kills and concurrent runs.
    let mut answer = agent
        .post(format!("{}/v1/runs", server.url))
        .send_json(json!({ "workflow": "mix", "input": { "n": -1 } }))
        .unwrap();
    let id = answer.body_mut().read_json::<Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let counted = loop {
        let shown: Value = agent
            .get(format!("{}/v1/runs/{id}", server.url))
            .call()
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap();
        if shown["run"]["state"] != "running" {
            break shown["run"]["outputs"]["count"].clone();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(counted, json!(acked.len()), "the shared counter");

    // One child per run (and one for the counting run), each counted once
    // in the children's own key space.
    let listed: Value = agent
        .get(format!("{}/v1/runs?workflow=inner&limit=1000", server.url))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    let children = listed
        .as_array()
        .or_else(|| listed["runs"].as_array())
        .unwrap();
    assert_eq!(children.len(), acked.len() + 1, "child runs");
    let mut tallies: Vec<i64> = children
        .iter()
        .map(|c| {
            assert_eq!(c["state"], "succeeded", "{c}");
            c["outputs"]["tally"].as_i64().unwrap()
        })
        .collect();
    tallies.sort_unstable();
    assert_eq!(
        tallies,
        (1..=acked.len() as i64 + 1).collect::<Vec<_>>(),
        "each child counted exactly once"
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

/// A run row that does not decode holds no other run back: the server
/// that finds one among the interrupted runs resumes every other one (the
/// claims of a resume share a commit, which the broken row used to fail).
#[test]
fn a_run_row_that_does_not_decode_holds_no_other_resume_back() {
    let scratch = Scratch::new(&["spin"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(
        scratch.path().join("workflows/long.yaml"),
        "id: long\nsteps:\n  - { id: s, uses: spin, with: { ms: 600000 }, timeout: 20m }\n",
    )
    .unwrap();
    let agent = agent();
    let mut server = start_server(&scratch, 0);
    const RUNS: u64 = 30;
    for n in 0..RUNS {
        let answer = agent
            .post(format!("{}/v1/runs", server.url))
            .send_json(json!({ "workflow": "long" }));
        assert_eq!(answer.unwrap().status(), 201, "run {n}");
    }
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    {
        let db = redb::Database::create(scratch.data_dir().join("weft.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        let runs = redb::TableDefinition::<&str, &[u8]>::new("runs");
        let running = redb::TableDefinition::<&str, ()>::new("running");
        // A few, so that some share a commit with good claims.
        for n in 0..5 {
            let id = format!("broken{n}");
            txn.open_table(runs)
                .unwrap()
                .insert(id.as_str(), b"{not json".as_slice())
                .unwrap();
            txn.open_table(running)
                .unwrap()
                .insert(id.as_str(), ())
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let mut server = start_server(&scratch, 1);
    let resumed = server.resumed();
    // The broken rows are set aside, not tried again and again.
    std::thread::sleep(Duration::from_secs(1));
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    assert_eq!(resumed, RUNS, "the good runs were not all resumed");
    let log = std::fs::read_to_string(&server.log).unwrap();
    let retried = log
        .lines()
        .filter(|line| line.contains("broken") && line.contains("will try again"))
        .count();
    assert_eq!(retried, 0, "{log}");
    assert!(
        log.lines()
            .any(|line| line.contains("broken") && line.contains("cannot resume")),
        "{log}"
    );
}
