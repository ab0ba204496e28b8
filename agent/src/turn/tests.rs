//! Tests of the turn state machine through [`ScriptedHost`]: messages and canned provider
//! answers in, the agent's messages, requests and saved files out.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::*;
use crate::testing::{Answer, ScriptedHost, temp_dir};

const OPENAI: &str =
    r#"{"api":"openai-responses","base_url":"http://model.test","model":"m","token":"t"}"#;
const ANTHROPIC: &str =
    r#"{"api":"anthropic-messages","base_url":"http://model.test","model":"m","token":"t"}"#;

fn world(config: Option<&str>) -> PathBuf {
    let dir = temp_dir("turn");
    if let Some(config) = config {
        std::fs::write(dir.join("config.json"), config).unwrap();
    }
    dir
}

fn run(data: &Path, events: Vec<Event>, answers: Vec<Answer>) -> ScriptedHost {
    run_as(data, events, answers, false)
}

fn run_as(data: &Path, events: Vec<Event>, answers: Vec<Answer>, candidate: bool) -> ScriptedHost {
    let host = ScriptedHost {
        events: events.into(),
        answers: answers.into(),
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, data, "agent", "2", candidate);
    agent.run();
    agent.host
}

/// The person the console and the web page speak for in these tests: the world's owner.
const OWNER: &str = "owner";

/// A message as the broker delivers it; from a surface (`console`, `web`) it speaks for the
/// owner, as the host sets it.
fn message(id: &str, from: &str, reply_to: Option<&str>, body: Value) -> Event {
    let surface = matches!(from, "console" | "web");
    Event::Message(Incoming {
        id: id.into(),
        from: from.into(),
        reply_to: reply_to.map(str::to_string),
        person: surface.then(|| OWNER.to_string()),
        tier: surface.then(|| "owner".to_string()),
        trace: None,
        body,
    })
}

fn text(id: &str, text: &str) -> Event {
    message(id, "console", None, json!({"type": "text", "text": text}))
}

fn openai_call(call_id: &str, name: &str, arguments: Value) -> Answer {
    ScriptedHost::ok(json!({"status": "completed", "output": [{
        "type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id,
        "name": name, "arguments": arguments.to_string(),
    }]}))
}

fn openai_text(text: &str) -> Answer {
    ScriptedHost::ok(json!({"status": "completed", "output": [{
        "type": "message", "id": "msg_1", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }]}))
}

fn body(request: &crate::message::HttpRequest) -> Value {
    serde_json::from_slice(&request.body).unwrap()
}

