//! Tests of a turn's trace (DESIGN §22) through [`ScriptedHost`]: a message with or without a
//! `trace` and canned provider answers with usage in; the one `spans` request, the `trace` of
//! every line, and the waterfall of the answer and of the history, out.

use std::path::Path;

use serde_json::{Value, json};

use super::people_tests::{CONFIG, call, from_person, reply, text, world};
use super::*;
use crate::testing::{Answer, ScriptedHost};

const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const OTHER_TRACE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// USD per million tokens of model `m`.
fn priced() -> String {
    let mut config: Value = serde_json::from_str(CONFIG).unwrap();
    config["prices"] = json!({"m": {"input": 1.0, "output": 2.0, "cache_read": 0.1}});
    config.to_string()
}

/// A text the owner `ann` typed on the web page, delivered with `trace` as the host wrote it.
fn says_traced(id: &str, words: &str, trace: Value) -> Event {
    traced(id, json!({"type": "text", "text": words}), trace)
}

/// A message from `ann` on the web page with this `trace`, read from the line as the agent
/// reads it, so a bad trace is judged as in the component.
fn traced(id: &str, body: Value, trace: Value) -> Event {
    let mut line = serde_json::to_value(from_person(id, "ann", "owner", "web", body)).unwrap();
    line["trace"] = trace;
    Event::Message(serde_json::from_value(line).expect("the envelope is a message"))
}

/// A Responses answer with these items and usage (`cached` of the `input` tokens were read
/// from the cache).
fn with_usage(output: Value, input: u64, cached: u64, out: u64) -> Answer {
    ScriptedHost::ok(json!({"status": "completed", "output": output, "usage": {
        "input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out, "total_tokens": input + out,
    }}))
}

fn read_call(path: &str) -> Value {
    json!([{"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "read_file",
        "arguments": json!({"path": path}).to_string()}])
}

fn words(text: &str) -> Value {
    json!([{"type": "message", "id": "msg_1", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]}])
}

/// The `spans` requests the agent sent, each checked for its address.
fn spans_requests(host: &ScriptedHost) -> Vec<Vec<Value>> {
    (host.sent.iter())
        .filter(|m| m.body["type"] == "spans")
        .map(|m| {
            assert_eq!(m.to.as_deref(), Some("broker"));
            assert_eq!((&m.id, &m.reply_to, &m.speaks_for), (&None, &None, &None));
            m.body["spans"].as_array().unwrap().clone()
        })
        .collect()
}

/// The one `spans` request of a run.
fn the_spans(host: &ScriptedHost) -> Vec<Value> {
    let mut all = spans_requests(host);
    assert_eq!(all.len(), 1, "one spans request: {:?}", host.sent);
    all.remove(0)
}

fn is_span_id(id: &Value) -> bool {
    let id = id.as_str().unwrap_or_default();
    id.len() == 16
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        && id != "0000000000000000"
}

/// The traceparent naming `span` of trace `trace_id`.
fn parent(trace_id: &str, span: &Value) -> Value {
    json!(format!("00-{trace_id}-{}-01", span.as_str().unwrap()))
}

fn final_text(host: &ScriptedHost) -> &Outgoing {
    let finals: Vec<&Outgoing> = (host.sent.iter())
        .filter(|m| m.body["type"] == "text")
        .collect();
    assert_eq!(finals.len(), 1, "{:?}", host.sent);
    finals[0]
}

fn note(data: &Path) -> String {
    let path = data.join("note.txt");
    std::fs::write(&path, "remember the milk").unwrap();
    path.display().to_string()
}

