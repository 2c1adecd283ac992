//! The simulation's store: a real redb store in memory, or a real
//! PostgreSQL store in a schema of its own, behind a door that counts its
//! writes (so the checks run only after something changed) and can fail
//! the engine's next reads, as a disk that errors would.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use weft_store::{
    Damaged, DefinitionRecord, DeliveryRecord, DeploymentRecord, HostRecord, Lease, MessageRecord,
    OutboxRecord, PluginRecord, PostgresStore, RedbStore, Refused, RunFilter, RunRecord,
    ScheduleRecord, StepRecord, Store, StoreError, SubscriptionRecord, TimerRecord, Write,
};

/// Which store a world plays on.
#[derive(Debug, Clone, Default)]
pub enum Backend {
    /// A redb store held in memory.
    #[default]
    Memory,
    /// A PostgreSQL store, in a schema of its own (dropped after the seed)
    /// in the database at this URL.
    Postgres(String),
}

/// A store with faults on demand.
#[derive(Debug)]
pub(crate) struct SimStore {
    inner: std::sync::Arc<dyn Store>,
    /// The PostgreSQL store, to drop its schema at the end.
    postgres: Option<std::sync::Arc<PostgresStore>>,
    /// How many batches were applied.
    writes: AtomicU64,
    /// How many of the next reads fail.
    failing: AtomicUsize,
    /// How many of the next commits are stored but reported failed, as
    /// when the connection drops after `COMMIT` (or a sync fails after the
    /// write reached the disk).
    ambiguous: AtomicUsize,
}

impl SimStore {
    pub(crate) fn new(backend: &Backend, seed: u64) -> Result<Self, StoreError> {
        let (inner, postgres): (std::sync::Arc<dyn Store>, _) = match backend {
            Backend::Memory => (std::sync::Arc::new(RedbStore::in_memory()?), None),
            Backend::Postgres(url) => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                let schema = format!("sim_{seed}_{}_{nanos}", std::process::id());
                let store = std::sync::Arc::new(PostgresStore::open_in(url, Some(&schema))?);
                (
                    std::sync::Arc::clone(&store) as std::sync::Arc<dyn Store>,
                    Some(store),
                )
            }
        };
        Ok(Self {
            inner,
            postgres,
            writes: AtomicU64::new(0),
            failing: AtomicUsize::new(0),
            ambiguous: AtomicUsize::new(0),
        })
    }

    /// The store itself, for the checks: no faults, not counted.
    pub(crate) fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    /// How many batches were applied so far.
    pub(crate) fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Makes the next `count` reads fail.
    pub(crate) fn fail_reads(&self, count: usize) {
        self.failing.store(count, Ordering::SeqCst);
    }

    /// Makes the next `count` commits ambiguous: stored, but each
    /// reported failed.
    pub(crate) fn lose_answers(&self, count: usize) {
        self.ambiguous.store(count, Ordering::SeqCst);
    }

    /// Ends any failing reads and ambiguous commits.
    pub(crate) fn heal(&self) {
        self.failing.store(0, Ordering::SeqCst);
        self.ambiguous.store(0, Ordering::SeqCst);
    }

    /// Whether this commit's answer is lost (it is stored all the same).
    fn answer_lost(&self) -> bool {
        self.ambiguous
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    fn read(&self) -> Result<(), StoreError> {
        let failing = self
            .failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match failing {
            Ok(_) => Err(StoreError::Commit("simulated read failure".to_owned())),
            Err(_) => Ok(()),
        }
    }
}

/// What an ambiguous commit answers: the error a dropped connection
/// gives after `COMMIT` was sent.
fn lost() -> StoreError {
    StoreError::Commit("simulated: the connection dropped after COMMIT".to_owned())
}

impl Drop for SimStore {
    fn drop(&mut self) {
        if let Some(store) = &self.postgres
            && let Err(e) = store.discard()
        {
            tracing::warn!("cannot drop a simulated store's schema: {e}");
        }
    }
}

