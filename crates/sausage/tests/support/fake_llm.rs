//! The fake model provider the agent's tests talk to: a local HTTP/1.1 server speaking the OpenAI
//! Responses API (`POST /v1/responses`) and the Anthropic Messages API (`POST /v1/messages`).
//!
//! Boundary: a script of replies in (`push_openai`, `push_anthropic`, `push_error`), recorded
//! requests and violations out. Every request is checked as strictly as the real service would
//! check it; a bad one gets the real API's 400 (or 401) shape AND is recorded as a violation, so a
//! test fails at `assert_clean` even when the agent swallowed the error. Replies are whole JSON
//! bodies: `stream: true` is refused. Invariant: a rejected request never consumes a scripted
//! reply.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// The token [`FakeLlm::start`] expects: `authorization: Bearer TOKEN` (OpenAI) or
/// `x-api-key: TOKEN` (Anthropic).
pub const TOKEN: &str = "sk-fake-test-token";

/// The largest request body read; a bigger one is answered 400 and the connection closed, so a
/// runaway history fails loudly instead of filling memory.
const MAX_BODY_BYTES: usize = 32 << 20;

/// The longest request line or header line read, against a client that never sends a newline.
const MAX_LINE_BYTES: u64 = 64 << 10;

/// How long a kept-alive connection may sit idle before the fake closes it; it bounds the life of
/// connection threads left behind by a client that neither closes nor sends.
const IDLE_CONNECTION: Duration = Duration::from_secs(30);

/// The `anthropic-version` values the real API accepts.
const ANTHROPIC_VERSIONS: &[&str] = &["2023-06-01", "2023-01-01"];

/// Top-level fields the real Responses API knows; any other is rejected, as the real one does.
const OPENAI_FIELDS: &[&str] = &[
    "background",
    "conversation",
    "include",
    "input",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "model",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
];

/// Top-level fields the real Messages API knows; any other is rejected, as the real one does.
const ANTHROPIC_FIELDS: &[&str] = &[
    "container",
    "context_management",
    "max_tokens",
    "mcp_servers",
    "messages",
    "metadata",
    "model",
    "output_config",
    "service_tier",
    "stop_sequences",
    "stream",
    "system",
    "temperature",
    "thinking",
    "tool_choice",
    "tools",
    "top_k",
    "top_p",
];

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Names lowercased; a repeated header's values joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The parsed body, `Null` when it was not JSON.
    pub body: Value,
    /// The status the fake answered with.
    pub status: u16,
}

/// A running fake provider. Its server thread stops when it is dropped.
pub struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accepting: Option<JoinHandle<()>>,
    /// Whether dropping the fake fails the test on violations (off only in the fake's own
    /// tests, which send bad requests on purpose).
    clean_on_drop: bool,
}

impl FakeLlm {
    /// Starts a fake expecting [`TOKEN`].
    pub fn start() -> FakeLlm {
        FakeLlm::start_with_token(TOKEN)
    }

    /// A fake whose violations are the point of the test: dropping it does not check them.
    pub fn start_expecting_violations() -> FakeLlm {
        FakeLlm::start_with_token(TOKEN).expecting_violations()
    }

    /// This fake's violations are the point of the test: dropping it does not check them.
    pub fn expecting_violations(mut self) -> FakeLlm {
        self.clean_on_drop = false;
        self
    }

    pub fn start_with_token(token: &str) -> FakeLlm {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            token: token.to_string(),
            stopping: AtomicBool::new(false),
            state: Mutex::default(),
        });
        let serving = shared.clone();
        let accepting = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if serving.stopping.load(Ordering::SeqCst) {
                    break;
                }
                // A failed accept (the peer gave up already) concerns no request: keep serving.
                let Ok(stream) = stream else { continue };
                let serving = serving.clone();
                std::thread::spawn(move || serve_connection(&serving, stream));
            }
        });
        FakeLlm {
            addr,
            shared,
            accepting: Some(accepting),
            clean_on_drop: true,
        }
    }

    /// `http://127.0.0.1:<port>`, the agent's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a 200 reply for the next valid `POST /v1/responses`.
    pub fn push_openai(&self, body: Value) {
        self.push(Reply::OpenAi(body));
    }

    /// Queues a 200 reply for the next valid `POST /v1/messages`.
    pub fn push_anthropic(&self, body: Value) {
        self.push(Reply::Anthropic(body));
    }

    /// Queues a reply with this status for the next valid request to either API; build the body
    /// with [`openai::error`] or [`anthropic::error`].
    pub fn push_error(&self, status: u16, body: Value) {
        self.push(Reply::Error { status, body });
    }

    fn push(&self, reply: Reply) {
        self.shared.state.lock().unwrap().script.push_back(reply);
    }

    /// Every request received so far, in order, rejected ones included.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.state.lock().unwrap().requests.clone()
    }

    /// Every rule a request broke so far, subject first (`POST /v1/messages: messages.2: …`).
    pub fn violations(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().violations.clone()
    }

    /// Fails the test if any request broke a rule or found no reply in the script.
    pub fn assert_clean(&self) {
        let violations = self.violations();
        assert!(
            violations.is_empty(),
            "the fake model provider saw {} bad request(s):\n{}",
            violations.len(),
            violations.join("\n")
        );
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees `stopping`; if the connect fails the loop is gone.
        let _ = TcpStream::connect(self.addr);
        if let Some(accepting) = self.accepting.take() {
            let _ = accepting.join();
        }
        // A test that forgot `assert_clean` must not pass over a request the real service
        // would have refused.
        if self.clean_on_drop && !std::thread::panicking() {
            self.assert_clean();
        }
    }
}

