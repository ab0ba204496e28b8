//! `POST /api/send`: a person's message to any actor, sent as `web` like the console's `@`.
//! Invariant: guests cannot send (they talk to the agent in the chat; MCP's `send` refuses them
//! with [`may_not_send`] too), and every message names
//! its person as the speaker, so the broker checks its requests against their tier.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::{App, Person, object, refuse, tell};
use crate::message::{ActorId, Tier};

/// `POST /api/send` `{"to","body"}`: sends a message as `web`, like the console's `@`, for
/// members and owners (a guest talks to the agent in the chat); the broker checks requests
/// against the person's tier.
pub(super) async fn send(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    body: Bytes,
) -> Response {
    if let Some(why) = may_not_send(&person) {
        return refuse(StatusCode::FORBIDDEN, &why);
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

/// Why `person` may not send messages to actors, or `None` when they may. A guest's message
/// would reach actors that act for their owners (a member's actor spawns as that member), so
/// both ways of sending, this page's and MCP's `send`, refuse it in these words.
pub(super) fn may_not_send(person: &Person) -> Option<String> {
    (person.tier == Tier::Guest).then(|| {
        format!(
            "{} is a guest: guests talk to the agent in the chat; sending to actors needs a \
             member or an owner",
            person.id
        )
    })
}
