//! `sausage init` (DESIGN §6): a new world, the agent's configuration, and the agent itself,
//! built from the source this binary carries along the same path as any actor (`cargo`, then
//! a `spawn` with its transcript test).
//!
//! The source of Sausage holds no endpoint and no token: both come from the person. The token
//! becomes the secret `model`, granted to `agent` (DESIGN §25): the host adds it to the agent's
//! requests to its base URL, so no actor ever sees it. A local server spoken to as
//! `openai-chat` may need no token: then there is no secret at all.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::json;

use sausage_core::message::ActorId;
use sausage_core::runtime::network::Credentials;
use sausage_core::world::{MANIFEST, World};

include!(concat!(env!("OUT_DIR"), "/agent_source.rs"));

/// The API shapes the agent speaks.
pub const APIS: [&str; 3] = ["openai-responses", "anthropic-messages", "openai-chat"];

/// The API shape whose token may be empty: local model servers (llama.cpp, vLLM, Ollama)
/// speak it and often need none.
pub const TOKENLESS_API: &str = "openai-chat";

/// The agent's spending limits `init` writes into its configuration (DESIGN §12), in USD, for
/// a person to edit: a turn that reaches the first ends with what it did; past the second, no
/// turn starts until the next day.
const MAX_TURN_USD: f64 = 5.0;
const MAX_DAY_USD: f64 = 25.0;

/// The environment variable that may hold the model token.
pub const TOKEN_VARIABLE: &str = "SAUSAGE_API_TOKEN";

/// Where in the world the carried agent source is written before it is built: the console's
/// own files, since the console deploys it.
pub const AGENT_SOURCE_DIR: &str = "agent-source";

/// Asks for the first owner's person id; an empty answer is [`sausage_core::people::DEFAULT_OWNER`].
pub fn ask_owner(input: &mut impl BufRead, out: &mut impl Write) -> Result<String> {
    let default = sausage_core::people::DEFAULT_OWNER;
    loop {
        write!(out, "Your person id, the world's owner [{default}]: ")?;
        out.flush()?;
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            bail!("no answer to \"Your person id\"; give it with --owner");
        }
        let answer = match line.trim() {
            "" => default,
            answer => answer,
        };
        match ActorId::parse(answer) {
            Ok(_) => return Ok(answer.to_string()),
            Err(e) => writeln!(out, "{}", e.replace("actor id", "person id"))?,
        }
    }
}

/// What the agent needs to reach its model.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct AgentConfig {
    pub api: Option<String>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub token: Option<String>,
}

impl AgentConfig {
    /// Asks on `input` for every value still missing, checking each answer. At a `terminal`,
    /// the token is read from it without being shown.
    pub fn complete(
        mut self,
        input: &mut impl BufRead,
        out: &mut impl Write,
        terminal: bool,
    ) -> Result<AgentConfig> {
        if self.token.is_none() {
            self.token = std::env::var(TOKEN_VARIABLE).ok().filter(|t| !t.is_empty());
        }
        let mut ask =
            |question: &str,
             instead: &str,
             check: &dyn Fn(&str) -> Result<(), String>,
             hidden: bool| { ask_until(input, out, question, instead, check, hidden) };
        if self.api.is_none() {
            self.api = Some(ask(
                &format!("API shape ({})", apis()),
                "give it with --api",
                &check_api,
                false,
            )?);
        }
        if self.base_url.is_none() {
            self.base_url = Some(ask(
                "Base URL of the model provider, as its documentation writes it (such as \
                 https://api.openai.com/v1 or http://127.0.0.1:8080)",
                "give it with --base-url",
                &check_provider_url,
                false,
            )?);
        }
        if self.model.is_none() {
            self.model = Some(ask(
                "Model",
                "give it with --model",
                &check_not_empty,
                false,
            )?);
        }
        if self.token.is_none() {
            let tokenless = self.api.as_deref() == Some(TOKENLESS_API);
            self.token = Some(ask_token(input, out, tokenless, terminal)?);
        }
        for (value, check) in [
            (&self.api, check_api as fn(&str) -> Result<(), String>),
            (&self.base_url, check_provider_url),
            (&self.model, check_not_empty),
        ] {
            check(value.as_deref().unwrap_or("")).map_err(anyhow::Error::msg)?;
        }
        Ok(self)
    }

