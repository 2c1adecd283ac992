//! Routes for what runs emit and what outside actors answer: channels
//! (Server-Sent Events), subscriptions, deliveries and their acks, dead
//! letters, and actions on `await` steps.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Api, ApiError, Caller, blocking, shown as named, spawn_detached};
use crate::hub::{HubError, SubscriptionSpec};
use weft_engine::{ActError, Answer};
use weft_store::{DeliveryRecord, DeliveryState, Right, SubscriptionRecord, Target, What};

/// The most SSE streams open at once: each holds a thread while open.
pub const MAX_STREAMS: usize = 256;

/// The most SSE streams one tenant may hold open at once, so that one
/// tenant cannot take every place.
pub const MAX_TENANT_STREAMS: usize = 64;

/// One tenant's place among the open streams, given back when dropped.
pub(super) struct TenantStream {
    counts: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    tenant: String,
}

impl TenantStream {
    /// Takes a place for `tenant`, unless it holds its most already (on
    /// a host with tenants besides `default`; `shared` says whether there
    /// are).
    pub(super) fn take(api: &Api, tenant: &str, shared: bool) -> Result<Self, ApiError> {
        let mut counts = weft_core::lock(&api.tenant_streams);
        let count = counts.entry(tenant.to_owned()).or_default();
        if shared && *count >= MAX_TENANT_STREAMS {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_streams",
                format!(
                    "a tenant may hold at most {MAX_TENANT_STREAMS} event streams open at once"
                ),
            ));
        }
        *count += 1;
        Ok(Self {
            counts: Arc::clone(&api.tenant_streams),
            tenant: tenant.to_owned(),
        })
    }
}

impl Drop for TenantStream {
    fn drop(&mut self) {
        let mut counts = weft_core::lock(&self.counts);
        if let Some(count) = counts.get_mut(&self.tenant) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.tenant);
            }
        }
    }
}

impl From<HubError> for ApiError {
    fn from(error: HubError) -> Self {
        match error {
            HubError::NotFound(what) => ApiError::not_found(&what),
            HubError::Conflict(message) => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            HubError::Invalid(message) => ApiError::bad_request(message),
            HubError::Denied(message) => {
                ApiError::new(StatusCode::FORBIDDEN, "http_denied", message)
            }
            HubError::Store(e) => e.into(),
            HubError::Secret(message) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "secrets", message)
            }
        }
    }
}

/// `429 quota_exceeded` if `tenant` may not make subscription `key` (as
/// stored) under its quota; one that exists is no new one.
fn room_for(store: &dyn weft_store::Store, tenant: &str, key: &str) -> Result<(), ApiError> {
    let Some(max) = super::quota_of(store, tenant)?.max_subscriptions else {
        return Ok(());
    };
    let count = store
        .subscriptions(None)?
        .iter()
        .filter(|s| weft_core::tenant::of(&s.key) == tenant && s.key != key)
        .count();
    if count >= max as usize {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "quota_exceeded",
            format!(
                "tenant `{tenant}` is at its quota `max_subscriptions` ({max}); remove one first"
            ),
        ));
    }
    Ok(())
}

/// The stored names in a subscription's record.
const SUBSCRIPTION_NAMES: &[&str] = &["key", "channel"];

/// The stored names in a delivery's record.
const DELIVERY_NAMES: &[&str] = &["subscription"];

/// The stored names in a message's record.
const MESSAGE_NAMES: &[&str] = &["channel"];

/// A subscription as the API shows it: the webhook's secret is not shown
/// again after it is made.
fn shown(subscription: &SubscriptionRecord, with_secret: bool) -> Value {
    let mut value = named(subscription, SUBSCRIPTION_NAMES);
    if let Target::Webhook { .. } = subscription.target
        && let Some(target) = value.get_mut("target").and_then(Value::as_object_mut)
    {
        target.remove("sealed");
        if !with_secret {
            target.remove("secret");
        }
    }
    value
}

