//! Making runs: a new run from a workflow and an input (resolving and
//! pinning its plugins), and a recorded run loaded back from the store.
//! Shared by [`Engine`](super::Engine) and by `subflow` attempts, which
//! start child runs from a worker.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;

use weft_core::clock::{Clock, Timestamp};
use weft_core::{lock, read, write};
use weft_model::{self as model, Format, Workflow, WorkflowDir, Workflows};
use weft_store::{
    DefinitionRecord, Effect, Lease, OutboxRecord, ParentLink, RunRecord, RunState, Spawn, Store,
    TimerKind, TimerRef,
};

use crate::drive::{Drive, Leaf, timer_id};
use crate::error::{ResumeError, StartError};
use crate::runner::{Pinned, RunnerSource, StepRunner};

/// The deepest a chain of child runs may go, so that a workflow that
/// starts itself ends with an error instead of filling the store.
pub const MAX_DEPTH: u32 = 32;

/// Makes and loads runs.
#[derive(Debug)]
pub(super) struct Launcher {
    pub(super) store: Arc<dyn Store>,
    /// Where runs get their plugins.
    source: Arc<dyn RunnerSource>,
    pub(super) clock: Arc<dyn Clock>,
    workflows: RwLock<Arc<dyn Workflows>>,
    /// Each tenant's limits; a tenant not here has the defaults.
    pub(super) tenants: RwLock<HashMap<String, crate::TenantLimits>>,
    /// Guest time each tenant's calls took in the current minute of the
    /// clock: the minute, and the time.
    guest_time: Mutex<HashMap<String, (u64, std::time::Duration)>>,
    /// Stored definitions already parsed, by workflow (as stored) and digest: loading a run back
    /// (a resume, a timer's wake) then reads only its own records.
    parsed: Mutex<HashMap<String, Arc<Workflow>>>,
    /// This host's id: the runs it makes are its own (epoch 1).
    pub(super) host: String,
}

/// A run moved to another revision: its record, the definition, and the
/// components to store with it.
pub(super) type Moved = (RunRecord, DefinitionRecord, Vec<(String, Arc<[u8]>)>);

/// The most definitions the launcher keeps parsed before it starts over.
const CACHED: usize = 1024;

/// A run made and not yet recorded.
pub(super) struct NewRun {
    pub(super) drive: Drive,
    pub(super) definition: DefinitionRecord,
    /// The pinned components' digests and bytes.
    pub(super) components: Vec<(String, Arc<[u8]>)>,
}

impl NewRun {
    /// The outbox row that records this run as a child, and what its
    /// parent's commit carries with it.
    pub(super) fn spawn(&self, now: Timestamp) -> (OutboxRecord, Spawn) {
        let row = OutboxRecord {
            id: format!("run:{}", self.drive.run.id),
            created_at: now,
            effect: Effect::StartRun {
                run: Box::new(self.drive.run.clone()),
            },
        };
        let spawn = Spawn::new(&row, &self.definition, self.components.clone());
        (row, spawn)
    }
}

impl Launcher {
    pub(super) fn new(
        store: Arc<dyn Store>,
        source: Arc<dyn RunnerSource>,
        clock: Arc<dyn Clock>,
        host: String,
    ) -> Self {
        Self {
            store,
            source,
            clock,
            workflows: RwLock::new(Arc::new(WorkflowDir::default())),
            tenants: RwLock::new(HashMap::new()),
            guest_time: Mutex::new(HashMap::new()),
            parsed: Mutex::new(HashMap::new()),
            host,
        }
    }

    pub(super) fn set_workflows(&self, workflows: Arc<dyn Workflows>) {
        *write(&self.workflows) = workflows;
    }

    /// Tenant `tenant`'s limits.
    pub(super) fn limits(&self, tenant: &str) -> crate::TenantLimits {
        read(&self.tenants).get(tenant).copied().unwrap_or_default()
    }

    /// How long a call of `tenant` must wait for its guest time to renew,
    /// if its time for this minute is spent.
    pub(crate) fn guest_time_wait(&self, tenant: &str) -> Option<std::time::Duration> {
        let budget = self.limits(tenant).guest_time_per_minute?;
        let now = self.clock.now().as_millis();
        let minute = now / 60_000;
        let spent = match lock(&self.guest_time).get(tenant) {
            Some((at, spent)) if *at == minute => *spent,
            _ => std::time::Duration::ZERO,
        };
        (spent >= budget).then(|| std::time::Duration::from_millis((minute + 1) * 60_000 - now))
    }

