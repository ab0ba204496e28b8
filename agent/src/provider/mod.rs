//! Model providers: turning the neutral history into one API's streaming HTTP request, and that
//! API's event stream back into neutral entries with their usage. Pure functions only: the HTTP
//! call itself is the host's, which hands the answer's bytes to a [`Stream`] as they arrive.
//! Each API lives in its own file and is the only place that knows its JSON shape; `sse` is the
//! one parser of server-sent events they share.
//! **Invariant:** an opaque item is only ever sent to the API that made it, unchanged.

mod anthropic;
mod chat;
mod openai;
pub mod sse;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Config;
use crate::history::Entry;
use crate::message::{Api, HttpRequest, shorten};
use crate::tools::ToolSpec;

/// The most characters of a provider's error body a person is shown.
const ERROR_DETAIL_CHARS: usize = 400;

/// Tokens one response (or a turn, summed) used, as every API reports them, in one meaning:
/// `input_tokens` were read fresh (neither from nor into the cache), `cache_read_tokens` came from
/// the provider's prompt cache, `cache_write_tokens` were written to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }

    /// Every token of the prompt, cached or not: what the context window holds.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
    }
}

/// What one model step produced, in the neutral format.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reply {
    pub entries: Vec<Entry>,
    /// Why the model stopped, when the API says it stopped early (such as `max_tokens`).
    pub cut_short: Option<String>,
    pub usage: Usage,
}

/// Why a request failed, and so what the turn does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Worth another try: a 429, a 5xx, an `overloaded` error, a stream that broke or ended
    /// early. `after` is the wait the provider asked for (`retry-after`), if it said.
    Retry {
        why: String,
        after: Option<Duration>,
    },
    /// The request was longer than the model's context window: compact, then try once more.
    ContextTooLong(String),
    /// Anything else: the turn ends with these words for a person.
    Fatal(String),
    /// A stop for the turn came during the request, which was dropped unanswered.
    Dropped,
}

impl Failure {
    /// The words a person reads when the turn ends on this failure.
    pub fn words(&self) -> &str {
        match self {
            Failure::Retry { why, .. } => why,
            Failure::ContextTooLong(why) | Failure::Fatal(why) => why,
            Failure::Dropped => "the request was dropped: a stop for the turn came",
        }
    }
}

impl Reply {
    pub fn has_tool_calls(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e, Entry::ToolCall { .. }))
    }

    /// The model's text, every part joined by blank lines.
    pub fn text(&self) -> String {
        let parts: Vec<&str> = self
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::Assistant { text, .. } if !text.trim().is_empty() => Some(text.as_str()),
                _ => None,
            })
            .collect();
        parts.join("\n\n")
    }
}

/// Builds the streaming request for the configured API. An empty `tools` offers none (the
/// compaction request, which only asks for a summary).
pub fn request(
    config: &Config,
    system: &str,
    history: &[Entry],
    tools: &[ToolSpec],
) -> HttpRequest {
    match config.api {
        Api::OpenaiResponses => openai::request(config, system, history, tools),
        Api::AnthropicMessages => anthropic::request(config, system, history, tools),
        Api::OpenaiChat => chat::request(config, system, history, tools),
    }
}

/// One streamed answer being read: the bytes of a 2xx body go in as they arrive, the text the
/// model writes comes out on the way (for a person watching), and [`Stream::finish`] gives the
/// whole step once the body ended.
pub struct Stream {
    events: sse::Parser,
    api: ApiStream,
    /// The body's first bytes while no event has come, to show what came instead if none ever
    /// does (a server that ignored `stream: true`, or an error sent with a 2xx status).
    head: Vec<u8>,
    seen_event: bool,
    /// The failure the stream ended in; once set, it is the answer to every later call.
    failed: Option<Failure>,
}

/// Each API's own reading of its events, in its file.
enum ApiStream {
    Responses(openai::Stream),
    Anthropic(anthropic::Stream),
    Chat(chat::Stream),
}

impl Stream {
    pub fn new(api: Api) -> Stream {
        Stream {
            events: sse::Parser::default(),
            api: match api {
                Api::OpenaiResponses => ApiStream::Responses(openai::Stream::default()),
                Api::AnthropicMessages => ApiStream::Anthropic(anthropic::Stream::default()),
                Api::OpenaiChat => ApiStream::Chat(chat::Stream::default()),
            },
            head: Vec::new(),
            seen_event: false,
            failed: None,
        }
    }

