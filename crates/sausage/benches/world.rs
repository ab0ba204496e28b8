//! Sausage's speed and memory figures, measured on real worlds: `cargo bench`.
//!
//! Builds its own actors, then measures each figure of the speed issue and prints a table with
//! the machine's core count. Figures, not pass/fail: the targets are printed beside them.
//! `cargo bench -- WORD…` measures only the groups whose name contains a word (`round_trips`,
//! `flood`, `floor`, `start_up`, `memory`, `upgrade`, `shadow`, `window`, `traces`, `compile`).

mod common;
mod floor;
use common::{Host, build_actors, build_agent, repo, world};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use sausage_core::message::ActorId;
use sausage_core::runtime::Runtime;
use sausage_core::world::World;

/// One line of the table: what, the figure, the target.
struct Figure {
    what: String,
    value: String,
    target: &'static str,
}

fn main() {
    // `cargo bench -- start` runs the groups whose name contains `start`; no word runs all.
    let words: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |group: &str| words.is_empty() || words.iter().any(|w| group.contains(w.as_str()));
    let actors = build_actors();
    let mut figures = Vec::new();
    if wanted("round_trips") {
        round_trips(&actors, &mut figures);
    }
    if wanted("flood") {
        flood(&actors, &mut figures);
    }
    if wanted("floor") {
        floor(&actors, &mut figures);
    }
    if wanted("start_up") {
        start_up(&actors, &mut figures);
    }
    if wanted("memory") {
        memory(&actors, &mut figures);
    }
    if wanted("upgrade") {
        for megabytes in [1, 1024] {
            upgrade(&actors, megabytes, Build::New, &mut figures);
        }
        upgrade(&actors, 1024, Build::CompiledAhead, &mut figures);
    }
    if wanted("shadow") {
        shadow(&actors, &mut figures);
    }
    if wanted("window") {
        window(&actors, &mut figures);
    }
    if wanted("traces") {
        traces(&actors, &mut figures);
    }
    if wanted("compile") {
        compile(
            &actors.join("echo.wasm"),
            "small actor (echo)",
            "",
            &mut figures,
        );
        compile(&build_agent(), "the agent", "", &mut figures);
    }

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("\nSausage benchmarks — {cores} cores\n");
    println!("| figure | measured | target |");
    println!("| --- | --- | --- |");
    for f in figures {
        println!("| {} | {} | {} |", f.what, f.value, f.target);
    }
}

fn round_trips(actors: &Path, figures: &mut Vec<Figure>) {
    let (_dir, world) = world(actors, &[("ping", "pingpong"), ("pong", "pingpong")]);
    let mut host = Host::start(&world);
    host.tell(
        "ping",
        json!({"type": "run", "peer": "pong", "rounds": 2000}),
    );
    host.wait("ping", "stats");
    host.tell(
        "ping",
        json!({"type": "run", "peer": "pong", "rounds": 50000}),
    );
    let stats = host.wait("ping", "stats");
    host.quit();
    figures.push(Figure {
        what: "round trip between two actors, p50 / p99".into(),
        value: format!("{} µs / {} µs", stats["p50_us"], stats["p99_us"]),
        target: "p50 ≤ 4 µs",
    });
    figures.push(Figure {
        what: "round trips a second".into(),
        value: format!("{:.0}", stats["per_sec"].as_f64().unwrap_or(0.0)),
        target: "≥ 250,000",
    });
}

