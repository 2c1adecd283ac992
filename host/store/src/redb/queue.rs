//! The message tables: messages, subscriptions, deliveries, each
//! subscription's queue and dead letters, and actions on waiting steps.

use redb::{ReadTransaction, ReadableTable};

use super::{Tables, decode};
use crate::messages::{
    DeliveryOp, DeliveryRecord, DeliveryState, MessageRecord, SubscriptionRecord,
};
use crate::write::encode;
use crate::{Emitted, StoreError, What};
use weft_core::clock::Timestamp;

/// The keys of `channel`'s subscriptions in a table keyed
/// `<channel>/<name>`: names have no `/`.
fn channel_range(channel: &str) -> (String, String) {
    (format!("{channel}/"), format!("{channel}0"))
}

/// Whether `delivery` is in its subscription's queue: not settled, and
/// not a dead letter.
fn in_queue(delivery: &DeliveryRecord) -> bool {
    matches!(
        delivery.state,
        DeliveryState::Created | DeliveryState::Delivered
    )
}

/// The refusal of a change that does not apply to `delivery`'s state.
fn wrong_state(delivery: &DeliveryRecord) -> StoreError {
    StoreError::DeliveryState {
        id: delivery.id.clone(),
        state: delivery.state,
    }
}

impl Tables<'_> {
    /// Commits what a step of run `run` emitted: each message gets the next
    /// `seq`, and each subscription of its channel a delivery, stamped with
    /// the commit's time.
    pub(super) fn emit(&mut self, run: &str, emitted: &Emitted) -> Result<(), StoreError> {
        let mut seq = backend!(self.messages.last())?.map_or(0, |(k, _)| k.value());
        let now = emitted.at;
        let committed_us = now.as_millis().saturating_mul(1000);
        let path = emitted.path.as_str();
        for emission in &emitted.messages {
            seq += 1;
            let (from, to) = channel_range(&emission.channel);
            let mut subscriptions = Vec::new();
            for entry in backend!(self.subscriptions.range(from.as_str()..to.as_str()))? {
                let (key, _) = backend!(entry)?;
                subscriptions.push(key.value().to_owned());
            }
            let mut deliveries = Vec::with_capacity(subscriptions.len());
            for subscription in subscriptions {
                let delivery = DeliveryRecord {
                    id: weft_core::ids::uuid_v7(now),
                    subscription,
                    seq,
                    message: emission.id.clone(),
                    run: run.to_owned(),
                    state: DeliveryState::Created,
                    attempts: 0,
                    next_at: None,
                    last_error: None,
                    created_at: now,
                    delivered_at: None,
                    acked_at: None,
                };
                self.put_delivery(&delivery)?;
                backend!(
                    self.queue
                        .insert((delivery.subscription.as_str(), seq), delivery.id.as_str())
                )?;
                deliveries.push(delivery.id);
            }
            let message = MessageRecord {
                seq,
                id: emission.id.clone(),
                channel: emission.channel.clone(),
                run: run.to_owned(),
                step: path.to_owned(),
                payload: emission.payload.clone(),
                committed_us,
                pending: u32::try_from(deliveries.len()).unwrap_or(u32::MAX),
                deliveries,
            };
            backend!(self.messages.insert(seq, encode(&message).as_slice()))?;
            backend!(self.run_messages.insert((run, seq), ()))?;
        }
        Ok(())
    }

    fn put_delivery(&mut self, delivery: &DeliveryRecord) -> Result<(), StoreError> {
        backend!(
            self.deliveries
                .insert(delivery.id.as_str(), encode(delivery).as_slice())
        )?;
        Ok(())
    }

    fn get_delivery(&self, id: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        backend!(self.deliveries.get(id))?
            .map(|bytes| decode(id, bytes.value()))
            .transpose()
    }

    /// Makes a subscription; one that exists with the same target is left
    /// as it is, one with another target is refused.
    pub(super) fn subscribe(
        &mut self,
        row: &SubscriptionRecord,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let stored = backend!(self.subscriptions.get(row.key.as_str()))?
            .map(|bytes| decode::<SubscriptionRecord>(&row.key, bytes.value()))
            .transpose()?;
        match stored {
            Some(stored) if stored.target == row.target => Ok(Ok(())),
            Some(_) => Ok(Err(StoreError::Exists(What::Subscription(row.key.clone())))),
            None => {
                backend!(
                    self.subscriptions
                        .insert(row.key.as_str(), encode(row).as_slice())
                )?;
                Ok(Ok(()))
            }
        }
    }

    /// Removes a subscription: its unsettled deliveries and dead letters
    /// count as settled.
    pub(super) fn unsubscribe(&mut self, key: &str) -> Result<Result<(), StoreError>, StoreError> {
        if backend!(self.subscriptions.remove(key))?.is_none() {
            return Ok(Err(StoreError::NotFound(What::Subscription(
                key.to_owned(),
            ))));
        }
        let mut ids = Vec::new();
        for table in [&self.queue, &self.dead] {
            for entry in backend!(table.range((key, 0)..=(key, u64::MAX)))? {
                let (at, id) = backend!(entry)?;
                ids.push((at.value().1, id.value().to_owned()));
            }
        }
        for (seq, id) in ids {
            backend!(self.queue.remove((key, seq)))?;
            backend!(self.dead.remove((key, seq)))?;
            backend!(self.deliveries.remove(id.as_str()))?;
            self.settle(seq, None)?;
        }
        Ok(Ok(()))
    }

    /// One fewer unsettled delivery of message `seq`; when it was the
    /// last, the message and every delivery of it that was acked are
    /// completed. `at`: when, for an ack.
    fn settle(&mut self, seq: u64, at: Option<Timestamp>) -> Result<(), StoreError> {
        let Some(mut message) = backend!(self.messages.get(seq))?
            .map(|bytes| decode::<MessageRecord>(seq, bytes.value()))
            .transpose()?
        else {
            return Ok(());
        };
        message.pending = message.pending.saturating_sub(1);
        if message.pending == 0 {
            for id in &message.deliveries {
                if let Some(mut delivery) = self.get_delivery(id)?
                    && delivery.state == DeliveryState::Acked
                {
                    delivery.state = DeliveryState::Completed;
                    if delivery.acked_at.is_none() {
                        delivery.acked_at = at;
                    }
                    self.put_delivery(&delivery)?;
                }
            }
        }
        backend!(self.messages.insert(seq, encode(&message).as_slice()))?;
        Ok(())
    }

    /// Applies `op` to delivery `id`: refused if there is none, or if `op`
    /// does not apply to its state.
    pub(super) fn delivery(
        &mut self,
        id: &str,
        op: &DeliveryOp,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let Some(delivery) = self.get_delivery(id)? else {
            return Ok(Err(StoreError::NotFound(What::Delivery(id.to_owned()))));
        };
        match op {
            DeliveryOp::Sent { at, next_at } => self.mark_sent(delivery, *at, *next_at),
            DeliveryOp::Tried { at, error, next_at } => {
                self.mark_tried(delivery, *at, error.as_deref(), *next_at)
            }
            DeliveryOp::Ack { at } => self.ack(delivery, *at),
            DeliveryOp::Dead {
                at,
                error,
                attempted,
            } => self.dead_letter(id, delivery, *at, error, *attempted),
            DeliveryOp::Resend => self.resend(id, delivery),
            DeliveryOp::Clear => self.clear_dead_letter(id, &delivery),
        }
    }

    /// `Sent`: one more attempt, due again at `next_at`. Refused once
    /// settled.
    fn mark_sent(
        &mut self,
        mut delivery: DeliveryRecord,
        at: Timestamp,
        next_at: Timestamp,
    ) -> Result<Result<(), StoreError>, StoreError> {
        if !in_queue(&delivery) {
            return Ok(Err(wrong_state(&delivery)));
        }
        delivery.attempts += 1;
        delivery.state = DeliveryState::Delivered;
        delivery.delivered_at = Some(at);
        delivery.next_at = Some(next_at);
        self.put_delivery(&delivery)?;
        Ok(Ok(()))
    }

    /// `Tried`: a webhook attempt, acked (no `error`) or due again at
    /// `next_at`. Refused once settled.
    fn mark_tried(
        &mut self,
        mut delivery: DeliveryRecord,
        at: Timestamp,
        error: Option<&str>,
        next_at: Timestamp,
    ) -> Result<Result<(), StoreError>, StoreError> {
        if !in_queue(&delivery) {
            return Ok(Err(wrong_state(&delivery)));
        }
        delivery.attempts += 1;
        delivery.delivered_at = Some(at);
        match error {
            None => {
                let queue_key = (delivery.subscription.as_str(), delivery.seq);
                backend!(self.queue.remove(queue_key))?;
                self.record_ack(delivery, at)?;
            }
            Some(error) => {
                delivery.state = DeliveryState::Delivered;
                delivery.last_error = Some(error.to_owned());
                delivery.next_at = Some(next_at);
                self.put_delivery(&delivery)?;
            }
        }
        Ok(Ok(()))
    }

    /// `Ack`: the delivery leaves its queue (or its subscription's dead
    /// letters) acked. One acked already stays as it is.
    fn ack(
        &mut self,
        delivery: DeliveryRecord,
        at: Timestamp,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let queue_key = (delivery.subscription.as_str(), delivery.seq);
        match delivery.state {
            // Late: nothing changes.
            DeliveryState::Acked | DeliveryState::Completed => return Ok(Ok(())),
            DeliveryState::Created | DeliveryState::Delivered => {
                backend!(self.queue.remove(queue_key))?;
            }
            DeliveryState::Error => {
                backend!(self.dead.remove(queue_key))?;
            }
        }
        self.record_ack(delivery, at)?;
        Ok(Ok(()))
    }

    /// Stores `delivery`, out of its queue or dead letters already, as
    /// acked at `at`, and settles its message.
    fn record_ack(
        &mut self,
        mut delivery: DeliveryRecord,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        delivery.state = DeliveryState::Acked;
        delivery.acked_at = Some(at);
        delivery.next_at = None;
        self.put_delivery(&delivery)?;
        self.settle(delivery.seq, Some(at))
    }

    /// `Dead`: its attempts ran out, and delivery `id` moves from its queue
    /// to its subscription's dead letters. Refused once settled.
    fn dead_letter(
        &mut self,
        id: &str,
        mut delivery: DeliveryRecord,
        at: Timestamp,
        error: &str,
        attempted: bool,
    ) -> Result<Result<(), StoreError>, StoreError> {
        if !in_queue(&delivery) {
            return Ok(Err(wrong_state(&delivery)));
        }
        if attempted {
            delivery.attempts += 1;
        }
        let queue_key = (delivery.subscription.as_str(), delivery.seq);
        backend!(self.queue.remove(queue_key))?;
        backend!(self.dead.insert(queue_key, id))?;
        delivery.state = DeliveryState::Error;
        delivery.last_error = Some(error.to_owned());
        delivery.next_at = None;
        delivery.delivered_at = delivery.delivered_at.or(Some(at));
        self.put_delivery(&delivery)?;
        Ok(Ok(()))
    }

    /// `Resend`: dead letter `id` goes back in its subscription's queue,
    /// at its place, with its attempts counted from zero. Refused unless
    /// it is a dead letter.
    fn resend(
        &mut self,
        id: &str,
        mut delivery: DeliveryRecord,
    ) -> Result<Result<(), StoreError>, StoreError> {
        if delivery.state != DeliveryState::Error {
            return Ok(Err(wrong_state(&delivery)));
        }
        let queue_key = (delivery.subscription.as_str(), delivery.seq);
        backend!(self.dead.remove(queue_key))?;
        backend!(self.queue.insert(queue_key, id))?;
        delivery.state = DeliveryState::Created;
        delivery.attempts = 0;
        delivery.next_at = None;
        self.put_delivery(&delivery)?;
        Ok(Ok(()))
    }

    /// `Clear`: dead letter `id` is dropped, and counts as settled.
    /// Refused unless it is a dead letter.
    fn clear_dead_letter(
        &mut self,
        id: &str,
        delivery: &DeliveryRecord,
    ) -> Result<Result<(), StoreError>, StoreError> {
        if delivery.state != DeliveryState::Error {
            return Ok(Err(wrong_state(delivery)));
        }
        let queue_key = (delivery.subscription.as_str(), delivery.seq);
        backend!(self.dead.remove(queue_key))?;
        backend!(self.deliveries.remove(id))?;
        self.settle(delivery.seq, None)?;
        Ok(Ok(()))
    }
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
