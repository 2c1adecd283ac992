//! Subscriptions: what a client asks for ([`SubscriptionSpec`]), checked
//! once into the record the store keeps, and making or removing one
//! through the hub.
//!
//! Checking is a plain function of the spec and the time (and, for a
//! webhook given no secret, a random one): it does no I/O. The store keeps
//! a subscription's key to one target.

use serde::Deserialize;

use super::{Hub, HubError};
use weft_core::clock::Timestamp;
use weft_core::names::check_name;
use weft_engine::DeliveryWrite;
use weft_store::{Refused, StoreError, SubscriptionRecord, Target};

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
    /// The record this asks for, as a subscription of `tenant` (to its
    /// channel of that name), checked; each error names its field.
    pub fn record(self, tenant: &str, now: Timestamp) -> Result<SubscriptionRecord, HubError> {
        check_name("channel", &self.channel).map_err(HubError::Invalid)?;
        let channel = weft_core::tenant::qualify(tenant, &self.channel);
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
                    sealed: None,
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
            key: format!("{channel}/{name}"),
            channel,
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

impl Hub {
    /// Makes a subscription of `tenant`; one with the same key and target
    /// is kept as it is. A webhook starts receiving at once. A webhook's
    /// signing key is stored sealed when the host has a secrets key; the
    /// answer holds it in the clear, to be shown once.
    pub fn subscribe(
        &self,
        tenant: &str,
        spec: SubscriptionSpec,
    ) -> Result<SubscriptionRecord, HubError> {
        let mut record = spec.record(tenant, self.shared.clock.now())?;
        let asked = record.target.clone();
        if let Target::Webhook { url, secret, .. } = &asked {
            super::webhook::check_url(&self.shared.egress, tenant, url)?;
            let stored = self.shared.store.subscription(&record.key)?;
            record.target = match stored {
                // The same URL and key again: kept as stored (a key sealed
                // again would differ, and be refused as another target).
                Some(stored) if self.same_webhook(tenant, &stored, url, secret)? => stored.target,
                _ => {
                    let sealing = self.shared.vault.seal_webhook(tenant, &record.key, secret);
                    match sealing.map_err(|e| HubError::Secret(e.to_string()))? {
                        Some(sealed) => Target::Webhook {
                            url: url.clone(),
                            secret: String::new(),
                            sealed: Some(sealed),
                        },
                        None => asked.clone(),
                    }
                }
            };
        }
        match self.commit(DeliveryWrite::Subscribe(record.clone())) {
            Ok(()) => {}
            // The same webhook made at the same time by another request,
            // whose seal of the same key differs: that one is kept.
            Err(HubError::Store(StoreError::Refused(Refused::Exists(what)))) => {
                let stored = self.shared.store.subscription(&record.key)?;
                let same = match (&asked, &stored) {
                    (Target::Webhook { url, secret, .. }, Some(stored)) => {
                        self.same_webhook(tenant, stored, url, secret)?
                    }
                    _ => false,
                };
                if !same {
                    return Err(HubError::Store(StoreError::Refused(Refused::Exists(what))));
                }
            }
            Err(e) => return Err(e),
        }
        if matches!(record.target, Target::Webhook { .. }) {
            self.start_webhooks();
        }
        let stored = self
            .shared
            .store
            .subscription(&record.key)?
            .unwrap_or(record);
        Ok(SubscriptionRecord {
            target: asked,
            ..stored
        })
    }

    /// Whether `stored` is a webhook to `url` signed with `secret`; an
    /// error if its sealed key cannot be opened here (no secrets key, or
    /// not the one it was sealed with), which would tell nothing.
    fn same_webhook(
        &self,
        tenant: &str,
        stored: &SubscriptionRecord,
        url: &str,
        secret: &str,
    ) -> Result<bool, HubError> {
        let Target::Webhook {
            url: stored_url,
            secret: stored_secret,
            sealed,
        } = &stored.target
        else {
            return Ok(false);
        };
        if stored_url != url {
            return Ok(false);
        }
        match sealed {
            Some(sealed) => self
                .shared
                .vault
                .open_webhook(tenant, &stored.key, sealed)
                .map(|opened| opened == secret)
                .map_err(|e| HubError::Secret(e.to_string())),
            None => Ok(stored_secret == secret),
        }
    }

    /// Removes subscription `key` (`<channel>/<name>`) and its deliveries.
    pub fn unsubscribe(&self, key: &str) -> Result<(), HubError> {
        self.commit(DeliveryWrite::Unsubscribe(key.to_owned()))?;
        self.shared.signal.bump();
        Ok(())
    }
}
