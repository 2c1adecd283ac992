//! From text to a checked [`Workflow`]: serde reads the file as written into
//! `Raw*` types (unknown keys are errors), then each field is checked and
//! compiled.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::error::{DefinitionError, Location};
use super::expr::Template;
use super::lines::{IdLines, find_key_line};
use super::policy::RawRetry;
use super::{
    Await, Call, Case, Emit, Format, InputSchema, PluginRef, ScheduleSpec, Sleep, Step, StepKind,
    Subflow, VersionPin, Workflow, check_id,
};

/// The most iterations a `while` may declare.
const MAX_ITERATIONS: u32 = 10_000;

/// The most iterations of one `foreach` that may be in progress at once.
const MAX_CONCURRENCY: u32 = 1_000;

/// The largest memory a wasm32 guest can address.
const MAX_MEMORY_LIMIT: u64 = 4 << 30;

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
    catch: Option<Vec<RawCase>>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    on: Option<RawOn>,
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
    #[serde(default, rename = "if")]
    condition: Option<String>,
    #[serde(default)]
    retry: Option<RawRetry>,
    #[serde(default)]
    continue_on_error: bool,
    #[serde(default)]
    catch: Option<Vec<RawCase>>,
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

/// The variables every expression sees.
const BASE_VARS: [&str; 3] = ["inputs", "steps", "run"];

/// Checks steps recursively, in document order, tracking which step ids
/// expressions may name so far.
struct Checker<'a> {
    origin: &'a str,
    workflow_id: String,
    id_lines: IdLines,
    /// How many times each id has been seen, to find its line and refuse
    /// duplicates.
    seen: std::collections::HashMap<String, usize>,
    /// The ids of steps an expression may name: those before it.
    known: Vec<String>,
}

