//! The agent against a fake model provider: turns, tools, limits, failures in words, the three
//! API shapes (streamed), progress and tool messages, retries, budgets, compaction, stop, building
//! and spawning an actor, and upgrading itself in the middle of a turn.

mod support;

use std::time::Duration;

use sausage_fake_llm::{FakeLlm, TOKEN, anthropic, chat, openai};
use serde_json::{Value, json};
use support::agent::*;
use support::*;

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
        400,
        json!({"error": {"message": "Unsupported parameter: 'reasoning.effort'.", "type": "invalid_request_error", "param": "reasoning.effort", "code": "unsupported_parameter"}}),
    );
    std::fs::write(
        world.path("private/agent/data/config.json"),
        config(&fake, "openai-responses").to_string(),
    )
    .unwrap();
    let answer = ask(&mut host, "and now?");
    assert!(
        answer.contains("400") && answer.contains("reasoning.effort"),
        "{answer}"
    );
}

/// Less than the first retry's wait (1 s, then 2 s and 4 s): a refused connection is not retried.
const NOT_RETRIED_WITHIN: Duration = Duration::from_secs(3);

#[test]
fn a_base_url_where_nothing_listens_is_named_and_not_retried() {
    // A port that was free a moment ago: nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let base_url = format!("http://{closed}");
    let world = TestWorld::new();
    world.install_agent(Some(
        json!({"api": "openai-responses", "base_url": base_url, "model": "test-model"}),
    ));
    world.give_agent_credentials(&base_url, "openai-responses");
    let mut host = world.run();
    let answer = ask(&mut host, "are you there?");
    assert!(
        answer.contains(&format!("nothing listens at {closed}")) && answer.contains("base URL"),
        "{answer}"
    );
    assert!(
        !answer.contains("Closed") && !answer.contains("busy"),
        "{answer}"
    );
    // Timed once the agent runs: the same words again, without the waits of a retry.
    let asked = std::time::Instant::now();
    let again = ask(&mut host, "and now?");
    assert_eq!(again, answer);
    assert!(
        asked.elapsed() < NOT_RETRIED_WITHIN,
        "{:?}",
        asked.elapsed()
    );
}

