//! From text to a checked [`Workflow`]: serde reads the file as written into
//! `Raw*` types (unknown keys are errors), then each field is checked and
//! compiled. This file owns the `Raw*` types and the workflow's own fields;
//! `check.rs` walks the steps, and `step.rs` checks each kind of step.

mod check;
pub(super) mod shapes;
mod step;
#[cfg(test)]
mod tests;

use serde::Deserialize;
use serde_json::Value;

use super::error::{DefinitionError, Location};
use super::lines::find_key_line;
use super::policy::RawRetry;
use super::{Format, InputSchema, Schedule, ScheduleSpec, Workflow, check_id};
use check::Checker;
use step::parse_timeout;

/// The variables every expression sees.
const BASE_VARS: [&str; 3] = ["inputs", "steps", "run"];

/// A weft workflow: its id, the steps it runs in order, and what it
/// returns. The file is YAML, or JSON when its name ends in `.json`; unknown
/// keys are errors. `weft check FILE` checks a file without running it.
///
/// Expressions are written `${{ }}` and hold CEL. They see `inputs`,
/// `steps.<id>.output` of earlier steps (`steps["a-b"]` for an id with `-`)
/// and `run.id`, `run.workflow`. A string that is one expression keeps the
/// value's type; text around expressions makes a string.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Workflow")]
struct RawWorkflow {
    /// The workflow's id, by which runs, `subflow:` and `weft start` name
    /// it: a letter or `_`, then letters, digits, `_` and `-`, at most 128
    /// characters. Example: `order-intake`.
    #[schemars(pattern(shapes::ID))]
    id: String,
    /// The version of the definition, a whole number; 1 when not given.
    #[serde(default = "default_version")]
    version: u32,
    /// One line for people: what the workflow does.
    #[serde(default)]
    description: Option<String>,
    /// A JSON Schema that a run's input must satisfy, checked when the run
    /// starts. Example: `{type: object, required: [name]}`. Any input when
    /// not given.
    #[serde(default)]
    #[schemars(schema_with = "shapes::user_schema")]
    inputs: Option<Value>,
    /// The steps, run in order; at least one. Step ids are unique in the
    /// workflow, at every depth.
    #[schemars(length(min = 1))]
    steps: Vec<RawStep>,
    /// What the run returns, evaluated after its last step: any JSON value,
    /// with `${{ }}` expressions. Example:
    /// `{greeting: "${{ steps.greet.output.text }}"}`. When not given, the
    /// run's output is its last step's output.
    #[serde(default)]
    outputs: Option<Value>,
    /// A JSON Schema the run's outputs must satisfy. A run whose outputs do
    /// not fails with `invalid_outputs`, which a workflow `catch` may
    /// handle; a handler's outputs are checked too.
    #[serde(default)]
    #[schemars(schema_with = "shapes::user_schema")]
    outputs_schema: Option<Value>,
    /// Handlers for the run's failure, tried in order: the first whose `if`
    /// matches (or that has none) runs, and sees `error` (`code`,
    /// `message`, `retryable`, `details`, `step`). A handler that finishes
    /// makes the run succeed, with its last output as the run's outputs;
    /// when none matches, the run fails. A handler without `if` must be the
    /// last; at least one handler.
    #[serde(default)]
    #[schemars(length(min = 1))]
    catch: Option<Vec<RawCase>>,
    /// The run's deadline, from its start: a duration longer than zero,
    /// such as `10m` or `1h 30m`. When it passes, the run fails with
    /// `run_timeout`, which a workflow `catch` may handle; otherwise the run
    /// ends `timed_out`. No deadline when not given.
    #[serde(default)]
    timeout: Option<String>,
    /// How long ended runs of this workflow are kept before the sweeper
    /// deletes them: a duration longer than zero, such as `30d`, or
    /// `forever`. When not given, the tenant's `quota.retain`, else the
    /// host's `--retain`.
    #[serde(default)]
    retain: Option<String>,
    /// The snapshot stores the steps may read, each named once: a store's
    /// name, or `{name: NAME, revision: latest}`. A run reads the revision
    /// that was newest at its start, unless `revision` is `latest` (each
    /// call reads the newest). Example:
    /// `[prices, {name: flags, revision: latest}]`. A store its tenant has
    /// not published is refused.
    #[serde(default)]
    #[schemars(schema_with = "shapes::snapshots")]
    snapshots: Vec<Value>,
    /// What starts the workflow by itself: `schedule:`, a list of cron
    /// triggers (fired by `weft serve`).
    #[serde(default)]
    on: Option<RawOn>,
}