enum Reply {
    OpenAi(Value),
    Anthropic(Value),
    Error { status: u16, body: Value },
}

struct Shared {
    token: String,
    /// Set by `Drop`; the accept loop ends at the next connection it sees.
    stopping: AtomicBool,
    /// Locked by connection threads for one request's check and by the test's calls. A check
    /// that panicked (a bug in this fake) poisons it, and the test's next call fails loudly.
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    requests: Vec<Recorded>,
    violations: Vec<String>,
    sent: Sent,
}

/// What the fake's served replies carried that the provider would later verify when passed back.
#[derive(Default)]
struct Sent {
    /// OpenAI reasoning items: (id, encrypted_content).
    reasoning: Vec<(String, String)>,
    /// Anthropic thinking blocks: (thinking, signature).
    thinking: Vec<(String, String)>,
    /// Anthropic redacted_thinking blocks' `data`.
    redacted: Vec<String>,
}

impl Sent {
    fn remember(&mut self, reply: &Reply) {
        match reply {
            Reply::OpenAi(body) => {
                for item in body["output"].as_array().into_iter().flatten() {
                    if let (Some("reasoning"), Some(encrypted)) =
                        (item["type"].as_str(), item["encrypted_content"].as_str())
                    {
                        let id = item["id"].as_str().unwrap_or("").to_string();
                        self.reasoning.push((id, encrypted.to_string()));
                    }
                }
            }
            Reply::Anthropic(body) => {
                for block in body["content"].as_array().into_iter().flatten() {
                    match block["type"].as_str() {
                        Some("thinking") => self.thinking.push((
                            block["thinking"].as_str().unwrap_or("").to_string(),
                            block["signature"].as_str().unwrap_or("").to_string(),
                        )),
                        Some("redacted_thinking") => self
                            .redacted
                            .push(block["data"].as_str().unwrap_or("").to_string()),
                        _ => {}
                    }
                }
            }
            Reply::Error { .. } => {}
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Api {
    OpenAi,
    Anthropic,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::OpenAi => "OpenAI Responses",
            Api::Anthropic => "Anthropic Messages",
        }
    }

    /// The real API's error body for `status`.
    fn error_body(self, status: u16, message: &str) -> Value {
        match self {
            Api::OpenAi => {
                let kind = if status >= 500 {
                    "server_error"
                } else {
                    "invalid_request_error"
                };
                let mut body = openai::error(kind, message);
                if status == 401 {
                    body["error"]["code"] = json!("invalid_api_key");
                }
                body
            }
            Api::Anthropic => {
                let kind = match status {
                    401 => "authentication_error",
                    404 => "not_found_error",
                    500.. => "api_error",
                    _ => "invalid_request_error",
                };
                anthropic::error(kind, message)
            }
        }
    }

    fn request_id_header(self) -> (&'static str, String) {
        match self {
            Api::OpenAi => ("x-request-id", fresh_id("req_", HEX, 32)),
            Api::Anthropic => ("request-id", fresh_id("req_011", BASE62, 21)),
        }
    }
}

/// What the fake answers one request with.
struct Answer {
    status: u16,
    body: Value,
    api: Api,
    /// The rule the request broke, recorded as a violation.
    violation: Option<String>,
}

impl Answer {
    fn reject(api: Api, status: u16, message: String) -> Answer {
        Answer {
            status,
            body: api.error_body(status, &message),
            api,
            violation: Some(message),
        }
    }
}

impl Shared {
    fn answer(&self, request: &HttpRequest) -> Answer {
        let mut state = self.state.lock().unwrap();
        let body = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let mut answer = state.judge(&self.token, request, &body);
        if let Some(violation) = answer.violation.take() {
            let subject = format!("{} {}", request.method, request.path);
            state.violations.push(format!("{subject}: {violation}"));
        }
        state.requests.push(Recorded {
            method: request.method.clone(),
            path: request.path.clone(),
            headers: request.headers.clone(),
            body,
            status: answer.status,
        });
        answer
    }
}

impl State {
    /// Checks the request, then takes the next scripted reply.
    fn judge(&mut self, token: &str, request: &HttpRequest, body: &Value) -> Answer {
        let api = match (request.method.as_str(), request.path.as_str()) {
            ("POST", "/v1/responses") => Api::OpenAi,
            ("POST", "/v1/messages") => Api::Anthropic,
            _ => {
                let message = "no such endpoint: the fake serves POST /v1/responses and POST \
                               /v1/messages (is base_url missing or doubling /v1?)";
                return Answer::reject(Api::OpenAi, 404, message.to_string());
            }
        };
        if let Err(message) = check_auth(api, token, &request.headers) {
            return Answer::reject(api, 401, message);
        }
        let checked = check_headers(api, &request.headers).and_then(|()| {
            if body.is_null() {
                return Err("the body is not valid JSON".to_string());
            }
            match api {
                Api::OpenAi => check_openai(body, &self.sent),
                Api::Anthropic => check_anthropic(body, &self.sent),
            }
        });
        if let Err(message) = checked {
            return Answer::reject(api, 400, message);
        }
        let wrong_api = match self.script.front() {
            None => {
                let message = "the script is empty: the test pushed no reply for this request";
                return Answer::reject(api, 500, message.to_string());
            }
            Some(Reply::OpenAi(_)) => api != Api::OpenAi,
            Some(Reply::Anthropic(_)) => api != Api::Anthropic,
            Some(Reply::Error { .. }) => false,
        };
        if wrong_api {
            let message = format!(
                "the script's next reply is not for the {} API this request used; \
                 the reply stays queued",
                api.name()
            );
            return Answer::reject(api, 500, message);
        }
        // The front of the script was just matched above.
        let reply = self.script.pop_front().unwrap();
        self.sent.remember(&reply);
        let (status, body) = match reply {
            Reply::OpenAi(body) | Reply::Anthropic(body) => (200, body),
            Reply::Error { status, body } => (status, body),
        };
        Answer {
            status,
            body,
            api,
            violation: None,
        }
    }
}

fn check_auth(api: Api, token: &str, headers: &BTreeMap<String, String>) -> Result<(), String> {
    match api {
        Api::OpenAi => match headers.get("authorization") {
            None => Err(
                "You didn't provide an API key. You need to provide your API key in an \
                         Authorization header using Bearer auth (i.e. Authorization: Bearer \
                         YOUR_KEY)."
                    .to_string(),
            ),
            Some(value) if value.strip_prefix("Bearer ") == Some(token) => Ok(()),
            Some(value) => Err(format!("Incorrect API key provided: {value:?}.")),
        },
        Api::Anthropic => match headers.get("x-api-key") {
            None => Err("x-api-key header is required".to_string()),
            Some(value) if value == token => Ok(()),
            Some(_) => Err("invalid x-api-key".to_string()),
        },
    }
}

fn check_headers(api: Api, headers: &BTreeMap<String, String>) -> Result<(), String> {
    let content_type = headers.get("content-type").map_or("", String::as_str);
    if !content_type.starts_with("application/json") {
        return Err(format!(
            "content-type: expected application/json, got {content_type:?}"
        ));
    }
    if api == Api::Anthropic {
        match headers.get("anthropic-version") {
            None => return Err("anthropic-version: header is required".to_string()),
            Some(v) if !ANTHROPIC_VERSIONS.contains(&v.as_str()) => {
                return Err(format!("anthropic-version: {v:?} is not a valid version"));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// OpenAI Responses

fn check_openai(body: &Value, sent: &Sent) -> Result<(), String> {
    let body = object(body, "the body")?;
    if let Some(key) = body.keys().find(|k| !OPENAI_FIELDS.contains(&k.as_str())) {
        return Err(format!("Unknown parameter: '{key}'."));
    }
    non_empty_str(body.get("model"), "model")?;
    if body.get("store") != Some(&json!(false)) {
        return Err(
            "store: must be false: nothing is kept at the provider (an absent store \
                    means true)"
                .to_string(),
        );
    }
    let includes_reasoning = body
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|i| i.contains(&json!("reasoning.encrypted_content")));
    if !includes_reasoning {
        return Err(
            "include: must contain \"reasoning.encrypted_content\", or reasoning cannot be \
             passed back with store false"
                .to_string(),
        );
    }
    for key in ["previous_response_id", "conversation"] {
        if body.get(key).is_some_and(|v| !v.is_null()) {
            return Err(format!(
                "{key}: needs state stored at the provider, but store is false"
            ));
        }
    }
    no_stream(body)?;
    let max_output = body.get("max_output_tokens").filter(|v| !v.is_null());
    if let Some(max) = max_output.filter(|max| max.as_u64().is_none_or(|n| n < 16)) {
        return Err(format!(
            "max_output_tokens: expected an integer >= 16, got {max}"
        ));
    }
    if let Some(reasoning) = body.get("reasoning").filter(|v| !v.is_null()) {
        let reasoning = object(reasoning, "reasoning")?;
        only_keys(reasoning, &["effort", "summary"], "reasoning")?;
        one_of(
            reasoning.get("effort"),
            &["none", "minimal", "low", "medium", "high", "xhigh"],
            "reasoning.effort",
        )?;
        one_of(
            reasoning.get("summary"),
            &["auto", "concise", "detailed"],
            "reasoning.summary",
        )?;
    }
    if let Some(tools) = body.get("tools") {
        check_openai_tools(tools)?;
    }
    let input = body
        .get("input")
        .and_then(Value::as_array)
        .ok_or("input: expected an array of items")?;
    check_openai_input(input, sent)
}

fn check_openai_tools(tools: &Value) -> Result<(), String> {
    let tools = tools.as_array().ok_or("tools: expected an array")?;
    let mut names = HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("tools[{i}]");
        let tool = object(tool, &at)?;
        if tool.get("type") != Some(&json!("function")) {
            return Err(format!("{at}.type: expected \"function\""));
        }
        only_keys(
            tool,
            &["type", "name", "description", "parameters", "strict"],
            &at,
        )?;
        let name = tool_name(tool.get("name"), &at)?;
        if !names.insert(name) {
            return Err(format!("{at}.name: duplicate tool name {name:?}"));
        }
        if let Some(description) = tool.get("description") {
            description
                .as_str()
                .ok_or(format!("{at}.description: expected a string"))?;
        }
        let parameters = tool.get("parameters").unwrap_or(&Value::Null);
        check_schema_object(parameters, &format!("{at}.parameters"))?;
        if tool.get("strict") == Some(&json!(true)) {
            check_strict_schema(parameters, &format!("{at}.parameters"))?;
        }
    }
    Ok(())
}

/// Strict mode's rule, which the real API enforces when `strict` is true: every object schema
/// has `additionalProperties: false` and lists all its properties in `required`.
fn check_strict_schema(schema: &Value, at: &str) -> Result<(), String> {
    if schema["type"] == "object" {
        if schema["additionalProperties"] != json!(false) {
            return Err(format!(
                "{at}: strict mode requires 'additionalProperties' to be supplied and false"
            ));
        }
        let required = schema["required"].as_array().cloned().unwrap_or_default();
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            if !required.contains(&json!(name)) {
                return Err(format!(
                    "{at}: strict mode requires 'required' to list every property; missing {name:?}"
                ));
            }
            check_strict_schema(property, &format!("{at}.properties.{name}"))?;
        }
    }
    if let Some(items) = schema.get("items") {
        check_strict_schema(items, &format!("{at}.items"))?;
    }
    Ok(())
}

fn check_openai_input(input: &[Value], sent: &Sent) -> Result<(), String> {
    // Function calls not answered yet, in order, and every call id seen.
    let mut open: Vec<&str> = Vec::new();
    let mut calls = HashSet::new();
    for (i, item) in input.iter().enumerate() {
        let at = format!("input[{i}]");
        let item = object(item, &at)?;
        let kind = match item.get("type") {
            None if item.contains_key("role") => "message",
            None => return Err(format!("{at}: an item needs a type or a role")),
            Some(kind) => kind
                .as_str()
                .ok_or(format!("{at}.type: expected a string"))?,
        };
        match kind {
            "message" => {
                only_keys(
                    item,
                    &["type", "role", "content", "id", "status", "phase"],
                    &at,
                )?;
                let role = item.get("role").and_then(Value::as_str).unwrap_or("");
                let parts: &[&str] = match role {
                    "assistant" => &["output_text", "refusal"],
                    "user" | "system" | "developer" => &["input_text", "input_image", "input_file"],
                    _ => {
                        return Err(format!(
                            "{at}.role: expected user, assistant, system or developer"
                        ));
                    }
                };
                check_openai_content(item.get("content"), parts, &format!("{at}.content"))?;
            }
            "function_call" => {
                only_keys(
                    item,
                    &["type", "call_id", "name", "arguments", "id", "status"],
                    &at,
                )?;
                let call_id = non_empty_str(item.get("call_id"), &format!("{at}.call_id"))?;
                non_empty_str(item.get("name"), &format!("{at}.name"))?;
                let arguments = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .ok_or(format!("{at}.arguments: expected a string holding JSON"))?;
                if serde_json::from_str::<Value>(arguments).is_err() {
                    return Err(format!("{at}.arguments: not JSON: {arguments:?}"));
                }
                if !calls.insert(call_id) {
                    return Err(format!("{at}: duplicate function call {call_id}"));
                }
                open.push(call_id);
            }
            "function_call_output" => {
                only_keys(item, &["type", "call_id", "output", "id", "status"], &at)?;
                let call_id = non_empty_str(item.get("call_id"), &format!("{at}.call_id"))?;
                match item.get("output") {
                    Some(Value::String(_) | Value::Array(_)) => {}
                    _ => return Err(format!("{at}.output: expected a string or content parts")),
                }
                let Some(k) = open.iter().position(|c| *c == call_id) else {
                    return Err(format!(
                        "{at}: No tool call found for function call output with call_id \
                         {call_id}."
                    ));
                };
                open.remove(k);
            }
            "reasoning" => {
                only_keys(
                    item,
                    &[
                        "type",
                        "id",
                        "summary",
                        "encrypted_content",
                        "content",
                        "status",
                    ],
                    &at,
                )?;
                if !item.get("summary").is_some_and(Value::is_array) {
                    return Err(format!("{at}.summary: required, an array"));
                }
                check_reasoning_passback(item, sent, &at)?;
                let follows = input.get(i + 1).is_some_and(|next| {
                    next["type"] == "function_call"
                        || next["type"] == "reasoning"
                        || next["role"] == "assistant"
                });
                if !follows {
                    return Err(format!(
                        "{at}: Item of type 'reasoning' was provided without its required \
                         following item."
                    ));
                }
            }
            other => return Err(format!("{at}.type: unknown item type {other:?}")),
        }
    }
    match open.first() {
        Some(call_id) => Err(format!("No tool output found for function call {call_id}.")),
        None => Ok(()),
    }
}

/// With store false the provider keeps nothing: a reasoning item must come back whole, its
/// `encrypted_content` byte for byte as the fake sent it.
fn check_reasoning_passback(
    item: &Map<String, Value>,
    sent: &Sent,
    at: &str,
) -> Result<(), String> {
    let encrypted = item
        .get("encrypted_content")
        .and_then(Value::as_str)
        .ok_or(format!(
            "{at}.encrypted_content: required with store false (the provider cannot look the \
             item up by id)"
        ))?;
    let Some((sent_id, _)) = sent.reasoning.iter().find(|(_, e)| e == encrypted) else {
        return Err(format!(
            "{at}.encrypted_content: not one this fake sent; it must be passed back unchanged"
        ));
    };
    match item.get("id").and_then(Value::as_str) {
        Some(id) if id != sent_id => Err(format!(
            "{at}.id: {id} is not the id {sent_id} sent with this encrypted_content"
        )),
        _ => Ok(()),
    }
}

fn check_openai_content(content: Option<&Value>, parts: &[&str], at: &str) -> Result<(), String> {
    match content {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(list)) => {
            for (j, part) in list.iter().enumerate() {
                let kind = part["type"].as_str().unwrap_or("");
                if !parts.contains(&kind) {
                    return Err(format!(
                        "{at}[{j}].type: Invalid value: {kind:?}. Supported values are: {parts:?}."
                    ));
                }
                let text_field = match kind {
                    "input_text" | "output_text" => "text",
                    "refusal" => "refusal",
                    _ => continue,
                };
                part[text_field]
                    .as_str()
                    .ok_or(format!("{at}[{j}].{text_field}: expected a string"))?;
            }
            Ok(())
        }
        _ => Err(format!("{at}: expected a string or an array of parts")),
    }
}

// ---------------------------------------------------------------------------------------------
// Anthropic Messages

fn check_anthropic(body: &Value, sent: &Sent) -> Result<(), String> {
    let body = object(body, "the body")?;
    if let Some(key) = body
        .keys()
        .find(|k| !ANTHROPIC_FIELDS.contains(&k.as_str()))
    {
        return Err(format!("{key}: Extra inputs are not permitted"));
    }
    non_empty_str(body.get("model"), "model")?;
    let max_tokens = match body.get("max_tokens") {
        None => return Err("max_tokens: Field required".to_string()),
        Some(n) => n
            .as_u64()
            .filter(|n| *n >= 1)
            .ok_or(format!("max_tokens: expected a positive integer, got {n}"))?,
    };
    no_stream(body)?;
    match body.get("system") {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(blocks)) => {
            for (j, block) in blocks.iter().enumerate() {
                if block["type"] != "text" || !block["text"].is_string() {
                    return Err(format!("system.{j}: expected a text block"));
                }
            }
        }
        Some(_) => return Err("system: expected a string or text blocks".to_string()),
    }
    let tools = match body.get("tools") {
        Some(tools) => check_anthropic_tools(tools)?,
        None => 0,
    };
    let thinking = match body.get("thinking") {
        None => false,
        Some(thinking) => match thinking["type"].as_str() {
            Some("disabled") => false,
            Some("adaptive") => true,
            Some("enabled") => {
                let budget = thinking["budget_tokens"].as_u64().unwrap_or(0);
                if budget < 1024 || budget >= max_tokens {
                    return Err(format!(
                        "thinking.budget_tokens: must be >= 1024 and less than max_tokens \
                         ({max_tokens}), got {}",
                        thinking["budget_tokens"]
                    ));
                }
                true
            }
            _ => {
                return Err(
                    "thinking.type: expected \"enabled\", \"adaptive\" or \"disabled\"".to_string(),
                );
            }
        },
    };
    let tool_choice = body.get("tool_choice").and_then(|c| c.get("type"));
    if thinking && tool_choice.is_some_and(|c| c == "any" || c == "tool") {
        return Err("Thinking may not be enabled when tool_choice forces tool use.".to_string());
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or("messages: expected a non-empty array")?;
    let uses_tools = check_anthropic_messages(messages, thinking, sent)?;
    if uses_tools && tools == 0 {
        return Err(
            "Requests which include `tool_use` or `tool_result` blocks must define tools."
                .to_string(),
        );
    }
    Ok(())
}

/// Checks tool definitions and returns how many there are.
fn check_anthropic_tools(tools: &Value) -> Result<usize, String> {
    let tools = tools.as_array().ok_or("tools: expected an array")?;
    let mut names = HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("tools.{i}");
        let tool = object(tool, &at)?;
        if tool.get("type").is_some_and(|t| t != "custom") {
            return Err(format!(
                "{at}.type: this fake knows only custom tools (no type, or \"custom\")"
            ));
        }
        only_keys(
            tool,
            &[
                "type",
                "name",
                "description",
                "input_schema",
                "cache_control",
            ],
            &at,
        )?;
        let name = tool_name(tool.get("name"), &at)?;
        if !names.insert(name) {
            return Err("tools: Tool names must be unique.".to_string());
        }
        if let Some(description) = tool.get("description") {
            description
                .as_str()
                .ok_or(format!("{at}.description: expected a string"))?;
        }
        let schema = tool.get("input_schema").unwrap_or(&Value::Null);
        check_schema_object(schema, &format!("{at}.input_schema"))?;
    }
    Ok(tools.len())
}

