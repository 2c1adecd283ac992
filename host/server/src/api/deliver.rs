//! Routes for what runs emit and what outside actors answer: channels
//! (Server-Sent Events), subscriptions, deliveries and their acks, dead
//! letters, and actions on `await` steps.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Api, ApiError, blocking, spawn_detached};
use crate::hub::{HubError, SubscriptionSpec};
use weft_engine::{ActError, Answer};
use weft_store::{DeliveryState, SubscriptionRecord, Target};

/// The most SSE streams open at once: each holds a thread while open.
pub const MAX_STREAMS: usize = 256;

impl From<HubError> for ApiError {
    fn from(error: HubError) -> Self {
        match error {
            HubError::NotFound(what) => ApiError::not_found(&what),
            HubError::Conflict(message) => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            HubError::Invalid(message) => ApiError::bad_request(message),
            HubError::Store(e) => e.into(),
        }
    }
}

/// A subscription as the API shows it: the webhook's secret is not shown
/// again after it is made.
fn shown(subscription: &SubscriptionRecord, with_secret: bool) -> Value {
    let mut value = serde_json::to_value(subscription).unwrap_or(Value::Null);
    if !with_secret
        && let Target::Webhook { .. } = subscription.target
        && let Some(target) = value.get_mut("target").and_then(Value::as_object_mut)
    {
        target.remove("secret");
    }
    value
}

pub(super) async fn add_subscription(
    State(api): State<Api>,
    body: Result<Json<SubscriptionSpec>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(spec) = body?;
    let hub = api.hub.clone();
    let made = blocking(move || hub.subscribe(spec)).await??;
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
    query: Result<Query<SubscriptionsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    let store = Arc::clone(api.engine.store());
    let found = blocking(move || store.subscriptions(query.channel.as_deref())).await??;
    let shown: Vec<Value> = found.iter().map(|s| shown(s, false)).collect();
    Ok(Json(json!({ "subscriptions": shown })))
}

pub(super) async fn remove_subscription(
    State(api): State<Api>,
    Path((channel, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let hub = api.hub.clone();
    let key = format!("{channel}/{name}");
    let asked = key.clone();
    blocking(move || hub.unsubscribe(&asked)).await??;
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
    let permit = Arc::clone(&api.streams).try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            format!("at most {MAX_STREAMS} event streams may be open at once"),
        )
    })?;
    let hub = api.hub.clone();
    let mut consumer = blocking(move || hub.consumer(&channel, &consumer, after)).await??;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Event>(256);
    spawn_detached(move || {
        let _permit = permit;
        loop {
            match consumer.next(Duration::from_secs(15)) {
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
    let store = Arc::clone(api.engine.store());
    let found = blocking(move || {
        let dead = state == Some(DeliveryState::Error);
        let mut found = match (&query.subscription, dead) {
            (Some(key), dead) => store.queued(key, dead, 0, limit)?,
            (None, true) => store.dead_letters(limit)?,
            (None, false) => store.deliveries(limit)?,
        };
        if let Some(state) = state {
            found.retain(|d| d.state == state);
        }
        Ok::<_, weft_store::StoreError>(found)
    })
    .await??;
    Ok(Json(json!({ "deliveries": found })))
}

pub(super) async fn get_delivery(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = Arc::clone(api.engine.store());
    let asked = id.clone();
    match blocking(move || store.delivery(&asked)).await?? {
        Some(delivery) => Ok(Json(json!({ "delivery": delivery }))),
        None => Err(ApiError::not_found(&weft_store::What::Delivery(id))),
    }
}

/// `POST /v1/deliveries/{id}/{ack|resend}`.
pub(super) async fn change_delivery(
    State(api): State<Api>,
    Path((id, action)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let hub = api.hub.clone();
    let delivery = match action.as_str() {
        "ack" => blocking(move || hub.ack(&id)).await??,
        "resend" => blocking(move || hub.resend(&id)).await??,
        _ => return Err(super::not_found().await),
    };
    Ok(Json(json!({ "delivery": delivery })))
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
    body: Result<Json<AcksRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(request) = body?;
    if request.deliveries.len() > MAX_ACKS {
        return Err(ApiError::bad_request(format!(
            "deliveries: at most {MAX_ACKS} at once, not {}",
            request.deliveries.len()
        )));
    }
    let hub = api.hub.clone();
    let ids = request.deliveries;
    let answers = blocking(move || {
        let answers = hub.ack_all(&ids);
        ids.into_iter()
            .zip(answers)
            .map(|(id, answer)| match answer {
                Ok(delivery) => json!({ "id": id, "state": delivery.state }),
                Err(e) => json!({ "id": id, "error": ApiError::from(e).code }),
            })
            .collect::<Vec<Value>>()
    })
    .await?;
    Ok(Json(json!({ "acks": answers })))
}

/// `DELETE /v1/deliveries/{id}`: clears a dead letter.
pub(super) async fn clear_delivery(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
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
    Path((run, rest)): Path<(String, String)>,
    body: Result<Json<ActionRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Some(step) = rest.strip_suffix("/actions").map(str::to_owned) else {
        return Err(super::not_found().await);
    };
    let Json(request) = body?;
    let action = request.action;
    let answer = request.answer()?;
    let engine = Arc::clone(&api.engine);
    let (asked_run, asked_step) = (run.clone(), step.clone());
    let outcome = blocking(move || match answer {
        Some(answer) => engine.act(&asked_run, &asked_step, &answer),
        None => engine.cancel(&asked_run).map_err(|e| match e {
            weft_store::StoreError::RunEnded(id) => ActError::Ended(id),
            weft_store::StoreError::NotFound(weft_store::What::Run(_)) => {
                ActError::NotFound(asked_run.clone())
            }
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
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = Arc::clone(api.engine.store());
    let asked = id.clone();
    let found = blocking(move || {
        let run = store.run(&asked)?;
        let messages = match run {
            Some(_) => Some(store.run_messages(&asked)?),
            None => None,
        };
        Ok::<_, weft_store::StoreError>(messages)
    })
    .await??;
    match found {
        Some(messages) => Ok(Json(json!({ "messages": messages }))),
        None => Err(ApiError::unknown_run(&id)),
    }
}
