//! A small HTTP service as a WebAssembly component: it exports
//! `wasi:http/incoming-handler` and imports nothing of weft, so the same
//! component serves under any host of that world. weft runs it as a step
//! (examples/convert.yaml): the step's input is the request, the response
//! its output. `GET /rates/{currency}` answers `{"currency", "per_usd"}`;
//! an unknown currency is a 404, which fails the step; another method a
//! 405.

use std::io::Write;

use serde_json::json;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

/// Units of each currency per US dollar (fixed, for the example).
const RATES: &[(&str, f64)] = &[("EUR", 0.92), ("GBP", 0.79), ("JPY", 151.0), ("USD", 1.0)];

struct Rates;

impl wasip2::exports::http::incoming_handler::Guest for Rates {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        if !matches!(request.method(), Method::Get) {
            return respond(out, 405, &json!({ "error": "only GET" }));
        }
        let path = request.path_with_query().unwrap_or_default();
        let path = path.split('?').next().unwrap_or_default();
        let rate = path.strip_prefix("/rates/").and_then(|currency| {
            RATES
                .iter()
                .find(|(code, _)| code.eq_ignore_ascii_case(currency))
        });
        match rate {
            Some((currency, per_usd)) => respond(
                out,
                200,
                &json!({ "currency": currency, "per_usd": per_usd }),
            ),
            None => respond(out, 404, &json!({ "error": format!("no rate for {path}") })),
        }
    }
}

/// Answers `status` with `body` as JSON; if the response cannot be made,
/// an error code instead.
fn respond(out: ResponseOutparam, status: u16, body: &serde_json::Value) {
    let made = Fields::from_list(&[("content-type".to_owned(), b"application/json".to_vec())])
        .ok()
        .map(OutgoingResponse::new)
        .filter(|response| response.set_status_code(status).is_ok())
        .and_then(|response| response.body().ok().map(|outgoing| (response, outgoing)));
    let Some((response, outgoing)) = made else {
        let why = "cannot make the response".to_owned();
        return ResponseOutparam::set(out, Err(ErrorCode::InternalError(Some(why))));
    };
    ResponseOutparam::set(out, Ok(response));
    let Ok(mut stream) = outgoing.write() else {
        return;
    };
    // A write fails only if the host stopped reading: nothing is left to do.
    if stream
        .write_all(body.to_string().as_bytes())
        .and_then(|()| Write::flush(&mut stream))
        .is_ok()
    {
        drop(stream);
        let _ = OutgoingBody::finish(outgoing, None);
    }
}

wasip2::http::proxy::export!(Rates);
