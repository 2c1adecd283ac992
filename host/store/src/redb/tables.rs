//! The tables of one redb write transaction, as [`Rows`]: each logical
//! table is a typed redb table, and each key shape maps onto its key type.

use redb::{ReadableTable, Table as RedbTable, WriteTransaction};

use crate::StoreError;
use crate::rows::{Key, Part, Rows, Table, number, read_number};

/// The tables of one write transaction.
pub(super) struct Tables<'t> {
    runs: RedbTable<'t, &'static str, &'static [u8]>,
    tenant_runs: RedbTable<'t, (&'static str, &'static str), ()>,
    running: RedbTable<'t, &'static str, ()>,
    steps: RedbTable<'t, (&'static str, u32), &'static [u8]>,
    definitions: RedbTable<'t, &'static str, &'static [u8]>,
    components: RedbTable<'t, &'static str, &'static [u8]>,
    kv: RedbTable<'t, (&'static str, &'static str), &'static [u8]>,
    outbox: RedbTable<'t, &'static str, &'static [u8]>,
    timers: RedbTable<'t, (u64, u64), &'static [u8]>,
    run_timers: RedbTable<'t, (&'static str, u64), u64>,
    timer_keys: RedbTable<'t, (u64, u64), ()>,
    schedules: RedbTable<'t, &'static str, &'static [u8]>,
    cancelled: RedbTable<'t, &'static str, ()>,
    messages: RedbTable<'t, u64, &'static [u8]>,
    run_messages: RedbTable<'t, (&'static str, u64), ()>,
    subscriptions: RedbTable<'t, &'static str, &'static [u8]>,
    deliveries: RedbTable<'t, &'static str, &'static [u8]>,
    queue: RedbTable<'t, (&'static str, u64), &'static str>,
    dead: RedbTable<'t, (&'static str, u64), &'static str>,
    idempotency: RedbTable<'t, &'static str, &'static str>,
    deployments: RedbTable<'t, (&'static str, u32), &'static [u8]>,
    plugins: RedbTable<'t, (&'static str, &'static str), &'static [u8]>,
    leases: RedbTable<'t, &'static str, &'static [u8]>,
    parked: RedbTable<'t, &'static str, &'static [u8]>,
    doomed: RedbTable<'t, &'static str, u64>,
    snapshots: RedbTable<'t, (&'static str, u32), &'static [u8]>,
    snapshot_data: RedbTable<'t, &'static str, &'static [u8]>,
    snapshot_entries: RedbTable<'t, (&'static str, &'static str), &'static [u8]>,
    hosts: RedbTable<'t, &'static str, &'static [u8]>,
    tenants: RedbTable<'t, &'static str, &'static [u8]>,
    tokens: RedbTable<'t, &'static str, &'static [u8]>,
    secrets: RedbTable<'t, (&'static str, &'static str), &'static [u8]>,
    audit: RedbTable<'t, (u64, u64), &'static [u8]>,
    audit_tenants: RedbTable<'t, (&'static str, &'static str), ()>,
    usage: RedbTable<'t, &'static str, u64>,
    /// The least number the next message takes (`MESSAGES_FLOOR`), 0 but
    /// in a store made by a restore.
    messages_floor: u64,
}

impl<'t> Tables<'t> {
    /// Opens every table in `txn`, each created by `RedbStore::open`.
    pub(super) fn open(txn: &'t WriteTransaction) -> Result<Self, StoreError> {
        let messages_floor = super::messages_floor(&backend!(txn.open_table(super::META))?)?;
        Ok(Self {
            runs: backend!(txn.open_table(super::RUNS))?,
            tenant_runs: backend!(txn.open_table(super::TENANT_RUNS))?,
            running: backend!(txn.open_table(super::RUNNING))?,
            steps: backend!(txn.open_table(super::STEPS))?,
            definitions: backend!(txn.open_table(super::DEFINITIONS))?,
            components: backend!(txn.open_table(super::COMPONENTS))?,
            kv: backend!(txn.open_table(super::KV))?,
            outbox: backend!(txn.open_table(super::OUTBOX))?,
            timers: backend!(txn.open_table(super::TIMERS))?,
            run_timers: backend!(txn.open_table(super::RUN_TIMERS))?,
            timer_keys: backend!(txn.open_table(super::TIMER_KEYS))?,
            schedules: backend!(txn.open_table(super::SCHEDULES))?,
            cancelled: backend!(txn.open_table(super::CANCELLED))?,
            messages: backend!(txn.open_table(super::MESSAGES))?,
            run_messages: backend!(txn.open_table(super::RUN_MESSAGES))?,
            subscriptions: backend!(txn.open_table(super::SUBSCRIPTIONS))?,
            deliveries: backend!(txn.open_table(super::DELIVERIES))?,
            queue: backend!(txn.open_table(super::QUEUE))?,
            dead: backend!(txn.open_table(super::DEAD))?,
            idempotency: backend!(txn.open_table(super::IDEMPOTENCY))?,
            deployments: backend!(txn.open_table(super::DEPLOYMENTS))?,
            plugins: backend!(txn.open_table(super::PLUGINS))?,
            leases: backend!(txn.open_table(super::LEASES))?,
            parked: backend!(txn.open_table(super::PARKED))?,
            doomed: backend!(txn.open_table(super::DOOMED))?,
            snapshots: backend!(txn.open_table(super::SNAPSHOTS))?,
            snapshot_data: backend!(txn.open_table(super::SNAPSHOT_DATA))?,
            snapshot_entries: backend!(txn.open_table(super::SNAPSHOT_ENTRIES))?,
            hosts: backend!(txn.open_table(super::HOSTS))?,
            tenants: backend!(txn.open_table(super::TENANTS))?,
            tokens: backend!(txn.open_table(super::TOKENS))?,
            secrets: backend!(txn.open_table(super::SECRETS))?,
            audit: backend!(txn.open_table(super::AUDIT))?,
            audit_tenants: backend!(txn.open_table(super::AUDIT_TENANTS))?,
            usage: backend!(txn.open_table(super::USAGE))?,
            messages_floor,
        })
    }
}

