//! Writes: one variant per durable change. The engine decides what each
//! record says and encodes it on its own thread; the store checks a
//! write's conditions (the timer row is there, the run has not ended, the
//! run is at the number of records the write was decided on, the key
//! versions match) and stores its bytes. The delivery writes (`Delivery`,
//! `Subscribe`, `Retarget`, `Unsubscribe`) and a step's emissions are the exception:
//! their state machine lives in the store's `queue` module.

use std::sync::Arc;

use super::{
    DefinitionRecord, DeliveryOp, Effect, Emission, HostRecord, Lease, OutboxRecord, RunRecord,
    RunState, StepRecord, SubscriptionRecord, TimerKind, TimerRecord, TimerRef,
};
use weft_core::KvEffects;

/// One durable change. A batch of writes commits as one transaction.
#[derive(Debug, Clone)]
pub enum Write {
    /// A new run, with its definition and the components it is pinned to;
    /// refused with [`Refused::Exists`](super::Refused::Exists) if a
    /// run with its id exists.
    CreateRun {
        /// The run's id.
        id: String,
        /// The run's tenant, which its listing is indexed under.
        tenant: String,
        /// The encoded [`RunRecord`].
        run: Vec<u8>,
        /// The definition's digest and encoded [`DefinitionRecord`].
        definition: (String, Vec<u8>),
        /// Each pinned component's digest and bytes.
        components: Vec<(String, Arc<[u8]>)>,
        /// The run's deadline timer.
        timer: Option<TimerRow>,
        /// The client's key for this start: refused with
        /// [`Refused::Duplicate`](super::Refused::Duplicate) if a
        /// run was recorded with it before.
        idempotency: Option<String>,
        /// The lease of the host that creates the run.
        lease: Option<Lease>,
        /// Set (to the run's tenant) for a run that waits for a place
        /// ([`Write::parked`]): it is stored without a lease, as free work
        /// any host may take.
        parked: Option<String>,
        /// What the run adds to its tenant's stored bytes.
        charge: Option<Charge>,
    },
    /// A step attempt's record and the run's next state; refused with
    /// [`Refused::Exists`](super::Refused::Exists) if the slot `(id,
    /// seq)` holds a record already, and with
    /// [`Refused::RunEnded`](super::Refused::RunEnded) if the run was
    /// cancelled in the store.
    CommitStep {
        /// The run's id.
        id: String,
        /// The record's number within the run.
        seq: u32,
        /// The encoded [`StepRecord`].
        step: Vec<u8>,
        /// The encoded [`RunRecord`].
        run: Vec<u8>,
        /// Whether the run is still `running` after this write.
        running: bool,
        /// Whether the run waits for timers only after this write: it
        /// leaves the index of runs to resume.
        suspended: bool,
        /// A timer the record sets.
        timer: Option<TimerRow>,
        /// The timer whose fire this record is: refused as a whole, with
        /// [`Refused::TimerGone`](super::Refused::TimerGone), unless
        /// it is still pending; removed with the write.
        fired: Option<TimerRef>,
        /// The step's key-value effects: refused as a whole, with
        /// [`Refused::KvConflict`](super::Refused::KvConflict), if a
        /// key it read has changed since.
        kv: Option<KvEffects>,
        /// A child run the step starts.
        spawn: Option<Box<Spawn>>,
        /// The messages the step emitted: each is committed, with a
        /// delivery for each subscription of its channel.
        emitted: Option<Box<Emitted>>,
        /// The notice of the run's end on its tenant's
        /// [`RUNS_ENDED`](weft_core::names::RUNS_ENDED) channel, when the
        /// write ends it: committed only if the channel has a subscription.
        notice: Option<Box<Emitted>>,
        /// Child runs to fence off with this write (the run is being
        /// cancelled): none of their commits lands after it.
        fence: Vec<String>,
        /// The writer's lease on the run (`None`: a write of no driver's).
        lease: Option<Lease>,
        /// What the record and its effects add to the tenant's stored
        /// bytes.
        charge: Option<Charge>,
    },
    /// Makes a subscription (one that exists with the same target is
    /// kept; with another, refused with
    /// [`Refused::Exists`](super::Refused::Exists)).
    Subscribe(Box<SubscriptionRecord>),
    /// Changes the target of subscription `key` from `from` to `to` (a
    /// webhook's signing key sealed again after a key rotation): refused
    /// with [`Refused::NotFound`](super::Refused::NotFound) if it is
    /// gone, and with [`Refused::Changed`](super::Refused::Changed)
    /// if its target is no longer `from`. Its deliveries stay.
    Retarget {
        /// The subscription.
        key: String,
        /// Its target as it was read.
        from: Box<super::Target>,
        /// Its new target.
        to: Box<super::Target>,
    },
    /// Removes the subscription with this key; its deliveries go. Refused
    /// with [`Refused::NotFound`](super::Refused::NotFound) if there
    /// is none.
    Unsubscribe(String),
    /// Changes delivery `.0`; refused with
    /// [`Refused::NotFound`](super::Refused::NotFound) if there is
    /// none, and with
    /// [`Refused::DeliveryState`](super::Refused::DeliveryState) when
    /// the change does not apply to its state.
    Delivery(String, DeliveryOp),
    /// An outside actor's answer to an `await` step of a run that is not in
    /// memory, decided on the run as it was at `expect` step records: the
    /// answer's record goes to `(run, expect)`, the run's record is
    /// replaced, the wait's timeout goes, and the run is awake. Refused
    /// with [`Refused::NotFound`](super::Refused::NotFound) (no such
    /// run), [`Refused::RunEnded`](super::Refused::RunEnded),
    /// [`Refused::Busy`](super::Refused::Busy) (the run is not
    /// suspended), [`Refused::Changed`](super::Refused::Changed) (it
    /// has another number of records, was moved to another revision, or
    /// was paused or resumed since) or
    /// [`Refused::TimerGone`](super::Refused::TimerGone). A paused
    /// run stays asleep: `wake` is decided with its pause, and asleep.
    Act {
        /// The run.
        run: String,
        /// Its step records when the answer was decided; the answer's
        /// `seq`.
        expect: u32,
        /// The encoded [`StepRecord`] of the answer.
        record: Vec<u8>,
        /// The encoded [`RunRecord`], awake (asleep if paused).
        wake: Vec<u8>,
        /// The wait's timeout, removed with it.
        timer: Option<TimerRef>,
        /// The answering host's lease: it takes the run, which is
        /// suspended, unless it holds it.
        lease: Option<Lease>,
        /// What the answer adds to the tenant's stored bytes.
        charge: Option<Charge>,
    },
    /// Carries out an outbox row that starts a run: records the run unless
    /// one with its id exists, and closes the row. Never refused, so it can
    /// be carried out again.
    StartRun {
        /// The outbox row.
        outbox: String,
        /// The run's id.
        id: String,
        /// The run's tenant, which its listing is indexed under.
        tenant: String,
        /// The encoded [`RunRecord`].
        run: Vec<u8>,
        /// The lease of the host that records the run.
        lease: Option<Lease>,
    },
    /// The run's new state alone (a run that ended on an expression).
    UpdateRun {
        /// The run's id.
        id: String,
        /// The encoded [`RunRecord`].
        run: Vec<u8>,
        /// Whether the run is still `running` after this write.
        running: bool,
        /// The notice of the run's end on its tenant's
        /// [`RUNS_ENDED`](weft_core::names::RUNS_ENDED) channel, when the
        /// write ends it: committed only if the channel has a subscription.
        notice: Option<Box<Emitted>>,
        /// The writer's lease on the run (`None`: a write of no driver's).
        lease: Option<Lease>,
    },
    /// Fires a timer, decided on its run as it was at `expect` step
    /// records: the fire's record (if its kind leaves one) goes to `(run,
    /// expect)`, the run's record is replaced (awake), and the timer row
    /// goes. Refused with
    /// [`Refused::TimerGone`](super::Refused::TimerGone) unless the
    /// row is pending and the run is running, and with
    /// [`Refused::Changed`](super::Refused::Changed) if the run has
    /// another number of records, was moved to another revision, or was
    /// paused or resumed since. A paused run stays asleep: `wake` is
    /// decided with its pause, and asleep.
    FireTimer {
        /// The timer.
        fired: TimerRef,
        /// Its run.
        run: String,
        /// The run's step records the fire was decided on.
        expect: u32,
        /// The encoded [`StepRecord`] the fire leaves, numbered `expect`.
        record: Option<Vec<u8>>,
        /// The encoded [`RunRecord`], awake (asleep if paused).
        wake: Vec<u8>,
        /// The firing host's lease: it takes the run unless it holds it,
        /// which only a run nobody drives allows (suspended, or its host
        /// gone).
        lease: Option<Lease>,
    },
    /// Cancels a run that is not in memory, decided on it as it was at
    /// `expect` step records: its record is replaced by `ended`, it is
    /// marked cancelled, and its timers go. Refused with
    /// [`Refused::NotFound`](super::Refused::NotFound) if there is no
    /// such run, [`Refused::RunEnded`](super::Refused::RunEnded) if
    /// it has ended, and [`Refused::Changed`](super::Refused::Changed)
    /// if it has another number of records.
    CancelRun {
        /// The run.
        id: String,
        /// Its step records when the cancel was decided.
        expect: u32,
        /// The encoded [`RunRecord`], cancelled.
        ended: Vec<u8>,
        /// The notice of the run's end on its tenant's
        /// [`RUNS_ENDED`](weft_core::names::RUNS_ENDED) channel: committed only if the channel has a subscription.
        notice: Option<Box<Emitted>>,
        /// Its child runs still under way, fenced off with it: none of
        /// their commits lands after this write, and each is cancelled in
        /// turn.
        fence: Vec<String>,
    },
    /// Retries a run that ended (failed, timed out or was cancelled),
    /// decided on it as it was at `expect` step records: stores `record`
    /// (the `@retry` record) at `(run, expect)` and `wake` (the run,
    /// running again) as the run, lifts its cancelled mark, lists it among
    /// the runs to resume, with no lease (whoever claims it first drives
    /// it), and writes its new deadline's timer. Refused with
    /// [`Refused::NotFound`](super::Refused::NotFound) if there is no
    /// such run, [`Refused::Busy`](super::Refused::Busy) if it has
    /// not ended, and [`Refused::Changed`](super::Refused::Changed)
    /// if it has another number of records.
    RetryRun {
        /// The run.
        run: String,
        /// Its step records when the retry was decided; the record's `seq`.
        expect: u32,
        /// The encoded `@retry` [`StepRecord`].
        record: Vec<u8>,
        /// The encoded [`RunRecord`], running.
        wake: Vec<u8>,
        /// Its deadline's timer row, when its workflow has a `timeout`.
        timer: Option<TimerRow>,
    },
    /// Pauses or resumes a run, decided on it at `expect` step records:
    /// stores `run`. A pause (`pause`) keeps the run out of the runs to
    /// resume: by its driver (under `lease`, with no attempt under way),
    /// or, with no lease, of a run that waits suspended (else refused with
    /// [`Refused::Busy`](super::Refused::Busy)). A resume lists it
    /// again and frees its lease, so that whoever claims it first drives
    /// it. Refused with [`Refused::Changed`](super::Refused::Changed)
    /// if the run has another number of records, was moved to another
    /// revision, or is not paused when resumed.
    PauseRun {
        /// The run.
        id: String,
        /// Its step records when the change was decided.
        expect: u32,
        /// The encoded [`RunRecord`], paused or not.
        run: Vec<u8>,
        /// A pause, or a resume.
        pause: bool,
        /// The driver's lease, for a pause of a run it holds.
        lease: Option<Lease>,
    },
    /// Moves a run that has not ended to another revision of its workflow,
    /// decided on it at `expect` step records: stores `run` (its new
    /// definition, pins and [`Migration`](super::Migration)), the
    /// definition and the components it is pinned to now, and, if a host
    /// drives it, takes its lease away (a lease of no host at a higher
    /// epoch: the driver's next commit is refused, and whoever claims the
    /// run next reads the new revision). Refused with
    /// [`Refused::NotFound`](super::Refused::NotFound),
    /// [`Refused::RunEnded`](super::Refused::RunEnded) or
    /// [`Refused::Changed`](super::Refused::Changed) (another number
    /// of records, or it woke, slept, or was paused or resumed since).
    MigrateRun {
        /// The run.
        id: String,
        /// Its step records when the move was decided.
        expect: u32,
        /// The encoded [`RunRecord`], moved.
        run: Vec<u8>,
        /// The new revision's definition: digest and encoded record.
        definition: (String, Vec<u8>),
        /// The components it is pinned to now: digest and bytes.
        components: Vec<(String, Arc<[u8]>)>,
    },
    /// Writes a cron trigger's row; with `expect`, only if the stored row
    /// is at that version, 0 meaning that there is none (else refused with
    /// [`Refused::Exists`](super::Refused::Exists) when 0 was
    /// expected, [`Refused::Changed`](super::Refused::Changed)
    /// otherwise), and with `start`, together with the run its fire starts
    /// (a `CreateRun`, whose own refusal is this write's).
    /// `row: None` removes the trigger.
    Schedule {
        /// The trigger's key.
        key: String,
        /// The version the change was decided on.
        expect: Option<u64>,
        /// The encoded [`ScheduleRecord`](super::ScheduleRecord).
        row: Option<Vec<u8>>,
        /// The run the fire starts.
        start: Option<Box<Write>>,
    },
    /// Records version `revision` of `workflow`, with its definition
    /// (stored once by digest); refused with
    /// [`Refused::Exists`](super::Refused::Exists) if that revision
    /// exists.
    Deploy {
        /// The workflow's id.
        workflow: String,
        /// The version's number.
        revision: u32,
        /// The encoded [`DeploymentRecord`](super::DeploymentRecord).
        record: Vec<u8>,
        /// The definition's digest and encoded [`DefinitionRecord`].
        definition: (String, Vec<u8>),
    },
    /// Takes run `run` under `lease`, whose epoch is one past the run's
    /// lease now: refused with
    /// [`Refused::Fenced`](super::Refused::Fenced) unless nobody
    /// drives the run (it is suspended, has no lease, or its host is gone),
    /// [`Refused::RunEnded`](super::Refused::RunEnded) if it has
    /// ended, [`Refused::NotFound`](super::Refused::NotFound) if
    /// there is no such run. Holding the lease already is no change.
    Claim {
        /// The run.
        run: String,
        /// The lease taken.
        lease: Lease,
    },
    /// Deletes run `0`, which has ended, with its step records and its
    /// index of messages (the messages stay, with their own retention; a
    /// cancelled run's mark stays, for a host that may still hold it),
    /// and gives the bytes its start and records were counted back to
    /// its tenant: its idempotency key is free again. Refused with
    /// [`Refused::Needed`](super::Refused::Needed) if it has not
    /// ended or its parent has not, and with
    /// [`Refused::NotFound`](super::Refused::NotFound) if there is
    /// no such run.
    DeleteRun(String),
    /// Deletes message `0` with its deliveries, once every delivery is
    /// settled (acked, or cleared from the dead letters), and gives its
    /// bytes back to its tenant. Refused with
    /// [`Refused::Needed`](super::Refused::Needed) while a delivery
    /// is not settled, and with
    /// [`Refused::NotFound`](super::Refused::NotFound) if there is
    /// no such message.
    DeleteMessage(u64),
    /// Drops the tombstone of deleted key `key` of `space` if it is still
    /// one at `version` (else no change). The space's floor, a row of the
    /// space `""` keyed by the space's name, rises to `version`: a key
    /// made again starts above it, so a version read before never comes
    /// back with another value.
    ///
    /// A key whose value has expired by `now` is dropped the same way, if
    /// it is still at `version`.
    ForgetKv {
        /// The space.
        space: String,
        /// The deleted (or expired) key.
        key: String,
        /// Its tombstone's (or expired value's) version.
        version: u64,
        /// Now, in milliseconds: what expiry is judged by.
        now: u64,
    },
    /// Deletes revision `revision` of workflow `workflow` (its definition
    /// stays: see [`Write::DeleteBlob`]). Refused with
    /// [`Refused::Needed`](super::Refused::Needed) if it is the
    /// workflow's newest revision, and with
    /// [`Refused::NotFound`](super::Refused::NotFound) if there is
    /// no such revision.
    DeleteRevision {
        /// The workflow.
        workflow: String,
        /// The revision.
        revision: u32,
    },
    /// Marks the stored `blob` `digest` as found unused, at `at`, by a
    /// pass of the sweeper (an older mark stays). Storing the digest again
    /// (a run, a child's spawn or a deployment that needs it) takes the
    /// mark away. No change if it is not stored.
    MarkBlob {
        /// Definition or component.
        blob: super::Blob,
        /// Its digest.
        digest: String,
        /// Now.
        at: weft_core::Timestamp,
    },
    /// Deletes the stored `blob` `digest` if it was marked at or before
    /// `marked_by` and not stored again since: the sweeper passes the
    /// start of its pass, less a margin, so that whatever needed the
    /// digest when it was marked was there for the pass to see. Refused
    /// with [`Refused::Needed`](super::Refused::Needed) otherwise,
    /// or if a revision (a definition) or a registry plugin (a component)
    /// refers to it. Deleting what is not there is no change.
    DeleteBlob {
        /// Definition or component.
        blob: super::Blob,
        /// Its digest.
        digest: String,
        /// The latest mark that counts.
        marked_by: weft_core::Timestamp,
    },
    /// Takes subscription `subscription`'s delivery queue under `lease`,
    /// so that one host at a time delivers it: no change if `lease` holds
    /// it; else refused with
    /// [`Refused::Fenced`](super::Refused::Fenced) unless nobody
    /// holds the queue (no lease, or its host's row is gone) and `lease`
    /// is the next epoch; [`Refused::NotFound`](super::Refused::NotFound)
    /// if there is no such subscription.
    HoldQueue {
        /// The subscription.
        subscription: String,
        /// The lease taken.
        lease: Lease,
    },
    /// Writes host `host`'s row (the encoded [`HostRecord`]): its leases
    /// hold until the row expires.
    Renew {
        /// The host's id.
        host: String,
        /// The encoded [`HostRecord`].
        record: Vec<u8>,
    },
    /// Declares host `host` gone, if its row still expires at
    /// `expires_at` (it has not renewed since it was judged gone): its
    /// runs may be taken. Refused with
    /// [`Refused::Changed`](super::Refused::Changed) if it renewed,
    /// [`Refused::NotFound`](super::Refused::NotFound) if it has no
    /// row.
    Forget {
        /// The host's id.
        host: String,
        /// When its row was seen to expire.
        expires_at: weft_core::Timestamp,
    },
    /// Changes the tenants, tokens or audit tables.
    Access(crate::AccessWrite),
    /// Adds a plugin to the registry, or refreshes the row of one added
    /// before; its bytes are stored once by digest.
    AddPlugin {
        /// The plugin's name.
        name: String,
        /// The component's digest.
        digest: String,
        /// The encoded [`PluginRecord`](super::PluginRecord).
        record: Vec<u8>,
        /// The component's bytes.
        bytes: Arc<[u8]>,
    },
    /// Stages `entries` (key, encoded [`SnapshotEntry`](super::SnapshotEntry))
    /// of a revision of snapshot store `store` being published, under data
    /// id `data`: the `first` page makes the data's row, in state
    /// staging; each page sets its time to `at`. Refused with
    /// [`Refused::Exists`](super::Refused::Exists) naming the first
    /// key staged already (a key may appear once in a revision), and with
    /// [`Refused::Changed`](super::Refused::Changed) if the first
    /// page finds a row, or a later one finds none or one that is not
    /// staging (sealed, or dropped by the sweeper after an hour without a
    /// page).
    StageSnapshot {
        /// The new data's id.
        data: String,
        /// The store, with its tenant.
        store: String,
        /// Now.
        at: weft_core::Timestamp,
        /// Whether this is the publish's first page.
        first: bool,
        /// A page of entries.
        entries: Vec<(String, Vec<u8>)>,
    },
    /// Seals the staged data `record.data` as revision `record.revision`
    /// of `record.store`. Refused with
    /// [`Refused::Exists`](super::Refused::Exists) unless that is
    /// one past the store's newest revision (another publish took the
    /// number: try the next), and with
    /// [`Refused::Changed`](super::Refused::Changed) if the data is
    /// not staging for that store.
    SealSnapshot(Box<super::SnapshotRecord>),
    /// Deletes revision `revision` of snapshot store `store`; its data is
    /// dropped, for the sweeper to delete. Refused with
    /// [`Refused::Needed`](super::Refused::Needed) if it is the
    /// store's newest revision, and with
    /// [`Refused::NotFound`](super::Refused::NotFound) if there is
    /// no such revision.
    DeleteSnapshot {
        /// The store, with its tenant.
        store: String,
        /// The revision.
        revision: u32,
    },
    /// Drops data `data` if it is still staging: a publish that failed
    /// leaves it for the sweeper. No change otherwise.
    AbandonSnapshot(String),
    /// Deletes the entries `keys` of data `data`: all of them if the data
    /// is dropped, or staging and abandoned at `now`; only those expired
    /// at `now` if it is sealed. Never refused.
    DropSnapshotEntries {
        /// The data id.
        data: String,
        /// The entries' keys.
        keys: Vec<String>,
        /// Now.
        now: weft_core::Timestamp,
    },
    /// Deletes the row of data `data`, dropped or abandoned at `now`,
    /// whose entries are gone. Refused with
    /// [`Refused::Needed`](super::Refused::Needed) if it is sealed,
    /// or staging and not abandoned.
    ForgetSnapshotData {
        /// The data id.
        data: String,
        /// Now.
        now: weft_core::Timestamp,
    },
}

