//! Authority (DESIGN §18), tried as an attacker would: each route into a world (the terminal
//! console, the web page, an actor a member owns, an actor a guest owns, a schedule, the agent's
//! tools reached through an actor, MCP) against the actions its principal must not take (name a host
//! path, read the credentials, change the agent or another's actor, change a tier), each refused
//! with a reason and nothing changed on disk, beside what each may do. One host serves a table.
//!
//! The routes with a harness of their own are tried where that harness lives:
//!
//! | route | action | where |
//! | --- | --- | --- |
//! | terminal, web, actor of a member or a guest, schedule | host path, credentials, agent, another's actor (upgrade, fork, window, checkpoint, restore), tier | here |
//! | web, agent | rewinding another's turn, or a turn that changed another's actor | `agent/src/turn/rewind_tests.rs` |
//! | actor of a guest or a member through the agent | write files, send, stop another's actor | here |
//! | web | garbage logins in a loop beside round trips (429, nothing written), another's question (400), another's events, a link that would replace another's session (asked first), a demotion by the command line (the stream ends) | `tests/web.rs`, `tests/browser.rs` |
//! | web, agent's tools | another's conversation or memory, the agent's state | `tests/people.rs` |
//! | agent's tools | paths of another's files in a spawn, a guest's sends, the world's day cap, answers from another | `agent/src/turn/authority_tests.rs` |
//! | Matrix | a room by a prefix of its id, speaking to become a member, answering from another room | `matrix/src/tests.rs`, `tests/matrix.rs` |
//! | a build script | the world's files, credentials, the home folder, another person's artefacts | `tests/build_sandbox.rs` |
//! | MCP (HTTP, stdio) | a guest's deploy or send, a member's rollback of another's actor, no token, a wrong or revoked token | `tests/mcp.rs` |

mod support;

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::{Value, json};
use support::http::EventStream;
use support::mcp::run_script;
use support::web::{Client, EVENT_PATIENCE, WebHost};
use support::*;

