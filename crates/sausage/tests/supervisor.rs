//! Supervision through real worlds: restarts after crashes, graceful stops, queued messages
//! across stops and restarts, and back-pressure on full mailboxes.

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;

#[test]
fn a_crashed_actor_restarts_and_loses_none_of_its_queued_messages() {
    let world = TestWorld::new();
    world.install("crasher", "crasher");
    let mut host = world.run();
    host.tell("crasher", json!({"type": "ping"}));
    host.wait_type("crasher", "pong");

    // The crash, then messages that arrive while it restarts: they wait, in order.
    host.tell("crasher", json!({"type": "crash"}));
    for _ in 0..5 {
        host.tell("crasher", json!({"type": "ping"}));
    }
    for _ in 0..5 {
        host.wait_type("crasher", "pong");
    }
    let status = world.status("crasher");
    assert_eq!(status["restarts"], 1, "{status}");
    assert_eq!(status["state"], "running");
    let last_exit = status["last_exit"].as_str().unwrap();
    assert!(last_exit.contains("trapped"), "{last_exit}");
    assert!(
        status["parked"].as_str().unwrap().starts_with("m-"),
        "the crashing message is parked"
    );
    let log = world.log("crasher");
    assert!(
        log.contains("crash requested by console"),
        "the guest's stderr: {log}"
    );
    assert!(
        log.contains("restarting in 0.5 s"),
        "the host's note: {log}"
    );
}

#[test]
fn crashes_in_a_row_back_off() {
    let world = TestWorld::new();
    world.install("crasher", "crasher");
    let mut host = world.run();
    for _ in 0..3 {
        host.tell("crasher", json!({"type": "exit", "code": 3}));
        host.tell("crasher", json!({"type": "ping"}));
        host.wait_type("crasher", "pong");
    }
    let log = world.log("crasher");
    for delay in [
        "restarting in 0.5 s",
        "restarting in 1.0 s",
        "restarting in 2.0 s",
    ] {
        assert!(log.contains(delay), "{log}");
    }
    assert!(log.contains("exited with code"), "{log}");
    assert_eq!(world.status("crasher")["restarts"], 3);
}

#[test]
fn stop_is_graceful_and_kills_after_five_seconds() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    world.install("crasher", "crasher");
    let mut host = world.run();
    let stopped = host.request(json!({"type": "stop", "actor": "echo"}));
    assert_eq!(
        stopped,
        json!({"type": "stopped", "actor": "echo", "exit": "exited cleanly"})
    );

    host.tell("crasher", json!({"type": "ignore_shutdown"}));
    host.tell("crasher", json!({"type": "ping"}));
    host.wait_type("crasher", "pong");
    let started = std::time::Instant::now();
    let stopped = host.request(json!({"type": "stop", "actor": "crasher"}));
    assert_eq!(stopped["exit"], "killed");
    assert!(started.elapsed() >= std::time::Duration::from_secs(5));
    assert!(
        world
            .log("crasher")
            .contains("killed: still running 5 s after shutdown")
    );
    assert_eq!(world.status("crasher")["state"], "stopped");
    assert_eq!(
        world.json("sausage.json")["actors"]["crasher"]["running"],
        false
    );
}

#[test]
fn messages_to_a_stopped_actor_wait_for_its_start_in_order() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let mut host = world.run();
    host.request(json!({"type": "stop", "actor": "echo"}));
    for n in 0..20 {
        host.tell("echo", json!({"type": "n", "n": n}));
    }
    assert_eq!(
        host.request(json!({"type": "start", "actor": "echo"}))["type"],
        "started"
    );
    for n in 0..20 {
        assert_eq!(host.wait_type("echo", "n")["n"], n);
    }
    // A stopped actor stays stopped across a restart of the host; a running one starts.
    host.request(json!({"type": "stop", "actor": "echo"}));
    host.tell("echo", json!({"type": "n", "n": 99}));
    assert!(host.quit().success());
    let mut host = world.run();
    let list = host.request(json!({"type": "list"}));
    let echo = list["actors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "echo")
        .unwrap()
        .clone();
    assert_eq!(echo["state"], "stopped", "{echo}");
}

