//! The world as an MCP server (DESIGN §23), driven by the official Python MCP SDK
//! (`support/mcp_client.py`): over stdio through `sausage mcp`, and over streamable HTTP at `/mcp`
//! with a person's token, each call acting for that person with their tier.

mod support;

use std::process::Command;

use sausage_fake_llm::{FakeLlm, openai};
use serde_json::{Value, json};
use support::agent::{config_with, world_with_config};
use support::mcp::run_script;
use support::web::WebHost;
use support::{TestWorld, eventually, sausage, text};

/// `sausage people ARGS --world WORLD`'s stdout, which must succeed.
fn people(world: &TestWorld, args: &[&str]) -> String {
    let mut all: Vec<&str> = vec!["people"];
    all.extend(args);
    all.extend(["--world", world.root.to_str().unwrap()]);
    let out = sausage(&all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_string()
}

fn stdio(world: &TestWorld, steps: Value) -> Value {
    run_script(&json!({
        "transport": "stdio",
        "command": [env!("CARGO_BIN_EXE_sausage"), "mcp", "--world", world.root.to_str().unwrap()],
        "steps": steps,
    }))
}

fn http(web: &WebHost, token: &str, steps: Value) -> Value {
    run_script(&json!({
        "transport": "http", "url": format!("http://{}/mcp", web.addr), "token": token,
        "steps": steps,
    }))
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"call": name, "arguments": arguments})
}

/// Echo with a second version, so there is something to roll back.
fn world_with_two_echoes() -> TestWorld {
    let world = TestWorld::new();
    world.install("echo", "echo");
    world
}

fn upgrade_echo(web: &mut WebHost) {
    let wasm = support::wasm("echo");
    let reply = web.host.request(json!({
        "type": "upgrade", "actor": "echo", "wasm": wasm.to_str().unwrap(), "shadow": "off",
    }));
    assert_eq!(reply["type"], "upgraded", "{reply}");
}

