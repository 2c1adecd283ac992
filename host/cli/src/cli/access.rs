//! `weft tenants`, `weft tokens` and `weft audit`: who may use a running
//! `weft serve`, over its HTTP API; and `weft tokens create --local`,
//! which writes the first token straight into the data directory's store.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{Value, json};

use super::remote::Server;
use weft::services::{NewToken, TokenRefused};
use weft::store::Role;

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // Parsed once per process; `Quota` has a flag per limit.
pub enum TenantsCommand {
    /// Add a tenant (an admin's).
    Add {
        /// Its name: letters, digits, `_` and `-`.
        name: String,
        #[command(flatten)]
        server: ServerArg,
    },
    /// List the tenants (an admin's).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: ServerArg,
    },
    /// Remove a tenant: refused while it has runs that have not ended,
    /// unless --force, which cancels them first. Its tokens stop working.
    Remove {
        /// The tenant.
        name: String,
        /// Cancel its live runs first.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        server: ServerArg,
    },
    /// Set a tenant's quota (an admin's); a limit not given is lifted.
    Quota {
        /// The tenant.
        name: String,
        /// Runs started per second over the API; beyond it, `429`.
        #[arg(long, value_name = "N")]
        starts_per_second: Option<u32>,
        /// Deployments, plugin uploads and snapshot publishes per second;
        /// beyond it, `429`.
        #[arg(long, value_name = "N")]
        deploys_per_second: Option<u32>,
        /// Plugin versions the tenant may keep.
        #[arg(long, value_name = "N")]
        max_plugins: Option<u32>,
        /// The largest plugin component, in bytes.
        #[arg(long, value_name = "BYTES")]
        max_plugin_bytes: Option<u64>,
        /// Subscriptions the tenant may have.
        #[arg(long, value_name = "N")]
        max_subscriptions: Option<u32>,
        /// Runs in progress at once on each host; beyond it, parked.
        #[arg(long, value_name = "N")]
        max_resident: Option<u32>,
        /// The tenant's share of each host's turns (default 1).
        #[arg(long, value_name = "N")]
        weight: Option<u32>,
        /// The longest a step may run, such as `2m`, its default included.
        #[arg(long, value_name = "DURATION", value_parser = weft::clock::parse_duration)]
        max_step_timeout: Option<std::time::Duration>,
        /// The most memory a step may have, in bytes, its default included.
        #[arg(long, value_name = "BYTES")]
        max_step_memory: Option<u64>,
        /// Guest time the tenant's calls may take per minute on each host,
        /// such as `10s`; once spent, steps wait for the next minute.
        #[arg(long, value_name = "DURATION", value_parser = weft::clock::parse_duration)]
        guest_time_per_minute: Option<std::time::Duration>,
        /// The bytes the tenant's runs may keep in the store (inputs, step
        /// records, key-value values, messages); beyond it, starts and
        /// step results are refused with `storage_quota`.
        #[arg(long, value_name = "BYTES")]
        max_stored_bytes: Option<u64>,
        /// Timers the tenant's runs may have pending at once (sleeps,
        /// await timeouts, retry delays, deadlines); beyond it, a step
        /// that would sleep or wait with a timeout fails with
        /// `timer_quota`.
        #[arg(long, value_name = "N")]
        max_timers: Option<u64>,
        /// Rows of the audit log kept for the tenant; beyond it, its
        /// oldest are deleted as new ones are written.
        #[arg(long, value_name = "N")]
        max_audit_rows: Option<u64>,
        /// Workflow revisions the tenant may keep; beyond it, deployments
        /// are refused.
        #[arg(long, value_name = "N")]
        max_revisions: Option<u32>,
        /// Bytes of snapshot revisions the tenant may keep; beyond it,
        /// publishes are refused.
        #[arg(long, value_name = "BYTES")]
        max_snapshot_bytes: Option<u64>,
        /// Where the tenant's steps and webhooks may send HTTP requests, as
        /// a URL prefix such as `https://*.example.org`; repeat for more.
        /// Without it, the host's policy.
        #[arg(long, value_name = "RULE")]
        egress_allow: Vec<String>,
        /// How long the tenant's ended runs and settled messages are kept
        /// when their workflow does not say: such as `7d`, or `forever`.
        /// Without it, the host's --retain.
        #[arg(long, value_name = "DURATION", value_parser = super::parse_retain_text)]
        retain: Option<String>,
        #[command(flatten)]
        server: ServerArg,
    },
    /// A tenant's quota and what it uses.
    Usage {
        /// The tenant.
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: ServerArg,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Make a token and print it, once: it is stored only as a hash.
    Create {
        /// The tenant it acts in. [default: the caller's]
        #[arg(long)]
        tenant: Option<String>,
        /// admin, owner, deployer, operator or reader.
        #[arg(long)]
        role: String,
        /// How long it works, such as `30d`. [default: until revoked]
        #[arg(long, value_name = "DURATION")]
        expires: Option<String>,
        /// A note, such as who holds it.
        #[arg(long)]
        label: Option<String>,
        /// Write it straight into DATA_DIR's store instead of asking a
        /// server: how the first token of a host is made.
        #[arg(long)]
        local: bool,
        #[command(flatten)]
        server: ServerArg,
    },
    /// List the tenant's tokens (never their secrets).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: ServerArg,
    },
    /// Revoke a token: it stops working at once, open streams included.
    Revoke {
        /// The token's id (the `<id>` of `weft_<id>_<secret>`).
        id: String,
        #[command(flatten)]
        server: ServerArg,
    },
}

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Set a secret of the tenant to the value read from stdin (a final
    /// newline is dropped). It is sealed with the server's secrets key.
    Set {
        /// The secret's name, as workflows name it in `secrets:`.
        name: String,
        /// The tenant. [default: the caller's]
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        server: ServerArg,
    },
    /// List the tenant's secrets: names and when each was set, never values.
    List {
        /// The tenant. [default: the caller's]
        #[arg(long)]
        tenant: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: ServerArg,
    },
    /// Delete a secret of the tenant.
    Delete {
        /// The secret's name.
        name: String,
        /// The tenant. [default: the caller's]
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        server: ServerArg,
    },
    /// Let the steps of a plugin read a secret: the component the plugin
    /// reference resolves to now (a later build needs a grant again, or a
    /// deployment by an owner). A tenant owner's.
    Grant {
        /// The secret's name.
        name: String,
        /// The plugin: `name`, `name@version` or `name@sha256:<hex>`.
        #[arg(long)]
        plugin: String,
        /// The tenant. [default: the caller's]
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        server: ServerArg,
    },
    /// Take back every grant of a secret to a plugin.
    Revoke {
        /// The secret's name.
        name: String,
        /// The plugin's name.
        #[arg(long)]
        plugin: String,
        /// The tenant. [default: the caller's]
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        server: ServerArg,
    },
    /// After a key rotation (the new key as --secrets-key-file, the old one
    /// as --secrets-previous-key-file on the server): seal every secret of
    /// the tenant again under the new key.
    Reseal {
        /// The tenant. [default: the caller's]
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        server: ServerArg,
    },
    /// Print a fresh secrets key (64 hex digits) for `--secrets-key-file`.
    NewKey,
}

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// The most entries to print, newest first.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Debug, clap::Args)]
pub struct ServerArg {
    /// The server. [default: the address in DATA_DIR/serve.addr, else
    /// http://127.0.0.1:7420]
    #[arg(long, value_name = "URL")]
    server: Option<String>,
}