#[test]
fn a_fast_producer_is_slowed_down_not_dropped() {
    let world = TestWorld::new();
    world.install("ticker", "ticker");
    world.install("notes", "notes");
    let mut host = world.run();
    host.request(json!({"type": "stop", "actor": "notes"}));
    // 1,500 ticks into a stopped actor: the mailbox takes 1,000, the ticker's stdout blocks.
    host.tell(
        "ticker",
        json!({"type": "start", "to": "notes", "count": 1500, "interval_ms": 0}),
    );
    let mut queued = 0;
    while queued < 1000 {
        queued = queued_for(&mut host, "notes");
        assert!(queued <= 1000, "a mailbox holds at most 1,000 messages");
    }
    host.request(json!({"type": "start", "actor": "notes"}));
    host.wait_type("ticker", "done");
    host.tell("notes", json!({"type": "count"}));
    let mut count = host.wait_type("notes", "count")["count"].as_u64().unwrap();
    while count < 1500 {
        host.tell("notes", json!({"type": "count"}));
        count = host.wait_type("notes", "count")["count"].as_u64().unwrap();
    }
    host.tell("notes", json!({"type": "list"}));
    let notes = host.wait_type("notes", "notes");
    let ns = support::ticks(&notes);
    assert_eq!(ns, (1..=1500).collect::<Vec<_>>(), "every tick, in order");
}

/// Output before commit (DESIGN §20): the ticker records each tick in `/data/sent.jsonl` after
/// sending it, to notes, which is stopped. Once notes' mailbox is full the ticker's next tick
/// waits for a place, and so does the record of it: a kill of the host then, however often,
/// loses no tick the ticker recorded as sent.
#[test]
fn a_send_recorded_after_it_was_written_survives_a_kill_of_the_host() {
    let world = TestWorld::new();
    world.install("ticker", "ticker");
    world.install("notes", "notes");
    let sent = |world: &TestWorld| -> Vec<u64> {
        let text = std::fs::read_to_string(world.path("private/ticker/data/sent.jsonl"))
            .unwrap_or_default();
        let lines = text.lines().map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            record["n"].as_u64().unwrap()
        });
        lines.collect()
    };
    let mut host = world.run();
    host.request(json!({"type": "stop", "actor": "notes"}));
    host.tell(
        "ticker",
        json!({"type": "start", "to": "notes", "count": 1500, "record_every": 1}),
    );
    // The mailbox is full, and tick 1,000 was recorded after it went in; tick 1,001 waits,
    // and its record with it.
    eventually("notes' mailbox to fill", || {
        queued_for(&mut host, "notes") == 1000
    });
    eventually("the ticker to record tick 1,000", || {
        sent(&world).last() == Some(&1000)
    });
    for _ in 0..20 {
        queued_for(&mut host, "notes");
    }
    host.kill();

    let recorded = sent(&world);
    let mut host = world.run();
    host.request(json!({"type": "start", "actor": "notes"}));
    let last = *recorded.last().unwrap();
    let mut count = 0;
    while count < last {
        host.tell("notes", json!({"type": "count"}));
        count = host.wait_type("notes", "count")["count"].as_u64().unwrap();
    }
    host.tell("notes", json!({"type": "list"}));
    let stored = support::ticks(&host.wait_type("notes", "notes"));
    assert_eq!(
        recorded,
        (0..=last).collect::<Vec<_>>(),
        "the ticker recorded each tick once, up to where it waited"
    );
    assert_eq!(
        stored,
        (1..=last).collect::<Vec<_>>(),
        "every tick recorded as sent arrived, once, in order"
    );
}

/// The messages waiting in an actor's mailbox, as `list` reports them.
fn queued_for(host: &mut Host, id: &str) -> u64 {
    let list = host.request(json!({"type": "list"}));
    let actor = list["actors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .unwrap()
        .clone();
    actor["queued"].as_u64().unwrap()
}

#[test]
fn a_mailbox_full_for_30_seconds_makes_the_message_undeliverable() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let mut host = world.run();
    host.request(json!({"type": "stop", "actor": "echo"}));
    for n in 0..1001 {
        host.send(&format!("@echo {{\"type\":\"n\",\"n\":{n}}}"));
    }
    let notice = host
        .wait_for_within(Duration::from_secs(60), "undeliverable", |m| {
            m.from == "broker" && m.body["type"] == "undeliverable"
        })
        .body;
    assert_eq!(notice["to"], "echo");
    assert!(
        notice["reason"].as_str().unwrap().contains("stayed full"),
        "{notice}"
    );
    host.request(json!({"type": "start", "actor": "echo"}));
    for n in 0..1000 {
        assert_eq!(host.wait_type("echo", "n")["n"], n);
    }
}
