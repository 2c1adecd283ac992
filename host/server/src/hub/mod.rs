//! Delivering what runs emit: subscriptions, consumers that ack, webhooks.
//!
//! Messages and their deliveries are committed with the step that emitted
//! them (see [`weft_store::messages`]). The hub only moves deliveries
//! on, each move one durable write through the engine's group commit:
//!
//! - a [`Consumer`] (the SSE stream of `weft serve`, or an embedder's own
//!   loop) is sent its subscription's unsettled deliveries in message
//!   order, at most `window` unacked at once; a delivery not acked within
//!   the subscription's `ack_timeout` is sent again with the same id;
//! - one thread per webhook subscription POSTs the oldest unsettled
//!   delivery, signed, until a 2xx answer acks it, with exponential backoff
//!   and jitter between attempts (one at a time, so order holds);
//! - a delivery whose attempts run out is a dead letter, until re-sent or
//!   cleared.
//!
//! Delivery is at least once: a crash between a send and its ack sends it
//! again, with the same delivery id, for the consumer to deduplicate.

mod webhook;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use weft_core::Signal;
use weft_core::clock::{Clock, SystemClock, Timestamp};
use weft_core::names::check_name;
use weft_engine::{Committer, DeliveryWrite};
use weft_store::{
    DeliveryOp, DeliveryRecord, DeliveryState, Store, StoreError, SubscriptionRecord, Target, What,
};

pub use webhook::{SIGNATURE_HEADER, sign};

/// Why the hub could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    /// What was named does not exist (the store's
    /// [`StoreError::NotFound`] is this too).
    #[error("no {0}")]
    NotFound(What),
    /// The request does not apply to what is stored (a consumer for a
    /// webhook subscription). A write the store refuses is
    /// [`HubError::Store`], with the store's reason.
    #[error("{0}")]
    Conflict(String),
    /// The request is malformed; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// The store refused the write (a subscription key taken by another
    /// target, a delivery not in a state the change applies to), or
    /// failed.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for HubError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound(what) => Self::NotFound(what),
            other => Self::Store(other),
        }
    }
}

/// True when the store refused to move a delivery on because it moved on
/// meanwhile: acked, cleared, or gone with its subscription.
fn moved_on(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::DeliveryState { .. } | StoreError::NotFound(What::Delivery(_))
    )
}

/// A new subscription, as a client asks for it. Every field but
/// `channel` has a default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionSpec {
    /// The channel.
    pub channel: String,
    /// The name within the channel; default `default`.
    #[serde(default)]
    pub name: Option<String>,
    /// For a webhook: where to POST.
    #[serde(default)]
    pub webhook: Option<WebhookSpec>,
    /// Attempts before a dead letter; default 10.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// The first retry delay, such as `1s`; default 1 s.
    #[serde(default)]
    pub backoff: Option<String>,
    /// The longest retry delay; default 5 min.
    #[serde(default)]
    pub max_backoff: Option<String>,
    /// How long a consumer has to ack; default 30 s.
    #[serde(default)]
    pub ack_timeout: Option<String>,
}

/// Where a webhook subscription POSTs.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSpec {
    /// An `http://` or `https://` URL.
    pub url: String,
    /// The HMAC-SHA256 key; default: a random one, returned once.
    #[serde(default)]
    pub secret: Option<String>,
}

/// The most attempts a subscription may allow.
pub const MAX_ATTEMPTS: u32 = 1000;

