//! The requests the broker answers (DESIGN §3): parsing, checks, and one function per request.
//!
//! Every request gets exactly one reply to its sender. A failure is an `error` reply whose
//! `reason` says what is wrong and what to do; it never changes anything on disk.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{Broker, candidate, copy_tree, requester};
use crate::message::{ActorId, Envelope, Outgoing};
use crate::world::ActorEntry;

/// The request types, as an unknown type's error lists them.
pub const REQUESTS: [&str; 6] = ["spawn", "stop", "start", "subscribe", "unsubscribe", "list"];

/// A request failed: the reason goes back to the requester.
type Answer = Result<Value, String>;

impl Broker {
    /// Answers one request; the reply is a message to the requester with `reply_to` set.
    pub(super) async fn answer(self: Arc<Self>, request: Arc<Envelope>) {
        let body = request.body_value();
        let kind = body.get("type").and_then(Value::as_str).unwrap_or("");
        let answer = match kind {
            "spawn" => self.spawn(&request, &body).await,
            "stop" => self.stop(&body).await,
            "start" => self.start_actor(&body).await,
            "subscribe" => self.subscribe(&request, &body, true).await,
            "unsubscribe" => self.subscribe(&request, &body, false).await,
            "list" => Ok(self.list().await),
            "" => Err(format!(
                "a request needs a string `type`; known requests: {}",
                REQUESTS.join(", ")
            )),
            "undeliverable" | "shutdown" => return,
            other => Err(format!(
                "unknown request `{other}`; known requests: {}",
                REQUESTS.join(", ")
            )),
        };
        let reply = answer
            .unwrap_or_else(|reason| json!({"type": "error", "request": kind, "reason": reason}));
        let out = Outgoing::new(requester(&request), &reply).replying_to(Some(&request.id));
        self.send(&ActorId::broker(), out).await;
    }

    /// `spawn`: compile, test on scratch copies, then install as version 1 and start.
    async fn spawn(&self, request: &Envelope, body: &Value) -> Answer {
        let id = actor_field(body)?;
        if id.is_native() {
            return Err(format!(
                "`{id}` is a native actor's id; choose another name"
            ));
        }
        let lock = self.operation_lock(&id);
        let _held = lock.lock().await;
        if self.registry().await.actors.contains_key(id.as_str()) {
            return Err(format!(
                "actor `{id}` already exists; send `upgrade` to install a new version"
            ));
        }
        let wasm_path = string_field(body, "wasm")?;
        let wasm_file = self.world.resolve_request_path(&request.from, wasm_path)?;
        let source = match body.get("source") {
            None | Some(Value::Null) => None,
            Some(Value::String(path)) => {
                let dir = self.world.resolve_request_path(&request.from, path)?;
                if !dir.is_dir() {
                    return Err(format!("source `{path}` is not a folder"));
                }
                Some(dir)
            }
            Some(_) => return Err("`source` must be a string path to a folder".into()),
        };
        let built_by = optional_string(body, "built_by")?;
        let bytes =
            std::fs::read(&wasm_file).map_err(|e| format!("cannot read `{wasm_path}`: {e}"))?;
        let runtime = self.runtime.clone();
        let program = tokio::task::spawn_blocking(move || runtime.compile(&bytes))
            .await
            .map_err(|e| format!("host bug: compiling failed: {e}"))?
            .map_err(|e| format!("`{wasm_path}`: {e:#}"))?;

        let version = 1;
        let report = candidate::smoke_test(&self.runtime, &self.world, &id, version, &program)
            .await
            .map_err(|reason| format!("version {version} of `{id}` was rejected: {reason}"))?;

        self.install(
            &id,
            version,
            &wasm_file,
            source.as_deref(),
            request,
            wasm_path,
            body,
            built_by,
        )
        .map_err(|e| format!("cannot install `{id}`: {e:#}"))?;
        self.update_registry(|registry| {
            registry.actors.insert(
                id.to_string(),
                ActorEntry {
                    version,
                    next_version: version + 1,
                    running: true,
                },
            );
        })
        .await
        .map_err(|e| format!("{e:#}"))?;
        self.supervise(&id, version, program, true);
        Ok(json!({"type": "spawned", "actor": id.as_str(), "version": version, "tests": report}))
    }

    /// Writes a version into the version store and its source into `actor/<id>/source`.
    #[allow(clippy::too_many_arguments)]
    fn install(
        &self,
        id: &ActorId,
        version: u32,
        wasm_file: &Path,
        source: Option<&Path>,
        request: &Envelope,
        wasm_as_given: &str,
        body: &Value,
        built_by: Option<&str>,
    ) -> anyhow::Result<()> {
        let dir = self.world.version_dir(id, version);
        std::fs::create_dir_all(&dir)?;
        std::fs::copy(wasm_file, dir.join("actor.wasm"))?;
        let version_source = dir.join("source");
        match source {
            Some(source) => copy_tree(source, &version_source)?,
            None => std::fs::create_dir_all(&version_source)?,
        }
        let meta = json!({
            "version": version,
            "wasm": wasm_as_given,
            "source": body.get("source"),
            "built_by": built_by,
            "requested_by": request.from.as_str(),
            "time": now_rfc3339(),
        });
        crate::fs::write_atomically(
            &dir.join("meta.json"),
            &serde_json::to_vec_pretty(&meta).expect("meta serialises"),
        )?;
        self.world.create_actor_dirs(id)?;
        let live_source = self.world.source_dir(id);
        if live_source.exists() {
            std::fs::remove_dir_all(&live_source)?;
        }
        copy_tree(&version_source, &live_source)?;
        Ok(())
    }