impl Checker<'_> {
    /// The step ids expressions may name here.
    fn known_ids(&self) -> Vec<&str> {
        self.known.iter().map(String::as_str).collect()
    }

    fn at(&self, line: Option<usize>, step: Option<&str>) -> Location {
        Location {
            origin: self.origin.to_owned(),
            line,
            column: None,
            step: step.map(str::to_owned),
        }
    }

    fn steps(
        &mut self,
        raws: Vec<RawStep>,
        field: &str,
        vars: &[&str],
    ) -> Result<Vec<Step>, DefinitionError> {
        raws.into_iter()
            .enumerate()
            .map(|(i, raw)| self.step(raw, &format!("{field}[{i}]"), vars))
            .collect()
    }

    fn step(&mut self, raw: RawStep, field: &str, vars: &[&str]) -> Result<Step, DefinitionError> {
        let count = self.seen.get(&raw.id).copied().unwrap_or(0);
        let line = self
            .id_lines
            .line(&raw.id, count + usize::from(raw.id == self.workflow_id));
        let here = self.at(line, Some(&raw.id));
        let invalid = |m: String| DefinitionError::invalid(here.clone(), m);
        check_id(&raw.id).map_err(|m| invalid(format!("{field}.id: {m}")))?;
        if count > 0 {
            return Err(invalid(format!(
                "{field}.id: the id `{}` is used by an earlier step",
                raw.id
            )));
        }
        self.seen.insert(raw.id.clone(), 1);

        let kinds = [
            raw.uses.is_some(),
            raw.subflow.is_some(),
            raw.sleep.is_some(),
            raw.sleep_until.is_some(),
            raw.emit.is_some(),
            raw.await_.is_some(),
            raw.parallel.is_some(),
            raw.switch.is_some(),
            raw.foreach.is_some(),
            raw.while_.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(invalid(
                "a step needs exactly one of `uses`, `subflow`, `sleep`, `sleep_until`, `emit`, `await`, `parallel`, `switch`, `foreach` or `while`"
                    .to_owned(),
            ));
        }
        let only_with_uses = [
            ("timeout", raw.timeout.is_some()),
            ("memory_limit", raw.memory_limit.is_some()),
        ];
        if raw.uses.is_none()
            && let Some((key, _)) = only_with_uses.iter().find(|(_, set)| *set)
        {
            return Err(invalid(format!(
                "`{key}` applies only to a step with `uses`"
            )));
        }
        if raw.with.is_some()
            && raw.uses.is_none()
            && raw.subflow.is_none()
            && raw.emit.is_none()
            && raw.await_.is_none()
        {
            return Err(invalid(
                "`with` applies only to a step with `uses`, `subflow`, `emit` or `await`"
                    .to_owned(),
            ));
        }
        if raw.retry.is_some() && raw.uses.is_none() && raw.subflow.is_none() {
            return Err(invalid(
                "`retry` applies only to a step with `uses` or `subflow`".to_owned(),
            ));
        }
        let loops = raw.foreach.is_some() || raw.while_.is_some();
        if raw.steps.is_some() != loops {
            return Err(invalid(
                "`steps` belongs to `foreach` and `while`, and they need it".to_owned(),
            ));
        }
        if raw.concurrency.is_some() && raw.foreach.is_none() {
            return Err(invalid(
                "`concurrency` applies only to a `foreach` step".to_owned(),
            ));
        }
        if raw.max_iterations.is_some() != raw.while_.is_some() {
            return Err(invalid(
                "`while` needs `max_iterations`, and only `while` takes it".to_owned(),
            ));
        }

        let known = self.known_ids();
        let condition = raw
            .condition
            .as_deref()
            .map(|text| condition_template(text, "if", &known, vars))
            .transpose()
            .map_err(invalid)?;
        drop(known);

        let kind = if let Some(uses) = raw.uses {
            let uses = parse_plugin_ref(&uses).map_err(|m| invalid(format!("uses: {m}")))?;
            let with =
                Template::compile(&raw.with.unwrap_or(Value::Null), "with").map_err(invalid)?;
            let known = self.known_ids();
            with.check_references(&known, vars).map_err(invalid)?;
            let timeout = raw
                .timeout
                .as_deref()
                .map(parse_timeout)
                .transpose()
                .map_err(|m| invalid(format!("timeout: {m}")))?;
            let memory_limit = raw
                .memory_limit
                .as_deref()
                .map(parse_memory_limit)
                .transpose()
                .map_err(|m| invalid(format!("memory_limit: {m}")))?;
            StepKind::Call(Call {
                uses,
                with,
                timeout,
                memory_limit,
            })
        } else if let Some(value) = raw.sleep {
            let template = Template::compile(&value, "sleep").map_err(invalid)?;
            template
                .check_references(&self.known_ids(), vars)
                .map_err(invalid)?;
            if let Value::String(text) = &value
                && !text.contains("${{")
            {
                parse_timeout(text).map_err(|m| invalid(format!("sleep: {m}")))?;
            }
            StepKind::Sleep(Sleep::For(template))
        } else if let Some(value) = raw.sleep_until {
            let template = Template::compile(&value, "sleep_until").map_err(invalid)?;
            template
                .check_references(&self.known_ids(), vars)
                .map_err(invalid)?;
            if let Value::String(text) = &value
                && !text.contains("${{")
            {
                weft_core::Timestamp::parse(text)
                    .map_err(|message| invalid(format!("sleep_until: {message}")))?;
            }
            StepKind::Sleep(Sleep::Until(template))
        } else if let Some(channel) = raw.emit {
            weft_core::names::check_name("emit: the channel", &channel).map_err(invalid)?;
            let with =
                Template::compile(&raw.with.unwrap_or(Value::Null), "with").map_err(invalid)?;
            with.check_references(&self.known_ids(), vars)
                .map_err(invalid)?;
            StepKind::Emit(Emit { channel, with })
        } else if let Some(wait) = raw.await_ {
            let with =
                Template::compile(&raw.with.unwrap_or(Value::Null), "with").map_err(invalid)?;
            with.check_references(&self.known_ids(), vars)
                .map_err(invalid)?;
            let timeout = wait
                .timeout
                .as_deref()
                .map(parse_timeout)
                .transpose()
                .map_err(|m| invalid(format!("await.timeout: {m}")))?;
            StepKind::Await(Await { with, timeout })
        } else if let Some(workflow) = raw.subflow {
            check_id(&workflow).map_err(|m| invalid(format!("subflow: {m}")))?;
            let with =
                Template::compile(&raw.with.unwrap_or(Value::Null), "with").map_err(invalid)?;
            let known = self.known_ids();
            with.check_references(&known, vars).map_err(invalid)?;
            StepKind::Subflow(Subflow { workflow, with })
        } else if let Some(branches) = raw.parallel {
            if branches.is_empty() {
                return Err(invalid("parallel: needs at least one branch".to_owned()));
            }
            StepKind::Parallel(self.branches(branches, &format!("{field}.parallel"), vars)?)
        } else if let Some(cases) = raw.switch {
            StepKind::Switch(self.cases(cases, &format!("{field}.switch"), vars, &raw.id, true)?)
        } else if let Some(items) = raw.foreach {
            let known = self.known_ids();
            let items = Template::compile(&items, "foreach").map_err(invalid)?;
            items.check_references(&known, vars).map_err(invalid)?;
            let body_vars = [vars, &["item", "index"]].concat();
            let concurrency = raw.concurrency.unwrap_or(1);
            if concurrency == 0 || concurrency > MAX_CONCURRENCY {
                return Err(invalid(format!(
                    "concurrency must be from 1 to {MAX_CONCURRENCY}, not {concurrency}"
                )));
            }
            let steps = self.body(raw.steps, field, &body_vars, &here)?;
            StepKind::Foreach {
                items,
                steps,
                concurrency,
            }
        } else {
            let body_vars = [vars, &["iteration"]].concat();
            let steps = self.body(raw.steps, field, &body_vars, &here)?;
            let max_iterations = raw.max_iterations.unwrap_or(0);
            if max_iterations == 0 || max_iterations > MAX_ITERATIONS {
                return Err(invalid(format!(
                    "max_iterations must be from 1 to {MAX_ITERATIONS}, not {max_iterations}"
                )));
            }
            // The condition is checked before each iteration; it may name the
            // body's steps, as they were after the previous one.
            let known = self.known_ids();
            let condition = condition_template(
                raw.while_.as_deref().unwrap_or_default(),
                "while",
                &known,
                &body_vars,
            )
            .map_err(invalid)?;
            StepKind::While {
                condition,
                steps,
                max_iterations,
            }
        };

        let catch = match raw.catch {
            Some(handlers) => {
                let handler_vars = [vars, &["error"]].concat();
                self.cases(
                    handlers,
                    &format!("{field}.catch"),
                    &handler_vars,
                    &raw.id,
                    false,
                )?
            }
            None => Vec::new(),
        };
        let retry = raw
            .retry
            .map(RawRetry::check)
            .transpose()
            .map_err(|m| invalid(format!("retry: {m}")))?
            .unwrap_or_default();
        self.known.push(raw.id.clone());
        Ok(Step {
            id: raw.id,
            kind,
            condition,
            retry,
            continue_on_error: raw.continue_on_error,
            catch,
            line,
        })
    }

    /// The branches of a `parallel`: they run at once, so a branch may not
    /// name a step of another; every branch's steps are known after it.
    fn branches(
        &mut self,
        raws: Vec<RawStep>,
        field: &str,
        vars: &[&str],
    ) -> Result<Vec<Step>, DefinitionError> {
        let before = self.known.len();
        let mut added = Vec::new();
        let mut branches = Vec::with_capacity(raws.len());
        for (i, raw) in raws.into_iter().enumerate() {
            branches.push(self.step(raw, &format!("{field}[{i}]"), vars)?);
            added.extend(self.known.drain(before..));
        }
        self.known.extend(added);
        Ok(branches)
    }

    /// The `steps` of a loop, which must not be empty.
    fn body(
        &mut self,
        raws: Option<Vec<RawStep>>,
        field: &str,
        vars: &[&str],
        here: &Location,
    ) -> Result<Vec<Step>, DefinitionError> {
        let steps = self.steps(raws.unwrap_or_default(), &format!("{field}.steps"), vars)?;
        if steps.is_empty() {
            return Err(DefinitionError::invalid(
                here.clone(),
                format!("{field}.steps: is empty"),
            ));
        }
        Ok(steps)
    }

    /// `switch` cases (`switch` true) or `catch` handlers: a case without
    /// `if` matches anything and must come last.
    fn cases(
        &mut self,
        raws: Vec<RawCase>,
        field: &str,
        vars: &[&str],
        owner: &str,
        switch: bool,
    ) -> Result<Vec<Case>, DefinitionError> {
        let line = self.id_lines.line(owner, 0);
        let here = self.at(line, Some(owner));
        let invalid = |m: String| DefinitionError::invalid(here.clone(), m);
        if raws.is_empty() {
            return Err(invalid(format!("{field}: needs at least one case")));
        }
        let last = raws.len() - 1;
        let mut cases = Vec::with_capacity(raws.len());
        for (i, raw) in raws.into_iter().enumerate() {
            let known = self.known_ids();
            let condition = match raw.condition.as_deref() {
                Some(text) => Some(
                    condition_template(text, &format!("{field}[{i}].if"), &known, vars)
                        .map_err(invalid)?,
                ),
                None if i == last => None,
                None => {
                    return Err(invalid(format!(
                        "{field}[{i}]: a {} without `if` matches everything, so it must be the last",
                        if switch { "case" } else { "handler" }
                    )));
                }
            };
            drop(known);
            if raw.steps.is_empty() {
                return Err(invalid(format!("{field}[{i}].steps: is empty")));
            }
            let steps = self.steps(raw.steps, &format!("{field}[{i}].steps"), vars)?;
            cases.push(Case { condition, steps });
        }
        Ok(cases)
    }
}