/// The one answer the host got, as (to, reply_to, text).
fn answers(host: &ScriptedHost) -> Vec<(String, String, String)> {
    host.sent
        .iter()
        .filter(|m| m.body["type"] == "text")
        .map(|m| {
            (
                m.to.clone().unwrap(),
                m.reply_to.clone().unwrap(),
                m.body["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A message from the console that replies to nothing.
fn from_console(id: &str, body: Value) -> Incoming {
    Incoming {
        id: id.into(),
        from: "console".into(),
        person: Some(OWNER.into()),
        tier: Some("owner".into()),
        body,
        ..Incoming::default()
    }
}

/// A text from the console that starts a turn.
fn message_of(id: &str, text: &str) -> Incoming {
    from_console(id, json!({"type": "text", "text": text}))
}

/// What the agent's `send_message` calls sent (not the messages about the turn).
fn tool_sends(host: &ScriptedHost) -> Vec<&Outgoing> {
    host.sent.iter().filter(|m| m.id.is_some()).collect()
}

fn history(data: &Path) -> History {
    history::load(&owners().history(data)).unwrap()
}

/// The owner's private conversation, where the console's texts speak.
fn owners() -> Conversation {
    Conversation::Person(OWNER.into())
}

#[test]
fn a_tool_call_then_its_result_then_the_final_text() {
    let data = world(Some(OPENAI));
    std::fs::write(data.join("note.txt"), "remember the milk").unwrap();
    let path = data.join("note.txt").display().to_string();
    let host = run(
        &data,
        vec![text("m-1", "what does my note say?")],
        vec![
            openai_call("call_1", "read_file", json!({"path": path})),
            openai_text("It says: remember the milk."),
        ],
    );
    assert_eq!(
        answers(&host),
        [(
            "console".into(),
            "m-1".into(),
            "It says: remember the milk.".into()
        )]
    );
    assert_eq!(host.requests.len(), 2);
    let second = body(&host.requests[1]);
    assert_eq!(
        second["input"][0],
        json!({"role": "user", "content": "Message m-1 from console:\nwhat does my note say?"})
    );
    assert_eq!(second["input"][1]["type"], "function_call");
    assert_eq!(
        second["input"][2],
        json!({"type": "function_call_output", "call_id": "call_1", "output": "remember the milk"})
    );
    assert!(!data.join("turn.json").exists(), "the turn is over");
    assert_eq!(history(&data).entries.len(), 4);
}

#[test]
fn the_conversation_is_told_as_a_person_reads_it_without_tool_output() {
    let data = world(Some(OPENAI));
    std::fs::write(data.join("note.txt"), "the secret content").unwrap();
    let path = data.join("note.txt").display().to_string();
    let host = run(
        &data,
        vec![
            text("m-1", "what does my note say?"),
            message("m-2", "web", None, json!({"type": "conversation"})),
        ],
        vec![
            openai_call("call_1", "read_file", json!({"path": path})),
            openai_text("It says what it says."),
        ],
    );
    let told = host
        .sent
        .iter()
        .find(|m| m.body["type"] == "conversation")
        .expect("an answer to the conversation request");
    assert_eq!(told.to.as_deref(), Some("web"));
    assert_eq!(told.reply_to.as_deref(), Some("m-2"));
    let entries = told.body["entries"].as_array().unwrap();
    assert_eq!(
        entries[0],
        json!({"role": "user", "id": "m-1", "from": "console", "text": "what does my note say?", "rewindable": false})
    );
    assert_eq!(entries[1]["role"], "tool");
    assert_eq!(entries[1]["name"], "read_file");
    assert_eq!(entries[2]["role"], "assistant");
    assert_eq!(entries[2]["text"], "It says what it says.");
    let kinds: Vec<&Value> = (entries[2]["steps"].as_array().unwrap().iter())
        .map(|step| &step["kind"])
        .collect();
    assert_eq!(kinds, ["model", "tool", "model"], "the turn's waterfall");
    assert_eq!(entries.len(), 3);
    assert!(!told.body.to_string().contains("secret content"));
}

#[test]
fn the_step_limit_ends_the_turn_with_what_was_done() {
    let data = world(Some(OPENAI));
    let calls = (0..50)
        .map(|n| openai_call(&format!("c{n}"), "list_dir", json!({"path": "/nowhere"})))
        .collect();
    let host = run(&data, vec![text("m-1", "loop")], calls);
    assert_eq!(host.requests.len() as u32, MAX_STEPS);
    let [(to, reply_to, words)] = &answers(&host)[..] else {
        panic!("one answer: {:?}", host.sent);
    };
    assert_eq!((to.as_str(), reply_to.as_str()), ("console", "m-1"));
    assert!(
        words.starts_with("I stopped: a turn may take at most 40 model steps"),
        "{words}"
    );
    assert_eq!(
        words.matches("- list_dir {\"path\":\"/nowhere\"}").count(),
        40,
        "{words}"
    );
    assert!(history(&data).open_calls().is_empty());
}

#[test]
fn without_configuration_the_answer_says_so() {
    let data = world(None);
    let host = run(&data, vec![text("m-1", "hello")], vec![]);
    let [(_, _, words)] = &answers(&host)[..] else {
        panic!("one answer: {:?}", host.sent);
    };
    assert!(words.starts_with("I am not configured yet"), "{words}");
    assert!(host.requests.is_empty());
}

#[test]
fn errors_of_the_provider_are_answered_in_words() {
    let data = world(Some(ANTHROPIC));
    let error =
        br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}"#;
    let host = run(
        &data,
        vec![text("m-1", "hi"), text("m-2", "hi again")],
        vec![
            ScriptedHost::refused(400, &[], serde_json::from_slice(error).unwrap()),
            Answer::Failed {
                why: "ErrorCode::ConnectionRefused".into(),
                retry: false,
            },
        ],
    );
    let words: Vec<String> = answers(&host).into_iter().map(|a| a.2).collect();
    assert!(
        words[0].starts_with("The model provider answered 400: max_tokens: too large"),
        "{}",
        words[0]
    );
    assert_eq!(
        words[1],
        "I could not reach the model provider at http://model.test: ErrorCode::ConnectionRefused"
    );
    assert_eq!(host.requests[0].url, "http://model.test/v1/messages");
}

#[test]
fn replies_start_no_turn_and_are_shown_at_the_next_one() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![
            message(
                "m-1",
                "notes",
                Some("agent/person.owner.t9"),
                json!({"type": "text", "text": "late reply"}),
            ),
            // A publication while idle is its actor's: the owner's conversation does not see it.
            message("m-2", "ticker", None, json!({"type": "tick", "n": 1})),
            text("m-3", "anything new?"),
        ],
        vec![openai_text("Yes.")],
    );
    assert_eq!(host.requests.len(), 1, "only m-3 started a turn");
    let input = &body(&host.requests[0])["input"];
    let notes = input[0]["content"].as_str().unwrap();
    assert!(
        notes.starts_with("Messages that arrived meanwhile:\n"),
        "{notes}"
    );
    assert!(notes.contains(r#"{"id":"m-1","from":"notes","reply_to":"agent/person.owner.t9","body":{"text":"late reply","type":"text"}}"#));
    assert!(!notes.contains(r#""type":"tick""#), "{notes}");
    assert_eq!(
        input[1]["content"],
        "Message m-3 from console:\nanything new?"
    );
    let inbox: Value = read_json(&data.join("inbox.json")).unwrap();
    assert_eq!(
        inbox["notes"][0]["conversation"],
        json!({"actor": "ticker"})
    );
}

#[test]
fn a_text_arriving_during_a_turn_gets_its_own_turn_after_it() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![
            text("m-1", "build it"),
            text("m-2", "and then?"),
            Event::TimedOut,
        ],
        vec![
            openai_call(
                "c1",
                "send_message",
                json!({"to": "cargo", "body": {"type": "build", "source": "/data/x"}, "wait_seconds": 5}),
            ),
            openai_text("Built."),
            openai_text("Then nothing."),
        ],
    );
    let replies: Vec<(String, String)> = answers(&host).into_iter().map(|a| (a.1, a.2)).collect();
    assert_eq!(
        replies,
        [
            ("m-1".into(), "Built.".into()),
            ("m-2".into(), "Then nothing.".into())
        ]
    );
    let sent = &tool_sends(&host)[0];
    assert_eq!(
        (sent.to.as_deref(), sent.id.as_deref()),
        (Some("cargo"), Some("person.owner.t1"))
    );
    let output = &body(&host.requests[1])["input"][2]["output"];
    assert_eq!(
        output,
        "sent as agent/person.owner.t1; no reply came within 5 s (it may still come: use wait_for_messages)"
    );
}

/// The self-upgrade path: a shutdown while `send_message` waits saves the turn; the next
/// instance waits on for the reply, gives it to the model, and answers the original message.
#[test]
fn a_shutdown_while_waiting_saves_the_turn_and_the_next_start_finishes_it() {
    let data = world(Some(OPENAI));
    let upgrade = json!({"type": "upgrade", "actor": "agent", "wasm": "/actor/cargo/public/builds/1/agent.wasm"});
    let checkpointed = json!({"type": "checkpointed", "turn": "m-1", "actor": "agent"});
    let host = run(
        &data,
        vec![
            text("m-1", "upgrade yourself"),
            message("m-2", "broker", Some("agent/person.owner.k1"), checkpointed),
            Event::Stop,
        ],
        vec![openai_call(
            "c1",
            "send_message",
            json!({"to": "broker", "body": upgrade, "wait_seconds": 60}),
        )],
    );
    assert!(answers(&host).is_empty(), "no answer yet");
    let sends = tool_sends(&host);
    assert_eq!(
        sends[0].body["type"], "checkpoint",
        "kept first, for a rewind"
    );
    assert_eq!(sends[1].id.as_deref(), Some("person.owner.t2"));
    let saved: SavedTurn = read_json(&data.join("turn.json")).expect("turn.json");
    assert_eq!((saved.message.id.as_str(), saved.steps), ("m-1", 1));
    assert_eq!(
        saved.waiting,
        Some(Waiting {
            call_id: "c1".into(),
            reply_to: "agent/person.owner.t2".into(),
            seconds: 60,
            question: false,
            until: None,
            to: Some("broker".into()),
        })
    );
    assert_eq!(history(&data).open_calls(), ["c1"]);

    let upgraded = json!({"type": "upgraded", "actor": "agent", "version": 2, "previous": 1});
    let host = run(
        &data,
        vec![message(
            "m-9",
            "broker",
            Some("agent/person.owner.t2"),
            upgraded,
        )],
        vec![openai_text("I upgraded myself to version 2.")],
    );
    assert_eq!(
        answers(&host),
        [(
            "console".into(),
            "m-1".into(),
            "I upgraded myself to version 2.".into()
        )]
    );
    // The wait goes on for the time the model asked (less the moment it took to get there).
    assert!(
        host.waits[0].is_some_and(|w| w > Duration::from_secs(59)),
        "{:?}",
        host.waits
    );
    let input = body(&host.requests[0])["input"].clone();
    let output = input[2]["output"].as_str().unwrap();
    assert!(
        output.starts_with("The agent restarted while waiting for this reply"),
        "{output}"
    );
    assert!(output.contains(r#""type":"upgraded""#), "{output}");
    let note = input[3]["content"].as_str().unwrap();
    assert!(
        note.starts_with("(You restarted") && note.contains("version 2"),
        "{note}"
    );
    assert!(!data.join("turn.json").exists());
    // The id counter survived the restart (the checkpoint was 1, the upgrade 2).
    assert_eq!(history(&data).sent, 2);
}

#[test]
fn a_call_cut_off_by_a_kill_gets_an_interrupted_result() {
    let data = world(Some(ANTHROPIC));
    let saved = History {
        sent: 0,
        entries: vec![
            Entry::user("Message m-4 from console:\nwrite it"),
            Entry::ToolCall {
                id: "toolu_1".into(),
                name: "write_file".into(),
                arguments: json!({"path": "/data/x", "content": "x"}),
                item_id: None,
            },
        ],
    };
    // A turn saved by an agent from before people finishes in the one history it had.
    history::save(&data.join("history.json"), &saved).unwrap();
    let turn = SavedTurn {
        steps: 1,
        done: vec!["write_file {…}".into()],
        ..SavedTurn::new(message_of("m-4", "write it"), Conversation::Legacy)
    };
    write_json(&data.join("turn.json"), &turn).unwrap();
    let done = ScriptedHost::ok(
        json!({"type": "message", "stop_reason": "end_turn", "content": [{"type": "text", "text": "Written."}]}),
    );
    let host = run(&data, vec![], vec![done]);
    assert_eq!(
        answers(&host),
        [("console".into(), "m-4".into(), "Written.".into())]
    );
    let messages = &body(&host.requests[0])["messages"];
    assert_eq!(
        messages[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": INTERRUPTED})
    );
    assert!(
        messages[2]["content"][1]["text"]
            .as_str()
            .unwrap()
            .starts_with("(You restarted")
    );
}

#[test]
fn a_candidate_leaves_the_saved_turn_alone_and_answers_without_network() {
    let data = world(Some(OPENAI));
    let turn = SavedTurn {
        steps: 3,
        ..SavedTurn::new(message_of("m-4", "x"), owners())
    };
    write_json(&data.join("turn.json"), &turn).unwrap();
    let no_network = Answer::Failed {
        why: "this instance is a candidate under test".into(),
        retry: false,
    };
    let hello = message(
        "t-1",
        "test",
        None,
        json!({"type": "text", "text": "hello"}),
    );
    let host = run_as(&data, vec![hello], vec![no_network], true);
    let [(to, _, words)] = &answers(&host)[..] else {
        panic!("one answer: {:?}", host.sent);
    };
    assert_eq!(to, "test");
    assert!(
        words.starts_with("I could not reach the model provider"),
        "{words}"
    );
    // A transcript expects the answer as the candidate's next message: it asks nobody first.
    assert!(
        host.sent.iter().all(|m| m.to.as_deref() == Some("test")),
        "{:?}",
        host.sent
    );
}

#[test]
fn the_api_can_change_between_two_turns() {
    let data = world(Some(OPENAI));
    let reasoning =
        json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA", "summary": []});
    let first = ScriptedHost::ok(
        json!({"output": [reasoning, {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": "Hi."}]}]}),
    );
    run(&data, vec![text("m-1", "hi")], vec![first]);
    std::fs::write(data.join("config.json"), ANTHROPIC).unwrap();
    let second = ScriptedHost::ok(
        json!({"content": [{"type": "text", "text": "Still here."}], "stop_reason": "end_turn"}),
    );
    let host = run(&data, vec![text("m-2", "still there?")], vec![second]);
    assert_eq!(answers(&host)[0].2, "Still here.");
    let request = &host.requests[0];
    assert_eq!(request.url, "http://model.test/v1/messages");
    let roles: Vec<String> = body(request)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert!(!body(request).to_string().contains("gAAAA"));
}

#[test]
fn an_unknown_tool_and_bad_arguments_are_told_to_the_model() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![text("m-1", "go")],
        vec![
            openai_call("c1", "launch_rocket", json!({})),
            openai_call(
                "c2",
                "send_message",
                json!({"to": "Not An Id", "body": {"type": "x"}}),
            ),
            openai_text("Done."),
        ],
    );
    let input = &body(&host.requests[2])["input"];
    assert!(
        input[2]["output"]
            .as_str()
            .unwrap()
            .starts_with("error: there is no tool `launch_rocket`; the tools are send_message,")
    );
    assert!(
        input[4]["output"]
            .as_str()
            .unwrap()
            .contains("is not an actor id")
    );
    // Nothing was sent to an actor: only the turn's messages, and its spans to the broker.
    assert!(
        host.sent
            .iter()
            .all(|m| m.to.as_deref() == Some("console") || m.body["type"] == "spans")
    );
}

// ---------------------------------------------------------------------------------------------
// Streaming, progress, retries, budgets, context, stop and resume (DESIGN §12)

fn openai_reply(output: Value, input_tokens: u64, output_tokens: u64) -> Answer {
    ScriptedHost::ok(json!({"status": "completed", "output": output, "usage": {
        "input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens,
    }}))
}

fn config_with(extra: Value) -> String {
    let mut config: Value = serde_json::from_str(OPENAI).unwrap();
    for (key, value) in extra.as_object().unwrap() {
        config[key] = value.clone();
    }
    config.to_string()
}

/// Everything the agent sent about the turn `m-1`, as (type, body).
fn turn_messages(host: &ScriptedHost) -> Vec<(String, Value)> {
    host.sent
        .iter()
        .filter(|m| m.reply_to.as_deref() == Some("m-1"))
        .map(|m| {
            assert_eq!(
                m.body["turn"], "m-1",
                "every turn message names its turn: {m:?}"
            );
            assert_eq!(m.to.as_deref(), Some("console"));
            (m.body["type"].as_str().unwrap().to_string(), m.body.clone())
        })
        .collect()
}

fn the_final(host: &ScriptedHost) -> Value {
    let finals: Vec<Value> = turn_messages(host)
        .into_iter()
        .filter(|(kind, _)| kind == "text")
        .map(|(_, body)| body)
        .collect();
    assert_eq!(finals.len(), 1, "one final reply: {:?}", host.sent);
    finals[0].clone()
}

#[test]
fn progress_and_tool_messages_reach_the_sender_in_order() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![text("m-1", "what is in /nowhere?")],
        vec![
            ScriptedHost::ok(json!({"status": "completed", "output": [
                {"type": "message", "id": "msg_1", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
                {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "list_dir",
                 "arguments": "{\"path\":\"/nowhere\"}"},
            ]})),
            openai_text("Nothing is there."),
        ],
    );
    let messages = turn_messages(&host);
    let kinds: Vec<&str> = messages.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        ["progress", "tool", "tool", "progress", "text"],
        "{messages:?}"
    );
    assert_eq!(messages[0].1["text"], "Let me look.");
    assert_eq!(
        messages[1].1,
        json!({"type": "tool", "turn": "m-1", "tool": "list_dir", "state": "started",
               "preview": "/nowhere", "for": "owner"})
    );
    let finished = &messages[2].1;
    assert_eq!(
        (finished["state"].as_str(), finished["ok"].as_bool()),
        (Some("finished"), Some(false))
    );
    assert!(finished["seconds"].as_f64().unwrap() >= 0.0);
    assert_eq!(messages[3].1["text"], "Nothing is there.");
    assert_eq!(messages[4].1["text"], "Nothing is there.");
    // Every request streams.
    assert!(host.requests.iter().all(|r| body(r)["stream"] == true));
}

#[test]
fn progress_is_batched_to_one_message_per_interval() {
    let mut progress = Progress {
        pending: String::new(),
        last: None,
    };
    let start = Instant::now();
    progress.pending.push_str("Hel");
    assert_eq!(progress.due(start).as_deref(), Some("Hel"));
    progress.pending.push_str("lo, ");
    assert_eq!(progress.due(start + PROGRESS_INTERVAL / 2), None);
    progress.pending.push_str("world");
    assert_eq!(
        progress.due(start + PROGRESS_INTERVAL).as_deref(),
        Some("lo, world")
    );
    assert_eq!(
        progress.due(start + PROGRESS_INTERVAL * 3),
        None,
        "nothing pending"
    );
}

#[test]
fn previews_say_what_a_call_does_in_80_characters_without_content() {
    let long = "x".repeat(300);
    assert_eq!(
        preview(
            "write_file",
            &json!({"path": "/data/a.rs", "content": "fn main() {}"})
        ),
        "/data/a.rs (12 bytes)"
    );
    assert_eq!(
        preview(
            "send_message",
            &json!({"to": "cargo", "body": {"type": "build"}, "wait_seconds": 900})
        ),
        "cargo build (waits up to 900 s)"
    );
    assert_eq!(
        preview("copy_dir", &json!({"from": "/a", "to": "/b"})),
        "/a → /b"
    );
    let cut = preview("read_file", &json!({"path": format!("/data/{long}")}));
    assert_eq!(cut.chars().count(), PREVIEW_CHARS);
    assert!(!preview("write_file", &json!({"path": "/p", "content": long})).contains("xxx"));
}

#[test]
fn a_429_is_retried_after_its_retry_after_and_the_turn_finishes() {
    let data = world(Some(ANTHROPIC));
    let limited = json!({"type": "error", "error": {"type": "rate_limit_error",
        "message": "Number of request tokens has exceeded your per-minute rate limit"}});
    let host = run(
        &data,
        vec![text("m-1", "hi"), Event::TimedOut],
        vec![
            ScriptedHost::refused(429, &[("retry-after", "7")], limited),
            ScriptedHost::ok(json!({"type": "message", "role": "assistant",
                "content": [{"type": "text", "text": "Hello after the wait."}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 5}})),
        ],
    );
    assert_eq!(host.requests.len(), 2);
    let final_reply = the_final(&host);
    assert_eq!(final_reply["text"], "Hello after the wait.");
    let waited = turn_messages(&host)
        .into_iter()
        .find(|(kind, body)| kind == "progress" && body["text"].as_str().unwrap().contains("429"))
        .expect("a progress line says it waits");
    assert!(
        waited.1["text"].as_str().unwrap().contains("7 s"),
        "{waited:?}"
    );
    // The pause honoured retry-after.
    assert!(
        host.waits
            .iter()
            .flatten()
            .any(|w| *w > Duration::from_millis(6900) && *w <= Duration::from_secs(7)),
        "{:?}",
        host.waits
    );
}

#[test]
fn retries_give_up_after_three_and_cap_the_wait_at_60_seconds() {
    let data = world(Some(OPENAI));
    let busy = json!({"error": {"message": "The server is overloaded", "type": "server_error",
        "param": null, "code": null}});
    let answers = (0..4)
        .map(|_| ScriptedHost::refused(503, &[("retry-after", "3600")], busy.clone()))
        .collect();
    let host = run(
        &data,
        vec![
            text("m-1", "hi"),
            Event::TimedOut,
            Event::TimedOut,
            Event::TimedOut,
        ],
        answers,
    );
    assert_eq!(host.requests.len() as u32, 1 + MAX_RETRIES);
    let words = the_final(&host)["text"].as_str().unwrap().to_string();
    assert!(
        words.starts_with("The model provider answered 503"),
        "{words}"
    );
    assert_eq!(
        host.waits
            .iter()
            .flatten()
            .filter(|w| **w > MAX_RETRY_WAIT - Duration::from_millis(100) && **w <= MAX_RETRY_WAIT)
            .count(),
        3,
        "{:?}",
        host.waits
    );
}

#[test]
fn usage_is_priced_and_the_turns_budget_stops_it() {
    let config = config_with(json!({
        "prices": {"m": {"input": 1000.0, "output": 2000.0, "cache_read": 100.0}},
        "max_turn_usd": 1.5,
    }));
    let data = world(Some(&config));
    let call = json!([{"type": "function_call", "id": "fc_1", "call_id": "c1",
        "name": "list_dir", "arguments": "{\"path\":\"/nowhere\"}"}]);
    let host = run(
        &data,
        vec![text("m-1", "loop")],
        vec![
            openai_reply(call.clone(), 1000, 100),
            openai_reply(call.clone(), 1000, 100),
            openai_reply(call, 1000, 100),
        ],
    );
    // Each step costs $1.00 input + $0.20 output: after two steps the turn is past $1.50.
    assert_eq!(host.requests.len(), 2);
    let reply = the_final(&host);
    assert_eq!(reply["stopped"], "budget");
    assert_eq!(
        reply["usage"],
        json!({"input_tokens": 2000, "output_tokens": 200, "cache_read_tokens": 0,
               "cache_write_tokens": 0, "cost_usd": 2.4})
    );
    assert!(
        reply["text"].as_str().unwrap().contains("max_turn_usd"),
        "{reply}"
    );
    let spend: Value =
        serde_json::from_slice(&std::fs::read(data.join("spend.json")).unwrap()).unwrap();
    assert!(
        (spend["usd"].as_f64().unwrap() - 2.4).abs() < 1e-9,
        "{spend}"
    );
}

#[test]
fn past_the_days_cap_a_turn_is_answered_with_when_it_resets() {
    let config = config_with(json!({"prices": {"m": {"input": 1.0, "output": 1.0}},
        "max_day_usd": 10}));
    let data = world(Some(&config));
    let now = std::time::UNIX_EPOCH + Duration::from_secs(1_796_083_200 + 22 * 3600);
    std::fs::write(
        data.join("spend.json"),
        json!({"day": "2026-12-01", "usd": 10.5, "people": {"owner": {"usd": 10.5}}}).to_string(),
    )
    .unwrap();
    let host = ScriptedHost {
        events: vec![text("m-1", "hi")].into(),
        clock: Some(now),
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, &data, "agent", "2", false);
    agent.run();
    let host = agent.host;
    assert!(host.requests.is_empty());
    let reply = the_final(&host);
    assert_eq!(reply["stopped"], "budget");
    let words = reply["text"].as_str().unwrap();
    assert!(
        words.contains("$10.50") && words.contains("max_day_usd"),
        "{words}"
    );
    assert!(words.contains("in 2 h 00 min"), "{words}");
}

#[test]
fn a_model_without_a_price_counts_tokens_and_its_cost_is_unknown() {
    let data = world(Some(&config_with(json!({"model": "my-local-model"}))));
    let host = run(
        &data,
        vec![text("m-1", "hi")],
        vec![openai_reply(
            json!([{"type": "message", "id": "msg_1", "role": "assistant",
            "content": [{"type": "output_text", "text": "Hi.", "annotations": []}]}]),
            40,
            2,
        )],
    );
    let usage = the_final(&host)["usage"].clone();
    assert_eq!(usage["input_tokens"], 40);
    assert_eq!(usage["cost_usd"], Value::Null);
}

#[test]
fn a_stop_drops_the_model_request_at_once_and_runs_no_tool_call_of_its_answer() {
    let data = world(Some(OPENAI));
    // The stop arrives while the second request streams: the first step's call ran, the second
    // answer's call (which could have been a deploy) is never read, so never run.
    let stop = from_console("m-2", json!({"type": "stop", "turn": "m-1"}));
    let host = ScriptedHost {
        events: vec![text("m-1", "loop")].into(),
        answers: vec![
            openai_call("c0", "list_dir", json!({"path": "/nowhere"})),
            openai_call("c1", "note", json!({"text": "deployed"})),
            openai_text("never asked"),
        ]
        .into(),
        arrivals: vec![(1, stop)],
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, &data, "agent", "2", false);
    agent.run();
    let host = agent.host;
    assert_eq!(host.requests.len(), 2, "no request after the stop");
    let reply = the_final(&host);
    assert_eq!(reply["stopped"], "stop");
    assert!(
        reply["text"].as_str().unwrap().contains("list_dir"),
        "{reply}"
    );
    assert!(
        !data.join("notes.md").exists(),
        "the call that came after the stop ran"
    );
    let history = history(&data);
    assert!(history.open_calls().is_empty());
    assert!(
        !history
            .entries
            .iter()
            .any(|e| matches!(e, Entry::ToolCall { id, .. } if id == "c1")),
        "the dropped answer's call reached the history"
    );
}

#[test]
fn a_stop_for_no_running_turn_is_answered() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![message(
            "m-5",
            "console",
            None,
            json!({"type": "stop", "turn": "m-4"}),
        )],
        vec![],
    );
    assert_eq!(host.sent.len(), 1);
    assert_eq!(host.sent[0].reply_to.as_deref(), Some("m-5"));
    assert!(
        host.sent[0].body["reason"]
            .as_str()
            .unwrap()
            .contains("no turn m-4")
    );
}

/// A history of `turns` old turns, each with a tool output of `bytes` bytes.
fn long_history(data: &Path, turns: usize, bytes: usize) {
    let mut entries = Vec::new();
    for n in 0..turns {
        entries.push(Entry::user(format!(
            "Message m-old{n} from console:\nread file {n}"
        )));
        entries.push(Entry::ToolCall {
            id: format!("old{n}"),
            name: "read_file".into(),
            arguments: json!({"path": format!("/data/f{n}")}),
            item_id: None,
        });
        entries.push(Entry::ToolResult {
            id: format!("old{n}"),
            output: "y".repeat(bytes),
        });
        entries.push(Entry::assistant(format!("file {n} is all y")));
    }
    history::save(&data.join("history.json"), &History { sent: 0, entries }).unwrap();
}

#[test]
fn a_history_past_85_percent_of_the_window_is_compacted_before_the_request() {
    let data = world(Some(&config_with(
        json!({"context_window": 20_000, "max_tokens": 1000}),
    )));
    // One old message too big to be shortened away: 60 KB of text in a user entry.
    long_history(&data, 3, 1000);
    let mut h = history(&data);
    h.entries.insert(0, Entry::user("z".repeat(60_000)));
    history::save(&data.join("history.json"), &h).unwrap();
    let host = run(
        &data,
        vec![text("m-1", "and now?")],
        vec![
            openai_text("SUMMARY: files 0 to 2 are all y; the person likes short answers."),
            openai_text("Still here."),
        ],
    );
    assert_eq!(the_final(&host)["text"], "Still here.");
    let summary_request = body(&host.requests[0]);
    assert!(
        summary_request.get("tools").is_none(),
        "no tools for the summary"
    );
    assert!(
        summary_request["instructions"]
            .as_str()
            .unwrap()
            .contains("handoff summary")
    );
    let sent = body(&host.requests[1]).to_string();
    assert!(sent.contains("SUMMARY: files 0 to 2"), "{sent}");
    assert!(sent.contains("and now?"));
    assert!(!sent.contains("zzzzzzzzzz"), "the old part is gone");
    let kept = history(&data);
    let summaries = kept
        .entries
        .iter()
        .filter(|e| matches!(e, Entry::Summary { .. }))
        .count();
    assert_eq!(summaries, 1);
    assert!(body(&host.requests[1]).to_string().len() < 20_000 * 3);
}

#[test]
fn a_context_too_long_error_compacts_and_retries_once() {
    let data = world(Some(OPENAI));
    long_history(&data, 4, 100);
    let too_long = json!({"error": {"message": "Your input exceeds the context window of this \
        model. Please adjust your input and try again.", "type": "invalid_request_error",
        "param": "input", "code": "context_length_exceeded"}});
    let host = run(
        &data,
        vec![text("m-1", "go on"), text("m-2", "again")],
        vec![
            ScriptedHost::refused(400, &[], too_long.clone()),
            openai_text("SUMMARY of it all."),
            openai_text("Done after compacting."),
            ScriptedHost::refused(400, &[], too_long.clone()),
            openai_text("SUMMARY again."),
            ScriptedHost::refused(400, &[], too_long),
        ],
    );
    let words: Vec<String> = answers(&host).into_iter().map(|a| a.2).collect();
    assert_eq!(words[0], "Done after compacting.");
    assert!(
        words[1].contains("context window") || words[1].contains("400"),
        "a second refusal after compacting ends the turn in words: {}",
        words[1]
    );
    assert_eq!(host.requests.len(), 6);
}

#[test]
fn a_turn_resumed_three_times_without_a_step_ends_in_words() {
    let data = world(Some(OPENAI));
    let saved = SavedTurn {
        steps: 1,
        done: vec!["list_dir {\"path\":\"/\"}".into()],
        resumes: MAX_RESUMES - 1,
        ..SavedTurn::new(message_of("m-1", "crash me"), owners())
    };
    write_json(&data.join("turn.json"), &saved).unwrap();
    let host = run(&data, vec![], vec![]);
    assert!(host.requests.is_empty(), "no paid request is repeated");
    let words = the_final(&host)["text"].as_str().unwrap().to_string();
    assert!(words.contains("restarted 3 times"), "{words}");
    assert!(!data.join("turn.json").exists());

    // One resume short of the limit goes on, and counts the resume before it asks.
    let saved = SavedTurn {
        resumes: 0,
        ..saved
    };
    write_json(&data.join("turn.json"), &saved).unwrap();
    let host = run(&data, vec![], vec![Answer::Stopped]);
    assert_eq!(host.requests.len(), 1);
    let again: SavedTurn = read_json(&data.join("turn.json")).unwrap();
    assert_eq!(again.resumes, 1);
}

#[test]
fn an_unreadable_saved_turn_is_answered_in_words() {
    let data = world(Some(OPENAI));
    std::fs::write(
        data.join("turn.json"),
        r#"{"message": {"id": "m-1", "from": "console", "body": {"type": "text", "text": "x"}},
            "steps": "many"}"#,
    )
    .unwrap();
    let host = run(&data, vec![], vec![]);
    let words = the_final(&host)["text"].as_str().unwrap().to_string();
    assert!(words.contains("could not read the turn"), "{words}");
    assert!(data.join("turn-unreadable.json").exists());
    assert!(!data.join("turn.json").exists());
}

#[test]
fn a_stop_that_crossed_its_turns_answer_is_taken_silently() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![
            text("m-1", "hi"),
            message(
                "m-2",
                "console",
                None,
                json!({"type": "stop", "turn": "m-1"}),
            ),
        ],
        vec![openai_text("Hello.")],
    );
    assert_eq!(the_final(&host)["text"], "Hello.");
    assert!(
        host.sent.iter().all(|m| m.body["type"] != "error"),
        "{:?}",
        host.sent
    );
}

/// Hundreds of tool calls with big outputs, over many turns, against a model that refuses any
/// request past its window (counted as the fake provider counts: 4 bytes a token): every turn is
/// answered, no request is ever refused, and the history holds one summary.
#[test]
fn a_long_session_of_big_tool_outputs_keeps_within_the_window() {
    const WINDOW: usize = 40_000;
    const TURNS: usize = 8;
    const CALLS: usize = 30;
    let data = world(Some(&config_with(
        json!({"context_window": WINDOW, "max_tokens": 2000}),
    )));
    let big: String = (0..400)
        .map(|n| format!("line {n} of a long log\n"))
        .collect();
    std::fs::write(data.join("big.log"), &big).unwrap();
    let path = data.join("big.log").display().to_string();
    let refused = std::rc::Rc::new(std::cell::Cell::new(0));
    let (counted, mut calls) = (refused.clone(), 0);
    let respond = move |request: &crate::message::HttpRequest| {
        let tokens = request.body.len() / 4;
        if tokens + 2000 > WINDOW {
            counted.set(counted.get() + 1);
            return ScriptedHost::refused(
                400,
                &[],
                json!({"error": {"message": "Your input \
                exceeds the context window of this model.", "type": "invalid_request_error",
                "param": "input", "code": "context_length_exceeded"}}),
            );
        }
        let sent = body(request);
        let output = if sent.get("tools").is_none() {
            json!([{"type": "message", "id": "msg_s", "role": "assistant", "content": [
                {"type": "output_text", "text": "SUMMARY: read big.log many times.", "annotations": []}]}])
        } else if calls % CALLS == CALLS - 1 {
            calls += 1;
            json!([{"type": "message", "id": "msg_t", "role": "assistant", "content": [
                {"type": "output_text", "text": "Read it all.", "annotations": []}]}])
        } else {
            calls += 1;
            json!([{"type": "function_call", "id": format!("fc_{calls}"), "call_id": format!("c{calls}"),
                "name": "read_file", "arguments": json!({"path": path}).to_string()}])
        };
        openai_reply(output, tokens as u64, 20)
    };
    let host = ScriptedHost {
        events: (0..TURNS)
            .map(|n| text(&format!("m-{n}"), "read big.log again"))
            .collect(),
        respond: Some(Box::new(respond)),
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, &data, "agent", "2", false);
    agent.run();
    let words: Vec<String> = answers(&agent.host).into_iter().map(|a| a.2).collect();
    assert_eq!(words, vec!["Read it all.".to_string(); TURNS]);
    assert_eq!(
        refused.get(),
        0,
        "the agent compacted before the window, never after"
    );
    let kept = history(&data);
    let summaries = kept
        .entries
        .iter()
        .filter(|e| matches!(e, Entry::Summary { .. }))
        .count();
    assert_eq!(summaries, 1);
}

// ---------------------------------------------------------------------------------------------
// The to-do card, notes, questions and goals (DESIGN §12)

fn call_reply(calls: &[(&str, Value)]) -> Answer {
    let output: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(n, (name, arguments))| {
            json!({"type": "function_call", "id": format!("fc_{name}{n}"),
                   "call_id": format!("call_{name}_{n}_{}", arguments.to_string().len()),
                   "name": name, "arguments": arguments.to_string()})
        })
        .collect();
    ScriptedHost::ok(json!({"status": "completed", "output": output}))
}

/// The outputs of every tool call the `n`-th request sent back, in order.
fn tool_outputs(host: &ScriptedHost, n: usize) -> Vec<String> {
    body(&host.requests[n])["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "function_call_output")
        .map(|item| item["output"].as_str().unwrap().to_string())
        .collect()
}

/// The bodies the agent sent of this type.
fn sent_of(host: &ScriptedHost, kind: &str) -> Vec<Value> {
    host.sent
        .iter()
        .filter(|m| m.body["type"] == kind)
        .map(|m| m.body.clone())
        .collect()
}

#[test]
fn the_plan_goes_to_the_person_when_it_changes_and_bad_cards_are_refused() {
    let data = world(Some(OPENAI));
    let card = json!({"items": [{"text": "write", "done": true}, {"text": "test", "done": false}]});
    let host = run(
        &data,
        vec![text("m-1", "work")],
        vec![
            call_reply(&[("plan", card.clone())]),
            call_reply(&[
                ("plan", card.clone()),
                ("plan", json!({"items": [{"text": "", "done": false}]})),
                ("plan", json!({"items": "write"})),
            ]),
            openai_text("Planned."),
        ],
    );
    let plans = sent_of(&host, "plan");
    assert_eq!(
        plans.len(),
        1,
        "the same card twice is sent once: {plans:?}"
    );
    assert_eq!(plans[0]["items"], card["items"]);
    assert_eq!(plans[0]["turn"], "m-1");
    let outputs = tool_outputs(&host, 2);
    assert_eq!(outputs[0], "the card has 2 items, 1 done");
    assert!(
        outputs[2].starts_with("error: item 0 needs a `text`"),
        "{outputs:?}"
    );
    assert!(
        outputs[3].starts_with("error: `items` must be an array"),
        "{outputs:?}"
    );
}

#[test]
fn notes_are_kept_and_shown_in_every_request() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![text("m-1", "remember"), text("m-2", "and now?")],
        vec![
            call_reply(&[
                ("note", json!({"text": "the person likes short answers"})),
                ("note", json!({"text": ""})),
            ]),
            openai_text("Noted."),
            openai_text("Short."),
        ],
    );
    let notes = std::fs::read_to_string(data.join("notes.md")).unwrap();
    assert_eq!(notes, "- the person likes short answers\n");
    let outputs = tool_outputs(&host, 1);
    assert!(
        outputs[0].starts_with("noted in /data/notes.md"),
        "{outputs:?}"
    );
    assert!(outputs[1].starts_with("error: `text`"), "{outputs:?}");
    let instructions = body(&host.requests[2])["instructions"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        instructions.contains("## Your notes"),
        "the notes are shown"
    );
    assert!(instructions.contains("the person likes short answers"));
    assert!(
        !body(&host.requests[0])["instructions"]
            .as_str()
            .unwrap()
            .contains("## Your notes")
    );
}