/// A snapshot store the workflow reads, as written: `prices`, or `{name:
/// prices, revision: latest}`. Its name and `revision:`, or what is wrong.
fn snapshot_use(used: &Value) -> Result<(String, Option<String>), String> {
    const SHAPE: &str = "a store is its name, or `{name: NAME, revision: latest}`";
    match used {
        Value::String(name) => Ok((name.clone(), None)),
        Value::Object(fields) => {
            if let Some(field) = fields.keys().find(|k| *k != "name" && *k != "revision") {
                return Err(format!("unknown field `{field}`; {SHAPE}"));
            }
            let Some(Value::String(name)) = fields.get("name") else {
                return Err(format!("no `name`; {SHAPE}"));
            };
            let revision = match fields.get("revision") {
                None | Some(Value::Null) => None,
                Some(Value::String(r)) => Some(r.clone()),
                Some(other) => Some(other.to_string()),
            };
            Ok((name.clone(), revision))
        }
        other => Err(format!("{other} is not a store; {SHAPE}")),
    }
}

/// What starts a workflow by itself.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "On")]
struct RawOn {
    /// Cron triggers; each fire starts a run. Example:
    /// `[{id: nightly, cron: "0 30 2 * * *", timezone: Europe/Berlin}]`.
    /// Each trigger's id (`cron-1`, `cron-2`, ... by position, unless
    /// given) is unique in the workflow.
    #[serde(default)]
    schedule: Vec<ScheduleSpec>,
}

fn default_version() -> u32 {
    1
}

