//! `weft bench --startup`: start-up at scale (issue 20). With 1,000,000
//! ended runs and 100,000 running runs in the store, `weft serve` takes
//! its first step within 2 s and has every running run going again within
//! 30 s.
//!
//! First a fixture: a fresh redb file in which one real run of a
//! two-`echo`-step workflow is made by the engine, to serve as the
//! template of every record; then the ended runs and the running ones are
//! written through [`Store::apply`], thousands of runs a transaction, as
//! the same writes the engine makes (each run created, under a lease,
//! charged to its tenant; its steps committed). The running runs have
//! committed step 1 of 2 under the lease of a host that was killed (its
//! row expired, its process gone), so their next step is due and the next
//! host must take them over.
//!
//! Then a fresh process opens the store and starts a host as `weft serve`
//! does ([`Host::start`], recovering the store), and times, from its
//! start, its first committed step and the moment every running run has
//! taken its next step (which ends it), counted by the engine's metrics.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use weft::core::lock;
use weft::core::metrics::EndLabels;
use weft::engine::{EngineConfig, Metrics, Observer};
use weft::store::{DefinitionRecord, HostRecord, Lease, RunRecord, RunState, StepRecord, Write};
use weft::{
    Clock, Engine, Host, HostConfig, PluginDir, RedbStore, Runtime, RuntimeConfig, Store,
    SystemClock, Timestamp, WorkflowDir,
};

/// The workflow every run of the fixture follows: two `echo` steps.
const WORKFLOW: &str = "id: startup\nsteps:\n  - { id: s0, uses: echo, with: { i: 0 } }\n  - { id: s1, uses: echo, with: { i: 1 } }\n";
/// Its id, in tenant `default`, as the metrics label it.
const WORKFLOW_ID: &str = "startup";
const STORE: &str = "weft.redb";
/// Where the measuring process leaves its figures for this one.
const FIGURES: &str = "startup.json";
/// Runs written per transaction while the fixture is built.
const BATCH: usize = 2_000;
/// The goals.
const FIRST_GOAL: Duration = Duration::from_secs(2);
const ALL_GOAL: Duration = Duration::from_secs(30);
/// The measuring process gives up this long after its start, or once no
/// run has ended for [`STALL`] since one did.
const LIMIT: Duration = Duration::from_secs(300);
const STALL: Duration = Duration::from_secs(60);

/// What the measuring process saw, from its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Startup {
    /// To the first step it committed; `None` if none came before it gave up.
    pub first_step: Option<Duration>,
    /// To the moment every running run had taken a step; `None` if they
    /// had not before it gave up.
    pub all_going: Option<Duration>,
}

/// `weft bench --startup`: [`figures`], its exit the measuring process's.
pub fn startup(plugins: &Path, ended: usize, running: usize) -> anyhow::Result<ExitCode> {
    Ok(match figures(plugins, ended, running)? {
        Some(_) => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    })
}

