//! `sausage roles [DIR] [--json]`: the roles the agent's sub-agents may take (DESIGN §26), the
//! built-in ones and the owners' files in the agent's data, as the agent reads them, with the
//! files it refuses and why.

use std::process::ExitCode;

use anyhow::Result;
use sausage_core::world::World;
use serde_json::json;

/// Where the owners' role files are: `roles/` in the agent's data.
pub fn folder(world: &World) -> std::path::PathBuf {
    world.root().join("private/agent/data/roles")
}

pub fn list(world: &World, as_json: bool) -> Result<ExitCode> {
    let folder = folder(world);
    let roles = sausage_roles::load(&folder);
    if as_json {
        let listed: Vec<_> = (roles.roles.iter())
            .map(|r| {
                json!({
                    "name": r.name, "description": r.description, "model": r.model,
                    "tools": r.tools, "deny_tools": r.deny_tools, "budget_usd": r.budget_usd,
                    "max_minutes": r.max_minutes, "source": r.source,
                })
            })
            .collect();
        let refused: Vec<_> = (roles.refused.iter())
            .map(|(name, p)| {
                json!({"name": name, "file": p.file, "line": p.line, "column": p.column,
                       "message": p.message})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"roles": listed, "refused": refused}))?
        );
    } else {
        for role in &roles.roles {
            let tools = match &role.tools {
                None => "its person's tools".to_string(),
                Some(tools) => tools.join(", "),
            };
            let mut limits = Vec::new();
            if let Some(model) = &role.model {
                limits.push(format!("model {model}"));
            }
            if !role.deny_tools.is_empty() {
                limits.push(format!("never {}", role.deny_tools.join(", ")));
            }
            if let Some(usd) = role.budget_usd {
                limits.push(format!("up to ${usd:.2}"));
            }
            if let Some(minutes) = role.max_minutes {
                limits.push(format!("up to {minutes} min"));
            }
            println!("{}  {}", role.name, role.description);
            println!("    tools: {tools}");
            if !limits.is_empty() {
                println!("    {}", limits.join("; "));
            }
            println!("    from {}", role.source);
        }
        for (_, problem) in &roles.refused {
            println!("refused: {problem}");
        }
        println!(
            "Add or change a role as {}/<name>.md (front matter, then its prompt); the agent \
             reads it at its next delegation.",
            folder.display()
        );
    }
    Ok(match roles.refused.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}