pub(super) async fn add_subscription(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<SubscriptionSpec>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(spec) = body?;
    caller.need(Right::Deploy)?;
    let hub = api.hub.clone();
    let tenant = caller.tenant.clone();
    let store = Arc::clone(api.engine.store());
    let made = blocking(move || {
        let stored = weft_core::tenant::qualify(&tenant, &spec.channel);
        let key = format!("{stored}/{}", spec.name.as_deref().unwrap_or("default"));
        room_for(store.as_ref(), &tenant, &key)?;
        Ok::<_, ApiError>(hub.subscribe(&tenant, spec)?)
    })
    .await??;
    api.audit(
        &caller,
        "subscription.add",
        weft_core::tenant::bare(&made.key),
        Value::Null,
    )
    .await;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "subscription": shown(&made, true) })),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SubscriptionsQuery {
    #[serde(default)]
    channel: Option<String>,
}

pub(super) async fn list_subscriptions(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<SubscriptionsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    let store = Arc::clone(api.engine.store());
    let channel = match &query.channel {
        Some(name) => match caller.name(name) {
            Some(stored) => Some(stored),
            None => return Ok(Json(json!({ "subscriptions": [] }))),
        },
        None => None,
    };
    let found = blocking(move || store.subscriptions(channel.as_deref())).await??;
    let shown: Vec<Value> = found
        .iter()
        .filter(|s| caller.owns(&s.key))
        .map(|s| shown(s, false))
        .collect();
    Ok(Json(json!({ "subscriptions": shown })))
}

