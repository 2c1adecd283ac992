//! The test-file format: cases for one workflow, which `weft test` runs on
//! the real engine with a simulated clock and a store of their own.
//!
//! ```yaml
//! workflow: order.yaml            # default: the file's name less `.test`
//! cases:
//!   - name: a declined card is tried again
//!     input: { order: { id: A-1 } }
//!     mock:
//!       charge:                   # attempt 1, 2, 3 (the last repeats)
//!         - error: { code: declined }
//!         - error: { code: declined }
//!         - output: { receipt: r-1 }
//!     do:
//!       - advance: 25h
//!       - answer: { step: approve, output: { ok: true } }
//!     expect:
//!       outputs: { receipt: r-1 }
//!       steps: { charge: { state: succeeded, attempts: 3 } }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::{DefinitionError, Location};

/// The suffix a test file's name ends with, before its extension.
pub const TEST_SUFFIX: &str = ".test";

/// True for a test file's path (`order.test.yaml`): a directory of
/// workflows leaves such files out.
pub fn is_test_file(path: &Path) -> bool {
    path.file_stem()
        .and_then(|stem| stem.to_str())
        .is_some_and(|stem| stem.ends_with(TEST_SUFFIX))
}

/// A test file: the cases of one workflow.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "weft workflow tests")]
pub struct TestFile {
    /// The workflow file the cases test, relative to the test file.
    /// Default: this file's name without `.test` (`order.test.yaml` tests
    /// `order.yaml`).
    #[serde(default)]
    pub workflow: Option<String>,
    /// The cases, each run on a fresh store with its own clock.
    pub cases: Vec<TestCase>,
}

/// One case: an input, mocks, what happens meanwhile, and what is expected.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    /// What the case is called in the report.
    pub name: String,
    /// The run's input. Default: `{}`.
    #[serde(default)]
    pub input: Option<Value>,
    /// Results of plugin (`uses:`) steps, by step id, given instead of
    /// calling the plugin: one result for every attempt, or a list, one per
    /// attempt, whose last entry repeats ("fail twice, then succeed"). A
    /// step without a mock calls its plugin from `--plugins`.
    #[serde(default)]
    pub mock: BTreeMap<String, Mock>,
    /// What happens to the run, in order, once it has done all it can:
    /// the clock moves (`advance`), an `await` step is answered (`answer`,
    /// which first moves the clock to the step's wait if it is still
    /// ahead), or the run is cancelled (`cancel`). After the last, the
    /// clock skips from timer to timer until the run ends.
    #[serde(default, rename = "do")]
    pub actions: Vec<Action>,
    /// What the run must come to.
    #[serde(default)]
    pub expect: Expect,
}

/// A mocked step's results.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Mock {
    /// One per attempt; the last repeats.
    Attempts(Vec<Outcome>),
    /// The same for every attempt.
    Always(Outcome),
}

impl Mock {
    /// The result of attempt `attempt` (from 1).
    pub fn attempt(&self, attempt: u32) -> &Outcome {
        match self {
            Self::Always(outcome) => outcome,
            Self::Attempts(list) => {
                let index = (attempt.max(1) as usize - 1).min(list.len().saturating_sub(1));
                &list[index]
            }
        }
    }
}

/// A step's result: an output, or an error.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    /// The step succeeds with this output.
    #[serde(default)]
    pub output: Option<Value>,
    /// The step fails with this error.
    #[serde(default)]
    pub error: Option<MockError>,
}

/// An error a mocked step or an answer fails with.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MockError {
    /// The error's code.
    pub code: String,
    /// A message for people. Default: the code.
    #[serde(default)]
    pub message: Option<String>,
    /// Whether the step's `retry:` policy may try again. Default: true.
    #[serde(default = "yes")]
    pub retryable: bool,
    /// Structured details.
    #[serde(default)]
    pub details: Option<Value>,
}

fn yes() -> bool {
    true
}

/// One thing that happens to the run.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "RawAction")]
#[schemars(with = "RawAction")]
pub enum Action {
    /// Moves the simulated clock by a duration (`25h`, `30d`, `90s`),
    /// firing every timer that comes due on the way.
    Advance(String),
    /// Answers a waiting `await` step.
    Answer(AnswerAction),
    /// Cancels the run.
    Cancel(bool),
}

/// One action as written: a map with exactly one of its keys.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawAction {
    /// Moves the simulated clock by a duration (`25h`, `30d`, `90s`),
    /// firing every timer that comes due on the way.
    #[serde(default)]
    advance: Option<String>,
    /// Answers a waiting `await` step, first moving the clock from timer
    /// to timer until it waits.
    #[serde(default)]
    answer: Option<AnswerAction>,
    /// `true` cancels the run.
    #[serde(default)]
    cancel: Option<bool>,
}

