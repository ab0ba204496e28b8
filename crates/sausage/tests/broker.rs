//! The broker through the console: spawn, routing, publish, requests and their errors.

mod support;

use serde_json::json;
use support::*;

#[test]
fn spawn_installs_version_one_and_the_actor_answers() {
    let world = TestWorld::new();
    let mut host = world.run();
    let reply = host.request(json!({
        "type": "spawn", "actor": "echo",
        "wasm": wasm("echo"), "source": source("echo"), "built_by": "hand",
    }));
    assert_eq!(reply["type"], "spawned", "{reply}");
    assert_eq!(reply["version"], 1);
    assert_eq!(reply["tests"]["passed"], true);

    host.tell("echo", json!({"type": "env"}));
    let env = host.wait_type("echo", "env");
    assert_eq!(
        env,
        json!({"type": "env", "actor": "echo", "version": "1", "candidate": null})
    );

    let meta = world.json("broker/versions/echo/1/meta.json");
    assert_eq!(meta["version"], 1);
    assert_eq!(meta["built_by"], "hand");
    assert_eq!(meta["requested_by"], "console");
    assert_eq!(meta["wasm"], wasm("echo").to_str().unwrap());
    assert!(world.path("broker/versions/echo/1/actor.wasm").is_file());
    assert!(
        world
            .path("broker/versions/echo/1/source/tests/echo.jsonl")
            .is_file()
    );
    assert!(world.path("actor/echo/source/Cargo.toml").is_file());
    assert!(world.path("actor/echo/public").is_dir());
    assert!(world.path("private/echo/data").is_dir());
    let registry = world.json("sausage.json");
    assert_eq!(
        registry["actors"]["echo"],
        json!({"version": 1, "next_version": 2, "running": true, "owner": "owner"}),
        "the console speaks for the world's owner, who owns what it spawns"
    );
    assert_eq!(world.status("echo")["state"], "running");
    assert!(
        std::fs::read_dir(world.path("broker/scratch"))
            .unwrap()
            .next()
            .is_none(),
        "the candidate's scratch folder is emptied"
    );
}

#[test]
fn spawn_rejects_wrong_requests_and_changes_nothing() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let mut host = world.run();
    let not_wasm = world.path("private/console/data/not.wasm");
    std::fs::write(&not_wasm, b"hello").unwrap();
    let core_module = world.path("private/console/data/core.wasm");
    std::fs::write(&core_module, b"\0asm\x01\0\0\0").unwrap();
    let echo = wasm("echo");
    let cases = [
        (
            json!({"type": "spawn", "wasm": echo}),
            "missing field `actor`",
        ),
        (
            json!({"type": "spawn", "actor": "Bad Id", "wasm": echo}),
            "character",
        ),
        (
            json!({"type": "spawn", "actor": "cargo", "wasm": echo}),
            "native",
        ),
        (
            json!({"type": "spawn", "actor": "echo", "wasm": echo}),
            "already exists",
        ),
        (
            json!({"type": "spawn", "actor": "x"}),
            "missing field `wasm`",
        ),
        (
            json!({"type": "spawn", "actor": "x", "wasm": 5}),
            "must be a string",
        ),
        (
            json!({"type": "spawn", "actor": "x", "wasm": "/data/../../x.wasm"}),
            "`..`",
        ),
        (
            json!({"type": "spawn", "actor": "x", "wasm": "/data/none.wasm"}),
            "cannot read",
        ),
        (
            json!({"type": "spawn", "actor": "x", "wasm": "/data/not.wasm"}),
            "not a WebAssembly file",
        ),
        (
            json!({"type": "spawn", "actor": "x", "wasm": "/data/core.wasm"}),
            "not a component",
        ),
        (
            json!({"type": "spawn", "actor": "x", "wasm": echo, "source": "/nowhere"}),
            "not a folder",
        ),
        (
            json!({"type": "spawn", "actor": "doomed", "wasm": wasm("crasher")}),
            "smoke test",
        ),
    ];
    for (request, expected) in cases {
        let reply = host.request(request.clone());
        assert_eq!(reply["type"], "error", "{request} → {reply}");
        assert_eq!(reply["request"], "spawn");
        let reason = reply["reason"].as_str().unwrap();
        assert!(reason.contains(expected), "{request} → {reason}");
    }
    let registry = world.json("sausage.json");
    assert_eq!(
        registry["actors"].as_object().unwrap().len(),
        1,
        "{registry}"
    );
    assert!(!world.path("broker/versions/x").exists());
    assert!(!world.path("broker/versions/doomed").exists());
    let doomed = host.request(json!({"type": "spawn", "actor": "doomed", "wasm": wasm("crasher")}));
    let reason = doomed["reason"].as_str().unwrap();
    assert!(
        reason.contains("doomed") && reason.contains("panic"),
        "{reason}"
    );
}

