//! Who is asking, and what they may do: every request but `/v1/health`
//! and `/v1/openapi.json` is made by a [`Caller`], a tenant and a role.
//!
//! - With `Authorization: Bearer weft_<id>_<secret>`, the token's row
//!   (read from the store on every request, so a revocation holds at
//!   once) gives both. An unknown, malformed, revoked or expired token is
//!   `401` with a code saying which.
//! - Without a header, while auth is not required, the caller is the
//!   host's own: `admin` of tenant `default`. Auth is required once any
//!   token exists in the store, or from the start with `weft serve
//!   --auth`; `weft serve` refuses an address other than loopback without
//!   it.
//! - An `admin` acts in its token's tenant, or in the one named by the
//!   `Weft-Tenant` header.
//! - A token-less request made by a page of another site (`Origin`,
//!   `Sec-Fetch-Site`) is refused, and one addressed to a name other than
//!   `localhost` too: a page can neither send a request a token-less host
//!   obeys nor rebind a name of its own to the machine.
//!
//! A caller sees only its tenant's objects: another tenant's answer
//! `404`, as if they did not exist. A right the role lacks is `403`, and
//! only on the tenant's own objects.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest as _, Sha256};

use super::{Api, ApiError};
use weft_core::clock::Clock;
use weft_core::tenant;
use weft_store::{Right, Role, Store, StoreError, TokenRecord};

/// The header an admin names the tenant to act in with.
pub const TENANT_HEADER: &str = "weft-tenant";

/// Who made a request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The tenant it acts in.
    pub tenant: String,
    /// Its role there.
    pub role: Role,
    /// Its token's id, or `local` for a request without a token.
    pub actor: String,
    /// Its token, to check again while a stream is open.
    token: Option<TokenRecord>,
}

impl Caller {
    /// The caller as acting in `tenant`: how the audit log records what
    /// an admin did to another tenant's objects.
    pub fn in_tenant(&self, tenant: &str) -> Caller {
        let mut caller = self.clone();
        caller.tenant = tenant.to_owned();
        caller
    }

    /// `403 forbidden` unless the caller's role has `right`.
    pub fn need(&self, right: Right) -> Result<(), ApiError> {
        if self.role.grants(right) {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "role `{}` may not {}",
                self.role,
                match right {
                    Right::Read => "read",
                    Right::Operate => "start, cancel or answer runs, or ack and resend deliveries",
                    Right::Deploy =>
                        "deploy workflows and plugins, or manage schedules and subscriptions",
                    Right::Own => "manage tokens or read the audit log",
                    Right::Admin => "manage tenants, quotas or shared plugins",
                }
            ),
        ))
    }

    /// The stored name of the caller's `name`. A name that holds the
    /// tenant separator names nothing: `None`.
    pub fn name(&self, name: &str) -> Option<String> {
        (!name.contains(tenant::SEPARATOR)).then(|| tenant::qualify(&self.tenant, name))
    }

    /// Whether the stored name `stored` is the caller's tenant's.
    pub fn owns(&self, stored: &str) -> bool {
        tenant::of(stored) == self.tenant
    }
}

/// A tenant's bucket of starts, or of deployments.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The API's view of the access tables: whether auth is required, the
/// buckets of the starts quota, and a count of revocations that open
/// streams watch.
#[derive(Debug)]
pub struct Access {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    /// Set by `--auth`, or once a token is seen in the store; never unset.
    required: AtomicBool,
    /// One more on every revocation or tenant removal.
    revocations: AtomicU64,
    buckets: Mutex<HashMap<(String, &'static str), Bucket>>,
}

/// Why a token was refused: `401` with the code.
fn unauthorized(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, code, message)
}

