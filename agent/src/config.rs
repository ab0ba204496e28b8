//! The agent's configuration, `/data/config.json`: which model API to call, where, and with what.
//! The token is not here: the host keeps it outside the world and adds it to the agent's
//! requests to `base_url` (a `token` in the file is still sent, for older worlds).
//! It is read again at the start of every turn, so an edit (even of the API shape) applies to the
//! next turn without a restart. Problems are returned as words for the person who asked.
//! Prices and context windows of well-known models are built in ([`KNOWN_MODELS`]); the file's
//! `prices` and `context_window` override them. `mcp_servers` names the MCP servers whose tools
//! the model may be offered ([`McpServer`]); a bad entry is left out with a note in
//! [`Config::problems`], and the rest of the file still works.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{Api, Tier};

/// `max_tokens` when the configuration names none: enough for a long answer or a large file.
pub const DEFAULT_MAX_TOKENS: u32 = 16_000;

/// `max_turn_usd` when the configuration names none: what one turn may spend.
pub const DEFAULT_MAX_TURN_USD: f64 = 5.0;

/// `max_day_usd` when the configuration names none: what each owner's turns of one day (UTC)
/// may spend (DESIGN §13).
pub const DEFAULT_MAX_DAY_USD: f64 = 25.0;

/// A guest's daily cap when `tier_day_usd` names none: a stranger cannot run up the bill.
pub const DEFAULT_GUEST_DAY_USD: f64 = 1.0;

/// A member's daily cap when `tier_day_usd` names none.
pub const DEFAULT_MEMBER_DAY_USD: f64 = 10.0;

/// The context window assumed for a model the table does not know and the file does not size:
/// what most current hosted models offer. A smaller local model answers "context too long" once,
/// the agent compacts, and `context_window` in the file fixes it for good.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// An MCP server's `timeout_seconds` when the file names none: each request to it may take
/// this long before its call fails in words.
pub const DEFAULT_MCP_TIMEOUT_SECONDS: u64 = 30;

/// The longest `timeout_seconds` accepted: a slow server holds up the turn no longer.
pub const MAX_MCP_TIMEOUT_SECONDS: u64 = 300;

/// The longest name a tool offered to the model may have (`mcp__<server>__<tool>`): the model
/// APIs refuse longer ones.
pub const MAX_TOOL_NAME: usize = 64;

/// An MCP server the agent is a client of (DESIGN §23):
/// `{"name", "url", "tools": {"<tool>": ["owner", "member", "guest"]}, "timeout_seconds"?}`.
/// Its token is not here: the host adds it to requests to `url` as a credential.
#[derive(Clone, Debug, PartialEq)]
pub struct McpServer {
    /// By the rules of actor ids, at most 32 characters: it is part of the tools' names.
    pub name: String,
    /// `http://` or `https://`: where JSON-RPC is POSTed (streamable HTTP).
    pub url: String,
    /// The only tools ever offered, each with the tiers that may use it.
    pub tools: BTreeMap<String, Vec<Tier>>,
    /// How long each request to the server may take.
    pub timeout: Duration,
}

impl McpServer {
    /// The name the model calls `tool` by.
    pub fn tool_name(&self, tool: &str) -> String {
        format!("mcp__{}__{tool}", self.name)
    }

    /// Whether a person of `tier` may use `tool` (a tool the file does not list: nobody).
    pub fn allows(&self, tool: &str, tier: Tier) -> bool {
        self.tools
            .get(tool)
            .is_some_and(|tiers| tiers.contains(&tier))
    }
}

/// USD per million tokens of each kind.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    #[serde(default)]
    pub cache_read: f64,
    #[serde(default)]
    pub cache_write: f64,
}

/// What the agent knows of a model family: its price and context window. A model matches the
/// longest name here that its own name starts with (`claude-sonnet-4-5-20250929` is
/// `claude-sonnet-4-5`).
pub struct KnownModel {
    pub name: &'static str,
    pub price: Price,
    pub context_window: u64,
}

impl Config {
    /// What one person of `tier` may spend a day.
    pub fn day_cap(&self, tier: Tier) -> f64 {
        match tier {
            Tier::Guest => self.guest_day_usd,
            Tier::Member => self.member_day_usd,
            Tier::Owner => self.max_day_usd,
        }
    }
}

const fn model(name: &'static str, price: [f64; 4], context_window: u64) -> KnownModel {
    KnownModel {
        name,
        price: Price {
            input: price[0],
            output: price[1],
            cache_read: price[2],
            cache_write: price[3],
        },
        context_window,
    }
}

