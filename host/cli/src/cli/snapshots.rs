//! `weft snapshots`: publish, list, show and diff snapshot stores. In the
//! store by default; with `--server URL` (or when a running `weft serve`
//! holds the embedded store), through that server's API.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::{Value, json};

use weft::Store;
use weft::engine::snapshots::{self as snap, FileFormat, PublishError};
use weft::store::StoreError;

use super::{EXIT_INVALID, open_store};

#[derive(Debug, Subcommand)]
pub enum SnapshotsCommand {
    /// Publish FILE as the next revision of store NAME: JSON (`{key:
    /// value}`), or JSON Lines (`{"key", "value", "ttl"?}` per line) for a
    /// name ending in .jsonl or .ndjson. New runs read it; runs already
    /// started keep the revision they pinned.
    Publish {
        /// The store.
        name: String,
        /// The file.
        file: PathBuf,
        /// `json` or `jsonl` [default: by the file's extension].
        #[arg(long)]
        format: Option<String>,
        /// The time to live of an entry that gives none, such as `1h`
        /// [default: entries never expire].
        #[arg(long)]
        ttl: Option<String>,
        /// Revisions kept, counting the newest (revisions a run that has
        /// not ended pins are kept too).
        #[arg(long)]
        keep: Option<u32>,
        /// How long a replaced revision is kept, whatever --keep says.
        #[arg(long)]
        keep_for: Option<String>,
        /// Publish through this `weft serve` instead of in the store.
        #[arg(long)]
        server: Option<String>,
    },
    /// List the stores, each with its newest revision.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Ask this `weft serve`.
        #[arg(long)]
        server: Option<String>,
    },
    /// Show a store's revisions, or with --revision, that revision and its
    /// first entries.
    Show {
        /// The store.
        name: String,
        /// The revision to show.
        #[arg(long)]
        revision: Option<u32>,
        /// With --revision, at most this many entries.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Ask this `weft serve`.
        #[arg(long)]
        server: Option<String>,
    },
    /// The keys added, removed and changed from revision FROM to TO.
    Diff {
        /// The store.
        name: String,
        /// The revision compared from.
        from: u32,
        /// The revision compared to.
        to: u32,
        /// At most this many changes listed.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Ask this `weft serve`.
        #[arg(long)]
        server: Option<String>,
    },
}

/// Where a command goes: the store, or a server.
enum Target {
    Local(Arc<dyn Store>),
    Remote(super::remote::Server),
}

/// The store, unless `server` is given or a running `weft serve` holds
/// the embedded store, in which case that server.
fn target(data_dir: &Path, server: Option<String>) -> anyhow::Result<Target> {
    if server.is_some() {
        return Ok(Target::Remote(super::remote::Server::new(data_dir, server)));
    }
    match open_store(data_dir) {
        Ok(store) => Ok(Target::Local(store)),
        Err(e)
            if e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<StoreError>(),
                    Some(StoreError::Locked { .. })
                )
            }) && data_dir.join("serve.addr").exists() =>
        {
            Ok(Target::Remote(super::remote::Server::new(data_dir, None)))
        }
        Err(e) => Err(e),
    }
}

/// The tenant of a command on the store itself.
const TENANT: &str = weft::core::tenant::DEFAULT;

pub fn main(data_dir: &Path, command: SnapshotsCommand) -> anyhow::Result<ExitCode> {
    match command {
        SnapshotsCommand::Publish {
            name,
            file,
            format,
            ttl,
            keep,
            keep_for,
            server,
        } => publish(
            data_dir,
            &name,
            &file,
            format.as_deref(),
            (ttl.as_deref(), keep, keep_for.as_deref()),
            server,
        ),
        SnapshotsCommand::List { json, server } => list(data_dir, json, server),
        SnapshotsCommand::Show {
            name,
            revision,
            limit,
            json,
            server,
        } => show(data_dir, &name, revision, limit, json, server),
        SnapshotsCommand::Diff {
            name,
            from,
            to,
            limit,
            json,
            server,
        } => diff(data_dir, &name, (from, to), limit, json, server),
    }
}