fn answer(id: &str, question: &str, text: &str) -> Event {
    message(
        id,
        "console",
        Some(question),
        json!({"type": "answer", "text": text}),
    )
}

#[test]
fn a_question_waits_for_its_answer_and_the_answer_reaches_the_model() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![
            text("m-1", "make a counter"),
            // A text that is no answer is kept for its own turn; the answer ends the wait.
            text("m-2", "also, hello"),
            answer("m-3", "agent/person.owner.q1", "blue"),
        ],
        vec![
            call_reply(&[(
                "ask",
                json!({"question": "Which colour?", "choices": ["red", "blue"]}),
            )]),
            openai_text("Blue it is."),
            openai_text("Hello."),
        ],
    );
    let question = host
        .sent
        .iter()
        .find(|m| m.body["type"] == "question")
        .unwrap();
    assert_eq!(question.id.as_deref(), Some("person.owner.q1"));
    assert_eq!(question.to.as_deref(), Some("console"));
    assert_eq!(question.reply_to.as_deref(), Some("m-1"));
    assert_eq!(
        question.body,
        json!({"type": "question", "turn": "m-1", "text": "Which colour?", "choices": ["red", "blue"], "for": "owner"})
    );
    assert_eq!(tool_outputs(&host, 1), ["owner answered: blue"]);
    let replies: Vec<(String, String)> = answers(&host).into_iter().map(|a| (a.1, a.2)).collect();
    assert_eq!(
        replies,
        [
            ("m-1".into(), "Blue it is.".into()),
            ("m-2".into(), "Hello.".into())
        ]
    );
    assert!(
        host.waits
            .iter()
            .flatten()
            .any(|w| *w > QUESTION_WAIT - Duration::from_secs(1)),
        "{:?}",
        host.waits
    );
}

