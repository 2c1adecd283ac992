//! Commands that talk to a running `weft serve` over its HTTP API: `weft
//! act`, `weft tail`, `weft deliveries`, and `weft runs ... --server`.

use std::io::BufRead;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use serde_json::{Value, json};

use super::EXIT_INVALID;
use super::serve::DEFAULT_LISTEN;

/// The token (`--token`, `WEFT_TOKEN`) and the tenant to act in
/// (`--as-tenant`, `WEFT_AS_TENANT`) every request to a server carries.
static CREDENTIALS: std::sync::OnceLock<Credentials> = std::sync::OnceLock::new();

/// What identifies this client to a server.
#[derive(Debug, Default)]
pub struct Credentials {
    /// Sent as `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Sent as `Weft-Tenant`: the tenant an admin acts in.
    pub tenant: Option<String>,
    /// The PEM certificate an `https://` server's certificate must chain
    /// to (a self-signed one, say); default: the web's public roots.
    pub ca_cert: Option<std::path::PathBuf>,
}

/// An HTTP client for a server, which answers error statuses as answers
/// and trusts `--ca-cert` when given.
pub fn agent(timeout: Option<Duration>) -> anyhow::Result<ureq::Agent> {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(timeout);
    if let Some(path) = CREDENTIALS.get().and_then(|c| c.ca_cert.as_ref()) {
        let pem = std::fs::read(path)
            .with_context(|| format!("--ca-cert: cannot read {}", path.display()))?;
        let cert = ureq::tls::Certificate::from_pem(&pem).map_err(|e| {
            anyhow::anyhow!("--ca-cert {}: not a PEM certificate: {e}", path.display())
        })?;
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::new_with_certs(&[cert]))
                .build(),
        );
    }
    Ok(config.build().into())
}

/// Sets what every request carries; the first call wins.
pub fn set_credentials(credentials: Credentials) {
    let _ = CREDENTIALS.set(credentials);
}

/// `request` with this client's token and tenant headers.
pub fn authorized<B>(request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
    let Some(credentials) = CREDENTIALS.get() else {
        return request;
    };
    let mut request = request;
    if let Some(token) = &credentials.token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(tenant) = &credentials.tenant {
        request = request.header("weft-tenant", tenant);
    }
    request
}

/// The address of the `weft serve` that holds this data directory
/// (`DATA_DIR/serve.addr`), when it answers its health check: commands that
/// change runs, or list them, go through it then, meeting its tokens and
/// its leases, instead of writing or reading the store beside it. A file
/// left by a serve that is gone (killed) names nothing that answers.
pub fn live_serve(data_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(data_dir.join("serve.addr")).ok()?;
    let url = text.trim().trim_end_matches('/');
    let url = if url.contains("://") {
        url.to_owned()
    } else {
        format!("http://{url}")
    };
    let agent = agent(Some(Duration::from_secs(2))).ok()?;
    let answer = agent.get(format!("{url}/v1/health")).call().ok()?;
    // 503 is a serve whose store fails for now: it still holds it.
    matches!(answer.status().as_u16(), 200 | 503).then_some(url)
}

/// A `weft serve` to talk to.
pub struct Server {
    url: String,
    agent: ureq::Agent,
}