#[test]
fn unknown_and_malformed_requests_name_what_is_known() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let mut host = world.run();
    let reply = host.request(json!({"type": "frobnicate"}));
    assert_eq!(reply["request"], "frobnicate");
    let reason = reply["reason"].as_str().unwrap();
    for known in ["spawn", "stop", "start", "subscribe", "unsubscribe", "list"] {
        assert!(reason.contains(known), "{reason}");
    }
    let reply = host.request(json!({"kind": "list"}));
    assert!(
        reply["reason"].as_str().unwrap().contains("string `type`"),
        "{reply}"
    );
    for request in ["stop", "start"] {
        let reply = host.request(json!({"type": request}));
        assert!(
            reply["reason"]
                .as_str()
                .unwrap()
                .contains("missing field `actor`")
        );
        let reply = host.request(json!({"type": request, "actor": "ghost"}));
        let reason = reply["reason"].as_str().unwrap();
        assert!(
            reason.contains("no actor `ghost`") && reason.contains("echo"),
            "{reason}"
        );
        let reply = host.request(json!({"type": request, "actor": "console"}));
        assert!(
            reply["reason"].as_str().unwrap().contains("native"),
            "{reply}"
        );
        let reply = host.request(json!({"type": request, "actor": "../x"}));
        assert!(
            reply["reason"].as_str().unwrap().contains("character"),
            "{reply}"
        );
    }
    let reply = host.request(json!({"type": "subscribe", "actor": "ghost"}));
    assert!(
        reply["reason"]
            .as_str()
            .unwrap()
            .contains("no actor `ghost`"),
        "{reply}"
    );
}