/// Compiles a condition written with or without `${{ }}`.
fn condition_template(
    text: &str,
    field: &str,
    known: &[&str],
    vars: &[&str],
) -> Result<Template, String> {
    let text = if text.contains("${{") {
        text.to_owned()
    } else {
        format!("${{{{ {text} }}}}")
    };
    let template = Template::compile(&Value::String(text), field)?;
    template.check_references(known, vars)?;
    Ok(template)
}

pub(super) fn parse(
    source: &str,
    format: Format,
    origin: &str,
) -> Result<Workflow, DefinitionError> {
    let raw = read(source, format, origin)?;
    let at = |line: Option<usize>, step: Option<&str>| Location {
        origin: origin.to_owned(),
        line,
        column: None,
        step: step.map(str::to_owned),
    };

    check_id(&raw.id).map_err(|m| {
        DefinitionError::invalid(
            at(find_key_line(source, "id", &raw.id), None),
            format!("id: {m}"),
        )
    })?;
    if raw.steps.is_empty() {
        return Err(DefinitionError::invalid(
            at(find_key_line(source, "steps", ""), None),
            "steps: a workflow needs at least one step",
        ));
    }
    let timeout = raw
        .timeout
        .as_deref()
        .map(parse_timeout)
        .transpose()
        .map_err(|m| {
            DefinitionError::invalid(
                at(find_key_line(source, "timeout", ""), None),
                format!("timeout: {m}"),
            )
        })?;
    let mut schedules: Vec<(String, super::Schedule)> = Vec::new();
    for (i, spec) in raw
        .on
        .map(|on| on.schedule)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let invalid = |m: String| {
            DefinitionError::invalid(
                at(find_key_line(source, "cron", &spec.cron), None),
                format!("on.schedule[{i}].{m}"),
            )
        };
        let schedule = spec.compile().map_err(invalid)?;
        let id = spec.id.clone().unwrap_or_else(|| format!("cron-{}", i + 1));
        if schedules.iter().any(|(seen, _)| *seen == id) {
            return Err(invalid(format!("id: `{id}` names an earlier trigger")));
        }
        schedules.push((id, schedule));
    }
    let inputs = raw
        .inputs
        .map(InputSchema::compile)
        .transpose()
        .map_err(|m| {
            DefinitionError::invalid(
                at(find_key_line(source, "inputs", ""), None),
                format!("inputs: not a usable JSON Schema: {m}"),
            )
        })?;

    let mut checker = Checker {
        origin,
        workflow_id: raw.id.clone(),
        id_lines: IdLines::index(source),
        seen: Default::default(),
        known: Vec::new(),
    };
    let steps = checker.steps(raw.steps, "steps", &BASE_VARS)?;
    let catch = match raw.catch {
        Some(handlers) => {
            let vars = [&BASE_VARS[..], &["error"]].concat();
            checker.cases(handlers, "catch", &vars, &raw.id, false)?
        }
        None => Vec::new(),
    };

    let outputs = raw
        .outputs
        .map(|value| {
            let line = find_key_line(source, "outputs", "");
            let template = Template::compile(&value, "outputs")
                .map_err(|m| DefinitionError::invalid(at(line, None), m))?;
            let ids = checker.known_ids();
            template
                .check_references(&ids, &BASE_VARS)
                .map_err(|m| DefinitionError::invalid(at(line, None), m))?;
            Ok(template)
        })
        .transpose()?;

    Ok(Workflow {
        id: raw.id,
        version: raw.version,
        description: raw.description,
        inputs,
        steps,
        outputs,
        catch,
        timeout,
        schedules,
        origin: origin.to_owned(),
        source: source.to_owned(),
        format,
    })
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

