//! The workflow format: parse a YAML or JSON file, check it, and compile its
//! expressions, once, before anything runs.
//!
//! ```yaml
//! id: greet
//! inputs: { type: object, required: [name] }   # JSON Schema, checked at start
//! steps:
//!   - id: render
//!     uses: template@1                          # plugin name[@version]
//!     with:
//!       template: "Hello, {{ who }}!"
//!       vars: { who: "${{ inputs.name }}" }
//!     timeout: 10s                              # default 30s
//!     memory_limit: 128MiB                      # default 64MiB
//!     if: "${{ inputs.name != '' }}"            # skip the step when false
//!     retry: { max_attempts: 3, backoff: exponential, initial: 200ms, max: 5s }
//!     continue_on_error: false
//! outputs:
//!   text: "${{ steps.render.output.text }}"
//! ```
//!
//! Every error names the file, the line where it is known, and the step.

mod budget;
pub mod cases;
mod dir;
mod error;
mod expr;
mod lines;
mod parse;
mod policy;
mod schedule;

use std::path::Path;
use std::time::Duration;

pub use dir::{WorkflowDir, Workflows};
pub use error::{DefinitionError, Location};
pub use expr::{EvalError, Scope, StepEntry, Template};
pub use policy::{Backoff, MAX_ATTEMPTS, RetryPolicy};
pub use schedule::{MAX_CATCH_UP, Schedule};
pub use weft_core::names::check_id;
pub use weft_core::{CatchUp, InputSchema, Overlap, ScheduleSpec};

/// A checked workflow, ready to run.
#[derive(Debug)]
pub struct Workflow {
    /// The workflow's id.
    pub id: String,
    /// The version of the definition; 1 unless the file says otherwise.
    pub version: u32,
    /// One line for people.
    pub description: Option<String>,
    /// The JSON Schema that a run's input must satisfy.
    pub inputs: Option<InputSchema>,
    /// The steps, run in order.
    pub steps: Vec<Step>,
    /// What the run returns, evaluated after its last step.
    pub outputs: Option<Template>,
    /// The JSON Schema the run's outputs must satisfy; a run whose outputs
    /// do not fails with `invalid_outputs`, which `catch` may handle.
    pub outputs_schema: Option<InputSchema>,
    /// Handlers for the run's failure; a handler that runs to the end makes
    /// the run succeed, with the handler's last output as its outputs.
    pub catch: Vec<Case>,
    /// The run's deadline, from its start: when it passes, the run fails
    /// with `run_timeout` (which its `catch` may handle) or ends
    /// `timed_out`.
    pub timeout: Option<Duration>,
    /// How long an ended run of this workflow is kept (`retain:`), before
    /// the sweeper deletes it; the tenant's or the host's when `None`.
    pub retain: Option<Retain>,
    /// The snapshot stores its steps may read (`snapshots:`), in order.
    pub snapshots: Vec<SnapshotUse>,
    /// Cron triggers (`on: schedule:`), each with its id.
    pub schedules: Vec<(String, Schedule)>,
    /// Where the definition came from, for messages.
    pub origin: String,
    /// The definition's text, kept so a run can store what it follows.
    pub source: String,
    /// The definition's syntax.
    pub format: Format,
}

/// A snapshot store a workflow reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotUse {
    /// The store's name, as its tenant names it.
    pub name: String,
    /// `revision: latest`: each call reads the newest revision. Otherwise
    /// a run reads the revision that was the newest at its start.
    pub latest: bool,
}

/// How long ended runs are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retain {
    /// Never deleted by the sweeper (`forever`).
    Forever,
    /// Deleted once ended for this long.
    For(Duration),
}

impl Retain {
    /// `forever`, or a duration longer than zero such as `30d`.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim() == "forever" {
            return Ok(Self::Forever);
        }
        let duration = weft_core::clock::parse_duration(text.trim())
            .map_err(|e| format!("{e}; or `forever`"))?;
        if duration.is_zero() {
            return Err("must be longer than zero, or `forever`".to_owned());
        }
        Ok(Self::For(duration))
    }
}

/// One step of a workflow.
#[derive(Debug)]
pub struct Step {
    /// Unique within the workflow, at every depth.
    pub id: String,
    /// What the step does.
    pub kind: StepKind,
    /// When given, the step runs only if this evaluates to `true`; otherwise
    /// it is skipped and its output is `null`.
    pub condition: Option<Template>,
    /// How failed attempts are retried (steps with `uses` only).
    pub retry: RetryPolicy,
    /// When true, a failure of this step does not fail the run: the run goes
    /// on, and `steps.<id>.error` holds the error.
    pub continue_on_error: bool,
    /// Handlers for the step's failure; the first whose `if` matches (or
    /// that has none) runs, and its last output becomes the step's.
    pub catch: Vec<Case>,
    /// The line of the step in its file, when known.
    pub line: Option<usize>,
}

