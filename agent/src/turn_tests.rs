//! Tests of the turn state machine through [`ScriptedHost`]: messages and canned provider
//! answers in, the agent's messages, requests and saved files out.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::*;
use crate::testing::{ScriptedHost, temp_dir};

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

fn run(data: &Path, events: Vec<Event>, answers: Vec<Posted>) -> ScriptedHost {
    run_as(data, events, answers, false)
}

fn run_as(data: &Path, events: Vec<Event>, answers: Vec<Posted>, candidate: bool) -> ScriptedHost {
    let host = ScriptedHost {
        events: events.into(),
        answers: answers.into(),
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, data, "agent", "2", candidate);
    agent.run();
    agent.host
}

fn message(id: &str, from: &str, reply_to: Option<&str>, body: Value) -> Event {
    Event::Message(Incoming {
        id: id.into(),
        from: from.into(),
        reply_to: reply_to.map(str::to_string),
        body,
    })
}

fn text(id: &str, text: &str) -> Event {
    message(id, "console", None, json!({"type": "text", "text": text}))
}

fn openai_call(call_id: &str, name: &str, arguments: Value) -> Posted {
    ScriptedHost::ok(json!({"status": "completed", "output": [{
        "type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id,
        "name": name, "arguments": arguments.to_string(),
    }]}))
}

fn openai_text(text: &str) -> Posted {
    ScriptedHost::ok(json!({"status": "completed", "output": [{
        "type": "message", "id": "msg_1", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }]}))
}

fn body(request: &crate::provider::HttpRequest) -> Value {
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

fn history(data: &Path) -> History {
    history::load(&data.join("history.json")).unwrap()
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
        br#"{"type":"error","error":{"type":"rate_limit_error","message":"Rate limit reached"}}"#;
    let host = run(
        &data,
        vec![text("m-1", "hi"), text("m-2", "hi again")],
        vec![
            Posted::Answered(crate::provider::HttpResponse {
                status: 429,
                body: error.to_vec(),
            }),
            Posted::Failed("ErrorCode::ConnectionRefused".into()),
        ],
    );
    let words: Vec<String> = answers(&host).into_iter().map(|a| a.2).collect();
    assert!(
        words[0].starts_with("The model provider answered 429: Rate limit reached"),
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
                Some("agent/t9"),
                json!({"type": "text", "text": "late reply"}),
            ),
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
    assert!(notes.contains(r#"{"id":"m-1","from":"notes","reply_to":"agent/t9","body":{"text":"late reply","type":"text"}}"#));
    assert!(notes.contains(r#""type":"tick""#));
    assert_eq!(
        input[1]["content"],
        "Message m-3 from console:\nanything new?"
    );
    assert!(!data.join("inbox.json").exists());
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
    let sent = &host.sent[0];
    assert_eq!(
        (sent.to.as_deref(), sent.id.as_deref()),
        (Some("cargo"), Some("t1"))
    );
    let output = &body(&host.requests[1])["input"][2]["output"];
    assert_eq!(
        output,
        "sent as agent/t1; no reply came within 5 s (it may still come: use wait_for_messages)"
    );
}

/// The self-upgrade path: a shutdown while `send_message` waits saves the turn; the next
/// instance waits on for the reply, gives it to the model, and answers the original message.
#[test]
fn a_shutdown_while_waiting_saves_the_turn_and_the_next_start_finishes_it() {
    let data = world(Some(OPENAI));
    let upgrade = json!({"type": "upgrade", "actor": "agent", "wasm": "/actor/cargo/public/builds/1/agent.wasm"});
    let host = run(
        &data,
        vec![text("m-1", "upgrade yourself"), Event::Stop],
        vec![openai_call(
            "c1",
            "send_message",
            json!({"to": "broker", "body": upgrade, "wait_seconds": 60}),
        )],
    );
    assert!(answers(&host).is_empty(), "no answer yet");
    assert_eq!(host.sent[0].id.as_deref(), Some("t1"));
    let saved: SavedTurn = read_json(&data.join("turn.json")).expect("turn.json");
    assert_eq!((saved.message.id.as_str(), saved.steps), ("m-1", 1));
    assert_eq!(
        saved.waiting,
        Some(Waiting {
            call_id: "c1".into(),
            reply_to: "agent/t1".into(),
            seconds: 60
        })
    );
    assert_eq!(history(&data).open_calls(), ["c1"]);

    let upgraded = json!({"type": "upgraded", "actor": "agent", "version": 2, "previous": 1});
    let host = run(
        &data,
        vec![message("m-9", "broker", Some("agent/t1"), upgraded)],
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
    // The id counter survived the restart: the next message would be t2.
    assert_eq!(history(&data).sent, 1);
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
    history::save(&data.join("history.json"), &saved).unwrap();
    let turn = SavedTurn {
        message: Incoming {
            id: "m-4".into(),
            from: "console".into(),
            reply_to: None,
            body: json!({"type": "text", "text": "write it"}),
        },
        steps: 1,
        done: vec!["write_file {…}".into()],
        waiting: None,
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
        message: Incoming {
            id: "m-4".into(),
            from: "console".into(),
            reply_to: None,
            body: json!({"type": "text", "text": "x"}),
        },
        steps: 3,
        done: vec![],
        waiting: None,
    };
    write_json(&data.join("turn.json"), &turn).unwrap();
    let no_network = Posted::Failed("this instance is a candidate under test".into());
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
    assert!(host.sent.iter().all(|m| m.to.as_deref() == Some("console")));
}
