//! `GET /metrics` (DESIGN §22): the world's figures for Prometheus, for the bearer token
//! `sausage metrics token` printed: OpenMetrics when the scraper's `Accept` asks for it, the
//! classic text format (0.0.4) otherwise; and `GET /status`, the broker's `list` as JSON for
//! `sausage status` on this machine.
//!
//! The figures are read when scraped: the mailboxes' counts, the broker's [`Counters`] (and its
//! histograms of turn, build and upgrade durations), the mailboxes' delivery waits, the runtime's hibernated instances, the
//! supervisors' memory, the process's own figures from `/proc/self` and, on a cluster host, its
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
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use super::{App, refuse};
use crate::broker::Broker;
use crate::broker::counters::{Counters, Waits};
use crate::message::ActorId;
use crate::people::readers::{Reader, reader_of};

/// At most this many actors get series of their own (the busiest by messages in and out).
pub const BUSIEST: usize = 1000;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What `sausage_build_info` says: the binary's version and the commit it was built from (the
/// binary knows them; the core is handed them).
#[derive(Clone, Copy, Debug)]
pub struct Build {
    pub version: &'static str,
    pub commit: &'static str,
}

type Labels = Vec<(&'static str, String)>;

/// `GET /metrics`, for the metrics token or the host's local one.
pub(super) async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(refusal) = reader(&app, &headers).await {
        return refusal;
    }
    let text = render(&app.broker, app.build).await;
    let (text, content_type) = match wants_openmetrics(&headers) {
        true => (text, OPENMETRICS),
        false => (classic(&text), CLASSIC),
    };
    let mut response = text.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Whether the scraper's `Accept` names OpenMetrics; anything else (none, `text/plain`,
/// `*/*`) gets the classic format, which every Prometheus reads.
fn wants_openmetrics(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("application/openmetrics-text"))
}