#[test]
fn replies_never_start_turns_and_other_actors_messages_stay_in_their_own_conversation() {
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
    // What an actor sends belongs to that actor's conversation with the agent, never to a
    // person's (DESIGN §13): it is kept for crasher, not shown to the owner.
    let sent = request_text(&fake, 0);
    assert!(
        !sent.contains("pineapples") && !sent.contains("bananas"),
        "{sent}"
    );
    let kept = world.read("private/agent/data/inbox.json");
    assert!(
        kept.contains("pineapples") && kept.contains("bananas"),
        "{kept}"
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
    // The other API wants the token in another header: the secret's applies from the next
    // request, with no restart.
    world.give_agent_credentials(&fake.base_url(), "anthropic-messages");
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
    // The console speaks for the owner: the conversation is the owner's.
    let history = world.json("private/agent/data/people/owner/history.json");
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

/// The model's three steps of upgrading the agent: copy its source, build it, upgrade to it.
fn push_self_upgrade(fake: &FakeLlm) {
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
}

#[test]
fn the_agent_upgrades_itself_in_the_middle_of_a_turn_and_finishes_it() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    world.warm_cargo_for_agent();
    push_self_upgrade(&fake);
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

#[test]
fn progress_and_tool_messages_arrive_in_order_and_the_console_prints_them() {
    let fake = FakeLlm::start();
    let words = "I will look at your data folder first, and then I will tell you what I \
                 found there, file by file, in a short list.";
    fake.push_openai(openai::reply(vec![
        openai::message(words),
        openai::function_call("list_dir", json!({"path": "/data"})),
    ]));
    fake.push_openai(openai::text_reply("There is one file: config.json."));
    // Each event of the stream comes a little after the one before, as from a real model.
    fake.set_event_delay(Duration::from_millis(25));
    let world = world_with_agent(&fake, "openai-responses");
    let mut host = world.run();
    host.send("what is in /data?");
    let reply = final_reply(&mut host);
    assert_eq!(reply["text"], "There is one file: config.json.");
    let turn = reply["turn"].as_str().unwrap().to_string();
    assert!(turn.starts_with("m-"), "{reply}");
    let about: Vec<Value> = host
        .take_all()
        .into_iter()
        .filter(|m| m.from == "agent")
        .map(|m| {
            assert!(
                m.reply,
                "every message about a turn replies to its message: {m:?}"
            );
            assert_eq!(m.body["turn"], turn.as_str(), "{m:?}");
            m.body
        })
        .collect();
    let kinds: Vec<&str> = about.iter().map(|b| b["type"].as_str().unwrap()).collect();
    let first_tool = kinds
        .iter()
        .position(|k| *k == "tool")
        .expect("a tool message");
    assert!(
        kinds[..first_tool].iter().all(|k| *k == "progress"),
        "{kinds:?}"
    );
    assert!(
        first_tool >= 2,
        "the text streamed in more than one batch: {kinds:?}"
    );
    assert!(
        first_tool < words.split(' ').count(),
        "the streamed deltas were batched: {kinds:?}"
    );
    let streamed: String = about[..first_tool]
        .iter()
        .map(|b| b["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, words);
    assert_eq!(
        about[first_tool],
        json!({"type": "tool", "turn": turn, "tool": "list_dir", "state": "started", "preview": "/data", "for": "owner"})
    );
    let finished = &about[first_tool + 1];
    assert_eq!(
        (finished["state"].as_str(), finished["ok"].as_bool()),
        (Some("finished"), Some(true))
    );
    // The second step's text streamed after the tool, in one batch or several.
    let after: String = about[first_tool + 2..]
        .iter()
        .map(|b| b["text"].as_str().unwrap())
        .collect();
    assert_eq!(after, "There is one file: config.json.");
    // The final reply carries what the turn used, as the provider reported it.
    let reported: u64 = fake
        .usage_log()
        .iter()
        .map(|u| u["output_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(reply["usage"]["output_tokens"], reported);
    assert!(fake.requests().iter().all(|r| r.body["stream"] == true));
}

#[test]
fn a_429_with_retry_after_is_waited_out_and_the_turn_finishes() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "anthropic-messages");
    fake.push_error_with_headers(
        429,
        anthropic::error(
            "rate_limit_error",
            "This request would exceed your rate limit.",
        ),
        &[("retry-after", "1")],
    );
    fake.push_stream_error(
        sausage_fake_llm::Api::Anthropic,
        anthropic::error("overloaded_error", "Overloaded"),
    );
    fake.push_anthropic(anthropic::text_reply("Hello, after the wait."));
    let mut host = world.run();
    host.send("hello");
    let waiting = host.wait_for("a progress line about the wait", |m| {
        m.body["type"] == "progress" && m.body["text"].as_str().unwrap().contains("429")
    });
    assert!(
        waiting.body["text"].as_str().unwrap().contains("1 s"),
        "{}",
        waiting.body
    );
    assert_eq!(final_reply(&mut host)["text"], "Hello, after the wait.");
    assert_eq!(
        fake.requests().len(),
        3,
        "a 429 and an overloaded stream, then the answer"
    );
}

#[test]
fn a_turn_whose_history_passes_the_window_compacts_and_finishes_also_after_a_restart() {
    let fake = FakeLlm::start();
    fake.set_context_window(40_000);
    let config = config_with(
        &fake,
        "anthropic-messages",
        json!({"context_window": 40_000, "max_tokens": 2000}),
    );
    let world = world_with_config(&fake, "anthropic-messages", config);
    // A long conversation: 40 earlier questions of 5 KB each, 200 KB in all.
    let entries: Vec<Value> = (0..40)
        .flat_map(|n| {
            [
                json!({"kind": "user", "text": format!("Message m-old{n} from console:\n{}", "q".repeat(5000))}),
                json!({"kind": "assistant", "text": format!("answer {n}")}),
            ]
        })
        .collect();
    let history = json!({"sent": 0, "entries": entries});
    std::fs::write(
        world.path("private/agent/data/history.json"),
        history.to_string(),
    )
    .unwrap();
    fake.push_anthropic(anthropic::text_reply(
        "SUMMARY: forty questions of q, all answered.",
    ));
    fake.push_anthropic(anthropic::text_reply("Yes, we talked about q forty times."));
    let mut host = world.run();
    assert_eq!(
        ask(&mut host, "did we talk before?"),
        "Yes, we talked about q forty times."
    );
    let requests = fake.requests();
    assert!(
        requests[0].body.get("tools").is_none(),
        "the summary request offers no tools"
    );
    let sent = requests[1].body.to_string();
    assert!(
        sent.contains("SUMMARY: forty questions"),
        "the summary is carried"
    );
    assert!(sent.contains("did we talk before?"));
    assert!(sent.len() < 100_000, "{} bytes", sent.len());
    assert!(
        requests.iter().all(|r| r.status == 200),
        "nothing passed the window"
    );

    // The same when the agent restarts in the middle of a turn over a long history: it resumes,
    // compacts, and answers the message that started the turn.
    host.quit();
    let long: Vec<Value> = (0..40)
        .map(|n| json!({"kind": "user", "text": format!("Message m-x{n} from console:\n{}", "r".repeat(5000))}))
        .collect();
    let history = json!({"sent": 0, "entries": long});
    std::fs::write(
        world.path("private/agent/data/history.json"),
        history.to_string(),
    )
    .unwrap();
    let turn = json!({"message": {"id": "m-77", "from": "console", "body": {"type": "text", "text": "r?"}}, "steps": 1});
    std::fs::write(world.path("private/agent/data/turn.json"), turn.to_string()).unwrap();
    fake.push_anthropic(anthropic::text_reply("SUMMARY: forty r questions."));
    fake.push_anthropic(anthropic::text_reply("Resumed and compacted."));
    let mut host = world.run();
    assert_eq!(final_reply(&mut host)["text"], "Resumed and compacted.");
    assert!(fake.requests().iter().all(|r| r.status == 200));
}

#[test]
fn a_context_length_refusal_compacts_and_the_request_is_tried_once_more() {
    let fake = FakeLlm::start();
    // The model's window is smaller than the agent believes (no context_window in its config):
    // the provider refuses, in its own words, and the agent compacts and tries again.
    fake.set_context_window(30_000);
    let world = world_with_agent(&fake, "openai-chat");
    let entries: Vec<Value> = (0..30)
        .map(|n| json!({"kind": "user", "text": format!("Message m-y{n} from console:\n{}", "s".repeat(5000))}))
        .collect();
    std::fs::write(
        world.path("private/agent/data/history.json"),
        json!({"sent": 0, "entries": entries}).to_string(),
    )
    .unwrap();
    fake.push_chat(chat::text_reply("SUMMARY: thirty s questions."));
    fake.push_chat(chat::text_reply("Fits now."));
    let mut host = world.run();
    assert_eq!(ask(&mut host, "still there?"), "Fits now.");
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [400, 200, 200]);
}

#[test]
fn the_budget_stops_a_turn_and_then_the_day_and_the_cost_is_priced_right() {
    let fake = FakeLlm::start();
    let prices = json!({"test-model": {"input": 1000.0, "output": 2000.0, "cache_read": 100.0, "cache_write": 1000.0}});
    let config = config_with(
        &fake,
        "openai-responses",
        json!({"prices": prices, "max_turn_usd": 15, "max_day_usd": 16}),
    );
    let world = world_with_config(&fake, "openai-responses", config);
    for _ in 0..5 {
        fake.push_openai(openai::reply(vec![openai::function_call(
            "list_dir",
            json!({"path": "/data"}),
        )]));
    }
    let mut host = world.run();
    host.send("loop for ever");
    let reply = final_reply(&mut host);
    assert_eq!(reply["stopped"], "budget", "{reply}");
    // Each request is some 10,000 tokens (the prompt is most of it) at $1,000 a million: the
    // cap of $15 falls after two steps (for anything from 7,500 to 15,000 tokens a request).
    let usage = fake.usage_log();
    assert_eq!(usage.len(), 2, "{usage:?}");
    let expected: f64 = usage
        .iter()
        .map(|u| {
            let input = u["input_tokens"].as_u64().unwrap() as f64;
            let cached = u["input_tokens_details"]["cached_tokens"].as_u64().unwrap() as f64;
            let output = u["output_tokens"].as_u64().unwrap() as f64;
            ((input - cached) * 1000.0 + cached * 100.0 + output * 2000.0) / 1e6
        })
        .sum();
    let cost = reply["usage"]["cost_usd"].as_f64().unwrap();
    assert!((cost - expected).abs() < 1e-5, "{cost} != {expected}");
    assert!(cost >= 15.0);
    let spend = world.json("private/agent/data/spend.json");
    assert!(
        (spend["usd"].as_f64().unwrap() - cost).abs() < 1e-5,
        "{spend}"
    );

    // The day's cap is passed too: the next turn is answered without asking the model.
    let words = ask(&mut host, "and now?");
    assert!(
        words.contains("max_day_usd") && words.contains("midnight UTC"),
        "{words}"
    );
    assert_eq!(fake.requests().len(), 2);
}

#[test]
fn a_stop_ends_the_running_turn_after_its_step() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![openai::function_call(
        "wait_for_messages",
        json!({"seconds": 600}),
    )]));
    let mut host = world.run();
    host.send("wait a long time");
    let started = host.wait_for("the tool's start", |m| {
        m.body["type"] == "tool" && m.body["state"] == "started"
    });
    let turn = started.body["turn"].as_str().unwrap().to_string();
    host.tell("agent", json!({"type": "stop", "turn": turn}));
    let reply = final_reply(&mut host);
    assert_eq!(reply["stopped"], "stop", "{reply}");
    assert_eq!(reply["turn"], turn.as_str());
    assert_eq!(fake.requests().len(), 1, "no step after the stop");
}

