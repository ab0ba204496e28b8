//! How the host's cost grows with the number of actors: `cargo bench --bench scale`.
//!
//! For each size (1,000, 10,000 and 100,000 idle `echo` actors, or the sizes given as
//! arguments: `cargo bench --bench scale -- 1000 10000`) it makes a world with that many echo
//! actors and a `pingpong` pair, runs it once to fill the component cache, then measures a warm
//! start of the whole process (`sausage run WORLD`, as a person launches it) until every
//! actor's `status.json` says `running`, the host's resident memory per actor at its peak until
//! then and after (beside a world of the pair alone), and the pair's round trips (beside the
//! pair alone). A size that fails says what failed and where in its row, and the next size goes
//! on. `SAUSAGE_BIN=path` runs
//! another build of the host (to compare before and after a change).

mod common;
use common::{build_actors, repo};

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use sausage_core::message::ActorId;
use sausage_core::runtime::hibernate::HIBERNATE_AFTER;
use sausage_core::world::{ActorEntry, State, World};

/// How long one start may take until every actor runs before the size counts as failed.
const START_LIMIT: Duration = Duration::from_secs(300);
/// How long a stopping host may take before it is killed.
const STOP_LIMIT: Duration = Duration::from_secs(300);
/// Round trips measured per world, after a warm-up of a tenth of it.
const ROUNDS: u64 = 20_000;

/// Messages of the flood each world measures.
const FLOOD: u64 = 1_000_000;

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.replace(['_', ','], "").parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000, 10_000, 100_000]
    } else {
        sizes
    };
    let actors = build_actors();
    let scratch = tempfile::tempdir().expect("a temporary folder");

    let mut measured_worlds = Vec::new();
    let pair = Measured::of(&actors, scratch.path(), 0, &mut measured_worlds);
    let mut rows = Vec::new();
    for &n in &sizes {
        let measured = Measured::of(&actors, scratch.path(), n, &mut measured_worlds);
        rows.push(measured.row(n, &pair));
        eprintln!("scale: {}", rows.last().expect("just pushed"));
    }

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("\nSausage at scale — {cores} cores; idle `echo` actors plus a `pingpong` pair\n");
    println!(
        "| actors | first run until all run | warm start until all run | host memory per actor \
         at its peak while starting / when all run / idle | maps / fds per actor | round trip p50 / p99 (pair alone: {}) | \
         round trips a second / flood of {FLOOD} a second (pair alone: {}) |",
        pair.round_trip
            .as_ref()
            .map_or_else(|e| e.clone(), |(p50, p99)| format!("{p50} / {p99} µs")),
        pair.throughput.as_ref().map_or_else(
            |e| e.clone(),
            |(trips, flood)| format!("{trips:.0} / {flood:.0}")
        )
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for row in rows {
        println!("{row}");
    }
    println!(
        "| target (100,000) | | ≤ 15 s | ≤ 32 KB | | no slower than the pair alone | within 10% \
         of the pair alone |"
    );
    let removing: Vec<JoinHandle<()>> = measured_worlds
        .into_iter()
        .map(remove_in_background)
        .collect();
    for removal in removing {
        let _ = removal.join();
    }
}

/// What one world showed. Each figure is either measured or says why it could not be.
struct Measured {
    cold: Result<Duration, String>,
    warm: Result<Duration, String>,
    /// The host's resident memory at its peak until every actor ran (`VmHWM`), once every
    /// actor runs, and once it stops falling (idle instances are packed after
    /// `HIBERNATE_AFTER` without a poll).
    rss_kb: Result<(u64, u64, u64), String>,
    maps: u64,
    fds: u64,
    round_trip: Result<(u64, u64), String>,
    /// Round trips a second and messages a second of a flood of [`FLOOD`], the pair's.
    throughput: Result<(f64, f64), String>,
    /// One round trip from `ping` to `pong` while `pong` is packed (its unpack included), µs.
    woken: Result<u64, String>,
}

