//! Consumers of SSE subscriptions, and what each is sent.
//!
//! A [`Consumer`] is sent its subscription's unsettled deliveries in
//! message order, at most `window` sent and not acked at once; each is
//! recorded as sent (one more attempt) before it is returned, and one not
//! acked within the subscription's `ack_timeout` is sent again with the
//! same id, until its attempts run out and it is a dead letter.
//!
//! One consumer of a subscription is current: the newest. Consumer numbers
//! are never reused, so a replaced consumer never counts as current again;
//! it ends at its next [`Consumer::next`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Delivery, Hub, HubError, Shared, SubscriptionSpec, moved_on};
use weft_core::clock::Timestamp;
use weft_core::lock;
use weft_engine::DeliveryWrite;
use weft_store::{DeliveryOp, DeliveryRecord, SubscriptionRecord, Target};

impl Hub {
    /// A consumer of `tenant`'s `channel` as `name` (made an SSE subscription if there
    /// is none), replacing any other consumer of it. With `after`, the
    /// deliveries up to that `seq` count as received by this consumer: they
    /// are sent again only once their time to ack has passed.
    pub fn consumer(
        &self,
        tenant: &str,
        channel: &str,
        name: &str,
        after: Option<u64>,
    ) -> Result<Consumer, HubError> {
        let stored = weft_core::tenant::qualify(tenant, channel);
        let subscription = match self
            .shared
            .store
            .subscription(&format!("{stored}/{name}"))?
        {
            Some(found) => found,
            None => self.subscribe(
                tenant,
                SubscriptionSpec {
                    channel: channel.to_owned(),
                    name: Some(name.to_owned()),
                    ..SubscriptionSpec::default()
                },
            )?,
        };
        if subscription.target != Target::Sse {
            return Err(HubError::Conflict(format!(
                "subscription `{}` is a webhook; it has no consumer",
                weft_core::tenant::bare(&subscription.key)
            )));
        }
        let session = {
            let mut sessions = lock(&self.shared.sessions);
            // Numbers are never reused, so a replaced consumer never
            // counts as current again.
            let session = self.shared.next_session.fetch_add(1, Ordering::SeqCst) + 1;
            sessions.insert(subscription.key.clone(), session);
            session
        };
        self.shared.signal.bump();
        Ok(Consumer {
            hub: self.clone(),
            subscription,
            session,
            cursor: after.unwrap_or(0),
            inflight: BTreeMap::new(),
            rescan_at: Timestamp(0),
            window: 1000,
        })
    }
}

/// A consumer of one SSE subscription. [`Consumer::next`] gives what to
/// send now; the consumer acks each delivery with [`Hub::ack`].
pub struct Consumer {
    hub: Hub,
    subscription: SubscriptionRecord,
    session: u64,
    /// The newest `seq` sent to this consumer.
    cursor: u64,
    /// Deliveries sent to this consumer and not acked, by `seq`, with the
    /// time each is due again.
    inflight: BTreeMap<u64, Timestamp>,
    /// When to read back what is in flight.
    rescan_at: Timestamp,
    /// The most deliveries sent and not acked at once.
    window: usize,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("subscription", &self.subscription.key)
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}

impl Drop for Consumer {
    /// The last consumer of a subscription to leave takes its place and its
    /// pending acks with it.
    fn drop(&mut self) {
        let shared = &self.hub.shared;
        let mut sessions = lock(&shared.sessions);
        if sessions.get(&self.subscription.key) == Some(&self.session) {
            sessions.remove(&self.subscription.key);
            lock(&shared.acked).remove(&self.subscription.key);
        }
    }
}

impl Consumer {
    /// The subscription.
    pub fn subscription(&self) -> &SubscriptionRecord {
        &self.subscription
    }

    /// Sets how many deliveries may be sent and not acked at once (default
    /// 1,000; at least 1).
    pub fn set_window(&mut self, window: usize) {
        self.window = window.max(1);
    }

    /// The deliveries to send now, in order, each recorded as sent (one
    /// more attempt) before it is returned; waits up to `wait` for there
    /// to be some. `Ok(None)`: this consumer was replaced by a newer one
    /// of the same subscription, or the hub stopped.
    pub fn next(&mut self, wait: Duration) -> Result<Option<Vec<Delivery>>, HubError> {
        let shared = Arc::clone(&self.hub.shared);
        let until = Instant::now() + wait;
        loop {
            if !self.current() {
                return Ok(None);
            }
            let seen = shared.signal.current();
            let (batch, due) = self.poll()?;
            if !batch.is_empty() {
                return Ok(Some(batch));
            }
            let now = Instant::now();
            if now >= until {
                return Ok(Some(Vec::new()));
            }
            let mut left = until - now;
            if let Some(due) = due {
                let millis = due.millis_since(shared.clock.now()).max(1);
                left = left.min(shared.clock.real_wait(millis));
            }
            shared.signal.wait_past(seen, left);
        }
    }

