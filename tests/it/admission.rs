//! Admission: with a cap on resident runs, runs started beyond it wait,
//! durably recorded, and start in arrival order as places free; none is
//! dropped and none is evicted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::guests;
use serde_json::json;
use weft::engine::{EngineConfig, Observer};
use weft::model::{Format, Step};
use weft::store::{RunRecord, RunState, StepRecord};
use weft::{Engine, PluginDir, RedbStore, Runtime, RuntimeConfig, Store, SystemClock};

/// Counts runs between their first step and their last, and the order in
/// which they began.
struct Watch {
    n: usize,
    active: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    began: Arc<Mutex<Vec<usize>>>,
}

impl Observer for Watch {
    fn step_started(&mut self, _step: &Step, index: usize, _total: usize, _attempt: u32) {
        if index == 0 {
            let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            self.began.lock().unwrap().push(self.n);
        }
    }

    fn step_finished(&mut self, record: &StepRecord) {
        if record.index == 1 {
            self.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[test]
fn runs_over_the_cap_wait_their_turn_in_arrival_order() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let store = Arc::new(RedbStore::open(dir.path().join("weft.redb")).unwrap());
    let engine = Engine::with_config(
        store.clone(),
        PluginDir::new(runtime, guests()),
        Arc::new(SystemClock),
        EngineConfig {
            workers: 8,
            max_resident: 2,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let workflow = Arc::new(
        weft::model::parse(
            "id: slow\nsteps:\n  - { id: a, uses: spin, with: { ms: 30 } }\n  - { id: b, uses: echo, with: '${{ inputs }}' }\n",
            Format::Yaml,
            "slow.yaml",
        )
        .unwrap(),
    );
    let active = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let began = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for n in 0..8 {
        let watch = Watch {
            n,
            active: active.clone(),
            most: most.clone(),
            began: began.clone(),
        };
        let mut handle = engine
            .start(workflow.clone(), json!({ "n": n }), Box::new(watch))
            .unwrap();
        handle.recorded().unwrap();
        handles.push(handle);
    }
    // Every run is recorded at once, though most are parked.
    let (resident, _parked) = engine.load();
    assert!(resident <= 2, "{resident} resident");
    assert_eq!(store.runs(&Default::default(), 100).unwrap().len(), 8);
    let runs: Vec<RunRecord> = handles.into_iter().map(|h| h.wait().unwrap()).collect();
    assert!(runs.iter().all(|r| r.state == RunState::Succeeded));
    for (n, run) in runs.iter().enumerate() {
        assert_eq!(run.outputs, Some(json!({ "n": n })));
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "at most two runs in progress at once"
    );
    // Runs take the two places in pairs: 0 and 1 at once, then 2 and 3 as
    // those end together, and so on. Each pair is the next two runs in
    // arrival order; which of the two begins its first step first is up
    // to the workers that read them in.
    let began = began.lock().unwrap().clone();
    let pairs: Vec<Vec<usize>> = began
        .chunks(2)
        .map(|pair| {
            let mut pair = pair.to_vec();
            pair.sort_unstable();
            pair
        })
        .collect();
    let expected: Vec<Vec<usize>> = (0..4).map(|k| vec![2 * k, 2 * k + 1]).collect();
    assert_eq!(pairs, expected, "arrival order, by pairs: {began:?}");
    assert_eq!(engine.load(), (0, 0));
}