/// Checks roles, blocks, tool_use/tool_result pairing and thinking passback; returns whether any
/// tool_use or tool_result block appears.
fn check_anthropic_messages(
    messages: &[Value],
    thinking: bool,
    sent: &Sent,
) -> Result<bool, String> {
    // The previous assistant message's tool_use ids, which the next user message must answer.
    let mut pending: Vec<&str> = Vec::new();
    let mut tool_use_ids = HashSet::new();
    let mut uses_tools = false;
    for (i, message) in messages.iter().enumerate() {
        let at = format!("messages.{i}");
        let message = object(message, &at)?;
        only_keys(message, &["role", "content"], &at)?;
        let expected = if i % 2 == 0 { "user" } else { "assistant" };
        if message.get("role") != Some(&json!(expected)) {
            return Err(format!(
                "{at}.role: expected {expected:?}: roles must alternate between \"user\" and \
                 \"assistant\", starting with \"user\""
            ));
        }
        let blocks = match message.get("content") {
            Some(Value::String(text)) if text.is_empty() => {
                return Err(format!("{at}.content: text content must be non-empty"));
            }
            Some(Value::String(_)) => &[][..],
            Some(Value::Array(blocks)) if !blocks.is_empty() => blocks.as_slice(),
            _ => {
                return Err(format!(
                    "{at}.content: expected a string or non-empty blocks"
                ));
            }
        };
        let mut answered = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let at = format!("{at}.content.{j}");
            let block = object(block, &at)?;
            let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
            let for_role = match kind {
                "tool_result" | "image" | "document" => Some("user"),
                "tool_use" | "thinking" | "redacted_thinking" => Some("assistant"),
                _ => None,
            };
            if for_role.is_some_and(|role| role != expected) {
                return Err(format!(
                    "{at}.type: {kind} blocks belong in {} messages, not {expected} ones",
                    for_role.unwrap_or_default()
                ));
            }
            match kind {
                "text" => {
                    only_keys(block, &["type", "text", "citations", "cache_control"], &at)?;
                    non_empty_str(block.get("text"), &format!("{at}.text"))
                        .map_err(|_| format!("{at}.text: text content blocks must be non-empty"))?;
                }
                "image" | "document" => {}
                "tool_use" => {
                    uses_tools = true;
                    only_keys(
                        block,
                        &["type", "id", "name", "input", "cache_control", "caller"],
                        &at,
                    )?;
                    let id = non_empty_str(block.get("id"), &format!("{at}.id"))?;
                    if !id
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
                    {
                        return Err(format!("{at}.id: must match ^[a-zA-Z0-9_-]+$"));
                    }
                    if !tool_use_ids.insert(id) {
                        return Err(format!("{at}: `tool_use` ids must be unique: {id}"));
                    }
                    non_empty_str(block.get("name"), &format!("{at}.name"))?;
                    object(
                        block.get("input").unwrap_or(&Value::Null),
                        &format!("{at}.input"),
                    )?;
                }
                "tool_result" => {
                    uses_tools = true;
                    only_keys(
                        block,
                        &[
                            "type",
                            "tool_use_id",
                            "content",
                            "is_error",
                            "cache_control",
                        ],
                        &at,
                    )?;
                    let id = non_empty_str(block.get("tool_use_id"), &format!("{at}.tool_use_id"))?;
                    if !pending.contains(&id) || answered.contains(&id) {
                        return Err(format!(
                            "{at}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. \
                             Each `tool_result` block must have a corresponding `tool_use` block \
                             in the previous message."
                        ));
                    }
                    answered.push(id);
                    match block.get("content") {
                        None | Some(Value::String(_) | Value::Array(_)) => {}
                        _ => return Err(format!("{at}.content: expected a string or blocks")),
                    }
                    if block.get("is_error").is_some_and(|e| !e.is_boolean()) {
                        return Err(format!("{at}.is_error: expected a boolean"));
                    }
                }
                "thinking" => {
                    only_keys(block, &["type", "thinking", "signature"], &at)?;
                    let text = block.get("thinking").and_then(Value::as_str);
                    let signature = block.get("signature").and_then(Value::as_str);
                    let known = sent
                        .thinking
                        .iter()
                        .any(|(t, s)| Some(t.as_str()) == text && Some(s.as_str()) == signature);
                    if !known {
                        return Err(format!(
                            "{at}: Invalid `signature` in `thinking` block (the thinking and its \
                             signature must come back exactly as the fake sent them)"
                        ));
                    }
                }
                "redacted_thinking" => {
                    only_keys(block, &["type", "data"], &at)?;
                    let data = block.get("data").and_then(Value::as_str).unwrap_or("");
                    if !sent.redacted.iter().any(|d| d == data) {
                        return Err(format!(
                            "{at}.data: not a redacted_thinking block this fake sent"
                        ));
                    }
                }
                other => return Err(format!("{at}.type: unknown block type {other:?}")),
            }
        }
        if expected == "user" {
            let unanswered: Vec<&str> = pending
                .iter()
                .filter(|id| !answered.contains(id))
                .copied()
                .collect();
            if !unanswered.is_empty() {
                return Err(unanswered_tool_uses(i - 1, &unanswered));
            }
            pending.clear();
        } else {
            pending = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str())
                .collect();
        }
    }
    if !pending.is_empty() {
        return Err(unanswered_tool_uses(messages.len() - 1, &pending));
    }
    if thinking {
        check_thinking_leads(messages)?;
    }
    Ok(uses_tools)
}

