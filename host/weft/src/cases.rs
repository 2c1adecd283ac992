//! `weft test`: a workflow's test cases, each played on the real engine,
//! stepped on the calling thread, with a simulated clock and a redb store
//! in memory of its own. Mocked steps answer from the case; every other
//! step calls its real plugin. Time moves only when the case moves it, and
//! after its last action it skips from one timer to the next, so a run
//! that sleeps for a month ends in milliseconds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use weft_core::{Clock, ErrorRecord, SimClock, Timestamp};
use weft_engine::plugins::PluginDir;
use weft_engine::{
    Answer, Answering, Engine, EngineConfig, Pinned, Quiet, ResumeError, RunnerSource, StartError,
    StepCall, StepOutcome, StepRunner, Stepper, WasmPlugins,
};
use weft_model::cases::{
    Action, AnswerAction, ExpectedRun, ExpectedStep, Mock, MockError, StepFacts, StepState,
    TestCase,
};
use weft_model::{Workflow, Workflows};
use weft_store::{RedbStore, RunRecord, StepRecord, Store};

/// When every case's clock starts.
pub const CASE_START: Timestamp = Timestamp(1_767_225_600_000); // 2026-01-01T00:00:00Z

/// The most timers a case fires before it is judged endless.
const MAX_FIRES: usize = 100_000;

/// How one case went.
#[derive(Debug, Clone)]
pub struct CaseReport {
    /// The case's name.
    pub name: String,
    /// What differed from what the case expects, one line each; empty when
    /// it passed.
    pub differences: Vec<String>,
    /// The real time the case took.
    pub took: Duration,
    /// The simulated time that passed in it.
    pub simulated: Duration,
}

impl CaseReport {
    /// True when nothing differed.
    pub fn passed(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Plays `case` against `workflow`, finding subflows' workflows in
/// `workflows` and unmocked steps' plugins in `plugins`.
pub fn run_case(
    workflow: &Arc<Workflow>,
    workflows: &Arc<dyn Workflows>,
    plugins: &Arc<PluginDir>,
    case: &TestCase,
) -> CaseReport {
    run_with(workflow, workflows, plugins, case, false, None)
}

/// Plays `case`; a `strict` case calls no plugin (a step with no mock fails
/// `not_recorded`), and with `paths`, the leaves the run reached must be
/// exactly those.
fn run_with(
    workflow: &Arc<Workflow>,
    workflows: &Arc<dyn Workflows>,
    plugins: &Arc<PluginDir>,
    case: &TestCase,
    strict: bool,
    paths: Option<&BTreeSet<String>>,
) -> CaseReport {
    let started = Instant::now();
    // Ids repeat from case to case, so a case plays the same every time.
    weft_core::ids::repeatable(Some(0x7E57));
    let mut differences = Vec::new();
    let simulated = match play(workflow, workflows, plugins, case, strict) {
        Ok((run, steps, simulated)) => {
            compare(case, &run, &steps, &mut differences);
            if let Some(recorded) = paths {
                same_paths(recorded, &steps, &mut differences);
            }
            simulated
        }
        Err(why) => {
            differences.push(why);
            Duration::ZERO
        }
    };
    weft_core::ids::repeatable(None);
    CaseReport {
        name: case.name.clone(),
        differences,
        took: started.elapsed(),
        simulated,
    }
}

/// The step id in `path` that `workflow` does not have, if one: an
/// expectation names a step by id or path (`each[2]/fetch`,
/// `pay/catch/refund`), and one the workflow lacks is a mistake in the
/// case, not a step that did not run. `catch` and the engine's own records
/// (`@cancel`) are parts of paths, not steps.
fn unknown_step<'p>(workflow: &Workflow, path: &'p str) -> Option<&'p str> {
    let steps = workflow.all_steps();
    path.split('/')
        .map(|segment| segment.split('[').next().unwrap_or(segment))
        .find(|id| *id != "catch" && !id.starts_with('@') && !steps.iter().any(|s| s.id == *id))
}