impl Tables<'_> {
    /// The oldest `n` parked runs, at most `room` of each tenant listed in
    /// `rooms` (see `Store::claim_parked`).
    pub(super) fn parked_first(
        &self,
        n: usize,
        rooms: &[(String, usize)],
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut rooms: Vec<(&[u8], usize)> = rooms
            .iter()
            .map(|(tenant, room)| (tenant.as_bytes(), *room))
            .collect();
        let mut found = Vec::new();
        for entry in backend!(self.parked.iter())? {
            if found.len() >= n {
                break;
            }
            let (id, tenant) = backend!(entry)?;
            if let Some((_, room)) = rooms.iter_mut().find(|(t, _)| *t == tenant.value()) {
                if *room == 0 {
                    continue;
                }
                *room -= 1;
            }
            let tenant = String::from_utf8_lossy(tenant.value()).into_owned();
            found.push((id.value().to_owned(), tenant));
        }
        Ok(found)
    }
}

/// A key that does not fit its table: a bug in `apply`, which names both.
fn misfit(table: Table, key: Key<'_>) -> StoreError {
    StoreError::Codec {
        key: format!("{key:?}"),
        message: format!("not a key of table {table:?}"),
    }
}

/// Calls `$on!(table, key)` with the typed redb table and key for
/// `($table, $key)`, and else answers the misfit.
macro_rules! typed {
    ($self:ident, $table:expr, $key:expr, |$t:ident, $k:ident| $body:expr) => {{
        use Key as K;
        use Table as T;
        match ($table, $key) {
            (T::Runs, K::Str($k)) => {
                let $t = &mut $self.runs;
                $body
            }
            (T::TenantRuns, K::StrStr(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.tenant_runs;
                $body
            }
            (T::Running, K::Str($k)) => {
                let $t = &mut $self.running;
                $body
            }
            (T::Steps, K::StrU32(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.steps;
                $body
            }
            (T::Definitions, K::Str($k)) => {
                let $t = &mut $self.definitions;
                $body
            }
            (T::Components, K::Str($k)) => {
                let $t = &mut $self.components;
                $body
            }
            (T::Kv, K::StrStr(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.kv;
                $body
            }
            (T::Outbox, K::Str($k)) => {
                let $t = &mut $self.outbox;
                $body
            }
            (T::Timers, K::U64U64(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.timers;
                $body
            }
            (T::TimerKeys, K::U64U64(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.timer_keys;
                $body
            }
            (T::RunTimers, K::StrU64(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.run_timers;
                $body
            }
            (T::Schedules, K::Str($k)) => {
                let $t = &mut $self.schedules;
                $body
            }
            (T::Cancelled, K::Str($k)) => {
                let $t = &mut $self.cancelled;
                $body
            }
            (T::Messages, K::U64($k)) => {
                let $t = &mut $self.messages;
                $body
            }
            (T::RunMessages, K::StrU64(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.run_messages;
                $body
            }
            (T::Subscriptions, K::Str($k)) => {
                let $t = &mut $self.subscriptions;
                $body
            }
            (T::Deliveries, K::Str($k)) => {
                let $t = &mut $self.deliveries;
                $body
            }
            (T::Queue, K::StrU64(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.queue;
                $body
            }
            (T::Dead, K::StrU64(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.dead;
                $body
            }
            (T::Idempotency, K::Str($k)) => {
                let $t = &mut $self.idempotency;
                $body
            }
            (T::Deployments, K::StrU32(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.deployments;
                $body
            }
            (T::Plugins, K::StrStr(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.plugins;
                $body
            }
            (T::Leases, K::Str($k)) => {
                let $t = &mut $self.leases;
                $body
            }
            (T::Hosts, K::Str($k)) => {
                let $t = &mut $self.hosts;
                $body
            }
            (T::Tenants, K::Str($k)) => {
                let $t = &mut $self.tenants;
                $body
            }
            (T::Tokens, K::Str($k)) => {
                let $t = &mut $self.tokens;
                $body
            }
            (T::Secrets, K::StrStr(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.secrets;
                $body
            }
            (T::Audit, K::U64U64(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.audit;
                $body
            }
            (T::AuditTenants, K::StrStr(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.audit_tenants;
                $body
            }
            (T::Usage, K::Str($k)) => {
                let $t = &mut $self.usage;
                $body
            }
            (T::Parked, K::Str($k)) => {
                let $t = &mut $self.parked;
                $body
            }
            (T::Doomed, K::Str($k)) => {
                let $t = &mut $self.doomed;
                $body
            }
            (T::Snapshots, K::StrU32(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.snapshots;
                $body
            }
            (T::SnapshotData, K::Str($k)) => {
                let $t = &mut $self.snapshot_data;
                $body
            }
            (T::SnapshotEntries, K::StrStr(a, b)) => {
                let $k = (a, b);
                let $t = &mut $self.snapshot_entries;
                $body
            }
            (table, key) => Err(misfit(table, key)),
        }
    }};
}

/// A typed value as the bytes `Rows` deals in, and back.
trait Value: redb::Value {
    fn to_bytes(value: Self::SelfType<'_>) -> Vec<u8>;
    fn with_bytes<R>(bytes: &[u8], then: impl FnOnce(Self::SelfType<'_>) -> R) -> R;
}

impl Value for &'static [u8] {
    fn to_bytes(value: &[u8]) -> Vec<u8> {
        value.to_vec()
    }
    fn with_bytes<R>(bytes: &[u8], then: impl FnOnce(&[u8]) -> R) -> R {
        then(bytes)
    }
}

impl Value for () {
    fn to_bytes((): ()) -> Vec<u8> {
        Vec::new()
    }
    fn with_bytes<R>(_: &[u8], then: impl FnOnce(()) -> R) -> R {
        then(())
    }
}

impl Value for u64 {
    fn to_bytes(value: u64) -> Vec<u8> {
        number(value).to_vec()
    }
    fn with_bytes<R>(bytes: &[u8], then: impl FnOnce(u64) -> R) -> R {
        then(read_number(bytes))
    }
}

impl Value for &'static str {
    fn to_bytes(value: &str) -> Vec<u8> {
        value.as_bytes().to_vec()
    }
    fn with_bytes<R>(bytes: &[u8], then: impl FnOnce(&str) -> R) -> R {
        then(&String::from_utf8_lossy(bytes))
    }
}

fn get<'k, K: redb::Key + 'static, V: Value + 'static>(
    table: &RedbTable<'_, K, V>,
    key: impl std::borrow::Borrow<K::SelfType<'k>>,
) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(backend!(table.get(key))?.map(|v| V::to_bytes(v.value())))
}

fn put<'k, K: redb::Key + 'static, V: Value + 'static>(
    table: &mut RedbTable<'_, K, V>,
    key: impl std::borrow::Borrow<K::SelfType<'k>>,
    bytes: &[u8],
) -> Result<(), StoreError> {
    V::with_bytes(bytes, |value| backend!(table.insert(key, value)).map(drop))
}

fn delete<'k, K: redb::Key + 'static, V: Value + 'static>(
    table: &mut RedbTable<'_, K, V>,
    key: impl std::borrow::Borrow<K::SelfType<'k>>,
) -> Result<bool, StoreError> {
    Ok(backend!(table.remove(key))?.is_some())
}

impl Rows for Tables<'_> {
    fn get(&mut self, table: Table, key: Key<'_>) -> Result<Option<Vec<u8>>, StoreError> {
        typed!(self, table, key, |t, k| get(t, k))
    }

    fn has(&mut self, table: Table, key: Key<'_>) -> Result<bool, StoreError> {
        typed!(self, table, key, |t, k| Ok(backend!(t.get(k))?.is_some()))
    }

    fn put(&mut self, table: Table, key: Key<'_>, value: &[u8]) -> Result<(), StoreError> {
        typed!(self, table, key, |t, k| put(t, k, value))
    }

    fn delete(&mut self, table: Table, key: Key<'_>) -> Result<bool, StoreError> {
        typed!(self, table, key, |t, k| delete(t, k))
    }

    fn under(&mut self, table: Table, first: &str) -> Result<Vec<(Part, Vec<u8>)>, StoreError> {
        let mut found = Vec::new();
        match table {
            Table::RunTimers => {
                for entry in backend!(self.run_timers.range((first, 0)..=(first, u64::MAX)))? {
                    let (key, due) = backend!(entry)?;
                    found.push((Part::U64(key.value().1), number(due.value()).to_vec()));
                }
            }
            Table::Queue | Table::Dead => {
                let queue = if table == Table::Queue {
                    &self.queue
                } else {
                    &self.dead
                };
                for entry in backend!(queue.range((first, 0)..=(first, u64::MAX)))? {
                    let (key, id) = backend!(entry)?;
                    found.push((Part::U64(key.value().1), id.value().as_bytes().to_vec()));
                }
            }
            Table::Steps => {
                for entry in backend!(self.steps.range((first, 0)..=(first, u32::MAX)))? {
                    let (key, record) = backend!(entry)?;
                    found.push((Part::U64(u64::from(key.value().1)), record.value().to_vec()));
                }
            }
            Table::Deployments => {
                for entry in backend!(self.deployments.range((first, 0)..=(first, u32::MAX)))? {
                    let (key, record) = backend!(entry)?;
                    found.push((Part::U64(u64::from(key.value().1)), record.value().to_vec()));
                }
            }
            Table::Snapshots => {
                for entry in backend!(self.snapshots.range((first, 0)..=(first, u32::MAX)))? {
                    let (key, record) = backend!(entry)?;
                    found.push((Part::U64(u64::from(key.value().1)), record.value().to_vec()));
                }
            }
            Table::RunMessages => {
                for entry in backend!(self.run_messages.range((first, 0)..=(first, u64::MAX)))? {
                    let (key, _) = backend!(entry)?;
                    found.push((Part::U64(key.value().1), Vec::new()));
                }
            }
            Table::Secrets => {
                for entry in backend!(self.secrets.range((first, "")..))? {
                    let (key, value) = backend!(entry)?;
                    let (owner, name) = key.value();
                    if owner != first {
                        break;
                    }
                    found.push((Part::Str(name.to_owned()), value.value().to_vec()));
                }
            }
            table => return Err(misfit(table, Key::Str(first))),
        }
        Ok(found)
    }

    fn first_under(
        &mut self,
        table: Table,
        first: &str,
        n: usize,
    ) -> Result<Vec<String>, StoreError> {
        if table != Table::AuditTenants {
            return Err(misfit(table, Key::Str(first)));
        }
        let mut found = Vec::new();
        for entry in backend!(self.audit_tenants.range((first, "")..))?.take(n) {
            let (key, ()) = (backend!(entry)?.0, ());
            let (owner, second) = key.value();
            if owner != first {
                break;
            }
            found.push(second.to_owned());
        }
        Ok(found)
    }

    fn keys_between(
        &mut self,
        table: Table,
        from: &str,
        to: &str,
    ) -> Result<Vec<String>, StoreError> {
        let mut found = Vec::new();
        match table {
            Table::Subscriptions => {
                for entry in backend!(self.subscriptions.range(from..to))? {
                    found.push(backend!(entry)?.0.value().to_owned());
                }
            }
            Table::Runs => {
                for entry in backend!(self.runs.range(from..to))? {
                    found.push(backend!(entry)?.0.value().to_owned());
                }
            }
            _ => return Err(misfit(table, Key::Str(from))),
        }
        Ok(found)
    }

    fn values(&mut self, table: Table) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut found = Vec::new();
        match table {
            Table::Deployments => {
                for entry in backend!(self.deployments.iter())? {
                    found.push(backend!(entry)?.1.value().to_vec());
                }
            }
            Table::Plugins => {
                for entry in backend!(self.plugins.iter())? {
                    found.push(backend!(entry)?.1.value().to_vec());
                }
            }
            _ => return Err(misfit(table, Key::Str(""))),
        }
        Ok(found)
    }

    fn last_number(&mut self, table: Table) -> Result<Option<u64>, StoreError> {
        if table != Table::Messages {
            return Err(misfit(table, Key::U64(0)));
        }
        // Below the floor, the next message follows the floor's predecessor
        // as if it were the last.
        let last = backend!(self.messages.last())?.map(|(key, _)| key.value());
        let below = self.messages_floor.checked_sub(1);
        Ok(last.max(below))
    }
}