impl SubscriptionSpec {
    /// The record this asks for, checked; each error names its field.
    pub fn record(self, now: Timestamp) -> Result<SubscriptionRecord, HubError> {
        check_name("channel", &self.channel).map_err(HubError::Invalid)?;
        let name = self.name.unwrap_or_else(|| "default".to_owned());
        check_name("name", &name).map_err(HubError::Invalid)?;
        let target = match self.webhook {
            None => Target::Sse,
            Some(webhook) => {
                if !(webhook.url.starts_with("http://") || webhook.url.starts_with("https://")) {
                    return Err(HubError::Invalid(format!(
                        "webhook.url: `{}` is not an http:// or https:// URL",
                        webhook.url
                    )));
                }
                let secret = webhook.secret.unwrap_or_else(|| {
                    let (a, b) = uuid::Uuid::new_v4().as_u64_pair();
                    format!("{a:016x}{b:016x}")
                });
                if secret.is_empty() {
                    return Err(HubError::Invalid(
                        "webhook.secret: must not be empty".to_owned(),
                    ));
                }
                Target::Webhook {
                    url: webhook.url,
                    secret,
                }
            }
        };
        let max_attempts = self.max_attempts.unwrap_or(10);
        if max_attempts == 0 || max_attempts > MAX_ATTEMPTS {
            return Err(HubError::Invalid(format!(
                "max_attempts: must be from 1 to {MAX_ATTEMPTS}, not {max_attempts}"
            )));
        }
        let millis = |field: &str, text: Option<String>, default: u64| match text {
            None => Ok(default),
            Some(text) => weft_core::clock::parse_duration(&text)
                .map(|d| weft_core::clock::millis(d).max(1))
                .map_err(|message| HubError::Invalid(format!("{field}: {message}"))),
        };
        Ok(SubscriptionRecord {
            key: format!("{}/{name}", self.channel),
            channel: self.channel,
            name,
            target,
            max_attempts,
            backoff_ms: millis("backoff", self.backoff, 1000)?,
            max_backoff_ms: millis("max_backoff", self.max_backoff, 300_000)?,
            ack_timeout_ms: millis("ack_timeout", self.ack_timeout, 30_000)?,
            created_at: now,
        })
    }
}

/// One delivery, as a subscriber receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// The delivery's id: the same on every attempt. Ack with it.
    pub delivery: String,
    /// The message's id.
    pub message: String,
    /// The message's position in the store (the SSE event id).
    pub seq: u64,
    /// The channel.
    pub channel: String,
    /// The run that emitted it.
    pub run: String,
    /// The path of the step that emitted it.
    pub step: String,
    /// This attempt, from 1.
    pub attempt: u32,
    /// The payload.
    pub payload: Value,
    /// When the emitting step's commit was applied, in microseconds since
    /// the epoch.
    pub committed_us: u64,
}

struct Shared {
    committer: Committer,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    signal: Arc<Signal>,
    /// The newest consumer of each SSE subscription: an older one stops.
    sessions: Mutex<HashMap<String, u64>>,
    /// The last consumer number given.
    next_session: std::sync::atomic::AtomicU64,
    /// The `seq`s of deliveries acked through this hub, by subscription,
    /// for its consumers.
    acked: Mutex<HashMap<String, Vec<u64>>>,
    /// Webhook subscriptions with a thread.
    webhooks: Mutex<HashMap<String, std::thread::JoinHandle<()>>>,
    stopping: AtomicBool,
}

/// Moves deliveries on. Cheap to clone.
#[derive(Clone)]
pub struct Hub {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").finish_non_exhaustive()
    }
}

impl Hub {
    /// A hub that writes through `committer`, with the system clock.
    pub fn new(committer: Committer) -> Self {
        Self::with_clock(committer, Arc::new(SystemClock))
    }

    /// A hub reading time from `clock`.
    pub fn with_clock(committer: Committer, clock: Arc<dyn Clock>) -> Self {
        let store = Arc::clone(committer.store());
        let signal = committer.messages();
        Self {
            shared: Arc::new(Shared {
                committer,
                store,
                clock,
                signal,
                sessions: Mutex::new(HashMap::new()),
                acked: Mutex::new(HashMap::new()),
                next_session: std::sync::atomic::AtomicU64::new(0),
                webhooks: Mutex::new(HashMap::new()),
                stopping: AtomicBool::new(false),
            }),
        }
    }

    /// Starts delivering to webhooks: a thread per webhook subscription,
    /// and one that looks for new subscriptions (made by another process
    /// on the same store) every two seconds.
    pub fn start(&self) -> std::io::Result<()> {
        self.start_webhooks();
        let hub = self.clone();
        std::thread::Builder::new()
            .name("weft-hub".to_owned())
            .spawn(move || {
                while !hub.shared.stopping.load(Ordering::SeqCst) {
                    for _ in 0..20 {
                        if hub.shared.stopping.load(Ordering::SeqCst) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    hub.start_webhooks();
                }
            })?;
        Ok(())
    }

    /// Stops every thread of the hub (within a second or so) and ends
    /// every consumer.
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.signal.bump();
    }