/// The pause between two events of the slow answer a stop cuts: its 40 words take some 6 s.
const SLOW_EVENT_DELAY: Duration = Duration::from_millis(150);

/// How soon after a stop the turn must have ended (DESIGN §27: at once).
const STOP_WITHIN: Duration = Duration::from_secs(1);

#[test]
fn a_stop_drops_the_model_request_within_a_second_and_its_later_tool_call_never_runs() {
    let fake = FakeLlm::start();
    let words = ["I will deploy it now, word by word."; 5].join(" ");
    fake.push_openai(openai::reply(vec![
        openai::message(&words),
        openai::function_call(
            "write_file",
            json!({"path": "/data/deployed.txt", "content": "deployed"}),
        ),
    ]));
    fake.set_event_delay(SLOW_EVENT_DELAY);
    let world = world_with_agent(&fake, "openai-responses");
    let mut host = world.run();
    host.send("deploy it");
    let progress = host.wait_for("the answer's first words", |m| m.body["type"] == "progress");
    let turn = progress.body["turn"].as_str().unwrap().to_string();
    let asked = std::time::Instant::now();
    host.tell("agent", json!({"type": "stop", "turn": turn}));
    let reply = final_reply(&mut host);
    let took = asked.elapsed();
    assert!(took < STOP_WITHIN, "the stop took {took:?}: {reply}");
    assert_eq!(reply["stopped"], "stop", "{reply}");
    assert_eq!(reply["turn"], turn.as_str());
    // The whole answer, its call last, would have come by now had the request gone on.
    std::thread::sleep(SLOW_EVENT_DELAY * 60);
    assert!(
        !world.path("private/agent/data/deployed.txt").exists(),
        "the tool call that came after the stop ran"
    );
    assert_eq!(fake.requests().len(), 1, "no request after the stop");
}