/// `sha256:<hex>` of `token`.
pub fn hash(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let mut text = String::with_capacity(7 + 64);
    text.push_str("sha256:");
    for byte in digest {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

/// Compares two hashes without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// A new token: its id and the whole token, `weft_<id>_<secret>`. Both
/// halves come from the operating system's random source.
pub fn new_token() -> (String, String) {
    let (a, _) = uuid::Uuid::new_v4().as_u64_pair();
    let id = format!("{:012x}", a >> 16);
    let (b, c) = uuid::Uuid::new_v4().as_u64_pair();
    let (d, e) = uuid::Uuid::new_v4().as_u64_pair();
    let token = format!("weft_{id}_{b:016x}{c:016x}{d:016x}{e:016x}");
    (id, token)
}

impl Access {
    /// Access over `store`; auth is required once a token exists there.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            clock,
            required: AtomicBool::new(false),
            revocations: AtomicU64::new(0),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Requires a token on every request from now on.
    pub fn require(&self) {
        self.required.store(true, Ordering::SeqCst);
    }

    /// Whether a request needs a token: `--auth` was given, or a token
    /// exists in the store (written by this host or another).
    pub fn required(&self) -> Result<bool, StoreError> {
        if self.required.load(Ordering::SeqCst) {
            return Ok(true);
        }
        if self.store.tokens()?.is_empty() {
            return Ok(false);
        }
        self.required.store(true, Ordering::SeqCst);
        Ok(true)
    }

    /// How many revocations there have been: a stream checks its token
    /// again when this moves.
    pub fn revocations(&self) -> u64 {
        self.revocations.load(Ordering::SeqCst)
    }

    /// Counts a revocation, so that open streams check their tokens.
    pub fn revoked(&self) {
        self.revocations.fetch_add(1, Ordering::SeqCst);
    }

    /// The caller of a request with `headers`. Blocking: reads the store.
    pub fn caller(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let presented = match headers.get(header::AUTHORIZATION) {
            None => None,
            Some(value) => {
                let text = value.to_str().map_err(|_| {
                    unauthorized("malformed_token", "Authorization: the header is not text")
                })?;
                let token = text
                    .split_once(' ')
                    .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                    .map(|(_, token)| token)
                    .ok_or_else(|| {
                        unauthorized(
                            "malformed_token",
                            "Authorization: expected `Bearer <token>`",
                        )
                    })?;
                Some(token.trim().to_owned())
            }
        };
        let mut caller = match presented {
            None if self.required()? => {
                return Err(unauthorized(
                    "missing_token",
                    "this host requires a token: send `Authorization: Bearer <token>` (the CLI takes --token or WEFT_TOKEN)",
                ));
            }
            None => Caller {
                tenant: tenant::DEFAULT.to_owned(),
                role: Role::Admin,
                actor: "local".to_owned(),
                token: None,
            },
            Some(token) => {
                let record = self.check(&token)?;
                Caller {
                    tenant: record.tenant.clone(),
                    role: record.role,
                    actor: record.id.clone(),
                    token: Some(record),
                }
            }
        };
        if let Some(value) = headers.get(TENANT_HEADER) {
            let asked = value
                .to_str()
                .ok()
                .filter(|t| tenant::check(t).is_ok())
                .ok_or_else(|| {
                    ApiError::bad_request(format!("{TENANT_HEADER}: not a tenant's name"))
                })?;
            if asked != caller.tenant {
                if caller.role != Role::Admin {
                    return Err(ApiError::new(
                        StatusCode::FORBIDDEN,
                        "forbidden",
                        format!("only an admin may act in another tenant ({TENANT_HEADER})"),
                    ));
                }
                if !self.tenant_exists(asked)? {
                    return Err(ApiError::new(
                        StatusCode::NOT_FOUND,
                        "unknown_tenant",
                        format!("no tenant `{asked}`"),
                    ));
                }
                caller.tenant = asked.to_owned();
            }
        }
        Ok(caller)
    }

    /// The row of a presented token, if it is one that works now.
    fn check(&self, token: &str) -> Result<TokenRecord, ApiError> {
        let malformed = || {
            unauthorized(
                "malformed_token",
                "the token is not a weft token (`weft_<id>_<secret>`)",
            )
        };
        let rest = token.strip_prefix("weft_").ok_or_else(malformed)?;
        let (id, secret) = rest.split_once('_').ok_or_else(malformed)?;
        if id.is_empty() || secret.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(malformed());
        }
        let unknown = || unauthorized("unknown_token", "the token is not known here");
        let record = self.store.token(id)?.ok_or_else(unknown)?;
        if !same(&record.hash, &hash(token)) {
            return Err(unknown());
        }
        self.usable(&record)?;
        Ok(record)
    }

    /// `401` for a token that was revoked or has expired.
    fn usable(&self, record: &TokenRecord) -> Result<(), ApiError> {
        if let Some(at) = record.revoked_at {
            return Err(unauthorized(
                "revoked_token",
                format!("token `{}` was revoked at {at}", record.id),
            ));
        }
        if let Some(at) = record.expires_at
            && self.clock.now() >= at
        {
            return Err(unauthorized(
                "expired_token",
                format!("token `{}` expired at {at}", record.id),
            ));
        }
        if record.tenant != tenant::DEFAULT && !self.tenant_exists(&record.tenant)? {
            return Err(unauthorized(
                "revoked_token",
                format!(
                    "token `{}`'s tenant `{}` was removed",
                    record.id, record.tenant
                ),
            ));
        }
        Ok(())
    }

    /// Whether `caller`'s token still works: what an open stream asks
    /// when a token was revoked since it last looked, and as time passes.
    /// Blocking.
    pub fn still_valid(&self, caller: &Caller) -> bool {
        let Some(token) = &caller.token else {
            // A request without a token was let in while none was
            // required; once one is, its stream ends too.
            return self.required().is_ok_and(|required| !required);
        };
        match self.store.token(&token.id) {
            Ok(Some(record)) => self.usable(&record).is_ok(),
            Ok(None) => false,
            // A store that cannot be read ends the stream: its client
            // reconnects, and is checked again.
            Err(_) => false,
        }
    }

    /// Whether tenant `name` exists (`default` always does).
    pub fn tenant_exists(&self, name: &str) -> Result<bool, StoreError> {
        crate::services::tenant_exists(self.store.as_ref(), name)
    }

    /// Takes one start from `tenant`'s bucket, which refills at `rate`
    /// per second and holds one second's worth; `429 quota_exceeded`,
    /// with the seconds to wait, when it is empty.
    pub fn take_start(&self, tenant: &str, rate: u32) -> Result<(), ApiError> {
        self.take(tenant, "starts_per_second", rate)
    }

    /// [`take_start`](Self::take_start) for the bucket of `tenant`'s quota
    /// `quota` (`starts_per_second`, `deploys_per_second`).
    pub fn take(&self, tenant: &str, quota: &'static str, rate: u32) -> Result<(), ApiError> {
        let rate = f64::from(rate.max(1));
        let now = Instant::now();
        let mut buckets = weft_core::lock(&self.buckets);
        let bucket = buckets.entry((tenant.to_owned(), quota)).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        let refill = now.duration_since(bucket.at).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + refill).min(rate);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = ((1.0 - bucket.tokens) / rate).ceil().max(1.0);
        let mut error = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "quota_exceeded",
            format!("tenant `{tenant}` is over its quota `{quota}` ({rate}); retry after {wait} s"),
        );
        error.retry_after = Some(wait as u64);
        Err(error)
    }
}

