//! The script and the judge: the queue of replies a test pushed, what earlier replies carried
//! (to check what comes back), and the decision for one request: reject it, refuse it for the
//! context window, or take the next reply and turn it into an answer for the wire. Knows no
//! socket (`server` does) and no API's rules (`checks` and the API modules do).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::{Value, json};

use crate::anthropic::check_anthropic;
use crate::chat::check_chat;
use crate::checks::{check_auth, check_headers};
use crate::openai::check_openai;
use crate::server::HttpRequest;
use crate::stream::{stream, stream_error};
use crate::usage::{Caches, tokens, usage};
use crate::{Api, Recorded, anthropic};

pub(crate) enum Reply {
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

pub(crate) struct Shared {
    pub(crate) token: String,
    /// Set by `Drop`; the accept loop ends at the next connection it sees.
    pub(crate) stopping: AtomicBool,
    /// Locked by connection threads for one request's check and by the test's calls, never while
    /// a stream is written. A check that panicked (a bug in this fake) poisons it, and the test's
    /// next call fails loudly.
    pub(crate) state: Mutex<State>,
}

/// A reply the test pushed; one pushed `for` texts goes only to a request whose body holds
/// them all (a sub-agent's, told apart by its brief), the others in order to any.
pub(crate) struct Scripted {
    pub(crate) reply: Reply,
    pub(crate) only_for: Option<Vec<String>>,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) script: VecDeque<Scripted>,
    pub(crate) requests: Vec<Recorded>,
    pub(crate) violations: Vec<String>,
    sent: Sent,
    caches: Caches,
    /// The pause between two events of a stream.
    pub(crate) event_delay: Duration,
    /// The model's context window in tokens, when the test set one.
    pub(crate) context_window: Option<u64>,
    /// Streams being written now, and the most there were at once.
    pub(crate) streaming: (i64, i64),
}

/// What the fake's served replies carried that the provider would later verify when passed back.
#[derive(Default)]
pub(crate) struct Sent {
    /// OpenAI reasoning items: (id, encrypted_content).
    pub(crate) reasoning: Vec<(String, String)>,
    /// Anthropic thinking blocks: (thinking, signature).
    pub(crate) thinking: Vec<(String, String)>,
    /// Anthropic redacted_thinking blocks' `data`.
    pub(crate) redacted: Vec<String>,
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

/// What the fake answers one request with.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) api: Api,
    pub(crate) body: Body,
    /// Headers the script asked for (`retry-after`, …), beside the request id.
    pub(crate) headers: Vec<(String, String)>,
    /// The rule the request broke, recorded as a violation.
    violation: Option<String>,
    /// What a complete stream reports, for [`Recorded::usage`].
    usage: Option<Value>,
}

pub(crate) enum Body {
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
    /// A stream began (`1`) or ended (`-1`).
    pub(crate) fn streaming(&self, change: i64) {
        let mut state = self.state.lock().unwrap();
        let (now, most) = &mut state.streaming;
        *now += change;
        *most = (*most).max(*now);
    }

    pub(crate) fn answer(&self, request: &HttpRequest) -> Answer {
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
        let raw = String::from_utf8_lossy(&request.body);
        let next = (self.script.iter())
            .position(|s| {
                (s.only_for.as_ref())
                    .is_some_and(|texts| texts.iter().all(|t| raw.contains(t.as_str())))
            })
            .or_else(|| self.script.iter().position(|s| s.only_for.is_none()));
        let wrong_api = match next.map(|at| &self.script[at].reply) {
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
        // The reply was just found above.
        let reply = self
            .script
            .remove(next.expect("found"))
            .expect("found")
            .reply;
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
