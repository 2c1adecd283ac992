//! Subcommands. Errors meet the user here, through `anyhow`.

/// `println!` that returns the write's error instead of panicking, so that
/// `weft runs list | head` ends quietly when `head` closes the pipe.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

mod access;
mod bench;
mod check;
mod listen;
mod plugin;
mod plugin_build;
mod progress;
mod remote;
mod runs;
mod schedules;
mod serve;
mod sim;
mod snapshots;
mod store;
mod test;
mod workflows;

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use serde_json::Value;
use weft::engine::{EngineConfig, StartError};
use weft::store::RunState;
use weft::{
    Engine, Host, HostConfig, PluginDir, Runtime, RuntimeConfig, SystemClock, WorkflowDir, model,
};

use store::{
    GcArgs, Location, RetainArgs, STORE, STORE_POOL, backup, doctor, gc, open_store,
    parse_retain_text, restore, shown_postgres, store_path,
};

/// The run failed: a step or the outputs failed.
pub const EXIT_FAILED: u8 = 1;
/// The run could not start: bad definition, input or plugin.
pub const EXIT_INVALID: u8 = 2;
/// The host failed: store, files, configuration.
pub const EXIT_HOST: u8 = 3;

/// weft runs workflows whose steps are sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "weft", version, about, long_about = None)]
pub struct Cli {
    /// Where runs and compiled code are kept.
    /// [default: the user's data directory, such as ~/.local/share/weft]
    #[arg(long, global = true, env = "WEFT_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,

