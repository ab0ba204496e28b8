//! The agent against a fake model provider: turns, tools, limits, failures in words, both API
//! shapes, building and spawning an actor, and upgrading itself in the middle of a turn.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::fake_llm::{FakeLlm, TOKEN, anthropic, openai};
use support::*;

/// The agent's `/data/config.json` for `api` on the fake: without the token, which the host
/// keeps.
fn config(fake: &FakeLlm, api: &str) -> Value {
    json!({"api": api, "base_url": fake.base_url(), "model": "test-model"})
}

/// A world with the agent configured for `api` on the fake, as `sausage init` leaves it.
fn world_with_agent(fake: &FakeLlm, api: &str) -> TestWorld {
    let world = TestWorld::new();
    world.install_agent(Some(config(fake, api)));
    world.give_agent_credentials(&fake.base_url(), api);
    world
}

/// Types text for the agent and waits for its answer.
fn ask(host: &mut Host, text: &str) -> String {
    host.send(text);
    let answer = host.wait_for_within(Duration::from_secs(120), "the agent's answer", |m| {
        m.from == "agent" && m.reply && m.body["type"] == "text"
    });
    answer.body["text"].as_str().unwrap().to_string()
}

/// Every text the agent sent the model in the `n`-th request, as one string.
fn request_text(fake: &FakeLlm, n: usize) -> String {
    fake.requests()[n].body.to_string()
}

#[test]
fn a_persons_text_gets_the_models_answer() {
    let fake = FakeLlm::start();
    fake.push_openai(openai::text_reply("Hello from the model."));
    let world = world_with_agent(&fake, "openai-responses");
    world.install("probe", "fsprobe");
    let mut host = world.run();
    assert_eq!(ask(&mut host, "hello agent"), "Hello from the model.");
    let request = &fake.requests()[0];
    assert_eq!(request.path, "/v1/responses");
    assert!(request_text(&fake, 0).contains("hello agent"));
    assert_eq!(request.body["model"], "test-model");
    assert!(
        request.body["tools"].as_array().unwrap().len() >= 7,
        "the seven tools are offered"
    );
    // The fake refuses a request without the right header: the host added the token, which
    // no file an actor can see holds, and no actor's environment.
    assert_eq!(
        world.visible_files_containing(TOKEN),
        Vec::<std::path::PathBuf>::new()
    );
    host.tell("probe", json!({"type": "env"}));
    let env = host.wait_type("probe", "ok")["env"].clone();
    assert_eq!(env["SAUSAGE_ACTOR"], "probe", "{env}");
    assert!(!env.to_string().contains(TOKEN), "{env}");
}