    /// Reads the next bytes of the body, split anywhere, and returns the text the model wrote
    /// in them: its answer, never its reasoning; often empty (`feed(&[])` is fine too). An
    /// error the provider reported inside the stream comes back classified, as from
    /// [`failure`]; after a failure, every call returns it again.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<String, Failure> {
        if let Some(failure) = &self.failed {
            return Err(failure.clone());
        }
        let read = self.read(bytes);
        if let Err(failure) = &read {
            self.failed = Some(failure.clone());
        }
        read
    }

    fn read(&mut self, bytes: &[u8]) -> Result<String, Failure> {
        if !self.seen_event {
            let room = NOT_A_STREAM_BYTES.saturating_sub(self.head.len());
            self.head.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
        let mut text = String::new();
        for event in self.events.feed(bytes).map_err(unreadable)? {
            text.push_str(&self.event(&event)?);
        }
        Ok(text)
    }

    fn event(&mut self, event: &sse::Event) -> Result<String, Failure> {
        if !self.seen_event {
            self.seen_event = true;
            self.head = Vec::new();
        }
        match &mut self.api {
            ApiStream::Responses(stream) => stream.event(&event.data),
            ApiStream::Anthropic(stream) => stream.event(&event.data),
            ApiStream::Chat(stream) => stream.event(event),
        }
    }

    /// The whole step, once the body ended. A stream that ended before the API's final event
    /// is a [`Failure::Retry`]: the connection broke, not the request.
    pub fn finish(mut self) -> Result<Reply, Failure> {
        if let Some(failure) = self.failed {
            return Err(failure);
        }
        if let Some(event) = self.events.finish().map_err(unreadable)? {
            // An event without its blank line is whole if its data is (the last one may lack
            // it); one cut off in the middle is a sign that the connection broke.
            let whole = serde_json::from_str::<serde::de::IgnoredAny>(&event.data).is_ok()
                || event.data.trim() == "[DONE]";
            if !whole {
                return Err(ended_early());
            }
            // Its text, if any, is in the reply.
            self.event(&event)?;
        }
        if !self.seen_event && !sse::looks_like_events(&self.head) {
            return Err(not_a_stream(&self.head));
        }
        match self.api {
            ApiStream::Responses(stream) => stream.finish(),
            ApiStream::Anthropic(stream) => stream.finish(),
            ApiStream::Chat(stream) => stream.finish(),
        }
    }
}

/// The most bytes of a 2xx body kept while no event has come: enough for any error body, so a
/// person can be shown what came instead of a stream.
const NOT_A_STREAM_BYTES: usize = 64 << 10;

/// Words in an error's message that say the request did not fit the model's context window
/// (OpenAI, Anthropic's "prompt is too long", vLLM's "maximum context length", llama.cpp's
/// "exceeds the available context size"), compared in lowercase.
const CONTEXT_WORDS: [&str; 6] = [
    "prompt is too long",
    // Anthropic, when the prompt fits but not with max_tokens: "input length and `max_tokens`
    // exceed context limit: 190000 + 16000 > 200000, decrease input length or `max_tokens`".
    "context limit",
    "context length",
    "context window",
    "context size",
    "context_length_exceeded",
];

/// Error types and codes that say a later try may work, whatever the status.
const TRANSIENT_KINDS: [&str; 5] = [
    "overloaded_error",
    "rate_limit_error",
    "rate_limit_exceeded",
    "server_error",
    "api_error",
];

