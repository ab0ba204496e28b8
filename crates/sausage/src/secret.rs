//! `sausage secret …` and `sausage audit`: the world's secrets and the audit log (DESIGN §25),
//! whether the world runs or not. Whoever runs them has the world's folder, so acts as its
//! first owner; a value is read from a hidden prompt or stdin, never from an argument, and
//! never printed.

use std::io::{IsTerminal, Read};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use sausage_core::message::ActorId;
use sausage_core::people::{People, Tier};
use sausage_core::secrets::{NewSecret, Secrets, audit::Audit};
use sausage_core::world::World;

use crate::world_arg::WorldArg;

#[derive(Subcommand)]
pub enum SecretCommand {
    /// Set a secret (or replace its value): the value is read from a hidden prompt, or from
    /// stdin (`printf %s "$TOKEN" | sausage secret set gh --url https://api.github.com`).
    Set {
        /// Its name (letters, digits, `-`, `_`, `.`).
        name: String,
        /// The base URL it is for: granted actors' requests under it get the header.
        #[arg(long)]
        url: String,
        /// The header it goes in.
        #[arg(long, default_value = sausage_core::secrets::DEFAULT_HEADER)]
        header: String,
        /// How the header is written; `{}` is the value.
        #[arg(long, default_value = sausage_core::secrets::DEFAULT_FORMAT)]
        format: String,
        #[command(flatten)]
        world: WorldArg,
    },
    /// List the secrets: base URL, header, who set them, grants, last use; never a value.
    List {
        /// One JSON array, for programs.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        world: WorldArg,
    },
    /// Let an actor use a secret: its requests under the secret's URL get the header.
    Grant {
        name: String,
        actor: String,
        #[command(flatten)]
        world: WorldArg,
    },
    /// Take a secret back from an actor, from its next request on.
    Revoke {
        name: String,
        actor: String,
        #[command(flatten)]
        world: WorldArg,
    },
    /// Remove a secret and all its grants.
    Remove {
        name: String,
        #[command(flatten)]
        world: WorldArg,
    },
}

