//! Webhook delivery: a pool of at most [`THREADS`] threads takes the
//! webhook subscriptions in turns; a turn POSTs a subscription's oldest
//! unsettled delivery, and it is sent again at later turns until a 2xx
//! answer acks it. A subscription is taken by one thread at a time, and
//! one tenant's by at most half the threads. With several hosts on one
//! store, each takes turns, and the one that holds the queue's lease
//! delivers (`Committer::hold`); the lease moves when its host is gone.
//!
//! The body is the [`Delivery`](super::Delivery) as JSON. Headers:
//! `weft-delivery` (the delivery id, the same on every attempt),
//! `weft-message`, `weft-attempt`, and `weft-signature: sha256=<hex>`, the
//! HMAC-SHA256 of the body with the subscription's secret.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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

/// Threads that POST webhooks, shared by every webhook subscription of
/// the host: at most this many requests are in flight at once.
pub const THREADS: usize = 16;

/// The most of those threads one tenant's subscriptions may hold at once
/// while another tenant's are due, so that slow endpoints of one tenant do
/// not stop the others' webhooks.
const PER_TENANT: usize = THREADS / 2;

/// The webhook subscriptions this hub delivers, each with when its next
/// turn is due. A subscription is taken by one thread at a time, so its
/// queue goes out in order.
#[derive(Default)]
pub(super) struct Webhooks {
    /// When each subscription's next turn is due; `None` while a thread
    /// takes it.
    due: HashMap<String, Option<Instant>>,
    /// Threads each tenant's subscriptions hold now.
    taken: HashMap<String, usize>,
    /// The agent each tenant's webhooks are sent with.
    agents: HashMap<String, ureq::Agent>,
    /// Threads started.
    threads: usize,
}

impl Webhooks {
    /// The subscription to take next, if one is due by `now`: the one due
    /// longest, of a tenant under [`PER_TENANT`] if any such is due (a
    /// tenant whose work alone is due may take every thread). Else when
    /// the next is due.
    fn next(&self, now: Instant) -> Result<String, Option<Instant>> {
        let mut first: Option<(&String, Instant)> = None;
        let mut capped: Option<(&String, Instant)> = None;
        for (key, due) in &self.due {
            let Some(due) = *due else { continue };
            let tenant = weft_core::tenant::of(key);
            let over = self.taken.get(tenant).copied().unwrap_or(0) >= PER_TENANT;
            let best = if over { &mut capped } else { &mut first };
            if best.is_none_or(|(_, at)| due < at) {
                *best = Some((key, due));
            }
        }
        match (first, capped) {
            (Some((key, due)), _) if due <= now => Ok(key.clone()),
            (_, Some((key, due))) if due <= now => Ok(key.clone()),
            (first, capped) => Err(first.or(capped).map(|(_, due)| due)),
        }
    }
}

impl Hub {
    /// Adds every webhook subscription of the store this hub does not
    /// deliver yet, due at once, and starts the delivering threads up to
    /// [`THREADS`], unless the hub is stopping.
    pub(super) fn start_webhooks(&self) {
        let Ok(subscriptions) = self.shared.store.subscriptions(None) else {
            return;
        };
        if self.shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let mut webhooks = lock(&self.shared.webhooks);
        let now = Instant::now();
        let mut added = false;
        for subscription in subscriptions {
            if matches!(subscription.target, Target::Webhook { .. })
                && !webhooks.due.contains_key(&subscription.key)
            {
                webhooks.due.insert(subscription.key, Some(now));
                added = true;
            }
        }
        let wanted = webhooks.due.len().min(THREADS);
        while webhooks.threads < wanted {
            let hub = self.clone();
            match std::thread::Builder::new()
                .name(format!("weft-webhooks-{}", webhooks.threads))
                .spawn(move || deliver(&hub))
            {
                Ok(_) => webhooks.threads += 1,
                Err(e) => {
                    tracing::error!("cannot start a webhook thread: {e}");
                    break;
                }
            }
        }
        drop(webhooks);
        if added {
            // A thread waiting for messages looks again.
            self.shared.signal.bump();
        }
    }
}

/// What a turn asks for next.
enum Next {
    /// Deliver no more: the subscription went, or is no webhook.
    Stop,
    /// Its next turn in this long, or once new messages come.
    Wait(Duration),
    /// Its next turn at once.
    Again,
}