#[test]
fn a_question_is_still_waited_for_after_a_restart_and_answered() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![text("m-1", "make a counter"), Event::Stop],
        vec![call_reply(&[("ask", json!({"question": "Which colour?"}))])],
    );
    assert!(answers(&host).is_empty());
    let saved: SavedTurn = read_json(&data.join("turn.json")).unwrap();
    let waiting = saved.waiting.unwrap();
    assert!(waiting.question && waiting.until.is_some(), "{waiting:?}");

    let host = run(
        &data,
        vec![answer("m-5", "agent/person.owner.q1", "green")],
        vec![openai_text("Green it is.")],
    );
    assert_eq!(answers(&host)[0].2, "Green it is.");
    let output = &tool_outputs(&host, 0)[0];
    assert_eq!(
        output,
        "(asked before the agent restarted) owner answered: green"
    );
    // The wait went on for what was left of the 24 hours, not for 24 more.
    let waited = host.waits[0].unwrap();
    assert!(waited <= QUESTION_WAIT && waited > QUESTION_WAIT - Duration::from_secs(60));
}

#[test]
fn a_question_without_an_answer_in_24_hours_lets_the_model_decide() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![text("m-1", "make a counter")],
        vec![
            call_reply(&[
                ("ask", json!({"question": "Which colour?"})),
                ("ask", json!({"question": "", "choices": []})),
            ]),
            openai_text("I chose red."),
        ],
    );
    let outputs = tool_outputs(&host, 1);
    assert!(
        outputs[0].contains("no answer to agent/person.owner.q1 came within 24 hours"),
        "{outputs:?}"
    );
    assert!(outputs[1].starts_with("error: `question`"), "{outputs:?}");
}

