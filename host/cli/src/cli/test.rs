//! `weft test`: runs workflows' test files (`order.test.yaml`), turns a
//! recorded run into a case (`--record`), and replays recorded runs under a
//! new revision (`--replay`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use weft::cases::{CaseReport, record_case, replay, run_case};
use weft::model::cases::{self, TestFile};
use weft::model::{WorkflowDir, Workflows};
use weft::store::{RunFilter, RunState};
use weft::{PluginDir, model};

use super::{EXIT_FAILED, EXIT_INVALID, PluginArgs, local_runtime, open_store, plugins_dir};

#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// Test files (`NAME.test.yaml`), or directories searched for them.
    #[arg(default_value = ".")]
    paths: Vec<PathBuf>,
    /// Print recorded run RUN (in the data directory's store) as a case to
    /// add to a test file: its input, its plugin steps' results as mocks,
    /// its answers, and how it ended.
    #[arg(long, value_name = "RUN", conflicts_with = "replay")]
    record: Option<String>,
    /// Replay every ended run in the store of the workflow this file
    /// defines (its new revision, not deployed yet), calling no plugin, and
    /// report each run that would take another path.
    #[arg(long, value_name = "WORKFLOW")]
    replay: Option<PathBuf>,
    #[command(flatten)]
    plugins: PluginArgs,
}

