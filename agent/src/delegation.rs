//! Roles and sub-agents (DESIGN §26), what the turn needs of them: the roles a turn may
//! delegate to (`sausage_roles`, read from `/data/roles/` afresh each time), who may delegate
//! to which, what the broker's `delegate` request carries, and, in a sub-agent, its settings
//! (`/data/role.json`, written by the broker when it made it): its role, its parent, its depth
//! and the person it works for. A sub-agent's tools are its role's, less those that need a
//! person to answer.

use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

pub use sausage_roles::{Role, Roles};

use crate::message::Tier;

/// How deep sub-agents nest (the broker holds to it too).
pub const MAX_DEPTH: u8 = 2;

/// The tools that change nothing: a guest's turn delegates only to roles that use no others.
pub const READ_ONLY_TOOLS: &[&str] = &[
    "read_file",
    "list_dir",
    "search",
    "find_files",
    "plan",
    "note",
    "wait_for_messages",
];

/// Tools no sub-agent has: each needs a person to answer it, or is the agent's own (goals,
/// memory), and a sub-agent reports only to its parent.
pub const NEVER_IN_SUBAGENTS: &[&str] = &[
    "ask",
    "request_secret",
    "request_grant",
    "goal_status",
    "remember",
    "forget",
];

/// A sub-agent's settings, as the broker wrote them into its `/data/role.json`.
#[derive(Clone, Debug, Deserialize)]
pub struct SubAgent {
    pub role: RoleSettings,
    /// The agent or sub-agent that delegated to it.
    pub parent: String,
    pub depth: u8,
    pub person: String,
}

/// The role as the parent read it from its file and sent it.
#[derive(Clone, Debug, Deserialize)]
pub struct RoleSettings {
    pub role: String,
    pub prompt: String,
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    #[serde(default)]
    pub deny_tools: Vec<String>,
    /// The most it may spend (its parent dismisses it past its role's `max_minutes`).
    #[serde(default)]
    pub budget_usd: Option<f64>,
}

impl SubAgent {
    /// The settings in `data`, when this agent is a sub-agent.
    pub fn load(data: &Path) -> Option<SubAgent> {
        let bytes = std::fs::read(data.join("role.json")).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(settings) => Some(settings),
            Err(e) => {
                eprintln!("agent: /data/role.json cannot be read ({e}); running as the agent");
                None
            }
        }
    }

    /// Whether its role offers `tool`.
    pub fn offers(&self, tool: &str) -> bool {
        if NEVER_IN_SUBAGENTS.contains(&tool) || (tool == "delegate" && self.depth >= MAX_DEPTH) {
            return false;
        }
        let role = &self.role;
        let listed = role
            .tools
            .as_ref()
            .is_none_or(|tools| tools.iter().any(|t| t == tool));
        listed && !role.deny_tools.iter().any(|t| t == tool)
    }

    /// What the model is told of its role, after the agent's own instructions.
    pub fn prompt_section(&self) -> String {
        format!(
            "\n\n# You are a sub-agent: the role `{}`\n\nThe agent (`{}`) delegated one piece of \
             work to you, for {}; you run as your own actor, with your own files, at most that \
             person's rights, and you report to the agent alone: your final answer is your \
             report, and nobody else reads it. Nobody can answer a question from you: decide, \
             and say in the report what you assumed.\n\n{}\n",
            self.role.role, self.parent, self.person, self.role.prompt
        )
    }
}

/// Whether a turn of a person of `tier`, in an agent `depth` deep, may delegate to `role`.
pub fn may_delegate(role: &Role, tier: Tier, depth: u8) -> Result<(), String> {
    if depth >= MAX_DEPTH {
        return Err(format!(
            "error: a sub-agent {MAX_DEPTH} deep does not delegate further; do this part yourself"
        ));
    }
    if tier == Tier::Guest {
        let changes = match &role.tools {
            None => Some("every tool of its person".to_string()),
            Some(tools) => {
                let writing: Vec<&str> = (tools.iter())
                    .map(String::as_str)
                    .filter(|t| {
                        !READ_ONLY_TOOLS.contains(t) && !role.deny_tools.iter().any(|d| d == t)
                    })
                    .collect();
                (!writing.is_empty()).then(|| writing.join(", "))
            }
        };
        if let Some(changes) = changes {
            return Err(format!(
                "refused: this turn is a guest's, and the role `{}` uses tools a guest may not \
                 ({changes}); delegate to a role that only reads, such as scout or reviewer",
                role.name
            ));
        }
    }
    Ok(())
}