fn unanswered_tool_uses(assistant: usize, ids: &[&str]) -> String {
    format!(
        "messages.{assistant}: `tool_use` ids were found without `tool_result` blocks immediately \
         after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the \
         next message.",
        ids.join(", ")
    )
}

/// With thinking enabled, a tool loop in progress (the last message carries tool results) must
/// show the model its own thinking: the assistant message before it starts with a thinking block.
fn check_thinking_leads(messages: &[Value]) -> Result<(), String> {
    let n = messages.len();
    let last = &messages[n - 1];
    let in_tool_loop = last["content"]
        .as_array()
        .is_some_and(|b| b.iter().any(|b| b["type"] == "tool_result"));
    if !in_tool_loop {
        return Ok(());
    }
    let first = &messages[n - 2]["content"][0]["type"];
    if first != "thinking" && first != "redacted_thinking" {
        return Err(format!(
            "messages.{}.content.0.type: Expected `thinking` or `redacted_thinking`, but found \
             {first}. When `thinking` is enabled, a final `assistant` message must start with a \
             thinking block.",
            n - 2
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Shared checks

fn object<'a>(value: &'a Value, at: &str) -> Result<&'a Map<String, Value>, String> {
    value.as_object().ok_or(format!("{at}: expected an object"))
}

fn only_keys(object: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), String> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(format!(
            "{at}.{key}: Unknown parameter (allowed: {allowed:?})"
        )),
        None => Ok(()),
    }
}

