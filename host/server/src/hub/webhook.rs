//! Webhook delivery: one thread per subscription POSTs its oldest
//! unsettled delivery until a 2xx answer acks it. With several hosts on
//! one store, each has the thread, and the one that holds the queue's
//! lease delivers (`Committer::hold`); the lease moves when its host is
//! gone.
//!
//! The body is the [`Delivery`](super::Delivery) as JSON. Headers:
//! `weft-delivery` (the delivery id, the same on every attempt),
//! `weft-message`, `weft-attempt`, and `weft-signature: sha256=<hex>`, the
//! HMAC-SHA256 of the body with the subscription's secret.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use ureq::http;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

use super::{Delivery, Hub, HubError, Shared, moved_on};
use weft_core::clock::Timestamp;
use weft_core::egress::Egress;
use weft_core::lock;
use weft_engine::DeliveryWrite;
use weft_engine::EgressPolicies;
use weft_store::{DeliveryOp, DeliveryRecord, SubscriptionRecord, Target};

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

impl Hub {
    /// Starts a thread for each webhook subscription that has none (or
    /// whose thread ended), unless the hub is stopping.
    pub(super) fn start_webhooks(&self) {
        let Ok(subscriptions) = self.shared.store.subscriptions(None) else {
            return;
        };
        let mut running = lock(&self.shared.webhooks);
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
                    .spawn(move || deliver(&hub, &key))
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
}

/// What a webhook thread does after one turn.
enum Next {
    /// End the thread: the subscription went, or is no webhook.
    Stop,
    /// Wait this long, or until the hub's signal is bumped.
    Wait(Duration),
    /// Take the next turn at once.
    Again,
}

/// Delivers subscription `key`'s queue, in order, until the hub stops or
/// the subscription goes.
fn deliver(hub: &Hub, key: &str) {
    let shared = &hub.shared;
    let agent = agent(&shared.egress, weft_core::tenant::of(key));
    while !shared.stopping.load(Ordering::SeqCst) {
        let seen = shared.signal.current();
        match turn(hub, &agent, key) {
            Next::Stop => return,
            Next::Wait(wait) => {
                shared.signal.wait_past(seen, wait);
            }
            Next::Again => {}
        }
    }
}

/// An agent that takes any status as an answer (a non-2xx fails the
/// attempt; it is not an error), gives up on a POST after
/// [`POST_TIMEOUT`], follows no redirect (a 3xx fails the attempt), uses
/// no proxy, and connects only to addresses `tenant`'s egress policy
/// allows, checked on every connection.
fn agent(egress: &Arc<EgressPolicies>, tenant: &str) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(POST_TIMEOUT))
        .max_redirects(0)
        // A proxy would resolve the webhook's host itself, past the check.
        .proxy(None)
        .build();
    ureq::Agent::with_parts(
        config,
        DefaultConnector::default(),
        CheckedResolver {
            egress: Arc::clone(egress),
            tenant: tenant.to_owned(),
        },
    )
}

/// Checks a webhook's URL against `tenant`'s egress policy, and every
/// address its host resolves to now (each delivery checks them again).
pub(super) fn check_url(egress: &EgressPolicies, tenant: &str, url: &str) -> Result<(), HubError> {
    let target = weft_core::egress::Target::parse_url("POST", url)
        .map_err(|m| HubError::Invalid(format!("webhook.url: {m}")))?;
    let checked = Egress::destination(&target, egress.policy(tenant));
    let denied = |d: weft_core::egress::Denied| HubError::Denied(format!("webhook.url: {d}"));
    checked.allow(&target).map_err(denied)?;
    let host = target.host.lookup_name();
    let addrs = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), target.port))
        .map_err(|e| HubError::Invalid(format!("webhook.url: cannot resolve `{host}`: {e}")))?;
    checked
        .allow_addrs(&target, addrs.map(|addr| addr.ip()))
        .map_err(denied)
}

/// Resolves a webhook's host as ureq would, then refuses the connection if
/// any address is one the tenant's egress policy does not allow: a name
/// rebound to a private address after the subscription was made is caught
/// here.
#[derive(Debug)]
struct CheckedResolver {
    egress: Arc<EgressPolicies>,
    tenant: String,
}

impl Resolver for CheckedResolver {
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let refuse = |message: String| ureq::Error::Io(std::io::Error::other(message));
        let authority = uri
            .authority()
            .ok_or_else(|| refuse("the URL names no host".to_owned()))?;
        let target = weft_core::egress::Target::new(
            "POST",
            uri.scheme_str().unwrap_or("https"),
            authority.host(),
            authority.port_u16(),
            uri.path_and_query().map_or("/", |p| p.as_str()),
        )
        .map_err(refuse)?;
        let checked = Egress::destination(&target, self.egress.policy(&self.tenant));
        checked
            .allow(&target)
            .map_err(|d| refuse(format!("http_denied: {d}")))?;
        let addrs = DefaultResolver::default().resolve(uri, config, timeout)?;
        checked
            .allow_addrs(&target, addrs.iter().map(|addr| addr.ip()))
            .map_err(|d| refuse(format!("http_denied: {d}")))?;
        Ok(addrs)
    }
}

