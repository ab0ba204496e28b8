//! `sausage status` and `sausage metrics token` (DESIGN §22). `status` asks the running host
//! for its table (`GET /status` at the web address the host recorded, with the token it made
//! for this machine at start) and prints it as `/list` does at a terminal; when the world does
//! not run, it prints what the world's files say.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};

use sausage_core::console::render::actors_table;
use sausage_core::people::readers;
use sausage_core::world::World;

/// How long the running host may take to answer.
const PATIENCE: Duration = Duration::from_secs(10);

pub fn print(world: &World) -> Result<ExitCode> {
    let list = match ask_running(world) {
        Some(list) => list,
        None if world.is_running() => {
            println!(
                "{} runs, but its web console does not answer (run without --no-web to see \
                 queued messages and memory here); from its files:",
                world.root().display()
            );
            from_files(world, true)?
        }
        None => {
            println!("{} is not running; from its files:", world.root().display());
            from_files(world, false)?
        }
    };
    for line in actors_table(&list) {
        println!("{line}");
    }
    let waiting = sausage_core::approvals::Approvals::new(world)
        .waiting()
        .map_or(0, |w| w.len());
    if waiting > 0 {
        println!("{waiting} waiting for approval: `sausage approvals` lists them");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn metrics_token(world: &World) -> Result<ExitCode> {
    let token = readers::new_metrics_token(world)?;
    let address = std::fs::read_to_string(world.web_address_path())
        .map(|a| a.trim().to_string())
        .unwrap_or_else(|_| sausage_core::web::DEFAULT_ADDR.into());
    println!("{token}");
    eprintln!(
        "sausage: scrape http://{address}/metrics with `Authorization: Bearer <this token>`; \
         any earlier metrics token no longer works"
    );
    Ok(ExitCode::SUCCESS)
}

/// The running host's `list`, if it runs and answers.
fn ask_running(world: &World) -> Option<Value> {
    let address = std::fs::read_to_string(world.web_address_path()).ok()?;
    let token = readers::local_token(world).ok()?;
    let client = reqwest::blocking::Client::builder()
        .timeout(PATIENCE)
        .build()
        .ok()?;
    let response = client
        .get(format!("http://{}/status", address.trim()))
        .bearer_auth(token)
        .send()
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    serde_json::from_slice(&response.bytes().ok()?).ok()
}

/// The table as the world's files say: the registry and each actor's `status.json` (whose state
/// counts only while the world runs).
fn from_files(world: &World, running: bool) -> Result<Value> {
    let registry = world.load_registry()?;
    let routes = |id: &str| -> Vec<&str> {
        (registry.routes.iter())
            .filter(|(_, route)| route.actor == id)
            .map(|(path, _)| path.as_str())
            .collect()
    };
    let actors: Vec<Value> = registry
        .actors
        .iter()
        .map(|(id, entry)| {
            let status = sausage_core::message::ActorId::parse(id)
                .ok()
                .and_then(|id| world.read_status(&id))
                .unwrap_or_default();
            json!({
                "id": id, "kind": "wasm", "version": entry.version, "owner": entry.owner,
                "state": if running { json!(status.state) } else { json!("stopped") },
                "restarts": status.restarts, "routes": routes(id),
                "subagent": entry.subagent.as_ref().map(|s| {
                    json!({"parent": s.parent, "role": s.role, "depth": s.depth})
                }),
            })
        })
        .collect();
    Ok(json!({"type": "actors", "actors": actors}))
}
