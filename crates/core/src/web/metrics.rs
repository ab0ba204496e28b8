//! `GET /metrics` (DESIGN §22): the world's figures in Prometheus's text format (OpenMetrics,
//! which Prometheus reads), for the bearer token `sausage metrics token` printed; and `GET
//! /status`, the broker's `list` as JSON for `sausage status` on this machine.
//!
//! The figures are read when scraped: the mailboxes' counts, the broker's [`Counters`], the
//! runtime's hibernated instances, the supervisors' memory and, on a cluster host, its
//! placement. Per-actor series are kept to the [`BUSIEST`] actors by messages, so a world of
//! 100,000 actors does not make 100,000 series of each kind.
//! **Invariant:** these tokens only read; nothing here sends a message or changes a file.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::{App, refuse};
use crate::broker::Broker;
use crate::broker::counters::Counters;
use crate::message::ActorId;
use crate::people::readers::{Reader, reader_of};

/// At most this many actors get series of their own (the busiest by messages in and out).
pub const BUSIEST: usize = 1000;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

/// `GET /metrics`, for the metrics token or the host's local one.
pub(super) async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(refusal) = reader(&app, &headers).await {
        return refusal;
    }
    let text = render(&app.broker).await;
    let mut response = text.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
    response
}

/// `GET /status`: the broker's `list` (every actor's state, version, owner, host, queued,
/// restarts and memory), for the host's local token only.
pub(super) async fn status(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    match reader(&app, &headers).await {
        Ok(Reader::Local) => axum::Json(app.broker.list().await).into_response(),
        Ok(Reader::Metrics) => refuse(
            StatusCode::FORBIDDEN,
            "the metrics token reads /metrics only; `sausage status` reads /status with the \
             host's own token",
        ),
        Err(refusal) => refusal,
    }
}

/// Who the request's `Authorization: Bearer` token is, or the refusal.
async fn reader(app: &App, headers: &HeaderMap) -> Result<Reader, Response> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    let world = app.broker.world.clone();
    let reader = tokio::task::spawn_blocking(move || reader_of(&world, &bearer))
        .await
        .ok()
        .flatten();
    reader.ok_or_else(|| {
        let mut refusal = refuse(
            StatusCode::UNAUTHORIZED,
            "a bearer token is needed: make one with `sausage metrics token` and give it as \
             `Authorization: Bearer <token>` (Prometheus: `authorization: {credentials: ...}`)",
        );
        refusal
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        refusal
    })
}

/// One actor's figures.
#[derive(Default)]
struct ActorFigures {
    received: u64,
    sent: u64,
    bytes_received: u64,
    queued: usize,
    restarts: u64,
    memory: usize,
}