/// One step: an `id`, and exactly one of `uses`, `subflow`, `sleep`,
/// `sleep_until`, `emit`, `await`, `parallel`, `switch`, `foreach` or
/// `while`, which says what the step does. The other keys apply to some of
/// these only, as each says.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Step")]
struct RawStep {
    /// The step's id, unique in the workflow at every depth: a letter or
    /// `_`, then letters, digits, `_` and `-`, at most 128 characters.
    /// Later expressions read the step's result as `steps.<id>.output`.
    /// Example: `charge-card`.
    #[schemars(pattern(shapes::ID))]
    id: String,
    /// Calls a plugin: `name` takes its newest version, `name@1` or
    /// `name@1.2` a compatible one (semver caret), `name@=1.2.3` that
    /// version (any semver requirement works), and
    /// `name@sha256:<64 hex digits>` that exact component. Example:
    /// `template@1`. Its input is `with`.
    #[serde(default)]
    #[schemars(pattern(shapes::USES))]
    uses: Option<String>,
    /// The step's input: any JSON value, with `${{ }}` expressions; `null`
    /// when not given. Example: `{name: "${{ inputs.name }}"}`. It is the
    /// plugin's input for `uses`, the child run's input for `subflow`, the
    /// message for `emit`, and what the outside actor is shown for `await`;
    /// other steps do not take it.
    #[serde(default)]
    with: Option<Value>,
    /// Starts the workflow with this id as a child run, with `with` as its
    /// input, and waits for it. The child's outputs are the step's output;
    /// a failed child fails the step with `subflow_failed`. Example:
    /// `pricing`.
    #[serde(default)]
    #[schemars(pattern(shapes::ID))]
    subflow: Option<String>,
    /// Waits on a durable timer for a duration: text with its unit, longer
    /// than zero, such as `90s`, `5m` or `1h 30m` (a bare number is
    /// refused), or a `${{ }}` expression that gives such text or a whole
    /// number of milliseconds. The step's output is
    /// `{"slept_until": "<time>"}`.
    #[serde(default)]
    sleep: Option<Value>,
    /// Waits on a durable timer until a time: an RFC 3339 time such as
    /// `2026-12-01T09:00:00Z`, a whole number of milliseconds since the
    /// epoch, or a `${{ }}` expression that gives either. The step's output
    /// is `{"slept_until": "<time>"}`.
    #[serde(default)]
    sleep_until: Option<Value>,
    /// Commits `with` as a message on this channel, for its subscribers.
    /// A channel name is 1 to 128 letters, digits, `_`, `-` and `.`; names
    /// starting with `weft.` are reserved for the host. Example: `orders`.
    /// The step's output is `{"message": <id>, "channel": <channel>}`.
    #[serde(default)]
    #[schemars(schema_with = "shapes::channel")]
    emit: Option<String>,
    /// Pauses the run until an outside actor answers the step over the API
    /// (`weft act`, or `POST /v1/runs/{run}/steps/{step}/actions`):
    /// `complete` with an output (the step's output), `fail`, `skip` or
    /// `cancel`. Write `await: {}`, or `await: {timeout: 24h}`. The actor
    /// is shown `with`.
    #[serde(default, rename = "await")]
    await_: Option<RawAwait>,
    /// Runs these steps, the branches, at the same time; at least one. The
    /// output is `{branch id: output}`. The first branch to fail fails the
    /// step. A branch cannot name a step of another branch; after the
    /// `parallel`, every branch's steps can be named.
    #[serde(default)]
    #[schemars(length(min = 1))]
    parallel: Option<Vec<RawStep>>,
    /// Runs the steps of the first case whose `if` is true; a case without
    /// `if` matches anything and must be the last. At least one case. The
    /// output is the chosen case's last output.
    #[serde(default)]
    #[schemars(length(min = 1))]
    switch: Option<Vec<RawCase>>,
    /// Runs `steps` once per item of a list, which they see as `item` (and
    /// its position as `index`, from 0): a list, or a `${{ }}` expression
    /// that gives one, of at most 10,000 items. Example:
    /// `"${{ inputs.items }}"`. The output is the list of each iteration's
    /// last output, in the list's order.
    #[serde(default)]
    foreach: Option<Value>,
    /// Runs `steps` again while this condition is true, checking it before
    /// each iteration; the steps see `iteration`, from 0. A CEL expression,
    /// with or without `${{ }}`, which may name the body's steps as they
    /// were after the previous iteration. Example:
    /// `"!has(steps.check) || steps.check.output != 'done'"`. Needs
    /// `max_iterations`. The output is the last iteration's last output.
    #[serde(default, rename = "while")]
    #[schemars(schema_with = "shapes::condition")]
    while_: Option<String>,
    /// The body of a `foreach` or a `while`: the steps each iteration runs,
    /// in order; at least one. Only `foreach` and `while` take it, and they
    /// need it.
    #[serde(default)]
    #[schemars(length(min = 1))]
    steps: Option<Vec<RawStep>>,
    /// For `while`, which needs it: the most iterations, from 1 to 10,000.
    /// Reaching it with the condition still true fails the step with
    /// `while_limit`.
    #[serde(default)]
    #[schemars(range(min = 1, max = step::MAX_ITERATIONS))]
    max_iterations: Option<u32>,
    /// For `foreach`: how many iterations may be in progress at once, from
    /// 1 to 1,000; 1 (one after another) when not given. The output keeps
    /// the list's order either way.
    #[serde(default)]
    #[schemars(range(min = 1, max = step::MAX_CONCURRENCY))]
    concurrency: Option<u32>,
    /// For `uses`: how long one attempt may run, a duration longer than
    /// zero such as `10s`; the host's default (30s) when not given. A
    /// timed-out attempt fails with `timeout`, which is retryable.
    #[serde(default)]
    timeout: Option<String>,
    /// For `uses`: how large the plugin's memory may grow, from 1MiB to
    /// 4GiB, such as `128MiB` (`KiB`, `MiB`, `GiB` are powers of 2; `KB`,
    /// `MB`, `GB` powers of 10; a plain number is bytes). The host's default
    /// (64MiB) when not given. A plugin that grows past it fails with
    /// `memory_limit`, which is not retried.
    #[serde(default)]
    #[schemars(schema_with = "shapes::memory_limit")]
    memory_limit: Option<String>,
    /// For `uses`: where the step may send HTTP requests,
    /// `{http: [rule, ...]}`. Nowhere when not given.
    #[serde(default)]
    allow: Option<RawAllow>,
    /// For `uses` of a command (a WASI program, added with `weft plugin
    /// add --name --version`): its arguments, after the program's name;
    /// strings, which may hold `${{ }}` expressions (a number or a boolean
    /// they give is written as JSON). Example: `["-c", ".items | length"]`.
    /// None when not given.
    #[serde(default)]
    args: Option<Vec<String>>,
    /// For `uses` of a command: its environment variables, `{NAME:
    /// value}`, the values as `args`. A command sees no other variable.
    /// None when not given.
    #[serde(default)]
    env: Option<std::collections::BTreeMap<String, String>>,
    /// For `uses`: the names of the tenant's secrets the step may read,
    /// each named once. Example: `[STRIPE_KEY]`. None when not given.
    #[serde(default)]
    #[schemars(inner(pattern(shapes::ID)), extend("uniqueItems" = true))]
    secrets: Option<Vec<String>>,
    /// Runs the step only when this is true; when it is false the step is
    /// skipped, its output is `null` and `steps.<id>.skipped` is true. A CEL
    /// expression, with or without `${{ }}`, that gives `true` or `false`.
    /// Example: `"inputs.name != ''"`.
    #[serde(default, rename = "if")]
    #[schemars(schema_with = "shapes::condition")]
    condition: Option<String>,
    /// For `uses` and `subflow`: how a failed attempt is tried again.
    /// Example:
    /// `{max_attempts: 3, backoff: exponential, initial: 200ms, max: 5s}`.
    /// One attempt (no retry) when not given.
    #[serde(default)]
    retry: Option<RawRetry>,
    /// When true, a failure of this step does not fail the run: the run
    /// goes on, and later expressions see the error as `steps.<id>.error`
    /// (`code`, `message`, `retryable`, `details`). False when not given.
    #[serde(default)]
    continue_on_error: bool,
    /// Handlers for this step's failure, tried in order: the first whose
    /// `if` matches (or that has none) runs, and sees `error` (`code`,
    /// `message`, `retryable`, `details`, `step`). A handler that finishes
    /// stands in for the step: its last output becomes the step's. When
    /// none matches, the error stands. A handler without `if` must be the
    /// last; at least one handler.
    #[serde(default)]
    #[schemars(length(min = 1))]
    catch: Option<Vec<RawCase>>,
}