#[test]
fn one_spans_request_ends_the_turn_with_its_parents_and_gen_ai_attributes() {
    let data = world(&priced());
    let path = note(&data);
    let host = run_host(
        &data,
        vec![says_traced("m-1", "what does my note say?", json!(TRACE))],
        vec![
            with_usage(read_call(&path), 1000, 200, 100),
            with_usage(words("It says: remember the milk."), 500, 0, 50),
        ],
    );
    let spans = the_spans(&host);
    let last = host.sent.last().unwrap();
    assert_eq!(
        last.body["type"], "spans",
        "sent last, once the answer is out"
    );
    assert_eq!(spans.len(), 4, "{spans:#?}");
    let turn = &spans[0];
    assert_eq!(turn["name"], "invoke_agent agent");
    assert_eq!(
        turn["parent"], TRACE,
        "the turn is the child of its message's delivery"
    );
    assert!(is_span_id(&turn["id"]), "{turn}");
    assert_eq!(
        turn["attributes"],
        json!({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "agent",
               "sausage.turn": "m-1", "sausage.person": "ann"})
    );
    assert!(turn.get("error").is_none());
    let child_of_turn = parent(TRACE_ID, &turn["id"]);
    let names: Vec<&Value> = spans.iter().map(|s| &s["name"]).collect();
    assert_eq!(
        names,
        [
            "invoke_agent agent",
            "chat m",
            "execute_tool read_file",
            "chat m"
        ]
    );
    for child in &spans[1..] {
        assert_eq!(child["parent"], child_of_turn, "{child}");
        assert!(is_span_id(&child["id"]), "{child}");
        assert_ne!(child["id"], turn["id"]);
        let (start, end) = (
            child["start_ms"].as_f64().unwrap(),
            child["end_ms"].as_f64().unwrap(),
        );
        assert!(
            turn["start_ms"].as_f64().unwrap() <= start && start <= end,
            "{child}"
        );
        assert!(end <= turn["end_ms"].as_f64().unwrap(), "{child}");
    }
    let ids: HashSet<&str> = spans.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 4, "every span has its own id");
    assert_eq!(
        spans[1]["attributes"],
        json!({"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
               "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 1000,
               "gen_ai.usage.output_tokens": 100, "gen_ai.usage.cache_read.input_tokens": 200,
               "gen_ai.usage.cost_usd": 0.00102})
    );
    assert_eq!(spans[3]["attributes"]["gen_ai.usage.input_tokens"], 500);
    assert_eq!(spans[3]["attributes"]["gen_ai.usage.cost_usd"], 0.0006);
    assert_eq!(
        spans[2]["attributes"],
        json!({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
               "sausage.ok": true})
    );
}

#[test]
fn lines_inside_a_tool_call_name_its_span_and_the_others_the_turns() {
    let data = world(CONFIG);
    let host = run_host(
        &data,
        vec![says_traced("m-1", "tell echo", json!(TRACE))],
        vec![
            call(
                "send_message",
                json!({"to": "echo", "body": {"type": "ping"}}),
            ),
            text("Told."),
        ],
    );
    let spans = the_spans(&host);
    let (turn, tool) = (&spans[0]["id"], &spans[2]["id"]);
    assert_eq!(spans[2]["name"], "execute_tool send_message");
    let (in_turn, in_tool) = (parent(TRACE_ID, turn), parent(TRACE_ID, tool));
    let trace_of = |m: &Outgoing| json!(m.trace);
    let ping = host.sent.iter().find(|m| m.body["type"] == "ping").unwrap();
    assert_eq!(
        trace_of(ping),
        in_tool,
        "the call's message nests under the call"
    );
    for m in host.sent.iter().filter(|m| m.body["type"] == "tool") {
        assert_eq!(trace_of(m), in_tool, "{m:?}");
    }
    let progress: Vec<&Outgoing> = (host.sent.iter())
        .filter(|m| m.body["type"] == "progress")
        .collect();
    assert!(!progress.is_empty());
    for m in progress {
        assert_eq!(trace_of(m), in_turn, "{m:?}");
    }
    assert_eq!(trace_of(final_text(&host)), in_turn);
    assert_eq!(
        trace_of(host.sent.last().unwrap()),
        in_turn,
        "the spans request too"
    );
    assert!(
        host.sent.iter().all(|m| m.trace.is_some()),
        "{:?}",
        host.sent
    );
}