/// Plays the case; the run and its step records at the end, and the
/// simulated time that passed.
fn play(
    workflow: &Arc<Workflow>,
    workflows: &Arc<dyn Workflows>,
    plugins: &Arc<PluginDir>,
    case: &TestCase,
    strict: bool,
) -> Result<(RunRecord, Vec<StepRecord>, Duration), String> {
    let calls: BTreeSet<&str> = workflow
        .all_steps()
        .into_iter()
        .filter(|step| step.call().is_some())
        .map(|step| step.id.as_str())
        .collect();
    // A mock names a step by id, or one leaf by path (`each[2]/fetch`).
    for key in case.mock.keys() {
        let step = key.rsplit('/').next().unwrap_or(key);
        if !calls.contains(step) {
            return Err(format!(
                "mock `{key}`: workflow `{}` has no plugin (`uses:`) step `{step}`",
                workflow.id
            ));
        }
    }
    for path in case.expect.steps.keys() {
        if let Some(id) = unknown_step(workflow, path) {
            return Err(format!(
                "expect.steps `{path}`: workflow `{}` has no step `{id}`",
                workflow.id
            ));
        }
    }
    // Steps mocked by id call no plugin, so theirs need not exist; a
    // strict case calls none.
    let by_id: BTreeSet<String> = case
        .mock
        .keys()
        .map(String::as_str)
        .filter(|key| strict || calls.contains(key))
        .chain(calls.iter().copied().filter(|_| strict))
        .map(str::to_owned)
        .collect();
    let store: Arc<dyn Store> =
        Arc::new(RedbStore::in_memory().map_err(|e| format!("a store in memory: {e}"))?);
    let clock = Arc::new(SimClock::new(CASE_START));
    let source = Arc::new(Mocked {
        real: WasmPlugins::new(Arc::clone(plugins), Arc::clone(&store))
            .timed(Arc::clone(&clock) as Arc<dyn Clock>)
            .except(by_id),
        mocks: Arc::new(case.mock.clone()),
        strict,
    });
    let config = EngineConfig {
        workers: 1,
        ..EngineConfig::default()
    };
    let (engine, stepper) = Engine::stepped(
        Arc::clone(&store),
        Arc::clone(plugins),
        source,
        Arc::clone(&clock) as Arc<dyn Clock>,
        config,
    );
    engine.set_workflows(Arc::clone(workflows));
    let input = case
        .input
        .clone()
        .unwrap_or_else(|| Value::Object(serde_json::Map::new()));
    let handle = engine
        .start(Arc::clone(workflow), input, Box::new(Quiet))
        .map_err(|e| match e {
            StartError::Input { .. } => format!("the input was refused: {e}"),
            e => format!("the run did not start: {e}"),
        })?;
    let mut table = Table {
        stepper,
        clock,
        store,
        run: handle.id().to_owned(),
        fires: 0,
    };
    table.quiet();
    for (n, action) in case.actions.iter().enumerate() {
        let step = n + 1;
        match action {
            Action::Advance(by) => {
                let by =
                    weft_core::clock::parse_duration(by).map_err(|e| format!("do[{step}]: {e}"))?;
                table.advance(by);
            }
            Action::Answer(answer) => {
                table
                    .until_waiting(&answer.step)
                    .map_err(|why| format!("do[{step}] answer `{}`: {why}", answer.step))?;
                table
                    .answer(answer)
                    .map_err(|why| format!("do[{step}] answer `{}`: {why}", answer.step))?;
            }
            Action::Cancel(false) => {}
            Action::Cancel(true) => {
                table
                    .cancel()
                    .map_err(|why| format!("do[{step}] cancel: {why}"))?;
            }
        }
        table.quiet();
    }
    table.until_the_end()?;
    let run = table.record()?;
    let steps = table
        .store
        .steps(&table.run)
        .map_err(|e| format!("reading the run's steps: {e}"))?;
    let simulated = Duration::from_millis(table.clock.now().millis_since(CASE_START));
    drop(handle);
    drop(engine);
    Ok((run, steps, simulated))
}

/// The engine of one case, and what it needs to move it.
struct Table {
    stepper: Stepper,
    clock: Arc<SimClock>,
    store: Arc<dyn Store>,
    run: String,
    fires: usize,
}

