//! The web console's pages and API (DESIGN §14), each call documented in the README.
//! Every handler answers JSON (`{"error": why}` with a 4xx or 5xx status when it cannot), reads
//! the world through the broker and the world layout, and acts only by sending messages as `web`.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path as UrlPath, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::logins::client_of;
use super::{App, Person, SESSION_COOKIE, Viewer, Waiter, empty, refuse};
use crate::message::{ActorId, Envelope, Outgoing, Speaker, Tier};

/// How long an action on an actor (a rollback compiles) may take before the call gives up.
const ACTION_PATIENCE: Duration = Duration::from_secs(120);
/// How long the agent has to tell its conversation.
const CONVERSATION_PATIENCE: Duration = Duration::from_secs(15);
/// The most of `stderr.log` one call returns.
const LOG_CHUNK: u64 = 64 * 1024;
/// The largest file the console shows.
const FILE_LIMIT: u64 = 1 << 20;
/// The most files an actor's page lists per folder.
const FILES_LISTED: usize = 500;

const INDEX: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/app.css");

/// The page, its assets and the login link.
pub fn pages() -> Router<Arc<App>> {
    Router::new()
        .route("/", get(|| async { Html(INDEX) }))
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/app.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route("/login", get(login))
}

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/api/me", get(me))
        .route("/api/logout", post(logout))
        .route("/api/actors", get(actors))
        .route("/api/actors/{id}", get(actor))
        .route("/api/actors/{id}/log", get(log))
        .route("/api/actors/{id}/files/{folder}/{*path}", get(file))
        .route("/api/actors/{id}/{action}", post(act))
        .route("/api/send", post(send))
        .route("/api/chat", post(chat))
        .route("/api/chat/stop", post(stop_turn))
        .route("/api/conversation", get(conversation))
        .route("/api/rooms", get(rooms))
        .route("/api/memory", get(memory))
        .route("/api/memory/forget", post(forget))
        .route("/api/graph", get(graph))
        .route("/api/people", get(people).post(add_person))
        .route("/api/people/{id}/{action}", post(change_person))
        .route("/api/schedules", get(schedules))
        .route("/api/schedules/{id}/unschedule", post(unschedule))
        .route("/api/events", get(events))
        .fallback(|| async {
            refuse(
                StatusCode::NOT_FOUND,
                "no such page or API call (the README lists them)",
            )
        })
}

fn asset(kind: &'static str, text: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], text).into_response()
}

#[derive(Deserialize)]
struct LoginQuery {
    token: Option<String>,
}

/// `GET /login?token=T`: a valid one-time link opens a session (cookie) and goes to the page,
/// whose address no longer holds the token. A wrong link writes nothing (401); a client whose
/// links failed too often lately gets 429 with `Retry-After`, its token unread (`logins`).
async fn login(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<LoginQuery>,
) -> Response {
    let client = client_of(peer.ip());
    let began = Instant::now();
    if let Err(wait) = app.lock_logins().begin(client, began) {
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let why = format!(
            "too many failed logins from {client}: try again in {seconds} s, with a link              `sausage run` or `sausage people link` printed"
        );
        let mut response = refuse(StatusCode::TOO_MANY_REQUESTS, &why);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        return response;
    }
    // The token is checked against `people.json`, and a match written, on the blocking pool.
    let checked = match query.token {
        Some(token) => {
            let app = app.clone();
            tokio::task::spawn_blocking(move || app.sessions.log_in(&token))
                .await
                .ok()
                .flatten()
        }
        None => None,
    };
    if checked.is_some() {
        app.lock_logins().succeeded(client, began);
    }
    let Some((session, _person)) = checked else {
        let page = "<!doctype html><meta charset=utf-8><title>Sausage</title>\
            <p>This login link is not valid: it was used already, or it is from an earlier run. \
            Each <code>sausage run</code> prints a new one.</p>";
        return (StatusCode::UNAUTHORIZED, Html(page)).into_response();
    };
    let mut response = empty(StatusCode::SEE_OTHER);
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, HeaderValue::from_static("/"));
    let cookie = format!(
        "{SESSION_COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        crate::people::sessions::SESSION_DAYS * 24 * 3600
    );
    headers.insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("hex is a valid header"),
    );
    response
}