    fn start_webhooks(&self) {
        let Ok(subscriptions) = self.shared.store.subscriptions(None) else {
            return;
        };
        let mut running = self
            .shared
            .webhooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        running.retain(|_, thread| !thread.is_finished());
        for subscription in subscriptions {
            if matches!(subscription.target, Target::Webhook { .. })
                && !running.contains_key(&subscription.key)
                && !self.shared.stopping.load(Ordering::SeqCst)
            {
                let hub = self.clone();
                let key = subscription.key.clone();
                match std::thread::Builder::new()
                    .name(format!("weft-webhook-{key}"))
                    .spawn(move || webhook::deliver(&hub, &key))
                {
                    Ok(thread) => {
                        running.insert(subscription.key, thread);
                    }
                    Err(e) => {
                        tracing::error!(subscription = %subscription.key, "cannot start a webhook thread: {e}")
                    }
                }
            }
        }
    }

    /// Makes a subscription; one with the same key and target is kept as
    /// it is. A webhook starts receiving at once.
    pub fn subscribe(&self, spec: SubscriptionSpec) -> Result<SubscriptionRecord, HubError> {
        let record = spec.record(self.shared.clock.now())?;
        self.commit(DeliveryWrite::Subscribe(record.clone()))?;
        if matches!(record.target, Target::Webhook { .. }) {
            self.start_webhooks();
        }
        Ok(self
            .shared
            .store
            .subscription(&record.key)?
            .unwrap_or(record))
    }

    /// Removes subscription `key` (`<channel>/<name>`) and its deliveries.
    pub fn unsubscribe(&self, key: &str) -> Result<(), HubError> {
        self.commit(DeliveryWrite::Unsubscribe(key.to_owned()))?;
        self.shared.signal.bump();
        Ok(())
    }

