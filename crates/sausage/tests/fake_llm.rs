//! The fake model provider itself (`support/fake_llm.rs`): its HTTP, its script, each of its
//! checks on both APIs, and its replies against the real recorded ones in
//! `../shared/llm-fixtures/` (those tests skip, saying so, when the folder is absent).
//!
//! Requests go through a tiny HTTP client below, so what is tested is what goes over the wire.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;

use serde_json::{Value, json};
use support::fake_llm::{self, FakeLlm, anthropic, openai};
use support::{PATIENCE, repo};

// ---------------------------------------------------------------------------------------------
// A tiny HTTP client

struct Response {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Value,
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
    let length: usize = headers["content-length"].parse().unwrap();
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    Response {
        status,
        headers,
        body: serde_json::from_slice(&body).unwrap(),
    }
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

/// The body after `change`.
fn with(body: &Value, change: impl FnOnce(&mut Value)) -> Value {
    let mut body = body.clone();
    change(&mut body);
    body
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
    // Both APIs put the message at `error.message`.
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

fn fixtures() -> Option<PathBuf> {
    let dir = repo().join("../shared/llm-fixtures");
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

fn fixture(dir: &std::path::Path, name: &str) -> Value {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .cloned()
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Valid requests both APIs start from

fn openai_request() -> Value {
    json!({
        "model": "gpt-5-mini",
        "instructions": "You are Sausage's agent.",
        "input": [{"role": "user", "content": "hi"}],
        "store": false,
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
    assert_eq!((reply.status, &reply.body), (200, &first));
    assert!(reply.headers["x-request-id"].starts_with("req_"));
    let reply = send_anthropic(&fake, &anthropic_request());
    assert_eq!((reply.status, &reply.body), (200, &second));
    assert!(reply.headers["request-id"].starts_with("req_"));
    let reply = send_openai(&fake, &openai_request());
    assert_eq!((reply.status, &reply.body), (429, &third));

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
        format!("Bearer {}", fake_llm::TOKEN)
    );
    assert_eq!(requests[1].headers["anthropic-version"], "2023-06-01");
    assert_eq!(requests[1].body, anthropic_request());
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
    for path in ["/responses", "/v1/v1/messages", "/v1/chat/completions"] {
        let before = fake.violations().len();
        let reply = post(&fake, path, OPENAI_HEADERS, &openai_request());
        assert_rejected(&fake, before, &reply, 404, path, "no such endpoint");
    }
    let mut stream = connect(&fake);
    stream
        .write_all(b"GET /v1/responses HTTP/1.1\r\nconnection: close\r\n\r\n")
        .unwrap();
    let reply = read_response(&mut BufReader::new(stream));
    assert_rejected(&fake, 3, &reply, 404, "GET", "no such endpoint");
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
            "streaming",
            with(&base, |b| b["stream"] = json!(true)),
            "stream",
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
    assert_eq!(send_openai(&fake, &openai_request()).body, sent);

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
    let key = ("x-api-key", fake_llm::TOKEN);
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
            "streaming",
            with(&base, |b| b["stream"] = json!(true)),
            "stream",
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
        send_anthropic(&fake, &with(&anthropic_request(), thinking_on)).body,
        sent
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
    let recorded_request = fixture(&dir, "anthropic-messages_request_thinking-passback.json");

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
    assert_eq!(send_anthropic(&fake, &first).body, recorded_reply);
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
    assert_eq!(fake.violations().len(), 2);
}