impl Measured {
    /// Makes a world of `n` echo actors and the pair, starts it twice and measures the second.
    fn of(actors: &Path, scratch: &Path, n: usize, measured_worlds: &mut Vec<PathBuf>) -> Measured {
        let made = Instant::now();
        let world = world(actors, scratch, n);
        eprintln!(
            "scale: {n} actors: world made in {:.1} s",
            secs(made.elapsed())
        );
        let mut measured = Measured {
            cold: Err("not run".into()),
            warm: Err("not run".into()),
            rss_kb: Err("not run".into()),
            maps: 0,
            fds: 0,
            round_trip: Err("not run".into()),
            throughput: Err("not run".into()),
            woken: Err("not run".into()),
        };
        let ids = ids(n);

        // The first run compiles each distinct component once and fills the cache.
        let mut host = Host::start(&world);
        measured.cold = host.until_all_run(&world, &ids);
        host.quit();
        if measured.cold.is_err() {
            measured_worlds.push(world.root().to_owned());
            return measured;
        }

        let mut host = Host::start(&world);
        measured.warm = host.until_all_run(&world, &ids);
        if measured.warm.is_ok() {
            measured.rss_kb = host.rss_kb("VmHWM").and_then(|peak| {
                let started = host.rss_kb("VmRSS")?;
                Ok((peak, started, host.settled_rss_kb()?))
            });
            measured.maps = host.count_lines("maps");
            measured.fds = host.count_fds();
            measured.woken = host.round_trip_to_packed();
            measured.round_trip = host.round_trips().map(|(p50, p99, per_sec)| {
                measured.throughput = host.flood().map(|flood| (per_sec, flood));
                (p50, p99)
            });
        }
        let stopped = Instant::now();
        host.quit();
        eprintln!(
            "scale: {n} actors: stopped in {:.1} s",
            secs(stopped.elapsed())
        );
        measured_worlds.push(world.root().to_owned());
        measured
    }

    /// The table row of a world of `n` echo actors, beside the pair alone.
    fn row(&self, n: usize, pair: &Measured) -> String {
        let per_actor = |figure: u64, base: u64| (figure.saturating_sub(base)) as f64 / n as f64;
        let memory = match (&self.rss_kb, &pair.rss_kb) {
            (Ok((peak, started, idle)), Ok((base_peak, base_started, base_idle))) => format!(
                "{:.1} KB / {:.1} KB / {:.1} KB ({:.0} MB / {:.0} MB / {:.0} MB in all)",
                per_actor(*peak, *base_peak),
                per_actor(*started, *base_started),
                per_actor(*idle, *base_idle),
                *peak as f64 / 1024.0,
                *started as f64 / 1024.0,
                *idle as f64 / 1024.0
            ),
            (Err(e), _) | (_, Err(e)) => e.clone(),
        };
        let handles = if self.warm.is_ok() {
            format!(
                "{:.2} / {:.2}",
                per_actor(self.maps, pair.maps),
                per_actor(self.fds, pair.fds)
            )
        } else {
            String::new()
        };
        let round_trip = match (&self.round_trip, &pair.round_trip) {
            (Ok((p50, p99)), Ok((base50, base99))) => format!(
                "{p50} / {p99} µs ({:+.0}% / {:+.0}%); to a packed actor {}",
                percent(*p50, *base50),
                percent(*p99, *base99),
                self.woken
                    .as_ref()
                    .map_or_else(|e| e.clone(), |us| format!("{us} µs"))
            ),
            (Err(e), _) | (_, Err(e)) => e.clone(),
        };
        let throughput = match (&self.throughput, &pair.throughput) {
            (Ok((trips, flood)), Ok((base_trips, base_flood))) => format!(
                "{trips:.0} ({:+.0}%) / {flood:.0} ({:+.0}%)",
                100.0 * (trips / base_trips - 1.0),
                100.0 * (flood / base_flood - 1.0)
            ),
            (Err(e), _) | (_, Err(e)) => e.clone(),
        };
        let time = |t: &Result<Duration, String>| {
            t.as_ref()
                .map_or_else(|e| e.clone(), |d| format!("{:.2} s", secs(*d)))
        };
        format!(
            "| {n} | {} | {} | {memory} | {handles} | {round_trip} | {throughput} |",
            time(&self.cold),
            time(&self.warm)
        )
    }
}

/// Removes a world's folders on a thread of its own. It starts only once every size is
/// measured: removing 100,000 actors' folders takes minutes, and a file system busy freeing
/// inodes makes the next world's files slow to create.
fn remove_in_background(world: PathBuf) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = std::fs::remove_dir_all(world);
    })
}

