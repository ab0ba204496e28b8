//! The fake model provider of the agent's tests: a local HTTP/1.1 server speaking OpenAI
//! Responses, Anthropic Messages and OpenAI Chat Completions, always as server-sent events.
//! Boundary: scripted whole answers and failures in; recorded requests, their counted usage (see
//! [`BYTES_PER_TOKEN`], [`Caches`]) and violations out. Each request is checked as strictly as the
//! real service would (and must stream, DESIGN §12); a bad one gets the real 400/401 AND is a
//! violation, so `assert_clean` fails even if the agent swallowed the error. Invariant: a request
//! rejected, or refused for the context window, never consumes a scripted reply.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::hash::Hasher;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// The token [`FakeLlm::start`] expects: `authorization: Bearer TOKEN` (OpenAI's two APIs) or
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

/// Bytes the fake counts as one token, roughly what real tokenizers give for English and JSON. A
/// request's prompt is ceil(body bytes / 4) tokens and an answer's output ceil(bytes written / 4)
/// (at least 1): deterministic, so a test can compute every number it expects.
const BYTES_PER_TOKEN: usize = 4;

/// The most `cache_control` breakpoints the Messages API accepts in one request; one more is
/// answered 400.
const MAX_CACHE_BREAKPOINTS: usize = 4;

/// The longest piece (in bytes) of text or arguments one delta event carries. Text is cut at
/// words first, so even a short answer arrives as several deltas, as from the real services.
const MAX_DELTA_BYTES: usize = 8;

/// The most spaces padded before the closing brace of an Anthropic `data:` line; the recordings
/// show such padding (a parser must not expect the line to end at the JSON).
const MAX_PADDING: usize = 15;

/// The length OpenAI's `obfuscation` field pads a delta to (it hides the delta's size on the
/// wire); a field the agent must ignore.
const OBFUSCATION_BYTES: usize = 16;

/// The comment OpenAI-style streams carry (as proxies and local servers send while a model
/// thinks); an SSE parser ignores it.
const KEEP_ALIVE: &str = ": keep-alive\n\n";

/// The `anthropic-version` values the real API accepts.
const ANTHROPIC_VERSIONS: &[&str] = &["2023-06-01", "2023-01-01"];

/// The rule every request of every API must keep.
const MUST_STREAM: &str = "stream: the agent must stream every request (DESIGN §12)";

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

/// Top-level fields the real Chat Completions API knows; any other is rejected, as the real one
/// does.
const CHAT_FIELDS: &[&str] = &[
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "messages",
    "metadata",
    "modalities",
    "model",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
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
    /// The status the fake answered with (400 for a context window refusal).
    pub status: u16,
    /// The usage a complete stream reported, in its API's own shape (`Responses` and Chat: the
    /// final usage; Anthropic: `message_start`'s counts with `message_delta`'s output tokens).
    /// `None` for errors, refusals, broken streams and streamed errors.
    pub usage: Option<Value>,
}

