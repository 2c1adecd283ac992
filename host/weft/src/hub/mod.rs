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
//!
//! This module owns the [`Hub`] itself (its shared state, its start and
//! stop), its errors and what a subscriber receives; the rest is split by
//! concern: `subscription` (what a client asks for, and making it),
//! `consumer` (SSE consumers and what each is sent), `settle` (acks and
//! dead letters) and `webhook` (the webhook threads).

mod consumer;
mod settle;
mod subscription;
mod webhook;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use weft_core::Signal;
use weft_core::clock::Clock;
use weft_engine::{Committer, DeliveryWrite};
use weft_store::{DeliveryRecord, DeliveryState, Refused, Store, StoreError, What};

pub use consumer::Consumer;
pub use subscription::{MAX_ATTEMPTS, SubscriptionSpec, WebhookSpec};
pub use webhook::{SIGNATURE_HEADER, THREADS as WEBHOOK_THREADS, sign};

/// Why the hub could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    /// What was named does not exist (the store's
    /// [`Refused::NotFound`] is this too).
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
    /// A webhook's URL is refused by the tenant's egress policy.
    #[error("{0}")]
    Denied(String),
    /// The store refused the write (a subscription key taken by another
    /// target, a delivery not in a state the change applies to), or
    /// failed.
    #[error(transparent)]
    Store(StoreError),
    /// A webhook's signing key could not be sealed or opened.
    #[error("the webhook's signing key: {0}")]
    Secret(String),
}

impl From<StoreError> for HubError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Refused(Refused::NotFound(what)) => Self::NotFound(what),
            other => Self::Store(other),
        }
    }
}

/// True when the store refused to move a delivery on because it moved on
/// meanwhile: acked, cleared, or gone with its subscription.
fn moved_on(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Refused(Refused::DeliveryState { .. } | Refused::NotFound(What::Delivery(_)))
    )
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
    /// The channel, as its tenant names it.
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
    /// The webhook subscriptions delivered here, and their threads.
    webhooks: Mutex<webhook::Webhooks>,
    stopping: AtomicBool,
    /// Where each tenant's webhooks may go.
    egress: Arc<weft_engine::EgressPolicies>,
    /// Where webhook requests are timed.
    metrics: Option<Arc<weft_core::metrics::Metrics>>,
    /// Seals webhooks' signing keys in the store, and opens them to sign.
    vault: weft_engine::secrets::Vault,
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
    /// A hub that writes through `committer`, on its engine's clock, and
    /// sends webhooks where `egress` lets each tenant send requests.
    pub fn new(
        committer: Committer,
        egress: Arc<weft_engine::EgressPolicies>,
        vault: weft_engine::secrets::Vault,
    ) -> Self {
        let clock = Arc::clone(committer.clock());
        let store = Arc::clone(committer.store());
        let signal = committer.messages();
        let metrics = committer.metrics().cloned();
        Self {
            shared: Arc::new(Shared {
                committer,
                store,
                clock,
                signal,
                sessions: Mutex::new(HashMap::new()),
                acked: Mutex::new(HashMap::new()),
                next_session: std::sync::atomic::AtomicU64::new(0),
                webhooks: Mutex::new(webhook::Webhooks::default()),
                stopping: AtomicBool::new(false),
                egress,
                metrics,
                vault,
            }),
        }
    }

    /// Starts delivering to webhooks: a pool of threads for the webhook
    /// subscriptions, and one that looks for new subscriptions (made by another process
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

    /// Sets the metrics' delivery gauges from the store: deliveries not
    /// sent yet, sent and waiting for an ack, and dead letters. Reads every
    /// unsettled delivery of every subscription. Blocking.
    pub fn count_deliveries(&self) -> Result<(), StoreError> {
        let Some(metrics) = &self.shared.metrics else {
            return Ok(());
        };
        let store = &self.shared.store;
        let (mut pending, mut in_flight, mut dead) = (0i64, 0i64, 0i64);
        for subscription in store.subscriptions(None)? {
            for delivery in store.queued(&subscription.key, false, 0, usize::MAX)? {
                match delivery.state {
                    DeliveryState::Created => pending += 1,
                    DeliveryState::Delivered => in_flight += 1,
                    _ => {}
                }
            }
            dead += i64::try_from(store.queued(&subscription.key, true, 0, usize::MAX)?.len())
                .unwrap_or(i64::MAX);
        }
        for (state, count) in [
            ("pending", pending),
            ("in_flight", in_flight),
            ("dead", dead),
        ] {
            metrics
                .deliveries
                .get_or_create(&weft_core::metrics::DeliveryLabels { state })
                .set(count);
        }
        Ok(())
    }

    /// Stops every thread of the hub (within a second or so) and ends
    /// every consumer.
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.signal.bump();
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
            // The subscriber is of the channel's tenant, which knows the
            // channel by its bare name.
            channel: weft_core::tenant::bare(&message.channel).to_owned(),
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
