//! Outgoing HTTP (`wasi:http/outgoing-handler`), behind the step's grants.
//!
//! wasmtime-wasi-http parses what the guest asks for and hands each request
//! to [`HttpHooks::send_request`]. The hooks, not the crate, then decide and
//! connect:
//!
//! 1. the request is counted against the call's limit of requests;
//! 2. its URL is checked against the step's grants and the tenant's policy
//!    ([`Egress::allow`]);
//! 3. the host name is resolved here, and *every* address it resolves to is
//!    checked ([`Egress::allow_ip`]) before one is connected to, so a name
//!    cannot be rebound to a private address between check and connect;
//! 4. the connection is made to that address (TLS with the name as SNI,
//!    against the webpki roots), with timeouts inside the call's deadline;
//! 5. the response body is metered against the call's byte limit, and its
//!    headers are charged to the call's budget of host-held bytes.
//!
//! Header maps a guest makes (`fields`) are charged to that budget too, for
//! the most a map may hold ([`FIELDS_BYTES`]), as they are made
//! ([`add_fields_to_linker`]): without it, a guest could make the host
//! hold a million maps.
//!
//! wasi:http does not follow redirects: each hop is a new request through
//! the same hooks, checked the same way. Every request, refused or not, is
//! recorded ([`HttpCall`]); a refused one, or one over a limit, also fails
//! the call (`http_denied`, `http_limit`) whatever the guest does next.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi_http::FieldMap;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::p2::bindings::http::types::{self, HostFields};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};
use weft_core::HttpCall;
use weft_core::egress::{Denied, Egress, Target};

use crate::budget::HostBytes;
use crate::sandbox::StepState;

/// What one call may do over HTTP, beyond where it may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Requests per call, redirects included. Default: 32.
    pub max_requests: u32,
    /// Response body bytes per call, all requests together. Default: 16 MiB.
    pub max_response_bytes: u64,
    /// The longest a connection (DNS, TCP and TLS) may take. Default: 10 s.
    pub connect_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_requests: 32,
            max_response_bytes: 16 << 20,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Why a call must fail because of what it did over HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Violation {
    /// A request was refused by the egress check.
    Denied(String),
    /// A request went past a limit of the call.
    Limit(String),
}

/// One request in flight or done.
#[derive(Debug)]
struct Entry {
    method: String,
    url: String,
    started: Instant,
    status: Mutex<Option<u16>>,
    bytes: AtomicU64,
    ended: Mutex<Option<Instant>>,
    error: Mutex<Option<String>>,
}

impl Entry {
    fn fail(&self, error: String) {
        *weft_core::lock(&self.error) = Some(error);
        self.end();
    }

    fn end(&self) {
        weft_core::lock(&self.ended).get_or_insert_with(Instant::now);
    }
}

/// What the requests of one call share with the tasks that carry them.
#[derive(Debug, Default)]
struct Shared {
    entries: Mutex<Vec<Arc<Entry>>>,
    violation: Mutex<Option<Violation>>,
    bytes: AtomicU64,
}

impl Shared {
    fn violate(&self, violation: Violation) {
        weft_core::lock(&self.violation).get_or_insert(violation);
    }
}

/// The most bytes of names and values a header map a guest makes may hold
/// (wasmtime-wasi-http's `field_size_limit`; its default is 128 KiB). As
/// large as Node's limit on a request's whole header section.
pub(crate) const FIELDS_BYTES: usize = 16 << 10;

/// What a header map costs the call's budget: what it may hold, and the
/// map itself.
const FIELDS_CHARGE: usize = FIELDS_BYTES + 256;

/// What one header costs the host beyond its name and value.
const PER_HEADER: usize = 48;

/// The hooks of one call's store.
pub(crate) struct HttpHooks {
    egress: Arc<Egress>,
    /// The call's budget of host-held bytes, charged for response headers.
    held: Option<HostBytes>,
    limits: HttpLimits,
    deadline: Instant,
    shared: Arc<Shared>,
    /// Set on every request that has none: the W3C trace context of the
    /// attempt.
    traceparent: Option<http::HeaderValue>,
}

