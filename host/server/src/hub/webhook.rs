//! Webhook delivery: one thread per subscription POSTs its oldest
//! unsettled delivery until a 2xx answer acks it.
//!
//! The body is the [`Delivery`](super::Delivery) as JSON. Headers:
//! `weft-delivery` (the delivery id, the same on every attempt),
//! `weft-message`, `weft-attempt`, and `weft-signature: sha256=<hex>`, the
//! HMAC-SHA256 of the body with the subscription's secret.

use std::sync::atomic::Ordering;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::Hub;
use weft_core::clock::Timestamp;
use weft_engine::DeliveryWrite;
use weft_store::{DeliveryOp, Target};

/// The header that carries the body's signature.
pub const SIGNATURE_HEADER: &str = "weft-signature";

/// How long one POST may take.
const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// `sha256=` and the hex HMAC-SHA256 of `body` keyed with `secret`: the
/// value of the `weft-signature` header.
pub fn sign(secret: &str, body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Delivers subscription `key`'s queue, in order, until the hub stops or
/// the subscription goes.
pub(super) fn deliver(hub: &Hub, key: &str) {
    let shared = &hub.shared;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(POST_TIMEOUT))
        .build()
        .into();
    while !shared.stopping.load(Ordering::SeqCst) {
        let seen = shared.signal.current();
        let subscription = match shared.store.subscription(key) {
            Ok(Some(subscription)) => subscription,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(subscription = %key, "cannot read a subscription: {e}");
                shared.signal.wait_past(seen, Duration::from_secs(1));
                continue;
            }
        };
        let Target::Webhook { url, secret } = &subscription.target else {
            return;
        };
        let head = match shared.store.queued(key, false, 0, 1) {
            Ok(mut head) => head.pop(),
            Err(e) => {
                tracing::error!(subscription = %key, "cannot read a queue: {e}");
                None
            }
        };
        let Some(delivery) = head else {
            shared.signal.wait_past(seen, Duration::from_secs(1));
            continue;
        };
        let now = shared.clock.now();
        if let Some(at) = delivery.next_at
            && at > now
        {
            let wait = shared
                .clock
                .real_wait(at.millis_since(now))
                .min(Duration::from_secs(1));
            shared.signal.wait_past(seen, wait);
            continue;
        }
        let attempt = delivery.attempts + 1;
        let view = match hub.view(&delivery, attempt) {
            Ok(view) => view,
            Err(e) => {
                tracing::error!(delivery = %delivery.id, "cannot read a delivery's message: {e}");
                shared.signal.wait_past(seen, Duration::from_secs(1));
                continue;
            }
        };
        let body = serde_json::to_vec(&view).unwrap_or_default();
        let error = match agent
            .post(url)
            .header("content-type", "application/json")
            .header("weft-delivery", &delivery.id)
            .header("weft-message", &view.message)
            .header("weft-attempt", attempt.to_string())
            .header(SIGNATURE_HEADER, sign(secret, &body))
            .send(&body[..])
        {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(format!("{url} answered {}", response.status())),
            Err(e) => Some(format!("cannot POST to {url}: {e}")),
        };
        let now = shared.clock.now();
        let op = match &error {
            Some(error) if attempt >= subscription.max_attempts => {
                tracing::warn!(delivery = %delivery.id, subscription = %key, "webhook attempts ran out: dead letter ({error})");
                DeliveryOp::Dead {
                    at: now,
                    error: error.clone(),
                    attempted: true,
                }
            }
            _ => DeliveryOp::Tried {
                at: now,
                error: error.clone(),
                next_at: Timestamp(
                    now.as_millis()
                        .saturating_add(subscription.retry_delay_ms(attempt)),
                ),
            },
        };
        if let Some(error) = &error {
            tracing::debug!(delivery = %delivery.id, attempt, "webhook attempt failed: {error}");
        }
        match shared
            .committer
            .commit(DeliveryWrite::Move(delivery.id.clone(), op))
        {
            Ok(()) => {}
            // Acked or cleared meanwhile: the next head decides.
            Err(e) if super::moved_on(&e) => {}
            Err(e) => {
                tracing::error!(delivery = %delivery.id, "cannot record a webhook attempt: {e}");
                shared.signal.wait_past(seen, Duration::from_secs(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_match_a_known_hmac() {
        // RFC 4231, test case 2.
        assert_eq!(
            sign("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
