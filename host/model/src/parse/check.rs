//! The walk over a workflow's steps, in document order: each step's id is
//! claimed (unique at every depth), its keys are checked against its kind,
//! and the ids its expressions may name so far are tracked. What each kind
//! of step checks is in `step.rs`.

use std::collections::HashMap;

use serde_json::Value;

use super::{RawCase, RawStep};
use crate::error::{DefinitionError, Location};
use crate::expr::Template;
use crate::lines::IdLines;
use crate::policy::RawRetry;
use crate::{Case, Step, check_id};

/// Checks steps recursively, in document order, tracking which step ids
/// expressions may name so far.
pub(super) struct Checker<'a> {
    origin: &'a str,
    workflow_id: String,
    id_lines: IdLines,
    /// How many times each id has been seen, to find its line and refuse
    /// duplicates.
    seen: HashMap<String, usize>,
    /// The ids of steps an expression may name: those before it.
    known: Vec<String>,
    /// Whether the definition was deployed before (see `parse`).
    pub(super) stored: bool,
}

impl<'a> Checker<'a> {
    /// A checker for the steps of workflow `workflow_id`, written in
    /// `source`, which came from `origin` (`stored`: deployed before).
    pub(super) fn new(origin: &'a str, source: &str, workflow_id: String, stored: bool) -> Self {
        Self {
            origin,
            workflow_id,
            id_lines: IdLines::index(source),
            seen: HashMap::new(),
            known: Vec::new(),
            stored,
        }
    }

