//! The agent's model token as the secret [`SECRET`] granted to `agent` (DESIGN §25, §27):
//! `sausage init` and `sausage model set` keep it there, and a world made before it was a
//! secret has it moved out of `broker/credentials/agent.json` by [`adopt_legacy`].
//! Invariant: the secret is written before the file loses the token, so a crash in between
//! leaves it in both (and the next start moves it again), never in neither.

use anyhow::Result;

use super::{NewSecret, Secrets};
use crate::message::ActorId;
use crate::people::People;
use crate::runtime::network::Credentials;
use crate::world::World;

/// The name of the secret that holds the model token.
pub const SECRET: &str = "model";

/// The actor the model token is granted to.
pub fn agent() -> ActorId {
    ActorId::parse("agent").expect("a valid id")
}

/// A base URL as the agent joins it (`{base_url}/v1/...`): without a trailing `/`, nor the
/// `/v1` that OpenAI's, Ollama's and llama.cpp's documentation write at its end, which would
/// otherwise become `/v1/v1/...`.
pub fn base_url(url: &str) -> &str {
    let url = url.trim().trim_end_matches('/');
    url.strip_suffix("/v1").unwrap_or(url).trim_end_matches('/')
}

/// Who keeps the model token: the world's first owner, as whom `sausage` commands act.
pub fn keeper(world: &World) -> Result<String> {
    Ok(People::new(world).console_person()?.id)
}

/// Keeps `token` as the secret [`SECRET`] for `base` (as [`base_url`] makes it), sent as
/// `header` written by `format`, set by the world's first owner and granted to `agent`.
pub fn keep(world: &World, base: &str, header: &str, format: &str, token: &str) -> Result<()> {
    let secrets = Secrets::new(world);
    let by = keeper(world)?;
    let new = NewSecret {
        name: SECRET,
        url: base,
        header: Some(header),
        format: Some(format),
    };
    secrets.set(&new, token, &by)?;
    secrets.grant(SECRET, &agent(), &by)?;
    Ok(())
}

/// What a world made before the model token was a secret keeps in
/// `broker/credentials/agent.json`: the entry under the base URL of the agent's
/// `/data/config.json` (the token), and the others (an MCP server's).
struct Legacy {
    base: String,
    token: Credentials,
    others: Vec<Credentials>,
}

fn legacy(world: &World) -> Result<Option<Legacy>> {
    let agent = agent();
    // Without the agent's configuration there is no model token to tell apart (and its
    // credentials file, if any, is left as it is).
    let config: Option<serde_json::Value> =
        std::fs::read(world.data_dir(&agent).join("config.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let Some(base) = config.as_ref().and_then(|c| c["base_url"].as_str()) else {
        return Ok(None);
    };
    let base = base_url(base).to_string();
    let (mut model, others): (Vec<Credentials>, Vec<Credentials>) = world
        .read_credentials(&agent)?
        .into_iter()
        .partition(|c| base_url(&c.base_url) == base);
    // `init` and `model set` wrote one entry per base URL; of two spelt apart by hand (with
    // and without `/v1`), the last written is the newer.
    Ok(model.pop().map(|token| Legacy {
        base,
        token,
        others,
    }))
}

/// Whether the world keeps its model token where worlds did before it was a secret.
pub fn has_legacy(world: &World) -> bool {
    matches!(legacy(world), Ok(Some(_)))
}

/// Moves the model token of a world made before it was a secret ([`has_legacy`]) into the
/// secret [`SECRET`] granted to `agent` (unless that secret is already there for the same URL,
/// which then wins: it is the newer), then out of the file; the agent's other credentials
/// stay, and the file goes once it holds none. Returns whether it moved one.
pub fn adopt_legacy(world: &World) -> Result<bool> {
    let Some(Legacy {
        base,
        token,
        others,
    }) = legacy(world)?
    else {
        return Ok(false);
    };
    let secrets = Secrets::new(world);
    let kept = (secrets.list()?.into_iter()).any(|s| s.name == SECRET && base_url(&s.url) == base);
    if kept {
        secrets.grant(SECRET, &agent(), &keeper(world)?)?;
    } else {
        let (format, value) = match token.value.strip_prefix("Bearer ") {
            Some(value) if token.header == "authorization" => ("Bearer {}", value),
            _ => ("{}", token.value.as_str()),
        };
        keep(world, &base, &token.header, format, value)?;
    }
    world.write_all_credentials(&agent(), &others)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world_with_legacy(legacy: serde_json::Value) -> (tempfile::TempDir, World) {
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(dir.path().join("w"));
        world.create().unwrap();
        world.create_actor_dirs(&agent()).unwrap();
        std::fs::write(
            world.data_dir(&agent()).join("config.json"),
            r#"{"api":"openai-responses","base_url":"https://llm.example","model":"m"}"#,
        )
        .unwrap();
        std::fs::create_dir_all(world.credentials_dir()).unwrap();
        std::fs::write(world.credentials_path(&agent()), legacy.to_string()).unwrap();
        (dir, world)
    }

    #[test]
    fn a_legacy_model_token_becomes_the_secret_and_leaves_the_file() {
        let (_dir, world) = world_with_legacy(serde_json::json!(
            {"base_url": "https://llm.example/v1", "header": "authorization", "value": "Bearer sk-old"}
        ));
        assert!(has_legacy(&world));
        assert!(adopt_legacy(&world).unwrap());
        assert!(!has_legacy(&world));
        assert!(!world.credentials_path(&agent()).exists());
        let listed = Secrets::new(&world).list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].name, SECRET);
        assert_eq!(listed[0].url, "https://llm.example");
        assert_eq!(listed[0].format, "Bearer {}");
        assert_eq!(listed[0].set_by, crate::people::DEFAULT_OWNER);
        assert_eq!(listed[0].grants[0].actor, "agent");
        let granted = Secrets::new(&world).grants_for(&agent()).current();
        assert_eq!(granted[0].credentials.value, "Bearer sk-old");
        assert!(!adopt_legacy(&world).unwrap(), "once");
    }

    #[test]
    fn an_mcp_servers_credentials_stay_and_a_kept_secret_wins() {
        let mcp = serde_json::json!(
            {"base_url": "http://127.0.0.1:9/mcp", "header": "authorization", "value": "Bearer m"}
        );
        let (_dir, world) = world_with_legacy(serde_json::json!([
            {"base_url": "https://llm.example", "header": "x-api-key", "value": "sk-stale"},
            mcp,
        ]));
        keep(&world, "https://llm.example", "x-api-key", "{}", "sk-new").unwrap();
        assert!(adopt_legacy(&world).unwrap());
        let left = world.read_credentials(&agent()).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].base_url, "http://127.0.0.1:9/mcp");
        let granted = Secrets::new(&world).grants_for(&agent()).current();
        assert_eq!(granted[0].credentials.value, "sk-new");
    }
}