impl Server {
    /// `url`, or the address in DATA_DIR/serve.addr, else the default.
    pub fn new(data_dir: &Path, url: Option<String>) -> Self {
        let url = url.unwrap_or_else(|| {
            std::fs::read_to_string(data_dir.join("serve.addr"))
                .map(|text| text.trim().to_owned())
                .unwrap_or_else(|_| format!("http://{DEFAULT_LISTEN}"))
        });
        let agent = agent(Some(Duration::from_secs(60))).unwrap_or_else(|e| {
            // A bad --ca-cert: say so, and go on with the public roots (the
            // request then fails on the server's certificate).
            eprintln!("warning: {e:#}");
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(60)))
                .build()
                .into()
        });
        // `127.0.0.1:7614` means the plain HTTP server there, as curl reads
        // it.
        let url = if url.contains("://") {
            url
        } else {
            format!("http://{url}")
        };
        Self {
            url: url.trim_end_matches('/').to_owned(),
            agent,
        }
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Sends a request; `Ok(Err(message))` for an error answer.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Result<Value, String>> {
        let url = format!("{}{path}", self.url);
        self.patiently(|| match (method, &body) {
            ("POST", Some(body)) => authorized(self.agent.post(&url)).send_json(body),
            ("POST", None) => authorized(self.agent.post(&url)).send_empty(),
            ("PUT", Some(body)) => authorized(self.agent.put(&url)).send_json(body),
            ("DELETE", _) => authorized(self.agent.delete(&url)).call(),
            _ => authorized(self.agent.get(&url)).call(),
        })
    }

    /// Sends with `send`, again after the wait a `429` with `Retry-After`
    /// asks for (at most 10 s, at most four times): a burst of deployments
    /// past a tenant's `deploys_per_second` goes through, slower.
    fn patiently(
        &self,
        mut send: impl FnMut() -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> anyhow::Result<Result<Value, String>> {
        for _ in 0..4 {
            let sent = send();
            let wait = sent.as_ref().ok().and_then(|response| {
                (response.status() == 429)
                    .then(|| response.headers().get("retry-after"))
                    .flatten()
                    .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
                    .filter(|wait| *wait <= 10)
            });
            match wait {
                Some(wait) => std::thread::sleep(std::time::Duration::from_secs(wait.max(1))),
                None => return self.answer(sent),
            }
        }
        self.answer(send())
    }

    /// POSTs `bytes` with `content_type`; `Ok(Err(message))` for an error
    /// answer.
    pub fn send(
        &self,
        path: &str,
        content_type: &str,
        bytes: &[u8],
    ) -> anyhow::Result<Result<Value, String>> {
        let url = format!("{}{path}", self.url);
        self.patiently(|| {
            authorized(self.agent.post(&url))
                .header("content-type", content_type)
                .send(bytes)
        })
    }

    /// POSTs what `reader` reads, streamed, with `content_type`;
    /// `Ok(Err(message))` for an error answer.
    pub fn send_reader(
        &self,
        path: &str,
        content_type: &str,
        reader: impl std::io::Read,
    ) -> anyhow::Result<Result<Value, String>> {
        let mut reader = reader;
        let sent = authorized(self.agent.post(format!("{}{path}", self.url)))
            .header("content-type", content_type)
            .send(ureq::SendBody::from_reader(&mut reader));
        self.answer(sent)
    }

    fn answer(
        &self,
        sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> anyhow::Result<Result<Value, String>> {
        let mut response =
            sent.with_context(|| format!("cannot reach weft serve at {}", self.url))?;
        let status = response.status();
        let body: Value = response.body_mut().read_json().with_context(|| {
            format!(
                "{} answered {status} with a body that is not JSON",
                self.url
            )
        })?;
        if status.is_success() {
            Ok(Ok(body))
        } else {
            Ok(Err(format!(
                "{} ({status} {})",
                body["error"]["message"].as_str().unwrap_or("(no message)"),
                body["error"]["code"].as_str().unwrap_or("?"),
            )))
        }
    }
}

/// Prints an error answer and gives the exit status for it.
pub(super) fn refused(message: &str) -> anyhow::Result<ExitCode> {
    eprintln!("error: {message}");
    Ok(ExitCode::from(EXIT_INVALID))
}

#[derive(Debug, clap::Args)]
pub struct ActArgs {
    /// The run's id.
    run_id: String,
    /// The `await` step's path, such as `approve` or `each[2]/approve`.
    step: String,
    /// complete, fail, skip, or cancel (the run).
    action: String,
    /// complete: the step's output (JSON text, `@FILE`, or `-`).
    #[arg(long, value_name = "JSON|@FILE|-")]
    output: Option<String>,
    /// fail: the error's code.
    #[arg(long, default_value = "rejected")]
    code: String,
    /// fail: the error's message.
    #[arg(long)]
    message: Option<String>,
    /// Print the server's answer as JSON.
    #[arg(long)]
    json: bool,
    /// The server. [default: the address in DATA_DIR/serve.addr, else
    /// http://127.0.0.1:7420]
    #[arg(long, value_name = "URL")]
    server: Option<String>,
}

/// `weft act`: answers a waiting `await` step.
pub fn act(data_dir: &Path, args: ActArgs) -> anyhow::Result<ExitCode> {
    let mut body = json!({ "action": args.action });
    match args.action.as_str() {
        "complete" => {
            // Completing with no output is said (`--output null`), not
            // taken as the default: the run's later steps read it.
            let Some(text) = &args.output else {
                return refused(
                    "complete needs the step's output: --output JSON, @FILE or - (stdin); --output null for none",
                );
            };
            body["output"] = match super::read_input("--output", text) {
                Ok(output) => output,
                Err(e) => return refused(&format!("{e:#}")),
            };
        }
        "fail" => {
            body["error"] = json!({
                "code": args.code,
                "message": args.message.unwrap_or_else(|| "rejected".to_owned()),
            });
        }
        "skip" | "cancel" => {}
        other => {
            return refused(&format!(
                "`{other}` is not an action (complete, fail, skip, cancel)"
            ));
        }
    }
    let server = Server::new(data_dir, args.server);
    let path = format!("/v1/runs/{}/steps/{}/actions", args.run_id, args.step);
    match server.call("POST", &path, Some(body))? {
        Ok(answer) if args.json => {
            out!("{}", serde_json::to_string(&answer)?);
            Ok(ExitCode::SUCCESS)
        }
        Ok(_) => {
            let (run, step) = (&args.run_id, &args.step);
            match args.action.as_str() {
                "complete" => out!("step {step} of run {run} completed; the run goes on"),
                "fail" => {
                    out!("step {step} of run {run} failed; the run goes on to its catch, or fails")
                }
                "skip" => out!("step {step} of run {run} skipped; the run goes on"),
                _ => out!("run {run} cancelled at its step {step}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(message) => refused(&message),
    }
}

#[derive(Debug, clap::Args)]
pub struct TailArgs {
    /// The channel.
    channel: String,
    /// The consumer's name: its unacked deliveries are kept for it between
    /// connections.
    #[arg(long, default_value = "default")]
    consumer: String,
    /// Print without acking: every delivery comes again on the next
    /// connection.
    #[arg(long)]
    no_ack: bool,
    /// Stop after this many deliveries.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// The server. [default: the address in DATA_DIR/serve.addr, else
    /// http://127.0.0.1:7420]
    #[arg(long, value_name = "URL")]
    server: Option<String>,
}

/// What [`watch`] does after an event.
pub enum Watching {
    /// Waits for the next one.
    More,
    /// Ends the watch.
    Done,
}

/// What [`watch`] heard.
pub enum Heard<'a> {
    /// The stream is open (again), and no event of it is read yet: what
    /// happened before is read now, and what happens after comes as
    /// events.
    Opened,
    /// An event: its name and data. A `reset` says events were lost.
    Event(&'a str, &'a Value),
    /// The server's keep-alive, every 15 s of quiet: a moment to look
    /// again at what the stream may not tell (a run another host drives).
    Quiet,
}

/// Follows `GET /v1/events?{query}` on `server`, telling `on` what it
/// hears. A stream that breaks is opened again after the last event id
/// seen, for up to 30 s; the answer of a server that refuses is an error.
pub fn watch(
    server: &Server,
    query: &str,
    mut on: impl FnMut(Heard<'_>) -> anyhow::Result<Watching>,
) -> anyhow::Result<()> {
    let agent = agent(None)?;
    let url = format!("{}/v1/events?{query}", server.url());
    let mut last: Option<String> = None;
    let mut broken_since: Option<std::time::Instant> = None;
    loop {
        let mut request = authorized(agent.get(&url)).header("accept", "text/event-stream");
        if let Some(id) = &last {
            request = request.header("last-event-id", id);
        }
        let mut response = match request.call() {
            Ok(response) => response,
            Err(e) => {
                let since = *broken_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > Duration::from_secs(30) {
                    return Err(e)
                        .with_context(|| format!("cannot reach weft serve at {}", server.url()));
                }
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
        };
        if !response.status().is_success() {
            let body: Value = response.body_mut().read_json().unwrap_or(Value::Null);
            anyhow::bail!(
                "{} refused the event stream: {}",
                server.url(),
                body["error"]["message"]
                    .as_str()
                    .unwrap_or("no reason given")
            );
        }
        broken_since = None;
        if let Watching::Done = on(Heard::Opened)? {
            return Ok(());
        }
        let reader = std::io::BufReader::new(response.into_body().into_reader());
        let (mut name, mut data, mut id) = (String::new(), String::new(), None);
        for line in reader.lines() {
            let Ok(line) = line else { break };
            if line.is_empty() {
                if !data.is_empty() {
                    let value: Value = serde_json::from_str(&data)
                        .with_context(|| format!("an event is not JSON: {data}"))?;
                    if id.is_some() {
                        last = id.take();
                    }
                    if let Watching::Done = on(Heard::Event(&name, &value))? {
                        return Ok(());
                    }
                }
                name.clear();
                data.clear();
                continue;
            }
            if line.starts_with(':') {
                if let Watching::Done = on(Heard::Quiet)? {
                    return Ok(());
                }
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line.as_str(), ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => value.clone_into(&mut name),
                "data" => {
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(value);
                }
                "id" => id = Some(value.to_owned()),
                _ => {}
            }
        }
        // The stream broke (the server went away): open it again.
        broken_since.get_or_insert_with(std::time::Instant::now);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `weft runs watch`: prints each event of `GET /v1/events?{query}`, a
/// line of text or JSON, until `count` events, or until run `until` ends.
pub fn watch_runs(
    server: &Server,
    query: &str,
    until: Option<&str>,
    count: Option<usize>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut seen = 0;
    watch(server, query, |heard| {
        let (name, event) = match heard {
            Heard::Event(name, event) => (name, event),
            // A run that ended before the stream opened (or on another
            // host, which tells its own events) ends the watch.
            Heard::Opened | Heard::Quiet => {
                let Some(id) = until else {
                    return Ok(Watching::More);
                };
                let run = match server.call("GET", &format!("/v1/runs/{id}"), None)? {
                    Ok(shown) => shown["run"].clone(),
                    Err(message) => anyhow::bail!("{message}"),
                };
                let state = run["state"].as_str().unwrap_or("running");
                if state == "running" {
                    return Ok(Watching::More);
                }
                out!("run {id} has ended: {state}");
                return Ok(Watching::Done);
            }
        };
        if json {
            out!(
                "{}",
                serde_json::to_string(&json!({ "event": name, "data": event }))?
            );
        } else if name == "reset" {
            out!(
                "(events were lost: {})",
                event["message"].as_str().unwrap_or("")
            );
        } else {
            let at = event["at"]
                .as_u64()
                .map(weft::Timestamp)
                .map(|t| t.to_string());
            let mut line = format!(
                "{} {} {} {name}",
                at.as_deref().unwrap_or("-"),
                event["run"].as_str().unwrap_or("-"),
                event["workflow"].as_str().unwrap_or("-"),
            );
            if let Some(step) = event["step"].as_object() {
                let path = step.get("path").and_then(Value::as_str).unwrap_or("-");
                let attempt = step.get("attempt").and_then(Value::as_u64).unwrap_or(1);
                line.push_str(&format!(" {path} (attempt {attempt})"));
                if let Some(error) = step.get("error").and_then(Value::as_str) {
                    line.push_str(&format!(" error {error}"));
                }
            }
            if name == "ended" {
                line.push_str(&format!(" {}", event["state"].as_str().unwrap_or("-")));
            }
            out!("{line}");
        }
        seen += 1;
        let done = count.is_some_and(|count| seen >= count) || (until.is_some() && name == "ended");
        Ok(if done { Watching::Done } else { Watching::More })
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `weft tail`: prints a channel's deliveries as they come, one JSON line
/// each, and acks each once printed.
pub fn tail(data_dir: &Path, args: TailArgs) -> anyhow::Result<ExitCode> {
    let server = Server::new(data_dir, args.server);
    let agent = agent(None)?;
    // The stream's GET makes nothing: the consumer's subscription is made
    // first if it is new (a deployer's right; a reader follows one that
    // exists, and is told so by the GET if it does not).
    let made = authorized(agent.post(format!("{}/v1/subscriptions", server.url())))
        .send_json(serde_json::json!({ "channel": args.channel, "name": args.consumer }))
        .with_context(|| format!("cannot reach weft serve at {}", server.url()))?;
    if !matches!(made.status().as_u16(), 201 | 403 | 409) {
        let mut made = made;
        let body: Value = made.body_mut().read_json().unwrap_or(Value::Null);
        return refused(body["error"]["message"].as_str().unwrap_or("refused"));
    }
    let url = format!(
        "{}/v1/channels/{}/events?consumer={}",
        server.url(),
        args.channel,
        args.consumer
    );
    let mut response = authorized(agent.get(&url))
        .header("accept", "text/event-stream")
        .call()
        .with_context(|| format!("cannot reach weft serve at {}", server.url()))?;
    if !response.status().is_success() {
        let body: Value = response.body_mut().read_json().unwrap_or(Value::Null);
        return refused(body["error"]["message"].as_str().unwrap_or("refused"));
    }
    // Only what is emitted after a subscription was made is delivered to
    // it: say what this waits for, and how to take the consumer away.
    eprintln!(
        "following channel {} as consumer {} of {}: messages emitted from its subscription on; Ctrl-C stops (`weft subscriptions remove {}/{}` removes the consumer)",
        args.channel,
        args.consumer,
        server.url(),
        args.channel,
        args.consumer
    );
    let reader = std::io::BufReader::new(response.into_body().into_reader());
    let mut seen = 0;
    for line in reader.lines() {
        let line = line.context("the event stream broke")?;
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let delivery: Value = serde_json::from_str(data.trim())
            .with_context(|| format!("an event is not JSON: {data}"))?;
        out!("{}", serde_json::to_string(&delivery)?);
        if !args.no_ack
            && let Some(id) = delivery["delivery"].as_str()
            && let Err(message) = server.call("POST", &format!("/v1/deliveries/{id}/ack"), None)?
        {
            eprintln!("warning: cannot ack {id}: {message}");
        }
        seen += 1;
        if args.count.is_some_and(|count| seen >= count) {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Subcommand)]
pub enum SubscriptionsCommand {
    /// List the subscriptions (consumers and webhooks) of the tenant.
    List {
        /// Only this channel's.
        #[arg(long)]
        channel: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// The server. [default: the address in DATA_DIR/serve.addr, else
        /// http://127.0.0.1:7420]
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
    /// Remove a subscription, `<channel>/<name>` (such as the consumer
    /// `weft tail` made): its deliveries not yet acked are dropped.
    Remove {
        /// The subscription, `<channel>/<name>`.
        key: String,
        /// The server. [default: the address in DATA_DIR/serve.addr, else
        /// http://127.0.0.1:7420]
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
}

/// `weft subscriptions`.
pub fn subscriptions(data_dir: &Path, command: SubscriptionsCommand) -> anyhow::Result<ExitCode> {
    match command {
        SubscriptionsCommand::List {
            channel,
            json,
            server,
        } => {
            let server = Server::new(data_dir, server);
            let path = match &channel {
                Some(channel) => format!("/v1/subscriptions?channel={}", encoded(channel)),
                None => "/v1/subscriptions".to_owned(),
            };
            let answer = match server.call("GET", &path, None)? {
                Ok(answer) => answer,
                Err(message) => return refused(&message),
            };
            let list = answer["subscriptions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if json {
                out!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(ExitCode::SUCCESS);
            }
            if list.is_empty() {
                out!("no subscriptions");
                return Ok(ExitCode::SUCCESS);
            }
            out!("{:<40}  {:<8}  TARGET", "SUBSCRIPTION", "KIND");
            for subscription in list {
                let target = &subscription["target"];
                let (kind, at) = match (target["kind"].as_str(), target["url"].as_str()) {
                    (Some("webhook"), Some(url)) => ("webhook", url),
                    _ => ("stream", "weft tail, or the channel's event stream"),
                };
                out!(
                    "{:<40}  {kind:<8}  {at}",
                    subscription["key"].as_str().unwrap_or("?")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        SubscriptionsCommand::Remove { key, server } => {
            let Some((channel, name)) = key.rsplit_once('/') else {
                return refused(&format!(
                    "`{key}` is not a subscription's key, `<channel>/<name>`"
                ));
            };
            let server = Server::new(data_dir, server);
            let path = format!("/v1/subscriptions/{}/{}", encoded(channel), encoded(name));
            match server.call("DELETE", &path, None)? {
                Ok(_) => {
                    out!("subscription {key} removed");
                    Ok(ExitCode::SUCCESS)
                }
                Err(message) => refused(&message),
            }
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// List deliveries, newest first, or the dead letters.
    List {
        /// Only dead letters.
        #[arg(long)]
        dead: bool,
        /// Only this subscription's, `<channel>/<name>`, in order.
        #[arg(long, value_name = "KEY")]
        subscription: Option<String>,
        /// How many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// The server.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
    /// Put a dead letter back in its queue, with the same id.
    Resend {
        /// The delivery's id.
        id: String,
        /// The server.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
    /// Drop a dead letter.
    Clear {
        /// The delivery's id.
        id: String,
        /// The server.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
    },
}

/// `weft deliveries`.
pub fn deliveries(data_dir: &Path, command: DeliveriesCommand) -> anyhow::Result<ExitCode> {
    match command {
        DeliveriesCommand::List {
            dead,
            subscription,
            limit,
            json,
            server,
        } => {
            let server = Server::new(data_dir, server);
            let mut path = format!("/v1/deliveries?limit={limit}");
            if dead {
                path.push_str("&state=error");
            }
            if let Some(key) = subscription {
                path.push_str(&format!("&subscription={key}"));
            }
            let answer = match server.call("GET", &path, None)? {
                Ok(answer) => answer,
                Err(message) => return refused(&message),
            };
            let list = answer["deliveries"].as_array().cloned().unwrap_or_default();
            if json {
                out!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(ExitCode::SUCCESS);
            }
            if list.is_empty() {
                out!("no {}deliveries", if dead { "dead " } else { "" });
                return Ok(ExitCode::SUCCESS);
            }
            out!(
                "{:<36}  {:<24}  {:<9}  {:>8}  {}",
                "DELIVERY",
                "SUBSCRIPTION",
                "STATE",
                "ATTEMPTS",
                "LAST ERROR"
            );
            for d in list {
                out!(
                    "{:<36}  {:<24}  {:<9}  {:>8}  {}",
                    d["id"].as_str().unwrap_or("?"),
                    d["subscription"].as_str().unwrap_or("?"),
                    d["state"].as_str().unwrap_or("?"),
                    d["attempts"],
                    d["last_error"].as_str().unwrap_or("")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        DeliveriesCommand::Resend { id, server } => {
            let server = Server::new(data_dir, server);
            match server.call("POST", &format!("/v1/deliveries/{id}/resend"), None)? {
                Ok(_) => {
                    out!("delivery {id} re-sent");
                    Ok(ExitCode::SUCCESS)
                }
                Err(message) => refused(&message),
            }
        }
        DeliveriesCommand::Clear { id, server } => {
            let server = Server::new(data_dir, server);
            match server.call("DELETE", &format!("/v1/deliveries/{id}"), None)? {
                Ok(_) => {
                    out!("delivery {id} cleared");
                    Ok(ExitCode::SUCCESS)
                }
                Err(message) => refused(&message),
            }
        }
    }
}

/// `weft runs list --server`: the runs, as the API gives them.
pub fn runs(
    server: &Server,
    query: &str,
) -> anyhow::Result<Result<Vec<weft::store::RunRecord>, String>> {
    Ok(
        match server.call("GET", &format!("/v1/runs?{query}"), None)? {
            Ok(answer) => Ok(serde_json::from_value(answer["runs"].clone())
                .context("the server's runs do not decode")?),
            Err(message) => Err(message),
        },
    )
}

/// `weft runs show --server`: one run and its steps.
pub fn run(
    server: &Server,
    id: &str,
) -> anyhow::Result<Result<(weft::store::RunRecord, Vec<weft::store::StepRecord>), String>> {
    Ok(match server.call("GET", &format!("/v1/runs/{id}"), None)? {
        Ok(answer) => {
            let run = serde_json::from_value(answer["run"].clone())
                .context("the server's run does not decode")?;
            let steps = serde_json::from_value(answer["steps"].clone())
                .context("the server's steps do not decode")?;
            Ok((run, steps))
        }
        Err(message) => Err(message),
    })
}

/// `text` as a URL query value: every byte but letters, digits and `-._~`
/// percent-encoded.
pub(super) fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `weft runs bulk ACTION`: counts the runs `filter` matches (a dry run),
/// then, unless `dry_run`, acts on them a page at a time with a progress
/// bar, and prints how many matched and changed.
pub fn bulk(
    server: &Server,
    action: &str,
    mut filter: Value,
    dry_run: bool,
) -> anyhow::Result<ExitCode> {
    if let Some(fields) = filter.as_object_mut() {
        fields.retain(|_, value| !value.is_null());
    }
    let ask = |before: Option<&str>, dry_run: bool| {
        let mut body =
            json!({ "action": action, "filter": filter, "dry_run": dry_run, "limit": 1000 });
        if let Some(before) = before {
            body["before"] = json!(before);
        }
        server.call("POST", "/v1/runs/bulk", Some(body))
    };
    let counted = match ask(None, true)? {
        Ok(counted) => counted,
        Err(message) => return refused(&message),
    };
    let total = counted["matched"].as_u64().unwrap_or(0);
    if dry_run {
        out!(
            "{total} runs match; {} would change (dry run: nothing changed)",
            counted["would_change"]
        );
        return Ok(ExitCode::SUCCESS);
    }
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        indicatif::ProgressBar::new(total)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let (mut matched, mut changed, mut failed) = (0, 0, 0);
    let mut unchanged: Vec<Value> = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let page = match ask(before.as_deref(), false)? {
            Ok(page) => page,
            Err(message) => {
                bar.abandon();
                eprintln!("error: after {matched} runs ({changed} changed): {message}");
                return Ok(ExitCode::from(EXIT_INVALID));
            }
        };
        matched += page["matched"].as_u64().unwrap_or(0);
        changed += page["changed"].as_u64().unwrap_or(0);
        failed += page["failed"].as_u64().unwrap_or(0);
        unchanged.extend(page["unchanged"].as_array().into_iter().flatten().cloned());
        bar.set_position(matched);
        match page["next"].as_str() {
            // Pages go to older runs each time; one that does not is the end.
            Some(next) if before.as_deref() != Some(next) => before = Some(next.to_owned()),
            _ => break,
        }
    }
    bar.finish_and_clear();
    out!("{action}: {matched} runs matched, {changed} changed, {failed} failed");
    unchanged.sort_by_key(|u| u["failed"] != true);
    for run in unchanged.iter().take(20) {
        out!(
            "  {} unchanged: {}",
            run["run"].as_str().unwrap_or("?"),
            run["reason"].as_str().unwrap_or("?")
        );
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(super::EXIT_HOST)
    })
}
