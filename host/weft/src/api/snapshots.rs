//! Snapshot stores over HTTP: publish a revision (the body, JSON or JSON
//! Lines, streamed to a temporary file and published from there, so a
//! large file is never held in memory), list the stores, show a store's
//! revisions and a revision's entries, and diff two revisions. Each
//! tenant sees its own stores only.

use std::io::Write as _;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use weft_core::tenant;
use weft_engine::snapshots::{self, FileFormat, PublishError, PublishOptions};
use weft_store::{Right, SnapshotRecord};

use super::{Api, ApiError, Caller, blocking};

/// The largest snapshot file accepted.
pub const MAX_SNAPSHOT: u64 = 2 << 30;

/// A revision as the API shows it, named as its tenant names it.
pub fn revision_json(record: &SnapshotRecord) -> Value {
    json!({
        "store": tenant::bare(&record.store),
        "revision": record.revision,
        "digest": record.digest,
        "entries": record.entries,
        "bytes": record.bytes,
        "expiring": record.expiring,
        "published_at": record.published_at,
        "ttl_ms": record.ttl_ms,
        "keep": record.keep,
        "keep_for_ms": record.keep_for_ms,
        "origin": record.origin,
    })
}

/// The query of a publish.
#[derive(Debug, Deserialize)]
pub(super) struct PublishQuery {
    /// `json` or `jsonl`; else by the content type.
    format: Option<String>,
    /// The default time to live of an entry, such as `1h`.
    ttl: Option<String>,
    /// Revisions kept, counting the newest.
    keep: Option<u32>,
    /// How long a replaced revision is kept, whatever `keep` says.
    keep_for: Option<String>,
}

/// Reads a publish's options from its query.
pub fn options(
    ttl: Option<&str>,
    keep: Option<u32>,
    keep_for: Option<&str>,
    origin: String,
) -> Result<PublishOptions, String> {
    let duration = |what: &str, text: &str| {
        snapshots::parse_ttl(&Value::String(text.to_owned())).map_err(|m| format!("{what}: {m}"))
    };
    Ok(PublishOptions {
        ttl: ttl.map(|t| duration("ttl", t)).transpose()?,
        keep: match keep {
            Some(0) => return Err("keep: must be at least 1 (the newest revision)".to_owned()),
            Some(n) => n,
            None => PublishOptions::default().keep,
        },
        keep_for: keep_for.map(|t| duration("keep_for", t)).transpose()?,
        origin,
    })
}

/// `POST /v1/snapshots/{name}`: publishes the body as the store's next
/// revision. `201` with the revision.
pub(super) async fn publish(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    query: Result<Query<PublishQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.need(Right::Deploy)?;
    let Query(query) = query?;
    let format = match query.format.as_deref() {
        Some("json") => FileFormat::Json,
        Some("jsonl" | "ndjson") => FileFormat::Lines,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "format `{other}` is not one; give `json` or `jsonl`"
            )));
        }
        None => {
            let lines = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("ndjson") || v.contains("jsonl"));
            if lines {
                FileFormat::Lines
            } else {
                FileFormat::Json
            }
        }
    };
    let options = options(
        query.ttl.as_deref(),
        query.keep,
        query.keep_for.as_deref(),
        "api".to_owned(),
    )
    .map_err(ApiError::bad_request)?;
    // The tenant's quota of snapshot bytes, checked as the body comes in,
    // before the file holds more than it allows.
    let (store, asked) = (Arc::clone(api.engine.store()), caller.tenant.clone());
    let access = Arc::clone(&api.access);
    let room = blocking(move || {
        let quota = super::quota_of(store.as_ref(), &asked)?;
        if let Some(rate) = quota.deploys_per_second {
            access.take(&asked, "deploys_per_second", rate)?;
        }
        let Some(max) = quota.max_snapshot_bytes else {
            return Ok::<_, ApiError>(None);
        };
        let used: u64 = store
            .snapshots(None)?
            .iter()
            .filter(|s| tenant::of(&s.store) == asked)
            .map(|s| s.bytes)
            .sum();
        Ok(Some((max, used)))
    })
    .await??;
    // The body goes to a file, a chunk at a time.
    let mut file = tempfile::tempfile()
        .map_err(|e| ApiError::internal(format!("cannot make a temporary file: {e}")))?;
    let mut stream = body.into_data_stream();
    let mut size = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("the body broke off: {e}")))?;
        size += chunk.len() as u64;
        if let Some((max, used)) = room
            && used.saturating_add(size) > max
        {
            return Err(ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "storage_quota",
                format!(
                    "tenant `{}`'s snapshot revisions keep {used} bytes, and this file passes its quota `max_snapshot_bytes` of {max}; publish with a smaller `keep`, or ask for more",
                    caller.tenant
                ),
            ));
        }
        if size > MAX_SNAPSHOT {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("a snapshot file may be at most {MAX_SNAPSHOT} bytes"),
            ));
        }
        file.write_all(&chunk)
            .map_err(|e| ApiError::internal(format!("cannot write a temporary file: {e}")))?;
    }
    let services = api.services.clone();
    let tenant = caller.tenant.clone();
    let store_name = name.clone();
    let record = blocking(move || {
        use std::io::Seek as _;
        file.rewind()
            .map_err(|e| ApiError::internal(format!("cannot read a temporary file: {e}")))?;
        services
            .publish_snapshot(
                &tenant,
                &store_name,
                std::io::BufReader::with_capacity(1 << 16, file),
                format,
                "request body",
                &options,
            )
            .map_err(publish_error)
    })
    .await??;
    api.audit(
        &caller,
        "snapshot.publish",
        &name,
        json!({ "revision": record.revision, "digest": record.digest, "entries": record.entries }),
    )
    .await;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "snapshot": revision_json(&record) })),
    ))
}

