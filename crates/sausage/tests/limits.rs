//! Resource limits of an actor (DESIGN §11) through real worlds, and what `status.json` says
//! while an instance is being created (DESIGN §7).

mod support;

use std::time::Instant;

use serde_json::json;
use support::*;

/// Installs `crasher` as `id` with this `actor.json`.
fn crasher_with_manifest(world: &TestWorld, id: &str, manifest: &str) {
    world.install(id, "crasher");
    std::fs::write(
        world.path(&format!("actor/{id}/source/actor.json")),
        manifest,
    )
    .unwrap();
}

#[test]
fn an_instance_growing_past_its_memory_limit_traps_with_a_note_and_comes_back() {
    let world = TestWorld::new();
    crasher_with_manifest(&world, "hungry", r#"{"memory_mb": 32}"#);
    world.install("echo", "echo");
    let mut host = world.run();
    host.tell("hungry", json!({"type": "ping"}));
    host.wait_type("hungry", "pong");

    host.tell("hungry", json!({"type": "grow", "mb": 64}));
    eventually("the memory note", || {
        world.log("hungry").contains(
            "[sausage] memory: the instance asked for more than its 32 MiB; raise \"memory_mb\" \
             in actor.json (at most 4096)",
        )
    });

    // The host and the other actors live on.
    let list = host.request(json!({"type": "list"}));
    assert_eq!(list["type"], "actors", "{list}");
    host.tell("echo", json!({"type": "text", "text": "still here"}));
    assert_eq!(host.wait_type("echo", "text")["text"], "still here");

    // The actor comes back after its restart; what it asked for within its limit still works.
    host.tell("hungry", json!({"type": "ping"}));
    host.wait_type("hungry", "pong");
    host.tell("hungry", json!({"type": "grow", "mb": 8}));
    assert_eq!(host.wait_type("hungry", "grown")["mb"], 8);
    let status = world.status("hungry");
    assert_eq!(status["restarts"], 1, "{status}");
    assert_eq!(status["state"], "running", "{status}");
    let last_exit = status["last_exit"].as_str().unwrap();
    assert!(
        last_exit.contains("trapped") && last_exit.contains("32 MiB"),
        "{last_exit}"
    );
}

#[test]
fn a_raised_memory_limit_lets_the_same_allocation_succeed() {
    let world = TestWorld::new();
    crasher_with_manifest(&world, "hungry", r#"{"memory_mb": 128}"#);
    let mut host = world.run();
    host.tell("hungry", json!({"type": "grow", "mb": 64}));
    assert_eq!(host.wait_type("hungry", "grown")["mb"], 64);
    assert_eq!(world.status("hungry")["restarts"], 0);
    assert!(
        !world.log("hungry").contains("memory"),
        "{}",
        world.log("hungry")
    );
}

#[test]
fn a_bad_memory_limit_is_a_note_and_the_default_applies() {
    let world = TestWorld::new();
    crasher_with_manifest(&world, "hungry", r#"{"memory_mb": 5000}"#);
    let mut host = world.run();
    // 64 MiB is past nothing but the bad value's: the default of 256 MiB applies.
    host.tell("hungry", json!({"type": "grow", "mb": 64}));
    assert_eq!(host.wait_type("hungry", "grown")["mb"], 64);
    let log = world.log("hungry");
    assert!(
        log.contains(
            "[sausage] actor.json: \"memory_mb\" is 5000, not a number of MiB from 1 to 4096; \
             running with the default of 256 MiB"
        ),
        "{log}"
    );
}

/// An instance whose initial memory is already past its limit (a Rust program starts with
/// more than 1 MiB) is never created: its code never runs, so `status.json` never says
/// `running`, only its failure. The status file is read as fast as it can be, so a `running`
/// written even for a moment would be seen.
#[test]
fn an_instance_that_cannot_be_created_never_reports_running() {
    let world = TestWorld::new();
    crasher_with_manifest(&world, "tiny", r#"{"memory_mb": 1}"#);
    let host = world.run();
    let path = world.path("actor/tiny/status.json");
    let mut states = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    loop {
        assert!(
            Instant::now() < deadline,
            "timed out; states seen: {states:?}"
        );
        // Written atomically, but it may not exist before the host's first write.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let status: serde_json::Value = serde_json::from_str(&text).unwrap();
        let state = status["state"].as_str().unwrap().to_string();
        assert_ne!(state, "running", "states seen before: {states:?}");
        if states.last() != Some(&state) {
            states.push(state);
        }
        if status["restarts"].as_u64().unwrap() >= 2 {
            break;
        }
    }
    assert!(states.contains(&"restarting".to_string()), "{states:?}");
    let log = world.log("tiny");
    assert!(
        log.contains("memory: the instance asked for more than its 1 MiB"),
        "{log}"
    );
    drop(host);
}

/// A candidate runs its tests with the memory its own manifest asks for: a version that needs
/// more than the default passes them when its `actor.json` says so, and is refused when not.
#[test]
fn a_candidate_is_tested_with_its_own_memory_limit() {
    let world = TestWorld::new();
    let mut host = world.run();
    let source = |name: &str, manifest: Option<&str>| {
        let dir = world.path(&format!("private/console/data/{name}"));
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::write(
            dir.join("tests/grow.jsonl"),
            "{\"send\": {\"type\": \"grow\", \"mb\": 300}}\n{\"expect\": {\"type\": \"grown\"}}\n",
        )
        .unwrap();
        if let Some(manifest) = manifest {
            std::fs::write(dir.join("actor.json"), manifest).unwrap();
        }
        dir.display().to_string()
    };
    let wasm = wasm("crasher").display().to_string();
    let spawn = |actor: &str, source: String| json!({"type": "spawn", "actor": actor, "wasm": wasm, "source": source});
    let big = source("big", Some(r#"{"memory_mb": 512}"#));
    let spawned = host.request(spawn("big", big));
    assert_eq!(spawned["type"], "spawned", "{spawned}");
    let small = source("small", None);
    let refused = host.request(spawn("small", small));
    assert_eq!(refused["type"], "error", "{refused}");
    // The reason says the candidate died, and of what, not that it stayed silent.
    let reason = refused["reason"].as_str().unwrap();
    assert!(reason.contains("256 MiB"), "{reason}");
}
