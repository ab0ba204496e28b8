//! The agent's configuration, `/data/config.json`: which model API to call, where, and with what.
//! The token is not here: the host keeps it outside the world and adds it to the agent's
//! requests to `base_url` (a `token` in the file is still sent, for older worlds).
//! It is read again at the start of every turn, so an edit (even of the API shape) applies to the
//! next turn without a restart. Problems are returned as words for the person who asked.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `max_tokens` when the configuration names none: enough for a long answer or a large file.
pub const DEFAULT_MAX_TOKENS: u32 = 16_000;

/// The two API shapes the agent speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Api {
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
    #[serde(rename = "anthropic-messages")]
    AnthropicMessages,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub api: Api,
    /// Without a trailing `/`; requests go to `{base_url}/v1/...`.
    pub base_url: String,
    pub model: String,
    /// Only in configurations written before the host kept the token.
    pub token: Option<String>,
    pub reasoning_effort: Option<String>,
    pub max_tokens: u32,
}

/// The answer to a person when the configuration is missing or incomplete.
fn not_configured(problem: &str) -> String {
    format!(
        "I am not configured yet: {problem}. /data/config.json needs api (\"openai-responses\" or \
         \"anthropic-messages\"), base_url (such as \"https://api.openai.com\") and model; \
         reasoning_effort and max_tokens are optional. The host keeps the token. Run `sausage init` to create a world with \
         them, or write the file into the agent's data folder."
    )
}

/// Reads the configuration, or says in words what is wrong with it.
pub fn load(path: &std::path::Path) -> Result<Config, String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(not_configured("there is no /data/config.json"));
        }
        Err(e) => return Err(not_configured(&format!("/data/config.json: {e}"))),
    };
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| not_configured(&format!("/data/config.json is not valid JSON ({e})")))?;
    parse(&value)
}

fn parse(value: &Value) -> Result<Config, String> {
    let text = |name: &str| value[name].as_str().filter(|s| !s.is_empty());
    let missing: Vec<&str> = ["api", "base_url", "model"]
        .into_iter()
        .filter(|name| text(name).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(not_configured(&format!(
            "/data/config.json lacks {}",
            missing.join(", ")
        )));
    }
    let api = match text("api") {
        Some("openai-responses") => Api::OpenaiResponses,
        Some("anthropic-messages") => Api::AnthropicMessages,
        other => {
            return Err(not_configured(&format!(
                "api is {:?}, but it must be \"openai-responses\" or \"anthropic-messages\"",
                other.unwrap_or_default()
            )));
        }
    };
    let max_tokens = match &value["max_tokens"] {
        Value::Null => DEFAULT_MAX_TOKENS,
        v => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| not_configured(&format!("max_tokens is {v}, not a positive number")))?,
    };
    Ok(Config {
        api,
        base_url: text("base_url")
            .unwrap_or_default()
            .trim_end_matches('/')
            .to_string(),
        model: text("model").unwrap_or_default().to_string(),
        token: text("token").map(str::to_string),
        reasoning_effort: text("reasoning_effort").map(str::to_string),
        max_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_full_configuration_parses_with_defaults() {
        let config = parse(&json!({
            "api": "anthropic-messages", "base_url": "https://api.anthropic.com/",
            "model": "claude"
        }))
        .unwrap();
        assert_eq!(config.token, None, "the host keeps the token");
        assert_eq!(config.api, Api::AnthropicMessages);
        assert_eq!(config.base_url, "https://api.anthropic.com");
        assert_eq!(config.max_tokens, DEFAULT_MAX_TOKENS);
        assert_eq!(config.reasoning_effort, None);
    }

    #[test]
    fn missing_fields_are_named() {
        let error = parse(&json!({"api": "openai-responses", "model": "m"})).unwrap_err();
        assert!(error.starts_with("I am not configured yet"), "{error}");
        assert!(error.contains("lacks base_url."), "{error}");
        assert!(error.contains("The host keeps the token"), "{error}");
        assert!(error.contains("sausage init"), "{error}");
    }

    #[test]
    fn a_missing_file_says_so() {
        let dir = crate::testing::temp_dir("config");
        let error = load(&dir.join("config.json")).unwrap_err();
        assert!(error.contains("there is no /data/config.json"), "{error}");
    }

    #[test]
    fn an_unknown_api_is_refused() {
        let error = parse(&json!({
            "api": "chat", "base_url": "u", "model": "m", "token": "t"
        }))
        .unwrap_err();
        assert!(error.contains("\"chat\""), "{error}");
    }
}