pub fn main(data_dir: &Path, args: TestArgs) -> anyhow::Result<ExitCode> {
    if let Some(run) = &args.record {
        return record(data_dir, run);
    }
    let plugins = Arc::new(PluginDir::new(
        local_runtime(data_dir)?,
        plugins_dir(data_dir, &args.plugins.plugins),
    ));
    if let Some(file) = &args.replay {
        return replay_all(data_dir, file, &plugins);
    }
    let mut files = Vec::new();
    for path in &args.paths {
        if path.is_dir() {
            test_files(path, &mut files)
                .with_context(|| format!("cannot read the directory {}", path.display()))?;
        } else if path.is_file() {
            files.push(path.clone());
        } else {
            eprintln!("error: {} does not exist", path.display());
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    }
    if files.is_empty() {
        eprintln!("error: no test files (NAME.test.yaml) found");
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    let (mut passed, mut failed, mut broken) = (0, 0, 0);
    let mut missing_plugins = 0;
    for file in &files {
        match test_file(file, &plugins) {
            Ok(reports) => {
                for report in reports {
                    if report.passed() {
                        passed += 1;
                    } else {
                        failed += 1;
                    }
                    let missing = |line: &String| line.contains("in the plugins directory");
                    missing_plugins += usize::from(report.differences.iter().any(missing));
                }
            }
            Err(e) => {
                println!("{}\n  error: {e}", file.display());
                broken += 1;
            }
        }
    }
    if broken > 0 {
        println!("{passed} passed, {failed} failed, {broken} files not run");
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    println!("{passed} passed, {failed} failed");
    if missing_plugins > 0 {
        eprintln!(
            "hint: {missing_plugins} case(s) found no plugin in {}; build the plugins and pass their folder with --plugins DIR (this repository's: scripts/build-plugins, then --plugins target/plugins)",
            plugins.dir().display()
        );
    }
    Ok(if failed > 0 {
        ExitCode::from(EXIT_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Every test file under `dir`, recursively, in order.
fn test_files(dir: &Path, into: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            test_files(&path, into)?;
        } else if cases::is_test_file(&path)
            && path
                .extension()
                .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        {
            into.push(path);
        }
    }
    Ok(())
}

/// Runs one file's cases, printing each as it ends.
fn test_file(path: &Path, plugins: &Arc<PluginDir>) -> anyhow::Result<Vec<CaseReport>> {
    let file: TestFile = cases::load_tests(path)?;
    let workflow_path = cases::tested_workflow(path, &file);
    let workflow = Arc::new(model::load(&workflow_path)?);
    let workflows = siblings(&workflow_path);
    println!("{} ({})", path.display(), workflow_path.display());
    let mut reports = Vec::new();
    for case in &file.cases {
        let report = run_case(&workflow, &workflows, plugins, case);
        print_report(&report);
        reports.push(report);
    }
    Ok(reports)
}

fn print_report(report: &CaseReport) {
    let mark = if report.passed() { "ok  " } else { "FAIL" };
    println!(
        "  {mark}  {}  ({}; {} simulated)",
        report.name,
        took(report.took),
        simulated(report.simulated)
    );
    for line in &report.differences {
        println!("          {line}");
    }
}

/// The workflows beside `path`, for its subflows.
fn siblings(path: &Path) -> Arc<dyn Workflows> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    match WorkflowDir::load(dir) {
        Ok((workflows, _)) => Arc::new(workflows),
        Err(_) => Arc::new(WorkflowDir::default()),
    }
}

fn took(duration: Duration) -> String {
    if duration < Duration::from_millis(10) {
        format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
    } else {
        format!("{} ms", duration.as_millis())
    }
}

/// A simulated span in its largest whole units: `30d 2h`, `25h` → `1d 1h`.
fn simulated(duration: Duration) -> String {
    let mut left = duration.as_secs();
    if left == 0 {
        return format!("{}ms", duration.as_millis());
    }
    let mut parts = Vec::new();
    for (unit, seconds) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if left >= seconds {
            parts.push(format!("{}{unit}", left / seconds));
            left %= seconds;
        }
        if parts.len() == 2 {
            break;
        }
    }
    parts.join(" ")
}

/// `weft test --record RUN`.
fn record(data_dir: &Path, id: &str) -> anyhow::Result<ExitCode> {
    let store = open_store(data_dir)?;
    let Some(run) = store.run(id)? else {
        eprintln!("error: no run {id} in the store");
        return Ok(ExitCode::from(EXIT_INVALID));
    };
    if !run.state.is_terminal() {
        eprintln!(
            "error: run {id} is {}; record it once it has ended",
            run.state
        );
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    let steps = store.steps(id)?;
    let workflow = stored_workflow(store.as_ref(), &run)?;
    let case = record_case(&workflow, &run, &steps);
    // A case's keys in the order people write them.
    let mut ordered = serde_yaml_ng::Mapping::new();
    for key in ["name", "input", "mock", "do", "expect"] {
        if let Some(value) = case.get(key) {
            let value = serde_yaml_ng::to_value(value).context("writing the case as YAML")?;
            ordered.insert(key.into(), value);
        }
    }
    let mut file = serde_yaml_ng::Mapping::new();
    file.insert("cases".into(), vec![ordered].into());
    let text = serde_yaml_ng::to_string(&file).context("writing the case as YAML")?;
    print!(
        "# Recorded from run {id} of workflow {}.\n# Add the case under `cases:` in {}.test.yaml.\n{text}",
        run.workflow,
        weft::core::tenant::bare(&run.workflow)
    );
    Ok(ExitCode::SUCCESS)
}

/// The definition run `run` follows, from the store.
fn stored_workflow(
    store: &dyn weft::Store,
    run: &weft::store::RunRecord,
) -> anyhow::Result<weft::Workflow> {
    let record = store
        .definition(&run.definition)?
        .with_context(|| format!("run {} has no stored definition", run.id))?;
    let format = model::Format::from_name(&record.format).unwrap_or(model::Format::Yaml);
    let mut workflow = model::parse_stored(&record.source, format, &run.origin)
        .with_context(|| format!("the definition run {} follows", run.id))?;
    workflow.id = run.workflow.clone();
    Ok(workflow)
}

/// `weft test --replay FILE`.
fn replay_all(data_dir: &Path, file: &Path, plugins: &Arc<PluginDir>) -> anyhow::Result<ExitCode> {
    let workflow = match model::load(file) {
        Ok(workflow) => Arc::new(workflow),
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let store = open_store(data_dir)?;
    let filter = RunFilter {
        workflow: Some(workflow.id.clone()),
        ..RunFilter::default()
    };
    let runs: Vec<_> = store
        .runs(&filter, usize::MAX)?
        .into_iter()
        .filter(|run| run.state.is_terminal() && run.state != RunState::Cancelled)
        .collect();
    let workflows = siblings(file);
    println!(
        "replaying {} recorded runs of {} under {}",
        runs.len(),
        workflow.id,
        file.display()
    );
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for run in &runs {
        let steps = store.steps(&run.id)?;
        // A retried run took a path no case can replay (a retry is no
        // action of the format).
        if steps.iter().any(|r| r.retry.is_some()) {
            skipped += 1;
            continue;
        }
        let report = replay(&workflow, &workflows, plugins, run, &steps);
        if report.passed() {
            passed += 1;
        } else {
            failed += 1;
            print_report(&report);
        }
    }
    if skipped > 0 {
        println!("{skipped} retried runs not replayed");
    }
    println!("{passed} passed, {failed} failed");
    Ok(if failed > 0 {
        ExitCode::from(EXIT_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}
