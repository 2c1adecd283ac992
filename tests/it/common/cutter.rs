//! A TCP proxy in front of PostgreSQL that now and then closes a
//! connection as the server answers `COMMIT`, before the answer reaches
//! the client: the transaction is stored, and the client is told its
//! connection failed. An ambiguous commit, as a network that fails at the
//! wrong moment makes one; the server cannot be made to do it on demand.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What the proxy's threads share.
#[derive(Default)]
struct Counts {
    /// Whether it cuts yet.
    armed: AtomicBool,
    /// `COMMIT` answers seen armed, cut ones included.
    commits: AtomicU64,
    /// `COMMIT` answers cut.
    cuts: AtomicU64,
}

/// The proxy: it runs until the test process ends.
pub struct CommitCutter {
    /// The loopback port it listens on.
    pub port: u16,
    counts: Arc<Counts>,
}

impl CommitCutter {
    /// Listens on a free loopback port in front of `upstream`
    /// (`host:port`); once armed, it cuts the connection at one `COMMIT`
    /// answer in `every`.
    pub fn start(upstream: &str, every: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let counts = Arc::new(Counts::default());
        let (upstream, shared) = (upstream.to_owned(), Arc::clone(&counts));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (mut from_client, mut to_server) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from_client, &mut to_server);
                    let _ = to_server.shutdown(Shutdown::Both);
                });
                let counts = Arc::clone(&shared);
                std::thread::spawn(move || answers(server, client, every, &counts));
            }
        });
        Self { port, counts }
    }

    /// From now on, cuts (a host's start-up, which does not try its
    /// commits again, goes through whole before).
    pub fn arm(&self) {
        self.counts.armed.store(true, Ordering::SeqCst);
    }

    /// How many `COMMIT` answers passed through it armed, cut ones
    /// included.
    pub fn commits(&self) -> u64 {
        self.counts.commits.load(Ordering::SeqCst)
    }

    /// How many it cut.
    pub fn cuts(&self) -> u64 {
        self.counts.cuts.load(Ordering::SeqCst)
    }
}

/// Passes the server's messages on to the client, one by one (a type
/// byte, then a length that counts itself), until it cuts at a `COMMIT`
/// answer or either side goes.
fn answers(mut server: TcpStream, mut client: TcpStream, every: u64, counts: &Counts) {
    let mut header = [0u8; 5];
    while server.read_exact(&mut header).is_ok() {
        let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        let mut body = vec![0; (length as usize).saturating_sub(4)];
        if server.read_exact(&mut body).is_err() {
            break;
        }
        // CommandComplete with the tag `COMMIT`.
        if header[0] == b'C' && body == b"COMMIT\0" && counts.armed.load(Ordering::SeqCst) {
            let n = counts.commits.fetch_add(1, Ordering::SeqCst) + 1;
            if n.is_multiple_of(every) {
                counts.cuts.fetch_add(1, Ordering::SeqCst);
                break;
            }
        }
        if client.write_all(&header).is_err() || client.write_all(&body).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
}