    /// Where runs are kept: a redb file (a path, or `redb:PATH`), or a
    /// PostgreSQL database (`postgres://user@host:port/db`), which several
    /// `weft serve` hosts may share.
    /// [default: DIR/weft.redb]
    #[arg(
        long,
        global = true,
        env = "WEFT_STORE",
        value_name = "STORE",
        hide_env_values = true
    )]
    store: Option<String>,

    /// The most connections to a PostgreSQL store this process keeps
    /// (also `pool_size=N` in the store's URL, which this overrides).
    /// [default: 16]
    #[arg(
        long,
        global = true,
        env = "WEFT_STORE_POOL",
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(2..=1000)
    )]
    store_pool: Option<u16>,

    /// Log more to stderr (-v: info and guest logs, -vv: debug, -vvv:
    /// trace). WEFT_LOG, in tracing's filter syntax, overrides it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// How logs on stderr read: `text`, or `json` (one object a line, with
    /// its fields and spans).
    #[arg(
        long,
        global = true,
        env = "WEFT_LOG_FORMAT",
        value_name = "FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,

    /// The API token a command sends to `weft serve`.
    #[arg(
        long,
        global = true,
        env = "WEFT_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,

    /// The tenant an admin's command acts in (sent as `Weft-Tenant`).
    #[arg(long, global = true, env = "WEFT_AS_TENANT", value_name = "TENANT")]
    as_tenant: Option<String>,

    /// The PEM certificate a `weft serve --tls-cert` server's certificate
    /// must chain to (its own, when self-signed).
    #[arg(long, global = true, env = "WEFT_CA_CERT", value_name = "FILE")]
    ca_cert: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a workflow to completion and print its outputs as JSON.
    Run(RunArgs),
    /// Check a workflow file without running it.
    Check {
        /// The workflow file (YAML, or JSON if it ends in .json).
        workflow: PathBuf,
        /// Check each step's plugin too: found in this folder, its version
        /// satisfying `uses:`, and the step's grants, `args` and `env`
        /// fitting it.
        #[arg(long, value_name = "DIR")]
        plugins: Option<PathBuf>,
    },
    /// Print the JSON Schema (2020-12) of a file format, for editors:
    /// `workflow` (a workflow definition) or `test` (a test file).
    Schema {
        /// The format.
        #[arg(value_enum)]
        format: SchemaFormat,
    },
    /// The workflows a running `weft serve` serves, and each one's
    /// revisions with the runs still on them.
    #[command(subcommand)]
    Workflows(workflows::WorkflowsCommand),
    /// Runs: list, show, watch; pause, resume, retry, cancel, delete,
    /// migrate, and bulk actions over a filter.
    #[command(subcommand)]
    Runs(runs::RunsCommand),
    /// Cron triggers: list, pause, resume, add, remove.
    #[command(subcommand)]
    Schedules(schedules::SchedulesCommand),
    /// Snapshot stores: publish a revision, list, show, diff.
    #[command(subcommand)]
    Snapshots(snapshots::SnapshotsCommand),
    /// Measure step latency, or durable throughput with --runs.
    Bench(bench::BenchArgs),
    /// The store itself: `weft store migrate` applies the migrations a
    /// PostgreSQL store lacks, `--status` lists them.
    #[command(subcommand)]
    Store(store::StoreCommand),
    /// Check the store: list the rows that do not decode (runs, outbox,
    /// triggers, timers), which the host sets aside.
    Doctor,
    /// Delete what has outlived its retention, as `weft serve`'s sweeper
    /// does: ended runs (each workflow's `retain:`, else its tenant's,
    /// else --retain), settled messages, dead letters, key-value
    /// tombstones.
    Gc(GcArgs),
    /// Write a consistent copy of the embedded store to FILE, beside a
    /// running `weft serve` or not.
    Backup {
        /// The new file (never written over).
        file: PathBuf,
    },
    /// Make the data directory's store (which must not exist) from a
    /// backup; `weft serve` there resumes every run that was running.
    Restore {
        /// A file written by `weft backup`.
        file: PathBuf,
    },
    /// Run workflows' test files (NAME.test.yaml) on the real engine with a
    /// simulated clock: `N passed, N failed`.
    Test(test::TestArgs),
    /// Run the deterministic simulator: the real engine through seeded
    /// interleavings, checking every invariant after every event.
    Sim(sim::SimArgs),
    /// Run the host: resume interrupted runs, then serve the HTTP API on
    /// loopback until interrupted.
    Serve(serve::ServeArgs),
    /// Start a run on a running `weft serve`.
    Start(serve::StartArgs),
    /// Answer a waiting `await` step on a running `weft serve`: complete,
    /// fail, skip, or cancel the run.
    Act(remote::ActArgs),
    /// Print a channel's messages as they come, and ack each (from a
    /// running `weft serve`).
    Tail(remote::TailArgs),
    /// Deliveries and dead letters (of a running `weft serve`).
    #[command(subcommand)]
    Deliveries(remote::DeliveriesCommand),
    /// Subscriptions to channels (of a running `weft serve`): list, remove.
    #[command(subcommand)]
    Subscriptions(remote::SubscriptionsCommand),
    /// Plugins: new (a project from a template), build, setup (the
    /// toolchains), inspect a component, add one to the registry, list.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Tenants, their quotas and usage (of a running `weft serve`).
    #[command(subcommand)]
    Tenants(access::TenantsCommand),
    /// API tokens: create (shown once), list, revoke.
    #[command(subcommand)]
    Tokens(access::TokensCommand),
    /// The tenant's secrets (of a running `weft serve`): set (from stdin),
    /// list, delete; and `new-key` for the key they are sealed with.
    #[command(subcommand)]
    Secrets(access::SecretsCommand),
    /// The tenant's audit log: deployments, plugins, tokens, quotas,
    /// cancels, resends.
    Audit(access::AuditArgs),
    /// Deploy a workflow file to a running `weft serve` as the newest
    /// version of its id (runs in flight keep theirs).
    Deploy {
        /// The workflow file (YAML, or JSON if it ends in .json).
        workflow: PathBuf,
        /// The server. [default: the address in DATA_DIR/serve.addr, else
        /// http://127.0.0.1:7420]
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
}

/// A file format with a JSON Schema.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum SchemaFormat {
    /// A workflow definition (YAML or JSON).
    Workflow,
    /// A workflow's test file (`NAME.test.yaml`).
    Test,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The workflow file (YAML, or JSON if it ends in .json).
    workflow: PathBuf,

    /// The run's input: JSON text, `@FILE` to read a file, or `-` for stdin.
    #[arg(long, short, default_value = "{}", value_name = "JSON|@FILE|-")]
    input: String,

    #[command(flatten)]
    plugins: PluginArgs,
}

