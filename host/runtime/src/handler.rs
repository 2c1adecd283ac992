//! HTTP handler steps: a component that exports
//! `wasi:http/incoming-handler` (the shape of a Spin or wasmCloud HTTP
//! component built on WASI alone) runs as a step. The step's input is the
//! request, `{"method", "path", "headers", "body"}`, every field optional;
//! the response is its output, `{"status", "headers", "body"}`. The request
//! carries the step's context as headers (`weft-run`, `weft-step`,
//! `weft-attempt`, `idempotency-key`, ...). A 5xx, a
//! 429 or a 408 is a retryable failure, another 4xx a fatal one, whose
//! message is the start of the response's body.
//!
//! The guest writes the response's body while the call runs, into a
//! bounded channel, so it is read as it is written, on the tokio runtime
//! of wasmtime-wasi, and charged to the call's budget of host-held bytes
//! (the memory limit): past it, reading stops, the guest's writes fail and
//! the call fails `resource_limit`. A handler, like a command, does not
//! describe itself: `weft plugin add` records its name, version and
//! schemas ([`crate::command::describe_command`]).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::Deserialize;
use serde_json::{Map, Value};
use wasmtime::Store;
use wasmtime_wasi::runtime::AbortOnDropJoinHandle;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
use wasmtime_wasi_http::p2::bindings::sync::Proxy;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::budget::{HostBytes, OverBudget};
use crate::plugin::{Failure, StepContext};
use crate::sandbox::StepState;

/// The `wasi:http/incoming-handler` export that makes a component an HTTP
/// handler.
pub(crate) const HANDLER_EXPORT: &str = "wasi:http/incoming-handler@0.2";

/// The authority of every request a handler step is given.
const AUTHORITY: &str = "localhost";

/// The most of a failed response's body its error's message quotes.
const MESSAGE_BYTES: usize = 1024;

/// A step's input, read as a request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    /// Default: `POST` with a body, else `GET`.
    method: Option<String>,
    /// Default: `/`. May carry a query (`/rates?currency=EUR`).
    path: Option<String>,
    /// A value is a string, or a list of strings for a repeated header.
    #[serde(default)]
    headers: Map<String, Value>,
    /// A string is sent as it is (`text/plain` unless a `content-type` is
    /// given); any other JSON value as JSON (`application/json`).
    body: Option<Value>,
}

/// What the guest set as its response: its head, and the task reading its
/// body; or the error it answered instead.
type Answer = Result<(http::response::Parts, AbortOnDropJoinHandle<Collected>), ErrorCode>;

/// A response's body as read: its bytes, or why it stopped short.
type Collected = Result<Vec<u8>, Cut>;

/// Why the reading of a response's body stopped short.
#[derive(Debug)]
enum Cut {
    /// Past the call's budget (named by [`HostBytes::over`]).
    Budget,
    /// The guest aborted the body, or its length was not the one it said.
    Aborted(String),
}

/// A failure of the step made here: fatal unless said otherwise.
fn failure(retryable: bool, code: &str, message: String, details: Option<Value>) -> Failure {
    Failure {
        retryable,
        code: code.to_owned(),
        message,
        details: details.map(|d| d.to_string()),
    }
}

/// Turns a step's input into the request a handler is given, or says what
/// in it is not a request.
fn request(input: &str, context: &StepContext) -> Result<http::Request<Full<Bytes>>, String> {
    let value: Value = serde_json::from_str(input).map_err(|e| e.to_string())?;
    let value = match value {
        // No input: a `GET /`.
        Value::Null => Value::Object(Map::new()),
        other => other,
    };
    let request: Request = serde_json::from_value(value).map_err(|e| {
        format!(
            "{e}; a handler step's input is {{\"method\", \"path\", \"headers\", \"body\"}}, \
             each optional"
        )
    })?;
    let path = request.path.unwrap_or_else(|| "/".to_owned());
    if !path.starts_with('/') {
        return Err(format!("path `{path}` does not start with `/`"));
    }
    let method = request.method.unwrap_or_else(|| {
        if request.body.is_some() {
            "POST"
        } else {
            "GET"
        }
        .to_owned()
    });
    let mut builder = http::Request::builder()
        .method(method.to_ascii_uppercase().as_str())
        .uri(format!("http://{AUTHORITY}{path}"));
    let mut typed = false;
    for (name, value) in &request.headers {
        typed |= name.eq_ignore_ascii_case("content-type");
        // A number or a boolean (what `${{ }}` may give) is written as JSON.
        let text = |v: &Value| match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(_) | Value::Bool(_) => Some(v.to_string()),
            _ => None,
        };
        let values: Vec<String> = match value {
            Value::Array(many) => many
                .iter()
                .map(|v| text(v).ok_or_else(|| format!("headers.{name} holds {v}, not a string")))
                .collect::<Result<_, _>>()?,
            one => vec![text(one).ok_or_else(|| {
                format!("headers.{name} is {one}, not a string or a list of strings")
            })?],
        };
        for one in values {
            builder = builder.header(name.as_str(), one);
        }
    }
    // The step's context, as a step exporting `weft:plugin/step` is given
    // it; in place of any header of the same name the input gave.
    let attempt = context.attempt.to_string();
    for (name, value) in [
        ("weft-tenant", context.tenant.as_str()),
        ("weft-workflow", context.workflow.as_str()),
        ("weft-run", context.run_id.as_str()),
        ("weft-step", context.step_id.as_str()),
        ("weft-attempt", attempt.as_str()),
        ("idempotency-key", context.idempotency_key.as_str()),
    ] {
        let value = http::HeaderValue::from_str(value)
            .map_err(|_| format!("the step's {name} cannot be a header"))?;
        if let Some(headers) = builder.headers_mut() {
            headers.insert(name, value);
        }
    }
    let body = match request.body {
        None | Some(Value::Null) => Bytes::new(),
        Some(Value::String(text)) => {
            if !typed {
                builder = builder.header("content-type", "text/plain; charset=utf-8");
            }
            Bytes::from(text)
        }
        Some(json) => {
            if !typed {
                builder = builder.header("content-type", "application/json");
            }
            Bytes::from(json.to_string())
        }
    };
    builder
        .body(Full::new(body))
        .map_err(|e| format!("method `{method}`, path `{path}` or a header is not valid: {e}"))
}