    /// The base URL as the agent joins it: without a trailing `/` or `/v1`.
    pub fn base_url(&self) -> &str {
        crate::model::base_url(self.base_url.as_deref().unwrap_or(""))
    }

    /// The agent's `/data/config.json` (everything but the token) and, if it has a token, the
    /// secret that holds it ([`AgentConfig::keep_token`]). Prices and the context window are
    /// left to the agent, which knows them for the models it knows.
    pub fn write(&self, world: &World) -> Result<()> {
        let agent = ActorId::parse("agent").expect("valid id");
        world.create_actor_dirs(&agent)?;
        let config = json!({
            "api": self.api,
            "base_url": self.base_url(),
            "model": self.model,
            "max_tokens": 16000,
            "max_turn_usd": MAX_TURN_USD,
            "max_day_usd": MAX_DAY_USD,
        });
        sausage_core::fs::write_atomically(
            &world.data_dir(&agent).join("config.json"),
            &serde_json::to_vec_pretty(&config).expect("config serialises"),
        )
        .context("cannot write the agent's configuration")?;
        self.keep_token(world)
    }

    /// Keeps the token as the secret `model`, set by the world's first owner and granted to
    /// `agent`, under the base URL and in the header its API shape wants; without a token,
    /// removes that secret if there is one.
    pub fn keep_token(&self, world: &World) -> Result<()> {
        use sausage_core::secrets::{Secrets, model};
        match self.token.as_deref().filter(|t| !t.is_empty()) {
            Some(token) => {
                let (header, format) = self.header();
                model::keep(world, self.base_url(), header, format, token)
            }
            None => {
                let secrets = Secrets::new(world);
                if secrets.value(model::SECRET)?.is_some() {
                    secrets.remove(model::SECRET, &model::keeper(world)?)?;
                }
                Ok(())
            }
        }
    }

    /// The header that carries the token, and how it is written (`{}` is the token):
    /// `authorization: Bearer <token>` for both OpenAI shapes, `x-api-key: <token>` for
    /// Anthropic.
    fn header(&self) -> (&'static str, &'static str) {
        match self.api.as_deref() {
            Some("anthropic-messages") => ("x-api-key", "{}"),
            _ => ("authorization", "Bearer {}"),
        }
    }

    /// The header the host adds to the agent's requests (as [`AgentConfig::keep_token`] keeps
    /// it); none without a token.
    pub fn credentials(&self) -> Option<Credentials> {
        let token = self.token.as_deref().filter(|t| !t.is_empty())?;
        let (header, format) = self.header();
        Some(Credentials {
            base_url: self.base_url().to_string(),
            header: header.into(),
            value: format.replacen("{}", token, 1),
        })
    }

    /// The provider's `host[:port]`, as the agent's manifest allows it.
    pub fn provider_host(&self) -> Result<String> {
        host_of(self.base_url())
    }
}

/// Asks for the model token (at a `terminal` without showing it); a `tokenless` API's may be
/// empty.
pub fn ask_token(
    input: &mut impl BufRead,
    out: &mut impl Write,
    tokenless: bool,
    terminal: bool,
) -> Result<String> {
    let question = if tokenless {
        format!("API token (empty if the server needs none, or set {TOKEN_VARIABLE})")
    } else {
        format!("API token (or set {TOKEN_VARIABLE})")
    };
    let check = if tokenless {
        |_: &str| Ok(())
    } else {
        check_not_empty
    };
    ask_until(
        input,
        out,
        &question,
        &format!("set it in the environment variable {TOKEN_VARIABLE}"),
        &check,
        terminal,
    )
}