/// `GET /api/me`: who the session is.
async fn me(Extension(person): Extension<Person>) -> Json<Value> {
    Json(json!({ "person": person.id, "name": person.name, "tier": person.tier }))
}

/// `POST /api/logout`: ends the session.
async fn logout(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Some(id) = super::session_id(&headers) {
        // Forgetting the session rewrites `sessions.json`: on the blocking pool. The task only
        // fails by panicking, which tokio reports; the cookie is cleared either way.
        let app = app.clone();
        let _ = tokio::task::spawn_blocking(move || app.sessions.log_out(&id)).await;
    }
    let mut response = Json(json!({"type": "logged_out"})).into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("sausage_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    );
    response
}

/// `GET /api/actors`.
async fn actors(State(app): State<Arc<App>>) -> Json<Value> {
    Json(actors_table(&app).await)
}

/// Every actor: `{"actors": [{"id","kind","state","version","restarts","last_exit","queued",
/// "in_per_sec","out_per_sec"}]}`, WASM actors from the registry and their `status.json` (read
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

/// Why a call cannot be answered: its status and words, sent as `{"error": words}`.
pub struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        refuse(self.0, &self.1)
    }
}

/// The actor `id` names, or 404 when the world has none by that name.
async fn known(app: &App, id: &str) -> Result<(ActorId, &'static str), Refusal> {
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
/// `meta.json` with `current`),
/// the files of `public` and `source` (paths), and `log_size`.
async fn actor(State(app): State<Arc<App>>, UrlPath(id): UrlPath<String>) -> Response {
    let (actor, kind) = match known(&app, &id).await {
        Ok(known) => known,
        Err(refused) => return refused.into_response(),
    };
    let owner = app
        .broker
        .registry()
        .await
        .actors
        .get(actor.as_str())
        .and_then(|entry| entry.owner.clone());
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
                    "time": meta["time"],
                })
            })
            .collect();
        json!({
            "id": actor.as_str(), "kind": kind, "owner": owner, "status": status,
            "versions": versions,
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

/// The regular files under `dir`, as relative paths with `/`, sorted, at most
/// [`FILES_LISTED`]; hidden temporaries and symlinks left out.
fn list_files(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            if crate::fs::is_temporary_name(&entry.file_name()) {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                folders.push(path);
            } else if kind.is_file()
                && let Ok(relative) = path.strip_prefix(dir)
            {
                files.push(relative.to_string_lossy().into_owned());
            }
        }
        if files.len() >= FILES_LISTED {
            break;
        }
    }
    files.sort();
    files.truncate(FILES_LISTED);
    files
}

#[derive(Deserialize)]
struct LogQuery {
    from: Option<u64>,
}