/// Built-in prices (USD per million input, output, cache-read, cache-write tokens, as the
/// providers published them on 2025-11-01; `docs/agent.md` says so) and context windows. OpenAI bills no cache writes: they cost input.
pub const KNOWN_MODELS: &[KnownModel] = &[
    model("gpt-5.1", [1.25, 10.0, 0.125, 1.25], 400_000),
    model("gpt-5", [1.25, 10.0, 0.125, 1.25], 400_000),
    model("gpt-5-mini", [0.25, 2.0, 0.025, 0.25], 400_000),
    model("gpt-5-nano", [0.05, 0.4, 0.005, 0.05], 400_000),
    model("gpt-4.1", [2.0, 8.0, 0.5, 2.0], 1_047_576),
    model("gpt-4.1-mini", [0.4, 1.6, 0.1, 0.4], 1_047_576),
    model("gpt-4o", [2.5, 10.0, 1.25, 2.5], 128_000),
    model("gpt-4o-mini", [0.15, 0.6, 0.075, 0.15], 128_000),
    model("o3", [2.0, 8.0, 0.5, 2.0], 200_000),
    model("o4-mini", [1.1, 4.4, 0.275, 1.1], 200_000),
    model("claude-opus-4-5", [5.0, 25.0, 0.5, 6.25], 200_000),
    model("claude-opus-4-1", [15.0, 75.0, 1.5, 18.75], 200_000),
    model("claude-opus-4", [15.0, 75.0, 1.5, 18.75], 200_000),
    model("claude-sonnet-4-5", [3.0, 15.0, 0.3, 3.75], 200_000),
    model("claude-sonnet-4", [3.0, 15.0, 0.3, 3.75], 200_000),
    model("claude-haiku-4-5", [1.0, 5.0, 0.1, 1.25], 200_000),
    model("claude-3-5-haiku", [0.8, 4.0, 0.08, 1.0], 200_000),
];

/// The table's entry for `model`: the longest known name it starts with.
pub fn known_model(model: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS
        .iter()
        .filter(|known| model.starts_with(known.name))
        .max_by_key(|known| known.name.len())
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub api: Api,
    /// Without a trailing `/` or `/v1` (see [`base_url`]); requests go to `{base_url}/v1/...`.
    pub base_url: String,
    pub model: String,
    /// Only in configurations written before the host kept the token.
    pub token: Option<String>,
    pub reasoning_effort: Option<String>,
    pub max_tokens: u32,
    /// The model's price; `None` when neither the file nor the table knows it (tokens are still
    /// counted, and the cost is said to be unknown).
    pub price: Option<Price>,
    pub max_turn_usd: f64,
    /// An owner's daily cap.
    pub max_day_usd: f64,
    /// The world's daily cap over all turns together, whoever pays (DESIGN §18); `max_day_usd`
    /// when the file names none.
    pub max_world_day_usd: f64,
    /// A guest's and a member's daily caps (`tier_day_usd`: `{"guest","member"}`).
    pub guest_day_usd: f64,
    pub member_day_usd: f64,
    /// The model's context window in tokens.
    pub context_window: u64,
    /// How many sub-agents a turn runs at once (DESIGN §26): `max_subagents`, 4 when the file
    /// names none, at most [`MAX_SUBAGENTS`].
    pub max_subagents: usize,
    /// The MCP servers of `mcp_servers` whose entries are right.
    pub mcp_servers: Vec<McpServer>,
    /// What is wrong with the file but did not stop it from working (a bad `mcp_servers`
    /// entry), in words naming the field; written to stderr at each turn.
    pub problems: Vec<String>,
}

/// The answer to a person when the configuration is missing or incomplete.
fn not_configured(problem: &str) -> String {
    format!(
        "I am not configured yet: {problem}. /data/config.json needs api (\"openai-responses\", \
         \"anthropic-messages\" or \"openai-chat\"), base_url (such as \"https://api.openai.com\") \
         and model; reasoning_effort, max_tokens, max_turn_usd, max_day_usd, \
         max_world_day_usd, tier_day_usd, \
         context_window and prices are optional. The host keeps the token. Run `sausage init` to create a world with \
         them, `sausage model set` to change them, or write the file into the agent's data folder."
    )
}