/// Runs `sausage people ARGS --world WORLD` and returns its stdout.
fn people(world: &TestWorld, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_sausage"))
        .arg("people")
        .args(args)
        .arg("--world")
        .arg(&world.root)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// What a refusal must leave alone: the registry, the people, the credentials and every stored
/// version, byte for byte.
fn fingerprint(world: &TestWorld) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for rel in [
        "sausage.json",
        "broker/people.json",
        "broker/credentials/agent.json",
    ] {
        files.insert(
            rel.to_string(),
            std::fs::read(world.path(rel)).unwrap_or_default(),
        );
    }
    for entry in std::fs::read_dir(world.path("broker/versions")).unwrap() {
        let id = entry.unwrap().file_name().to_string_lossy().into_owned();
        let versions: Vec<String> = std::fs::read_dir(world.path(&format!("broker/versions/{id}")))
            .unwrap()
            .map(|v| v.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.insert(format!("versions of {id}"), versions.join(",").into_bytes());
    }
    files
}

/// Has `bot` (a `relay` actor) send `body` to `to`, and returns the reply it relays.
fn through_actor(host: &mut Host, bot: &str, to: &str, body: Value) -> Value {
    host.tell(bot, json!({"type": "relay", "to": to, "body": body}));
    host.wait_for(&format!("{bot}'s relayed reply from {to}"), |m| {
        m.from == bot && m.body["type"] == "relayed"
    })
    .body["body"]
        .clone()
}

/// Sends `body` to `to` from `client`'s page (`/api/send`) and returns the reply's body.
fn through_web(client: &Client, events: &mut EventStream, to: &str, body: Value) -> Value {
    let sent = client.post("/api/send", &json!({"to": to, "body": body}));
    assert_eq!(sent.status, 200, "{}", sent.text());
    let id = sent.json()["id"].as_str().unwrap().to_string();
    let reply = events.wait_for("message", EVENT_PATIENCE, |data| data["reply_to"] == id);
    serde_json::from_str::<Value>(&reply.data).unwrap()["body"].clone()
}

/// Asserts that `reply` is a refusal whose reason says `why`.
fn refused(route: &str, reply: &Value, why: &str) {
    assert_eq!(reply["type"], "error", "{route}: {reply}");
    let reason = reply["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(why),
        "{route}: the reason `{reason}` should say `{why}`"
    );
}

#[test]
fn no_route_gets_a_principal_past_its_tier() {
    let world = TestWorld::new();
    // The agent stands in as echo: what matters is that it is the agent's id.
    world.install("agent", "echo");
    world.install("echo", "echo");
    world.install("ann-bot", "relay");
    world.install("gus-bot", "relay");
    std::fs::create_dir_all(world.path("broker/credentials")).unwrap();
    std::fs::write(
        world.path("broker/credentials/agent.json"),
        json!({"base_url": "http://127.0.0.1:9", "header": "authorization", "value": "Bearer sk-secret"})
            .to_string(),
    )
    .unwrap();
    world.set_owner("ann-bot", "ann");
    world.set_owner("gus-bot", "gus");
    // A program ann's bot may name in its own namespace.
    std::fs::copy(wasm("echo"), world.path("actor/ann-bot/public/echo.wasm")).unwrap();

    let web = WebHost::start(&world);
    let ann = web.log_in_with(&people(&world, &["add", "ann", "--tier", "member"]));
    let _gus = web.log_in_with(&people(&world, &["add", "gus", "--tier", "guest"]));
    let ann_token = people(&world, &["token", "ann"]).trim().to_string();
    let gus_token = people(&world, &["token", "gus"]).trim().to_string();
    let mcp_url = format!("http://{}/mcp", web.addr);
    let mut host = web.host;
    let mut ann_events = ann.events(None);
    let before = fingerprint(&world);
    let credentials = world.path("broker/credentials").display().to_string();
    let echo_wasm = wasm("echo").display().to_string();

    // An actor acts for its owner, and says so when asked.
    let ann_bot = through_actor(
        &mut host,
        "ann-bot",
        "broker",
        json!({"type": "principal", "actor": "ann-bot"}),
    );
    assert_eq!(
        (&ann_bot["person"], &ann_bot["tier"]),
        (&json!("ann"), &json!("member")),
        "{ann_bot}"
    );
    let gus_bot = through_actor(
        &mut host,
        "gus-bot",
        "broker",
        json!({"type": "principal", "actor": "gus-bot"}),
    );
    assert_eq!(
        (&gus_bot["person"], &gus_bot["tier"]),
        (&json!("gus"), &json!("guest")),
        "{gus_bot}"
    );

    // Route by route, what each principal must not do.
    let upgrade_agent = json!({"type": "upgrade", "actor": "agent", "wasm": "/public/echo.wasm"});
    let cases = [
        (
            "a member's actor upgrades the agent",
            "ann-bot",
            "broker",
            upgrade_agent.clone(),
            "only owners may `upgrade` `agent`",
        ),
        (
            "a member's actor stops the agent",
            "ann-bot",
            "broker",
            json!({"type": "stop", "actor": "agent"}),
            "only owners may `stop` `agent`",
        ),
        (
            "a member's actor re-spawns matrix",
            "ann-bot",
            "broker",
            json!({"type": "spawn", "actor": "matrix", "wasm": "/public/echo.wasm"}),
            "only owners may `spawn` `matrix`",
        ),
        (
            "a member's actor stops the owner's actor",
            "ann-bot",
            "broker",
            json!({"type": "stop", "actor": "echo"}),
            "belongs to owner",
        ),
        (
            "a member's actor reads the credentials",
            "ann-bot",
            "broker",
            json!({"type": "spawn", "actor": "leak", "wasm": "/public/echo.wasm", "source": credentials}),
            "outside your namespace",
        ),
        (
            "a member's actor names a host program",
            "ann-bot",
            "broker",
            json!({"type": "spawn", "actor": "leak", "wasm": echo_wasm}),
            "outside your namespace",
        ),
        (
            "a member's actor names an owner for its actor",
            "ann-bot",
            "broker",
            json!({"type": "spawn", "actor": "leak", "wasm": "/public/echo.wasm", "owner": "owner"}),
            "only for themselves",
        ),
        (
            "a member's actor forks the owner's actor (its files of then)",
            "ann-bot",
            "broker",
            json!({"type": "fork", "actor": "echo", "before": "m-1", "as": "leak"}),
            "belongs to owner",
        ),
        (
            "a member's actor reads the window of the owner's actor",
            "ann-bot",
            "broker",
            json!({"type": "window", "actor": "echo"}),
            "belongs to owner",
        ),
        (
            "a member's actor restores the owner's actor to a checkpoint",
            "ann-bot",
            "broker",
            json!({"type": "restore", "turn": "m-1", "actor": "echo"}),
            "belongs to owner",
        ),
        (
            "a member's actor keeps a checkpoint of the agent",
            "ann-bot",
            "broker",
            json!({"type": "checkpoint", "turn": "m-1", "actor": "agent"}),
            "only owners may `checkpoint` `agent`",
        ),
        (
            "a guest's actor forks its own actor",
            "gus-bot",
            "broker",
            json!({"type": "fork", "actor": "gus-bot", "before": "m-1", "as": "leak"}),
            "gus is a guest",
        ),
        (
            "a guest's actor spawns",
            "gus-bot",
            "broker",
            json!({"type": "spawn", "actor": "leak", "wasm": "/public/echo.wasm"}),
            "gus is a guest",
        ),
        (
            "a guest's actor upgrades the agent",
            "gus-bot",
            "broker",
            upgrade_agent.clone(),
            "gus is a guest",
        ),
        (
            "a guest's actor builds",
            "gus-bot",
            "cargo",
            json!({"type": "build", "source": "/data"}),
            "guests cannot build",
        ),
        (
            "a member's actor builds a host folder",
            "ann-bot",
            "cargo",
            json!({"type": "build", "source": credentials}),
            "outside your namespace",
        ),
        (
            "a guest's actor schedules",
            "gus-bot",
            "scheduler",
            json!({"type": "schedule", "every": 60, "to": "echo", "body": {"type": "ping"}}),
            "guests cannot schedule",
        ),
    ];
    for (route, bot, to, body, why) in cases {
        refused(route, &through_actor(&mut host, bot, to, body), why);
    }
    let web_cases = [
        (
            "the web names the credentials",
            json!({"type": "spawn", "actor": "leak", "wasm": "/actor/ann-bot/public/echo.wasm", "source": credentials}),
            "only the terminal console",
        ),
        (
            "the web names a host program",
            json!({"type": "spawn", "actor": "leak", "wasm": echo_wasm}),
            "only the terminal console",
        ),
        (
            "the web names web's own data",
            json!({"type": "spawn", "actor": "leak", "wasm": "/data/x.wasm"}),
            "only the terminal console",
        ),
        (
            "a member upgrades the agent from the web",
            upgrade_agent.clone(),
            "only owners may `upgrade` `agent`",
        ),
        (
            "a member forks the agent from the web (every conversation in its window)",
            json!({"type": "fork", "actor": "agent", "before": "m-1", "as": "leak"}),
            "only owners may `fork` `agent`",
        ),
        (
            "a member reads the agent's window from the web",
            json!({"type": "window", "actor": "agent"}),
            "only owners may `window` `agent`",
        ),
        (
            "a member stops the owner's actor from the web",
            json!({"type": "stop", "actor": "echo"}),
            "belongs to owner",
        ),
    ];
    for (route, body, why) in web_cases {
        refused(
            route,
            &through_web(&ann, &mut ann_events, "broker", body),
            why,
        );
    }
    let build = json!({"type": "build", "source": credentials});
    let built = through_web(&ann, &mut ann_events, "cargo", build);
    refused(
        "the web builds a host folder",
        &built,
        "only the terminal console",
    );
    // MCP (DESIGN §23) acts for the token's person: a coding assistant gets no more than its
    // person's page would.
    let mcp = |token: &str, steps: Value| {
        run_script(&json!({"transport": "http", "url": mcp_url, "token": token, "steps": steps}))
    };
    let send =
        |to: &str, body: Value| json!({"call": "send", "arguments": {"to": to, "body": body}});
    let mcp_cases = [
        (
            "a member upgrades the agent over MCP",
            send("broker", upgrade_agent.clone()),
            "only owners may `upgrade` `agent`",
        ),
        (
            "a member names the credentials over MCP",
            send(
                "broker",
                json!({"type": "spawn", "actor": "leak", "wasm": "/actor/ann-bot/public/echo.wasm", "source": credentials}),
            ),
            "only the terminal console",
        ),
        (
            "a member builds a host folder over MCP",
            send("cargo", json!({"type": "build", "source": credentials})),
            "only the terminal console",
        ),
        (
            "a member stops the owner's actor over MCP",
            send("broker", json!({"type": "stop", "actor": "echo"})),
            "belongs to owner",
        ),
        (
            "a member rolls the agent back over MCP",
            json!({"call": "rollback", "arguments": {"actor": "agent"}}),
            "only owners may `rollback` `agent`",
        ),
        (
            "a member spawns an actor for the owner over MCP",
            send(
                "broker",
                json!({"type": "spawn", "actor": "leak", "wasm": "/actor/ann-bot/public/echo.wasm", "owner": "owner"}),
            ),
            "only for themselves",
        ),
    ];
    let steps: Vec<Value> = mcp_cases.iter().map(|(_, step, _)| step.clone()).collect();
    let answered = mcp(&ann_token, Value::Array(steps));
    let results = answered["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{answered}"));
    for ((route, _, why), result) in mcp_cases.iter().zip(results) {
        assert_eq!(result["isError"], true, "{route}: {result}");
        let text = result["text"].as_str().unwrap_or_default();
        assert!(text.contains(why), "{route}: `{text}` should say `{why}`");
    }
    let as_guest = mcp(
        &gus_token,
        json!([
            send("scheduler", json!({"type": "schedule", "every": 60, "to": "echo", "body": {"type": "ping"}})),
            {"call": "deploy", "arguments": {"actor": "leak", "files": {
                "Cargo.toml": "[package]\nname = \"leak\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
                "src/main.rs": "fn main() {}\n",
            }}},
            {"read_resource": "sausage://actor/agent/source/../../../broker/credentials/agent.json"},
        ]),
    );
    let results = as_guest["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{as_guest}"));
    for (result, why) in results.iter().zip([
        "sending to actors needs a member or an owner",
        "guests cannot build",
    ]) {
        assert_eq!(result["isError"], true, "a guest over MCP: {result}");
        let text = result["text"].as_str().unwrap_or_default();
        assert!(text.contains(why), "`{text}` should say `{why}`");
    }
    let error = as_guest["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("without `.` or `..`"),
        "a resource outside an actor's folders: {as_guest}"
    );
    assert!(!as_guest.to_string().contains("sk-secret"));

    let tier = ann.post("/api/people/ann/tier", &json!({"tier": "owner"}));
    assert_eq!(
        tier.status,
        403,
        "a member makes herself an owner: {}",
        tier.text()
    );
    let secret =
        ann.get("/api/actors/agent/files/source/..%2F..%2F..%2Fbroker%2Fcredentials%2Fagent.json");
    assert_ne!(secret.status, 200, "{}", secret.text());
    assert!(!secret.text().contains("sk-secret"));
    assert_eq!(
        fingerprint(&world),
        before,
        "a refusal changed something on disk"
    );

    // What a member's actor may do: spawn an actor of its own, owned by its owner (transitively).
    let spawned = through_actor(
        &mut host,
        "ann-bot",
        "broker",
        json!({"type": "spawn", "actor": "ann-child", "wasm": "/public/echo.wasm"}),
    );
    assert_eq!(spawned["type"], "spawned", "{spawned}");
    assert_eq!(
        world.json("sausage.json")["actors"]["ann-child"]["owner"],
        "ann"
    );
    let meta = world.json("broker/versions/ann-child/1/meta.json");
    assert_eq!(
        (&meta["requested_by"], &meta["requested_for"]),
        (&json!("ann-bot"), &json!("ann")),
        "the version says who asked and for whom"
    );

    // A schedule fires for its creator's owner: ann's bot may stop ann's actor on a schedule,
    // and the same schedule against the owner's echo changes nothing.
    let at = |seconds: i64| (chrono::Utc::now() + chrono::TimeDelta::seconds(seconds)).to_rfc3339();
    for (target, at) in [("ann-child", at(2)), ("echo", at(2))] {
        let body = json!({"type": "schedule", "at": at, "to": "broker", "body": {"type": "stop", "actor": target}});
        let scheduled = through_actor(&mut host, "ann-bot", "scheduler", body);
        assert_eq!(scheduled["type"], "scheduled", "{scheduled}");
    }
    eventually("both schedules fired", || {
        !world.path("private/scheduler/data/schedules.json").exists()
            || world.json("private/scheduler/data/schedules.json")["schedules"]
                .as_array()
                .is_some_and(|s| s.is_empty())
    });
    eventually("ann-child stopped for ann", || {
        world.json("sausage.json")["actors"]["ann-child"]["running"] == false
    });
    assert_eq!(
        world.json("sausage.json")["actors"]["echo"]["running"],
        true
    );

    // The terminal's owner may do what nobody else may: name host paths, change the agent.
    let upgraded = host.request(json!({"type": "upgrade", "actor": "agent", "wasm": echo_wasm}));
    assert_eq!(upgraded["type"], "upgraded", "{upgraded}");
    host.quit();
}