fn goal(id: &str, extra: Value) -> Event {
    let mut body = json!({"type": "goal", "text": "a counter actor with tests"});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    message(id, "console", None, body)
}

fn status(status: &str, summary: &str) -> Answer {
    call_reply(&[("goal_status", json!({"status": status, "summary": summary}))])
}

/// The goal messages the agent sent, as (type, round or "", summary or reason).
fn goal_messages(host: &ScriptedHost) -> Vec<(String, String, String)> {
    host.sent
        .iter()
        .filter(|m| m.body["type"].as_str().unwrap_or("").starts_with("goal_"))
        .map(|m| {
            let b = &m.body;
            let words = b["summary"].as_str().or(b["reason"].as_str()).unwrap_or("");
            (
                b["type"].as_str().unwrap().into(),
                b["round"].to_string(),
                words.into(),
            )
        })
        .collect()
}

#[test]
fn a_goal_finishes_in_three_rounds_with_progress_after_each() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![goal("m-1", json!({}))],
        vec![
            status("continue", "wrote the crate"),
            status("continue", "built and tested it"),
            status("done", "the counter runs and its tests pass"),
        ],
    );
    assert_eq!(
        goal_messages(&host),
        [
            ("goal_started".into(), "null".into(), "".into()),
            ("goal_progress".into(), "1".into(), "wrote the crate".into()),
            (
                "goal_progress".into(),
                "2".into(),
                "built and tested it".into()
            ),
            (
                "goal_progress".into(),
                "3".into(),
                "the counter runs and its tests pass".into()
            ),
            (
                "goal_done".into(),
                "null".into(),
                "the counter runs and its tests pass".into()
            ),
        ]
    );
    assert!(
        host.sent
            .iter()
            .filter(|m| m.body["type"].as_str().unwrap().starts_with("goal_"))
            .all(|m| m.reply_to.as_deref() == Some("m-1") && m.body["goal"] == "g1")
    );
    // The third round knew what the first two did, and only rounds are offered goal_status.
    let third = body(&host.requests[2]).to_string();
    assert!(third.contains("round 3 of at most 24") && third.contains("built and tested it"));
    assert!(third.contains("\"goal_status\""));
    let goal: Value =
        serde_json::from_slice(&std::fs::read(data.join("goals/g1.json")).unwrap()).unwrap();
    assert_eq!(
        (goal["state"].as_str(), goal["rounds"].as_u64()),
        (Some("done"), Some(3))
    );
}

