//! The reads of the [`Store`](crate::Store) trait, in SQL: each answers
//! what redb's read of the same tables answers, in the same order, from
//! one statement's snapshot where redb reads one transaction's.

use serde::de::DeserializeOwned;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::schema::{from_sql, to_sql};
use super::{PostgresStore, sql};
use crate::rows::{decode, decode_kv, read_number};
use crate::{
    AuditRecord, Damaged, DefinitionRecord, DeliveryRecord, DeploymentRecord, HostRecord, Lease,
    MessageRecord, OutboxRecord, PluginRecord, RunFilter, RunRecord, ScheduleRecord, SecretRecord,
    StepRecord, StoreError, SubscriptionRecord, TenantRecord, TimerRecord, TokenRecord,
};

/// Rows a listing reads at a time, when it filters what it reads.
const PAGE: i64 = 500;

/// A row of a listing that recovery depends on: one that does not decode
/// is set aside with a warning (`weft doctor` lists it), as on redb.
fn kept<T: DeserializeOwned>(table: &str, key: &str, bytes: &[u8]) -> Option<T> {
    match decode(key, bytes) {
        Ok(row) => Some(row),
        Err(e) => {
            tracing::warn!(table, key, "a row does not decode and is set aside: {e}");
            None
        }
    }
}