/// Finds the caller of every request but the open routes, and keeps it in
/// the request's extensions for the handlers.
pub(super) async fn authenticate(
    State(api): State<Api>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if path == "/v1/health"
        || path == "/v1/openapi.json"
        || path == "/"
        || path == "/favicon.ico"
        || path.starts_with("/ui/")
    {
        return next.run(request).await;
    }
    let access = Arc::clone(&api.access);
    let headers = request.headers().clone();
    let caller = match super::blocking(move || access.caller(&headers)).await {
        Ok(Ok(caller)) => caller,
        Ok(Err(e)) | Err(e) => return e.into_response(),
    };
    // A token is sent by whoever holds it; no credential comes with a
    // token-less request, so a browser could send one for any page.
    if caller.token.is_none() {
        let addressed = addressed_to(&request);
        let peer = request
            .extensions()
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|info| info.0);
        let checked = not_forwarded(request.headers())
            .and_then(|()| from_loopback(peer))
            .and_then(|()| addressed_locally(addressed.as_deref()))
            .and_then(|()| same_origin(request.headers(), addressed.as_deref()));
        if let Err(e) = checked {
            return e.into_response();
        }
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// The authority a request was sent to: its `Host` header, or the URI's
/// (HTTP/2), if it names one.
fn addressed_to(request: &Request) -> Option<String> {
    request
        .headers()
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()))
}