fn refused(message: &str) -> anyhow::Result<ExitCode> {
    eprintln!("error: {message}");
    Ok(ExitCode::from(EXIT_INVALID))
}

fn publish(
    data_dir: &Path,
    name: &str,
    file: &Path,
    format: Option<&str>,
    (ttl, keep, keep_for): (Option<&str>, Option<u32>, Option<&str>),
    server: Option<String>,
) -> anyhow::Result<ExitCode> {
    let format = match format {
        None => FileFormat::of_path(file),
        Some("json") => FileFormat::Json,
        Some("jsonl" | "ndjson") => FileFormat::Lines,
        Some(other) => return refused(&format!("--format {other}: give `json` or `jsonl`")),
    };
    let origin = format!("file:{}", file.display());
    let options = match weft::api::snapshot_options(ttl, keep, keep_for, origin) {
        Ok(options) => options,
        Err(message) => return refused(&format!("--{message}")),
    };
    let opened =
        std::fs::File::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let record = match target(data_dir, server)? {
        Target::Local(store) => {
            // The host opens the store again, as its own.
            drop(store);
            let host = super::maintenance_host(data_dir)?;
            let published = host.services().publish_snapshot(
                TENANT,
                name,
                std::io::BufReader::with_capacity(1 << 16, opened),
                format,
                &file.display().to_string(),
                &options,
            );
            match published {
                Ok(record) => weft::api::snapshot_json(&record),
                Err(e @ PublishError::Store(_)) => return Err(e.into()),
                Err(e) => return refused(&e.to_string()),
            }
        }
        Target::Remote(server) => {
            let mut path = format!(
                "/v1/snapshots/{name}?format={}",
                if format == FileFormat::Lines {
                    "jsonl"
                } else {
                    "json"
                }
            );
            if let Some(ttl) = ttl {
                path.push_str(&format!("&ttl={}", super::remote::encoded(ttl)));
            }
            if let Some(keep) = keep {
                path.push_str(&format!("&keep={keep}"));
            }
            if let Some(keep_for) = keep_for {
                path.push_str(&format!("&keep_for={}", super::remote::encoded(keep_for)));
            }
            match server.send_reader(&path, "application/octet-stream", opened)? {
                Ok(answer) => answer["snapshot"].clone(),
                Err(message) => return refused(&message),
            }
        }
    };
    out!(
        "published snapshot store `{name}` revision {}: {} entr(ies), {}",
        record["revision"],
        record["entries"],
        record["digest"].as_str().unwrap_or("")
    );
    Ok(ExitCode::SUCCESS)
}