/// Parses `name`, `name@<semver requirement>` or `name@sha256:<64 hex>`.
pub(crate) fn parse_plugin_ref(text: &str) -> Result<PluginRef, String> {
    let (name, version) = match text.split_once('@') {
        Some((name, version)) => (name, Some(version)),
        None => (text, None),
    };
    check_id(name).map_err(|m| format!("plugin name {m}"))?;
    let version = match version {
        None => VersionPin::Any,
        Some(digest) if digest.starts_with("sha256:") => {
            let hex = &digest["sha256:".len()..];
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "`{digest}` is not a digest; expected `sha256:` and 64 hex digits"
                ));
            }
            VersionPin::Digest(format!("sha256:{}", hex.to_ascii_lowercase()))
        }
        Some(req) => VersionPin::Req(semver::VersionReq::parse(req).map_err(|e| {
            format!("`{req}` is not a version requirement such as `1`, `1.2` or `=1.2.3`: {e}")
        })?),
    };
    Ok(PluginRef {
        name: name.to_owned(),
        version,
    })
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let duration = weft_core::clock::parse_duration(text)?;
    if duration.is_zero() {
        return Err("must be longer than zero".to_owned());
    }
    Ok(duration)
}

fn parse_memory_limit(text: &str) -> Result<u64, String> {
    let size: bytesize::ByteSize = text
        .parse()
        .map_err(|e| format!("`{text}` is not a size such as `64MiB`: {e}"))?;
    let bytes = size.as_u64();
    if bytes < (1 << 20) {
        return Err(format!("`{text}` is under the smallest limit, 1MiB"));
    }
    if bytes > MAX_MEMORY_LIMIT {
        return Err(format!("`{text}` is over the largest limit, 4GiB"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_yaml(source: &str) -> Result<Workflow, DefinitionError> {
        parse(source, Format::Yaml, "wf.yaml")
    }

    fn error_of(source: &str) -> String {
        match parse_yaml(source) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    const GOOD: &str = "\
id: greet
inputs: { type: object, required: [name] }
steps:
  - id: render
    uses: template@1
    with:
      template: 'Hello, {{ who }}!'
      vars: { who: '${{ inputs.name }}' }
    timeout: 5s
    memory_limit: 32MiB
  - { id: shape, uses: transform, with: { data: '${{ steps.render.output }}' } }
outputs:
  text: '${{ steps.shape.output.text }}'
";

    #[test]
    fn a_good_workflow_is_read_in_full() {
        let wf = parse_yaml(GOOD).unwrap();
        assert_eq!(wf.id, "greet");
        assert_eq!(wf.version, 1);
        assert_eq!(wf.steps.len(), 2);
        assert_eq!(
            wf.steps[0].call().unwrap().timeout,
            Some(Duration::from_secs(5))
        );
        assert_eq!(wf.steps[0].call().unwrap().memory_limit, Some(32 << 20));
        assert_eq!(wf.steps[0].line, Some(4));
        assert_eq!(wf.steps[1].line, Some(11));
        assert_eq!(wf.steps[0].call().unwrap().uses.to_string(), "template@^1");
        assert_eq!(wf.steps[1].call().unwrap().uses.version, VersionPin::Any);
    }

    #[test]
    fn yaml_syntax_errors_name_the_line() {
        let e = error_of("id: x\nsteps:\n  - id: a\n    uses: \"unclosed\n");
        assert_eq!(
            e,
            "wf.yaml:5:1: found unexpected end of stream, while scanning a quoted scalar at line 4 column 11"
        );
    }

    #[test]
    fn unknown_fields_are_named_with_their_line() {
        let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    retries: 3\n");
        assert!(e.starts_with("wf.yaml:5:"), "{e}");
        assert!(e.contains("unknown field `retries`"), "{e}");
    }

    #[test]
    fn a_missing_id_is_named() {
        let e = error_of("steps:\n  - id: a\n    uses: echo\n");
        assert!(e.contains("missing field `id`"), "{e}");
    }

    #[test]
    fn duplicate_step_ids_point_at_the_second() {
        let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n  - id: a\n    uses: echo\n");
        assert_eq!(
            e,
            "wf.yaml:5: step `a`: steps[1].id: the id `a` is used by an earlier step"
        );
    }

    #[test]
    fn step_lines_are_found_in_every_style() {
        let wf = parse_yaml(
            "id: same\nsteps:\n  - { id: a, uses: echo }\n  -\n    uses: echo\n    \"id\": 'same'\n  - uses: echo\n    id: b-2\n",
        )
        .unwrap();
        let lines: Vec<_> = wf.steps.iter().map(|s| s.line).collect();
        assert_eq!(lines, [Some(3), Some(6), Some(8)]);
    }

    #[test]
    fn bad_expressions_name_the_step_and_field() {
        let e =
            error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    with: { n: '${{ 1 + }}' }\n");
        assert!(e.starts_with("wf.yaml:3: step `a`: with.n:"), "{e}");
        assert!(e.contains("1 +"), "{e}");
    }

    #[test]
    fn references_to_later_or_unknown_steps_are_refused() {
        let e = error_of(
            "id: x\nsteps:\n  - id: a\n    uses: echo\n    with: '${{ steps.b.output }}'\n  - id: b\n    uses: echo\n",
        );
        assert!(e.contains("step `a`") && e.contains("`b`"), "{e}");
        let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    with: '${{ input.x }}'\n");
        assert!(e.contains("`input`"), "{e}");
    }

    #[test]
    fn conditions_and_retries_are_read_and_checked() {
        let wf = parse_yaml(
            "id: x\nsteps:\n  - id: a\n    uses: echo\n    if: inputs.go\n    retry: { max_attempts: 3, initial: 10ms, max: 1s, retry_on: [timeout] }\n    continue_on_error: true\n",
        )
        .unwrap();
        let step = &wf.steps[0];
        assert!(step.condition.is_some());
        assert!(step.continue_on_error);
        assert_eq!(step.retry.max_attempts, 3);
        assert_eq!(step.retry.initial, Duration::from_millis(10));
        assert_eq!(
            step.retry.retry_on.as_deref(),
            Some(&["timeout".to_owned()][..])
        );
        let e =
            error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    retry: { max_attempts: 0 }\n");
        assert!(
            e.contains("retry: max_attempts must be from 1 to 100, not 0"),
            "{e}"
        );
        let e = error_of(
            "id: x\nsteps:\n  - id: a\n    uses: echo\n    retry: { max_attempts: 2, initial: 5s, max: 1s }\n",
        );
        assert!(e.contains("max (1s) is shorter than initial (5s)"), "{e}");
        let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    if: steps.b.output\n");
        assert!(
            e.contains("step `a`: if: `steps.b.output`: refers to step `b`"),
            "{e}"
        );
    }

    #[test]
    fn bad_fields_are_explained() {
        let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    timeout: soon\n");
        assert!(e.contains("timeout: `soon` is not a duration"), "{e}");
        let e = error_of("id: x\nsteps:\n  - id: a\n    uses: echo\n    memory_limit: 9GiB\n");
        assert!(e.contains("over the largest limit"), "{e}");
        let e = error_of("id: x\nsteps:\n  - id: a\n    uses: 'echo@not a version'\n");
        assert!(
            e.contains("uses: `not a version` is not a version requirement"),
            "{e}"
        );
        let e = error_of("id: 'has space'\nsteps:\n  - id: a\n    uses: echo\n");
        assert!(e.contains("id: `has space` has ` `"), "{e}");
        let e = error_of("id: x\nsteps: []\n");
        assert!(e.contains("at least one step"), "{e}");
        let e = error_of("id: x\ninputs: { type: 12 }\nsteps:\n  - id: a\n    uses: echo\n");
        assert!(
            e.starts_with("wf.yaml:2: inputs: not a usable JSON Schema"),
            "{e}"
        );
    }

    #[test]
    fn json_definitions_are_accepted_and_located() {
        let wf = parse(
            r#"{"id": "x", "steps": [{"id": "a", "uses": "echo@sha256:ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789"}]}"#,
            Format::Json,
            "wf.json",
        )
        .unwrap();
        assert!(
            matches!(&wf.steps[0].call().unwrap().uses.version, VersionPin::Digest(d) if d.starts_with("sha256:abcdef"))
        );
        let e = parse("{\"id\": \"x\",\n \"steps\": [}", Format::Json, "wf.json").unwrap_err();
        assert!(e.to_string().starts_with("wf.json:2:"), "{e}");
    }

    #[test]
    fn input_schemas_report_every_problem_with_its_place() {
        let wf = parse_yaml(GOOD).unwrap();
        let schema = wf.inputs.unwrap();
        assert!(schema.check(&serde_json::json!({"name": "Ada"})).is_ok());
        let problems = schema
            .check(&serde_json::json!({"nom": "Ada"}))
            .unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].contains("at /:") && problems[0].contains("name"),
            "{problems:?}"
        );
    }
}