/// Refuses a request a web page of another site made. A browser names
/// the page's origin in `Origin` on every cross-origin request and every
/// `POST`, and says in `Sec-Fetch-Site` whose page made a request (on
/// those to `localhost` and IP addresses, where a token-less host
/// listens, GETs included). Without this a page could make a token-less
/// host deploy a workflow or cancel a run (a form or a `no-cors` fetch
/// sends a body-less or `text/plain` `POST` without asking first), or take
/// a consumer's deliveries with an `<img>`'s GET. Clients that are not
/// browsers send neither header.
fn same_origin(headers: &HeaderMap, addressed: Option<&str>) -> Result<(), ApiError> {
    let refused = |what: String| {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            format!(
                "{what}: the request was made by a page of another site, and this host ({}) has no tokens; the API answers only its own pages and clients that are not browsers",
                addressed.unwrap_or("no Host header")
            ),
        )
    };
    if let Some(site) = headers.get("sec-fetch-site")
        && !matches!(site.as_bytes(), b"same-origin" | b"none")
    {
        return Err(refused(format!(
            "Sec-Fetch-Site: {}",
            site.to_str().unwrap_or("(not text)")
        )));
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("(not text)");
    let authority = |scheme: &str, authority: &str| {
        let default = if scheme == "https" { ":443" } else { ":80" };
        let authority = authority.to_ascii_lowercase();
        match authority.strip_suffix(default) {
            Some(bare) => bare.to_owned(),
            None => authority,
        }
    };
    let matches = origin.split_once("://").is_some_and(|(scheme, rest)| {
        addressed.is_some_and(|addressed| authority(scheme, rest) == authority(scheme, addressed))
    });
    if matches {
        return Ok(());
    }
    Err(refused(format!("Origin: {origin}")))
}

/// Refuses a token-less request that a proxy passed on (`Forwarded`,
/// `X-Forwarded-*`): behind a proxy on this machine, every visitor of the
/// proxy would be an admin.
fn not_forwarded(headers: &HeaderMap) -> Result<(), ApiError> {
    let forwarded = headers.keys().find(|name| {
        let name = name.as_str();
        name == "forwarded" || name.starts_with("x-forwarded-")
    });
    match forwarded {
        None => Ok(()),
        Some(name) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forwarded",
            format!(
                "{name}: the request came through a proxy, and a host without tokens answers only clients on this machine; make a token (`weft tokens create`) and serve with --auth"
            ),
        )),
    }
}

/// Refuses a token-less request whose peer is not on this machine's
/// loopback, or whose peer is unknown.
fn from_loopback(peer: Option<std::net::SocketAddr>) -> Result<(), ApiError> {
    match peer {
        Some(peer) if peer.ip().to_canonical().is_loopback() => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "not_local",
            "a host without tokens answers only clients on this machine's loopback; make a token (`weft tokens create`) and serve with --auth",
        )),
    }
}