/// Asks `question` until the answer passes `check`; `instead` says how to answer without a
/// question (at the end of input); a `hidden` answer is read from the terminal without being
/// shown.
fn ask_until(
    input: &mut impl BufRead,
    out: &mut impl Write,
    question: &str,
    instead: &str,
    check: &dyn Fn(&str) -> Result<(), String>,
    hidden: bool,
) -> Result<String> {
    loop {
        let line = if hidden {
            rpassword::prompt_password(format!("{question}: "))
                .with_context(|| format!("cannot read the answer to \"{question}\""))?
        } else {
            write!(out, "{question}: ")?;
            out.flush()?;
            let mut line = String::new();
            if input.read_line(&mut line)? == 0 {
                bail!("no answer to \"{question}\"; {instead}");
            }
            line
        };
        let answer = line.trim().to_string();
        match check(&answer) {
            Ok(()) => return Ok(answer),
            Err(problem) => writeln!(out, "{problem}")?,
        }
    }
}

/// The environment variable that may hold the `matrix` actor's access token.
pub const MATRIX_TOKEN_VARIABLE: &str = "SAUSAGE_MATRIX_TOKEN";

/// Where in the world the carried `matrix` source is written before it is built.
const MATRIX_SOURCE_DIR: &str = "matrix-source";

/// The actor that connects a world to Matrix (DESIGN §17), and the kind of handle it speaks for
/// people by.
pub const MATRIX: &str = "matrix";

/// What the `matrix` actor needs: its homeserver, its own user id there, and its access token.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MatrixConfig {
    pub homeserver: Option<String>,
    pub user_id: Option<String>,
    pub token: Option<String>,
}

impl MatrixConfig {
    /// Asks on `input` for every value still missing (the token from
    /// [`MATRIX_TOKEN_VARIABLE`] first; at a `terminal`, typed without being shown).
    pub fn complete(
        mut self,
        input: &mut impl BufRead,
        out: &mut impl Write,
        terminal: bool,
    ) -> Result<MatrixConfig> {
        // What the flags gave is checked before anything is asked.
        if let Some(homeserver) = &self.homeserver {
            check_base_url(homeserver).map_err(|e| anyhow::anyhow!("the homeserver: {e}"))?;
        }
        if let Some(user) = &self.user_id {
            check_matrix_user(user).map_err(|e| anyhow::anyhow!("the Matrix user: {e}"))?;
        }
        if self.token.is_none() {
            self.token = std::env::var(MATRIX_TOKEN_VARIABLE)
                .ok()
                .filter(|t| !t.is_empty());
        }
        if self.homeserver.is_none() {
            self.homeserver = Some(ask_until(
                input,
                out,
                "Matrix homeserver URL (https://…)",
                "give it with --homeserver",
                &check_base_url,
                false,
            )?);
        }
        if self.user_id.is_none() {
            self.user_id = Some(ask_until(
                input,
                out,
                "The world's Matrix user id (@sausage:example.org)",
                "give it with --user",
                &check_matrix_user,
                false,
            )?);
        }
        if self.token.is_none() {
            self.token = Some(ask_until(
                input,
                out,
                &format!("Its access token (or set {MATRIX_TOKEN_VARIABLE})"),
                &format!("set it in the environment variable {MATRIX_TOKEN_VARIABLE}"),
                &check_not_empty,
                terminal,
            )?);
        }
        check_base_url(self.homeserver()).map_err(anyhow::Error::msg)?;
        check_matrix_user(self.user_id.as_deref().unwrap_or("")).map_err(anyhow::Error::msg)?;
        Ok(self)
    }

    fn homeserver(&self) -> &str {
        self.homeserver
            .as_deref()
            .unwrap_or("")
            .trim_end_matches('/')
    }

