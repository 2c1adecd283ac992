//! `weft workflows`: the workflows a running `weft serve` serves, and each
//! one's revisions with the runs still following them.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::Value;

use super::remote::{Server, encoded, refused};

#[derive(Debug, Subcommand)]
pub enum WorkflowsCommand {
    /// The workflows served, each with its newest revision.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// The server. [default: the address in DATA_DIR/serve.addr, else
        /// http://127.0.0.1:7420]
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
    /// A workflow's revisions, each with its count of unfinished runs: a
    /// revision that is not served and has none is drained.
    Show {
        /// The workflow's id.
        id: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// The server.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
}

pub fn main(data_dir: &Path, command: WorkflowsCommand) -> anyhow::Result<ExitCode> {
    match command {
        WorkflowsCommand::List { json, server } => {
            let server = Server::new(data_dir, server);
            let answer = match server.call("GET", "/v1/workflows", None)? {
                Ok(answer) => answer,
                Err(message) => return refused(&message),
            };
            if json {
                out!("{}", serde_json::to_string_pretty(&answer["workflows"])?);
                return Ok(ExitCode::SUCCESS);
            }
            out!(
                "{:<32} {:>8} {:>8}  DIGEST",
                "WORKFLOW",
                "REVISION",
                "VERSION"
            );
            for workflow in answer["workflows"].as_array().into_iter().flatten() {
                out!(
                    "{:<32} {:>8} {:>8}  {}",
                    text(&workflow["id"]),
                    // Padded as text: a JSON value's Display ignores width.
                    workflow["revision"].to_string(),
                    workflow["version"].to_string(),
                    text(&workflow["digest"])
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        WorkflowsCommand::Show { id, json, server } => {
            let server = Server::new(data_dir, server);
            let path = format!("/v1/workflows/{}", encoded(&id));
            let answer = match server.call("GET", &path, None)? {
                Ok(answer) => answer,
                Err(message) => return refused(&message),
            };
            if json {
                out!("{}", serde_json::to_string_pretty(&answer)?);
                return Ok(ExitCode::SUCCESS);
            }
            out!(
                "{:>8} {:>8} {:>10}  {:<9} {:<24}  DIGEST",
                "REVISION",
                "VERSION",
                "UNFINISHED",
                "STATUS",
                "DEPLOYED"
            );
            for revision in answer["versions"].as_array().into_iter().flatten() {
                let status = if revision["served"] == true {
                    "served"
                } else if revision["drained"] == true {
                    "drained"
                } else {
                    "draining"
                };
                let deployed = revision["deployed_at"]
                    .as_u64()
                    .map(|ms| weft::core::clock::Timestamp(ms).to_string())
                    .unwrap_or_default();
                out!(
                    "{:>8} {:>8} {:>10}  {status:<9} {deployed:<24}  {}",
                    revision["revision"].to_string(),
                    revision["version"].to_string(),
                    revision["unfinished"].to_string(),
                    text(&revision["digest"])
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or("?")
}
