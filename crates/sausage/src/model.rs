//! The agent's model settings after `init` (DESIGN §27): `sausage model show|set|test [DIR]`,
//! and the one small request that checks them, which `init` also makes before its build.
//!
//! The settings live in three places, changed together by [`save`]: the agent's
//! `/data/config.json` (`api`, `base_url`, `model`), the secret `model` granted to `agent` (the
//! token as its API's header, under `base_url`; DESIGN §25) and the network allow-list of the
//! agent's installed `actor.json` (the provider's host). Invariant: the token is never printed,
//! logged or put in an error; it travels only to the provider, in the check's header.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use sausage_core::message::ActorId;
use sausage_core::secrets::Secrets;
use sausage_core::secrets::model::{SECRET, agent};
use sausage_core::world::{MANIFEST, World};

use crate::init::{self, AgentConfig};

/// How long the check waits for the provider's first answer: a slow model starts streaming
/// within seconds; past this the URL is most likely wrong (a firewall dropping packets).
const CHECK_PATIENCE: Duration = Duration::from_secs(30);

/// The most output tokens the check asks for: the least all three APIs accept (OpenAI's
/// Responses wants at least 16), so the check costs next to nothing.
const CHECK_MAX_TOKENS: u32 = 16;

/// The longest piece of a provider's error message quoted back.
const QUOTED_CHARS: usize = 200;

/// What the check found wrong, in words for the person who set it up.
#[derive(Debug, PartialEq)]
pub struct Problem(pub String);

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub use sausage_core::secrets::model::base_url;

/// The URL of the API's endpoint under `base` (see [`base_url`]).
fn endpoint(api: &str, base: &str) -> String {
    let path = match api {
        "anthropic-messages" => "/v1/messages",
        "openai-chat" => "/v1/chat/completions",
        _ => "/v1/responses",
    };
    format!("{}{path}", base_url(base))
}

/// Sends one small streamed request, shaped as the agent's own, and says what is wrong: a
/// refused connection, a refused token, a wrong path or model, or an answer that is no model
/// API's. The token, when there is one, goes as the API's header.
pub async fn check(config: &AgentConfig) -> Result<(), Problem> {
    let api = config.api.as_deref().unwrap_or_default();
    let model = config.model.as_deref().unwrap_or_default();
    let base = base_url(config.base_url.as_deref().unwrap_or_default());
    let url = endpoint(api, base);
    let ask = "Say OK.";
    let body = match api {
        "anthropic-messages" => json!({
            "model": model, "max_tokens": CHECK_MAX_TOKENS, "stream": true,
            "messages": [{"role": "user", "content": ask}],
        }),
        "openai-chat" => json!({
            "model": model, "max_tokens": CHECK_MAX_TOKENS, "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": ask}],
        }),
        _ => json!({
            "model": model, "max_output_tokens": CHECK_MAX_TOKENS, "stream": true,
            "store": false, "include": ["reasoning.encrypted_content"],
            "input": [{"role": "user", "content": ask}],
        }),
    };
    let client = reqwest::Client::builder()
        .timeout(CHECK_PATIENCE)
        .build()
        .map_err(|e| Problem(format!("cannot make an HTTP client: {e}")))?;
    let mut request = client
        .post(&url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string());
    if api == "anthropic-messages" {
        request = request.header("anthropic-version", "2023-06-01");
    }
    if let Some(credentials) = config.credentials() {
        request = request.header(credentials.header, credentials.value);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) if e.is_connect() => {
            return Err(Problem(format!(
                "nothing listens at {base}; check the base URL ({})",
                innermost(&e)
            )));
        }
        Err(e) if e.is_timeout() => {
            return Err(Problem(format!(
                "{base} did not answer within {} s; check the base URL",
                CHECK_PATIENCE.as_secs()
            )));
        }
        Err(e) => return Err(Problem(format!("{url}: {}", innermost(&e)))),
    };
    let status = response.status();
    let streams = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if status.is_success() {
        // Dropping the response closes the stream: the check needs no more than its start.
        return if streams {
            Ok(())
        } else {
            Err(Problem(format!(
                "{url} answered, but not with a stream of events as a model API does: is the \
                 base URL right, and the API shape ({api})?"
            )))
        };
    }
    let mut said = response.text().await.unwrap_or_default();
    // Some providers quote the key they refused; it is not to be printed.
    if let Some(token) = config.token.as_deref().filter(|t| !t.is_empty()) {
        said = said.replace(token, "<the token>");
    }
    let message = provider_message(&said);
    Err(Problem(match status.as_u16() {
        401 | 403 => format!("the provider refused the token ({status}: {message})"),
        404 if mentions_model(&said, &message, model) => {
            format!("the provider knows no model `{model}` ({message}); check the model")
        }
        404 => format!("no such path: is the base URL right? ({url} answered 404)"),
        _ => format!("the provider answered {status}: {message}"),
    }))
}

