//! The web console's pages and API (DESIGN §14), each call documented in the README: the one
//! table of routes, the page's assets, and what the handlers share (`Refusal`, `object`, and
//! `tell` and `ask`, which send as `web` for a person); each resource's handlers have a file.
//! Invariant: an API call that cannot be answered says why as `{"error": why}` with a 4xx or 5xx
//! status; handlers read the world through the broker and the world layout, and act only by
//! sending messages as `web` (`tell`, `ask`).

mod actors;
mod approvals;
mod conversation;
mod files;
mod live;
pub mod mcp;
mod messages;
mod people;
mod schedules;
mod secrets;
mod session;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use tokio::sync::oneshot;

pub use actors::actors_table;

use super::{App, Person, Waiter, refuse};
use crate::message::{ActorId, Envelope, Outgoing, Speaker};

/// How long the agent or the scheduler has to answer what a page asks of it for a person (its
/// conversation, rooms, memory, schedules); past it the call is 504.
const CONVERSATION_PATIENCE: Duration = Duration::from_secs(15);

const INDEX: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/app.css");
const ICON: &str = include_str!("../assets/favicon.svg");

/// The page, its assets, the login link and the answer of the page that asks before a link
/// replaces a session.
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
        .route(
            "/favicon.svg",
            get(|| async { asset("image/svg+xml", ICON) }),
        )
        .route("/login", get(session::login).post(session::confirm_login))
}

/// Every API call, each answered in its resource's file; any other `/api/` path is a 404 with
/// `{"error"}`.
pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/api/me", get(session::me))
        .route("/api/logout", post(session::logout))
        .route("/api/actors", get(actors::actors))
        .route("/api/actors/{id}", get(actors::actor))
        .route("/api/actors/{id}/log", get(files::log))
        .route("/api/actors/{id}/files/{folder}/{*path}", get(files::file))
        .route("/api/actors/{id}/{action}", post(actors::act))
        .route("/api/send", post(messages::send))
        .route("/api/chat", post(conversation::chat))
        .route("/api/chat/stop", post(conversation::stop_turn))
        .route("/api/chat/rewind", post(conversation::rewind_turn))
        .route("/api/conversation", get(conversation::conversation))
        .route("/api/rooms", get(conversation::rooms))
        .route("/api/memory", get(conversation::memory))
        .route("/api/memory/forget", post(conversation::forget))
        .route("/api/graph", get(live::graph))
        .route("/api/people", get(people::people).post(people::add_person))
        .route("/api/people/{id}/{action}", post(people::change_person))
        .route(
            "/api/secrets",
            get(secrets::secrets).post(secrets::set_secret),
        )
        .route("/api/secrets/{name}/{action}", post(secrets::change_secret))
        .route("/api/audit", get(secrets::audit))
        .route("/api/approvals", get(approvals::approvals))
        .route("/api/approvals/{id}/{action}", post(approvals::decide))
        .route("/api/schedules", get(schedules::schedules))
        .route(
            "/api/schedules/{id}/unschedule",
            post(schedules::unschedule),
        )
        .route("/api/events", get(live::events))
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

/// Why a call cannot be answered: its status and words, sent as `{"error": words}`.
pub struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        refuse(self.0, &self.1)
    }
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
