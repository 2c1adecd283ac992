//! Cron triggers under a simulated clock: catch-up after downtime with
//! each policy, the overlap policies with a run that outlasts its period,
//! exactly one run per fire with two hosts on one store, pause and resume;
//! and one real-time test with `weft serve` killed and restarted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::server::serve;
use crate::common::{Scratch, guests, wait};
use serde_json::{Value, json};
use weft::engine::EngineConfig;
use weft::store::{RunFilter, RunRecord, RunState, ScheduleRecord};
use weft::{
    Engine, PluginDir, RedbStore, Runtime, RuntimeConfig, SimClock, Store, Timestamp, WorkflowDir,
};

/// 2026-11-30T00:00:30Z.
const T0: Timestamp = Timestamp(1_795_996_830_000);
const HOUR: u64 = 3_600_000;

struct Host {
    dir: tempfile::TempDir,
    store: Arc<RedbStore>,
    clock: Arc<SimClock>,
}

impl Host {
    fn new(workflow: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("workflows")).unwrap();
        std::fs::write(dir.path().join("workflows/wf.yaml"), workflow).unwrap();
        let store = Arc::new(RedbStore::open(dir.path().join("weft.redb")).unwrap());
        Self {
            dir,
            store,
            clock: Arc::new(SimClock::new(T0)),
        }
    }

    /// A host process: its engine, with the workflows' triggers synced and
    /// the cron thread started.
    fn start(&self) -> Engine {
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let mut engine = Engine::with_config(
            self.store.clone(),
            PluginDir::new(runtime, guests()),
            self.clock.clone(),
            EngineConfig {
                workers: 4,
                ..EngineConfig::default()
            },
        )
        .unwrap();
        let (workflows, errors) = WorkflowDir::load(&self.dir.path().join("workflows")).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        engine.arm_timers().unwrap();
        engine.sync_schedules(&workflows).unwrap();
        engine.set_workflows(Arc::new(workflows));
        engine.run_schedules().unwrap();
        engine
    }

    fn runs(&self) -> Vec<RunRecord> {
        let mut runs = self.store.runs(&RunFilter::default(), 10_000).unwrap();
        runs.reverse();
        runs
    }

    fn trigger(&self) -> ScheduleRecord {
        let mut rows = self.store.schedules().unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        rows.remove(0)
    }

    /// Fire times of the runs the trigger started, oldest first.
    fn fires(&self) -> Vec<u64> {
        let mut fires: Vec<u64> = self
            .runs()
            .iter()
            .filter_map(|r| r.trigger.as_ref().map(|t| t.fire.as_millis()))
            .collect();
        fires.sort_unstable();
        fires
    }

    fn wait_until(&self, what: &str, done: impl Fn() -> bool) {
        let look = || if done() { Ok(()) } else { Err(()) };
        wait(
            Duration::from_secs(30),
            Duration::from_millis(5),
            look,
            |()| {
                format!(
                    "never {what}: runs {:#?}\ntrigger {:#?}",
                    self.runs(),
                    self.store.schedules().unwrap()
                )
            },
        );
    }

    /// Lets the cron thread look at the triggers a few times.
    fn settle(&self) {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn hourly(catch_up: &str, overlap: &str) -> String {
    format!(
        "id: tick\non:\n  schedule:\n    - {{ id: hourly, cron: \"0 0 * * * *\", catch_up: {catch_up}, overlap: {overlap}, input: {{ n: 1 }} }}\nsteps:\n  - {{ id: echo, uses: echo, with: \"${{{{ inputs }}}}\" }}\n"
    )
}

#[test]
fn after_a_three_hour_downtime_each_catch_up_policy_is_honoured() {
    for (policy, expected) in [("all", vec![1, 2, 3]), ("one", vec![3]), ("none", vec![])] {
        let host = Host::new(&hourly(policy, "allow"));
        let engine = host.start();
        assert_eq!(
            host.trigger().next_fire,
            Some(Timestamp(T0.0 - 30_000 + HOUR))
        );
        drop(engine); // down from 00:00:30 to 03:30:30

        host.clock
            .advance(Duration::from_millis(3 * HOUR + 30 * 60_000));
        let engine = host.start();
        let expected: Vec<u64> = expected.iter().map(|h| T0.0 - 30_000 + h * HOUR).collect();
        // The catch-up pass has been written once the next fire is 04:00
        // (with `none` no fire shows it).
        let next = Some(Timestamp(T0.0 - 30_000 + 4 * HOUR));
        host.wait_until(&format!("caught up with `{policy}`"), || {
            host.fires() == expected
                && host.runs().iter().all(|r| r.state.is_terminal())
                && host.trigger().next_fire == next
        });
        host.settle();
        assert_eq!(host.fires(), expected, "catch_up: {policy}");
        let trigger = host.trigger();
        assert_eq!(trigger.next_fire, next);
        assert_eq!(trigger.skipped, 3 - expected.len() as u64);
        for run in host.runs() {
            assert_eq!(run.state, RunState::Succeeded);
            assert_eq!(run.outputs, Some(json!({ "n": 1 })));
        }

        // Fires that come due while the host runs always fire.
        host.clock.advance(Duration::from_millis(HOUR));
        let mut with_live = expected.clone();
        with_live.push(T0.0 - 30_000 + 4 * HOUR);
        host.wait_until("fired live", || host.fires() == with_live);
        drop(engine);
    }
}

/// A workflow whose run sleeps 90 s, fired every minute.
fn overlapping(overlap: &str) -> String {
    format!(
        "id: slow\non:\n  schedule:\n    - {{ id: every-minute, cron: \"0 * * * * *\", overlap: {overlap} }}\nsteps:\n  - {{ id: nap, sleep: 90s }}\n"
    )
}

#[test]
fn overlap_policies_decide_what_a_fire_does_while_the_last_run_runs() {
    let minute = 60_000;
    let first = T0.0 + 30_000; // 00:01:00
    for overlap in ["skip", "buffer_one", "cancel_previous", "allow"] {
        let host = Host::new(&overlapping(overlap));
        let _engine = host.start();
        host.clock.set(Timestamp(first));
        // Its sleep is committed, so it ends at 00:02:30 whatever the
        // clock does next.
        host.wait_until("started its first run, asleep", || {
            let runs = host.runs();
            runs.len() == 1 && runs[0].suspended
        });
        let a = host.runs()[0].id.clone();
        // 00:02:00: the first run sleeps until 00:02:30.
        host.clock.set(Timestamp(first + minute));
        host.wait_until("handled the second fire", || {
            host.trigger().last_fire == Some(Timestamp(first + minute))
        });
        host.settle();
        let runs = host.runs();
        match overlap {
            "skip" => {
                assert_eq!(runs.len(), 1);
                assert_eq!(host.trigger().skipped, 1);
            }
            "buffer_one" => {
                assert_eq!(runs.len(), 1);
                assert_eq!(host.trigger().buffered, Some(Timestamp(first + minute)));
                // The first run ends at 00:02:30; the buffered fire starts.
                host.clock.set(Timestamp(first + minute + 31_000));
                host.wait_until("started the buffered fire", || host.runs().len() == 2);
                assert_eq!(
                    host.store.run(&a).unwrap().unwrap().state,
                    RunState::Succeeded
                );
                let b = &host.runs()[1];
                assert_eq!(b.trigger.as_ref().unwrap().fire, Timestamp(first + minute));
                assert_eq!(host.trigger().buffered, None);
            }
            "cancel_previous" => {
                assert_eq!(runs.len(), 2);
                host.wait_until("cancelled the first run", || {
                    host.store.run(&a).unwrap().unwrap().state == RunState::Cancelled
                });
                assert_eq!(runs[1].state, RunState::Running);
            }
            "allow" => {
                assert_eq!(runs.len(), 2);
                assert_eq!(
                    host.store.run(&a).unwrap().unwrap().state,
                    RunState::Running
                );
            }
            _ => unreachable!(),
        }
    }
}

#[test]
fn a_fire_seen_by_two_hosts_starts_one_run() {
    let host = Host::new(
        "id: twice\non:\n  schedule:\n    - { cron: \"*/10 * * * * *\", overlap: allow }\nsteps:\n  - { id: echo, uses: echo, with: 1 }\n",
    );
    let _one = host.start();
    let _two = host.start();
    for step in 1..=30 {
        host.clock.set(Timestamp(T0.0 + step * 10_000));
        std::thread::sleep(Duration::from_millis(10));
    }
    let last = T0.0 + 300_000;
    host.wait_until("fired through the last slot", || {
        host.fires().last() == Some(&last)
    });
    host.settle();
    let fires = host.fires();
    let mut distinct = fires.clone();
    distinct.dedup();
    assert_eq!(fires, distinct, "a fire started two runs");
    assert_eq!(fires.len(), 30);
}

#[test]
fn a_paused_trigger_does_not_fire_and_resumes_from_now() {
    let host = Host::new(&hourly("all", "allow"));
    let _engine = host.start();
    let key = host.trigger().key;
    assert_eq!(key, "tick/hourly");
    // Pause it the way `weft schedules pause` does: in the store.
    let mut row = host.trigger();
    row.paused = true;
    row.version += 1;
    let answers = host
        .store
        .apply(&[&weft::store::Write::schedule(
            &row,
            Some(row.version - 1),
            None,
        )])
        .unwrap();
    assert!(answers[0].is_ok());
    host.clock.advance(Duration::from_millis(2 * HOUR));
    host.settle();
    assert!(host.runs().is_empty());
}

// The real-time test: a serve process.

fn fire_times(scratch: &Scratch) -> Vec<u64> {
    let listed = scratch.run(&["runs", "list", "--json", "--limit", "100000"]);
    assert_eq!(listed.code, Some(0), "{listed:?}");
    let mut fires: Vec<u64> = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["trigger"]["fire"].as_u64())
        .collect();
    fires.sort_unstable();
    fires
}