/// One turn: POSTs the head of `key`'s queue once it is due, and records
/// the attempt. Blocks for up to [`POST_TIMEOUT`].
fn turn(hub: &Hub, agent: &ureq::Agent, key: &str) -> Next {
    let shared = &hub.shared;
    let subscription = match shared.store.subscription(key) {
        Ok(Some(subscription)) => subscription,
        Ok(None) => return Next::Stop,
        Err(e) => {
            tracing::error!(subscription = %key, "cannot read a subscription: {e}");
            return Next::Wait(Duration::from_secs(1));
        }
    };
    let Target::Webhook { url, secret } = &subscription.target else {
        return Next::Stop;
    };
    // One host at a time delivers a queue: another on the store that
    // holds it goes on, and this one looks again in a second. The head is
    // read once the queue is held, so it is not one the last holder acked.
    match shared.committer.hold(key) {
        Ok(()) => {}
        Err(weft_store::StoreError::Fenced { .. }) => return Next::Wait(Duration::from_secs(1)),
        Err(e) => {
            tracing::warn!(subscription = %key, "cannot take the delivery queue: {e}");
            return Next::Wait(Duration::from_secs(1));
        }
    }
    let Some(delivery) = head(shared, key) else {
        return Next::Wait(Duration::from_secs(1));
    };
    let now = shared.clock.now();
    if let Some(at) = delivery.next_at
        && at > now
    {
        let wait = shared.clock.real_wait(at.millis_since(now));
        return Next::Wait(wait.min(Duration::from_secs(1)));
    }
    let attempt = delivery.attempts + 1;
    let view = match hub.view(&delivery, attempt) {
        Ok(view) => view,
        Err(e) => {
            tracing::error!(delivery = %delivery.id, "cannot read a delivery's message: {e}");
            return Next::Wait(Duration::from_secs(1));
        }
    };
    let started = std::time::Instant::now();
    let error = post(agent, url, secret, &view);
    if let Some(metrics) = &shared.metrics {
        let tenant = weft_core::tenant::of(key).to_owned();
        metrics
            .webhook_seconds
            .get_or_create(&weft_core::metrics::TenantLabels { tenant })
            .observe(started.elapsed().as_secs_f64());
    }
    let now = shared.clock.now();
    let op = attempt_op(&subscription, attempt, error.as_deref(), now);
    if let DeliveryOp::Dead { error, .. } = &op {
        tracing::warn!(delivery = %delivery.id, subscription = %key, "webhook attempts ran out: dead letter ({error})");
    }
    if let Some(error) = &error {
        tracing::debug!(delivery = %delivery.id, attempt, "webhook attempt failed: {error}");
    }
    record(shared, &delivery.id, op)
}

/// The oldest unsettled delivery of `key`, if any; a store error is
/// logged and counts as none.
fn head(shared: &Shared, key: &str) -> Option<DeliveryRecord> {
    match shared.store.queued(key, false, 0, 1) {
        Ok(mut head) => head.pop(),
        Err(e) => {
            tracing::error!(subscription = %key, "cannot read a queue: {e}");
            None
        }
    }
}

/// POSTs `view` to `url`, signed with `secret`: `None` on a 2xx answer,
/// else why the attempt failed.
fn post(agent: &ureq::Agent, url: &str, secret: &str, view: &Delivery) -> Option<String> {
    let body = serde_json::to_vec(view).unwrap_or_default();
    match agent
        .post(url)
        .header("content-type", "application/json")
        .header("weft-delivery", &view.delivery)
        .header("weft-message", &view.message)
        .header("weft-attempt", view.attempt.to_string())
        .header(SIGNATURE_HEADER, sign(secret, &body))
        .send(&body[..])
    {
        Ok(response) if response.status().is_success() => None,
        Ok(response) => Some(format!("{url} answered {}", response.status())),
        Err(e) => Some(format!("cannot POST to {url}: {e}")),
    }
}

/// What attempt `attempt` comes to, given its `error` (`None`: a 2xx
/// answer, which acks it): a dead letter once the subscription's attempts
/// ran out, else tried, and due again after the retry delay.
fn attempt_op(
    subscription: &SubscriptionRecord,
    attempt: u32,
    error: Option<&str>,
    now: Timestamp,
) -> DeliveryOp {
    match error {
        Some(error) if attempt >= subscription.max_attempts => DeliveryOp::Dead {
            at: now,
            error: error.to_owned(),
            attempted: true,
        },
        _ => {
            let delay = subscription.retry_delay_ms(attempt);
            DeliveryOp::Tried {
                at: now,
                error: error.map(str::to_owned),
                next_at: now + Duration::from_millis(delay),
            }
        }
    }
}

/// Records attempt `op` at delivery `id`: one durable write. What to do
/// next if the store fails is to wait a second.
fn record(shared: &Shared, id: &str, op: DeliveryOp) -> Next {
    let write = DeliveryWrite::Move(id.to_owned(), op);
    match shared.committer.commit(write) {
        Ok(()) => Next::Again,
        // Acked or cleared meanwhile: the next head decides.
        Err(e) if moved_on(&e) => Next::Again,
        Err(e) => {
            tracing::error!(delivery = %id, "cannot record a webhook attempt: {e}");
            Next::Wait(Duration::from_secs(1))
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
