//! What a world spread over hosts costs (DESIGN §16): `cargo bench --bench cluster`.
//!
//! Starts its own NATS server with JetStream (`scripts/install-nats` puts one in
//! `target/nats-venv`), then whole `sausage run --cluster` processes on this machine: host `a`
//! seeds the cluster with `ping` and `producer`, host `b` joins and gets `pong`, `consumer` and
//! `notes` (spawned through `a`, placed on the least loaded host). It measures round trips
//! between `ping` (on a) and `pong` (on b), a flood from `producer` to `consumer`, what a
//! SIGKILL of `b` costs (the time until `pong` answers again from `a`, and the notes committed
//! on `b` since its last snapshot that are gone), and prints the markdown table for `docs/benchmarks.md`.
//! It runs twice, with the server's JetStream default (a sync to disk every two minutes) and
//! with `sync_interval: always` (each write synced before it is acknowledged, as the README's
//! and the tests' servers run), side by side: what durability costs.

mod common;
use common::{Host, build_actors, repo, world};

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Figure {
    what: String,
    value: String,
}

fn main() {
    let actors = build_actors();
    let default = measure(&actors, false);
    let synced = measure(&actors, true);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("\nSausage on several hosts — 2 hosts and NATS on one machine, {cores} cores\n");
    println!("| figure | JetStream's default (sync every 2 min) | `sync_interval: always` |");
    println!("| --- | --- | --- |");
    for (default, synced) in default.into_iter().zip(synced) {
        println!(
            "| {} | {} | {} |",
            default.what, default.value, synced.value
        );
    }
}

/// Every figure, on a NATS server that syncs each write before it acknowledges it when `sync`.
fn measure(actors: &Path, sync: bool) -> Vec<Figure> {
    let actors = actors.to_path_buf();
    let nats = NatsServer::start(sync);
    let url = nats.url();
    let mut figures = Vec::new();

    // Three actors on a, so the three spawned next all go to b, the least loaded host.
    let (_one, one) = world(
        &actors,
        &[
            ("ping", "pingpong"),
            ("producer", "pingpong"),
            ("idle", "echo"),
        ],
    );
    let (_two, two) = world(&actors, &[]);
    let mut a = Host::start_with(&one, &["--no-web", "--cluster", &url, "--host-id", "a"]);
    until(&mut a, "ping to run on a", |list| {
        state(list, "ping") == "running" && state(list, "producer") == "running"
    });
    let mut b = Host::start_with(&two, &["--no-web", "--cluster", &url, "--host-id", "b"]);
    until(&mut a, "b to join", |list| {
        list["hosts"].as_array().is_some_and(|h| h.len() == 2)
    });
    for (id, actor) in [
        ("pong", "pingpong"),
        ("consumer", "pingpong"),
        ("notes", "notes"),
    ] {
        let wasm = actors.join(format!("{actor}.wasm"));
        a.tell(
            "broker",
            json!({"type": "spawn", "actor": id, "wasm": wasm.to_str().unwrap()}),
        );
        a.wait("broker", "spawned");
    }
    let list = until(&mut a, "pong, consumer and notes to run on b", |list| {
        ["pong", "consumer", "notes"]
            .iter()
            .all(|id| state(list, id) == "running" && host_of(list, id) == "b")
    });
    assert_eq!(host_of(&list, "ping"), "a");

    // Round trips across hosts: each goes through the mailbox stream twice.
    a.tell(
        "ping",
        json!({"type": "run", "peer": "pong", "rounds": 200}),
    );
    a.wait("ping", "stats");
    a.tell(
        "ping",
        json!({"type": "run", "peer": "pong", "rounds": 3000}),
    );
    let stats = a.wait("ping", "stats");
    figures.push(Figure {
        what: "round trip between hosts (ping on a, pong on b), p50 / p99".into(),
        value: format!("{} µs / {} µs", stats["p50_us"], stats["p99_us"]),
    });
    figures.push(Figure {
        what: "round trips a second between hosts".into(),
        value: format!("{:.0}", stats["per_sec"].as_f64().unwrap_or(0.0)),
    });

    // The floor under that round trip: the same two hops over JetStream alone, one client
    // for each side, no Sausage in between (each way published, stored, pulled, acknowledged).
    let (p50, p99) = jetstream_round_trip(&url, 3000);
    figures.push(Figure {
        what: "the same round trip over JetStream alone (two clients, no host), p50 / p99".into(),
        value: format!("{} µs / {} µs", p50.as_micros(), p99.as_micros()),
    });

    // A flood across hosts, whole and in order.
    const COUNT: u64 = 100_000;
    a.tell("consumer", json!({"type": "report"}));
    a.wait("consumer", "report");
    let started = Instant::now();
    a.tell(
        "producer",
        json!({"type": "flood", "to": "consumer", "count": COUNT}),
    );
    let report = loop {
        a.tell("consumer", json!({"type": "report"}));
        let report = a.wait("consumer", "report");
        if report["received"] == COUNT || started.elapsed() > Duration::from_secs(300) {
            break report;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let seconds = started.elapsed().as_secs_f64();
    figures.push(Figure {
        what: format!("flood of {COUNT} messages from a to b"),
        value: format!(
            "{} arrived, in order: {}, {:.0} messages/s",
            report["received"],
            report["in_order"],
            report["received"].as_f64().unwrap_or(0.0) / seconds
        ),
    });

    // What a commit costs on a cluster host (stored in the commits stream before it is made),
    // beside one host's: notes commits a file per `add`; the round trip from a's console is
    // timed, on b and on a single host.
    const NOTES: u64 = 20;
    let cluster_add = time_adds(&mut a, NOTES);
    let (_single, single) = world(&actors, &[("notes", "notes")]);
    let mut alone = Host::start_with(&single, &["--no-web"]);
    let single_add = time_adds(&mut alone, NOTES);
    alone.quit();
    figures.push(Figure {
        what: "a note added (one file commit), console to notes and back, p50".into(),
        value: format!(
            "{:.2} ms on a cluster (notes on b, its commit stored in JetStream first); {:.2} ms \
             on one host",
            cluster_add.as_secs_f64() * 1e3,
            single_add.as_secs_f64() * 1e3
        ),
    });

    // What a SIGKILL of b costs: the notes it committed, and the time until its actors answer
    // again from a.
    let killed = Instant::now();
    b.child.kill().expect("b is killed");
    let _ = b.child.wait();
    a.tell("ping", json!({"type": "run", "peer": "pong", "rounds": 1}));
    a.wait("ping", "stats");
    let failover = killed.elapsed();
    a.tell("notes", json!({"type": "count"}));
    let kept = a.wait("notes", "count")["count"].as_u64().unwrap_or(0);
    figures.push(Figure {
        what: "fail-over: SIGKILL of b until pong answers from a".into(),
        value: format!("{:.1} s", failover.as_secs_f64()),
    });
    figures.push(Figure {
        what: format!("notes committed on b in the {NOTES} adds before the kill, kept"),
        value: format!(
            "{kept} of {NOTES} (a commit returns once the cluster stored it; the next host \
             replays the commits after the last snapshot)"
        ),
    });
    a.quit();
    figures
}

/// The round trip of `rounds` messages between two JetStream clients, each reading its own
/// subject of one file-backed stream through a pull consumer (as a host reads a mailbox) and the
/// far one answering each message by publishing to the near one's: p50 and p99.
fn jetstream_round_trip(url: &str, rounds: usize) -> (Duration, Duration) {
    use async_nats::jetstream::{self, consumer, stream};
    use futures_util::StreamExt;

    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let near = jetstream::new(async_nats::connect(url).await.expect("a connection"));
        let far = jetstream::new(async_nats::connect(url).await.expect("a connection"));
        let floor = near
            .create_stream(stream::Config {
                name: "FLOOR".into(),
                subjects: vec!["floor.>".into()],
                storage: stream::StorageType::File,
                ..Default::default()
            })
            .await
            .expect("the stream");
        let reader = |name: &str| consumer::pull::Config {
            durable_name: Some(name.into()),
            filter_subject: format!("floor.{name}"),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        };
        let ping = floor
            .create_consumer(reader("ping"))
            .await
            .expect("a consumer");
        let pong = floor
            .create_consumer(reader("pong"))
            .await
            .expect("a consumer");
        let mut answers = ping.messages().await.expect("ping's reading");
        let mut asks = pong.messages().await.expect("pong's reading");
        let echo = tokio::spawn(async move {
            while let Some(Ok(ask)) = asks.next().await {
                let _ = ask.ack().await;
                let stored = far.publish("floor.ping", ask.payload.clone()).await;
                tokio::spawn(async move { stored.expect("sent").await.expect("stored") });
            }
        });
        let mut times = Vec::with_capacity(rounds);
        for round in 0..rounds + 200 {
            let started = Instant::now();
            let stored = near
                .publish("floor.pong", format!("{round}").into())
                .await
                .expect("sent");
            let answer = answers.next().await.expect("an answer").expect("an answer");
            if round >= 200 {
                times.push(started.elapsed());
            }
            let _ = answer.ack().await;
            stored.await.expect("stored");
        }
        echo.abort();
        times.sort();
        (times[times.len() / 2], times[times.len() * 99 / 100])
    })
}