fn percent(figure: u64, base: u64) -> f64 {
    (figure as f64 / base.max(1) as f64 - 1.0) * 100.0
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn ids(n: usize) -> Vec<ActorId> {
    let mut ids: Vec<ActorId> = (1..=n)
        .map(|k| ActorId::parse(&format!("echo{k}")).expect("a valid id"))
        .collect();
    for pair in ["ping", "pong"] {
        ids.push(ActorId::parse(pair).expect("a valid id"));
    }
    ids
}

/// A new world of `n` echo actors and the `ping`/`pong` pair, installed as version 1 as `spawn`
/// leaves them. Every echo shares one `actor.wasm` and one source by hard links, so making
/// 100,000 costs folders, not copies.
fn world(actors: &Path, scratch: &Path, n: usize) -> World {
    let world = World::new(scratch.join(format!("world-{n}")));
    world.create().expect("a new world");
    let mut registry = world.load_registry().expect("its registry");
    // Where each kind of actor was first installed, for the others to link to.
    let mut first: std::collections::HashMap<&str, PathBuf> = Default::default();
    let installs = (1..=n)
        .map(|k| (format!("echo{k}"), "echo"))
        .chain([("ping".into(), "pingpong"), ("pong".into(), "pingpong")]);
    for (id, actor) in installs {
        let id = ActorId::parse(&id).expect("a valid id");
        let version = world.version_dir(&id, 1);
        std::fs::create_dir_all(&version).unwrap();
        // A file has at most 65,000 links on ext4: past that, the next actor starts a new one.
        let linked = first.get(actor).is_some_and(|installed| {
            std::fs::hard_link(installed.join("actor.wasm"), version.join("actor.wasm")).is_ok()
                && sausage_core::fs::link_tree(&installed.join("source"), &version.join("source"))
                    .is_ok()
        });
        if !linked {
            std::fs::copy(
                actors.join(format!("{actor}.wasm")),
                version.join("actor.wasm"),
            )
            .unwrap();
            sausage_core::fs::copy_tree(
                &repo().join("actors").join(actor),
                &version.join("source"),
            )
            .unwrap();
            first.insert(actor, version.clone());
        }
        world.create_actor_dirs(&id).unwrap();
        sausage_core::fs::link_tree(&version.join("source"), &world.source_dir(&id)).unwrap();
        registry.actors.insert(
            id.to_string(),
            ActorEntry {
                version: 1,
                next_version: 2,
                running: true,
                owner: None,
                subagent: None,
            },
        );
    }
    world.save_registry(&registry).unwrap();
    world
}

/// `sausage run` on a world, driven through its console, its stderr kept in a file.
struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
    started: Instant,
}

impl Host {
    fn start(world: &World) -> Host {
        let stderr = world.root().with_extension("stderr");
        let bin = std::env::var_os("SAUSAGE_BIN").unwrap_or(env!("CARGO_BIN_EXE_sausage").into());
        let mut child = Command::new(bin)
            .arg("run")
            .arg(world.root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(File::create(&stderr).expect("a file for the host's stderr"))
            .spawn()
            .expect("sausage runs");
        let started = Instant::now();
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Host {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            started,
        }
    }

    /// Waits for each actor in turn until its status says `running`: one read for most of
    /// them, as the earlier ones took the time. Fails on a dead host, an actor that crashed
    /// or broke, or [`START_LIMIT`].
    fn until_all_run(&mut self, world: &World, ids: &[ActorId]) -> Result<Duration, String> {
        for (n, id) in ids.iter().enumerate() {
            let mut pause = Duration::from_micros(200);
            loop {
                let status = world.read_status(id);
                match status.as_ref().map(|s| s.state) {
                    Some(State::Running) => break,
                    Some(State::Broken | State::Restarting) => {
                        let status = status.expect("read");
                        return Err(format!(
                            "{n} of {} running; actor {id} is {:?}: {}",
                            ids.len(),
                            status.state,
                            status.last_exit.unwrap_or_default()
                        ));
                    }
                    _ => {}
                }
                if let Some(dead) = self.exited() {
                    return Err(format!("{n} of {} running; {dead}", ids.len()));
                }
                if self.started.elapsed() > START_LIMIT {
                    return Err(format!(
                        "{n} of {} running after {} s; actor {id} is {:?}",
                        ids.len(),
                        START_LIMIT.as_secs(),
                        status.map(|s| s.state)
                    ));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        }
        Ok(self.started.elapsed())
    }

    /// How the host ended, with the tail of its stderr, if it has.
    fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        Some(format!("the host {status}: {}", self.stderr_tail()))
    }

    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(3)..].join(" ⏎ ");
        tail.replace('|', "\\|")
    }

    fn proc(&self, what: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/{what}", self.child.id()))
    }