impl Table {
    /// Does everything queued and commits every write, until nothing is
    /// left to do at this time.
    fn quiet(&self) {
        loop {
            if self.stepper.ready() > 0 {
                self.stepper.run_ready(0);
            } else if self.stepper.commits().pending() > 0 {
                self.stepper.commits().commit(usize::MAX);
            } else {
                // Child runs waited on are looked up, as the timer thread
                // does every second.
                self.stepper.poll_watches();
                if self.stepper.ready() == 0 && self.stepper.commits().pending() == 0 {
                    return;
                }
            }
        }
    }

    /// Moves the clock to `to` and fires what is due then.
    fn move_to(&mut self, to: u64) {
        let now = self.clock.now().as_millis();
        self.clock.set(Timestamp(to.max(now)));
        self.stepper.renew_if_due();
        self.fires += self.stepper.tick();
        self.quiet();
    }

    /// Moves the clock by `by`, one due timer at a time.
    fn advance(&mut self, by: Duration) {
        let to = self
            .clock
            .now()
            .as_millis()
            .saturating_add(weft_core::clock::millis(by));
        while let Some(due) = self.stepper.next_due()
            && due <= to
            && self.fires < MAX_FIRES
        {
            self.move_to(due);
        }
        self.move_to(to);
    }

    /// The run's record now.
    fn record(&self) -> Result<RunRecord, String> {
        self.store
            .run(&self.run)
            .map_err(|e| format!("reading the run: {e}"))?
            .ok_or_else(|| "the run is not in the store".to_owned())
    }

    /// Moves the clock from timer to timer until the `await` step at
    /// `path` waits.
    fn until_waiting(&mut self, path: &str) -> Result<(), String> {
        loop {
            let steps = self
                .store
                .steps(&self.run)
                .map_err(|e| format!("reading the run's steps: {e}"))?;
            let last = steps.iter().rev().find(|r| path_of(r) == path);
            if last.is_some_and(|r| r.awaiting) {
                return Ok(());
            }
            let run = self.record()?;
            if run.state.is_terminal() {
                return Err(format!(
                    "the step never waited: the run ended {}",
                    run.state
                ));
            }
            match self.stepper.next_due() {
                Some(due) if self.fires < MAX_FIRES => self.move_to(due),
                _ => return Err("the step is not waiting, and no timer is due".to_owned()),
            }
        }
    }

    fn answer(&mut self, answer: &AnswerAction) -> Result<(), String> {
        let given = if let Some(output) = &answer.output {
            Answer::Complete(output.clone())
        } else if let Some(error) = &answer.error {
            Answer::Fail {
                code: error.code.clone(),
                message: error.message.clone().unwrap_or_else(|| error.code.clone()),
                details: error.details.clone(),
            }
        } else {
            Answer::Skip
        };
        for _ in 0..100 {
            match self.stepper.act(&self.run, &answer.step, &given) {
                Answering::Done(outcome) => return outcome.map_err(|e| e.to_string()),
                Answering::Queued(told) => {
                    self.quiet();
                    return match Answering::outcome(&told, &self.run, &answer.step) {
                        Some(outcome) => outcome.map_err(|e| e.to_string()),
                        None => Err("the answer was never committed".to_owned()),
                    };
                }
                Answering::Again => self.quiet(),
            }
        }
        Err("the run kept moving; the answer was not taken".to_owned())
    }

