//! Runs as OpenTelemetry traces, sent over OTLP/HTTP (JSON) to a collector
//! (`weft serve --otlp-endpoint URL`).
//!
//! Each run is a trace whose id is the run's id (a UUID's 128 bits), so a
//! run keeps its trace across restarts and hosts. The run is the root
//! span, from its start to its end; each step attempt is a child span,
//! from the attempt's start to its record; waits, resumes, failures and
//! retries are events on the root. Spans are made from the engine's run
//! events ([`weft_engine::RunEvents`]) once what they report is durable,
//! and built with the times the records hold, so a run that slept for a
//! month is one span of a month. A span id is derived from the run, the
//! step's path and the attempt, so the same attempt always has the same id.
//!
//! The export runs on two threads of its own: one turns events into spans,
//! the other sends them, a batch at a time. What cannot be sent is logged
//! and dropped: traces never hold a run up.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
pub use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanEvents, SpanExporter as _, SpanLinks,
};
use tokio::sync::broadcast::error::TryRecvError;

use weft_core::trace::{span_id, trace_id};
use weft_engine::{Engine, RunEvent, RunEventKind};
use weft_store::RunState;

/// Runs whose root span is waiting for their end, at most; more are
/// traced without their start's events.
const OPEN_RUNS: usize = 100_000;

/// Events kept on one run's root span, at most.
const ROOT_EVENTS: usize = 128;

/// Spans sent in one request, at most.
const BATCH: usize = 512;

/// The OTLP/HTTP traces URL for `endpoint`: a collector's base URL
/// (`http://127.0.0.1:4318`) gets `/v1/traces`.
fn traces_url(endpoint: &str) -> String {
    let endpoint = endpoint.trim_end_matches('/');
    if endpoint.ends_with("/v1/traces") {
        endpoint.to_owned()
    } else {
        format!("{endpoint}/v1/traces")
    }
}

fn time(at: weft_core::Timestamp) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(at.as_millis())
}

/// A run whose root span waits for its end.
struct Open {
    start: SystemTime,
    events: Vec<Event>,
    dropped: u32,
}

/// Turns run events into spans.
struct Tracer {
    scope: InstrumentationScope,
    open: HashMap<String, Open>,
    engine: Arc<Engine>,
}

impl Tracer {
    fn context(run: &str, path: &str, attempt: u32) -> SpanContext {
        SpanContext::new(
            TraceId::from_bytes(trace_id(run)),
            SpanId::from_bytes(span_id(run, path, attempt)),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        )
    }

    /// A span: its context and its parent's id, its name, when it began
    /// and ended, what it says, its events and status.
    fn span(
        &self,
        (context, parent): (SpanContext, SpanId),
        name: String,
        (start, end): (SystemTime, SystemTime),
        attributes: Vec<KeyValue>,
        events: SpanEvents,
        status: Status,
    ) -> SpanData {
        SpanData {
            span_context: context,
            parent_span_id: parent,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Owned(name),
            start_time: start,
            end_time: end,
            attributes,
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        }
    }

    /// Notes an event on the run's root span.
    fn note(&mut self, event: &RunEvent, name: &'static str, attributes: Vec<KeyValue>) {
        if let Some(open) = self.open.get_mut(&event.run) {
            if open.events.len() < ROOT_EVENTS {
                open.events
                    .push(Event::new(name, time(event.at), attributes, 0));
            } else {
                open.dropped += 1;
            }
        }
    }