    /// The guest time `tenant`'s calls took in this minute of the clock.
    pub(crate) fn guest_time_now(&self, tenant: &str) -> std::time::Duration {
        let minute = self.clock.now().as_millis() / 60_000;
        match lock(&self.guest_time).get(tenant) {
            Some((at, spent)) if *at == minute => *spent,
            _ => std::time::Duration::ZERO,
        }
    }

    /// Counts `took` of guest time to `tenant`, in this minute.
    pub(crate) fn guest_time_spent(&self, tenant: &str, took: std::time::Duration) {
        let minute = self.clock.now().as_millis() / 60_000;
        let mut spent = lock(&self.guest_time);
        let entry = spent
            .entry(tenant.to_owned())
            .or_insert((minute, std::time::Duration::ZERO));
        if entry.0 != minute {
            *entry = (minute, std::time::Duration::ZERO);
        }
        entry.1 += took;
    }

    pub(super) fn workflow(&self, id: &str) -> Option<Arc<Workflow>> {
        read(&self.workflows).get(id)
    }

    /// A new run of `workflow` on `input`: the input is checked against the
    /// workflow's schema, every plugin resolved (which may compile), and
    /// every `subflow` checked to name a workflow that exists. Nothing is
    /// stored.
    pub(super) fn make(
        self: &Arc<Self>,
        workflow: Arc<Workflow>,
        input: Value,
        parent: Option<ParentLink>,
    ) -> Result<NewRun, StartError> {
        if let Some(schema) = &workflow.inputs {
            schema
                .check(&input)
                .map_err(|problems| StartError::Input { problems })?;
        }
        for step in workflow.all_steps() {
            if let Some(subflow) = step.subflow()
                && self
                    .workflow(&weft_core::tenant::sibling(&workflow.id, &subflow.workflow))
                    .is_none()
            {
                return Err(StartError::Subflow {
                    origin: workflow.origin.clone(),
                    line: step.line,
                    step: step.id.clone(),
                    workflow: subflow.workflow.clone(),
                });
            }
        }
        let Pinned {
            runner,
            pins,
            components,
            snapshots,
        } = self.source.pin(&workflow)?;
        let definition =
            DefinitionRecord::new(&workflow.origin, workflow.format.name(), &workflow.source);
        let now = self.clock.now();
        let run = RunRecord {
            id: weft_core::ids::uuid_v7(now),
            workflow: workflow.id.clone(),
            workflow_version: workflow.version,
            origin: workflow.origin.clone(),
            state: RunState::Running,
            input,
            next_step: 0,
            step_records: 0,
            step_count: u32::try_from(workflow.steps.len()).unwrap_or(u32::MAX),
            plugins: pins,
            definition: definition.digest.clone(),
            outputs: None,
            error: None,
            created_at: now,
            updated_at: now,
            parent,
            trigger: None,
            snapshots,
            migrated: None,
            paused: None,
            suspended: false,
            deadline: workflow.timeout.map(|timeout| TimerRef {
                id: timer_id(),
                due: now + timeout,
                kind: TimerKind::Deadline,
            }),
        };
        let mut drive = self.drive(run, workflow, runner, HashMap::new());
        drive.hold(Lease::after(None, &self.host));
        Ok(NewRun {
            drive,
            definition,
            components,
        })
    }

    /// Loads run `run` back: its definition and pinned components from the
    /// store, not from files, and its committed results.
    pub(super) fn load(self: &Arc<Self>, run: RunRecord) -> Result<Drive, ResumeError> {
        if run.state != RunState::Running {
            return Err(ResumeError::NotRunning {
                id: run.id,
                state: run.state,
            });
        }
        let workflow = self.parsed(&run)?;
        let runner = self.source.load(&run, &workflow)?;
        let results = crate::drive::fold(&self.store.steps(&run.id)?);
        // Leaves waiting for a timer that is still pending stay busy until
        // it fires; a retry whose timer is gone may run.
        let pending: HashSet<u64> = self
            .store
            .run_timers(&run.id)?
            .iter()
            .map(|t| t.timer.id)
            .collect();
        let mut drive = self.drive(run, workflow, runner, results);
        drive.restore_waits(&pending);
        Ok(drive)
    }

