//! The fake model provider itself (this crate): its HTTP, its script, each of its
//! checks on the three APIs, the event streams it makes of whole answers, the usage it counts
//! (prompt caches and context window included), the failures it can stage, and its streams
//! against the real recorded ones in `../shared/llm-fixtures/` (those tests skip, saying so, when
//! the folder is absent).
//!
//! Requests go through a tiny HTTP client below, which reads chunked server-sent events and puts
//! a stream back together into the whole answer, so what is tested is what goes over the wire.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sausage_fake_llm::{Api, FakeLlm, TOKEN, anthropic, chat, openai};
use serde_json::{Value, json};

/// How long the client below waits for the fake's next bytes before the test fails.
const PATIENCE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// A tiny HTTP client

struct Response {
    status: u16,
    headers: BTreeMap<String, String>,
    /// The body's bytes (de-chunked).
    raw: Vec<u8>,
    /// Whether the body ended as its framing says; false when the connection closed inside it.
    complete: bool,
    /// An event stream's events, in order (comments left out).
    events: Vec<Sse>,
    /// When each chunk of a chunked body arrived.
    arrivals: Vec<Instant>,
    /// A JSON body, or the whole answer an event stream adds up to (`Null` when it never
    /// completed).
    body: Value,
}

/// One server-sent event.
#[derive(Debug, Clone)]
struct Sse {
    event: Option<String>,
    data: String,
}

impl Sse {
    fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{:?}: {e}", self.data))
    }
}

impl Response {
    fn text(&self) -> String {
        String::from_utf8(self.raw.clone()).unwrap()
    }

    /// The JSON payloads of the events (Chat's `[DONE]` left out).
    fn payloads(&self) -> Vec<Value> {
        let events = self.events.iter().filter(|e| e.data != "[DONE]");
        events.map(Sse::json).collect()
    }
}

fn connect(fake: &FakeLlm) -> TcpStream {
    let stream = TcpStream::connect(fake.base_url().trim_start_matches("http://")).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream
}

/// A request with a `content-length` body.
fn request(path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut head = format!("POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    [head.as_bytes(), body].concat()
}

fn read_response(reader: &mut impl BufRead) -> Response {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = BTreeMap::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let Some((name, value)) = line.trim_end().split_once(':') else {
            break;
        };
        headers.insert(name.to_ascii_lowercase(), value.trim().to_string());
    }
    let mut arrivals = Vec::new();
    let (raw, complete) = if headers
        .get("transfer-encoding")
        .is_some_and(|t| t == "chunked")
    {
        read_chunks(reader, &mut arrivals)
    } else if let Some(length) = headers.get("content-length") {
        let mut body = vec![0; length.parse().unwrap()];
        reader.read_exact(&mut body).unwrap();
        (body, true)
    } else {
        let mut body = Vec::new();
        reader.read_to_end(&mut body).unwrap();
        (body, true)
    };
    let streamed = headers
        .get("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let (events, body) = if streamed {
        let events = parse_sse(std::str::from_utf8(&raw).unwrap());
        let body = assemble(&events);
        (events, body)
    } else {
        (Vec::new(), serde_json::from_slice(&raw).unwrap())
    };
    Response {
        status,
        headers,
        raw,
        complete,
        events,
        arrivals,
        body,
    }
}

/// A chunked body, and whether it ended with its last (empty) chunk.
fn read_chunks(reader: &mut impl BufRead, arrivals: &mut Vec<Instant>) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    loop {
        let mut line = String::new();
        // The connection closed (or broke) between chunks.
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return (body, false);
        }
        let size = usize::from_str_radix(line.trim(), 16)
            .unwrap_or_else(|_| panic!("bad chunk size line {line:?}"));
        if size == 0 {
            line.clear();
            reader.read_line(&mut line).unwrap();
            assert_eq!(line, "\r\n", "no trailers after the last chunk");
            return (body, true);
        }
        let start = body.len();
        body.resize(start + size, 0);
        if reader.read_exact(&mut body[start..]).is_err() {
            body.truncate(start);
            return (body, false);
        }
        arrivals.push(Instant::now());
        let mut end = [0; 2];
        reader.read_exact(&mut end).unwrap();
        assert_eq!(&end, b"\r\n", "a chunk ends with CRLF");
    }
}

/// Server-sent events as the spec reads them: `event:` and `data:` fields, comments (`:`)
/// ignored, an event dispatched at a blank line, and, as the Anthropic SDK does, a last event
/// dispatched at the end of the body even without its blank line.
fn parse_sse(text: &str) -> Vec<Sse> {
    let mut events = Vec::new();
    let (mut event, mut data): (Option<String>, Option<String>) = (None, None);
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if let Some(data) = data.take() {
                events.push(Sse {
                    event: event.take(),
                    data,
                });
            }
            event = None;
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match (field, &mut data) {
            ("event", _) => event = Some(value.to_string()),
            ("data", Some(data)) => {
                data.push('\n');
                data.push_str(value);
            }
            ("data", None) => data = Some(value.to_string()),
            _ => {}
        }
    }
    if let Some(data) = data {
        events.push(Sse { event, data });
    }
    events
}

/// The whole answer a stream adds up to, checking on the way that every `done` repeats what
/// its deltas said; `Null` when the stream never finished.
fn assemble(events: &[Sse]) -> Value {
    match events.first().and_then(|e| e.event.as_deref()) {
        Some(name) if name.starts_with("response.") => assemble_responses(events),
        Some(_) => assemble_messages(events),
        None => assemble_chat(events),
    }
}

fn assemble_responses(events: &[Sse]) -> Value {
    let mut items = Vec::new();
    let mut deltas = String::new();
    for (n, event) in events.iter().enumerate() {
        let payload = event.json();
        let kind = payload["type"].as_str().unwrap();
        assert_eq!(
            event.event.as_deref(),
            Some(kind),
            "the event line names the type"
        );
        assert_eq!(
            payload["sequence_number"], n,
            "sequence numbers count the events"
        );
        let done = match kind {
            "response.output_text.delta"
            | "response.refusal.delta"
            | "response.function_call_arguments.delta"
            | "response.reasoning_summary_text.delta" => {
                deltas.push_str(payload["delta"].as_str().unwrap());
                continue;
            }
            "response.output_text.done" | "response.reasoning_summary_text.done" => {
                &payload["text"]
            }
            "response.refusal.done" => &payload["refusal"],
            "response.function_call_arguments.done" => &payload["arguments"],
            "response.output_item.done" => {
                assert_eq!(payload["output_index"], items.len());
                items.push(payload["item"].clone());
                continue;
            }
            "response.completed" => {
                assert_eq!(payload["response"]["output"], json!(items));
                return payload["response"].clone();
            }
            _ => continue,
        };
        assert_eq!(done, &json!(std::mem::take(&mut deltas)), "{kind}");
    }
    Value::Null
}

fn assemble_messages(events: &[Sse]) -> Value {
    let mut message = Value::Null;
    let mut partial_json = String::new();
    let append = |block: &mut Value, field: &str, piece: &Value| {
        let text = format!(
            "{}{}",
            block[field].as_str().unwrap(),
            piece.as_str().unwrap()
        );
        block[field] = json!(text);
    };
    for event in events {
        let payload = event.json();
        let kind = payload["type"].as_str().unwrap();
        assert_eq!(
            event.event.as_deref(),
            Some(kind),
            "the event line names the type"
        );
        let index = payload["index"].as_u64().unwrap_or(0) as usize;
        match kind {
            "message_start" => message = payload["message"].clone(),
            "content_block_start" => {
                let content = message["content"].as_array_mut().unwrap();
                assert_eq!(index, content.len());
                content.push(payload["content_block"].clone());
            }
            "content_block_delta" => {
                let block = &mut message["content"][index];
                let delta = &payload["delta"];
                match delta["type"].as_str().unwrap() {
                    "text_delta" => append(block, "text", &delta["text"]),
                    "thinking_delta" => append(block, "thinking", &delta["thinking"]),
                    "signature_delta" => block["signature"] = delta["signature"].clone(),
                    "input_json_delta" => {
                        partial_json.push_str(delta["partial_json"].as_str().unwrap())
                    }
                    other => panic!("unknown delta {other}"),
                }
            }
            "content_block_stop" => {
                let block = &mut message["content"][index];
                if block["type"] == "tool_use" {
                    let input = std::mem::take(&mut partial_json);
                    block["input"] = serde_json::from_str(&input).unwrap();
                }
            }
            "message_delta" => {
                message["stop_reason"] = payload["delta"]["stop_reason"].clone();
                message["stop_sequence"] = payload["delta"]["stop_sequence"].clone();
                for (key, value) in payload["usage"].as_object().unwrap() {
                    message["usage"][key] = value.clone();
                }
            }
            "message_stop" => return message,
            _ => {}
        }
    }
    Value::Null
}

fn assemble_chat(events: &[Sse]) -> Value {
    let mut answer = Value::Null;
    let mut content: Option<String> = None;
    let mut calls: Vec<Value> = Vec::new();
    let (mut finish_reason, mut usage) = (Value::Null, Value::Null);
    for event in events {
        assert_eq!(event.event, None, "Chat streams have no event lines");
        if event.data == "[DONE]" {
            let mut message = json!({"role": "assistant", "content": content, "refusal": null});
            if !calls.is_empty() {
                message["tool_calls"] = json!(calls);
            }
            answer["object"] = json!("chat.completion");
            answer["choices"] = json!([{
                "index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason,
            }]);
            answer["usage"] = usage;
            return answer;
        }
        let chunk = event.json();
        if answer.is_null() {
            answer = json!({
                "id": chunk["id"],
                "created": chunk["created"],
                "model": chunk["model"],
                "system_fingerprint": chunk["system_fingerprint"],
            });
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str() {
                content.get_or_insert_default().push_str(text);
            }
            for fragment in delta["tool_calls"].as_array().into_iter().flatten() {
                let i = fragment["index"].as_u64().unwrap() as usize;
                if i == calls.len() {
                    let function = json!({"name": fragment["function"]["name"], "arguments": ""});
                    calls.push(json!({"id": fragment["id"], "type": fragment["type"], "function": function}));
                }
                let arguments = &mut calls[i]["function"]["arguments"];
                let more = fragment["function"]["arguments"].as_str().unwrap();
                *arguments = json!(format!("{}{more}", arguments.as_str().unwrap()));
            }
            if !choice["finish_reason"].is_null() {
                finish_reason = choice["finish_reason"].clone();
            }
        }
        if chunk.get("usage").is_some_and(|u| !u.is_null()) {
            usage = chunk["usage"].clone();
        }
    }
    Value::Null
}

/// One request on its own connection.
fn post(fake: &FakeLlm, path: &str, headers: &[(&str, &str)], body: &Value) -> Response {
    let mut stream = connect(fake);
    let mut headers = headers.to_vec();
    headers.push(("Connection", "close"));
    stream
        .write_all(&request(path, &headers, body.to_string().as_bytes()))
        .unwrap();
    read_response(&mut BufReader::new(stream))
}

const OPENAI_HEADERS: &[(&str, &str)] = &[
    ("Authorization", "Bearer sk-fake-test-token"),
    ("Content-Type", "application/json"),
];

const ANTHROPIC_HEADERS: &[(&str, &str)] = &[
    ("X-Api-Key", "sk-fake-test-token"),
    ("Anthropic-Version", "2023-06-01"),
    ("Content-Type", "application/json"),
];

fn send_openai(fake: &FakeLlm, body: &Value) -> Response {
    post(fake, "/v1/responses", OPENAI_HEADERS, body)
}

fn send_anthropic(fake: &FakeLlm, body: &Value) -> Response {
    post(fake, "/v1/messages", ANTHROPIC_HEADERS, body)
}

fn send_chat(fake: &FakeLlm, body: &Value) -> Response {
    post(fake, "/v1/chat/completions", OPENAI_HEADERS, body)
}

/// The body after `change`.
fn with(body: &Value, change: impl FnOnce(&mut Value)) -> Value {
    let mut body = body.clone();
    change(&mut body);
    body
}

/// A whole answer without its `usage`, which the fake fills in with its own count.
fn without_usage(answer: &Value) -> Value {
    with(answer, |a| {
        a.as_object_mut().unwrap().remove("usage");
    })
}

/// The fake's count: ceil(bytes / 4).
fn tokens(bytes: usize) -> u64 {
    bytes.div_ceil(4) as u64
}

/// Asserts that `response` is a rejection with `status` in the real API's error shape, whose
/// message holds `fragment`, and that it was recorded as exactly one new violation.
fn assert_rejected(
    fake: &FakeLlm,
    violations_before: usize,
    response: &Response,
    status: u16,
    what: &str,
    fragment: &str,
) {
    let body = &response.body;
    assert_eq!(response.status, status, "{what}: {body}");
    // Every API puts the message at `error.message`.
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no error message in {body}"));
    assert!(
        message.contains(fragment),
        "{what}: {message:?} lacks {fragment:?}"
    );
    let violations = fake.violations();
    assert_eq!(
        violations.len(),
        violations_before + 1,
        "{what}: one new violation expected: {violations:#?}"
    );
    assert!(violations.last().unwrap().contains(fragment), "{what}");
}

