//! The chaos test (DESIGN §20): three hosts on a three-node NATS cluster through a seeded run of
//! random SIGKILLs of hosts, SIGSTOP/SIGCONT of hosts past their lease, and kills and restarts of
//! NATS nodes, while `ticker` floods `notes` and two `counter`s commit steps asked of them.
//! Checks, once everything is back: never two hosts ran one actor at once (each instance of a
//! counter draws a run id, and the counts of two runs never interleave), no committed step lost
//! (the final count is at least every count reported), no step handled twice by a committed
//! effect (no request answered twice), no accepted message lost (every tick the ticker recorded
//! as sent is stored by notes) or handled twice (no tick stored twice), order per sender kept
//! (each ticker run's ticks are stored in order).
//!
//! `SAUSAGE_CHAOS_SEED=<n>` repeats a run (a failure prints its seed); `SAUSAGE_CHAOS_SECS`
//! sets how long the chaos lasts: 40 s by default (the short run of `scripts/test`), 600 for the
//! long one (`SAUSAGE_CHAOS_SECS=600 cargo test -p sausage --test chaos -- --nocapture`).

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::nats::NatsCluster;
use support::random::Random;
use support::*;

/// Ticks of ticker run `r` are numbered from `r * RUN + 1`.
const RUN: u64 = 1_000_000;
const COUNTERS: [&str; 2] = ["c1", "c2"];
/// How long the end waits for the world to settle and every check to come true.
const SETTLE: Duration = Duration::from_secs(120);

/// One host of the cluster: its folder, its process when it runs, and what the chaos did to it.
struct Member {
    id: &'static str,
    folder: PathBuf,
    /// The index of the NATS node it prefers (its URL comes first in its list).
    node: usize,
    host: Option<Host>,
    /// Stopped with SIGSTOP until then.
    paused_until: Option<Instant>,
    /// Killed; started again at that moment.
    down_until: Option<Instant>,
}

impl Member {
    fn start(&mut self, nats: &NatsCluster) {
        let urls = nats.urls_from(self.node);
        self.host = Some(Host::start_with(
            &self.folder,
            &["--no-web", "--cluster", &urls, "--host-id", self.id],
            &[],
        ));
    }

    /// Whether its console can be used now: running and not paused.
    fn usable(&self) -> bool {
        self.host.is_some() && self.paused_until.is_none()
    }
}

/// A counter's answer to a step: which instance (run) counted what, for which request (tag).
#[derive(Debug, Clone)]
struct Count {
    n: u64,
    run: String,
    tag: u64,
    /// The host whose console asked, and heard it.
    console: &'static str,
}

