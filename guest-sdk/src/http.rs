//! Outgoing HTTP over `wasi:http`, to the destinations the step's workflow
//! grants (`allow: {http: [...]}`). A request anywhere else fails with
//! [`Error`] and the whole attempt with `http_denied`, whatever the step
//! does next; so does a request past the call's limits (`http_limit`).
//!
//! ```ignore
//! let answer = weft_sdk::http::get("https://api.example.com/v1/items")?;
//! let items: Vec<Item> = answer.json()?;
//! ```
//!
//! Requests are blocking: the call waits for each answer. Redirects are not
//! followed; a `3xx` is an answer like any other.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What went wrong, for people; for a refused request, starts with
    /// `http_denied`.
    pub message: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<Error> for crate::StepError {
    /// A request that failed as a retryable step error `http`; a refused
    /// one fails the attempt as `http_denied` anyway.
    fn from(error: Error) -> Self {
        crate::StepError::retryable("http", error.message)
    }
}

fn error(message: impl Into<String>) -> Error {
    Error {
        message: message.into(),
    }
}

fn code_error(code: &ErrorCode) -> Error {
    match code {
        ErrorCode::HttpRequestDenied | ErrorCode::DestinationIpProhibited => {
            error("http_denied: the step is not granted this destination")
        }
        other => error(format!("the request failed: {other:?}")),
    }
}

/// A request to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
}

impl Request {
    /// A request of `method` (`GET`, `POST`, ...) to `url`.
    pub fn new(method: &str, url: &str) -> Self {
        Self {
            method: method.to_ascii_uppercase(),
            url: url.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets the body to `value` as JSON, with its content type.
    pub fn json<T: Serialize>(self, value: &T) -> Result<Self, Error> {
        let body = serde_json::to_vec(value).map_err(|e| error(e.to_string()))?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// The longest to wait for the first byte of the answer (the host caps
    /// it at the step's deadline).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sends the request and reads the whole answer.
    pub fn send(self) -> Result<Response, Error> {
        send(self)
    }
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, in order, names lowercased.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as UTF-8 text.
    pub fn text(&self) -> Result<&str, Error> {
        std::str::from_utf8(&self.body).map_err(|e| error(format!("the body is not UTF-8: {e}")))
    }

    /// The body as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body)
            .map_err(|e| error(format!("the body is not the JSON expected: {e}")))
    }

    /// The first value of header `name`, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// `GET url`.
pub fn get(url: &str) -> Result<Response, Error> {
    Request::new("GET", url).send()
}

/// `POST url` with `value` as a JSON body.
pub fn post_json<T: Serialize>(url: &str, value: &T) -> Result<Response, Error> {
    Request::new("POST", url).json(value)?.send()
}

/// Splits `scheme://authority/path?query`.
fn split_url(url: &str) -> Result<(Scheme, &str, &str), Error> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| error(format!("`{url}` is not an absolute URL")))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => return Err(error(format!("the scheme `{other}` is not http or https"))),
    };
    let cut = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(cut);
    if authority.is_empty() {
        return Err(error(format!("`{url}` names no host")));
    }
    Ok((scheme, authority, if path.is_empty() { "/" } else { path }))
}

fn method(name: &str) -> Method {
    match name {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "CONNECT" => Method::Connect,
        "OPTIONS" => Method::Options,
        "TRACE" => Method::Trace,
        "PATCH" => Method::Patch,
        other => Method::Other(other.to_owned()),
    }
}

fn send(request: Request) -> Result<Response, Error> {
    let (scheme, authority, path) = split_url(&request.url)?;
    let mut entries: Vec<(String, Vec<u8>)> = request
        .headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes().to_vec()))
        .collect();
    // A body's length is known: say it, rather than send it chunked.
    if !request.body.is_empty() && !entries.iter().any(|(n, _)| n == "content-length") {
        entries.push((
            "content-length".to_owned(),
            request.body.len().to_string().into_bytes(),
        ));
    }
    let headers =
        Fields::from_list(&entries).map_err(|e| error(format!("a header is refused: {e:?}")))?;
    let outgoing = OutgoingRequest::new(headers);
    let set = |ok: Result<(), ()>, what: &str| ok.map_err(|()| error(format!("invalid {what}")));
    set(outgoing.set_method(&method(&request.method)), "method")?;
    set(outgoing.set_scheme(Some(&scheme)), "scheme")?;
    set(outgoing.set_authority(Some(authority)), "host")?;
    set(outgoing.set_path_with_query(Some(path)), "path")?;
    let body = outgoing
        .body()
        .map_err(|()| error("the request's body is taken"))?;
    let options = request.timeout.map(|timeout| {
        let options = RequestOptions::new();
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        let _ = options.set_first_byte_timeout(Some(nanos));
        options
    });
    let future = outgoing_handler::handle(outgoing, options).map_err(|c| code_error(&c))?;
    {
        let stream = body
            .write()
            .map_err(|()| error("the request's body cannot be written"))?;
        for chunk in request.body.chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| error(format!("sending the body failed: {e:?}")))?;
        }
    }
    OutgoingBody::finish(body, None).map_err(|c| code_error(&c))?;
    let answer = loop {
        if let Some(answer) = future.get() {
            break answer;
        }
        future.subscribe().block();
    };
    let response = answer
        .map_err(|()| error("the answer was already taken"))?
        .map_err(|c| code_error(&c))?;
    let status = response.status();
    let headers = response.headers().entries();
    let incoming = response
        .consume()
        .map_err(|()| error("the answer's body is taken"))?;
    let mut body = Vec::new();
    {
        let stream = incoming
            .stream()
            .map_err(|()| error("the answer's body cannot be read"))?;
        loop {
            match stream.blocking_read(64 << 10) {
                Ok(chunk) => body.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(error(format!(
                        "reading the answer failed: {}",
                        e.to_debug_string()
                    )));
                }
            }
        }
    }
    let _ = IncomingBody::finish(incoming);
    Ok(Response {
        status,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_scheme_host_and_path() {
        let (scheme, host, path) = split_url("https://api.example.com:8443/v1?x=1").unwrap();
        assert!(matches!(scheme, Scheme::Https));
        assert_eq!((host, path), ("api.example.com:8443", "/v1?x=1"));
        let (_, host, path) = split_url("http://127.0.0.1:9").unwrap();
        assert_eq!((host, path), ("127.0.0.1:9", "/"));
        assert!(split_url("ftp://x").is_err());
        assert!(split_url("nohost").is_err());
    }
}