    async fn stop(&self, body: &Value) -> Answer {
        let id = actor_field(body)?;
        let lock = self.operation_lock(&id);
        let _held = lock.lock().await;
        let handle = self.known_wasm_actor(&id).await?;
        self.set_running(&id, false).await?;
        let exit = handle.stop().await;
        Ok(json!({
            "type": "stopped",
            "actor": id.as_str(),
            "exit": exit.map(|e| e.to_string()),
        }))
    }

    async fn start_actor(&self, body: &Value) -> Answer {
        let id = actor_field(body)?;
        let lock = self.operation_lock(&id);
        let _held = lock.lock().await;
        let handle = self.known_wasm_actor(&id).await?;
        self.set_running(&id, true).await?;
        handle.start().await;
        Ok(json!({"type": "started", "actor": id.as_str()}))
    }

    async fn set_running(&self, id: &ActorId, running: bool) -> Result<(), String> {
        self.update_registry(|registry| {
            if let Some(entry) = registry.actors.get_mut(id.as_str()) {
                entry.running = running;
            }
        })
        .await
        .map_err(|e| format!("{e:#}"))
    }

    async fn known_wasm_actor(&self, id: &ActorId) -> Result<super::ActorHandle, String> {
        if let Some(handle) = self.handle(id) {
            return Ok(handle);
        }
        let known = self.known_actors().await;
        if known.get(id.as_str()) == Some(&"native") {
            return Err(format!(
                "`{id}` is a native actor; it cannot be stopped or started"
            ));
        }
        let wasm: Vec<&str> = known
            .iter()
            .filter(|(_, kind)| **kind == "wasm")
            .map(|(id, _)| id.as_str())
            .collect();
        Err(format!(
            "no actor `{id}`; WASM actors: {}",
            if wasm.is_empty() {
                "none yet".into()
            } else {
                wasm.join(", ")
            }
        ))
    }

    /// `subscribe`/`unsubscribe`: the sender (un)subscribes to what `actor` publishes.
    async fn subscribe(&self, request: &Envelope, body: &Value, on: bool) -> Answer {
        let publisher = actor_field(body)?;
        let known = self.known_actors().await;
        if on && !known.contains_key(publisher.as_str()) {
            let names: Vec<&str> = known.keys().map(String::as_str).collect();
            return Err(format!(
                "no actor `{publisher}` to subscribe to; known actors: {}",
                names.join(", ")
            ));
        }
        let subscriber = request.from.to_string();
        self.update_registry(|registry| {
            let subscribers = registry
                .subscriptions
                .entry(publisher.to_string())
                .or_default();
            subscribers.retain(|s| *s != subscriber);
            if on {
                subscribers.push(subscriber);
            } else if subscribers.is_empty() {
                registry.subscriptions.remove(publisher.as_str());
            }
        })
        .await
        .map_err(|e| format!("{e:#}"))?;
        let kind = if on { "subscribed" } else { "unsubscribed" };
        Ok(json!({"type": kind, "actor": publisher.as_str()}))
    }

    /// `list`: every actor with kind, version, running, state, restarts and the messages queued
    /// in its mailbox; and the subscriptions.
    async fn list(&self) -> Value {
        let registry = self.registry().await;
        let mut actors = Vec::new();
        for (id, kind) in self.known_actors().await {
            let actor = ActorId::parse(&id).expect("known ids are valid");
            let status = self.world.read_status(&actor).unwrap_or_default();
            let entry = registry.actors.get(&id);
            actors.push(json!({
                "id": id,
                "kind": kind,
                "version": entry.map(|e| e.version),
                "running": entry.is_none_or(|e| e.running),
                "state": if kind == "native" { json!("running") } else { json!(status.state) },
                "restarts": status.restarts,
                "queued": self.router.mailbox(&actor).map_or(0, |m| m.len()),
            }));
        }
        json!({"type": "actors", "actors": actors, "subscriptions": registry.subscriptions})
    }
}

fn string_field<'a>(body: &'a Value, name: &str) -> Result<&'a str, String> {
    match body.get(name) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(format!("missing field `{name}` (a string)")),
        Some(other) => Err(format!("field `{name}` must be a string, not {other}")),
    }
}

fn optional_string<'a>(body: &'a Value, name: &str) -> Result<Option<&'a str>, String> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => string_field(body, name).map(Some),
    }
}

fn actor_field(body: &Value) -> Result<ActorId, String> {
    ActorId::parse(string_field(body, "actor")?)
}

/// The current time as RFC 3339 UTC, without a date library.
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm), valid for every date after 1970.
    let z = days as i64 + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