/// The messages one step emitted, committed with its record.
#[derive(Debug, Clone)]
pub struct Emitted {
    /// The step's path.
    pub path: String,
    /// When the step's commit was decided: the messages' and deliveries'
    /// stamp.
    pub at: weft_core::clock::Timestamp,
    /// The messages, in the order they were emitted.
    pub messages: Vec<Emission>,
}

/// What a write adds to its tenant's stored bytes: the bytes of the run
/// record it starts, of a step's record (its output, error and logs), of
/// the key-value values it writes (a key it overwrites or deletes gives its
/// old value's bytes back), of the messages it emits and the child run it
/// starts. Counted against the tenant's `max_stored_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// The tenant.
    pub tenant: String,
    /// The bytes.
    pub bytes: u64,
    /// Whether the write is refused, rather than stored, when it would
    /// take the tenant over its quota.
    pub refusable: bool,
}

fn len(bytes: impl AsRef<[u8]>) -> u64 {
    u64::try_from(bytes.as_ref().len()).unwrap_or(u64::MAX)
}

/// What a message counts toward its tenant's stored bytes: charged when
/// it is committed, given back when the sweeper deletes it.
pub(crate) fn message_bytes(id: &str, channel: &str, payload: &serde_json::Value) -> u64 {
    len(id) + len(channel) + json_len(payload)
}

