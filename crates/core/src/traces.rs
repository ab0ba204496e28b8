//! Traces (DESIGN §22): spans of deliveries, requests, builds, tests, upgrades and what actors
//! report (the agent's turns, model requests and tool calls), exported over OTLP/HTTP when the
//! host was started with an endpoint, and nothing otherwise.
//!
//! While spans are exported every envelope carries a [`Trace`] (the router makes it, see
//! `broker::router`); its span is the message's delivery, from its acceptance to its read. Work done while handling a message
//! runs inside [`handling`], so the messages it sends and the spans it makes continue that
//! message's trace.
//!
//! Spans are built as OpenTelemetry `SpanData` with the ids the envelopes already carry and
//! handed to the SDK's batch processor, which exports them from its own thread.
//! **Invariant:** with no endpoint no message gets a trace and no span is built: the round trip
//! pays one flag check (the router's).

use std::borrow::Cow;
use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};

use crate::message::{ActorId, Envelope, Trace, unix_nanos};

/// How often the batch processor sends what it holds (the SDK's default is 5 s; a person
/// looking at a trace waits less).
const EXPORT_EVERY: Duration = Duration::from_secs(1);

/// Spans waiting to be sent: past this many, new ones are dropped (the SDK counts them).
const QUEUE: usize = 65_536;

/// How long the last export may take at shutdown.
const FLUSH_PATIENCE: Duration = Duration::from_secs(5);

/// The exporter, once [`export_to`] made it.
static EXPORT: OnceLock<Export> = OnceLock::new();

struct Export {
    processor: BatchSpanProcessor,
    scope: InstrumentationScope,
}

/// Whether spans are exported: what an envelope's `sampled` flag says.
pub fn on() -> bool {
    EXPORT.get().is_some()
}

/// The URL spans are posted to: `url` as given when it names `/v1/traces`, else that path
/// under it, as OpenTelemetry's `OTEL_EXPORTER_OTLP_ENDPOINT` is read.
pub fn traces_url(url: &str) -> String {
    let url = url.trim_end_matches('/');
    if url.ends_with("/v1/traces") {
        url.to_string()
    } else {
        format!("{url}/v1/traces")
    }
}

/// Exports every span from now on to the OTLP/HTTP endpoint `url` (protobuf), naming this
/// host `host` (`service.instance.id`). Once per process.
pub fn export_to(url: &str, host: &str) -> Result<()> {
    let parsed: http::Uri = url.parse().with_context(|| {
        format!("`{url}` is not a URL; give the OTLP/HTTP endpoint, such as http://127.0.0.1:4318")
    })?;
    anyhow::ensure!(
        matches!(parsed.scheme_str(), Some("http" | "https")) && parsed.host().is_some(),
        "`{url}` is not an http:// or https:// URL; give the OTLP/HTTP endpoint, such as http://127.0.0.1:4318"
    );
    let endpoint = traces_url(url);
    let host = host.to_string();
    // The blocking client may not be made or dropped on an async runtime's thread.
    let made = std::thread::spawn(move || -> Result<Export> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(&endpoint)
            .with_timeout(Duration::from_secs(10))
            .build()
            .with_context(|| format!("cannot make an OTLP exporter for {endpoint}"))?;
        let mut processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(EXPORT_EVERY)
                    .with_max_queue_size(QUEUE)
                    .build(),
            )
            .build();
        processor.set_resource(
            &Resource::builder_empty()
                .with_attributes([
                    KeyValue::new("service.name", "sausage"),
                    KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                    KeyValue::new("service.instance.id", host),
                ])
                .build(),
        );
        let scope = InstrumentationScope::builder("sausage")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        Ok(Export { processor, scope })
    })
    .join()
    .map_err(|_| anyhow::anyhow!("making the OTLP exporter panicked"))??;
    EXPORT
        .set(made)
        .map_err(|_| anyhow::anyhow!("traces are already exported"))
}

/// Sends what waits and stops exporting (at shutdown).
pub fn flush() {
    if let Some(export) = EXPORT.get() {
        let _ = export.processor.shutdown_with_timeout(FLUSH_PATIENCE);
    }
}

tokio::task_local! {
    static HANDLING: Trace;
}

/// Runs `work` as part of `trace`: the messages it sends and the spans it starts continue it.
pub async fn handling<F: Future>(trace: Trace, work: F) -> F::Output {
    HANDLING.scope(trace, work).await
}