/// Prints an error answer and gives the exit status for it.
use super::remote::refused;

/// Sends a request and prints the answer's `field`: as JSON with `json`,
/// else through `show`.
fn ask(
    data_dir: &Path,
    server: ServerArg,
    method: &str,
    path: &str,
    body: Option<Value>,
    show: impl FnOnce(&Value) -> anyhow::Result<()>,
) -> anyhow::Result<ExitCode> {
    let server = Server::new(data_dir, server.server);
    match server.call(method, path, body)? {
        Ok(answer) => {
            show(&answer)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(message) => refused(&message),
    }
}

fn pretty(value: &Value) -> anyhow::Result<()> {
    out!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// An answer as indented text: one `key  value` line per field, a nested
/// object under its key, a list of plain values on one line.
fn outline(value: &Value, depth: usize) -> anyhow::Result<()> {
    let Some(fields) = value.as_object() else {
        return Ok(());
    };
    let width = fields.keys().map(String::len).max().unwrap_or(0);
    let indent = "  ".repeat(depth);
    for (key, field) in fields {
        match field {
            Value::Object(inner) if inner.is_empty() => out!("{indent}{key:<width$}  -"),
            Value::Object(_) => {
                out!("{indent}{key}");
                outline(field, depth + 1)?;
            }
            Value::Null => out!("{indent}{key:<width$}  -"),
            Value::String(text) => out!("{indent}{key:<width$}  {text}"),
            Value::Array(items) => {
                let items: Vec<String> = items
                    .iter()
                    .map(|item| {
                        item.as_str()
                            .map_or_else(|| item.to_string(), str::to_owned)
                    })
                    .collect();
                out!("{indent}{key:<width$}  {}", items.join(", "));
            }
            other => out!("{indent}{key:<width$}  {other}"),
        }
    }
    Ok(())
}

/// `weft tenants`.
pub fn tenants(data_dir: &Path, command: TenantsCommand) -> anyhow::Result<ExitCode> {
    match command {
        TenantsCommand::Add { name, server } => ask(
            data_dir,
            server,
            "POST",
            "/v1/tenants",
            Some(json!({ "name": name })),
            |_| {
                out!("tenant {name} added");
                Ok(())
            },
        ),
        TenantsCommand::List { json, server } => {
            ask(data_dir, server, "GET", "/v1/tenants", None, |answer| {
                if json {
                    return pretty(&answer["tenants"]);
                }
                for tenant in answer["tenants"].as_array().into_iter().flatten() {
                    out!(
                        "{:<24}  {}",
                        tenant["name"].as_str().unwrap_or("?"),
                        tenant["quota"]
                    );
                }
                Ok(())
            })
        }
        TenantsCommand::Remove {
            name,
            force,
            server,
        } => ask(
            data_dir,
            server,
            "DELETE",
            &format!("/v1/tenants/{name}?force={force}"),
            None,
            |answer| {
                out!(
                    "tenant {name} removed; {} run(s) cancelled",
                    answer["cancelled"]
                );
                Ok(())
            },
        ),
        TenantsCommand::Quota {
            name,
            starts_per_second,
            deploys_per_second,
            max_plugins,
            max_plugin_bytes,
            max_subscriptions,
            max_resident,
            weight,
            max_step_timeout,
            max_step_memory,
            guest_time_per_minute,
            max_stored_bytes,
            max_timers,
            max_audit_rows,
            max_revisions,
            max_snapshot_bytes,
            egress_allow,
            retain,
            server,
        } => {
            let mut quota = serde_json::Map::new();
            let mut set = |field: &str, value: Option<Value>| {
                if let Some(value) = value {
                    quota.insert(field.to_owned(), value);
                }
            };
            set("starts_per_second", starts_per_second.map(Value::from));
            set("deploys_per_second", deploys_per_second.map(Value::from));
            set("max_plugins", max_plugins.map(Value::from));
            set("max_plugin_bytes", max_plugin_bytes.map(Value::from));
            set("max_subscriptions", max_subscriptions.map(Value::from));
            set("max_resident", max_resident.map(Value::from));
            set("weight", weight.map(Value::from));
            set(
                "max_step_timeout_ms",
                max_step_timeout
                    .map(|d| Value::from(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))),
            );
            set("max_step_memory", max_step_memory.map(Value::from));
            set(
                "guest_ms_per_minute",
                guest_time_per_minute
                    .map(|d| Value::from(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))),
            );
            set("max_stored_bytes", max_stored_bytes.map(Value::from));
            set("max_timers", max_timers.map(Value::from));
            set("max_audit_rows", max_audit_rows.map(Value::from));
            set("max_revisions", max_revisions.map(Value::from));
            set("max_snapshot_bytes", max_snapshot_bytes.map(Value::from));
            set(
                "egress",
                (!egress_allow.is_empty()).then(|| Value::from(egress_allow)),
            );
            set("retain", retain.map(Value::from));
            ask(
                data_dir,
                server,
                "POST",
                &format!("/v1/tenants/{name}/quota"),
                Some(Value::Object(quota)),
                |answer| pretty(&answer["tenant"]),
            )
        }
        TenantsCommand::Usage { name, json, server } => ask(
            data_dir,
            server,
            "GET",
            &format!("/v1/tenants/{name}/usage"),
            None,
            |answer| {
                if json {
                    return pretty(answer);
                }
                outline(answer, 0)
            },
        ),
    }
}