/// What a `uses` step may reach: `{http: [rule, ...]}`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Allow")]
struct RawAllow {
    /// The HTTP destinations granted, each a URL prefix
    /// `scheme://host[:port][/path]`, or
    /// `{url: ..., methods: [GET, POST]}`. The scheme is `http` or `https`;
    /// the host is a name, `*.name` for every subdomain of it (not the name
    /// itself), an IP address (`127.0.0.1`, `[::1]`) or `*` for any host;
    /// without a port only the scheme's default port matches, and `:*` is
    /// any port; the path is a prefix ending at a segment boundary (`/v2`
    /// matches `/v2` and `/v2/x`, not `/v2x`). Example:
    /// `["https://api.stripe.com", "http://127.0.0.1:8000"]`. A request
    /// must also be allowed by the tenant's egress policy.
    #[serde(default)]
    #[schemars(schema_with = "shapes::http_rules")]
    http: Vec<Value>,
}

/// An `await` step's settings: `{}`, or `{timeout: 24h}`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Await")]
struct RawAwait {
    /// How long to wait for an answer: a duration longer than zero, such
    /// as `24h`. With no answer in time, the step fails with
    /// `await_timeout`. No limit when not given.
    #[serde(default)]
    timeout: Option<String>,
}

/// A `switch` case or a `catch` handler: the steps it runs, guarded by an
/// optional `if`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Case")]
struct RawCase {
    /// When this case or handler applies: a CEL expression, with or without
    /// `${{ }}`, that gives `true` or `false`; a handler's also sees
    /// `error`. Example: `"error.code == 'card_declined'"`. Without `if` it
    /// matches anything, and must be the last.
    #[serde(default, rename = "if")]
    #[schemars(schema_with = "shapes::condition")]
    condition: Option<String>,
    /// The steps it runs, in order; at least one.
    #[schemars(length(min = 1))]
    steps: Vec<RawStep>,
}

/// The JSON Schema (draft 2020-12) of a workflow file, from [`RawWorkflow`]
/// and the types of its fields.
pub(super) fn schema() -> Value {
    let mut schema = schemars::schema_for!(RawWorkflow);
    schema.insert("title".to_owned(), Value::from("weft workflow"));
    schema.to_value()
}

