//! The fake model provider of the agent's tests: a local HTTP/1.1 server speaking OpenAI
//! Responses, Anthropic Messages and OpenAI Chat Completions, always as server-sent events.
//! Boundary: scripted whole answers and failures in; recorded requests, their counted usage (see
//! `usage`) and violations out. Each request is checked as strictly as the real service would
//! (and must stream, DESIGN §12); a bad one gets the real 400/401 AND is a violation, so
//! `assert_clean` fails even if the agent swallowed the error. Invariant: a request rejected, or
//! refused for the context window, never consumes a scripted reply.
//!
//! A dev-dependency of the host's tests and nothing else: it knows no Sausage type. Code map:
//! `server` reads HTTP and writes answers; `script` judges one request and takes its reply;
//! `checks` holds the rules the three APIs share; `openai`, `anthropic` and `chat` each hold one
//! API's reply builders (public), request checks and event stream; `stream` what the streams
//! share; `usage` the token counts and prompt caches; `ids` the fresh ids.

pub mod anthropic;
pub mod chat;
mod checks;
mod ids;
pub mod openai;
mod script;
mod server;
mod stream;
mod usage;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

use ids::{BASE62, HEX, fresh_id};
use script::{Reply, Shared};

/// The token [`FakeLlm::start`] expects: `authorization: Bearer TOKEN` (OpenAI's two APIs) or
/// `x-api-key: TOKEN` (Anthropic).
pub const TOKEN: &str = "sk-fake-test-token";

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
        let accepting = server::spawn(listener, shared.clone());
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

    /// [`FakeLlm::push_openai`] for a request whose body holds every one of `texts` only
    /// (such as a sub-agent's role and brief): requests that run at once each get their own
    /// reply, whatever order they come in. Such a reply is taken before the unmarked ones.
    pub fn push_openai_for(&self, texts: &[&str], body: Value) {
        let reply = Reply::Stream {
            api: Api::OpenAi,
            body,
            broken: false,
        };
        let only_for = Some(texts.iter().map(|t| t.to_string()).collect());
        let scripted = script::Scripted { reply, only_for };
        self.shared.state.lock().unwrap().script.push_back(scripted);
    }

    fn push(&self, reply: Reply) {
        let scripted = script::Scripted {
            reply,
            only_for: None,
        };
        self.shared.state.lock().unwrap().script.push_back(scripted);
    }

    /// How many answers are streaming now (a dropped request ends its stream at the next event
    /// the fake writes).
    pub fn streams_now(&self) -> i64 {
        self.shared.state.lock().unwrap().streaming.0
    }

    /// The most answers that streamed at once so far: 2 or more when requests overlapped.
    pub fn most_streams_at_once(&self) -> i64 {
        self.shared.state.lock().unwrap().streaming.1
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
