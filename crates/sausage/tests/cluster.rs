//! A world over several hosts (DESIGN §16) runs on a real NATS server with JetStream, which
//! each test starts on free ports of its own (`support::nats`), with three hosts on this machine,
//! each with its own world folder, driven through their consoles.

mod support;

use std::time::Duration;

use serde_json::{Value, json};

use support::nats::Nats;
use support::{Host, TestWorld};

/// Longer than a fail-over takes by design (10 s without a heartbeat, then a start).
const FAILOVER_PATIENCE: Duration = Duration::from_secs(20);

/// `sausage run` of `world` as host `id` of the cluster at `nats`.
fn host(world: &TestWorld, nats: &Nats, id: &str) -> Host {
    Host::start_with(
        &world.root,
        &["--no-web", "--cluster", &nats.url(), "--host-id", id],
        &[],
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
    let ns: Vec<u64> = notes["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["n"].as_u64().unwrap())
        .collect();
    assert_eq!(ns, (1..=TICKS).collect::<Vec<_>>(), "whole and in order");

    // The host that runs echo is killed while messages for echo wait; echo runs elsewhere
    // within the fail-over time and answers every one of them.
    let (victim, survivor) = if echo_host == "b" { (b, c) } else { (c, b) };
    let mut survivor = survivor;
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
    let port = one.port;
    drop(one);
    support::eventually("the server to stop", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
    });
    assert!(two.healthy(), "the other server is untouched");
}
