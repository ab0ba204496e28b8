//! Sub-agents (DESIGN §26), as the broker makes and removes them.
//!
//! `delegate` (from the agent, or from one of its sub-agents) starts a new actor
//! `<parent>-s<n>` running the parent's own version of the agent's component, owned by the
//! person the request speaks for, with the parent's model configuration (the role's model, when
//! it names one) and the role in its `/data/role.json`; the model token reaches it as it reaches
//! the agent, through a grant of the secret `model`. The brief is delivered to it as a person's
//! text from the parent (with the person and their tier, so it never has more rights than the
//! turn that delegated), and its answer, the report, goes back to the parent as a reply to the
//! brief's id. `dismiss` removes a sub-agent, asked by its parent only.
//!
//! **Invariant:** a sub-agent's depth is its parent's plus one, at most [`MAX_DEPTH`], and a
//! parent has at most [`MAX_AT_ONCE`] at once, whatever the agent asks.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Broker;
use super::principal::Principal;
use super::requests::{Candidate, actor_field, string_field};
use crate::message::{ActorId, Envelope, Speaker};
use crate::secrets::Secrets;
use crate::world::SubAgent;

/// How deep sub-agents nest: the agent's own are 1, theirs 2.
pub const MAX_DEPTH: u8 = 2;

/// The most sub-agents one parent has at once (the agent's `max_subagents` is at most this).
pub const MAX_AT_ONCE: usize = 8;

/// The longest brief taken.
const MAX_BRIEF_BYTES: usize = 32 * 1024;

/// The longest role prompt taken.
const MAX_PROMPT_BYTES: usize = 64 * 1024;

/// The secret the agent's model requests carry (DESIGN §25).
const MODEL_SECRET: &str = crate::secrets::model::SECRET;

type Answer<T = Value> = Result<T, String>;