impl std::fmt::Debug for HttpHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpHooks")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl HttpHooks {
    /// Hooks for a call that ends by `deadline`; without `egress` (no
    /// grant), every request is refused.
    pub(crate) fn new(egress: Option<Arc<Egress>>, limits: HttpLimits, deadline: Instant) -> Self {
        Self {
            egress: egress.unwrap_or_else(|| {
                Arc::new(Egress::new(
                    Vec::new(),
                    weft_core::egress::Policy::Unbounded,
                ))
            }),
            held: None,
            limits,
            deadline,
            shared: Arc::default(),
            traceparent: None,
        }
    }

    /// The same hooks, charging response headers to `held`.
    pub(crate) fn charging(self, held: HostBytes) -> Self {
        Self {
            held: Some(held),
            ..self
        }
    }

    /// The same hooks, setting `traceparent` on each request that has none.
    pub(crate) fn tracing(self, traceparent: Option<String>) -> Self {
        let traceparent = traceparent.and_then(|t| http::HeaderValue::from_str(&t).ok());
        Self {
            traceparent,
            ..self
        }
    }

    /// The call's requests, in the order they were made, and whether one of
    /// them must fail the call.
    pub(crate) fn finish(&self) -> (Vec<HttpCall>, Option<Violation>) {
        let now = Instant::now();
        let calls = weft_core::lock(&self.shared.entries)
            .iter()
            .map(|entry| {
                let ended = (*weft_core::lock(&entry.ended)).unwrap_or(now);
                HttpCall {
                    method: entry.method.clone(),
                    url: entry.url.clone(),
                    status: *weft_core::lock(&entry.status),
                    bytes: entry.bytes.load(Ordering::Relaxed),
                    duration_ms: u64::try_from(ended.duration_since(entry.started).as_millis())
                        .unwrap_or(u64::MAX),
                    error: weft_core::lock(&entry.error).clone(),
                }
            })
            .collect();
        (calls, weft_core::lock(&self.shared.violation).clone())
    }

    fn refuse(entry: &Entry, shared: &Shared, denied: &Denied) -> ResponseFuture {
        let message = denied.to_string();
        entry.fail(format!("http_denied: {message}"));
        shared.violate(Violation::Denied(message));
        Box::new(async { Err(Error::HttpRequestDenied) })
    }

    /// Records `request` and checks it before anything leaves: the call's
    /// limit of requests, its URL against the grants and the tenant's
    /// policy ([`Egress::allow`]). Answers where it goes, with its record,
    /// and leaves it in origin form; or the refusal the guest gets.
    fn check(
        &self,
        request: &mut http::Request<WasiBody>,
    ) -> Result<(Target, Arc<Entry>), ResponseFuture> {
        let uri = request.uri().clone();
        let method = request.method().as_str().to_owned();
        let target = uri
            .authority()
            .ok_or_else(|| "the URL names no host".to_owned())
            .and_then(|authority| {
                if authority.as_str().contains('@') {
                    return Err("URLs with user information are refused".to_owned());
                }
                Target::new(
                    &method,
                    uri.scheme_str().unwrap_or("https"),
                    authority.host(),
                    authority.port_u16(),
                    uri.path_and_query().map_or("/", |p| p.as_str()),
                )
            });
        let entry = Arc::new(Entry {
            method: method.clone(),
            url: target
                .as_ref()
                .map_or_else(|_| without_query(&uri), Target::redacted_url),
            started: Instant::now(),
            status: Mutex::new(None),
            bytes: AtomicU64::new(0),
            ended: Mutex::new(None),
            error: Mutex::new(None),
        });
        let shared = self.shared.clone();
        let count = {
            let mut entries = weft_core::lock(&shared.entries);
            entries.push(entry.clone());
            entries.len()
        };
        if count > usize::try_from(self.limits.max_requests).unwrap_or(usize::MAX) {
            let message = format!(
                "{method} {}: the call made more than {} requests",
                entry.url, self.limits.max_requests
            );
            entry.fail(format!("http_limit: {message}"));
            shared.violate(Violation::Limit(message));
            return Err(Box::new(async { Err(Error::ConnectionLimitReached) }));
        }
        let target = match target {
            Ok(target) => target,
            Err(reason) => {
                return Err(Self::refuse(
                    &entry,
                    &shared,
                    &Denied {
                        request: format!("{method} {}", entry.url),
                        reason,
                    },
                ));
            }
        };
        if let Err(denied) = self.egress.allow(&target) {
            return Err(Self::refuse(&entry, &shared, &denied));
        }

        // The request leaves in origin form, to the address `connect` checks.
        let path = uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
        match path.parse() {
            Ok(origin) => *request.uri_mut() = origin,
            Err(_) => {
                entry.fail("the path is not a valid URI".to_owned());
                return Err(Box::new(async { Err(Error::HttpRequestUriInvalid) }));
            }
        }
        Ok((target, entry))
    }
}

type ResponseFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

impl WasiHttpHooks for HttpHooks {
    /// The most one write to an outgoing body's stream may hold. The
    /// channel of such a body holds two writes that the host has not
    /// charged yet: of an HTTP handler's response, before the reading
    /// starts. 64 KiB keeps that small.
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        64 << 10
    }

    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> ResponseFuture {
        if let Some(traceparent) = &self.traceparent {
            request
                .headers_mut()
                .entry("traceparent")
                .or_insert_with(|| traceparent.clone());
        }
        let (target, entry) = match self.check(&mut request) {
            Ok(checked) => checked,
            Err(refused) => return refused,
        };
        let shared = self.shared.clone();
        let egress = Arc::clone(&self.egress);
        let budget = self.limits.max_response_bytes;
        let held = self.held.clone();
        let deadline = self.deadline;
        let options = options.unwrap_or_default();
        let connect_timeout = options
            .connect_timeout
            .unwrap_or(self.limits.connect_timeout)
            .min(self.limits.connect_timeout);
        let first_byte = options.first_byte_timeout;
        let between_bytes = options.between_bytes_timeout;
        let host = target.host.lookup_name();
        Box::new(async move {
            let outcome = async {
                let within = |limit: Option<Duration>| {
                    let left = deadline.saturating_duration_since(Instant::now());
                    limit.map_or(left, |limit| limit.min(left))
                };
                let connect_by = Instant::now() + within(Some(connect_timeout));
                let stream = connect(&target, &host, &egress, &shared, connect_by).await?;
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .map_err(|e| (Error::Hyper(e), "HTTP handshake failed".to_owned()))?;
                let driver = wasmtime_wasi::runtime::spawn(connection);
                let response =
                    tokio::time::timeout(within(first_byte), sender.send_request(request))
                        .await
                        .map_err(|_| {
                            (
                                Error::ConnectionReadTimeout,
                                "no response in time".to_owned(),
                            )
                        })?
                        .map_err(|e| (Error::Hyper(e), "the request failed".to_owned()))?;
                *weft_core::lock(&entry.status) = Some(response.status().as_u16());
                admit(&response, &entry, &shared, held.as_ref(), budget)?;
                let (parts, body) = response.into_parts();
                let metered = Metered {
                    inner: body,
                    entry: entry.clone(),
                    shared: shared.clone(),
                    budget,
                    deadline: Box::pin(tokio::time::sleep_until(deadline.into())),
                    between_bytes,
                    idle: between_bytes.map(|limit| Box::pin(tokio::time::sleep(limit))),
                };
                let response = http::Response::from_parts(parts, metered.boxed_unsync());
                let driver: Box<dyn Future<Output = Result<(), Error>> + Send> =
                    Box::new(async move { driver.await.map_err(Error::Hyper) });
                Ok((response, driver))
            }
            .await;
            outcome.map_err(|(error, message)| {
                entry.fail(message);
                error
            })
        })
    }
}

/// The `wasi:http/types` interface wasmtime-wasi-http links (every 0.2.x
/// import a guest makes resolves to it). It moves with the crate's WIT:
/// `hostile::header_maps_a_step_makes_are_charged_to_its_call` fails if
/// it no longer names the crate's interface.
const TYPES: &str = "wasi:http/types@0.2.12";