#[test]
fn hosts_and_nats_nodes_dying_and_pausing_lose_nothing_and_never_run_an_actor_twice() {
    let (random, seed) = Random::from_env("SAUSAGE_CHAOS_SEED");
    let secs: u64 = std::env::var("SAUSAGE_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    eprintln!("chaos seed: {seed} (SAUSAGE_CHAOS_SEED={seed} repeats it), {secs} s");
    let outcome = std::panic::catch_unwind(|| chaos(random, Duration::from_secs(secs)));
    if let Err(panic) = outcome {
        eprintln!("chaos failed with seed {seed}: repeat with SAUSAGE_CHAOS_SEED={seed}");
        std::panic::resume_unwind(panic);
    }
}

fn chaos(mut random: Random, length: Duration) {
    let mut nats = NatsCluster::start();
    let first = TestWorld::new();
    first.install("ticker", "ticker");
    first.install("notes", "notes");
    for id in COUNTERS {
        first.install(id, "counter");
    }
    let others = tempfile::tempdir().unwrap();
    let mut members = vec![
        Member {
            id: "a",
            folder: first.root.clone(),
            node: 0,
            host: None,
            paused_until: None,
            down_until: None,
        },
        Member {
            id: "b",
            folder: others.path().join("b"),
            node: 1,
            host: None,
            paused_until: None,
            down_until: None,
        },
        Member {
            id: "c",
            folder: others.path().join("c"),
            node: 2,
            host: None,
            paused_until: None,
            down_until: None,
        },
    ];
    members[0].start(&nats);
    until(&mut members, "every actor running on a", |list| {
        ["ticker", "notes", "c1", "c2"]
            .iter()
            .all(|id| actor_state(list, id) == "running")
    });
    members[1].start(&nats);
    members[2].start(&nats);
    until(&mut members, "three hosts", |list| alive_hosts(list) == 3);

    let mut counts: BTreeMap<&str, Vec<Count>> = BTreeMap::new();
    let mut tag = 0u64;
    let mut ticker_runs = 0u64;
    let mut node_down: Option<(usize, Instant)> = None;
    let started = Instant::now();
    let mut next_event = started + random.between(secs(3), secs(6));
    let mut next_run = started;
    let mut events = Vec::new();
    while started.elapsed() < length {
        let now = Instant::now();
        // What the chaos undoes: paused hosts go on, killed ones and the NATS node come back.
        for member in members.iter_mut() {
            if member.paused_until.is_some_and(|t| now >= t) {
                member.host.as_ref().unwrap().signal("CONT");
                member.paused_until = None;
            }
            if member.down_until.is_some_and(|t| now >= t) {
                member.down_until = None;
                member.start(&nats);
            }
        }
        if let Some((node, at)) = node_down
            && now >= at
        {
            nats.restart(node);
            node_down = None;
        }
        if now >= next_event {
            let event = choose(&mut random, &mut members, &mut nats, &mut node_down);
            eprintln!("chaos at {:.1} s: {event}", started.elapsed().as_secs_f64());
            events.push(event);
            next_event = now + random.between(secs(3), secs(7));
        }
        // The load: a step asked of each counter every 100 ms, a new ticker run every 8 s.
        let Some(driver) = members.iter_mut().find(|m| m.usable()) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let host = driver.host.as_mut().unwrap();
        for id in COUNTERS {
            tag += 1;
            host.tell(id, json!({"type": "step", "tag": tag}));
        }
        if now >= next_run {
            ticker_runs += 1;
            host.tell(
                "ticker",
                json!({"type": "start", "to": "notes", "count": 2000, "interval_ms": 2,
                       "record_every": 1, "first": ticker_runs * RUN + 1}),
            );
            next_run = now + secs(8);
        }
        std::thread::sleep(Duration::from_millis(100));
        collect(&mut members, &mut counts);
    }

    // Everything back: no host paused or down, every NATS node up, three hosts alive.
    for member in members.iter_mut() {
        if member.paused_until.take().is_some() {
            member.host.as_ref().unwrap().signal("CONT");
        }
        if member.down_until.take().is_some() {
            member.start(&nats);
        }
    }
    if let Some((node, _)) = node_down.take() {
        nats.restart(node);
    }
    eprintln!("chaos done after {} events: {events:?}", events.len());
    until(&mut members, "three hosts after the chaos", |list| {
        alive_hosts(list) == 3
            && ["ticker", "notes", "c1", "c2"]
                .iter()
                .all(|id| actor_state(list, id) == "running")
    });

    check_counters(&mut members, &mut counts);
    check_ticks(&mut members, &first, &others);
}

/// One random event: a host killed (started again 2–5 s later), a host paused past its lease
/// (7–10 s), or a NATS node killed (started again 3–6 s later). At least one host stays usable
/// and at most one NATS node is down, so the world can always go on.
fn choose(
    random: &mut Random,
    members: &mut [Member],
    nats: &mut NatsCluster,
    node_down: &mut Option<(usize, Instant)>,
) -> String {
    let usable: Vec<usize> = (0..members.len())
        .filter(|&m| members[m].usable())
        .collect();
    let kind = random.below(3);
    if kind == 2 && node_down.is_none() {
        let node = random.below(3) as usize;
        nats.kill(node);
        let back = random.between(secs(3), secs(6));
        *node_down = Some((node, Instant::now() + back));
        return format!("NATS node {node} killed for {back:?}");
    }
    if usable.len() < 2 {
        return "nothing (one usable host left)".into();
    }
    let member = &mut members[usable[random.below(usable.len() as u64) as usize]];
    if kind == 0 {
        member.host.take().unwrap().kill();
        let back = random.between(secs(2), secs(5));
        member.down_until = Some(Instant::now() + back);
        format!("host {} killed for {back:?}", member.id)
    } else {
        member.host.as_ref().unwrap().signal("STOP");
        let pause = random.between(secs(7), secs(10));
        member.paused_until = Some(Instant::now() + pause);
        format!("host {} paused for {pause:?}", member.id)
    }
}

/// Takes every counter's answer each usable host printed.
fn collect(members: &mut [Member], counts: &mut BTreeMap<&'static str, Vec<Count>>) {
    for member in members.iter_mut().filter(|m| m.usable()) {
        let console = member.id;
        for printed in member.host.as_mut().unwrap().take_all() {
            let Some(id) = COUNTERS.iter().find(|id| **id == printed.from) else {
                continue;
            };
            if printed.body["type"] != "count" {
                continue;
            }
            counts.entry(id).or_default().push(Count {
                n: printed.body["n"].as_u64().unwrap(),
                run: printed.body["run"].as_str().unwrap().to_string(),
                tag: printed.body["tag"].as_u64().unwrap_or(0),
                console,
            });
        }
    }
}

/// Never two instances at once, no committed step lost, no request handled twice.
fn check_counters(members: &mut [Member], counts: &mut BTreeMap<&'static str, Vec<Count>>) {
    for id in COUNTERS {
        let reported = counts.get(id).cloned().unwrap_or_default();
        assert!(
            reported.len() > 10,
            "{id} answered only {} steps",
            reported.len()
        );
        let mut tags = BTreeSet::new();
        let mut ns = BTreeSet::new();
        for count in &reported {
            assert!(
                tags.insert(count.tag),
                "{id}: request {} answered twice",
                count.tag
            );
            assert!(ns.insert(count.n), "{id}: count {} reached twice", count.n);
        }
        // The counts one run sent one console only grow (order per sender); two runs' ranges
        // do not interleave: one instance ran at a time.
        let mut heard: HashMap<(&str, &str), Vec<u64>> = HashMap::new();
        let mut runs: HashMap<&str, (u64, u64)> = HashMap::new();
        for count in &reported {
            heard
                .entry((&count.run, count.console))
                .or_default()
                .push(count.n);
            let range = runs.entry(&count.run).or_insert((count.n, count.n));
            *range = (range.0.min(count.n), range.1.max(count.n));
        }
        for ((run, console), ns) in &heard {
            assert!(
                ns.is_sorted_by(|a, b| a < b),
                "{id}: run {run} told host {console}'s console {ns:?}, out of order"
            );
        }
        let mut ranges: Vec<(u64, u64, &str)> = (runs.iter())
            .map(|(run, (low, high))| (*low, *high, *run))
            .collect();
        ranges.sort();
        for pair in ranges.windows(2) {
            assert!(
                pair[0].1 < pair[1].0,
                "{id}: runs {} ({}..={}) and {} ({}..={}) counted at once",
                pair[0].2,
                pair[0].0,
                pair[0].1,
                pair[1].2,
                pair[1].0,
                pair[1].1
            );
        }
        let highest = *ns.last().unwrap();
        let driver = members.iter_mut().find(|m| m.usable()).unwrap();
        let host = driver.host.as_mut().unwrap();
        host.tell(id, json!({"type": "get"}));
        let fin = host.wait_for_within(SETTLE, "the final count", |m| {
            m.from == id && m.body["type"] == "count" && m.body["tag"].is_null()
        });
        let fin = fin.body["n"].as_u64().unwrap();
        assert!(
            fin >= highest,
            "{id}: a committed step was lost: {highest} was reported, the count is {fin}"
        );
        eprintln!(
            "{id}: {} steps answered by {} instances, final count {fin}",
            reported.len(),
            runs.len()
        );
    }
}

/// No accepted tick lost or stored twice, each run's ticks in order.
fn check_ticks(members: &mut [Member], first: &TestWorld, others: &tempfile::TempDir) {
    let driver = members.iter_mut().find(|m| m.usable()).unwrap();
    let host = driver.host.as_mut().unwrap();
    let list = host.request(json!({"type": "list"}));
    let ticker_host = list["actors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "ticker")
        .unwrap()["host"]
        .as_str()
        .unwrap()
        .to_string();
    let folder = match ticker_host.as_str() {
        "a" => first.root.clone(),
        other => others.path().join(other),
    };
    // The ticker's files on the host that runs it now: every commit replayed there.
    let sent: BTreeSet<u64> =
        std::fs::read_to_string(folder.join("private/ticker/data/sent.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["n"]
                    .as_u64()
                    .unwrap()
            })
            .filter(|n| n % RUN != 0)
            .collect();
    let deadline = Instant::now() + SETTLE;
    let stored = loop {
        host.tell("notes", json!({"type": "list"}));
        let stored = ticks(
            &host
                .wait_for_within(SETTLE, "notes' list", |m| {
                    m.from == "notes" && m.body["type"] == "notes"
                })
                .body,
        );
        let have: BTreeSet<u64> = stored.iter().copied().collect();
        if sent.is_subset(&have) || Instant::now() > deadline {
            break stored;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let mut seen = BTreeSet::new();
    for n in &stored {
        assert!(seen.insert(*n), "tick {n} stored twice");
    }
    let missing: Vec<u64> = sent.difference(&seen).copied().collect();
    if !missing.is_empty() {
        dump_logs(members);
    }
    assert!(
        missing.is_empty(),
        "{} ticks recorded as sent were never stored: {}; stored: {}; recorded as sent: {}",
        missing.len(),
        ranges(&missing),
        ranges(&seen.iter().copied().collect::<Vec<_>>()),
        ranges(&sent.iter().copied().collect::<Vec<_>>()),
    );
    let mut by_run: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for n in &stored {
        by_run.entry(n / RUN).or_default().push(*n);
    }
    for (run, ns) in &by_run {
        assert!(
            ns.is_sorted_by(|a, b| a < b),
            "ticker run {run}: ticks stored out of order"
        );
    }
    eprintln!(
        "ticks: {} recorded as sent, {} stored, in {} runs",
        sent.len(),
        stored.len(),
        by_run.len()
    );
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The broker's list through a usable host's console, asked again until `ready` holds.
fn until(members: &mut [Member], what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + SETTLE;
    loop {
        if let Some(member) = members.iter_mut().find(|m| m.usable()) {
            let list = member
                .host
                .as_mut()
                .unwrap()
                .request(json!({"type": "list"}));
            if ready(&list) {
                return list;
            }
            if Instant::now() > deadline {
                dump_logs(members);
                panic!("{what}: the last list was {list}");
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn actor_state<'a>(list: &'a Value, id: &str) -> &'a str {
    list["actors"]
        .as_array()
        .and_then(|actors| actors.iter().find(|a| a["id"] == id))
        .and_then(|a| a["state"].as_str())
        .unwrap_or("")
}

fn alive_hosts(list: &Value) -> usize {
    list["hosts"].as_array().map_or(0, |hosts| {
        hosts.iter().filter(|h| h["alive"] == true).count()
    })
}

/// `numbers` (ascending) as runs: `1-5, 7, 9-12`.
fn ranges(numbers: &[u64]) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &n in numbers {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == n => *end = n,
            _ => runs.push((n, n)),
        }
    }
    runs.iter()
        .map(|(start, end)| match start == end {
            true => start.to_string(),
            false => format!("{start}-{end}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes each running host's log to `target/tmp/chaos-<host>.log`, to read after a failure
/// (`SAUSAGE_LOG=info,sausage_cluster=debug` makes them say more).
fn dump_logs(members: &[Member]) {
    for member in members {
        for actor in ["notes", "ticker"] {
            let log = member.folder.join(format!("actor/{actor}/stderr.log"));
            let path = format!(
                "{}/chaos-{}-{actor}.log",
                env!("CARGO_TARGET_TMPDIR"),
                member.id
            );
            if std::fs::copy(&log, &path).is_ok() {
                eprintln!("{actor}'s log on host {}: {path}", member.id);
            }
        }
        if let Some(host) = &member.host {
            let path = format!("{}/chaos-{}.log", env!("CARGO_TARGET_TMPDIR"), member.id);
            if std::fs::write(&path, host.stderr()).is_ok() {
                eprintln!("host {}'s log: {path}", member.id);
            }
        }
    }
}
