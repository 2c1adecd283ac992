//! An HTTP handler that knows nothing of weft: it exports
//! `wasi:http/incoming-handler` and answers by path.
//!
//! - `/echo`: 200, JSON: the method, the path, the `x-` and `weft-`
//!   headers, and the body as text.
//! - `/status/N`: status N, a text body.
//! - `/flaky`: 503 before the step's third attempt (the `weft-attempt`
//!   header), then 200.
//! - `/big/N`: N MiB of text, written in 64 KiB pieces; it stops at the
//!   first write that fails.
//! - `/short`: says 100 bytes of body and writes 5.
//! - `/none`: returns without a response; `/error`: answers an error code;
//!   `/panic`: panics; `/sleep`: sleeps for ten minutes.

#![allow(
    clippy::panic,
    clippy::expect_used,
    reason = "a test guest: it panics on request, and a response it cannot make is a bug of the test"
)]

use std::io::{Read, Write};

use serde_json::{Map, Value, json};
use wasip2::http::types::{
    ErrorCode, Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

struct Handler;

impl wasip2::exports::http::incoming_handler::Guest for Handler {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path = request.path_with_query().unwrap_or_default();
        let method = match request.method() {
            Method::Get => "GET".to_owned(),
            Method::Post => "POST".to_owned(),
            Method::Put => "PUT".to_owned(),
            Method::Delete => "DELETE".to_owned(),
            Method::Other(other) => other,
            other => format!("{other:?}"),
        };
        let mut headers = Map::new();
        for (name, value) in request.headers().entries() {
            if name.starts_with("x-") || name.starts_with("weft-") || name == "content-type" {
                headers.insert(name, Value::String(String::from_utf8_lossy(&value).into()));
            }
        }
        let mut body = Vec::new();
        if let Ok(incoming) = request.consume() {
            if let Ok(mut stream) = incoming.stream() {
                let _ = stream.read_to_end(&mut body);
            }
            let _ = wasip2::http::types::IncomingBody::finish(incoming);
        }
        let attempt: u32 = headers
            .get("weft-attempt")
            .and_then(Value::as_str)
            .and_then(|a| a.parse().ok())
            .unwrap_or(0);

        let route: Vec<&str> = path.split(['/', '?']).collect();
        match route.get(1).copied().unwrap_or("") {
            "echo" => {
                let answer = json!({
                    "method": method,
                    "path": path,
                    "headers": headers,
                    "body": String::from_utf8_lossy(&body),
                });
                respond(
                    out,
                    200,
                    "application/json",
                    &[answer.to_string().as_bytes()],
                );
            }
            "status" => {
                let status = route.get(2).and_then(|s| s.parse().ok()).unwrap_or(500);
                let text = format!("status {status}, as asked");
                respond(out, status, "text/plain", &[text.as_bytes()]);
            }
            "flaky" if attempt < 3 => {
                respond(out, 503, "text/plain", &[b"not yet"]);
            }
            "flaky" => {
                let answer = json!({ "attempt": attempt });
                respond(
                    out,
                    200,
                    "application/json",
                    &[answer.to_string().as_bytes()],
                );
            }
            "big" => {
                let mib: usize = route.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
                let piece = vec![b'x'; 64 << 10];
                let pieces = vec![piece.as_slice(); mib * 16];
                respond(out, 200, "text/plain", &pieces);
            }
            "short" => {
                // Says 100 bytes, writes 5: its finish aborts the body.
                let headers = Fields::from_list(&[("content-length".to_owned(), b"100".to_vec())])
                    .expect("a valid header");
                let response = OutgoingResponse::new(headers);
                let body = response.body().expect("the body, once");
                ResponseOutparam::set(out, Ok(response));
                let mut stream = body.write().expect("the body's stream, once");
                let _ = stream.write_all(b"short");
                drop(stream);
                let _ = OutgoingBody::finish(body, None);
            }
            "none" => drop(out),
            "error" => ResponseOutparam::set(
                out,
                Err(ErrorCode::InternalError(Some("on purpose".to_owned()))),
            ),
            "panic" => panic!("on purpose"),
            "sleep" => std::thread::sleep(std::time::Duration::from_secs(600)),
            _ => respond(out, 404, "text/plain", &[b"no such route"]),
        }
    }
}

/// Answers `status` with `pieces` for a body, written one by one.
fn respond(out: ResponseOutparam, status: u16, content_type: &str, pieces: &[&[u8]]) {
    let headers =
        Fields::from_list(&[("content-type".to_owned(), content_type.as_bytes().to_vec())])
            .expect("a valid header");
    let response = OutgoingResponse::new(headers);
    response.set_status_code(status).expect("a valid status");
    let body = response.body().expect("the body, once");
    ResponseOutparam::set(out, Ok(response));
    let mut stream = body.write().expect("the body's stream, once");
    for piece in pieces {
        if stream
            .write_all(piece)
            .and_then(|()| Write::flush(&mut stream))
            .is_err()
        {
            return;
        }
    }
    drop(stream);
    let _ = OutgoingBody::finish(body, None);
}

wasip2::http::proxy::export!(Handler);