/// Classifies a non-2xx answer (status, headers with lowercased names, whole body) as what the
/// turn does next, with words for a person: "The model provider answered {status}: {message}"
/// and a hint when the fix is known. See [`classify`] for the table.
pub fn failure(status: u16, headers: &[(String, String)], body: &[u8]) -> Failure {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim())
    };
    let report = serde_json::from_slice::<Value>(body)
        .map(|value| Report::of(&value))
        .unwrap_or_default();
    let text = String::from_utf8_lossy(body);
    let detail = match report.message.as_str() {
        "" => text.trim(),
        message => message,
    };
    let words = format!(
        "The model provider answered {status}: {}{}",
        shorten(detail, ERROR_DETAIL_CHARS),
        hint(Some(status), &report)
    );
    let should_retry = match header("x-should-retry") {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    };
    let seconds = |text: &str| {
        text.parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
    };
    // An HTTP date in `retry-after` does not parse as seconds and is ignored.
    let after = header("retry-after-ms")
        .and_then(|ms| ms.parse::<f64>().ok())
        .and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok())
        .or_else(|| header("retry-after").and_then(seconds));
    classify(Some(status), &report, detail, should_retry, after, words)
}

/// An error the provider reported inside a 2xx stream, in any API's shape (see [`Report`]).
fn stream_error(value: &Value) -> Failure {
    let report = Report::of(value);
    let raw = value.to_string();
    let detail = match report.message.as_str() {
        "" => raw.as_str(),
        message => message,
    };
    // Some servers put the HTTP status they meant in the error's `code`.
    let status = report.status;
    let lead = match status {
        Some(status) => format!("The model provider answered {status}"),
        None => "The model provider reported an error".to_string(),
    };
    let words = format!(
        "{lead}: {}{}",
        shorten(detail, ERROR_DETAIL_CHARS),
        hint(status, &report)
    );
    classify(status, &report, detail, None, None, words)
}

/// What a provider's error says. The shapes: `{"error": {"message", "type", "code"}}` (OpenAI,
/// Chat servers, Anthropic's `{"type": "error", "error": {...}}`), the same fields at the top
/// (the Responses stream's `error` event as its spec has it, vLLM), and Ollama's
/// `{"error": "message"}`.
#[derive(Debug, Default)]
struct Report {
    message: String,
    /// `type`, such as `rate_limit_error` or `exceed_context_size_error`.
    kind: String,
    /// `code`, such as `context_length_exceeded`, as text even when it is a number.
    code: String,
    /// A numeric `code` that is an HTTP status.
    status: Option<u16>,
}

impl Report {
    fn of(value: &Value) -> Report {
        let error = match &value["error"] {
            error @ Value::Object(_) => error,
            _ => value,
        };
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => String::new(),
        };
        Report {
            message: (error["message"].as_str())
                .or(value["error"].as_str())
                .unwrap_or_default()
                .to_string(),
            kind: text(&error["type"]),
            code: text(&error["code"]),
            status: (error["code"].as_u64())
                .and_then(|code| u16::try_from(code).ok())
                .filter(|code| (100..600).contains(code)),
        }
    }

    fn is(&self, names: &[&str]) -> bool {
        names.contains(&self.kind.as_str()) || names.contains(&self.code.as_str())
    }
}

/// The decision, first row that matches:
///
/// | the error                                                           | outcome          |
/// |---------------------------------------------------------------------|------------------|
/// | `x-should-retry: true`                                              | `Retry`          |
/// | code `insufficient_quota` without a 429 (an error inside a stream)  | `Fatal`          |
/// | 408, 429, 5xx (529 too), or a type in [`TRANSIENT_KINDS`], unless `x-should-retry: false` | `Retry` |
/// | 413, code `context_length_exceeded`, type `request_too_large` or `exceed_context_size_error`, or [`CONTEXT_WORDS`] in the message | `ContextTooLong` |
/// | anything else                                                       | `Fatal`          |
fn classify(
    status: Option<u16>,
    report: &Report,
    detail: &str,
    should_retry: Option<bool>,
    after: Option<Duration>,
    words: String,
) -> Failure {
    let transient = matches!(status, Some(408 | 429 | 500..)) || report.is(&TRANSIENT_KINDS);
    let detail = detail.to_lowercase();
    if should_retry == Some(true)
        // Every 429 is tried again (DESIGN §12), even one that names the quota: a plan's limit
        // may lift within the retries, and the person is told what is waited for.
        || (transient
            && should_retry.is_none()
            && (status == Some(429) || !report.is(&["insufficient_quota"])))
    {
        // The hint ("ask again in a while") is for a person whose turn ended; the turn says
        // itself that it waits and tries again.
        let why = words.strip_suffix(hint(status, report)).unwrap_or(&words);
        Failure::Retry {
            why: why.to_string(),
            after,
        }
    } else if status == Some(413)
        || report.is(&[
            "context_length_exceeded",
            "request_too_large",
            "exceed_context_size_error",
        ])
        || CONTEXT_WORDS.iter().any(|w| detail.contains(w))
    {
        Failure::ContextTooLong(words)
    } else {
        Failure::Fatal(words)
    }
}