/// Every figure, read now, as the text Prometheus scrapes.
pub async fn render(broker: &Broker) -> String {
    let states = broker.local_states().await;
    let memory = broker.memory_in_use();
    let restarts = broker.counters.restarts();
    let mut actors: HashMap<ActorId, ActorFigures> = HashMap::new();
    for traffic in broker.router.traffic() {
        for (from, n) in &traffic.accepted_from {
            actors.entry(from.clone()).or_default().sent += n;
        }
        let figures = actors.entry(traffic.actor).or_default();
        figures.received += traffic.accepted_from.iter().map(|(_, n)| n).sum::<u64>();
        figures.bytes_received += traffic.accepted_bytes;
        figures.queued = traffic.queued;
    }
    for (actor, bytes) in &memory {
        actors.entry(actor.clone()).or_default().memory = *bytes;
    }
    for (actor, n) in &restarts {
        actors.entry(actor.clone()).or_default().restarts = *n;
    }

    let mut registry = Registry::default();
    let counters = &broker.counters;

    // World totals.
    let total_messages: u64 = actors.values().map(|a| a.received).sum();
    let total_bytes: u64 = actors.values().map(|a| a.bytes_received).sum();
    let total_queued: usize = actors.values().map(|a| a.queued).sum();
    counter(
        &mut registry,
        "sausage_world_messages",
        "Messages accepted into any mailbox of this host since it started",
        total_messages,
    );
    let world_bytes: Counter = Counter::default();
    world_bytes.inc_by(total_bytes);
    registry.register_with_unit(
        "sausage_world_message",
        "Bytes of the messages accepted into any mailbox of this host since it started",
        Unit::Bytes,
        world_bytes,
    );
    gauge(
        &mut registry,
        "sausage_queued_messages",
        "Messages waiting in this host's mailboxes now",
        total_queued as i64,
    );
    let by_state: Family<Labels, Gauge> = Family::default();
    for state in states.values() {
        by_state
            .get_or_create(&vec![("state", state.clone())])
            .inc();
    }
    registry.register(
        "sausage_actors",
        "WASM actors this host runs, by state",
        by_state,
    );
    let requests: Family<Labels, Counter> = Family::default();
    for (kind, n) in counters.requests() {
        requests
            .get_or_create(&vec![("type", kind.to_string())])
            .inc_by(n);
    }
    registry.register(
        "sausage_requests",
        "Requests the broker answered, by type",
        requests,
    );
    counter(
        &mut registry,
        "sausage_restarts",
        "Restarts of crashed actors",
        restarts.values().sum(),
    );
    counter(
        &mut registry,
        "sausage_rollbacks",
        "Rollbacks, asked for or after a crash loop",
        Counters::get(&counters.rollbacks),
    );
    counter(
        &mut registry,
        "sausage_automatic_rollbacks",
        "Rollbacks the broker made after an upgrade's crash loop",
        Counters::get(&counters.automatic_rollbacks),
    );
    let builds: Family<Labels, Counter> = Family::default();
    for (result, n) in [
        ("ok", &counters.builds_ok),
        ("failed", &counters.builds_failed),
    ] {
        builds
            .get_or_create(&vec![("result", result.to_string())])
            .inc_by(Counters::get(n));
    }
    registry.register("sausage_builds", "Builds by `cargo`, by result", builds);
    counter(
        &mut registry,
        "sausage_turns",
        "Agent turns ended (from the spans the agent reports)",
        Counters::get(&counters.turns),
    );
    let tokens: Family<Labels, Counter> = Family::default();
    for (kind, n) in [
        ("input", &counters.input_tokens),
        ("output", &counters.output_tokens),
        ("cache_read", &counters.cache_read_tokens),
    ] {
        tokens
            .get_or_create(&vec![("kind", kind.to_string())])
            .inc_by(Counters::get(n));
    }
    registry.register(
        "sausage_model_tokens",
        "Tokens of the agent's model requests, by kind (`input` counts cached ones too, as `cache_read` does)",
        tokens,
    );
    let cost: Counter<f64, AtomicU64> = Counter::default();
    cost.inc_by(Counters::get(&counters.cost_micro_usd) as f64 / 1e6);
    registry.register(
        "sausage_model_cost_usd",
        "What the agent's model requests cost, in US dollars (priced models only)",
        cost,
    );
    counter(
        &mut registry,
        "sausage_spans_reported",
        "Spans actors reported with `spans` requests",
        Counters::get(&counters.spans),
    );
    let hibernated = broker.runtime.hibernated();
    gauge(
        &mut registry,
        "sausage_hibernated_instances",
        "Idle instances whose memory is packed now",
        hibernated.instances as i64,
    );
    let kept: Gauge = Gauge::default();
    kept.set(hibernated.kept_bytes as i64);
    registry.register_with_unit(
        "sausage_hibernated",
        "Bytes the packed instances keep",
        Unit::Bytes,
        kept,
    );
    if let Some(cluster) = &broker.cluster {
        let hosts = cluster.placement.hosts();
        gauge(
            &mut registry,
            "sausage_cluster_hosts_alive",
            "Hosts of the cluster whose heartbeat is current",
            hosts.iter().filter(|h| h.alive).count() as i64,
        );
        let leases: Family<Labels, Gauge> = Family::default();
        for host in &hosts {
            leases
                .get_or_create(&vec![("host", host.id.clone())])
                .set(host.actors as i64);
        }
        registry.register(
            "sausage_cluster_leases",
            "Actors each host of the cluster holds the lease of",
            leases,
        );
    }

    // Per actor, the busiest first.
    let mut busiest: Vec<(&ActorId, &ActorFigures)> = actors.iter().collect();
    busiest.sort_by(|(a, fa), (b, fb)| {
        (fb.received + fb.sent)
            .cmp(&(fa.received + fa.sent))
            .then_with(|| a.cmp(b))
    });
    busiest.truncate(BUSIEST);
    let received: Family<Labels, Counter> = Family::default();
    let sent: Family<Labels, Counter> = Family::default();
    let bytes: Family<Labels, Counter> = Family::default();
    let queued: Family<Labels, Gauge> = Family::default();
    let restarted: Family<Labels, Counter> = Family::default();
    let memory_bytes: Family<Labels, Gauge> = Family::default();
    for (actor, figures) in &busiest {
        let labels = vec![("actor", actor.to_string())];
        received.get_or_create(&labels).inc_by(figures.received);
        sent.get_or_create(&labels).inc_by(figures.sent);
        bytes.get_or_create(&labels).inc_by(figures.bytes_received);
        queued.get_or_create(&labels).set(figures.queued as i64);
        if !actor.is_native() {
            restarted.get_or_create(&labels).inc_by(figures.restarts);
            memory_bytes
                .get_or_create(&labels)
                .set(figures.memory as i64);
        }
    }
    registry.register(
        "sausage_messages_received",
        "Messages accepted into the actor's mailbox since the host started",
        received,
    );
    registry.register(
        "sausage_messages_sent",
        "Messages the actor sent that a mailbox accepted, since the host started",
        sent,
    );
    registry.register_with_unit(
        "sausage_messages_received",
        "Bytes of the messages accepted into the actor's mailbox",
        Unit::Bytes,
        bytes,
    );
    registry.register(
        "sausage_mailbox_messages",
        "Messages waiting in the actor's mailbox now",
        queued,
    );
    registry.register(
        "sausage_actor_restarts",
        "Restarts of the actor after a crash, since the host started",
        restarted,
    );
    registry.register_with_unit(
        "sausage_actor_memory",
        "The linear memory of the actor's running instance",
        Unit::Bytes,
        memory_bytes,
    );
    gauge(
        &mut registry,
        "sausage_actors_with_series",
        &format!("Actors with series of their own (the busiest, at most {BUSIEST})"),
        busiest.len() as i64,
    );

    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String cannot fail");
    text
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let metric: Counter = Counter::default();
    metric.inc_by(value);
    registry.register(name, help, metric);
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let metric: Gauge = Gauge::default();
    metric.set(value);
    registry.register(name, help, metric);
}