/// Builds the fixture of `ended` ended and `running` running runs in a
/// temporary directory (removed after), then measures in a fresh process
/// ([`measure`]), which prints its figures. `None` if that process failed.
pub fn figures(plugins: &Path, ended: usize, running: usize) -> anyhow::Result<Option<Startup>> {
    let dir = std::env::temp_dir().join(format!("weft-bench-startup-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = (|| {
        out!(
            "weft bench: start-up at scale: {ended} ended runs, and {running} running runs (step 1 of 2 done) of a host killed with SIGKILL"
        );
        out!("build: {}", super::build_kind());
        prepare(&dir, plugins)?;
        let began = Instant::now();
        let store = Arc::new(RedbStore::open(dir.join(STORE))?);
        let template = template(&dir, &store)?;
        fill(&store, &template, ended.saturating_sub(1), running)?;
        // The measuring process opens the file: this one lets it go.
        drop(store);
        let took = began.elapsed();
        out!(
            "  fixture        {} runs in {:.1}s ({:.0} runs/s, {BATCH} a transaction), store file {} MiB",
            ended + running,
            took.as_secs_f64(),
            (ended + running) as f64 / took.as_secs_f64().max(1e-9),
            std::fs::metadata(dir.join(STORE))?.len() >> 20
        );
        let exe = std::env::current_exe().context("cannot find the weft binary")?;
        let status = std::process::Command::new(exe)
            .arg("bench")
            .arg("--startup-measure")
            .arg(&dir)
            .arg("--running")
            .arg(running.to_string())
            .arg("--plugins")
            .arg(dir.join("plugins"))
            .status()
            .context("cannot start the measuring process")?;
        if !status.success() {
            return Ok(None);
        }
        let figures: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(FIGURES))?)?;
        let at = |key: &str| {
            figures[key]
                .as_f64()
                .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
        };
        Ok(Some(Startup {
            first_step: at("first_step"),
            all_going: at("all_going"),
        }))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The fixture's plugins directory (`echo` alone, so the host's scan of it
/// costs what a real one would) and workflows directory.
fn prepare(dir: &Path, plugins: &Path) -> anyhow::Result<()> {
    let echo = plugins.join("echo.wasm");
    std::fs::create_dir_all(dir.join("plugins"))?;
    std::fs::copy(&echo, dir.join("plugins").join("echo.wasm")).with_context(|| {
        format!(
            "cannot read {}; build the example plugins first (see README)",
            echo.display()
        )
    })?;
    std::fs::create_dir_all(dir.join("workflows"))?;
    std::fs::write(dir.join("workflows").join("startup.yaml"), WORKFLOW)?;
    Ok(())
}

/// One run as the engine wrote it: its record as created, after its first
/// step and at its end, its two step records, and what it is pinned to.
#[derive(Debug)]
struct Template {
    created: RunRecord,
    middle: RunRecord,
    done: RunRecord,
    steps: Vec<StepRecord>,
    definition: DefinitionRecord,
    components: Vec<(String, Arc<[u8]>)>,
    tenant: String,
    /// The killed host, whose lease every run of the fixture is under.
    dead: String,
}

/// The run's records as it was created and after its first step.
type Seen = Arc<Mutex<(Option<RunRecord>, Option<RunRecord>)>>;

/// Notes [`Seen`]: after step 0's commit is durable, and before step 1
/// starts, the stored record is the run as step 0 left it.
#[derive(Debug)]
struct Capture(Arc<dyn Store>, Seen);

impl Observer for Capture {
    fn run_created(&mut self, run: &RunRecord) {
        lock(&self.1).0 = Some(run.clone());
    }

    fn step_finished(&mut self, record: &StepRecord) {
        if record.seq == 0 {
            lock(&self.1).1 = self.0.run(&record.run_id).ok().flatten();
        }
    }
}

/// Runs the workflow once through an engine on the fixture's `store` in
/// `dir` (which also compiles `echo` into the fixture's cache), then stops
/// the engine and reads the run's records back.
fn template(dir: &Path, store: &Arc<RedbStore>) -> anyhow::Result<Template> {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.join("cache")),
        ..RuntimeConfig::default()
    })?;
    let store: Arc<dyn Store> = Arc::clone(store) as Arc<dyn Store>;
    let engine = Engine::new(
        Arc::clone(&store),
        PluginDir::new(runtime, dir.join("plugins")),
        Arc::new(SystemClock),
    )?;
    let workflow = Arc::new(weft::model::load(
        dir.join("workflows").join("startup.yaml"),
    )?);
    let seen: Seen = Arc::default();
    let capture = Capture(Arc::clone(&store), Arc::clone(&seen));
    let done = engine.run(workflow, serde_json::json!({}), Box::new(capture))?;
    // Its host's row goes: nothing here takes the fixture's runs over.
    drop(engine);
    anyhow::ensure!(
        done.state == RunState::Succeeded,
        "the template run ended {}: {:?}",
        done.state,
        done.error
    );
    let steps = store.steps(&done.id)?;
    anyhow::ensure!(
        steps.len() == 2,
        "the template run has {} records",
        steps.len()
    );
    let definition = store
        .definition(&done.definition)?
        .context("the template run's definition is not in the store")?;
    let digests: BTreeSet<&str> = done.plugins.values().map(|p| p.digest.as_str()).collect();
    let mut components = Vec::new();
    for digest in digests {
        let bytes = store
            .component(digest)?
            .with_context(|| format!("component {digest} is not in the store"))?;
        components.push((digest.to_owned(), Arc::<[u8]>::from(bytes)));
    }
    let (Some(created), Some(middle)) = std::mem::take(&mut *lock(&seen)) else {
        anyhow::bail!("the template run's records were not seen as it ran");
    };
    let dead = weft::core::ids::uuid_v7(SystemClock.now());
    Ok(Template {
        tenant: weft::core::tenant::of(&done.workflow).to_owned(),
        created,
        middle,
        done,
        steps,
        definition,
        components,
        dead,
    })
}

