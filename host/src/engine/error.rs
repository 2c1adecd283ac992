use crate::plugins::ResolveError;
use crate::store::StoreError;

/// Why a run could not start, or could not be recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The input does not satisfy the workflow's `inputs` schema. Nothing
    /// was stored.
    #[error("the input does not match the workflow's `inputs` schema:\n  {}", problems.join("\n  "))]
    Input {
        /// Every problem, each with the JSON Pointer of the offending value.
        problems: Vec<String>,
    },
    /// A step's plugin could not be resolved. Nothing was stored.
    #[error("{origin}{}: step `{step}`: {source}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Plugin {
        /// The workflow file.
        origin: String,
        /// The step's line, when known.
        line: Option<usize>,
        /// The step.
        step: String,
        /// Why.
        source: Box<ResolveError>,
    },
    /// The store failed. A run already recorded stays `running` at the step
    /// it had reached.
    #[error(transparent)]
    Store(#[from] StoreError),
}