/// `weft tokens`.
pub fn tokens(data_dir: &Path, command: TokensCommand) -> anyhow::Result<ExitCode> {
    match command {
        TokensCommand::Create {
            tenant,
            role,
            expires,
            label,
            local: true,
            ..
        } => create_local(data_dir, tenant, &role, expires, label),
        TokensCommand::Create {
            tenant,
            role,
            expires,
            label,
            server,
            ..
        } => ask(
            data_dir,
            server,
            "POST",
            "/v1/tokens",
            Some(json!({ "tenant": tenant, "role": role, "expires": expires, "label": label })),
            |answer| created(&answer["token"]),
        ),
        TokensCommand::List { json, server } => {
            ask(data_dir, server, "GET", "/v1/tokens", None, |answer| {
                if json {
                    return pretty(&answer["tokens"]);
                }
                out!(
                    "{:<12}  {:<16}  {:<8}  {:<24}  {:<24}  {}",
                    "ID",
                    "TENANT",
                    "ROLE",
                    "EXPIRES",
                    "REVOKED",
                    "LABEL"
                );
                for t in answer["tokens"].as_array().into_iter().flatten() {
                    out!(
                        "{:<12}  {:<16}  {:<8}  {:<24}  {:<24}  {}",
                        t["id"].as_str().unwrap_or("?"),
                        t["tenant"].as_str().unwrap_or("?"),
                        t["role"].as_str().unwrap_or("?"),
                        t["expires_at"].as_str().unwrap_or("never"),
                        t["revoked_at"].as_str().unwrap_or("-"),
                        t["label"].as_str().unwrap_or("")
                    );
                }
                Ok(())
            })
        }
        TokensCommand::Revoke { id, server } => ask(
            data_dir,
            server,
            "POST",
            &format!("/v1/tokens/{id}/revoke"),
            None,
            |_| {
                out!("token {id} revoked");
                Ok(())
            },
        ),
    }
}

