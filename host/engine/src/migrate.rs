//! Moving a run that has not ended to another revision of its workflow, at
//! a step boundary: what it has committed stays, and from its next step on
//! it follows the new revision.

use std::collections::BTreeMap;

use weft_model::Workflow;
use weft_store::{RETRY_PATH, StepRecord};

/// Why a run whose records are `steps`, made under `from`, cannot follow
/// `to`: every leaf it has a record of (done, failed or waiting) must be a
/// step of `to` with the same id and kind. `None` when it can.
pub(crate) fn unmovable(steps: &[StepRecord], from: &Workflow, to: &Workflow) -> Option<String> {
    let kinds = |workflow: &Workflow| -> BTreeMap<String, &'static str> {
        workflow
            .all_steps()
            .into_iter()
            .map(|step| (step.id.clone(), step.kind_name()))
            .collect()
    };
    let (before, after) = (kinds(from), kinds(to));
    let mut problems: Vec<String> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for record in steps {
        let id = record.step_id.as_str();
        if id.starts_with('@') || record.path == RETRY_PATH || !seen.insert(id) {
            continue;
        }
        let was = before.get(id).copied().unwrap_or("?");
        match after.get(id) {
            None => problems.push(format!(
                "step `{id}` ({was}) has run, and the new revision has no step `{id}`"
            )),
            Some(now) if *now != was => problems.push(format!(
                "step `{id}` has run as a `{was}` step, and is a `{now}` step in the new revision"
            )),
            Some(_) => {}
        }
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}