/// The agent's tools, reached through an actor: its conversation has its owner's rights (a
/// guest's actor may not write or send; a member's writes in the member's own work folder but
/// may not stop another's actor), never more.
#[test]
fn the_agent_gives_an_actors_conversation_its_owners_rights_and_no_more() {
    use sausage_fake_llm::{FakeLlm, openai};
    use support::agent::{tool_outputs, world_with_agent};

    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    world.install("echo", "echo");
    world.install("ann-bot", "relay");
    world.install("gus-bot", "relay");
    world.set_owner("ann-bot", "ann");
    world.set_owner("gus-bot", "gus");
    people(&world, &["add", "ann", "--tier", "member"]);
    people(&world, &["add", "gus", "--tier", "guest"]);
    let mut host = world.run();
    let text = |text: &str| json!({"type": "text", "text": text});
    let stop_echo =
        json!({"to": "broker", "body": {"type": "stop", "actor": "echo"}, "wait_seconds": 30});

    // A guest's actor: nothing written, nothing sent.
    fake.push_openai(openai::reply(vec![
        openai::function_call(
            "write_file",
            json!({"path": "/data/work/gus/x.txt", "content": "x"}),
        ),
        openai::function_call(
            "send_message",
            json!({"to": "echo", "body": {"type": "ping"}}),
        ),
    ]));
    fake.push_openai(openai::text_reply("I may not."));
    host.tell(
        "gus-bot",
        json!({"type": "relay", "to": "agent", "body": text("write and send")}),
    );
    eventually("the guest's actor's turn", || fake.requests().len() >= 2);
    let outputs = tool_outputs(&fake, 1);
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    assert!(outputs.iter().all(|o| o.contains("refused")), "{outputs:?}");
    assert!(!world.path("private/agent/data/work/gus/x.txt").exists());

    // A member's actor: the member's own folder yes, the owner's actor no.
    fake.push_openai(openai::reply(vec![
        openai::function_call(
            "write_file",
            json!({"path": "/data/work/ann/x.txt", "content": "x"}),
        ),
        openai::function_call("send_message", stop_echo),
    ]));
    fake.push_openai(openai::text_reply("Written."));
    host.tell(
        "ann-bot",
        json!({"type": "relay", "to": "agent", "body": text("write, stop echo")}),
    );
    eventually("the member's actor's turn", || fake.requests().len() >= 4);
    let outputs = tool_outputs(&fake, 3);
    let outputs = &outputs[outputs.len() - 2..];
    assert!(!outputs[0].contains("refused"), "{outputs:?}");
    assert!(outputs[1].contains("refused"), "{outputs:?}");
    assert_eq!(world.read("private/agent/data/work/ann/x.txt"), "x");
    assert_eq!(
        world.json("sausage.json")["actors"]["echo"]["running"],
        true
    );
    fake.assert_clean();
    host.quit();
}