#[derive(Debug, Default, clap::Args)]
pub struct PluginArgs {
    /// Where plugins are found: `uses: name` loads NAME.wasm from here.
    /// [default: DATA_DIR/plugins]
    #[arg(long, env = "WEFT_PLUGINS", value_name = "DIR")]
    plugins: Option<PathBuf>,
    /// Where steps and webhooks of tenants without a policy of their own
    /// may send HTTP requests: URL prefixes such as `https://*.example.org`
    /// or `http://127.0.0.1:*`, repeated or comma-separated. Without it,
    /// tenant `default` is bound by its steps' grants only and other
    /// tenants by their grants and public addresses.
    #[arg(
        long,
        env = "WEFT_EGRESS_ALLOW",
        value_delimiter = ',',
        value_name = "RULE"
    )]
    egress_allow: Vec<String>,
    /// The key tenants' secrets are sealed with: a file holding 64 hex
    /// digits (`weft secrets new-key`), kept outside the data directory.
    /// `WEFT_SECRETS_KEY` may hold the digits instead.
    #[arg(long, env = "WEFT_SECRETS_KEY_FILE", value_name = "FILE")]
    secrets_key_file: Option<PathBuf>,
    /// Earlier keys, which still open the secrets they sealed: give the old
    /// key here after a rotation, until `weft secrets list` shows every
    /// secret set again (or each was set anew). Repeatable.
    #[arg(
        long,
        env = "WEFT_SECRETS_PREVIOUS_KEY_FILES",
        value_delimiter = ',',
        value_name = "FILE"
    )]
    secrets_previous_key_file: Vec<PathBuf>,
}

