//! `weft plugin`: look inside a component, and manage the registry of
//! plugins (locally, or on a running `weft serve`); `weft deploy`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use serde_json::{Value, json};
use weft::store::PluginRecord;

use super::plugin_build::{self, Lang};
use super::remote::Server;
use super::{EXIT_INVALID, PluginArgs};

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Create a plugin project from a template: it builds, and passes its
    /// own test, as it is.
    New {
        /// The plugin's name (letters, digits, `_`, `-`).
        name: String,
        /// The project's language.
        #[arg(long, value_enum)]
        lang: Lang,
        /// Where to create the project's folder.
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: PathBuf,
        /// The Rust SDK (the weft repository's guest-sdk folder); Rust only.
        /// [default: WEFT_SDK, else the one this weft was built from]
        #[arg(long, value_name = "PATH")]
        sdk: Option<PathBuf>,
    },
    /// Build a plugin project (Rust, Python or JavaScript, told by its
    /// files) into a component, check that it loads, and write it as
    /// OUT/<name>.wasm.
    Build {
        /// The project's folder.
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Where to write the component. [default: DIR/dist]
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Install the Python and JavaScript toolchains now (builds install
    /// them on first use): componentize-py from PyPI, componentize-js from
    /// npm, into WEFT_TOOLCHAINS or DATA_DIR/toolchains.
    Setup {
        /// Only these languages (`rust` adds the wasm32-wasip2 target).
        #[arg(long, value_enum)]
        lang: Vec<Lang>,
    },
    /// Print a component's name, version, contract version, digest,
    /// imports and exports (it is compiled and described, not run).
    Inspect {
        /// The component (.wasm).
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a component to the registry: the local store, or with --server
    /// a running `weft serve`, which takes it without a restart. A WASI
    /// command (a plain program: input on stdin, output on stdout) does
    /// not describe itself: give it --name and --version, which are
    /// recorded in it; a preview-1 command module is wrapped first.
    Add {
        /// The component (.wasm), or a preview-1 command module.
        file: PathBuf,
        /// The server to upload to.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
        #[command(flatten)]
        describe: Box<Describe>,
        /// Write the component, once it loads, to FILE instead of adding
        /// it (for a plugins folder, `--plugins`).
        #[arg(long, value_name = "FILE", conflicts_with = "server")]
        out: Option<PathBuf>,
        #[command(flatten)]
        plugins: PluginArgs,
    },
    /// List the registry: every plugin version, by name, newest first.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Ask a running `weft serve` instead of the local store.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
}

/// What `weft plugin add` records in a command.
#[derive(Debug, clap::Args)]
pub struct Describe {
    /// A command's name, for `uses:` (recorded in the component).
    #[arg(long, requires = "plugin_version")]
    name: Option<String>,
    /// A command's version, a semantic version such as 1.0.0.
    #[arg(
        long = "version",
        id = "plugin_version",
        value_name = "VERSION",
        requires = "name"
    )]
    plugin_version: Option<String>,
    /// A command's description, one line.
    #[arg(long, requires = "name")]
    description: Option<String>,
    /// A command's input schema: a JSON Schema file, checked on every
    /// input before the call.
    #[arg(long, value_name = "FILE", requires = "name")]
    input_schema: Option<PathBuf>,
    /// A command's output schema: a JSON Schema file, checked on every
    /// output.
    #[arg(long, value_name = "FILE", requires = "name")]
    output_schema: Option<PathBuf>,
}

/// The largest component read from a file.
const MAX_COMPONENT: u64 = 256 << 20;

fn read_component(file: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(MAX_COMPONENT + 1).read_to_end(&mut bytes))
        .with_context(|| format!("cannot read {}", file.display()))?;
    anyhow::ensure!(
        bytes.len() as u64 <= MAX_COMPONENT,
        "{} is larger than {} MiB",
        file.display(),
        MAX_COMPONENT >> 20
    );
    Ok(bytes)
}