/// A publish's error as the API answers it.
fn publish_error(error: PublishError) -> ApiError {
    match error {
        PublishError::Store(e) => e.into(),
        e @ PublishError::Duplicate { .. } => {
            ApiError::new(StatusCode::BAD_REQUEST, "duplicate_key", e.to_string())
        }
        e => ApiError::new(StatusCode::BAD_REQUEST, "invalid_snapshot", e.to_string()),
    }
}

/// `GET /v1/snapshots`: the tenant's stores, each with its newest
/// revision and how many it keeps.
pub(super) async fn list(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    caller.need(Right::Read)?;
    let engine = Arc::clone(&api.engine);
    let tenant = caller.tenant.clone();
    let stores = blocking(move || snapshots::stores(engine.store().as_ref(), &tenant)).await??;
    Ok(Json(json!({
        "snapshots": stores
            .iter()
            .map(|(newest, count)| {
                let mut shown = revision_json(newest);
                shown["revisions"] = json!(count);
                shown
            })
            .collect::<Vec<_>>(),
    })))
}

/// The query of a revision's entries.
#[derive(Debug, Deserialize)]
pub(super) struct ShowQuery {
    /// Only keys with this prefix.
    #[serde(default)]
    prefix: String,
    /// Keys after this one.
    after: Option<String>,
    /// At most this many (100 unless given; at most 1,000).
    limit: Option<usize>,
}

/// `GET /v1/snapshots/{name}`: the store's revisions, oldest first.
pub(super) async fn revisions(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.need(Right::Read)?;
    let engine = Arc::clone(&api.engine);
    let qualified = tenant::qualify(&caller.tenant, &name);
    let revisions = blocking(move || engine.store().snapshots(Some(&qualified))).await??;
    if revisions.is_empty() {
        return Err(no_store(&name));
    }
    Ok(Json(json!({
        "store": name,
        "revisions": revisions.iter().map(revision_json).collect::<Vec<_>>(),
    })))
}

fn no_store(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_snapshot",
        format!("no snapshot store `{name}`"),
    )
}

/// `GET /v1/snapshots/{name}/revisions/{revision}`: a revision with a page
/// of its entries (expired ones included, each with when it expires).
pub(super) async fn show(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path((name, revision)): Path<(String, u32)>,
    query: Result<Query<ShowQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.need(Right::Read)?;
    let Query(query) = query?;
    let engine = Arc::clone(&api.engine);
    let qualified = tenant::qualify(&caller.tenant, &name);
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let found = blocking(move || {
        let store = engine.store();
        let Some(record) = store
            .snapshots(Some(&qualified))?
            .into_iter()
            .find(|r| r.revision == revision)
        else {
            return Ok(None);
        };
        let entries =
            store.snapshot_entries(&record.data, query.after.as_deref(), &query.prefix, limit)?;
        Ok::<_, weft_store::StoreError>(Some((record, entries)))
    })
    .await??;
    let Some((record, entries)) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_snapshot",
            format!("snapshot store `{name}` has no revision {revision}"),
        ));
    };
    let next = (entries.len() == limit).then(|| entries.last().map(|(k, _)| k.clone()));
    Ok(Json(json!({
        "snapshot": revision_json(&record),
        "entries": entries
            .iter()
            .map(|(key, entry)| json!({
                "key": key,
                "value": serde_json::from_str::<Value>(&entry.value).unwrap_or(Value::Null),
                "expires_at": entry.expires_at,
            }))
            .collect::<Vec<_>>(),
        "next": next.flatten(),
    })))
}

/// The query of a diff.
#[derive(Debug, Deserialize)]
pub(super) struct DiffQuery {
    from: u32,
    to: u32,
    /// At most this many changes listed (1,000 unless given).
    limit: Option<usize>,
}

/// `GET /v1/snapshots/{name}/diff?from=N&to=M`: the keys added, removed
/// and changed from revision `from` to `to`, with their counts.
pub(super) async fn diff(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    query: Result<Query<DiffQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.need(Right::Read)?;
    let Query(query) = query?;
    let engine = Arc::clone(&api.engine);
    let tenant = caller.tenant.clone();
    let limit = query.limit.unwrap_or(1000).clamp(1, 100_000);
    let diff = blocking(move || {
        snapshots::diff(
            engine.store().as_ref(),
            &tenant,
            &name,
            query.from,
            query.to,
            limit,
        )
    })
    .await?
    .map_err(|e| match e {
        snapshots::DiffError::Store(e) => e.into(),
        e => ApiError::new(StatusCode::NOT_FOUND, "unknown_snapshot", e.to_string()),
    })?;
    Ok(Json(
        serde_json::to_value(diff).map_err(|e| ApiError::internal(e.to_string()))?,
    ))
}