    /// The step ids expressions may name here.
    pub(super) fn known_ids(&self) -> Vec<&str> {
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

    /// Compiles `value` (named `field` in errors) and checks that it names
    /// only steps before it and variables in `vars`.
    pub(super) fn template(
        &self,
        value: &Value,
        field: &str,
        vars: &[&str],
    ) -> Result<Template, String> {
        let template = Template::compile(value, field)?;
        template.check_references(&self.known_ids(), vars)?;
        Ok(template)
    }

    pub(super) fn steps(
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

    /// Checks one step, in order: its id, its keys, its `if`, what it does,
    /// its `catch` and its `retry`. Its id is known after it.
    fn step(
        &mut self,
        mut raw: RawStep,
        field: &str,
        vars: &[&str],
    ) -> Result<Step, DefinitionError> {
        let (line, here) = self.claim(&raw.id, field)?;
        let invalid = invalid_at(&here);
        check_keys(&raw).map_err(invalid)?;
        let condition = raw
            .condition
            .take()
            .map(|text| condition_template(&text, "if", &self.known_ids(), vars, self.stored))
            .transpose()
            .map_err(invalid)?;
        let id = raw.id.clone();
        let continue_on_error = raw.continue_on_error;
        let (catch, retry) = (raw.catch.take(), raw.retry.take());

        let kind = self.kind(raw, field, vars, &here)?;
        let catch = self.catch(catch, &format!("{field}.catch"), vars, &id)?;
        let retry = retry
            .map(RawRetry::check)
            .transpose()
            .map_err(|m| invalid(format!("retry: {m}")))?
            .unwrap_or_default();
        self.known.push(id.clone());
        Ok(Step {
            id,
            kind,
            condition,
            retry,
            continue_on_error,
            catch,
            line,
        })
    }

    /// Finds the line of step `id` and claims the id, which no other step
    /// may use; the location is where the step's errors point.
    fn claim(
        &mut self,
        id: &str,
        field: &str,
    ) -> Result<(Option<usize>, Location), DefinitionError> {
        let count = self.seen.get(id).copied().unwrap_or(0);
        let line = self
            .id_lines
            .line(id, count + usize::from(id == self.workflow_id));
        let here = self.at(line, Some(id));
        if let Err(m) = check_id(id) {
            return Err(DefinitionError::invalid(here, format!("{field}.id: {m}")));
        }
        if count > 0 {
            return Err(DefinitionError::invalid(
                here,
                format!("{field}.id: the id `{id}` is used by an earlier step"),
            ));
        }
        self.seen.insert(id.to_owned(), 1);
        Ok((line, here))
    }

    /// The branches of a `parallel`: they run at once, so a branch may not
    /// name a step of another; every branch's steps are known after it.
    pub(super) fn branches(
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
    pub(super) fn body(
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

    /// `catch` handlers of `owner` (a step, or the workflow), which also see
    /// `error`; none when not given.
    pub(super) fn catch(
        &mut self,
        handlers: Option<Vec<RawCase>>,
        field: &str,
        vars: &[&str],
        owner: &str,
    ) -> Result<Vec<Case>, DefinitionError> {
        match handlers {
            Some(handlers) => {
                let handler_vars = [vars, &["error"]].concat();
                self.cases(handlers, field, &handler_vars, owner, false)
            }
            None => Ok(Vec::new()),
        }
    }

    /// `switch` cases (`switch` true) or `catch` handlers: a case without
    /// `if` matches anything and must come last.
    pub(super) fn cases(
        &mut self,
        raws: Vec<RawCase>,
        field: &str,
        vars: &[&str],
        owner: &str,
        switch: bool,
    ) -> Result<Vec<Case>, DefinitionError> {
        let line = self.id_lines.line(owner, 0);
        let here = self.at(line, Some(owner));
        let invalid = invalid_at(&here);
        if raws.is_empty() {
            return Err(invalid(format!("{field}: needs at least one case")));
        }
        let last = raws.len() - 1;
        let mut cases = Vec::with_capacity(raws.len());
        for (i, raw) in raws.into_iter().enumerate() {
            let known = self.known_ids();
            let condition = match raw.condition.as_deref() {
                Some(text) => Some(
                    condition_template(
                        text,
                        &format!("{field}[{i}].if"),
                        &known,
                        vars,
                        self.stored,
                    )
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

/// Refuses a step that is not exactly one kind, or that sets a key its kind
/// does not take.
fn check_keys(raw: &RawStep) -> Result<(), String> {
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
        return Err(
            "a step needs exactly one of `uses`, `subflow`, `sleep`, `sleep_until`, `emit`, `await`, `parallel`, `switch`, `foreach` or `while`"
                .to_owned(),
        );
    }
    let only_with_uses = [
        ("timeout", raw.timeout.is_some()),
        ("memory_limit", raw.memory_limit.is_some()),
        ("allow", raw.allow.is_some()),
        ("secrets", raw.secrets.is_some()),
        ("args", raw.args.is_some()),
        ("env", raw.env.is_some()),
    ];
    if raw.uses.is_none()
        && let Some((key, _)) = only_with_uses.iter().find(|(_, set)| *set)
    {
        return Err(format!("`{key}` applies only to a step with `uses`"));
    }
    if raw.with.is_some()
        && raw.uses.is_none()
        && raw.subflow.is_none()
        && raw.emit.is_none()
        && raw.await_.is_none()
    {
        return Err(
            "`with` applies only to a step with `uses`, `subflow`, `emit` or `await`".to_owned(),
        );
    }
    if raw.retry.is_some() && raw.uses.is_none() && raw.subflow.is_none() {
        return Err("`retry` applies only to a step with `uses` or `subflow`".to_owned());
    }
    let loops = raw.foreach.is_some() || raw.while_.is_some();
    if raw.steps.is_some() != loops {
        return Err("`steps` belongs to `foreach` and `while`, and they need it".to_owned());
    }
    if raw.concurrency.is_some() && raw.foreach.is_none() {
        return Err("`concurrency` applies only to a `foreach` step".to_owned());
    }
    if raw.max_iterations.is_some() != raw.while_.is_some() {
        return Err("`while` needs `max_iterations`, and only `while` takes it".to_owned());
    }
    Ok(())
}

/// Compiles a condition written with or without `${{ }}`.
pub(super) fn condition_template(
    text: &str,
    field: &str,
    known: &[&str],
    vars: &[&str],
    stored: bool,
) -> Result<Template, String> {
    // A block scalar's line end is not text around the expression.
    let text = text.trim();
    let text = if text.contains("${{") {
        text.to_owned()
    } else {
        format!("${{{{ {text} }}}}")
    };
    let template = Template::compile(&Value::String(text), field)?;
    template.check_references(known, vars)?;
    // What can be known before a run: text around an expression is a
    // string, and an expression of no variable has one value. A stored
    // definition, deployed before these checks, loads as it did: its runs
    // resume, and such a condition fails its step when reached.
    if stored {
        return Ok(template);
    }
    if template.is_text() {
        return Err(format!(
            "`{field}` is text around an expression, so a string, never true or false; \
             write the expression alone: `{field}: ${{{{ ... }}}}`"
        ));
    }
    if template.check_references(&[], &[]).is_ok() {
        match template.eval(&crate::Scope::new("", "", &Value::Null)) {
            Ok(Value::Bool(_)) => {}
            Ok(other) => return Err(format!("`{field}` is always {other}, not true or false")),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(template)
}

/// Makes an error at `here` from a message.
pub(super) fn invalid_at(here: &Location) -> impl Fn(String) -> DefinitionError + Copy + '_ {
    move |m: String| DefinitionError::invalid(here.clone(), m)
}