#[test]
fn the_unconfigured_agent_and_a_provider_error_answer_in_words() {
    let fake = FakeLlm::start();
    let world = TestWorld::new();
    world.install_agent(None);
    world.give_agent_credentials(&fake.base_url(), "openai-responses");
    let mut host = world.run();
    let answer = ask(&mut host, "are you there?");
    assert!(answer.contains("config.json"), "{answer}");
    assert!(
        !answer.contains("token;"),
        "no token is asked for: {answer}"
    );

    fake.push_error(
        429,
        json!({"error": {"message": "You exceeded your current quota.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}),
    );
    std::fs::write(
        world.path("private/agent/data/config.json"),
        config(&fake, "openai-responses").to_string(),
    )
    .unwrap();
    let answer = ask(&mut host, "and now?");
    assert!(
        answer.contains("429") && answer.contains("quota"),
        "{answer}"
    );
}

#[test]
fn replies_never_start_turns_and_other_messages_reach_the_next_turn() {
    let fake = FakeLlm::start();
    fake.push_openai(openai::text_reply("Noted."));
    let world = world_with_agent(&fake, "openai-responses");
    world.install("crasher", "crasher");
    let mut host = world.run();
    // A text that is a reply, and a message of another type: neither starts a turn.
    host.tell("crasher", json!({"type": "say", "line": r#"{"to":"agent","reply_to":"m-1","body":{"type":"text","text":"a reply about pineapples"}}"#}));
    host.tell("crasher", json!({"type": "say", "line": r#"{"to":"agent","body":{"type":"news","about":"bananas"}}"#}));
    host.tell("crasher", json!({"type": "ping"}));
    host.wait_type("crasher", "pong");
    assert_eq!(ask(&mut host, "what happened?"), "Noted.");
    assert_eq!(
        fake.requests().len(),
        1,
        "only the person's text started a turn"
    );
    let sent = request_text(&fake, 0);
    assert!(
        sent.contains("pineapples") && sent.contains("bananas"),
        "{sent}"
    );
}

#[test]
fn tools_run_their_outputs_are_cut_at_30_kb_and_turns_stop_after_40_steps() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    std::fs::write(
        world.path("private/agent/data/big.txt"),
        "x".repeat(100 * 1024),
    )
    .unwrap();
    fake.push_openai(openai::reply(vec![openai::function_call(
        "read_file",
        json!({"path": "/data/big.txt"}),
    )]));
    fake.push_openai(openai::text_reply("It is big."));
    for _ in 0..40 {
        fake.push_openai(openai::reply(vec![openai::function_call(
            "list_dir",
            json!({"path": "/data"}),
        )]));
    }
    let mut host = world.run();
    assert_eq!(ask(&mut host, "read big.txt"), "It is big.");
    let output = fake.requests()[1].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["type"] == "function_call_output")
        .unwrap()["output"]
        .to_string();
    assert!(
        output.len() < 31 * 1024,
        "cut to 30 KB: {} bytes",
        output.len()
    );
    assert!(
        output.contains("cut") || output.contains("truncat"),
        "a note says so"
    );

    let answer = ask(&mut host, "now loop");
    assert_eq!(
        fake.requests().len(),
        2 + 40,
        "at most 40 model steps in a turn"
    );
    assert!(
        answer.contains("40"),
        "the answer says the limit was reached: {answer}"
    );
}

#[test]
fn the_conversation_continues_when_the_api_shape_changes() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![
        openai::reasoning("thinking about files"),
        openai::function_call("list_dir", json!({"path": "/data"})),
    ]));
    fake.push_openai(openai::text_reply("Your data has a config."));
    let mut host = world.run();
    assert_eq!(
        ask(&mut host, "what is in /data?"),
        "Your data has a config."
    );
    // The reasoning item went back to OpenAI with the tool result.
    assert!(request_text(&fake, 1).contains("encrypted_content"));

    std::fs::write(
        world.path("private/agent/data/config.json"),
        config(&fake, "anthropic-messages").to_string(),
    )
    .unwrap();
    // The other API wants the token in another header: credentials apply from the next start.
    world.give_agent_credentials(&fake.base_url(), "anthropic-messages");
    assert_eq!(
        host.request(json!({"type": "stop", "actor": "agent"}))["type"],
        "stopped"
    );
    assert_eq!(
        host.request(json!({"type": "start", "actor": "agent"}))["type"],
        "started"
    );
    fake.push_anthropic(anthropic::reply(vec![anthropic::tool_use(
        "list_dir",
        json!({"path": "/public"}),
    )]));
    fake.push_anthropic(anthropic::text_reply("Still me, now on the other API."));
    assert_eq!(
        ask(&mut host, "and /public?"),
        "Still me, now on the other API."
    );
    let request = &fake.requests()[2];
    assert_eq!(request.path, "/v1/messages");
    let sent = request.body.to_string();
    assert!(
        sent.contains("what is in /data?") && sent.contains("Your data has a config."),
        "{sent}"
    );
    assert!(
        !sent.contains("encrypted_content"),
        "OpenAI's opaque items stay with OpenAI"
    );
}

#[test]
fn the_history_is_cut_at_600_entries_starting_at_a_user_entry() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    let mut host = world.run();
    for n in 0..320 {
        fake.push_openai(openai::text_reply(&format!("answer {n}")));
    }
    for n in 0..320 {
        assert_eq!(
            ask(&mut host, &format!("question {n}")),
            format!("answer {n}")
        );
    }
    let history = world.json("private/agent/data/history.json");
    let entries = history
        .as_array()
        .or_else(|| history["entries"].as_array())
        .unwrap()
        .clone();
    assert!(entries.len() <= 600, "{} entries", entries.len());
    assert!(
        entries[0].to_string().contains("question"),
        "starts at a user entry: {}",
        entries[0]
    );
    assert!(
        !history.to_string().contains("\"question 0\""),
        "the oldest were cut"
    );
}

#[test]
fn a_scripted_model_writes_builds_spawns_and_messages_a_new_actor() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "anthropic-messages");
    // The model writes the crate file by file.
    let writes = greeter_crate("greeter", "greetings")
        .into_iter()
        .map(|(path, content)| {
            let path = format!("/data/greeter/{path}");
            anthropic::tool_use("write_file", json!({"path": path, "content": content}))
        })
        .collect();
    fake.push_anthropic(anthropic::reply(writes));
    fake.push_anthropic(anthropic::reply(vec![anthropic::tool_use(
        "send_message",
        json!({"to": "cargo", "body": {"type": "build", "source": "/data/greeter"}, "wait_seconds": 300}),
    )]));
    fake.push_anthropic(anthropic::reply(vec![anthropic::tool_use(
        "send_message",
        json!({"to": "broker", "body": {"type": "spawn", "actor": "greeter", "wasm": "/actor/cargo/public/builds/1/greeter.wasm", "source": "/data/greeter"}, "wait_seconds": 60}),
    )]));
    fake.push_anthropic(anthropic::reply(vec![anthropic::tool_use(
        "send_message",
        json!({"to": "greeter", "body": {"type": "text", "text": "hi"}, "wait_seconds": 10}),
    )]));
    fake.push_anthropic(anthropic::text_reply(
        "The greeter is running and says greetings.",
    ));
    let mut host = world.run();
    assert_eq!(
        ask(&mut host, "make me a greeter"),
        "The greeter is running and says greetings."
    );
    assert_eq!(
        world.json("sausage.json")["actors"]["greeter"]["version"],
        1
    );
    let requests = fake.requests();
    assert!(
        requests[2].body.to_string().contains("built"),
        "the build's reply reached the model"
    );
    assert!(
        requests[3].body.to_string().contains("spawned"),
        "the spawn's reply reached the model"
    );
    assert!(
        requests[4].body.to_string().contains("greetings"),
        "the new actor's answer reached the model"
    );
}

#[test]
fn the_agent_upgrades_itself_in_the_middle_of_a_turn_and_finishes_it() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    world.warm_cargo_for_agent();
    fake.push_openai(openai::reply(vec![openai::function_call(
        "copy_dir",
        json!({"from": "/actor/agent/source", "to": "/data/agent-next"}),
    )]));
    fake.push_openai(openai::reply(vec![openai::function_call(
        "send_message",
        json!({"to": "cargo", "body": {"type": "build", "source": "/data/agent-next"}, "wait_seconds": 900}),
    )]));
    fake.push_openai(openai::reply(vec![openai::function_call(
        "send_message",
        json!({"to": "broker", "body": {"type": "upgrade", "actor": "agent", "wasm": "/actor/cargo/public/builds/1/agent.wasm", "source": "/data/agent-next"}, "wait_seconds": 120}),
    )]));
    fake.push_openai(openai::text_reply("I upgraded myself and I am back."));
    let mut host = world.run();
    host.send("please upgrade yourself");
    let answer = host.wait_for_within(Duration::from_secs(900), "the resumed turn's answer", |m| {
        m.from == "agent" && m.reply && m.body["type"] == "text"
    });
    assert_eq!(answer.body["text"], "I upgraded myself and I am back.");
    assert_eq!(world.json("sausage.json")["actors"]["agent"]["version"], 2);
    let last = request_text(&fake, 3);
    assert!(
        last.contains("restart"),
        "the new version told the model it restarted: {last}"
    );
    // The answer goes out before the turn's file is removed, so a kill between the two repeats
    // the answer rather than losing it; the removal follows the reply, and we wait for it.
    eventually("the turn is over", || {
        !world.path("private/agent/data/turn.json").exists()
    });
}