impl Template {
    /// The writes of one more run, created `at`: those the engine made for
    /// the template run, shifted in time, under the killed host's lease;
    /// all of them if `ended`, else its creation and its first step's.
    fn writes(&self, ended: bool, at: Timestamp, out: &mut Vec<Write>) {
        let id = weft::core::ids::uuid_v7(at);
        let base = self.created.created_at.0;
        let shift = |t: Timestamp| Timestamp(at.0 + t.0.saturating_sub(base));
        let run = |r: &RunRecord| RunRecord {
            id: id.clone(),
            created_at: at,
            updated_at: shift(r.updated_at),
            ..r.clone()
        };
        let step = |s: &StepRecord| StepRecord {
            run_id: id.clone(),
            started_at: shift(s.started_at),
            host: Some(self.dead.clone()),
            ..s.clone()
        };
        let lease = Lease::after(None, &self.dead);
        let commit = |s: &StepRecord, r: &RunRecord| {
            Write::commit_step(&step(s), &run(r), None, None, None, Vec::new())
                .under(lease.clone())
                .charged(&self.tenant, true)
        };
        let create = Write::create_run(
            &run(&self.created),
            &self.definition,
            self.components.clone(),
        );
        out.push(create.under(lease.clone()).charged(&self.tenant, true));
        if let [first, last] = self.steps.as_slice() {
            out.push(commit(first, &self.middle));
            if ended {
                out.push(commit(last, &self.done));
            }
        }
    }
}

/// Writes the killed host's row (expired) and `ended` ended runs (created
/// over the last two hours), then `running` running runs (created over
/// the last minute): one thread makes the writes, this one applies them.
fn fill(
    store: &RedbStore,
    template: &Template,
    ended: usize,
    running: usize,
) -> anyhow::Result<()> {
    let now = SystemClock.now().as_millis();
    let row = HostRecord {
        id: template.dead.clone(),
        machine: "a host killed with SIGKILL".to_owned(),
        pid: 0,
        started_at: Timestamp(now.saturating_sub(3 * 3_600_000)),
        expires_at: Timestamp(now.saturating_sub(1_000)),
    };
    for outcome in store.apply(&[&Write::renew(&row)])? {
        outcome?;
    }
    let (hours, minute) = (2 * 3_600_000_u64, 60_000_u64);
    let (send, batches) = std::sync::mpsc::sync_channel::<Vec<Write>>(4);
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let making = scope.spawn(move || {
            let mut batch = Vec::with_capacity(BATCH * 3);
            for i in 0..ended + running {
                let at = if i < ended {
                    now.saturating_sub(hours) + (i as u64 * hours) / ended.max(1) as u64
                } else {
                    now.saturating_sub(minute)
                        + ((i - ended) as u64 * minute) / running.max(1) as u64
                };
                template.writes(i < ended, Timestamp(at), &mut batch);
                let full = (i + 1) % BATCH == 0;
                if full && send.send(std::mem::take(&mut batch)).is_err() {
                    return;
                }
            }
            if !batch.is_empty() {
                let _ = send.send(batch);
            }
        });
        for writes in batches {
            let refs: Vec<&Write> = writes.iter().collect();
            for outcome in store.apply(&refs)? {
                outcome?;
            }
        }
        making
            .join()
            .map_err(|_| anyhow::anyhow!("the thread making the fixture's writes failed"))
    })
}

/// Runs of the fixture's workflow that this host's engine ended, however.
fn ended_here(metrics: &Metrics) -> u64 {
    ["succeeded", "failed", "timed_out", "cancelled"]
        .iter()
        .map(|state| {
            let labels = EndLabels {
                tenant: weft::core::tenant::DEFAULT.to_owned(),
                workflow: WORKFLOW_ID.to_owned(),
                state: (*state).to_owned(),
            };
            metrics
                .runs_ended
                .get(&labels)
                .map_or(0, |counter| counter.get())
        })
        .sum()
}