/// The deepest cause of an HTTP error, which names what happened (`Connection refused`).
fn innermost(error: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// The message of a provider's error body (`{"error": {"message"}}` in all three APIs), or the
/// start of the body as it came.
fn provider_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v["error"]["message"]
            .as_str()
            .or(v["message"].as_str())
            .or(v["error"].as_str())
    });
    let message = message.unwrap_or(body).trim();
    if message.is_empty() {
        return "no message".into();
    }
    let mut quoted: String = message.chars().take(QUOTED_CHARS).collect();
    if quoted.len() < message.len() {
        quoted.push('…');
    }
    quoted
}

/// Whether a 404 is about the model rather than the path, from its `body` and its `message`:
/// OpenAI answers an unknown model with `model_not_found`, Anthropic with `model: <name>`,
/// Ollama with `model "<name>" not found`. A bare name is not enough: a short one (`m`) is in
/// any text.
fn mentions_model(body: &str, message: &str, model: &str) -> bool {
    let quoted = [
        format!("`{model}`"),
        format!("'{model}'"),
        format!("\"{model}\""),
        format!("model: {model}"),
    ];
    body.contains("model_not_found") || quoted.iter().any(|q| message.contains(q.as_str()))
}

/// Moves the model token of a world made before it was a secret out of
/// `broker/credentials/agent.json` into the secret `model` (see
/// [`sausage_core::secrets::model::adopt_legacy`]), and says so on stderr when it did.
pub fn adopt_legacy(world: &World) -> Result<()> {
    if sausage_core::secrets::model::adopt_legacy(world)? {
        eprintln!(
            "sausage: the model token moved from {} into the secret `{SECRET}`, granted to \
             agent (`sausage secret list` shows it)",
            world.credentials_path(&agent()).display()
        );
    }
    Ok(())
}

/// The settings `init` (or an earlier `set`) left: the config's `api`, `base_url` and `model`,
/// and the token the secret `model` holds.
pub fn read(world: &World) -> Result<AgentConfig> {
    let path = world.data_dir(&agent()).join("config.json");
    let config: Value = std::fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .with_context(|| {
            format!(
                "{}: the agent has no readable configuration; fix its JSON, or set the model \
                 with `sausage model set --api API --base-url URL --model MODEL`",
                path.display()
            )
        })?;
    let text = |name: &str| config[name].as_str().map(str::to_string);
    let base = text("base_url").map(|url| base_url(&url).to_string());
    // The secret's own URL is not compared: whatever it was last set for, it is the model's
    // token, and `set` keeps it under the new base URL.
    let token = Secrets::new(world).value(SECRET)?;
    Ok(AgentConfig {
        api: text("api"),
        base_url: base,
        model: text("model"),
        token: Some(token.unwrap_or_default()),
    })
}

/// `sausage model show`: api, base URL and model; the secret that holds the token (its name,
/// URL and header), never the token.
pub fn show(world: &World) -> Result<ExitCode> {
    let config = read(world)?;
    let or_none = |value: &Option<String>| value.clone().unwrap_or_else(|| "(none)".into());
    println!("api:      {}", or_none(&config.api));
    println!("base URL: {}", or_none(&config.base_url));
    println!("model:    {}", or_none(&config.model));
    let secret = Secrets::new(world)
        .list()?
        .into_iter()
        .find(|s| s.name == SECRET);
    let token = match secret {
        None => "none (nothing is added to the agent's requests)".to_string(),
        Some(s) => {
            let granted = s.grants.iter().any(|g| g.actor == agent().as_str());
            let grant = match granted {
                true => "granted to agent".to_string(),
                false => format!("not granted to agent: sausage secret grant {SECRET} agent"),
            };
            format!(
                "the secret `{SECRET}` for {} (header `{}`), {grant}",
                s.url, s.header
            )
        }
    };
    println!("token:    {token}");
    Ok(ExitCode::SUCCESS)
}

