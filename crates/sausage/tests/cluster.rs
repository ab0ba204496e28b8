//! A world over several hosts (DESIGN §16, §20) runs on a real NATS server with JetStream, or a
//! real three-node NATS cluster, which each test starts on free ports of its own
//! (`support::nats`), with up to three hosts on this machine, each with its own world folder,
//! driven through their consoles.

mod support;

use std::time::Duration;

use serde_json::{Value, json};

use support::nats::{Nats, NatsCluster};
use support::partition::Proxy;
use support::web::WebHost;
use support::{Host, TestWorld, sausage, text};

/// Longer than a fail-over takes by design (5.5 s without a heartbeat, then a start).
const FAILOVER_PATIENCE: Duration = Duration::from_secs(20);

/// What a fail-over after a `kill -9` may take in these tests: the lease timeout (5.5 s), half
/// a heartbeat for the next look, the start, and slack for a machine shared with builds (the
/// target is 6 s).
const FAILOVER_LIMIT: Duration = Duration::from_secs(8);

/// How long a step may wait when a NATS node is cut off from the other two while it runs: they
/// elect new leaders for what it led once they stop hearing it.
const CUT_OFF_PATIENCE: Duration = Duration::from_secs(90);

/// Lines a host's log may hold after two partitions of its cluster: each thing it keeps retrying
/// (its watches, its heartbeat) says so when it fails, every 30 s while it fails, and when it
/// works again; every half second was hundreds of lines.
const LOG_LINES_THROUGH_PARTITIONS: usize = 80;

/// How long a request may wait behind thousands of messages queued for one actor, each handled
/// with a commit stored on three NATS nodes, after a node died: on a machine as busy as a whole
/// test run makes it, the queue of `a_nats_node_dying_under_traffic…` took over 20 s to drain
/// (its consumer is made anew first, which JetStream may take seconds to do right after a
/// node's death). How long the world stalled is checked apart ([`NODE_DEATH_PATIENCE`]).
const DRAIN_PATIENCE: Duration = Duration::from_secs(90);

/// How long the world may stall when a NATS node dies: the streams and consumers it led elect
/// new leaders, which nats-server does 4 to 9 s after it last heard the old one, and then what
/// was in flight is sent again.
const NODE_DEATH_PATIENCE: Duration = Duration::from_secs(15);

/// `sausage run` of `world` as host `id` of the cluster at `nats`.
fn host(world: &TestWorld, nats: &Nats, id: &str) -> Host {
    host_at(&world.root, nats, id)
}

/// [`host`] on a folder that need not hold a world yet.
fn host_at(folder: &std::path::Path, nats: &Nats, id: &str) -> Host {
    host_with(folder, nats, id, &[])
}

/// [`host_at`] with these variables added to the host's environment.
fn host_with(folder: &std::path::Path, nats: &Nats, id: &str, vars: &[(&str, &str)]) -> Host {
    host_on_with(folder, &nats.url(), id, vars)
}

/// `sausage run` of the world in `folder` as host `id` of the cluster whose NATS servers
/// `--cluster` lists as `servers`.
fn host_on(folder: &std::path::Path, servers: &str, id: &str) -> Host {
    host_on_with(folder, servers, id, &[])
}

fn host_on_with(folder: &std::path::Path, servers: &str, id: &str, vars: &[(&str, &str)]) -> Host {
    Host::start_with(
        folder,
        &["--no-web", "--cluster", servers, "--host-id", id],
        vars,
    )
}

/// The broker's `list` as `host` sees it, once `ready` holds of it (asked again until then).
fn list_until(host: &mut Host, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + FAILOVER_PATIENCE;
    loop {
        let list = host.request(json!({"type": "list"}));
        if ready(&list) {
            return list;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: the last list was {list}\nstderr:\n{}",
            host.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn actor<'a>(list: &'a Value, id: &str) -> &'a Value {
    list["actors"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["id"] == id))
        .unwrap_or_else(|| panic!("no {id} in {list}"))
}