#[test]
fn openai_chat_builds_spawns_and_messages_a_new_actor() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-chat");
    let writes = greeter_crate("greeter", "greetings")
        .into_iter()
        .map(|(path, content)| {
            let path = format!("/data/greeter/{path}");
            chat::tool_call("write_file", json!({"path": path, "content": content}))
        })
        .collect();
    fake.push_chat(chat::reply(chat::message(
        Some("Writing the crate."),
        writes,
    )));
    fake.push_chat(chat::reply(chat::message(None, vec![chat::tool_call(
        "send_message",
        json!({"to": "cargo", "body": {"type": "build", "source": "/data/greeter"}, "wait_seconds": 300}),
    )])));
    fake.push_chat(chat::reply(chat::message(None, vec![chat::tool_call(
        "send_message",
        json!({"to": "broker", "body": {"type": "spawn", "actor": "greeter", "wasm": "/actor/cargo/public/builds/1/greeter.wasm", "source": "/data/greeter"}, "wait_seconds": 60}),
    )])));
    fake.push_chat(chat::reply(chat::message(
        None,
        vec![chat::tool_call(
            "send_message",
            json!({"to": "greeter", "body": {"type": "text", "text": "hi"}, "wait_seconds": 10}),
        )],
    )));
    fake.push_chat(chat::text_reply("The greeter runs and says greetings."));
    let mut host = world.run();
    assert_eq!(
        ask(&mut host, "make me a greeter"),
        "The greeter runs and says greetings."
    );
    assert_eq!(
        world.json("sausage.json")["actors"]["greeter"]["version"],
        1
    );
    let requests = fake.requests();
    assert!(requests.iter().all(|r| r.path == "/v1/chat/completions"));
    assert!(requests[2].body.to_string().contains("built"));
    assert!(requests[4].body.to_string().contains("greetings"));
}