/// The classic text format (0.0.4) of an OpenMetrics text: a counter's `# HELP` and `# TYPE`
/// name its `_total` sample, an info's its `_info` sample and call it a gauge, and `# UNIT`
/// and `# EOF` go.
fn classic(openmetrics: &str) -> String {
    let renamed: HashMap<&str, (String, &str)> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE ")?.split_once(' '))
        .filter_map(|(name, kind)| match kind {
            "counter" => Some((name, (format!("{name}_total"), "counter"))),
            "info" => Some((name, (format!("{name}_info"), "gauge"))),
            _ => None,
        })
        .collect();
    let mut text = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let described = ["# HELP ", "# TYPE "].into_iter().find_map(|prefix| {
            let (name, tail) = line.strip_prefix(prefix)?.split_once(' ')?;
            Some((prefix, renamed.get(name)?, tail))
        });
        match described {
            Some(("# TYPE ", (name, kind), _)) => text.push_str(&format!("# TYPE {name} {kind}")),
            Some((prefix, (name, _), tail)) => text.push_str(&format!("{prefix}{name} {tail}")),
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
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

/// Every figure, read now, as OpenMetrics text.
pub async fn render(broker: &Broker, build: Build) -> String {
    let states = broker.local_states().await;
    let memory = broker.memory_in_use();
    let restarts = broker.counters.restarts();
    let mut actors: HashMap<ActorId, ActorFigures> = HashMap::new();
    let mut waits = Waits::default();
    for traffic in broker.router.traffic() {
        waits.add(&traffic.waits);
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
    registry.register(
        "sausage_build",
        "The version of this host's binary and the commit it was built from",
        Info::new(vec![
            ("version", build.version.to_string()),
            ("commit", build.commit.to_string()),
        ]),
    );
    process(&mut registry);

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
    for (name, help, histogram) in [
        (
            "sausage_turn_duration",
            "How long the agent's turns took (from the spans the agent reports)",
            &counters.durations.turns,
        ),
        (
            "sausage_build_duration",
            "How long builds by `cargo` that made a `.wasm` took",
            &counters.durations.builds,
        ),
        (
            "sausage_upgrade_duration",
            "How long installed upgrades took, tests and shadow run included",
            &counters.durations.upgrades,
        ),
    ] {
        // A clone is the same histogram (a shared handle), so the registry reads it as it is.
        registry.register_with_unit(name, help, Unit::Seconds, histogram.clone());
    }
    registry.register(
        "sausage_http_requests",
        "Requests the public address answered, by route (`none`: no route matched) and status",
        counters.http.answers.clone(),
    );
    registry.register_with_unit(
        "sausage_http_request_duration",
        "How long the public address took to answer, to the response's head, by route",
        Unit::Seconds,
        counters.http.durations.clone(),
    );
    registry.register_with_unit(
        "sausage_delivery_duration",
        "How long messages waited in this host's mailboxes before their actors took them \
         (a wait within the kernel's clock tick, 1 to 4 ms, counts as none)",
        Unit::Seconds,
        waits,
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

/// The standard process series, from `/proc/self` (absent where it cannot be read).
fn process(registry: &mut Registry) {
    let figures = Process::read();
    if let Some(start) = figures.start_time_seconds {
        float_gauge(
            registry,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            start,
        );
    }
    if let Some(cpu) = figures.cpu_seconds {
        let metric: Counter<f64, AtomicU64> = Counter::default();
        metric.inc_by(cpu);
        registry.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            metric,
        );
    }
    for (name, help, value) in [
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            figures.resident_bytes,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors",
            figures.open_fds,
        ),
        (
            "process_max_fds",
            "Maximum number of open file descriptors",
            figures.max_fds,
        ),
    ] {
        if let Some(value) = value {
            gauge(registry, name, help, value as i64);
        }
    }
}

/// This process's figures as Linux shows them; `None` where a file cannot be read or parsed.
#[derive(Debug, Default)]
struct Process {
    start_time_seconds: Option<f64>,
    cpu_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
}

impl Process {
    fn read() -> Process {
        let proc = |path: &str| std::fs::read_to_string(path).ok();
        // SAFETY: `sysconf` takes no pointer and only reads a constant of the system.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let boot = proc("/proc/stat").and_then(|stat| boot_time(&stat));
        let stat = proc("/proc/self/stat");
        let fields = stat.as_deref().and_then(stat_fields);
        let field = |n: usize| fields.as_ref()?.get(n)?.parse::<f64>().ok();
        Process {
            start_time_seconds: boot.zip(field(STARTTIME)).map(|(b, s)| b + s / ticks),
            cpu_seconds: field(UTIME).zip(field(STIME)).map(|(u, s)| (u + s) / ticks),
            resident_bytes: proc("/proc/self/status").and_then(|s| resident_bytes(&s)),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|entries| entries.count() as u64),
            max_fds: proc("/proc/self/limits").and_then(|l| max_open_files(&l)),
        }
    }
}

/// Fields of `/proc/self/stat` counted from its third (the state), after the command's `)`:
/// `utime`, `stime` (clock ticks) and `starttime` (clock ticks after boot), by proc(5).
const UTIME: usize = 14 - 3;
const STIME: usize = 15 - 3;
const STARTTIME: usize = 22 - 3;

fn stat_fields(stat: &str) -> Option<Vec<String>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

fn boot_time(stat: &str) -> Option<f64> {
    let line = stat.lines().find(|l| l.starts_with("btime "))?;
    line["btime ".len()..].trim().parse().ok()
}

fn resident_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn float_gauge(registry: &mut Registry, name: &str, help: &str, value: f64) {
    let metric: Gauge<f64, AtomicU64> = Gauge::default();
    metric.set(value);
    registry.register(name, help, metric);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry with one of each kind `/metrics` writes, as OpenMetrics text.
    fn openmetrics() -> String {
        let mut registry = Registry::default();
        let build = Build {
            version: "1.2.3",
            commit: "abc",
        };
        registry.register(
            "sausage_build",
            "Build",
            Info::new(vec![
                ("version", build.version.to_string()),
                ("commit", build.commit.to_string()),
            ]),
        );
        process(&mut registry);
        let bytes: Counter = Counter::default();
        bytes.inc_by(7);
        registry.register_with_unit("sausage_world_message", "Bytes", Unit::Bytes, bytes);
        let durations = crate::broker::counters::Durations::default();
        durations.turns.observe(0.25);
        let turns = durations.turns.clone();
        registry.register_with_unit("sausage_turn_duration", "Turns", Unit::Seconds, turns);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn build_info_has_version_then_commit() {
        let text = openmetrics();
        assert!(text.contains("# TYPE sausage_build info\n"), "{text}");
        assert!(
            text.contains("sausage_build_info{version=\"1.2.3\",commit=\"abc\"} 1\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn process_series_are_read_from_proc_and_plausible() {
        let text = openmetrics();
        let value = |name: &str| -> f64 {
            let line = text.lines().find(|l| l.starts_with(&format!("{name} ")));
            let line = line.unwrap_or_else(|| panic!("{name} in:\n{text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(
            started > now - 86_400.0 && started <= now + 1.0,
            "{started}"
        );
        let cpu = value("process_cpu_seconds_total");
        let cores = std::thread::available_parallelism().unwrap().get() as f64;
        assert!((0.0..(now - started + 1.0) * cores).contains(&cpu), "{cpu}");
        assert!(value("process_resident_memory_bytes") > 1_000_000.0);
        let (open, max) = (value("process_open_fds"), value("process_max_fds"));
        assert!(open >= 3.0 && open <= max, "{open} of {max}");
    }

    #[test]
    fn the_classic_format_names_counters_by_their_samples_and_drops_unit_and_eof() {
        let text = classic(&openmetrics());
        for line in [
            "# TYPE sausage_world_message_bytes_total counter",
            "# HELP sausage_world_message_bytes_total Bytes.",
            "# HELP sausage_build_info Build.",
            "sausage_world_message_bytes_total 7",
            "# TYPE process_cpu_seconds_total counter",
            "# TYPE sausage_build_info gauge",
            "sausage_build_info{version=\"1.2.3\",commit=\"abc\"} 1",
            "# TYPE process_open_fds gauge",
            "# TYPE sausage_turn_duration_seconds histogram",
            "sausage_turn_duration_seconds_bucket{le=\"0.2\"} 0",
            "sausage_turn_duration_seconds_bucket{le=\"0.4\"} 1",
            "sausage_turn_duration_seconds_bucket{le=\"+Inf\"} 1",
            "sausage_turn_duration_seconds_sum 0.25",
            "sausage_turn_duration_seconds_count 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        assert!(
            !text.contains("# UNIT") && !text.contains("# EOF"),
            "{text}"
        );
    }

    #[test]
    fn only_an_accept_naming_openmetrics_gets_it() {
        let with = |accept: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(accept) = accept {
                headers.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
            }
            wants_openmetrics(&headers)
        };
        assert!(with(Some(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
             version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        )));
        assert!(!with(None));
        assert!(!with(Some("text/plain;version=0.0.4")));
        assert!(!with(Some("*/*")));
    }

    #[test]
    fn proc_files_are_parsed_as_proc5_writes_them() {
        let stat = "42 (a (weird) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 \
                    12345 1000 200 18446744073709551615";
        let fields = stat_fields(stat).unwrap();
        assert_eq!(fields[UTIME], "250");
        assert_eq!(fields[STIME], "50");
        assert_eq!(fields[STARTTIME], "12345");
        assert_eq!(boot_time("cpu 1 2\nbtime 1700000000\n"), Some(1.7e9));
        assert_eq!(
            resident_bytes("Name:\tx\nVmRSS:\t    2048 kB\n"),
            Some(2048 * 1024)
        );
        assert_eq!(
            max_open_files(
                "Limit                     Soft Limit           Hard Limit           Units\n\
                 Max open files            1024                 524288               files\n"
            ),
            Some(1024)
        );
    }
}