pub fn main(data_dir: &Path, command: PluginCommand) -> anyhow::Result<ExitCode> {
    match command {
        PluginCommand::New {
            name,
            lang,
            dir,
            sdk,
        } => plugin_build::new(data_dir, &name, lang, &dir, sdk),
        PluginCommand::Build { dir, out } => plugin_build::build(data_dir, &dir, out),
        PluginCommand::Setup { lang } => plugin_build::setup(data_dir, &lang),
        PluginCommand::Inspect { file, json } => inspect(data_dir, &file, json),
        PluginCommand::Add {
            file,
            server,
            describe,
            out,
            plugins,
        } => {
            let Describe {
                name,
                plugin_version,
                description,
                input_schema,
                output_schema,
            } = *describe;
            let mut bytes = read_component(&file)?;
            if let (Some(name), Some(version)) = (name, plugin_version) {
                let schema = |path: Option<PathBuf>| -> anyhow::Result<Option<Value>> {
                    path.map(|path| {
                        let text = std::fs::read_to_string(&path)
                            .with_context(|| format!("cannot read {}", path.display()))?;
                        serde_json::from_str(&text)
                            .with_context(|| format!("{} is not JSON", path.display()))
                    })
                    .transpose()
                };
                let described = weft::runtime::Description {
                    name,
                    version,
                    description: description.unwrap_or_default(),
                    input_schema: schema(input_schema)?,
                    output_schema: schema(output_schema)?,
                };
                bytes = match weft::runtime::describe_command(&bytes, &described) {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        eprintln!("error: {} {e}", file.display());
                        return Ok(ExitCode::from(EXIT_INVALID));
                    }
                };
            }
            match (server, out) {
                (Some(url), _) => add_remote(data_dir, &file, &bytes, url),
                (None, Some(out)) => write_checked(data_dir, &file, &bytes, &out),
                (None, None) => add_local(data_dir, &file, &bytes, &plugins),
            }
        }
        PluginCommand::List { json, server } => list(data_dir, json, server),
    }
}