/// The trace of the work under way on this task, if any ([`handling`]).
pub fn handling_now() -> Option<Trace> {
    HANDLING.try_with(|trace| *trace).ok()
}

/// Records the delivery span of `envelope`, read now by `to`.
pub fn delivered(envelope: &Envelope, to: &ActorId) {
    let trace = envelope.trace;
    if !trace.sampled || !on() {
        return;
    }
    let start = if trace.at == 0 {
        unix_nanos()
    } else {
        trace.at
    };
    let mut attributes = vec![
        KeyValue::new("messaging.system", "sausage"),
        KeyValue::new("messaging.operation.type", "receive"),
        KeyValue::new("messaging.message.id", envelope.id.clone()),
        KeyValue::new("messaging.destination.name", to.to_string()),
        KeyValue::new("sausage.from", envelope.from.to_string()),
    ];
    if let Some(speaker) = &envelope.speaker {
        attributes.push(KeyValue::new("sausage.person", speaker.person.to_string()));
    }
    emit(
        &trace,
        format!("deliver {to}").into(),
        SpanKind::Consumer,
        nanos_to_time(start),
        SystemTime::now(),
        attributes,
        None,
    );
}

/// A span under way: made by [`Span::start`], recorded by [`Span::end`]. Costs nothing but
/// its ids when spans are not exported.
pub struct Span {
    trace: Trace,
    name: Cow<'static, str>,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    error: Option<String>,
}

impl Span {
    /// A span named `name`, a child of the work under way ([`handling_now`]) or of `parent`.
    pub fn start(name: impl Into<Cow<'static, str>>, parent: Option<Trace>) -> Span {
        let parent = parent.or_else(handling_now);
        Span {
            trace: Trace::child_of(parent.as_ref(), on()),
            name: name.into(),
            start: SystemTime::now(),
            attributes: Vec::new(),
            error: None,
        }
    }

    /// The span's own trace context: what work inside it runs under ([`handling`]).
    pub fn trace(&self) -> Trace {
        self.trace
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        if self.trace.sampled {
            self.attributes.push(KeyValue::new(key, value));
        }
    }

    /// The work failed, for `why`.
    pub fn fail(&mut self, why: impl Into<String>) {
        self.error = Some(why.into());
    }

    pub fn end(self) {
        if self.trace.sampled {
            emit(
                &self.trace,
                self.name,
                SpanKind::Internal,
                self.start,
                SystemTime::now(),
                self.attributes,
                self.error,
            );
        }
    }
}

/// A span an actor reported (`{"type":"spans"}`, DESIGN §22), checked.
pub struct Reported {
    pub trace: Trace,
    pub name: String,
    pub start_ms: f64,
    pub end_ms: f64,
    pub attributes: Vec<KeyValue>,
    pub error: Option<String>,
}

/// Exports spans an actor reported, as children of the spans they name.
pub fn reported(spans: Vec<Reported>, actor: &ActorId) {
    if !on() {
        return;
    }
    for span in spans {
        let mut attributes = span.attributes;
        attributes.push(KeyValue::new("sausage.actor", actor.to_string()));
        emit(
            &span.trace,
            span.name.into(),
            SpanKind::Internal,
            millis_to_time(span.start_ms),
            millis_to_time(span.end_ms),
            attributes,
            span.error,
        );
    }
}

fn emit(
    trace: &Trace,
    name: Cow<'static, str>,
    kind: SpanKind,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
    error: Option<String>,
) {
    let Some(export) = EXPORT.get() else {
        return;
    };
    let span_context = SpanContext::new(
        TraceId::from(trace.trace),
        SpanId::from(trace.span),
        TraceFlags::SAMPLED,
        false,
        TraceState::NONE,
    );
    export.processor.on_end(SpanData {
        span_context,
        parent_span_id: if trace.parent == 0 {
            SpanId::INVALID
        } else {
            SpanId::from(trace.parent)
        },
        parent_span_is_remote: false,
        span_kind: kind,
        name,
        start_time: start,
        end_time: end.max(start),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: match error {
            Some(why) => Status::error(why),
            None => Status::Ok,
        },
        instrumentation_scope: export.scope.clone(),
    });
}

fn nanos_to_time(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

fn millis_to_time(ms: f64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs_f64((ms / 1000.0).max(0.0))
}
