//! A world over several hosts (DESIGN §16) runs on a real NATS server with JetStream, which
//! each test starts on free ports of its own (`support::nats`), with three hosts on this machine,
//! each with its own world folder, driven through their consoles.

mod support;

use std::time::Duration;

use serde_json::{Value, json};

use support::nats::Nats;
use support::web::WebHost;
use support::{Host, TestWorld};

/// Longer than a fail-over takes by design (10 s without a heartbeat, then a start).
const FAILOVER_PATIENCE: Duration = Duration::from_secs(20);

/// `sausage run` of `world` as host `id` of the cluster at `nats`.
fn host(world: &TestWorld, nats: &Nats, id: &str) -> Host {
    host_at(&world.root, nats, id)
}

/// [`host`] on a folder that need not hold a world yet.
fn host_at(folder: &std::path::Path, nats: &Nats, id: &str) -> Host {
    Host::start_with(
        folder,
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
            support::eventually("b to say it runs the scheduler", || {
                b.stderr().contains("host b: runs the scheduler")
            });
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
    world.install("sink", "echo");
    let mut a = host(&world, &nats, "a");
    list_until(&mut a, "both running", |l| {
        actor(l, "producer")["state"] == "running" && actor(l, "sink")["state"] == "running"
    });
    let stopped = a.request(json!({"type": "stop", "actor": "sink"}));
    assert_eq!(stopped["type"], "stopped", "{stopped}");
    let limit = sausage_cluster::MAILBOX_STREAM_LIMIT as u64;
    a.tell(
        "producer",
        json!({"type": "flood", "to": "sink", "count": limit + 500}),
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
    let deadline = std::time::Instant::now() + FAILOVER_PATIENCE;
    loop {
        let report = status();
        let waiting = report
            .lines()
            .find(|l| l.trim_start().starts_with("sink "))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|n| n.parse::<u64>().ok());
        if waiting == Some(limit) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sink should hold {limit}:\n{report}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Started again, it reads every one the stream kept.
    let started = a.request(json!({"type": "start", "actor": "sink"}));
    assert_eq!(started["type"], "started", "{started}");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let report = status();
        if report
            .lines()
            .any(|l| l.trim_start().starts_with("sink ") && l.ends_with(" 0"))
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{report}");
        std::thread::sleep(Duration::from_millis(500));
    }
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
    let empty = tempfile::tempdir().unwrap();
    let mut b = host_at(&empty.path().join("b"), &nats, "b");
    list_until(&mut b, "two hosts", |l| alive_hosts(l).len() == 2);

    // A person at b's console talks to the agent on a, and hears its turn.
    assert_eq!(
        support::agent::ask(&mut b, "hello from b"),
        "Hello from host a."
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