pub(super) async fn remove_subscription(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path((channel, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let key = format!("{channel}/{name}");
    let missing = || ApiError::not_found(&What::Subscription(key.clone()));
    let stored = caller
        .name(&channel)
        .map(|c| format!("{c}/{name}"))
        .ok_or_else(missing)?;
    let store = Arc::clone(api.engine.store());
    let asked = stored.clone();
    if blocking(move || store.subscription(&asked))
        .await??
        .is_none()
    {
        return Err(missing());
    }
    caller.need(Right::Deploy)?;
    let hub = api.hub.clone();
    blocking(move || hub.unsubscribe(&stored)).await??;
    api.audit(&caller, "subscription.remove", &key, Value::Null)
        .await;
    Ok(Json(json!({ "removed": key })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    #[serde(default)]
    consumer: Option<String>,
}

/// `GET /v1/channels/{channel}/events`: the consumer's deliveries as
/// Server-Sent Events, `event: message`, `id:` the message's `seq`, `data:`
/// the delivery as JSON. With `Last-Event-ID`, deliveries up to that id
/// count as received and are sent again only once their time to ack has
/// passed.
pub(super) async fn events(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(channel): Path<String>,
    query: Result<Query<EventsQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<
    Sse<impl futures_util::Stream<Item = Result<Event, Infallible>> + Send + 'static>,
    ApiError,
> {
    let Query(query) = query?;
    let consumer = query.consumer.unwrap_or_else(|| "default".to_owned());
    let after = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    ApiError::bad_request("Last-Event-ID: expected an event id, a number")
                })?,
        ),
    };
    let store = Arc::clone(api.engine.store());
    let shared = !blocking(move || store.tenants()).await??.is_empty();
    let place = TenantStream::take(&api, &caller.tenant, shared)?;
    let permit = Arc::clone(&api.streams).try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            format!("at most {MAX_STREAMS} event streams may be open at once"),
        )
    })?;
    if channel.contains(weft_core::tenant::SEPARATOR) {
        return Err(ApiError::bad_request(format!(
            "channel `{channel}` has `:`; use letters, digits, `_`, `-` and `.`"
        )));
    }
    let hub = api.hub.clone();
    let tenant = caller.tenant.clone();
    let store = Arc::clone(api.engine.store());
    let mut consumer = blocking(move || {
        // A GET makes nothing: the subscription is made first, with
        // `POST /v1/subscriptions` (as `weft tail` does). Reading one is a
        // reader's.
        let key = format!(
            "{}/{consumer}",
            weft_core::tenant::qualify(&tenant, &channel)
        );
        if store.subscription(&key)?.is_none() {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_subscription",
                format!(
                    "no subscription `{channel}/{consumer}`; make it first with POST /v1/subscriptions {{\"channel\": \"{channel}\", \"name\": \"{consumer}\"}}"
                ),
            ));
        }
        Ok::<_, ApiError>(hub.consumer(&tenant, &channel, &consumer, after)?)
    })
    .await??;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Event>(256);
    let access = Arc::clone(&api.access);
    spawn_detached(move || {
        let _permit = (permit, place);
        let mut seen = access.revocations();
        let mut checked = std::time::Instant::now();
        loop {
            // A revoked or expired token ends the stream: checked at once
            // after any revocation, and every few seconds for expiry.
            let now = access.revocations();
            if now != seen || checked.elapsed() >= Duration::from_secs(5) {
                seen = now;
                checked = std::time::Instant::now();
                if !access.still_valid(&caller) {
                    return;
                }
            }
            match consumer.next(Duration::from_secs(1)) {
                Ok(Some(batch)) => {
                    for delivery in batch {
                        let data = serde_json::to_string(&delivery).unwrap_or_default();
                        let event = Event::default()
                            .event("message")
                            .id(delivery.seq.to_string())
                            .data(data);
                        if tx.blocking_send(event).is_err() {
                            return;
                        }
                    }
                    if tx.is_closed() {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::error!("an event stream failed: {e}");
                    return;
                }
            }
        }
    });
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|e| e.map(Ok)));
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeliveriesQuery {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    subscription: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

/// `GET /v1/deliveries`: the newest deliveries; `?state=error` lists the
/// dead letters, `?subscription=` one subscription's queue (or, with
/// `state=error`, its dead letters) in order.
pub(super) async fn list_deliveries(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<DeliveriesQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    let limit = query.limit.unwrap_or(100).min(10_000);
    let state = query
        .state
        .as_deref()
        .map(crate::hub::delivery_state)
        .transpose()
        .map_err(|e| ApiError::bad_request(format!("state: {e}")))?;
    let subscription = match &query.subscription {
        Some(key) => match caller.name(key) {
            Some(stored) => Some(stored),
            None => return Ok(Json(json!({ "deliveries": [] }))),
        },
        None => None,
    };
    let store = Arc::clone(api.engine.store());
    let tenant = caller.tenant.clone();
    let found = blocking(move || {
        let dead = state == Some(DeliveryState::Error);
        let keep = |d: &DeliveryRecord| {
            weft_core::tenant::of(&d.subscription) == tenant
                && state.is_none_or(|state| d.state == state)
        };
        let mut found = match &subscription {
            Some(key) => store.queued(key, dead, 0, limit)?,
            // Listings of every subscription are read past other tenants'
            // rows: a wider read until `limit` of the caller's are found
            // or there are no more.
            None => {
                let mut scan = limit.saturating_mul(4).max(64);
                loop {
                    let read = if dead {
                        store.dead_letters(scan)?
                    } else {
                        store.deliveries(scan)?
                    };
                    let exhausted = read.len() < scan;
                    let kept: Vec<DeliveryRecord> = read.into_iter().filter(|d| keep(d)).collect();
                    if kept.len() >= limit || exhausted {
                        break kept;
                    }
                    scan = scan.saturating_mul(4);
                }
            }
        };
        found.retain(|d| keep(d));
        found.truncate(limit);
        Ok::<_, weft_store::StoreError>(found)
    })
    .await??;
    let found: Vec<Value> = found.iter().map(|d| named(d, DELIVERY_NAMES)).collect();
    Ok(Json(json!({ "deliveries": found })))
}

/// Delivery `id`, if it is of one of the caller's subscriptions.
async fn own_delivery(api: &Api, caller: &Caller, id: &str) -> Result<DeliveryRecord, ApiError> {
    let store = Arc::clone(api.engine.store());
    let asked = id.to_owned();
    blocking(move || store.delivery(&asked))
        .await??
        .filter(|d| caller.owns(&d.subscription))
        .ok_or_else(|| ApiError::not_found(&What::Delivery(id.to_owned())))
}

pub(super) async fn get_delivery(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let delivery = own_delivery(&api, &caller, &id).await?;
    Ok(Json(
        json!({ "delivery": named(&delivery, DELIVERY_NAMES) }),
    ))
}

/// `POST /v1/deliveries/{id}/{ack|resend}`.
pub(super) async fn change_delivery(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path((id, action)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    if !matches!(action.as_str(), "ack" | "resend") {
        return Err(super::not_found().await);
    }
    own_delivery(&api, &caller, &id).await?;
    caller.need(Right::Operate)?;
    let hub = api.hub.clone();
    let asked = id.clone();
    let delivery = match action.as_str() {
        "ack" => blocking(move || hub.ack(&asked)).await??,
        _ => blocking(move || hub.resend(&asked)).await??,
    };
    if action == "resend" {
        api.audit(&caller, "delivery.resend", &id, Value::Null)
            .await;
    }
    Ok(Json(
        json!({ "delivery": named(&delivery, DELIVERY_NAMES) }),
    ))
}

/// The most deliveries one batch ack takes.
pub const MAX_ACKS: usize = 10_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AcksRequest {
    deliveries: Vec<String>,
}

/// `POST /v1/acks`: acks many deliveries in one durable write; answers
/// each one's state, or its error.
pub(super) async fn ack_many(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<AcksRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(request) = body?;
    caller.need(Right::Operate)?;
    if request.deliveries.len() > MAX_ACKS {
        return Err(ApiError::bad_request(format!(
            "deliveries: at most {MAX_ACKS} at once, not {}",
            request.deliveries.len()
        )));
    }
    let hub = api.hub.clone();
    let store = Arc::clone(api.engine.store());
    let ids = request.deliveries;
    let answers = blocking(move || {
        // Another tenant's delivery is answered as one that does not
        // exist, and is not acked.
        let mut owned = Vec::with_capacity(ids.len());
        for id in &ids {
            let found = store
                .delivery(id)
                .map_err(ApiError::from)?
                .filter(|d| caller.owns(&d.subscription));
            owned.push(found.is_some());
        }
        let mine: Vec<String> = ids
            .iter()
            .zip(&owned)
            .filter(|(_, owned)| **owned)
            .map(|(id, _)| id.clone())
            .collect();
        let mut answers = hub.ack_all(&mine).into_iter();
        Ok::<_, ApiError>(
            ids.into_iter()
                .zip(owned)
                .map(
                    |(id, owned)| match owned.then(|| answers.next()).flatten() {
                        Some(Ok(delivery)) => json!({ "id": id, "state": delivery.state }),
                        Some(Err(e)) => json!({ "id": id, "error": ApiError::from(e).code }),
                        None => json!({ "id": id, "error": "unknown_delivery" }),
                    },
                )
                .collect::<Vec<Value>>(),
        )
    })
    .await??;
    Ok(Json(json!({ "acks": answers })))
}

/// `DELETE /v1/deliveries/{id}`: clears a dead letter.
pub(super) async fn clear_delivery(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    own_delivery(&api, &caller, &id).await?;
    caller.need(Right::Operate)?;
    let hub = api.hub.clone();
    let asked = id.clone();
    blocking(move || hub.clear(&asked)).await??;
    Ok(Json(json!({ "cleared": id })))
}

/// What an outside actor sends to a waiting `await` step.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActionRequest {
    action: ActionKind,
    #[serde(default)]
    output: Option<Value>,
    #[serde(default)]
    error: Option<ActionError>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ActionKind {
    Complete,
    Fail,
    Skip,
    Cancel,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionError {
    #[serde(default)]
    code: Option<String>,
    message: String,
    #[serde(default)]
    details: Option<Value>,
}

impl ActionRequest {
    /// What the request tells the step (`None`: cancel the run), or `400`
    /// when its fields do not fit its action.
    fn answer(self) -> Result<Option<Answer>, ApiError> {
        match (self.action, self.output, self.error) {
            (ActionKind::Complete, output, None) => {
                Ok(Some(Answer::Complete(output.unwrap_or(Value::Null))))
            }
            (ActionKind::Fail, None, Some(error)) => Ok(Some(Answer::Fail {
                code: error.code.unwrap_or_else(|| "rejected".to_owned()),
                message: error.message,
                details: error.details,
            })),
            (ActionKind::Fail, _, None) => Err(ApiError::bad_request(
                "error: `fail` needs `error`, with at least a `message`",
            )),
            (ActionKind::Skip, None, None) => Ok(Some(Answer::Skip)),
            (ActionKind::Cancel, None, None) => Ok(None),
            (action, _, _) => Err(ApiError::bad_request(
                format!(
                    "`{action:?}` takes {}",
                    match action {
                        ActionKind::Complete => "`output` only",
                        ActionKind::Fail => "`error` only",
                        ActionKind::Skip | ActionKind::Cancel => "neither `output` nor `error`",
                    }
                )
                .to_lowercase(),
            )),
        }
    }
}

/// `POST /v1/runs/{id}/steps/{path}/actions`; the path may hold `/`
/// (`fan/approve`, `each[2]/approve`).
pub(super) async fn act(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path((run, rest)): Path<(String, String)>,
    body: Result<Json<ActionRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Some(step) = rest.strip_suffix("/actions").map(str::to_owned) else {
        return Err(super::not_found().await);
    };
    super::own_run(&api, &caller, &run).await?;
    caller.need(Right::Operate)?;
    let Json(request) = body?;
    let action = request.action;
    let answer = request.answer()?;
    let engine = Arc::clone(&api.engine);
    let (asked_run, asked_step) = (run.clone(), step.clone());
    let outcome = blocking(move || match answer {
        Some(answer) => engine.act(&asked_run, &asked_step, &answer),
        None => engine.cancel(&asked_run).map_err(|e| match e {
            weft_store::StoreError::Refused(weft_store::Refused::RunEnded(id)) => {
                ActError::Ended(id)
            }
            weft_store::StoreError::Refused(weft_store::Refused::NotFound(
                weft_store::What::Run(_),
            )) => ActError::NotFound(asked_run.clone()),
            other => ActError::Store(other),
        }),
    })
    .await?;
    match outcome {
        Ok(()) => Ok(Json(json!({
            "run": run,
            "step": step,
            "action": format!("{action:?}").to_lowercase(),
        }))),
        Err(e) => Err(refused(&api, &run, e).await),
    }
}

/// The answer to an action the engine refused; for a run that has ended,
/// read back (off the async threads) to name its state.
async fn refused(api: &Api, run: &str, error: ActError) -> ApiError {
    match error {
        ActError::NotFound(id) => ApiError::unknown_run(&id),
        e @ ActError::Ended(_) => {
            let store = Arc::clone(api.engine.store());
            let asked = run.to_owned();
            let found = match blocking(move || store.run(&asked)).await {
                Ok(found) => found,
                Err(failed) => return failed,
            };
            let state = found
                .ok()
                .flatten()
                .map(|r| r.state.to_string())
                .unwrap_or_default();
            ApiError::new(StatusCode::CONFLICT, "run_ended", format!("{e}: {state}"))
        }
        e @ ActError::NotWaiting { .. } => {
            ApiError::new(StatusCode::CONFLICT, "not_waiting", e.to_string())
        }
        e @ ActError::Busy(_) => ApiError::new(StatusCode::CONFLICT, "run_busy", e.to_string()),
        ActError::Store(e) => e.into(),
    }
}

/// `GET /v1/runs/{id}/messages`: what a run emitted, with each message's
/// deliveries.
pub(super) async fn run_messages(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    super::own_run(&api, &caller, &id).await?;
    let store = Arc::clone(api.engine.store());
    let messages = blocking(move || store.run_messages(&id)).await??;
    let messages: Vec<Value> = messages.iter().map(|m| named(m, MESSAGE_NAMES)).collect();
    Ok(Json(json!({ "messages": messages })))
}