impl TryFrom<RawAction> for Action {
    type Error = String;

    fn try_from(raw: RawAction) -> Result<Self, String> {
        match (raw.advance, raw.answer, raw.cancel) {
            (Some(by), None, None) => Ok(Self::Advance(by)),
            (None, Some(answer), None) => Ok(Self::Answer(answer)),
            (None, None, Some(cancel)) => Ok(Self::Cancel(cancel)),
            _ => Err("an action is one of `advance`, `answer` or `cancel`".to_owned()),
        }
    }
}

/// An answer to an `await` step: `output`, `error`, or `skip`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerAction {
    /// The `await` step's path (its id, or `each[2]/approve` in a loop).
    pub step: String,
    /// The step succeeds with this output.
    #[serde(default)]
    pub output: Option<Value>,
    /// The step fails with this error.
    #[serde(default)]
    pub error: Option<MockError>,
    /// The step is skipped.
    #[serde(default)]
    pub skip: bool,
}

/// What the run must come to. Every field is optional; what is not given
/// is not checked, but the state is always: `succeeded` unless `error` is
/// given (then `failed`).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The run's state at the end.
    #[serde(default)]
    pub state: Option<ExpectedRun>,
    /// The run's outputs, exactly.
    #[serde(default)]
    pub outputs: Option<Value>,
    /// The run's error: the fields given must match.
    #[serde(default)]
    pub error: Option<ExpectedError>,
    /// Steps by path, each a state or a few facts about it.
    #[serde(default)]
    pub steps: BTreeMap<String, ExpectedStep>,
}

/// A run's state at the end of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExpectedRun {
    /// Every step succeeded.
    Succeeded,
    /// A step or an expression failed.
    Failed,
    /// The workflow's `timeout` passed.
    TimedOut,
    /// The run was cancelled.
    Cancelled,
    /// Still going: waiting for an answer nobody gave.
    Running,
}

impl ExpectedRun {
    /// As the store names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
            Self::Running => "running",
        }
    }
}

/// The run's error, in part.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpectedError {
    /// The step that failed.
    #[serde(default)]
    pub step: Option<String>,
    /// The error's code.
    #[serde(default)]
    pub code: Option<String>,
    /// The error's message, exactly.
    #[serde(default)]
    pub message: Option<String>,
}

/// A step's expected end: its state alone, or some facts.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ExpectedStep {
    /// Just the state.
    State(StepState),
    /// Some facts; those not given are not checked.
    Facts(StepFacts),
}

/// Facts about one step at the end of a case.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepFacts {
    /// Its state.
    #[serde(default)]
    pub state: Option<StepState>,
    /// How many attempts it made.
    #[serde(default)]
    pub attempts: Option<u32>,
    /// Its output, exactly.
    #[serde(default)]
    pub output: Option<Value>,
    /// Its error's code.
    #[serde(default)]
    pub error: Option<String>,
}

/// Where a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    /// It has an output.
    Succeeded,
    /// It failed, for good.
    Failed,
    /// Its `if:` was false.
    Skipped,
    /// It waits: for a timer, an answer or a child run.
    Waiting,
    /// It failed and waits to be tried again.
    Retrying,
    /// It has no record: the run never reached it.
    NotRun,
}

impl StepState {
    /// As a report names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
            Self::Waiting => "waiting",
            Self::Retrying => "retrying",
            Self::NotRun => "not_run",
        }
    }
}

/// The JSON Schema (draft 2020-12) of the test-file format.
pub fn test_schema() -> Value {
    let mut schema = schemars::schema_for!(TestFile);
    schema.insert("title".to_owned(), Value::from("weft workflow tests"));
    schema.to_value()
}

/// The largest test file read.
const MAX_TEST_FILE: u64 = 16 << 20;

/// Reads and checks the test file at `path`. Errors name the file and,
/// where known, the line.
pub fn load_tests(path: &Path) -> Result<TestFile, DefinitionError> {
    let text = crate::read_capped(path, MAX_TEST_FILE)?;
    parse_tests(&text, &path.display().to_string())
}

