//! `weft serve` and `weft start`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use weft::plugins::ResolveError;
use weft::store::RunRecord;
use weft::{Host, HostEvents, Plugin, WorkflowDir};

use super::remote::{Heard, Server, Watching};
use super::{EXIT_INVALID, PluginArgs, host_config, read_input, report};

/// The address `weft serve` listens on unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Serve every workflow file (.yaml, .yml, .json) in this directory;
    /// a file written there while serving is deployed as it lands.
    /// [default: DATA_DIR/workflows, created if missing]
    #[arg(long, value_name = "DIR")]
    workflows: Option<PathBuf>,

    /// Where to listen. Port 0 picks a free port; the address is written to
    /// DATA_DIR/serve.addr either way.
    /// An address other than loopback needs --auth.
    /// `localhost:PORT` is 127.0.0.1:PORT.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN, value_parser = listen_addr)]
    listen: SocketAddr,

    /// Require `Authorization: Bearer <token>` on every request, even while
    /// no token exists yet (make the first with `weft tokens create`
    /// against the store, before serving). Without it, a host on loopback
    /// with no token in its store serves every request as an admin of
    /// tenant `default`; once any token exists, every request needs one.
    #[arg(long)]
    auth: bool,

    /// Serve HTTPS (rustls) with this PEM certificate chain; needs
    /// --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,

    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,

    /// Serve --auth's bearer tokens over plain HTTP on an address other
    /// than loopback (behind a proxy that ends TLS, say). Without it, such
    /// an address needs --tls-cert.
    #[arg(long, conflicts_with = "tls_cert")]
    insecure_http: bool,

    /// Connections open at once; more wait until one closes. A client has
    /// 10 s to send a request's header, from its connection's opening or
    /// its previous response.
    #[arg(long, value_name = "N", default_value_t = super::listen::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,

    /// Runs in progress at once; more are recorded, parked, and started in
    /// arrival order as places free.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_resident: usize,

    /// How long this host's leases on its runs hold if it stops renewing
    /// them (it renews three times as often). Another `weft serve` on the
    /// same data directory takes its runs over once they lapse, or at once
    /// if this process is seen to be gone.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = lease_ttl)]
    lease_ttl: std::time::Duration,

    /// Send each run as an OpenTelemetry trace (its attempts as spans, its
    /// waits and retries as events) to this OTLP/HTTP collector, such as
    /// http://127.0.0.1:4318 (JSON over plain HTTP).
    #[arg(long, value_name = "URL", env = "WEFT_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,

    #[command(flatten)]
    retain: super::RetainArgs,

    #[command(flatten)]
    plugins: PluginArgs,
}

/// A lease's length: a duration of at least 300 ms.
fn lease_ttl(text: &str) -> Result<std::time::Duration, String> {
    let ttl = weft::clock::parse_duration(text)?;
    if ttl < std::time::Duration::from_millis(300) {
        return Err(format!("`{text}` is shorter than the least lease, 300ms"));
    }
    Ok(ttl)
}

#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// The id of a workflow the server serves.
    workflow: String,

    /// The run's input: JSON text, `@FILE` to read a file, or `-` for stdin.
    #[arg(long, short, default_value = "{}", value_name = "JSON|@FILE|-")]
    input: String,

    /// The server. [default: the address in DATA_DIR/serve.addr, else
    /// http://127.0.0.1:7420]
    #[arg(long, value_name = "URL")]
    server: Option<String>,

    /// Wait for the run to end and print its outputs, as `weft run` does.
    #[arg(long)]
    wait: bool,

    /// Print the server's answer as JSON (without --wait) instead of the
    /// run's id.
    #[arg(long)]
    json: bool,
}

/// Runs the host until interrupted: resumes interrupted runs, then serves
/// the HTTP API.
impl ServeArgs {
    /// The collector spans are sent to.
    pub(super) fn otlp_endpoint(&self) -> Option<&str> {
        self.otlp_endpoint.as_deref()
    }
}

/// `--listen`: an IP address and port, or `localhost:PORT` (IPv4's
/// loopback); other host names are not resolved, so that what a host
/// listens on does not depend on a name service.
fn listen_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    match text.rsplit_once(':') {
        Some((host, port)) if host.eq_ignore_ascii_case("localhost") => port
            .parse::<u16>()
            .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
            .map_err(|_| format!("`{port}` is not a port (0 to 65535)")),
        _ => Err(
            "expected IP:PORT, such as 127.0.0.1:7614, [::1]:7614, 0.0.0.0:7614 or localhost:7614"
                .to_owned(),
        ),
    }
}