    /// The spans `event` ends, if any.
    fn take(&mut self, event: &RunEvent) -> Option<SpanData> {
        let workflow = weft_core::tenant::bare(&event.workflow).to_owned();
        let tenant = weft_core::tenant::of(&event.workflow).to_owned();
        match event.kind {
            RunEventKind::Started => {
                if self.open.len() < OPEN_RUNS {
                    self.open.insert(
                        event.run.clone(),
                        Open {
                            start: time(event.at),
                            events: Vec::new(),
                            dropped: 0,
                        },
                    );
                }
                None
            }
            RunEventKind::StepFinished => {
                // A record that starts a wait is an event of the root
                // (`waiting`), not an attempt.
                let step = event.step.as_ref().filter(|s| s.result)?;
                let end = time(event.at);
                let start = end
                    .checked_sub(Duration::from_micros(step.duration_us))
                    .unwrap_or(end);
                let mut attributes = vec![
                    KeyValue::new("weft.run", event.run.clone()),
                    KeyValue::new("weft.workflow", workflow),
                    KeyValue::new("weft.tenant", tenant),
                    KeyValue::new("weft.step.id", step.step_id.clone()),
                    KeyValue::new("weft.step.path", step.path.clone()),
                    KeyValue::new("weft.step.attempt", i64::from(step.attempt)),
                ];
                let status = match &step.error {
                    Some(code) => {
                        attributes.push(KeyValue::new("weft.error.code", code.clone()));
                        Status::error(code.clone())
                    }
                    None => Status::Unset,
                };
                // The root covers its attempts.
                if let Some(open) = self.open.get_mut(&event.run) {
                    open.start = open.start.min(start);
                }
                if step.attempt > 1 {
                    let attempt = KeyValue::new("weft.step.attempt", i64::from(step.attempt));
                    let path = KeyValue::new("weft.step.path", step.path.clone());
                    self.note(event, "retry", vec![path, attempt]);
                }
                if let Some(code) = &step.error {
                    let error = KeyValue::new("weft.error.code", code.clone());
                    let path = KeyValue::new("weft.step.path", step.path.clone());
                    self.note(event, "step failed", vec![path, error]);
                }
                Some(self.span(
                    (
                        Self::context(&event.run, &step.path, step.attempt),
                        SpanId::from_bytes(span_id(&event.run, "", 0)),
                    ),
                    format!("step {}", step.path),
                    (start, end),
                    attributes,
                    SpanEvents::default(),
                    status,
                ))
            }
            RunEventKind::Waiting => {
                let path = event
                    .step
                    .as_ref()
                    .map(|s| s.path.clone())
                    .unwrap_or_default();
                let awaiting = event.step.as_ref().is_some_and(|s| s.awaiting);
                let what = if awaiting { "await" } else { "timer" };
                self.note(
                    event,
                    "waiting",
                    vec![
                        KeyValue::new("weft.step.path", path),
                        KeyValue::new("weft.wait", what),
                    ],
                );
                None
            }
            RunEventKind::Resumed => {
                self.note(event, "resumed", Vec::new());
                None
            }
            RunEventKind::Ended => {
                let open = self.open.remove(&event.run);
                // A run started before this host (or beyond the open
                // runs) is read for its start.
                let start = match &open {
                    Some(open) => open.start,
                    None => self
                        .engine
                        .store()
                        .run(&event.run)
                        .ok()
                        .flatten()
                        .map_or(time(event.at), |run| time(run.created_at)),
                };
                let (events, dropped) = open.map_or((Vec::new(), 0), |o| (o.events, o.dropped));
                let status = match event.state {
                    RunState::Succeeded => Status::Ok,
                    state => Status::error(state.to_string()),
                };
                Some(self.span(
                    (Self::context(&event.run, "", 0), SpanId::INVALID),
                    format!("run {workflow}"),
                    (start, time(event.at).max(start)),
                    vec![
                        KeyValue::new("weft.run", event.run.clone()),
                        KeyValue::new("weft.workflow", workflow),
                        KeyValue::new("weft.tenant", tenant),
                        KeyValue::new("weft.state", event.state.to_string()),
                    ],
                    {
                        let mut noted = SpanEvents::default();
                        noted.events = events;
                        noted.dropped_count = dropped;
                        noted
                    },
                    status,
                ))
            }
        }
    }
}

/// Polls `future` to its end on this thread: the exporter's future does
/// its blocking request inside, with no runtime around it.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}

/// The OTLP/HTTP (JSON) exporter to `endpoint`, an `http://` collector,
/// with the URL it sends to.
fn exporter(endpoint: &str) -> Result<(String, opentelemetry_otlp::SpanExporter), String> {
    let url = traces_url(endpoint);
    if !url.starts_with("http://") {
        return Err(format!(
            "--otlp-endpoint {endpoint}: only http:// collectors are supported (a collector on \
             this host, or one at the network's edge)"
        ));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson)
        .with_endpoint(url.clone())
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("--otlp-endpoint {endpoint}: {e}"))?;
    Ok((url, exporter))
}

/// The service every span is from.
fn resource() -> Resource {
    Resource::builder()
        .with_service_name("weft")
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build()
}

