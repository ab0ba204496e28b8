//! Checkpoints and their restoring (DESIGN §21): before an agent turn first changes an actor
//! (spawns, upgrades, rolls back, removes or forks it), the agent asks `checkpoint`, which keeps
//! the actor's installed version and a hard-linked copy of its files (or that it did not exist)
//! in `broker/checkpoints/<turn>/<actor>/`; a rewind asks `restore` for each, which puts that
//! version and those files back (as a rollback does, snapshotting the present first) or removes
//! an actor the turn made.
//!
//! Checkpoints are kept 7 days ([`CHECKPOINT_DAYS`]); the agent bounds how many each
//! conversation keeps.
//! Invariant: a checkpoint is whole or absent: its `entry.json` is written last.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::Broker;
use super::requests::{Asked, actor_field, string_field};

/// How long a checkpoint is kept.
pub const CHECKPOINT_DAYS: u64 = 7;

/// The longest turn id a checkpoint takes.
const MAX_TURN_CHARS: usize = 200;

const ENTRY: &str = "entry.json";

impl Broker {
    /// `checkpoint`: `actor` as it is now, kept for `turn`. A second checkpoint of the same
    /// turn and actor keeps the first (the state before the turn's first change).
    pub(super) async fn checkpoint(&self, body: &Value) -> Result<Value, String> {
        let turn = turn_field(body)?;
        let id = actor_field(body)?;
        let dir = self.world.checkpoint_dir(turn, &id);
        let reply = |recorded: &Value| {
            json!({
                "type": "checkpointed", "turn": turn, "actor": id.as_str(),
                "version": recorded["version"], "existed": recorded["absent"] != true,
            })
        };
        if let Some(recorded) = read_entry(&dir) {
            return Ok(reply(&recorded));
        }
        let entry = self.registry().await.actors.get(id.as_str()).cloned();
        let recorded = match entry {
            None if id.is_native() => {
                return Err(format!(
                    "`{id}` is a native actor; it has no versions to keep"
                ));
            }
            None => json!({"absent": true}),
            Some(entry) => {
                self.known_wasm_actor(&id).await?;
                json!({"version": entry.version, "running": entry.running})
            }
        };
        let (world, id2, dir2, recorded2) = (
            self.world.clone(),
            id.clone(),
            dir.clone(),
            recorded.clone(),
        );
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            prune(&world.checkpoints_dir());
            if dir2.exists() {
                std::fs::remove_dir_all(&dir2)?;
            }
            std::fs::create_dir_all(&dir2)?;
            if recorded2["absent"] != true {
                for (part, from) in [
                    ("data", world.data_dir(&id2)),
                    ("public", world.public_dir(&id2)),
                ] {
                    if from.is_dir() {
                        crate::fs::link_tree(&from, &dir2.join(part))?;
                    } else {
                        std::fs::create_dir_all(dir2.join(part))?;
                    }
                }
            }
            crate::fs::write_atomically(&dir2.join(ENTRY), recorded2.to_string().as_bytes())
        })
        .await
        .map_err(|e| format!("host bug: the checkpoint failed: {e}"))?
        .map_err(|e| format!("cannot keep a checkpoint of `{id}`: {e}"))?;
        Ok(reply(&recorded))
    }

    /// `restore`: `actor` as the checkpoint of `turn` keeps it: its version and files back, or
    /// removed when the turn made it.
    pub(super) async fn restore(&self, body: &Value) -> Result<Value, String> {
        let turn = turn_field(body)?;
        let id = actor_field(body)?;
        let dir = self.world.checkpoint_dir(turn, &id);
        let Some(recorded) = read_entry(&dir) else {
            return Err(format!(
                "no checkpoint of `{id}` for turn `{turn}`: the turn did not change it, or the \
                 checkpoint is older than {CHECKPOINT_DAYS} days"
            ));
        };
        let exists = self.registry().await.actors.contains_key(id.as_str());
        if recorded["absent"] == true {
            if !exists {
                return Ok(
                    json!({"type": "restored", "turn": turn, "actor": id.as_str(), "removed": false}),
                );
            }
            let removed = self.remove(&json!({"actor": id.as_str()})).await?;
            return Ok(json!({
                "type": "restored", "turn": turn, "actor": id.as_str(), "removed": true,
                "archive": removed["archive"],
            }));
        }
        if !exists {
            return Err(format!(
                "`{id}` was removed after turn `{turn}`; its folders are in archive/, and a \
                 spawn of its version brings it back"
            ));
        }
        let version = recorded["version"]
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| format!("the checkpoint of `{id}` for turn `{turn}` is unreadable"))?;
        let rolled = self
            .roll_back(&id, Some(version), Some(&dir), Asked::ByPrincipal)
            .await?;
        Ok(json!({
            "type": "restored", "turn": turn, "actor": id.as_str(), "version": version,
            "from": rolled["from"],
        }))
    }
}

fn turn_field(body: &Value) -> Result<&str, String> {
    let turn = string_field(body, "turn")?;
    if turn.is_empty() || turn.chars().count() > MAX_TURN_CHARS {
        return Err(format!(
            "`turn` must be the id of the message that started the turn (1 to {MAX_TURN_CHARS} \
             characters)"
        ));
    }
    Ok(turn)
}

fn read_entry(dir: &Path) -> Option<Value> {
    let bytes = std::fs::read(dir.join(ENTRY)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Removes the checkpoints older than [`CHECKPOINT_DAYS`].
fn prune(checkpoints: &Path) {
    let limit = Duration::from_secs(CHECKPOINT_DAYS * 24 * 3600);
    let Ok(turns) = std::fs::read_dir(checkpoints) else {
        return;
    };
    for turn in turns.flatten() {
        let old = turn
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age > limit);
        if old && let Err(e) = std::fs::remove_dir_all(turn.path()) {
            tracing::warn!(
                "{}: cannot remove an old checkpoint ({e})",
                turn.path().display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::message::ActorId;
    use crate::world::World;

    #[test]
    fn a_turn_id_names_one_folder_of_its_own() {
        let world = World::new("/w");
        let a = ActorId::parse("a").unwrap();
        let dir = |turn: &str| world.checkpoint_dir(turn, &a);
        assert_eq!(
            dir("m-12"),
            std::path::Path::new("/w/broker/checkpoints/m-12/a")
        );
        assert_eq!(
            dir("web/x.1"),
            std::path::Path::new("/w/broker/checkpoints/web%2Fx.1/a")
        );
        assert_eq!(
            dir(".."),
            std::path::Path::new("/w/broker/checkpoints/%2E./a")
        );
        assert_eq!(
            dir("../etc"),
            std::path::Path::new("/w/broker/checkpoints/%2E.%2Fetc/a")
        );
    }
}