    /// A consumer of `channel` as `name` (made an SSE subscription if there
    /// is none), replacing any other consumer of it. With `after`, the
    /// deliveries up to that `seq` count as received by this consumer: they
    /// are sent again only once their time to ack has passed.
    pub fn consumer(
        &self,
        channel: &str,
        name: &str,
        after: Option<u64>,
    ) -> Result<Consumer, HubError> {
        let subscription = match self
            .shared
            .store
            .subscription(&format!("{channel}/{name}"))?
        {
            Some(found) => found,
            None => self.subscribe(SubscriptionSpec {
                channel: channel.to_owned(),
                name: Some(name.to_owned()),
                ..SubscriptionSpec::default()
            })?,
        };
        if subscription.target != Target::Sse {
            return Err(HubError::Conflict(format!(
                "subscription `{}` is a webhook; it has no consumer",
                subscription.key
            )));
        }
        let session = {
            let mut sessions = self
                .shared
                .sessions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
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
            inflight: std::collections::BTreeMap::new(),
            rescan_at: Timestamp(0),
            window: 1000,
        })
    }

    /// Acks delivery `id`. A delivery acked already stays as it was (a
    /// late ack is not an error); a dead letter counts as acked.
    pub fn ack(&self, id: &str) -> Result<DeliveryRecord, HubError> {
        self.ack_all(&[id.to_owned()])
            .pop()
            .unwrap_or_else(|| Err(HubError::NotFound(What::Delivery(id.to_owned()))))
    }

    /// Acks every delivery of `ids` in one durable write (one sync); one
    /// answer per id, in order.
    pub fn ack_all(&self, ids: &[String]) -> Vec<Result<DeliveryRecord, HubError>> {
        let at = self.shared.clock.now();
        let writes = ids
            .iter()
            .map(|id| DeliveryWrite::Move(id.clone(), DeliveryOp::Ack { at }))
            .collect();
        let outcomes = self.shared.committer.commit_all(writes);
        let answers: Vec<Result<DeliveryRecord, HubError>> = ids
            .iter()
            .zip(outcomes)
            .map(|(id, outcome)| {
                outcome?;
                self.shared
                    .store
                    .delivery(id)?
                    .ok_or_else(|| HubError::NotFound(What::Delivery(id.clone())))
            })
            .collect();
        // A consumer here takes them out of what it has in flight; told
        // before it is woken.
        {
            let sessions = self
                .shared
                .sessions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let mut acked = self
                .shared
                .acked
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for delivery in answers.iter().flatten() {
                if sessions.contains_key(&delivery.subscription) {
                    acked
                        .entry(delivery.subscription.clone())
                        .or_default()
                        .push(delivery.seq);
                }
            }
        }
        self.shared.signal.bump();
        answers
    }

    /// Puts dead letter `id` back in its subscription's queue, with the
    /// same id and its attempts counted afresh.
    pub fn resend(&self, id: &str) -> Result<DeliveryRecord, HubError> {
        self.change(id, DeliveryOp::Resend)
    }

    /// Drops dead letter `id`.
    pub fn clear(&self, id: &str) -> Result<(), HubError> {
        self.commit(DeliveryWrite::Move(id.to_owned(), DeliveryOp::Clear))?;
        Ok(())
    }

    fn change(&self, id: &str, op: DeliveryOp) -> Result<DeliveryRecord, HubError> {
        self.commit(DeliveryWrite::Move(id.to_owned(), op))?;
        self.shared.signal.bump();
        self.shared
            .store
            .delivery(id)?
            .ok_or_else(|| HubError::NotFound(What::Delivery(id.to_owned())))
    }

    fn commit(&self, write: DeliveryWrite) -> Result<(), HubError> {
        Ok(self.shared.committer.commit(write)?)
    }

    /// What a subscriber receives for `delivery`, which is on its
    /// `attempt`.
    fn view(&self, delivery: &DeliveryRecord, attempt: u32) -> Result<Delivery, HubError> {
        let message = self
            .shared
            .store
            .message(delivery.seq)?
            .ok_or_else(|| HubError::NotFound(What::Message(delivery.seq)))?;
        Ok(Delivery {
            delivery: delivery.id.clone(),
            message: message.id,
            seq: message.seq,
            channel: message.channel,
            run: message.run,
            step: message.step,
            attempt,
            payload: message.payload,
            committed_us: message.committed_us,
        })
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
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
    inflight: std::collections::BTreeMap<u64, Timestamp>,
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
        let mut sessions = shared
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if sessions.get(&self.subscription.key) == Some(&self.session) {
            sessions.remove(&self.subscription.key);
            shared
                .acked
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&self.subscription.key);
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
        let until = std::time::Instant::now() + wait;
        loop {
            if !self.current() {
                return Ok(None);
            }
            let seen = shared.signal.current();
            let (batch, due) = self.poll()?;
            if !batch.is_empty() {
                return Ok(Some(batch));
            }
            let now = std::time::Instant::now();
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
            && shared
                .sessions
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&self.subscription.key)
                == Some(&self.session)
    }

    /// What is due now, and when to look again for deliveries sent here
    /// and not acked.
    fn poll(&mut self) -> Result<(Vec<Delivery>, Option<Timestamp>), HubError> {
        let shared = Arc::clone(&self.hub.shared);
        let now = shared.clock.now();
        // Acks made through this hub since the last look.
        if let Some(acked) = shared
            .acked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&self.subscription.key)
        {
            for seq in acked.drain(..) {
                self.inflight.remove(&seq);
            }
        }
        let mut send = Vec::new();
        // Deliveries sent here and not acked: sent again once due (the
        // store decides what is still unsettled: acks made elsewhere count).
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
                    _ => send.push(delivery),
                }
            }
        }
        // New deliveries, as far as the window allows.
        let room = self.window.saturating_sub(self.inflight.len() + send.len());
        if room > 0 {
            send.extend(
                shared
                    .store
                    .queued(&self.subscription.key, false, self.cursor, room)?,
            );
        }
        let ack_by = Timestamp(
            now.as_millis()
                .saturating_add(self.subscription.ack_timeout_ms),
        );
        let max = self.subscription.max_attempts;
        let writes = send
            .iter()
            .map(|delivery| {
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
            })
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
        // Look again when the first in flight comes due, and at least once
        // a second (acks made by another process).
        let soonest = self.inflight.values().min().copied();
        let second = Timestamp(now.as_millis().saturating_add(1000));
        if self.rescan_at <= now {
            self.rescan_at = soonest.map_or(second, |at| at.min(second));
        }
        Ok((out, Some(self.rescan_at)))
    }
}

/// Every delivery state, for listings.
pub fn delivery_state(text: &str) -> Result<DeliveryState, String> {
    match text {
        "created" => Ok(DeliveryState::Created),
        "delivered" => Ok(DeliveryState::Delivered),
        "acked" => Ok(DeliveryState::Acked),
        "completed" => Ok(DeliveryState::Completed),
        "error" => Ok(DeliveryState::Error),
        other => Err(format!(
            "`{other}` is not a delivery state (created, delivered, acked, completed, error)"
        )),
    }
}
