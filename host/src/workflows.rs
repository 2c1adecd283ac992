//! The workflows a long-running host serves: every definition in a
//! directory, by id.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::model::{self, DefinitionError, Workflow};

/// Workflow definitions by id.
#[derive(Debug, Default)]
pub struct WorkflowDir {
    workflows: BTreeMap<String, Arc<Workflow>>,
}

impl WorkflowDir {
    /// Loads every `.yaml`, `.yml` and `.json` file in `dir`. A file that
    /// does not load, or repeats an id, is left out and its error returned
    /// beside the rest, so one bad file does not stop the others. Blocking.
    pub fn load(dir: &Path) -> Result<(Self, Vec<DefinitionError>), std::io::Error> {
        let mut paths: Vec<_> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.is_file()
                    && path
                        .extension()
                        .and_then(|ext| ext.to_str())
                        .is_some_and(|ext| matches!(ext, "yaml" | "yml" | "json"))
            })
            .collect();
        paths.sort();
        let mut loaded = Self::default();
        let mut errors = Vec::new();
        for path in paths {
            match model::load(&path) {
                Ok(workflow) => {
                    if let Some(first) = loaded.workflows.get(&workflow.id) {
                        errors.push(DefinitionError::Invalid {
                            at: model::Location {
                                origin: path.display().to_string(),
                                ..Default::default()
                            },
                            message: format!(
                                "workflow id `{}` is also defined by {}",
                                workflow.id, first.origin
                            ),
                        });
                        continue;
                    }
                    loaded
                        .workflows
                        .insert(workflow.id.clone(), Arc::new(workflow));
                }
                Err(e) => errors.push(e),
            }
        }
        Ok((loaded, errors))
    }

    /// The workflow with id `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Workflow>> {
        self.workflows.get(id).cloned()
    }

    /// Every workflow, by id.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Workflow>> {
        self.workflows.values()
    }
}