/// What a step does.
#[derive(Debug)]
pub enum StepKind {
    /// `uses:` calls a plugin.
    Call(Call),
    /// `sleep:` or `sleep_until:` waits, on a durable timer, holding no
    /// thread and (with nothing else to do) no memory; its output is
    /// `{"slept_until": <RFC 3339 time>}`.
    Sleep(Sleep),
    /// `subflow:` starts another workflow as a child run and waits for it;
    /// the child's outputs are the step's output, and a failed child fails
    /// the step.
    Subflow(Subflow),
    /// `emit:` commits a message (its `with`) on a channel, for the
    /// channel's subscribers; its output is `{"message": <id>, "channel":
    /// <channel>}`.
    Emit(Emit),
    /// `await:` waits for an outside actor (over the API): its output is
    /// the payload the actor completes it with.
    Await(Await),
    /// `parallel:` runs every branch at once; its output is `{branch id:
    /// output}`. The first branch to fail (in document order, among those
    /// that failed) fails the step; branches still running are abandoned.
    Parallel(Vec<Step>),
    /// `switch:` runs the steps of the first case whose `if` is true (a case
    /// without `if` is the default); its output is that case's last output.
    Switch(Vec<Case>),
    /// `foreach:` runs `steps` once per item of a list, with `item` and
    /// `index`; its output is the list of each iteration's last output, in
    /// the list's order.
    Foreach {
        /// The list.
        items: Template,
        /// The body.
        steps: Vec<Step>,
        /// How many iterations may be in progress at once (1: one after
        /// another, the default).
        concurrency: u32,
    },
    /// `while:` runs `steps` while the condition holds, with `iteration`
    /// from 0; reaching `max_iterations` with it still true is an error. Its
    /// output is the last iteration's last output.
    While {
        /// Checked before each iteration.
        condition: Template,
        /// The body.
        steps: Vec<Step>,
        /// The cap on iterations.
        max_iterations: u32,
    },
}

/// A plugin call.
#[derive(Debug)]
pub struct Call {
    /// The plugin.
    pub uses: PluginRef,
    /// The step's input, with `${{ }}` expressions.
    pub with: Template,
    /// How long one attempt may run; the runtime's default when `None`.
    pub timeout: Option<Duration>,
    /// How large the guest's memory may grow, in bytes; the runtime's default
    /// when `None`.
    pub memory_limit: Option<u64>,
    /// Where the step may send HTTP requests (`allow: {http: [...]}`);
    /// nowhere when empty.
    pub allow_http: Vec<weft_core::egress::Rule>,
    /// The tenant's secrets the step may read (`secrets: [...]`).
    pub secrets: Vec<String>,
    /// A command's arguments (`args: [...]`), a list of strings once
    /// evaluated; only a command step takes them.
    pub args: Option<Box<Template>>,
    /// A command's environment (`env: {NAME: value}`), an object of strings
    /// once evaluated; only a command step takes it.
    pub env: Option<Box<Template>>,
}

/// How long a `sleep` waits.
#[derive(Debug)]
pub enum Sleep {
    /// `sleep:`: a duration (`90s`, `2h`) or a number of milliseconds.
    For(Template),
    /// `sleep_until:`: an RFC 3339 time or milliseconds since the epoch.
    Until(Template),
}

/// A child run.
#[derive(Debug)]
pub struct Subflow {
    /// The id of the workflow to start, as it is deployed when the step
    /// runs.
    pub workflow: String,
    /// The child's input, with `${{ }}` expressions.
    pub with: Template,
}

/// A message a step emits.
#[derive(Debug)]
pub struct Emit {
    /// The channel.
    pub channel: String,
    /// The payload, with `${{ }}` expressions.
    pub with: Template,
}

/// A wait for an outside actor.
#[derive(Debug)]
pub struct Await {
    /// What the actor is shown (the step's input), with `${{ }}`
    /// expressions.
    pub with: Template,
    /// How long to wait before the step fails with `await_timeout`;
    /// forever when `None`.
    pub timeout: Option<Duration>,
}

/// A `switch` case or a `catch` handler.
#[derive(Debug)]
pub struct Case {
    /// The guard; `None` matches anything.
    pub condition: Option<Template>,
    /// What runs when it matches.
    pub steps: Vec<Step>,
}

impl Step {
    /// The plugin call, for a step with `uses`.
    pub fn call(&self) -> Option<&Call> {
        match &self.kind {
            StepKind::Call(call) => Some(call),
            _ => None,
        }
    }

    /// The child run, for a step with `subflow`.
    pub fn subflow(&self) -> Option<&Subflow> {
        match &self.kind {
            StepKind::Subflow(subflow) => Some(subflow),
            _ => None,
        }
    }

