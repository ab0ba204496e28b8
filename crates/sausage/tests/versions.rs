//! Versions through real worlds: tested upgrades, a swap that loses nothing, transcripts that
//! reject, parked messages, crash-loop rollback, explicit rollback and roll-forward, remove.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// A source folder in the world's console data, with the given files.
fn source_with(world: &TestWorld, name: &str, files: &[(&str, &str)]) -> String {
    let dir = world.path(&format!("private/console/data/{name}"));
    for (path, text) in files {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }
    dir.to_str().unwrap().to_string()
}

fn upgrade(host: &mut Host, actor: &str, wasm_of: &str, source: impl AsRef<Path>) -> Value {
    host.request(json!({
        "type": "upgrade", "actor": actor, "wasm": wasm(wasm_of), "source": source.as_ref(),
    }))
}

fn notes_in(world: &TestWorld) -> Vec<Value> {
    let text =
        std::fs::read_to_string(world.path("private/notes/data/notes.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn an_upgrade_under_a_stream_of_messages_loses_none() {
    let world = TestWorld::new();
    world.install("ticker", "ticker");
    world.install("notes", "notes");
    let mut host = world.run();
    host.tell(
        "ticker",
        json!({"type": "start", "to": "notes", "count": 200, "interval_ms": 5}),
    );
    eventually("the stream to start", || !notes_in(&world).is_empty());
    let reply = upgrade(&mut host, "notes", "notes", source("notes"));
    assert_eq!(reply["type"], "upgraded", "{reply}");
    assert_eq!(reply["version"], 2);
    assert_eq!(reply["previous"], 1);
    assert_eq!(
        reply["tests"]["transcripts"][0]["file"],
        "tests/notes.jsonl"
    );
    host.wait_type("ticker", "done");
    eventually("every tick stored", || notes_in(&world).len() >= 200);
    let ns: Vec<u64> = notes_in(&world)
        .iter()
        .map(|n| n["n"].as_u64().unwrap())
        .collect();
    assert_eq!(
        ns,
        (1..=200).collect::<Vec<_>>(),
        "in order, no gap, nothing twice"
    );

    assert_eq!(
        world.json("sausage.json")["actors"]["notes"],
        json!({"version": 2, "next_version": 3, "running": true})
    );
    let status = world.status("notes");
    assert_eq!(status["version"], 2);
    assert_eq!(status["previous_version"], 1);
    assert!(world.path("broker/versions/notes/2/meta.json").is_file());
    assert!(
        world
            .path("broker/versions/notes/1/snapshot/data/notes.jsonl")
            .is_file(),
        "v1's state"
    );
    assert!(
        world.path("actor/notes/source/tests/notes.jsonl").is_file(),
        "the new source is installed"
    );
    assert!(
        !notes_in(&world).iter().any(|n| n["text"] == "buy milk"),
        "the transcript ran on a copy"
    );
}

#[test]
fn a_failing_transcript_rejects_the_upgrade_and_the_old_version_keeps_running() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let mut host = world.run();
    let bad = source_with(
        &world,
        "bad",
        &[(
            "tests/greeting.jsonl",
            "// says bye?\n{\"send\": {\"type\": \"text\", \"text\": \"hi\"}}\n{\"expect\": {\"type\": \"text\", \"text\": \"bye\"}, \"to\": \"test\"}\n",
        )],
    );
    let reply = upgrade(&mut host, "echo", "echo", &bad);
    assert_eq!(reply["type"], "error");
    assert_eq!(reply["request"], "upgrade");
    let reason = reply["reason"].as_str().unwrap();
    assert!(
        reason.contains("version 2 of `echo` was rejected"),
        "{reason}"
    );
    assert!(reason.contains("tests/greeting.jsonl line 3"), "{reason}");
    assert!(
        reason.contains(r#"expected {"text":"bye","type":"text"} to `test`"#),
        "{reason}"
    );
    assert!(
        reason.contains(r#"got {"text":"hi","type":"text"} to `test`"#),
        "{reason}"
    );
    host.tell("echo", json!({"type": "still", "here": true}));
    host.wait_type("echo", "still");
    assert_eq!(world.json("sausage.json")["actors"]["echo"]["version"], 1);
    assert!(!world.path("broker/versions/echo/2").exists());
}

#[test]
fn wrong_upgrades_and_rollbacks_say_what_is_wrong() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let mut host = world.run();
    let not_component = world.path("private/console/data/core.wasm");
    std::fs::write(&not_component, b"\0asm\x01\0\0\0").unwrap();
    let broken_json = source_with(
        &world,
        "broken",
        &[("tests/a.jsonl", "{\"send\": {\"type\": \"x\"}\n")],
    );
    let unknown_step = source_with(&world, "unknown", &[("tests/a.jsonl", "{\"sleep\": 3}\n")]);
    let echo = wasm("echo");
    let cases = [
        (
            json!({"type": "upgrade", "actor": "ghost", "wasm": echo}),
            "no actor `ghost`",
        ),
        (
            json!({"type": "upgrade", "actor": "echo", "wasm": "/data/core.wasm"}),
            "not a component",
        ),
        (
            json!({"type": "upgrade", "actor": "echo", "wasm": echo, "source": broken_json}),
            "tests/a.jsonl line 1: not valid JSON",
        ),
        (
            json!({"type": "upgrade", "actor": "echo", "wasm": echo, "source": unknown_step}),
            "tests/a.jsonl line 1: unknown step",
        ),
        (
            json!({"type": "upgrade", "actor": "console", "wasm": echo}),
            "native actor",
        ),
        (
            json!({"type": "rollback", "actor": "echo"}),
            "no version older than 1",
        ),
        (
            json!({"type": "rollback", "actor": "echo", "version": 7}),
            "has no version 7; stored versions: 1",
        ),
        (
            json!({"type": "rollback", "actor": "echo", "version": 1}),
            "already runs version 1",
        ),
        (
            json!({"type": "rollback", "actor": "echo", "version": "2"}),
            "must be a version number",
        ),
        (
            json!({"type": "rollback", "actor": "ghost"}),
            "no actor `ghost`",
        ),
        (
            json!({"type": "remove", "actor": "ghost"}),
            "no actor `ghost`",
        ),
        (json!({"type": "remove"}), "missing field `actor`"),
    ];
    for (request, expected) in cases {
        let reply = host.request(request.clone());
        assert_eq!(reply["type"], "error", "{request} → {reply}");
        let reason = reply["reason"].as_str().unwrap();
        assert!(reason.contains(expected), "{request} → {reason}");
    }
    assert_eq!(world.json("sausage.json")["actors"]["echo"]["version"], 1);
}

#[test]
fn a_parked_message_reaches_the_next_version_but_not_a_restart() {
    let world = TestWorld::new();
    world.install("crasher", "crasher");
    let mut host = world.run();
    host.tell("crasher", json!({"type": "crash", "note": "parked"}));
    host.tell("crasher", json!({"type": "ping"}));
    host.wait_type("crasher", "pong");
    let status = world.status("crasher");
    assert_eq!(
        status["restarts"], 1,
        "the plain restart did not deliver the crash again"
    );
    assert!(status["parked"].is_string());
    // Version 2 (an echo) gets the parked message first and answers it.
    let reply = upgrade(&mut host, "crasher", "echo", source("echo"));
    assert_eq!(reply["type"], "upgraded", "{reply}");
    let again = host.wait_type("crasher", "crash");
    assert_eq!(again["note"], "parked");
    assert!(world.status("crasher")["parked"].is_null());
}

#[test]
fn a_parked_message_outlives_a_host_kill_and_restarts_that_crash_before_reading() {
    let world = TestWorld::new();
    world.install("crasher", "crasher");
    let mut host = world.run();
    host.tell("crasher", json!({"type": "ping"}));
    host.wait_type("crasher", "pong");
    // From now on every new instance crashes before it reads anything.
    std::fs::write(world.path("actor/crasher/source/crash_after_ms"), "0").unwrap();
    host.tell("crasher", json!({"type": "crash", "note": "parked"}));
    eventually("two restarts that crashed at once", || {
        world.status("crasher")["restarts"].as_u64() >= Some(3)
    });
    let parked = world.status("crasher")["parked"].clone();
    assert!(parked.is_string(), "{parked}");
    assert!(world.path("broker/parked/crasher.json").exists());

    host.kill();
    let mut host = world.run();
    eventually("the new host to read the status it keeps", || {
        world.status("crasher")["restarts"].as_u64() >= Some(1)
            || world.status("crasher")["state"] == "restarting"
    });
    assert_eq!(world.status("crasher")["parked"], parked);
    // The fixed version gets the parked message first (version 2 is an echo).
    let reply = upgrade(&mut host, "crasher", "echo", source("echo"));
    assert_eq!(reply["type"], "upgraded", "{reply}");
    let again = host.wait_type("crasher", "crash");
    assert_eq!(again["note"], "parked");
    eventually("the parked message forgotten once delivered", || {
        world.status("crasher")["parked"].is_null()
    });
    assert!(!world.path("broker/parked/crasher.json").exists());
}

#[test]
fn a_parked_id_in_status_without_a_kept_message_is_cleared_at_start() {
    let world = TestWorld::new();
    world.install("crasher", "crasher");
    std::fs::write(
        world.path("actor/crasher/status.json"),
        r#"{"state":"running","version":1,"restarts":0,"last_exit":null,"parked":"m-99","previous_version":null}"#,
    )
    .unwrap();
    let mut host = world.run();
    host.tell("crasher", json!({"type": "ping"}));
    host.wait_type("crasher", "pong");
    eventually("the stale parked id cleared", || {
        world.status("crasher")["parked"].is_null()
    });
}

#[test]
fn an_upgrade_or_rollback_that_cannot_swap_changes_nothing_and_says_so() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    std::fs::write(world.path("private/echo/data/marker"), "version 1's data").unwrap();
    let mut host = world.run();
    // The snapshot of version 1 cannot be made: a file stands where its folder goes.
    std::fs::create_dir_all(world.path("broker/versions/echo/1")).unwrap();
    std::fs::write(world.path("broker/versions/echo/1/snapshot"), "in the way").unwrap();
    let reply = upgrade(
        &mut host,
        "echo",
        "echo",
        source_with(&world, "v2", &[("v", "2")]),
    );
    assert_eq!(reply["type"], "error", "{reply}");
    let reason = reply["reason"].as_str().unwrap();
    assert!(reason.contains("version 1 keeps running"), "{reason}");
    assert!(!world.path("broker/versions/echo/2").exists());
    assert!(!world.path("actor/echo/source/v").exists());
    assert_eq!(world.json("sausage.json")["actors"]["echo"]["version"], 1);
    host.tell("echo", json!({"type": "still-there"}));
    host.wait_type("echo", "still-there");
    eventually("version 1 running again", || {
        world.status("echo")["state"] == "running" && world.status("echo")["version"] == 1
    });

    // With the way cleared, the upgrade goes through; then a rollback that cannot snapshot
    // version 2 leaves version 2 running on its own data.
    std::fs::remove_file(world.path("broker/versions/echo/1/snapshot")).unwrap();
    let reply = upgrade(
        &mut host,
        "echo",
        "echo",
        source_with(&world, "v2b", &[("v", "2")]),
    );
    assert_eq!(reply["type"], "upgraded", "{reply}");
    std::fs::write(world.path("private/echo/data/marker"), "version 2's data").unwrap();
    std::fs::create_dir_all(world.path("broker/versions/echo/2")).unwrap();
    std::fs::write(world.path("broker/versions/echo/2/snapshot"), "in the way").unwrap();
    let reply = host.request(json!({"type": "rollback", "actor": "echo"}));
    assert_eq!(reply["type"], "error", "{reply}");
    let reason = reply["reason"].as_str().unwrap();
    assert!(reason.contains("version 2 keeps running"), "{reason}");
    assert_eq!(world.read("private/echo/data/marker"), "version 2's data");
    assert!(world.path("actor/echo/source/v").exists());
    assert_eq!(world.json("sausage.json")["actors"]["echo"]["version"], 2);
    host.tell("echo", json!({"type": "after-rollback"}));
    host.wait_type("echo", "after-rollback");
    let hidden: Vec<_> = std::fs::read_dir(world.path("private/echo"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with(".sausage-tmp"))
        .collect();
    assert!(hidden.is_empty(), "left beside the data: {hidden:?}");
}

#[test]
fn a_crash_loop_after_an_upgrade_rolls_back_with_the_data_restored() {
    let world = TestWorld::new();
    world.install("crasher", "crasher");
    std::fs::write(
        world.path("private/crasher/data/marker"),
        "before the upgrade",
    )
    .unwrap();
    let mut host = world.run();
    let doomed = source_with(&world, "doomed-src", &[("crash_after_ms", "300")]);
    let reply = upgrade(&mut host, "crasher", "crasher", &doomed);
    assert_eq!(
        reply["type"], "upgraded",
        "the candidate does not crash: {reply}"
    );
    // Version 2 writes over the data (as a bad version might: by replacing the file, as every
    // write in the world does) and then crashes in a loop.
    sausage_core::fs::write_atomically(
        &world.path("private/crasher/data/marker"),
        b"ruined by version 2",
    )
    .unwrap();
    let rolled = host
        .wait_for_within(Duration::from_secs(60), "rolled_back", |m| {
            m.from == "broker" && m.body["type"] == "rolled_back"
        })
        .body;
    assert_eq!(rolled["from"], 2);
    assert_eq!(rolled["to"], 1);
    assert_eq!(rolled["restored_state"], true);
    let reason = rolled["reason"].as_str().unwrap();
    assert!(reason.contains("crashed 3 times within 30 s"), "{reason}");
    assert_eq!(
        world.read("private/crasher/data/marker"),
        "before the upgrade"
    );
    host.tell("crasher", json!({"type": "ping"}));
    host.wait_type("crasher", "pong");
    assert_eq!(
        world.json("sausage.json")["actors"]["crasher"]["version"],
        1
    );
    assert!(
        !world.path("actor/crasher/source/crash_after_ms").exists(),
        "v1's source is back"
    );
}

#[test]
fn rollback_restores_the_older_snapshot_and_roll_forward_the_newer() {
    let world = TestWorld::new();
    world.install("notes", "notes");
    let mut host = world.run();
    host.tell("notes", json!({"type": "add", "text": "A"}));
    host.wait_type("notes", "added");
    assert_eq!(
        upgrade(&mut host, "notes", "notes", source("notes"))["type"],
        "upgraded"
    );
    host.tell("notes", json!({"type": "add", "text": "B"}));
    host.wait_type("notes", "added");

    let back = host.request(json!({"type": "rollback", "actor": "notes"}));
    // The restored files share their bytes with the snapshot (hard links): a snapshot costs the
    // same whatever the size of the data.
    use std::os::unix::fs::MetadataExt;
    let inode = |p: &str| std::fs::metadata(world.path(p)).unwrap().ino();
    assert_eq!(
        inode("private/notes/data/notes.jsonl"),
        inode("broker/versions/notes/1/snapshot/data/notes.jsonl")
    );
    assert_eq!(
        back,
        json!({"type": "rolled_back", "actor": "notes", "from": 2, "to": 1, "restored_state": true})
    );
    host.tell("notes", json!({"type": "list"}));
    assert_eq!(
        host.wait_type("notes", "notes")["notes"],
        json!([{"text": "A"}])
    );

    let forward = host.request(json!({"type": "rollback", "actor": "notes", "version": 2}));
    assert_eq!(forward["to"], 2);
    assert_eq!(forward["restored_state"], true);
    host.tell("notes", json!({"type": "list"}));
    assert_eq!(
        host.wait_type("notes", "notes")["notes"],
        json!([{"text": "A"}, {"text": "B"}])
    );
    assert_eq!(world.status("notes")["version"], 2);
}

#[test]
fn operations_on_one_actor_queue() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let mut host = world.run();
    host.tell(
        "broker",
        json!({"type": "upgrade", "actor": "echo", "wasm": wasm("echo"), "source": source("echo")}),
    );
    host.tell("broker", json!({"type": "rollback", "actor": "echo"}));
    let first = host.wait_for("a reply", |m| m.from == "broker" && m.reply);
    let second = host.wait_for("a reply", |m| m.from == "broker" && m.reply);
    assert_eq!(first.body["type"], "upgraded", "{:?}", first.body);
    assert_eq!(second.body["type"], "rolled_back", "{:?}", second.body);
    assert_eq!(second.body["from"], 2);
}

#[test]
fn remove_archives_every_folder_and_deletes_nothing() {
    let world = TestWorld::new();
    world.install("notes", "notes");
    world.install("ticker", "ticker");
    let mut host = world.run();
    host.tell("notes", json!({"type": "add", "text": "keep me"}));
    host.wait_type("notes", "added");
    host.request(json!({"type": "subscribe", "actor": "notes"}));
    host.request(json!({"type": "stop", "actor": "notes"}));
    host.tell("notes", json!({"type": "add", "text": "still queued"}));
    let removed = host.request(json!({"type": "remove", "actor": "notes"}));
    assert_eq!(
        removed,
        json!({"type": "removed", "actor": "notes", "archive": "archive/notes-1"})
    );
    let archive = "archive/notes-1";
    assert!(
        world
            .read(&format!("{archive}/private/data/notes.jsonl"))
            .contains("keep me")
    );
    assert!(
        world
            .path(&format!("{archive}/actor/status.json"))
            .is_file()
    );
    assert!(
        world
            .path(&format!("{archive}/versions/1/actor.wasm"))
            .is_file()
    );
    assert!(
        world
            .read(&format!("{archive}/mailbox.jsonl"))
            .contains("still queued")
    );
    for gone in ["actor/notes", "private/notes", "broker/versions/notes"] {
        assert!(!world.path(gone).exists(), "{gone}");
    }
    let registry = world.json("sausage.json");
    assert!(registry["actors"].get("notes").is_none());
    assert!(registry["subscriptions"].get("notes").is_none());
    host.send("@notes hello");
    assert_eq!(host.wait_type("broker", "undeliverable")["to"], "notes");

    // The archived message left the mailbox journal too: after a hard kill, a new actor with
    // the same id does not get it.
    host.kill();
    let mut host = world.run();
    let spawned = host.request(json!({
        "type": "spawn", "actor": "notes", "wasm": wasm("notes"), "source": source("notes"),
    }));
    assert_eq!(spawned["type"], "spawned", "{spawned}");
    host.tell("notes", json!({"type": "count"}));
    assert_eq!(host.wait_type("notes", "count")["count"], 0);
    assert!(
        !host.stderr().contains("accepted before the last run ended"),
        "{}",
        host.stderr()
    );
}

#[test]
fn a_remove_that_cannot_archive_changes_nothing_and_keeps_the_queued_messages() {
    let world = TestWorld::new();
    world.install("notes", "notes");
    // `archive` is a file, so no archive folder can be made there.
    let _ = std::fs::remove_dir_all(world.path("archive"));
    std::fs::write(world.path("archive"), "in the way").unwrap();
    let mut host = world.run();
    host.tell("notes", json!({"type": "add", "text": "keep me"}));
    host.wait_type("notes", "added");
    host.request(json!({"type": "stop", "actor": "notes"}));
    host.tell("notes", json!({"type": "add", "text": "still queued"}));
    let refused = host.request(json!({"type": "remove", "actor": "notes"}));
    assert_eq!(refused["type"], "error", "{refused}");
    assert!(
        refused["reason"]
            .as_str()
            .unwrap()
            .ends_with("nothing was removed"),
        "{refused}"
    );
    for kept in ["actor/notes", "private/notes", "broker/versions/notes"] {
        assert!(world.path(kept).is_dir(), "{kept}");
    }
    assert!(world.json("sausage.json")["actors"].get("notes").is_some());
    // The queued message is still there for the actor when it runs again.
    host.request(json!({"type": "start", "actor": "notes"}));
    host.wait_type("notes", "added");

    // With the way clear, the same remove is whole.
    std::fs::remove_file(world.path("archive")).unwrap();
    let removed = host.request(json!({"type": "remove", "actor": "notes"}));
    assert_eq!(removed["type"], "removed", "{removed}");
    assert!(!world.path("actor/notes").exists());
}

#[test]
fn a_running_actor_whose_remove_fails_runs_on() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let _ = std::fs::remove_dir_all(world.path("archive"));
    std::fs::write(world.path("archive"), "in the way").unwrap();
    let mut host = world.run();
    let refused = host.request(json!({"type": "remove", "actor": "echo"}));
    assert_eq!(refused["type"], "error", "{refused}");
    host.send("@echo still here?");
    let answer = host.wait_for("echo's answer", |m| m.from == "echo");
    assert_eq!(answer.body["text"], "still here?");
}