/// Refuses a token-less request not addressed to `localhost`, `127.0.0.1`
/// or `[::1]` (any port): a web page can point a name of its own at this
/// machine (DNS rebinding) and so be of the same origin as the API, and a
/// proxy names what it was asked for.
fn addressed_locally(addressed: Option<&str>) -> Result<(), ApiError> {
    let refused = |what: &str| {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "not_local",
            format!(
                "Host: {what}: a host without tokens answers only requests addressed to localhost, 127.0.0.1 or [::1], since a web page can point a name at this machine; use one, or make a token (`weft tokens create`)"
            ),
        )
    };
    let Some(addressed) = addressed else {
        return Err(refused("(none)"));
    };
    let name = match addressed.rsplit_once(':') {
        Some((name, port)) if !name.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => addressed,
    };
    if matches!(
        name.to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "[::1]"
    ) {
        return Ok(());
    }
    Err(refused(addressed))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use axum::http::HeaderValue;

    fn origin(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ORIGIN, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn only_the_hosts_own_origin_or_none_passes() {
        assert!(same_origin(&HeaderMap::new(), Some("127.0.0.1:8080")).is_ok());
        assert!(same_origin(&HeaderMap::new(), None).is_ok());
        for (sent, to) in [
            ("http://127.0.0.1:8080", "127.0.0.1:8080"),
            ("https://Weft.Example", "weft.example:443"),
            ("http://weft.example:80", "weft.example"),
            ("http://[::1]:9000", "[::1]:9000"),
        ] {
            assert!(same_origin(&origin(sent), Some(to)).is_ok(), "{sent} {to}");
        }
        for (sent, to) in [
            ("http://127.0.0.1:8081", Some("127.0.0.1:8080")),
            ("https://evil.example", Some("127.0.0.1:8080")),
            ("null", Some("127.0.0.1:8080")),
            ("http://127.0.0.1:8080", None),
            ("https://weft.example:80", Some("weft.example")),
        ] {
            let refused = same_origin(&origin(sent), to).unwrap_err();
            assert_eq!(
                (refused.status, refused.code),
                (StatusCode::FORBIDDEN, "cross_origin")
            );
            assert!(refused.message.contains(sent), "{}", refused.message);
        }
    }

    #[test]
    fn a_request_another_sites_page_made_is_refused_even_without_origin() {
        let fetched = |site: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("sec-fetch-site", HeaderValue::from_str(site).unwrap());
            same_origin(&headers, Some("127.0.0.1:8080"))
        };
        assert!(fetched("same-origin").is_ok());
        assert!(fetched("none").is_ok(), "typed in the address bar");
        for site in ["cross-site", "same-site", "something-new"] {
            let refused = fetched(site).unwrap_err();
            assert_eq!(refused.code, "cross_origin");
            assert!(refused.message.contains(site), "{}", refused.message);
        }
        // The host's own page, fetching.
        let mut headers = origin("http://127.0.0.1:8080");
        headers.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(same_origin(&headers, Some("127.0.0.1:8080")).is_ok());
    }

    #[test]
    fn a_token_less_request_must_name_localhost_or_a_loopback_address() {
        for to in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "[::1]",
            "LocalHost:8080",
            "localhost",
        ] {
            assert!(addressed_locally(Some(to)).is_ok(), "{to:?}");
        }
        assert_eq!(addressed_locally(None).unwrap_err().code, "not_local");
        for to in [
            "10.1.2.3",
            "app.localhost",
            "127.0.0.2:8080",
            "evil.example:8080",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io:8080",
            "[evil.example]:8080",
        ] {
            let refused = addressed_locally(Some(to)).unwrap_err();
            assert_eq!(refused.code, "not_local");
            assert!(refused.message.contains(to), "{}", refused.message);
        }
    }

    #[test]
    fn a_token_less_request_must_come_from_loopback_and_not_through_a_proxy() {
        assert!(from_loopback(Some("127.0.0.1:5000".parse().unwrap())).is_ok());
        assert!(from_loopback(Some("[::1]:5000".parse().unwrap())).is_ok());
        assert!(from_loopback(Some("[::ffff:127.0.0.1]:5000".parse().unwrap())).is_ok());
        assert!(from_loopback(Some("10.0.0.7:5000".parse().unwrap())).is_err());
        assert!(from_loopback(None).is_err());
        assert!(not_forwarded(&HeaderMap::new()).is_ok());
        for name in [
            "forwarded",
            "x-forwarded-for",
            "x-forwarded-host",
            "X-Forwarded-Proto",
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_static("1.2.3.4"),
            );
            let refused = not_forwarded(&headers).unwrap_err();
            assert_eq!(refused.code, "forwarded");
        }
    }
}