fn alive_hosts(list: &Value) -> Vec<String> {
    list["hosts"]
        .as_array()
        .map(|h| {
            h.iter()
                .filter(|h| h["alive"] == true)
                .map(|h| h["id"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Spawns `id` from the test actor `actor` through `host`'s console.
fn spawn(host: &mut Host, id: &str, actor: &str) {
    let wasm = support::wasm(actor);
    let reply = host.request(json!({
        "type": "spawn", "actor": id, "wasm": wasm.to_str().unwrap(),
    }));
    assert_eq!(reply["type"], "spawned", "{reply}");
}

#[test]
fn actors_spread_over_three_hosts_answer_each_other_and_a_killed_host_loses_no_message() {
    let nats = Nats::start();
    let (one, two, three) = (TestWorld::new(), TestWorld::new(), TestWorld::new());
    one.install("ticker", "ticker");
    let mut a = host(&one, &nats, "a");
    list_until(&mut a, "ticker runs on a", |l| {
        actor(l, "ticker")["host"] == "a" && actor(l, "ticker")["state"] == "running"
    });
    let mut b = host(&two, &nats, "b");
    let mut c = host(&three, &nats, "c");
    list_until(&mut a, "three hosts", |l| alive_hosts(l).len() == 3);

    // New actors go to the least loaded hosts: b and c, as a runs the ticker.
    spawn(&mut a, "notes", "notes");
    spawn(&mut a, "echo", "echo");
    let list = list_until(&mut a, "both running", |l| {
        actor(l, "notes")["state"] == "running" && actor(l, "echo")["state"] == "running"
    });
    let notes_host = actor(&list, "notes")["host"].as_str().unwrap().to_string();
    let echo_host = actor(&list, "echo")["host"].as_str().unwrap().to_string();
    let mut placed = vec![notes_host.clone(), echo_host.clone()];
    placed.sort();
    assert_eq!(placed, ["b", "c"], "{list}");

    // A console on any host talks to an actor on another, and hears its reply.
    for (console, name) in [(&mut a, "a"), (&mut b, "b"), (&mut c, "c")] {
        console.tell("echo", json!({"type": "hello", "from_console": name}));
        let reply = console.wait_for(&format!("echo's reply on {name}"), |m| {
            m.from == "echo" && m.body["from_console"] == name
        });
        assert!(reply.reply);
    }

    // A flood from the ticker (host a) to notes (another host) arrives whole and in order.
    const TICKS: u64 = 2000;
    a.tell(
        "ticker",
        json!({"type": "start", "to": "notes", "count": TICKS}),
    );
    a.wait_type("ticker", "done");
    let deadline = std::time::Instant::now() + FAILOVER_PATIENCE;
    let notes = loop {
        a.tell("notes", json!({"type": "list"}));
        let notes = a.wait_type("notes", "notes");
        if notes["notes"].as_array().unwrap().len() as u64 >= TICKS
            || std::time::Instant::now() > deadline
        {
            break notes;
        }
    };
    let ns = support::ticks(&notes);
    assert_eq!(ns, (1..=TICKS).collect::<Vec<_>>(), "whole and in order");

    // The host that runs echo is killed while messages for echo wait; echo runs elsewhere
    // within the fail-over time and answers every one of them.
    let (victim, survivor) = if echo_host == "b" { (b, c) } else { (c, b) };
    let (victim_world, victim_id) = if echo_host == "b" {
        (&two, "b")
    } else {
        (&three, "c")
    };
    let mut survivor = survivor;
    // Another process cannot join as a host that runs.
    let elsewhere = TestWorld::new();
    let twin = std::process::Command::new(env!("CARGO_BIN_EXE_sausage"))
        .arg("run")
        .arg(&elsewhere.root)
        .args(["--no-web", "--cluster", &nats.url(), "--host-id", victim_id])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let refused = String::from_utf8_lossy(&twin.stderr);
    assert!(
        !twin.status.success() && refused.contains("is in use"),
        "{refused}"
    );
    victim.kill();
    const WAITING: u64 = 50;
    for n in 1..=WAITING {
        a.tell("echo", json!({"type": "count", "n": n}));
    }
    let started = std::time::Instant::now();
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < WAITING as usize {
        let reply = a.wait_for_within(FAILOVER_PATIENCE, "echo's replies after the kill", |m| {
            m.from == "echo" && m.body["type"] == "count"
        });
        seen.insert(reply.body["n"].as_u64().unwrap());
    }
    let failover = started.elapsed();
    assert!(failover < FAILOVER_PATIENCE, "{failover:?}");
    let list = list_until(&mut a, "echo on a live host", |l| {
        actor(l, "echo")["host"] != echo_host.as_str() && actor(l, "echo")["state"] == "running"
    });
    assert_eq!(actor(&list, "echo")["host"], "a", "{list}");
    let _ = survivor.take_all();
    eprintln!("fail-over: every waiting message answered {failover:?} after the kill");

    // The killed host comes back with its folder and id: it rejoins, and runs nothing it ran
    // before, since others hold those leases now.
    let back = host(victim_world, &nats, victim_id);
    list_until(&mut a, "three hosts again", |l| alive_hosts(l).len() == 3);
    a.tell("echo", json!({"type": "again"}));
    a.wait_type("echo", "again");
    let list = list_until(&mut a, "echo still on a", |l| {
        actor(l, "echo")["host"] == "a"
    });
    assert_eq!(actor(&list, "echo")["state"], "running");
    assert!(
        !back.stderr().contains("runs actor echo"),
        "{}",
        back.stderr()
    );
}

/// The ticks `notes` on `host` stores once it stores as many as were `sent` (asked again until
/// then, up to [`FAILOVER_PATIENCE`]), checked: after every tick `committed` before, whole, in
/// order, none twice, and none of those sent missing.
fn ticks_kept(host: &mut Host, committed: &[u64], sent: impl Fn() -> u64) -> Vec<u64> {
    let deadline = std::time::Instant::now() + FAILOVER_PATIENCE;
    let stored = loop {
        host.tell("notes", json!({"type": "list"}));
        let stored = support::ticks(&host.wait_type("notes", "notes"));
        if stored.len() as u64 >= sent() || std::time::Instant::now() > deadline {
            break stored;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        stored.starts_with(committed),
        "every tick committed before is kept: {} then, {} now",
        committed.len(),
        stored.len()
    );
    assert_eq!(
        stored,
        (1..=stored.len() as u64).collect::<Vec<_>>(),
        "whole, in order, none twice"
    );
    assert!(
        stored.len() as u64 >= sent(),
        "the {} ticks recorded as sent all arrived: {}",
        sent(),
        stored.len()
    );
    stored
}

/// The ticks notes committed in `world`'s folder, in file order.
fn committed_ticks(world: &std::path::Path) -> Vec<u64> {
    let text =
        std::fs::read_to_string(world.join("private/notes/data/notes.jsonl")).unwrap_or_default();
    text.lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["n"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// Replicated commits (DESIGN §20): notes commits each tick on host a, which is killed in the
/// middle of the flow. On b, notes goes on from every tick a had committed (a commit returns
/// only once the cluster stored it), no tick it had handled comes again (each commit records
/// the last message it had read), and the ticks accepted but not handled yet follow: whole,
/// in order, none twice.
#[test]
fn a_killed_host_loses_no_committed_file_and_no_handled_message_comes_again() {
    let nats = Nats::start();
    let one = TestWorld::new();
    one.install("ticker", "ticker");
    one.install("notes", "notes");
    let mut a = host(&one, &nats, "a");
    list_until(&mut a, "both run on a", |l| {
        actor(l, "notes")["state"] == "running" && actor(l, "ticker")["state"] == "running"
    });
    let empty = tempfile::tempdir().unwrap();
    let folder = empty.path().join("b");
    let mut b = host_at(&folder, &nats, "b");
    list_until(&mut b, "two hosts", |l| alive_hosts(l).len() == 2);

    // The ticker records each tick it sent (so its start is handled for good, and a recorded
    // tick was accepted: output before commit) and sends 600, 5 ms apart; the kill comes once
    // notes committed 150 of them.
    const TICKS: u64 = 600;
    a.tell(
        "ticker",
        json!({"type": "start", "to": "notes", "count": TICKS, "interval_ms": 5,
               "record_every": 1}),
    );
    support::eventually("notes to commit 150 ticks on a", || {
        committed_ticks(&one.root).len() >= 150
    });
    a.kill();
    let on_a = committed_ticks(&one.root);
    let sent = std::fs::read_to_string(one.path("private/ticker/data/sent.jsonl")).unwrap();
    let sent = sent.lines().count() as u64 - 1;

    list_until(&mut b, "notes running on b", |l| {
        actor(l, "notes")["host"] == "b" && actor(l, "notes")["state"] == "running"
    });
    // Every tick the ticker recorded as sent was accepted: notes on b stores it, after those a
    // committed.
    let stored = ticks_kept(&mut b, &on_a, || sent);
    eprintln!(
        "replicated commits: {} ticks committed on a before its kill, {} stored on b after",
        on_a.len(),
        stored.len()
    );
}

#[test]
fn a_nats_server_with_jetstream_runs_on_free_ports_of_its_own_and_stops_when_dropped() {
    let (one, two) = (Nats::start(), Nats::start());
    assert_ne!(one.port, two.port);
    assert!(one.url().starts_with("nats://127.0.0.1:"));
    let report = one.jetstream();
    assert!(
        report["config"]["store_dir"].is_string(),
        "JetStream is on: {report}"
    );
    assert_eq!(report["streams"], 0, "a store of its own, empty: {report}");
    assert_eq!(
        report["config"]["sync_always"], true,
        "every write synced before it is acknowledged: {report}"
    );
    let port = one.port;
    drop(one);
    support::eventually("the server to stop", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
    });
    assert!(two.healthy(), "the other server is untouched");
}

#[test]
fn an_upgrade_on_one_host_is_seen_by_all_files_move_on_a_graceful_stop_and_a_host_rejoins() {
    let nats = Nats::start();
    let (one, two) = (TestWorld::new(), TestWorld::new());
    one.install("echo", "echo");
    one.install("notes", "notes");
    let credentials = json!({"base_url": "https://api.example", "header": "x-key", "value": "k"});
    std::fs::create_dir_all(one.path("broker/credentials")).unwrap();
    std::fs::write(
        one.path("broker/credentials/notes.json"),
        credentials.to_string(),
    )
    .unwrap();
    let mut a = host(&one, &nats, "a");
    list_until(&mut a, "both run on a", |l| {
        ["echo", "notes"]
            .iter()
            .all(|id| actor(l, id)["state"] == "running" && actor(l, id)["host"] == "a")
    });
    let mut b = host(&two, &nats, "b");
    // c starts from a folder that holds nothing yet: it is made, and takes the shared world.
    let empty = tempfile::tempdir().unwrap();
    let mut c = host_at(&empty.path().join("c"), &nats, "c");
    list_until(&mut b, "three hosts", |l| alive_hosts(l).len() == 3);

    // An upgrade asked on b, of an actor that runs on a: a does it and b hears the reply.
    let list = list_until(&mut c, "c sees the world", |l| {
        actor(l, "echo")["host"] == "a"
    });
    assert_eq!(
        actor(&list, "notes")["host"],
        "a",
        "nothing moved as hosts joined: {list}"
    );
    let reply = b.request(json!({
        "type": "upgrade", "actor": "echo", "wasm": support::wasm("echo").to_str().unwrap(),
    }));
    assert_eq!(reply["type"], "upgraded", "{reply}");
    assert_eq!(reply["version"], 2);
    let meta = one.json("broker/versions/echo/2/meta.json");
    assert!(
        meta["wasm"]
            .as_str()
            .unwrap()
            .starts_with("cluster:shipped/"),
        "b shipped the file to a: {meta}"
    );
    // Names of files shipped with another request (or of nothing shipped) are refused.
    for (wasm, expected) in [
        (
            "cluster:shipped/m-0/wasm",
            "names files shipped with another request",
        ),
        (
            "cluster:other/x",
            "names files shipped with another request",
        ),
    ] {
        let reply = a.request(json!({"type": "upgrade", "actor": "echo", "wasm": wasm}));
        assert_eq!(reply["type"], "error", "{reply}");
        assert!(
            reply["reason"].as_str().unwrap().contains(expected),
            "{reply}"
        );
    }
    // Every host sees version 2, in its list and in what the actor says.
    for (console, name) in [(&mut a, "a"), (&mut b, "b"), (&mut c, "c")] {
        list_until(console, &format!("version 2 on {name}"), |l| {
            actor(l, "echo")["version"] == 2
        });
        console.tell("echo", json!({"type": "env"}));
        let env = console.wait_type("echo", "env");
        assert_eq!(env["version"], "2", "on {name}: {env}");
    }

    // Notes written through c; a stops gracefully: its actors move at once with their files.
    for text in ["one", "two"] {
        c.tell("notes", json!({"type": "add", "text": text}));
        c.wait_type("notes", "added");
    }
    assert!(a.quit().success());
    let list = list_until(&mut c, "notes and echo on b or c", |l| {
        ["notes", "echo"].iter().all(|id| {
            let row = actor(l, id);
            row["host"] != "a" && !row["host"].is_null() && row["state"] == "running"
        })
    });
    assert!(!alive_hosts(&list).contains(&"a".to_string()), "{list}");
    c.tell("notes", json!({"type": "list"}));
    let notes = c.wait_type("notes", "notes");
    assert_eq!(
        notes["notes"],
        json!([{"text": "one"}, {"text": "two"}]),
        "the files came with the actor"
    );
    // Its credentials too, outside every mount as on the first host.
    let folder = match actor(&list, "notes")["host"].as_str().unwrap() {
        "b" => two.root.clone(),
        _ => empty.path().join("c"),
    };
    let taken: Value = serde_json::from_slice(
        &std::fs::read(folder.join("broker/credentials/notes.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(taken, credentials);

    // `sausage cluster status` shows the hosts, where each actor runs and what waits.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_sausage"))
        .args(["cluster", "status", "--cluster", &nats.url()])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{report}");
    for expected in ["hosts:", "leases:", "notes", "echo"] {
        assert!(report.contains(expected), "{expected} in:\n{report}");
    }
    assert!(
        report
            .lines()
            .any(|l| l.trim_start().starts_with('a') && l.contains("left")),
        "a has left:\n{report}"
    );

    // a comes back with its folder and id: it rejoins, and the next new actor goes to it.
    let mut a = host(&one, &nats, "a");
    list_until(&mut a, "a alive again", |l| alive_hosts(l).len() == 3);
    spawn(&mut a, "echo2", "echo");
    let list = list_until(&mut b, "echo2 running", |l| {
        actor(l, "echo2")["state"] == "running"
    });
    assert_eq!(actor(&list, "echo2")["host"], "a", "{list}");
    b.tell("echo2", json!({"type": "hi"}));
    b.wait_type("echo2", "hi");
}

#[test]
fn a_host_refuses_a_bad_cluster_address_or_host_id_with_what_to_do() {
    let world = TestWorld::new();
    let nats = Nats::start();
    for (args, expected) in [
        (
            vec!["--cluster", "nats://127.0.0.1:1", "--host-id", "a"],
            "nats-server -js",
        ),
        (
            vec!["--cluster", nats.url().leak(), "--host-id", "Not Valid"],
            "--host-id",
        ),
        (vec!["--cluster", nats.url().leak()], "--host-id"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sausage"))
            .arg("run")
            .arg(&world.root)
            .arg("--no-web")
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sausage"))
        .args(["cluster", "status", "--cluster", &nats.url()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("holds no cluster yet"), "{stderr}");
}

#[test]
fn one_scheduler_serves_the_cluster_and_another_host_takes_it_over_with_the_schedules() {
    let nats = Nats::start();
    let (one, two) = (TestWorld::new(), TestWorld::new());
    one.install("echo", "echo");
    let mut a = host(&one, &nats, "a");
    list_until(&mut a, "echo runs", |l| {
        actor(l, "echo")["state"] == "running"
    });
    let url = nats.url();
    let mut web = WebHost::start_with(
        &two,
        &["--web", "127.0.0.1:0", "--cluster", &url, "--host-id", "b"],
    );
    list_until(&mut web.host, "two hosts", |l| alive_hosts(l).len() == 2);
    // b's web console shows the whole world, each actor with the host it runs on.
    let client = web.log_in();
    client.until("/api/actors", "echo on a, running", |table| {
        table["actors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|row| row["id"] == "echo" && row["host"] == "a" && row["state"] == "running")
    });
    let b = &mut web.host;

    // Asked on b, answered by the one scheduler (a's: it was there first), heard on b.
    b.tell(
        "scheduler",
        json!({"type": "schedule", "id": "nightly", "cron": "0 3 * * *", "to": "echo",
               "body": {"type": "night"}}),
    );
    let scheduled = b.wait_type("scheduler", "scheduled");
    assert_eq!(scheduled["id"], "nightly", "{scheduled}");
    a.tell("scheduler", json!({"type": "schedules"}));
    let listed = a.wait_type("scheduler", "schedules");
    assert_eq!(
        listed["schedules"][0]["id"], "nightly",
        "a sees b's: {listed}"
    );

    // a dies; b's scheduler takes over, with the schedule. Meanwhile b's requests reach
    // nobody, and b's console hears so.
    a.kill();
    let deadline = std::time::Instant::now() + FAILOVER_PATIENCE;
    loop {
        b.tell("scheduler", json!({"type": "schedules"}));
        let answer = b.wait_for("the schedules on b, or why not", |m| {
            (m.from == "scheduler" && m.body["type"] == "schedules")
                || (m.from == "broker" && m.body["type"] == "undeliverable")
        });
        if answer.body["schedules"][0]["id"] == "nightly" {
            // stderr is read apart from stdout: its line may come a moment later.
            b.wait_stderr("host b: runs the scheduler");
            break;
        }
        if answer.from == "broker" {
            let reason = answer.body["reason"].as_str().unwrap_or_default();
            assert!(reason.contains("host a"), "{}", answer.body);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}\n{}",
            answer.body,
            b.stderr()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_mailbox_on_the_cluster_holds_its_limit_and_refuses_past_it() {
    let nats = Nats::start();
    let world = TestWorld::new();
    world.install("producer", "pingpong");
    world.install("sink", "pingpong");
    // A limit of 20 publications (the test knob), each of up to GROUP_MAX messages: a flood
    // of more than 20 full publications fills it, however the messages are grouped.
    const LIMIT: u64 = 20;
    let limit = LIMIT.to_string();
    let mut a = host_with(
        &world.root,
        &nats,
        "a",
        &[("SAUSAGE_TEST_MAILBOX_STREAM_LIMIT", &limit)],
    );
    list_until(&mut a, "both running", |l| {
        actor(l, "producer")["state"] == "running" && actor(l, "sink")["state"] == "running"
    });
    let stopped = a.request(json!({"type": "stop", "actor": "sink"}));
    assert_eq!(stopped["type"], "stopped", "{stopped}");
    let sent = LIMIT * sausage_cluster::GROUP_MAX as u64 + 500;
    a.tell(
        "producer",
        json!({"type": "flood", "to": "sink", "count": sent}),
    );
    a.wait_for_within(Duration::from_secs(120), "the flood sent", |m| {
        m.from == "producer" && m.body["type"] == "flooded"
    });
    let status = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sausage"))
            .args(["cluster", "status", "--cluster", &nats.url()])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let waiting = |report: &str| {
        report
            .lines()
            .find(|l| l.trim_start().starts_with("sink "))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|n| n.parse::<u64>().ok())
    };
    let deadline = std::time::Instant::now() + FAILOVER_PATIENCE;
    loop {
        let report = status();
        if waiting(&report) == Some(LIMIT) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sink should hold {LIMIT} publications:\n{report}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Started again, it reads every message the stream kept: the first ones sent, whole and in
    // order; the rest were refused (their sender told so).
    let started = a.request(json!({"type": "start", "actor": "sink"}));
    assert_eq!(started["type"], "started", "{started}");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let report = status();
        if waiting(&report) == Some(0) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{report}");
        std::thread::sleep(Duration::from_millis(500));
    }
    a.tell("sink", json!({"type": "report"}));
    let report = a.wait_type("sink", "report");
    let received = report["received"].as_u64().unwrap();
    assert_eq!(report["in_order"], true, "{report}");
    assert_eq!(report["last"], received, "the first ones sent: {report}");
    assert!(
        (LIMIT..sent).contains(&received),
        "{LIMIT} publications of one message or more were kept, not all {sent}: {report}"
    );
}

#[test]
fn the_agent_answers_a_console_on_another_host_and_again_after_its_host_is_killed() {
    let fake = sausage_fake_llm::FakeLlm::start();
    fake.push_openai(sausage_fake_llm::openai::text_reply("Hello from host a."));
    fake.push_openai(sausage_fake_llm::openai::text_reply(
        "Still here, elsewhere.",
    ));
    let nats = Nats::start();
    let one = support::agent::world_with_agent(&fake, "openai-responses");
    let mut a = host(&one, &nats, "a");
    list_until(&mut a, "the agent runs on a", |l| {
        actor(l, "agent")["state"] == "running"
    });
    // The token is the secret `model`: b gets it sealed, with a copy of the cluster's key.
    let empty = tempfile::tempdir().unwrap();
    let key = one.path("broker/secrets/cluster.key");
    support::eventually("host a's cluster key", || key.exists());
    std::fs::create_dir_all(empty.path().join("b/broker/secrets")).unwrap();
    std::fs::copy(&key, empty.path().join("b/broker/secrets/cluster.key")).unwrap();
    let mut b = host_at(&empty.path().join("b"), &nats, "b");
    list_until(&mut b, "two hosts", |l| alive_hosts(l).len() == 2);

    // A person at b's console talks to the agent on a, and hears its turn.
    assert_eq!(
        support::agent::ask(&mut b, "hello from b"),
        "Hello from host a."
    );
    assert!(
        support::files_holding(&nats.store(), sausage_fake_llm::TOKEN.as_bytes()).is_empty(),
        "the token never travels unsealed"
    );

    // a dies: the agent runs on b, with its configuration (its files' snapshot) and its token
    // (the fake refuses a request without it), and answers again.
    a.kill();
    list_until(&mut b, "the agent on b", |l| {
        actor(l, "agent")["host"] == "b" && actor(l, "agent")["state"] == "running"
    });
    assert_eq!(
        support::agent::ask(&mut b, "are you there?"),
        "Still here, elsewhere."
    );
    assert_eq!(fake.requests().len(), 2);
}

#[test]
fn a_model_token_the_cluster_holds_unsealed_becomes_the_sealed_secret_and_leaves_the_cluster() {
    let fake = sausage_fake_llm::FakeLlm::start();
    let nats = Nats::start();
    // What a cluster of hosts older than the secret `model` holds: the agent's credentials file
    // shared unsealed. Made here by a host whose folder lacks the agent's configuration, so it
    // cannot tell the model token apart and shares the file as it is.
    let one = TestWorld::new();
    one.install("echo", "echo");
    let legacy = json!({"base_url": fake.base_url(), "header": "authorization",
        "value": format!("Bearer {}", sausage_fake_llm::TOKEN)});
    std::fs::create_dir_all(one.path("broker/credentials")).unwrap();
    std::fs::write(
        one.path("broker/credentials/agent.json"),
        legacy.to_string(),
    )
    .unwrap();
    let mut a = host(&one, &nats, "a");
    list_until(&mut a, "echo runs on a", |l| {
        actor(l, "echo")["state"] == "running"
    });
    // b has the agent's configuration: it takes the token from the cluster at join, moves it
    // into the secret `model`, shares that sealed and removes the unsealed copy.
    let folders = tempfile::tempdir().unwrap();
    let (b_folder, c_folder) = (folders.path().join("b"), folders.path().join("c"));
    let config = b_folder.join("private/agent/data/config.json");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    let settings = support::agent::config(&fake, "openai-responses");
    std::fs::write(&config, settings.to_string()).unwrap();
    let b = host_at(&b_folder, &nats, "b");
    b.wait_stderr("the model token moved from");
    let secrets = b_folder.join("broker/secrets/secrets.json");
    let holds_the_token = |path: &std::path::Path| {
        std::fs::read_to_string(path).is_ok_and(|t| t.contains(sausage_fake_llm::TOKEN))
    };
    assert!(holds_the_token(&secrets));
    assert!(!b_folder.join("broker/credentials/agent.json").exists());

    // c, with the key, gets the secret sealed, and no unsealed copy any more.
    std::fs::create_dir_all(c_folder.join("broker/secrets")).unwrap();
    std::fs::copy(
        b_folder.join("broker/secrets/cluster.key"),
        c_folder.join("broker/secrets/cluster.key"),
    )
    .unwrap();
    let _c = host_at(&c_folder, &nats, "c");
    support::eventually("host c to get the secret", || {
        holds_the_token(&c_folder.join("broker/secrets/secrets.json"))
    });
    assert!(!c_folder.join("broker/credentials/agent.json").exists());
}

/// One step of the `counter` actor asked through `console`: the committed count and the run
/// (the instance) that committed it.
fn step(console: &mut Host) -> (u64, String) {
    step_within(console, FAILOVER_PATIENCE)
}

/// [`step`], waiting for its answer at most `patience`.
fn step_within(console: &mut Host, patience: Duration) -> (u64, String) {
    console.tell("counter", json!({"type": "step"}));
    let reply = console.wait_for_within(patience, "a step of counter", |m| {
        m.from == "counter" && m.body["type"] == "count"
    });
    let n = reply.body["n"].as_u64().expect("a count");
    (n, reply.body["run"].as_str().expect("a run").to_string())
}

#[test]
fn a_paused_host_that_resumes_never_runs_or_writes_for_the_actor_another_host_took() {
    let nats = Nats::start();
    let (zw, aw, bw) = (TestWorld::new(), TestWorld::new(), TestWorld::new());
    zw.install("counter", "counter");
    // Every host snapshots its actors every 200 ms: the paused one has a snapshot to try the
    // moment it resumes.
    let often = [("SAUSAGE_TEST_SNAPSHOT_EVERY_MS", "200")];
    let mut z = host_with(&zw.root, &nats, "z", &often);
    list_until(&mut z, "counter runs on z", |l| {
        actor(l, "counter")["host"] == "z" && actor(l, "counter")["state"] == "running"
    });
    let a = host_with(&aw.root, &nats, "a", &often);
    // b's console drives the counter throughout.
    let mut b = host_with(&bw.root, &nats, "b", &often);
    list_until(&mut b, "three hosts", |l| alive_hosts(l).len() == 3);
    // The counter steps on its own on z, every 300 ms, each step committed then said to b.
    b.tell("counter", json!({"type": "run", "every_ms": 300}));
    let ticked = |b: &mut Host| {
        let m = b.wait_for("a step of counter on its own", |m| {
            m.from == "counter" && m.body["type"] == "ticked"
        });
        m.body["run"].as_str().expect("a run").to_string()
    };
    let on_z = ticked(&mut b);
    assert_eq!(ticked(&mut b), on_z, "one instance, on z");

    // z stops (SIGSTOP) just after a step, in its sleep before the next: the next step asked
    // waits for another host to take the counter over, from z's last snapshot.
    z.signal("STOP");
    let paused = std::time::Instant::now();
    let (n, taken_over) = step(&mut b);
    assert_ne!(taken_over, on_z, "z is paused: another host answered");
    eprintln!(
        "take-over: the counter answered on another host {:?} after z was paused",
        paused.elapsed()
    );
    let list = list_until(&mut b, "counter on a", |l| {
        actor(l, "counter")["host"] == "a" && actor(l, "counter")["state"] == "running"
    });
    assert!(!alive_hosts(&list).contains(&"z".to_string()), "{list}");
    let mut last = n;
    for _ in 0..10 {
        let (n, run) = step(&mut b);
        assert_eq!((n, run.as_str()), (last + 1, taken_over.as_str()));
        last = n;
    }

    // z resumes, 5 s past its deadline and more, its counter due to step at once: it stops the
    // counter without letting it run again, writes nothing for it (no message, no snapshot),
    // renews, and shows it on a.
    let before: Vec<_> = b.take_all();
    assert!(
        before.iter().all(|m| m.body["type"] != "count"),
        "every step asked was answered once: {before:?}"
    );
    z.signal("CONT");
    z.wait_stderr("no lease renewal completed");
    list_until(&mut z, "z sees the counter on a", |l| {
        actor(l, "counter")["host"] == "a" && actor(l, "counter")["state"] == "running"
    });
    for _ in 0..5 {
        let (n, run) = step(&mut b);
        assert_eq!(
            (n, run.as_str()),
            (last + 1, taken_over.as_str()),
            "no step by z"
        );
        last = n;
    }
    let stale: Vec<_> = b
        .take_all()
        .into_iter()
        .filter(|m| m.from == "counter")
        .collect();
    assert!(
        stale.is_empty(),
        "z's instance ran after the take-over: {stale:?}"
    );
    // A write z tried after its pause was refused, either before it left z (its own deadline
    // had passed) or by NATS (the lease's revision is a's); a refusal says which.
    let said = z.stderr();
    for line in said.lines().filter(|l| l.contains("was not written")) {
        assert!(
            line.contains("(host a does)") || line.contains("has not renewed its leases"),
            "a refusal names the owner or z's lapsed lease:\n{said}"
        );
    }

    // a leaves; b takes the counter from the last snapshot, which is a's (z's stale files
    // never replaced it): the count goes on from a's last step.
    assert!(a.quit().success());
    let (n, run) = step(&mut b);
    assert_eq!(n, last + 1, "the count continues from a's last commit");
    assert!(run != on_z && run != taken_over, "a new instance, on b");
    let list = list_until(&mut b, "counter on b", |l| {
        actor(l, "counter")["host"] == "b"
    });
    assert_eq!(actor(&list, "counter")["state"], "running", "{list}");
    let said = z.stderr();
    assert_eq!(
        said.matches("runs actor counter").count(),
        1,
        "z started the counter once, before its pause:\n{said}"
    );
}

#[test]
fn a_host_cut_off_from_nats_stops_its_actors_and_writes_nothing_for_them_once_healed() {
    let nats = Nats::start();
    let (zw, aw, bw) = (TestWorld::new(), TestWorld::new(), TestWorld::new());
    zw.install("counter", "counter");
    let often = [("SAUSAGE_TEST_SNAPSHOT_EVERY_MS", "200")];
    // z and a reach NATS only through proxies the test cuts; b directly, and drives the counter.
    let (to_z, to_a) = (Proxy::start(&nats.url()), Proxy::start(&nats.url()));
    let mut z = host_on_with(&zw.root, &to_z.url(), "z", &often);
    list_until(&mut z, "counter runs on z", |l| {
        actor(l, "counter")["host"] == "z" && actor(l, "counter")["state"] == "running"
    });
    let a = host_on_with(&aw.root, &to_a.url(), "a", &often);
    let mut b = host_with(&bw.root, &nats, "b", &often);
    list_until(&mut b, "three hosts", |l| alive_hosts(l).len() == 3);
    b.tell("counter", json!({"type": "run", "every_ms": 300}));
    let ticked = |b: &mut Host| {
        let m = b.wait_for("a step of counter on its own", |m| {
            m.from == "counter" && m.body["type"] == "ticked"
        });
        let n = m.body["n"].as_u64().expect("a count");
        (n, m.body["run"].as_str().expect("a run").to_string())
    };
    let (_, on_z) = ticked(&mut b);

    // z is cut off while it runs, its counter stepping: every byte either way is held, the
    // writes it was making among them. It stops its actors on its own; a takes the counter
    // over from z's last snapshot and commits.
    to_z.stall();
    let cut = std::time::Instant::now();
    z.wait_stderr("no lease renewal completed");
    eprintln!(
        "z stopped its actors {:?} after it was cut off",
        cut.elapsed()
    );
    let (n, taken_over) = step(&mut b);
    assert_ne!(taken_over, on_z, "z is cut off: another host answered");
    list_until(&mut b, "counter running on a without z", |l| {
        actor(l, "counter")["host"] == "a"
            && actor(l, "counter")["state"] == "running"
            && !alive_hosts(l).contains(&"z".to_string())
    });
    let mut last = n;
    for _ in 0..5 {
        let (n, run) = step(&mut b);
        assert_eq!((n, run.as_str()), (last + 1, taken_over.as_str()));
        last = n;
    }

    // Healed, what z held back reaches NATS late: none of it counts. z rejoins, sees the
    // counter on a and never runs it; the count goes on from a's commits alone.
    let stale = |b: &mut Host, from_run: &str| {
        let heard: Vec<_> = b.take_all();
        let wrong: Vec<_> = heard
            .iter()
            .filter(|m| m.from == "counter" && m.body["run"] != from_run)
            .collect();
        assert!(wrong.is_empty(), "another instance counted: {wrong:?}");
    };
    stale(&mut b, &taken_over);
    to_z.heal();
    list_until(&mut z, "z back, the counter on a", |l| {
        alive_hosts(l).contains(&"z".to_string()) && actor(l, "counter")["host"] == "a"
    });
    for _ in 0..5 {
        let (n, run) = step(&mut b);
        assert_eq!(
            (n, run.as_str()),
            (last + 1, taken_over.as_str()),
            "no step by z"
        );
        last = n;
    }
    stale(&mut b, &taken_over);
    let said = z.stderr();
    for line in said.lines().filter(|l| l.contains("was not written")) {
        assert!(
            line.contains("(host a does)") || line.contains("has not renewed its leases"),
            "a refusal names the owner or z's lapsed lease:\n{said}"
        );
    }
    assert_eq!(
        said.matches("runs actor counter").count(),
        1,
        "z started the counter once, before it was cut off:\n{said}"
    );

    // a, which now runs it, is severed: its connections reset, new ones refused. b takes the
    // counter over from a's last commit; healed, a rejoins and runs it no more.
    to_a.sever();
    let (n, run) = step(&mut b);
    assert_eq!(n, last + 1, "the count continues from a's last commit");
    assert!(run != on_z && run != taken_over, "a new instance: {run}");
    last = n;
    to_a.heal();
    list_until(&mut b, "a back, the counter elsewhere", |l| {
        alive_hosts(l).len() == 3 && actor(l, "counter")["host"] != "a"
    });
    let (n, again) = step(&mut b);
    assert_eq!(
        (n, again.as_str()),
        (last + 1, run.as_str()),
        "no step by a"
    );
    stale(&mut b, &run);
    drop(a);
}

#[test]
fn a_nats_node_cut_off_from_the_other_two_takes_its_hosts_actors_with_it_and_loses_no_step() {
    let nats = NatsCluster::start_partitionable();
    let (aw, bw) = (TestWorld::new(), TestWorld::new());
    aw.install("counter", "counter");
    // a reaches NATS through node 0 first, b through node 1; b's console drives the counter.
    let mut a = host_on(&aw.root, &nats.urls_from(0), "a");
    list_until(&mut a, "counter runs on a", |l| {
        actor(l, "counter")["host"] == "a" && actor(l, "counter")["state"] == "running"
    });
    let mut b = host_on(&bw.root, &nats.urls_from(1), "b");
    list_until(&mut b, "two hosts", |l| alive_hosts(l).len() == 2);
    let (mut last, on_a) = step(&mut b);

    // Node 0 is cut off from the other two, every byte between them held, while a stays
    // connected to it: the two keep the majority, a's leases lapse, a stops the counter on its
    // own and b takes it over from a's last commit.
    nats.cut_off(0, false);
    let cut = std::time::Instant::now();
    a.wait_stderr("no lease renewal completed");
    let (n, on_b) = step_within(&mut b, CUT_OFF_PATIENCE);
    eprintln!(
        "the counter answered on b {:?} after node 0 was cut off",
        cut.elapsed()
    );
    assert_eq!(n, last + 1, "the count goes on from a's last commit");
    assert_ne!(on_b, on_a, "another instance, on b");
    last = n;
    nats.heal(0);
    list_until(&mut b, "a back beside b, which runs the counter", |l| {
        alive_hosts(l).len() == 2 && actor(l, "counter")["host"] == "b"
    });
    for _ in 0..3 {
        let (n, run) = step(&mut b);
        assert_eq!((n, run.as_str()), (last + 1, on_b.as_str()), "no step by a");
        last = n;
    }

    // Node 1, b's, is severed from the others: a takes the counter back, and again loses
    // nothing; healed, b runs it no more.
    nats.cut_off(1, true);
    let cut = std::time::Instant::now();
    b.wait_stderr("no lease renewal completed");
    let (n, again) = step_within(&mut a, CUT_OFF_PATIENCE);
    eprintln!(
        "the counter answered on a {:?} after node 1 was severed",
        cut.elapsed()
    );
    assert_eq!(n, last + 1, "the count goes on from b's last commit");
    assert!(
        again != on_a && again != on_b,
        "a new instance, on a: {again}"
    );
    last = n;
    nats.heal(1);
    list_until(&mut a, "b back beside a, which runs the counter", |l| {
        alive_hosts(l).len() == 2 && actor(l, "counter")["host"] == "a"
    });
    // a's instance answers, or a newer one of a's if a lost its own lease while node 1 was
    // away (a's node led less then): never b's, fenced since.
    let (n, run) = step(&mut b);
    assert_eq!(n, last + 1, "the count goes on from a's commits");
    assert!(
        run != on_b && run != on_a,
        "no step by b's or a's first instance"
    );
    let stale: Vec<_> = (a.take_all().into_iter().chain(b.take_all()))
        .filter(|m| m.from == "counter")
        .collect();
    assert!(stale.is_empty(), "a step answered twice or late: {stale:?}");
    // What kept failing while a's node was away is said once, not at every try.
    let said = a.stderr();
    assert!(
        said.lines().count() < LOG_LINES_THROUGH_PARTITIONS,
        "a's log, too long:\n{said}"
    );
}

#[test]
fn people_changed_on_two_hosts_at_once_keep_both_changes() {
    let nats = Nats::start();
    let (aw, bw) = (TestWorld::new(), TestWorld::new());
    let mut a = host(&aw, &nats, "a");
    list_until(&mut a, "a runs", |l| alive_hosts(l).len() == 1);
    let mut b = host(&bw, &nats, "b");
    list_until(&mut b, "two hosts", |l| alive_hosts(l).len() == 2);
    // The people this test adds that a host's file holds (the world's owner aside).
    let ids_in = |world: &TestWorld| -> Vec<String> {
        let people = std::fs::read(world.path("broker/people.json")).unwrap_or_default();
        let people: Value = serde_json::from_slice(&people).unwrap_or_default();
        let mut ids: Vec<String> = (people["people"].as_array().into_iter().flatten())
            .filter_map(|p| p["id"].as_str())
            .filter(|id| id.starts_with(['x', 'y']))
            .map(str::to_string)
            .collect();
        ids.sort();
        ids
    };
    // Each round adds one person on each host at the same moment: within one heartbeat, so
    // both hosts share a change over the same value.
    let mut expected = Vec::new();
    for round in 0..5 {
        let (x, y) = (format!("x{round}"), format!("y{round}"));
        let (da, db) = (aw.path(""), bw.path(""));
        std::thread::scope(|scope| {
            for (id, dir) in [(&x, &da), (&y, &db)] {
                scope.spawn(move || {
                    let out = sausage(&[
                        "people",
                        "add",
                        id,
                        "--tier",
                        "member",
                        dir.to_str().unwrap(),
                    ]);
                    assert!(out.status.success(), "{}", text(&out.stderr));
                });
            }
        });
        expected.extend([x, y]);
    }
    expected.sort();
    let deadline = std::time::Instant::now() + FAILOVER_PATIENCE;
    while ids_in(&aw) != expected || ids_in(&bw) != expected {
        assert!(
            std::time::Instant::now() < deadline,
            "a change was lost: a has {:?}, b has {:?}, both should have {expected:?}",
            ids_in(&aw),
            ids_in(&bw)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop((a, b));
}

#[test]
fn a_killed_hosts_actor_answers_on_another_host_within_the_fail_over_limit() {
    let nats = Nats::start();
    let (one, two) = (TestWorld::new(), TestWorld::new());
    one.install("echo", "echo");
    let mut a = host(&one, &nats, "a");
    list_until(&mut a, "echo runs on a", |l| {
        actor(l, "echo")["host"] == "a" && actor(l, "echo")["state"] == "running"
    });
    let mut b = host(&two, &nats, "b");
    list_until(&mut b, "two hosts", |l| alive_hosts(l).len() == 2);
    b.tell("echo", json!({"type": "before"}));
    b.wait_type("echo", "before");

    a.kill();
    let killed = std::time::Instant::now();
    b.tell("echo", json!({"type": "after"}));
    b.wait_stderr("host b: took the lease of actor echo");
    let taken = killed.elapsed();
    b.wait_stderr("host b: runs actor echo");
    let started = killed.elapsed();
    b.wait_for_within(FAILOVER_PATIENCE, "echo's answer from b", |m| {
        m.from == "echo" && m.body["type"] == "after"
    });
    let failover = killed.elapsed();
    eprintln!(
        "fail-over: echo's lease taken by b {taken:?}, echo started {started:?} and answered \
         {failover:?} after its host was killed (kill -9)"
    );
    assert!(
        failover < FAILOVER_LIMIT,
        "{failover:?}\nstderr of b:\n{}",
        b.stderr()
    );
}
/// The streams of a cluster: the mailboxes, then the buckets and object stores.
const STREAMS: [&str; 6] = [
    "SAUSAGE_MAILBOXES",
    "SAUSAGE_COMMITS",
    "KV_sausage-registry",
    "KV_sausage-hosts",
    "OBJ_sausage-versions",
    "OBJ_sausage-snapshots",
];

/// Each stream's report as node `n` of `nats` gives it (`/jsz?streams=true&config=true`), by
/// name.
fn streams_on(nats: &NatsCluster, n: usize) -> std::collections::BTreeMap<String, Value> {
    let report = nats.monitoring(n, "/jsz?streams=true&config=true");
    report["account_details"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|account| {
            account["stream_detail"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|stream| (stream["name"].as_str().unwrap().to_string(), stream))
        .collect()
}

/// The names of the clients connected to node `n` of `nats` (`/connz`).
fn clients_of(nats: &NatsCluster, n: usize) -> Vec<String> {
    nats.monitoring(n, "/connz")["connections"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn two_hosts_on_a_three_node_nats_cluster_each_through_its_own_node_keep_three_copies_of_all() {
    let nats = NatsCluster::start();
    let (one, two) = (TestWorld::new(), TestWorld::new());
    one.install("echo", "echo");
    // Each host is given every node, its own first.
    let mut a = host_on(&one.root, &nats.urls_from(0), "a");
    list_until(&mut a, "echo runs on a", |l| {
        actor(l, "echo")["state"] == "running"
    });
    let mut b = host_on(&two.root, &nats.urls_from(1), "b");
    list_until(&mut b, "two hosts", |l| alive_hosts(l).len() == 2);
    b.tell("echo", json!({"type": "hello"}));
    b.wait_type("echo", "hello");

    assert!(
        clients_of(&nats, 0).contains(&"sausage host a".to_string()),
        "a on node 0: {:?}",
        clients_of(&nats, 0)
    );
    assert!(
        clients_of(&nats, 1).contains(&"sausage host b".to_string()),
        "b on node 1: {:?}",
        clients_of(&nats, 1)
    );
    // The first host made every stream and bucket with three copies, one on each node.
    for n in 0..NatsCluster::SIZE {
        let streams = streams_on(&nats, n);
        for name in STREAMS {
            let stream = streams
                .get(name)
                .unwrap_or_else(|| panic!("node {n} has no {name}: {streams:?}"));
            assert_eq!(stream["config"]["num_replicas"], 3, "{name}: {stream}");
            let others = stream["cluster"]["replicas"].as_array().map_or(0, Vec::len);
            assert_eq!(
                others, 2,
                "{name} has two copies besides node {n}'s: {stream}"
            );
        }
    }
    assert!(
        !b.stderr().contains("fewer than"),
        "stores with three copies are not said to have too few:\n{}",
        b.stderr()
    );
}

#[test]
fn a_host_finding_stores_with_fewer_copies_than_the_nats_cluster_allows_says_so_and_runs() {
    let nats = NatsCluster::start();
    let (one, two) = (TestWorld::new(), TestWorld::new());
    one.install("echo", "echo");
    // The first host asks for one copy; the one after it, with no `--replicas`, would make three.
    let mut a = Host::start_with(
        &one.root,
        &[
            "--no-web",
            "--cluster",
            &nats.urls(),
            "--host-id",
            "a",
            "--replicas",
            "1",
        ],
        &[],
    );
    list_until(&mut a, "echo runs", |l| {
        actor(l, "echo")["state"] == "running"
    });
    // A stream of one copy lives on one node, whichever.
    let mailboxes: Vec<Value> = (0..NatsCluster::SIZE)
        .filter_map(|n| streams_on(&nats, n).remove("SAUSAGE_MAILBOXES"))
        .collect();
    assert_eq!(mailboxes.len(), 1, "{mailboxes:?}");
    assert_eq!(mailboxes[0]["config"]["num_replicas"], 1);
    let mut b = host_on(&two.root, &nats.urls_from(2), "b");
    list_until(&mut b, "two hosts", |l| alive_hosts(l).len() == 2);
    b.tell("echo", json!({"type": "hello"}));
    b.wait_type("echo", "hello");
    b.wait_stderr("KV_sausage-hosts keeps 1 copy");
    let warned = b.stderr();
    assert!(
        warned.contains("nats stream edit SAUSAGE_MAILBOXES --replicas 3"),
        "{warned}"
    );

    // More copies than nodes is refused, saying how many there can be.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sausage"))
        .arg("run")
        .arg(&TestWorld::new().root)
        .args(["--no-web", "--cluster", &nats.urls(), "--host-id", "c"])
        .args(["--replicas", "4"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--replicas 4: the NATS cluster has 3 nodes")
            && stderr.contains("at most 3"),
        "{stderr}"
    );
}

#[test]
fn a_bad_list_of_nats_servers_is_refused_saying_how_to_write_one() {
    let world = TestWorld::new();
    for list in [
        "nats://127.0.0.1:4222,,nats://127.0.0.1:4223",
        "nats://127.0.0.1:4222,",
        "nats://127.0.0.1:4222,http://127.0.0.1:4223",
        "nats://",
    ] {
        for args in [
            vec![
                "run",
                world.root.to_str().unwrap(),
                "--no-web",
                "--host-id",
                "a",
            ],
            vec!["cluster", "status"],
        ] {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_sausage"))
                .args(&args)
                .args(["--cluster", list])
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{list} {args:?}");
            assert!(
                stderr.contains("--cluster") && stderr.contains("by commas, as in nats://"),
                "{list} {args:?}: {stderr}"
            );
        }
    }
}

#[test]
fn a_nats_node_dying_under_traffic_between_hosts_loses_and_repeats_nothing_and_catches_up() {
    // JetStream's default sync: with every write synced, on a machine as busy as a parallel test
    // run makes it, JetStream may not make a consumer for 30 s after the node dies, each request
    // timing out however long the host waits (issue 46, open); on a quiet machine it passes.
    let mut nats = NatsCluster::start_with(false);
    let (one, two) = (TestWorld::new(), TestWorld::new());
    one.install("ticker", "ticker");
    one.install("echo", "echo");
    let mut a = host_on(&one.root, &nats.urls_from(0), "a");
    list_until(&mut a, "ticker and echo run on a", |l| {
        ["ticker", "echo"]
            .iter()
            .all(|id| actor(l, id)["state"] == "running")
    });
    // b goes through the node that dies: the one that leads the mailboxes' stream, whose death
    // costs the most (the stream elects a new leader while b moves to another node), unless it
    // also leads the hosts' bucket. Then no host could renew its leases until the bucket had a
    // new leader, longer than `SELF_STOP_AFTER`, and every host would stop its actors: a limit
    // of this version (docs/internals.md), not what this test is about.
    let leader_of = |stream: &str| {
        streams_on(&nats, 0)[stream]["cluster"]["leader"]
            .as_str()
            .and_then(|name| name.strip_prefix("node-"))
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("{stream} has a leader"))
    };
    let (mailboxes, hosts) = (
        leader_of("SAUSAGE_MAILBOXES"),
        leader_of("KV_sausage-hosts"),
    );
    let victim = if mailboxes != hosts {
        mailboxes
    } else {
        (hosts + 1) % NatsCluster::SIZE
    };
    let survivor = (victim + 1) % NatsCluster::SIZE;
    let mut b = host_on(&two.root, &nats.urls_from(victim), "b");
    list_until(&mut a, "two hosts", |l| alive_hosts(l).len() == 2);
    spawn(&mut a, "notes", "notes");
    list_until(&mut b, "notes runs on b", |l| {
        actor(l, "notes")["host"] == "b" && actor(l, "notes")["state"] == "running"
    });
    assert!(clients_of(&nats, victim).contains(&"sausage host b".to_string()));

    // The ticker on a sends to notes on b, steadily; b's node dies while it does.
    const TICKS: u64 = 4000;
    a.tell(
        "ticker",
        json!({"type": "start", "to": "notes", "count": TICKS, "interval_ms": 2}),
    );
    b.tell("notes", json!({"type": "count"}));
    b.wait_type("notes", "count");
    let led: Vec<&str> = STREAMS
        .iter()
        .copied()
        .filter(|name| {
            streams_on(&nats, survivor)
                .get(*name)
                .is_some_and(|s| s["cluster"]["leader"] == format!("node-{victim}"))
        })
        .collect();
    nats.kill(victim);
    let killed = std::time::Instant::now();
    assert!(
        a.take_all().iter().all(|m| m.from != "ticker"),
        "the ticker was still sending when the node died"
    );

    // The world stalls for as long as a round trip takes, from b's console to echo on a and
    // back: measured until the survivors say the mailboxes' stream has a new leader, and a
    // while after.
    let (mut stall, mut elected, mut k) = (Duration::ZERO, None, 0);
    while elected.is_none_or(|at: Duration| killed.elapsed() < at + Duration::from_secs(2)) {
        assert!(killed.elapsed() < FAILOVER_PATIENCE, "no new leader");
        k += 1;
        let sent = std::time::Instant::now();
        b.tell("echo", json!({"type": "ping", "k": k}));
        b.wait_for(&format!("echo's answer to ping {k}"), |m| {
            m.from == "echo" && m.body["k"] == k
        });
        stall = stall.max(sent.elapsed());
        let now = &streams_on(&nats, survivor)["SAUSAGE_MAILBOXES"]["cluster"]["leader"];
        if elected.is_none() && now.is_string() && *now != json!(format!("node-{victim}")) {
            elected = Some(killed.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let elected = elected.expect("measured until then");
    eprintln!(
        "a NATS node died under traffic: the world stalled {stall:?} at most; the mailboxes' \
         stream had a new leader after at most {elected:?} (the node led {})",
        led.join(", ")
    );
    assert!(
        stall < NODE_DEATH_PATIENCE,
        "stalled {stall:?}\na:\n{}\nb:\n{}",
        a.stderr(),
        b.stderr()
    );

    // Every tick arrives, once and in order.
    a.wait_for_within(FAILOVER_PATIENCE, "the ticks sent", |m| {
        m.from == "ticker" && m.body["type"] == "done"
    });
    let deadline = std::time::Instant::now() + DRAIN_PATIENCE;
    let notes = loop {
        b.tell("notes", json!({"type": "list"}));
        // Behind the ticks still queued for notes, each a commit stored on three NATS nodes.
        let notes = b
            .wait_for_within(DRAIN_PATIENCE, "notes' list", |m| {
                m.from == "notes" && m.body["type"] == "notes"
            })
            .body;
        if support::ticks(&notes).len() as u64 >= TICKS || std::time::Instant::now() > deadline {
            break notes;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        support::ticks(&notes),
        (1..=TICKS).collect::<Vec<_>>(),
        "every tick once, in order"
    );

    // The node comes back and catches up: it holds at least what the others held as it came.
    let others = streams_on(&nats, survivor);
    nats.restart(victim);
    support::eventually("the node to catch up", || {
        let back = streams_on(&nats, victim);
        STREAMS.iter().all(|name| {
            let seq = |streams: &std::collections::BTreeMap<String, Value>| {
                streams
                    .get(*name)
                    .and_then(|s| s["state"]["last_seq"].as_u64())
            };
            seq(&back) >= seq(&others)
        })
    });
    b.tell("notes", json!({"type": "count"}));
    assert_eq!(b.wait_type("notes", "count")["count"], TICKS);
}

/// Shadow runs and forks on a cluster (DESIGN §21): the window lives on the host that runs the
/// actor, and an upgrade or a fork asked on another host is answered there.
#[test]
fn an_upgrade_asked_on_another_host_is_tried_on_the_actors_window_where_it_runs() {
    let nats = Nats::start();
    let (one, two) = (TestWorld::new(), TestWorld::new());
    one.install("s", "shadowy");
    let mut a = host(&one, &nats, "a");
    list_until(&mut a, "s runs on a", |l| {
        actor(l, "s")["state"] == "running" && actor(l, "s")["host"] == "a"
    });
    let mut b = host(&two, &nats, "b");
    list_until(&mut b, "two hosts", |l| alive_hosts(l).len() == 2);
    for n in [3, 7, 9] {
        b.tell("s", json!({"type": "double", "n": n}));
        b.wait_type("s", "doubled");
    }
    let source = two.path("private/console/data/v2");
    std::fs::create_dir_all(source.join("tests")).unwrap();
    std::fs::write(
        source.join("tests/double.jsonl"),
        "{\"send\": {\"type\": \"double\", \"n\": 2}}\n{\"expect\": {\"result\": 4}}\n",
    )
    .unwrap();
    let upgrade = |shadow: &str| {
        json!({
            "type": "upgrade", "actor": "s", "wasm": support::wasm("shadowy").to_str().unwrap(),
            "source": source.to_str().unwrap(), "shadow": shadow,
        })
    };
    let refused = b.request(upgrade("same"));
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(
        refused["shadow"]["different"][0]["message"]["body"],
        json!({"type": "double", "n": 7}),
        "{refused}"
    );
    let upgraded = b.request(upgrade("report"));
    assert_eq!(upgraded["type"], "upgraded", "{upgraded}");
    assert_eq!(upgraded["shadow"]["messages"], 3, "{upgraded}");
    assert_eq!(upgraded["shadow"]["same"], 2, "{upgraded}");

    let window = b.request(json!({"type": "window", "actor": "s"}));
    let messages = window["messages"].as_array().expect("the window, from a");
    assert_eq!(messages.len(), 3, "{window}");
    let second = messages[1]["id"].as_str().unwrap();
    let forked = b.request(json!({"type": "fork", "actor": "s", "before": second, "as": "t"}));
    assert_eq!(forked["type"], "forked", "{forked}");
    assert_eq!(forked["replayed"], 1);
    list_until(&mut b, "the fork runs", |l| {
        actor(l, "t")["state"] == "running"
    });
    b.tell("t", json!({"type": "double", "n": 4}));
    assert_eq!(b.wait_type("t", "doubled")["result"], 8);
}

#[test]
fn a_trace_crosses_hosts_and_a_cluster_hosts_metrics_count_its_hosts_and_leases() {
    let otlp = support::otlp::Otlp::start();
    let nats = Nats::start();
    let (one, two) = (TestWorld::new(), TestWorld::new());
    one.install("echo", "echo");
    let endpoint = otlp.endpoint();
    let mut a = Host::start_with(
        &one.root,
        &[
            "--no-web",
            "--cluster",
            &nats.url(),
            "--host-id",
            "a",
            "--otlp",
            &endpoint,
        ],
        &[],
    );
    list_until(&mut a, "echo runs on a", |l| {
        actor(l, "echo")["state"] == "running" && actor(l, "echo")["host"] == "a"
    });
    let token = std::process::Command::new(env!("CARGO_BIN_EXE_sausage"))
        .args(["metrics", "token", "--world", two.root.to_str().unwrap()])
        .output()
        .unwrap();
    let token = String::from_utf8(token.stdout).unwrap().trim().to_string();
    let mut b = WebHost::start_with(
        &two,
        &[
            "--web",
            "127.0.0.1:0",
            "--cluster",
            &nats.url(),
            "--host-id",
            "b",
            "--otlp",
            &endpoint,
        ],
    );
    list_until(&mut b.host, "two hosts", |l| alive_hosts(l).len() == 2);

    // b's console → echo on a → the answer back to b's console.
    b.host.tell("echo", json!({"type": "ping", "n": 1}));
    b.host.wait_type("echo", "ping");
    // The delivery of a message from `from`, recorded by the host that read it.
    let named = |spans: &[Value], name: &str, host: &str, from: &str| -> Option<Value> {
        spans
            .iter()
            .find(|s| {
                s["name"] == name
                    && s["resource"]["service.instance.id"] == host
                    && s["attributes"]["sausage.from"] == from
            })
            .cloned()
    };
    let spans = otlp.wait_for(
        "the delivery on a and the answer's on b",
        FAILOVER_PATIENCE,
        |s| {
            named(s, "deliver echo", "a", "console").is_some()
                && named(s, "deliver console", "b", "echo").is_some()
        },
    );
    let there = named(&spans, "deliver echo", "a", "console").unwrap();
    let back = named(&spans, "deliver console", "b", "echo").unwrap();
    assert_eq!(back["trace_id"], there["trace_id"], "{back}");
    assert_eq!(back["parent_span_id"], there["span_id"], "{back}");

    let auth = format!("Bearer {token}");
    let metrics =
        support::http::request(&b.addr, "GET", "/metrics", &[("Authorization", &auth)], b"");
    assert_eq!(metrics.status, 200, "{}", metrics.text());
    let text = metrics.text();
    assert!(text.contains("sausage_cluster_hosts_alive 2"), "{text}");
    assert!(
        text.contains(r#"sausage_cluster_leases{host="a"} "#),
        "{text}"
    );
    assert!(
        text.contains(r#"sausage_cluster_leases{host="b"} "#),
        "{text}"
    );
}

#[test]
fn every_host_serves_every_route_and_reaches_the_actor_where_it_runs() {
    use support::http::request;
    let nats = Nats::start();
    let (one, two) = (TestWorld::new(), TestWorld::new());
    let mut a = host(&one, &nats, "a");
    let mut b = host(&two, &nats, "b");
    list_until(&mut a, "two hosts", |l| alive_hosts(l).len() == 2);
    spawn(&mut a, "shop", "webapp");
    let routed = a.request(json!({"type": "route", "actor": "shop", "path": "/api/*", "rate": 0}));
    assert_eq!(routed["type"], "routed", "{routed}");
    let list = list_until(&mut b, "shop runs, with its route", |l| {
        actor(l, "shop")["state"] == "running" && actor(l, "shop")["routes"] == json!(["/api/*"])
    });
    let runs_on = actor(&list, "shop")["host"].as_str().unwrap().to_string();

    // Both hosts answer, the one that does not run the actor through the one that does.
    let address = |world: &TestWorld| {
        let path = world.path("broker/http/address");
        support::eventually("the public address", || path.exists());
        std::fs::read_to_string(path).unwrap()
    };
    for (id, world) in [("a", &one), ("b", &two)] {
        let addr = address(world);
        let answer = request(&addr, "GET", "/api/echo?from=test", &[], b"");
        assert_eq!(
            answer.status,
            200,
            "host {id} (shop runs on {runs_on}): {}",
            answer.text()
        );
        assert_eq!(answer.json()["query"], "from=test");
        // A crash is answered on the host the request came to, wherever the actor runs.
        let crashed = request(&addr, "GET", "/api/crash", &[], b"");
        assert_eq!(crashed.status, 503, "host {id}: {}", crashed.text());
        support::eventually("shop to run again", || {
            request(&addr, "GET", "/api/echo", &[], b"").status == 200
        });
    }
    // A static route: the files are where the actor runs, and every host serves them.
    a.tell(
        "shop",
        json!({"type": "write", "path": "/public/site/index.html", "text": "<h1>home</h1>"}),
    );
    a.wait_for("the file written", |m| m.body["type"] == "written");
    let routed = a.request(json!({
        "type": "route", "actor": "shop", "path": "/site/*", "static": "/public/site",
    }));
    assert_eq!(routed["type"], "routed", "{routed}");
    let elsewhere = if runs_on == "a" { &two } else { &one };
    assert!(
        !elsewhere.path("actor/shop/public/site/index.html").exists(),
        "the host that does not run shop has no copy of its files: it asks"
    );
    for (id, world) in [("a", &one), ("b", &two)] {
        let addr = address(world);
        support::eventually("the static route on every host", || {
            request(&addr, "GET", "/site/", &[], b"").status == 200
        });
        let home = request(&addr, "GET", "/site/", &[], b"");
        assert_eq!(home.text(), "<h1>home</h1>", "host {id}");
        assert_eq!(home.header("content-type"), Some("text/html"), "host {id}");
        let etag = home.header("etag").expect("an ETag").to_string();
        let again = request(&addr, "GET", "/site/", &[("If-None-Match", &etag)], b"");
        assert_eq!(again.status, 304, "host {id}: {}", again.text());
        let part = request(
            &addr,
            "GET",
            "/site/index.html",
            &[("Range", "bytes=0-3")],
            b"",
        );
        assert_eq!(
            (part.status, part.text()),
            (206, "<h1>".into()),
            "host {id}"
        );
        assert_eq!(request(&addr, "GET", "/site/missing", &[], b"").status, 404);
    }

    // A route taken away on one host is gone from every host.
    let unrouted = b.request(json!({"type": "unroute", "actor": "shop", "path": "/api/*"}));
    assert_eq!(unrouted["type"], "unrouted", "{unrouted}");
    for world in [&one, &two] {
        let addr = address(world);
        support::eventually("the route gone", || {
            request(&addr, "GET", "/api/echo", &[], b"").status == 404
        });
    }
}

#[test]
fn a_request_whose_host_dies_is_answered_502_and_never_handled_again() {
    use support::http::{request, try_request};
    let nats = Nats::start();
    let (one, two) = (TestWorld::new(), TestWorld::new());
    one.install("shop", "webapp");
    let mut a = host(&one, &nats, "a");
    list_until(&mut a, "shop runs on a", |l| {
        actor(l, "shop")["host"] == "a" && actor(l, "shop")["state"] == "running"
    });
    let routed = a.request(json!({"type": "route", "actor": "shop", "path": "/api/*", "rate": 0}));
    assert_eq!(routed["type"], "routed", "{routed}");
    let _b = {
        let mut b = host(&two, &nats, "b");
        list_until(&mut b, "two hosts", |l| alive_hosts(l).len() == 2);
        b
    };
    let path = two.path("broker/http/address");
    support::eventually("b's public address", || path.exists());
    let addr = std::fs::read_to_string(path).unwrap();
    support::eventually("b to serve shop's route", || {
        request(&addr, "GET", "/api/echo", &[], b"").status == 200
    });
    assert_eq!(
        request(&addr, "POST", "/api/count", &[], b"").json(),
        json!({"count": 1})
    );

    // Host a takes a count that ends after 3 s, and dies before.
    let slow = {
        let addr = addr.clone();
        std::thread::spawn(move || try_request(&addr, "POST", "/api/count?ms=3000", &[], b""))
    };
    std::thread::sleep(std::time::Duration::from_millis(700));
    a.kill();
    let killed = std::time::Instant::now();
    let answer = slow.join().unwrap().expect("b answers");
    assert_eq!(answer.status, 502, "{}", answer.text());
    assert!(
        answer.text().contains("died with the request"),
        "{}",
        answer.text()
    );
    eprintln!(
        "the lost request was answered {:?} after its host was killed",
        killed.elapsed()
    );
    // b runs shop now, and the request was handled nowhere: the count goes on from 1.
    let next = request(&addr, "POST", "/api/count", &[], b"");
    assert_eq!((next.status, next.json()), (200, json!({"count": 2})));
    std::thread::sleep(std::time::Duration::from_millis(3500));
    let last = request(&addr, "POST", "/api/count", &[], b"");
    assert_eq!(
        last.json(),
        json!({"count": 3}),
        "the lost request was never given again"
    );
}

#[test]
fn secrets_are_shared_sealed_between_hosts_with_the_key_and_a_host_without_it_says_how() {
    const PLANTED: &str = "pl4nted-cluster-v4lue";
    let nats = Nats::start();
    let (one, two, three) = (TestWorld::new(), TestWorld::new(), TestWorld::new());
    one.install("fetcher", "fetcher");
    let folder = |world: &TestWorld| world.path("").to_str().unwrap().to_string();
    let set = support::sausage_with_input(
        &[
            "secret",
            "set",
            "gh",
            "--url",
            "http://127.0.0.1:9/api",
            &folder(&one),
        ],
        PLANTED,
    );
    assert!(set.status.success(), "{}", support::text(&set.stderr));
    let granted = support::sausage(&["secret", "grant", "gh", "fetcher", &folder(&one)]);
    assert!(
        granted.status.success(),
        "{}",
        support::text(&granted.stderr)
    );

    // The first host makes the cluster's key and shares the secrets sealed with it.
    let _a = host(&one, &nats, "a");
    let key = one.path("broker/secrets/cluster.key");
    support::eventually("host a's cluster key", || key.exists());
    std::fs::create_dir_all(two.path("broker/secrets")).unwrap();
    std::fs::copy(&key, two.path("broker/secrets/cluster.key")).unwrap();
    let _b = host(&two, &nats, "b");
    let theirs = two.path("broker/secrets/secrets.json");
    support::eventually("host b to get the secrets", || {
        std::fs::read_to_string(&theirs).is_ok_and(|t| t.contains(PLANTED))
    });
    // A change on the second host reaches the first.
    let revoked = support::sausage(&["secret", "revoke", "gh", "fetcher", &folder(&two)]);
    assert!(
        revoked.status.success(),
        "{}",
        support::text(&revoked.stderr)
    );
    support::eventually("the revocation on host a", || {
        std::fs::read_to_string(one.path("broker/secrets/secrets.json"))
            .is_ok_and(|t| !t.contains("\"fetcher\""))
    });
    // NATS's store on disk holds no value, nor the key (it does hold what is shared plain).
    support::eventually("the registry in NATS's store on disk", || {
        !support::files_holding(&nats.store(), b"actor.fetcher").is_empty()
    });
    let key_bytes = std::fs::read(&key).unwrap();
    assert!(support::files_holding(&nats.store(), PLANTED.as_bytes()).is_empty());
    assert!(support::files_holding(&nats.store(), &key_bytes).is_empty());

    // A host without the key shares nothing and says how to fix it.
    let c = host(&three, &nats, "c");
    c.wait_stderr("it has no cluster key; copy");
    assert!(!three.path("broker/secrets/secrets.json").exists());
}

/// Durable NATS (DESIGN §20): every node syncs each write before it acknowledges it
/// (`SYNC_EVERY_WRITE`). All three nodes die at once in the middle of a flow and come back; the
/// host goes on, and no tick the ticker recorded as sent (so accepted) nor any commit of notes
/// is lost, none comes twice. (The ticker, stopped when the host's leases lapse, sends no more.)
#[test]
fn all_three_nats_nodes_dying_at_once_lose_no_acknowledged_message_or_commit() {
    let mut nats = NatsCluster::start();
    let one = TestWorld::new();
    one.install("ticker", "ticker");
    one.install("notes", "notes");
    let mut a = host_on(&one.root, &nats.urls(), "a");
    list_until(&mut a, "both run on a", |l| {
        actor(l, "notes")["state"] == "running" && actor(l, "ticker")["state"] == "running"
    });
    a.tell(
        "ticker",
        json!({"type": "start", "to": "notes", "count": 300, "interval_ms": 10,
               "record_every": 1}),
    );
    support::eventually("notes to commit 60 ticks", || {
        committed_ticks(&one.root).len() >= 60
    });
    for n in 0..NatsCluster::SIZE {
        nats.kill(n);
    }
    let committed = committed_ticks(&one.root);
    std::thread::sleep(Duration::from_secs(1));
    nats.restart_all();

    // The host comes back to the cluster and runs both again.
    list_until(&mut a, "both running again", |l| {
        actor(l, "notes")["state"] == "running" && actor(l, "ticker")["state"] == "running"
    });
    let sent = || {
        let sent = std::fs::read_to_string(one.path("private/ticker/data/sent.jsonl")).unwrap();
        sent.lines().count() as u64 - 1
    };
    ticks_kept(&mut a, &committed, sent);
    // And the world takes new work through the restarted nodes.
    a.tell("notes", json!({"type": "add", "text": "after"}));
    a.wait_type("notes", "added");
}