    fn cancel(&mut self) -> Result<(), String> {
        match self.stepper.cancel(&self.run) {
            Ok(None) => Ok(()),
            Ok(Some(told)) => {
                self.quiet();
                match self.stepper.cancelled(&self.run, &told) {
                    Some(outcome) => outcome.map_err(|e| e.to_string()),
                    None => Err("the cancellation was never committed".to_owned()),
                }
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Skips from timer to timer until the run ends, or waits for nothing
    /// that time brings.
    fn until_the_end(&mut self) -> Result<(), String> {
        loop {
            self.quiet();
            if self.record()?.state.is_terminal() {
                return Ok(());
            }
            match self.stepper.next_due() {
                None => return Ok(()),
                Some(_) if self.fires >= MAX_FIRES => {
                    return Err(format!(
                        "the run had not ended after {MAX_FIRES} timers fired"
                    ));
                }
                Some(due) => self.move_to(due),
            }
        }
    }
}

/// A record's path (records from before paths were kept have the id).
fn path_of(record: &StepRecord) -> &str {
    if record.path.is_empty() {
        &record.step_id
    } else {
        &record.path
    }
}

/// Runs mocked steps from the case, and the rest from their plugins.
#[derive(Debug)]
struct Mocked {
    real: WasmPlugins,
    mocks: Arc<BTreeMap<String, Mock>>,
    strict: bool,
}

impl RunnerSource for Mocked {
    fn pin(&self, workflow: &Workflow) -> Result<Pinned, StartError> {
        let pinned = self.real.pin(workflow)?;
        Ok(Pinned {
            runner: Arc::new(MockRunner {
                real: pinned.runner,
                mocks: Arc::clone(&self.mocks),
                strict: self.strict,
            }),
            ..pinned
        })
    }

    fn load(
        &self,
        run: &RunRecord,
        workflow: &Workflow,
    ) -> Result<Arc<dyn StepRunner>, ResumeError> {
        Ok(Arc::new(MockRunner {
            real: self.real.load(run, workflow)?,
            mocks: Arc::clone(&self.mocks),
            strict: self.strict,
        }))
    }
}

#[derive(Debug)]
struct MockRunner {
    real: Arc<dyn StepRunner>,
    mocks: Arc<BTreeMap<String, Mock>>,
    strict: bool,
}

impl StepRunner for MockRunner {
    fn plugin(&self, step: &str) -> Option<&str> {
        self.real
            .plugin(step)
            .or_else(|| (self.strict || self.mocks.contains_key(step)).then_some("mock"))
    }

    fn check_input(&self, step: &str, input: &Value) -> Result<(), Vec<String>> {
        if self.mocks.contains_key(step) {
            Ok(())
        } else {
            self.real.check_input(step, input)
        }
    }

    fn call(&self, call: &StepCall) -> StepOutcome {
        // A mock by path (`each[2]/fetch`) before one by step id.
        let Some(mock) = self
            .mocks
            .get(&call.path)
            .or_else(|| self.mocks.get(&call.context.step_id))
        else {
            if self.strict {
                return StepOutcome::of(Err(ErrorRecord::fatal(
                    "not_recorded",
                    format!("step `{}` has no recorded result to replay", call.path),
                )));
            }
            return self.real.call(call);
        };
        let outcome = mock.attempt(call.context.attempt);
        StepOutcome::of(match (&outcome.output, &outcome.error) {
            (Some(output), _) => Ok(output.clone()),
            (None, Some(error)) => Err(error_record(error)),
            (None, None) => Ok(Value::Null),
        })
    }
}

fn error_record(error: &MockError) -> ErrorRecord {
    ErrorRecord {
        code: error.code.clone(),
        message: error.message.clone().unwrap_or_else(|| error.code.clone()),
        retryable: error.retryable,
        details: error.details.clone(),
    }
}

/// Compares the run's end with what the case expects, adding one line per
/// difference.
fn compare(case: &TestCase, run: &RunRecord, steps: &[StepRecord], into: &mut Vec<String>) {
    let expect = &case.expect;
    let state = expect.state.unwrap_or(if expect.error.is_some() {
        ExpectedRun::Failed
    } else {
        ExpectedRun::Succeeded
    });
    let actual = run.state.to_string();
    if state.as_str() != actual {
        let why = match &run.error {
            Some(error) => format!(
                " ({}{}: {})",
                error
                    .step
                    .as_deref()
                    .map(|s| format!("step {s}: "))
                    .unwrap_or_default(),
                error.error.code,
                error.error.message
            ),
            None if run.state == weft_store::RunState::Running => {
                format!(" ({})", waiting_on(steps))
            }
            None => String::new(),
        };
        into.push(format!(
            "state: expected {}, got {actual}{why}",
            state.as_str()
        ));
    }
    if let Some(outputs) = &expect.outputs {
        diff(
            "outputs",
            outputs,
            run.outputs.as_ref().unwrap_or(&Value::Null),
            into,
        );
    }
    if let Some(error) = &expect.error {
        let got = run.error.as_ref();
        let fields = [
            ("step", &error.step, got.and_then(|e| e.step.clone())),
            ("code", &error.code, got.map(|e| e.error.code.clone())),
            (
                "message",
                &error.message,
                got.map(|e| e.error.message.clone()),
            ),
        ];
        for (field, wanted, got) in fields {
            if let Some(wanted) = wanted
                && got.as_deref() != Some(wanted.as_str())
            {
                into.push(format!(
                    "error.{field}: expected {wanted:?}, got {}",
                    got.map_or_else(|| "none".to_owned(), |g| format!("{g:?}"))
                ));
            }
        }
    }
    for (path, wanted) in &expect.steps {
        let records: Vec<&StepRecord> = steps.iter().filter(|r| path_of(r) == path).collect();
        let facts = match wanted {
            ExpectedStep::State(state) => StepFacts {
                state: Some(*state),
                ..StepFacts::default()
            },
            ExpectedStep::Facts(facts) => facts.clone(),
        };
        let last = records.last().copied();
        let state = last.map_or(StepState::NotRun, step_state);
        if let Some(wanted) = facts.state
            && wanted != state
        {
            let why = last
                .and_then(|r| r.error.as_ref())
                .map(|e| format!(" ({}: {})", e.code, e.message))
                .unwrap_or_default();
            into.push(format!(
                "steps.{path}: expected {}, got {}{why}",
                wanted.as_str(),
                state.as_str()
            ));
        }
        if let Some(wanted) = facts.attempts {
            let attempts = records.iter().map(|r| r.attempt).max().unwrap_or(0);
            if attempts != wanted {
                into.push(format!(
                    "steps.{path}.attempts: expected {wanted}, got {attempts}"
                ));
            }
        }
        if let Some(wanted) = &facts.output {
            let output = last.and_then(|r| r.output.as_ref()).unwrap_or(&Value::Null);
            diff(&format!("steps.{path}.output"), wanted, output, into);
        }
        if let Some(wanted) = &facts.error {
            let code = last.and_then(|r| r.error.as_ref()).map(|e| e.code.as_str());
            if code != Some(wanted.as_str()) {
                into.push(format!(
                    "steps.{path}.error: expected {wanted:?}, got {}",
                    code.map_or_else(|| "none".to_owned(), |c| format!("{c:?}"))
                ));
            }
        }
    }
}

/// Adds a line for each leaf the replay reached that the recorded run did
/// not, and each it did not reach that the recorded run did.
fn same_paths(recorded: &BTreeSet<String>, steps: &[StepRecord], into: &mut Vec<String>) {
    let reached: BTreeSet<String> = steps.iter().map(|r| path_of(r).to_owned()).collect();
    for path in reached.difference(recorded) {
        into.push(format!("steps.{path}: ran now, not in the recorded run"));
    }
    for path in recorded.difference(&reached) {
        into.push(format!("steps.{path}: ran in the recorded run, not now"));
    }
}

/// The case a recorded run makes: its input; every plugin step's results,
/// attempt by attempt, as mocks (by step id, or by path for a step that ran
/// at more than one); its answers and its cancellation, in order; and how
/// it ended, with each leaf's state and output. A sleep needs nothing: the
/// case's clock skips to it.
pub fn record_case(workflow: &Workflow, run: &RunRecord, steps: &[StepRecord]) -> Value {
    use serde_json::json;
    let calls: BTreeSet<&str> = workflow
        .all_steps()
        .into_iter()
        .filter(|step| step.call().is_some())
        .map(|step| step.id.as_str())
        .collect();
    let awaits: BTreeSet<&str> = workflow
        .all_steps()
        .into_iter()
        .filter(|step| matches!(step.kind, weft_model::StepKind::Await(_)))
        .map(|step| step.id.as_str())
        .collect();
    let mut paths_of: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for record in steps {
        paths_of
            .entry(record.step_id.as_str())
            .or_default()
            .insert(path_of(record));
    }
    let mut mocks: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut actions = Vec::new();
    let mut waiting: BTreeSet<&str> = BTreeSet::new();
    for record in steps {
        let path = path_of(record);
        let error = |e: &ErrorRecord| {
            let mut error = json!({"code": e.code, "message": e.message, "retryable": e.retryable});
            if let Some(details) = &e.details {
                error["details"] = details.clone();
            }
            error
        };
        if record.path == weft_store::CANCEL_PATH {
            actions.push(json!({"cancel": true}));
        } else if calls.contains(record.step_id.as_str()) && !record.skipped {
            let key = if paths_of[record.step_id.as_str()].len() > 1 {
                path.to_owned()
            } else {
                record.step_id.clone()
            };
            let outcome = match (&record.output, &record.error) {
                (Some(output), _) => json!({"output": output}),
                (None, Some(e)) if e.code != "cpu_quota" && e.code != "storage_quota" => {
                    json!({"error": error(e)})
                }
                _ => continue,
            };
            mocks.entry(key).or_default().push(outcome);
        } else if awaits.contains(record.step_id.as_str()) {
            if record.awaiting {
                waiting.insert(path);
            } else if waiting.remove(path) {
                let answer = if record.skipped {
                    json!({"step": path, "skip": true})
                } else if let Some(output) = &record.output {
                    json!({"step": path, "output": output})
                } else if let Some(e) = record.error.as_ref().filter(|e| e.code != "await_timeout")
                {
                    json!({"step": path, "error": error(e)})
                } else {
                    continue;
                };
                actions.push(json!({"answer": answer}));
            }
        }
    }
    let mut last: BTreeMap<&str, &StepRecord> = BTreeMap::new();
    for record in steps.iter().filter(|r| !r.path.starts_with('@')) {
        last.insert(path_of(record), record);
    }
    let expected_steps: serde_json::Map<String, Value> = last
        .iter()
        .map(|(path, record)| {
            let state = step_state(record);
            let facts = match &record.output {
                Some(output) if state == StepState::Succeeded => {
                    json!({"state": state.as_str(), "output": output})
                }
                _ => json!(state.as_str()),
            };
            ((*path).to_owned(), facts)
        })
        .collect();
    let mut expect = json!({"state": run.state.to_string(), "steps": expected_steps});
    if let Some(outputs) = &run.outputs {
        expect["outputs"] = outputs.clone();
    }
    if let Some(error) = &run.error {
        let mut shown = json!({"code": error.error.code});
        if let Some(step) = &error.step {
            shown["step"] = json!(step);
        }
        expect["error"] = shown;
    }
    let mut case = json!({"name": format!("run {}", run.id), "input": run.input});
    if !mocks.is_empty() {
        case["mock"] = json!(
            mocks
                .into_iter()
                .map(|(key, mut list)| {
                    let value = if list.len() == 1 {
                        list.remove(0)
                    } else {
                        Value::Array(list)
                    };
                    (key, value)
                })
                .collect::<serde_json::Map<String, Value>>()
        );
    }
    if !actions.is_empty() {
        case["do"] = Value::Array(actions);
    }
    case["expect"] = expect;
    case
}

/// Replays recorded run `run` of a workflow under `workflow`, a new
/// revision of it, calling no plugin: each plugin step gives what it gave
/// then. The replay passes when the run reaches the same leaves, each in
/// the same state, and ends the same way (outputs may differ).
pub fn replay(
    workflow: &Arc<Workflow>,
    workflows: &Arc<dyn Workflows>,
    plugins: &Arc<PluginDir>,
    run: &RunRecord,
    steps: &[StepRecord],
) -> CaseReport {
    let recorded = record_case(workflow, run, steps);
    let mut case: TestCase = match serde_json::from_value(recorded) {
        Ok(case) => case,
        Err(e) => {
            return CaseReport {
                name: format!("run {}", run.id),
                differences: vec![format!("the run does not make a case: {e}")],
                took: Duration::ZERO,
                simulated: Duration::ZERO,
            };
        }
    };
    // The path and the states, not the values.
    case.expect.outputs = None;
    for wanted in case.expect.steps.values_mut() {
        if let ExpectedStep::Facts(facts) = wanted {
            facts.output = None;
        }
    }
    let paths: BTreeSet<String> = steps
        .iter()
        .filter(|r| !r.path.starts_with('@'))
        .map(|r| path_of(r).to_owned())
        .collect();
    run_with(workflow, workflows, plugins, &case, true, Some(&paths))
}

/// What a run that has not ended waits on, for a report.
fn waiting_on(steps: &[StepRecord]) -> String {
    let mut last: BTreeMap<&str, &StepRecord> = BTreeMap::new();
    for record in steps {
        last.insert(path_of(record), record);
    }
    let waiting: Vec<&str> = last
        .iter()
        .filter(|(_, r)| r.awaiting)
        .map(|(path, _)| *path)
        .collect();
    if waiting.is_empty() {
        "nothing left to do".to_owned()
    } else {
        format!("waiting for an answer to {}", waiting.join(", "))
    }
}

/// Where a leaf is after its last record.
fn step_state(record: &StepRecord) -> StepState {
    if record.skipped {
        StepState::Skipped
    } else if record.output.is_some() && !record.awaiting {
        StepState::Succeeded
    } else if record.error.is_some() && record.retry_in_ms.is_some() {
        StepState::Retrying
    } else if record.error.is_some() {
        StepState::Failed
    } else {
        StepState::Waiting
    }
}

/// Adds a line to `into` for each place where `actual` differs from
/// `expected`, named by its path from `at`.
pub fn diff(at: &str, expected: &Value, actual: &Value, into: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(wanted), Value::Object(got)) => {
            for (key, value) in wanted {
                let here = format!("{at}.{key}");
                match got.get(key) {
                    Some(other) => diff(&here, value, other, into),
                    None => into.push(format!("{here}: expected {}, missing", shown(value))),
                }
            }
            for (key, value) in got {
                if !wanted.contains_key(key) {
                    into.push(format!("{at}.{key}: not expected, got {}", shown(value)));
                }
            }
        }
        (Value::Array(wanted), Value::Array(got)) if wanted.len() == got.len() => {
            for (n, (value, other)) in wanted.iter().zip(got).enumerate() {
                diff(&format!("{at}[{n}]"), value, other, into);
            }
        }
        // 2500 and 2500.0 are the same number.
        (Value::Number(wanted), Value::Number(got))
            if wanted != got && wanted.as_f64() != got.as_f64() =>
        {
            into.push(format!("{at}: expected {wanted}, got {got}"));
        }
        (Value::Number(_), Value::Number(_)) => {}
        _ if expected != actual => {
            into.push(format!(
                "{at}: expected {}, got {}",
                shown(expected),
                shown(actual)
            ));
        }
        _ => {}
    }
}

/// A value in one line, cut at 200 characters.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 200 {
        let cut: String = text.chars().take(200).collect();
        format!("{cut}…")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use serde_json::json;