/// Prints a token just made: the token itself on stdout, alone, so that
/// a script can keep it; the rest on stderr.
fn created(token: &Value) -> anyhow::Result<()> {
    eprintln!(
        "token {} for tenant {} as {}; it is shown only now:",
        token["id"].as_str().unwrap_or("?"),
        token["tenant"].as_str().unwrap_or("?"),
        token["role"].as_str().unwrap_or("?"),
    );
    out!("{}", token["token"].as_str().unwrap_or("?"));
    Ok(())
}

/// `weft tokens create --local`: the token is written into the store in
/// DATA_DIR (which a running `weft serve` shares), by whoever may write
/// that directory.
fn create_local(
    data_dir: &Path,
    tenant: Option<String>,
    role: &str,
    expires: Option<String>,
    label: Option<String>,
) -> anyhow::Result<ExitCode> {
    let role: Role = match role.parse() {
        Ok(role) => role,
        Err(message) => return refused(&format!("--role: {message}")),
    };
    let tenant = tenant.unwrap_or_else(|| weft::core::tenant::DEFAULT.to_owned());
    let expires = match expires {
        None => None,
        Some(text) => match weft::clock::parse_duration(&text) {
            Ok(duration) => Some(duration),
            Err(message) => return refused(&format!("--expires: {message}")),
        },
    };
    let host = super::maintenance_host(data_dir)?;
    let new = NewToken {
        tenant,
        role,
        label: label.unwrap_or_default(),
        expires,
        created_by: "local".to_owned(),
    };
    let (record, token) = match host.services().create_token(new) {
        Ok(made) => made,
        Err(TokenRefused::UnknownTenant(tenant)) => {
            return refused(&format!(
                "--tenant: no tenant `{tenant}`; add it first with `weft tenants add {tenant}`"
            ));
        }
        Err(e @ TokenRefused::LabelTooLong) => return refused(&format!("--{e}")),
        Err(TokenRefused::Store(e)) => {
            return Err(anyhow::anyhow!(e).context("cannot write the token"));
        }
    };
    let mut shown = serde_json::to_value(&record)?;
    shown["token"] = json!(token);
    created(&shown)?;
    Ok(ExitCode::SUCCESS)
}

/// `weft audit`: the tenant's audit log, newest first.
pub fn audit(data_dir: &Path, args: AuditArgs) -> anyhow::Result<ExitCode> {
    let path = format!("/v1/audit?limit={}", args.limit);
    let json = args.json;
    ask(data_dir, args.server, "GET", &path, None, |answer| {
        if json {
            return pretty(&answer["audit"]);
        }
        for entry in answer["audit"].as_array().into_iter().flatten() {
            out!(
                "{}  {:<12}  {:<20}  {}{}",
                entry["at"]
                    .as_u64()
                    .map_or_else(|| "?".to_owned(), |ms| weft::Timestamp(ms).to_string()),
                entry["actor"].as_str().unwrap_or("?"),
                entry["action"].as_str().unwrap_or("?"),
                entry["object"].as_str().unwrap_or("?"),
                match &entry["detail"] {
                    Value::Null => String::new(),
                    detail => format!("  {detail}"),
                }
            );
        }
        Ok(())
    })
}

