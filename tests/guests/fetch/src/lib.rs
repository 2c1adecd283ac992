//! Makes the HTTP requests in its input, in order, and answers what each
//! got. With `follow`, follows redirects itself (as `fetch` does), each hop
//! a new request the host checks. With `secret`, reads that secret, logs
//! it, and returns it, so a test can see it redacted. With `header_maps`,
//! first makes that many header maps, each with one header of
//! `header_bytes` bytes, and keeps them, as a hostile step would to make
//! the host hold them; it says how many it made. A request that fails
//! is an answer `{"error": ...}`; the host fails the attempt anyway when the
//! failure was a refusal.

use serde::Deserialize;
use serde_json::{Value, json};
use weft_sdk::http::Request;
use weft_sdk::{Context, StepError};

#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    requests: Vec<Asked>,
    #[serde(default)]
    follow: bool,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    header_maps: usize,
    #[serde(default)]
    header_bytes: usize,
}

#[derive(Deserialize)]
struct Asked {
    #[serde(default = "get")]
    method: String,
    url: String,
    #[serde(default)]
    body: Option<String>,
}

fn get() -> String {
    "GET".to_owned()
}

fn one(method: &str, url: &str, body: Option<&str>, follow: bool) -> Value {
    let mut url = url.to_owned();
    for _ in 0..5 {
        let mut request = Request::new(method, &url);
        if let Some(body) = body {
            request = request.body(body.as_bytes().to_vec());
        }
        match request.send() {
            Err(e) => return json!({ "url": url, "error": e.message }),
            Ok(answer) => {
                if follow
                    && (300..400).contains(&answer.status)
                    && let Some(next) = answer.header("location")
                {
                    url = next.to_owned();
                    continue;
                }
                return json!({
                    "url": url,
                    "status": answer.status,
                    "bytes": answer.body.len(),
                    "body": String::from_utf8_lossy(&answer.body[..answer.body.len().min(200)]),
                });
            }
        }
    }
    json!({ "url": url, "error": "too many redirects" })
}

fn fetch(_ctx: &Context, input: Input) -> Result<Value, StepError> {
    let value = vec![b'x'; input.header_bytes];
    let mut maps = Vec::new();
    for _ in 0..input.header_maps {
        match wasip2::http::types::Fields::from_list(&[("x-pad".to_owned(), value.clone())]) {
            Ok(map) => maps.push(map),
            Err(e) => return Err(StepError::fatal("header_map", format!("{e:?}"))),
        }
    }
    let answers: Vec<Value> = input
        .requests
        .iter()
        .map(|r| one(&r.method, &r.url, r.body.as_deref(), input.follow))
        .collect();
    let mut output = json!({ "answers": answers, "header_maps": maps.len() });
    if let Some(name) = input.secret {
        let value = weft_sdk::secrets::get(&name).map_err(|e| StepError::fatal("secret", e))?;
        weft_sdk::log::info(format!("the secret is {value}"));
        println!("on stdout too: {value}");
        output["secret"] = json!(value);
        output["secret_length"] = json!(value.len());
    }
    Ok(output)
}

weft_sdk::export_step!(fetch, name = "fetch");