/// Reads and checks a test file's text (YAML, or JSON, which is YAML too);
/// `origin` names it in errors.
pub fn parse_tests(text: &str, origin: &str) -> Result<TestFile, DefinitionError> {
    let at = |line: Option<usize>, column: Option<usize>| Location {
        origin: origin.to_owned(),
        line,
        column,
        step: None,
    };
    crate::budget::check(text).map_err(|refused| {
        DefinitionError::invalid(at(refused.line, refused.column), refused.message)
    })?;
    let file: TestFile = serde_yaml_ng::from_str(text).map_err(|e| {
        let message = crate::parse::readable(&e.to_string());
        match e.location() {
            Some(loc) => {
                let mark = format!(" at line {} column {}", loc.line(), loc.column());
                DefinitionError::invalid(
                    at(Some(loc.line()), Some(loc.column())),
                    message.replacen(&mark, "", 1),
                )
            }
            None => DefinitionError::invalid(at(None, None), message),
        }
    })?;
    if file.cases.is_empty() {
        return Err(DefinitionError::invalid(
            at(None, None),
            "cases: a test file needs at least one case",
        ));
    }
    let mut names = std::collections::BTreeSet::new();
    for case in &file.cases {
        let invalid = |message: String| {
            DefinitionError::invalid(at(None, None), format!("case `{}`: {message}", case.name))
        };
        if !names.insert(case.name.as_str()) {
            return Err(invalid("two cases have this name".to_owned()));
        }
        for (step, mock) in &case.mock {
            let outcomes: &[Outcome] = match mock {
                Mock::Always(one) => std::slice::from_ref(one),
                Mock::Attempts(list) if list.is_empty() => {
                    return Err(invalid(format!("mock `{step}`: the list is empty")));
                }
                Mock::Attempts(list) => list,
            };
            for outcome in outcomes {
                if outcome.output.is_some() == outcome.error.is_some() {
                    return Err(invalid(format!(
                        "mock `{step}`: give either `output` or `error`"
                    )));
                }
            }
        }
        for action in &case.actions {
            match action {
                Action::Advance(by) => {
                    weft_core::clock::parse_duration(by)
                        .map_err(|e| invalid(format!("advance: {e}")))?;
                }
                Action::Answer(answer) => {
                    let given = usize::from(answer.output.is_some())
                        + usize::from(answer.error.is_some())
                        + usize::from(answer.skip);
                    if given != 1 {
                        return Err(invalid(format!(
                            "answer `{}`: give one of `output`, `error` or `skip: true`",
                            answer.step
                        )));
                    }
                }
                Action::Cancel(_) => {}
            }
        }
    }
    Ok(file)
}

/// The workflow file a test file at `path` tests.
pub fn tested_workflow(path: &Path, file: &TestFile) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    if let Some(named) = &file.workflow {
        return dir.join(named);
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    // `order.test.yaml` → `order.yaml`.
    let stripped = match name.rfind(TEST_SUFFIX) {
        Some(cut) => format!("{}{}", &name[..cut], &name[cut + TEST_SUFFIX.len()..]),
        None => name.to_owned(),
    };
    dir.join(stripped)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_file_reads_with_every_kind_of_action_and_mock() {
        let file = parse_tests(
            r#"
cases:
  - name: one
    input: { a: 1 }
    mock:
      charge:
        - error: { code: declined }
        - output: { ok: true }
      ship: { output: 3 }
    do:
      - advance: 25h
      - answer: { step: approve, output: { yes: true } }
      - cancel: true
    expect:
      state: cancelled
      steps: { charge: succeeded, ship: { attempts: 1, output: 3 } }
"#,
            "t.test.yaml",
        )
        .unwrap();
        let case = &file.cases[0];
        assert_eq!(case.actions.len(), 3);
        let charge = &case.mock["charge"];
        assert!(charge.attempt(1).error.is_some());
        assert_eq!(
            charge.attempt(2).output,
            Some(serde_json::json!({"ok": true}))
        );
        assert_eq!(
            charge.attempt(9).output,
            Some(serde_json::json!({"ok": true}))
        );
        assert!(charge.attempt(1).error.as_ref().unwrap().retryable);
        assert_eq!(case.expect.state, Some(ExpectedRun::Cancelled));
    }

    #[test]
    fn mistakes_are_named() {
        let bad = [
            ("cases: []", "at least one case"),
            ("cases: [{name: a, oops: 1}]", "unknown field `oops`"),
            ("cases: [{name: a, do: [{advance: soon}]}]", "advance"),
            (
                "cases: [{name: a, mock: {x: {}}}]",
                "either `output` or `error`",
            ),
            (
                "cases: [{name: a, do: [{answer: {step: s}}]}]",
                "one of `output`, `error`",
            ),
            ("cases: [{name: a}, {name: a}]", "two cases"),
        ];
        for (text, says) in bad {
            let error = parse_tests(text, "t.test.yaml").unwrap_err().to_string();
            assert!(error.contains(says), "{text}: {error}");
            assert!(error.starts_with("t.test.yaml"), "{error}");
        }
    }

    #[test]
    fn a_test_file_names_its_workflow() {
        let file = parse_tests("cases: [{name: a}]", "x").unwrap();
        assert_eq!(
            tested_workflow(Path::new("dir/order.test.yaml"), &file),
            Path::new("dir/order.yaml")
        );
        assert!(is_test_file(Path::new("dir/order.test.yaml")));
        assert!(!is_test_file(Path::new("dir/order.yaml")));
    }
}