/// Reads `source` (in `format`; `origin` names it in errors) and checks it
/// into a [`Workflow`]. A `stored` definition was checked when it was
/// deployed, and is held only to the rules that make it runnable (a name
/// reserved since, such as an `emit:` to the host's channels, passes).
pub(super) fn parse(
    source: &str,
    format: Format,
    origin: &str,
    stored: bool,
) -> Result<Workflow, DefinitionError> {
    let raw = read(source, format, origin)?;
    let text = Text { source, origin };
    check_id(&raw.id).map_err(|m| text.invalid("id", &raw.id, format!("id: {m}")))?;
    if raw.steps.is_empty() {
        return Err(text.invalid("steps", "", "steps: a workflow needs at least one step"));
    }
    let timeout = raw
        .timeout
        .as_deref()
        .map(parse_timeout)
        .transpose()
        .map_err(|m| text.invalid("timeout", "", format!("timeout: {m}")))?;
    let retain = raw
        .retain
        .as_deref()
        .map(crate::Retain::parse)
        .transpose()
        .map_err(|m| text.invalid("retain", "", format!("retain: {m}")))?;
    let schedules = schedules(&text, raw.on)?;
    let mut snapshots: Vec<crate::SnapshotUse> = Vec::new();
    for used in &raw.snapshots {
        let (name, revision) = snapshot_use(used)
            .map_err(|m| text.invalid("snapshots", "", format!("snapshots: {m}")))?;
        check_id(&name)
            .map_err(|m| text.invalid("snapshots", "", format!("snapshots: `{name}`: {m}")))?;
        let latest = match revision.as_deref() {
            None | Some("pinned") => false,
            Some("latest") => true,
            Some(other) => {
                return Err(text.invalid(
                    "snapshots",
                    "",
                    format!(
                        "snapshots: `{name}`: revision `{other}` is not one; give `latest` to read the newest revision at each call, or leave it out to read the one pinned at the run's start"
                    ),
                ));
            }
        };
        if snapshots.iter().any(|s| s.name == name) {
            return Err(text.invalid(
                "snapshots",
                "",
                format!("snapshots: `{name}` is named twice"),
            ));
        }
        snapshots.push(crate::SnapshotUse { name, latest });
    }
    let inputs = raw
        .inputs
        .map(InputSchema::compile)
        .transpose()
        .map_err(|m| {
            text.invalid(
                "inputs",
                "",
                format!("inputs: not a usable JSON Schema: {m}"),
            )
        })?;

    let outputs_schema = raw
        .outputs_schema
        .map(InputSchema::compile)
        .transpose()
        .map_err(|m| {
            text.invalid(
                "outputs_schema",
                "",
                format!("outputs_schema: not a usable JSON Schema: {m}"),
            )
        })?;

    let mut checker = Checker::new(origin, source, raw.id.clone(), stored);
    let steps = checker.steps(raw.steps, "steps", &BASE_VARS)?;
    let catch = checker.catch(raw.catch, "catch", &BASE_VARS, &raw.id)?;
    let outputs = raw
        .outputs
        .map(|value| {
            checker
                .template(&value, "outputs", &BASE_VARS)
                .map_err(|m| text.invalid("outputs", "", m))
        })
        .transpose()?;

    Ok(Workflow {
        id: raw.id,
        version: raw.version,
        description: raw.description,
        inputs,
        steps,
        outputs,
        outputs_schema,
        catch,
        timeout,
        retain,
        snapshots,
        schedules,
        origin: origin.to_owned(),
        source: source.to_owned(),
        format,
    })
}

/// A definition's text and where it came from, to place the errors of the
/// workflow's own fields.
struct Text<'a> {
    source: &'a str,
    origin: &'a str,
}

impl Text<'_> {
    /// An error at the first line where `key:` is written with `value`
    /// (any value when empty).
    fn invalid(&self, key: &str, value: &str, message: impl Into<String>) -> DefinitionError {
        let at = Location {
            origin: self.origin.to_owned(),
            line: find_key_line(self.source, key, value),
            column: None,
            step: None,
        };
        DefinitionError::invalid(at, message)
    }
}

/// Compiles the `on: schedule:` triggers, each with its id: `cron-<n>`
/// (its position, from 1) unless it names one.
fn schedules(
    text: &Text<'_>,
    on: Option<RawOn>,
) -> Result<Vec<(String, Schedule)>, DefinitionError> {
    let mut schedules: Vec<(String, Schedule)> = Vec::new();
    for (i, spec) in on
        .map(|on| on.schedule)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let invalid = |m: String| text.invalid("cron", &spec.cron, format!("on.schedule[{i}].{m}"));
        let schedule = Schedule::compile(spec).map_err(invalid)?;
        let id = spec.id.clone().unwrap_or_else(|| format!("cron-{}", i + 1));
        if schedules.iter().any(|(seen, _)| *seen == id) {
            return Err(invalid(format!("id: `{id}` names an earlier trigger")));
        }
        schedules.push((id, schedule));
    }
    Ok(schedules)
}

