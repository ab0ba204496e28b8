//! Nothing slow on the thread that routes messages (DESIGN §11), and no busy actor holding it,
//! measured on a real world: `cargo bench --bench routing [-- MS]`.
//!
//! Two actors play sequential round trips for 2 s (or MS), first alone, then beside each of
//! three loads in turn: a third actor appending to a 200 MB file in a loop (every open for
//! append copies the file: commit-on-close), a fourth computing without a pause (it yields only
//! when the epoch interrupts it), and a fifth flooding its stderr (`stderr.log` appended and
//! rotated at 10 MiB). Prints the count, p50, p99 and maximum of each run, and what each load
//! did meanwhile, as a table; the target is under it. Figures, not pass/fail.

mod common;
use common::{Host, build_actors, world};

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use sausage_core::message::ActorId;

/// How long each run of round trips lasts unless the first argument says otherwise.
const RUN_MS: u64 = 2_000;

/// How much longer than a run a load goes on, so that it covers the whole run.
const LOAD_MARGIN_MS: u64 = 1_000;

/// The size of the appender's file.
const BIG_FILE_MB: usize = 200;

/// The logger's flood: lines of this many bytes, as many as make `LOG_FLOOD_MB` (far more than
/// a run lasts; the host's stop ends it).
const LOG_LINE: u64 = 1_000;
const LOG_FLOOD_MB: u64 = 10_000;

fn main() {
    let run_ms = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(RUN_MS);
    let actors = build_actors();
    let (_dir, world) = world(
        &actors,
        &[
            ("ping", "pingpong"),
            ("pong", "pingpong"),
            ("appender", "pingpong"),
            ("spinner", "pingpong"),
            ("logger", "crasher"),
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
    let mut rows = vec![(
        "two actors alone".to_string(),
        round_trips(&mut host, run_ms),
    )];

    let load_ms = run_ms + LOAD_MARGIN_MS;
    host.tell(
        "appender",
        json!({"type": "append", "path": "/data/big", "ms": load_ms}),
    );
    host.wait("appender", "appending");
    let before = last_append(&big);
    let stats = round_trips(&mut host, run_ms);
    let appends = last_append(&big) - before;
    host.wait("appender", "appended");
    rows.push((
        format!("while a third appends to a {BIG_FILE_MB} MB file ({appends} appends, each a copy of it, in the run)"),
        stats,
    ));

    host.tell("spinner", json!({"type": "spin", "ms": load_ms}));
    host.wait("spinner", "spinning");
    let stats = round_trips(&mut host, run_ms);
    host.wait("spinner", "spun");
    rows.push(("while a fourth computes without a pause".to_string(), stats));

    let log = world.log_path(&ActorId::parse("logger").expect("valid"));
    host.tell(
        "logger",
        json!({"type": "log", "lines": LOG_FLOOD_MB * 1_000_000 / LOG_LINE, "width": LOG_LINE}),
    );
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while last_logged(&log) == 0 {
        assert!(
            Instant::now() < deadline,
            "the logger wrote nothing in 30 s"
        );
        std::thread::yield_now();
    }
    let (flooded, before) = (Instant::now(), last_logged(&log));
    let stats = round_trips(&mut host, run_ms);
    let seconds = flooded.elapsed().as_secs_f64();
    let rate = (last_logged(&log) - before) as f64 * LOG_LINE as f64 / 1e6 / seconds;
    rows.push((
        format!("while a fifth floods its stderr ({rate:.0} MB/s into its log, rotated at 10 MiB)"),
        stats,
    ));
    host.quit();

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("\nRouting beside a big file, a busy actor and a log flood — {cores} cores\n");
    println!(
        "| round trips for {:.1} s | count | p50 | p99 | max |",
        run_ms as f64 / 1e3
    );
    println!("| --- | --- | --- | --- | --- |");
    for (what, stats) in &rows {
        println!(
            "| {what} | {} | {} µs | {} µs | {} µs |",
            stats["rounds"], stats["p50_us"], stats["p99_us"], stats["max_us"]
        );
    }
    println!("\nTarget: p99 < 2 ms while the appender runs.");
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

/// The number of the last whole line in the logger's `stderr.log` (`line <n> ....`), 0 before
/// the first: the lines it has written so far, however often the log was rotated.
fn last_logged(log: &Path) -> u64 {
    let Ok(mut file) = std::fs::File::open(log) else {
        return 0;
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(2 * LOG_LINE)));
    let mut tail = Vec::new();
    let _ = file.read_to_end(&mut tail);
    let tail = String::from_utf8_lossy(&tail);
    // The text after the last newline may be a line still being written.
    let whole = tail.rsplit_once('\n').map_or("", |(whole, _)| whole);
    whole
        .lines()
        .filter_map(|line| line.strip_prefix("line "))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .next_back()
        .unwrap_or(0)
}

/// Round trips between `ping` and `pong` for `ms`: their `stats`.
fn round_trips(host: &mut Host, ms: u64) -> Value {
    host.tell(
        "ping",
        json!({"type": "run", "peer": "pong", "rounds": u64::MAX, "ms": ms}),
    );
    host.wait("ping", "stats")
}