#[test]
fn the_answer_and_the_history_carry_the_turns_waterfall() {
    let data = world(&priced());
    let path = note(&data);
    let clock = std::time::UNIX_EPOCH + Duration::from_secs(1_764_700_000);
    let host = ScriptedHost {
        events: vec![
            says_traced("m-1", "what does my note say?", json!(TRACE)),
            // The broker clears the priced turn's spending (no `spend` rule for an owner).
            Event::Message(Incoming {
                id: "m-s".into(),
                from: "broker".into(),
                reply_to: Some("agent/person.ann.s1".into()),
                body: json!({"type": "spend_ok", "up_to_usd": null}),
                ..Incoming::default()
            }),
            traced("m-2", json!({"type": "conversation"}), json!(OTHER_TRACE)),
        ]
        .into(),
        answers: vec![
            with_usage(read_call(&path), 1000, 200, 100),
            with_usage(words("It says: remember the milk."), 500, 0, 50),
        ]
        .into(),
        clock: Some(clock),
        ..ScriptedHost::default()
    };
    let host = run_scripted(&data, host);
    let answer = &final_text(&host).body;
    let model = |input: u64, output: u64, usd: f64| {
        json!({"kind": "model", "name": "m", "start_ms": 0, "ms": 0, "input_tokens": input,
               "output_tokens": output, "cost_usd": usd})
    };
    // The preview is the path cut to 80 characters, however deep the test's folder is.
    let preview = super::calls::preview("read_file", &json!({"path": path}));
    let tool = json!({"kind": "tool", "name": "read_file", "preview": preview, "start_ms": 0,
                      "ms": 0, "ok": true});
    let waterfall = json!([model(1000, 100, 0.00102), tool, model(500, 50, 0.0006)]);
    assert_eq!(answer["steps"], waterfall, "{answer}");
    assert!(answer.get("steps_dropped").is_none());
    let told = host
        .sent
        .iter()
        .find(|m| m.body["type"] == "conversation")
        .expect("the conversation");
    assert_eq!(
        told.trace.as_deref(),
        Some(OTHER_TRACE),
        "a reply continues the trace of the request it answers"
    );
    let entries = told.body["entries"].as_array().unwrap();
    assert_eq!(
        entries.last().unwrap(),
        &json!({
            "role": "assistant", "text": "It says: remember the milk.", "steps": waterfall,
            "usage": answer["usage"],
        }),
        "the history tells the answer's waterfall and cost line as the answer did"
    );
    // Only the final answer carries it; the model is never sent it.
    assert_eq!(told.body.to_string().matches("\"steps\"").count(), 1);
    let host = run_host(
        &data,
        vec![says_traced("m-3", "thanks", json!(TRACE))],
        vec![text("You are welcome.")],
    );
    let request = String::from_utf8(host.requests[0].body.clone()).unwrap();
    assert!(
        !request.contains("start_ms") && !request.contains("\"steps\""),
        "{request}"
    );
}

#[test]
fn a_waterfall_shows_times_since_the_turn_began() {
    let mut trace = TurnTrace::begin(&Incoming::default(), 1_000.0, &mut || 7);
    let tool = |id: &str, start_ms: f64| Step {
        id: id.into(),
        start_ms,
        end_ms: None,
        error: None,
        what: What::Tool {
            tool: "search".into(),
            preview: "x in /".into(),
            ok: true,
        },
    };
    assert!(trace.add(tool("a", 1_250.4)));
    trace.finish_tool("a", 2_000.0, Some("error: no such folder"));
    assert!(trace.add(tool("b", 2_100.0)));
    let (steps, dropped) = trace.waterfall(2_600.0);
    assert_eq!(
        json!(steps),
        json!([
            {"kind": "tool", "name": "search", "preview": "x in /", "start_ms": 250, "ms": 750,
             "ok": false},
            {"kind": "tool", "name": "search", "preview": "x in /", "start_ms": 1100, "ms": 500,
             "ok": true},
        ])
    );
    assert_eq!(dropped, 0);
    let request = trace.request(
        "agent",
        "m-1",
        None,
        Ended {
            end_ms: 3_000.0,
            stopped: None,
            error: None,
        },
    );
    let spans = request["spans"].as_array().unwrap();
    assert_eq!(spans[1]["error"], "error: no such folder");
    assert_eq!(spans[1]["attributes"]["sausage.ok"], false);
    assert_eq!(
        spans[2]["end_ms"], 3_000.0,
        "a step still running ends with the turn"
    );
}

