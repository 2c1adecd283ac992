//! The store from the command line: where it is (`--store`,
//! `--store-pool`), and the commands that work on it as a whole (`weft
//! gc`, `backup`, `restore`, `doctor`, `store migrate`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use weft::{RedbStore, SystemClock};

use super::{EXIT_INVALID, PluginArgs, local_host};

/// The `--store` the command line gave, set once as it starts.
pub(super) static STORE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// `--store-pool`, set once as the command line starts.
pub(super) static STORE_POOL: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();

/// `weft store`'s commands.
#[derive(Debug, clap::Subcommand)]
pub(super) enum StoreCommand {
    /// Apply the migrations a PostgreSQL store lacks (a host applies them
    /// as it starts, too), then list them all; with --status, list them
    /// and apply none.
    Migrate {
        /// List the migrations, applied and pending; apply none.
        #[arg(long)]
        status: bool,
    },
}

/// Runs a `weft store` command.
pub(super) fn main(data_dir: &std::path::Path, command: StoreCommand) -> anyhow::Result<ExitCode> {
    match command {
        StoreCommand::Migrate { status } => migrate(data_dir, status),
    }
}

/// `weft store migrate [--status]`.
fn migrate(data_dir: &std::path::Path, status: bool) -> anyhow::Result<ExitCode> {
    let url = match Location::of(data_dir) {
        Location::Postgres(url) => url,
        Location::Redb(path) => {
            out!(
                "{}: an embedded store has no migrations to list; its tables are made, and kept current, as it opens",
                path.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
    };
    let shown = shown_postgres(&url);
    if !status {
        open_postgres(&url)?;
    }
    let listed = weft::store::PostgresStore::migrations(&url).map_err(|e| {
        anyhow::anyhow!(e).context(format!("cannot read the migrations of {shown}"))
    })?;
    for migration in &listed {
        let said = match (&migration.applied_at, migration.known) {
            (None, _) => "pending".to_owned(),
            (Some(at), true) => format!("applied {at}"),
            (Some(at), false) => {
                format!("applied {at} by a newer weft, which this one cannot open")
            }
        };
        out!("{:>4}  {:<16}  {said}", migration.version, migration.name);
    }
    let pending = listed.iter().filter(|m| m.applied_at.is_none()).count();
    if pending == 0 {
        out!("{shown}: up to date");
    } else {
        out!(
            "{shown}: {pending} pending; `weft store migrate` applies them, as a host does when it starts"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the store is: a redb file, or a PostgreSQL database.
pub(super) enum Location {
    Redb(PathBuf),
    Postgres(String),
}

impl Location {
    /// `--store`, else DATA_DIR/weft.redb.
    pub(super) fn of(data_dir: &std::path::Path) -> Self {
        match STORE.get().and_then(Option::as_deref) {
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Self::Postgres(url.to_owned())
            }
            Some(path) => Self::Redb(PathBuf::from(path.strip_prefix("redb:").unwrap_or(path))),
            None => Self::Redb(data_dir.join("weft.redb")),
        }
    }

    /// The PostgreSQL URL, when the store is there.
    pub(super) fn postgres(self) -> Option<String> {
        match self {
            Self::Postgres(url) => Some(url),
            Self::Redb(_) => None,
        }
    }
}

/// The redb file the store is in; `None` when it is in PostgreSQL.
pub(super) fn store_path(data_dir: &std::path::Path) -> Option<PathBuf> {
    match Location::of(data_dir) {
        Location::Redb(path) => Some(path),
        Location::Postgres(_) => None,
    }
}

/// `weft gc`'s arguments.
#[derive(Debug, clap::Args)]
pub(super) struct GcArgs {
    /// Report what would be deleted, and delete nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    retain: RetainArgs,
    #[command(flatten)]
    plugins: PluginArgs,
}

/// How long the sweeper keeps what it deletes, when neither workflow nor
/// tenant says: each a duration such as `30d`, or `forever`.
#[derive(Debug, clap::Args)]
pub(crate) struct RetainArgs {
    /// How long an ended run is kept, with its records and logs, when
    /// neither its workflow (`retain:`) nor its tenant says.
    #[arg(long, value_name = "DURATION", default_value = "30d", value_parser = parse_retain)]
    retain: weft::model::Retain,
    /// How long a message whose deliveries are all settled is kept, with
    /// its deliveries, when its tenant does not say.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = parse_retain)]
    retain_messages: weft::model::Retain,
    /// How long a dead letter is kept after its last attempt before it is
    /// cleared.
    #[arg(long, value_name = "DURATION", default_value = "30d", value_parser = parse_retain)]
    retain_dead_letters: weft::model::Retain,
}

impl RetainArgs {
    pub(crate) fn retention(&self) -> weft::engine::sweep::Retention {
        weft::engine::sweep::Retention {
            runs: self.retain,
            messages: self.retain_messages,
            dead_letters: self.retain_dead_letters,
        }
    }
}

/// `forever`, or a duration such as `30d`.
pub(crate) fn parse_retain(text: &str) -> Result<weft::model::Retain, String> {
    weft::model::Retain::parse(text)
}

/// The same, checked and kept as given.
pub(crate) fn parse_retain_text(text: &str) -> Result<String, String> {
    weft::model::Retain::parse(text).map(|_| text.trim().to_owned())
}

/// `weft gc`: one pass of the sweeper over the store, judged by every
/// workflow's newest revision.
pub(super) fn gc(data_dir: &std::path::Path, args: &GcArgs) -> anyhow::Result<ExitCode> {
    let host = local_host(data_dir, &args.plugins)?;
    let engine = host.engine();
    let deployments = weft::Deployments::none(Arc::clone(engine.store()), Arc::new(SystemClock));
    let newest = deployments
        .newest()
        .context("cannot read the deployed workflows")?;
    engine.set_workflows(Arc::new(newest));
    let swept = engine
        .sweep(&args.retain.retention(), args.dry_run)
        .context("cannot sweep the store")?;
    let verb = if args.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    out!(
        "{verb} {} ended run(s) past their retention, with {} step record(s); looked at {} run(s)",
        swept.runs,
        swept.steps,
        swept.examined
    );
    out!(
        "{verb} {} settled message(s) past their retention, with their deliveries; {} dead letter(s); {} key-value tombstone(s) and expired key(s)",
        swept.messages,
        swept.dead_letters,
        swept.tombstones
    );
    out!(
        "{verb} {} replaced workflow revision(s), and {} definition(s) and component(s) nothing refers to",
        swept.revisions,
        swept.blobs
    );
    out!(
        "{verb} {} snapshot revision(s) past their store's keep, and {} snapshot entr(ies) of deleted revisions or expired",
        swept.snapshot_revisions,
        swept.snapshot_entries
    );
    if swept.kept > 0 {
        out!(
            "kept {} ended run(s) past their retention: their parent has not ended",
            swept.kept
        );
    }
    // Compiled code is kept for the registry's components and the plugins
    // folder's; a build that is neither (an earlier build of a project,
    // say) is compiled again if it is ever loaded.
    let mut kept: std::collections::HashSet<String> = engine
        .store()
        .plugins()
        .context("cannot read the plugin registry")?
        .into_iter()
        .map(|record| {
            record
                .digest
                .strip_prefix("sha256:")
                .unwrap_or(&record.digest)
                .to_owned()
        })
        .collect();
    if let Ok(files) = std::fs::read_dir(engine.plugins().dir()) {
        for path in files.filter_map(|f| f.ok().map(|f| f.path())) {
            if path.extension().is_some_and(|e| e == "wasm")
                && let Ok(bytes) = std::fs::read(&path)
            {
                kept.insert(weft::core::Digest::of(&bytes).hex());
            }
        }
    }
    let pruned = engine
        .plugins()
        .runtime()
        .prune_cache(&|hex| kept.contains(hex), args.dry_run)
        .context("cannot prune the compiled-code cache")?;
    out!(
        "{verb} {} compiled component(s) of the code cache ({} bytes) that neither the registry nor the plugins folder holds",
        pruned.entries,
        pruned.bytes
    );
    Ok(ExitCode::SUCCESS)
}

/// `weft backup FILE`.
pub(super) fn backup(
    data_dir: &std::path::Path,
    file: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let Some(path) = store_path(data_dir) else {
        eprintln!(
            "error: weft backup copies the embedded store; back a PostgreSQL store up with its own tools (pg_dump, pg_basebackup)"
        );
        return Ok(ExitCode::from(EXIT_INVALID));
    };
    if !path.exists() {
        eprintln!("error: no store at {}: nothing to back up", path.display());
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    let store = RedbStore::open(&path)
        .with_context(|| format!("cannot open the store {}", path.display()))?;
    match store.backup(file) {
        Ok(rows) => {
            out!(
                "{}: {rows} rows, copied from {}",
                file.display(),
                path.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ weft::store::StoreError::Config { .. }) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(EXIT_INVALID))
        }
        Err(e) => Err(e).context("cannot write the backup"),
    }
}

/// `weft restore FILE`: into the data directory's store.
pub(super) fn restore(
    data_dir: &std::path::Path,
    file: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let Some(path) = store_path(data_dir) else {
        eprintln!(
            "error: weft restore makes an embedded store; restore a PostgreSQL store with its own tools"
        );
        return Ok(ExitCode::from(EXIT_INVALID));
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot make {}", parent.display()))?;
    }
    match RedbStore::restore(file, &path) {
        Ok(rows) => {
            out!(
                "{}: {rows} rows, restored from {}; weft serve there resumes every run that was running",
                path.display(),
                file.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ weft::store::StoreError::Config { .. }) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(EXIT_INVALID))
        }
        Err(e) => Err(e).with_context(|| format!("cannot restore {}", file.display())),
    }
}

/// `weft doctor`: the rows of the store that do not decode.
pub(super) fn doctor(data_dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    let Some((store, shown)) = super::runs::open(data_dir)? else {
        out!("no store in {}: nothing to check", data_dir.display());
        return Ok(ExitCode::SUCCESS);
    };
    let damaged = store.damaged()?;
    if damaged.is_empty() {
        out!(
            "{shown}: every run, outbox, trigger, timer, host, tenant, deployment and plugin row decodes"
        );
        return Ok(ExitCode::SUCCESS);
    }
    for row in &damaged {
        out!("{} `{}`: {}", row.table, row.key, row.error);
    }
    out!(
        "{} row(s) do not decode; the host sets them aside (they are skipped, not deleted)",
        damaged.len()
    );
    Ok(ExitCode::FAILURE)
}

/// The store, for reading and writing: opened (and made, or migrated)
/// where `--store` says.
pub(super) fn open_store(data_dir: &std::path::Path) -> anyhow::Result<Arc<dyn weft::Store>> {
    Ok(match Location::of(data_dir) {
        Location::Redb(path) => Arc::new(
            RedbStore::open(&path)
                .with_context(|| format!("cannot open the store {}", path.display()))?,
        ),
        Location::Postgres(url) => Arc::new(open_postgres(&url)?),
    })
}

/// The store in the PostgreSQL database at `url`.
fn open_postgres(url: &str) -> anyhow::Result<weft::PostgresStore> {
    let opened = match STORE_POOL.get().copied().flatten() {
        Some(size) => weft::PostgresStore::open_pooled(url, size),
        None => weft::PostgresStore::open(url),
    };
    opened.map_err(|e| {
        let shown = shown_postgres(url);
        anyhow::anyhow!(e).context(format!("cannot open the store in PostgreSQL at {shown}"))
    })
}

/// A PostgreSQL URL as it may be shown: what follows the user and
/// password, without the query.
pub(super) fn shown_postgres(url: &str) -> &str {
    let at = url.split_once('@').map_or(url, |(_, at)| at);
    // The query may hold a `password=` too.
    at.split_once('?').map_or(at, |(before, _)| before)
}