/// Delivers the webhook subscriptions' queues, a turn of one at a time,
/// until the hub stops. On new messages every subscription is due at once
/// (a turn finds out whether its head is due).
fn deliver(hub: &Hub) {
    let shared = &hub.shared;
    while !shared.stopping.load(Ordering::SeqCst) {
        let seen = shared.signal.current();
        let taken = {
            let mut webhooks = lock(&shared.webhooks);
            match webhooks.next(Instant::now()) {
                Ok(key) => {
                    let tenant = weft_core::tenant::of(&key).to_owned();
                    webhooks.due.insert(key.clone(), None);
                    *webhooks.taken.entry(tenant.clone()).or_default() += 1;
                    let agent = webhooks
                        .agents
                        .entry(tenant.clone())
                        .or_insert_with(|| agent(&shared.egress, &tenant))
                        .clone();
                    Ok((key, tenant, agent))
                }
                Err(due) => Err(due),
            }
        };
        match taken {
            Ok((key, tenant, agent)) => {
                // A panic in a turn fails that turn, not the pool: the
                // subscription is due again in a second.
                let next = weft_core::panics::contain("hub", || turn(hub, &agent, &key))
                    .unwrap_or(Next::Wait(Duration::from_secs(1)));
                let mut webhooks = lock(&shared.webhooks);
                if let Some(taken) = webhooks.taken.get_mut(&tenant) {
                    *taken = taken.saturating_sub(1);
                    if *taken == 0 {
                        webhooks.taken.remove(&tenant);
                    }
                }
                let now = Instant::now();
                match next {
                    Next::Stop => {
                        webhooks.due.remove(&key);
                    }
                    // New messages came during the turn: at once.
                    Next::Wait(_) | Next::Again if shared.signal.current() != seen => {
                        webhooks.due.insert(key, Some(now));
                    }
                    Next::Wait(wait) => {
                        webhooks.due.insert(key, Some(now + wait));
                    }
                    Next::Again => {
                        webhooks.due.insert(key, Some(now));
                    }
                }
            }
            Err(due) => {
                let wait = due.map_or(Duration::from_secs(1), |due| {
                    due.saturating_duration_since(Instant::now())
                        .min(Duration::from_secs(1))
                });
                if shared.signal.wait_past(seen, wait) != seen {
                    // New messages (or a new subscription): every queue
                    // looks again.
                    // Only sooner: those due longest stay first.
                    let now = Instant::now();
                    for due in lock(&shared.webhooks).due.values_mut().flatten() {
                        *due = (*due).min(now);
                    }
                }
            }
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
    let Target::Webhook {
        url,
        secret,
        sealed,
    } = &subscription.target
    else {
        return Next::Stop;
    };
    let secret = match sealed {
        None => secret.clone(),
        Some(sealed) => {
            let tenant = weft_core::tenant::of(key);
            match shared.vault.open_webhook(tenant, key, sealed) {
                Ok(secret) => secret,
                Err(e) => {
                    // A key rotated away, or none given to this host: the
                    // deliveries wait, none is sent unsigned.
                    tracing::error!(subscription = %key, "cannot open the webhook's signing key: {e}");
                    return Next::Wait(Duration::from_secs(5));
                }
            }
        }
    };
    // One host at a time delivers a queue: another on the store that
    // holds it goes on, and this one looks again in a second. The head is
    // read once the queue is held, so it is not one the last holder acked.
    let tenure = shared.committer.tenure();
    match shared.committer.hold(key) {
        Ok(()) => {}
        Err(weft_store::StoreError::Refused(weft_store::Refused::Fenced { .. })) => {
            return Next::Wait(Duration::from_secs(1));
        }
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
    // Stopped past its lease since it took the queue, this host may have
    // lost it to a peer that delivered this head and more since: it looks
    // again (and finds the queue held) rather than POST it out of order.
    // A stop during the POST itself is not caught.
    if !shared.committer.holds_since(tenure) {
        tracing::warn!(subscription = %key, "this host's lease lapsed while it held the queue; it takes the queue again before it delivers");
        return Next::Wait(Duration::from_millis(100));
    }
    let started = std::time::Instant::now();
    let error = post(agent, url, &secret, &view);
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
    fn the_subscription_due_longest_goes_first_and_a_tenant_alone_takes_every_thread() {
        let now = Instant::now();
        let mut pool = Webhooks::default();
        let early = now.checked_sub(Duration::from_secs(2)).unwrap_or(now);
        pool.due.insert("a:c/one".to_owned(), Some(now));
        pool.due.insert("a:c/two".to_owned(), Some(early));
        pool.due
            .insert("b:c/one".to_owned(), Some(now + Duration::from_secs(5)));
        assert_eq!(pool.next(now), Ok("a:c/two".to_owned()));
        // Tenant `a` holds its share while `b`'s is not due: `a` goes on.
        pool.taken.insert("a".to_owned(), PER_TENANT);
        assert_eq!(pool.next(now), Ok("a:c/two".to_owned()));
        // Once `b`'s is due, it goes before `a`'s older work.
        pool.due.insert("b:c/one".to_owned(), Some(now));
        assert_eq!(pool.next(now), Ok("b:c/one".to_owned()));
        // A taken subscription is never offered; nothing due says when.
        pool.due.insert("b:c/one".to_owned(), None);
        pool.due
            .insert("a:c/two".to_owned(), Some(now + Duration::from_secs(1)));
        pool.due
            .insert("a:c/one".to_owned(), Some(now + Duration::from_secs(3)));
        assert_eq!(pool.next(now), Err(Some(now + Duration::from_secs(1))));
    }

    #[test]
    fn signatures_match_a_known_hmac() {
        // RFC 4231, test case 2.
        assert_eq!(
            sign("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