/// The host's own spans, sent to `endpoint` (an `http://` collector): a
/// `tracing` layer (tracing-opentelemetry) that exports the spans of
/// target [`HOST_SPANS`] at `info` and above (each API request, a server
/// span named for its route, a child of the caller's `traceparent`), a
/// batch at least each second from a thread of its own. Keep the provider
/// while the host runs, and shut it down at the end to send what is left.
pub fn host_spans<S>(
    endpoint: &str,
) -> Result<(impl tracing_subscriber::Layer<S>, SdkTracerProvider), String>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::Layer as _;

    let (_, exporter) = exporter(endpoint)?;
    let batches = BatchConfigBuilder::default()
        .with_scheduled_delay(Duration::from_secs(1))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(
            BatchSpanProcessor::builder(exporter)
                .with_batch_config(batches)
                .build(),
        )
        .with_resource(resource())
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("weft"))
        .with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target(HOST_SPANS, tracing::Level::INFO),
        );
    Ok((layer, provider))
}

/// The target of the host's spans that [`host_spans`] exports.
pub const HOST_SPANS: &str = "weft::spans";

/// The context a request's `traceparent` (W3C Trace Context) names, to
/// make its span a child of the caller's.
pub fn remote_parent(headers: &axum::http::HeaderMap) -> opentelemetry::Context {
    use opentelemetry::propagation::TextMapPropagator as _;
    opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .extract(&opentelemetry_http::HeaderExtractor(headers))
}

/// The root span of run `run`'s trace, for a span to link to.
pub fn run_span(run: &str) -> SpanContext {
    Tracer::context(run, "", 0)
}

/// Starts sending the runs of `engine` as traces to `endpoint` (an
/// `http://` OTLP collector). Returns once the threads run; they end with
/// the engine's events.
pub fn start(engine: &Arc<Engine>, endpoint: &str) -> Result<(), String> {
    let (url, mut exporter) = exporter(endpoint)?;
    exporter.set_resource(&resource());
    let (batches, queued): (SyncSender<Vec<SpanData>>, Receiver<Vec<SpanData>>) = sync_channel(64);
    std::thread::Builder::new()
        .name("weft-traces-send".to_owned())
        .spawn(move || {
            for batch in queued {
                let spans = batch.len();
                if let Err(e) = block_on(exporter.export(batch)) {
                    tracing::warn!(spans, url = %url, "cannot send traces: {e}");
                }
            }
        })
        .map_err(|e| format!("cannot start the trace threads: {e}"))?;
    let mut receiver = engine.events().subscribe(None).receiver;
    let mut tracer = Tracer {
        scope: InstrumentationScope::builder("weft")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
        open: HashMap::new(),
        engine: Arc::clone(engine),
    };
    std::thread::Builder::new()
        .name("weft-traces".to_owned())
        .spawn(move || {
            let mut batch = Vec::new();
            loop {
                // What is there now, then one send; then wait for more.
                let next = match receiver.try_recv() {
                    Ok(event) => Some(event),
                    Err(TryRecvError::Empty) => {
                        if !batch.is_empty() {
                            send(&batches, std::mem::take(&mut batch));
                        }
                        match receiver.blocking_recv() {
                            Ok(event) => Some(event),
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                                tracing::warn!(
                                    "traces fell {n} events behind; their spans are lost"
                                );
                                None
                            }
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                        }
                    }
                    Err(TryRecvError::Lagged(n)) => {
                        tracing::warn!("traces fell {n} events behind; their spans are lost");
                        None
                    }
                    Err(TryRecvError::Closed) => return,
                };
                if let Some(event) = next
                    && let Some(span) = tracer.take(&event)
                {
                    batch.push(span);
                    if batch.len() >= BATCH {
                        send(&batches, std::mem::take(&mut batch));
                    }
                }
            }
        })
        .map_err(|e| format!("cannot start the trace threads: {e}"))?;
    Ok(())
}

/// Hands a batch to the sending thread; one that finds it busy with 64
/// batches is dropped, with a warning.
fn send(batches: &SyncSender<Vec<SpanData>>, batch: Vec<SpanData>) {
    match batches.try_send(batch) {
        Ok(()) => {}
        Err(TrySendError::Full(batch)) => {
            tracing::warn!(
                spans = batch.len(),
                "the trace collector is behind; spans dropped"
            );
        }
        Err(TrySendError::Disconnected(_)) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_trace_is_its_uuid_and_a_collector_url_gets_its_path() {
        let run = "01a24208-7dbd-7dda-9ee7-df274aaed050";
        assert_eq!(
            TraceId::from_bytes(trace_id(run)).to_string(),
            "01a242087dbd7dda9ee7df274aaed050"
        );
        assert_eq!(traces_url("http://h:4318/"), "http://h:4318/v1/traces");
        assert_eq!(
            traces_url("http://h:4318/v1/traces"),
            "http://h:4318/v1/traces"
        );
    }
}