#[test]
fn a_serve_killed_and_restarted_catches_up_one_fire_then_fires_every_second() {
    let scratch = Scratch::new(&["echo"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(
        scratch.path().join("workflows/beat.yaml"),
        "id: beat\non:\n  schedule:\n    - { id: second, cron: \"* * * * * *\", catch_up: one, overlap: allow }\nsteps:\n  - { id: echo, uses: echo, with: 1 }\n",
    )
    .unwrap();
    let mut host = serve(&scratch, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while fire_times(&scratch).len() < 2 {
        assert!(Instant::now() < deadline, "no fires");
        std::thread::sleep(Duration::from_millis(100));
    }
    host.kill(); // SIGKILL
    let before = fire_times(&scratch);
    let last_before = *before.last().unwrap();

    std::thread::sleep(Duration::from_secs(3));
    let mut host = serve(&scratch, 1);
    std::thread::sleep(Duration::from_millis(2500));
    host.kill();

    let fires = fire_times(&scratch);
    let mut distinct = fires.clone();
    distinct.dedup();
    assert_eq!(fires, distinct, "a fire started two runs");
    // Every fire before the kill was one second after the last.
    assert!(before.windows(2).all(|w| w[1] - w[0] == 1000), "{before:?}");
    // After the restart: one catch-up fire for the downtime (its latest
    // missed second), then one per second.
    let after: Vec<u64> = fires.iter().copied().filter(|f| *f > last_before).collect();
    assert!(after.len() >= 2, "{fires:?}");
    assert!(after[0] - last_before >= 3000, "the gap: {fires:?}");
    assert!(after.windows(2).all(|w| w[1] - w[0] == 1000), "{after:?}");
    let rows: Value = scratch.run(&["schedules", "list", "--json"]).json();
    let skipped = rows[0]["skipped"].as_u64().unwrap();
    assert_eq!(
        skipped,
        (after[0] - last_before) / 1000 - 1,
        "every missed second but the latest was skipped: {rows}"
    );
}

#[test]
fn the_api_lists_pauses_and_resumes_triggers_and_cancels_runs() {
    let scratch = Scratch::new(&["echo"]);
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    std::fs::write(
        scratch.path().join("workflows/nightly.yaml"),
        "id: nightly\non:\n  schedule:\n    - { id: at-two, cron: \"0 0 2 * * *\", timezone: Europe/Berlin }\nsteps:\n  - { id: nap, sleep: 1h }\n",
    )
    .unwrap();
    let mut host = serve(&scratch, 0);
    let url = host.url.clone();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let get = |path: &str| -> (u16, Value) {
        let mut answer = agent.get(format!("{url}{path}")).call().unwrap();
        (
            answer.status().as_u16(),
            answer.body_mut().read_json().unwrap(),
        )
    };
    let post = |path: &str, body: Value| -> (u16, Value) {
        let mut answer = agent.post(format!("{url}{path}")).send_json(body).unwrap();
        (
            answer.status().as_u16(),
            answer.body_mut().read_json().unwrap(),
        )
    };

    let (status, listed) = get("/v1/schedules");
    assert_eq!(status, 200);
    let row = &listed["schedules"][0];
    assert_eq!(row["key"], "nightly/at-two");
    assert_eq!(row["spec"]["timezone"], "Europe/Berlin");
    assert!(row["next_fire"].is_u64(), "{listed}");

    let (status, paused) = post("/v1/schedules/nightly/at-two/pause", json!({}));
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["schedule"]["paused"], true);
    let (status, resumed) = post("/v1/schedules/nightly/at-two/resume", json!({}));
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["schedule"]["paused"], false);
    let (status, missing) = post("/v1/schedules/nightly/nope/pause", json!({}));
    assert_eq!(status, 404, "{missing}");
    assert_eq!(missing["error"]["code"], "unknown_schedule");

    // Add a trigger over HTTP; a second with the same id conflicts; a bad
    // spec names its field.
    let spec =
        json!({ "workflow": "nightly", "schedule": { "id": "hourly", "cron": "0 0 * * * *" } });
    let (status, added) = post("/v1/schedules", spec.clone());
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["schedule"]["key"], "nightly/hourly");
    assert_eq!(added["schedule"]["origin"], "api");
    let (status, again) = post("/v1/schedules", spec);
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["error"]["code"], "schedule_exists");
    let (status, bad) = post(
        "/v1/schedules",
        json!({ "workflow": "nightly", "schedule": { "cron": "0 0 * * * *", "timezone": "Nowhere/Else" } }),
    );
    assert_eq!(status, 400, "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("schedule.timezone:"),
        "{bad}"
    );
    let (status, unknown) = post(
        "/v1/schedules",
        json!({ "workflow": "ghost", "schedule": { "cron": "0 0 * * * *" } }),
    );
    assert_eq!(status, 404, "{unknown}");
    let (_, listed) = get("/v1/schedules");
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 2);

    // A trigger added by hand is removed by hand, over HTTP or from the
    // CLI; one the workflow's file declares is removed there.
    let delete = |path: &str| -> (u16, Value) {
        let mut answer = agent.delete(format!("{url}{path}")).call().unwrap();
        (
            answer.status().as_u16(),
            answer.body_mut().read_json().unwrap(),
        )
    };
    let (status, declared) = delete("/v1/schedules/nightly/at-two");
    assert_eq!(status, 409, "{declared}");
    assert_eq!(declared["error"]["code"], "schedule_declared");
    let (status, removed) = delete("/v1/schedules/nightly/hourly");
    assert_eq!(status, 200, "{removed}");
    assert_eq!(removed["schedule"]["key"], "nightly/hourly");
    let (status, gone) = delete("/v1/schedules/nightly/hourly");
    assert_eq!(status, 404, "{gone}");
    let (status, _) = post(
        "/v1/schedules",
        json!({ "workflow": "nightly", "schedule": { "id": "daily", "cron": "0 0 3 * * *" } }),
    );
    assert_eq!(status, 201);
    let removed = scratch.run(&["schedules", "remove", "nightly/daily"]);
    assert_eq!(removed.code, Some(0), "{removed:?}");
    let again = scratch.run(&["schedules", "remove", "nightly/daily"]);
    assert_eq!(again.code, Some(2), "{again:?}");
    assert!(
        again.stderr.contains("no trigger `nightly/daily`"),
        "{}",
        again.stderr
    );
    let declared = scratch.run(&["schedules", "remove", "nightly/at-two"]);
    assert_eq!(declared.code, Some(2), "{declared:?}");
    assert!(
        declared.stderr.contains("declared in its workflow's file"),
        "{}",
        declared.stderr
    );
    let (_, listed) = get("/v1/schedules");
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 1, "{listed}");

    let (status, started) = post("/v1/runs", json!({ "workflow": "nightly" }));
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let (status, cancelled) = post(&format!("/v1/runs/{id}/cancel"), json!({}));
    assert_eq!(status, 200, "{cancelled}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, shown) = get(&format!("/v1/runs/{id}"));
        if shown["run"]["state"] == "cancelled" {
            break;
        }
        assert!(Instant::now() < deadline, "{shown}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, again) = post(&format!("/v1/runs/{id}/cancel"), json!({}));
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["error"]["code"], "run_ended");
    let (status, unknown) = post("/v1/runs/nope/cancel", json!({}));
    assert_eq!(status, 404, "{unknown}");
    host.kill();
}
