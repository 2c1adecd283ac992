//! Deployments: the workflows a host serves, each as numbered revisions
//! in the store, and the one deploy service (checks, then a revision, then
//! the cron triggers) that the API uses.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use weft_core::clock::Clock;
use weft_engine::Engine;
use weft_engine::plugins::ResolveError;
use weft_model::{self as model, DefinitionError, Format, Workflow, WorkflowDir};
use weft_store::{
    AccessWrite, DefinitionRecord, DeploymentRecord, Refused, Store, StoreError, Write,
};

/// The workflows a server serves, deployable while it runs. Every
/// deployment is a new version of its workflow, numbered and recorded in the
/// store with its definition, so what was deployed over the API is served
/// again after a restart. Runs are pinned to the definition they started
/// with; a new version serves new runs only.
#[derive(Debug)]
pub struct Deployments {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    current: RwLock<Arc<WorkflowDir>>,
    /// Deployments are numbered one at a time.
    deploying: Mutex<()>,
    /// The cron triggers are brought in line with the served workflows one
    /// deployment at a time, each with the workflows as they are then.
    syncing: Mutex<()>,
    /// The newest revision of each workflow this host has looked at: a
    /// newer one in the store was deployed by another host.
    seen: Mutex<std::collections::HashMap<String, u32>>,
    /// Whether these serve workflows ([`Deployments::open`]) or nothing
    /// ([`Deployments::none`]).
    serving: bool,
}

/// Why a definition was not deployed. Nothing was stored.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The text is not a valid workflow.
    #[error("{0}")]
    Invalid(DefinitionError),
    /// A step's plugin is not in the registry.
    #[error("{at}step `{step}`: {error}")]
    UnresolvedPlugin {
        /// Where the step is (`SOURCE:LINE: `), or empty.
        at: String,
        /// The step's id.
        step: String,
        /// Why it does not resolve.
        error: Box<ResolveError>,
    },
    /// A step grants less than its plugin needs, or more than the tenant's
    /// egress policy allows.
    #[error("{at}step `{step}`: {message}")]
    Reach {
        /// Where the step is (`SOURCE:LINE: `), or empty.
        at: String,
        /// The step's id.
        step: String,
        /// What is wrong.
        message: String,
    },
    /// A `subflow` step names a workflow that is not served.
    #[error(
        "{at}step `{step}`: subflow `{workflow}` is not a workflow served here; deploy it first"
    )]
    UnknownSubflow {
        /// Where the step is (`SOURCE:LINE: `), or empty.
        at: String,
        /// The step's id.
        step: String,
        /// The workflow it names.
        workflow: String,
    },
    /// The workflow names a snapshot store its tenant has not published.
    #[error(
        "{origin}: snapshots: no snapshot store `{store}` is published; publish it first (`weft snapshots publish {store} FILE`)"
    )]
    UnknownSnapshot {
        /// Where the workflow came from.
        origin: String,
        /// The store.
        store: String,
    },
    /// A step names a secret that is not granted to its plugin, and the
    /// deployment may not grant it.
    #[error("{at}step `{step}`: {message}")]
    SecretNotGranted {
        /// Where the step is (`SOURCE:LINE: `), or empty.
        at: String,
        /// The step's id.
        step: String,
        /// Which secret, which build, why, and how an owner grants it.
        message: String,
    },
    /// The tenant is at a quota (`max_revisions`).
    #[error("{0}")]
    Quota(String),
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
}

/// The first snapshot store `workflow` names that `tenant` has not
/// published.
pub fn unknown_snapshot(
    store: &dyn Store,
    tenant: &str,
    workflow: &Workflow,
) -> Result<Option<String>, StoreError> {
    for used in &workflow.snapshots {
        if store
            .snapshots(Some(&weft_core::tenant::qualify(tenant, &used.name)))?
            .is_empty()
        {
            return Ok(Some(used.name.clone()));
        }
    }
    Ok(None)
}

/// Who deploys, as a deployment's checks need to know.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeployedBy {
    /// The caller may own the tenant's secrets, so the deployment grants
    /// them to builds an owner brought.
    pub owner: bool,
    /// The tenant's quota of workflow revisions.
    pub max_revisions: Option<u32>,
}

