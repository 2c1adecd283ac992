//! Workflow definitions by id: a directory of files, and the trait that
//! `subflow` steps find their targets through.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::{DefinitionError, Location, Workflow};

/// Where `subflow` steps find the workflows they start, by id.
pub trait Workflows: Send + Sync + std::fmt::Debug {
    /// The workflow with id `id`, as deployed now.
    fn get(&self, id: &str) -> Option<Arc<Workflow>>;
}

impl Workflows for WorkflowDir {
    fn get(&self, id: &str) -> Option<Arc<Workflow>> {
        WorkflowDir::get(self, id)
    }
}

/// Workflow definitions by id.
#[derive(Debug, Default)]
pub struct WorkflowDir {
    workflows: BTreeMap<String, Arc<Workflow>>,
}

impl WorkflowDir {
    /// Loads every `.yaml`, `.yml` and `.json` file in `dir` but test files
    /// (`order.test.yaml`, [`crate::cases::is_test_file`]). A file that
    /// does not load, or repeats an id, is left out and its error returned
    /// beside the rest, so one bad file does not stop the others. Blocking.
    pub fn load(dir: &Path) -> Result<(Self, Vec<DefinitionError>), std::io::Error> {
        let mut paths: Vec<_> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.is_file()
                    && !crate::cases::is_test_file(path)
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
            match crate::load(&path) {
                Ok(workflow) => {
                    if let Some(first) = loaded.workflows.get(&workflow.id) {
                        errors.push(DefinitionError::Invalid {
                            at: Location {
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

    /// A copy of this set with `workflow` added, replacing any of its id.
    pub fn with(&self, workflow: Workflow) -> Self {
        let mut workflows = self.workflows.clone();
        workflows.insert(workflow.id.clone(), Arc::new(workflow));
        Self { workflows }
    }

    /// A copy of this set without the workflows `keep` refuses.
    pub fn retaining(&self, keep: impl Fn(&Workflow) -> bool) -> Self {
        let mut workflows = self.workflows.clone();
        workflows.retain(|_, workflow| keep(workflow));
        Self { workflows }
    }

    /// Adds `workflow`, replacing any of its id.
    pub fn insert(&mut self, workflow: Arc<Workflow>) {
        self.workflows.insert(workflow.id.clone(), workflow);
    }

    /// Every workflow, by id.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Workflow>> {
        self.workflows.values()
    }
}