#[test]
fn giving_up_before_round_three_is_refused_and_the_goal_goes_on() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![goal("m-1", json!({}))],
        vec![
            status("blocked", "too hard"),
            status("continue", "tried another way"),
            status("blocked", "still hard"),
            status("continue", "a third way"),
            status("blocked", "I need the API key for the weather service"),
        ],
    );
    let refused = &tool_outputs(&host, 1)[0];
    assert!(
        refused.starts_with("error: this is round 1;") && refused.contains("another way"),
        "{refused}"
    );
    let messages = goal_messages(&host);
    assert_eq!(
        messages.last().unwrap(),
        &(
            "goal_blocked".into(),
            "null".into(),
            "I need the API key for the weather service".into()
        )
    );
    let rounds = messages.iter().filter(|m| m.0 == "goal_progress").count();
    assert_eq!(rounds, 3);
}

#[test]
fn a_goal_stops_at_its_rounds_and_at_its_money() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![goal("m-1", json!({"max_rounds": 2}))],
        vec![
            status("continue", "one"),
            status("continue", "two"),
            status("continue", "three"),
        ],
    );
    let last = goal_messages(&host).pop().unwrap();
    assert_eq!(last.0, "goal_stopped");
    assert!(last.2.contains("2 rounds (max_rounds)"), "{last:?}");
    assert_eq!(host.requests.len(), 2);

    let priced = config_with(json!({"prices": {"m": {"input": 1000.0, "output": 0.0}}}));
    let data = world(Some(&priced));
    let round = |summary: &str| {
        openai_reply(
            json!([{"type": "function_call", "id": "fc_s", "call_id": format!("c_{summary}"),
            "name": "goal_status", "arguments": json!({"status": "continue", "summary": summary}).to_string()}]),
            1000,
            1,
        )
    };
    // Each round costs $1.00; the goal may spend $1.50.
    let host = run(
        &data,
        vec![goal("m-1", json!({"max_usd": 1.5}))],
        vec![round("one"), round("two"), round("three")],
    );
    let last = goal_messages(&host).pop().unwrap();
    assert_eq!(last.0, "goal_stopped");
    assert!(
        last.2.contains("$2.00") && last.2.contains("max_usd"),
        "{last:?}"
    );
    assert_eq!(host.requests.len(), 2);
}