/// The role as the broker's `delegate` request carries it, with the budget this sub-agent may
/// spend.
pub fn role_body(role: &Role, budget_usd: Option<f64>) -> Value {
    json!({
        "role": role.name, "prompt": role.prompt, "tools": role.tools,
        "deny_tools": role.deny_tools, "model": role.model, "budget_usd": budget_usd,
        "max_minutes": role.max_minutes,
    })
}

/// The roles offered in the model's instructions, one a line.
pub fn roles_section(roles: &Roles) -> String {
    let mut section = String::from(
        "\n\n# Roles you may delegate to (the `delegate` tool)\n\nEach runs as a sub-agent with \
         its own conversation; several delegations in one step run at once. Give each a brief \
         that stands alone: it sees nothing of this conversation.\n",
    );
    for role in &roles.roles {
        section.push_str(&format!("- {}: {}\n", role.name, role.description));
    }
    section
}

/// A sub-agent's report as the tool's output: its answer, what it cost, and what it changed.
pub fn report_words(actor: &str, role: &str, body: &Value) -> String {
    let text = body["text"].as_str().unwrap_or_default();
    let cost = match body["usage"]["cost_usd"].as_f64() {
        Some(usd) => format!("${usd:.4}"),
        None => "unknown".into(),
    };
    let stopped = match body["stopped"].as_str() {
        Some(why) => format!(" (it stopped: {why})"),
        None => String::new(),
    };
    let mut words = format!("{role} sub-agent {actor} reported{stopped}, cost {cost}:\n{text}");
    for (field, what) in [("files", "files changed"), ("actors", "actors changed")] {
        if let Some(list) = body["changed"][field].as_array().filter(|l| !l.is_empty()) {
            let names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
            words.push_str(&format!("\n{what}: {}", names.join(", ")));
        }
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(tools: Option<Vec<&str>>, depth: u8) -> SubAgent {
        SubAgent {
            role: RoleSettings {
                role: "scout".into(),
                prompt: "Look.".into(),
                tools: tools.map(|t| t.into_iter().map(str::to_owned).collect()),
                deny_tools: vec!["search".into()],
                budget_usd: None,
            },
            parent: "agent".into(),
            depth,
            person: "ann".into(),
        }
    }

    #[test]
    fn a_sub_agent_has_its_roles_tools_and_never_those_a_person_answers() {
        let scout = settings(Some(vec!["read_file", "search", "ask"]), 1);
        assert!(scout.offers("read_file"));
        assert!(!scout.offers("search"), "denied");
        assert!(!scout.offers("ask"), "never in a sub-agent");
        assert!(!scout.offers("write_file"), "not its role's");
        let worker = settings(None, 1);
        assert!(worker.offers("write_file") && worker.offers("delegate"));
        assert!(!settings(None, 2).offers("delegate"), "two deep");
    }

    #[test]
    fn a_guest_delegates_only_to_roles_that_read_and_nobody_past_two_deep() {
        let roles = sausage_roles::built_in();
        let (worker, scout) = (&roles[0], &roles[1]);
        let refused = may_delegate(worker, Tier::Guest, 0).unwrap_err();
        assert!(refused.contains("every tool of its person"), "{refused}");
        assert!(may_delegate(scout, Tier::Guest, 0).is_ok());
        assert!(may_delegate(worker, Tier::Member, 1).is_ok());
        assert!(
            may_delegate(scout, Tier::Owner, 2)
                .unwrap_err()
                .contains("2 deep")
        );
    }

    #[test]
    fn a_report_says_what_it_cost_and_changed() {
        let body = json!({"type": "text", "text": "Found it.", "usage": {"cost_usd": 0.0123},
            "changed": {"files": ["/data/a.rs"], "actors": []}});
        let words = report_words("agent-s1", "scout", &body);
        assert!(words.starts_with("scout sub-agent agent-s1 reported, cost $0.0123:\nFound it."));
        assert!(words.ends_with("files changed: /data/a.rs"), "{words}");
    }
}