    /// A figure of the host's `/proc/PID/status` in KB: `VmRSS` (resident now) or `VmHWM`
    /// (resident at its peak).
    fn rss_kb(&self, field: &str) -> Result<u64, String> {
        let status = std::fs::read_to_string(self.proc("status")).map_err(|e| e.to_string())?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| format!("no {field}"))
    }

    /// The resident memory once it stops falling. After a start, the sweep that follows the
    /// burst of new instances packs nothing, the next notes which are idle and the one after
    /// packs them: so it is read after three sweep intervals and then each half second until
    /// three readings in a row fall by less than 1% (at most for a minute more).
    fn settled_rss_kb(&self) -> Result<u64, String> {
        std::thread::sleep(HIBERNATE_AFTER * 3);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = self.rss_kb("VmRSS")?;
        let mut steady = 0;
        while steady < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            let now = self.rss_kb("VmRSS")?;
            steady = if now as f64 > last as f64 * 0.99 {
                steady + 1
            } else {
                0
            };
            last = now;
        }
        Ok(last)
    }

    fn count_lines(&self, what: &str) -> u64 {
        std::fs::read_to_string(self.proc(what)).map_or(0, |text| text.lines().count() as u64)
    }

    fn count_fds(&self) -> u64 {
        std::fs::read_dir(self.proc("fd")).map_or(0, |dir| dir.count() as u64)
    }

    fn tell(&mut self, to: &str, body: Value) -> Result<(), String> {
        let stdin = self.stdin.as_mut().expect("open until quit");
        writeln!(stdin, "@{to} {body}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("the console does not read: {e}"))
    }

    /// The body of the next printed message from `from` whose type is `kind`.
    fn wait(&mut self, from: &str, kind: &str) -> Result<Value, String> {
        let head = format!("[{from}] (reply) ");
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(120))
                .map_err(|_| {
                    self.exited()
                        .unwrap_or_else(|| format!("no `{kind}` from {from} within 120 s"))
                })?;
            if let Some(body) = line.strip_prefix(&head)
                && let Ok(body) = serde_json::from_str::<Value>(body)
            {
                if body["type"] == kind {
                    return Ok(body);
                }
                if body["type"] == "error" {
                    return Err(format!("{from}: {body}"));
                }
            }
        }
    }

    /// One round trip of the pair after both have been idle long enough to be packed: `ping`
    /// is woken by the request, and the round trip it times includes unpacking `pong`.
    fn round_trip_to_packed(&mut self) -> Result<u64, String> {
        self.tell("ping", json!({"type": "run", "peer": "pong", "rounds": 1}))?;
        let stats = self.wait("ping", "stats")?;
        stats["p50_us"]
            .as_u64()
            .ok_or(format!("no p50_us in {stats}"))
    }

    /// p50 and p99 of the pair's round trips in µs, and how many a second, after a warm-up.
    fn round_trips(&mut self) -> Result<(u64, u64, f64), String> {
        for rounds in [ROUNDS / 10, ROUNDS] {
            self.tell(
                "ping",
                json!({"type": "run", "peer": "pong", "rounds": rounds}),
            )?;
            let stats = self.wait("ping", "stats")?;
            if rounds == ROUNDS {
                let us = |key: &str| stats[key].as_u64().ok_or(format!("no {key} in {stats}"));
                let per_sec = stats["per_sec"].as_f64();
                let per_sec = per_sec.ok_or(format!("no per_sec in {stats}"))?;
                return Ok((us("p50_us")?, us("p99_us")?, per_sec));
            }
        }
        unreachable!("the last round returns")
    }

    /// Messages a second of a flood of [`FLOOD`] from `ping` into `pong`, until `pong` reports
    /// every one, in order.
    fn flood(&mut self) -> Result<f64, String> {
        self.tell("pong", json!({"type": "report"}))?;
        let before = self.wait("pong", "report")?["received"]
            .as_u64()
            .unwrap_or(0);
        let started = Instant::now();
        self.tell(
            "ping",
            json!({"type": "flood", "to": "pong", "count": FLOOD}),
        )?;
        loop {
            self.tell("pong", json!({"type": "report"}))?;
            let report = self.wait("pong", "report")?;
            let received = report["received"].as_u64().unwrap_or(0) - before;
            if received == FLOOD {
                if report["in_order"] != true {
                    return Err(format!("the flood arrived out of order: {report}"));
                }
                return Ok(FLOOD as f64 / secs(started.elapsed()));
            }
            if started.elapsed() > Duration::from_secs(120) {
                return Err(format!("{received} of the flood's {FLOOD} in 120 s"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Ends the console's input, so the host stops every actor and exits; kills it after
    /// [`STOP_LIMIT`].
    fn quit(mut self) {
        drop(self.stdin.take());
        let stopping = Instant::now();
        while stopping.elapsed() < STOP_LIMIT {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "scale: the host did not stop within {} s; killing it",
            STOP_LIMIT.as_secs()
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