/// Polls `metrics` every 2 ms until `goal` runs have ended, [`LIMIT`]
/// has passed since `began`, or none ended for [`STALL`] after the first;
/// returns when the first and the last came, and how many did. A resumed
/// run's one step left is its last: the step and its end are one commit.
fn watch(metrics: &Metrics, goal: u64, began: Instant) -> (Startup, u64) {
    let mut seen = Startup {
        first_step: None,
        all_going: None,
    };
    let (mut going, mut moved) = (0, Instant::now());
    loop {
        let now = ended_here(metrics);
        if now > 0 && seen.first_step.is_none() {
            seen.first_step = Some(began.elapsed());
        }
        if now != going {
            (going, moved) = (now, Instant::now());
        }
        if going >= goal {
            seen.all_going = Some(began.elapsed());
            return (seen, going);
        }
        if began.elapsed() > LIMIT || (going > 0 && moved.elapsed() > STALL) {
            return (seen, going);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `VmRSS` (resident now) or `VmHWM` (its peak) of this process, in MiB
/// (Linux).
fn memory(field: &str) -> Option<u64> {
    super::status_bytes(&format!("{field}:")).map(|bytes| bytes >> 20)
}

/// The measuring process (`--startup-measure DIR`): starts a host on the
/// fixture in `dir` as `weft serve` does, with `plugins` and metrics, and
/// prints, from this process's start, when it committed its first step
/// and when all `running` runs had taken one; leaves them in `dir` too.
pub fn measure(dir: &Path, plugins: &Path, running: usize) -> anyhow::Result<ExitCode> {
    let began = Instant::now();
    let metrics = Arc::new(Metrics::default());
    let watcher = {
        let metrics = Arc::clone(&metrics);
        let goal = u64::try_from(running).unwrap_or(u64::MAX);
        std::thread::Builder::new()
            .name("weft-bench-watch".to_owned())
            .spawn(move || watch(&metrics, goal, began))?
    };
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.join("cache")),
        ..RuntimeConfig::default()
    })?;
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(dir.join(STORE))?);
    let opened = began.elapsed();
    let (files, errors) = WorkflowDir::load(&dir.join("workflows"))?;
    if let Some(error) = errors.first() {
        anyhow::bail!("the fixture's workflow does not load: {error}");
    }
    let config = HostConfig::local(
        store,
        PluginDir::new(runtime, plugins),
        Arc::new(SystemClock),
    )
    .with_engine(EngineConfig {
        metrics: Some(Arc::clone(&metrics)),
        ..EngineConfig::default()
    })
    .serving(files);
    let host = Host::start(config).context("cannot start the host")?;
    let started = began.elapsed();
    let (seen, going) = watcher
        .join()
        .map_err(|_| anyhow::anyhow!("the watching thread failed"))?;
    let limit = LIMIT.as_secs();
    let shown = |took: Option<Duration>, goal: Duration| match took {
        Some(took) => {
            let verdict = if took <= goal { "met" } else { "MISSED" };
            let goal = goal.as_secs();
            format!(
                "{:>9}   (goal: within {goal} s: {verdict})",
                super::show(took)
            )
        }
        None => format!("not within {limit} s: {going} of {running} going"),
    };
    let (first, all) = (
        shown(seen.first_step, FIRST_GOAL),
        shown(seen.all_going, ALL_GOAL),
    );
    let (resumed, started) = (host.resumed(), super::show(started));
    let (rss, peak) = (memory("VmRSS").unwrap_or(0), memory("VmHWM").unwrap_or(0));
    out!(
        "  store opened                   {:>9}",
        super::show(opened)
    );
    out!("  first step after start         {first}");
    out!("  all {running} running runs going again   {all}");
    out!("  Host::start returned           {started:>9}   ({resumed} runs resumed)");
    out!("  memory         {rss} MiB resident at the end, peak {peak} MiB");
    let secs = |took: Option<Duration>| took.map(|d| d.as_secs_f64());
    let figures = serde_json::json!({
        "first_step": secs(seen.first_step),
        "all_going": secs(seen.all_going),
    });
    std::fs::write(dir.join(FIGURES), figures.to_string())?;
    drop(host);
    Ok(ExitCode::SUCCESS)
}