pub fn run(command: SecretCommand) -> Result<ExitCode> {
    match command {
        SecretCommand::Set {
            name,
            url,
            header,
            format,
            world,
        } => {
            let world = world.existing("secret set NAME --url URL")?;
            let new = NewSecret {
                name: &name,
                url: &url,
                header: Some(&header),
                format: Some(&format),
            };
            // Checked before the value is asked for.
            sausage_core::secrets::check_name(&name)?;
            sausage_core::secrets::check_url(&url)?;
            sausage_core::secrets::check_header(&header.to_ascii_lowercase())?;
            let value = read_value(&name)?;
            let replaced = Secrets::new(&world).set(&new, &value, &me(&world)?)?;
            let verb = if replaced { "Replaced" } else { "Set" };
            println!(
                "{verb} secret `{name}` for {url} (header `{header}`). Grant it to an actor: \
                 sausage secret grant {name} ACTOR"
            );
        }
        SecretCommand::List { json, world } => {
            let world = world.existing("secret list")?;
            let all = Secrets::new(&world).list()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else if all.is_empty() {
                println!("No secrets. Set one: sausage secret set NAME --url URL");
            } else {
                println!(
                    "{:<20} {:<36} {:<16} {:<10} {:<20} last use",
                    "name", "url", "header", "set by", "granted to"
                );
                for s in all {
                    let granted: Vec<&str> = s.grants.iter().map(|g| g.actor.as_str()).collect();
                    let last = s.last_use.map_or("never".to_string(), |u| {
                        format!(
                            "{} by {} ({})",
                            u["at"].as_str().unwrap_or("?"),
                            u["actor"].as_str().unwrap_or("?"),
                            u["status"]
                        )
                    });
                    let granted = if granted.is_empty() {
                        "nobody".to_string()
                    } else {
                        granted.join(",")
                    };
                    println!(
                        "{:<20} {:<36} {:<16} {:<10} {:<20} {last}",
                        s.name, s.url, s.header, s.set_by, granted
                    );
                }
            }
        }
        SecretCommand::Grant { name, actor, world } => {
            let world = world.existing("secret grant NAME ACTOR")?;
            let id = known_actor(&world, &actor)?;
            match Secrets::new(&world).grant(&name, &id, &me(&world)?)? {
                true => println!("Granted `{name}` to {actor}, from its next request on."),
                false => println!("`{name}` was granted to {actor} already."),
            }
        }
        SecretCommand::Revoke { name, actor, world } => {
            let world = world.existing("secret revoke NAME ACTOR")?;
            let id = ActorId::parse(&actor).map_err(|e| anyhow::anyhow!("{e}"))?;
            match Secrets::new(&world).revoke(&name, &id, &me(&world)?)? {
                true => println!("Revoked `{name}` from {actor}, from its next request on."),
                false => println!("`{name}` was not granted to {actor}; nothing changed."),
            }
        }
        SecretCommand::Remove { name, world } => {
            let world = world.existing("secret remove NAME")?;
            Secrets::new(&world).remove(&name, &me(&world)?)?;
            println!("Removed secret `{name}` and its grants.");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `sausage audit`: the audit log, one event a line, oldest first.
pub fn audit(world: &World, json: bool) -> Result<ExitCode> {
    let entries = Audit::new(world).read()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        println!("The audit log is empty: no secret was set, granted or used yet.");
    }
    for entry in entries {
        let text = |field: &str| entry[field].as_str().unwrap_or("").to_string();
        let what = match text("event").as_str() {
            "secret_set" => format!(
                "{} set secret {} for {}",
                text("by"),
                text("secret"),
                text("url")
            ),
            "secret_remove" => format!("{} removed secret {}", text("by"), text("secret")),
            "grant" => format!(
                "{} granted {} to {}",
                text("by"),
                text("secret"),
                text("actor")
            ),
            "revoke" => format!(
                "{} revoked {} from {}",
                text("by"),
                text("secret"),
                text("actor")
            ),
            "person_add" => format!(
                "{} added {} as {}",
                text("by"),
                text("person"),
                text("tier")
            ),
            "person_tier" => format!("{} made {} {}", text("by"), text("person"), text("tier")),
            "person_remove" => format!("{} removed {}", text("by"), text("person")),
            "use" => format!(
                "{} used {} for {}: {}",
                text("actor"),
                text("secret"),
                text("url"),
                entry["status"]
            ),
            "held" => format!(
                "{} asked ({}): {} [{}]",
                text("by"),
                text("id"),
                text("what"),
                text("action")
            ),
            "approved" | "denied" => format!(
                "{} {} {} ({}'s {})",
                text("by"),
                text("event"),
                text("id"),
                text("asked_by"),
                text("what")
            ),
            "expired" => format!("{} expired: {}", text("id"), text("what")),
            _ => serde_json::to_string(&entry)?,
        };
        println!("{}  {what}", text("at"));
    }
    Ok(ExitCode::SUCCESS)
}

/// Who acts: the folder's user, as the world's first owner.
pub fn me(world: &World) -> Result<String> {
    let people = People::new(world).list()?;
    Ok(people
        .into_iter()
        .find(|p| p.tier == Tier::Owner)
        .map_or_else(|| "owner".to_string(), |p| p.id))
}

fn known_actor(world: &World, actor: &str) -> Result<ActorId> {
    let id = ActorId::parse(actor).map_err(|e| anyhow::anyhow!("{e}"))?;
    let registry = world.load_registry()?;
    if !registry.actors.contains_key(actor) {
        let known: Vec<&str> = registry.actors.keys().map(String::as_str).collect();
        bail!(
            "no actor `{actor}` in this world; known: {}",
            known.join(", ")
        );
    }
    Ok(id)
}

/// The value: typed at a hidden prompt, or all of stdin without its last line break.
fn read_value(name: &str) -> Result<String> {
    let mut value = if std::io::stdin().is_terminal() {
        rpassword::prompt_password(format!("Value of secret `{name}` (not shown): "))
            .context("cannot read the value from the terminal")?
    } else {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the value from stdin (it must be UTF-8)")?;
        text
    };
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    Ok(value)
}

/// `sausage approvals [DIR] [--json]`: what waits for a decision, one a line, its id first
/// (decided at the console with `/approve ID`, `/deny ID`, or on the web page).
pub fn approvals(world: &World, json: bool) -> Result<ExitCode> {
    let waiting = sausage_core::approvals::Approvals::new(world).waiting()?;
    let shown: Vec<serde_json::Value> = waiting
        .iter()
        .map(sausage_core::broker::holds::shown)
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(ExitCode::SUCCESS);
    }
    let lines = sausage_core::console::render::approval_lines(&serde_json::json!({
        "approvals": shown
    }));
    println!("{}", lines.join("\n"));
    if !shown.is_empty() {
        println!("Decide at the console (/approve ID, /deny ID) or on the web page.");
    }
    Ok(ExitCode::SUCCESS)
}
