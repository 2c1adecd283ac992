//! `weft schedules`: cron triggers, in the store. A running `weft serve`
//! sees a change within a second.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;
use weft::Store;
use weft::engine::ScheduleError;
use weft::model::{CatchUp, Overlap, ScheduleSpec};
use weft::services::ScheduleRefused;

use super::{EXIT_INVALID, maintenance_host, open_store, read_input};

#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// List every trigger with its next fire.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Stop a trigger from firing until it is resumed.
    Pause {
        /// The trigger: `<workflow>/<trigger id>`.
        key: String,
    },
    /// Let a paused trigger fire again, from now on (what it missed while
    /// paused is not caught up).
    Resume {
        /// The trigger: `<workflow>/<trigger id>`.
        key: String,
    },
    /// Remove a trigger added by hand (`schedules add`, the API); one
    /// declared in its workflow's file is removed there. Runs it started go
    /// on.
    Remove {
        /// The trigger: `<workflow>/<trigger id>`.
        key: String,
    },
    /// Add a trigger to a workflow deployed on `weft serve`.
    Add {
        /// The workflow it starts.
        workflow: String,
        /// Six fields, seconds first: `0 */5 * * * *`.
        #[arg(long)]
        cron: String,
        /// The trigger's id within the workflow [default: cli-N].
        #[arg(long)]
        id: Option<String>,
        /// An IANA time zone [default: UTC].
        #[arg(long)]
        timezone: Option<String>,
        /// Start each fire's run up to this much later (`30s`).
        #[arg(long)]
        jitter: Option<String>,
        /// The runs' input: JSON text, `@FILE`, or `-` for stdin.
        #[arg(long, default_value = "{}")]
        input: String,
        /// skip, buffer_one, cancel_previous or allow.
        #[arg(long, default_value = "skip", value_parser = parse_overlap)]
        overlap: Overlap,
        /// all, one or none.
        #[arg(long, default_value = "one", value_parser = parse_catch_up)]
        catch_up: CatchUp,
    },
}

fn parse_overlap(text: &str) -> Result<Overlap, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| "expected skip, buffer_one, cancel_previous or allow".to_owned())
}

fn parse_catch_up(text: &str) -> Result<CatchUp, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| "expected all, one or none".to_owned())
}

pub fn main(data_dir: &Path, command: SchedulesCommand) -> anyhow::Result<ExitCode> {
    match command {
        SchedulesCommand::List { json } => list(open_store(data_dir)?.as_ref(), json),
        SchedulesCommand::Pause { key } => set_paused(data_dir, &key, true),
        SchedulesCommand::Resume { key } => set_paused(data_dir, &key, false),
        SchedulesCommand::Remove { key } => remove(data_dir, &key),
        SchedulesCommand::Add {
            workflow,
            cron,
            id,
            timezone,
            jitter,
            input,
            overlap,
            catch_up,
        } => {
            let input = match read_input("--input", &input) {
                Ok(input) => input,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    return Ok(ExitCode::from(EXIT_INVALID));
                }
            };
            let spec = ScheduleSpec {
                id,
                cron,
                timezone,
                jitter,
                input,
                overlap,
                catch_up,
                catch_up_limit: None,
            };
            let host = maintenance_host(data_dir)?;
            let row = match host.services().add_schedule(&workflow, spec, "cli") {
                Ok(row) => row,
                Err(ScheduleRefused::Schedule(ScheduleError::Store(e))) => return Err(e.into()),
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(ExitCode::from(EXIT_INVALID));
                }
            };
            out!(
                "added {}; next fire {}",
                row.key,
                row.next_fire.map_or("never".to_owned(), |t| t.to_string())
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn list(store: &dyn Store, json: bool) -> anyhow::Result<ExitCode> {
    let rows = store.schedules()?;
    if json {
        out!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        out!("no triggers");
        return Ok(ExitCode::SUCCESS);
    }
    out!(
        "{:<32}  {:<18}  {:<14}  {:<7}  {:<24}  {:>7}  {:>7}",
        "TRIGGER",
        "CRON",
        "TIME ZONE",
        "STATE",
        "NEXT FIRE",
        "STARTED",
        "SKIPPED"
    );
    for row in rows {
        out!(
            "{:<32}  {:<18}  {:<14}  {:<7}  {:<24}  {:>7}  {:>7}",
            row.key,
            row.spec.cron,
            row.spec.timezone.as_deref().unwrap_or("UTC"),
            if row.paused { "paused" } else { "active" },
            if row.paused {
                "-".to_owned()
            } else {
                row.next_fire.map_or("never".to_owned(), |t| t.to_string())
            },
            row.started,
            row.skipped
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn set_paused(data_dir: &Path, key: &str, paused: bool) -> anyhow::Result<ExitCode> {
    let host = maintenance_host(data_dir)?;
    match host.services().set_schedule_paused(key, paused) {
        Ok(row) => {
            out!(
                "{key} {}{}",
                if paused { "paused" } else { "resumed" },
                match (paused, row.next_fire) {
                    (false, Some(next)) => format!("; next fire {next}"),
                    _ => String::new(),
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => refused(key, e),
    }
}

fn remove(data_dir: &Path, key: &str) -> anyhow::Result<ExitCode> {
    let host = maintenance_host(data_dir)?;
    match host.services().remove_schedule(key) {
        Ok(_) => {
            out!("{key} removed");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => refused(key, e),
    }
}

/// A refused change of trigger `key`: said, with the exit status for it; a
/// failed store is an error.
fn refused(key: &str, refusal: ScheduleRefused) -> anyhow::Result<ExitCode> {
    match refusal {
        ScheduleRefused::UnknownTrigger(_) => {
            eprintln!("error: no trigger `{key}` (see `weft schedules list`)");
        }
        ScheduleRefused::Schedule(ScheduleError::Store(e)) => return Err(e.into()),
        other => eprintln!("error: {other}"),
    }
    Ok(ExitCode::from(EXIT_INVALID))
}