/// Which API a scripted stream belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Api {
    /// OpenAI Responses, `POST /v1/responses`.
    OpenAi,
    /// Anthropic Messages, `POST /v1/messages`.
    Anthropic,
    /// OpenAI Chat Completions, `POST /v1/chat/completions`.
    Chat,
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
    /// Starts a fake expecting [`TOKEN`], with no context window and no delay between events.
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

    /// Queues a whole Responses answer (from [`openai::reply`]) for the next valid
    /// `POST /v1/responses`, which gets it as the real event stream.
    pub fn push_openai(&self, body: Value) {
        self.push(Reply::Stream {
            api: Api::OpenAi,
            body,
            broken: false,
        });
    }

    /// Queues a whole Messages answer (from [`anthropic::reply`]) for the next valid
    /// `POST /v1/messages`, which gets it as the real event stream.
    pub fn push_anthropic(&self, body: Value) {
        self.push(Reply::Stream {
            api: Api::Anthropic,
            body,
            broken: false,
        });
    }

    /// Queues a whole `chat.completion` (from [`chat::reply`]) for the next valid
    /// `POST /v1/chat/completions`, which gets it as the real chunk stream.
    pub fn push_chat(&self, body: Value) {
        self.push(Reply::Stream {
            api: Api::Chat,
            body,
            broken: false,
        });
    }

    /// Queues a reply with this status for the next valid request to any API; build the body
    /// with [`openai::error`], [`anthropic::error`] or [`chat::error`].
    pub fn push_error(&self, status: u16, body: Value) {
        self.push_error_with_headers(status, body, &[]);
    }

    /// [`FakeLlm::push_error`] with response headers, such as a 429's `retry-after: 1` and
    /// `retry-after-ms: 1000`.
    pub fn push_error_with_headers(&self, status: u16, body: Value, headers: &[(&str, &str)]) {
        let headers = headers
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        self.push(Reply::Error {
            status,
            body,
            headers,
        });
    }

    /// Queues a 200 stream of this whole answer (of any API, told by its shape) that stops
    /// half-way: the connection closes before the final event and before the chunked body ends.
    pub fn push_broken(&self, body: Value) {
        let api = api_of(&body);
        self.push(Reply::Stream {
            api,
            body,
            broken: true,
        });
    }

    /// Queues a 200 stream that carries `error` (the API's error body, from [`openai::error`],
    /// [`anthropic::error`] or [`chat::error`]) as the API's error event: Anthropic
    /// `event: error` after `message_start`; Responses `error` then `response.failed`; Chat a
    /// `data: {"error": …}` chunk after the first one.
    pub fn push_stream_error(&self, api: Api, error: Value) {
        self.push(Reply::StreamError { api, error });
    }

    /// Waits `delay` between the events of every later stream (none by default), so a test can
    /// watch progress arrive while a step streams.
    pub fn set_event_delay(&self, delay: Duration) {
        self.shared.state.lock().unwrap().event_delay = delay;
    }

    /// Refuses, from now on, a request whose prompt tokens (plus `max_tokens` on Anthropic, which
    /// counts the output it reserves) exceed `tokens`, with the API's real 400. Not a violation:
    /// it is an answer the agent must handle, and it consumes no scripted reply.
    pub fn set_context_window(&self, tokens: u64) {
        self.shared.state.lock().unwrap().context_window = Some(tokens);
    }

    fn push(&self, reply: Reply) {
        self.shared.state.lock().unwrap().script.push_back(reply);
    }

    /// Every request received so far, in order, rejected and refused ones included.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.state.lock().unwrap().requests.clone()
    }

    /// The usage of every complete stream so far, in order (see [`Recorded::usage`]).
    pub fn usage_log(&self) -> Vec<Value> {
        let state = self.shared.state.lock().unwrap();
        state
            .requests
            .iter()
            .filter_map(|r| r.usage.clone())
            .collect()
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

/// The API a whole answer belongs to, told by its shape.
fn api_of(body: &Value) -> Api {
    match (body["object"].as_str(), body["type"].as_str()) {
        (Some("response"), _) => Api::OpenAi,
        (Some("chat.completion"), _) => Api::Chat,
        (_, Some("message")) => Api::Anthropic,
        _ => panic!(
            "push_broken: not a whole answer of any API (object \"response\" or \
             \"chat.completion\", or type \"message\"): {body}"
        ),
    }
}

enum Reply {
    /// A 200 event stream made from a whole answer; a `broken` one stops half-way.
    Stream { api: Api, body: Value, broken: bool },
    /// A 200 event stream that carries the API's error event.
    StreamError { api: Api, error: Value },
    /// A JSON answer with this status, for a request to any API.
    Error {
        status: u16,
        body: Value,
        headers: Vec<(String, String)>,
    },
}

impl Reply {
    /// The API the reply is for; `None` fits any.
    fn api(&self) -> Option<Api> {
        match self {
            Reply::Stream { api, .. } | Reply::StreamError { api, .. } => Some(*api),
            Reply::Error { .. } => None,
        }
    }
}

struct Shared {
    token: String,
    /// Set by `Drop`; the accept loop ends at the next connection it sees.
    stopping: AtomicBool,
    /// Locked by connection threads for one request's check and by the test's calls, never while
    /// a stream is written. A check that panicked (a bug in this fake) poisons it, and the test's
    /// next call fails loudly.
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    requests: Vec<Recorded>,
    violations: Vec<String>,
    sent: Sent,
    caches: Caches,
    /// The pause between two events of a stream.
    event_delay: Duration,
    /// The model's context window in tokens, when the test set one.
    context_window: Option<u64>,
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
    fn remember(&mut self, api: Api, body: &Value) {
        match api {
            Api::OpenAi => {
                for item in body["output"].as_array().into_iter().flatten() {
                    if let (Some("reasoning"), Some(encrypted)) =
                        (item["type"].as_str(), item["encrypted_content"].as_str())
                    {
                        let id = item["id"].as_str().unwrap_or("").to_string();
                        self.reasoning.push((id, encrypted.to_string()));
                    }
                }
            }
            Api::Anthropic => {
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
            // Chat Completions carries nothing opaque back.
            Api::Chat => {}
        }
    }
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::OpenAi => "OpenAI Responses",
            Api::Anthropic => "Anthropic Messages",
            Api::Chat => "OpenAI Chat Completions",
        }
    }

    /// The real API's error body for `status`.
    fn error_body(self, status: u16, message: &str) -> Value {
        match self {
            Api::OpenAi | Api::Chat => {
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

    fn request_id_header(self) -> (String, String) {
        let (name, value) = match self {
            Api::OpenAi | Api::Chat => ("x-request-id", fresh_id("req_", HEX, 32)),
            Api::Anthropic => ("request-id", fresh_id("req_011", BASE62, 21)),
        };
        (name.to_string(), value)
    }
}

/// What the fake answers one request with.
struct Answer {
    status: u16,
    api: Api,
    body: Body,
    /// Headers the script asked for (`retry-after`, …), beside the request id.
    headers: Vec<(String, String)>,
    /// The rule the request broke, recorded as a violation.
    violation: Option<String>,
    /// What a complete stream reports, for [`Recorded::usage`].
    usage: Option<Value>,
}

enum Body {
    Json(Value),
    /// Server-sent events, each framed already. A `broken` stream closes the connection after
    /// its last event without ending the chunked body; `delay` passes between two events.
    Events {
        events: Vec<String>,
        broken: bool,
        delay: Duration,
    },
}

impl Answer {
    fn json(api: Api, status: u16, body: Value) -> Answer {
        Answer {
            status,
            api,
            body: Body::Json(body),
            headers: Vec::new(),
            violation: None,
            usage: None,
        }
    }

    fn reject(api: Api, status: u16, message: String) -> Answer {
        Answer {
            violation: Some(message.clone()),
            ..Answer::json(api, status, api.error_body(status, &message))
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
            usage: answer.usage.clone(),
        });
        answer
    }
}

impl State {
    /// Checks the request, refuses it if it overflows the context window, then takes the next
    /// scripted reply and turns it into what goes on the wire.
    fn judge(&mut self, token: &str, request: &HttpRequest, body: &Value) -> Answer {
        let api = match (request.method.as_str(), request.path.as_str()) {
            ("POST", "/v1/responses") => Api::OpenAi,
            ("POST", "/v1/messages") => Api::Anthropic,
            ("POST", "/v1/chat/completions") => Api::Chat,
            _ => {
                let message = "no such endpoint: the fake serves POST /v1/responses, \
                               /v1/messages and /v1/chat/completions (is base_url missing or \
                               doubling /v1?)";
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
                Api::Chat => check_chat(body),
            }
        });
        if let Err(message) = checked {
            return Answer::reject(api, 400, message);
        }
        let prompt_tokens = tokens(request.body.len());
        let refusal = self
            .context_window
            .and_then(|window| context_refusal(api, prompt_tokens, body, window));
        if let Some(refusal) = refusal {
            return Answer::json(api, 400, refusal);
        }
        let wrong_api = match self.script.front() {
            None => {
                let message = "the script is empty: the test pushed no reply for this request";
                return Answer::reject(api, 500, message.to_string());
            }
            Some(reply) => reply.api().is_some_and(|scripted| scripted != api),
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
        self.serve(api, reply, body, &request.body)
    }

    /// Turns a scripted reply into what goes on the wire: a JSON error, or the events of a whole
    /// answer whose usage the fake counts (and whose prompt it caches), or of a streamed error.
    fn serve(&mut self, api: Api, reply: Reply, request: &Value, raw: &[u8]) -> Answer {
        let delay = self.event_delay;
        match reply {
            Reply::Error {
                status,
                body,
                headers,
            } => Answer {
                headers,
                ..Answer::json(api, status, body)
            },
            Reply::Stream {
                body: mut answer,
                broken,
                ..
            } => {
                self.sent.remember(api, &answer);
                let prompt = self.caches.prompt(api, request, raw, true);
                answer["usage"] = usage(api, &prompt, &answer);
                let mut events = stream(api, &answer);
                if broken {
                    events.truncate((events.len() / 2).max(1));
                }
                Answer {
                    usage: (!broken).then(|| answer["usage"].clone()),
                    body: Body::Events {
                        events,
                        broken,
                        delay,
                    },
                    ..Answer::json(api, 200, Value::Null)
                }
            }
            Reply::StreamError { error, .. } => {
                let prompt = self.caches.prompt(api, request, raw, false);
                Answer {
                    body: Body::Events {
                        events: stream_error(api, &prompt, &error),
                        broken: false,
                        delay,
                    },
                    ..Answer::json(api, 200, Value::Null)
                }
            }
        }
    }
}

/// The API's real refusal of a prompt too long for `window`, or `None` when it fits. OpenAI's
/// two APIs count the input alone; Anthropic refuses input plus `max_tokens` beyond the window
/// too, with its own message for each case.
fn context_refusal(api: Api, prompt: u64, body: &Value, window: u64) -> Option<Value> {
    match api {
        Api::OpenAi if prompt > window => Some(json!({"error": {
            "message": "Your input exceeds the context window of this model. Please adjust your \
                        input and try again.",
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }})),
        Api::Chat if prompt > window => Some(json!({"error": {
            "message": format!(
                "This model's maximum context length is {window} tokens. However, your messages \
                 resulted in {prompt} tokens. Please reduce the length of the messages."
            ),
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }})),
        Api::Anthropic => {
            let max_tokens = body["max_tokens"].as_u64().unwrap_or(0);
            let message = if prompt > window {
                format!("prompt is too long: {prompt} tokens > {window} maximum")
            } else if prompt + max_tokens > window {
                format!(
                    "input length and `max_tokens` exceed context limit: {prompt} + {max_tokens} \
                     > {window}, decrease input length or `max_tokens` and try again"
                )
            } else {
                return None;
            };
            Some(anthropic::error("invalid_request_error", &message))
        }
        _ => None,
    }
}

fn check_auth(api: Api, token: &str, headers: &BTreeMap<String, String>) -> Result<(), String> {
    match api {
        Api::OpenAi | Api::Chat => match headers.get("authorization") {
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
    must_stream(body)?;
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
    must_stream(body)?;
    match body.get("system") {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(blocks)) => {
            for (j, block) in blocks.iter().enumerate() {
                if block["type"] != "text" || !block["text"].is_string() {
                    return Err(format!("system.{j}: expected a text block"));
                }
                only_keys(
                    object(block, "system")?,
                    &["type", "text", "cache_control", "citations"],
                    &format!("system.{j}"),
                )?;
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
    check_cache_control(body)?;
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

/// Prompt caching's rules: at most [`MAX_CACHE_BREAKPOINTS`] blocks (tools, system blocks,
/// message blocks) carry `cache_control`, each `{"type": "ephemeral"}` with an optional `ttl` of
/// `5m` or `1h` (every `1h` one before the `5m` ones), and never on an empty text block.
fn check_cache_control(body: &Map<String, Value>) -> Result<(), String> {
    let marked = cache_breakpoints(body);
    if marked.len() > MAX_CACHE_BREAKPOINTS {
        return Err(format!(
            "A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. \
             Found {}.",
            marked.len()
        ));
    }
    let mut five_minutes_seen = false;
    for (at, block) in marked {
        let control = object(&block["cache_control"], &format!("{at}.cache_control"))?;
        only_keys(control, &["type", "ttl"], &format!("{at}.cache_control"))?;
        if control.get("type") != Some(&json!("ephemeral")) {
            return Err(format!(
                "{at}.cache_control.type: Input should be 'ephemeral'"
            ));
        }
        let one_hour = match control.get("ttl") {
            None => false,
            Some(ttl) if ttl == "5m" => false,
            Some(ttl) if ttl == "1h" => true,
            Some(ttl) => {
                return Err(format!(
                    "{at}.cache_control.ttl: Input should be '5m' or '1h', got {ttl}"
                ));
            }
        };
        if one_hour && five_minutes_seen {
            return Err(format!(
                "{at}.cache_control.ttl: a ttl='1h' cache_control block must not come after a \
                 ttl='5m' one"
            ));
        }
        five_minutes_seen |= !one_hour;
        if block["type"] == "text" && block["text"] == "" {
            return Err(format!(
                "{at}.text: cache_control cannot be set for empty text blocks"
            ));
        }
    }
    Ok(())
}

/// The blocks of a Messages request that carry a `cache_control` (not null), with where they
/// are, in the order the API caches them: tools, system blocks, then message blocks.
fn cache_breakpoints(body: &Map<String, Value>) -> Vec<(String, &Value)> {
    let marked = |block: &&Value| block.get("cache_control").is_some_and(|c| !c.is_null());
    let mut found = Vec::new();
    let tools = body.get("tools").and_then(Value::as_array);
    for (i, tool) in tools.into_iter().flatten().enumerate() {
        found.push((format!("tools.{i}"), tool));
    }
    let system = body.get("system").and_then(Value::as_array);
    for (j, block) in system.into_iter().flatten().enumerate() {
        found.push((format!("system.{j}"), block));
    }
    let messages = body.get("messages").and_then(Value::as_array);
    for (i, message) in messages.into_iter().flatten().enumerate() {
        let blocks = message["content"].as_array();
        for (j, block) in blocks.into_iter().flatten().enumerate() {
            found.push((format!("messages.{i}.content.{j}"), block));
        }
    }
    found.retain(|(_, block)| marked(block));
    found
}

// ---------------------------------------------------------------------------------------------
// OpenAI Chat Completions

fn check_chat(body: &Value) -> Result<(), String> {
    let body = object(body, "the body")?;
    if let Some(key) = body.keys().find(|k| !CHAT_FIELDS.contains(&k.as_str())) {
        return Err(format!("Unrecognized request argument supplied: {key}"));
    }
    non_empty_str(body.get("model"), "model")?;
    must_stream(body)?;
    let include_usage = body
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .is_some_and(|u| u == true);
    if !include_usage {
        return Err(
            "stream_options: must be {\"include_usage\": true}: a stream without it reports no \
             usage, and the agent must count what it spends"
                .to_string(),
        );
    }
    only_keys(
        object(&body["stream_options"], "stream_options")?,
        &["include_usage", "include_obfuscation"],
        "stream_options",
    )?;
    for key in ["max_tokens", "max_completion_tokens"] {
        let given = body.get(key).filter(|n| !n.is_null());
        if let Some(n) = given.filter(|n| n.as_u64().is_none_or(|n| n < 1)) {
            return Err(format!("{key}: expected a positive integer, got {n}"));
        }
    }
    if body.contains_key("max_tokens") && body.contains_key("max_completion_tokens") {
        return Err(
            "max_tokens and max_completion_tokens: give one of them, not both (max_tokens is \
             deprecated in favour of max_completion_tokens)"
                .to_string(),
        );
    }
    if let Some(tools) = body.get("tools") {
        check_chat_tools(tools)?;
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("messages: Missing required parameter: 'messages'.")?;
    if messages.is_empty() {
        return Err("messages: [] is too short - 'messages'".to_string());
    }
    check_chat_messages(messages)
}

fn check_chat_tools(tools: &Value) -> Result<(), String> {
    let tools = tools.as_array().ok_or("tools: expected an array")?;
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("tools[{i}]");
        let tool = object(tool, &at)?;
        only_keys(tool, &["type", "function"], &at)?;
        if tool.get("type") != Some(&json!("function")) {
            return Err(format!("{at}.type: expected \"function\""));
        }
        let at = format!("{at}.function");
        let function = object(tool.get("function").unwrap_or(&Value::Null), &at)?;
        only_keys(
            function,
            &["name", "description", "parameters", "strict"],
            &at,
        )?;
        tool_name(function.get("name"), &at)?;
        if let Some(description) = function.get("description") {
            description
                .as_str()
                .ok_or(format!("{at}.description: expected a string"))?;
        }
        let parameters = function.get("parameters").unwrap_or(&Value::Null);
        check_schema_object(parameters, &format!("{at}.parameters"))?;
        if function.get("strict") == Some(&json!(true)) {
            check_strict_schema(parameters, &format!("{at}.parameters"))?;
        }
    }
    Ok(())
}

/// Checks roles and contents, and that every tool call is answered by a tool message before the
/// next message of another role, and no tool message answers nothing.
fn check_chat_messages(messages: &[Value]) -> Result<(), String> {
    // The latest assistant message's tool call ids not answered yet.
    let mut open: Vec<&str> = Vec::new();
    let mut call_ids = HashSet::new();
    for (i, message) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let message = object(message, &at)?;
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "tool" && !open.is_empty() {
            return Err(unanswered_tool_calls(&open));
        }
        let content = message.get("content").filter(|c| !c.is_null());
        match role {
            "system" | "developer" => {
                only_keys(message, &["role", "content", "name"], &at)?;
                check_chat_content(content, &["text"], &format!("{at}.content"))?;
            }
            "user" => {
                only_keys(message, &["role", "content", "name"], &at)?;
                let parts = ["text", "image_url", "input_audio", "file"];
                check_chat_content(content, &parts, &format!("{at}.content"))?;
            }
            "assistant" => {
                only_keys(
                    message,
                    &[
                        "role",
                        "content",
                        "name",
                        "tool_calls",
                        "refusal",
                        "audio",
                        "function_call",
                    ],
                    &at,
                )?;
                let calls = match message.get("tool_calls") {
                    None | Some(Value::Null) => &[][..],
                    Some(Value::Array(calls)) if !calls.is_empty() => calls.as_slice(),
                    Some(_) => {
                        return Err(format!(
                            "{at}.tool_calls: expected a non-empty array ([] is too short)"
                        ));
                    }
                };
                if content.is_some() || calls.is_empty() {
                    check_chat_content(content, &["text", "refusal"], &format!("{at}.content"))
                        .map_err(|e| {
                            format!("{e} (content is required unless tool_calls are given)")
                        })?;
                }
                for (j, call) in calls.iter().enumerate() {
                    let id = check_chat_tool_call(call, &format!("{at}.tool_calls[{j}]"))?;
                    if !call_ids.insert(id) {
                        return Err(format!(
                            "{at}.tool_calls[{j}].id: duplicate tool call id {id}"
                        ));
                    }
                    open.push(id);
                }
            }
            "tool" => {
                only_keys(message, &["role", "content", "tool_call_id"], &at)?;
                let id = non_empty_str(message.get("tool_call_id"), &format!("{at}.tool_call_id"))?;
                check_chat_content(content, &["text"], &format!("{at}.content"))?;
                let Some(k) = open.iter().position(|c| *c == id) else {
                    return Err(format!(
                        "{at}: Invalid parameter: messages with role 'tool' must be a response \
                         to a preceeding message with 'tool_calls' (no open call {id})."
                    ));
                };
                open.remove(k);
            }
            _ => {
                return Err(format!(
                    "{at}.role: Invalid value: {role:?}. Supported values are: 'system', \
                     'developer', 'user', 'assistant' and 'tool'."
                ));
            }
        }
    }
    if !open.is_empty() {
        return Err(unanswered_tool_calls(&open));
    }
    Ok(())
}

fn unanswered_tool_calls(ids: &[&str]) -> String {
    format!(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to \
         each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
        ids.join(", ")
    )
}

/// One tool call of an assistant message; returns its id.
fn check_chat_tool_call<'a>(call: &'a Value, at: &str) -> Result<&'a str, String> {
    let call = object(call, at)?;
    only_keys(call, &["id", "type", "function"], at)?;
    let id = non_empty_str(call.get("id"), &format!("{at}.id"))?;
    if call.get("type") != Some(&json!("function")) {
        return Err(format!("{at}.type: expected \"function\""));
    }
    let at = format!("{at}.function");
    let function = object(call.get("function").unwrap_or(&Value::Null), &at)?;
    only_keys(function, &["name", "arguments"], &at)?;
    non_empty_str(function.get("name"), &format!("{at}.name"))?;
    let arguments = function
        .get("arguments")
        .and_then(Value::as_str)
        .ok_or(format!("{at}.arguments: expected a string holding JSON"))?;
    if serde_json::from_str::<Value>(arguments).is_err() {
        return Err(format!("{at}.arguments: not JSON: {arguments:?}"));
    }
    Ok(id)
}

/// A message's content: a string, or an array of parts whose types are among `parts`.
fn check_chat_content(content: Option<&Value>, parts: &[&str], at: &str) -> Result<(), String> {
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
                if kind == "text" && !part["text"].is_string() {
                    return Err(format!("{at}[{j}].text: expected a string"));
                }
            }
            Ok(())
        }
        _ => Err(format!("{at}: expected a string or an array of parts")),
    }
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

/// Every API: `^[a-zA-Z0-9_-]{1,64}$`.
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

/// DESIGN §12: every request streams, so a person sees the model's progress while it writes.
fn must_stream(body: &Map<String, Value>) -> Result<(), String> {
    if body.get("stream") != Some(&json!(true)) {
        return Err(MUST_STREAM.to_string());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Usage: tokens counted, prompt caches simulated

/// ceil(bytes / [`BYTES_PER_TOKEN`]).
fn tokens(bytes: usize) -> u64 {
    bytes.div_ceil(BYTES_PER_TOKEN) as u64
}

/// The prompt side of one request's usage. `tokens` is the whole prompt; `cache_read` of it came
/// from the cache and `cache_5m` + `cache_1h` were written to it (Anthropic only).
#[derive(Default)]
struct Prompt {
    tokens: u64,
    cache_read: u64,
    cache_5m: u64,
    cache_1h: u64,
}

/// The providers' prompt caches, simulated. OpenAI's two APIs cache automatically: a request
/// reads from the cache the longest byte prefix its body shares with a body served before (no
/// minimum length, no 128-token steps). Anthropic caches only what `cache_control` marks: the
/// prefix up to and including each marked block (tools, then system, then messages, with
/// `cache_control` itself left out so a moved breakpoint does not change the prefix) is written;
/// a later request whose last breakpoint is at or after a remembered prefix reads the longest
/// one, and what lies between that and its own breakpoints is written (no expiry, no minimum
/// length, no 20-block look-back).
#[derive(Default)]
struct Caches {
    /// Bodies served on `/v1/responses`.
    responses: Vec<Vec<u8>>,
    /// Bodies served on `/v1/chat/completions`.
    chat: Vec<Vec<u8>>,
    /// Hashes of the Anthropic prefixes written.
    messages: HashSet<u64>,
}

/// The end of one unit of a Messages request's cacheable prefix.
struct PrefixEnd {
    /// The hash of the prefix up to and including this unit.
    hash: u64,
    /// That prefix's length in bytes, as the fake serialises it.
    bytes: usize,
    /// Whether this unit carries `cache_control`, and for how long (`true`: `1h`).
    mark: Option<bool>,
}

impl Caches {
    /// Measures a request's prompt; `write` records what it puts into the cache (a served
    /// stream does; a streamed error does not).
    fn prompt(&mut self, api: Api, body: &Value, raw: &[u8], write: bool) -> Prompt {
        let total = tokens(raw.len());
        match api {
            Api::OpenAi | Api::Chat => {
                let served = match api {
                    Api::OpenAi => &mut self.responses,
                    _ => &mut self.chat,
                };
                let shared = served
                    .iter()
                    .map(|old| old.iter().zip(raw).take_while(|(a, b)| a == b).count())
                    .max()
                    .unwrap_or(0);
                if write {
                    served.push(raw.to_vec());
                }
                Prompt {
                    tokens: total,
                    cache_read: tokens(shared),
                    ..Prompt::default()
                }
            }
            Api::Anthropic => {
                let ends = prefix_ends(body);
                let Some(last) = ends.iter().rposition(|e| e.mark.is_some()) else {
                    return Prompt {
                        tokens: total,
                        ..Prompt::default()
                    };
                };
                let read_at = (0..=last)
                    .rev()
                    .find(|&k| self.messages.contains(&ends[k].hash));
                let read = read_at.map_or(0, |k| tokens(ends[k].bytes));
                let (mut cache_5m, mut cache_1h, mut before) = (0, 0, read);
                for end in &ends[read_at.map_or(0, |k| k + 1)..=last] {
                    let Some(one_hour) = end.mark else { continue };
                    let written = tokens(end.bytes) - before;
                    before = tokens(end.bytes);
                    if one_hour {
                        cache_1h += written;
                    } else {
                        cache_5m += written;
                    }
                }
                if write {
                    let marked = ends.iter().filter(|e| e.mark.is_some());
                    self.messages.extend(marked.map(|e| e.hash));
                }
                // The fake's serialisation of the prefix is not the body's own bytes: never
                // report more cached tokens than the prompt has.
                let cache_read = read.min(total);
                let cache_5m = cache_5m.min(total - cache_read);
                let cache_1h = cache_1h.min(total - cache_read - cache_5m);
                Prompt {
                    tokens: total,
                    cache_read,
                    cache_5m,
                    cache_1h,
                }
            }
        }
    }
}

/// A Messages request's cacheable prefix, unit by unit: each tool, each system block (a string
/// system is one text block), each message block with its role (a string content is one text
/// block).
fn prefix_ends(body: &Value) -> Vec<PrefixEnd> {
    // Each unit: the role of its message (none for tools and system), and the block.
    let mut units: Vec<(Option<&Value>, Value)> = Vec::new();
    let tools = body["tools"].as_array().into_iter().flatten();
    units.extend(tools.map(|tool| (None, tool.clone())));
    match &body["system"] {
        Value::String(text) => units.push((None, json!({"type": "text", "text": text}))),
        Value::Array(blocks) => units.extend(blocks.iter().map(|b| (None, b.clone()))),
        _ => {}
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let role = Some(&message["role"]);
        match &message["content"] {
            Value::String(text) => units.push((role, json!({"type": "text", "text": text}))),
            Value::Array(blocks) => units.extend(blocks.iter().map(|b| (role, b.clone()))),
            _ => {}
        }
    }
    let mut hasher = DefaultHasher::new();
    let mut bytes = 0;
    let mut ends = Vec::new();
    for (role, mut block) in units {
        let control = block
            .as_object_mut()
            .and_then(|b| b.remove("cache_control"))
            .filter(|c| !c.is_null());
        let text = match role {
            Some(role) => json!({"role": role, "block": block}).to_string(),
            None => block.to_string(),
        };
        hasher.write(text.as_bytes());
        bytes += text.len();
        ends.push(PrefixEnd {
            hash: hasher.finish(),
            bytes,
            mark: control.map(|c| c["ttl"] == "1h"),
        });
    }
    ends
}

/// The bytes of what the model wrote in a whole answer (texts, refusals, tool arguments,
/// thinking and reasoning summaries), and of those the reasoning alone.
fn written_bytes(api: Api, answer: &Value) -> (usize, usize) {
    let len = |v: &Value| v.as_str().map_or(0, str::len);
    let (mut all, mut reasoning) = (0, 0);
    match api {
        Api::OpenAi => {
            for item in answer["output"].as_array().into_iter().flatten() {
                match item["type"].as_str() {
                    Some("message") => {
                        for part in item["content"].as_array().into_iter().flatten() {
                            all += len(&part["text"]) + len(&part["refusal"]);
                        }
                    }
                    Some("function_call") => all += len(&item["arguments"]),
                    Some("reasoning") => {
                        for part in item["summary"].as_array().into_iter().flatten() {
                            reasoning += len(&part["text"]);
                        }
                    }
                    _ => {}
                }
            }
        }
        Api::Anthropic => {
            for block in answer["content"].as_array().into_iter().flatten() {
                match block["type"].as_str() {
                    Some("text") => all += len(&block["text"]),
                    Some("thinking") => reasoning += len(&block["thinking"]),
                    Some("tool_use") => all += block["input"].to_string().len(),
                    _ => {}
                }
            }
        }
        Api::Chat => {
            let message = &answer["choices"][0]["message"];
            all += len(&message["content"]);
            for call in message["tool_calls"].as_array().into_iter().flatten() {
                all += len(&call["function"]["arguments"]);
            }
        }
    }
    (all + reasoning, reasoning)
}

/// The usage object a whole answer reports, in the API's own fields: Responses and Chat count
/// cached tokens inside the prompt's; Anthropic's `input_tokens` exclude what was read from or
/// written to the cache. Anthropic keeps the scripted usage's other fields (`service_tier`, …).
fn usage(api: Api, prompt: &Prompt, answer: &Value) -> Value {
    let (written, reasoning) = written_bytes(api, answer);
    let output = tokens(written).max(1);
    match api {
        Api::OpenAi => json!({
            "input_tokens": prompt.tokens,
            "input_tokens_details": {"cached_tokens": prompt.cache_read},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": tokens(reasoning)},
            "total_tokens": prompt.tokens + output,
        }),
        Api::Anthropic => {
            let mut usage = answer["usage"].as_object().cloned().unwrap_or_default();
            let created = prompt.cache_5m + prompt.cache_1h;
            let fields = json!({
                "input_tokens": prompt.tokens - prompt.cache_read - created,
                "cache_creation_input_tokens": created,
                "cache_read_input_tokens": prompt.cache_read,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": prompt.cache_5m,
                    "ephemeral_1h_input_tokens": prompt.cache_1h,
                },
                "output_tokens": output,
            });
            if let Value::Object(fields) = fields {
                usage.extend(fields);
            }
            Value::Object(usage)
        }
        Api::Chat => json!({
            "prompt_tokens": prompt.tokens,
            "completion_tokens": output,
            "total_tokens": prompt.tokens + output,
            "prompt_tokens_details": {"cached_tokens": prompt.cache_read},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// Streams: a whole answer as the real event sequence

/// The framed events of a whole answer (whose `usage` is the fake's count).
fn stream(api: Api, answer: &Value) -> Vec<String> {
    match api {
        Api::OpenAi => responses_stream(answer),
        Api::Anthropic => messages_stream(answer),
        Api::Chat => chat_stream(answer),
    }
}

/// `text` cut into pieces of at most [`MAX_DELTA_BYTES`], each starting at a word where it can;
/// joined, they give `text` back.
fn pieces(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut previous_space = true;
    for (at, c) in text.char_indices() {
        let word_starts = c.is_whitespace() && !previous_space;
        if at > start && (word_starts || at + c.len_utf8() - start > MAX_DELTA_BYTES) {
            pieces.push(&text[start..at]);
            start = at;
        }
        previous_space = c.is_whitespace();
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

/// The `event:` line is the payload's `type`, as in every Responses recording.
fn responses_event(sequence: usize, mut payload: Value) -> String {
    payload["sequence_number"] = json!(sequence);
    format!(
        "event: {}\ndata: {payload}\n\n",
        payload["type"].as_str().unwrap_or("")
    )
}

/// A random-looking `obfuscation` value that pads `delta` towards [`OBFUSCATION_BYTES`].
fn obfuscation(delta: &str) -> String {
    fresh_id(
        "",
        BASE62,
        OBFUSCATION_BYTES.saturating_sub(delta.len()).max(4),
    )
}

/// The answer as it looks while in progress: no output, no usage yet.
fn responses_skeleton(answer: &Value) -> Value {
    let mut skeleton = answer.clone();
    skeleton["status"] = json!("in_progress");
    skeleton["output"] = json!([]);
    skeleton["usage"] = Value::Null;
    if skeleton.get("completed_at").is_some() {
        skeleton["completed_at"] = Value::Null;
    }
    skeleton
}

/// Responses: `response.created`, `response.in_progress`, then per output item its `added`, its
/// parts and deltas and its `done`, then `response.completed` with the whole answer. As the
/// real API does, a reasoning item's `added` carries another `encrypted_content` than its
/// `done` (only the final one can be passed back).
fn responses_stream(answer: &Value) -> Vec<String> {
    let skeleton = responses_skeleton(answer);
    let mut events = vec![
        json!({"type": "response.created", "response": skeleton}),
        json!({"type": "response.in_progress", "response": skeleton}),
    ];
    for (index, item) in answer["output"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let id = &item["id"];
        let mut added = item.clone();
        if added.get("status").is_some() {
            added["status"] = json!("in_progress");
        }
        match item["type"].as_str() {
            Some("message") => added["content"] = json!([]),
            Some("function_call") => added["arguments"] = json!(""),
            Some("reasoning") => {
                added["summary"] = json!([]);
                if added.get("encrypted_content").is_some() {
                    added["encrypted_content"] = json!(fresh_id("gAAAAAB", BASE64URL, 400));
                }
            }
            _ => {}
        }
        events.push(
            json!({"type": "response.output_item.added", "output_index": index, "item": added}),
        );
        match item["type"].as_str() {
            Some("message") => {
                for (c, part) in item["content"].as_array().into_iter().flatten().enumerate() {
                    let (field, kind) = match part["type"].as_str() {
                        Some("refusal") => ("refusal", "response.refusal"),
                        _ => ("text", "response.output_text"),
                    };
                    let text = part[field].as_str().unwrap_or("");
                    let mut empty = part.clone();
                    empty[field] = json!("");
                    let at = json!({"item_id": id, "output_index": index, "content_index": c});
                    let with = |fields: Value| merged(&at, fields);
                    events.push(with(
                        json!({"type": "response.content_part.added", "part": empty}),
                    ));
                    for piece in pieces(text) {
                        events.push(with(json!({
                            "type": format!("{kind}.delta"),
                            "delta": piece,
                            "logprobs": [],
                            "obfuscation": obfuscation(piece),
                        })));
                    }
                    events.push(with(
                        json!({"type": format!("{kind}.done"), field: text, "logprobs": []}),
                    ));
                    events.push(with(
                        json!({"type": "response.content_part.done", "part": part}),
                    ));
                }
            }
            Some("function_call") => {
                let arguments = item["arguments"].as_str().unwrap_or("");
                let at = json!({"item_id": id, "output_index": index});
                for piece in pieces(arguments) {
                    events.push(merged(
                        &at,
                        json!({
                            "type": "response.function_call_arguments.delta",
                            "delta": piece,
                            "obfuscation": obfuscation(piece),
                        }),
                    ));
                }
                events.push(merged(
                    &at,
                    json!({
                        "type": "response.function_call_arguments.done",
                        "arguments": arguments,
                    }),
                ));
            }
            Some("reasoning") => {
                for (s, part) in item["summary"].as_array().into_iter().flatten().enumerate() {
                    let text = part["text"].as_str().unwrap_or("");
                    let at = json!({"item_id": id, "output_index": index, "summary_index": s});
                    let empty = json!({"type": "summary_text", "text": ""});
                    events.push(merged(
                        &at,
                        json!({"type": "response.reasoning_summary_part.added", "part": empty}),
                    ));
                    for piece in pieces(text) {
                        events.push(merged(
                            &at,
                            json!({
                                "type": "response.reasoning_summary_text.delta",
                                "delta": piece,
                                "obfuscation": obfuscation(piece),
                            }),
                        ));
                    }
                    events.push(merged(
                        &at,
                        json!({"type": "response.reasoning_summary_text.done", "text": text}),
                    ));
                    events.push(merged(
                        &at,
                        json!({"type": "response.reasoning_summary_part.done", "part": part}),
                    ));
                }
            }
            _ => {}
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
    }
    events.push(json!({"type": "response.completed", "response": answer}));
    let mut framed: Vec<String> = events
        .into_iter()
        .enumerate()
        .map(|(sequence, payload)| responses_event(sequence, payload))
        .collect();
    framed.insert(2, KEEP_ALIVE.to_string());
    framed
}

/// `base`'s fields and `fields`' together.
fn merged(base: &Value, fields: Value) -> Value {
    let mut all = base.clone();
    for (key, value) in fields.as_object().into_iter().flatten() {
        all[key] = value.clone();
    }
    all
}

/// One Anthropic event, its data line padded before the closing brace as the recordings are.
fn messages_event(payload: &Value) -> String {
    // Steps through the paddings so they vary from line to line, as in the recordings.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let data = payload.to_string();
    let padding = (NEXT.fetch_add(7, Ordering::Relaxed) as usize) % (MAX_PADDING + 1);
    let (json, brace) = data.split_at(data.len() - 1);
    let kind = payload["type"].as_str().unwrap_or("");
    format!(
        "event: {kind}\ndata: {json}{}{brace}\n\n",
        " ".repeat(padding)
    )
}

/// Messages: `message_start` (usage with the prompt's counts and `output_tokens: 1`), a `ping`
/// after the first block starts, per block its start, deltas and stop, `message_delta` (stop
/// reason, final usage) and `message_stop`, which ends the body with no newline after it (as
/// the tool-use recording does).
fn messages_stream(answer: &Value) -> Vec<String> {
    let usage = &answer["usage"];
    let mut start = answer.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["stop_sequence"] = Value::Null;
    start["usage"]["output_tokens"] = json!(1);
    let ping = "event: ping\ndata: {\"type\": \"ping\"}\n\n".to_string();
    let mut events = vec![messages_event(
        &json!({"type": "message_start", "message": start}),
    )];
    let blocks = answer["content"].as_array().map_or(&[][..], Vec::as_slice);
    if blocks.is_empty() {
        events.push(ping.clone());
    }
    for (index, block) in blocks.iter().enumerate() {
        let started = match block["type"].as_str() {
            Some("text") => json!({"type": "text", "text": ""}),
            Some("thinking") => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Some("tool_use") => merged(block, json!({"input": {}})),
            _ => block.clone(),
        };
        events.push(messages_event(
            &json!({"type": "content_block_start", "index": index, "content_block": started}),
        ));
        if index == 0 {
            events.push(ping.clone());
        }
        let delta = |delta: Value| {
            messages_event(&json!({"type": "content_block_delta", "index": index, "delta": delta}))
        };
        match block["type"].as_str() {
            Some("text") => {
                for piece in pieces(block["text"].as_str().unwrap_or("")) {
                    events.push(delta(json!({"type": "text_delta", "text": piece})));
                }
            }
            Some("thinking") => {
                for piece in pieces(block["thinking"].as_str().unwrap_or("")) {
                    events.push(delta(json!({"type": "thinking_delta", "thinking": piece})));
                }
                let signature = &block["signature"];
                events.push(delta(
                    json!({"type": "signature_delta", "signature": signature}),
                ));
            }
            Some("tool_use") => {
                let input = block["input"].to_string();
                events.push(delta(
                    json!({"type": "input_json_delta", "partial_json": ""}),
                ));
                for piece in pieces(&input) {
                    events.push(delta(
                        json!({"type": "input_json_delta", "partial_json": piece}),
                    ));
                }
            }
            _ => {}
        }
        events.push(messages_event(
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    let final_usage = json!({
        "input_tokens": usage["input_tokens"],
        "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
        "cache_read_input_tokens": usage["cache_read_input_tokens"],
        "output_tokens": usage["output_tokens"],
    });
    events.push(messages_event(&json!({
        "type": "message_delta",
        "delta": {"stop_reason": answer["stop_reason"], "stop_sequence": answer["stop_sequence"]},
        "usage": final_usage,
    })));
    let stop = messages_event(&json!({"type": "message_stop"}));
    events.push(stop.trim_end_matches('\n').to_string());
    events
}

/// Chat: a first chunk with the role (and the first tool call when there is no text), content
/// deltas, tool call deltas (id and name in a call's first fragment only), a chunk with
/// `finish_reason`, a `choices: []` chunk with the usage, then `data: [DONE]`.
fn chat_stream(answer: &Value) -> Vec<String> {
    let base = json!({
        "id": answer["id"],
        "object": "chat.completion.chunk",
        "created": answer["created"],
        "model": answer["model"],
        "system_fingerprint": answer["system_fingerprint"],
    });
    let chunk = |delta: Value, finish: Value| {
        let choice = json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish});
        let chunk = merged(&base, json!({"choices": [choice]}));
        format!("data: {chunk}\n\n")
    };
    let choice = &answer["choices"][0];
    let text = choice["message"]["content"].as_str().unwrap_or("");
    let calls = choice["message"]["tool_calls"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let first_fragment = |i: usize| {
        let call = &calls[i];
        json!({"index": i, "id": call["id"], "type": "function",
               "function": {"name": call["function"]["name"], "arguments": ""}})
    };
    let mut events = Vec::new();
    let opened_with_call = text.is_empty() && !calls.is_empty();
    if opened_with_call {
        let delta = json!({"role": "assistant", "content": null,
                           "tool_calls": [first_fragment(0)], "refusal": null});
        events.push(chunk(delta, Value::Null));
    } else {
        let delta = json!({"role": "assistant", "content": "", "refusal": null});
        events.push(chunk(delta, Value::Null));
    }
    events.push(KEEP_ALIVE.to_string());
    for piece in pieces(text) {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (i, call) in calls.iter().enumerate() {
        if i > 0 || !opened_with_call {
            events.push(chunk(
                json!({"tool_calls": [first_fragment(i)]}),
                Value::Null,
            ));
        }
        for piece in pieces(call["function"]["arguments"].as_str().unwrap_or("")) {
            let fragment = json!({"index": i, "function": {"arguments": piece}});
            events.push(chunk(json!({"tool_calls": [fragment]}), Value::Null));
        }
    }
    events.push(chunk(json!({}), choice["finish_reason"].clone()));
    let last = merged(&base, json!({"choices": [], "usage": answer["usage"]}));
    events.push(format!("data: {last}\n\n"));
    events.push("data: [DONE]\n\n".to_string());
    events
}

/// A 200 stream that fails with `error` (the API's error body): Responses `response.created`,
/// `response.in_progress`, `error` (fields nested under `error`, as recorded) and
/// `response.failed`; Anthropic `message_start`, `ping` and `event: error` with the body as its
/// data; Chat its first chunk, then `data:` the body, and no `[DONE]`.
fn stream_error(api: Api, prompt: &Prompt, error: &Value) -> Vec<String> {
    match api {
        Api::OpenAi => {
            let skeleton = responses_skeleton(&openai::reply(vec![]));
            let inner = &error["error"];
            let code = match &inner["code"] {
                Value::Null => inner["type"].clone(),
                code => code.clone(),
            };
            let mut failed = skeleton.clone();
            failed["status"] = json!("failed");
            failed["error"] = json!({"code": code, "message": inner["message"]});
            let events = [
                json!({"type": "response.created", "response": skeleton}),
                json!({"type": "response.in_progress", "response": skeleton}),
                json!({"type": "error", "error": {
                    "type": inner["type"], "code": code, "message": inner["message"], "param": inner["param"],
                }}),
                json!({"type": "response.failed", "response": failed}),
            ];
            let mut framed: Vec<String> = events
                .into_iter()
                .enumerate()
                .map(|(sequence, payload)| responses_event(sequence, payload))
                .collect();
            framed.insert(2, KEEP_ALIVE.to_string());
            framed
        }
        Api::Anthropic => {
            let mut empty = anthropic::reply(vec![]);
            empty["usage"] = usage(api, prompt, &empty);
            let mut events = messages_stream(&empty);
            // `message_start` and its `ping`, then the error instead of the rest.
            events.truncate(2);
            events.push(format!("event: error\ndata: {error}\n\n"));
            events
        }
        Api::Chat => {
            let mut events = chat_stream(&chat::text_reply(""));
            events.truncate(2);
            events.push(format!("data: {error}\n\n"));
            events
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reply builders

/// Replies in the Responses API's exact shape (keys as in the recorded fixtures).
pub mod openai {
    use super::*;

    /// A completed response whose `output` is `items` (from [`message`], [`function_call`],
    /// [`reasoning`]). Its `usage` numbers are placeholders: the fake reports its own count.
    pub fn reply(items: Vec<Value>) -> Value {
        let now = now();
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
                "input_tokens": 0,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 0,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 0,
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
    /// `stop_reason` is `tool_use` when a block is one, else `end_turn`. Its `usage` numbers are
    /// placeholders: the fake reports its own count.
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
                "input_tokens": 0,
                "output_tokens": 0,
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

/// Replies in the Chat Completions API's exact shape (keys as in the recorded fixtures).
pub mod chat {
    use super::*;

    /// A whole `chat.completion` whose one choice is `message` (from [`message`]);
    /// `finish_reason` is `tool_calls` when it has any, else `stop`. Its `usage` numbers are
    /// placeholders: the fake reports its own count.
    pub fn reply(message: Value) -> Value {
        let calls = message["tool_calls"]
            .as_array()
            .is_some_and(|c| !c.is_empty());
        let finish_reason = if calls { "tool_calls" } else { "stop" };
        json!({
            "id": fresh_id("chatcmpl-", BASE62, 29),
            "object": "chat.completion",
            "created": now(),
            "model": "gpt-4o-2024-08-06",
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
            "usage": {
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "total_tokens": 0,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
            "system_fingerprint": fresh_id("fp_", HEX, 10),
        })
    }

    /// A reply that is one text message: the end of a turn.
    pub fn text_reply(text: &str) -> Value {
        reply(message(Some(text), vec![]))
    }

    /// An assistant message: `content` (null without text, as the API sends it beside tool
    /// calls) and `tool_calls` (from [`tool_call`]; the field is left out when there are none).
    pub fn message(content: Option<&str>, tool_calls: Vec<Value>) -> Value {
        let mut message = json!({"role": "assistant", "content": content, "refusal": null});
        if !tool_calls.is_empty() {
            message["tool_calls"] = json!(tool_calls);
        }
        message
    }

    /// One tool call; `arguments` is sent as a string holding its JSON.
    pub fn tool_call(name: &str, arguments: Value) -> Value {
        json!({
            "id": fresh_id("call_", BASE62, 24),
            "type": "function",
            "function": {"name": name, "arguments": arguments.to_string()},
        })
    }

    /// An error body: the same shape as [`openai::error`].
    pub fn error(kind: &str, message: &str) -> Value {
        openai::error(kind, message)
    }
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
                let _ = write_response(&mut writer, 400, &[], &body, false);
                return;
            }
            Err(_) => return,
        };
        let answer = shared.answer(&request);
        let mut headers = vec![answer.api.request_id_header()];
        headers.extend(answer.headers);
        let keep_alive = request.keep_alive;
        let (written, broken) = match &answer.body {
            Body::Json(body) => (
                write_response(&mut writer, answer.status, &headers, body, keep_alive),
                false,
            ),
            Body::Events {
                events,
                broken,
                delay,
            } => (
                write_events(&mut writer, &headers, events, *broken, *delay, keep_alive),
                *broken,
            ),
        };
        // A broken stream ends by closing the connection: the chunked body never ends.
        if written.is_err() || broken || !keep_alive {
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

/// The status line and headers; `length` `None` means a chunked body.
fn head(
    status: u16,
    content_type: &str,
    length: Option<usize>,
    headers: &[(String, String)],
    keep_alive: bool,
) -> String {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    };
    let mut head = format!("HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n");
    match length {
        Some(length) => head.push_str(&format!("content-length: {length}\r\n")),
        None => head.push_str("transfer-encoding: chunked\r\n"),
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !keep_alive {
        head.push_str("connection: close\r\n");
    }
    head.push_str("\r\n");
    head
}

fn write_response(
    writer: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &Value,
    keep_alive: bool,
) -> io::Result<()> {
    let body = body.to_string();
    let head = head(
        status,
        "application/json",
        Some(body.len()),
        headers,
        keep_alive,
    );
    writer.write_all(head.as_bytes())?;
    writer.write_all(body.as_bytes())?;
    writer.flush()
}

/// A 200 `text/event-stream`, one chunk per event, flushed as it goes so the client sees each
/// event when it is sent; `delay` passes between two events. A `broken` stream stops without
/// the last chunk, so the client can tell it was cut.
fn write_events(
    writer: &mut TcpStream,
    headers: &[(String, String)],
    events: &[String],
    broken: bool,
    delay: Duration,
    keep_alive: bool,
) -> io::Result<()> {
    let content_type = "text/event-stream; charset=utf-8";
    let mut headers = headers.to_vec();
    headers.push(("cache-control".to_string(), "no-cache".to_string()));
    writer.write_all(head(200, content_type, None, &headers, keep_alive).as_bytes())?;
    writer.flush()?;
    for (i, event) in events.iter().enumerate() {
        if i > 0 && !delay.is_zero() {
            std::thread::sleep(delay);
        }
        // Every event holds at least its `data:` line, so no chunk is the empty last one.
        write!(writer, "{:x}\r\n{event}\r\n", event.len())?;
        writer.flush()?;
    }
    if !broken {
        writer.write_all(b"0\r\n\r\n")?;
    }
    writer.flush()
}