/// What a person can do about an error, when that is known.
fn hint(status: Option<u16>, report: &Report) -> &'static str {
    const TOKEN: &str = " Check the token: the host keeps it (the person who runs Sausage \
                         replaces it with `sausage model set --new-token`).";
    const NOT_FOUND: &str = " Check base_url and model in /data/config.json (`sausage model \
                             test` says which is wrong).";
    const QUOTA: &str = " Wait a little and ask again, or check the account's plan and quota.";
    const TROUBLE: &str = " The provider may be having trouble; ask again in a while.";
    match status {
        Some(401 | 403) => TOKEN,
        Some(404) => NOT_FOUND,
        Some(429) => QUOTA,
        Some(500..) => TROUBLE,
        _ if report.is(&[
            "authentication_error",
            "permission_error",
            "invalid_api_key",
        ]) =>
        {
            TOKEN
        }
        _ if report.is(&["not_found_error", "model_not_found"]) => NOT_FOUND,
        _ if report.is(&[
            "rate_limit_error",
            "rate_limit_exceeded",
            "insufficient_quota",
        ]) =>
        {
            QUOTA
        }
        _ if report.is(&["overloaded_error", "server_error", "api_error"]) => TROUBLE,
        _ => "",
    }
}

/// A 2xx body in which no event came: an error the provider sent with a 2xx status, or an
/// answer that is not a stream at all.
fn not_a_stream(head: &[u8]) -> Failure {
    if let Ok(value) = serde_json::from_slice::<Value>(head)
        && (value.get("error").is_some() || value["type"] == "error" || value["object"] == "error")
    {
        return stream_error(&value);
    }
    Failure::Fatal(format!(
        "The model provider's answer was not a stream of events: {}. Check api and base_url in \
         /data/config.json.",
        shorten(String::from_utf8_lossy(head).trim(), ERROR_DETAIL_CHARS)
    ))
}

/// A 2xx stream that ended before its API's final event: the connection broke, so the same
/// request may well work again.
fn ended_early() -> Failure {
    Failure::Retry {
        why: "the model provider's stream ended early, before the answer was complete".into(),
        after: None,
    }
}

/// A stream whose lines or events could not be read.
fn unreadable(why: String) -> Failure {
    Failure::Fatal(format!(
        "The model provider's stream could not be read: {why}"
    ))
}

/// An event's data as JSON.
fn json(data: &str) -> Result<Value, Failure> {
    serde_json::from_str(data).map_err(|e| {
        unreadable(format!(
            "an event is not JSON ({e}): {}",
            shorten(data, ERROR_DETAIL_CHARS)
        ))
    })
}

/// A whole answer that arrived but says something this agent cannot use.
fn unusable(why: String) -> Failure {
    Failure::Fatal(format!(
        "The model provider's answer could not be used: {why}"
    ))
}

/// A token count of a usage object; absent is zero.
fn count(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

/// A request to one of OpenAI's two APIs (`/v1/responses`, `/v1/chat/completions`): JSON, with
/// the token as a bearer header only when an older configuration still holds it (the host adds
/// it otherwise).
fn openai_style(config: &Config, path: &str, body: &Value) -> HttpRequest {
    let mut headers = vec![("content-type".into(), "application/json".into())];
    if let Some(token) = &config.token {
        headers.push(("authorization".into(), format!("Bearer {token}")));
    }
    HttpRequest {
        url: format!("{}{path}", config.base_url),
        headers,
        body: body.to_string().into_bytes(),
        timeout: None,
    }
}

/// Tool call arguments as the JSON object both APIs require: the model's own object, or, when
/// it wrote something else (text that is not JSON), that wrapped so it can still be sent back.
fn arguments_object(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        other => serde_json::json!({"invalid_arguments": other}),
    }
}