/// The deepest `[` and `{` may nest in a definition. The YAML parser takes
/// time that grows with the square of the depth, so a few hundred
/// kilobytes of brackets would cost minutes; no workflow needs more.
pub const MAX_NESTING: usize = 64;

/// Where a definition's brackets first nest deeper than [`MAX_NESTING`]
/// (1-based line and column), if they do. Brackets in quoted strings and
/// comments do not count; a quote opens a string only where a value may
/// start, so a quote inside a plain word hides no brackets.
fn too_deep(source: &str) -> Option<(usize, usize)> {
    let (mut depth, mut line, mut column) = (0usize, 1, 0);
    let mut quote: Option<char> = None;
    let (mut escaped, mut comment) = (false, false);
    // The previous character opens a value: a space, `[`, `{`, `,`, `:`.
    let mut after_space = true;
    for c in source.chars() {
        column += 1;
        if c == '\n' {
            (line, column, comment, after_space) = (line + 1, 0, false, true);
            continue;
        }
        if comment {
            continue;
        }
        match quote {
            Some('"') if escaped => escaped = false,
            Some('"') if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' if after_space => quote = Some(c),
                '#' if after_space => comment = true,
                '[' | '{' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Some((line, column));
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        after_space = c.is_whitespace() || matches!(c, '[' | '{' | ',' | ':');
    }
    None
}

fn read(source: &str, format: Format, origin: &str) -> Result<RawWorkflow, DefinitionError> {
    let located = |line: Option<usize>, column: Option<usize>, message: String| {
        DefinitionError::invalid(
            Location {
                origin: origin.to_owned(),
                line,
                column,
                step: None,
            },
            message,
        )
    };
    if let Some((line, column)) = too_deep(source) {
        return Err(located(
            Some(line),
            Some(column),
            format!("brackets nested deeper than {MAX_NESTING} levels"),
        ));
    }
    if format == Format::Yaml {
        crate::budget::check(source)
            .map_err(|refused| located(refused.line, refused.column, refused.message))?;
    }
    match format {
        Format::Json => serde_json::from_str(source).map_err(|e| {
            let message = readable(&e.to_string());
            let message = match message.find(" at line ") {
                Some(cut) => message[..cut].to_owned(),
                None => message,
            };
            located(Some(e.line()), Some(e.column()), message)
        }),
        Format::Yaml => serde_yaml_ng::from_str(source).map_err(|e| {
            let message = readable(&e.to_string());
            match e.location() {
                Some(loc) => {
                    // The location leads the error; don't say it twice.
                    let mark = format!(" at line {} column {}", loc.line(), loc.column());
                    let message = message.replacen(&mark, "", 1);
                    located(Some(loc.line()), Some(loc.column()), message)
                }
                None => located(None, None, message),
            }
        }),
    }
}

/// `message` (serde's) with the names of this crate's private types said as
/// what they are in a file: `expected struct RawAwait` reads "expected a
/// map such as `{}` or `{timeout: 24h}`".
pub(crate) fn readable(message: &str) -> String {
    const SAID: [(&str, &str); 8] = [
        (
            "struct RawWorkflow",
            "a workflow: a map with `id` and `steps`",
        ),
        ("struct RawOn", "a map such as `{schedule: [...]}`"),
        (
            "struct RawStep",
            "a step: a map with `id` and what it does (`uses`, `sleep`, `await`, ...)",
        ),
        (
            "struct RawAllow",
            "a map such as `{http: [\"https://api.example.com\"]}`",
        ),
        ("struct RawAwait", "a map such as `{}` or `{timeout: 24h}`"),
        ("struct RawCase", "a map with `steps` (and `if`)"),
        (
            "struct RawAction",
            "an action: a map such as `{advance: 1h}`",
        ),
        (
            "struct RawRetry",
            "a retry policy: a map such as `{max_attempts: 3, initial: 1s}`",
        ),
    ];
    let mut message = message.to_owned();
    for (private, said) in SAID {
        // Longest names first would matter only for a name that starts
        // another: none of these does but `RawOn`, checked as a word.
        let mut from = 0;
        while let Some(at) = message[from..].find(private).map(|i| i + from) {
            let end = at + private.len();
            let word_ends = message[end..]
                .chars()
                .next()
                .is_none_or(|c| !c.is_alphanumeric() && c != '_');
            if word_ends {
                message.replace_range(at..end, said);
                from = at + said.len();
            } else {
                from = end;
            }
        }
    }
    message
}