fn flood(actors: &Path, figures: &mut Vec<Figure>) {
    const COUNT: u64 = 1_000_000;
    let (_dir, world) = world(
        actors,
        &[("producer", "pingpong"), ("consumer", "pingpong")],
    );
    let mut host = Host::start(&world);
    host.tell("consumer", json!({"type": "report"}));
    host.wait("consumer", "report");
    let started = Instant::now();
    host.tell(
        "producer",
        json!({"type": "flood", "to": "consumer", "count": COUNT}),
    );
    let report = loop {
        host.tell("consumer", json!({"type": "report"}));
        let report = host.wait("consumer", "report");
        if report["received"] == COUNT || started.elapsed() > Duration::from_secs(120) {
            break report;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let seconds = started.elapsed().as_secs_f64();
    host.quit();
    figures.push(Figure {
        what: format!("flood of {COUNT} messages into a live consumer"),
        value: flooded(&report, seconds),
        target: "all, in order, ≥ 1,000,000/s",
    });
}

/// The round trip and the flood of the two groups above on the floors under them: the same
/// guests joined by a broker that only passes lines on, on Sausage's runtime and on wasmtime
/// alone (`floor`).
fn floor(actors: &Path, figures: &mut Vec<Figure>) {
    let wasm = actors.join("pingpong.wasm");
    for (on, what) in [
        (floor::On::Sausage, "Sausage's runtime"),
        (
            floor::On::Wasmtime,
            "wasmtime alone (its defaults: guard pages)",
        ),
    ] {
        floor_on(&wasm, on, what, figures);
    }
}

fn floor_on(wasm: &Path, on: floor::On, what: &str, figures: &mut Vec<Figure>) {
    const COUNT: u64 = 1_000_000;
    let stats = {
        let floor = floor::Floor::start(wasm, &["ping", "pong"], on);
        floor.tell(
            "ping",
            json!({"type": "run", "peer": "pong", "rounds": 2000}),
        );
        floor.wait("stats");
        floor.tell(
            "ping",
            json!({"type": "run", "peer": "pong", "rounds": 50000}),
        );
        floor.wait("stats")
    };
    figures.push(Figure {
        what: format!(
            "the floor on {what}, a broker that only passes lines on: round trip p50 / p99 / a \
             second"
        ),
        value: format!(
            "{} µs / {} µs / {:.0}",
            stats["p50_us"],
            stats["p99_us"],
            stats["per_sec"].as_f64().unwrap_or(0.0)
        ),
        target: "(none: what the host adds to)",
    });
    let floor = floor::Floor::start(wasm, &["producer", "consumer"], on);
    floor.tell("consumer", json!({"type": "report"}));
    floor.wait("report");
    let started = Instant::now();
    floor.tell(
        "producer",
        json!({"type": "flood", "to": "consumer", "count": COUNT}),
    );
    floor.wait("flooded");
    floor.tell("consumer", json!({"type": "report"}));
    let report = floor.wait("report");
    let seconds = started.elapsed().as_secs_f64();
    figures.push(Figure {
        what: format!("the floor on {what}: flood of {COUNT} messages"),
        value: flooded(&report, seconds),
        target: "(none: what the host adds to)",
    });
}

/// A flood's figure from the consumer's `report` and the seconds it took.
fn flooded(report: &Value, seconds: f64) -> String {
    format!(
        "{} arrived, in order: {}, {:.0} messages/s",
        report["received"],
        report["in_order"],
        report["received"].as_f64().unwrap_or(0.0) / seconds
    )
}

/// Whole processes, as a person starts a world: from launching `sausage run` until every
/// actor's `status.json` says `running`, and until a small actor's answer to a message typed at
/// once is printed. The first run compiles every actor; the next ones load the cache.
fn start_up(actors: &Path, figures: &mut Vec<Figure>) {
    let ids: Vec<String> = (1..=8).map(|n| format!("echo{n}")).collect();
    let installs: Vec<(&str, &str)> = ids.iter().map(|id| (id.as_str(), "echo")).collect();
    let (_dir, world) = world(actors, &installs);
    let measure = || {
        let started = Instant::now();
        let mut host = Host::start(&world);
        host.tell("echo1", json!({"type": "ping"}));
        let all_running = wait_all_running(&world, &ids, started);
        let (answered, _) = host.wait_timed("echo1", "ping");
        host.quit();
        (all_running, answered - started)
    };
    let (cold_running, cold_answer) = measure();
    // The median of a few warm starts: one process start is at the mercy of the scheduler.
    let mut warm: Vec<(Duration, Duration)> = (0..5).map(|_| measure()).collect();
    warm.sort();
    let warm_running = warm[warm.len() / 2].0;
    let mut answers: Vec<Duration> = warm.iter().map(|w| w.1).collect();
    answers.sort();
    let warm_answer = answers[answers.len() / 2];
    figures.push(Figure {
        what: "`sausage run` with 8 actors until all say `running`: first run (compiling) / next \
               runs (median of 5)"
            .into(),
        value: format!("{} / {}", ms(cold_running), ms(warm_running)),
        target: "next run ≤ 100 ms",
    });
    figures.push(Figure {
        what: "`sausage run` until a small actor's answer is printed: first run / next runs".into(),
        value: format!("{} / {}", ms(cold_answer), ms(warm_answer)),
        target: "next run ≤ 10 ms",
    });
}

/// Waits until every actor's `status.json` says `running` (in a world whose files said
/// otherwise at launch) and returns the time since `started`.
fn wait_all_running(world: &World, ids: &[String], started: Instant) -> Duration {
    for id in ids {
        let path = world.status_path(&ActorId::parse(id).expect("valid"));
        loop {
            let running = std::fs::read(&path)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
                .is_some_and(|status| status["state"] == "running");
            if running {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{id} never ran"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    started.elapsed()
}

fn memory(actors: &Path, figures: &mut Vec<Figure>) {
    let ids: Vec<String> = (1..=8).map(|n| format!("echo{n}")).collect();
    let installs: Vec<(&str, &str)> = ids.iter().map(|id| (id.as_str(), "echo")).collect();
    let (_dir, world) = world(actors, &installs);
    // The first run compiles (Cranelift's peak); the next reads the cache, as every later run.
    let mut idle = 0.0;
    let peaks: Vec<String> = (0..2)
        .map(|run| {
            let mut host = Host::start(&world);
            for id in &ids {
                host.tell(id, json!({"type": "ping"}));
                host.wait(id, "ping");
            }
            let peak = peak_memory(host.child.id());
            if run == 1 {
                let before = cpu_time(host.child.id());
                std::thread::sleep(IDLE_FOR);
                // A blocking-pool thread that ends meanwhile takes its count with it.
                let used = cpu_time(host.child.id()).saturating_sub(before);
                idle = used.as_secs_f64() / IDLE_FOR.as_secs_f64();
            }
            host.quit();
            peak
        })
        .collect();
    figures.push(Figure {
        what: "peak memory of the host with 8 running actors: first run / next run".into(),
        value: format!("{} / {}", peaks[0], peaks[1]),
        target: "≤ 32 MB",
    });
    figures.push(Figure {
        what: format!(
            "CPU of the host while its 8 actors wait for messages ({} s)",
            IDLE_FOR.as_secs()
        ),
        value: format!("{:.2}% of a core", idle * 100.0),
        target: "",
    });
}

/// How long the idle host's CPU time is measured.
const IDLE_FOR: Duration = Duration::from_secs(5);

/// The CPU time a process's threads have used so far, as the scheduler counts it (nanoseconds
/// in `/proc/<pid>/task/*/schedstat`).
fn cpu_time(pid: u32) -> Duration {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the host's threads");
    Duration::from_nanos(
        tasks
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
            .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
            .sum(),
    )
}

/// The peak resident memory of a process, as the kernel counts it.
fn peak_memory(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(f64::NAN);
    format!("{:.1} MB", kb / 1024.0)
}

/// Whether the build an upgrade takes is compiled when the upgrade comes.
#[derive(Clone, Copy, PartialEq)]
enum Build {
    /// Never seen: the upgrade compiles it.
    New,
    /// Compiled into the world's component cache before the upgrade is asked for, as `cargo`
    /// compiles each build it publishes (so an agent's upgrade finds it compiled).
    CompiledAhead,
}

/// An upgrade as the agent makes one: to a different build, of an actor whose `/data` holds
/// 1,000 small files and one big file; the request until `upgraded`, and that build's compile
/// on its own: for a new build the part of the upgrade that is not compiling, for one compiled
/// ahead the compile `cargo` made before.
fn upgrade(actors: &Path, megabytes: u64, build: Build, figures: &mut Vec<Figure>) {
    let (dir, world) = world(actors, &[("notes", "notes")]);
    let notes = ActorId::parse("notes").expect("valid");
    let data = world.data_dir(&notes);
    for n in 0..1000 {
        let folder = data.join(format!("f{:02}", n / 100));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join(format!("{n}.json")), format!("{{\"n\":{n}}}\n")).unwrap();
    }
    let mut file = std::fs::File::create(data.join("bulk")).unwrap();
    let chunk = vec![7u8; 1 << 20];
    for _ in 0..megabytes {
        file.write_all(&chunk).unwrap();
    }
    drop(file);
    // Another build: the same code with one more custom section, so nothing is cached for it.
    let wasm = dir.path().join("notes-v2.wasm");
    let bytes = different_build(&std::fs::read(actors.join("notes.wasm")).unwrap());
    std::fs::write(&wasm, &bytes).unwrap();

    let mut host = Host::start(&world);
    host.tell("notes", json!({"type": "count"}));
    host.wait("notes", "count");
    let compile_in = |cache: Option<PathBuf>| {
        let compiling = Instant::now();
        (Runtime::new(cache).expect("an engine").compile(&bytes)).expect("it compiles");
        compiling.elapsed()
    };
    // What `cargo` does as it publishes a build: compile it into the world's cache.
    let ahead = (build == Build::CompiledAhead).then(|| compile_in(Some(world.cache_dir())));
    let source = repo().join("actors/notes");
    let started = Instant::now();
    host.tell(
        "broker",
        json!({"type": "upgrade", "actor": "notes", "wasm": wasm, "source": source, "shadow": "off"}),
    );
    let reply = host.wait("broker", "upgraded");
    let took = started.elapsed();
    host.quit();
    assert_eq!(reply["version"], 2);
    let files = format!("/data of 1,000 files and {megabytes} MB");
    figures.push(match ahead {
        None => {
            let compile = compile_in(None);
            Figure {
                what: format!(
                    "upgrade to a new build until `upgraded` (no shadow run), {files}: all / \
                     without its compile ({})",
                    ms(compile)
                ),
                value: format!("{} / {}", ms(took), ms(took.saturating_sub(compile))),
                target: "",
            }
        }
        Some(compile) => Figure {
            what: format!(
                "upgrade to a build `cargo` compiled as it published it ({} before), until \
                 `upgraded` (no shadow run), {files}",
                ms(compile)
            ),
            value: ms(took),
            target: "≤ 0.05× the seed's spike (2,746 ms): ≤ 137 ms",
        },
    });
}

/// What a shadow run adds to an upgrade (DESIGN §21): `echo` reads 256 messages, then is
/// upgraded (to the same build, its transcript passing) three times with `"shadow": "off"` and
/// three times with `"report"`, alternately; the medians until `upgraded`.
fn shadow(actors: &Path, figures: &mut Vec<Figure>) {
    const MESSAGES: u64 = 256;
    let (_dir, world) = world(actors, &[("e", "echo")]);
    let mut host = Host::start(&world);
    for n in 0..MESSAGES {
        host.tell("e", json!({"type": "n", "n": n}));
        host.wait("e", "n");
    }
    let wasm = actors.join("echo.wasm");
    let source = repo().join("actors/echo");
    let (mut off, mut report) = (Vec::new(), Vec::new());
    let mut compared = Value::Null;
    for round in 0..6 {
        let mode = if round % 2 == 0 { "off" } else { "report" };
        let started = Instant::now();
        host.tell(
            "broker",
            json!({"type": "upgrade", "actor": "e", "wasm": wasm, "source": source, "shadow": mode}),
        );
        let reply = host.wait("broker", "upgraded");
        let took = started.elapsed();
        if mode == "off" {
            off.push(took);
        } else {
            compared = reply["shadow"]["messages"].clone();
            report.push(took);
        }
    }
    host.quit();
    let (off, report) = (median(off), median(report));
    figures.push(Figure {
        what: format!(
            "upgrade of a small actor (echo) after {MESSAGES} messages, until `upgraded`: \
             shadow off / shadow run of its last {compared} messages (three runs) / the difference"
        ),
        value: format!(
            "{} / {} / {}",
            ms(off),
            ms(report),
            ms(report.saturating_sub(off))
        ),
        target: "the shadow run adds ≤ 300 ms",
    });
}

/// What keeping the window costs a round trip: `ping` and `pong` with their windows (the
/// default 256) and without (`"window": 0` in their manifests), alternately, twice each.
fn window(actors: &Path, figures: &mut Vec<Figure>) {
    let [kept, none] = round_trips_a_b(actors, |world, second| {
        if second {
            for id in ["ping", "pong"] {
                let id = ActorId::parse(id).expect("valid");
                std::fs::write(world.source_dir(&id).join("actor.json"), r#"{"window": 0}"#)
                    .unwrap();
            }
        }
        Host::start(world)
    });
    figures.push(Figure {
        what: "round trip with each actor's window kept (256) / without (`\"window\": 0`): \
               p50 / p99, round trips a second"
            .into(),
        value: format!("{kept} / {none}"),
        target: "no measurable difference",
    });
}

/// What traces cost a round trip (DESIGN §22): `ping` and `pong` on a host with no endpoint
/// and on one exporting every delivery's span over OTLP/HTTP to a local sink that answers each
/// export at once, alternately, twice each.
fn traces(actors: &Path, figures: &mut Vec<Figure>) {
    let sink = otlp_sink();
    let [off, exported] = round_trips_a_b(actors, |world, second| match second {
        false => Host::start(world),
        true => Host::start_with(world, &["--otlp", &sink]),
    });
    figures.push(Figure {
        what: "round trip with traces off / every span exported over OTLP/HTTP: p50 / p99, \
               round trips a second"
            .into(),
        value: format!("{off} / {exported}"),
        target: "off: as before traces (p50 10 µs, 88,000/s)",
    });
}

/// Round trips between `ping` and `pong` on hosts `start` makes, the first way and the second
/// (`start`'s flag), alternately, twice each: each way's medians as `p50 / p99 µs, n/s`.
fn round_trips_a_b(actors: &Path, start: impl Fn(&World, bool) -> Host) -> [String; 2] {
    let mut runs: [Vec<Value>; 2] = [Vec::new(), Vec::new()];
    for round in 0..4 {
        let second = round % 2 == 1;
        let (_dir, world) = world(actors, &[("ping", "pingpong"), ("pong", "pingpong")]);
        let mut host = start(&world, second);
        host.tell(
            "ping",
            json!({"type": "run", "peer": "pong", "rounds": 2000}),
        );
        host.wait("ping", "stats");
        host.tell(
            "ping",
            json!({"type": "run", "peer": "pong", "rounds": 50000}),
        );
        runs[usize::from(second)].push(host.wait("ping", "stats"));
        host.quit();
    }
    runs.map(|stats| {
        let field = |name: &str| {
            let mut values: Vec<f64> = stats.iter().filter_map(|s| s[name].as_f64()).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        format!(
            "{:.0} / {:.0} µs, {:.0}/s",
            field("p50_us"),
            field("p99_us"),
            field("per_sec")
        )
    })
}

/// An OTLP/HTTP endpoint that reads each export and answers 200 with an empty body: what a
/// collector costs the host, without one.
fn otlp_sink() -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let line = line.trim_end();
                        if line.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err()
                        || stream
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                            .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// `wasm` with a custom section appended: a valid component that hashes differently.
fn different_build(wasm: &[u8]) -> Vec<u8> {
    let name = b"sausage-bench";
    let payload = format!("{:?}", Instant::now());
    let size = 1 + name.len() + payload.len();
    assert!(size < 128, "one-byte LEB128 sizes");
    let mut bytes = wasm.to_vec();
    bytes.extend_from_slice(&[0, size as u8, name.len() as u8]);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload.as_bytes());
    bytes
}

fn compile(wasm: &Path, what: &str, target: &'static str, figures: &mut Vec<Figure>) {
    let bytes = std::fs::read(wasm).expect("built");
    let runtime = Runtime::new(None).expect("an engine");
    let started = Instant::now();
    runtime.compile(&bytes).expect("it compiles");
    figures.push(Figure {
        what: format!("compile of {what} ({} KB)", bytes.len() / 1024),
        value: ms(started.elapsed()),
        target,
    });
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}