/// `GET /api/actors/{id}/log?from=N`: `stderr.log` from byte N (the last 16 KiB without N) up
/// to [`LOG_CHUNK`] bytes: `{"from","to","text","rotated"}`; a page polls with `from` = the
/// last `to`. When the file is shorter than N it was rotated: the text starts from its
/// beginning and `rotated` is true.
async fn log(
    State(app): State<Arc<App>>,
    UrlPath(id): UrlPath<String>,
    Query(query): Query<LogQuery>,
) -> Response {
    let (actor, kind) = match known(&app, &id).await {
        Ok(known) => known,
        Err(refused) => return refused.into_response(),
    };
    if kind == "native" {
        return Json(json!({"from": 0, "to": 0, "text": "", "rotated": false})).into_response();
    }
    let path = app.broker.world.log_path(&actor);
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<Value> {
        let mut file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(json!({"from": 0, "to": 0, "text": "", "rotated": false}));
            }
            Err(e) => return Err(e),
        };
        let size = file.metadata()?.len();
        let (from, rotated) = match query.from {
            Some(from) if from > size => (0, true),
            Some(from) => (from, false),
            None => (size.saturating_sub(16 * 1024), false),
        };
        let to = size.min(from + LOG_CHUNK);
        file.seek(SeekFrom::Start(from))?;
        let mut bytes = Vec::new();
        file.take(to - from).read_to_end(&mut bytes)?;
        Ok(json!({
            "from": from, "to": from + bytes.len() as u64,
            "text": String::from_utf8_lossy(&bytes), "rotated": rotated,
        }))
    })
    .await;
    match read {
        Ok(Ok(body)) => Json(body).into_response(),
        Ok(Err(e)) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the log cannot be read: {e}"),
        ),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// `GET /api/actors/{id}/files/{public|source}/{path}`: one file of the actor's public files or
/// running source, as text when it is UTF-8 (else as a download). No listing, nothing outside
/// the folder, no hidden temporaries, no symlinks, at most [`FILE_LIMIT`] bytes.
async fn file(
    State(app): State<Arc<App>>,
    UrlPath((id, folder, path)): UrlPath<(String, String, String)>,
) -> Response {
    let (actor, _) = match known(&app, &id).await {
        Ok(known) => known,
        Err(refused) => return refused.into_response(),
    };
    let world = &app.broker.world;
    let base = match folder.as_str() {
        "public" => world.public_dir(&actor),
        "source" => world.source_dir(&actor),
        _ => {
            return refuse(
                StatusCode::NOT_FOUND,
                "files are under `public` or `source`",
            );
        }
    };
    // Looking at the folders on the way is file I/O too: all of it on the blocking pool.
    let read = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, (StatusCode, String)> {
        let full = inside(&base, &path).ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                format!("no file `{path}` in `{folder}`"),
            )
        })?;
        let meta = std::fs::symlink_metadata(&full)
            .map_err(|_| (StatusCode::NOT_FOUND, format!("no file `{path}`")))?;
        if !meta.is_file() {
            return Err((
                StatusCode::NOT_FOUND,
                format!("`{path}` is not a file (folders are not listed)"),
            ));
        }
        if meta.len() > FILE_LIMIT {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "`{path}` has {} bytes; the console shows files up to {} bytes",
                    meta.len(),
                    FILE_LIMIT
                ),
            ));
        }
        std::fs::read(&full).map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
    })
    .await;
    let bytes = match read {
        Ok(Ok(bytes)) => bytes,
        Ok(Err((status, why))) => return refuse(status, &why),
        Err(e) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    match String::from_utf8(bytes) {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response(),
        Err(e) => (
            [
                (header::CONTENT_TYPE, "application/octet-stream"),
                (header::CONTENT_DISPOSITION, "attachment"),
            ],
            e.into_bytes(),
        )
            .into_response(),
    }
}

/// `base` joined with the relative `path`, if every part is a plain name (no `.`, `..`, root,
/// hidden temporary) and no folder on the way is a symlink.
fn inside(base: &Path, path: &str) -> Option<PathBuf> {
    let mut full = base.to_path_buf();
    for part in Path::new(path).components() {
        let Component::Normal(name) = part else {
            return None;
        };
        if crate::fs::is_temporary_name(name) {
            return None;
        }
        if full != base
            && std::fs::symlink_metadata(&full)
                .ok()?
                .file_type()
                .is_symlink()
        {
            return None;
        }
        full.push(name);
    }
    (full != base).then_some(full)
}

/// Parses a JSON object body, or says what is wrong with it.
fn object(body: &Bytes) -> Result<serde_json::Map<String, Value>, Refusal> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Refusal(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object".into(),
        )),
        Err(e) => Err(Refusal(
            StatusCode::BAD_REQUEST,
            format!("the body is not JSON: {e}"),
        )),
    }
}