impl Broker {
    /// `delegate`: starts a sub-agent for the person the request speaks for, and hands it the
    /// brief.
    pub(super) async fn delegate(
        self: &Arc<Self>,
        request: &Envelope,
        principal: &Principal,
        body: &Value,
    ) -> Answer {
        let speaker = principal
            .person()
            .ok_or("a sub-agent works for a person, and this request speaks for none")?
            .clone();
        let parent = request.from.clone();
        // One at a time, from choosing the name to the registry's entry.
        let _making = self.delegating.lock().await;
        let registry = self.registry().await;
        let depth = match registry.actors.get(parent.as_str()) {
            _ if parent.as_str() == "agent" => 0,
            Some(entry) => match &entry.subagent {
                Some(subagent) => subagent.depth,
                None => return Err("only the agent and its sub-agents delegate".into()),
            },
            None => return Err("only the agent and its sub-agents delegate".into()),
        };
        if depth >= MAX_DEPTH {
            return Err(format!(
                "a sub-agent {MAX_DEPTH} deep does not delegate further; do this part yourself"
            ));
        }
        let running = (registry.actors.values())
            .filter(|entry| {
                entry
                    .subagent
                    .as_ref()
                    .is_some_and(|s| s.parent == parent.as_str())
            })
            .count();
        if running >= MAX_AT_ONCE {
            return Err(format!(
                "{parent} has {running} sub-agents already, the most at once; wait for one to \
                 report"
            ));
        }
        let Some(version) = registry.actors.get(parent.as_str()).map(|e| e.version) else {
            return Err(format!("{parent} is not in the registry"));
        };
        let id = (1..)
            .map(|n| format!("{parent}-s{n}"))
            .find(|id| !registry.actors.contains_key(id))
            .expect("a free number");
        drop(registry);
        let id = ActorId::parse(&id).map_err(|e| {
            format!("a sub-agent of {parent} would be named `{id}`, which is no actor id: {e}")
        })?;
        let brief = string_field(body, "brief")?;
        if brief.trim().is_empty() || brief.len() > MAX_BRIEF_BYTES {
            return Err(format!(
                "`brief` must say what to do, in at most {MAX_BRIEF_BYTES} bytes"
            ));
        }
        let message = string_field(body, "message")?;
        if !message.starts_with(&format!("{parent}/")) || message.len() > 200 {
            return Err(format!(
                "`message` is the brief's id, `{parent}/` and the parent's own id for it"
            ));
        }
        let role = role_settings(body)?;
        let role_name = role["role"].as_str().unwrap_or_default().to_string();

        let wasm = self.world.version_dir(&parent, version).join("actor.wasm");
        let program = self
            .compile_file(&wasm)
            .await
            .map_err(|e| format!("version {version} of `{parent}` cannot run: {e}"))?;
        let candidate = Candidate {
            program: program.clone(),
            report: Value::Null,
            wasm_file: wasm.clone(),
            source: Some(self.world.version_dir(&parent, version).join("source")),
            meta: json!({
                "version": 1, "wasm": wasm,
                "subagent_of": {"actor": parent.as_str(), "version": version, "role": role_name},
                "requested_for": speaker.person.as_str(),
            }),
        };
        let settings = json!({
            "role": role, "parent": parent.as_str(), "depth": depth + 1,
            "person": speaker.person.as_str(), "tier": speaker.tier.as_str(), "brief": message,
        });
        let config = self.subagent_config(&parent, &role)?;
        self.store_version(&id, 1, &candidate)
            .await
            .and_then(|()| self.world.create_actor_dirs(&id))
            .and_then(|()| self.world.install_source(&id, 1))
            .and_then(|()| {
                let data = self.world.data_dir(&id);
                crate::fs::write_atomically(&data.join("config.json"), &config)?;
                // The owners' roles, for a sub-agent that delegates in turn.
                let roles = self.world.data_dir(&parent).join("roles");
                if roles.is_dir() {
                    crate::fs::copy_tree(&roles, &data.join("roles"))?;
                }
                let settings = serde_json::to_vec_pretty(&settings).expect("settings serialise");
                crate::fs::write_atomically(&data.join("role.json"), &settings)?;
                Ok(())
            })
            .map_err(|e| format!("cannot make sub-agent `{id}`: {e:#}"))?;
        let secrets = Secrets::new(&self.world);
        let granted = id.clone();
        tokio::task::spawn_blocking(move || secrets.grant(MODEL_SECRET, &granted, "broker"))
            .await
            .map_err(|e| format!("host bug: {e}"))?
            .map_err(|e| format!("sub-agent `{id}` cannot reach the model: {e:#}"))?;
        if let Some(cluster) = &self.cluster {
            cluster
                .shared
                .snapshot(&self.world, &id)
                .await
                .map_err(|e| format!("cannot share `{id}`'s files: {e:#}"))?;
        }
        let subagent = SubAgent {
            parent: parent.to_string(),
            depth: depth + 1,
            role: role_name.clone(),
        };
        self.start_new(&id, 1, speaker.person.to_string(), program, Some(subagent))
            .await?;
        let brief = Envelope {
            id: message.to_string(),
            from: parent.clone(),
            reply_to: None,
            speaker: Some(Speaker {
                person: speaker.person.clone(),
                tier: speaker.tier,
            }),
            schedule: None,
            trace: request.trace,
            body: serde_json::value::to_raw_value(&json!({"type": "text", "text": brief}))
                .expect("a body serialises"),
        };
        self.router.deliver_routed(id.clone(), Arc::new(brief));
        Ok(json!({
            "type": "delegated", "actor": id.as_str(), "role": role_name, "message": message,
            "depth": depth + 1,
        }))
    }

    /// The parent's model configuration for its sub-agent: its `config.json`, with the role's
    /// model when the role names one.
    fn subagent_config(&self, parent: &ActorId, role: &Value) -> Answer<Vec<u8>> {
        let path = self.world.data_dir(parent).join("config.json");
        let bytes = std::fs::read(&path)
            .map_err(|e| format!("{parent} has no model configuration to share: {e}"))?;
        let mut config: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{parent}'s config.json cannot be read: {e}"))?;
        if let Some(model) = role["model"].as_str() {
            config["model"] = json!(model);
        }
        Ok(serde_json::to_vec_pretty(&config).expect("a config serialises"))
    }