#[test]
fn a_coding_assistant_over_stdio_lists_sends_reads_and_rolls_back() {
    let world = world_with_two_echoes();
    let mut web = WebHost::start(&world);
    upgrade_echo(&mut web);
    std::fs::write(world.path("actor/echo/public/hello.txt"), "hello from echo").unwrap();

    let out = stdio(
        &world,
        json!([
            {"list_tools": true},
            call("list_actors", json!({})),
            call("send", json!({"to": "echo", "body": {"type": "ping", "n": 7}})),
            call("logs", json!({"actor": "echo", "lines": 5})),
            {"list_resources": true},
            {"read_resource": "sausage://actor/echo/public/hello.txt"},
            call("rollback", json!({"actor": "echo"})),
            call("send", json!({"to": "Not An Id", "body": {"type": "ping"}})),
            call("send", json!({"to": "echo", "body": {"n": 1}})),
            call("send", json!({"to": "nobody", "body": {"type": "ping"}})),
            call("logs", json!({"actor": "ghost"})),
            call("logs", json!({"actor": "echo", "lines": 0})),
            call("send", json!({"to": "broker", "body": {"type": "decide", "approval": "h1", "approve": true}})),
        ]),
    );
    let results = out["results"].as_array().unwrap_or_else(|| panic!("{out}"));
    let tools: Vec<&str> = results[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for tool in ["list_actors", "send", "rollback", "logs", "ask_agent"] {
        assert!(tools.contains(&tool), "{tool} in {tools:?}");
    }
    let list = &results[1];
    assert_eq!(list["isError"], false, "{list}");
    assert!(
        list["text"].as_str().unwrap().contains("\"echo\""),
        "{list}"
    );
    let sent = &results[2];
    assert_eq!(sent["isError"], false, "{sent}");
    assert_eq!(sent["structuredContent"], json!({"type": "ping", "n": 7}));
    assert_eq!(results[3]["isError"], false, "{}", results[3]);
    let rolled = &results[6];
    assert_eq!(rolled["isError"], false, "{rolled}");
    assert!(
        rolled["text"].as_str().unwrap().contains("rolled_back"),
        "{rolled}"
    );
    let uris: Vec<&str> = results[4]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    for uri in [
        "sausage://actor/echo/log",
        "sausage://actor/echo/public/hello.txt",
    ] {
        assert!(uris.contains(&uri), "{uri} in {uris:?}");
    }
    assert_eq!(results[5]["contents"][0]["text"], "hello from echo");
    for (n, expected) in [
        (7, "is not an actor id"),
        (8, "\"type\""),
        (9, "no actor `nobody`"),
        (10, "no actor `ghost`"),
        (11, "`lines` is 1 to 2000"),
        (12, "only a person decides what waits for approval"),
    ] {
        assert_eq!(results[n]["isError"], true, "{}", results[n]);
        let said = results[n]["text"].as_str().unwrap();
        assert!(said.contains(expected), "{n}: {said}");
    }
    eventually("echo runs version 1 again", || {
        world.status("echo")["version"] == 1
    });
}

#[test]
fn over_http_each_call_acts_for_the_tokens_person_and_their_tier() {
    let world = world_with_two_echoes();
    let mut web = WebHost::start(&world);
    upgrade_echo(&mut web);
    people(&world, &["add", "ann", "--tier", "member"]);
    people(&world, &["add", "gus", "--tier", "guest"]);
    let ann = people(&world, &["token", "ann"]);
    let gus = people(&world, &["token", "gus"]);
    assert_eq!(ann.len(), 64);

    let as_ann = http(
        &web,
        &ann,
        json!([
            call("list_actors", json!({})),
            call("rollback", json!({"actor": "echo"})),
            call("send", json!({"to": "echo", "body": {"type": "ping"}})),
        ]),
    );
    let results = as_ann["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{as_ann}"));
    assert_eq!(results[0]["isError"], false);
    // The session's end is a 204 the SDK takes without a warning (it warned at a 202).
    assert_eq!(as_ann["warnings"], json!([]), "{as_ann}");
    assert_eq!(
        results[1]["isError"], true,
        "a member may not roll back the owner's echo"
    );
    assert!(
        results[1]["text"]
            .as_str()
            .unwrap()
            .contains("a member may `rollback` only"),
        "{}",
        results[1]
    );
    assert_eq!(results[2]["isError"], false, "a member may talk to echo");
    let as_gus = http(
        &web,
        &gus,
        json!([call("rollback", json!({"actor": "echo"}))]),
    );
    assert_eq!(as_gus["results"][0]["isError"], true, "{as_gus}");
    assert!(
        as_gus["results"][0]["text"]
            .as_str()
            .unwrap()
            .contains("guest"),
        "{as_gus}"
    );
    assert_eq!(
        world.status("echo")["version"],
        2,
        "nothing was rolled back"
    );

    let no_token = run_script(&json!({
        "transport": "http", "url": format!("http://{}/mcp", web.addr),
        "steps": [{"list_tools": true}],
    }));
    // The SDK shows the refusal's own words, and the 401 names its scheme.
    let refusal = no_token["error"].as_str().unwrap();
    assert!(
        refusal.contains("401") && refusal.contains("sausage people token"),
        "{no_token}"
    );
    let refused = support::http::request(&web.addr, "POST", "/mcp", &[], b"{}");
    assert_eq!(refused.status, 401);
    assert_eq!(refused.header("www-authenticate"), Some("Bearer"));
    for wrong in ["nonsense", &format!("{ann}x")] {
        let refused = http(&web, wrong, json!([{"list_tools": true}]));
        assert!(
            refused["error"].as_str().is_some_and(|e| e.contains("401")),
            "{wrong:?}: {refused}"
        );
    }
    people(&world, &["token", "ann", "--revoke"]);
    let revoked = http(&web, &ann, json!([{"list_tools": true}]));
    assert!(
        revoked["error"].as_str().unwrap().contains("401"),
        "{revoked}"
    );
    let again = sausage(&[
        "people",
        "token",
        "ann",
        "--revoke",
        "--world",
        world.root.to_str().unwrap(),
    ]);
    assert!(!again.status.success());
    assert!(text(&again.stderr).contains("no token to revoke"));
    let nobody = sausage(&[
        "people",
        "token",
        "zed",
        "--world",
        world.root.to_str().unwrap(),
    ]);
    assert!(!nobody.status.success());
}