    /// Everything the actor needs but its build: the token in `broker/credentials/matrix.json`
    /// (added by the host to its requests under the homeserver), its `/data/config.json`, and
    /// the owner's grant that lets it speak for people by their Matrix ids.
    pub fn write(&self, world: &World) -> Result<()> {
        let matrix = ActorId::parse(MATRIX).expect("valid id");
        check_surface_owned_by_an_owner(world, &matrix)?;
        world.create_actor_dirs(&matrix)?;
        let config = json!({
            "homeserver": self.homeserver(), "user_id": self.user_id, "agent": "agent",
        });
        sausage_core::fs::write_atomically(
            &world.data_dir(&matrix).join("config.json"),
            &serde_json::to_vec_pretty(&config).expect("config serialises"),
        )
        .context("cannot write the matrix actor's configuration")?;
        let token = self.token.as_deref().unwrap_or_default();
        world.write_credentials(
            &matrix,
            &Credentials {
                base_url: self.homeserver().to_string(),
                header: "authorization".into(),
                value: format!("Bearer {token}"),
            },
        )?;
        sausage_core::people::People::new(world).grant_surface(&matrix, MATRIX)
    }

    /// Writes the carried `matrix` source into the world, with a manifest that lets it reach
    /// only its homeserver, and returns its folder.
    pub fn write_source(&self, world: &World) -> Result<PathBuf> {
        write_source(
            world,
            MATRIX_SOURCE,
            MATRIX_SOURCE_DIR,
            &host_of(self.homeserver())?,
        )
    }
}

/// A grant to speak for people belongs to the actor as an owner installed it (DESIGN §18): an
/// actor of that id that someone else installed gets none. It is removed first, by an owner.
fn check_surface_owned_by_an_owner(world: &World, surface: &ActorId) -> Result<()> {
    let Ok(registry) = world.load_registry() else {
        return Ok(());
    };
    if !registry.actors.contains_key(surface.as_str()) {
        return Ok(());
    }
    let people =
        sausage_core::broker::principal::PeopleNow::read(&sausage_core::people::People::new(world))
            .map_err(anyhow::Error::msg)?;
    match people.owner_of(&registry, surface.as_str()) {
        sausage_core::broker::principal::Principal::Person(p)
            if p.tier == sausage_core::people::Tier::Owner =>
        {
            Ok(())
        }
        other => bail!(
            "actor {surface} exists and acts for {}, not an owner: it cannot be given the right \
             to speak for people; an owner removes it first (`@broker \
             {{\"type\":\"remove\",\"actor\":\"{surface}\"}}`), then runs this again",
            other.describe()
        ),
    }
}

fn check_matrix_user(user: &str) -> Result<(), String> {
    let valid = user
        .strip_prefix('@')
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(name, server)| !name.is_empty() && !server.is_empty());
    if valid {
        Ok(())
    } else {
        Err(format!(
            "`{user}` is not a Matrix user id; it looks like @sausage:example.org"
        ))
    }
}