/// A text key column (its UTF-8 bytes).
fn text(row: &Row, at: usize) -> Result<String, StoreError> {
    let bytes: &[u8] = row.try_get(at).map_err(sql)?;
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// A text as a key column's parameter.
fn as_key(text: &str) -> &[u8] {
    text.as_bytes()
}

fn int(row: &Row, at: usize) -> Result<u64, StoreError> {
    row.try_get::<_, i64>(at).map(from_sql).map_err(sql)
}

fn bytes(row: &Row, at: usize) -> Result<Vec<u8>, StoreError> {
    row.try_get(at).map_err(sql)
}

fn limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

impl PostgresStore {
    fn query(
        &self,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let read = |client: deadpool_postgres::Object| {
            self.block(async {
                let statement = client.prepare_cached(statement).await?;
                client.query(&statement, params).await
            })
        };
        match read(self.client()?) {
            // A pooled connection that closed since it was last used (its
            // end not noticed yet): a read is read again on another, once.
            Err(e) if e.is_closed() => read(self.client()?).map_err(sql),
            other => other.map_err(sql),
        }
    }

    /// The value of the row the statement selects, if any.
    fn value(
        &self,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.query(statement, params)?
            .first()
            .map(|row| bytes(row, 0))
            .transpose()
    }

    /// The record `key` of a table keyed by text, decoded.
    fn record<T: DeserializeOwned>(&self, table: &str, key: &str) -> Result<Option<T>, StoreError> {
        let statement = format!("SELECT v FROM {table} WHERE k1 = $1");
        self.value(&statement, &[&as_key(key)])?
            .map(|v| decode(key, &v))
            .transpose()
    }

    /// Every record of a table keyed by text, in key order; with `keep`,
    /// those that do not decode are set aside.
    fn records<T: DeserializeOwned>(&self, table: &str, keep: bool) -> Result<Vec<T>, StoreError> {
        let statement = format!("SELECT k1, v FROM {table} ORDER BY k1");
        let mut found = Vec::new();
        for row in self.query(&statement, &[])? {
            let (key, value) = (text(&row, 0)?, bytes(&row, 1)?);
            if keep {
                found.extend(kept(table, &key, &value));
            } else {
                found.push(decode(&key, &value)?);
            }
        }
        Ok(found)
    }

    pub(super) fn read_stored_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        let used = self.value("SELECT v FROM usage WHERE k1 = $1", &[&as_key(tenant)])?;
        Ok(used.map_or(0, |used| read_number(&used)))
    }

    pub(super) fn read_run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.record("runs", id)
    }

    pub(super) fn read_runs(
        &self,
        filter: &RunFilter,
        wanted: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let mut found = Vec::new();
        let mut before: Option<String> = filter.before.clone();
        // A tenant's runs through its index, so that no other tenant's row
        // is read; else every run.
        let tenant = filter.tenant_of().map(as_key);
        while found.len() < wanted {
            let rows = match (tenant, &before) {
                (Some(tenant), None) => self.query(
                    "SELECT r.k1, r.v FROM tenant_runs t JOIN runs r ON r.k1 = t.k2 \
                     WHERE t.k1 = $1 ORDER BY t.k2 DESC LIMIT $2",
                    &[&tenant, &PAGE],
                )?,
                (Some(tenant), Some(before)) => self.query(
                    "SELECT r.k1, r.v FROM tenant_runs t JOIN runs r ON r.k1 = t.k2 \
                     WHERE t.k1 = $1 AND t.k2 < $2 ORDER BY t.k2 DESC LIMIT $3",
                    &[&tenant, &as_key(before), &PAGE],
                )?,
                (None, None) => {
                    self.query("SELECT k1, v FROM runs ORDER BY k1 DESC LIMIT $1", &[&PAGE])?
                }
                (None, Some(before)) => self.query(
                    "SELECT k1, v FROM runs WHERE k1 < $1 ORDER BY k1 DESC LIMIT $2",
                    &[&as_key(before), &PAGE],
                )?,
            };
            let Some(last) = rows.last() else { break };
            before = Some(text(last, 0)?);
            for row in &rows {
                if found.len() >= wanted {
                    break;
                }
                let run: RunRecord = decode(text(row, 0)?, &bytes(row, 1)?)?;
                if filter.keeps(&run) {
                    found.push(run);
                }
            }
        }
        Ok(found)
    }

    pub(super) fn read_steps(&self, id: &str) -> Result<Vec<StepRecord>, StoreError> {
        let rows = self.query(
            "SELECT k2, v FROM steps WHERE k1 = $1 ORDER BY k2",
            &[&as_key(id)],
        )?;
        rows.iter()
            .map(|row| decode(format!("{id}/{}", int(row, 0)?), &bytes(row, 1)?))
            .collect()
    }

    pub(super) fn read_steps_page(
        &self,
        id: &str,
        after: Option<u32>,
        limit: usize,
    ) -> Result<Vec<StepRecord>, StoreError> {
        // Key numbers are stored with their top bit flipped (`to_sql`).
        let from = to_sql(after.map_or(0, |a| u64::from(a) + 1));
        let rows = self.query(
            "SELECT k2, v FROM steps WHERE k1 = $1 AND k2 >= $2 ORDER BY k2 LIMIT $3",
            &[&as_key(id), &from, &self::limit(limit)],
        )?;
        rows.iter()
            .map(|row| decode(format!("{id}/{}", int(row, 0)?), &bytes(row, 1)?))
            .collect()
    }

    pub(super) fn read_running(&self) -> Result<Vec<RunRecord>, StoreError> {
        let rows = self.query(
            "SELECT r.k1, r.v FROM running x JOIN runs r ON r.k1 = x.k1 ORDER BY x.k1",
            &[],
        )?;
        let mut found = Vec::new();
        for row in rows {
            found.extend(kept("runs", &text(&row, 0)?, &bytes(&row, 1)?));
        }
        Ok(found)
    }

    pub(super) fn read_running_ids(&self) -> Result<Vec<String>, StoreError> {
        self.query("SELECT k1 FROM running ORDER BY k1", &[])?
            .iter()
            .map(|row| text(row, 0))
            .collect()
    }

    pub(super) fn read_marks(&self) -> Result<Vec<(String, weft_core::Timestamp)>, StoreError> {
        self.query("SELECT k1, v FROM doomed ORDER BY k1", &[])?
            .iter()
            .map(|row| {
                let at = read_number(&bytes(row, 1)?);
                Ok((text(row, 0)?, weft_core::Timestamp(at)))
            })
            .collect()
    }

    pub(super) fn read_digests(&self, blob: crate::Blob) -> Result<Vec<String>, StoreError> {
        let statement = match blob {
            crate::Blob::Definition => "SELECT k1 FROM definitions ORDER BY k1",
            crate::Blob::Component => "SELECT k1 FROM components ORDER BY k1",
        };
        self.query(statement, &[])?
            .iter()
            .map(|row| text(row, 0))
            .collect()
    }

    pub(super) fn read_definition(
        &self,
        digest: &str,
    ) -> Result<Option<DefinitionRecord>, StoreError> {
        self.record("definitions", digest)
    }

    pub(super) fn read_timer_keys(&self) -> Result<Vec<(u64, u64)>, StoreError> {
        let rows = self.query("SELECT k1, k2 FROM timer_keys ORDER BY k1, k2", &[])?;
        rows.iter()
            .map(|row| Ok((int(row, 0)?, int(row, 1)?)))
            .collect()
    }

    pub(super) fn read_timer(
        &self,
        (due, id): (u64, u64),
    ) -> Result<Option<TimerRecord>, StoreError> {
        self.value(
            "SELECT v FROM timers WHERE k1 = $1 AND k2 = $2",
            &[&to_sql(due), &to_sql(id)],
        )?
        .map(|v| decode(id, &v))
        .transpose()
    }

    pub(super) fn read_run_timers(&self, run: &str) -> Result<Vec<TimerRecord>, StoreError> {
        let rows = self.query(
            "SELECT k2, v FROM run_timers WHERE k1 = $1 ORDER BY k2",
            &[&as_key(run)],
        )?;
        let mut found = Vec::new();
        for row in rows {
            let (id, due) = (int(&row, 0)?, read_number(&bytes(&row, 1)?));
            found.extend(self.read_timer((due, id))?);
        }
        Ok(found)
    }

    pub(super) fn read_schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.records("schedules", true)
    }

    pub(super) fn read_outbox(&self) -> Result<Vec<OutboxRecord>, StoreError> {
        self.records("outbox", true)
    }

    pub(super) fn read_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.value("SELECT v FROM components WHERE k1 = $1", &[&as_key(digest)])
    }

    pub(super) fn read_kv(
        &self,
        space: &str,
        key: &str,
    ) -> Result<weft_core::Versioned, StoreError> {
        let value = self.value(
            "SELECT v FROM kv WHERE k1 = $1 AND k2 = $2",
            &[&as_key(space), &as_key(key)],
        )?;
        Ok(value.map(|v| decode_kv(&v)).unwrap_or_default())
    }

    pub(super) fn read_kv_list(
        &self,
        space: &str,
        prefix: &str,
        wanted: usize,
        now: u64,
    ) -> Result<Vec<String>, StoreError> {
        let mut keys = Vec::new();
        let mut from = prefix.to_owned();
        let mut first = true;
        // Deleted keys are kept (their versions grow), so a page may hold
        // fewer live keys than it reads.
        while keys.len() < wanted {
            let rows = self.query(
                "SELECT k2, v FROM kv WHERE k1 = $1 AND (k2 > $2 OR ($3 AND k2 = $2)) \
                 ORDER BY k2 LIMIT $4",
                &[&as_key(space), &as_key(&from), &first, &PAGE],
            )?;
            first = false;
            let Some(last) = rows.last() else { break };
            let last = text(last, 0)?;
            for row in &rows {
                let key = text(row, 0)?;
                if !key.starts_with(prefix) || keys.len() >= wanted {
                    return Ok(keys);
                }
                if decode_kv(&bytes(row, 1)?).live(now).is_some() {
                    keys.push(key);
                }
            }
            from = last;
        }
        Ok(keys)
    }

    pub(super) fn read_subscriptions(
        &self,
        channel: Option<&str>,
    ) -> Result<Vec<SubscriptionRecord>, StoreError> {
        let rows = match channel {
            Some(channel) => self.query(
                "SELECT k1, v FROM subscriptions WHERE k1 >= $1 AND k1 < $2 ORDER BY k1",
                &[
                    &as_key(&format!("{channel}/")),
                    &as_key(&format!("{channel}0")),
                ],
            )?,
            None => self.query("SELECT k1, v FROM subscriptions ORDER BY k1", &[])?,
        };
        rows.iter()
            .map(|row| decode(text(row, 0)?, &bytes(row, 1)?))
            .collect()
    }

    pub(super) fn read_subscription(
        &self,
        key: &str,
    ) -> Result<Option<SubscriptionRecord>, StoreError> {
        self.record("subscriptions", key)
    }

    pub(super) fn read_delivery(&self, id: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        self.record("deliveries", id)
    }

    pub(super) fn read_message(&self, seq: u64) -> Result<Option<MessageRecord>, StoreError> {
        self.value("SELECT v FROM messages WHERE k1 = $1", &[&to_sql(seq)])?
            .map(|v| decode(seq, &v))
            .transpose()
    }

    /// Deliveries by the ids in a queue's rows, in row order.
    fn resolve(rows: &[Row]) -> Result<Vec<DeliveryRecord>, StoreError> {
        rows.iter()
            .map(|row| decode(text(row, 0)?, &bytes(row, 1)?))
            .collect()
    }

    pub(super) fn read_queued(
        &self,
        subscription: &str,
        dead: bool,
        after: u64,
        wanted: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let statement = format!(
            "SELECT d.k1, d.v FROM {} q JOIN deliveries d ON d.k1 = q.v \
             WHERE q.k1 = $1 AND q.k2 >= $2 ORDER BY q.k2 LIMIT $3",
            if dead { "dead" } else { "queue" }
        );
        let start = to_sql(after.saturating_add(1));
        Self::resolve(&self.query(&statement, &[&as_key(subscription), &start, &limit(wanted)])?)
    }

    pub(super) fn read_dead_letters(
        &self,
        wanted: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let rows = self.query(
            "SELECT d.k1, d.v FROM dead q JOIN deliveries d ON d.k1 = q.v \
             ORDER BY q.k1, q.k2 LIMIT $1",
            &[&limit(wanted)],
        )?;
        Self::resolve(&rows)
    }

    pub(super) fn read_deliveries(&self, wanted: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        let rows = self.query(
            "SELECT k1, v FROM deliveries ORDER BY k1 DESC LIMIT $1",
            &[&limit(wanted)],
        )?;
        Self::resolve(&rows)
    }

    pub(super) fn read_run_messages(&self, run: &str) -> Result<Vec<MessageRecord>, StoreError> {
        let rows = self.query(
            "SELECT m.k1, m.v FROM run_messages r JOIN messages m ON m.k1 = r.k2 \
             WHERE r.k1 = $1 ORDER BY r.k2",
            &[&as_key(run)],
        )?;
        rows.iter()
            .map(|row| decode(int(row, 0)?, &bytes(row, 1)?))
            .collect()
    }

    pub(super) fn read_idempotent_run(&self, key: &str) -> Result<Option<String>, StoreError> {
        let run = self.value("SELECT v FROM idempotency WHERE k1 = $1", &[&as_key(key)])?;
        Ok(run.map(|run| String::from_utf8_lossy(&run).into_owned()))
    }

    pub(super) fn read_deployments(
        &self,
        workflow: Option<&str>,
    ) -> Result<Vec<DeploymentRecord>, StoreError> {
        let rows = match workflow {
            Some(id) => self.query(
                "SELECT k1, k2, v FROM deployments WHERE k1 = $1 ORDER BY k2",
                &[&as_key(id)],
            )?,
            None => self.query("SELECT k1, k2, v FROM deployments ORDER BY k1, k2", &[])?,
        };
        let mut found = Vec::new();
        for row in &rows {
            let key = format!("{}#{}", text(row, 0)?, int(row, 1)?);
            found.extend(kept("deployments", &key, &bytes(row, 2)?));
        }
        Ok(found)
    }

    pub(super) fn read_snapshots(
        &self,
        store: Option<&str>,
    ) -> Result<Vec<crate::SnapshotRecord>, StoreError> {
        let rows = match store {
            Some(name) => self.query(
                "SELECT k1, k2, v FROM snapshots WHERE k1 = $1 ORDER BY k2",
                &[&as_key(name)],
            )?,
            None => self.query("SELECT k1, k2, v FROM snapshots ORDER BY k1, k2", &[])?,
        };
        rows.iter()
            .map(|row| {
                let key = format!("{}#{}", text(row, 0)?, int(row, 1)?);
                decode(key, &bytes(row, 2)?)
            })
            .collect()
    }

    pub(super) fn read_snapshot_entry(
        &self,
        data: &str,
        key: &str,
    ) -> Result<Option<crate::SnapshotEntry>, StoreError> {
        let value = self.value(
            "SELECT v FROM snapshot_entries WHERE k1 = $1 AND k2 = $2",
            &[&as_key(data), &as_key(key)],
        )?;
        Ok(value.map(|v| crate::SnapshotEntry::decode(&v)))
    }

    pub(super) fn read_snapshot_entries(
        &self,
        data: &str,
        after: Option<&str>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, crate::SnapshotEntry)>, StoreError> {
        let from = match after {
            Some(after) if after >= prefix => after,
            _ => prefix,
        };
        let inclusive = after.is_none_or(|after| after < prefix);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.query(
            "SELECT k2, v FROM snapshot_entries WHERE k1 = $1 AND (k2 > $2 OR ($3 AND k2 = $2)) \
             ORDER BY k2 LIMIT $4",
            &[&as_key(data), &as_key(from), &inclusive, &limit],
        )?;
        let mut found = Vec::with_capacity(rows.len());
        for row in &rows {
            let key = text(row, 0)?;
            if !key.starts_with(prefix) {
                break;
            }
            found.push((key, crate::SnapshotEntry::decode(&bytes(row, 1)?)));
        }
        Ok(found)
    }

    pub(super) fn read_snapshot_keys(
        &self,
        data: &str,
        after: Option<&str>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        let from = match after {
            Some(after) if after >= prefix => after,
            _ => prefix,
        };
        let inclusive = after.is_none_or(|after| after < prefix);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.query(
            "SELECT k2, substring(v from 1 for 8) FROM snapshot_entries \
             WHERE k1 = $1 AND (k2 > $2 OR ($3 AND k2 = $2)) ORDER BY k2 LIMIT $4",
            &[&as_key(data), &as_key(from), &inclusive, &limit],
        )?;
        let mut found = Vec::with_capacity(rows.len());
        for row in &rows {
            let key = text(row, 0)?;
            if !key.starts_with(prefix) {
                break;
            }
            let at = read_number(&bytes(row, 1)?);
            found.push((key, (at != 0).then_some(at)));
        }
        Ok(found)
    }

    pub(super) fn read_snapshot_data(
        &self,
    ) -> Result<Vec<(String, crate::SnapshotData)>, StoreError> {
        let rows = self.query("SELECT k1, v FROM snapshot_data ORDER BY k1", &[])?;
        rows.iter()
            .map(|row| {
                let key = text(row, 0)?;
                let data = decode(&key, &bytes(row, 1)?)?;
                Ok((key, data))
            })
            .collect()
    }

    pub(super) fn read_plugins(&self) -> Result<Vec<PluginRecord>, StoreError> {
        let rows = self.query("SELECT k1, k2, v FROM plugins ORDER BY k1, k2", &[])?;
        let mut found = Vec::new();
        for row in &rows {
            let key = format!("{}@{}", text(row, 0)?, text(row, 1)?);
            found.extend(kept("plugins", &key, &bytes(row, 2)?));
        }
        Ok(found)
    }

    pub(super) fn read_damaged(&self) -> Result<Vec<Damaged>, StoreError> {
        let mut found = Vec::new();
        let mut look = |table: &str, key: String, outcome: Result<(), StoreError>| {
            found.extend(Damaged::of(table, key, outcome));
        };
        for table in ["runs", "outbox", "schedules"] {
            let statement = format!("SELECT k1, v FROM {table} ORDER BY k1");
            for row in self.query(&statement, &[])? {
                let (key, value) = (text(&row, 0)?, bytes(&row, 1)?);
                let outcome = match table {
                    "runs" => decode::<RunRecord>(&key, &value).map(drop),
                    "outbox" => decode::<OutboxRecord>(&key, &value).map(drop),
                    _ => decode::<ScheduleRecord>(&key, &value).map(drop),
                };
                look(table, key, outcome);
            }
        }
        for row in self.query("SELECT k1, k2, v FROM timers ORDER BY k1, k2", &[])? {
            let (due, id) = (int(&row, 0)?, int(&row, 1)?);
            let outcome = decode::<TimerRecord>(id, &bytes(&row, 2)?).map(drop);
            look("timers", format!("{due}/{id}"), outcome);
        }
        for table in ["hosts", "tenants"] {
            let statement = format!("SELECT k1, v FROM {table} ORDER BY k1");
            for row in self.query(&statement, &[])? {
                let (key, value) = (text(&row, 0)?, bytes(&row, 1)?);
                let outcome = match table {
                    "hosts" => decode::<HostRecord>(&key, &value).map(drop),
                    _ => decode::<TenantRecord>(&key, &value).map(drop),
                };
                look(table, key, outcome);
            }
        }
        for row in self.query("SELECT k1, k2, v FROM deployments ORDER BY k1, k2", &[])? {
            let key = format!("{}#{}", text(&row, 0)?, int(&row, 1)?);
            let outcome = decode::<DeploymentRecord>(&key, &bytes(&row, 2)?).map(drop);
            look("deployments", key, outcome);
        }
        for row in self.query("SELECT k1, k2, v FROM plugins ORDER BY k1, k2", &[])? {
            let key = format!("{}@{}", text(&row, 0)?, text(&row, 1)?);
            let outcome = decode::<PluginRecord>(&key, &bytes(&row, 2)?).map(drop);
            look("plugins", key, outcome);
        }
        Ok(found)
    }

    pub(super) fn read_messages_from(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<MessageRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.query(
            "SELECT k1, v FROM messages WHERE k1 > $1 ORDER BY k1 LIMIT $2",
            &[&to_sql(after), &limit],
        )?;
        rows.iter()
            .map(|row| decode(int(row, 0)?, &bytes(row, 1)?))
            .collect()
    }

    pub(super) fn read_kv_from(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<crate::KvRow>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match after {
            None => self.query(
                "SELECT k1, k2, v FROM kv ORDER BY k1, k2 LIMIT $1",
                &[&limit],
            )?,
            Some((space, key)) => self.query(
                "SELECT k1, k2, v FROM kv WHERE (k1, k2) > ($1, $2) ORDER BY k1, k2 LIMIT $3",
                &[&as_key(space), &as_key(key), &limit],
            )?,
        };
        rows.iter()
            .map(|row| Ok((text(row, 0)?, text(row, 1)?, decode_kv(&bytes(row, 2)?))))
            .collect()
    }

    pub(super) fn read_runs_from(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<crate::RunsFrom, StoreError> {
        let wanted = limit;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match after {
            None => self.query("SELECT k1, v FROM runs ORDER BY k1 LIMIT $1", &[&limit])?,
            Some(after) => self.query(
                "SELECT k1, v FROM runs WHERE k1 > $1 ORDER BY k1 LIMIT $2",
                &[&as_key(after), &limit],
            )?,
        };
        let mut found = Vec::with_capacity(rows.len());
        let mut last = None;
        for row in &rows {
            let key = text(row, 0)?;
            if let Ok(run) = decode(&key, &bytes(row, 1)?) {
                found.push(run);
            }
            last = Some(key);
        }
        Ok((found, last.filter(|_| rows.len() == wanted)))
    }

    pub(super) fn read_parked(&self, limit: usize) -> Result<Vec<(String, String)>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.query("SELECT k1, v FROM parked ORDER BY k1 LIMIT $1", &[&limit])?;
        let mut found = Vec::with_capacity(rows.len());
        for row in rows {
            let id: Vec<u8> = row.try_get(0).map_err(sql)?;
            let tenant: Vec<u8> = row.try_get(1).map_err(sql)?;
            found.push((
                String::from_utf8_lossy(&id).into_owned(),
                String::from_utf8_lossy(&tenant).into_owned(),
            ));
        }
        Ok(found)
    }

    pub(super) fn read_lease(&self, id: &str) -> Result<Option<Lease>, StoreError> {
        self.record("leases", id)
    }

    pub(super) fn read_hosts(&self) -> Result<Vec<HostRecord>, StoreError> {
        self.records("hosts", true)
    }

    pub(super) fn read_tenants(&self) -> Result<Vec<TenantRecord>, StoreError> {
        self.records("tenants", false)
    }

    pub(super) fn read_token(&self, id: &str) -> Result<Option<TokenRecord>, StoreError> {
        self.record("tokens", id)
    }

    pub(super) fn read_tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.records("tokens", false)
    }

    pub(super) fn read_secret(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<SecretRecord>, StoreError> {
        self.value(
            "SELECT v FROM secrets WHERE k1 = $1 AND k2 = $2",
            &[&as_key(tenant), &as_key(name)],
        )?
        .map(|v| decode(name, &v))
        .transpose()
    }

    pub(super) fn read_secrets(&self, tenant: &str) -> Result<Vec<SecretRecord>, StoreError> {
        let rows = self.query(
            "SELECT k2, v FROM secrets WHERE k1 = $1 ORDER BY k2",
            &[&as_key(tenant)],
        )?;
        rows.iter()
            .map(|row| decode(text(row, 0)?, &bytes(row, 1)?))
            .collect()
    }

    pub(super) fn read_audit(
        &self,
        tenant: Option<&str>,
        wanted: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let mut found = Vec::new();
        let mut before: Option<(i64, i64)> = None;
        while found.len() < wanted {
            let rows = match before {
                None => self.query(
                    "SELECT k1, k2, v FROM audit ORDER BY k1 DESC, k2 DESC LIMIT $1",
                    &[&PAGE],
                )?,
                Some((at, n)) => self.query(
                    "SELECT k1, k2, v FROM audit WHERE (k1, k2) < ($1, $2) \
                     ORDER BY k1 DESC, k2 DESC LIMIT $3",
                    &[&at, &n, &PAGE],
                )?,
            };
            let Some(last) = rows.last() else { break };
            before = Some((last.try_get(0).map_err(sql)?, last.try_get(1).map_err(sql)?));
            for row in &rows {
                if found.len() >= wanted {
                    break;
                }
                let key = format!("{}/{}", int(row, 0)?, int(row, 1)?);
                let record: AuditRecord = decode(key, &bytes(row, 2)?)?;
                if tenant.is_none_or(|t| t == record.tenant) {
                    found.push(record);
                }
            }
        }
        Ok(found)
    }
}