#[test]
fn a_guests_send_is_refused_in_the_web_pages_words_and_reaches_no_actor() {
    let world = TestWorld::new();
    world.install("counter", "counter");
    let web = WebHost::start(&world);
    let link = people(&world, &["add", "gus", "--tier", "guest"]);
    let gus = people(&world, &["token", "gus"]);

    // What the web page's `POST /api/send` says to the same guest.
    let link = link.lines().last().unwrap().trim();
    let path = link.split_once(&web.addr).unwrap().1;
    let login = support::http::request(&web.addr, "GET", path, &[], b"");
    assert_eq!(login.status, 303, "{}", login.text());
    let page = support::web::Client {
        addr: web.addr.clone(),
        cookie: login
            .header("set-cookie")
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_string(),
    };
    let step = json!({"type": "step"});
    let refused = page.post("/api/send", &json!({"to": "counter", "body": step}));
    assert_eq!(refused.status, 403, "{}", refused.text());
    let words = refused.json()["error"].as_str().unwrap().to_string();

    let as_gus = http(
        &web,
        &gus,
        json!([
            call("send", json!({"to": "counter", "body": step})),
            call(
                "send",
                json!({"to": "counter", "body": step, "timeout_seconds": 0})
            ),
        ]),
    );
    let results = as_gus["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{as_gus}"));
    for result in results {
        assert_eq!(result["isError"], true, "{result}");
        assert_eq!(result["text"], words.as_str(), "the page's words");
    }
    // Nothing reached the counter: it never stepped (a message sent before would be ahead of
    // this one in its mailbox).
    let mut host = web.host;
    host.tell("counter", json!({"type": "get"}));
    let count = host.wait_type("counter", "count");
    assert_eq!(count["n"], 0, "{count}");
}