#[test]
fn anthropic_prompt_caching_means_a_long_turn_reads_its_history_from_the_cache() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "anthropic-messages");
    for _ in 0..6 {
        fake.push_anthropic(anthropic::reply(vec![anthropic::tool_use(
            "list_dir",
            json!({"path": "/data"}),
        )]));
    }
    fake.push_anthropic(anthropic::text_reply("Listed it six times."));
    let mut host = world.run();
    host.send("list /data six times");
    let reply = final_reply(&mut host);
    assert_eq!(reply["text"], "Listed it six times.");
    let usage = fake.usage_log();
    assert_eq!(usage.len(), 7);
    for (step, u) in usage.iter().enumerate().skip(1) {
        let read = u["cache_read_input_tokens"].as_u64().unwrap();
        let fresh = u["input_tokens"].as_u64().unwrap();
        assert!(
            read > 10 * fresh,
            "step {step} reads its prompt from the cache: {u}"
        );
    }
    let read: u64 = usage
        .iter()
        .map(|u| u["cache_read_input_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(reply["usage"]["cache_read_tokens"], read);
}

#[test]
fn a_scripts_await_waits_for_the_turns_answer_not_its_progress() {
    let fake = FakeLlm::start();
    fake.push_openai(openai::reply(vec![
        openai::message("Looking."),
        openai::function_call("list_dir", json!({"path": "/data"})),
    ]));
    fake.push_openai(openai::text_reply("Done looking."));
    fake.set_event_delay(Duration::from_millis(20));
    let world = world_with_agent(&fake, "openai-responses");
    world.install("echo", "echo");
    let mut host = world.run();
    host.send("look around");
    host.send("/await agent 120");
    host.send("@echo after the await");
    host.wait_for("echo's reply", |m| m.from == "echo");
    let seen: Vec<String> = host
        .take_all()
        .into_iter()
        .map(|m| m.body["type"].as_str().unwrap_or("").to_string())
        .collect();
    // Everything of the turn was printed before the line after /await ran.
    assert!(seen.contains(&"progress".to_string()), "{seen:?}");
    assert_eq!(seen.last().map(String::as_str), Some("text"), "{seen:?}");
}

// ---------------------------------------------------------------------------------------------
// Questions and goals (issue 11)

#[test]
fn a_question_is_answered_with_the_next_plain_line_at_the_console() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![openai::function_call(
        "ask",
        json!({"question": "Which colour should the counter print?", "choices": ["red", "blue"]}),
    )]));
    fake.push_openai(openai::text_reply("A blue counter, then."));
    let mut host = world.run();
    host.send("make me a counter");
    let question = host.wait_type("agent", "question");
    assert_eq!(question["choices"], json!(["red", "blue"]));
    host.send("blue");
    assert_eq!(final_reply(&mut host)["text"], "A blue counter, then.");
    assert_eq!(tool_outputs(&fake, 1), ["owner answered: blue"]);
    // The line was the answer, not a new turn.
    assert_eq!(fake.requests().len(), 2);
}