pub fn serve(data_dir: &Path, args: ServeArgs) -> anyhow::Result<ExitCode> {
    if !args.listen.ip().is_loopback() && !args.auth {
        eprintln!(
            "error: --listen {}: an address other than loopback needs --auth, so that every request carries a token; make the first one with `weft tokens create --local --role admin`",
            args.listen
        );
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    let own_loopback = matches!(args.listen.ip().to_string().as_str(), "127.0.0.1" | "::1");
    if args.listen.ip().is_loopback() && !own_loopback && !args.auth {
        eprintln!(
            "error: --listen {}: a host without tokens answers only requests addressed to localhost, 127.0.0.1 or [::1]; listen on 127.0.0.1 or ::1, or serve with --auth",
            args.listen
        );
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    if !args.listen.ip().is_loopback() && args.tls_cert.is_none() && !args.insecure_http {
        eprintln!(
            "error: --listen {}: tokens would cross the network in plain text; serve HTTPS with --tls-cert and --tls-key, or say --insecure-http (behind a proxy that ends TLS)",
            args.listen
        );
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    let workflows_dir = match &args.workflows {
        Some(dir) => dir.clone(),
        None => {
            let dir = data_dir.join("workflows");
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            dir
        }
    };
    let (files, errors) = WorkflowDir::load(&workflows_dir).with_context(|| {
        format!(
            "cannot read the workflows directory {}",
            workflows_dir.display()
        )
    })?;
    for error in &errors {
        eprintln!("warning: not serving {error}");
    }
    let config = weft::engine::EngineConfig {
        max_resident: args.max_resident,
        lease_ttl: args.lease_ttl,
        metrics: Some(Arc::default()),
        ..weft::engine::EngineConfig::default()
    };
    let config = host_config(data_dir, &args.plugins, config)?
        .serving_dir(files, workflows_dir.clone())
        .retaining(args.retain.retention())
        .with_events(Arc::new(Operator));
    let host = Host::start(config).context("cannot start the host")?;
    for warning in host.warnings() {
        eprintln!("warning: not serving {warning}");
    }
    if let Some(endpoint) = &args.otlp_endpoint
        && let Err(message) = weft::traces::start(host.engine(), endpoint)
    {
        eprintln!("error: {message}");
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let tls = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(tls_config(cert, key).await?),
            _ => None,
        };
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let addr = listener.local_addr()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{addr}");
        let addr_file = data_dir.join("serve.addr");
        if let Ok(before) = std::fs::read_to_string(&addr_file)
            && before.trim() != url
        {
            eprintln!(
                "warning: {} named {} (another weft serve on this data directory, or one that was killed); it now names {url}, which commands without --server reach",
                addr_file.display(),
                before.trim()
            );
        }
        std::fs::write(&addr_file, format!("{url}\n"))
            .with_context(|| format!("cannot write {}", addr_file.display()))?;
        eprintln!(
            "weft serving {} workflow(s) on {url}; {} interrupted run(s) resumed",
            host.deployments().current().iter().count(),
            host.resumed()
        );
        // Tokens revoked or expired open nothing.
        let now = host.engine().clock().now();
        let usable = |t: &weft::store::TokenRecord| {
            t.revoked_at.is_none() && t.expires_at.is_none_or(|at| at > now)
        };
        if args.auth
            && host
                .engine()
                .store()
                .tokens()
                .is_ok_and(|tokens| !tokens.iter().any(usable))
        {
            eprintln!(
                "warning: --auth and no token that is not revoked or expired: every request is refused; make one with `weft tokens create --local --role admin` (it can run beside this serve)"
            );
        }
        let api = if args.auth {
            host.api().require_auth()
        } else {
            host.api()
        };
        let stopped = {
            // Open event streams end when the hub stops.
            let hub = host.hub().clone();
            async move {
                stop_signal().await;
                hub.stop();
            }
        };
        super::listen::serve(
            listener,
            api.router(),
            tls.map(|config| config.get_inner()),
            args.max_connections,
            stopped,
        )
        .await;
        host.stop();
        // Removed only while it names this serve: another may have taken
        // it over since.
        if std::fs::read_to_string(&addr_file).is_ok_and(|now| now.trim() == url) {
            let _ = std::fs::remove_file(&addr_file);
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Waits for SIGINT (Ctrl-C) or SIGTERM (what service managers and
/// `kill` send): either stops the serve the same way.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The TLS configuration of `weft serve --tls-cert CERT --tls-key KEY`:
/// rustls, with the ring provider.
async fn tls_config(
    cert: &Path,
    key: &Path,
) -> anyhow::Result<axum_server::tls_rustls::RustlsConfig> {
    // Installed once per process; a second install is refused, harmlessly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
        .await
        .with_context(|| {
            format!(
                "--tls-cert {} --tls-key {}: not a PEM certificate chain and its private key",
                cert.display(),
                key.display()
            )
        })
}

/// Tells the operator, on stderr, what happened to each plugin file.
#[derive(Debug)]
struct Operator;

impl HostEvents for Operator {
    fn plugin_ready(&self, plugin: &Plugin, file: &Path) {
        eprintln!(
            "plugin {}@{} {} from {} is ready",
            plugin.meta().name,
            plugin.meta().version,
            plugin.digest(),
            file.display()
        );
    }

    fn plugin_rejected(&self, file: &Path, error: &ResolveError) {
        eprintln!(
            "warning: rejected plugin file {}: {error}; the registry's versions keep serving",
            file.display()
        );
    }

    fn plugin_not_served(&self, file: &Path, error: &ResolveError) {
        eprintln!("warning: not serving plugin {}: {error}", file.display());
    }

    fn not_watching(&self, dir: &Path, error: &str) {
        eprintln!(
            "warning: not watching {} for plugins: {error}",
            dir.display()
        );
    }

    fn workflow_deployed(&self, record: &weft::store::DeploymentRecord, file: &Path) {
        eprintln!(
            "workflow {} revision {} deployed from {}; new runs start on it",
            record.workflow,
            record.revision,
            file.display()
        );
    }

    fn workflow_rejected(&self, file: &Path, error: &weft::DeployError) {
        eprintln!(
            "warning: not deploying {}: {error}; the revision served before keeps serving until the next start",
            file.display()
        );
    }
}

/// Starts a run on a running `weft serve`.
pub fn start(data_dir: &Path, args: StartArgs) -> anyhow::Result<ExitCode> {
    let input = match read_input("--input", &args.input) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let server = Server::new(data_dir, args.server);
    let body = match server.call(
        "POST",
        "/v1/runs",
        Some(serde_json::json!({ "workflow": args.workflow, "input": input })),
    )? {
        Ok(body) => body,
        Err(message) => {
            eprintln!("error: {message}");
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let Some(id) = body["id"].as_str() else {
        bail!("{} answered without a run id: {body}", server.url());
    };
    if !args.wait {
        // The id alone on stdout (`RUN=$(weft start ...)`), what to do next
        // on stderr.
        if args.json {
            out!("{}", serde_json::to_string_pretty(&body)?);
        } else {
            out!("{id}");
        }
        let again = if body["existing"] == true {
            " (started before, with this idempotency key)"
        } else {
            ""
        };
        eprintln!(
            "run {id} of {} started on {}{again}; follow it with `weft runs watch {id}`",
            args.workflow,
            server.url()
        );
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("run {id} of {} started on {}", args.workflow, server.url());
    // The run is read once the stream is open, again when it says the run
    // ended (or that events were lost), and at each keep-alive: an end
    // before the stream opened is seen too, and so is one on another host
    // of a shared store, whose events this stream does not carry.
    let mut ended = None;
    super::remote::watch(&server, &format!("run={id}&kind=ended,waiting"), |heard| {
        // A wait is said, with how to answer an `await`.
        if let Heard::Event("waiting", event) = heard {
            let path = event["step"]["path"].as_str().unwrap_or("?");
            if event["step"]["awaiting"] == true {
                eprintln!(
                    "run {id} waits at {path} for an answer: `weft act {id} {path} complete --output JSON` (or fail, skip)"
                );
            } else {
                eprintln!("run {id} waits at {path}");
            }
            return Ok(Watching::More);
        }
        if let Heard::Event(name, _) = heard
            && name != "ended"
            && name != "reset"
        {
            return Ok(Watching::More);
        }
        let shown = match server.call("GET", &format!("/v1/runs/{id}"), None)? {
            Ok(shown) => shown,
            Err(message) => bail!("{message}"),
        };
        let run: RunRecord = serde_json::from_value(shown["run"].clone()).with_context(|| {
            format!("{} answered with a run that does not decode", server.url())
        })?;
        if !run.state.is_terminal() {
            return Ok(Watching::More);
        }
        ended = Some(run);
        Ok(Watching::Done)
    })?;
    match ended {
        Some(run) => report(&run),
        None => bail!(
            "the event stream of {} ended before run {id} did",
            server.url()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::listen_addr;

    #[test]
    fn listen_takes_an_address_or_localhost() {
        assert_eq!(
            listen_addr("127.0.0.1:7614"),
            Ok(([127, 0, 0, 1], 7614).into())
        );
        assert_eq!(listen_addr("localhost:0"), Ok(([127, 0, 0, 1], 0).into()));
        assert_eq!(listen_addr("LOCALHOST:80"), Ok(([127, 0, 0, 1], 80).into()));
        assert_eq!(
            listen_addr("[::1]:7614").map(|a| a.ip().is_loopback()),
            Ok(true)
        );
        assert!(
            listen_addr("localhost:http")
                .unwrap_err()
                .contains("not a port")
        );
        assert!(
            listen_addr("example.com:1")
                .unwrap_err()
                .contains("IP:PORT")
        );
        assert!(listen_addr("7614").unwrap_err().contains("IP:PORT"));
    }
}