/// The length of `value` encoded as JSON, without encoding it into memory.
pub(crate) fn json_len(value: &serde_json::Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += len(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing JSON values into a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// A timer to write: its key and its encoded [`TimerRecord`].
#[derive(Debug, Clone)]
pub struct TimerRow {
    /// The run it belongs to.
    pub run: String,
    /// The run's tenant, whose count of pending timers it joins.
    pub tenant: Option<String>,
    /// `(due, id)`.
    pub key: (u64, u64),
    /// The encoded record.
    pub record: Vec<u8>,
    /// Whether the write that sets it is refused, rather than stored, when
    /// the tenant is at its `max_timers`: a `sleep` or an `await` a step
    /// sets; never a deadline or a retry, which a run needs to end.
    pub refusable: bool,
}

impl TimerRow {
    /// The row of `timer`.
    pub fn new(timer: &TimerRecord) -> Self {
        Self {
            run: timer.run.clone(),
            tenant: timer.tenant.clone(),
            key: timer.timer.key(),
            record: encode(timer),
            refusable: matches!(timer.timer.kind, TimerKind::Sleep | TimerKind::Await),
        }
    }
}

/// What a step that starts a child run commits beside its record: the
/// child's definition and components (by digest, stored once), and the
/// outbox row that will record the child.
#[derive(Debug, Clone)]
pub struct Spawn {
    /// The outbox row's id and encoded [`OutboxRecord`].
    pub outbox: (String, Vec<u8>),
    /// The definition's digest and encoded [`DefinitionRecord`].
    pub definition: (String, Vec<u8>),
    /// Each pinned component's digest and bytes.
    pub components: Vec<(String, Arc<[u8]>)>,
}

impl Spawn {
    /// The parts of a child's start.
    pub fn new(
        outbox: &OutboxRecord,
        definition: &DefinitionRecord,
        components: Vec<(String, Arc<[u8]>)>,
    ) -> Self {
        Self {
            outbox: (outbox.id.clone(), encode(outbox)),
            definition: (definition.digest.clone(), encode(definition)),
            components,
        }
    }
}

impl Write {
    /// A new run.
    pub fn create_run(
        run: &RunRecord,
        definition: &DefinitionRecord,
        components: Vec<(String, Arc<[u8]>)>,
    ) -> Self {
        Self::CreateRun {
            idempotency: None,
            lease: None,
            parked: None,
            charge: None,
            id: run.id.clone(),
            tenant: weft_core::tenant::of(&run.workflow).to_owned(),
            run: encode(run),
            definition: (definition.digest.clone(), encode(definition)),
            components,
            timer: run.deadline.map(|timer| {
                TimerRow::new(&TimerRecord {
                    timer,
                    run: run.id.clone(),
                    path: super::DEADLINE_PATH.to_owned(),
                    step_id: super::DEADLINE_PATH.to_owned(),
                    index: 0,
                    attempt: 1,
                    tenant: Some(weft_core::tenant::of(&run.workflow).to_owned()),
                })
            }),
        }
    }

    /// A step attempt's result, its key-value effects, and the run's next
    /// state.
    pub fn commit_step(
        step: &StepRecord,
        run: &RunRecord,
        kv: Option<KvEffects>,
        spawn: Option<Spawn>,
        fired: Option<TimerRef>,
        emitted: Vec<Emission>,
    ) -> Self {
        let timer = step
            .timer
            .filter(|_| run.state == RunState::Running)
            .map(|timer| {
                TimerRow::new(&TimerRecord {
                    timer,
                    run: run.id.clone(),
                    path: step.path.clone(),
                    step_id: step.step_id.clone(),
                    index: step.index,
                    attempt: step.attempt,
                    tenant: Some(weft_core::tenant::of(&run.workflow).to_owned()),
                })
            });
        Self::CommitStep {
            id: run.id.clone(),
            seq: step.seq,
            step: encode(step),
            run: encode(run),
            running: run.state == RunState::Running,
            suspended: run.suspended,
            timer,
            fired,
            kv: kv.filter(|kv| !kv.writes.is_empty() || !kv.reads.is_empty()),
            spawn: spawn.map(Box::new),
            emitted: (!emitted.is_empty()).then(|| {
                Box::new(Emitted {
                    path: step.path.clone(),
                    at: run.updated_at,
                    messages: emitted,
                })
            }),
            notice: end_notice(run),
            fence: Vec::new(),
            lease: None,
            charge: None,
        }
    }

    /// This write, made under `lease`, the writer's lease on its run: a
    /// commit of a run it drives, a fire or answer that takes the run, or
    /// the start of a run it will drive. Other writes are left as they are.
    #[must_use]
    pub fn under(mut self, held: Lease) -> Self {
        match &mut self {
            Self::CreateRun { lease, .. }
            | Self::CommitStep { lease, .. }
            | Self::Act { lease, .. }
            | Self::StartRun { lease, .. }
            | Self::UpdateRun { lease, .. }
            | Self::FireTimer { lease, .. }
            | Self::PauseRun { lease, .. } => *lease = Some(held),
            _ => {}
        }
        self
    }

    /// This run's start, as free work: stored without a lease and listed
    /// among the parked runs of `tenant`, for whichever host has a place
    /// first ([`Store::claim_parked`](super::Store::claim_parked), or a
    /// [`Write::Claim`]). Other writes are left as they are.
    #[must_use]
    pub fn parked(mut self, tenant: &str) -> Self {
        if let Self::CreateRun { lease, parked, .. } = &mut self {
            *lease = None;
            *parked = Some(tenant.to_owned());
        }
        self
    }

    /// This write, charged to `tenant`'s stored bytes (see [`Charge`]):
    /// a run's start, a step's record with its effects, an answer. With
    /// `refusable`, the write is refused with
    /// [`Refused::StorageQuota`](super::Refused::StorageQuota)
    /// rather than take the tenant over its `max_stored_bytes`; without,
    /// it is stored and counted whatever the quota (a failure's record, a
    /// cancellation, a cron fire). Other writes are left as they are.
    #[must_use]
    pub fn charged(mut self, tenant: &str, refusable: bool) -> Self {
        let bytes = match &self {
            Self::CreateRun {
                id,
                run,
                idempotency,
                ..
            } => len(id) + len(run) + idempotency.as_deref().map_or(0, len),
            Self::CommitStep {
                step,
                kv,
                spawn,
                emitted,
                ..
            } => {
                let kv = kv.as_ref().map_or(0, |effects| {
                    effects
                        .writes
                        .iter()
                        .map(|(key, value)| len(key) + value.as_deref().map_or(0, len))
                        .sum()
                });
                let spawn = spawn.as_ref().map_or(0, |spawn| len(&spawn.outbox.1));
                let emitted = emitted.as_ref().map_or(0, |emitted| {
                    emitted
                        .messages
                        .iter()
                        .map(|m| message_bytes(&m.id, &m.channel, &m.payload))
                        .sum()
                });
                len(step) + kv + spawn + emitted
            }
            Self::Act { record, .. } => len(record),
            _ => return self,
        };
        let charged = Some(Charge {
            tenant: tenant.to_owned(),
            bytes,
            refusable,
        });
        if let Self::CreateRun { charge, .. }
        | Self::CommitStep { charge, .. }
        | Self::Act { charge, .. } = &mut self
        {
            *charge = charged;
        }
        self
    }

    /// What this write charges to its tenant's stored bytes.
    pub fn charge(&self) -> Option<&Charge> {
        match self {
            Self::CreateRun { charge, .. }
            | Self::CommitStep { charge, .. }
            | Self::Act { charge, .. } => charge.as_ref(),
            _ => None,
        }
    }

    /// A host's row, renewed: its leases hold until `host.expires_at`.
    pub fn renew(host: &HostRecord) -> Self {
        Self::Renew {
            host: host.id.clone(),
            record: encode(host),
        }
    }

    /// This write, fencing off child runs `children`: a run's
    /// cancellation (a [`Write::CommitStep`] of its `@cancel` record, or a
    /// [`Write::CancelRun`]). Other writes are left as they are.
    #[must_use]
    pub fn fencing(mut self, children: Vec<String>) -> Self {
        if let Self::CommitStep { fence, .. } | Self::CancelRun { fence, .. } = &mut self {
            *fence = children;
        }
        self
    }

    /// Writes `row` (already at its new version), if the stored one is at
    /// `expect`, with the run `start` creates.
    pub fn schedule(
        row: &super::ScheduleRecord,
        expect: Option<u64>,
        start: Option<Write>,
    ) -> Self {
        Self::Schedule {
            key: row.key.clone(),
            expect,
            row: Some(encode(row)),
            start: start.map(Box::new),
        }
    }

    /// Carries out outbox row `row` (which must start a run).
    pub fn start_run(row: &OutboxRecord) -> Option<Self> {
        match &row.effect {
            Effect::StartRun { run } => Some(Self::StartRun {
                outbox: row.id.clone(),
                id: run.id.clone(),
                tenant: weft_core::tenant::of(&run.workflow).to_owned(),
                run: encode(run),
                lease: None,
            }),
        }
    }
}

impl Write {
    /// The run's new state alone.
    pub fn update_run(run: &RunRecord) -> Self {
        Self::UpdateRun {
            id: run.id.clone(),
            run: encode(run),
            running: run.state == RunState::Running,
            notice: end_notice(run),
            lease: None,
        }
    }

    /// Timer `fired`'s fire, leaving `record` (numbered `expect`), decided
    /// on the run as it was at `expect` records; `wake` is the run after it.
    pub fn fire_timer(
        fired: TimerRef,
        expect: u32,
        record: Option<&StepRecord>,
        wake: &RunRecord,
    ) -> Self {
        Self::FireTimer {
            fired,
            run: wake.id.clone(),
            expect,
            record: record.map(encode),
            wake: encode(wake),
            lease: None,
        }
    }

    /// An `await` answer, `record` (numbered `expect`), which also removes
    /// the wait's `timer`; `wake` is the run after it.
    pub fn act(record: &StepRecord, timer: Option<TimerRef>, wake: &RunRecord) -> Self {
        Self::Act {
            run: wake.id.clone(),
            expect: record.seq,
            record: encode(record),
            wake: encode(wake),
            timer,
            lease: None,
            charge: None,
        }
    }

    /// The retry of an ended run: `record` (at `@retry`, numbered by the
    /// run's records before it) and `wake`, the run after it.
    pub fn retry_run(record: &StepRecord, wake: &RunRecord) -> Self {
        Self::RetryRun {
            run: wake.id.clone(),
            expect: record.seq,
            record: encode(record),
            wake: encode(wake),
            timer: wake.deadline.map(|timer| {
                TimerRow::new(&TimerRecord {
                    timer,
                    run: wake.id.clone(),
                    path: super::DEADLINE_PATH.to_owned(),
                    step_id: super::DEADLINE_PATH.to_owned(),
                    index: 0,
                    attempt: record.attempt,
                    tenant: Some(weft_core::tenant::of(&wake.workflow).to_owned()),
                })
            }),
        }
    }

    /// `run` (at its `step_records`) paused, or resumed.
    pub fn pause_run(run: &RunRecord) -> Self {
        Self::PauseRun {
            id: run.id.clone(),
            expect: run.step_records,
            run: encode(run),
            pause: run.paused.is_some(),
            lease: None,
        }
    }

    /// The move of `run` (as it is after it) to the revision whose
    /// definition is `definition`, pinned to `components`.
    pub fn migrate_run(
        run: &RunRecord,
        definition: &super::DefinitionRecord,
        components: Vec<(String, Arc<[u8]>)>,
    ) -> Self {
        Self::MigrateRun {
            id: run.id.clone(),
            expect: run.step_records,
            run: encode(run),
            definition: (definition.digest.clone(), encode(definition)),
            components,
        }
    }

    /// The cancel of a run that had `expect` records; `ended` is the run
    /// after it.
    pub fn cancel_run(expect: u32, ended: &RunRecord) -> Self {
        Self::CancelRun {
            id: ended.id.clone(),
            expect,
            ended: encode(ended),
            notice: end_notice(ended),
            fence: Vec::new(),
        }
    }
}

/// The largest outputs a run's end notice carries, encoded.
const MAX_NOTICE_OUTPUTS: u64 = 64 << 10;

/// The notice that `run` ended, for its tenant's
/// [`RUNS_ENDED`](weft_core::names::RUNS_ENDED) channel; none while it is
/// running. Its payload names the run, its workflow (as its tenant knows
/// it) and how it ended, with its outputs or error.
fn end_notice(run: &RunRecord) -> Option<Box<Emitted>> {
    if !run.state.is_terminal() {
        return None;
    }
    let mut payload = serde_json::json!({
        "run": run.id,
        "workflow": weft_core::tenant::bare(&run.workflow),
        "version": run.workflow_version,
        "state": run.state,
        "created_at": run.created_at,
        "ended_at": run.updated_at,
    });
    // Outputs up to 64 KiB; past that, their size, and the run has them.
    if let Some(outputs) = &run.outputs {
        let bytes = json_len(outputs);
        if bytes <= MAX_NOTICE_OUTPUTS {
            payload["outputs"] = outputs.clone();
        } else {
            payload["outputs_bytes"] = bytes.into();
        }
    }
    if let Some(error) = &run.error {
        payload["error"] = serde_json::to_value(error).unwrap_or_default();
    }
    if let Some(parent) = &run.parent {
        payload["parent"] = serde_json::json!({ "run": parent.run, "step": parent.path });
    }
    Some(Box::new(Emitted {
        path: super::END_PATH.to_owned(),
        at: run.updated_at,
        messages: vec![Emission {
            id: weft_core::ids::uuid_v7(run.updated_at),
            channel: weft_core::tenant::sibling(&run.workflow, weft_core::names::RUNS_ENDED),
            payload,
        }],
    }))
}

/// The key of subscription `key`'s queue lease in the leases table,
/// beside the runs' (a run id never starts with `queue `).
pub fn queue_lease(key: &str) -> String {
    format!("queue {key}")
}

/// Records are plain data (strings, numbers, JSON values): encoding them
/// cannot fail.
pub fn encode(value: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}