/// What a deployment did.
#[derive(Debug, Clone)]
pub struct Deployed {
    /// The version now served.
    pub record: DeploymentRecord,
    /// False when the definition was the one served already (nothing was
    /// recorded).
    pub created: bool,
    /// The secrets granted by this deployment (an owner's), each with the
    /// plugin granted it.
    pub granted: Vec<(String, weft_store::SecretGrant)>,
}

impl Deployments {
    /// Serves nothing, and reads nothing of the store until a deployment.
    pub fn none(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            clock,
            current: RwLock::new(Arc::new(WorkflowDir::default())),
            deploying: Mutex::new(()),
            syncing: Mutex::new(()),
            seen: Mutex::new(std::collections::HashMap::new()),
            serving: false,
        }
    }

    /// Whether these serve workflows: opened on files
    /// ([`Deployments::open`]), not [`Deployments::none`].
    pub fn serving(&self) -> bool {
        self.serving
    }

    /// The workflows to serve: each file of `files` whose text is not a
    /// version of its workflow yet is deployed as the newest, then every
    /// workflow's newest version is served. A workflow whose newest version
    /// came from a file that is gone from `files` is not served. Returns
    /// one warning per workflow that cannot be served. Blocking.
    pub fn open(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        files: &WorkflowDir,
    ) -> Result<(Self, Vec<String>), StoreError> {
        let deployments = Self {
            serving: true,
            ..Self::none(store, clock)
        };
        let mut heads: BTreeMap<String, DeploymentRecord> = BTreeMap::new();
        let mut known: std::collections::HashSet<(String, String)> = Default::default();
        // A removed tenant's workflows are not served.
        let tenants: std::collections::HashSet<String> = deployments
            .store
            .tenants()?
            .into_iter()
            .map(|t| t.name)
            .collect();
        for record in deployments.store.deployments(None)? {
            let tenant = weft_core::tenant::of(&record.workflow);
            if tenant != weft_core::tenant::DEFAULT && !tenants.contains(tenant) {
                continue;
            }
            known.insert((record.workflow.clone(), record.digest.clone()));
            heads.insert(record.workflow.clone(), record);
        }
        let now = deployments.clock.now();
        let mut served = WorkflowDir::default();
        let mut refused = std::collections::HashSet::new();
        let mut warnings = Vec::new();
        for workflow in files.iter() {
            let tenant = weft_core::tenant::of(&workflow.id);
            if let Some(store) = unknown_snapshot(deployments.store.as_ref(), tenant, workflow)? {
                warnings.push(format!(
                    "workflow `{}` ({}): snapshots: no snapshot store `{store}` is published (publish it with `weft snapshots publish {store} FILE`, then start again)",
                    workflow.id, workflow.origin
                ));
                refused.insert(workflow.id.clone());
                continue;
            }
            let digest = definition_of(workflow).digest;
            if !known.contains(&(workflow.id.clone(), digest)) {
                let origin = format!("file:{}", workflow.origin);
                let record = deployments.record(workflow, &origin, now, heads.get(&workflow.id))?;
                heads.insert(workflow.id.clone(), record);
            }
        }
        weft_core::lock(&deployments.seen)
            .extend(heads.iter().map(|(id, head)| (id.clone(), head.revision)));
        for (id, head) in heads {
            if refused.contains(&id) {
                continue;
            }
            if let Some(file) = files.get(&id) {
                if definition_of(&file).digest == head.digest {
                    served.insert(file);
                    continue;
                }
            } else if let Some(path) = head.from_file() {
                tracing::info!(workflow = %id, "not serving: its file {path} is gone");
                continue;
            }
            match deployments.parse(&head) {
                Ok(workflow) => {
                    served.insert(Arc::new(workflow));
                }
                Err(e) => warnings.push(format!("workflow `{id}` revision {}: {e}", head.revision)),
            }
        }
        *weft_core::write(&deployments.current) = Arc::new(served);
        Ok((deployments, warnings))
    }

    /// Every workflow's newest revision, whatever it came from (a
    /// revision that does not parse is left out): what `weft gc` judges
    /// retention by. Blocking.
    pub fn newest(&self) -> Result<WorkflowDir, StoreError> {
        let mut heads: BTreeMap<String, DeploymentRecord> = BTreeMap::new();
        for record in self.store.deployments(None)? {
            let newer = heads
                .get(&record.workflow)
                .is_none_or(|head| head.revision < record.revision);
            if newer {
                heads.insert(record.workflow.clone(), record);
            }
        }
        let mut dir = WorkflowDir::default();
        for head in heads.values() {
            if let Ok(workflow) = self.parse(head) {
                dir.insert(Arc::new(workflow));
            }
        }
        Ok(dir)
    }

    /// The workflows served now.
    pub fn current(&self) -> Arc<WorkflowDir> {
        Arc::clone(&weft_core::read(&self.current))
    }

    /// Deploys `workflow` (its `origin` names where it came from) as the
    /// newest version of its id, unless it is the version served already.
    /// Durable when it returns. Blocking.
    pub fn deploy(&self, workflow: Workflow) -> Result<Deployed, StoreError> {
        self.deploy_within(workflow, None).map_err(|e| match e {
            DeployError::Store(e) => e,
            other => StoreError::Commit(other.to_string()),
        })
    }

    /// [`deploy`](Self::deploy), refused with [`DeployError::Quota`] when
    /// it would make a revision and the workflow's tenant keeps
    /// `max_revisions` already.
    pub fn deploy_within(
        &self,
        workflow: Workflow,
        max_revisions: Option<u32>,
    ) -> Result<Deployed, DeployError> {
        self.deploy_as(workflow, "api", max_revisions)
    }

    /// [`deploy_within`](Self::deploy_within), recording `origin` as where
    /// the revision came from (`api`, `file:PATH`).
    fn deploy_as(
        &self,
        workflow: Workflow,
        origin: &str,
        max_revisions: Option<u32>,
    ) -> Result<Deployed, DeployError> {
        let _one_at_a_time = weft_core::lock(&self.deploying);
        let head = self
            .store
            .deployments(Some(&workflow.id))
            .map_err(DeployError::Store)?
            .pop();
        let digest = definition_of(&workflow).digest;
        if let Some(head) = head.as_ref().filter(|head| head.digest == digest)
            && self.current().get(&workflow.id).is_some()
        {
            return Ok(Deployed {
                record: head.clone(),
                created: false,
                granted: Vec::new(),
            });
        }
        if let Some(max) = max_revisions {
            let tenant = weft_core::tenant::of(&workflow.id);
            let kept = self
                .store
                .deployments(None)
                .map_err(DeployError::Store)?
                .iter()
                .filter(|d| weft_core::tenant::of(&d.workflow) == tenant)
                .count();
            if kept >= max as usize {
                return Err(DeployError::Quota(format!(
                    "tenant `{tenant}` keeps {kept} workflow revisions, its quota `max_revisions` ({max})"
                )));
            }
        }
        let record = self
            .record(&workflow, origin, self.clock.now(), head.as_ref())
            .map_err(DeployError::Store)?;
        weft_core::lock(&self.seen).insert(workflow.id.clone(), record.revision);
        let next = self.current().with(workflow);
        *weft_core::write(&self.current) = Arc::new(next);
        Ok(Deployed {
            record,
            created: true,
            granted: Vec::new(),
        })
    }

    /// Deploys the definition `text` sent by a client of `tenant`, after
    /// checking it as a run would: it parses, every plugin it `uses:`
    /// resolves in `engine`'s registry for the tenant, and every `subflow`
    /// names a workflow of the tenant served here (or itself). Every secret
    /// a step names must be granted to the component its plugin resolves
    /// to now; with `owner` (the caller may own the tenant's secrets) the
    /// deployment grants it, else it is refused. Then its cron triggers
    /// are brought in line. Durable when it returns. Blocking.
    pub fn deploy_checked(
        &self,
        engine: &Engine,
        tenant: &str,
        text: &str,
        format: Format,
        source: &str,
        by: DeployedBy,
    ) -> Result<Deployed, DeployError> {
        let DeployedBy {
            owner,
            max_revisions,
        } = by;
        let workflow = model::parse(text, format, source).map_err(DeployError::Invalid)?;
        let grants = self.check(engine, tenant, &workflow, source, owner)?;
        // Parsed again with an origin that names the deployment.
        let origin = format!("{} (deployed)", workflow.id);
        let mut workflow = model::parse(text, format, &origin).map_err(DeployError::Invalid)?;
        workflow.id = weft_core::tenant::qualify(tenant, &workflow.id);
        self.take(engine, tenant, workflow, "api", max_revisions, grants)
    }

    /// Deploys the workflow file at `path` (a file of the folder a serving
    /// host watches) as [`deploy_checked`](Self::deploy_checked) deploys a
    /// definition of its workflow's tenant, as an owner: the folder is the
    /// operator's. The revision's origin names the file, and so do its
    /// errors. Durable when it returns. Blocking.
    pub fn deploy_file(
        &self,
        engine: &Engine,
        path: &std::path::Path,
    ) -> Result<Deployed, DeployError> {
        let workflow = model::load(path).map_err(DeployError::Invalid)?;
        let tenant = weft_core::tenant::of(&workflow.id).to_owned();
        let source = workflow.origin.clone();
        // Another file of the folder has this id: the next start would
        // serve that one (a folder's ids are one file each).
        if let Some(served) = self.current().get(&workflow.id)
            && served.origin != source
            && std::path::Path::new(&served.origin).parent() == path.parent()
            && std::path::Path::new(&served.origin).is_file()
        {
            return Err(DeployError::Invalid(DefinitionError::Invalid {
                at: model::Location {
                    origin: source,
                    ..Default::default()
                },
                message: format!(
                    "workflow id `{}` is also defined by {}",
                    workflow.id, served.origin
                ),
            }));
        }
        let grants = self.check(engine, &tenant, &workflow, &source, true)?;
        let origin = format!("file:{source}");
        self.take(engine, &tenant, workflow, &origin, None, grants)
    }

    /// Checks `workflow`, read from `source`, as a run of `tenant` would
    /// find it: see [`deploy_checked`](Self::deploy_checked). Returns the
    /// secrets the deployment grants. Blocking.
    fn check(
        &self,
        engine: &Engine,
        tenant: &str,
        workflow: &Workflow,
        source: &str,
        owner: bool,
    ) -> Result<Vec<(String, weft_store::SecretGrant)>, DeployError> {
        if let Some(store) =
            unknown_snapshot(self.store.as_ref(), tenant, workflow).map_err(DeployError::Store)?
        {
            return Err(DeployError::UnknownSnapshot {
                origin: source.to_owned(),
                store,
            });
        }
        let served = self.current();
        let mut grants: Vec<(String, weft_store::SecretGrant)> = Vec::new();
        // The registry's records, read once if a step's secret needs them.
        let listed = std::cell::OnceCell::new();
        for step in workflow.all_steps() {
            let at = match step.line {
                Some(line) => format!("{source}:{line}: "),
                None => String::new(),
            };
            if let Some(call) = step.call() {
                let plugin = match engine.plugins().resolve_in(tenant, &call.uses) {
                    Ok(plugin) => plugin,
                    Err(error) => {
                        return Err(DeployError::UnresolvedPlugin {
                            at,
                            step: step.id.clone(),
                            error: Box::new(error),
                        });
                    }
                };
                let policy = engine.egress().policy(tenant);
                if let Err(message) = weft_engine::check_reach(&plugin, call, &policy) {
                    return Err(DeployError::Reach {
                        at,
                        step: step.id.clone(),
                        message,
                    });
                }
                for secret in &call.secrets {
                    let digest = plugin.digest().to_string();
                    let record = self
                        .store
                        .secret(tenant, secret)
                        .map_err(DeployError::Store)?;
                    // A secret not set yet is read as absent by the step.
                    if record.is_none_or(|r| r.granted_to(&digest)) {
                        continue;
                    }
                    let name = &plugin.meta().name;
                    let qualified = weft_core::tenant::qualify(tenant, name);
                    let vouched = listed
                        .get_or_init(|| engine.plugins().list())
                        .iter()
                        .any(|r| {
                            r.digest == digest
                                && (r.name == qualified || r.name == *name)
                                && r.vouched()
                        });
                    if !owner || !vouched {
                        let why = if owner {
                            " (a deployer uploaded this build: a deployment grants only \
                             builds an owner uploaded)"
                        } else {
                            ""
                        };
                        return Err(DeployError::SecretNotGranted {
                            at,
                            step: step.id.clone(),
                            message: format!(
                                "secret `{secret}` is not granted to plugin `{name}@{digest}`{why}; \
                                 a tenant owner grants that build with \
                                 `weft secrets grant {secret} --plugin {name}@{digest}`"
                            ),
                        });
                    }
                    grants.push((
                        secret.clone(),
                        weft_store::SecretGrant {
                            plugin: name.clone(),
                            digest,
                        },
                    ));
                }
            }
            if let Some(subflow) = step.subflow()
                && subflow.workflow != workflow.id
                && served
                    .get(&weft_core::tenant::qualify(tenant, &subflow.workflow))
                    .is_none()
            {
                return Err(DeployError::UnknownSubflow {
                    at,
                    step: step.id.clone(),
                    workflow: subflow.workflow.clone(),
                });
            }
        }
        Ok(grants)
    }

    /// Takes `workflow`, checked, as the newest revision of its id, then
    /// grants `grants` and brings the cron triggers in line.
    fn take(
        &self,
        engine: &Engine,
        tenant: &str,
        workflow: Workflow,
        origin: &str,
        max_revisions: Option<u32>,
        mut grants: Vec<(String, weft_store::SecretGrant)>,
    ) -> Result<Deployed, DeployError> {
        let mut deployed = self.deploy_as(workflow, origin, max_revisions)?;
        // Granted once the deployment is taken (one refused grants
        // nothing), before it is answered.
        grants.dedup();
        let writes: Vec<Write> = grants
            .iter()
            .map(|(secret, grant)| {
                Write::Access(AccessWrite::GrantSecret {
                    tenant: tenant.to_owned(),
                    name: secret.clone(),
                    grant: grant.clone(),
                    revoke: false,
                })
            })
            .collect();
        if !writes.is_empty() {
            let refs: Vec<&Write> = writes.iter().collect();
            for answer in self.store.apply(&refs).map_err(DeployError::Store)? {
                // A secret deleted meanwhile is left for the step to miss.
                match answer {
                    Ok(()) | Err(Refused::NotFound(_)) => {}
                    Err(e) => return Err(DeployError::Store(e.into())),
                }
            }
        }
        deployed.granted = grants;
        let _in_turn = weft_core::lock(&self.syncing);
        engine
            .sync_schedules(&self.current())
            .map_err(DeployError::Store)?;
        Ok(deployed)
    }

    /// Serves the revisions other hosts on the store deployed since this
    /// one last looked (its own deployments are served as they are made),
    /// and stops serving the workflows of tenants another host removed.
    /// Returns how many workflows changed. Blocking.
    pub fn refresh(&self) -> Result<usize, StoreError> {
        let mut heads: BTreeMap<String, DeploymentRecord> = BTreeMap::new();
        for record in self.store.deployments(None)? {
            heads.insert(record.workflow.clone(), record);
        }
        let _one_at_a_time = weft_core::lock(&self.deploying);
        let tenants: std::collections::HashSet<String> =
            self.store.tenants()?.into_iter().map(|t| t.name).collect();
        let kept = |id: &str| {
            let tenant = weft_core::tenant::of(id);
            tenant == weft_core::tenant::DEFAULT || tenants.contains(tenant)
        };
        let mut seen = weft_core::lock(&self.seen);
        let current = self.current();
        let mut served = current.retaining(|workflow| kept(&workflow.id));
        let mut changed = current.iter().count() - served.iter().count();
        for (id, head) in heads {
            if !kept(&id)
                || seen
                    .get(&id)
                    .is_some_and(|revision| *revision >= head.revision)
            {
                continue;
            }
            match self.parse(&head) {
                Ok(workflow) => {
                    tracing::info!(workflow = %id, revision = head.revision, "serving a revision another host deployed");
                    served.insert(Arc::new(workflow));
                    seen.insert(id, head.revision);
                    changed += 1;
                }
                // Tried again at the next look.
                Err(e) => {
                    tracing::debug!(workflow = %id, revision = head.revision, "cannot serve a revision another host deployed yet: {e}");
                }
            }
        }
        if changed > 0 {
            *weft_core::write(&self.current) = Arc::new(served);
        }
        Ok(changed)
    }

    /// Stops serving tenant `tenant`'s workflows (it was removed): no new
    /// run of them starts, over the API or by a trigger. Their revisions
    /// stay in the store.
    pub fn withdraw(&self, tenant: &str) {
        let _one_at_a_time = weft_core::lock(&self.deploying);
        let kept = self
            .current()
            .retaining(|workflow| weft_core::tenant::of(&workflow.id) != tenant);
        *weft_core::write(&self.current) = Arc::new(kept);
    }

    /// Every version of every workflow, by id, oldest first.
    pub fn all_versions(&self) -> Result<Vec<DeploymentRecord>, StoreError> {
        self.store.deployments(None)
    }

    /// Every version of workflow `id`, oldest first.
    pub fn versions(&self, id: &str) -> Result<Vec<DeploymentRecord>, StoreError> {
        self.store.deployments(Some(id))
    }

    /// Revision `revision` of workflow `id` (as stored), parsed.
    pub fn revision(
        &self,
        id: &str,
        revision: u32,
    ) -> Result<Option<(DeploymentRecord, Workflow)>, String> {
        let Some(record) = self
            .versions(id)
            .map_err(|e| e.to_string())?
            .into_iter()
            .find(|r| r.revision == revision)
        else {
            return Ok(None);
        };
        let workflow = self.parse(&record)?;
        Ok(Some((record, workflow)))
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

    /// Records `workflow` as the version after `head`. Another host on the
    /// store may record a revision first: then its record stands if it is
    /// this definition, and else this one goes after it.
    fn record(
        &self,
        workflow: &Workflow,
        origin: &str,
        now: weft_core::clock::Timestamp,
        head: Option<&DeploymentRecord>,
    ) -> Result<DeploymentRecord, StoreError> {
        let definition = definition_of(workflow);
        let mut head = head.cloned();
        loop {
            let record = DeploymentRecord {
                workflow: workflow.id.clone(),
                revision: head.as_ref().map_or(1, |h| h.revision + 1),
                digest: definition.digest.clone(),
                version: workflow.version,
                deployed_at: now,
                origin: origin.to_owned(),
            };
            let write = Write::Deploy {
                workflow: record.workflow.clone(),
                revision: record.revision,
                record: weft_store::encode(&record),
                definition: (definition.digest.clone(), weft_store::encode(&definition)),
            };
            match self.store.apply_one(&write) {
                Ok(()) => return Ok(record),
                Err(StoreError::Refused(Refused::Exists(_))) => {
                    head = self.store.deployments(Some(&workflow.id))?.pop();
                    if let Some(theirs) = head.as_ref().filter(|h| h.digest == record.digest) {
                        return Ok(theirs.clone());
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn parse(&self, head: &DeploymentRecord) -> Result<Workflow, String> {
        let definition = self
            .store
            .definition(&head.digest)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("definition {} is not in the store", head.digest))?;
        let format = model::Format::from_name(&definition.format)
            .ok_or_else(|| format!("unknown format `{}`", definition.format))?;
        let mut workflow = model::parse_stored(&definition.source, format, &definition.origin)
            .map_err(|e| e.to_string())?;
        // The text names the workflow bare; the record, with its tenant.
        // The same text may have been stored first by another tenant,
        // under its own origin: a tenant's revision names only itself.
        if head.workflow != workflow.id {
            workflow.origin = format!("{} (deployed)", weft_core::tenant::bare(&head.workflow));
        }
        workflow.id.clone_from(&head.workflow);
        Ok(workflow)
    }
}

impl weft_model::Workflows for Deployments {
    fn get(&self, id: &str) -> Option<Arc<Workflow>> {
        self.current().get(id)
    }
}

/// The stored form of `workflow`'s definition.
fn definition_of(workflow: &Workflow) -> DefinitionRecord {
    DefinitionRecord::new(&workflow.origin, workflow.format.name(), &workflow.source)
}
