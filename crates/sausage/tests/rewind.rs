//! Rewind (DESIGN §21) through a real world and the real agent on the fake model: a turn that
//! upgrades two actors and writes a file, the actors' own traffic after it, then `/rewind`.

mod support;

use sausage_fake_llm::{FakeLlm, openai};
use serde_json::{Value, json};
use support::agent::*;
use support::*;

/// A source folder in the agent's `/data` with one transcript, so its upgrade skips the smoke
/// test: `(name, transcript)`.
fn source_in_agent(world: &TestWorld, name: &str, transcript: &str) {
    let dir = world.path(&format!("private/agent/data/{name}/tests"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("t.jsonl"), transcript).unwrap();
}

fn records(world: &TestWorld) -> Vec<Value> {
    std::fs::read_to_string(world.path("private/s/data/records.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn notes(world: &TestWorld) -> Vec<Value> {
    std::fs::read_to_string(world.path("private/n/data/notes.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn versions(world: &TestWorld) -> (Value, Value) {
    let registry = world.json("sausage.json");
    (
        registry["actors"]["s"]["version"].clone(),
        registry["actors"]["n"]["version"].clone(),
    )
}

#[test]
fn a_rewind_puts_back_both_versions_and_the_files_and_cuts_the_conversation() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    world.install("s", "shadowy");
    world.install("n", "notes");
    for (name, actor) in [("s.wasm", "shadowy"), ("n.wasm", "notes")] {
        std::fs::copy(
            wasm(actor),
            world.path(&format!("private/agent/data/{name}")),
        )
        .unwrap();
    }
    source_in_agent(
        &world,
        "s-src",
        "{\"send\": {\"type\": \"double\", \"n\": 1}}\n{\"expect\": {\"result\": 2}}\n",
    );
    source_in_agent(
        &world,
        "n-src",
        "{\"send\": {\"type\": \"count\"}}\n{\"expect\": {\"type\": \"count\"}}\n",
    );
    std::fs::write(world.path("private/agent/data/plan.txt"), "old plan").unwrap();
    let upgrade = |actor: &str| {
        openai::function_call(
            "send_message",
            json!({"to": "broker", "wait_seconds": 60, "body": {
                "type": "upgrade", "actor": actor, "wasm": format!("/data/{actor}.wasm"),
                "source": format!("/data/{actor}-src"),
            }}),
        )
    };
    fake.push_openai(openai::reply(vec![
        openai::function_call(
            "write_file",
            json!({"path": "/data/plan.txt", "content": "new plan"}),
        ),
        upgrade("s"),
        upgrade("n"),
    ]));
    fake.push_openai(openai::text_reply("Upgraded both."));

    let mut host = world.run();
    host.tell("s", json!({"type": "record", "text": "before"}));
    host.wait_type("s", "recorded");
    host.tell("n", json!({"type": "add", "text": "before"}));
    host.wait_type("n", "added");
    assert_eq!(ask(&mut host, "upgrade s and n please"), "Upgraded both.");
    let outputs = tool_outputs(&fake, 1);
    assert!(outputs[1].contains("\"upgraded\""), "{outputs:?}");
    assert!(outputs[2].contains("\"upgraded\""), "{outputs:?}");
    assert_eq!(versions(&world), (json!(2), json!(2)));
    assert_eq!(world.read("private/agent/data/plan.txt"), "new plan");
    // The actors go on after the turn.
    host.tell("s", json!({"type": "record", "text": "after"}));
    host.wait_type("s", "recorded");
    host.tell("n", json!({"type": "add", "text": "after"}));
    host.wait_type("n", "added");
    assert_eq!(records(&world).len(), 2);

    host.send("/rewind");
    let rewound = host
        .wait_for_within(
            std::time::Duration::from_secs(120),
            "the rewind's answer",
            |m| m.from == "agent" && matches!(m.body["type"].as_str(), Some("rewound" | "error")),
        )
        .body;
    assert_eq!(rewound["type"], "rewound", "{rewound}");
    assert_eq!(rewound["not_recalled"], json!([]), "{rewound}");
    let restored: Vec<&str> = rewound["actors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["actor"].as_str().unwrap())
        .collect();
    assert_eq!(restored, ["n", "s"], "the last change first: {rewound}");
    assert_eq!(versions(&world), (json!(1), json!(1)));
    assert_eq!(records(&world), [json!({"text": "before"})]);
    assert_eq!(notes(&world), [json!({"text": "before"})]);
    assert_eq!(world.read("private/agent/data/plan.txt"), "old plan");
    let conversations: Vec<_> = world
        .visible_files_containing("upgrade s and n please")
        .into_iter()
        .filter(|path| path.ends_with("history.json"))
        .collect();
    assert!(
        conversations.is_empty(),
        "the conversation is cut before the turn: {conversations:?}"
    );
    // Both run their version 1 again.
    host.tell("s", json!({"type": "count"}));
    assert_eq!(host.wait_type("s", "count")["count"], 1);
    // A turn rewound once has nothing left to rewind.
    host.send("/rewind");
    let again = host
        .wait_for("the second rewind's answer", |m| {
            m.from == "agent" && m.body["request"] == "rewind"
        })
        .body;
    assert!(
        again["reason"]
            .as_str()
            .unwrap()
            .contains("nothing to rewind"),
        "{again}"
    );
    host.quit();
}

#[test]
fn the_brokers_checkpoint_and_restore_put_back_a_version_and_files_and_remove_what_came_after() {
    let world = TestWorld::new();
    world.install("s", "shadowy");
    let mut host = world.run();
    host.tell("s", json!({"type": "record", "text": "kept"}));
    host.wait_type("s", "recorded");
    for actor in ["s", "later"] {
        let kept = host.request(json!({"type": "checkpoint", "turn": "web/t.1", "actor": actor}));
        assert_eq!(kept["type"], "checkpointed", "{kept}");
        assert_eq!(kept["existed"], actor == "s", "{kept}");
    }
    // A second checkpoint of the same turn keeps the first.
    let again = host.request(json!({"type": "checkpoint", "turn": "web/t.1", "actor": "s"}));
    assert_eq!(again["version"], 1, "{again}");
    host.tell("s", json!({"type": "record", "text": "lost"}));
    host.wait_type("s", "recorded");
    let upgraded = host.request(json!({
        "type": "upgrade", "actor": "s", "wasm": wasm("shadowy"), "shadow": "off",
    }));
    assert_eq!(upgraded["type"], "upgraded", "{upgraded}");
    let spawned = host.request(json!({"type": "spawn", "actor": "later", "wasm": wasm("echo")}));
    assert_eq!(spawned["type"], "spawned", "{spawned}");

    let restored = host.request(json!({"type": "restore", "turn": "web/t.1", "actor": "s"}));
    assert_eq!(restored["type"], "restored", "{restored}");
    assert_eq!(
        (&restored["version"], &restored["from"]),
        (&json!(1), &json!(2))
    );
    assert_eq!(records(&world), [json!({"text": "kept"})]);
    assert_eq!(world.json("sausage.json")["actors"]["s"]["version"], 1);
    host.tell("s", json!({"type": "count"}));
    assert_eq!(host.wait_type("s", "count")["count"], 1);
    let removed = host.request(json!({"type": "restore", "turn": "web/t.1", "actor": "later"}));
    assert_eq!(removed["removed"], true, "{removed}");
    assert!(world.json("sausage.json")["actors"].get("later").is_none());

    // Wrong requests say what to do and change nothing.
    for (request, says) in [
        (json!({"type": "checkpoint", "actor": "s"}), "`turn`"),
        (
            json!({"type": "checkpoint", "turn": "", "actor": "s"}),
            "`turn` must be the id",
        ),
        (
            json!({"type": "checkpoint", "turn": "x".repeat(201), "actor": "s"}),
            "1 to 200",
        ),
        (
            json!({"type": "checkpoint", "turn": 7, "actor": "s"}),
            "`turn`",
        ),
        (
            json!({"type": "checkpoint", "turn": "t", "actor": "cargo"}),
            "native",
        ),
        (json!({"type": "checkpoint", "turn": "t"}), "`actor`"),
        (
            json!({"type": "restore", "turn": "never", "actor": "s"}),
            "no checkpoint of `s` for turn `never`",
        ),
        (
            json!({"type": "restore", "turn": "web/t.1", "actor": "nobody"}),
            "no checkpoint",
        ),
    ] {
        let reply = host.request(request.clone());
        assert_eq!(reply["type"], "error", "{request}: {reply}");
        let reason = reply["reason"].as_str().unwrap();
        assert!(reason.contains(says), "{request}: {reason}");
    }
    assert_eq!(world.json("sausage.json")["actors"]["s"]["version"], 1);
    host.quit();
}