impl Store for SimStore {
    fn apply(&self, writes: &[&Write]) -> Result<Vec<Result<(), Refused>>, StoreError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        let applied = self.inner.apply(writes);
        if applied.is_ok() && self.answer_lost() {
            return Err(lost());
        }
        applied
    }

    fn runs_from(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<weft_store::RunsFrom, StoreError> {
        self.read()?;
        self.inner.runs_from(after, limit)
    }

    fn marks(&self) -> Result<Vec<(String, weft_core::Timestamp)>, StoreError> {
        self.read()?;
        self.inner.marks()
    }

    fn digests(&self, blob: weft_store::Blob) -> Result<Vec<String>, StoreError> {
        self.read()?;
        self.inner.digests(blob)
    }

    fn messages_from(&self, after: u64, limit: usize) -> Result<Vec<MessageRecord>, StoreError> {
        self.read()?;
        self.inner.messages_from(after, limit)
    }

    fn kv_from(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<weft_store::KvRow>, StoreError> {
        self.read()?;
        self.inner.kv_from(after, limit)
    }

    fn parked(&self, limit: usize) -> Result<Vec<(String, String)>, StoreError> {
        self.read()?;
        self.inner.parked(limit)
    }

    fn claim_parked(
        &self,
        host: &str,
        n: usize,
        rooms: &[(String, usize)],
    ) -> Result<Vec<(String, String)>, StoreError> {
        // Fails, writing nothing, as the next read would.
        self.read()?;
        self.writes.fetch_add(1, Ordering::SeqCst);
        let claimed = self.inner.claim_parked(host, n, rooms);
        if claimed.is_ok() && self.answer_lost() {
            return Err(lost());
        }
        claimed
    }

    fn run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.read()?;
        self.inner.run(id)
    }

    fn runs(&self, filter: &RunFilter, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        self.read()?;
        self.inner.runs(filter, limit)
    }

    fn steps(&self, id: &str) -> Result<Vec<StepRecord>, StoreError> {
        self.read()?;
        self.inner.steps(id)
    }

    fn steps_page(
        &self,
        id: &str,
        after: Option<u32>,
        limit: usize,
    ) -> Result<Vec<StepRecord>, StoreError> {
        self.read()?;
        self.inner.steps_page(id, after, limit)
    }

    fn running(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.read()?;
        self.inner.running()
    }

    fn definition(&self, digest: &str) -> Result<Option<DefinitionRecord>, StoreError> {
        self.read()?;
        self.inner.definition(digest)
    }

    fn timer_keys(&self) -> Result<Vec<(u64, u64)>, StoreError> {
        self.read()?;
        self.inner.timer_keys()
    }

    fn timer(&self, key: (u64, u64)) -> Result<Option<TimerRecord>, StoreError> {
        self.read()?;
        self.inner.timer(key)
    }

    fn run_timers(&self, id: &str) -> Result<Vec<TimerRecord>, StoreError> {
        self.read()?;
        self.inner.run_timers(id)
    }

    fn schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.read()?;
        self.inner.schedules()
    }

    fn outbox(&self) -> Result<Vec<OutboxRecord>, StoreError> {
        self.read()?;
        self.inner.outbox()
    }

    fn component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.read()?;
        self.inner.component(digest)
    }

    fn kv_get(&self, space: &str, key: &str) -> Result<weft_core::Versioned, StoreError> {
        self.read()?;
        self.inner.kv_get(space, key)
    }

    fn kv_list(
        &self,
        space: &str,
        prefix: &str,
        limit: usize,
        now: u64,
    ) -> Result<Vec<String>, StoreError> {
        self.read()?;
        self.inner.kv_list(space, prefix, limit, now)
    }

    fn subscriptions(&self, channel: Option<&str>) -> Result<Vec<SubscriptionRecord>, StoreError> {
        self.read()?;
        self.inner.subscriptions(channel)
    }

    fn subscription(&self, key: &str) -> Result<Option<SubscriptionRecord>, StoreError> {
        self.read()?;
        self.inner.subscription(key)
    }

    fn delivery(&self, id: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        self.read()?;
        self.inner.delivery(id)
    }

    fn message(&self, seq: u64) -> Result<Option<MessageRecord>, StoreError> {
        self.read()?;
        self.inner.message(seq)
    }

    fn queued(
        &self,
        subscription: &str,
        dead: bool,
        after: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        self.read()?;
        self.inner.queued(subscription, dead, after, limit)
    }

    fn dead_letters(&self, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        self.read()?;
        self.inner.dead_letters(limit)
    }

    fn deliveries(&self, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        self.read()?;
        self.inner.deliveries(limit)
    }

    fn run_messages(&self, id: &str) -> Result<Vec<MessageRecord>, StoreError> {
        self.read()?;
        self.inner.run_messages(id)
    }

    fn idempotent_run(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.read()?;
        self.inner.idempotent_run(key)
    }

    fn deployments(&self, workflow: Option<&str>) -> Result<Vec<DeploymentRecord>, StoreError> {
        self.read()?;
        self.inner.deployments(workflow)
    }

    fn snapshots(
        &self,
        store: Option<&str>,
    ) -> Result<Vec<weft_store::SnapshotRecord>, StoreError> {
        self.read()?;
        self.inner.snapshots(store)
    }

    fn snapshot_entry(
        &self,
        data: &str,
        key: &str,
    ) -> Result<Option<weft_store::SnapshotEntry>, StoreError> {
        self.read()?;
        self.inner.snapshot_entry(data, key)
    }

    fn snapshot_entries(
        &self,
        data: &str,
        after: Option<&str>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, weft_store::SnapshotEntry)>, StoreError> {
        self.read()?;
        self.inner.snapshot_entries(data, after, prefix, limit)
    }

    fn snapshot_keys(
        &self,
        data: &str,
        after: Option<&str>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        self.read()?;
        self.inner.snapshot_keys(data, after, prefix, limit)
    }

    fn snapshot_data(&self) -> Result<Vec<(String, weft_store::SnapshotData)>, StoreError> {
        self.read()?;
        self.inner.snapshot_data()
    }

    fn plugins(&self) -> Result<Vec<PluginRecord>, StoreError> {
        self.read()?;
        self.inner.plugins()
    }

    fn lease(&self, id: &str) -> Result<Option<Lease>, StoreError> {
        self.read()?;
        self.inner.lease(id)
    }

    fn hosts(&self) -> Result<Vec<HostRecord>, StoreError> {
        self.read()?;
        self.inner.hosts()
    }

    fn stored_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        self.read()?;
        self.inner.stored_bytes(tenant)
    }

    fn tenants(&self) -> Result<Vec<weft_store::TenantRecord>, StoreError> {
        self.read()?;
        self.inner.tenants()
    }

    fn token(&self, id: &str) -> Result<Option<weft_store::TokenRecord>, StoreError> {
        self.read()?;
        self.inner.token(id)
    }

    fn tokens(&self) -> Result<Vec<weft_store::TokenRecord>, StoreError> {
        self.read()?;
        self.inner.tokens()
    }

    fn secret(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<weft_store::SecretRecord>, StoreError> {
        self.read()?;
        self.inner.secret(tenant, name)
    }

    fn secrets(&self, tenant: &str) -> Result<Vec<weft_store::SecretRecord>, StoreError> {
        self.read()?;
        self.inner.secrets(tenant)
    }

    fn audit(
        &self,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<Vec<weft_store::AuditRecord>, StoreError> {
        self.read()?;
        self.inner.audit(tenant, limit)
    }

    fn damaged(&self) -> Result<Vec<Damaged>, StoreError> {
        self.read()?;
        self.inner.damaged()
    }
}