    /// `dismiss`: removes a sub-agent, asked by its parent once it has its report.
    pub(super) async fn dismiss(&self, request: &Envelope, body: &Value) -> Answer {
        let id = actor_field(body)?;
        let parent = (self.registry().await.actors.get(id.as_str()))
            .and_then(|entry| entry.subagent.as_ref().map(|s| s.parent.clone()));
        match parent {
            Some(parent) if parent == request.from.as_str() => {}
            Some(parent) => {
                return Err(format!(
                    "`{id}` is {parent}'s sub-agent; only {parent} dismisses it"
                ));
            }
            None => return Err(format!("`{id}` is no sub-agent")),
        }
        let mut removed = self.remove(body).await?;
        removed["type"] = json!("dismissed");
        Ok(removed)
    }
}

/// The role as the parent sends it (`role` and its settings, read from its file by the
/// agent), checked for shape.
fn role_settings(body: &Value) -> Answer {
    let role = body
        .get("role")
        .filter(|r| r.is_object())
        .ok_or("`role` must be the role's settings: {\"role\": name, \"prompt\", …}")?;
    let name = role["role"].as_str().unwrap_or_default();
    if name.is_empty() || name.len() > 40 {
        return Err("`role.role` must be the role's name".into());
    }
    match &role["prompt"] {
        Value::String(prompt) if prompt.len() <= MAX_PROMPT_BYTES => {}
        _ => {
            return Err(format!(
                "`role.prompt` must be the role's prompt, at most {MAX_PROMPT_BYTES} bytes"
            ));
        }
    }
    for list in ["tools", "deny_tools"] {
        match &role[list] {
            Value::Null => {}
            Value::Array(items) if items.iter().all(Value::is_string) => {}
            other => {
                return Err(format!(
                    "`role.{list}` must be a list of tool names, not {other}"
                ));
            }
        }
    }
    let budget = &role["budget_usd"];
    if !(budget.is_null() || budget.as_f64().is_some_and(|usd| usd > 0.0)) {
        return Err(format!(
            "`role.budget_usd` must be dollars above 0, not {budget}"
        ));
    }
    let minutes = &role["max_minutes"];
    if !(minutes.is_null() || minutes.as_u64().is_some_and(|m| m > 0)) {
        return Err(format!(
            "`role.max_minutes` must be whole minutes, not {minutes}"
        ));
    }
    if !(role["model"].is_null() || role["model"].is_string()) {
        return Err("`role.model` must be a model's name".into());
    }
    Ok(role.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_of_the_wrong_shape_is_refused_with_what_it_must_be() {
        let good = json!({"role": {"role": "scout", "prompt": "Look.", "tools": ["read_file"],
            "budget_usd": 0.5, "max_minutes": 3, "model": null}});
        assert_eq!(role_settings(&good).unwrap()["role"], "scout");
        let cases = [
            (json!({}), "`role` must be the role's settings"),
            (
                json!({"role": "scout"}),
                "`role` must be the role's settings",
            ),
            (
                json!({"role": {"prompt": "x"}}),
                "`role.role` must be the role's name",
            ),
            (json!({"role": {"role": "scout"}}), "`role.prompt` must be"),
            (
                json!({"role": {"role": "scout", "prompt": "x", "tools": "read_file"}}),
                "`role.tools` must be a list",
            ),
            (
                json!({"role": {"role": "scout", "prompt": "x", "deny_tools": [1]}}),
                "`role.deny_tools` must be a list",
            ),
            (
                json!({"role": {"role": "scout", "prompt": "x", "budget_usd": -1}}),
                "dollars above 0",
            ),
            (
                json!({"role": {"role": "scout", "prompt": "x", "max_minutes": 0}}),
                "whole minutes",
            ),
            (
                json!({"role": {"role": "scout", "prompt": "x", "model": 3}}),
                "a model's name",
            ),
        ];
        for (body, said) in cases {
            let refused = role_settings(&body).unwrap_err();
            assert!(refused.contains(said), "{body}: {refused}");
        }
    }
}