impl PluginArgs {
    /// The host's egress policy, if one is given.
    fn egress(&self) -> anyhow::Result<Option<Vec<weft::core::egress::Rule>>> {
        if self.egress_allow.is_empty() {
            return Ok(None);
        }
        self.egress_allow
            .iter()
            .map(|rule| {
                weft::core::egress::Rule::parse(rule, None)
                    .map_err(|m| anyhow::anyhow!("--egress-allow: {m}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()
            .map(Some)
    }

    /// The secrets keys, if one is given.
    fn secrets_keys(&self) -> anyhow::Result<Option<Arc<weft::engine::SecretKeys>>> {
        let read = |path: &std::path::Path| {
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the secrets key file {}", path.display()))
        };
        let current = match (&self.secrets_key_file, std::env::var("WEFT_SECRETS_KEY")) {
            (Some(path), _) => read(path)?,
            (None, Ok(key)) => key,
            (None, Err(_)) => return Ok(None),
        };
        let previous = self
            .secrets_previous_key_file
            .iter()
            .map(|path| read(path))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let keys = weft::engine::SecretKeys::from_hex(&current, &previous)
            .context("cannot use the secrets key")?;
        Ok(Some(Arc::new(keys)))
    }
}

/// Runs the parsed command line.
pub fn main(cli: Cli) -> anyhow::Result<ExitCode> {
    let data_dir = data_dir(cli.data_dir)?;
    // Set once, before any command reads it.
    let _ = STORE.set(cli.store);
    let _ = STORE_POOL.set(cli.store_pool.map(usize::from));
    remote::set_credentials(remote::Credentials {
        token: cli.token,
        tenant: cli.as_tenant,
        ca_cert: cli.ca_cert,
    });
    match cli.command {
        Command::Run(args) => run(&data_dir, args),
        Command::Check { workflow, plugins } => {
            check::check(&data_dir, &workflow, plugins.as_deref())
        }
        Command::Schema { format } => {
            let schema = match format {
                SchemaFormat::Workflow => model::workflow_schema(),
                SchemaFormat::Test => model::cases::test_schema(),
            };
            out!("{}", serde_json::to_string_pretty(&schema)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Runs(command) => runs::main(&data_dir, command),
        Command::Test(args) => test::main(&data_dir, args),
        Command::Workflows(command) => workflows::main(&data_dir, command),
        Command::Schedules(command) => schedules::main(&data_dir, command),
        Command::Snapshots(command) => snapshots::main(&data_dir, command),
        Command::Serve(args) => serve::serve(&data_dir, args),
        Command::Start(args) => serve::start(&data_dir, args),
        Command::Act(args) => remote::act(&data_dir, args),
        Command::Tail(args) => remote::tail(&data_dir, args),
        Command::Tenants(command) => access::tenants(&data_dir, command),
        Command::Tokens(command) => access::tokens(&data_dir, command),
        Command::Secrets(command) => access::secrets(&data_dir, command),
        Command::Audit(args) => access::audit(&data_dir, args),
        Command::Deliveries(command) => remote::deliveries(&data_dir, command),
        Command::Subscriptions(command) => remote::subscriptions(&data_dir, command),
        Command::Plugin(command) => plugin::main(&data_dir, command),
        Command::Deploy { workflow, server } => plugin::deploy(&data_dir, &workflow, server),
        Command::Sim(args) => sim::main(&args, Location::of(&data_dir).postgres()),
        Command::Store(command) => store::main(&data_dir, command),
        Command::Doctor => doctor(&data_dir),
        Command::Gc(args) => gc(&data_dir, &args),
        Command::Backup { file } => backup(&data_dir, &file),
        Command::Restore { file } => restore(&data_dir, &file),
        Command::Bench(args) => {
            let plugins = plugins_dir(&data_dir, &args.plugins.plugins);
            bench::main(&plugins, &args, Location::of(&data_dir).postgres())
        }
    }
}

fn run(data_dir: &std::path::Path, args: RunArgs) -> anyhow::Result<ExitCode> {
    let workflow = match model::load(&args.workflow) {
        Ok(workflow) => workflow,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    // An answer reaches a serving host only (`weft act`): a wait that every
    // run reaches (a top-level `await` without `if:`) with no timeout of its
    // own or of the workflow would hold `weft run` forever. A nested one
    // may not be reached; the progress line says what it waits for.
    let forever = workflow.steps.iter().find(|step| {
        workflow.timeout.is_none()
            && step.condition.is_none()
            && matches!(&step.kind, weft::model::StepKind::Await(wait) if wait.timeout.is_none())
    });
    if let Some(step) = forever {
        eprintln!(
            "error: step `{step}` is an `await` without a timeout, and `weft run` cannot take its answer: it would wait forever. Serve the workflow instead (put it in DATA_DIR/workflows, or pass --workflows DIR): `weft serve`, then `weft start {workflow}` and `weft act RUN {step} complete --output JSON`",
            step = step.id,
            workflow = workflow.id,
        );
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    let input = match read_input("--input", &args.input) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let host = local_host(data_dir, &args.plugins)?;
    let engine = host.engine();
    if workflow
        .all_steps()
        .iter()
        .any(|step| step.subflow().is_some())
    {
        engine.set_workflows(sibling_workflows(&args.workflow));
    }
    let progress = progress::Progress::new();
    let run = match engine
        .start(Arc::new(workflow), input, Box::new(progress.clone()))
        .and_then(|handle| Ok(wait_here_or_elsewhere(engine, handle)?))
    {
        Ok(run) => run,
        Err(
            e @ (StartError::Input { .. }
            | StartError::Plugin { .. }
            | StartError::Reach { .. }
            | StartError::Subflow { .. }
            | StartError::Snapshot { .. }),
        ) => {
            progress.clear();
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_INVALID));
        }
        Err(e) => {
            progress.clear();
            return Err(e).context("the run could not be recorded");
        }
    };
    progress.clear();
    report(&run)
}

/// Waits for a run this process drives; it may also end in another
/// process (`weft runs cancel`) while it sleeps here, which the store
/// tells.
fn wait_here_or_elsewhere(
    engine: &Engine,
    mut handle: weft::engine::RunHandle,
) -> Result<weft::store::RunRecord, weft::store::StoreError> {
    handle.recorded()?;
    loop {
        if let Some(run) = handle.wait_timeout(std::time::Duration::from_secs(1))? {
            return Ok(run);
        }
        if let Some(run) = engine.store().run(handle.id())?
            && run.state.is_terminal()
        {
            return Ok(run);
        }
    }
}

/// Prints a finished run's outputs, or why it failed, and picks the exit
/// status.
fn report(run: &weft::store::RunRecord) -> anyhow::Result<ExitCode> {
    match run.state {
        RunState::Succeeded => {
            let outputs = run.outputs.as_ref().unwrap_or(&Value::Null);
            out!("{}", serde_json::to_string_pretty(outputs)?);
            Ok(ExitCode::SUCCESS)
        }
        state => {
            match &run.error {
                Some(failure) => {
                    let at = failure
                        .step
                        .as_deref()
                        .map(|s| format!("step `{s}`"))
                        .unwrap_or_else(|| "its outputs".to_owned());
                    eprintln!(
                        "error: run {} failed at {at}: {}: {}",
                        run.id, failure.error.code, failure.error.message
                    );
                    if let Some(details) = &failure.error.details {
                        eprintln!("details: {details}");
                    }
                }
                None => eprintln!("error: run {} ended {state}", run.id),
            }
            eprintln!("see: weft runs show {}", run.id);
            Ok(ExitCode::from(EXIT_FAILED))
        }
    }
}

/// The workflows `subflow` steps of the workflow in file `path` may start:
/// those defined in the same directory. Files there that do not load are
/// reported and left out.
fn sibling_workflows(path: &std::path::Path) -> Arc<WorkflowDir> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    match WorkflowDir::load(dir) {
        Ok((workflows, errors)) => {
            for error in errors {
                eprintln!("warning: subflows cannot use {error}");
            }
            Arc::new(workflows)
        }
        Err(e) => {
            eprintln!("warning: cannot read {} for subflows: {e}", dir.display());
            Arc::new(WorkflowDir::default())
        }
    }
}

/// `weft runs resume`: picks interrupted runs up where they stopped.
fn resume(
    data_dir: &std::path::Path,
    run_id: Option<String>,
    all: bool,
    plugins: &PluginArgs,
) -> anyhow::Result<ExitCode> {
    let host = local_host(data_dir, plugins)?;
    let engine = host.engine();
    // A paused run is resumed: taken in here and driven to its end.
    if let Some(id) = run_id.as_deref().filter(|_| !all)
        && let Some(run) = engine.store().run(id)?
        && run.paused.is_some()
    {
        engine.set_workflows(sibling_workflows(std::path::Path::new(&run.origin)));
        let progress = progress::Progress::new();
        let outcome = engine.unpause(id, Box::new(progress.clone()));
        progress.clear();
        return match outcome {
            Ok(Some(handle)) => report(&handle.wait().context("the run could not be recorded")?),
            Ok(None) => {
                out!("run {id} resumed; another host drives it");
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("error: {e}");
                Ok(ExitCode::from(EXIT_INVALID))
            }
        };
    }
    let ids: Vec<String> = match run_id {
        Some(id) if !all => vec![id],
        // Runs suspended on their timers too: they resume waiting.
        _ => engine
            .store()
            .runs(
                &weft::store::RunFilter {
                    state: Some(RunState::Running),
                    ..Default::default()
                },
                usize::MAX,
            )?
            .into_iter()
            .rev()
            // A paused run waits for `weft runs resume RUN`.
            .filter(|run| run.paused.is_none())
            .map(|run| run.id)
            .collect(),
    };
    if ids.is_empty() {
        eprintln!("no interrupted runs in {}", data_dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    // Steps not yet run may start subflows: from beside the definition.
    if let Some(first) = engine.store().run(&ids[0])? {
        engine.set_workflows(sibling_workflows(std::path::Path::new(&first.origin)));
    }
    let mut worst = ExitCode::SUCCESS;
    for id in ids {
        let progress = progress::Progress::new();
        let outcome = host
            .resume(&id, Box::new(progress.clone()))
            .and_then(|handle| Ok(handle.wait()?));
        progress.clear();
        match outcome {
            Ok(run) => {
                let code = report(&run)?;
                if code != ExitCode::SUCCESS {
                    worst = code;
                }
            }
            // A child resumed by its parent, which ran it to its end.
            Err(
                weft::engine::ResumeError::Resident(_)
                | weft::engine::ResumeError::NotRunning { .. },
            ) if all => {}
            Err(e @ weft::engine::ResumeError::Store(_)) => {
                return Err(e).context("the run could not be recorded");
            }
            Err(e) => {
                eprintln!("error: cannot resume run {id}: {e}");
                worst = ExitCode::from(EXIT_INVALID);
            }
        }
    }
    Ok(worst)
}

/// `weft runs pause` without a server: a run that waits (suspended) is
/// paused in the store; one a server drives is paused through it.
fn pause(data_dir: &std::path::Path, id: &str) -> anyhow::Result<ExitCode> {
    let host = maintenance_host(data_dir)?;
    match host.services().pause_run(id, "cli") {
        Ok(_) => {
            out!("run {id} paused");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}

/// `weft runs retry` without a server: the run goes on here, to its end.
fn retry(
    data_dir: &std::path::Path,
    id: &str,
    from: Option<&str>,
    plugins: &PluginArgs,
) -> anyhow::Result<ExitCode> {
    let host = local_host(data_dir, plugins)?;
    let engine = host.engine();
    // A step run again may start a subflow: from beside the definition.
    if let Some(run) = engine.store().run(id)? {
        engine.set_workflows(sibling_workflows(std::path::Path::new(&run.origin)));
    }
    engine.replay_outbox()?;
    let progress = progress::Progress::new();
    let outcome = engine.retry(id, from, "cli", Box::new(progress.clone()));
    let run = match outcome {
        Ok(handle) => handle.wait(),
        Err(e) => {
            progress.clear();
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    progress.clear();
    report(&run.context("the run could not be recorded")?)
}

/// A host over the data directory's store that drives only its own runs.
fn local_host(data_dir: &std::path::Path, plugins: &PluginArgs) -> anyhow::Result<Host> {
    Host::start(host_config(data_dir, plugins, EngineConfig::default())?)
        .context("cannot start the engine")
}

/// A host in maintenance over the data directory's store: how the
/// commands that change a store without a server reach the service layer
/// (`Host::services`), as `weft serve`'s API does.
fn maintenance_host(data_dir: &std::path::Path) -> anyhow::Result<Host> {
    maintenance_host_with(data_dir, &None)
}

/// [`maintenance_host`], its plugins directory `plugins` (`--plugins`)
/// rather than DATA_DIR/plugins.
fn maintenance_host_with(
    data_dir: &std::path::Path,
    plugins: &Option<PathBuf>,
) -> anyhow::Result<Host> {
    let runtime = local_runtime(data_dir)?;
    let store = open_store(data_dir)?;
    let plugins = PluginDir::new(runtime, plugins_dir(data_dir, plugins));
    Host::start(HostConfig::maintenance(
        store,
        plugins,
        Arc::new(SystemClock),
    ))
    .context("cannot open the store")
}

/// What a host over the data directory is made of.
fn host_config(
    data_dir: &std::path::Path,
    plugins: &PluginArgs,
    config: EngineConfig,
) -> anyhow::Result<HostConfig> {
    let runtime = local_runtime(data_dir)?;
    let store = open_store(data_dir)?;
    let config = EngineConfig {
        egress: plugins.egress()?,
        secrets: plugins.secrets_keys()?,
        ..config
    };
    Ok(HostConfig::local(
        store,
        PluginDir::new(runtime, plugins_dir(data_dir, &plugins.plugins)),
        Arc::new(SystemClock),
    )
    .with_engine(config))
}

/// The largest input `weft run` reads.
const MAX_INPUT: u64 = 64 << 20;

/// The JSON value that option `flag` (`--input`, `--output`) gives as
/// `arg`: JSON text, `@FILE` or `-` for stdin.
fn read_input(flag: &str, arg: &str) -> anyhow::Result<Value> {
    let read_capped = |reader: &mut dyn Read, from: &str| -> anyhow::Result<String> {
        let mut text = String::new();
        reader
            .take(MAX_INPUT + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("{flag}: cannot read {from}"))?;
        if text.len() as u64 > MAX_INPUT {
            bail!("{flag}: {from} is larger than {} MiB", MAX_INPUT >> 20);
        }
        Ok(text)
    };
    let (text, from) = if arg == "-" {
        (
            read_capped(&mut std::io::stdin(), "stdin")?,
            "stdin".to_owned(),
        )
    } else if let Some(path) = arg.strip_prefix('@') {
        let mut file = std::fs::File::open(path)
            .with_context(|| format!("{flag}: cannot read the file {path}"))?;
        (read_capped(&mut file, path)?, path.to_owned())
    } else {
        (arg.to_owned(), "the text given".to_owned())
    };
    serde_json::from_str(&text).with_context(|| format!("{flag}: {from} is not valid JSON"))
}

fn data_dir(flag: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = match flag {
        Some(dir) => dir,
        None => match dirs::data_local_dir() {
            Some(base) => base.join("weft"),
            None => bail!("cannot tell where to keep data; pass --data-dir or set WEFT_DATA_DIR"),
        },
    };
    // The store, its backups and the compiled-code cache (which the host
    // loads as native code) are the owner's alone.
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(&dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    Ok(dir)
}

/// A `--plugins DIR` that does not exist is said, not passed over: its
/// plugins would come from the registry, perhaps an older build.
fn plugins_dir(data_dir: &std::path::Path, flag: &Option<PathBuf>) -> PathBuf {
    match flag {
        Some(dir) => {
            if !dir.is_dir() {
                eprintln!(
                    "warning: --plugins {}: no such folder; plugins come from the registry only (what `weft plugin add` and earlier folders stored)",
                    dir.display()
                );
            }
            dir.clone()
        }
        None => data_dir.join("plugins"),
    }
}

/// A runtime with this data directory's compiled-code cache.
fn local_runtime(data_dir: &std::path::Path) -> anyhow::Result<Runtime> {
    Ok(Runtime::new(RuntimeConfig {
        cache_dir: Some(cache_dir(data_dir)),
        ..RuntimeConfig::default()
    })?)
}

/// Where compiled code is cached: WEFT_CACHE_DIR, else DATA_DIR/cache.
fn cache_dir(data_dir: &std::path::Path) -> PathBuf {
    std::env::var_os("WEFT_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| data_dir.join("cache"))
}

/// True when `error` is a closed stdout: the reader has gone, and there is
/// nobody left to tell.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// How logs read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people.
    Text,
    /// One JSON object a line.
    Json,
}

/// What the host's own spans are sent with, while it runs: shut down at
/// the end, to send what is left.
pub type SpanExport = Option<weft::traces::SdkTracerProvider>;

impl Cli {
    /// The collector `weft serve --otlp-endpoint` sends to.
    pub fn otlp_endpoint(&self) -> Option<&str> {
        match &self.command {
            Command::Serve(args) => args.otlp_endpoint(),
            _ => None,
        }
    }
}

/// Sends logs to stderr (`WEFT_LOG` overrides the level chosen by `-v`),
/// and with `otlp` the host's own spans to that collector.
pub fn init_tracing(
    verbose: u8,
    format: LogFormat,
    otlp: Option<&str>,
) -> Result<SpanExport, String> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let default = match verbose {
        // Guest lines are in the run's record (`weft runs show`); with -v they
        // also stream here.
        0 => "warn,weft::guest=off",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    // The request spans are for the collector, never the logs (nor made
    // at all without one).
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("WEFT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    if let Ok(off) = format!("{}=off", weft::traces::HOST_SPANS).parse() {
        filter = filter.add_directive(off);
    }
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        LogFormat::Json => logs.json().with_current_span(true).boxed(),
    };
    let (spans, provider) = match otlp {
        Some(endpoint) => {
            let (layer, provider) = weft::traces::host_spans(endpoint)?;
            (Some(layer), Some(provider))
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(spans)
        .init();
    Ok(provider)
}