/// Who a person is in an envelope: the session's person speaks through `web`.
fn speaker(person: &Person) -> Speaker {
    Speaker {
        person: ActorId::parse(&person.id).expect("people.json holds valid ids"),
        tier: person.tier,
    }
}

/// Sends `body` to `to` as `web`, speaking for `person`; returns the message's id.
async fn tell(
    app: &App,
    person: &Person,
    to: &ActorId,
    body: &Value,
    reply_to: Option<&str>,
) -> String {
    let own = app.broker.router.next_id();
    let id = format!("{}/{own}", app.me);
    // Noted before the message goes, so even the quickest reply finds its person.
    app.sent_for(&id, &person.id, to);
    let mut out = Outgoing::new(to, body)
        .replying_to(reply_to)
        .spoken_by(Some(speaker(person)));
    out.id = Some(own);
    app.broker.send(&app.me, out).await
}

/// Sends `body` to `to` as `web`, speaking for `person`, and waits up to `patience` for the
/// reply.
async fn ask(
    app: &App,
    person: &Person,
    to: &ActorId,
    body: &Value,
    patience: Duration,
) -> Result<Arc<Envelope>, Refusal> {
    let own = app.broker.router.next_id();
    let id = format!("{}/{own}", app.me);
    let (done, reply) = oneshot::channel();
    let waiter = Waiter {
        to: to.clone(),
        reply: done,
    };
    app.lock_waiting().insert(id.clone(), waiter);
    let mut out = Outgoing::new(to, body).spoken_by(Some(speaker(person)));
    out.id = Some(own);
    app.broker.send(&app.me, out).await;
    match tokio::time::timeout(patience, reply).await {
        Ok(Ok(reply)) => Ok(reply),
        _ => {
            app.lock_waiting().remove(&id);
            Err(Refusal(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "`{to}` did not answer within {} s; it may be busy: try again",
                    patience.as_secs()
                ),
            ))
        }
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

/// 403 unless `person` is an owner.
fn owners_only(person: &Person, what: &str) -> Result<(), Refusal> {
    if person.tier == Tier::Owner {
        return Ok(());
    }
    Err(Refusal(
        StatusCode::FORBIDDEN,
        format!(
            "only owners may {what}; {} is a {}",
            person.id,
            person.tier.as_str()
        ),
    ))
}

/// `POST /api/actors/{id}/stop|start|rollback` (rollback takes an optional `{"version"}`, older
/// or newer): the broker's reply, or 409 with its reason.
async fn act(
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

/// `POST /api/send` `{"to","body"}`: sends a message as `web`, like the console's `@`, for
/// members and owners (a guest talks to the agent in the chat); the broker checks requests
/// against the person's tier.
async fn send(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    body: Bytes,
) -> Response {
    if person.tier == Tier::Guest {
        return refuse(
            StatusCode::FORBIDDEN,
            &format!(
                "{} is a guest: guests talk to the agent in the chat; sending to actors needs a \
                 member or an owner",
                person.id
            ),
        );
    }
    let fields = match object(&body) {
        Ok(fields) => fields,
        Err(refused) => return refused.into_response(),
    };
    let to = match fields.get("to").and_then(Value::as_str).map(ActorId::parse) {
        Some(Ok(to)) => to,
        Some(Err(why)) => return refuse(StatusCode::BAD_REQUEST, &format!("`to`: {why}")),
        None => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "`to` must name an actor, such as \"agent\"",
            );
        }
    };
    let Some(message) = fields.get("body").filter(|b| b["type"].is_string()) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "`body` must be a JSON object with a string `type`",
        );
    };
    let id = tell(&app, &person, &to, message, None).await;
    Json(json!({ "id": id })).into_response()
}