/// `sausage model test`: the check, on the settings as saved.
pub fn test(world: &World) -> Result<ExitCode> {
    let config = read(world)?;
    Ok(report_check(&config))
}

/// Checks `config` and prints the outcome: success, or the problem on stderr.
fn report_check(config: &AgentConfig) -> ExitCode {
    let checked = match sausage_core::scheduler() {
        Ok(rt) => rt.block_on(check(config)),
        Err(e) => Err(Problem(format!("{e:#}"))),
    };
    match checked {
        Ok(()) => {
            println!(
                "The provider answers: {} at {} with model {}.",
                config.api.as_deref().unwrap_or_default(),
                config.base_url.as_deref().unwrap_or_default(),
                config.model.as_deref().unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(problem) => {
            eprintln!("sausage: the model provider: {problem}");
            ExitCode::FAILURE
        }
    }
}

/// What `sausage model set` changes; `None` keeps the saved value.
pub struct Change {
    pub api: Option<String>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    /// Whether to take a new token: from `SAUSAGE_API_TOKEN`, else asked (hidden at a
    /// terminal, else a line of stdin).
    pub new_token: bool,
}

/// `sausage model set`: the saved settings with `change` applied, checked for form, saved in
/// all three files, then checked with one request.
pub fn set(world: &World, change: Change) -> Result<ExitCode> {
    let old = read(world)?;
    if change.api.is_none()
        && change.base_url.is_none()
        && change.model.is_none()
        && !change.new_token
    {
        bail!(
            "nothing to change; give --api, --base-url, --model or --new-token (`sausage model \
             show` prints what is set)"
        );
    }
    let mut new = AgentConfig {
        api: change.api.or(old.api.clone()),
        base_url: change.base_url.or(old.base_url.clone()),
        model: change.model.or(old.model.clone()),
        token: (!change.new_token).then(|| old.token.clone().unwrap_or_default()),
    };
    if change.new_token {
        let from_environment = std::env::var(init::TOKEN_VARIABLE)
            .ok()
            .filter(|token| !token.is_empty());
        new.token = Some(match from_environment {
            Some(token) => token,
            None => init::ask_token(
                &mut std::io::stdin().lock(),
                &mut std::io::stdout(),
                new.api.as_deref() == Some(init::TOKENLESS_API),
                std::io::stdin().is_terminal(),
            )?,
        });
    }
    let new = new.complete(&mut std::io::empty(), &mut std::io::sink(), false)?;
    if new.credentials().is_none() && new.api.as_deref() != Some(init::TOKENLESS_API) {
        bail!(
            "{} needs a token, and none is set; give one with --new-token",
            new.api.as_deref().unwrap_or_default()
        );
    }
    let restart = save(world, &old, &new)?;
    println!("The agent's model settings are saved.");
    if world.is_running() {
        if restart {
            println!(
                "The running agent takes the new address at its next start: run the world \
                 again, or stop and start `agent`."
            );
        } else {
            println!("The running agent uses them from its next turn.");
        }
    }
    Ok(report_check(&new))
}

/// Writes `new` over `old` in the three places: the new host is added beside the old one, then
/// the secret and the config (which the agent reads at each turn) switch to the new settings,
/// then the host only the old settings used is removed. Returns whether the running agent must
/// restart to use them: its allow-list is read at its start, but a granted secret is read at
/// each request and lets it reach its own host, so only a new host without a token needs one.
pub fn save(world: &World, old: &AgentConfig, new: &AgentConfig) -> Result<bool> {
    let agent = agent();
    let old_host = old.provider_host().ok();
    let new_host = new.provider_host()?;
    let restart = new.credentials().is_none() && old_host.as_deref() != Some(new_host.as_str());
    let manifests = manifest_paths(world);
    for path in &manifests {
        edit_network(path, |network| {
            if !network.contains(&new_host) {
                network.push(new_host.clone());
            }
        })?;
    }
    new.keep_token(world)?;
    let path = world.data_dir(&agent).join("config.json");
    let mut config: Value = std::fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_else(|| json!({}));
    config["api"] = json!(new.api);
    config["base_url"] = json!(new.base_url());
    config["model"] = json!(new.model);
    sausage_core::fs::write_atomically(
        &path,
        &serde_json::to_vec_pretty(&config).expect("config serialises"),
    )
    .with_context(|| format!("{}: cannot write the agent's configuration", path.display()))?;

    // The commit point is past: what follows only removes what nothing uses any more. An MCP
    // server of the agent's on the old host keeps it allowed.
    let servers_use = |host: &str| {
        config["mcp_servers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["url"].as_str())
            .any(|url| init::host_of(url).ok().as_deref() == Some(host))
    };
    let stale_host = old_host.filter(|host| *host != new_host && !servers_use(host));
    if let Some(stale) = &stale_host {
        for path in &manifests {
            edit_network(path, |network| network.retain(|host| host != stale))?;
        }
    }
    Ok(restart)
}

/// The manifests that allow the agent its provider: the installed source's (which the next
/// start reads, and the agent's own upgrades start from), the stored copy of its version (which
/// a rollback to it brings back) and, while it is there, the copy `init` deployed from (which
/// its "type `/deploy agent …`" advice names).
fn manifest_paths(world: &World) -> Vec<std::path::PathBuf> {
    let console = ActorId::parse("console").expect("a valid id");
    let version = world
        .load_registry()
        .ok()
        .and_then(|registry| Some(registry.actors.get("agent")?.version));
    [
        Some(world.source_dir(&agent()).join(MANIFEST)),
        version.map(|v| world.version_dir(&agent(), v).join("source").join(MANIFEST)),
        Some(
            world
                .data_dir(&console)
                .join(init::AGENT_SOURCE_DIR)
                .join(MANIFEST),
        ),
    ]
    .into_iter()
    .flatten()
    .filter(|path| path.is_file())
    .collect()
}

/// Rewrites the `network` list of the manifest at `path` with `edit`, keeping its other fields.
fn edit_network(path: &std::path::Path, edit: impl FnOnce(&mut Vec<String>)) -> Result<()> {
    let mut manifest: Value = std::fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .with_context(|| format!("{}: not a readable manifest", path.display()))?;
    let mut network: Vec<String> = manifest["network"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h.as_str().map(str::to_string))
        .collect();
    let before = network.clone();
    edit(&mut network);
    if network == before {
        return Ok(());
    }
    manifest["network"] = json!(network);
    sausage_core::fs::write_atomically(
        path,
        &serde_json::to_vec_pretty(&manifest).expect("JSON serialises"),
    )
    .with_context(|| format!("{}: cannot write", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_loses_its_slash_and_its_v1() {
        for given in [
            "https://api.openai.com",
            "https://api.openai.com/",
            "https://api.openai.com/v1",
            "https://api.openai.com/v1/",
            " https://api.openai.com/v1 ",
        ] {
            assert_eq!(base_url(given), "https://api.openai.com", "{given}");
        }
        assert_eq!(
            base_url("http://127.0.0.1:11434/v1"),
            "http://127.0.0.1:11434"
        );
        assert_eq!(
            base_url("https://openrouter.ai/api/v1"),
            "https://openrouter.ai/api"
        );
        assert_eq!(base_url("https://x.example/v10"), "https://x.example/v10");
        assert_eq!(
            endpoint("openai-chat", "http://127.0.0.1:8080/v1/"),
            "http://127.0.0.1:8080/v1/chat/completions"
        );
        assert_eq!(
            endpoint("anthropic-messages", "https://api.anthropic.com"),
            "https://api.anthropic.com/v1/messages"
        );
    }

    #[test]
    fn a_providers_error_is_quoted_short_and_a_404_about_the_model_says_so() {
        let openai =
            r#"{"error":{"message":"The model `gpt-9` does not exist","code":"model_not_found"}}"#;
        assert_eq!(provider_message(openai), "The model `gpt-9` does not exist");
        assert!(mentions_model(openai, "", "gpt-9"));
        let ollama = r#"{"error":"model \"llama9\" not found, try pulling it first"}"#;
        assert!(mentions_model(ollama, &provider_message(ollama), "llama9"));
        let anthropic =
            r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-9"}}"#;
        assert!(mentions_model(
            anthropic,
            &provider_message(anthropic),
            "claude-9"
        ));
        let path = "no such endpoint: is base_url missing?";
        assert!(
            !mentions_model(path, path, "m"),
            "a short name is in any text"
        );
        assert_eq!(provider_message(""), "no message");
        let long = "x".repeat(500);
        assert_eq!(provider_message(&long).chars().count(), QUOTED_CHARS + 1);
    }
}
