//! Reads of the message tables.

use redb::{ReadTransaction, ReadableTable};

use super::decode;
use crate::StoreError;
use crate::messages::{DeliveryRecord, MessageRecord, SubscriptionRecord};

/// The keys of `channel`'s subscriptions in a table keyed
/// `<channel>/<name>`: names have no `/`.
fn channel_range(channel: &str) -> (String, String) {
    (format!("{channel}/"), format!("{channel}0"))
}

/// Reads of the message tables. A file from before they existed has none.
pub(super) struct Reads<'t>(pub(super) &'t ReadTransaction);

macro_rules! table_or {
    ($txn:expr, $table:expr, $empty:expr) => {
        match $txn.open_table($table) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok($empty),
            other => backend!(other)?,
        }
    };
}

impl Reads<'_> {
    pub(super) fn subscriptions(
        &self,
        channel: Option<&str>,
    ) -> Result<Vec<SubscriptionRecord>, StoreError> {
        let table = table_or!(self.0, super::SUBSCRIPTIONS, Vec::new());
        let mut found = Vec::new();
        let mut push = |entry: Result<_, redb::StorageError>| -> Result<(), StoreError> {
            let (key, value): (redb::AccessGuard<&str>, redb::AccessGuard<&[u8]>) =
                backend!(entry)?;
            found.push(decode(key.value(), value.value())?);
            Ok(())
        };
        match channel {
            Some(channel) => {
                let (from, to) = channel_range(channel);
                for entry in backend!(table.range(from.as_str()..to.as_str()))? {
                    push(entry)?;
                }
            }
            None => {
                for entry in backend!(table.iter())? {
                    push(entry)?;
                }
            }
        }
        Ok(found)
    }

    pub(super) fn subscription(&self, key: &str) -> Result<Option<SubscriptionRecord>, StoreError> {
        let table = table_or!(self.0, super::SUBSCRIPTIONS, None);
        backend!(table.get(key))?
            .map(|bytes| decode(key, bytes.value()))
            .transpose()
    }

    pub(super) fn delivery(&self, id: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        let table = table_or!(self.0, super::DELIVERIES, None);
        backend!(table.get(id))?
            .map(|bytes| decode(id, bytes.value()))
            .transpose()
    }

    pub(super) fn message(&self, seq: u64) -> Result<Option<MessageRecord>, StoreError> {
        let table = table_or!(self.0, super::MESSAGES, None);
        backend!(table.get(seq))?
            .map(|bytes| decode(seq, bytes.value()))
            .transpose()
    }

    /// Up to `limit` deliveries of `subscription` from its queue (or its
    /// dead letters), from message `after + 1` on, in order.
    pub(super) fn queued(
        &self,
        subscription: &str,
        dead: bool,
        after: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let queue = if dead {
            table_or!(self.0, super::DEAD, Vec::new())
        } else {
            table_or!(self.0, super::QUEUE, Vec::new())
        };
        let deliveries = table_or!(self.0, super::DELIVERIES, Vec::new());
        let start = after.saturating_add(1);
        let entries = backend!(queue.range((subscription, start)..=(subscription, u64::MAX)))?;
        resolve(entries, &deliveries, limit)
    }

    /// Up to `limit` dead letters, of every subscription.
    pub(super) fn dead_letters(&self, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        let dead = table_or!(self.0, super::DEAD, Vec::new());
        let deliveries = table_or!(self.0, super::DELIVERIES, Vec::new());
        resolve(backend!(dead.iter())?, &deliveries, limit)
    }

    /// Up to `limit` of the newest deliveries.
    pub(super) fn deliveries(&self, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        let deliveries = table_or!(self.0, super::DELIVERIES, Vec::new());
        let mut found = Vec::new();
        for entry in backend!(deliveries.iter())?.rev() {
            if found.len() >= limit {
                break;
            }
            let (key, value) = backend!(entry)?;
            found.push(decode(key.value(), value.value())?);
        }
        Ok(found)
    }

    pub(super) fn run_messages(&self, run: &str) -> Result<Vec<MessageRecord>, StoreError> {
        let index = table_or!(self.0, super::RUN_MESSAGES, Vec::new());
        let messages = table_or!(self.0, super::MESSAGES, Vec::new());
        let mut found = Vec::new();
        for entry in backend!(index.range((run, 0)..=(run, u64::MAX)))? {
            let (key, ()) = backend!(entry).map(|(k, _)| (k, ()))?;
            let seq = key.value().1;
            if let Some(bytes) = backend!(messages.get(seq))? {
                found.push(decode(seq, bytes.value())?);
            }
        }
        Ok(found)
    }

    pub(super) fn idempotent_run(&self, key: &str) -> Result<Option<String>, StoreError> {
        let table = table_or!(self.0, super::IDEMPOTENCY, None);
        Ok(backend!(table.get(key))?.map(|run| run.value().to_owned()))
    }
}

/// The delivery records of up to `limit` rows of a queue (or the dead
/// letters), in row order.
fn resolve(
    entries: redb::Range<'_, (&'static str, u64), &'static str>,
    deliveries: &redb::ReadOnlyTable<&'static str, &'static [u8]>,
    limit: usize,
) -> Result<Vec<DeliveryRecord>, StoreError> {
    let mut found = Vec::new();
    for entry in entries {
        if found.len() >= limit {
            break;
        }
        let (_, id) = backend!(entry)?;
        if let Some(bytes) = backend!(deliveries.get(id.value()))? {
            found.push(decode(id.value(), bytes.value())?);
        }
    }
    Ok(found)
}