/// `POST /api/chat`: `{"text"}` starts a turn of the agent; `{"answer","question"}` answers
/// the agent's open question (`question` is the question message's id; 400 unless the agent
/// put it to this person and it is open); an optional `room` speaks in that shared room.
/// Answers `{"id"}`.
async fn chat(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    body: Bytes,
) -> Response {
    let fields = match object(&body) {
        Ok(fields) => fields,
        Err(refused) => return refused.into_response(),
    };
    let agent = ActorId::parse("agent").expect("valid");
    let nonempty = |key: &str| {
        fields
            .get(key)
            .and_then(Value::as_str)
            .filter(|t| !t.trim().is_empty())
    };
    let (mut message, reply_to) = match (nonempty("text"), nonempty("answer"), nonempty("question"))
    {
        (Some(text), None, None) => (json!({"type": "text", "text": text}), None),
        (None, Some(answer), Some(question)) => (
            json!({"type": "answer", "text": answer}),
            Some(question.to_string()),
        ),
        _ => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "send {\"text\": \"...\"} to talk to the agent, or {\"answer\": \"...\", \
                 \"question\": \"<id of the question>\"} to answer its question",
            );
        }
    };
    match fields.get("room") {
        None | Some(Value::Null) => {}
        Some(Value::String(room)) if ActorId::parse(room).is_ok() => message["room"] = json!(room),
        Some(other) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                &format!("`room` must be a room's id (a-z, 0-9, -, _), not {other}"),
            );
        }
    }
    // An answer counts only for a question the agent put to this person that is still open;
    // it closes as the answer goes.
    if let Some(question) = &reply_to
        && let Err(why) = app.answer_question(question, &person.id)
    {
        return refuse(StatusCode::BAD_REQUEST, &why);
    }
    let id = tell(&app, &person, &agent, &message, reply_to.as_deref()).await;
    Json(json!({ "id": id })).into_response()
}

/// `POST /api/chat/stop` `{"turn"}`: asks the agent to end that turn after its current step.
async fn stop_turn(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    body: Bytes,
) -> Response {
    let fields = match object(&body) {
        Ok(fields) => fields,
        Err(refused) => return refused.into_response(),
    };
    let Some(turn) = fields.get("turn").and_then(Value::as_str) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "`turn` must be the id of the message that started the turn",
        );
    };
    let agent = ActorId::parse("agent").expect("valid");
    let stop = json!({"type": "stop", "turn": turn});
    let id = tell(&app, &person, &agent, &stop, None).await;
    Json(json!({ "id": id })).into_response()
}

#[derive(Deserialize)]
struct ConversationQuery {
    room: Option<String>,
}

/// `GET /api/conversation[?room=R]`: the person's conversation with the agent (or that shared
/// room's), as the agent tells it (`{"entries": [...]}`).
async fn conversation(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    Query(query): Query<ConversationQuery>,
) -> Response {
    let mut request = json!({"type": "conversation"});
    if let Some(room) = query.room {
        request["room"] = json!(room);
    }
    ask_agent(&app, &person, request, "conversation").await
}

/// Runs one change of `people.json` off the world's thread (it takes the file's lock), for
/// owners only: 403 for others, 400 with the reason when the change is refused.
async fn people_change<T: Send + 'static>(
    app: &App,
    person: &Person,
    change: impl FnOnce(&crate::people::People) -> anyhow::Result<T> + Send + 'static,
) -> Result<T, Refusal> {
    owners_only(person, "manage people")?;
    let people = app.sessions.people().clone();
    match tokio::task::spawn_blocking(move || change(&people)).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(e)) => Err(Refusal(StatusCode::BAD_REQUEST, format!("{e:#}"))),
        Err(e) => Err(Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    }
}

/// `GET /api/people` (owners): `{"people": [{"id","name","tier","created"}]}`.
async fn people(State(app): State<Arc<App>>, Extension(person): Extension<Person>) -> Response {
    match people_change(&app, &person, |people| people.list()).await {
        Ok(list) => {
            let list: Vec<Value> = list.iter().map(crate::people::Person::public).collect();
            Json(json!({ "people": list })).into_response()
        }
        Err(refused) => refused.into_response(),
    }
}