    use super::{diff, unknown_step};

    #[test]
    fn a_difference_names_where_it_is() {
        let mut lines = Vec::new();
        diff(
            "outputs",
            &json!({"total": 2500, "items": [1, 2], "name": "a", "gone": true}),
            &json!({"total": 2400.0, "items": [1, 3], "name": "a", "extra": null}),
            &mut lines,
        );
        assert_eq!(
            lines,
            [
                "outputs.gone: expected true, missing",
                "outputs.items[1]: expected 2, got 3",
                "outputs.total: expected 2500, got 2400.0",
                "outputs.extra: not expected, got null",
            ]
        );
        let mut none = Vec::new();
        diff("o", &json!({"n": 3}), &json!({"n": 3.0}), &mut none);
        assert!(none.is_empty(), "{none:?}");
    }

    #[test]
    fn an_expected_step_is_named_by_its_path() {
        let workflow = weft_model::parse(
            "id: wf\nsteps:\n  - id: each-item\n    foreach: \"${{ [1] }}\"\n    steps:\n      - { id: fetch, uses: echo }\n  - id: pay\n    uses: echo\n    catch:\n      - steps:\n          - { id: refund, uses: echo }\n",
            weft_model::Format::Yaml,
            "wf.yaml",
        )
        .unwrap();
        for known in [
            "pay",
            "each-item[0]/fetch",
            "pay/catch/refund",
            "pay/@cancel",
        ] {
            assert_eq!(unknown_step(&workflow, known), None, "{known}");
        }
        assert_eq!(unknown_step(&workflow, "each-item[0]/fetsh"), Some("fetsh"));
        assert_eq!(unknown_step(&workflow, "py"), Some("py"));
    }
}