    fn current(&self) -> bool {
        let shared = &self.hub.shared;
        !shared.stopping.load(Ordering::SeqCst)
            && lock(&shared.sessions).get(&self.subscription.key) == Some(&self.session)
    }

    /// What is due now, and when to look again for deliveries sent here
    /// and not acked.
    fn poll(&mut self) -> Result<(Vec<Delivery>, Option<Timestamp>), HubError> {
        let shared = Arc::clone(&self.hub.shared);
        let now = shared.clock.now();
        self.forget_acked(&shared);
        let mut send = self.due_again(&shared, now)?;
        let fresh = self.fresh(&shared, send.len())?;
        send.extend(fresh);
        let out = self.mark_sent(&shared, &send, now)?;
        Ok((out, Some(self.plan_rescan(now))))
    }

    /// Takes the acks made through this hub since the last look out of
    /// what is in flight.
    fn forget_acked(&mut self, shared: &Shared) {
        if let Some(acked) = lock(&shared.acked).get_mut(&self.subscription.key) {
            for seq in acked.drain(..) {
                self.inflight.remove(&seq);
            }
        }
    }

    /// Deliveries sent here and not acked that are due again, read back
    /// once it is time to (the store decides what is still unsettled:
    /// acks made elsewhere count); those not due yet stay in flight.
    fn due_again(
        &mut self,
        shared: &Shared,
        now: Timestamp,
    ) -> Result<Vec<DeliveryRecord>, HubError> {
        let mut due = Vec::new();
        if self.rescan_at <= now {
            let queued = shared
                .store
                .queued(&self.subscription.key, false, 0, self.window)?;
            self.inflight.clear();
            for delivery in queued.into_iter().filter(|d| d.seq <= self.cursor) {
                match delivery.next_at {
                    Some(at) if at > now => {
                        self.inflight.insert(delivery.seq, at);
                    }
                    _ => due.push(delivery),
                }
            }
        }
        Ok(due)
    }

    /// New deliveries, as far as the window allows beside what is in
    /// flight and the `due` ones about to be sent again.
    fn fresh(&self, shared: &Shared, due: usize) -> Result<Vec<DeliveryRecord>, HubError> {
        let room = self.window.saturating_sub(self.inflight.len() + due);
        if room == 0 {
            return Ok(Vec::new());
        }
        Ok(shared
            .store
            .queued(&self.subscription.key, false, self.cursor, room)?)
    }

    /// Records each of `send` as sent, or as a dead letter once its
    /// attempts ran out, in one durable write; answers what to send, each
    /// in flight from now until its time to ack has passed.
    fn mark_sent(
        &mut self,
        shared: &Shared,
        send: &[DeliveryRecord],
        now: Timestamp,
    ) -> Result<Vec<Delivery>, HubError> {
        let ack_by = now + Duration::from_millis(self.subscription.ack_timeout_ms);
        let max = self.subscription.max_attempts;
        let writes = send
            .iter()
            .map(|delivery| sent_write(delivery, now, ack_by, max))
            .collect();
        let outcomes = shared.committer.commit_all(writes);
        let mut out = Vec::with_capacity(send.len());
        for (delivery, outcome) in send.iter().zip(outcomes) {
            self.cursor = self.cursor.max(delivery.seq);
            match outcome {
                Ok(()) if delivery.attempts < max => {
                    self.inflight.insert(delivery.seq, ack_by);
                    out.push(self.hub.view(delivery, delivery.attempts + 1)?);
                }
                Ok(()) => {
                    tracing::warn!(delivery = %delivery.id, subscription = %self.subscription.key, "a delivery's attempts ran out: dead letter");
                }
                // Acked meanwhile.
                Err(e) if moved_on(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// When to look again: when the first in flight comes due, and at
    /// least once a second (acks made by another process). Moved on only
    /// once the last look is due.
    fn plan_rescan(&mut self, now: Timestamp) -> Timestamp {
        let soonest = self.inflight.values().min().copied();
        let second = now + Duration::from_secs(1);
        if self.rescan_at <= now {
            self.rescan_at = soonest.map_or(second, |at| at.min(second));
        }
        self.rescan_at
    }
}

/// The write that sends `delivery` once more, due again at `ack_by`, or,
/// once it has had `max` attempts, makes it a dead letter.
fn sent_write(
    delivery: &DeliveryRecord,
    now: Timestamp,
    ack_by: Timestamp,
    max: u32,
) -> DeliveryWrite {
    let op = if delivery.attempts >= max {
        DeliveryOp::Dead {
            at: now,
            error: format!("not acked after {} attempts", delivery.attempts),
            attempted: false,
        }
    } else {
        DeliveryOp::Sent {
            at: now,
            next_at: ack_by,
        }
    };
    DeliveryWrite::Move(delivery.id.clone(), op)
}