/// A tool call's arguments as the model wrote them (JSON text): the object they hold, or, when
/// they are not JSON, the raw text (the tool says so, and [`arguments_object`] wraps it).
fn parse_arguments(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

/// The user turn opening a conversation whose beginning was an assistant turn (after a cut or
/// an API switch), for the APIs that want a user turn first.
const OPENING: &str = "(The conversation continues.)";

/// A whole, non-streaming answer of `api` (a Responses `response` object, a Messages `message`
/// object, a `chat.completion` object) as the stream of events the same answer arrives in when
/// streamed, so tests can script whole answers.
#[cfg(test)]
pub fn stream_of(api: Api, body: &Value) -> Vec<u8> {
    match api {
        Api::OpenaiResponses => openai::stream_of(body),
        Api::AnthropicMessages => anthropic::stream_of(body),
        Api::OpenaiChat => chat::stream_of(body),
    }
    .into_bytes()
}

/// The configuration the provider tests start from.
#[cfg(test)]
fn test_config(api: Api) -> Config {
    Config {
        api,
        base_url: "https://api.example.com".into(),
        model: "model-test".into(),
        token: Some("sk-test".into()),
        reasoning_effort: None,
        max_tokens: crate::config::DEFAULT_MAX_TOKENS,
        price: None,
        max_turn_usd: crate::config::DEFAULT_MAX_TURN_USD,
        max_day_usd: crate::config::DEFAULT_MAX_DAY_USD,
        max_world_day_usd: crate::config::DEFAULT_MAX_DAY_USD,
        guest_day_usd: crate::config::DEFAULT_GUEST_DAY_USD,
        member_day_usd: crate::config::DEFAULT_MEMBER_DAY_USD,
        context_window: crate::config::DEFAULT_CONTEXT_WINDOW,
        max_subagents: crate::config::DEFAULT_MAX_SUBAGENTS,
        mcp_servers: Vec::new(),
        problems: Vec::new(),
    }
}

/// The stream tests' one helper: `body` read as a stream of `api`, fed whole and again one byte
/// at a time (the two must agree); the text shown on the way, and the outcome.
#[cfg(test)]
fn streamed(api: Api, body: &[u8]) -> (String, Result<Reply, Failure>) {
    let read = |pieces: &mut dyn Iterator<Item = &[u8]>| {
        let mut stream = Stream::new(api);
        let mut shown = String::new();
        for piece in pieces {
            match stream.feed(piece) {
                Ok(text) => shown.push_str(&text),
                Err(failure) => return (shown, Err(failure)),
            }
        }
        (shown, stream.finish())
    };
    let whole = read(&mut std::iter::once(body));
    let bytewise = read(&mut body.chunks(1));
    assert_eq!(whole.1, bytewise.1, "fed whole and one byte at a time");
    // Text before a failure in the same piece is not shown; nothing else may differ.
    if whole.1.is_ok() {
        assert_eq!(whole.0, bytewise.0, "fed whole and one byte at a time");
    }
    bytewise
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixture;
    use serde_json::json;

    fn failure_of(status: u16, body: &Value) -> Failure {
        failure(status, &[], body.to_string().as_bytes())
    }

    #[test]
    fn openai_quota_error_is_retried_as_every_429_and_said_in_words() {
        let Some(body) = fixture("openai-responses_error_429-insufficient-quota.json") else {
            return;
        };
        let Failure::Retry { why: words, .. } = failure(429, &[], &body) else {
            panic!("a 429 is tried again");
        };
        assert!(
            words.starts_with("The model provider answered 429: You exceeded your current quota"),
            "{words}"
        );
        assert!(
            words.ends_with("api-errors."),
            "the hint is for the end: {words}"
        );
    }

    #[test]
    fn anthropic_rate_limit_is_retried_when_the_provider_says() {
        let Some(body) = fixture("anthropic-messages_error_429-rate-limit.json") else {
            return;
        };
        let headers = [
            ("x-should-retry".to_string(), "true".to_string()),
            ("retry-after".to_string(), "12".to_string()),
        ];
        let Failure::Retry { why, after } = failure(429, &headers, &body) else {
            panic!("a rate limit passes");
        };
        assert_eq!(after, Some(Duration::from_secs(12)));
        assert!(
            why.starts_with("The model provider answered 429: This request would exceed"),
            "{why}"
        );
        // The provider's long message is shortened for a person.
        assert!(why.len() < 600, "{why}");
        assert!(why.contains(" …"), "{why}");
    }

    #[test]
    fn a_body_that_is_not_json_is_shown_as_text() {
        assert_eq!(
            failure(502, &[], b"<html>Bad Gateway</html>\n"),
            Failure::Retry {
                why: "The model provider answered 502: <html>Bad Gateway</html>".into(),
                after: None
            }
        );
    }

    #[test]
    fn the_wait_comes_from_retry_after_ms_then_retry_after() {
        let after = |headers: &[(&str, &str)]| {
            let headers: Vec<(String, String)> = headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            match failure(503, &headers, b"busy") {
                Failure::Retry { after, .. } => after,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(after(&[]), None);
        assert_eq!(after(&[("retry-after", "2")]), Some(Duration::from_secs(2)));
        assert_eq!(
            after(&[("retry-after", "1.5"), ("retry-after-ms", "250")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            after(&[("retry-after", "Wed, 21 Oct 2026 07:28:00 GMT")]),
            None
        );
        assert_eq!(after(&[("retry-after", "-3")]), None);
        assert_eq!(after(&[("retry-after", "inf")]), None);
        // No cap here: the turn caps the wait.
        assert_eq!(
            after(&[("retry-after", "3600")]),
            Some(Duration::from_secs(3600))
        );
    }

    #[test]
    fn what_is_retried() {
        let retried =
            |status, body: Value| matches!(failure_of(status, &body), Failure::Retry { .. });
        let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        assert!(retried(529, overloaded.clone()));
        assert!(retried(
            500,
            json!({"error": {"message": "boom", "type": "server_error"}})
        ));
        assert!(retried(408, json!("timeout")));
        assert!(retried(
            429,
            json!({"error": {"message": "slow down", "code": "rate_limit_exceeded"}})
        ));
        // A type that says so counts whatever the status.
        assert!(retried(400, overloaded));
        let no_retry = [("x-should-retry".to_string(), "false".to_string())];
        assert!(matches!(
            failure(503, &no_retry, b"down"),
            Failure::Fatal(_)
        ));
        for status in [400, 401, 403, 404, 422] {
            assert!(
                !retried(status, json!({"error": {"message": "no"}})),
                "{status}"
            );
        }
    }

    #[test]
    fn context_errors_of_every_server_are_recognised() {
        let cases = [
            // OpenAI
            (
                400,
                json!({"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.", "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}}),
            ),
            (
                400,
                json!({"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens.", "type": "invalid_request_error", "param": "messages", "code": null}}),
            ),
            // Anthropic
            (
                400,
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 208164 tokens > 200000 maximum"}}),
            ),
            (
                400,
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": "input length and `max_tokens` exceed context limit: 190000 + 16000 > 200000, decrease input length or `max_tokens` and try again"}}),
            ),
            (
                413,
                json!({"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds the maximum allowed number of bytes."}}),
            ),
            // llama.cpp
            (
                400,
                json!({"error": {"code": 400, "message": "request (8192 tokens) exceeds the available context size (4096 tokens), try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 8192, "n_ctx": 4096}}),
            ),
            // vLLM, old and new shapes
            (
                400,
                json!({"object": "error", "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.", "type": "BadRequestError", "param": null, "code": 400}),
            ),
            (
                400,
                json!({"error": {"message": "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens.", "type": "BadRequestError", "param": null, "code": 400}}),
            ),
        ];
        for (status, body) in cases {
            match failure_of(status, &body) {
                Failure::ContextTooLong(words) => {
                    assert!(
                        words.starts_with(&format!("The model provider answered {status}: ")),
                        "{words}"
                    );
                }
                other => panic!("{body}: {other:?}"),
            }
        }
        assert!(matches!(
            failure(413, &[], b"<html>413 Request Entity Too Large</html>"),
            Failure::ContextTooLong(_)
        ));
    }

    #[test]
    fn other_errors_end_the_turn_with_a_hint() {
        let words = |status, body: Value| match failure_of(status, &body) {
            Failure::Fatal(words) => words,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            words(
                401,
                json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})
            ),
            "The model provider answered 401: invalid x-api-key Check the token: the host keeps it \
             (the person who runs Sausage replaces it with `sausage model set --new-token`)."
        );
        // Ollama's error is a string.
        assert_eq!(
            words(
                404,
                json!({"error": "model \"llama9\" not found, try pulling it first"})
            ),
            "The model provider answered 404: model \"llama9\" not found, try pulling it first \
             Check base_url and model in /data/config.json (`sausage model test` says which is \
             wrong)."
        );
        assert_eq!(
            words(
                400,
                json!({"error": {"message": "Unsupported parameter: 'reasoning_effort'."}})
            ),
            "The model provider answered 400: Unsupported parameter: 'reasoning_effort'."
        );
    }

    #[test]
    fn errors_inside_a_stream_are_classified_the_same_way() {
        let nested = json!({"type": "error", "sequence_number": 2, "error": {"type": "insufficient_quota", "code": "insufficient_quota", "message": "You exceeded your current quota.", "param": null}});
        let top = json!({"type": "error", "code": "insufficient_quota", "message": "You exceeded your current quota.", "param": null});
        let expected = Failure::Fatal(
            "The model provider reported an error: You exceeded your current quota. Wait a little \
             and ask again, or check the account's plan and quota."
                .into(),
        );
        assert_eq!(stream_error(&nested), expected);
        assert_eq!(stream_error(&top), expected);
        assert_eq!(
            stream_error(
                &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
            ),
            Failure::Retry {
                why: "The model provider reported an error: Overloaded".into(),
                after: None
            }
        );
        // A numeric code is the status the server meant.
        assert!(matches!(
            stream_error(&json!({"error": {"code": 502, "message": "upstream error"}})),
            Failure::Retry { why, .. } if why.starts_with("The model provider answered 502: upstream error")
        ));
        assert!(matches!(
            stream_error(
                &json!({"error": {"message": "This model's maximum context length is 8192 tokens."}})
            ),
            Failure::ContextTooLong(_)
        ));
        // Without a message, the event itself is shown.
        assert!(matches!(
            stream_error(&json!({"type": "error"})),
            Failure::Fatal(words) if words == "The model provider reported an error: {\"type\":\"error\"}"
        ));
    }

    #[test]
    fn a_2xx_body_that_is_not_a_stream_says_what_came() {
        for api in [
            Api::OpenaiResponses,
            Api::AnthropicMessages,
            Api::OpenaiChat,
        ] {
            let (_, outcome) = streamed(api, b"<html>Welcome to the hotel wifi</html>");
            assert_eq!(
                outcome,
                Err(Failure::Fatal(
                    "The model provider's answer was not a stream of events: <html>Welcome to \
                     the hotel wifi</html>. Check api and base_url in /data/config.json."
                        .into()
                ))
            );
            // An error sent with a 2xx status is classified like any error.
            let body = json!({"error": {"message": "Overloaded", "type": "overloaded_error"}});
            let (_, outcome) = streamed(api, body.to_string().as_bytes());
            assert!(matches!(outcome, Err(Failure::Retry { .. })), "{outcome:?}");
            // Nothing at all is a stream that ended early.
            assert_eq!(streamed(api, b"").1, Err(ended_early()));
            assert_eq!(streamed(api, b": keep-alive\n\n").1, Err(ended_early()));
        }
    }

    #[test]
    fn an_event_that_is_not_json_ends_the_stream_and_stays_its_failure() {
        let mut stream = Stream::new(Api::AnthropicMessages);
        let failure = stream
            .feed(b"event: message_start\ndata: {oops\n\n")
            .unwrap_err();
        assert!(
            failure
                .words()
                .starts_with("The model provider's stream could not be read: an event is not JSON"),
            "{failure:?}"
        );
        assert_eq!(stream.feed(b"data: {}\n\n"), Err(failure.clone()));
        assert_eq!(stream.finish(), Err(failure));
    }

    #[test]
    fn usage_adds_and_counts_the_whole_prompt() {
        let mut total = Usage::default();
        let one = Usage {
            input_tokens: 3,
            output_tokens: 5,
            cache_read_tokens: 1111,
            cache_write_tokens: 418,
        };
        total.add(one);
        total.add(one);
        assert_eq!(total.output_tokens, 10);
        assert_eq!(one.prompt_tokens(), 1532);
    }
}