/// `POST /api/people` `{"id","tier","name"?}` (owners): adds a person; answers the person and
/// their one-time login link (`{"person","link"}`).
async fn add_person(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    body: Bytes,
) -> Response {
    let fields = match object(&body) {
        Ok(fields) => fields,
        Err(refused) => return refused.into_response(),
    };
    let (Some(id), Some(tier)) = (
        fields.get("id").and_then(Value::as_str).map(str::to_owned),
        fields.get("tier").and_then(Value::as_str),
    ) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "send {\"id\": \"ann\", \"tier\": \"owner|member|guest\", \"name\": \"Ann\"} \
             (name optional)",
        );
    };
    let tier = match Tier::parse(tier) {
        Ok(tier) => tier,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, &format!("`tier`: {why}")),
    };
    let name = match fields.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if !name.trim().is_empty() => Some(name.trim().to_owned()),
        Some(other) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                &format!("`name` must be a non-empty string, not {other}"),
            );
        }
    };
    let added = people_change(&app, &person, move |people| {
        let token = people.add(&id, tier, name.as_deref())?;
        Ok((people.get(&id)?, token))
    })
    .await;
    match added {
        Ok((Some(added), token)) => Json(json!({
            "person": added.public(),
            "link": format!("{}/login?token={token}", app.origin),
        }))
        .into_response(),
        Ok((None, _)) => refuse(StatusCode::CONFLICT, "the person was removed at once"),
        Err(refused) => refused.into_response(),
    }
}

/// `POST /api/people/{id}/tier` `{"tier"}`, `…/remove` (their sessions end at once) and
/// `…/link` (a new one-time login link, `{"link"}`), for owners.
async fn change_person(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    UrlPath((id, action)): UrlPath<(String, String)>,
    body: Bytes,
) -> Response {
    let changed = match action.as_str() {
        "tier" => {
            let fields = match object(&body) {
                Ok(fields) => fields,
                Err(refused) => return refused.into_response(),
            };
            let tier = match fields.get("tier").and_then(Value::as_str).map(Tier::parse) {
                Some(Ok(tier)) => tier,
                Some(Err(why)) => {
                    return refuse(StatusCode::BAD_REQUEST, &format!("`tier`: {why}"));
                }
                None => {
                    return refuse(
                        StatusCode::BAD_REQUEST,
                        "send {\"tier\": \"owner|member|guest\"}",
                    );
                }
            };
            people_change(&app, &person, move |people| {
                people.set_tier(&id, tier)?;
                Ok(json!({"type": "tier_changed", "person": id, "tier": tier}))
            })
            .await
        }
        "remove" => {
            people_change(&app, &person, move |people| {
                people.remove(&id)?;
                Ok(json!({"type": "removed", "person": id}))
            })
            .await
        }
        "link" => {
            let origin = app.origin.clone();
            people_change(&app, &person, move |people| {
                let token = people.new_link(&id)?;
                Ok(json!({"link": format!("{origin}/login?token={token}")}))
            })
            .await
        }
        _ => {
            return refuse(
                StatusCode::NOT_FOUND,
                &format!("no action `{action}` on a person; actions are tier, remove and link"),
            );
        }
    };
    match changed {
        Ok(done) => Json(done).into_response(),
        Err(refused) => refused.into_response(),
    }
}

/// Asks the agent `request` for `person` and answers its reply when it is of type `expected`
/// (502 with the agent's reason otherwise, 404 without an agent).
async fn ask_agent(app: &App, person: &Person, request: Value, expected: &str) -> Response {
    let agent = ActorId::parse("agent").expect("valid");
    if app.broker.router.mailbox(&agent).is_none() {
        return refuse(
            StatusCode::NOT_FOUND,
            "there is no agent in this world (`sausage init` makes one)",
        );
    }
    match ask(app, person, &agent, &request, CONVERSATION_PATIENCE).await {
        Ok(reply) => {
            let body = reply.body_value();
            if body["type"] == expected {
                Json(body).into_response()
            } else {
                let why = body["reason"].as_str().unwrap_or("the agent did not say");
                refuse(
                    StatusCode::BAD_GATEWAY,
                    &format!("the agent cannot answer: {why}"),
                )
            }
        }
        Err(refused) => refused.into_response(),
    }
}