#[test]
fn ask_agent_gives_the_answer_with_its_cost_and_the_turns_progress_on_the_way() {
    let fake = FakeLlm::start();
    let prices = json!({"test-model": {"input": 1.0, "output": 2.0, "cache_read": 0.1,
        "cache_write": 1.0}});
    let world = world_with_config(
        &fake,
        "openai-responses",
        config_with(&fake, "openai-responses", json!({"prices": prices})),
    );
    world.install("echo", "echo");
    fake.push_openai(openai::reply(vec![openai::function_call(
        "send_message",
        json!({"to": "echo", "body": {"type": "ping"}, "wait_seconds": 10}),
    )]));
    fake.push_openai(openai::text_reply("Echo said ping."));
    let _web = WebHost::start(&world);
    let out = stdio(
        &world,
        json!([{"call": "ask_agent", "arguments": {"text": "ask echo"}, "progress": true},
               call("ask_agent", json!({"text": "  "}))]),
    );
    let answer = &out["results"][0];
    assert_eq!(answer["isError"], false, "{out}");
    let said = answer["text"].as_str().unwrap();
    assert!(said.starts_with("Echo said ping."), "{said}");
    assert!(said.contains("(cost: $"), "{said}");
    let progress = answer["progress"].as_array().unwrap();
    assert!(
        progress.iter().any(|p| p["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("send_message"))),
        "{progress:?}"
    );
    assert_eq!(out["results"][1]["isError"], true);
}

#[test]
fn sausage_mcp_says_what_to_do_when_the_world_does_not_run() {
    let world = TestWorld::new();
    let out = sausage(&["mcp", "--world", world.root.to_str().unwrap()]);
    assert!(!out.status.success());
    let said = text(&out.stderr);
    assert!(
        said.contains("is not running") && said.contains("sausage run"),
        "{said}"
    );
    let nowhere = sausage(&["mcp", "--world", "/nonexistent/world"]);
    assert!(text(&nowhere.stderr).contains("/nonexistent/world: no world here"));
    // The SDK's client gets the same words as the answer to its `initialize`, not a closed pipe.
    let client = stdio(&world, json!([]));
    let error = client["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{client}"));
    assert!(
        error.contains("is not running") && error.contains("sausage run"),
        "{client}"
    );
}

fn crate_files(greeting: &str) -> Value {
    support::greeter_crate("greeter", greeting)
        .into_iter()
        .map(|(path, text)| (path.to_string(), Value::String(text)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[test]
fn deploy_builds_a_crate_sent_in_the_call_spawns_it_then_upgrades_it_with_a_shadow_report() {
    let world = TestWorld::new();
    let mut web = WebHost::start(&world);
    people(&world, &["add", "gus", "--tier", "guest"]);
    let gus = people(&world, &["token", "gus"]);
    let mut broken = crate_files("x");
    broken["src/main.rs"] = json!("fn main() { this is not rust }");
    let mut escaping = crate_files("x");
    escaping["../outside.rs"] = json!("fn main() {}");
    let mut absolute = crate_files("x");
    absolute["/etc/evil"] = json!("x");
    let out = stdio(
        &world,
        json!([
            {"call": "deploy", "arguments": {"actor": "greeter", "files": crate_files("hello")},
             "progress": true},
            call("send", json!({"to": "greeter", "body": {"type": "text", "text": "hi"}})),
            call("deploy", json!({"actor": "greeter", "files": crate_files("hello again")})),
            call("send", json!({"to": "greeter", "body": {"type": "text", "text": "hi"}})),
            call("deploy", json!({"actor": "greeter", "files": broken})),
            call("deploy", json!({"actor": "greeter", "files": escaping})),
            call("deploy", json!({"actor": "greeter", "files": absolute})),
            call("deploy", json!({"actor": "greeter", "files": {"src/main.rs": "fn main() {}"}})),
            call("deploy", json!({"actor": "Greeter", "files": crate_files("x")})),
            call("deploy", json!({"actor": "greeter", "files": crate_files("x"), "shadow": "always"})),
        ]),
    );
    let results = out["results"].as_array().unwrap_or_else(|| panic!("{out}"));
    let spawned = &results[0];
    assert_eq!(spawned["isError"], false, "{spawned}");
    assert_eq!(spawned["structuredContent"]["type"], "spawned", "{spawned}");
    let steps: Vec<&str> = spawned["progress"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["message"].as_str())
        .collect();
    assert_eq!(steps, ["building", "testing and installing"]);
    assert_eq!(results[1]["structuredContent"]["text"], "hello");
    let upgraded = &results[2];
    assert_eq!(
        upgraded["structuredContent"]["type"], "upgraded",
        "{upgraded}"
    );
    assert_eq!(
        upgraded["structuredContent"]["shadow"]["messages"], 1,
        "{upgraded}"
    );
    assert_eq!(results[3]["structuredContent"]["text"], "hello again");
    for (n, expected) in [
        (4, "the build failed"),
        (5, "is not a path inside the crate"),
        (6, "is not a path inside the crate"),
        (7, "has no \"Cargo.toml\""),
        (8, "is not an actor id"),
        (9, "`shadow` is report, same or off"),
    ] {
        assert_eq!(results[n]["isError"], true, "{}", results[n]);
        let said = results[n]["text"].as_str().unwrap();
        assert!(said.contains(expected), "{n}: {said}");
    }
    assert_eq!(
        world.json("sausage.json")["actors"]["greeter"]["version"],
        2
    );
    assert!(!world.path("outside.rs").exists());
    assert!(
        std::fs::read_dir(world.path("broker/uploads"))
            .unwrap()
            .next()
            .is_none(),
        "every upload is gone once used"
    );

    // A guest cannot build.
    let as_gus = http(
        &web,
        &gus,
        json!([call(
            "deploy",
            json!({"actor": "gusbot", "files": crate_files("x")})
        )]),
    );
    assert_eq!(as_gus["results"][0]["isError"], true, "{as_gus}");
    assert!(
        as_gus["results"][0]["text"]
            .as_str()
            .unwrap()
            .contains("guests cannot build"),
        "{as_gus}"
    );
    let list = web.host.request(json!({"type": "list"}));
    assert!(!list.to_string().contains("gusbot"));
}

#[test]
fn the_agent_calls_a_trusted_mcp_servers_tool_with_the_token_the_host_keeps() {
    let server = support::mcp::McpServer::start("server-token");
    let fake = FakeLlm::start();
    let world = world_with_config(
        &fake,
        "openai-responses",
        support::agent::config(&fake, "openai-responses"),
    );
    let root = world.root.to_str().unwrap();
    let url = server.url();
    let added = Command::new(env!("CARGO_BIN_EXE_sausage"))
        .args([
            "mcp-server",
            "add",
            "tools",
            &url,
            "--tool",
            "weather=owner,member",
        ])
        .args(["--tool", "slow=owner", "--timeout", "2", "--world", root])
        .env("SAUSAGE_MCP_TOKEN", "server-token")
        .output()
        .unwrap();
    assert!(added.status.success(), "{}", text(&added.stderr));
    let credentials = world.read("broker/credentials/agent.json");
    assert!(credentials.contains("Bearer server-token"), "{credentials}");
    assert_eq!(
        world.json("broker/secrets/secrets.json")["model"]["value"],
        sausage_fake_llm::TOKEN,
        "the model's token is kept, as its secret"
    );
    assert!(
        !world
            .read("private/agent/data/config.json")
            .contains("server-token")
    );

    fake.push_openai(openai::reply(vec![openai::function_call(
        "mcp__tools__weather",
        json!({"city": "Oslo"}),
    )]));
    fake.push_openai(openai::reply(vec![openai::function_call(
        "mcp__tools__slow",
        json!({"seconds": 20}),
    )]));
    fake.push_openai(openai::text_reply("Sunny in Oslo."));
    let mut host = world.run();
    host.send("what is the weather in Oslo?");
    assert_eq!(
        support::agent::final_reply(&mut host)["text"],
        "Sunny in Oslo."
    );
    let offered: Vec<String> = fake.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    assert!(
        offered.contains(&"mcp__tools__weather".to_string()),
        "{offered:?}"
    );
    assert!(
        offered.contains(&"mcp__tools__slow".to_string()),
        "{offered:?}"
    );
    let weather = support::agent::tool_outputs(&fake, 1);
    assert!(weather[0].contains("sunny in Oslo"), "{weather:?}");
    let slow = support::agent::tool_outputs(&fake, 2);
    assert!(slow.last().unwrap().starts_with("error"), "{slow:?}");
    let calls = server.calls();
    assert_eq!(
        calls[0],
        json!({"tool": "weather", "arguments": {"city": "Oslo"}})
    );

    for (args, expected) in [
        (
            vec![
                "mcp-server",
                "add",
                "Bad Name",
                &url,
                "--tool",
                "weather=owner",
            ],
            "a server's name",
        ),
        (
            vec![
                "mcp-server",
                "add",
                "x",
                "ftp://h/mcp",
                "--tool",
                "weather=owner",
            ],
            "http://",
        ),
        (
            vec!["mcp-server", "add", "x", &url, "--tool", "weather"],
            "NAME=TIER",
        ),
        (
            vec!["mcp-server", "add", "x", &url, "--tool", "weather=admin"],
            "owner, member and guest",
        ),
    ] {
        let mut all = args.clone();
        all.extend(["--world", root]);
        let refused = sausage(&all);
        assert!(!refused.status.success(), "{args:?}");
        assert!(
            text(&refused.stderr).contains(expected),
            "{args:?}: {}",
            text(&refused.stderr)
        );
    }
}