fn non_empty_str<'a>(value: Option<&'a Value>, at: &str) -> Result<&'a str, String> {
    value
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(format!("{at}: required, a non-empty string"))
}

fn one_of(value: Option<&Value>, allowed: &[&str], at: &str) -> Result<(), String> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(v) if v.as_str().is_some_and(|s| allowed.contains(&s)) => Ok(()),
        Some(v) => Err(format!("{at}: {v} is not one of {allowed:?}")),
    }
}

/// Both APIs: `^[a-zA-Z0-9_-]{1,64}$`.
fn tool_name<'a>(value: Option<&'a Value>, at: &str) -> Result<&'a str, String> {
    let name = non_empty_str(value, &format!("{at}.name"))?;
    let valid = name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        return Err(format!(
            "{at}.name: {name:?} does not match ^[a-zA-Z0-9_-]{{1,64}}$"
        ));
    }
    Ok(name)
}

fn check_schema_object(schema: &Value, at: &str) -> Result<(), String> {
    if schema["type"] != "object" {
        return Err(format!(
            "{at}: expected a JSON schema with \"type\": \"object\", got {schema}"
        ));
    }
    Ok(())
}

/// The fake answers only with whole JSON bodies; a streaming client would wait for SSE events.
fn no_stream(body: &Map<String, Value>) -> Result<(), String> {
    if body.get("stream") == Some(&json!(true)) {
        return Err("stream: this fake serves only non-streaming replies".to_string());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reply builders

/// Replies in the Responses API's exact shape (keys as in the recorded fixtures).
pub mod openai {
    use super::*;

    /// A completed response whose `output` is `items` (from [`message`], [`function_call`],
    /// [`reasoning`]).
    pub fn reply(items: Vec<Value>) -> Value {
        let now = now();
        let reasoning_tokens = if items.iter().any(|i| i["type"] == "reasoning") {
            64
        } else {
            0
        };
        let output_tokens = 20 * items.len() as u64 + reasoning_tokens;
        json!({
            "id": fresh_id("resp_", HEX, 50),
            "object": "response",
            "created_at": now,
            "status": "completed",
            "background": false,
            "billing": {"payer": "developer"},
            "completed_at": now,
            "error": null,
            "incomplete_details": null,
            "instructions": null,
            "max_output_tokens": null,
            "max_tool_calls": null,
            "model": "gpt-5-mini-2025-08-07",
            "output": items,
            "parallel_tool_calls": true,
            "previous_response_id": null,
            "prompt_cache_key": null,
            "prompt_cache_retention": null,
            "reasoning": {"effort": "medium", "summary": null},
            "safety_identifier": null,
            "service_tier": "default",
            "store": false,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": [],
            "top_logprobs": 0,
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": {
                "input_tokens": 300,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                "total_tokens": 300 + output_tokens,
            },
            "user": null,
            "metadata": {},
        })
    }

    /// A reply that is one assistant message: the end of a turn.
    pub fn text_reply(text: &str) -> Value {
        reply(vec![message(text)])
    }

    /// An assistant message output item.
    pub fn message(text: &str) -> Value {
        json!({
            "id": fresh_id("msg_", HEX, 50),
            "type": "message",
            "status": "completed",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}],
            "role": "assistant",
        })
    }

    /// A function call output item; `arguments` is sent as a string holding its JSON.
    pub fn function_call(name: &str, arguments: Value) -> Value {
        json!({
            "type": "function_call",
            "id": fresh_id("fc_", HEX, 48),
            "call_id": fresh_id("call_", BASE62, 24),
            "name": name,
            "arguments": arguments.to_string(),
            "status": "completed",
        })
    }

    /// A reasoning item carrying a fresh `encrypted_content`, which the fake then expects back
    /// unchanged; an empty `summary` sends `"summary": []`, as the API does without a summary.
    pub fn reasoning(summary: &str) -> Value {
        let summary: Vec<Value> = if summary.is_empty() {
            vec![]
        } else {
            vec![json!({"type": "summary_text", "text": summary})]
        };
        json!({
            "id": fresh_id("rs_", HEX, 50),
            "type": "reasoning",
            "encrypted_content": fresh_id("gAAAAAB", BASE64URL, 400),
            "summary": summary,
        })
    }

    /// An error body, `{"error": {message, type, param, code}}`; `code` repeats `kind` as the
    /// API does for quota and server errors.
    pub fn error(kind: &str, message: &str) -> Value {
        let code = if kind == "invalid_request_error" {
            Value::Null
        } else {
            json!(kind)
        };
        json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
    }
}

