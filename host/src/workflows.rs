//! The workflows a long-running host serves: every definition in a
//! directory, by id, and the versions deployed since.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use crate::clock::{Clock, SystemClock};
use crate::model::{self, DefinitionError, Workflow};
use crate::store::{DefinitionRecord, DeploymentRecord, Store, StoreError, Write};

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

/// The workflows a server serves, deployable while it runs. Every
/// deployment is a new version of its workflow, numbered and recorded in the
/// store with its definition, so what was deployed over the API is served
/// again after a restart. Runs are pinned to the definition they started
/// with; a new version serves new runs only.
#[derive(Debug)]
pub struct Deployments {
    store: Arc<dyn Store>,
    current: RwLock<Arc<WorkflowDir>>,
    /// Deployments are numbered one at a time.
    deploying: Mutex<()>,
}

/// What a deployment did.
#[derive(Debug, Clone)]
pub struct Deployed {
    /// The version now served.
    pub record: DeploymentRecord,
    /// False when the definition was the one served already (nothing was
    /// recorded).
    pub created: bool,
}

impl Deployments {
    /// The workflows to serve: each file of `files` whose text is not a
    /// version of its workflow yet is deployed as the newest, then every
    /// workflow's newest version is served. A workflow whose newest version
    /// came from a file that is gone from `files` is not served. Returns
    /// one warning per workflow that cannot be served. Blocking.
    pub fn open(
        store: Arc<dyn Store>,
        files: &WorkflowDir,
    ) -> Result<(Self, Vec<String>), StoreError> {
        let deployments = Self {
            store,
            current: RwLock::new(Arc::new(WorkflowDir::default())),
            deploying: Mutex::new(()),
        };
        let mut heads: BTreeMap<String, DeploymentRecord> = BTreeMap::new();
        let mut known: std::collections::HashSet<(String, String)> = Default::default();
        for record in deployments.store.deployments(None)? {
            known.insert((record.workflow.clone(), record.digest.clone()));
            heads.insert(record.workflow.clone(), record);
        }
        let now = SystemClock.now();
        let mut served = WorkflowDir::default();
        for workflow in files.iter() {
            let digest = definition_of(workflow).digest;
            if !known.contains(&(workflow.id.clone(), digest)) {
                let origin = format!("file:{}", workflow.origin);
                let record = deployments.record(workflow, &origin, now, heads.get(&workflow.id))?;
                heads.insert(workflow.id.clone(), record);
            }
        }
        let mut warnings = Vec::new();
        for (id, head) in heads {
            if let Some(file) = files.get(&id) {
                if definition_of(&file).digest == head.digest {
                    served.workflows.insert(id, file);
                    continue;
                }
            } else if let Some(path) = head.from_file() {
                tracing::info!(workflow = %id, "not serving: its file {path} is gone");
                continue;
            }
            match deployments.parse(&head) {
                Ok(workflow) => {
                    served.workflows.insert(id, Arc::new(workflow));
                }
                Err(e) => warnings.push(format!("workflow `{id}` revision {}: {e}", head.revision)),
            }
        }
        *deployments
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(served);
        Ok((deployments, warnings))
    }

    /// The workflows served now.
    pub fn current(&self) -> Arc<WorkflowDir> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Deploys `workflow` (its `origin` names where it came from) as the
    /// newest version of its id, unless it is the version served already.
    /// Durable when it returns. Blocking.
    pub fn deploy(&self, workflow: Workflow) -> Result<Deployed, StoreError> {
        let _one_at_a_time = self
            .deploying
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let head = self.store.deployments(Some(&workflow.id))?.pop();
        let digest = definition_of(&workflow).digest;
        if let Some(head) = head.as_ref().filter(|head| head.digest == digest)
            && self.current().get(&workflow.id).is_some()
        {
            return Ok(Deployed {
                record: head.clone(),
                created: false,
            });
        }
        let record = self.record(&workflow, "api", SystemClock.now(), head.as_ref())?;
        let mut next = WorkflowDir {
            workflows: self.current().workflows.clone(),
        };
        next.workflows
            .insert(workflow.id.clone(), Arc::new(workflow));
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(next);
        Ok(Deployed {
            record,
            created: true,
        })
    }

    /// Every version of every workflow, by id, oldest first.
    pub fn all_versions(&self) -> Result<Vec<DeploymentRecord>, StoreError> {
        self.store.deployments(None)
    }

    /// Every version of workflow `id`, oldest first.
    pub fn versions(&self, id: &str) -> Result<Vec<DeploymentRecord>, StoreError> {
        self.store.deployments(Some(id))
    }

    /// The definition of version `revision` of workflow `id`.
    pub fn definition(
        &self,
        id: &str,
        revision: u32,
    ) -> Result<Option<(DeploymentRecord, DefinitionRecord)>, StoreError> {
        let Some(record) = self
            .versions(id)?
            .into_iter()
            .find(|r| r.revision == revision)
        else {
            return Ok(None);
        };
        Ok(self
            .store
            .definition(&record.digest)?
            .map(|definition| (record, definition)))
    }

    /// Records `workflow` as the version after `head`.
    fn record(
        &self,
        workflow: &Workflow,
        origin: &str,
        now: crate::clock::Timestamp,
        head: Option<&DeploymentRecord>,
    ) -> Result<DeploymentRecord, StoreError> {
        let definition = definition_of(workflow);
        let record = DeploymentRecord {
            workflow: workflow.id.clone(),
            revision: head.map_or(1, |h| h.revision + 1),
            digest: definition.digest.clone(),
            version: workflow.version,
            deployed_at: now,
            origin: origin.to_owned(),
        };
        let write = Write::Deploy {
            workflow: record.workflow.clone(),
            revision: record.revision,
            record: crate::store::encode(&record),
            definition: (definition.digest.clone(), crate::store::encode(&definition)),
        };
        self.store
            .apply(&[&write])?
            .pop()
            .unwrap_or(Err(StoreError::Closed))?;
        Ok(record)
    }

    fn parse(&self, head: &DeploymentRecord) -> Result<Workflow, String> {
        let definition = self
            .store
            .definition(&head.digest)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("definition {} is not in the store", head.digest))?;
        let format = model::Format::from_name(&definition.format)
            .ok_or_else(|| format!("unknown format `{}`", definition.format))?;
        model::parse(&definition.source, format, &definition.origin).map_err(|e| e.to_string())
    }
}

impl crate::engine::Workflows for Deployments {
    fn get(&self, id: &str) -> Option<Arc<Workflow>> {
        self.current().get(id)
    }
}

/// The stored form of `workflow`'s definition.
pub fn definition_of(workflow: &Workflow) -> DefinitionRecord {
    DefinitionRecord {
        digest: crate::runtime::Digest::of(workflow.source.as_bytes()).to_string(),
        origin: workflow.origin.clone(),
        format: workflow.format.name().to_owned(),
        source: workflow.source.clone(),
    }
}