/// The recorded fixtures, in `../shared/llm-fixtures` beside the repository (this crate is
/// `crates/fake-llm` in it).
fn fixtures() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/llm-fixtures");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipped: {} is absent (the recorded provider fixtures)",
            dir.display()
        );
        None
    }
}

fn fixture_text(dir: &std::path::Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn fixture(dir: &std::path::Path, name: &str) -> Value {
    serde_json::from_str(&fixture_text(dir, name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A recorded `.sse` body's events.
fn fixture_events(dir: &std::path::Path, name: &str) -> Vec<Sse> {
    parse_sse(&fixture_text(dir, name))
}

/// A recorded `.chunks.jsonl`'s payloads, split into its streams (each starts with
/// `response.created`).
fn fixture_streams(dir: &std::path::Path, name: &str) -> Vec<Vec<Value>> {
    let mut streams: Vec<Vec<Value>> = Vec::new();
    for line in fixture_text(dir, name).lines() {
        let payload: Value = serde_json::from_str(line).unwrap();
        if payload["type"] == "response.created" {
            streams.push(Vec::new());
        }
        streams.last_mut().unwrap().push(payload);
    }
    streams
}

fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .cloned()
        .collect()
}

/// The event sequence with runs of one kind collapsed: deltas vary in number, not in order.
fn runs(kinds: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut runs: Vec<String> = Vec::new();
    for kind in kinds {
        if runs.last() != Some(&kind) {
            runs.push(kind);
        }
    }
    runs
}

/// An event's kind: its type, with the type of the delta, item or content block it carries.
fn kind(payload: &Value) -> String {
    let kind = payload["type"].as_str().unwrap();
    let carried = ["delta", "item", "content_block"]
        .iter()
        .find_map(|field| payload[field]["type"].as_str());
    match carried {
        Some(carried) => format!("{kind}/{carried}"),
        None => kind.to_string(),
    }
}

/// Asserts that each of `ours` has the keys of the recorded payload of its kind (the first
/// with that kind), at the top and in `nested` fields, leaving out the keys in `ignore` (fields
/// added to a recording by hand).
fn assert_same_keys(ours: &[Value], recorded: &[Value], nested: &[&str], ignore: &[&str]) {
    for payload in ours {
        let kind = kind(payload);
        let Some(real) = recorded.iter().find(|r| self::kind(r) == kind) else {
            panic!("{kind}: no recorded event of this kind");
        };
        let strip = |v: &Value| {
            let mut keys = keys(v);
            keys.retain(|k| !ignore.contains(&k.as_str()));
            keys
        };
        assert_eq!(strip(payload), strip(real), "{kind}: {payload}");
        for field in nested {
            let (a, b) = (&payload[*field], &real[*field]);
            if a.is_object() && b.is_object() {
                assert_eq!(strip(a), strip(b), "{kind}.{field}: {a} vs {b}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Valid requests the three APIs start from

fn openai_request() -> Value {
    json!({
        "model": "gpt-5-mini",
        "instructions": "You are Sausage's agent.",
        "input": [{"role": "user", "content": "hi"}],
        "store": false,
        "stream": true,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "low"},
        "max_output_tokens": 16000,
        "tools": [{
            "type": "function",
            "name": "read_file",
            "description": "Reads a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        }],
    })
}

fn anthropic_request() -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 16000,
        "stream": true,
        "system": "You are Sausage's agent.",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{
            "name": "read_file",
            "description": "Reads a file.",
            "input_schema": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        }],
    })
}

/// A finished tool loop: the user asks, the assistant calls `read_file`, the result follows.
fn anthropic_tool_loop() -> Value {
    with(&anthropic_request(), |b| {
        b["messages"] = json!([
            {"role": "user", "content": [{"type": "text", "text": "read /a"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"path": "/a"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A", "is_error": false},
            ]},
        ]);
    })
}

fn chat_request() -> Value {
    json!({
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are Sausage's agent."},
            {"role": "user", "content": "hi"},
        ],
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_completion_tokens": 16000,
        "tools": [{
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Reads a file.",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
            },
        }],
    })
}

fn chat_call(id: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"/a\"}"}})
}

/// A finished tool loop: the user asks, the assistant calls `read_file`, the result follows.
fn chat_tool_loop() -> Value {
    with(&chat_request(), |b| {
        b["messages"] = json!([
            {"role": "system", "content": "You are Sausage's agent."},
            {"role": "user", "content": "read /a"},
            {"role": "assistant", "content": null, "tool_calls": [chat_call("call_a")]},
            {"role": "tool", "tool_call_id": "call_a", "content": "A"},
        ]);
    })
}

// ---------------------------------------------------------------------------------------------
// Script, recording and HTTP

#[test]
fn replies_come_back_in_order_and_requests_are_recorded() {
    let fake = FakeLlm::start_expecting_violations();
    let first = openai::text_reply("one");
    let second = anthropic::text_reply("two");
    let third = openai::error("insufficient_quota", "You exceeded your current quota.");
    fake.push_openai(first.clone());
    fake.push_anthropic(second.clone());
    fake.push_error(429, third.clone());

    let reply = send_openai(&fake, &openai_request());
    assert_eq!(reply.status, 200);
    assert_eq!(without_usage(&reply.body), without_usage(&first));
    assert!(reply.headers["x-request-id"].starts_with("req_"));
    assert!(reply.headers["content-type"].starts_with("text/event-stream"));
    assert_eq!(reply.headers["transfer-encoding"], "chunked");
    assert!(reply.complete);
    let reply = send_anthropic(&fake, &anthropic_request());
    assert_eq!(reply.status, 200);
    assert_eq!(without_usage(&reply.body), without_usage(&second));
    assert!(reply.headers["request-id"].starts_with("req_"));
    let reply = send_openai(&fake, &openai_request());
    assert_eq!((reply.status, &reply.body), (429, &third));
    assert_eq!(reply.headers["content-type"], "application/json");

    let requests = fake.requests();
    let seen: Vec<(&str, &str, u16)> = requests
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str(), r.status))
        .collect();
    assert_eq!(
        seen,
        [
            ("POST", "/v1/responses", 200),
            ("POST", "/v1/messages", 200),
            ("POST", "/v1/responses", 429)
        ]
    );
    assert_eq!(
        requests[0].headers["authorization"],
        format!("Bearer {}", TOKEN)
    );
    assert_eq!(requests[1].headers["anthropic-version"], "2023-06-01");
    assert_eq!(requests[1].body, anthropic_request());
    let usages: Vec<bool> = requests.iter().map(|r| r.usage.is_some()).collect();
    assert_eq!(usages, [true, true, false], "an error reports no usage");
    assert_eq!(fake.usage_log().len(), 2);
    fake.assert_clean();
}

#[test]
fn an_empty_script_or_a_reply_for_the_other_api_is_a_violation() {
    let fake = FakeLlm::start_expecting_violations();
    let reply = send_openai(&fake, &openai_request());
    assert_rejected(&fake, 0, &reply, 500, "empty script", "the script is empty");
    assert_eq!(reply.body["error"]["type"], "server_error");

    fake.push_anthropic(anthropic::text_reply("for anthropic"));
    let reply = send_openai(&fake, &openai_request());
    assert_rejected(
        &fake,
        1,
        &reply,
        500,
        "wrong API",
        "not for the OpenAI Responses API",
    );
    // The reply stayed queued for the API it was meant for.
    let reply = send_anthropic(&fake, &anthropic_request());
    assert_eq!(reply.body["content"][0]["text"], "for anthropic");
    assert_eq!(fake.violations().len(), 2);

    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fake.assert_clean()));
    let message = *result.unwrap_err().downcast::<String>().unwrap();
    assert!(message.contains("2 bad request(s)"), "{message}");
    assert!(message.contains("the script is empty"), "{message}");
}

#[test]
fn unknown_endpoints_are_violations() {
    let fake = FakeLlm::start_expecting_violations();
    for path in [
        "/responses",
        "/v1/v1/messages",
        "/chat/completions",
        "/v1/completions",
    ] {
        let before = fake.violations().len();
        let reply = post(&fake, path, OPENAI_HEADERS, &openai_request());
        assert_rejected(&fake, before, &reply, 404, path, "no such endpoint");
    }
    let mut stream = connect(&fake);
    stream
        .write_all(b"GET /v1/responses HTTP/1.1\r\nconnection: close\r\n\r\n")
        .unwrap();
    let reply = read_response(&mut BufReader::new(stream));
    assert_rejected(&fake, 4, &reply, 404, "GET", "no such endpoint");
}

#[test]
fn chunked_bodies_and_kept_alive_connections_are_served() {
    let fake = FakeLlm::start_expecting_violations();
    fake.push_openai(openai::text_reply("one"));
    fake.push_openai(openai::text_reply("two"));
    let body = openai_request().to_string();
    let (a, b) = body.as_bytes().split_at(body.len() / 2);

    // First a chunked request that keeps the connection, then a closing one on the same socket.
    let mut stream = connect(&fake);
    let mut chunked = b"POST /v1/responses HTTP/1.1\r\nhost: x\r\nauthorization: Bearer \
        sk-fake-test-token\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        .to_vec();
    for part in [a, b] {
        chunked.extend(format!("{:x};ext=1\r\n", part.len()).as_bytes());
        chunked.extend(part);
        chunked.extend(b"\r\n");
    }
    chunked.extend(b"0\r\nx-trailer: yes\r\n\r\n");
    stream.write_all(&chunked).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let first = read_response(&mut reader);
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["output"][0]["content"][0]["text"], "one");
    assert!(!first.headers.contains_key("connection"));

    let mut headers = OPENAI_HEADERS.to_vec();
    headers.push(("connection", "close"));
    stream
        .write_all(&request("/v1/responses", &headers, body.as_bytes()))
        .unwrap();
    let second = read_response(&mut reader);
    assert!(first.complete && second.complete);
    assert_eq!(second.body["output"][0]["content"][0]["text"], "two");
    assert_eq!(second.headers["connection"], "close");
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "the fake closed the connection");

    assert_eq!(fake.requests()[0].body, openai_request());
    fake.assert_clean();
}

// ---------------------------------------------------------------------------------------------
// OpenAI Responses checks

#[test]
fn openai_tokens_and_headers_are_checked() {
    let fake = FakeLlm::start_with_token("sk-other").expecting_violations();
    let body = openai_request();
    let cases = [
        (
            "no token",
            vec![("content-type", "application/json")],
            401,
            "You didn't provide an API key",
        ),
        (
            "the default token, not this fake's",
            OPENAI_HEADERS.to_vec(),
            401,
            "Incorrect API key",
        ),
        (
            "the token without Bearer",
            vec![
                ("authorization", "sk-other"),
                ("content-type", "application/json"),
            ],
            401,
            "Incorrect API key",
        ),
        (
            "no content type",
            vec![("authorization", "Bearer sk-other")],
            400,
            "content-type",
        ),
    ];
    for (i, (what, headers, status, fragment)) in cases.into_iter().enumerate() {
        let reply = post(&fake, "/v1/responses", &headers, &body);
        assert_rejected(&fake, i, &reply, status, what, fragment);
    }
    assert_eq!(fake.requests()[0].body, body);
}