/// Replies in the Messages API's exact shape (keys as in the recorded fixtures).
pub mod anthropic {
    use super::*;

    /// An assistant message made of `blocks` (from [`text`], [`tool_use`], [`thinking`]);
    /// `stop_reason` is `tool_use` when a block is one, else `end_turn`.
    pub fn reply(blocks: Vec<Value>) -> Value {
        let stop_reason = if blocks.iter().any(|b| b["type"] == "tool_use") {
            "tool_use"
        } else {
            "end_turn"
        };
        json!({
            "content": blocks,
            "id": fresh_id("msg_01", BASE62, 22),
            "model": "claude-sonnet-4-5-20250929",
            "role": "assistant",
            "stop_reason": stop_reason,
            "stop_sequence": null,
            "type": "message",
            "usage": {
                "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "inference_geo": "not_available",
                "input_tokens": 400,
                "output_tokens": 30 * blocks.len() as u64,
                "service_tier": "standard",
            },
        })
    }

    /// A reply that is one text block: the end of a turn.
    pub fn text_reply(text: &str) -> Value {
        reply(vec![self::text(text)])
    }

    pub fn text(text: &str) -> Value {
        json!({"text": text, "type": "text"})
    }

    pub fn tool_use(name: &str, input: Value) -> Value {
        json!({"id": fresh_id("toolu_01", BASE62, 22), "input": input, "name": name, "type": "tool_use"})
    }

