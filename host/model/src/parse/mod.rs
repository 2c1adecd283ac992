//! From text to a checked [`Workflow`]: serde reads the file as written into
//! `Raw*` types (unknown keys are errors), then each field is checked and
//! compiled. This file owns the `Raw*` types and the workflow's own fields;
//! `check.rs` walks the steps, and `step.rs` checks each kind of step.

mod check;
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkflow {
    id: String,
    #[serde(default = "default_version")]
    version: u32,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    inputs: Option<Value>,
    steps: Vec<RawStep>,
    #[serde(default)]
    outputs: Option<Value>,
    #[serde(default)]
    outputs_schema: Option<Value>,
    #[serde(default)]
    catch: Option<Vec<RawCase>>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    retain: Option<String>,
    #[serde(default)]
    snapshots: Vec<Value>,
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
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOn {
    #[serde(default)]
    schedule: Vec<ScheduleSpec>,
}

fn default_version() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    id: String,
    #[serde(default)]
    uses: Option<String>,
    #[serde(default)]
    with: Option<Value>,
    #[serde(default)]
    subflow: Option<String>,
    #[serde(default)]
    sleep: Option<Value>,
    #[serde(default)]
    sleep_until: Option<Value>,
    #[serde(default)]
    emit: Option<String>,
    #[serde(default, rename = "await")]
    await_: Option<RawAwait>,
    #[serde(default)]
    parallel: Option<Vec<RawStep>>,
    #[serde(default)]
    switch: Option<Vec<RawCase>>,
    #[serde(default)]
    foreach: Option<Value>,
    #[serde(default, rename = "while")]
    while_: Option<String>,
    #[serde(default)]
    steps: Option<Vec<RawStep>>,
    #[serde(default)]
    max_iterations: Option<u32>,
    #[serde(default)]
    concurrency: Option<u32>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    memory_limit: Option<String>,
    #[serde(default)]
    allow: Option<RawAllow>,
    #[serde(default)]
    secrets: Option<Vec<String>>,
    #[serde(default, rename = "if")]
    condition: Option<String>,
    #[serde(default)]
    retry: Option<RawRetry>,
    #[serde(default)]
    continue_on_error: bool,
    #[serde(default)]
    catch: Option<Vec<RawCase>>,
}

/// What a call step may reach: `allow: {http: [...]}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAllow {
    #[serde(default)]
    http: Vec<Value>,
}

/// An `await` step's settings.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAwait {
    #[serde(default)]
    timeout: Option<String>,
}

/// A `switch` case or a `catch` handler: steps, guarded by an optional `if`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    #[serde(default, rename = "if")]
    condition: Option<String>,
    steps: Vec<RawStep>,
}

/// Reads `source` (in `format`; `origin` names it in errors) and checks it
/// into a [`Workflow`].
pub(super) fn parse(
    source: &str,
    format: Format,
    origin: &str,
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

    let mut checker = Checker::new(origin, source, raw.id.clone());
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
    match format {
        Format::Json => serde_json::from_str(source).map_err(|e| {
            let message = e.to_string();
            let message = match message.find(" at line ") {
                Some(cut) => message[..cut].to_owned(),
                None => message,
            };
            located(Some(e.line()), Some(e.column()), message)
        }),
        Format::Yaml => serde_yaml_ng::from_str(source).map_err(|e| {
            let message = e.to_string();
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
