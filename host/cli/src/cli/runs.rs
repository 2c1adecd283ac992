//! `weft runs list`, `show` and `cancel`, and the dispatch of `resume`.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;
use weft::Store;
use weft::store::{RedbStore, Refused, RunFilter, RunState, StoreError};

use super::progress::format_micros;
use super::{EXIT_INVALID, store_path};

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List runs, newest first.
    List {
        /// How many runs to show.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Only runs of this workflow.
        #[arg(long, value_name = "ID")]
        workflow: Option<String>,
        /// Only runs in this state: running, succeeded, failed, timed_out,
        /// cancelled, or paused (running, paused by an operator).
        #[arg(long, value_parser = state_filter)]
        state: Option<RunFilter>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Ask a running `weft serve` at this URL instead of reading the
        /// store.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
    /// Resume an interrupted run (one left `running` by a process that
    /// died) at the step it had reached, and run it to the end.
    Resume {
        /// The run's id.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        run_id: Option<String>,
        /// Resume every interrupted run, oldest first.
        #[arg(long)]
        all: bool,
        /// Ask a running `weft serve` at this URL to resume a paused run.
        #[arg(long, value_name = "URL", conflicts_with = "all")]
        server: Option<String>,
        #[command(flatten)]
        plugins: super::PluginArgs,
    },
    /// Pause a run: it finishes the steps under way, starts nothing new,
    /// and waits, its timers firing into the store, until `weft runs
    /// resume`.
    Pause {
        /// The run's id.
        run_id: String,
        /// Ask a running `weft serve` at this URL (which must, if it
        /// drives the run).
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
    /// Retry a failed, timed-out or cancelled run from its failed step:
    /// that step runs again as its next attempt, and every step that
    /// succeeded keeps its result, key-value writes and messages. Without
    /// --server, the run is driven here to its end.
    Retry {
        /// The run's id.
        run_id: String,
        /// Go on from this step (its path, as `weft runs show` prints it)
        /// instead of the one whose failure ended the run.
        #[arg(long, value_name = "STEP")]
        from: Option<String>,
        /// Ask a running `weft serve` at this URL, which drives the run.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
        #[command(flatten)]
        plugins: super::PluginArgs,
    },
    /// Move a workflow's unfinished runs from one revision to a newer one,
    /// on a running `weft serve`: each run moves at its next step boundary
    /// if every step it has a record of is a step of the new revision with
    /// the same id and kind; each that cannot is listed with why.
    Migrate(MigrateArgs),
    /// Cancel a run: it ends `cancelled`, whatever its steps return later
    /// is dropped, and its timers go with it. Works beside a running
    /// `weft serve`.
    Cancel {
        /// The run's id.
        run_id: String,
        /// Ask a running `weft serve` at this URL instead of writing the
        /// store.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
    /// Delete an ended run, with its step records and logs. Refused for a
    /// run that has not ended, or a child whose parent has not.
    Delete {
        /// The run's id.
        run_id: String,
        /// Ask a running `weft serve` at this URL instead of writing the
        /// store.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
    /// Act on every run a filter matches, on a running `weft serve`: shows
    /// how many matched and how many changed, with a progress bar.
    Bulk(BulkArgs),
    /// Follow runs on a running `weft serve` as they go: starts, finished
    /// steps, waits, resumes and ends, one line each. With RUN, until that
    /// run ends.
    Watch(WatchArgs),
    /// Show one run: its state, each step's result and logs, its outputs.
    Show {
        /// The run's id, as printed by `weft run` and `weft runs list`, or
        /// the start of it that no other run's id has.
        run_id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Ask a running `weft serve` at this URL instead of reading the
        /// store.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
}

// The arguments of `weft runs bulk` (its help is the variant's).
#[derive(Debug, clap::Args)]
pub struct BulkArgs {
    /// The action: `cancel` (running runs), `retry` (failed,
    /// timed-out or cancelled runs, from their failed step), `pause`
    /// (running runs) or `resume` (paused runs).
    #[arg(value_parser = ["cancel", "retry", "pause", "resume"])]
    pub action: String,
    /// Only runs of this workflow.
    #[arg(long, value_name = "ID")]
    pub workflow: Option<String>,
    /// Only runs in this state.
    #[arg(long)]
    pub state: Option<RunState>,
    /// Only runs created at or after this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only runs created before this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Only runs following this revision of --workflow.
    #[arg(long, value_name = "N")]
    pub revision: Option<u32>,
    /// Only runs that ended with this error code.
    #[arg(long, value_name = "CODE")]
    pub error: Option<String>,
    /// Count the runs that match and would change; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Act on every run of the tenant (needed when no filter is given).
    #[arg(long)]
    pub all: bool,
    /// The server.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
}

// The arguments of `weft runs watch` (its help is the variant's).
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Only this run, until it ends.
    pub run_id: Option<String>,
    /// Only runs of this workflow.
    #[arg(long, value_name = "ID")]
    pub workflow: Option<String>,
    /// Only these events, comma-separated: started, step_finished,
    /// waiting, resumed, ended.
    #[arg(long, value_name = "KINDS")]
    pub kind: Option<String>,
    /// Only events after which the run is in one of these states,
    /// comma-separated: running, succeeded, failed, timed_out,
    /// cancelled.
    #[arg(long, value_name = "STATES")]
    pub state: Option<String>,
    /// Stop after this many events.
    #[arg(long, value_name = "N")]
    pub count: Option<usize>,
    /// Print each event as a JSON line.
    #[arg(long)]
    pub json: bool,
    /// The server. [default: the address in DATA_DIR/serve.addr, else
    /// http://127.0.0.1:7420]
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
}

// The arguments of `weft runs migrate` (its help is the variant's).
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The workflow.
    #[arg(long, value_name = "ID")]
    pub workflow: String,
    /// The revision the runs follow now.
    #[arg(long, value_name = "N")]
    pub from_revision: u32,
    /// The newer revision they move to.
    #[arg(long, value_name = "M")]
    pub to_revision: u32,
    /// Check every run, move none.
    #[arg(long)]
    pub dry_run: bool,
    /// The server.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
}

/// With a `weft serve` holding the data directory, the commands that
/// change runs go through it (its tokens, its leases) rather than beside
/// it in the store; `resume --all`, which takes over the runs of hosts that
/// are gone, is refused. `list` and `show` read the store: whoever can
/// read the data directory can read the store's file. `None` to go on.
fn through_live_serve(data_dir: &Path, command: &mut RunsCommand) -> Option<ExitCode> {
    let server = match command {
        RunsCommand::Resume {
            run_id: None,
            all: true,
            ..
        } => {
            let url = super::remote::live_serve(data_dir)?;
            eprintln!(
                "error: the weft serve at {url} holds {} and drives its runs; `weft runs resume \
                 --all` takes over the runs of hosts that are gone: stop the serve first, or \
                 resume one paused run with `weft runs resume RUN_ID`",
                data_dir.display()
            );
            return Some(ExitCode::from(EXIT_INVALID));
        }
        RunsCommand::Resume { server, .. }
        | RunsCommand::Pause { server, .. }
        | RunsCommand::Retry { server, .. }
        | RunsCommand::Cancel { server, .. }
        | RunsCommand::Delete { server, .. } => server,
        _ => return None,
    };
    if server.is_none()
        && let Some(url) = super::remote::live_serve(data_dir)
    {
        eprintln!(
            "(through the weft serve at {url}, which holds {})",
            data_dir.display()
        );
        *server = Some(url);
    }
    None
}

pub fn main(data_dir: &Path, mut command: RunsCommand) -> anyhow::Result<ExitCode> {
    if let Some(code) = through_live_serve(data_dir, &mut command) {
        return Ok(code);
    }
    match command {
        RunsCommand::Resume {
            run_id: Some(run_id),
            server: Some(url),
            ..
        } => remote_action(
            data_dir,
            url,
            "POST",
            &format!("/v1/runs/{run_id}/resume"),
            None,
            |_| format!("run {run_id} resumed"),
        ),
        RunsCommand::Resume {
            run_id,
            all,
            plugins,
            ..
        } => super::resume(data_dir, run_id, all, &plugins),
        RunsCommand::Pause {
            run_id,
            server: Some(url),
        } => remote_action(
            data_dir,
            url,
            "POST",
            &format!("/v1/runs/{run_id}/pause"),
            None,
            |answer| {
                if answer["pending"] == true {
                    format!("run {run_id} pausing: it pauses once the steps under way are done")
                } else {
                    format!("run {run_id} paused")
                }
            },
        ),
        RunsCommand::Pause {
            run_id,
            server: None,
        } => super::pause(data_dir, &run_id),
        RunsCommand::List {
            limit,
            workflow,
            state,
            json,
            server,
        } => {
            let filter = RunFilter {
                workflow,
                ..state.unwrap_or_default()
            };
            match server {
                None => list(data_dir, &filter, limit, json),
                Some(url) => list_remote(data_dir, url, &filter, limit, json),
            }
        }
        RunsCommand::Bulk(asked) => bulk(data_dir, asked),
        RunsCommand::Watch(asked) => watch(data_dir, asked),
        RunsCommand::Show {
            run_id,
            json,
            server: None,
        } => show(data_dir, &run_id, json),
        RunsCommand::Show {
            run_id,
            json,
            server: Some(url),
        } => show_remote(data_dir, url, &run_id, json),
        RunsCommand::Migrate(asked) => migrate(data_dir, asked),
        RunsCommand::Retry {
            run_id,
            from,
            server: None,
            plugins,
        } => super::retry(data_dir, &run_id, from.as_deref(), &plugins),
        RunsCommand::Retry {
            run_id,
            from,
            server: Some(url),
            ..
        } => {
            let body = serde_json::json!({ "from": from });
            let path = format!("/v1/runs/{run_id}/retry");
            remote_action(data_dir, url, "POST", &path, Some(body), |answer| {
                let state = answer["state"].as_str().unwrap_or("running");
                format!("run {run_id} retried: {state}")
            })
        }
        RunsCommand::Cancel {
            run_id,
            server: None,
        } => cancel(data_dir, &run_id),
        RunsCommand::Cancel {
            run_id,
            server: Some(url),
        } => cancel_remote(data_dir, url, &run_id),
        RunsCommand::Delete {
            run_id,
            server: None,
        } => delete(data_dir, &run_id),
        RunsCommand::Delete {
            run_id,
            server: Some(url),
        } => remote_action(
            data_dir,
            url,
            "DELETE",
            &format!("/v1/runs/{run_id}"),
            None,
            |_| format!("run {run_id} deleted"),
        ),
    }
}

/// One request to the server at `url`: on success, prints what `said`
/// makes of the answer; otherwise the server's error.
fn remote_action(
    data_dir: &Path,
    url: String,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
    said: impl FnOnce(&serde_json::Value) -> String,
) -> anyhow::Result<ExitCode> {
    let server = super::remote::Server::new(data_dir, Some(url));
    match server.call(method, path, body)? {
        Ok(answer) => {
            out!("{}", said(&answer));
            Ok(ExitCode::SUCCESS)
        }
        Err(message) => {
            eprintln!("error: {message}");
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}

/// `weft runs bulk`: refused without a filter unless `--all` (or a dry
/// run), then a page at a time through the server.
fn bulk(data_dir: &Path, asked: BulkArgs) -> anyhow::Result<ExitCode> {
    let BulkArgs {
        action,
        workflow,
        state,
        since,
        until,
        revision,
        error,
        dry_run,
        all,
        server,
    } = asked;
    let unfiltered = workflow.is_none()
        && state.is_none()
        && since.is_none()
        && until.is_none()
        && revision.is_none()
        && error.is_none();
    if unfiltered && !all && !dry_run {
        eprintln!(
            "error: no filter: this would {action} every run of the tenant; \
             give a filter, or --all"
        );
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    let server = super::remote::Server::new(data_dir, server);
    let filter = serde_json::json!({
        "workflow": workflow,
        "state": state.map(|s| s.to_string()),
        "since": since,
        "until": until,
        "revision": revision,
        "error": error,
    });
    super::remote::bulk(&server, &action, filter, dry_run)
}

/// `weft runs watch`: follows runs on the server, one line an event.
fn watch(data_dir: &Path, asked: WatchArgs) -> anyhow::Result<ExitCode> {
    let WatchArgs {
        run_id,
        workflow,
        kind,
        state,
        count,
        json,
        server,
    } = asked;
    let server = super::remote::Server::new(data_dir, server);
    let query: Vec<String> = [
        ("run", run_id.as_ref()),
        ("workflow", workflow.as_ref()),
        ("kind", kind.as_ref()),
        ("state", state.as_ref()),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some(format!("{name}={}", super::remote::encoded(value?))))
    .collect();
    super::remote::watch_runs(&server, &query.join("&"), run_id.as_deref(), count, json)
}

/// `weft runs migrate`: moves a workflow's runs to a newer revision
/// through the server, and says which stay and why.
fn migrate(data_dir: &Path, asked: MigrateArgs) -> anyhow::Result<ExitCode> {
    let MigrateArgs {
        workflow,
        from_revision,
        to_revision,
        dry_run,
        server,
    } = asked;
    let server = super::remote::Server::new(data_dir, server);
    let body = serde_json::json!({
        "from_revision": from_revision,
        "to_revision": to_revision,
        "dry_run": dry_run,
    });
    let path = format!(
        "/v1/workflows/{}/migrate",
        super::remote::encoded(&workflow)
    );
    let answer = match server.call("POST", &path, Some(body))? {
        Ok(answer) => answer,
        Err(message) => {
            eprintln!("error: {message}");
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let moved = answer["moved"].as_array().map_or(0, Vec::len);
    let unmoved = answer["unmoved"].as_array().cloned().unwrap_or_default();
    out!(
        "{workflow}: {} runs on revision {from_revision}; {moved} {} to revision {to_revision}, {} cannot{}",
        answer["matched"],
        if dry_run { "can move" } else { "moved" },
        unmoved.len(),
        if dry_run {
            " (dry run: nothing moved)"
        } else {
            ""
        }
    );
    for run in &unmoved {
        out!(
            "  {} stays: {}",
            run["run"].as_str().unwrap_or("?"),
            run["reason"].as_str().unwrap_or("?")
        );
    }
    let failed = unmoved.iter().any(|u| u["failed"] == true);
    Ok(if failed {
        ExitCode::from(super::EXIT_HOST)
    } else {
        ExitCode::SUCCESS
    })
}

/// `weft runs delete RUN`: in the store, beside a running `weft serve` or
/// not.
fn delete(data_dir: &Path, run_id: &str) -> anyhow::Result<ExitCode> {
    let host = super::maintenance_host(data_dir)?;
    match host.services().delete_run(run_id) {
        Ok(()) => {
            out!("run {run_id} deleted");
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ StoreError::Refused(Refused::Needed { .. })) => {
            eprintln!("error: {}", e.to_string().trim_start_matches("store: "));
            Ok(ExitCode::from(EXIT_INVALID))
        }
        Err(StoreError::Refused(Refused::NotFound(_))) => {
            eprintln!("error: no run `{run_id}` in {}", data_dir.display());
            Ok(ExitCode::from(EXIT_INVALID))
        }
        Err(e) => Err(e.into()),
    }
}

/// `weft runs list --server URL`: the runs a running `weft serve` has, by
/// the filter's workflow and state.
fn list_remote(
    data_dir: &Path,
    url: String,
    filter: &RunFilter,
    limit: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let server = super::remote::Server::new(data_dir, Some(url));
    let mut query = format!("limit={limit}");
    if let Some(workflow) = &filter.workflow {
        query.push_str(&format!("&workflow={}", super::remote::encoded(workflow)));
    }
    if filter.paused == Some(true) {
        query.push_str("&state=paused");
    } else if let Some(state) = &filter.state {
        query.push_str(&format!("&state={state}"));
    }
    match super::remote::runs(&server, &query)? {
        Ok(runs) => print_runs(data_dir, &runs, json),
        Err(message) => {
            eprintln!("error: {message}");
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}

/// `--state NAME`: the filter that keeps the runs in that state.
fn state_filter(name: &str) -> Result<RunFilter, String> {
    RunFilter::default().state_named(name)
}

/// `weft runs show RUN --server URL`.
fn show_remote(data_dir: &Path, url: String, run_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let server = super::remote::Server::new(data_dir, Some(url));
    match super::remote::run(&server, run_id)? {
        Ok((run, steps)) => print_run(&run, None, &steps, json),
        Err(message) => {
            eprintln!("error: {message}");
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}

/// `weft runs cancel RUN --server URL`.
fn cancel_remote(data_dir: &Path, url: String, run_id: &str) -> anyhow::Result<ExitCode> {
    let server = super::remote::Server::new(data_dir, Some(url));
    match server.call("POST", &format!("/v1/runs/{run_id}/cancel"), None)? {
        Ok(_) => {
            out!("run {run_id} cancelled");
            Ok(ExitCode::SUCCESS)
        }
        Err(message) => {
            eprintln!("error: {message}");
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}

/// The store for reading, and where it is, or `None` when no run was
/// ever stored in the data directory's redb file.
pub(super) fn open(data_dir: &Path) -> anyhow::Result<Option<(Arc<dyn Store>, String)>> {
    let Some(path) = store_path(data_dir) else {
        return Ok(Some((
            super::open_store(data_dir)?,
            "the PostgreSQL store".to_owned(),
        )));
    };
    if !path.exists() {
        return Ok(None);
    }
    let store = match RedbStore::open_read_only(&path) {
        // A run was killed: repairing needs a writable handle.
        Err(StoreError::NeedsRepair { .. }) => RedbStore::open(&path),
        other => other,
    }
    .with_context(|| format!("cannot open the store {}", path.display()))?;
    Ok(Some((Arc::new(store), path.display().to_string())))
}

fn list(data_dir: &Path, filter: &RunFilter, limit: usize, json: bool) -> anyhow::Result<ExitCode> {
    let runs = match open(data_dir)? {
        Some((store, _)) => store.runs(filter, limit)?,
        None => Vec::new(),
    };
    print_runs(data_dir, &runs, json)
}

fn print_runs(
    data_dir: &Path,
    runs: &[weft::store::RunRecord],
    json: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        out!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(ExitCode::SUCCESS);
    }
    if runs.is_empty() {
        out!("no runs yet in {}", data_dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    out!(
        "{:<36}  {:<20}  {:<9}  {:<24}  {:>9}",
        "RUN",
        "WORKFLOW",
        "STATE",
        "STARTED",
        "TOOK"
    );
    for run in runs {
        let took = format_micros(
            run.updated_at
                .millis_since(run.created_at)
                .saturating_mul(1000),
        );
        out!(
            "{:<36}  {:<20}  {:<9}  {:<24}  {:>9}",
            run.id,
            run.workflow,
            if run.paused.is_some() && run.state == RunState::Running {
                "paused".to_owned()
            } else {
                run.state.to_string()
            },
            run.created_at.to_string(),
            took
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn cancel(data_dir: &Path, run_id: &str) -> anyhow::Result<ExitCode> {
    let host = super::maintenance_host(data_dir)?;
    match host.services().cancel_run(run_id) {
        Ok(()) => {
            out!("run {run_id} cancelled");
            Ok(ExitCode::SUCCESS)
        }
        Err(StoreError::Refused(Refused::RunEnded(_))) => {
            let state = host.engine().store().run(run_id)?;
            let state = state.map(|r| r.state.to_string());
            let state = state.unwrap_or_default();
            eprintln!("error: run {run_id} has already ended: {state}");
            Ok(ExitCode::from(EXIT_INVALID))
        }
        Err(StoreError::Refused(Refused::NotFound(_))) => {
            eprintln!("error: no run `{run_id}` in {}", data_dir.display());
            Ok(ExitCode::from(EXIT_INVALID))
        }
        Err(e) => Err(e.into()),
    }
}

fn show(data_dir: &Path, run_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let Some((store, _)) = open(data_dir)? else {
        eprintln!(
            "error: no run `{run_id}`: there are no runs yet in {}",
            data_dir.display()
        );
        return Ok(ExitCode::from(EXIT_INVALID));
    };
    let run = match store.run(run_id)? {
        Some(run) => run,
        None => match by_prefix(store.as_ref(), run_id)? {
            Ok(run) => run,
            Err(why) => {
                eprintln!("error: {why} in {}", data_dir.display());
                return Ok(ExitCode::from(EXIT_INVALID));
            }
        },
    };
    let steps = store.steps(&run.id)?;
    // The revision the run follows: the latest deployed before the run
    // with its definition (a definition deployed again is a new revision);
    // none for a run of `weft run`, which deploys nothing.
    // A migrated run follows the revision it was moved to.
    let revision = match &run.migrated {
        Some(moved) => Some(moved.to_revision),
        None => store
            .deployments(Some(&run.workflow))?
            .into_iter()
            .filter(|d| d.digest == run.definition && d.deployed_at <= run.created_at)
            .map(|d| d.revision)
            .max(),
    };
    print_run(&run, revision, &steps, json)
}

/// The one run whose id starts with `prefix` (as git takes a commit's), or
/// why there is none: no run, or more than one (named, to pick from).
/// Ids sort by time, so the runs of one prefix are neighbours.
fn by_prefix(
    store: &dyn weft::store::Store,
    prefix: &str,
) -> anyhow::Result<Result<weft::store::RunRecord, String>> {
    const SHOWN: usize = 5;
    let (after, _) = store.runs_from(Some(prefix), SHOWN + 1)?;
    let matching: Vec<_> = after
        .into_iter()
        .take_while(|run| run.id.starts_with(prefix))
        .collect();
    let mut runs = matching.iter();
    Ok(match (runs.next(), runs.next()) {
        (None, _) => Err(format!("no run `{prefix}`")),
        (Some(run), None) => Ok(run.clone()),
        _ => {
            let n = matching.len();
            let ids: Vec<&str> = matching.iter().take(SHOWN).map(|r| r.id.as_str()).collect();
            let more = if n > SHOWN { ", …" } else { "" };
            Err(format!(
                "`{prefix}` starts more than one run's id ({}{more}); give more of it",
                ids.join(", ")
            ))
        }
    })
}

/// How a record reads in one word: a record that starts a wait (a `sleep`,
/// an `await`, a child run) is not the step's result, which comes later at
/// the same path.
fn status_of(step: &weft::store::StepRecord) -> &'static str {
    let waits = step.awaiting
        || (step.output.is_none()
            && step.error.is_none()
            && !step.skipped
            && (step.timer.is_some() || step.child.is_some()));
    match (&step.error, step.skipped) {
        (_, true) => "skip",
        (Some(_), _) => "FAIL",
        (None, _) if waits => "wait",
        (None, _) => "ok  ",
    }
}

fn print_run(
    run: &weft::store::RunRecord,
    revision: Option<u32>,
    steps: &[weft::store::StepRecord],
    json: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        let both = serde_json::json!({ "run": run, "steps": steps });
        out!("{}", serde_json::to_string_pretty(&both)?);
        return Ok(ExitCode::SUCCESS);
    }
    out!("run       {}", run.id);
    // `version` is the file's own; a revision is a deployment's number.
    let revision = revision.map_or_else(String::new, |r| format!("revision {r}, "));
    out!(
        "workflow  {} ({revision}version {}, from {})",
        run.workflow,
        run.workflow_version,
        run.origin
    );
    match run
        .paused
        .as_ref()
        .filter(|_| run.state == RunState::Running)
    {
        Some(mark) => out!("state     paused (by {} at {})", mark.actor, mark.at),
        None => out!("state     {}", run.state),
    }
    if let Some(moved) = &run.migrated {
        out!(
            "migrated  from revision {} to {} by {} at {} (after record {})",
            moved.from_revision,
            moved.to_revision,
            moved.actor,
            moved.at,
            moved.at_record
        );
    }
    out!("started   {}", run.created_at);
    out!("updated   {}", run.updated_at);
    out!("input     {}", run.input);
    out!("steps     {} of {} done", run.next_step, run.step_count);
    for step in steps {
        if let Some(mark) = &step.retry {
            out!(
                "  retry   by {} at {} (the run had {}{}); again: {}",
                mark.actor,
                step.started_at,
                mark.was,
                mark.from
                    .as_deref()
                    .map(|from| format!(", from {from}"))
                    .unwrap_or_default(),
                if mark.reset.is_empty() {
                    "where it stood".to_owned()
                } else {
                    mark.reset.join(", ")
                }
            );
            continue;
        }
        let pinned = run
            .plugins
            .get(&step.step_id)
            .map(|p| format!("{}@{} {}", p.name, p.version, p.digest))
            .unwrap_or_default();
        let status = status_of(step);
        out!(
            "  {status} {} (attempt {}, {}) {pinned}",
            if step.path.is_empty() {
                &step.step_id
            } else {
                &step.path
            },
            step.attempt,
            format_micros(step.duration_us)
        );
        if let Some(error) = &step.error {
            out!("       error: {}: {}", error.code, error.message);
            if let Some(delay) = step.retry_in_ms {
                out!("       retried after {delay} ms");
            }
            if let Some(details) = &error.details {
                out!("       details: {details}");
            }
        }
        for line in &step.logs {
            // `info: …` for the log interface's lines, `stderr: …` for the
            // guest's output, `host: …` for what the host adds.
            let from = match line.source {
                weft::core::LogSource::Log => format!("{:?}", line.level),
                source => format!("{source:?}"),
            };
            out!("       {}: {}", from.to_lowercase(), line.message);
        }
        for call in &step.http {
            let status = call
                .status
                .map_or_else(|| "---".to_owned(), |status| status.to_string());
            out!(
                "       http {} {} -> {status}, {} bytes, {} ms{}",
                call.method,
                call.url,
                call.bytes,
                call.duration_ms,
                call.error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            );
        }
    }
    if let Some(outputs) = &run.outputs {
        out!("outputs   {}", serde_json::to_string_pretty(outputs)?);
    }
    if let Some(failure) = &run.error {
        let at = failure.step.as_deref().unwrap_or("(outputs)");
        out!(
            "error     at {at}: {}: {}",
            failure.error.code,
            failure.error.message
        );
    }
    Ok(ExitCode::SUCCESS)
}