/// `GET /api/rooms`: the shared rooms the person is a member of (`{"rooms":[{"room",
/// "members"}]}`), as the agent keeps them.
async fn rooms(State(app): State<Arc<App>>, Extension(person): Extension<Person>) -> Response {
    ask_agent(&app, &person, json!({"type": "rooms"}), "rooms").await
}

/// `GET /api/memory`: what the agent remembers about the person (`{"text"}`).
async fn memory(State(app): State<Arc<App>>, Extension(person): Extension<Person>) -> Response {
    ask_agent(&app, &person, json!({"type": "memory"}), "memory").await
}

/// `POST /api/memory/forget`: the agent forgets everything it remembers about the person.
async fn forget(State(app): State<Arc<App>>, Extension(person): Extension<Person>) -> Response {
    ask_agent(&app, &person, json!({"type": "forget"}), "forgotten").await
}

/// `GET /api/schedules`: `{"schedules": [...]}` as the scheduler lists them for the person:
/// every one for owners, their own for the others (the scheduler decides, by the speaker).
async fn schedules(State(app): State<Arc<App>>, Extension(person): Extension<Person>) -> Response {
    ask_scheduler(&app, &person, json!({"type": "schedules"}), "schedules").await
}

/// `POST /api/schedules/{id}/unschedule`: ends a schedule (its creator's or any, for owners);
/// 400 with the scheduler's reason when it refuses.
async fn unschedule(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    UrlPath(id): UrlPath<String>,
) -> Response {
    let request = json!({"type": "unschedule", "id": id});
    ask_scheduler(&app, &person, request, "unscheduled").await
}

/// Asks the scheduler for `person` and answers its reply when it is of type `expected`.
async fn ask_scheduler(app: &App, person: &Person, request: Value, expected: &str) -> Response {
    let scheduler = ActorId::parse(crate::message::SCHEDULER).expect("valid");
    match ask(app, person, &scheduler, &request, CONVERSATION_PATIENCE).await {
        Ok(reply) => {
            let body = reply.body_value();
            if body["type"] == expected {
                Json(body).into_response()
            } else {
                let why = body["reason"]
                    .as_str()
                    .unwrap_or("the scheduler did not say");
                refuse(StatusCode::BAD_REQUEST, why)
            }
        }
        Err(refused) => refused.into_response(),
    }
}

/// `GET /api/graph`: who sent to whom over the last 60 s.
async fn graph(State(app): State<Arc<App>>) -> Json<Value> {
    Json(app.lock_rates().graph())
}

/// `GET /api/events`: server-sent events (`hello`, `message`, `actors`, `graph`, `reset`),
/// resumable with `Last-Event-ID`. The stream ends when the page's session ends, its person is
/// removed or their tier changes (`watch_pages`); the browser reconnects as it is now.
async fn events(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    headers: HeaderMap,
) -> Sse<impl Stream<Item = Result<SseEvent, std::convert::Infallible>>> {
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // The guard let the session in, so the cookie is there.
    let session = super::session_id(&headers).unwrap_or_default();
    let viewer = Viewer {
        person: person.id,
        tier: person.tier,
        session,
    };
    let receiver = app.events.subscribe(viewer, last.as_deref());
    let stream = stream::unfold(receiver, |mut receiver| async move {
        let event = receiver.next().await?;
        let mut sse = SseEvent::default().event(event.kind).data(&*event.data);
        if !event.id.is_empty() {
            sse = sse.id(event.id);
        }
        Some((Ok(sse), receiver))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
