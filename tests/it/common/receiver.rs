//! A webhook receiver on loopback, for the tests of webhook delivery.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One request a webhook receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A webhook receiver on loopback: answers `status(n)` to its n-th request
/// (from 0), and keeps every request.
pub struct Receiver {
    pub url: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub fn start(status: impl Fn(usize) -> u16 + Send + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&got);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let mut reader = BufReader::new(stream);
                let mut headers = Vec::new();
                let mut length = 0;
                let mut line = String::new();
                reader.read_line(&mut line).unwrap_or(0);
                // A sender killed mid-request (the restart test) leaves
                // headers without their blank line: not a request.
                let mut whole = false;
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    if line.trim().is_empty() {
                        whole = true;
                        break;
                    }
                    if let Some((name, value)) = line.trim().split_once(':') {
                        if name.eq_ignore_ascii_case("content-length") {
                            length = value.trim().parse().unwrap_or(0);
                        }
                        headers.push((name.trim().to_owned(), value.trim().to_owned()));
                    }
                }
                let mut body = vec![0; length];
                if !whole || reader.read_exact(&mut body).is_err() {
                    continue;
                }
                let n = {
                    let mut got = kept.lock().unwrap();
                    got.push(Received { headers, body });
                    got.len() - 1
                };
                let code = status(n);
                let mut stream = reader.into_inner();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
            }
        });
        Self { url, got }
    }

    pub fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    pub fn wait_for(&self, n: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.got().len() < n {
            assert!(
                Instant::now() < deadline,
                "the receiver got {} requests, not {n}",
                self.got().len()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        self.got()
    }
}
