//! `weft bench --http`: what an outgoing HTTP call through weft costs,
//! against the same request from a native client, to the same server on
//! loopback, in one run.
//!
//! The server answers `GET /ping` with a short JSON body. Three ways of
//! asking it are timed, `n` times each after a warm-up:
//!
//! - through weft: one call of the `http-get` plugin per request (a fresh
//!   instance, the egress check, DNS-free connect to the granted address,
//!   the request, the body read, the record);
//! - a native client opening a new connection per request, as weft does
//!   (each call is a fresh instance with nothing kept between calls);
//! - a native client reusing one connection (keep-alive).
//!
//! The ratios of the p50s are the figures to quote; the `echo` plugin's
//! call, timed the same way, says what of weft's cost is the call itself.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use weft::core::egress::{Egress, Policy, Rule};
use weft::runtime::{CallOptions, StepContext};
use weft::{Runtime, RuntimeConfig};

use super::{percentile, ratio, show};

pub fn http(plugins: &Path, n: usize) -> anyhow::Result<ExitCode> {
    let read = |name: &str| {
        let path = plugins.join(format!("{name}.wasm"));
        std::fs::read(&path).with_context(|| {
            format!(
                "cannot read {}; build the example plugins first (see README)",
                path.display()
            )
        })
    };
    let (http_get, echo) = (read("http_get")?, read("echo")?);
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let listener = server.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let port = listener.local_addr()?.port();
    let app = axum::Router::new().route(
        "/ping",
        axum::routing::get(|| async { axum::Json(serde_json::json!({ "pong": true })) }),
    );
    server.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let url = format!("http://127.0.0.1:{port}/ping");

    let runtime = Runtime::new(RuntimeConfig::default())?;
    let fetch = runtime.load(&http_get)?;
    let echo = runtime.load(&echo)?;
    let grant =
        Rule::parse(&format!("http://127.0.0.1:{port}"), None).map_err(anyhow::Error::msg)?;
    let options = CallOptions {
        egress: Some(Arc::new(Egress::new(vec![grant], Policy::Unbounded))),
        ..CallOptions::default()
    };
    let context = StepContext {
        tenant: "bench".to_owned(),
        workflow: "bench".to_owned(),
        run_id: "bench".to_owned(),
        step_id: "get".to_owned(),
        attempt: 1,
        idempotency_key: "bench".to_owned(),
    };
    let input = serde_json::json!({ "url": url }).to_string();
    let warmup = (n / 10).max(10);
    out!("outgoing HTTP: GET {url}, {n} times each after {warmup} to warm up");

    let mut through_weft = time(n, warmup, || {
        let outcome = fetch.call(&context, &input, &options);
        match outcome.result {
            Ok(output) if output["status"] == 200 => Ok(()),
            Ok(output) => anyhow::bail!("the plugin answered {output}"),
            Err(e) => anyhow::bail!("the call failed: {e}"),
        }
    })?;
    let mut echo_calls = time(n, warmup, || {
        echo.call(&context, &input, &CallOptions::default())
            .result
            .map(drop)
            .map_err(|e| anyhow::anyhow!("echo failed: {e}"))
    })?;
    let mut fresh = time(n, warmup, || {
        let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
        let body = agent.get(&url).call()?.body_mut().read_to_string()?;
        anyhow::ensure!(body.contains("pong"), "the server answered {body}");
        Ok(())
    })?;
    let pooled_agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    let mut pooled = time(n, warmup, || {
        let body = pooled_agent.get(&url).call()?.body_mut().read_to_string()?;
        anyhow::ensure!(body.contains("pong"), "the server answered {body}");
        Ok(())
    })?;

    let row = |name: &str, times: &mut Vec<Duration>| -> anyhow::Result<Duration> {
        let (p50, p99) = (percentile(times, 50.0), percentile(times, 99.0));
        out!("  {name:<44} p50 {:>9}  p99 {:>9}", show(p50), show(p99));
        Ok(p50)
    };
    let weft = row(
        "through weft (http-get plugin, fresh instance)",
        &mut through_weft,
    )?;
    let echo = row("  of which a call of echo (no HTTP)", &mut echo_calls)?;
    let fresh = row("native client, new connection each", &mut fresh)?;
    let pooled = row("native client, one kept-alive connection", &mut pooled)?;
    out!(
        "ratio: weft / native new-connection = {:.2}x; weft / native kept-alive = {:.2}x; \
         weft minus the echo call / native new-connection = {:.2}x",
        ratio(weft, fresh),
        ratio(weft, pooled),
        ratio(weft.saturating_sub(echo), fresh),
    );
    Ok(ExitCode::SUCCESS)
}

fn time(
    n: usize,
    warmup: usize,
    mut once: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(n);
    for i in 0..warmup + n {
        let started = Instant::now();
        once()?;
        let took = started.elapsed();
        if i >= warmup {
            times.push(took);
        }
    }
    Ok(times)
}