/// `weft plugin add FILE --server URL`: uploads the component to a running
/// `weft serve`.
fn add_remote(data_dir: &Path, file: &Path, bytes: &[u8], url: String) -> anyhow::Result<ExitCode> {
    let server = Server::new(data_dir, Some(url));
    match server.send("/v1/plugins", "application/wasm", bytes)? {
        Ok(body) => {
            print_added(&serde_json::from_value(body["plugin"].clone())?)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(message) => {
            eprintln!("error: {}: {message}", file.display());
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}

/// `weft plugin add FILE`: adds the component to the local store's
/// registry.
fn add_local(
    data_dir: &Path,
    file: &Path,
    bytes: &[u8],
    plugins: &PluginArgs,
) -> anyhow::Result<ExitCode> {
    let host = super::maintenance_host_with(data_dir, &plugins.plugins)?;
    match host
        .services()
        .add_plugin(weft::core::tenant::DEFAULT, bytes, "cli")
    {
        Ok((_, record)) => {
            print_added(&record)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {} {e}", file.display());
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}

/// `weft plugin add FILE --out OUT`: writes the component to `out` once it
/// loads, without adding it anywhere.
fn write_checked(
    data_dir: &Path,
    file: &Path,
    bytes: &[u8],
    out: &Path,
) -> anyhow::Result<ExitCode> {
    let runtime = super::local_runtime(data_dir)?;
    let plugin = match runtime.load(bytes) {
        Ok(plugin) => plugin,
        Err(e) => {
            eprintln!("error: {} {e}", file.display());
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    std::fs::write(out, bytes).with_context(|| format!("cannot write {}", out.display()))?;
    out!(
        "wrote {} ({}@{} {}, {} bytes)",
        out.display(),
        plugin.meta().name,
        plugin.meta().version,
        plugin.digest(),
        bytes.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// `weft plugin list`: the registry of a running `weft serve` with
/// `server`, else of the local store.
fn list(data_dir: &Path, json: bool, server: Option<String>) -> anyhow::Result<ExitCode> {
    let records: Vec<PluginRecord> = match server {
        Some(url) => match Server::new(data_dir, Some(url)).call("GET", "/v1/plugins", None)? {
            Ok(body) => serde_json::from_value(body["plugins"].clone())
                .context("the server's plugin list does not decode")?,
            Err(message) => {
                eprintln!("error: {message}");
                return Ok(ExitCode::from(EXIT_INVALID));
            }
        },
        None => local_plugins(data_dir)?,
    };
    print_plugins(&records, json)?;
    Ok(ExitCode::SUCCESS)
}

/// The local store's registry (empty when nothing was ever stored), by
/// name, newest version first.
fn local_plugins(data_dir: &Path) -> anyhow::Result<Vec<PluginRecord>> {
    let mut records = match super::runs::open(data_dir)? {
        Some((store, _)) => store.plugins()?,
        None => Vec::new(),
    };
    records.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| weft::plugins::newer(b, a)));
    Ok(records)
}

/// Prints the registry as JSON, or as a table (on stderr, that it is
/// empty).
fn print_plugins(records: &[PluginRecord], json: bool) -> anyhow::Result<()> {
    if json {
        out!(
            "{}",
            serde_json::to_string_pretty(&json!({ "plugins": records }))?
        );
    } else if records.is_empty() {
        eprintln!("the registry is empty");
    } else {
        out!(
            "{:<24} {:<10} {:<20} {:>10}  ORIGIN",
            "NAME",
            "VERSION",
            "DIGEST",
            "SIZE"
        );
        for r in records {
            out!(
                "{:<24} {:<10} {:<20} {:>10}  {}",
                r.name,
                r.version,
                short(&r.digest),
                r.size,
                r.origin
            );
        }
    }
    Ok(())
}

fn short(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

fn print_added(record: &PluginRecord) -> anyhow::Result<()> {
    out!(
        "added {}@{} {} ({} bytes)",
        record.name,
        record.version,
        record.digest,
        record.size
    );
    Ok(())
}

fn inspect(data_dir: &Path, file: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let bytes = read_component(file)?;
    let runtime = super::local_runtime(data_dir)?;
    let plugin = match runtime.load(&bytes) {
        Ok(plugin) => plugin,
        Err(e) => {
            eprintln!("error: {} {e}", file.display());
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let meta = plugin.meta();
    let shown = json!({
        "name": meta.name,
        "version": meta.version.to_string(),
        "description": meta.description,
        "contract": plugin.contract(),
        "kind": plugin.kind(),
        "capabilities": plugin.capabilities(),
        "digest": plugin.digest().to_string(),
        "size": bytes.len(),
        "imports": plugin.imports(),
        "exports": plugin.exports(),
        "input_schema": meta.input_schema,
        "output_schema": meta.output_schema,
    });
    if json {
        out!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(ExitCode::SUCCESS);
    }
    out!("name:        {}", meta.name);
    out!("version:     {}", meta.version);
    if !meta.description.is_empty() {
        out!("description: {}", meta.description);
    }
    match plugin.contract() {
        Some(contract) => out!("contract:    weft:plugin@{contract}"),
        None if plugin.is_handler() => out!(
            "contract:    handler (wasi:http/incoming-handler: input the request, output the \
             response; a 5xx, 429 or 408 retries)"
        ),
        None => out!(
            "contract:    command (wasi:cli/run: input JSON on stdin, output JSON on stdout; \
             exit {} retries)",
            weft::runtime::EXIT_RETRYABLE
        ),
    }
    let capabilities = plugin.capabilities();
    out!(
        "capabilities: {}",
        if capabilities.is_empty() {
            "none".to_owned()
        } else {
            capabilities.join(", ")
        }
    );
    if plugin.imports_http() && plugin.is_handler() {
        out!(
            "             (http: a request it makes is refused unless its step grants \
             `allow: {{http: [...]}}`)"
        );
    } else if plugin.imports_http() {
        out!("             (http: a workflow must grant its steps `allow: {{http: [...]}}`)");
    }
    out!("digest:      {}", plugin.digest());
    out!("size:        {} bytes", bytes.len());
    out!("imports:");
    for name in plugin.imports() {
        out!("  {name}");
    }
    out!("exports:");
    for name in plugin.exports() {
        out!("  {name}");
    }
    for (label, schema) in [
        ("input", &meta.input_schema),
        ("output", &meta.output_schema),
    ] {
        if let Some(schema) = schema {
            out!("{label} schema: {}", serde_json::to_string(schema)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `weft deploy FILE`: sends a workflow definition to a running `weft
/// serve`, which serves it as the newest version of its id.
pub fn deploy(data_dir: &Path, file: &Path, server: Option<String>) -> anyhow::Result<ExitCode> {
    let text = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let is_json = file
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
    let content_type = if is_json {
        "application/json"
    } else {
        "application/yaml"
    };
    let server = Server::new(data_dir, server);
    match server.send("/v1/workflows", content_type, &text)? {
        Ok(body) => {
            let workflow: &Value = &body["workflow"];
            let what = if body["unchanged"] == json!(true) {
                "unchanged"
            } else {
                "deployed"
            };
            out!(
                "{what} {} revision {} ({})",
                workflow["id"].as_str().unwrap_or("?"),
                workflow["revision"],
                workflow["digest"].as_str().unwrap_or("?")
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(message) => {
            eprintln!("error: {}: {message}", file.display());
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}