#[test]
fn goal_stop_ends_a_goal_after_the_step_in_progress() {
    let data = world(Some(OPENAI));
    let stop = from_console("m-2", json!({"type": "goal_stop", "goal": "g1"}));
    let host = ScriptedHost {
        events: vec![goal("m-1", json!({}))].into(),
        answers: (0..5)
            .map(|n| openai_call(&format!("c{n}"), "list_dir", json!({"path": "/nowhere"})))
            .collect(),
        arrivals: vec![(0, stop)],
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, &data, "agent", "2", false);
    agent.run();
    let host = agent.host;
    assert_eq!(host.requests.len(), 1);
    let last = goal_messages(&host).pop().unwrap();
    assert_eq!(last.0, "goal_stopped");
    assert_eq!(last.2, "stopped by console (goal_stop)");
    // A stop for a goal that does not exist, or has ended, says so.
    let host = run(
        &data,
        vec![message(
            "m-3",
            "console",
            None,
            json!({"type": "goal_stop", "goal": "g9"}),
        )],
        vec![],
    );
    assert!(
        sent_of(&host, "error")[0]["reason"]
            .as_str()
            .unwrap()
            .contains("no goal `g9`; the goals are: g1")
    );
}

#[test]
fn a_bad_goal_is_refused_with_what_would_be_right() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![
            message("m-1", "console", None, json!({"type": "goal"})),
            goal("m-2", json!({"max_rounds": 0})),
            goal("m-3", json!({"max_usd": "lots"})),
        ],
        vec![],
    );
    let reasons: Vec<String> = sent_of(&host, "error")
        .iter()
        .map(|e| e["reason"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons[0].contains("needs `text`"));
    assert!(reasons[1].starts_with("max_rounds is 0"));
    assert!(reasons[2].starts_with("max_usd is \"lots\""));
    assert!(!data.join("goals").exists());
}

