//! Nothing slow on the thread that routes messages (DESIGN §11), measured on a real world:
//! `cargo bench --bench routing [-- ROUNDS]`.
//!
//! Two actors play sequential round trips, first alone, then while a third appends to a 200 MB
//! file in a loop (every open for append copies the file: commit-on-close). Prints p50, p99 and
//! the maximum of each run as a table; the target is beside them. Figures, not pass/fail.

mod common;
use common::{Host, build_actors, world};

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use sausage::message::ActorId;

/// Round trips per run unless the first argument says otherwise.
const ROUNDS: u64 = 2_000;

/// The size of the appender's file.
const BIG_FILE_MB: usize = 200;

/// How long the appender would go on; the host is stopped long before (and kills it).
const APPEND_FOR_MS: u64 = 600_000;

fn main() {
    let rounds = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(ROUNDS);
    let actors = build_actors();
    let (_dir, world) = world(
        &actors,
        &[
            ("ping", "pingpong"),
            ("pong", "pingpong"),
            ("appender", "pingpong"),
        ],
    );
    let appender = ActorId::parse("appender").expect("valid");
    let big = world.data_dir(&appender).join("big");
    let mut file = std::fs::File::create(&big).expect("the big file");
    let chunk = vec![b'.'; 1 << 20];
    for _ in 0..BIG_FILE_MB {
        file.write_all(&chunk).expect("the big file");
    }
    file.write_all(b"\n").expect("the big file");
    drop(file);

    let mut host = Host::start(&world);
    host.tell(
        "ping",
        json!({"type": "run", "peer": "pong", "rounds": 500}),
    );
    host.wait("ping", "stats");
    let alone = round_trips(&mut host, rounds);

    host.tell(
        "appender",
        json!({"type": "append", "path": "/data/big", "ms": APPEND_FOR_MS}),
    );
    host.wait("appender", "appending");
    let started = Instant::now();
    let loaded = round_trips(&mut host, rounds);
    host.quit();
    let seconds = started.elapsed().as_secs_f64();
    let appends = last_append(&big);

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("\nRouting while one actor appends to a {BIG_FILE_MB} MB file — {cores} cores\n");
    println!("| {rounds} round trips | p50 | p99 | max |");
    println!("| --- | --- | --- | --- |");
    for (what, stats) in [
        ("two actors alone", &alone),
        ("while a third appends", &loaded),
    ] {
        println!(
            "| {what} | {} µs | {} µs | {} µs |",
            stats["p50_us"], stats["p99_us"], stats["max_us"]
        );
    }
    println!(
        "\nTarget: p99 < 2 ms while the appender runs. It committed {appends} appends \
         (each a copy of {BIG_FILE_MB} MB) in the {seconds:.1} s from its start to the host's stop."
    );
}

/// How many appends the appender committed: the number on the file's last line
/// (`append <n>`), 0 when none was committed.
fn last_append(big: &Path) -> u64 {
    let mut file = std::fs::File::open(big).expect("the big file");
    file.seek(SeekFrom::End(-64)).expect("it is big");
    let mut tail = String::new();
    file.read_to_string(&mut tail).expect("the big file");
    tail.lines()
        .last()
        .and_then(|line| line.strip_prefix("append "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `rounds` round trips between `ping` and `pong`: their `stats`.
fn round_trips(host: &mut Host, rounds: u64) -> Value {
    host.tell(
        "ping",
        json!({"type": "run", "peer": "pong", "rounds": rounds}),
    );
    host.wait("ping", "stats")
}
