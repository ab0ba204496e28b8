//! Model providers: turning the neutral history into one API's HTTP request, and that API's
//! answer back into neutral entries. Pure functions only: the HTTP call itself is the host's.
//! Each API lives in its own file and is the only place that knows its JSON shape.
//! **Invariant:** an opaque item is only ever sent to the API that made it, unchanged.

mod anthropic;
mod openai;

use serde_json::Value;

use crate::config::{Api, Config};
use crate::history::Entry;
use crate::tools::ToolSpec;

/// The most characters of a provider's error body a person is shown.
const ERROR_DETAIL_CHARS: usize = 400;

/// A request ready to send: `POST url` with these headers and body.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

/// What one model step produced, in the neutral format.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reply {
    pub entries: Vec<Entry>,
    /// Why the model stopped, when the API says it stopped early (such as `max_tokens`).
    pub cut_short: Option<String>,
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

/// Builds the request for the configured API.
pub fn request(
    config: &Config,
    system: &str,
    history: &[Entry],
    tools: &[ToolSpec],
) -> HttpRequest {
    match config.api {
        Api::OpenaiResponses => openai::request(config, system, history, tools),
        Api::AnthropicMessages => anthropic::request(config, system, history, tools),
    }
}

/// Reads a successful (2xx) answer, or says in words why it cannot be used.
pub fn parse(api: Api, body: &[u8]) -> Result<Reply, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        format!(
            "The model provider's answer was not JSON ({e}): {}",
            shorten(&String::from_utf8_lossy(body), ERROR_DETAIL_CHARS)
        )
    })?;
    match api {
        Api::OpenaiResponses => openai::parse(&value),
        Api::AnthropicMessages => anthropic::parse(&value),
    }
    .map_err(|e| format!("The model provider's answer could not be used: {e}"))
}

/// A non-2xx answer in plain words: the status, the provider's message, and a hint when the fix
/// is known. Both APIs put the message at `error.message`.
pub fn error_words(status: u16, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let detail = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| text.trim().to_string());
    let hint = match status {
        401 | 403 => {
            " Check the token: the host keeps it (run `sausage init` again for a new world, or \
             ask the person who runs Sausage to fix it)."
        }
        404 => " Check base_url and model in /data/config.json.",
        429 => " Wait a little and ask again, or check the account's plan and quota.",
        500.. => " The provider may be having trouble; ask again in a while.",
        _ => "",
    };
    format!(
        "The model provider answered {status}: {}{hint}",
        shorten(&detail, ERROR_DETAIL_CHARS)
    )
}

/// Tool call arguments as the JSON object both APIs require: the model's own object, or, when
/// it wrote something else (text that is not JSON), that wrapped so it can still be sent back.
fn arguments_object(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        other => serde_json::json!({"invalid_arguments": other}),
    }
}

/// Cuts `text` to at most `max` characters, marking the cut.
pub fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{} …", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixture;

    #[test]
    fn openai_quota_error_in_words() {
        let Some(body) = fixture("openai-responses_error_429-insufficient-quota.json") else {
            return;
        };
        let words = error_words(429, &body);
        assert!(
            words.starts_with("The model provider answered 429: You exceeded your current quota"),
            "{words}"
        );
        assert!(words.contains("quota"), "{words}");
    }

    #[test]
    fn anthropic_rate_limit_error_in_words() {
        let Some(body) = fixture("anthropic-messages_error_429-rate-limit.json") else {
            return;
        };
        let words = error_words(429, &body);
        assert!(
            words.starts_with("The model provider answered 429: This request would exceed"),
            "{words}"
        );
        // The provider's long message is shortened for a person.
        assert!(words.len() < 600, "{words}");
        assert!(words.contains(" …"), "{words}");
    }

    #[test]
    fn a_body_that_is_not_json_is_shown_as_text() {
        let words = error_words(502, b"<html>Bad Gateway</html>\n");
        assert_eq!(
            words,
            "The model provider answered 502: <html>Bad Gateway</html> The provider may be \
             having trouble; ask again in a while."
        );
    }

    #[test]
    fn an_answer_that_is_not_json_says_so() {
        let error = parse(Api::OpenaiResponses, b"oops").unwrap_err();
        assert!(
            error.starts_with("The model provider's answer was not JSON"),
            "{error}"
        );
    }
}
