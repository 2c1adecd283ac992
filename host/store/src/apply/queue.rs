//! The message writes: messages, subscriptions, deliveries, each
//! subscription's queue and dead letters.

use super::Apply;
use crate::messages::{
    DeliveryOp, DeliveryRecord, DeliveryState, MessageRecord, SubscriptionRecord, Target,
};
use crate::rows::{Key, Table, decode};
use crate::write::encode;
use crate::{Emitted, Refused, StoreError, What};
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
fn wrong_state(delivery: &DeliveryRecord) -> Refused {
    Refused::DeliveryState {
        id: delivery.id.clone(),
        state: delivery.state,
    }
}

impl Apply<'_> {
    /// Commits what a step of run `run` emitted: each message gets the next
    /// `seq`, and each subscription of its channel a delivery, stamped with
    /// the commit's time.
    pub(super) fn emit(&mut self, run: &str, emitted: &Emitted) -> Result<(), StoreError> {
        let mut seq = self.rows.last_number(Table::Messages)?.unwrap_or(0);
        let now = emitted.at;
        let committed_us = now.as_millis().saturating_mul(1000);
        let path = emitted.path.as_str();
        for emission in &emitted.messages {
            seq += 1;
            let subscriptions = self.subscribers(&emission.channel)?;
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
                self.rows.put(
                    Table::Queue,
                    Key::StrU64(&delivery.subscription, seq),
                    delivery.id.as_bytes(),
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
            self.rows
                .put(Table::Messages, Key::U64(seq), &encode(&message))?;
            self.rows
                .put(Table::RunMessages, Key::StrU64(run, seq), &[])?;
        }
        Ok(())
    }

    /// Commits `notice` after a write of run `run` that was not refused
    /// (`outcome`), which it answers.
    pub(super) fn notify_if(
        &mut self,
        outcome: Result<(), Refused>,
        run: &str,
        notice: Option<&Emitted>,
    ) -> Result<Result<(), Refused>, StoreError> {
        if outcome.is_ok() {
            self.notify(run, notice)?;
        }
        Ok(outcome)
    }

    /// Commits `notice`, the end of run `run`, if its channel has a
    /// subscription: a notice nobody asked for is not kept.
    fn notify(&mut self, run: &str, notice: Option<&Emitted>) -> Result<(), StoreError> {
        let Some(notice) = notice else {
            return Ok(());
        };
        for message in &notice.messages {
            if self.subscribers(&message.channel)?.is_empty() {
                continue;
            }
            // Stored by the host, whatever the quota, and counted as the
            // sweeper gives it back.
            self.add_use(
                weft_core::tenant::of(&message.channel),
                crate::write::message_bytes(&message.id, &message.channel, &message.payload),
            )?;
            return self.emit(run, notice);
        }
        Ok(())
    }

    /// The keys of `channel`'s subscriptions, read once a transaction
    /// (forgotten when a subscription is made or removed in it).
    fn subscribers(&mut self, channel: &str) -> Result<Vec<String>, StoreError> {
        if let Some(keys) = self.subscribers.get(channel) {
            return Ok(keys.clone());
        }
        let (from, to) = channel_range(channel);
        let keys = self.rows.keys_between(Table::Subscriptions, &from, &to)?;
        self.subscribers.insert(channel.to_owned(), keys.clone());
        Ok(keys)
    }

    fn put_delivery(&mut self, delivery: &DeliveryRecord) -> Result<(), StoreError> {
        self.rows
            .put(Table::Deliveries, Key::Str(&delivery.id), &encode(delivery))?;
        Ok(())
    }

    fn get_delivery(&mut self, id: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        self.rows
            .get(Table::Deliveries, Key::Str(id))?
            .map(|bytes| decode(id, &bytes))
            .transpose()
    }

    /// Makes a subscription; one that exists with the same target is left
    /// as it is, one with another target is refused.
    pub(super) fn subscribe(
        &mut self,
        row: &SubscriptionRecord,
    ) -> Result<Result<(), Refused>, StoreError> {
        let stored = self
            .rows
            .get(Table::Subscriptions, Key::Str(&row.key))?
            .map(|bytes| decode::<SubscriptionRecord>(&row.key, &bytes))
            .transpose()?;
        match stored {
            Some(stored) if stored.target == row.target => Ok(Ok(())),
            Some(_) => Ok(Err(Refused::Exists(What::Subscription(row.key.clone())))),
            None => {
                self.rows
                    .put(Table::Subscriptions, Key::Str(&row.key), &encode(row))?;
                self.subscribers.clear();
                Ok(Ok(()))
            }
        }
    }

    /// Changes subscription `key`'s target from `from` to `to` (see
    /// [`Write::Retarget`](crate::Write::Retarget)).
    pub(super) fn retarget(
        &mut self,
        key: &str,
        from: &Target,
        to: &Target,
    ) -> Result<Result<(), Refused>, StoreError> {
        let Some(bytes) = self.rows.get(Table::Subscriptions, Key::Str(key))? else {
            return Ok(Err(Refused::NotFound(What::Subscription(key.to_owned()))));
        };
        let mut stored: SubscriptionRecord = decode(key, &bytes)?;
        if stored.target != *from {
            return Ok(Err(Refused::Changed(What::Subscription(key.to_owned()))));
        }
        stored.target = to.clone();
        self.rows
            .put(Table::Subscriptions, Key::Str(key), &encode(&stored))?;
        self.subscribers.clear();
        Ok(Ok(()))
    }

    /// Removes a subscription: its unsettled deliveries and dead letters
    /// count as settled.
    pub(super) fn unsubscribe(&mut self, key: &str) -> Result<Result<(), Refused>, StoreError> {
        if !self.rows.delete(Table::Subscriptions, Key::Str(key))? {
            return Ok(Err(Refused::NotFound(What::Subscription(key.to_owned()))));
        }
        self.subscribers.clear();
        self.rows
            .delete(Table::Leases, Key::Str(&crate::queue_lease(key)))?;
        let mut ids = Vec::new();
        for table in [Table::Queue, Table::Dead] {
            for (seq, id) in self.rows.under(table, key)? {
                ids.push((seq.number(), String::from_utf8_lossy(&id).into_owned()));
            }
        }
        for (seq, id) in ids {
            self.rows.delete(Table::Queue, Key::StrU64(key, seq))?;
            self.rows.delete(Table::Dead, Key::StrU64(key, seq))?;
            self.rows.delete(Table::Deliveries, Key::Str(&id))?;
            self.settle(seq, None)?;
        }
        Ok(Ok(()))
    }

    /// Deletes message `seq` and its deliveries, every one settled (see
    /// [`crate::Write::DeleteMessage`]). The newest message stays: the
    /// next message's seq follows it.
    pub(super) fn delete_message(&mut self, seq: u64) -> Result<Result<(), Refused>, StoreError> {
        let Some(message) = self
            .rows
            .get(Table::Messages, Key::U64(seq))?
            .map(|bytes| decode::<MessageRecord>(seq, &bytes))
            .transpose()?
        else {
            return Ok(Err(Refused::NotFound(What::Message(seq))));
        };
        let needed = |why: String| {
            Ok(Err(Refused::Needed {
                what: What::Message(seq),
                why,
            }))
        };
        if message.pending > 0 {
            return needed(format!("{} of its deliveries not settled", message.pending));
        }
        if self.rows.last_number(Table::Messages)? == Some(seq) {
            return needed("it is the newest message, which the next seq follows".to_owned());
        }
        for id in &message.deliveries {
            self.rows.delete(Table::Deliveries, Key::Str(id))?;
        }
        self.rows.delete(Table::Messages, Key::U64(seq))?;
        self.rows
            .delete(Table::RunMessages, Key::StrU64(&message.run, seq))?;
        let charged = crate::write::message_bytes(&message.id, &message.channel, &message.payload);
        self.give_back(weft_core::tenant::of(&message.channel), charged)?;
        Ok(Ok(()))
    }

    /// One fewer unsettled delivery of message `seq`; when it was the
    /// last, the message and every delivery of it that was acked are
    /// completed. `at`: when, for an ack.
    fn settle(&mut self, seq: u64, at: Option<Timestamp>) -> Result<(), StoreError> {
        let Some(mut message) = self
            .rows
            .get(Table::Messages, Key::U64(seq))?
            .map(|bytes| decode::<MessageRecord>(seq, &bytes))
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
        self.rows
            .put(Table::Messages, Key::U64(seq), &encode(&message))?;
        Ok(())
    }

    /// Applies `op` to delivery `id`: refused if there is none, or if `op`
    /// does not apply to its state.
    pub(super) fn delivery(
        &mut self,
        id: &str,
        op: &DeliveryOp,
    ) -> Result<Result<(), Refused>, StoreError> {
        let Some(delivery) = self.get_delivery(id)? else {
            return Ok(Err(Refused::NotFound(What::Delivery(id.to_owned()))));
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
    ) -> Result<Result<(), Refused>, StoreError> {
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
    ) -> Result<Result<(), Refused>, StoreError> {
        if !in_queue(&delivery) {
            return Ok(Err(wrong_state(&delivery)));
        }
        delivery.attempts += 1;
        delivery.delivered_at = Some(at);
        match error {
            None => {
                let queue_key = Key::StrU64(&delivery.subscription, delivery.seq);
                self.rows.delete(Table::Queue, queue_key)?;
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
    ) -> Result<Result<(), Refused>, StoreError> {
        let queue_key = Key::StrU64(&delivery.subscription, delivery.seq);
        match delivery.state {
            // Late: nothing changes.
            DeliveryState::Acked | DeliveryState::Completed => return Ok(Ok(())),
            DeliveryState::Created | DeliveryState::Delivered => {
                self.rows.delete(Table::Queue, queue_key)?;
            }
            DeliveryState::Error => {
                self.rows.delete(Table::Dead, queue_key)?;
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
    ) -> Result<Result<(), Refused>, StoreError> {
        if !in_queue(&delivery) {
            return Ok(Err(wrong_state(&delivery)));
        }
        if attempted {
            delivery.attempts += 1;
        }
        let queue_key = Key::StrU64(&delivery.subscription, delivery.seq);
        self.rows.delete(Table::Queue, queue_key)?;
        self.rows.put(Table::Dead, queue_key, id.as_bytes())?;
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
    ) -> Result<Result<(), Refused>, StoreError> {
        if delivery.state != DeliveryState::Error {
            return Ok(Err(wrong_state(&delivery)));
        }
        let queue_key = Key::StrU64(&delivery.subscription, delivery.seq);
        self.rows.delete(Table::Dead, queue_key)?;
        self.rows.put(Table::Queue, queue_key, id.as_bytes())?;
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
    ) -> Result<Result<(), Refused>, StoreError> {
        if delivery.state != DeliveryState::Error {
            return Ok(Err(wrong_state(delivery)));
        }
        let queue_key = Key::StrU64(&delivery.subscription, delivery.seq);
        self.rows.delete(Table::Dead, queue_key)?;
        self.rows.delete(Table::Deliveries, Key::Str(id))?;
        self.settle(delivery.seq, None)?;
        Ok(Ok(()))
    }
}