    /// The workflow run `run` follows: its definition from the store,
    /// parsed once and kept.
    fn parsed(&self, run: &RunRecord) -> Result<Arc<Workflow>, ResumeError> {
        // A definition's text names its workflow bare; the run's record
        // names it as stored, with its tenant. Two tenants may deploy the
        // same text, so the parsed workflow is kept under both.
        let key = format!("{} {}", run.workflow, run.definition);
        let cached = lock(&self.parsed).get(&key).cloned();
        let workflow = match cached {
            Some(workflow) => workflow,
            None => {
                let definition = self.store.definition(&run.definition)?.ok_or_else(|| {
                    ResumeError::Definition(format!(
                        "definition {} is not in the store",
                        run.definition
                    ))
                })?;
                let format = Format::from_name(&definition.format).unwrap_or(Format::Yaml);
                let mut workflow =
                    model::parse_stored(&definition.source, format, &definition.origin)
                        .map_err(|e| ResumeError::Definition(e.to_string()))?;
                workflow.id.clone_from(&run.workflow);
                // The text may have been stored first by another tenant,
                // under its origin: the run keeps its own.
                workflow.origin.clone_from(&run.origin);
                let workflow = Arc::new(workflow);
                let mut parsed = lock(&self.parsed);
                if parsed.len() >= CACHED {
                    parsed.clear();
                }
                parsed.insert(key, Arc::clone(&workflow));
                workflow
            }
        };
        Ok(workflow)
    }

    /// Run `run` (with its records `steps`) moved to `to`, revision
    /// `revisions.1` of its workflow (it follows `revisions.0`): its record
    /// after the move, the definition, and the components to store with
    /// it. Refused, saying why, when a leaf it has a record of is not a
    /// step of `to` of the same kind, or `to`'s plugins do not resolve.
    pub(super) fn migration(
        &self,
        run: &RunRecord,
        steps: &[weft_store::StepRecord],
        to: &Workflow,
        revisions: (u32, u32),
        actor: &str,
    ) -> Result<Moved, crate::MigrateError> {
        use crate::MigrateError;
        if run.state != RunState::Running {
            return Err(MigrateError::Unmovable(format!(
                "it has ended: {}",
                run.state
            )));
        }
        let from = self
            .parsed(run)
            .map_err(|e| MigrateError::Unmovable(e.to_string()))?;
        if let Some(why) = crate::migrate::unmovable(steps, &from, to) {
            return Err(MigrateError::Unmovable(why));
        }
        let pinned = self
            .source
            .pin(to)
            .map_err(|e| MigrateError::Unmovable(e.to_string()))?;
        let definition = DefinitionRecord::new(&to.origin, to.format.name(), &to.source);
        let mut moved = run.clone();
        moved.definition.clone_from(&definition.digest);
        moved.workflow_version = to.version;
        moved.step_count = u32::try_from(to.steps.len()).unwrap_or(u32::MAX);
        moved.plugins = pinned.pins;
        // Snapshot stores keep the revision the run read; new ones are
        // pinned now.
        for (store, revision) in pinned.snapshots {
            moved.snapshots.entry(store).or_insert(revision);
        }
        let now = self.clock.now();
        moved.updated_at = now;
        moved.migrated = Some(weft_store::Migration {
            from_revision: revisions.0,
            to_revision: revisions.1,
            at: now,
            actor: actor.to_owned(),
            at_record: run.step_records,
        });
        Ok((moved, definition, pinned.components))
    }

    /// The `timeout:` of the workflow run `run` follows.
    pub(super) fn timeout_of(
        &self,
        run: &RunRecord,
    ) -> Result<Option<std::time::Duration>, ResumeError> {
        Ok(self.parsed(run)?.timeout)
    }

    fn drive(
        self: &Arc<Self>,
        run: RunRecord,
        workflow: Arc<Workflow>,
        runner: Arc<dyn StepRunner>,
        results: HashMap<String, Leaf>,
    ) -> Drive {
        Drive::new(run, workflow, runner, results, Arc::clone(self))
    }
}