/// `weft secrets`.
/// Grants or revokes (`method` on `path`) secret `name`, and prints the
/// plugins it is granted to after.
fn granting(
    data_dir: &Path,
    server: ServerArg,
    name: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<ExitCode> {
    ask(data_dir, server, method, path, body, |answer| {
        out!("secret {name} granted to:");
        print_grants(&answer["secret"])
    })
}

/// The plugins a secret (as answered) is granted to, one line each.
fn print_grants(secret: &serde_json::Value) -> anyhow::Result<()> {
    let empty = Vec::new();
    let grants = secret["grants"].as_array().unwrap_or(&empty);
    if grants.is_empty() {
        out!("  (no plugin may read it)");
    }
    for grant in grants {
        out!(
            "  {} {}",
            grant["plugin"].as_str().unwrap_or_default(),
            grant["digest"].as_str().unwrap_or_default()
        );
    }
    Ok(())
}

pub fn secrets(data_dir: &Path, command: SecretsCommand) -> anyhow::Result<ExitCode> {
    let scoped = |path: String, tenant: &Option<String>| match tenant {
        Some(tenant) => format!("{path}?tenant={tenant}"),
        None => path,
    };
    match command {
        SecretsCommand::Set {
            name,
            tenant,
            server,
        } => {
            let mut value = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut value)?;
            if value.ends_with('\n') {
                value.pop();
                if value.ends_with('\r') {
                    value.pop();
                }
            }
            ask(
                data_dir,
                server,
                "PUT",
                &scoped(format!("/v1/secrets/{name}"), &tenant),
                Some(serde_json::json!({ "value": value })),
                |answer| {
                    out!(
                        "secret {} set",
                        answer["secret"]["name"].as_str().unwrap_or(&name)
                    );
                    Ok(())
                },
            )
        }
        SecretsCommand::List {
            tenant,
            json,
            server,
        } => ask(
            data_dir,
            server,
            "GET",
            &scoped("/v1/secrets".to_owned(), &tenant),
            None,
            |answer| {
                if json {
                    return pretty(&answer["secrets"]);
                }
                let empty = Vec::new();
                let secrets = answer["secrets"].as_array().unwrap_or(&empty);
                if secrets.is_empty() {
                    out!("no secrets");
                }
                for secret in secrets {
                    out!(
                        "{:<32} set {}",
                        secret["name"].as_str().unwrap_or_default(),
                        secret["updated_at"].as_str().unwrap_or_default()
                    );
                    print_grants(secret)?;
                }
                Ok(())
            },
        ),
        SecretsCommand::Delete {
            name,
            tenant,
            server,
        } => ask(
            data_dir,
            server,
            "DELETE",
            &scoped(format!("/v1/secrets/{name}"), &tenant),
            None,
            |_| {
                out!("secret {name} deleted");
                Ok(())
            },
        ),
        SecretsCommand::Grant {
            name,
            plugin,
            tenant,
            server,
        } => granting(
            data_dir,
            server,
            &name,
            "POST",
            &scoped(format!("/v1/secrets/{name}/grants"), &tenant),
            Some(serde_json::json!({ "plugin": plugin })),
        ),
        SecretsCommand::Revoke {
            name,
            plugin,
            tenant,
            server,
        } => granting(
            data_dir,
            server,
            &name,
            "DELETE",
            &scoped(format!("/v1/secrets/{name}/grants/{plugin}"), &tenant),
            None,
        ),
        SecretsCommand::Reseal { tenant, server } => ask(
            data_dir,
            server,
            "POST",
            &scoped("/v1/secrets/reseal".to_owned(), &tenant),
            None,
            |answer| {
                out!(
                    "resealed {} of {} secret(s) and {} webhook signing key(s) under the current key",
                    answer["resealed"],
                    answer["secrets"],
                    answer["webhooks"]
                );
                Ok(())
            },
        ),
        SecretsCommand::NewKey => {
            out!("{}", weft::engine::SecretKeys::generate()?);
            Ok(ExitCode::SUCCESS)
        }
    }
}