/// A base URL as requests join it (`{base_url}/v1/...`): without a trailing `/`, nor the `/v1`
/// that OpenAI's, Ollama's and llama.cpp's documentation write at its end, which would otherwise
/// become `/v1/v1/...`. `sausage init` and `sausage model set` write it so; a hand edit may not.
pub fn base_url(url: &str) -> &str {
    let url = url.trim().trim_end_matches('/');
    url.strip_suffix("/v1").unwrap_or(url).trim_end_matches('/')
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
        Some("openai-chat") => Api::OpenaiChat,
        other => {
            return Err(not_configured(&format!(
                "api is {:?}, but it must be \"openai-responses\", \"anthropic-messages\" or \
                 \"openai-chat\"",
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
    let usd = |name: &str, default: f64| match &value[name] {
        Value::Null => Ok(default),
        v => v
            .as_f64()
            .filter(|&usd| usd > 0.0)
            .ok_or_else(|| not_configured(&format!("{name} is {v}, not a positive number of USD"))),
    };
    let tiers = &value["tier_day_usd"];
    if !tiers.is_null() && !tiers.is_object() {
        return Err(not_configured(&format!(
            "tier_day_usd is {tiers}, not {{\"guest\": <USD>, \"member\": <USD>}}"
        )));
    }
    let tier_usd = |tier: &str, default: f64| match &tiers[tier] {
        Value::Null => Ok(default),
        v => v.as_f64().filter(|&usd| usd >= 0.0).ok_or_else(|| {
            not_configured(&format!("tier_day_usd.{tier} is {v}, not a number of USD"))
        }),
    };
    let model = text("model").unwrap_or_default().to_string();
    let known = known_model(&model);
    let context_window = match &value["context_window"] {
        Value::Null => known.map_or(DEFAULT_CONTEXT_WINDOW, |k| k.context_window),
        v => v
            .as_u64()
            .filter(|&n| n >= MIN_CONTEXT_WINDOW)
            .ok_or_else(|| {
                not_configured(&format!(
                    "context_window is {v}, not a number of tokens of at least {MIN_CONTEXT_WINDOW}"
                ))
            })?,
    };
    let max_day_usd = usd("max_day_usd", DEFAULT_MAX_DAY_USD)?;
    let (mcp_servers, problems) = mcp_servers(&value["mcp_servers"]);
    Ok(Config {
        api,
        base_url: base_url(text("base_url").unwrap_or_default()).to_string(),
        price: price(&value["prices"], &model)?.or(known.map(|k| k.price)),
        model,
        token: text("token").map(str::to_string),
        reasoning_effort: text("reasoning_effort").map(str::to_string),
        max_tokens,
        max_turn_usd: usd("max_turn_usd", DEFAULT_MAX_TURN_USD)?,
        max_day_usd,
        max_world_day_usd: usd("max_world_day_usd", max_day_usd)?,
        guest_day_usd: tier_usd("guest", DEFAULT_GUEST_DAY_USD)?,
        member_day_usd: tier_usd("member", DEFAULT_MEMBER_DAY_USD)?,
        context_window,
        max_subagents: match &value["max_subagents"] {
            Value::Null => DEFAULT_MAX_SUBAGENTS,
            Value::Number(n)
                if n.as_u64()
                    .is_some_and(|n| (1..=MAX_SUBAGENTS as u64).contains(&n)) =>
            {
                n.as_u64().expect("checked") as usize
            }
            other => {
                return Err(format!(
                    "/data/config.json: max_subagents is {other}; give a whole number from 1 to \
                     {MAX_SUBAGENTS} (how many sub-agents a turn runs at once), or leave it out \
                     for {DEFAULT_MAX_SUBAGENTS}"
                ));
            }
        },
        mcp_servers,
        problems,
    })
}

/// `max_subagents` when the file names none.
pub const DEFAULT_MAX_SUBAGENTS: usize = 4;

/// The most sub-agents a turn runs at once, whatever the file says (the broker's own limit).
pub const MAX_SUBAGENTS: usize = 8;

/// The right entries of `mcp_servers`, and a sentence for each one left out.
fn mcp_servers(value: &Value) -> (Vec<McpServer>, Vec<String>) {
    let entries = match value {
        Value::Null => return (Vec::new(), Vec::new()),
        Value::Array(entries) => entries,
        other => {
            let problem = format!(
                "/data/config.json: mcp_servers is {other}, not a list of {{\"name\", \"url\", \
                 \"tools\", \"timeout_seconds\"}}; no MCP server is used"
            );
            return (Vec::new(), vec![problem]);
        }
    };
    let (mut servers, mut problems) = (Vec::<McpServer>::new(), Vec::new());
    for (at, entry) in entries.iter().enumerate() {
        match mcp_server(entry) {
            Ok(server) if servers.iter().any(|s| s.name == server.name) => problems.push(format!(
                "/data/config.json: mcp_servers[{at}].name {:?} is named twice; this entry is \
                 left out",
                server.name
            )),
            Ok(server) => servers.push(server),
            Err(why) => problems.push(format!(
                "/data/config.json: mcp_servers[{at}].{why}; this server is left out"
            )),
        }
    }
    (servers, problems)
}

/// One entry of `mcp_servers`, or what is wrong with it, starting with the field's name.
fn mcp_server(entry: &Value) -> Result<McpServer, String> {
    let name = match entry["name"].as_str() {
        Some(name) if name.len() <= 32 && crate::message::valid_id(name) => name.to_string(),
        _ => {
            return Err(format!(
                "name is {}, not a name of a-z, 0-9, - and _ (1 to 32 characters)",
                entry["name"]
            ));
        }
    };
    let url = match entry["url"].as_str() {
        Some(url)
            if ["http://", "https://"].iter().any(|scheme| {
                url.len() > scheme.len()
                    && url
                        .get(..scheme.len())
                        .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
            }) && !url.contains(char::is_whitespace) =>
        {
            url.to_string()
        }
        _ => {
            return Err(format!(
                "url is {}, not an http:// or https:// URL",
                entry["url"]
            ));
        }
    };
    let Some(listed) = entry["tools"].as_object() else {
        return Err(format!(
            "tools is {}, not {{\"<tool>\": [\"owner\", \"member\", \"guest\"]}}",
            entry["tools"]
        ));
    };
    let mut tools = BTreeMap::new();
    for (tool, tiers) in listed {
        let offered = format!("mcp__{name}__{tool}");
        let good_name = !tool.is_empty()
            && offered.len() <= MAX_TOOL_NAME
            && tool
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !good_name {
            return Err(format!(
                "tools: {tool:?} is not a tool name of A-Z, a-z, 0-9, - and _ that keeps \
                 {offered:?} within {MAX_TOOL_NAME} characters"
            ));
        }
        let parsed: Option<Vec<Tier>> = tiers.as_array().and_then(|tiers| {
            tiers
                .iter()
                .map(|tier| match tier.as_str() {
                    Some("owner") => Some(Tier::Owner),
                    Some("member") => Some(Tier::Member),
                    Some("guest") => Some(Tier::Guest),
                    _ => None,
                })
                .collect()
        });
        let Some(parsed) = parsed else {
            return Err(format!(
                "tools.{tool} is {tiers}, not a list of tiers (\"owner\", \"member\", \
                 \"guest\")"
            ));
        };
        tools.insert(tool.clone(), parsed);
    }
    let seconds = match &entry["timeout_seconds"] {
        Value::Null => DEFAULT_MCP_TIMEOUT_SECONDS,
        v => v
            .as_u64()
            .filter(|s| (1..=MAX_MCP_TIMEOUT_SECONDS).contains(s))
            .ok_or_else(|| {
                format!(
                    "timeout_seconds is {v}, not a whole number of seconds from 1 to \
                     {MAX_MCP_TIMEOUT_SECONDS}"
                )
            })?,
    };
    Ok(McpServer {
        name,
        url,
        tools,
        timeout: Duration::from_secs(seconds),
    })
}

/// The smallest `context_window` accepted: below it the prompt and tools alone do not fit.
pub const MIN_CONTEXT_WINDOW: u64 = 16_384;

/// The price of `model` in the file's `prices` (`{"<model>": {"input", "output", "cache_read",
/// "cache_write"}}`, matched like the table: the longest name the model starts with).
fn price(prices: &Value, model: &str) -> Result<Option<Price>, String> {
    let Some(prices) = prices.as_object() else {
        return match prices {
            Value::Null => Ok(None),
            other => Err(not_configured(&format!(
                "prices is {other}, not an object of models"
            ))),
        };
    };
    let Some((name, entry)) = prices
        .iter()
        .filter(|(name, _)| model.starts_with(name.as_str()))
        .max_by_key(|(name, _)| name.len())
    else {
        return Ok(None);
    };
    let price: Price = serde_json::from_value(entry.clone()).map_err(|e| {
        not_configured(&format!(
            "prices.{name} is not {{\"input\", \"output\", \"cache_read\", \"cache_write\"}} in \
             USD per million tokens ({e})"
        ))
    })?;
    let all = [
        price.input,
        price.output,
        price.cache_read,
        price.cache_write,
    ];
    if all.iter().any(|p| !p.is_finite() || *p < 0.0) {
        return Err(not_configured(&format!(
            "prices.{name} has a negative or unreadable price"
        )));
    }
    Ok(Some(price))
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
        for written in ["http://127.0.0.1:11434/v1", "http://127.0.0.1:11434/v1/"] {
            let config = parse(&json!({"api": "openai-chat", "base_url": written, "model": "m"}));
            assert_eq!(
                config.unwrap().base_url,
                "http://127.0.0.1:11434",
                "no /v1/v1: {written}"
            );
        }
        assert_eq!(config.reasoning_effort, None);
    }

    #[test]
    fn max_subagents_is_four_unless_named_and_a_wrong_one_says_what_to_write() {
        let base = json!({"api": "openai-chat", "base_url": "u", "model": "m"});
        assert_eq!(parse(&base).unwrap().max_subagents, DEFAULT_MAX_SUBAGENTS);
        let mut named = base.clone();
        named["max_subagents"] = json!(2);
        assert_eq!(parse(&named).unwrap().max_subagents, 2);
        for wrong in [json!(0), json!(9), json!("many"), json!(1.5)] {
            named["max_subagents"] = wrong.clone();
            let error = parse(&named).unwrap_err();
            assert!(
                error.contains("a whole number from 1 to 8"),
                "{wrong}: {error}"
            );
        }
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
    fn the_worlds_day_cap_is_the_owners_unless_named() {
        let base = json!({"api": "openai-chat", "base_url": "u", "model": "m", "max_day_usd": 7.0});
        assert_eq!(parse(&base).unwrap().max_world_day_usd, 7.0);
        let mut named = base.clone();
        named["max_world_day_usd"] = json!(40.0);
        assert_eq!(parse(&named).unwrap().max_world_day_usd, 40.0);
        named["max_world_day_usd"] = json!(-1);
        let error = parse(&named).unwrap_err();
        assert!(error.contains("max_world_day_usd is -1"), "{error}");
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

    #[test]
    fn mcp_servers_parse_and_bad_entries_are_left_out_with_the_field_named() {
        let mut value = json!({"api": "openai-chat", "base_url": "u", "model": "m",
        "mcp_servers": [
            {"name": "weather", "url": "http://127.0.0.1:8123/mcp",
             "tools": {"weather": ["owner", "member"], "slow": ["owner"]}},
            {"name": "Bad Name", "url": "http://x", "tools": {}},
            {"name": "a", "url": "ftp://x", "tools": {}},
            {"name": "b", "url": "https://x", "tools": {"t": ["king"]}},
            {"name": "c", "url": "https://x", "tools": {"t.x": ["owner"]}},
            {"name": "d", "url": "https://x", "tools": {}, "timeout_seconds": 0},
            {"name": "e", "url": "https://x", "tools": {}, "timeout_seconds": 301},
            {"name": "f", "url": "https://x", "tools": ["t"]},
            {"name": "weather", "url": "https://y", "tools": {}},
            {"name": "x".repeat(33), "url": "https://x", "tools": {}},
            {"name": "g", "url": "https://x", "tools": {}, "timeout_seconds": 300}
        ]});
        let config = parse(&value).unwrap();
        let names: Vec<&str> = config.mcp_servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["weather", "g"]);
        let weather = &config.mcp_servers[0];
        assert_eq!(
            weather.timeout,
            Duration::from_secs(DEFAULT_MCP_TIMEOUT_SECONDS)
        );
        assert!(weather.allows("weather", Tier::Member));
        assert!(!weather.allows("slow", Tier::Member));
        assert!(!weather.allows("weather", Tier::Guest));
        assert!(!weather.allows("unlisted", Tier::Owner));
        assert_eq!(config.mcp_servers[1].timeout, Duration::from_secs(300));
        let problems = config.problems.join("\n");
        for expected in [
            "mcp_servers[1].name is \"Bad Name\"",
            "mcp_servers[2].url is \"ftp://x\", not an http:// or https:// URL",
            "mcp_servers[3].tools.t is [\"king\"], not a list of tiers",
            "mcp_servers[4].tools: \"t.x\" is not a tool name",
            "mcp_servers[5].timeout_seconds is 0",
            "mcp_servers[6].timeout_seconds is 301",
            "mcp_servers[7].tools is [\"t\"]",
            "mcp_servers[8].name \"weather\" is named twice",
            "mcp_servers[9].name is",
        ] {
            assert!(problems.contains(expected), "{expected} in {problems}");
        }
        assert_eq!(config.problems.len(), 9, "{problems}");
        value["mcp_servers"] = json!({"name": "weather"});
        let config = parse(&value).unwrap();
        assert!(config.mcp_servers.is_empty());
        assert!(
            config.problems[0].contains("mcp_servers is {"),
            "{:?}",
            config.problems
        );
    }
}