/// Reads a response's body as the guest writes it, charging each chunk to
/// the call's budget; stops at the budget, which fails the guest's next
/// write.
async fn collect(mut body: HyperOutgoingBody, held: HostBytes) -> Collected {
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Cut::Aborted(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            held.charge("the response's body", data.len())
                .map_err(|_| Cut::Budget)?;
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// Runs a handler on the step's input: the response it sets is the step's
/// answer.
pub(crate) fn run_handler(
    proxy: &Proxy,
    store: &mut Store<StepState>,
    context: &StepContext,
    input: &str,
) -> wasmtime::Result<Result<String, Failure>> {
    let request = match request(input, context) {
        Ok(request) => request,
        Err(message) => {
            return Ok(Err(failure(
                false,
                "invalid_request",
                format!("the step's input is not a request: {message}"),
                None,
            )));
        }
    };
    let answer: Arc<Mutex<Option<Answer>>> = Arc::default();
    let set = Arc::clone(&answer);
    let held = store.data().held.clone();
    let (request, out) = {
        let mut http = store.data_mut().http();
        let request = http.new_incoming_request(
            Scheme::Http,
            request.map(|body| {
                body.map_err(|never: std::convert::Infallible| -> ErrorCode { match never {} })
            }),
        )?;
        let out = http.new_response_outparam_from_callback(move |response| {
            let answer = response.map(|response| {
                let (parts, body) = response.into_parts();
                (parts, wasmtime_wasi::runtime::spawn(collect(body, held)))
            });
            *weft_core::lock(&set) = Some(answer);
        })?;
        (request, out)
    };
    proxy
        .wasi_http_incoming_handler()
        .call_handle(&mut *store, request, out)?;
    // What the guest still holds of the response's body goes: its end of
    // the channel with it, so the reading ends. The instance is not called
    // again.
    store.data_mut().close_resources();
    let answer = weft_core::lock(&answer).take();
    let (parts, body) = match answer {
        Some(Ok(response)) => response,
        Some(Err(code)) => {
            return Ok(Err(failure(
                true,
                "handler_error",
                format!("the handler answered an error instead of a response: {code:?}"),
                None,
            )));
        }
        None => {
            return Ok(Err(failure(
                false,
                "no_response",
                "the handler returned without setting a response".to_owned(),
                None,
            )));
        }
    };
    // Bounded by the call's deadline, though the body's end is near: the
    // guest's end of it went with its resources.
    let body = match store.data().wait_in_host(body)? {
        Ok(body) => body,
        Err(Cut::Budget) => return Err(wasmtime::Error::new(OverBudget)),
        Err(Cut::Aborted(why)) => {
            return Ok(Err(failure(
                true,
                "handler_error",
                format!("the handler's response body ended badly ({why}): it is not used"),
                None,
            )));
        }
    };
    Ok(response(&parts, body))
}

/// Turns a response into the step's answer.
fn response(parts: &http::response::Parts, body: Vec<u8>) -> Result<String, Failure> {
    let status = parts.status.as_u16();
    let mut headers = Map::new();
    for name in parts.headers.keys() {
        let joined = parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect::<Vec<_>>()
            .join(", ");
        headers.insert(name.as_str().to_owned(), Value::String(joined));
    }
    if status >= 400 {
        let text = String::from_utf8_lossy(&body);
        let mut end = text.len().min(MESSAGE_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let message = match text[..end].trim() {
            "" => format!("the handler answered {status}"),
            said => format!("the handler answered {status}: {said}"),
        };
        return Err(failure(
            status >= 500 || status == 429 || status == 408,
            &format!("http_{status}"),
            message,
            Some(serde_json::json!({ "status": status, "headers": headers })),
        ));
    }
    let json = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| {
            let t = t.trim();
            t.eq_ignore_ascii_case("application/json") || t.ends_with("+json")
        });
    let body = if body.is_empty() {
        Value::Null
    } else if json {
        match serde_json::from_slice(&body) {
            Ok(value) => value,
            Err(e) => {
                return Err(failure(
                    false,
                    "invalid_output",
                    format!("the handler said its body is JSON, but it is not: {e}"),
                    None,
                ));
            }
        }
    } else {
        match String::from_utf8(body) {
            Ok(text) => Value::String(text),
            Err(e) => {
                return Err(failure(
                    false,
                    "invalid_output",
                    format!(
                        "the handler's body is not UTF-8 text (at byte {}) nor JSON; a step's \
                         output is JSON",
                        e.utf8_error().valid_up_to()
                    ),
                    None,
                ));
            }
        }
    };
    Ok(serde_json::json!({ "status": status, "headers": headers, "body": body }).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> StepContext {
        StepContext {
            tenant: "acme".to_owned(),
            workflow: "acme/order".to_owned(),
            run_id: "r1".to_owned(),
            step_id: "price".to_owned(),
            attempt: 2,
            idempotency_key: "r1:price".to_owned(),
        }
    }

    fn request(input: &str) -> Result<http::Request<Full<Bytes>>, String> {
        super::request(input, &context())
    }

    #[test]
    fn an_input_becomes_a_request_or_is_refused_naming_what_is_wrong() {
        let r = request("null").unwrap();
        assert_eq!((r.method().as_str(), r.uri().path()), ("GET", "/"));
        let r = request(r#"{"path": "/a?b=1", "body": {"x": 1}, "headers": {"x-n": ["1", "2"]}}"#)
            .unwrap();
        assert_eq!(r.method(), "POST");
        assert_eq!(r.uri().query(), Some("b=1"));
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(r.headers().get_all("x-n").iter().count(), 2);
        assert_eq!(r.headers()["weft-attempt"], "2");
        assert_eq!(r.headers()["idempotency-key"], "r1:price");
        // The host's context replaces what the input says.
        let r = request(r#"{"headers": {"weft-run": "forged"}}"#).unwrap();
        assert_eq!(r.headers().get_all("weft-run").iter().count(), 1);
        assert_eq!(r.headers()["weft-run"], "r1");
        let r = request(r#"{"method": "put", "body": "hi"}"#).unwrap();
        assert_eq!(r.method(), "PUT");
        assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");

        let e = request(r#"{"url": "/"}"#).unwrap_err();
        assert!(
            e.contains("unknown field `url`") && e.contains("\"path\""),
            "{e}"
        );
        let e = request(r#"{"path": "a"}"#).unwrap_err();
        assert!(e.contains("does not start with `/`"), "{e}");
        let r = request(r#"{"headers": {"x-n": 3, "x-b": [true]}}"#).unwrap();
        assert_eq!(
            (&r.headers()["x-n"], &r.headers()["x-b"]),
            (&"3".parse().unwrap(), &"true".parse().unwrap())
        );
        let e = request(r#"{"headers": {"x": {"a": 1}}}"#).unwrap_err();
        assert!(e.contains("headers.x is {\"a\":1}"), "{e}");
        let e = request(r#"{"headers": {"bad name": "v"}}"#).unwrap_err();
        assert!(e.contains("not valid"), "{e}");
        assert!(request("[1]").is_err());
    }

    fn parts(status: u16, content_type: Option<&str>) -> http::response::Parts {
        let mut b = http::Response::builder().status(status);
        if let Some(t) = content_type {
            b = b.header("content-type", t);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_response_becomes_an_output_or_a_failure_by_its_status() {
        let ok = response(
            &parts(200, Some("application/json")),
            br#"{"a":1}"#.to_vec(),
        )
        .unwrap();
        let ok: Value = serde_json::from_str(&ok).unwrap();
        assert_eq!(ok["body"]["a"], 1);
        assert_eq!(ok["headers"]["content-type"], "application/json");
        let text = response(&parts(201, None), b"made".to_vec()).unwrap();
        assert!(text.contains(r#""body":"made""#), "{text}");
        assert!(
            response(&parts(204, None), vec![])
                .unwrap()
                .contains(r#""body":null"#)
        );

        for (status, retryable) in [(503, true), (429, true), (408, true), (404, false)] {
            let e = response(&parts(status, None), b"why".to_vec()).unwrap_err();
            assert_eq!(e.retryable, retryable, "{status}");
            assert_eq!(e.code, format!("http_{status}"));
            assert!(e.message.ends_with(": why"), "{}", e.message);
        }
        let e = response(&parts(200, Some("text/json+json")), b"{".to_vec()).unwrap_err();
        assert_eq!(e.code, "invalid_output");
        let e = response(&parts(200, None), vec![0xff]).unwrap_err();
        assert_eq!(e.code, "invalid_output");
    }
}