#[test]
fn a_question_is_still_open_after_the_agent_restarts_and_its_answer_finishes_the_turn() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "anthropic-messages");
    fake.push_anthropic(anthropic::reply(vec![anthropic::tool_use(
        "ask",
        json!({"question": "May I delete /data/old?"}),
    )]));
    fake.push_anthropic(anthropic::text_reply("Deleted it, as you said."));
    let mut host = world.run();
    host.send("clean up");
    host.wait_type("agent", "question");
    assert_eq!(
        host.request(json!({"type": "stop", "actor": "agent"}))["type"],
        "stopped"
    );
    assert_eq!(
        host.request(json!({"type": "start", "actor": "agent"}))["type"],
        "started"
    );
    host.send("yes, delete it");
    assert_eq!(final_reply(&mut host)["text"], "Deleted it, as you said.");
    let sent = fake.requests()[1].body.to_string();
    assert!(
        sent.contains("(asked before the agent restarted) owner answered: yes, delete it"),
        "{sent}"
    );
}

/// A `goal_status` call in the Responses shape.
fn status(status: &str, summary: &str) -> Value {
    openai::reply(vec![openai::function_call(
        "goal_status",
        json!({"status": status, "summary": summary}),
    )])
}

#[test]
fn a_goal_finishes_in_three_rounds_and_reports_each() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![
        openai::function_call(
            "plan",
            json!({"items": [{"text": "write", "done": false}, {"text": "test", "done": false}]}),
        ),
        openai::function_call(
            "goal_status",
            json!({"status": "blocked", "summary": "giving up early"}),
        ),
    ]));
    fake.push_openai(status("continue", "wrote the crate"));
    fake.push_openai(status("continue", "built it"));
    fake.push_openai(status("done", "tested it: it counts"));
    let mut host = world.run();
    host.tell(
        "agent",
        json!({"type": "goal", "text": "a counter actor", "max_rounds": 5}),
    );
    let started = host.wait_type("agent", "goal_started");
    assert_eq!(started["goal"], "g1");
    let plan = host.wait_type("agent", "plan");
    assert_eq!(plan["items"][0]["text"], "write");
    for (round, summary) in [
        (1, "wrote the crate"),
        (2, "built it"),
        (3, "tested it: it counts"),
    ] {
        let progress = host.wait_type("agent", "goal_progress");
        assert_eq!(
            (progress["round"].as_u64(), progress["summary"].as_str()),
            (Some(round), Some(summary))
        );
    }
    let done = host.wait_type("agent", "goal_done");
    assert_eq!(done["summary"], "tested it: it counts");
    // Round 1 tried to give up and was told to keep going.
    assert!(tool_outputs(&fake, 1)[1].starts_with("error: this is round 1;"));
}

#[test]
fn goal_stop_ends_a_goal_from_the_console() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    fake.push_openai(openai::reply(vec![openai::function_call(
        "wait_for_messages",
        json!({"seconds": 600}),
    )]));
    let mut host = world.run();
    host.tell("agent", json!({"type": "goal", "text": "wait for ever"}));
    host.wait_type("agent", "goal_started");
    host.wait_for("the round's tool", |m| m.body["type"] == "tool");
    host.tell("agent", json!({"type": "goal_stop", "goal": "g1"}));
    let stopped = host.wait_type("agent", "goal_stopped");
    assert_eq!(stopped["reason"], "stopped by console (goal_stop)");
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn a_goal_survives_an_upgrade_of_the_agent_in_the_middle_of_a_round() {
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    world.warm_cargo_for_agent();
    push_self_upgrade(&fake);
    fake.push_openai(status("done", "upgraded myself and came back"));
    let mut host = world.run();
    host.tell("agent", json!({"type": "goal", "text": "upgrade yourself"}));
    let done = host.wait_for_within(Duration::from_secs(900), "the goal's end", |m| {
        m.body["type"] == "goal_done"
    });
    assert_eq!(done.body["summary"], "upgraded myself and came back");
    assert_eq!(world.json("sausage.json")["actors"]["agent"]["version"], 2);
    let last = fake.requests()[3].body.to_string();
    assert!(last.contains("the round of goal g1"), "{last}");
    let goal = world.json("private/agent/data/goals/g1.json");
    assert_eq!(
        (goal["state"].as_str(), goal["rounds"].as_u64()),
        (Some("done"), Some(1))
    );
}