/// Links the `fields` functions that make a header map again, over what
/// wasmtime-wasi-http linked, so that each map made is charged to the
/// call's budget ([`FIELDS_CHARGE`]) before it is made; past it, the call
/// stops as the function returns, and fails `resource_limit`. A map is not
/// given back when the guest drops it: a call that makes and drops
/// thousands of maps is refused as one that keeps them. Must come after
/// the crate's own linking.
pub(crate) fn add_fields_to_linker(linker: &mut Linker<StepState>) -> wasmtime::Result<()> {
    fn charge(state: &StepState) {
        // A refusal sets the budget's `over`: the call hook stops the call
        // as this host call returns.
        let _ = state.held.charge("a header map", FIELDS_CHARGE);
    }
    linker.allow_shadowing(true);
    let linked = (|| {
        let mut instance = linker.instance(TYPES)?;
        instance.func_wrap(
            "[constructor]fields",
            |mut store: wasmtime::StoreContextMut<'_, StepState>, (): ()| {
                charge(store.data());
                Ok((HostFields::new(&mut store.data_mut().http())?,))
            },
        )?;
        instance.func_wrap(
            "[static]fields.from-list",
            |mut store: wasmtime::StoreContextMut<'_, StepState>,
             (entries,): (Vec<(String, Vec<u8>)>,)| {
                charge(store.data());
                let made = HostFields::from_list(&mut store.data_mut().http(), entries);
                Ok((header_result(made)?,))
            },
        )?;
        instance.func_wrap(
            "[method]fields.clone",
            |mut store: wasmtime::StoreContextMut<'_, StepState>,
             (fields,): (Resource<FieldMap>,)| {
                charge(store.data());
                Ok((HostFields::clone(&mut store.data_mut().http(), fields)?,))
            },
        )?;
        Ok(())
    })();
    linker.allow_shadowing(false);
    linked
}

/// A header function's answer as the guest gets it: its error, or a trap.
fn header_result<T>(
    result: wasmtime_wasi_http::p2::HeaderResult<T>,
) -> wasmtime::Result<Result<T, types::HeaderError>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(error) => error.downcast().map(Err),
    }
}

/// Why a request failed: the error the guest sees, and the message its
/// record keeps.
type Failure = (Error, String);

/// Resolves `host` (the name of `target`), checks every address it
/// resolves to against `egress`, and connects to the first, with TLS for
/// `https`, all by `connect_by`. A refused address fails the call
/// (`http_denied`), whatever the guest does next.
async fn connect(
    target: &Target,
    host: &str,
    egress: &Egress,
    shared: &Shared,
    connect_by: Instant,
) -> Result<Box<dyn Stream>, Failure> {
    let addrs: Vec<SocketAddr> = tokio::time::timeout_at(
        connect_by.into(),
        tokio::net::lookup_host((host, target.port)),
    )
    .await
    .map_err(|_| (Error::DnsTimeout, "name lookup timed out".to_owned()))?
    .map_err(|e| {
        (
            Error::DnsError {
                rcode: None,
                info_code: None,
            },
            format!("cannot resolve `{host}`: {e}"),
        )
    })?
    .collect();
    if let Err(denied) = egress.allow_addrs(target, addrs.iter().map(SocketAddr::ip)) {
        let message = denied.to_string();
        shared.violate(Violation::Denied(message.clone()));
        return Err((
            Error::DestinationIpProhibited,
            format!("http_denied: {message}"),
        ));
    }
    let addr = addrs.first().ok_or((
        Error::DestinationNotFound,
        format!("`{host}` resolves to no address"),
    ))?;
    let tcp = tokio::time::timeout_at(connect_by.into(), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| {
            (
                Error::ConnectionTimeout,
                format!("connecting to {addr} timed out"),
            )
        })?
        .map_err(|e| {
            (
                Error::ConnectionRefused,
                format!("cannot connect to {addr}: {e}"),
            )
        })?;
    let stream: Box<dyn Stream> = match target.scheme {
        weft_core::egress::Scheme::Http => Box::new(tcp),
        weft_core::egress::Scheme::Https => {
            let name = server_name(host).map_err(|e| (Error::TlsProtocolError, e))?;
            let config = tls_config().map_err(|e| (Error::TlsProtocolError, e))?;
            let tls = tokio::time::timeout_at(
                connect_by.into(),
                tokio_rustls::TlsConnector::from(config).connect(name, tcp),
            )
            .await
            .map_err(|_| {
                (
                    Error::ConnectionTimeout,
                    "TLS handshake timed out".to_owned(),
                )
            })?
            .map_err(|e| {
                (
                    Error::TlsCertificateError,
                    format!("TLS with `{host}` failed: {e}"),
                )
            })?;
            Box::new(tls)
        }
    };
    Ok(stream)
}