#[test]
fn openai_requests_break_each_rule_alone() {
    let fake = FakeLlm::start_expecting_violations();
    let base = openai_request();
    fake.push_openai(openai::text_reply("the base request is valid"));
    assert_eq!(send_openai(&fake, &base).status, 200);
    let tool = |b: &mut Value, t: Value| b["tools"][0] = t;
    let call = json!({"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"/a\"}"});
    let output = json!({"type": "function_call_output", "call_id": "call_1", "output": "A"});
    let user = json!({"role": "user", "content": "hi"});

    let cases = [
        (
            "an unknown field",
            with(&base, |b| b["temprature"] = json!(1)),
            "Unknown parameter: 'temprature'",
        ),
        (
            "no model",
            with(&base, |b| {
                b["model"].take();
            }),
            "model: required",
        ),
        (
            "no store",
            with(&base, |b| {
                b.as_object_mut().unwrap().remove("store");
            }),
            "store: must be false",
        ),
        (
            "store true",
            with(&base, |b| b["store"] = json!(true)),
            "store: must be false",
        ),
        (
            "no include",
            with(&base, |b| {
                b.as_object_mut().unwrap().remove("include");
            }),
            "reasoning.encrypted_content",
        ),
        (
            "include without reasoning",
            with(&base, |b| {
                b["include"] = json!(["message.output_text.logprobs"])
            }),
            "reasoning.encrypted_content",
        ),
        (
            "previous_response_id",
            with(&base, |b| b["previous_response_id"] = json!("resp_1")),
            "previous_response_id",
        ),
        (
            "no stream",
            with(&base, |b| {
                b.as_object_mut().unwrap().remove("stream");
            }),
            "the agent must stream every request",
        ),
        (
            "stream false",
            with(&base, |b| b["stream"] = json!(false)),
            "the agent must stream every request",
        ),
        (
            "tiny max_output_tokens",
            with(&base, |b| b["max_output_tokens"] = json!(8)),
            "max_output_tokens",
        ),
        (
            "an unknown effort",
            with(&base, |b| b["reasoning"]["effort"] = json!("extreme")),
            "reasoning.effort",
        ),
        (
            "input as a string",
            with(&base, |b| b["input"] = json!("hi")),
            "input: expected an array",
        ),
        (
            "an item without type or role",
            with(&base, |b| b["input"] = json!([{"content": "hi"}])),
            "needs a type or a role",
        ),
        (
            "role tool",
            with(&base, |b| b["input"][0]["role"] = json!("tool")),
            "input[0].role",
        ),
        (
            "an unknown item field",
            with(&base, |b| b["input"][0]["name"] = json!("me")),
            "input[0].name: Unknown parameter",
        ),
        (
            "content as a number",
            with(&base, |b| b["input"][0]["content"] = json!(1)),
            "input[0].content",
        ),
        (
            "user output_text",
            with(&base, |b| {
                b["input"][0]["content"] = json!([{"type": "output_text", "text": "x"}])
            }),
            "Invalid value: \"output_text\"",
        ),
        (
            "assistant input_text",
            with(
                &base,
                |b| b["input"] = json!([user, {"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}]),
            ),
            "Invalid value: \"input_text\"",
        ),
        (
            "a text part without text",
            with(&base, |b| {
                b["input"][0]["content"] = json!([{"type": "input_text"}])
            }),
            "content[0].text",
        ),
        (
            "an unknown item type",
            with(&base, |b| b["input"] = json!([user, {"type": "tool_call"}])),
            "unknown item type",
        ),
        (
            "arguments as an object",
            with(&base, |b| {
                b["input"] = json!([
                    user,
                    with(&call, |c| c["arguments"] = json!({"path": "/a"})),
                    output
                ])
            }),
            "arguments: expected a string",
        ),
        (
            "arguments not JSON",
            with(&base, |b| {
                b["input"] = json!([
                    user,
                    with(&call, |c| c["arguments"] = json!("{path")),
                    output
                ])
            }),
            "arguments: not JSON",
        ),
        (
            "a call without call_id",
            with(&base, |b| {
                b["input"] = json!([
                    user,
                    with(&call, |c| {
                        c.as_object_mut().unwrap().remove("call_id");
                    }),
                    output
                ])
            }),
            "input[1].call_id",
        ),
        (
            "a call without output",
            with(&base, |b| b["input"] = json!([user, call])),
            "No tool output found for function call call_1.",
        ),
        (
            "an output without call",
            with(&base, |b| b["input"] = json!([user, output])),
            "No tool call found for function call output with call_id call_1.",
        ),
        (
            "an output before its call",
            with(&base, |b| b["input"] = json!([user, output, call])),
            "No tool call found",
        ),
        (
            "a call answered twice",
            with(&base, |b| b["input"] = json!([user, call, output, output])),
            "No tool call found",
        ),
        (
            "a duplicate call id",
            with(&base, |b| {
                b["input"] = json!([user, call, call, output, output])
            }),
            "duplicate function call call_1",
        ),
        (
            "an output as a number",
            with(&base, |b| {
                b["input"] = json!([user, call, with(&output, |o| o["output"] = json!(1))])
            }),
            "input[2].output",
        ),
        (
            "reasoning without encrypted_content",
            with(
                &base,
                |b| {
                    b["input"] = json!([user, {"type": "reasoning", "id": "rs_1", "summary": []}, call, output])
                },
            ),
            "encrypted_content: required",
        ),
        (
            "reasoning never sent",
            with(
                &base,
                |b| b["input"] = json!([user, {"type": "reasoning", "encrypted_content": "gAAAAABforged", "summary": []}, call, output]),
            ),
            "not one this fake sent",
        ),
        (
            "reasoning without summary",
            with(
                &base,
                |b| b["input"] = json!([user, {"type": "reasoning", "encrypted_content": "gAAAAABforged"}, call, output]),
            ),
            "summary: required",
        ),
        (
            "a web search tool",
            with(&base, |b| tool(b, json!({"type": "web_search"}))),
            "tools[0].type",
        ),
        (
            "a tool without parameters",
            with(&base, |b| {
                b["tools"][0].as_object_mut().unwrap().remove("parameters");
            }),
            "tools[0].parameters",
        ),
        (
            "a tool with string parameters",
            with(&base, |b| {
                b["tools"][0]["parameters"] = json!({"type": "string"})
            }),
            "tools[0].parameters",
        ),
        (
            "a tool with a bad name",
            with(&base, |b| b["tools"][0]["name"] = json!("read file")),
            "does not match",
        ),
        (
            "a tool with a long name",
            with(&base, |b| b["tools"][0]["name"] = json!("x".repeat(65))),
            "does not match",
        ),
        (
            "a tool with an unknown field",
            with(&base, |b| b["tools"][0]["input_schema"] = json!({})),
            "tools[0].input_schema: Unknown parameter",
        ),
        (
            "a tool description as a number",
            with(&base, |b| b["tools"][0]["description"] = json!(1)),
            "tools[0].description",
        ),
        (
            "two tools named alike",
            with(&base, |b| {
                let t = b["tools"][0].clone();
                b["tools"] = json!([t, t]);
            }),
            "duplicate tool name",
        ),
        (
            "strict without additionalProperties",
            with(&base, |b| b["tools"][0]["strict"] = json!(true)),
            "additionalProperties",
        ),
        (
            "strict with an optional property",
            with(&base, |b| {
                b["tools"][0]["strict"] = json!(true);
                b["tools"][0]["parameters"]["additionalProperties"] = json!(false);
                b["tools"][0]["parameters"]["properties"]["offset"] = json!({"type": "integer"});
            }),
            "missing \"offset\"",
        ),
    ];
    for (i, (what, body, fragment)) in cases.iter().enumerate() {
        let reply = send_openai(&fake, body);
        assert_rejected(&fake, i, &reply, 400, what, fragment);
        assert_eq!(
            reply.body["error"]["type"], "invalid_request_error",
            "{what}"
        );
    }

    // Rejections consumed no reply: these valid variations are answered in order.
    let valid = [
        with(
            &base,
            |b| b["input"] = json!([user, {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed", "content": [{"type": "output_text", "text": "x", "annotations": []}]}, {"role": "developer", "content": [{"type": "input_text", "text": "note"}]}]),
        ),
        with(
            &base,
            |b| b["input"] = json!([user, call, {"type": "function_call", "call_id": "call_2", "name": "read_file", "arguments": "{}"}, with(&output, |o| o["call_id"] = json!("call_2")), output]),
        ),
        with(&base, |b| {
            b["tools"][0]["strict"] = json!(true);
            b["tools"][0]["parameters"]["additionalProperties"] = json!(false);
        }),
    ];
    for (n, body) in valid.iter().enumerate() {
        fake.push_openai(openai::text_reply(&format!("valid {n}")));
        let reply = send_openai(&fake, body);
        assert_eq!(reply.status, 200, "valid {n}: {}", reply.body);
        assert_eq!(
            reply.body["output"][0]["content"][0]["text"],
            format!("valid {n}")
        );
    }
    assert_eq!(fake.violations().len(), cases.len());
}

#[test]
fn openai_reasoning_must_come_back_as_sent() {
    let fake = FakeLlm::start_expecting_violations();
    let sent = openai::reply(vec![
        openai::reasoning("The user wants /a."),
        openai::function_call("read_file", json!({"path": "/a"})),
    ]);
    fake.push_openai(sent.clone());
    let streamed = send_openai(&fake, &openai_request());
    assert_eq!(without_usage(&streamed.body), without_usage(&sent));
    let added = streamed
        .payloads()
        .into_iter()
        .find(|p| p["type"] == "response.output_item.added")
        .unwrap();
    assert_ne!(
        added["item"]["encrypted_content"], sent["output"][0]["encrypted_content"],
        "as from the real API, only the finished item's encrypted_content is the one to keep"
    );

    let [reasoning, call] = [&sent["output"][0], &sent["output"][1]];
    let output = json!({"type": "function_call_output", "call_id": call["call_id"], "output": "A"});
    let passback = |reasoning: Value, rest: &[&Value]| {
        with(&openai_request(), |b| {
            let mut input = vec![json!({"role": "user", "content": "read /a"}), reasoning];
            input.extend(rest.iter().map(|v| (*v).clone()));
            b["input"] = json!(input);
        })
    };
    let cases = [
        (
            "changed encrypted_content",
            passback(
                with(reasoning, |r| {
                    r["encrypted_content"] =
                        json!(format!("{}x", r["encrypted_content"].as_str().unwrap()))
                }),
                &[call, &output],
            ),
            "not one this fake sent",
        ),
        (
            "another item's id",
            passback(
                with(reasoning, |r| r["id"] = json!("rs_other")),
                &[call, &output],
            ),
            "is not the id",
        ),
        (
            "reasoning kept from output_item.added",
            passback(
                with(reasoning, |r| {
                    r["encrypted_content"] = added["item"]["encrypted_content"].clone()
                }),
                &[call, &output],
            ),
            "not one this fake sent",
        ),
        (
            "reasoning without its call",
            passback(reasoning.clone(), &[&output]),
            "without its required following item",
        ),
    ];
    for (i, (what, body, fragment)) in cases.iter().enumerate() {
        let reply = send_openai(&fake, body);
        assert_rejected(&fake, i, &reply, 400, what, fragment);
    }

    // Passed back whole (the summary dropped is fine: only the encrypted content is verified).
    fake.push_openai(openai::text_reply("A says hello"));
    let whole = passback(reasoning.clone(), &[call, &output]);
    assert_eq!(send_openai(&fake, &whole).status, 200);
    let without_id = with(reasoning, |r| {
        r.as_object_mut().unwrap().remove("id");
        r["summary"] = json!([]);
    });
    fake.push_openai(openai::text_reply("again"));
    let reply = send_openai(&fake, &passback(without_id, &[call, &output]));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(fake.violations().len(), cases.len());
}

// ---------------------------------------------------------------------------------------------
// Anthropic Messages checks

#[test]
fn anthropic_tokens_and_headers_are_checked() {
    let fake = FakeLlm::start_expecting_violations();
    let json_type = ("content-type", "application/json");
    let key = ("x-api-key", TOKEN);
    let version = ("anthropic-version", "2023-06-01");
    let cases = [
        (
            "no key",
            vec![json_type, version],
            401,
            "x-api-key header is required",
        ),
        (
            "a wrong key",
            vec![json_type, version, ("x-api-key", "sk-wrong")],
            401,
            "invalid x-api-key",
        ),
        (
            "a bearer token instead",
            vec![
                json_type,
                version,
                ("authorization", "Bearer sk-fake-test-token"),
            ],
            401,
            "x-api-key header is required",
        ),
        (
            "no version",
            vec![json_type, key],
            400,
            "anthropic-version: header is required",
        ),
        (
            "an unknown version",
            vec![json_type, key, ("anthropic-version", "2025-01-01")],
            400,
            "not a valid version",
        ),
    ];
    for (i, (what, headers, status, fragment)) in cases.into_iter().enumerate() {
        let reply = post(&fake, "/v1/messages", &headers, &anthropic_request());
        assert_rejected(&fake, i, &reply, status, what, fragment);
        assert_eq!(reply.body["type"], "error", "{what}");
        let kind = if status == 401 {
            "authentication_error"
        } else {
            "invalid_request_error"
        };
        assert_eq!(reply.body["error"]["type"], kind, "{what}");
    }
}

#[test]
fn anthropic_requests_break_each_rule_alone() {
    let fake = FakeLlm::start_expecting_violations();
    let base = anthropic_request();
    let tool_loop = anthropic_tool_loop();
    for body in [&base, &tool_loop] {
        fake.push_anthropic(anthropic::text_reply("valid"));
        let reply = send_anthropic(&fake, body);
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let messages = |b: &mut Value, m: Value| b["messages"] = m;
    let user = json!({"role": "user", "content": "hi"});
    let tool_use = |id: &str| json!({"type": "tool_use", "id": id, "name": "read_file", "input": {"path": "/a"}});
    let tool_result = |id: &str| json!({"type": "tool_result", "tool_use_id": id, "content": "A"});
    let asks = |blocks: Value| json!({"role": "assistant", "content": blocks});
    let answers = |blocks: Value| json!({"role": "user", "content": blocks});
    let thinking_on =
        |b: &mut Value| b["thinking"] = json!({"type": "enabled", "budget_tokens": 2000});
    let ephemeral = json!({"type": "ephemeral"});

    let cases = [
        (
            "an unknown field",
            with(&base, |b| b["max_tokens_to_sample"] = json!(1)),
            "max_tokens_to_sample: Extra inputs are not permitted",
        ),
        (
            "no model",
            with(&base, |b| {
                b.as_object_mut().unwrap().remove("model");
            }),
            "model",
        ),
        (
            "no max_tokens",
            with(&base, |b| {
                b.as_object_mut().unwrap().remove("max_tokens");
            }),
            "max_tokens: Field required",
        ),
        (
            "max_tokens 0",
            with(&base, |b| b["max_tokens"] = json!(0)),
            "max_tokens",
        ),
        (
            "max_tokens as a string",
            with(&base, |b| b["max_tokens"] = json!("100")),
            "max_tokens",
        ),
        (
            "no stream",
            with(&base, |b| {
                b.as_object_mut().unwrap().remove("stream");
            }),
            "the agent must stream every request",
        ),
        (
            "stream false",
            with(&base, |b| b["stream"] = json!(false)),
            "the agent must stream every request",
        ),
        (
            "system as a number",
            with(&base, |b| b["system"] = json!(1)),
            "system",
        ),
        (
            "system with an image",
            with(&base, |b| b["system"] = json!([{"type": "image"}])),
            "system.0",
        ),
        (
            "no messages",
            with(&base, |b| messages(b, json!([]))),
            "messages: expected a non-empty array",
        ),
        (
            "assistant first",
            with(&base, |b| messages(b, json!([asks(json!("hello")), user]))),
            "starting with \"user\"",
        ),
        (
            "two users in a row",
            with(&base, |b| messages(b, json!([user, user]))),
            "roles must alternate",
        ),
        (
            "a system role",
            with(&base, |b| b["messages"][0]["role"] = json!("system")),
            "messages.0.role",
        ),
        (
            "an unknown message field",
            with(&base, |b| b["messages"][0]["name"] = json!("me")),
            "messages.0.name: Unknown parameter",
        ),
        (
            "empty string content",
            with(&base, |b| b["messages"][0]["content"] = json!("")),
            "non-empty",
        ),
        (
            "empty block list",
            with(&base, |b| b["messages"][0]["content"] = json!([])),
            "messages.0.content",
        ),
        (
            "an empty text block",
            with(&base, |b| {
                b["messages"][0]["content"] = json!([{"type": "text", "text": ""}])
            }),
            "text content blocks must be non-empty",
        ),
        (
            "an unknown block field",
            with(&base, |b| {
                b["messages"][0]["content"] = json!([{"type": "text", "text": "x", "id": 1}])
            }),
            "content.0.id: Unknown parameter",
        ),
        (
            "an unknown block type",
            with(&base, |b| {
                b["messages"][0]["content"] = json!([{"type": "input_text", "text": "x"}])
            }),
            "unknown block type",
        ),
        (
            "tool_use from the user",
            with(&base, |b| {
                messages(b, json!([answers(json!([tool_use("toolu_a")]))]))
            }),
            "tool_use blocks belong in assistant messages",
        ),
        (
            "tool_result from the assistant",
            with(&tool_loop, |b| {
                b["messages"][1]["content"] = json!([tool_result("toolu_a")])
            }),
            "tool_result blocks belong in user messages",
        ),
        (
            "a tool_use answered by text",
            with(&tool_loop, |b| b["messages"][2]["content"] = json!("go on")),
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_a",
        ),
        (
            "a tool_use left at the end",
            with(&base, |b| {
                messages(b, json!([user, asks(json!([tool_use("toolu_a")]))]))
            }),
            "without `tool_result`",
        ),
        (
            "one of two tool_uses answered",
            with(&tool_loop, |b| {
                b["messages"][1]["content"] = json!([tool_use("toolu_a"), tool_use("toolu_b")])
            }),
            "immediately after: toolu_b",
        ),
        (
            "a tool_result for nothing",
            with(&tool_loop, |b| {
                b["messages"][2]["content"] =
                    json!([tool_result("toolu_a"), tool_result("toolu_z")])
            }),
            "unexpected `tool_use_id` found in `tool_result` blocks: toolu_z",
        ),
        (
            "a tool_result answered twice",
            with(&tool_loop, |b| {
                b["messages"][2]["content"] =
                    json!([tool_result("toolu_a"), tool_result("toolu_a")])
            }),
            "unexpected `tool_use_id`",
        ),
        (
            "a tool_result one turn late",
            with(&tool_loop, |b| {
                let late = json!([
                    user,
                    asks(json!("ok")),
                    answers(json!([tool_result("toolu_a")]))
                ]);
                b["messages"]
                    .as_array_mut()
                    .unwrap()
                    .extend(late.as_array().unwrap().iter().skip(1).cloned());
            }),
            "messages.4.content.0: unexpected `tool_use_id`",
        ),
        (
            "a duplicate tool_use id",
            with(&tool_loop, |b| {
                let more = json!([
                    asks(json!([tool_use("toolu_a")])),
                    answers(json!([tool_result("toolu_a")]))
                ]);
                b["messages"]
                    .as_array_mut()
                    .unwrap()
                    .extend(more.as_array().unwrap().iter().cloned());
            }),
            "`tool_use` ids must be unique",
        ),
        (
            "a tool_use id with a dot",
            with(&tool_loop, |b| {
                b["messages"][1]["content"][1]["id"] = json!("toolu.a");
                b["messages"][2]["content"][0]["tool_use_id"] = json!("toolu.a");
            }),
            "must match",
        ),
        (
            "a tool_use input as a string",
            with(&tool_loop, |b| {
                b["messages"][1]["content"][1]["input"] = json!("{}")
            }),
            "content.1.input",
        ),
        (
            "is_error as a string",
            with(&tool_loop, |b| {
                b["messages"][2]["content"][0]["is_error"] = json!("no")
            }),
            "is_error",
        ),
        (
            "tool blocks without tools",
            with(&tool_loop, |b| {
                b.as_object_mut().unwrap().remove("tools");
            }),
            "must define tools",
        ),
        (
            "a thinking block never sent",
            with(
                &tool_loop,
                |b| b["messages"][1]["content"] = json!([{"type": "thinking", "thinking": "hm", "signature": "EqQB"}, tool_use("toolu_a")]),
            ),
            "Invalid `signature` in `thinking` block",
        ),
        (
            "a thinking block without signature",
            with(
                &tool_loop,
                |b| {
                    b["messages"][1]["content"] =
                        json!([{"type": "thinking", "thinking": "hm"}, tool_use("toolu_a")])
                },
            ),
            "Invalid `signature`",
        ),
        (
            "a redacted_thinking block never sent",
            with(
                &tool_loop,
                |b| {
                    b["messages"][1]["content"] =
                        json!([{"type": "redacted_thinking", "data": "EmwK"}, tool_use("toolu_a")])
                },
            ),
            "not a redacted_thinking block this fake sent",
        ),
        (
            "a tool without input_schema",
            with(&base, |b| {
                b["tools"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("input_schema");
            }),
            "tools.0.input_schema",
        ),
        (
            "a tool with an array schema",
            with(&base, |b| {
                b["tools"][0]["input_schema"] = json!({"type": "array"})
            }),
            "tools.0.input_schema",
        ),
        (
            "a tool in OpenAI's shape",
            with(&base, |b| {
                b["tools"][0]["parameters"] = json!({"type": "object"})
            }),
            "tools.0.parameters: Unknown parameter",
        ),
        (
            "a server tool",
            with(&base, |b| b["tools"][0]["type"] = json!("bash_20250124")),
            "only custom tools",
        ),
        (
            "a tool with a bad name",
            with(&base, |b| b["tools"][0]["name"] = json!("read/file")),
            "does not match",
        ),
        (
            "two tools named alike",
            with(&base, |b| {
                let t = b["tools"][0].clone();
                b["tools"] = json!([t, t]);
            }),
            "Tool names must be unique",
        ),
        (
            "a thinking budget under 1024",
            with(&base, |b| {
                b["thinking"] = json!({"type": "enabled", "budget_tokens": 500})
            }),
            "budget_tokens",
        ),
        (
            "a thinking budget over max_tokens",
            with(&base, |b| {
                b["thinking"] = json!({"type": "enabled", "budget_tokens": 16000})
            }),
            "less than max_tokens",
        ),
        (
            "an unknown thinking type",
            with(&base, |b| b["thinking"] = json!({"type": "on"})),
            "thinking.type",
        ),
        (
            "thinking with a forced tool",
            with(&base, |b| {
                thinking_on(b);
                b["tool_choice"] = json!({"type": "any"});
            }),
            "Thinking may not be enabled",
        ),
        (
            "thinking dropped in a tool loop",
            with(&tool_loop, thinking_on),
            "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`",
        ),
        (
            "five cache breakpoints",
            with(&tool_loop, |b| {
                b["tools"][0]["cache_control"] = ephemeral.clone();
                b["system"] = json!([
                    {"type": "text", "text": "You are", "cache_control": ephemeral},
                    {"type": "text", "text": "Sausage's agent.", "cache_control": ephemeral},
                ]);
                b["messages"][0]["content"][0]["cache_control"] = ephemeral.clone();
                b["messages"][2]["content"][0]["cache_control"] = ephemeral.clone();
            }),
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
        (
            "cache_control on an empty system block",
            with(
                &base,
                |b| b["system"] = json!([{"type": "text", "text": "", "cache_control": ephemeral}]),
            ),
            "system.0.text: cache_control cannot be set for empty text blocks",
        ),
        (
            "cache_control on an empty text block",
            with(
                &base,
                |b| {
                    b["messages"][0]["content"] =
                        json!([{"type": "text", "text": "", "cache_control": ephemeral}])
                },
            ),
            "messages.0.content.0.text: cache_control cannot be set for empty text blocks",
        ),
        (
            "a cache_control of another type",
            with(&base, |b| {
                b["tools"][0]["cache_control"] = json!({"type": "persistent"})
            }),
            "tools.0.cache_control.type",
        ),
        (
            "a cache ttl of a day",
            with(&base, |b| {
                b["tools"][0]["cache_control"] = json!({"type": "ephemeral", "ttl": "1d"})
            }),
            "tools.0.cache_control.ttl",
        ),
        (
            "a cache_control with an unknown field",
            with(&base, |b| {
                b["tools"][0]["cache_control"] = json!({"type": "ephemeral", "scope": "org"})
            }),
            "tools.0.cache_control.scope: Unknown parameter",
        ),
        (
            "an hour-long breakpoint after a five-minute one",
            with(&base, |b| {
                b["tools"][0]["cache_control"] = ephemeral.clone();
                b["system"] = json!([{"type": "text", "text": "You are Sausage's agent.",
                                      "cache_control": {"type": "ephemeral", "ttl": "1h"}}]);
            }),
            "system.0.cache_control.ttl: a ttl='1h'",
        ),
        (
            "a system block with an unknown field",
            with(&base, |b| {
                b["system"] = json!([{"type": "text", "text": "x", "id": 1}])
            }),
            "system.0.id: Unknown parameter",
        ),
    ];
    for (i, (what, body, fragment)) in cases.iter().enumerate() {
        let reply = send_anthropic(&fake, body);
        assert_rejected(&fake, i, &reply, 400, what, fragment);
        assert_eq!(
            reply.body["error"]["type"], "invalid_request_error",
            "{what}"
        );
    }

    // Rejections consumed no reply, and these valid variations are answered.
    let valid = [
        with(&base, |b| {
            b["system"] = json!([{"type": "text", "text": "You are Sausage's agent."}])
        }),
        with(&base, |b| {
            thinking_on(b);
            b["tool_choice"] = json!({"type": "auto"});
        }),
        with(&tool_loop, |b| {
            b["messages"][1]["content"] = json!([tool_use("toolu_a"), tool_use("toolu_b")]);
            b["messages"][2]["content"] = json!([tool_result("toolu_b"), {"type": "tool_result", "tool_use_id": "toolu_a", "content": [{"type": "text", "text": "A"}], "is_error": true}, {"type": "text", "text": "both done"}]);
        }),
        with(&tool_loop, |b| {
            b["messages"]
                .as_array_mut()
                .unwrap()
                .push(asks(json!("prefilled")))
        }),
        with(&tool_loop, |b| {
            let hour = json!({"type": "ephemeral", "ttl": "1h"});
            b["tools"][0]["cache_control"] = hour.clone();
            b["system"] = json!([{"type": "text", "text": "You are", "cache_control": hour},
                                 {"type": "text", "text": "Sausage's agent."}]);
            b["messages"][1]["content"][1]["cache_control"] = ephemeral.clone();
            b["messages"][2]["content"][0]["cache_control"] =
                json!({"type": "ephemeral", "ttl": "5m"});
        }),
    ];
    for (n, body) in valid.iter().enumerate() {
        fake.push_anthropic(anthropic::text_reply(&format!("valid {n}")));
        let reply = send_anthropic(&fake, body);
        assert_eq!(reply.status, 200, "valid {n}: {}", reply.body);
        assert_eq!(reply.body["content"][0]["text"], format!("valid {n}"));
    }
    assert_eq!(fake.violations().len(), cases.len());
}

#[test]
fn anthropic_thinking_must_come_back_as_sent() {
    let fake = FakeLlm::start_expecting_violations();
    let sent = anthropic::reply(vec![
        anthropic::thinking("The user wants /a."),
        anthropic::text("Reading."),
        anthropic::tool_use("read_file", json!({"path": "/a"})),
    ]);
    assert_eq!(sent["stop_reason"], "tool_use");
    let thinking_on =
        |b: &mut Value| b["thinking"] = json!({"type": "enabled", "budget_tokens": 2000});
    fake.push_anthropic(sent.clone());
    assert_eq!(
        without_usage(&send_anthropic(&fake, &with(&anthropic_request(), thinking_on)).body),
        without_usage(&sent)
    );

    let id = sent["content"][2]["id"].clone();
    let passback = |content: Value| {
        with(&anthropic_request(), |b| {
            thinking_on(b);
            b["messages"] = json!([
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "A"}]},
            ]);
        })
    };
    let blocks = sent["content"].clone();
    let cases = [
        (
            "a changed signature",
            with(&blocks, |b| {
                b[0]["signature"] = json!(format!("{}A", b[0]["signature"].as_str().unwrap()))
            }),
            "Invalid `signature`",
        ),
        (
            "a changed thinking",
            with(&blocks, |b| b[0]["thinking"] = json!("The user wants /b.")),
            "Invalid `signature`",
        ),
        (
            "the thinking moved after the text",
            json!([blocks[1], blocks[0], blocks[2]]),
            "Expected `thinking`",
        ),
    ];
    for (i, (what, content, fragment)) in cases.iter().enumerate() {
        let reply = send_anthropic(&fake, &passback(content.clone()));
        assert_rejected(&fake, i, &reply, 400, what, fragment);
    }
    fake.push_anthropic(anthropic::text_reply("A says hello"));
    let reply = send_anthropic(&fake, &passback(blocks));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(fake.violations().len(), cases.len());
}

// ---------------------------------------------------------------------------------------------
// Against the real recordings

#[test]
fn the_recorded_thinking_passback_request_is_valid_once_its_signature_was_sent() {
    let Some(dir) = fixtures() else { return };
    let recorded_reply = fixture(&dir, "anthropic-messages_nonstream_thinking_tool-use.json");
    // The recording did not stream; the agent must.
    let recorded_request = with(
        &fixture(&dir, "anthropic-messages_request_thinking-passback.json"),
        |b| b["stream"] = json!(true),
    );

    let fake = FakeLlm::start_expecting_violations();
    // Before the fake sent that signature, the request is a forgery.
    let reply = send_anthropic(&fake, &recorded_request);
    assert_rejected(
        &fake,
        0,
        &reply,
        400,
        "unsent signature",
        "Invalid `signature`",
    );

    // The first request of the recorded exchange: the question alone, with the same settings.
    let first = with(&recorded_request, |b| {
        b["messages"] = json!([b["messages"][0].clone()]);
    });
    fake.push_anthropic(recorded_reply.clone());
    assert_eq!(
        without_usage(&send_anthropic(&fake, &first).body),
        without_usage(&recorded_reply)
    );
    fake.push_anthropic(anthropic::text_reply("Mexico City."));
    let reply = send_anthropic(&fake, &recorded_request);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(fake.violations().len(), 1);
}

#[test]
fn openai_replies_have_the_recorded_shape() {
    let Some(dir) = fixtures() else { return };
    let function_call = fixture(&dir, "openai-responses_nonstream_function-call.json");
    let text = fixture(&dir, "openai-responses_nonstream_text.json");
    let reasoning = fixture(
        &dir,
        "openai-responses_nonstream_reasoning-encrypted_store-false.json",
    );
    let recorded = [&function_call, &text, &reasoning];

    let replies = [
        openai::reply(vec![
            openai::reasoning("Boston first."),
            openai::function_call("get_current_weather", json!({"location": "Boston, MA"})),
            openai::function_call("get_current_weather", json!({"location": "Paris"})),
        ]),
        openai::text_reply("It is sunny."),
    ];
    let all_keys: BTreeSet<String> = recorded.iter().flat_map(|r| keys(r)).collect();
    let recorded_item = |kind: &str| {
        recorded
            .iter()
            .flat_map(|r| r["output"].as_array().unwrap())
            .find(|item| item["type"] == kind)
            .unwrap()
            .clone()
    };
    for reply in &replies {
        // Every key the functions example has, and no key no recording has.
        assert!(keys(reply).is_superset(&keys(&function_call)), "{reply}");
        assert!(keys(reply).is_subset(&all_keys), "{reply}");
        assert_eq!(keys(&reply["usage"]), keys(&reasoning["usage"]));
        assert_eq!(reply["object"], "response");
        assert_eq!(reply["status"], "completed");
        for item in reply["output"].as_array().unwrap() {
            let kind = item["type"].as_str().unwrap();
            let real = recorded_item(kind);
            assert_eq!(keys(item), keys(&real), "{kind}");
            let prefix = |v: &Value| v.as_str().unwrap().split('_').next().unwrap().to_string();
            assert_eq!(prefix(&item["id"]), prefix(&real["id"]), "{kind}");
            match kind {
                "function_call" => {
                    assert!(item["call_id"].as_str().unwrap().starts_with("call_"));
                    assert_eq!(
                        item["call_id"].as_str().unwrap().len(),
                        real["call_id"].as_str().unwrap().len()
                    );
                    let arguments = item["arguments"].as_str().unwrap();
                    assert!(
                        serde_json::from_str::<Value>(arguments)
                            .unwrap()
                            .is_object()
                    );
                }
                "reasoning" => {
                    assert!(
                        item["encrypted_content"]
                            .as_str()
                            .unwrap()
                            .starts_with("gAAAAA")
                    );
                    assert_eq!(keys(&item["summary"][0]), keys(&real["summary"][0]));
                }
                _ => assert_eq!(keys(&item["content"][0]), keys(&real["content"][0])),
            }
        }
        assert!(reply["id"].as_str().unwrap().starts_with("resp_"));
    }
    let call_ids: BTreeSet<&str> = replies[0]["output"].as_array().unwrap()[1..]
        .iter()
        .map(|c| c["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(call_ids.len(), 2, "call ids are fresh");
}

#[test]
fn anthropic_replies_have_the_recorded_shape() {
    let Some(dir) = fixtures() else { return };
    let parallel = fixture(&dir, "anthropic-messages_nonstream_parallel-tool-use.json");
    let thinking = fixture(&dir, "anthropic-messages_nonstream_thinking_tool-use.json");
    let cache = fixture(&dir, "anthropic-messages_nonstream_cache-read.json");

    let tools = anthropic::reply(vec![
        anthropic::thinking("Alice first."),
        anthropic::text("Let me look them up."),
        anthropic::tool_use("retrieve_entity_info", json!({"name": "Alice"})),
        anthropic::tool_use("retrieve_entity_info", json!({"name": "Bob"})),
    ]);
    let text = anthropic::text_reply("Bob is the youngest.");
    assert_eq!(tools["stop_reason"], "tool_use");
    assert_eq!(text["stop_reason"], "end_turn");
    let usage_keys: BTreeSet<String> = [&parallel, &thinking, &cache]
        .iter()
        .flat_map(|r| keys(&r["usage"]))
        .collect();
    let recorded_block = |kind: &str| {
        [&parallel, &thinking]
            .iter()
            .flat_map(|r| r["content"].as_array().unwrap())
            .find(|b| b["type"] == kind)
            .unwrap()
            .clone()
    };
    for reply in [&tools, &text] {
        assert_eq!(keys(reply), keys(&parallel), "{reply}");
        assert!(keys(&reply["usage"]).is_superset(&keys(&parallel["usage"])));
        assert!(keys(&reply["usage"]).is_subset(&usage_keys));
        assert_eq!(
            keys(&reply["usage"]["cache_creation"]),
            keys(&parallel["usage"]["cache_creation"])
        );
        assert_eq!(
            reply["id"].as_str().unwrap().len(),
            parallel["id"].as_str().unwrap().len()
        );
        assert!(reply["id"].as_str().unwrap().starts_with("msg_01"));
        for block in reply["content"].as_array().unwrap() {
            let real = recorded_block(block["type"].as_str().unwrap());
            assert_eq!(keys(block), keys(&real), "{block}");
        }
    }
    let tool_use = &tools["content"][2];
    let real_tool_use = recorded_block("tool_use");
    assert!(tool_use["id"].as_str().unwrap().starts_with("toolu_01"));
    assert_eq!(
        tool_use["id"].as_str().unwrap().len(),
        real_tool_use["id"].as_str().unwrap().len()
    );
    assert_ne!(tools["content"][2]["id"], tools["content"][3]["id"]);
}

#[test]
fn errors_have_the_recorded_shape() {
    let Some(dir) = fixtures() else { return };
    let openai_real = fixture(&dir, "openai-responses_error_429-insufficient-quota.json");
    let anthropic_real = fixture(&dir, "anthropic-messages_error_429-rate-limit.json");

    let built = openai::error("insufficient_quota", "You exceeded your current quota.");
    assert_eq!(keys(&built), keys(&openai_real));
    assert_eq!(keys(&built["error"]), keys(&openai_real["error"]));
    assert_eq!(built["error"]["code"], openai_real["error"]["code"]);
    let built = anthropic::error("rate_limit_error", "Slow down.");
    assert_eq!(keys(&built), keys(&anthropic_real));
    assert_eq!(keys(&built["error"]), keys(&anthropic_real["error"]));

    // The fake's own rejections take the same shape.
    let fake = FakeLlm::start_expecting_violations();
    let rejected = send_openai(&fake, &json!({"model": "gpt-5"})).body;
    assert_eq!(keys(&rejected), keys(&openai_real));
    assert_eq!(keys(&rejected["error"]), keys(&openai_real["error"]));
    let rejected = send_anthropic(&fake, &json!({"model": "claude"})).body;
    assert_eq!(keys(&rejected), keys(&anthropic_real));
    assert_eq!(keys(&rejected["error"]), keys(&anthropic_real["error"]));
    // Chat Completions errors take OpenAI's shape.
    let built = chat::error("insufficient_quota", "You exceeded your current quota.");
    assert_eq!(
        built,
        openai::error("insufficient_quota", "You exceeded your current quota.")
    );
    let rejected = send_chat(&fake, &json!({"model": "gpt-4o"})).body;
    assert_eq!(keys(&rejected), keys(&openai_real));
    assert_eq!(keys(&rejected["error"]), keys(&openai_real["error"]));
    assert_eq!(fake.violations().len(), 3);
}

// ---------------------------------------------------------------------------------------------
// OpenAI Chat Completions checks

#[test]
fn chat_tokens_and_headers_are_checked() {
    let fake = FakeLlm::start_with_token("sk-other").expecting_violations();
    let body = chat_request();
    let cases = [
        (
            "no token",
            vec![("content-type", "application/json")],
            401,
            "You didn't provide an API key",
        ),
        (
            "the default token, not this fake's",
            OPENAI_HEADERS.to_vec(),
            401,
            "Incorrect API key",
        ),
        (
            "Anthropic's header instead",
            vec![
                ("x-api-key", "sk-other"),
                ("content-type", "application/json"),
            ],
            401,
            "You didn't provide an API key",
        ),
        (
            "no content type",
            vec![("authorization", "Bearer sk-other")],
            400,
            "content-type",
        ),
    ];
    for (i, (what, headers, status, fragment)) in cases.into_iter().enumerate() {
        let reply = post(&fake, "/v1/chat/completions", &headers, &body);
        assert_rejected(&fake, i, &reply, status, what, fragment);
    }
    assert_eq!(fake.requests()[0].body, body);
}

#[test]
fn chat_requests_break_each_rule_alone() {
    let fake = FakeLlm::start_expecting_violations();
    let base = chat_request();
    let tool_loop = chat_tool_loop();
    for body in [&base, &tool_loop] {
        fake.push_chat(chat::text_reply("valid"));
        let reply = send_chat(&fake, body);
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let system = json!({"role": "system", "content": "You are Sausage's agent."});
    let user = json!({"role": "user", "content": "hi"});
    let answers = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "A"});
    let asks = |calls: Value| json!({"role": "assistant", "content": null, "tool_calls": calls});
    let remove = |b: &mut Value, key: &str| {
        b.as_object_mut().unwrap().remove(key);
    };
    let push = |b: &mut Value, more: Value| {
        let messages = b["messages"].as_array_mut().unwrap();
        messages.extend(more.as_array().unwrap().iter().cloned());
    };

    let cases = [
        (
            "an unknown field",
            with(&base, |b| b["max_output_tokens"] = json!(100)),
            "Unrecognized request argument supplied: max_output_tokens",
        ),
        (
            "no model",
            with(&base, |b| remove(b, "model")),
            "model: required",
        ),
        (
            "no stream",
            with(&base, |b| remove(b, "stream")),
            "the agent must stream every request",
        ),
        (
            "stream false",
            with(&base, |b| b["stream"] = json!(false)),
            "the agent must stream every request",
        ),
        (
            "no stream_options",
            with(&base, |b| remove(b, "stream_options")),
            "stream_options: must be {\"include_usage\": true}",
        ),
        (
            "usage left out",
            with(&base, |b| {
                b["stream_options"]["include_usage"] = json!(false)
            }),
            "stream_options: must be {\"include_usage\": true}",
        ),
        (
            "an unknown stream option",
            with(&base, |b| b["stream_options"]["chunk_size"] = json!(1)),
            "stream_options.chunk_size: Unknown parameter",
        ),
        (
            "both max tokens",
            with(&base, |b| b["max_tokens"] = json!(100)),
            "give one of them, not both",
        ),
        (
            "max_completion_tokens 0",
            with(&base, |b| b["max_completion_tokens"] = json!(0)),
            "max_completion_tokens: expected a positive integer",
        ),
        (
            "no messages",
            with(&base, |b| remove(b, "messages")),
            "Missing required parameter: 'messages'",
        ),
        (
            "empty messages",
            with(&base, |b| b["messages"] = json!([])),
            "[] is too short - 'messages'",
        ),
        (
            "a function role",
            with(&base, |b| b["messages"][1]["role"] = json!("function")),
            "messages[1].role: Invalid value",
        ),
        (
            "an unknown message field",
            with(&base, |b| b["messages"][1]["id"] = json!(1)),
            "messages[1].id: Unknown parameter",
        ),
        (
            "content as a number",
            with(&base, |b| b["messages"][1]["content"] = json!(1)),
            "messages[1].content",
        ),
        (
            "a user part of Responses' type",
            with(&base, |b| {
                b["messages"][1]["content"] = json!([{"type": "input_text", "text": "x"}])
            }),
            "Invalid value: \"input_text\"",
        ),
        (
            "a text part without text",
            with(&base, |b| {
                b["messages"][1]["content"] = json!([{"type": "text"}])
            }),
            "messages[1].content[0].text",
        ),
        (
            "an assistant without content or calls",
            with(&base, |b| {
                b["messages"] = json!([system, user, {"role": "assistant"}, user])
            }),
            "content is required unless tool_calls",
        ),
        (
            "empty tool_calls",
            with(&tool_loop, |b| b["messages"][2]["tool_calls"] = json!([])),
            "messages[2].tool_calls: expected a non-empty array",
        ),
        (
            "a call of another type",
            with(&tool_loop, |b| {
                b["messages"][2]["tool_calls"][0]["type"] = json!("custom")
            }),
            "messages[2].tool_calls[0].type",
        ),
        (
            "a call without id",
            with(&tool_loop, |b| {
                remove(&mut b["messages"][2]["tool_calls"][0], "id")
            }),
            "messages[2].tool_calls[0].id: required",
        ),
        (
            "arguments as an object",
            with(&tool_loop, |b| {
                b["messages"][2]["tool_calls"][0]["function"]["arguments"] = json!({"path": "/a"})
            }),
            "arguments: expected a string holding JSON",
        ),
        (
            "arguments not JSON",
            with(&tool_loop, |b| {
                b["messages"][2]["tool_calls"][0]["function"]["arguments"] = json!("{path")
            }),
            "arguments: not JSON",
        ),
        (
            "a call answered by the user",
            with(&tool_loop, |b| b["messages"][3] = user.clone()),
            "The following tool_call_ids did not have response messages: call_a",
        ),
        (
            "a call left at the end",
            with(&tool_loop, |b| {
                b["messages"].as_array_mut().unwrap().pop();
            }),
            "did not have response messages: call_a",
        ),
        (
            "one of two calls answered",
            with(&tool_loop, |b| {
                b["messages"][2]["tool_calls"] = json!([chat_call("call_a"), chat_call("call_b")])
            }),
            "did not have response messages: call_b",
        ),
        (
            "an answer one message late",
            with(&tool_loop, |b| {
                b["messages"] = json!([
                    system,
                    user,
                    asks(json!([chat_call("call_a")])),
                    {"role": "assistant", "content": "ok"},
                    answers("call_a"),
                ])
            }),
            "did not have response messages: call_a",
        ),
        (
            "a tool message for no call",
            with(&base, |b| push(b, json!([answers("call_a")]))),
            "messages with role 'tool' must be a response to a preceeding message with \
             'tool_calls'",
        ),
        (
            "a call answered twice",
            with(&tool_loop, |b| push(b, json!([answers("call_a")]))),
            "must be a response to a preceeding message",
        ),
        (
            "a tool message without tool_call_id",
            with(&tool_loop, |b| {
                remove(&mut b["messages"][3], "tool_call_id")
            }),
            "messages[3].tool_call_id: required",
        ),
        (
            "a duplicate call id",
            with(&tool_loop, |b| {
                push(
                    b,
                    json!([asks(json!([chat_call("call_a")])), answers("call_a")]),
                )
            }),
            "duplicate tool call id call_a",
        ),
        (
            "a tool in Responses' flat shape",
            with(&base, |b| {
                b["tools"][0] = json!({"type": "function", "name": "read_file",
                                       "parameters": {"type": "object"}})
            }),
            "tools[0].name: Unknown parameter",
        ),
        (
            "a tool of another type",
            with(&base, |b| b["tools"][0]["type"] = json!("custom")),
            "tools[0].type",
        ),
        (
            "a tool without parameters",
            with(&base, |b| {
                remove(&mut b["tools"][0]["function"], "parameters")
            }),
            "tools[0].function.parameters",
        ),
        (
            "a tool with string parameters",
            with(&base, |b| {
                b["tools"][0]["function"]["parameters"] = json!({"type": "string"})
            }),
            "tools[0].function.parameters",
        ),
        (
            "a tool with a bad name",
            with(&base, |b| {
                b["tools"][0]["function"]["name"] = json!("read file")
            }),
            "does not match",
        ),
        (
            "a tool with an unknown field",
            with(&base, |b| {
                b["tools"][0]["function"]["input_schema"] = json!({})
            }),
            "tools[0].function.input_schema: Unknown parameter",
        ),
        (
            "strict without additionalProperties",
            with(&base, |b| b["tools"][0]["function"]["strict"] = json!(true)),
            "additionalProperties",
        ),
    ];
    for (i, (what, body, fragment)) in cases.iter().enumerate() {
        let reply = send_chat(&fake, body);
        assert_rejected(&fake, i, &reply, 400, what, fragment);
        assert_eq!(
            reply.body["error"]["type"], "invalid_request_error",
            "{what}"
        );
    }

    // Rejections consumed no reply: these valid variations are answered in order.
    let valid = [
        with(&base, |b| {
            b["messages"] = json!([
                {"role": "developer", "content": [{"type": "text", "text": "note"}]},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            ])
        }),
        with(&tool_loop, |b| {
            b["messages"][2] = json!({"role": "assistant", "content": "Reading both.",
                                      "tool_calls": [chat_call("call_a"), chat_call("call_b")]});
            b["messages"][3] = answers("call_b");
            push(
                b,
                json!([
                    {"role": "tool", "tool_call_id": "call_a", "content": [{"type": "text", "text": "A"}]},
                    {"role": "assistant", "content": "Both read."},
                    user,
                ]),
            );
        }),
        with(&base, |b| {
            remove(b, "max_completion_tokens");
            b["max_tokens"] = json!(100);
        }),
    ];
    for (n, body) in valid.iter().enumerate() {
        fake.push_chat(chat::text_reply(&format!("valid {n}")));
        let reply = send_chat(&fake, body);
        assert_eq!(reply.status, 200, "valid {n}: {}", reply.body);
        let content = &reply.body["choices"][0]["message"]["content"];
        assert_eq!(content, &json!(format!("valid {n}")));
    }
    assert_eq!(fake.violations().len(), cases.len());
}

#[test]
fn chat_replies_have_the_recorded_shape() {
    let Some(dir) = fixtures() else { return };
    let parallel = fixture(&dir, "openai-chat_nonstream_parallel-tool-calls.json");
    let calls = chat::reply(chat::message(
        None,
        vec![
            chat::tool_call("GetWeatherArgs", json!({"city": "Edinburgh"})),
            chat::tool_call("get_stock_price", json!({"ticker": "AAPL"})),
        ],
    ));
    let text = chat::text_reply("It is sunny.");
    assert_eq!(calls["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(text["choices"][0]["finish_reason"], "stop");
    assert_eq!(text["choices"][0]["message"]["content"], "It is sunny.");
    for reply in [&calls, &text] {
        assert_eq!(keys(reply), keys(&parallel), "{reply}");
        assert_eq!(keys(&reply["choices"][0]), keys(&parallel["choices"][0]));
        assert!(keys(&reply["usage"]).is_superset(&keys(&parallel["usage"])));
        assert!(reply["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert_eq!(
            reply["id"].as_str().unwrap().len(),
            parallel["id"].as_str().unwrap().len()
        );
    }
    let real_message = &parallel["choices"][0]["message"];
    assert_eq!(keys(&calls["choices"][0]["message"]), keys(real_message));
    let (call, real_call) = (
        &calls["choices"][0]["message"]["tool_calls"][0],
        &real_message["tool_calls"][0],
    );
    assert_eq!(keys(call), keys(real_call));
    assert_eq!(keys(&call["function"]), keys(&real_call["function"]));
    assert_eq!(
        call["id"].as_str().unwrap().len(),
        real_call["id"].as_str().unwrap().len()
    );
    assert!(call["function"]["arguments"].is_string());
    assert_ne!(
        call["id"],
        calls["choices"][0]["message"]["tool_calls"][1]["id"]
    );
}

// ---------------------------------------------------------------------------------------------
// Streams against the real recordings

#[test]
fn responses_streams_match_the_recordings() {
    let Some(dir) = fixtures() else { return };
    let fake = FakeLlm::start();
    let recorded =
        |name: &str| -> Vec<Value> { fixture_events(&dir, name).iter().map(Sse::json).collect() };
    let store_false = fixture_streams(
        &dir,
        "openai-responses_stream_reasoning-encrypted_store-false.chunks.jsonl",
    );
    // (recording, its events, our answer like it, whether its keys are ours: the 2026 one adds
    // `phase` and a reasoning `content` our builders leave out)
    let cases = [
        (
            "stream_text",
            recorded("openai-responses_stream_text.sse"),
            openai::text_reply("2+2 = 4"),
            true,
        ),
        (
            "stream_reasoning-encrypted_function-call",
            recorded("openai-responses_stream_reasoning-encrypted_function-call.sse"),
            openai::reply(vec![
                openai::reasoning(""),
                openai::function_call("final_result", json!({"result": 6666})),
            ]),
            true,
        ),
        (
            "stream_reasoning_text_function-call",
            recorded("openai-responses_stream_reasoning_text_function-call.sse"),
            openai::reply(vec![
                openai::reasoning(""),
                openai::message("I'll check the capital lookup tool for PotatoLand."),
                openai::function_call("get_capital", json!({"country": "PotatoLand"})),
            ]),
            false,
        ),
        (
            "store-false, first stream",
            store_false[0].clone(),
            openai::reply(vec![
                openai::reasoning("**Calculating step-by-step using calculator**"),
                openai::function_call("calculator", json!({"a": 12, "b": 7, "op": "add"})),
            ]),
            true,
        ),
        (
            "store-false, last stream",
            store_false[3].clone(),
            openai::text_reply("The final result is **570**."),
            true,
        ),
    ];
    for (name, recorded, answer, same_keys) in cases {
        fake.push_openai(answer.clone());
        let reply = send_openai(&fake, &openai_request());
        assert!(reply.complete, "{name}");
        let ours = reply.payloads();
        assert_eq!(
            runs(ours.iter().map(kind)),
            runs(recorded.iter().map(kind)),
            "{name}"
        );
        let deltas = ours.iter().filter(|p| kind(p).ends_with(".delta")).count();
        assert!(deltas >= 2, "{name}: the answer arrives in several deltas");
        if same_keys {
            assert_same_keys(&ours, &recorded, &["item", "part"], &[]);
        }
        // The completed response is the whole answer, its usage in the recorded fields.
        assert_eq!(without_usage(&reply.body), without_usage(&answer), "{name}");
        let real_usage = &recorded.last().unwrap()["response"]["usage"];
        assert_eq!(keys(&reply.body["usage"]), keys(real_usage), "{name}");
        // Newer recordings add `cache_write_tokens`, a field to ignore.
        let details = keys(&reply.body["usage"]["input_tokens_details"]);
        assert!(details.is_subset(&keys(&real_usage["input_tokens_details"])));
        assert!(details.contains("cached_tokens"));
        let created = &ours[0]["response"];
        assert_eq!(
            (&created["status"], &created["usage"]),
            (&json!("in_progress"), &Value::Null)
        );
        assert_eq!(created["output"], json!([]));
        assert!(reply.text().lines().any(|l| l == ": keep-alive"), "{name}");
    }
}

#[test]
fn anthropic_streams_match_the_recordings() {
    let Some(dir) = fixtures() else { return };
    let fake = FakeLlm::start();
    let cases = [
        (
            "anthropic-messages_stream_text.sse",
            anthropic::text_reply("[12345,67890]"),
        ),
        (
            "anthropic-messages_stream_tool-use.sse",
            anthropic::reply(vec![
                anthropic::text("I'll check the current weather in Paris for you."),
                anthropic::tool_use("get_weather", json!({"location": "Paris"})),
            ]),
        ),
        (
            "anthropic-messages_stream_thinking.sse",
            anthropic::reply(vec![
                anthropic::thinking("This is a straightforward question about pedestrian safety."),
                anthropic::text("Here are the basic steps for safely crossing the street."),
            ]),
        ),
    ];
    for (name, answer) in cases {
        let recorded: Vec<Value> = fixture_events(&dir, name).iter().map(Sse::json).collect();
        fake.push_anthropic(answer.clone());
        let reply = send_anthropic(&fake, &anthropic_request());
        assert!(reply.complete, "{name}");
        let ours = reply.payloads();
        assert_eq!(
            runs(ours.iter().map(kind)),
            runs(recorded.iter().map(kind)),
            "{name}"
        );
        // `caller` was hand-added upstream to the tool-use recording.
        assert_same_keys(
            &ours,
            &recorded,
            &["delta", "message", "content_block"],
            &["caller"],
        );
        let usage_of = |payloads: &[Value], kind: &str, field: &str| -> Value {
            let event = payloads.iter().find(|p| p["type"] == kind).unwrap();
            match field {
                "message" => event["message"]["usage"].clone(),
                _ => event["usage"].clone(),
            }
        };
        for (kind, field) in [("message_start", "message"), ("message_delta", "usage")] {
            let (ours, real) = (
                usage_of(&ours, kind, field),
                usage_of(&recorded, kind, field),
            );
            assert!(
                keys(&ours).is_superset(&keys(&real)),
                "{name} {kind}: {ours} {real}"
            );
        }
        assert_eq!(without_usage(&reply.body), without_usage(&answer), "{name}");
    }
}

#[test]
fn chat_streams_match_the_recordings() {
    let Some(dir) = fixtures() else { return };
    let fake = FakeLlm::start();
    /// A chunk's kind: what its delta carries.
    fn chunk_kind(event: &Sse) -> String {
        if event.data == "[DONE]" {
            return "[DONE]".to_string();
        }
        let chunk = event.json();
        let Some(choice) = chunk["choices"].get(0) else {
            return "usage".to_string();
        };
        let delta = &choice["delta"];
        let kind = if delta.get("role").is_some() {
            "role"
        } else if !choice["finish_reason"].is_null() {
            "finish"
        } else if delta["tool_calls"][0].get("id").is_some() {
            "call"
        } else if delta.get("tool_calls").is_some() {
            "arguments"
        } else {
            "content"
        };
        match delta["tool_calls"][0].get("id") {
            Some(_) if kind == "role" => "role+call".to_string(),
            _ => kind.to_string(),
        }
    }
    let cases = [
        (
            "openai-chat_stream_text.sse",
            chat::text_reply("I'm unable to provide real-time weather updates."),
        ),
        (
            "openai-chat_stream_tool-call.sse",
            chat::reply(chat::message(
                None,
                vec![chat::tool_call(
                    "get_weather",
                    json!({"city": "San Francisco", "state": "CA"}),
                )],
            )),
        ),
    ];
    for (name, answer) in cases {
        let recorded = fixture_events(&dir, name);
        fake.push_chat(answer.clone());
        let reply = send_chat(&fake, &chat_request());
        assert!(reply.complete, "{name}");
        assert_eq!(
            runs(reply.events.iter().map(chunk_kind)),
            runs(recorded.iter().map(chunk_kind)),
            "{name}"
        );
        for event in reply.events.iter().filter(|e| e.data != "[DONE]") {
            let kind = chunk_kind(event);
            let real = recorded
                .iter()
                .find(|r| chunk_kind(r) == kind)
                .unwrap()
                .json();
            let ours = event.json();
            assert_eq!(keys(&ours), keys(&real), "{name} {kind}");
            if let (Some(a), Some(b)) = (ours["choices"].get(0), real["choices"].get(0)) {
                assert_eq!(keys(a), keys(b), "{name} {kind}");
                assert_eq!(keys(&a["delta"]), keys(&b["delta"]), "{name} {kind}");
                if let (Some(a), Some(b)) = (
                    a["delta"]["tool_calls"].get(0),
                    b["delta"]["tool_calls"].get(0),
                ) {
                    assert_eq!(keys(a), keys(b), "{name} {kind}");
                    assert_eq!(keys(&a["function"]), keys(&b["function"]), "{name} {kind}");
                }
            }
            if kind == "usage" {
                assert!(
                    keys(&ours["usage"]).is_superset(&keys(&real["usage"])),
                    "{name}"
                );
            }
        }
        assert!(reply.text().ends_with("\n\ndata: [DONE]\n\n"), "{name}");
        assert!(reply.text().lines().any(|l| l == ": keep-alive"), "{name}");
        assert_eq!(without_usage(&reply.body), without_usage(&answer), "{name}");
    }
}

#[test]
fn anthropic_streams_are_framed_like_the_recordings() {
    let fake = FakeLlm::start();
    fake.push_anthropic(anthropic::reply(vec![
        anthropic::text("Let me look at the weather in Paris for you."),
        anthropic::tool_use("get_weather", json!({"location": "Paris"})),
    ]));
    let reply = send_anthropic(&fake, &anthropic_request());
    let text = reply.text();
    // Data lines padded with spaces before their closing brace, still JSON.
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert!(data.iter().any(|d| d.ends_with(" }")), "{text}");
    assert!(data.iter().any(|d| !d.ends_with(" }")), "{text}");
    assert_eq!(reply.payloads().len(), data.len());
    assert!(text.contains("event: ping\ndata: {\"type\": \"ping\"}\n\n"));
    // The last event has no blank line (nor newline) after it.
    let last = text.rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("event: message_stop\ndata: {"), "{last:?}");
    assert!(last.ends_with('}'), "{last:?}");
    // A tool's input starts with an empty partial_json, then comes in pieces.
    let partial: Vec<Value> = reply
        .payloads()
        .into_iter()
        .filter(|p| p["delta"]["type"] == "input_json_delta")
        .map(|p| p["delta"]["partial_json"].clone())
        .collect();
    assert_eq!(partial[0], "");
    assert!(partial.len() >= 3, "{partial:?}");
    assert_eq!(
        reply.body["content"][1]["input"],
        json!({"location": "Paris"})
    );
    let start = &reply.payloads()[0];
    assert_eq!(start["message"]["usage"]["output_tokens"], 1);
    assert_eq!(start["message"]["content"], json!([]));
    assert_eq!(start["message"]["stop_reason"], Value::Null);
    fake.assert_clean();
}

// ---------------------------------------------------------------------------------------------
// Usage, prompt caches and the context window

#[test]
fn usage_counts_the_bytes_sent_and_written() {
    let fake = FakeLlm::start();

    // Responses: the prompt is the body; the output, what the model wrote.
    let request = openai_request().to_string();
    let call = openai::function_call("read_file", json!({"path": "/a"}));
    let arguments = call["arguments"].as_str().unwrap().len();
    fake.push_openai(openai::reply(vec![
        openai::reasoning("Read it."),
        openai::message("Reading /a."),
        call,
    ]));
    let reply = send_openai(&fake, &openai_request());
    let (prompt, output) = (tokens(request.len()), tokens(8 + 11 + arguments));
    let responses = json!({
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": tokens(8)},
        "total_tokens": prompt + output,
    });
    assert_eq!(reply.body["usage"], responses);
    assert!(reply.text().lines().any(|l| l == ": keep-alive"));

    // The same request again finds its whole prompt in OpenAI's automatic cache; an empty
    // answer still counts one output token.
    fake.push_openai(openai::text_reply(""));
    let again = send_openai(&fake, &openai_request()).body["usage"].clone();
    assert_eq!(again["input_tokens_details"]["cached_tokens"], prompt);
    assert_eq!(
        (&again["input_tokens"], &again["output_tokens"]),
        (&json!(prompt), &json!(1))
    );

    // Anthropic: thinking, text and the tool input's JSON are what the model wrote.
    let request = anthropic_request().to_string();
    fake.push_anthropic(anthropic::reply(vec![
        anthropic::thinking("Hm."),
        anthropic::text("Reading."),
        anthropic::tool_use("read_file", json!({"path": "/a"})),
    ]));
    let reply = send_anthropic(&fake, &anthropic_request());
    let written = 3 + 8 + json!({"path": "/a"}).to_string().len();
    let usage = &reply.body["usage"];
    assert_eq!(usage["input_tokens"], tokens(request.len()));
    assert_eq!(usage["output_tokens"], tokens(written));
    assert_eq!(usage["cache_read_input_tokens"], 0);
    assert_eq!(usage["cache_creation_input_tokens"], 0);
    let start = &reply.payloads()[0]["message"]["usage"];
    assert_eq!(
        (&start["input_tokens"], &start["output_tokens"]),
        (&usage["input_tokens"], &json!(1))
    );
    let delta = reply
        .payloads()
        .into_iter()
        .find(|p| p["type"] == "message_delta")
        .unwrap();
    assert_eq!(
        delta["usage"],
        json!({"input_tokens": tokens(request.len()), "cache_creation_input_tokens": 0,
               "cache_read_input_tokens": 0, "output_tokens": tokens(written)})
    );
    let anthropic_usage = usage.clone();

    // Chat: content and arguments; a later request shares a prefix with this one.
    let request = chat_request().to_string();
    let call = chat::tool_call("read_file", json!({"path": "/a"}));
    let arguments = call["function"]["arguments"].as_str().unwrap().len();
    fake.push_chat(chat::reply(chat::message(Some("Reading."), vec![call])));
    let reply = send_chat(&fake, &chat_request());
    let (prompt, output) = (tokens(request.len()), tokens(8 + arguments));
    let chat_usage = json!({
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    });
    assert_eq!(reply.body["usage"], chat_usage);
    let later = with(&chat_request(), |b| {
        b["messages"][1]["content"] = json!("hello")
    });
    let shared = request
        .bytes()
        .zip(later.to_string().bytes())
        .take_while(|(a, b)| a == b)
        .count();
    fake.push_chat(chat::text_reply("Hello."));
    let usage = send_chat(&fake, &later).body["usage"].clone();
    assert_eq!(
        usage["prompt_tokens_details"]["cached_tokens"],
        tokens(shared)
    );
    assert_eq!(usage["prompt_tokens"], tokens(later.to_string().len()));

    assert_eq!(
        fake.usage_log(),
        [responses, again, anthropic_usage, chat_usage, usage]
    );
    let recorded: Vec<Option<Value>> = fake.requests().into_iter().map(|r| r.usage).collect();
    assert!(recorded.iter().all(Option::is_some));
    fake.assert_clean();
}

#[test]
fn anthropic_caching_reads_what_an_earlier_request_wrote() {
    let fake = FakeLlm::start();
    let number = |v: &Value| v.as_u64().unwrap();
    // Sends `body`; returns its usage and its size.
    let usage_of = |body: &Value| {
        fake.push_anthropic(anthropic::text_reply("ok"));
        let reply = send_anthropic(&fake, body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let usage = reply.body["usage"].clone();
        let sum = [
            "input_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        ]
        .iter()
        .map(|k| number(&usage[k]))
        .sum::<u64>();
        assert_eq!(
            sum,
            tokens(body.to_string().len()),
            "every prompt token counted once"
        );
        let cache = &usage["cache_creation"];
        assert_eq!(
            number(&cache["ephemeral_5m_input_tokens"])
                + number(&cache["ephemeral_1h_input_tokens"]),
            number(&usage["cache_creation_input_tokens"])
        );
        usage
    };
    let mark = json!({"type": "ephemeral"});
    let first = with(&anthropic_request(), |b| {
        b["system"] = json!([{"type": "text", "text": "You are Sausage's agent. ".repeat(40),
                              "cache_control": mark}]);
        b["messages"] = json!([{"role": "user", "content": [
            {"type": "text", "text": "read /a", "cache_control": mark},
        ]}]);
    });
    let usage = usage_of(&first);
    assert_eq!(usage["cache_read_input_tokens"], 0);
    let written_first = number(&usage["cache_creation_input_tokens"]);
    assert!(written_first > 0);
    assert_eq!(usage["cache_creation"]["ephemeral_1h_input_tokens"], 0);

    // The conversation goes on and the breakpoint moves to its newest message: what the first
    // request wrote is read, what follows it is written.
    let second = with(&first, |b| {
        b["messages"] = json!([
            {"role": "user", "content": [{"type": "text", "text": "read /a"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "and /b", "cache_control": mark}]},
        ]);
    });
    let usage = usage_of(&second);
    assert_eq!(usage["cache_read_input_tokens"], written_first);
    let written_second = number(&usage["cache_creation_input_tokens"]);
    assert!(written_second > 0);

    // The same request again reads all it marked and writes nothing.
    let usage = usage_of(&second);
    assert_eq!(
        usage["cache_read_input_tokens"],
        written_first + written_second
    );
    assert_eq!(usage["cache_creation_input_tokens"], 0);

    // Without a breakpoint nothing is read, though the prefix is cached.
    let unmarked = with(&second, |b| {
        b["system"][0]
            .as_object_mut()
            .unwrap()
            .remove("cache_control");
        b["messages"][2]["content"][0]
            .as_object_mut()
            .unwrap()
            .remove("cache_control");
    });
    let usage = usage_of(&unmarked);
    assert_eq!(usage["cache_read_input_tokens"], 0);
    assert_eq!(usage["cache_creation_input_tokens"], 0);

    // Another system prompt shares no marked prefix; its hour-long breakpoint's share is written
    // to the hour cache, the rest to the five-minute one.
    let other = with(&second, |b| {
        b["system"][0]["text"] = json!("You are someone else. ".repeat(40));
        b["system"][0]["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
    });
    let usage = usage_of(&other);
    assert_eq!(usage["cache_read_input_tokens"], 0);
    let cache = &usage["cache_creation"];
    assert!(
        number(&cache["ephemeral_1h_input_tokens"]) > number(&cache["ephemeral_5m_input_tokens"])
    );
    assert!(number(&cache["ephemeral_5m_input_tokens"]) > 0);
    fake.assert_clean();
}

#[test]
fn context_window_refusals_are_real_answers_not_violations() {
    let fake = FakeLlm::start();
    let longer = "word ".repeat(400);

    // Responses counts the input alone.
    let small = openai_request();
    let big = with(&small, |b| b["input"][0]["content"] = json!(longer));
    fake.set_context_window(tokens(small.to_string().len()) + 10);
    fake.push_openai(openai::text_reply("fits"));
    let refused = send_openai(&fake, &big);
    assert_eq!(refused.status, 400);
    assert_eq!(
        refused.body,
        json!({"error": {
            "message": "Your input exceeds the context window of this model. Please adjust your \
                        input and try again.",
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }})
    );
    let reply = send_openai(&fake, &small);
    assert_eq!(
        reply.body["output"][0]["content"][0]["text"], "fits",
        "no reply was consumed"
    );

    // Chat counts the messages alone.
    let small = chat_request();
    let big = with(&small, |b| b["messages"][1]["content"] = json!(longer));
    let window = tokens(small.to_string().len()) + 10;
    fake.set_context_window(window);
    fake.push_chat(chat::text_reply("fits"));
    let refused = send_chat(&fake, &big);
    assert_eq!(refused.status, 400);
    let message = format!(
        "This model's maximum context length is {window} tokens. However, your messages \
         resulted in {} tokens. Please reduce the length of the messages.",
        tokens(big.to_string().len())
    );
    assert_eq!(
        refused.body,
        json!({"error": {"message": message, "type": "invalid_request_error",
                         "param": "messages", "code": "context_length_exceeded"}})
    );
    assert_eq!(
        send_chat(&fake, &small).body["choices"][0]["message"]["content"],
        "fits"
    );

    // Anthropic counts the input and the output it reserves with `max_tokens`.
    let small = with(&anthropic_request(), |b| b["max_tokens"] = json!(100));
    let prompt = tokens(small.to_string().len());
    let window = prompt + 100;
    fake.set_context_window(window);
    fake.push_anthropic(anthropic::text_reply("fits"));
    let big = with(&small, |b| b["messages"][0]["content"] = json!(longer));
    let refused = send_anthropic(&fake, &big);
    assert_eq!(refused.status, 400);
    assert_eq!(refused.body["type"], "error");
    assert_eq!(refused.body["error"]["type"], "invalid_request_error");
    let expected = format!(
        "prompt is too long: {} tokens > {window} maximum",
        tokens(big.to_string().len())
    );
    assert_eq!(refused.body["error"]["message"], expected);
    assert!(
        refused.body["request_id"]
            .as_str()
            .unwrap()
            .starts_with("req_")
    );
    let greedy = with(&small, |b| b["max_tokens"] = json!(101));
    let refused = send_anthropic(&fake, &greedy);
    assert_eq!(refused.status, 400);
    let expected = format!(
        "input length and `max_tokens` exceed context limit: {prompt} + 101 > {window}, \
         decrease input length or `max_tokens` and try again"
    );
    assert_eq!(refused.body["error"]["message"], expected);
    assert_eq!(
        send_anthropic(&fake, &small).body["content"][0]["text"],
        "fits"
    );

    // Each refusal is recorded with its 400 and no usage, and none is a violation.
    let refusals: Vec<&str> = fake
        .requests()
        .iter()
        .filter(|r| r.status == 400)
        .map(|r| {
            assert_eq!(r.usage, None);
            if r.path.ends_with("messages") {
                "messages"
            } else {
                "openai"
            }
        })
        .collect();
    assert_eq!(refusals, ["openai", "openai", "messages", "messages"]);
    fake.assert_clean();
}

// ---------------------------------------------------------------------------------------------
// Failures the real services give

#[test]
fn scripted_errors_carry_their_headers() {
    let fake = FakeLlm::start();
    let limited = openai::error(
        "rate_limit_exceeded",
        "Rate limit reached. Try again in 1s.",
    );
    let headers = [("retry-after", "1"), ("retry-after-ms", "1000")];
    fake.push_error_with_headers(429, limited.clone(), &headers);
    let overloaded = anthropic::error("overloaded_error", "Overloaded");
    fake.push_error_with_headers(529, overloaded.clone(), &[("x-should-retry", "true")]);
    let unavailable = chat::error("server_error", "The server is overloaded.");
    fake.push_error(503, unavailable.clone());

    let reply = send_openai(&fake, &openai_request());
    assert_eq!((reply.status, &reply.body), (429, &limited));
    assert_eq!(reply.headers["retry-after"], "1");
    assert_eq!(reply.headers["retry-after-ms"], "1000");
    assert!(reply.headers["x-request-id"].starts_with("req_"));
    let reply = send_anthropic(&fake, &anthropic_request());
    assert_eq!((reply.status, &reply.body), (529, &overloaded));
    assert_eq!(reply.headers["x-should-retry"], "true");
    let reply = send_chat(&fake, &chat_request());
    assert_eq!((reply.status, &reply.body), (503, &unavailable));
    assert!(!reply.headers.contains_key("retry-after"));

    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [429, 529, 503]);
    assert!(fake.usage_log().is_empty());
    fake.assert_clean();
}

#[test]
fn broken_streams_stop_before_their_final_event() {
    let fake = FakeLlm::start();
    let text = "This answer will not arrive whole, for the connection breaks.";
    let cases = [
        (openai::text_reply(text), "response.completed"),
        (anthropic::text_reply(text), "message_stop"),
        (chat::text_reply(text), "[DONE]"),
    ];
    for (answer, last) in cases {
        fake.push_broken(answer.clone());
        let reply = if answer["object"] == "response" {
            send_openai(&fake, &openai_request())
        } else if answer["type"] == "message" {
            send_anthropic(&fake, &anthropic_request())
        } else {
            send_chat(&fake, &chat_request())
        };
        assert_eq!(reply.status, 200, "{last}");
        assert!(!reply.complete, "{last}: the chunked body never ended");
        assert!(reply.events.len() >= 3, "{last}: it broke half-way");
        assert!(reply.body.is_null(), "{last}: the stream never finished");
        let ended = reply
            .events
            .iter()
            .any(|e| e.event.as_deref() == Some(last) || e.data == last);
        assert!(!ended, "{last}");
    }
    assert!(
        fake.usage_log().is_empty(),
        "a broken stream reports no usage"
    );
    // The fake serves on.
    fake.push_openai(openai::text_reply("whole"));
    let reply = send_openai(&fake, &openai_request());
    assert!(reply.complete);
    assert_eq!(reply.body["output"][0]["content"][0]["text"], "whole");

    let not_an_answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fake.push_broken(json!({"error": {"message": "no"}}))
    }));
    assert!(not_an_answer.is_err(), "push_broken needs a whole answer");
    fake.assert_clean();
}

#[test]
fn stream_errors_arrive_as_the_apis_error_events() {
    let fake = FakeLlm::start();

    // Anthropic: `event: error` after the message started.
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    fake.push_stream_error(Api::Anthropic, overloaded.clone());
    let reply = send_anthropic(&fake, &anthropic_request());
    assert_eq!(reply.status, 200);
    assert!(reply.complete && reply.body.is_null());
    let names: Vec<&str> = reply
        .events
        .iter()
        .map(|e| e.event.as_deref().unwrap())
        .collect();
    assert_eq!(names, ["message_start", "ping", "error"]);
    assert_eq!(reply.events[2].json(), overloaded);

    // Responses: `error`, then `response.failed`.
    let quota = "You exceeded your current quota, please check your plan and billing details.";
    fake.push_stream_error(Api::OpenAi, openai::error("insufficient_quota", quota));
    let reply = send_openai(&fake, &openai_request());
    assert_eq!(reply.status, 200);
    assert!(reply.complete && reply.body.is_null());
    let ours = reply.payloads();
    let names: Vec<String> = ours.iter().map(kind).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "error",
            "response.failed"
        ]
    );
    assert_eq!(
        ours[2]["error"],
        json!({"type": "insufficient_quota", "code": "insufficient_quota", "message": quota, "param": null})
    );
    assert_eq!(ours[3]["response"]["status"], "failed");
    assert_eq!(
        ours[3]["response"]["error"],
        json!({"code": "insufficient_quota", "message": quota})
    );
    if let Some(dir) = fixtures() {
        let recorded = &fixture_streams(
            &dir,
            "openai-responses_stream_error-insufficient-quota.chunks.jsonl",
        )[0];
        let recorded_names: Vec<String> = recorded.iter().map(kind).collect();
        assert_eq!(names, recorded_names);
        assert_same_keys(&ours, recorded, &["error"], &[]);
        assert_eq!(
            keys(&ours[3]["response"]["error"]),
            keys(&recorded[3]["response"]["error"])
        );
    }

    // Chat: an error chunk, and no `[DONE]`.
    let server = chat::error(
        "server_error",
        "The server had an error processing your request.",
    );
    fake.push_stream_error(Api::Chat, server.clone());
    let reply = send_chat(&fake, &chat_request());
    assert_eq!(reply.status, 200);
    assert!(reply.complete && reply.body.is_null());
    assert_eq!(reply.events.len(), 2);
    assert_eq!(
        reply.events[0].json()["choices"][0]["delta"]["role"],
        "assistant"
    );
    assert_eq!(reply.events[1].json(), server);

    assert!(
        fake.usage_log().is_empty(),
        "a failed stream reports no usage"
    );
    fake.assert_clean();
}

#[test]
fn a_stream_error_for_one_api_waits_for_a_request_to_it() {
    let fake = FakeLlm::start_expecting_violations();
    fake.push_stream_error(Api::Chat, chat::error("server_error", "Try again."));
    let reply = send_openai(&fake, &openai_request());
    assert_rejected(
        &fake,
        0,
        &reply,
        500,
        "wrong API",
        "not for the OpenAI Responses API",
    );
    let reply = send_chat(&fake, &chat_request());
    assert_eq!(
        reply.events.last().unwrap().json()["error"]["message"],
        "Try again."
    );
}

#[test]
fn events_can_be_paced_so_progress_shows_while_a_step_streams() {
    let fake = FakeLlm::start();
    let delay = Duration::from_millis(30);
    fake.set_event_delay(delay);
    fake.push_anthropic(anthropic::text_reply("one two three four"));
    let reply = send_anthropic(&fake, &anthropic_request());
    assert_eq!(reply.body["content"][0]["text"], "one two three four");
    // Each event is its own chunk, sent `delay` after the one before.
    let (first, last) = (reply.arrivals[0], *reply.arrivals.last().unwrap());
    let gaps = reply.arrivals.len() as u32 - 1;
    assert!(gaps >= 8, "{gaps}");
    assert!(
        last - first >= delay * gaps,
        "{:?} for {gaps} gaps",
        last - first
    );
    fake.assert_clean();
}

#[test]
fn a_reply_for_texts_goes_to_the_request_holding_them_whatever_the_order() {
    let fake = FakeLlm::start_expecting_violations();
    fake.push_openai(openai::text_reply("for anyone"));
    fake.push_openai_for(&["sub-agent", "ALPHA"], openai::text_reply("for alpha"));
    fake.push_openai_for(&["sub-agent", "BETA"], openai::text_reply("for beta"));
    let asking = |text: &str| {
        let mut body = openai_request();
        body["instructions"] = json!(text);
        body
    };
    let answer = |response: Response| response.body["output"][0]["content"][0]["text"].clone();
    // Beta asks first, then alpha, then someone else; each gets its own.
    assert_eq!(
        answer(send_openai(&fake, &asking("a sub-agent: BETA"))),
        "for beta"
    );
    assert_eq!(
        answer(send_openai(&fake, &asking("ALPHA, not one of them"))),
        "for anyone"
    );
    assert_eq!(
        answer(send_openai(&fake, &asking("a sub-agent: ALPHA"))),
        "for alpha"
    );
    let empty = send_openai(&fake, &asking("a sub-agent: BETA"));
    assert_eq!(
        empty.status,
        500,
        "nothing is left for it: {}",
        empty.text()
    );
    let _ = fake.violations();
}