#[test]
fn ids_from_and_undeliverable() {
    let world = TestWorld::new();
    world.install("crasher", "crasher");
    let mut host = world.run();
    // An actor-chosen id is published as `<sender>/<id>`; `from` is set by the broker.
    host.tell(
        "crasher",
        json!({"type": "say", "line": r#"{"to":"console","id":"x1","from":"faker","body":{"type":"hello"}}"#}),
    );
    let hello = host.wait_for("hello", |m| m.body["type"] == "hello");
    assert_eq!(hello.from, "crasher", "an actor cannot fake `from`");
    // To nobody: the sender hears `undeliverable` with what is known.
    host.tell(
        "crasher",
        json!({"type": "say", "line": r#"{"to":"ghost","id":"q","body":{"type":"x"}}"#}),
    );
    host.tell("crasher", json!({"type": "ping"}));
    host.wait_type("crasher", "pong");
    host.send("@ghost hello");
    let notice = host.wait_type("broker", "undeliverable");
    assert_eq!(notice["to"], "ghost");
    let reason = notice["reason"].as_str().unwrap();
    assert!(
        reason.contains("no actor `ghost`") && reason.contains("crasher"),
        "{reason}"
    );
}

#[test]
fn bad_stdout_lines_are_noted_in_the_log_and_not_routed() {
    let world = TestWorld::new();
    world.install("crasher", "crasher");
    let mut host = world.run();
    for line in [
        "not json",
        r#"{"to":"console"}"#,
        r#"{"to":"console","body":"text"}"#,
        "[1,2]",
    ] {
        host.tell("crasher", json!({"type": "say", "line": line}));
    }
    // A line over 1 MiB is skipped without taking the host's memory; the next line routes.
    host.tell(
        "crasher",
        json!({"type": "say_big", "bytes": 2 * 1024 * 1024}),
    );
    host.wait_type("crasher", "pong");
    eventually("the notes in the log", || {
        let log = world.log("crasher");
        log.contains("not JSON") && log.contains("longer than 1048576 bytes")
    });
    let log = world.log("crasher");
    assert!(log.contains("stdout line not routed"), "{log}");
    assert!(log.contains("not json"), "the note quotes the line: {log}");
    assert_eq!(log.matches("stdout line not routed").count(), 4, "{log}");
    assert!(host.take_all().is_empty(), "nothing bad was routed");
}

#[test]
fn publish_reaches_subscribers_and_subscriptions_survive_a_restart() {
    let world = TestWorld::new();
    world.install("ticker", "ticker");
    let mut host = world.run();
    assert_eq!(
        host.request(json!({"type": "subscribe", "actor": "ticker"}))["type"],
        "subscribed"
    );
    host.tell(
        "ticker",
        json!({"type": "start", "count": 3, "interval_ms": 0}),
    );
    for n in 1..=3 {
        let tick = host.wait_type("ticker", "tick");
        assert_eq!(tick["n"], n);
    }
    host.wait_type("ticker", "done");
    assert_eq!(
        world.json("sausage.json")["subscriptions"]["ticker"],
        json!(["console"])
    );
    assert!(host.quit().success());

    let mut host = world.run();
    host.tell(
        "ticker",
        json!({"type": "start", "count": 1, "interval_ms": 0}),
    );
    assert_eq!(host.wait_type("ticker", "tick")["n"], 1);
    let list = host.request(json!({"type": "list"}));
    assert_eq!(list["subscriptions"]["ticker"], json!(["console"]));
    assert_eq!(
        list["subscriptions"]["agent"],
        json!(["console"]),
        "a new world's subscription"
    );
    assert_eq!(
        host.request(json!({"type": "unsubscribe", "actor": "ticker"}))["type"],
        "unsubscribed"
    );
    host.tell(
        "ticker",
        json!({"type": "start", "count": 1, "interval_ms": 0}),
    );
    host.wait_type("ticker", "done");
    assert!(
        host.take_all().iter().all(|m| m.body["type"] != "tick"),
        "no tick after unsubscribe"
    );
}

#[test]
fn list_shows_every_actor_with_kind_version_and_state() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    world.install("notes", "notes");
    let mut host = world.run();
    assert_eq!(
        host.request(json!({"type": "stop", "actor": "notes"}))["type"],
        "stopped"
    );
    let list = host.request(json!({"type": "list"}));
    let actors = list["actors"].as_array().unwrap();
    let find = |id: &str| actors.iter().find(|a| a["id"] == id).unwrap().clone();
    assert_eq!(find("echo")["kind"], "wasm");
    assert_eq!(find("echo")["version"], 1);
    assert_eq!(find("echo")["state"], "running");
    assert_eq!(find("notes")["running"], false);
    assert_eq!(find("notes")["state"], "stopped");
    assert_eq!(find("broker")["kind"], "native");
    assert_eq!(find("console")["kind"], "native");
}

#[test]
fn a_request_whose_body_cannot_be_read_gets_an_error_and_the_broker_goes_on() {
    let world = TestWorld::new();
    world.install("crasher", "crasher");
    let mut host = world.run();
    host.tell(
        "crasher",
        json!({"type": "say", "line": r#"{"to":"broker","body":{"type":"list","n":1e999999}}"#}),
    );
    host.tell("crasher", json!({"type": "ping"}));
    host.wait_type("crasher", "pong");
    let list = host.request(json!({"type": "list"}));
    assert_eq!(list["type"], "actors", "the broker still answers: {list}");
    let reason = world.log("crasher");
    assert!(!reason.contains("panicked"), "{reason}");
}

/// Has `bot` (a `relay` actor) send `body` to the broker, and returns the broker's reply.
fn through_actor(host: &mut Host, bot: &str, body: serde_json::Value) -> serde_json::Value {
    host.tell(bot, json!({"type": "relay", "to": "broker", "body": body}));
    host.wait_for(&format!("{bot}'s relayed reply"), |m| {
        m.from == bot && m.body["type"] == "relayed"
    })
    .body["body"]
        .clone()
}

/// Per-person limits (DESIGN §11, §13, §18): a member's actors, their own and those their
/// actors spawn, count together, in number and in `memory_mb`; a spawn, fork or upgrade past
/// either is refused, naming the limit and the fix, and changes nothing; owners have none, and
/// a guest may be given no actor even by an owner.
#[test]
fn a_person_owns_actors_and_memory_up_to_their_tiers_limits() {
    use sausage_core::message::Tier;
    let world = TestWorld::new();
    world.install("ann-bot", "relay");
    world.set_owner("ann-bot", "ann");
    let people = sausage_core::people::People::new(&sausage_core::world::World::new(&world.root));
    people.add("ann", Tier::Member, None).unwrap();
    people.add("gus", Tier::Guest, None).unwrap();
    let mut registry = world.json("sausage.json");
    registry["limits"] = json!({"member": {"max_actors": 3, "max_memory_mb": 800}});
    std::fs::write(world.path("sausage.json"), registry.to_string()).unwrap();
    std::fs::copy(wasm("echo"), world.path("actor/ann-bot/public/echo.wasm")).unwrap();
    // A source whose actor.json asks for 300 MiB instead of the default 256.
    std::fs::create_dir_all(world.path("actor/ann-bot/public/big")).unwrap();
    std::fs::write(
        world.path("actor/ann-bot/public/big/actor.json"),
        r#"{"memory_mb": 300}"#,
    )
    .unwrap();
    let mut host = world.run();
    let spawn = |id: &str| json!({"type": "spawn", "actor": id, "wasm": "/public/echo.wasm"});
    let refused = |reply: &serde_json::Value, words: &[&str]| {
        assert_eq!(reply["type"], "error", "{reply}");
        let reason = reply["reason"].as_str().unwrap();
        for w in words {
            assert!(reason.contains(w), "`{reason}` should say `{w}`");
        }
    };

    // ann-bot (256 MiB) and a1 (256 MiB): two actors, 512 MiB.
    let a1 = through_actor(&mut host, "ann-bot", spawn("a1"));
    assert_eq!(a1["type"], "spawned", "{a1}");
    let before = world.read("sausage.json");
    // 300 MiB more would make 812 MiB.
    let mut big = spawn("a2");
    big["source"] = json!("/public/big");
    refused(
        &through_actor(&mut host, "ann-bot", big),
        &[
            "person ann (a member) has 512 MiB of memory in 2 actors",
            "300 MiB more would pass the 800 MiB",
            "max_memory_mb",
            r#""limits": {"member": {"max_memory_mb": N}}"#,
        ],
    );
    assert_eq!(
        world.read("sausage.json"),
        before,
        "a refusal changes nothing"
    );
    assert!(!world.path("broker/versions/a2").exists());

    // A third actor at 768 MiB; then raising a1 from 256 to 300 MiB would make 812.
    let a2 = through_actor(&mut host, "ann-bot", spawn("a2"));
    assert_eq!(a2["type"], "spawned", "{a2}");
    let before = world.read("sausage.json");
    let mut upgrade = spawn("a1");
    upgrade["type"] = json!("upgrade");
    upgrade["source"] = json!("/public/big");
    refused(
        &through_actor(&mut host, "ann-bot", upgrade),
        &["has 768 MiB of memory in 3 actors, and 44 MiB more would pass the 800 MiB"],
    );
    assert!(!world.path("broker/versions/a1/2").exists());

    // No fourth actor: not by a spawn, a fork or an owner's spawn for ann.
    let max_actors = [
        "person ann (a member) owns 3 actors and may own at most 3",
        "max_actors",
        r#""limits": {"member": {"max_actors": N}}"#,
    ];
    refused(
        &through_actor(&mut host, "ann-bot", spawn("a3")),
        &max_actors,
    );
    refused(
        &through_actor(
            &mut host,
            "ann-bot",
            json!({"type": "fork", "actor": "a1", "before": "m-1", "as": "a3"}),
        ),
        &max_actors,
    );
    let mut for_ann = spawn("a3");
    for_ann["wasm"] = json!("/actor/ann-bot/public/echo.wasm");
    for_ann["owner"] = json!("ann");
    refused(&host.request(for_ann.clone()), &max_actors);
    // A guest may be given none, even by an owner.
    for_ann["owner"] = json!("gus");
    refused(
        &host.request(for_ann.clone()),
        &["person gus (a guest) owns 0 actors and may own at most 0"],
    );
    assert_eq!(
        world.read("sausage.json"),
        before,
        "refusals change nothing"
    );
    assert!(!world.path("broker/versions/a3").exists());

    // The owner has no limit.
    for_ann.as_object_mut().unwrap().remove("owner");
    assert_eq!(host.request(for_ann)["type"], "spawned");
}
