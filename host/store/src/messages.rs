//! Messages that runs emit, the subscriptions that receive them, and one
//! delivery per (message, subscription), as the store keeps them.
//!
//! A message is committed with the step that emitted it, and in the same
//! transaction one delivery row is made for every subscription of its
//! channel. A delivery moves `created → delivered → acked → completed`
//! (`completed` once every delivery of its message is acked), or to
//! `error` (a dead letter) when its attempts run out. Its id never changes,
//! so a consumer that sees it twice can tell.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use weft_core::clock::Timestamp;

pub use weft_core::names::{MAX_NAME, check_name};

/// A committed message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageRecord {
    /// Its position among every message of the store, from 1, in commit
    /// order: a run's messages are in the order it emitted them.
    pub seq: u64,
    /// Its id.
    pub id: String,
    /// The channel.
    pub channel: String,
    /// The run that emitted it.
    pub run: String,
    /// The path of the step that emitted it.
    pub step: String,
    /// The payload.
    pub payload: Value,
    /// When its step's commit was applied, in microseconds since the epoch
    /// (system clock).
    pub committed_us: u64,
    /// Its deliveries, one per subscription of the channel at the time.
    #[serde(default)]
    pub deliveries: Vec<String>,
    /// How many of them are not settled yet (acked, or cleared from the
    /// dead letters).
    #[serde(default)]
    pub pending: u32,
}

/// Where a subscription's deliveries go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// A consumer that reads the channel's Server-Sent Events stream (or the
    /// in-process API) and acks each delivery.
    Sse,
    /// An HTTP endpoint that weft POSTs each message to; a 2xx answer acks.
    Webhook {
        /// The URL.
        url: String,
        /// The HMAC-SHA256 key the body is signed with, as given: empty
        /// once it is `sealed`. (A host without a secrets key keeps it
        /// here; so did every host before keys were sealed.)
        #[serde(default, skip_serializing_if = "String::is_empty")]
        secret: String,
        /// The key sealed by the engine's secrets key (see
        /// `Vault::seal_webhook`): the store never holds it in the clear.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sealed: Option<Vec<u8>>,
    },
}

/// A subscription to a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionRecord {
    /// `<channel>/<name>`.
    pub key: String,
    /// The channel.
    pub channel: String,
    /// Its name within the channel.
    pub name: String,
    /// Where deliveries go.
    pub target: Target,
    /// Attempts before a delivery becomes a dead letter.
    pub max_attempts: u32,
    /// The first retry's delay, in milliseconds; doubled on each retry.
    pub backoff_ms: u64,
    /// The longest retry delay, in milliseconds.
    pub max_backoff_ms: u64,
    /// How long a consumer has to ack a delivery it was sent before it is
    /// sent again, in milliseconds.
    pub ack_timeout_ms: u64,
    /// When it was made.
    pub created_at: Timestamp,
}

impl SubscriptionRecord {
    /// The delay before attempt `attempt + 1`, after `attempt` failed:
    /// exponential from `backoff_ms`, capped at `max_backoff_ms`, with up
    /// to a fifth taken off at random (so retries of many deliveries do not
    /// come in step).
    pub fn retry_delay_ms(&self, attempt: u32) -> u64 {
        let exp = attempt.saturating_sub(1).min(32);
        let base = self
            .backoff_ms
            .saturating_mul(1u64 << exp)
            .min(self.max_backoff_ms)
            .max(1);
        let jitter = weft_core::ids::random_u64() % (base / 5 + 1);
        base - jitter
    }
}

/// Where a delivery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Made with its message; not sent yet.
    Created,
    /// Sent at least once; not acked yet.
    Delivered,
    /// Acked by its subscriber.
    Acked,
    /// Acked, and so is every other delivery of its message.
    Completed,
    /// Its attempts ran out: a dead letter, until re-sent or cleared.
    Error,
}

impl DeliveryState {
    /// True for a delivery that is not waiting for its subscriber.
    pub fn is_settled(self) -> bool {
        matches!(self, Self::Acked | Self::Completed)
    }
}

impl std::fmt::Display for DeliveryState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Created => "created",
            Self::Delivered => "delivered",
            Self::Acked => "acked",
            Self::Completed => "completed",
            Self::Error => "error",
        })
    }
}

/// One message on its way to one subscription.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryRecord {
    /// Its id (a UUIDv7): the same on every attempt.
    pub id: String,
    /// The subscription's key.
    pub subscription: String,
    /// The message's `seq`.
    pub seq: u64,
    /// The message's id.
    pub message: String,
    /// The run that emitted the message.
    pub run: String,
    /// Where it is.
    pub state: DeliveryState,
    /// Attempts so far.
    pub attempts: u32,
    /// When it is due again: a webhook's next try, or the end of a
    /// consumer's time to ack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_at: Option<Timestamp>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it was last sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<Timestamp>,
    /// When it was acked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acked_at: Option<Timestamp>,
}

/// A change to one delivery.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryOp {
    /// About to be sent to a consumer: one more attempt, due again (to be
    /// sent again if not acked) at `next_at`. Refused once settled.
    Sent {
        /// Now.
        at: Timestamp,
        /// When it is sent again unless acked.
        next_at: Timestamp,
    },
    /// A webhook attempt: acked (`error: None`), or failed and due again at
    /// `next_at`. Refused once settled.
    Tried {
        /// Now.
        at: Timestamp,
        /// Why it failed.
        error: Option<String>,
        /// When to try again.
        next_at: Timestamp,
    },
    /// The subscriber acked it. A delivery acked already stays as it is.
    Ack {
        /// Now.
        at: Timestamp,
    },
    /// Its attempts ran out: a dead letter.
    Dead {
        /// Now.
        at: Timestamp,
        /// The last attempt's error.
        error: String,
        /// Whether this follows an attempt not counted yet (a webhook's
        /// last POST).
        attempted: bool,
    },
    /// A dead letter goes back in its subscription's queue, at its place,
    /// with its attempts counted from zero and the same id.
    Resend,
    /// A dead letter is dropped: it counts as settled.
    Clear,
}