    /// A thinking block with a fresh `signature`, which the fake then expects back unchanged
    /// along with the thinking text.
    pub fn thinking(thinking: &str) -> Value {
        let signature = fresh_id("Eq", BASE64, 300) + "==";
        json!({"signature": signature, "thinking": thinking, "type": "thinking"})
    }

    /// An error body, `{"type": "error", "error": {type, message}, "request_id"}`.
    pub fn error(kind: &str, message: &str) -> Value {
        json!({
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": fresh_id("req_011", BASE62, 21),
        })
    }
}

const HEX: &[u8] = b"0123456789abcdef";
const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const BASE64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `prefix` and `len` characters from `alphabet`, unique within the test process: a counter run
/// through splitmix64, so ids look random but never repeat.
fn fresh_id(prefix: &str, alphabet: &[u8], len: usize) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let mut state = NEXT.fetch_add(1, Ordering::Relaxed) << 32;
    let mut id = prefix.to_string();
    for _ in 0..len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        id.push(alphabet[(z % alphabet.len() as u64) as usize] as char);
    }
    id
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1

struct HttpRequest {
    method: String,
    path: String,
    /// Whether the connection stays open after the response.
    keep_alive: bool,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// Serves requests on one connection until the client closes it, asks to close it, idles past
/// [`IDLE_CONNECTION`], or sends something that is not HTTP.
fn serve_connection(shared: &Shared, stream: TcpStream) {
    // Without a timeout an idle kept-alive connection would pin this thread forever.
    if stream.set_read_timeout(Some(IDLE_CONNECTION)).is_err() {
        return;
    }
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut writer = stream;
    loop {
        let request = match read_request(&mut reader, &mut writer) {
            Ok(Some(request)) => request,
            // The client closed, or idled out: nothing more to serve.
            Ok(None) => return,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                let message = format!("malformed HTTP request: {e}");
                shared
                    .state
                    .lock()
                    .unwrap()
                    .violations
                    .push(message.clone());
                let body = Api::OpenAi.error_body(400, &message);
                // The connection is dropped right after; a client gone already changes nothing.
                let _ = write_response(&mut writer, 400, None, &body, false);
                return;
            }
            Err(_) => return,
        };
        let answer = shared.answer(&request);
        let header = answer.api.request_id_header();
        let written = write_response(
            &mut writer,
            answer.status,
            Some(header),
            &answer.body,
            request.keep_alive,
        );
        if written.is_err() || !request.keep_alive {
            return;
        }
    }
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// Reads one line (with its `\r\n`), at most [`MAX_LINE_BYTES`]; an empty string means EOF.
fn read_line(reader: &mut BufReader<TcpStream>) -> io::Result<String> {
    let mut line = String::new();
    reader.by_ref().take(MAX_LINE_BYTES).read_line(&mut line)?;
    if !line.is_empty() && !line.ends_with('\n') && line.len() as u64 >= MAX_LINE_BYTES {
        return Err(invalid("a line longer than 64 KiB"));
    }
    Ok(line)
}

/// Reads one request; `None` when the client closed (or idled out) between requests.
fn read_request(
    reader: &mut BufReader<TcpStream>,
    writer: &mut TcpStream,
) -> io::Result<Option<HttpRequest>> {
    let mut line = match read_line(reader) {
        Ok(line) => line,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    // RFC 9112 §2.2: a server should ignore an empty line before the request line.
    if line == "\r\n" || line == "\n" {
        line = read_line(reader)?;
    }
    if line.is_empty() {
        return Ok(None);
    }
    let mut words = line.split_whitespace();
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(invalid(format!("bad request line {line:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(invalid(format!("unsupported version {version}")));
    }
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let line = read_line(reader)?;
        if line.is_empty() {
            return Err(invalid("the connection ended inside the headers"));
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| invalid(format!("bad header line {line:?}")))?;
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim();
        headers
            .entry(name)
            .and_modify(|v| *v = format!("{v}, {value}"))
            .or_insert_with(|| value.to_string());
    }
    let has_token = |name: &str, token: &str| {
        headers
            .get(name)
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    let keep_alive = if version == "HTTP/1.0" {
        has_token("connection", "keep-alive")
    } else {
        !has_token("connection", "close")
    };
    if has_token("expect", "100-continue") {
        writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let body = if has_token("transfer-encoding", "chunked") {
        read_chunked(reader)?
    } else {
        let length = match headers.get("content-length") {
            None => 0,
            Some(n) => n
                .parse::<usize>()
                .map_err(|_| invalid(format!("bad content-length {n:?}")))?,
        };
        if length > MAX_BODY_BYTES {
            return Err(invalid(format!("a body of {length} bytes")));
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        body
    };
    Ok(Some(HttpRequest {
        method: method.to_string(),
        path: target.to_string(),
        keep_alive,
        headers,
        body,
    }))
}

/// A `Transfer-Encoding: chunked` body: hex sizes, chunks, a zero chunk, optional trailers.
fn read_chunked(reader: &mut BufReader<TcpStream>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(reader)?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| invalid(format!("bad chunk size line {line:?}")))?;
        if size == 0 {
            // Trailers, up to the blank line that ends the message.
            loop {
                let trailer = read_line(reader)?;
                if trailer.trim_end_matches(['\r', '\n']).is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(invalid("a chunked body over the size limit"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut end = [0; 2];
        reader.read_exact(&mut end)?;
        if &end != b"\r\n" {
            return Err(invalid("a chunk not followed by CRLF"));
        }
    }
}

fn write_response(
    writer: &mut TcpStream,
    status: u16,
    header: Option<(&str, String)>,
    body: &Value,
    keep_alive: bool,
) -> io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    };
    let body = body.to_string();
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    if let Some((name, value)) = header {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !keep_alive {
        head.push_str("connection: close\r\n");
    }
    head.push_str("\r\n");
    writer.write_all(head.as_bytes())?;
    writer.write_all(body.as_bytes())?;
    writer.flush()
}
