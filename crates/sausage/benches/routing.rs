//! Nothing slow on the thread that routes messages (DESIGN §11), measured on a real world:
//! `cargo bench --bench routing [-- ROUNDS]`.
//!
//! Two actors play sequential round trips, first alone, then while a third appends to a 200 MB
//! file in a loop (every open for append copies the file: commit-on-close). Prints p50, p99 and
//! the maximum of each run as a table; the target is beside them. Figures, not pass/fail.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use sausage::message::ActorId;
use sausage::world::World;

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
    let alone = host.round_trips(rounds);

    host.tell(
        "appender",
        json!({"type": "append", "path": "/data/big", "ms": APPEND_FOR_MS}),
    );
    host.wait("appender", "appending");
    let started = Instant::now();
    let loaded = host.round_trips(rounds);
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

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository exists")
}

fn build_actors() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(repo().join("actors/Cargo.toml"))
        .arg("--target-dir")
        .arg(repo().join("target/actors"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the test actors failed");
    repo().join("target/actors/wasm32-wasip2/release")
}

/// A new world in a temporary folder with these actors installed as version 1, as `spawn`
/// leaves them.
fn world(actors: &Path, installs: &[(&str, &str)]) -> (tempfile::TempDir, World) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let world = World::new(dir.path().join("world"));
    world.create().expect("a new world");
    let mut registry = world.load_registry().expect("its registry");
    for (id, actor) in installs {
        let id = ActorId::parse(id).expect("a valid id");
        let version = world.version_dir(&id, 1);
        std::fs::create_dir_all(version.join("source")).unwrap();
        std::fs::copy(
            actors.join(format!("{actor}.wasm")),
            version.join("actor.wasm"),
        )
        .unwrap();
        sausage::world::copy_tree(&repo().join("actors").join(actor), &version.join("source"))
            .unwrap();
        world.create_actor_dirs(&id).unwrap();
        world.install_source(&id, 1).unwrap();
        registry.actors.insert(
            id.to_string(),
            sausage::world::ActorEntry {
                version: 1,
                next_version: 2,
                running: true,
            },
        );
    }
    world.save_registry(&registry).unwrap();
    (dir, world)
}

/// `sausage run` on a world, driven through its console.
struct Host {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Host {
    fn start(world: &World) -> Host {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sausage"))
            .arg("run")
            .arg(world.root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sausage runs");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().expect("piped");
        Host {
            child,
            stdin,
            lines,
        }
    }

    fn tell(&mut self, to: &str, body: Value) {
        writeln!(self.stdin, "@{to} {body}").expect("the console reads");
        self.stdin.flush().expect("the console reads");
    }

    /// The body of the next printed message from `from` whose type is `kind`; an `error` from
    /// it ends the bench.
    fn wait(&mut self, from: &str, kind: &str) -> Value {
        let head = format!("[{from}] (reply) ");
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(3600))
                .unwrap_or_else(|_| panic!("no `{kind}` from {from}"));
            if let Some(body) = line.strip_prefix(&head)
                && let Ok(body) = serde_json::from_str::<Value>(body)
            {
                assert_ne!(body["type"], "error", "{from}: {body}");
                if body["type"] == kind {
                    return body;
                }
            }
        }
    }

    /// `rounds` round trips between `ping` and `pong`: their `stats`.
    fn round_trips(&mut self, rounds: u64) -> Value {
        self.tell(
            "ping",
            json!({"type": "run", "peer": "pong", "rounds": rounds}),
        );
        self.wait("ping", "stats")
    }

    fn quit(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}