/// Adds `n` notes through `host`'s console, one at a time; the median round trip.
fn time_adds(host: &mut Host, n: u64) -> Duration {
    let mut times: Vec<Duration> = (0..n)
        .map(|i| {
            let started = Instant::now();
            host.tell("notes", json!({"type": "add", "text": format!("note {i}")}));
            host.wait("notes", "added");
            started.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// The broker's list through `host`'s console, asked again until `ready` holds.
fn until(host: &mut Host, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        host.tell("broker", json!({"type": "list"}));
        let list = host.wait("broker", "actors");
        if ready(&list) {
            return list;
        }
        assert!(Instant::now() < deadline, "waiting for {what}: {list}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn row<'a>(list: &'a Value, id: &str) -> Option<&'a Value> {
    list["actors"].as_array()?.iter().find(|a| a["id"] == id)
}

fn state<'a>(list: &'a Value, id: &str) -> &'a str {
    row(list, id)
        .and_then(|r| r["state"].as_str())
        .unwrap_or("")
}

fn host_of<'a>(list: &'a Value, id: &str) -> &'a str {
    row(list, id).and_then(|r| r["host"].as_str()).unwrap_or("")
}

/// A NATS server with JetStream on free ports and a store of its own, killed when dropped.
struct NatsServer {
    child: Child,
    port: u16,
    _store: tempfile::TempDir,
}

impl NatsServer {
    /// A server; one that syncs every write to disk before it acknowledges it when `sync`.
    fn start(sync: bool) -> NatsServer {
        let binary = repo().join("target/nats-venv/bin/nats-server");
        assert!(
            Path::new(&binary).exists(),
            "{} is missing: run scripts/install-nats first",
            binary.display()
        );
        let store = tempfile::tempdir().expect("a temporary folder");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = store.path().join("sync.conf");
        let written = match sync {
            true => "jetstream {\n  sync_interval: always\n}\n",
            false => "",
        };
        std::fs::write(&config, written).expect("the server's configuration");
        let child = Command::new(&binary)
            .arg("-c")
            .arg(&config)
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(store.path().join("store"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server runs");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        NatsServer {
            child,
            port,
            _store: store,
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