/// The `host[:port]` of a URL, as a manifest allows it.
pub fn host_of(url: &str) -> Result<String> {
    let uri: http::Uri = url
        .parse()
        .with_context(|| format!("`{url}` is not a URL"))?;
    uri.authority()
        .map(|a| {
            a.as_str()
                .rsplit('@')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .with_context(|| format!("`{url}` names no host"))
}

/// `openai-responses, anthropic-messages or openai-chat`.
fn apis() -> String {
    let (last, others) = APIS.split_last().expect("APIS is not empty");
    format!("{} or {last}", others.join(", "))
}

fn check_api(api: &str) -> Result<(), String> {
    if APIS.contains(&api) {
        Ok(())
    } else {
        Err(format!(
            "`{api}` is not an API shape Sausage speaks; choose {}",
            apis()
        ))
    }
}

fn check_base_url(url: &str) -> Result<(), String> {
    if url.starts_with("https://") || url.starts_with("http://") {
        Ok(())
    } else {
        Err(format!("`{url}` is not an http:// or https:// URL"))
    }
}

/// The model provider's base URL: one the secret `model` can be kept for (no user, query or
/// fragment), checked before anything is made.
fn check_provider_url(url: &str) -> Result<(), String> {
    check_base_url(url)?;
    sausage_core::secrets::check_url(crate::model::base_url(url))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn check_not_empty(text: &str) -> Result<(), String> {
    if text.is_empty() {
        Err("an answer is needed".into())
    } else {
        Ok(())
    }
}

/// Writes the carried agent source into the world, with a manifest that lets it reach its
/// provider, and returns its folder.
pub fn write_agent_source(world: &World, config: &AgentConfig) -> Result<PathBuf> {
    write_source(
        world,
        AGENT_SOURCE,
        AGENT_SOURCE_DIR,
        &config.provider_host()?,
    )
}

/// Writes a carried source into the console's `/data/<folder>` (the console deploys it), with
/// a manifest that lets it reach `host` only and keeps no window (DESIGN §21): the agent and
/// `matrix` live on the network, which a shadow run does not reach, and their messages are
/// people's conversations, not to be kept twice. Returns its folder.
fn write_source(
    world: &World,
    files: &[(&str, &[u8])],
    folder: &str,
    host: &str,
) -> Result<PathBuf> {
    if files.is_empty() {
        bail!("this sausage binary carries no `{folder}`; it was built without its crate");
    }
    let console = ActorId::parse("console").expect("valid id");
    let dir = world.data_dir(&console).join(folder);
    for (relative, bytes) in files {
        let path = dir.join(relative);
        std::fs::create_dir_all(path.parent().unwrap_or(&dir))?;
        std::fs::write(&path, bytes).with_context(|| format!("{}", path.display()))?;
    }
    let manifest = json!({ "network": [host], "window": 0 });
    let path = dir.join(MANIFEST);
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&manifest).expect("JSON serialises"),
    )
    .with_context(|| format!("{}", path.display()))?;
    Ok(dir)
}

/// The console line that builds and spawns (or upgrades) `actor` from `source`: the same
/// `/deploy` a person types.
pub fn deploy_line(actor: &str, source: &Path) -> String {
    format!("/deploy {actor} {}\n", source.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(config: AgentConfig, answers: &str) -> (Result<AgentConfig>, String) {
        let mut out = Vec::new();
        let result = config.complete(&mut answers.as_bytes(), &mut out, false);
        (result, String::from_utf8(out).unwrap())
    }

    #[test]
    fn the_owner_is_asked_with_a_default_and_a_wrong_id_asked_again() {
        let mut out = Vec::new();
        let owner = ask_owner(&mut "Big Boss\nboss\n".as_bytes(), &mut out).unwrap();
        assert_eq!(owner, "boss");
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("person id `Big Boss` has the character 'B'"),
            "{out}"
        );
        assert_eq!(
            ask_owner(&mut "\n".as_bytes(), &mut Vec::new()).unwrap(),
            "owner"
        );
        let none = ask_owner(&mut "".as_bytes(), &mut Vec::new()).unwrap_err();
        assert!(none.to_string().contains("--owner"));
    }

    #[test]
    fn the_matrix_actor_is_configured_outside_its_reach_and_wrong_answers_asked_again() {
        let mut out = Vec::new();
        let config = MatrixConfig {
            token: Some("syt_secret".into()),
            ..MatrixConfig::default()
        }
        .complete(
            &mut "matrix.example.org\nhttp://127.0.0.1:8008/\nsausage\n@sausage:localhost\n"
                .as_bytes(),
            &mut out,
            false,
        )
        .unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("`matrix.example.org` is not an http:// or https:// URL"),
            "{out}"
        );
        assert!(out.contains("`sausage` is not a Matrix user id"), "{out}");

        let dir = tempfile::tempdir().unwrap();
        let world = World::new(dir.path().join("w"));
        world.create().unwrap();
        config.write(&world).unwrap();
        let matrix = ActorId::parse(MATRIX).unwrap();
        let written: serde_json::Value = serde_json::from_slice(
            &std::fs::read(world.data_dir(&matrix).join("config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(written["homeserver"], "http://127.0.0.1:8008");
        assert_eq!(written["user_id"], "@sausage:localhost");
        assert!(
            !written.to_string().contains("syt_secret"),
            "no token in /data"
        );
        let credentials: serde_json::Value =
            serde_json::from_slice(&std::fs::read(world.credentials_path(&matrix)).unwrap())
                .unwrap();
        assert_eq!(credentials["value"], "Bearer syt_secret");
        assert_eq!(credentials["base_url"], "http://127.0.0.1:8008");
        let people = sausage_core::people::People::new(&world);
        let refused = people
            .speaker_by_handle(&matrix, "@ann:localhost")
            .unwrap_err();
        assert!(
            refused.contains("not a person"),
            "the grant is made: {refused}"
        );
        let none = MatrixConfig::default().complete(&mut "".as_bytes(), &mut Vec::new(), false);
        assert!(none.unwrap_err().to_string().contains("--homeserver"));
    }

    #[test]
    fn missing_values_are_asked_and_wrong_answers_asked_again() {
        let given = AgentConfig {
            token: Some("t".into()),
            ..AgentConfig::default()
        };
        let (config, out) = complete(
            given,
            "soap\nanthropic-messages\nftp://x\nhttps://me:pw@llm.example\nhttps://llm.example/\nbig\n",
        );
        let config = config.unwrap();
        assert_eq!(config.api.as_deref(), Some("anthropic-messages"));
        assert_eq!(config.base_url.as_deref(), Some("https://llm.example/"));
        assert_eq!(config.model.as_deref(), Some("big"));
        assert!(out.contains("`soap` is not an API shape"), "{out}");
        assert!(
            out.contains("`ftp://x` is not an http:// or https:// URL"),
            "{out}"
        );
        assert!(out.contains("may not hold a user or password"), "{out}");
    }

    #[test]
    fn the_token_becomes_the_header_of_its_api_and_the_host_the_manifests() {
        let config = |api: &str, url: &str| AgentConfig {
            api: Some(api.into()),
            base_url: Some(url.into()),
            model: Some("m".into()),
            token: Some("sk-1".into()),
        };
        let openai = config("openai-responses", "https://api.openai.com/");
        assert_eq!(
            openai.credentials(),
            Some(Credentials {
                base_url: "https://api.openai.com".into(),
                header: "authorization".into(),
                value: "Bearer sk-1".into()
            })
        );
        assert_eq!(openai.provider_host().unwrap(), "api.openai.com");
        let anthropic = config("anthropic-messages", "http://127.0.0.1:8080")
            .credentials()
            .unwrap();
        assert_eq!(anthropic.header, "x-api-key");
        assert_eq!(anthropic.value, "sk-1");
        let chat = config("openai-chat", "http://127.0.0.1:8080/").credentials();
        assert_eq!(chat.unwrap().value, "Bearer sk-1");
        let local = AgentConfig {
            token: Some(String::new()),
            ..config("openai-chat", "http://127.0.0.1:8080/")
        };
        assert_eq!(local.credentials(), None, "no token, no header");
        assert_eq!(local.provider_host().unwrap(), "127.0.0.1:8080");
    }

    #[test]
    fn only_openai_chat_may_go_without_a_token() {
        let given = |api: &str| AgentConfig {
            api: Some(api.into()),
            base_url: Some("http://127.0.0.1:8080".into()),
            model: Some("m".into()),
            token: None,
        };
        let (local, out) = complete(given("openai-chat"), "\n");
        assert_eq!(local.unwrap().token.as_deref(), Some(""));
        assert!(out.contains("empty if the server needs none"), "{out}");
        let (hosted, out) = complete(given("openai-responses"), "\n sk-2 \n");
        assert_eq!(hosted.unwrap().token.as_deref(), Some("sk-2"));
        assert!(out.contains("an answer is needed"), "{out}");
    }

    #[test]
    fn flags_are_checked_and_a_missing_answer_says_how_to_give_it() {
        let bad_flag = AgentConfig {
            api: Some("soap".into()),
            base_url: Some("https://x".into()),
            model: Some("m".into()),
            token: Some("t".into()),
        };
        let (result, _) = complete(bad_flag, "");
        assert!(result.unwrap_err().to_string().contains(
            "`soap` is not an API shape Sausage speaks; choose openai-responses, \
                 anthropic-messages or openai-chat"
        ));
        let (result, _) = complete(
            AgentConfig {
                token: Some("t".into()),
                ..AgentConfig::default()
            },
            "",
        );
        assert!(result.unwrap_err().to_string().contains("--api"));
    }
}