fn list(data_dir: &Path, as_json: bool, server: Option<String>) -> anyhow::Result<ExitCode> {
    let stores: Vec<Value> = match target(data_dir, server)? {
        Target::Local(store) => snap::stores(store.as_ref(), TENANT)?
            .iter()
            .map(|(newest, count)| {
                let mut shown = weft::api::snapshot_json(newest);
                shown["revisions"] = json!(count);
                shown
            })
            .collect(),
        Target::Remote(server) => match server.call("GET", "/v1/snapshots", None)? {
            Ok(answer) => answer["snapshots"].as_array().cloned().unwrap_or_default(),
            Err(message) => return refused(&message),
        },
    };
    if as_json {
        out!(
            "{}",
            serde_json::to_string_pretty(&json!({ "snapshots": stores }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    if stores.is_empty() {
        out!("no snapshot store is published");
        return Ok(ExitCode::SUCCESS);
    }
    out!(
        "{:<24} {:>8} {:>10} {:>9}  DIGEST",
        "STORE",
        "REVISION",
        "ENTRIES",
        "REVISIONS"
    );
    for store in &stores {
        out!(
            "{:<24} {:>8} {:>10} {:>9}  {}",
            store["store"].as_str().unwrap_or(""),
            store["revision"],
            store["entries"],
            store["revisions"],
            store["digest"].as_str().unwrap_or("")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn show(
    data_dir: &Path,
    name: &str,
    revision: Option<u32>,
    limit: usize,
    as_json: bool,
    server: Option<String>,
) -> anyhow::Result<ExitCode> {
    let answer = match (target(data_dir, server)?, revision) {
        (Target::Local(store), None) => {
            let revisions = store.snapshots(Some(name))?;
            if revisions.is_empty() {
                return refused(&format!("no snapshot store `{name}`"));
            }
            json!({ "store": name, "revisions": revisions.iter().map(weft::api::snapshot_json).collect::<Vec<_>>() })
        }
        (Target::Local(store), Some(revision)) => {
            let Some(record) = store
                .snapshots(Some(name))?
                .into_iter()
                .find(|r| r.revision == revision)
            else {
                return refused(&format!(
                    "snapshot store `{name}` has no revision {revision}"
                ));
            };
            let entries = store.snapshot_entries(&record.data, None, "", limit)?;
            json!({
                "snapshot": weft::api::snapshot_json(&record),
                "entries": entries.iter().map(|(key, entry)| json!({
                    "key": key,
                    "value": serde_json::from_str::<Value>(&entry.value).unwrap_or(Value::Null),
                    "expires_at": entry.expires_at,
                })).collect::<Vec<_>>(),
            })
        }
        (Target::Remote(server), revision) => {
            let path = match revision {
                None => format!("/v1/snapshots/{name}"),
                Some(n) => format!("/v1/snapshots/{name}/revisions/{n}?limit={limit}"),
            };
            match server.call("GET", &path, None)? {
                Ok(answer) => answer,
                Err(message) => return refused(&message),
            }
        }
    };
    if as_json {
        out!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(revisions) = answer["revisions"].as_array() {
        out!(
            "{:>8} {:>10} {:<26} DIGEST",
            "REVISION",
            "ENTRIES",
            "PUBLISHED"
        );
        for r in revisions {
            out!(
                "{:>8} {:>10} {:<26} {}",
                r["revision"],
                r["entries"],
                published(&r["published_at"]),
                r["digest"].as_str().unwrap_or("")
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let r = &answer["snapshot"];
    out!(
        "snapshot store `{name}` revision {}: {} entr(ies), {} bytes, published {}\n{}",
        r["revision"],
        r["entries"],
        r["bytes"],
        published(&r["published_at"]),
        r["digest"].as_str().unwrap_or("")
    );
    for entry in answer["entries"].as_array().into_iter().flatten() {
        out!(
            "  {} = {}",
            entry["key"].as_str().unwrap_or(""),
            entry["value"]
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A timestamp (milliseconds) as RFC 3339.
fn published(at: &Value) -> String {
    at.as_u64()
        .map(|ms| weft::Timestamp(ms).to_string())
        .unwrap_or_default()
}

fn diff(
    data_dir: &Path,
    name: &str,
    (from, to): (u32, u32),
    limit: usize,
    as_json: bool,
    server: Option<String>,
) -> anyhow::Result<ExitCode> {
    let answer = match target(data_dir, server)? {
        Target::Local(store) => match snap::diff(store.as_ref(), TENANT, name, from, to, limit) {
            Ok(diff) => serde_json::to_value(diff)?,
            Err(e @ snap::DiffError::NoRevision { .. }) => return refused(&e.to_string()),
            Err(snap::DiffError::Store(e)) => return Err(e.into()),
        },
        Target::Remote(server) => {
            let path = format!("/v1/snapshots/{name}/diff?from={from}&to={to}&limit={limit}");
            match server.call("GET", &path, None)? {
                Ok(answer) => answer,
                Err(message) => return refused(&message),
            }
        }
    };
    if as_json {
        out!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(ExitCode::SUCCESS);
    }
    for change in answer["changes"].as_array().into_iter().flatten() {
        let key = change["key"].as_str().unwrap_or("");
        match change["change"].as_str() {
            Some("added") => out!("+ {key} = {}", change["to"]),
            Some("removed") => out!("- {key} = {}", change["from"]),
            _ => out!("~ {key}: {} -> {}", change["from"], change["to"]),
        }
    }
    out!(
        "revision {from} -> {to}: {} added, {} removed, {} changed{}",
        answer["added"],
        answer["removed"],
        answer["changed"],
        if answer["truncated"].as_bool() == Some(true) {
            " (not every change listed: --limit)"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}