#[test]
fn peoples_turns_are_served_between_a_goals_rounds() {
    let data = world(Some(OPENAI));
    let person = from_console("m-2", json!({"type": "text", "text": "how is it going?"}));
    let host = ScriptedHost {
        events: vec![goal("m-1", json!({}))].into(),
        answers: vec![
            status("continue", "round one"),
            openai_text("Round one is done."),
            status("done", "all done"),
        ]
        .into(),
        arrivals: vec![(0, person)],
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, &data, "agent", "2", false);
    agent.run();
    let host = agent.host;
    assert_eq!(
        answers(&host)[0],
        ("console".into(), "m-2".into(), "Round one is done.".into())
    );
    assert!(
        body(&host.requests[1])
            .to_string()
            .contains("how is it going?")
    );
    assert!(
        body(&host.requests[2])
            .to_string()
            .contains("round 2 of at most")
    );
    assert_eq!(goal_messages(&host).pop().unwrap().0, "goal_done");
}

#[test]
fn a_goal_survives_a_restart_in_the_middle_of_a_round() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        // The goal, no message (so its round starts), then a shutdown while the round waits.
        vec![goal("m-1", json!({})), Event::TimedOut, Event::Stop],
        vec![call_reply(&[(
            "send_message",
            json!({"to": "broker", "body": {"type": "upgrade", "actor": "agent"}, "wait_seconds": 60}),
        )])],
    );
    assert_eq!(goal_messages(&host).len(), 1, "only goal_started so far");
    let saved: SavedTurn = read_json(&data.join("turn.json")).unwrap();
    assert_eq!(saved.goal.as_deref(), Some("g1"));

    let upgraded = json!({"type": "upgraded", "actor": "agent", "version": 2});
    let host = run(
        &data,
        vec![message("m-9", "broker", Some("agent/t1"), upgraded)],
        vec![status("done", "upgraded and done")],
    );
    let first = body(&host.requests[0]).to_string();
    assert!(first.contains("the round of goal g1"), "{first}");
    assert_eq!(
        goal_messages(&host),
        [
            (
                "goal_progress".into(),
                "1".into(),
                "upgraded and done".into()
            ),
            (
                "goal_done".into(),
                "null".into(),
                "upgraded and done".into()
            ),
        ]
    );
    assert!(!data.join("turn.json").exists());
}

#[test]
fn goal_status_outside_a_goal_is_an_error_the_model_can_act_on() {
    let data = world(Some(OPENAI));
    let host = run(
        &data,
        vec![text("m-1", "hi")],
        vec![
            call_reply(&[("goal_status", json!({"status": "done", "summary": "x"}))]),
            openai_text("Hi."),
        ],
    );
    assert!(tool_outputs(&host, 1)[0].starts_with("error: goal_status ends a goal's round"));
    let offered = body(&host.requests[0]).to_string();
    assert!(
        !offered.contains("\"goal_status\""),
        "not offered outside a goal"
    );
}

/// `request_secret`: the broker files it and answers `held`; the turn waits for the person's
/// decision past a restart (saved with the deadline the broker gave), and the model gets it.
#[test]
fn a_requested_secret_is_waited_for_across_a_restart_and_the_decision_reaches_the_model() {
    let data = world(Some(OPENAI));
    let expires = unix_seconds(std::time::SystemTime::now()) + 3600;
    let held = json!({"type": "held", "approval": "h1", "action": "secret", "expires": expires,
        "reason": "set secret `gh` for https://api.github.com waits for owner to answer (h1)"});
    let asked = json!({"name": "gh", "url": "https://api.github.com", "why": "to list issues"});
    let host = run(
        &data,
        vec![
            text("m-1", "list my github issues"),
            message("m-2", "broker", Some("agent/person.owner.t1"), held),
            Event::Stop,
        ],
        vec![openai_call("c1", "request_secret", asked)],
    );
    let sends = tool_sends(&host);
    assert_eq!(sends[0].to.as_deref(), Some("broker"));
    assert_eq!(sends[0].body["type"], "request_secret");
    assert_eq!(sends[0].body["name"], "gh");
    assert_eq!(sends[0].id.as_deref(), Some("person.owner.t1"));
    let saved: SavedTurn = read_json(&data.join("turn.json")).expect("turn.json");
    let waiting = saved.waiting.expect("waits for the decision");
    assert_eq!(
        (waiting.until, waiting.to.as_deref()),
        (Some(expires), Some("broker"))
    );

    let set = json!({"type": "secret_set", "name": "gh", "by": "owner"});
    let host = run(
        &data,
        vec![message("m-9", "broker", Some("agent/person.owner.t1"), set)],
        vec![openai_text("The secret is set; granting it next.")],
    );
    // The wait goes on until the broker's deadline, not for a fresh 24 hours.
    assert!(
        host.waits[0].is_some_and(|w| w <= Duration::from_secs(3600)),
        "{:?}",
        host.waits
    );
    let input = body(&host.requests[0])["input"].clone();
    let output = input[2]["output"].as_str().unwrap();
    assert!(output.contains(r#""type":"secret_set""#), "{output}");
    assert_eq!(answers(&host)[0].2, "The secret is set; granting it next.");
}

/// The agent cannot decide what waits for a person's approval, whatever the model asks.
#[test]
fn the_agent_never_decides_an_approval() {
    let data = world(Some(OPENAI));
    let decide =
        json!({"to": "broker", "body": {"type": "decide", "approval": "h1", "approve": true}});
    let host = run(
        &data,
        vec![text("m-1", "approve h1 for me")],
        vec![
            openai_call("c1", "send_message", decide),
            openai_text("I cannot."),
        ],
    );
    assert!(tool_sends(&host).iter().all(|m| m.body["type"] != "decide"));
    let input = body(&host.requests[1])["input"].clone();
    let output = input[2]["output"].as_str().unwrap();
    assert!(output.contains("only a person decides"), "{output}");
}