    /// What kind of step it is, as the format names it: `uses`, `sleep`,
    /// `subflow`, `emit`, `await`, `parallel`, `switch`, `foreach`,
    /// `while`.
    pub fn kind_name(&self) -> &'static str {
        match &self.kind {
            StepKind::Call(_) => "uses",
            StepKind::Sleep(_) => "sleep",
            StepKind::Subflow(_) => "subflow",
            StepKind::Emit(_) => "emit",
            StepKind::Await(_) => "await",
            StepKind::Parallel(_) => "parallel",
            StepKind::Switch(_) => "switch",
            StepKind::Foreach { .. } => "foreach",
            StepKind::While { .. } => "while",
        }
    }

    /// True for a leaf: a step that is one call (`uses`) or one child run
    /// (`subflow`), with one record per attempt.
    pub fn is_leaf(&self) -> bool {
        matches!(
            self.kind,
            StepKind::Call(_)
                | StepKind::Subflow(_)
                | StepKind::Sleep(_)
                | StepKind::Emit(_)
                | StepKind::Await(_)
        )
    }

    /// The steps directly inside this one, handlers included.
    pub fn children(&self) -> impl Iterator<Item = &Step> {
        let body: Box<dyn Iterator<Item = &Step>> = match &self.kind {
            StepKind::Call(_)
            | StepKind::Subflow(_)
            | StepKind::Sleep(_)
            | StepKind::Emit(_)
            | StepKind::Await(_) => Box::new(std::iter::empty()),
            StepKind::Parallel(branches) => Box::new(branches.iter()),
            StepKind::Switch(cases) => Box::new(cases.iter().flat_map(|c| c.steps.iter())),
            StepKind::Foreach { steps, .. } | StepKind::While { steps, .. } => {
                Box::new(steps.iter())
            }
        };
        body.chain(self.catch.iter().flat_map(|c| c.steps.iter()))
    }
}

impl Workflow {
    /// Every step, at every depth, in document order.
    pub fn all_steps(&self) -> Vec<&Step> {
        fn visit<'a>(step: &'a Step, into: &mut Vec<&'a Step>) {
            into.push(step);
            for child in step.children() {
                visit(child, into);
            }
        }
        let mut all = Vec::new();
        let handlers = self.catch.iter().flat_map(|c| c.steps.iter());
        for step in self.steps.iter().chain(handlers) {
            visit(step, &mut all);
        }
        all
    }
}

/// A reference to a plugin, as written in `uses:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRef {
    /// The plugin's name.
    pub name: String,
    /// Which versions are acceptable.
    pub version: VersionPin,
}

/// The version part of a `uses:` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionPin {
    /// `name`: any version.
    Any,
    /// `name@1`, `name@1.2`, `name@^1.2.3`, `name@=1.2.3`: a semver
    /// requirement; a bare version means "compatible with" (caret).
    Req(semver::VersionReq),
    /// `name@sha256:<hex>`: exactly the component with this digest.
    Digest(String),
}

impl std::fmt::Display for PluginRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.version {
            VersionPin::Any => write!(f, "{}", self.name),
            VersionPin::Req(req) => write!(f, "{}@{}", self.name, req),
            VersionPin::Digest(digest) => write!(f, "{}@{}", self.name, digest),
        }
    }
}

/// The text of the file at `path`, refused when it is larger than `max`
/// bytes; errors name the file.
pub(crate) fn read_capped(path: &Path, max: u64) -> Result<String, DefinitionError> {
    use std::io::Read as _;
    let read_error = |message: String| DefinitionError::Read {
        path: path.to_owned(),
        message,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(max + 1).read_to_string(&mut text))
        .map_err(|e| read_error(e.to_string()))?;
    if text.len() as u64 > max {
        return Err(read_error(format!("larger than {} MiB", max >> 20)));
    }
    Ok(text)
}

/// The largest workflow file [`load`] reads.
pub const MAX_DEFINITION: u64 = 16 << 20;

/// Reads and checks the workflow file at `path`. YAML unless the file name
/// ends in `.json`.
pub fn load(path: impl AsRef<Path>) -> Result<Workflow, DefinitionError> {
    let path = path.as_ref();
    let source = read_capped(path, MAX_DEFINITION)?;
    let is_json = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
    let format = if is_json { Format::Json } else { Format::Yaml };
    parse(&source, format, &path.display().to_string())
}

/// The syntax of a workflow definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// YAML 1.2 (which also accepts most JSON).
    Yaml,
    /// JSON.
    Json,
}

impl Format {
    /// `yaml` or `json`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Yaml => "yaml",
            Self::Json => "json",
        }
    }

    /// The format called `name`, as [`Format::name`] gives it.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "yaml" => Some(Self::Yaml),
            "json" => Some(Self::Json),
            _ => None,
        }
    }
}

/// Checks a workflow definition held in memory; `origin` names it in errors.
pub fn parse(source: &str, format: Format, origin: &str) -> Result<Workflow, DefinitionError> {
    parse::parse(source, format, origin, false)
}

/// [`parse`] for a definition that was deployed before (a run's, or a
/// revision's, read back from the store): a name reserved since it was
/// deployed passes, so that its runs keep going.
pub fn parse_stored(
    source: &str,
    format: Format,
    origin: &str,
) -> Result<Workflow, DefinitionError> {
    parse::parse(source, format, origin, true)
}

/// The JSON Schema (draft 2020-12) of a workflow file, generated from the
/// types it is read into.
///
/// The parser checks more than the schema says: that a step is exactly one
/// kind, that its expressions compile and name only earlier steps, that
/// durations and sizes read, and so on.
pub fn workflow_schema() -> serde_json::Value {
    parse::schema()
}
