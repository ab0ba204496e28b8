//! The actors: `GET /api/actors` (the table the sampler also sends to open pages), `GET
//! /api/actors/{id}` (one actor's status, versions and files) and `POST
//! /api/actors/{id}/stop|start|rollback`.
//! Invariant: an action is a request to the broker spoken by the person, sent only after their
//! tier allows it (`tier_allows`; the broker checks again), and never on a native actor.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::files::list_files;
use super::{App, Person, Refusal, ask, object, refuse, speaker};
use crate::message::ActorId;

/// How long an action on an actor (a rollback compiles) may take before the call gives up.
const ACTION_PATIENCE: Duration = Duration::from_secs(120);

/// `GET /api/actors`.
pub(super) async fn actors(State(app): State<Arc<App>>) -> Json<Value> {
    Json(actors_table(&app).await)
}

/// Every actor: `{"actors": [{"id","kind","state","version","restarts","last_exit","queued",
/// "in_per_sec","out_per_sec","subagent"?}]}`, WASM actors from the registry and their `status.json` (read
/// on the blocking pool), natives as running.
pub async fn actors_table(app: &App) -> Value {
    let known = app.broker.known_actors().await;
    let registry = app.broker.registry().await;
    let rates = app.lock_rates().per_actor();
    let world = app.broker.world.clone();
    let wasm: Vec<ActorId> = known
        .iter()
        .filter(|(_, kind)| **kind != "native")
        .filter_map(|(id, _)| ActorId::parse(id).ok())
        .collect();
    let mut statuses: HashMap<ActorId, _> = tokio::task::spawn_blocking(move || {
        wasm.into_iter()
            .map(|actor| {
                let status = world.read_status(&actor).unwrap_or_default();
                (actor, status)
            })
            .collect()
    })
    .await
    .unwrap_or_default();
    let rows: Vec<Value> = known
        .into_iter()
        .map(|(id, kind)| {
            let actor = ActorId::parse(&id).expect("known actors have valid ids");
            let traffic = rates.get(&actor).copied().unwrap_or_default();
            let mut row = json!({
                "id": id, "kind": kind, "queued": traffic.queued,
                "in_per_sec": round(traffic.in_per_sec), "out_per_sec": round(traffic.out_per_sec),
            });
            if kind == "native" {
                row["state"] = json!("running");
            } else {
                let status = statuses.remove(&actor).unwrap_or_default();
                row["state"] = json!(status.state);
                row["version"] = json!(status.version);
                row["restarts"] = json!(status.restarts);
                row["last_exit"] = json!(status.last_exit);
            }
            // A sub-agent says whose and in which role (DESIGN §26).
            if let Some(sub) = registry.actors.get(&id).and_then(|e| e.subagent.as_ref()) {
                row["subagent"] =
                    json!({"parent": sub.parent, "role": sub.role, "depth": sub.depth});
            }
            if let Some(cluster) = &app.broker.cluster {
                // Another host's actor: what that host's heartbeat said of it.
                let here = cluster.placement.host();
                match cluster.placement.placement_of(&id) {
                    Some((host, state)) if host != here => {
                        row["state"] = json!(state.unwrap_or_else(|| "starting".into()));
                        row["version"] = json!(registry.actors.get(&id).map(|e| e.version));
                        row["restarts"] = json!(null);
                        row["last_exit"] = json!(null);
                        row["host"] = json!(host);
                    }
                    Some((host, _)) => row["host"] = json!(host),
                    None if kind == "native" => row["host"] = json!(here),
                    None => {}
                }
            }
            row
        })
        .collect();
    json!({ "actors": rows })
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The actor `id` names, or 404 when the world has none by that name.
pub(super) async fn known(app: &App, id: &str) -> Result<(ActorId, &'static str), Refusal> {
    let not_found = || {
        Refusal(
            StatusCode::NOT_FOUND,
            format!("there is no actor `{id}` in this world"),
        )
    };
    let actor = ActorId::parse(id).map_err(|_| not_found())?;
    let kind = *app
        .broker
        .known_actors()
        .await
        .get(id)
        .ok_or_else(not_found)?;
    Ok((actor, kind))
}

/// `GET /api/actors/{id}`: `owner` (who created it), `status`, `versions` (each version's
/// `meta.json` with `current`, and the report of the shadow run that let it in), its HTTP
/// `routes` (each with its `url` on this host's public address),
/// the files of `public` and `source` (paths), and `log_size`.
pub(super) async fn actor(State(app): State<Arc<App>>, UrlPath(id): UrlPath<String>) -> Response {
    let (actor, kind) = match known(&app, &id).await {
        Ok(known) => known,
        Err(refused) => return refused.into_response(),
    };
    let registry = app.broker.registry().await;
    let owner = (registry.actors.get(actor.as_str())).and_then(|entry| entry.owner.clone());
    let routes: Vec<Value> = (registry.routes.iter())
        .filter(|(_, route)| route.actor == actor.as_str())
        .map(|(path, route)| {
            let mut route = route.to_json(path);
            route["url"] = json!(app.broker.route_url(path));
            route
        })
        .collect();
    let world = app.broker.world.clone();
    let details = tokio::task::spawn_blocking(move || {
        let status = world.read_status(&actor);
        let current = status.as_ref().map(|s| s.version);
        let versions: Vec<Value> = world
            .versions(&actor)
            .into_iter()
            .rev()
            .map(|v| {
                let meta = std::fs::read(world.version_dir(&actor, v).join("meta.json"))
                    .ok()
                    .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
                    .unwrap_or_else(|| json!({}));
                json!({
                    "version": v, "current": Some(v) == current,
                    "built_by": meta["built_by"], "requested_by": meta["requested_by"],
                    "requested_for": meta["requested_for"],
                    "time": meta["time"], "shadow": meta["shadow"],
                })
            })
            .collect();
        json!({
            "id": actor.as_str(), "kind": kind, "owner": owner, "status": status,
            "versions": versions, "routes": routes,
            "public": list_files(&world.public_dir(&actor)),
            "source": list_files(&world.source_dir(&actor)),
            "log_size": std::fs::metadata(world.log_path(&actor)).map_or(0, |m| m.len()),
        })
    })
    .await;
    match details {
        Ok(details) => Json(details).into_response(),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// 403 unless `person`'s tier allows the broker request `kind` on `actor`
/// (`people::tiers`); the broker checks again when the request arrives.
async fn tier_allows(app: &App, person: &Person, kind: &str, actor: &str) -> Result<(), Refusal> {
    app.broker
        .may_ask(&speaker(person), kind, Some(actor))
        .await
        .map_err(|why| Refusal(StatusCode::FORBIDDEN, why))
}

/// `POST /api/actors/{id}/stop|start|rollback` (rollback takes an optional `{"version"}`, older
/// or newer): the broker's reply, or 409 with its reason.
pub(super) async fn act(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    UrlPath((id, action)): UrlPath<(String, String)>,
    body: Bytes,
) -> Response {
    if !["stop", "start", "rollback"].contains(&action.as_str()) {
        return refuse(
            StatusCode::NOT_FOUND,
            &format!("no action `{action}`; actions are stop, start and rollback"),
        );
    }
    let (actor, kind) = match known(&app, &id).await {
        Ok(known) => known,
        Err(refused) => return refused.into_response(),
    };
    if kind == "native" {
        return refuse(
            StatusCode::CONFLICT,
            &format!("`{id}` is part of the host; it cannot be stopped, started or rolled back"),
        );
    }
    if let Err(refused) = tier_allows(&app, &person, &action, actor.as_str()).await {
        return refused.into_response();
    }
    let mut request = json!({"type": action, "actor": actor.as_str()});
    if action == "rollback" && !body.is_empty() {
        let fields = match object(&body) {
            Ok(fields) => fields,
            Err(refused) => return refused.into_response(),
        };
        match fields.get("version") {
            None | Some(Value::Null) => {}
            Some(v) if v.as_u64().is_some() => request["version"] = v.clone(),
            Some(v) => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    &format!("`version` must be a version number, not {v}"),
                );
            }
        }
    }
    match ask(&app, &person, &ActorId::broker(), &request, ACTION_PATIENCE).await {
        Ok(reply) => {
            let body = reply.body_value();
            if body["type"] == "error" {
                let why = body["reason"].as_str().unwrap_or("the broker refused");
                (
                    StatusCode::CONFLICT,
                    Json(json!({"error": why, "reply": body})),
                )
                    .into_response()
            } else {
                Json(body).into_response()
            }
        }
        Err(refused) => refused.into_response(),
    }
}