/// Whether the call takes `response` to `entry`: its headers are charged
/// to the call's budget of host-held bytes (`held`), and a body it
/// declares longer than what is left of `budget` fails the call
/// (`http_limit`) before a byte of it is read.
fn admit(
    response: &http::Response<Incoming>,
    entry: &Entry,
    shared: &Shared,
    held: Option<&HostBytes>,
    budget: u64,
) -> Result<(), Failure> {
    // Kept until the call ends: the guest reads them when it
    // likes. Past the budget, the call stops as its next host
    // call returns.
    if let Some(held) = held {
        let weight = response
            .headers()
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + PER_HEADER)
            .sum();
        if let Err(message) = held.charge(
            &format!("the response headers of {} {}", entry.method, entry.url),
            weight,
        ) {
            return Err((
                Error::HttpResponseHeaderSectionSize(None),
                format!("resource_limit: {message}"),
            ));
        }
    }
    let declared = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let left = budget.saturating_sub(shared.bytes.load(Ordering::Relaxed));
    let status = response.status();
    let bodyless = entry.method == "HEAD"
        || status.is_informational()
        || status == http::StatusCode::NO_CONTENT
        || status == http::StatusCode::NOT_MODIFIED;
    if !bodyless && declared.is_some_and(|declared| declared > left) {
        let message = format!(
            "{} {}: the response declares {} bytes, over the {budget} the call may read",
            entry.method,
            entry.url,
            declared.unwrap_or_default()
        );
        shared.violate(Violation::Limit(message.clone()));
        return Err((
            Error::HttpResponseBodySize(Some(left)),
            format!("http_limit: {message}"),
        ));
    }
    Ok(())
}

/// A connection, plain or TLS.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Stream for T {}

/// The URI without user information or query, for the record of a request
/// that could not be parsed further.
fn without_query(uri: &http::Uri) -> String {
    let host = uri.authority().map_or("", |a| {
        a.as_str()
            .rsplit_once('@')
            .map_or(a.as_str(), |(_, host)| host)
    });
    format!(
        "{}://{host}{}",
        uri.scheme_str().unwrap_or("https"),
        uri.path()
    )
}

fn server_name(host: &str) -> Result<rustls::pki_types::ServerName<'static>, String> {
    rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| format!("`{host}` is not a TLS server name: {e}"))
}

/// The TLS client configuration: the webpki roots, with ring, TLS 1.2 and
/// 1.3. Built once.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map(|builder| Arc::new(builder.with_root_certificates(roots).with_no_client_auth()))
            .map_err(|e| format!("cannot configure TLS: {e}"))
        })
        .clone()
}

/// A response body that counts what the guest reads against the call's
/// budget, and ends with an error past it, at the call's deadline, or after
/// `between_bytes` without data.
struct Metered {
    inner: Incoming,
    entry: Arc<Entry>,
    shared: Arc<Shared>,
    budget: u64,
    deadline: Pin<Box<tokio::time::Sleep>>,
    between_bytes: Option<Duration>,
    idle: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Body for Metered {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = u64::try_from(data.len()).unwrap_or(u64::MAX);
                    this.entry.bytes.fetch_add(n, Ordering::Relaxed);
                    let total = this.shared.bytes.fetch_add(n, Ordering::Relaxed) + n;
                    if total > this.budget {
                        let message = format!(
                            "{} {}: the call read more than {} response bytes",
                            this.entry.method, this.entry.url, this.budget
                        );
                        this.entry.fail(format!("http_limit: {message}"));
                        this.shared.violate(Violation::Limit(message));
                        return Poll::Ready(Some(Err(Error::HttpResponseBodySize(Some(
                            this.budget,
                        )))));
                    }
                }
                if let (Some(limit), Some(idle)) = (this.between_bytes, this.idle.as_mut()) {
                    idle.as_mut().reset(tokio::time::Instant::now() + limit);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.entry.fail(format!("reading the response failed: {e}"));
                Poll::Ready(Some(Err(Error::Hyper(e))))
            }
            Poll::Ready(None) => {
                this.entry.end();
                Poll::Ready(None)
            }
            Poll::Pending => {
                if this.deadline.as_mut().poll(cx).is_ready() {
                    this.entry
                        .fail("the step's deadline passed while reading the response".to_owned());
                    return Poll::Ready(Some(Err(Error::ConnectionReadTimeout)));
                }
                if let Some(idle) = this.idle.as_mut()
                    && idle.as_mut().poll(cx).is_ready()
                {
                    this.entry
                        .fail("no response bytes within the between-bytes timeout".to_owned());
                    return Poll::Ready(Some(Err(Error::ConnectionReadTimeout)));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_keeps_no_user_information_or_query() {
        let uri: http::Uri = "https://user:s3cret@x.org:8443/a/b?token=t"
            .parse()
            .unwrap();
        assert_eq!(without_query(&uri), "https://x.org:8443/a/b");
    }
}
