//! The API's listener: HTTP/1.1 over TCP or TLS, with hyper's timeouts and
//! a bound on connections, so clients that open connections and send
//! nothing, or half a header, cannot hold the host's descriptors.
//!
//! - A request's header must arrive within [`HEADER_TIMEOUT`] of the
//!   connection's opening or of the previous response (hyper's
//!   `header_read_timeout`, which also ends idle keep-alive connections).
//! - A TLS handshake must end within [`HEADER_TIMEOUT`].
//! - At most `max_connections` connections are open at once; more wait in
//!   the kernel's backlog until one closes.
//! - Each request carries its peer's address (`ConnectInfo<SocketAddr>`),
//!   which the token-less mode checks is loopback.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_service::Service as _;

/// How long a client has to send a request's header, from the opening of
/// its connection or the end of the previous response.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections open at once unless `--max-connections` says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How long open connections get to finish their requests when the server
/// stops.
const DRAIN: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until `stop` completes, then lets open
/// connections finish for a few seconds. With `tls`, every connection is
/// TLS (HTTP/1.1 by ALPN).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    max_connections: usize,
    stop: impl Future<Output = ()>,
) {
    let tls = tls.map(|config| {
        let mut config = (*config).clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    });
    let places = Arc::new(Semaphore::new(
        max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let graceful = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let place = tokio::select! {
            () = &mut stop => break,
            place = Arc::clone(&places).acquire_owned() => match place {
                Ok(place) => place,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // A connection its client gave up on: the next one.
                Err(e) if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionRefused
                ) => continue,
                Err(e) => {
                    // Out of descriptors or memory: wait for some to be
                    // given back rather than spin.
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _place = place;
            match tls {
                None => connection(stream, peer, router, watcher).await,
                Some(acceptor) => {
                    match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => connection(stream, peer, router, watcher).await,
                        Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN, graceful.shutdown()).await;
}

/// [`serve`] over plain HTTP with the default bounds, until the process
/// ends: an in-process host of `weft bench`.
pub async fn serve_plain(listener: TcpListener, router: Router) {
    serve(
        listener,
        router,
        None,
        DEFAULT_MAX_CONNECTIONS,
        std::future::pending(),
    )
    .await;
}

/// Serves one connection's requests, each told its peer.
async fn connection<S>(
    stream: S,
    peer: SocketAddr,
    router: Router,
    watcher: hyper_util::server::graceful::Watcher,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        router.clone().call(request)
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    // The timer first: hyper ignores a timeout it has no timer for.
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let served = watcher.watch(http.serve_connection(TokioIo::new(stream), service));
    if let Err(e) = served.await {
        tracing::debug!(%peer, "connection ended: {e}");
    }
}