#[test]
fn past_200_steps_the_waterfall_counts_the_rest_and_the_spans_stay_within_256() {
    let mut trace = TurnTrace::begin(&Incoming::default(), 0.0, &mut || 7);
    let step = |n: usize, what: What| Step {
        id: format!("{:016x}", n + 1),
        start_ms: n as f64,
        end_ms: Some(n as f64 + 0.5),
        error: None,
        what,
    };
    let tool = || What::Tool {
        tool: "read_file".into(),
        preview: "/data".into(),
        ok: true,
    };
    let model = || What::Model {
        model: "m".into(),
        api: crate::message::Api::OpenaiChat,
        usage: Usage {
            input_tokens: 10,
            ..Usage::default()
        },
        cost_usd: None,
    };
    for n in 0..300 {
        trace.add(step(n, tool()));
    }
    assert_eq!((trace.steps.len(), trace.dropped), (200, 100));
    // Model requests still have room: their spans carry the tokens the broker counts.
    for n in 300..400 {
        trace.add(step(n, model()));
    }
    assert_eq!((trace.steps.len(), trace.dropped), (255, 145));
    let (steps, dropped) = trace.waterfall(400.0);
    assert_eq!((steps.len(), dropped), (200, 200));
    let ended = Ended {
        end_ms: 400.0,
        stopped: Some("steps"),
        error: None,
    };
    let request = trace.request("agent", "m-1", None, ended);
    let spans = request["spans"].as_array().unwrap();
    assert_eq!(spans.len(), spans::MAX_SPANS);
    assert_eq!(spans[0]["attributes"]["sausage.stopped"], "steps");
    assert_eq!(spans[255]["attributes"]["gen_ai.provider.name"], "openai");
    assert_eq!(spans[255]["attributes"].get("gen_ai.usage.cost_usd"), None);
}

#[test]
fn ids_are_never_all_zeros() {
    let mut draws = vec![0, 0, 0, 0, 5, 0, 9].into_iter();
    let trace = TurnTrace::begin(&Incoming::default(), 0.0, &mut || draws.next().unwrap());
    assert_eq!(trace.trace_id, format!("{:016x}{:016x}", 5, 0));
    assert_eq!(trace.id, "0000000000000009");
    assert_eq!(trace.parent, None);
    assert_eq!(
        trace.line_trace(None),
        None,
        "without a parent, lines carry no trace"
    );
}

#[test]
fn without_a_trace_or_with_a_bad_one_lines_carry_none_and_the_spans_start_a_trace() {
    for trace in [
        Value::Null,
        json!("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),
        json!("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
        json!("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        json!(42),
    ] {
        let data = world(CONFIG);
        let host = run_host(
            &data,
            vec![says_traced("m-1", "tell echo", trace.clone())],
            vec![
                call(
                    "send_message",
                    json!({"to": "echo", "body": {"type": "ping"}}),
                ),
                text("Told."),
            ],
        );
        assert!(
            host.sent.iter().all(|m| m.trace.is_none()),
            "{trace}: {:?}",
            host.sent
        );
        assert_eq!(final_text(&host).body["text"], "Told.", "{trace}");
        let spans = the_spans(&host);
        assert_eq!(spans[0]["parent"], Value::Null, "{trace}");
        // The children still name the turn, in a trace of the agent's making.
        let child = spans[1]["parent"].as_str().unwrap();
        assert!(crate::message::valid_traceparent(child), "{child}");
        assert!(child.ends_with(&format!("-{}-01", spans[0]["id"].as_str().unwrap())));
        assert_eq!(spans[2]["parent"], spans[1]["parent"]);
    }
}

#[test]
fn the_brokers_answers_to_spans_start_nothing_show_nowhere_and_disturb_no_wait() {
    let data = world(CONFIG);
    let recorded = |id: &str| {
        reply(
            id,
            "broker",
            "m-77",
            json!({"type": "spans_recorded", "count": 4}),
        )
    };
    let refused = reply(
        "m-4",
        "broker",
        "m-78",
        json!({"type": "error", "request": "spans", "reason": "at most 256 spans"}),
    );
    let host = run_host(
        &data,
        vec![
            says_traced("m-1", "ask echo", json!(TRACE)),
            // While the turn waits for echo: the answers to an earlier turn's spans.
            recorded("m-2"),
            refused,
            reply(
                "m-5",
                "echo",
                "agent/person.ann.t1",
                json!({"type": "pong"}),
            ),
            recorded("m-6"),
            says_traced("m-7", "and now?", json!(TRACE)),
        ],
        vec![
            call(
                "send_message",
                json!({"to": "echo", "body": {"type": "ping"}, "wait_seconds": 30}),
            ),
            text("Echo said pong."),
            text("Nothing new."),
        ],
    );
    let outputs = super::people_tests::tool_results(&host);
    assert_eq!(outputs.len(), 1);
    assert!(
        outputs[0].contains("pong"),
        "the wait took echo's reply: {outputs:?}"
    );
    assert_eq!(spans_requests(&host).len(), 2, "one per turn");
    let answered: Vec<&str> = (host.sent.iter())
        .filter(|m| m.body["type"] == "text")
        .map(|m| m.reply_to.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(answered, ["m-1", "m-7"], "no turn for the broker's answers");
    assert!(
        host.sent
            .iter()
            .all(|m| m.to.as_deref() != Some("broker") || m.body["type"] == "spans"),
        "nothing answers the broker: {:?}",
        host.sent
    );
    // Nor are they kept for any conversation (a reply names none: it would wait for the
    // broker's).
    let inbox = std::fs::read_to_string(data.join("inbox.json")).unwrap_or_default();
    assert!(!inbox.contains("spans"), "{inbox}");
    for request in &host.requests {
        let request = String::from_utf8(request.body.clone()).unwrap();
        assert!(!request.contains("spans_recorded"), "shown to the model");
        assert!(!request.contains("at most 256 spans"), "shown to the model");
    }
    // Another actor's `spans_recorded`, and the broker's without `reply_to`, are ordinary
    // messages: while the turn waits for messages, they are what it gets.
    let data = world(CONFIG);
    let publication = |id: &str, from: &str| {
        Event::Message(Incoming {
            id: id.into(),
            from: from.into(),
            body: json!({"type": "spans_recorded", "count": 1}),
            ..Incoming::default()
        })
    };
    let host = run_host(
        &data,
        vec![
            says_traced("m-1", "anything?", json!(TRACE)),
            publication("m-2", "mimic"),
            publication("m-3", "broker"),
        ],
        vec![
            call("wait_for_messages", json!({"seconds": 5})),
            text("Two came."),
        ],
    );
    let outputs = super::people_tests::tool_results(&host);
    assert!(
        outputs[0].contains("\"from\":\"mimic\"") && outputs[0].contains("\"from\":\"broker\""),
        "{outputs:?}"
    );
}

#[test]
fn however_a_turn_ends_its_spans_are_sent_and_say_how() {
    // The provider refuses for good: the turn ends in words.
    let data = world(CONFIG);
    let refusal = ScriptedHost::refused(401, &[], json!({"error": {"message": "bad key"}}));
    let host = run_host(
        &data,
        vec![says_traced("m-1", "hi", json!(TRACE))],
        vec![refusal],
    );
    let spans = the_spans(&host);
    assert_eq!(spans.len(), 2);
    assert!(
        spans[0]["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{:?}",
        spans[0]
    );
    assert!(
        spans[1]["error"].as_str().is_some(),
        "the failed request: {:?}",
        spans[1]
    );
    assert_eq!(spans[1]["attributes"]["gen_ai.usage.output_tokens"], 0);
    assert_eq!(final_text(&host).body["steps"].as_array().unwrap().len(), 1);

    // A stop ends it after its step.
    let data = world(CONFIG);
    let stop = Event::Message(from_person(
        "m-2",
        "ann",
        "owner",
        "web",
        json!({"type": "stop", "turn": "m-1"}),
    ));
    let host = run_host(
        &data,
        vec![says_traced("m-1", "wait a while", json!(TRACE)), stop],
        vec![
            call("wait_for_messages", json!({"seconds": 1})),
            text("never asked"),
        ],
    );
    let spans = the_spans(&host);
    assert_eq!(spans[0]["attributes"]["sausage.stopped"], "stop");
    assert!(spans[0].get("error").is_none());
    assert_eq!(final_text(&host).body["stopped"], "stop");
}

#[test]
fn a_restart_goes_on_with_the_turns_span_and_its_steps() {
    let data = world(CONFIG);
    let host = run_host(
        &data,
        vec![says_traced("m-1", "ask echo", json!(TRACE)), Event::Stop],
        vec![call(
            "send_message",
            json!({"to": "echo", "body": {"type": "ping"}, "wait_seconds": 30}),
        )],
    );
    assert!(spans_requests(&host).is_empty(), "the turn is not over");
    let saved: SavedTurn = read_json(&data.join("turn.json")).expect("turn.json");
    let kept = saved.trace.expect("the trace is saved with the turn");
    assert_eq!(kept.parent.as_deref(), Some(TRACE));
    assert_eq!(
        kept.steps.len(),
        2,
        "the request and the call still waiting"
    );
    assert_eq!(kept.steps[1].end_ms, None);

    let host = run_host(
        &data,
        vec![reply(
            "m-5",
            "echo",
            "agent/person.ann.t1",
            json!({"type": "pong"}),
        )],
        vec![text("Echo said pong.")],
    );
    let spans = the_spans(&host);
    assert_eq!(spans[0]["id"], kept.id.as_str(), "the same turn span");
    assert_eq!(spans[0]["start_ms"], kept.start_ms);
    assert_eq!(spans[2]["id"], kept.steps[1].id.as_str());
    assert_eq!(
        spans[2]["error"], INTERRUPTED,
        "the call the restart cut off"
    );
    assert_eq!(spans.len(), 4, "then the request after the restart");
    assert_eq!(final_text(&host).trace, kept.line_trace(None));
    assert_eq!(final_text(&host).body["steps"].as_array().unwrap().len(), 3);
}

#[test]
fn a_candidate_reports_no_spans() {
    let data = world(CONFIG);
    let host = ScriptedHost {
        events: vec![says_traced("m-1", "hello", json!(TRACE))].into(),
        answers: vec![text("Hi.")].into(),
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, &data, "agent", "2", true);
    agent.run();
    assert!(spans_requests(&agent.host).is_empty());
    assert_eq!(final_text(&agent.host).body["text"], "Hi.");
}

fn run_host(data: &Path, events: Vec<Event>, answers: Vec<Answer>) -> ScriptedHost {
    super::people_tests::run(data, events, answers)
}

fn run_scripted(data: &Path, host: ScriptedHost) -> ScriptedHost {
    let mut agent = Agent::new(host, data, "agent", "2", false);
    agent.run();
    agent.host
}

/// A broker's answer to the agent's request `id` (such as `agent/person.mia.s1`).
fn broker_answer(id: &str, body: Value) -> Event {
    Event::Message(Incoming {
        id: format!("b-{id}"),
        from: "broker".into(),
        reply_to: Some(id.into()),
        body,
        ..Incoming::default()
    })
}

/// A `spend` rule (DESIGN §25): a priced turn asks the broker once its cost passes what was
/// cleared; held, it waits for the decision; denied, it stops before another model request.
#[test]
fn a_turn_whose_spending_is_held_waits_and_stops_when_it_is_denied() {
    let data = world(&priced());
    let path = note(&data);
    let says = |id: &str, words: &str| {
        Event::Message(from_person(
            id,
            "mia",
            "member",
            "web",
            json!({"type": "text", "text": words}),
        ))
    };
    let held = json!({"type": "held", "approval": "h4", "action": "spend",
        "expires": unix_seconds(std::time::SystemTime::now()) + 600,
        "reason": "a turn of mia spending past $0.00 waits for an owner's approval (h4)"});
    let denied = json!({"type": "error", "request": "spend",
        "reason": "olga denied it (h4): a turn of mia spending past $0.00"});
    let host = run_scripted(
        &data,
        ScriptedHost {
            events: vec![
                says("m-1", "what does my note say?"),
                broker_answer("agent/person.mia.s1", held),
                broker_answer("agent/person.mia.s1", denied),
            ]
            .into(),
            answers: vec![
                with_usage(read_call(&path), 1000, 0, 100),
                with_usage(words("never asked for"), 10, 0, 10),
            ]
            .into(),
            ..ScriptedHost::default()
        },
    );
    let asked: Vec<&Outgoing> = (host.sent.iter())
        .filter(|m| m.body["type"] == "spend")
        .collect();
    assert_eq!(asked.len(), 1, "{:?}", host.sent);
    assert_eq!(asked[0].to.as_deref(), Some("broker"));
    assert!(asked[0].body["usd"].as_f64().unwrap() > 0.0);
    assert_eq!(asked[0].speaks_for.as_deref(), Some("mia"));
    assert_eq!(host.requests.len(), 1, "no model request after the denial");
    let waited = host
        .sent
        .iter()
        .any(|m| m.body["type"] == "progress" && m.body["text"].as_str().unwrap().contains("(h4)"));
    assert!(waited, "the person is told what the turn waits for");
    let answer = final_text(&host).body["text"].as_str().unwrap().to_string();
    assert!(answer.contains("olga denied it (h4)"), "{answer}");
}
