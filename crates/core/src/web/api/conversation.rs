//! The person's conversation with the agent: `POST /api/chat` (a turn, or the answer to the
//! agent's open question), `POST /api/chat/stop`, `POST /api/chat/rewind`, and what the agent tells of it (`GET
//! /api/conversation`, `GET /api/rooms`, `GET /api/memory`, `POST /api/memory/forget`).
//! Invariant: every message names the session's person as the speaker, and an answer counts
//! only for an open question the agent put to that person (`App::answer_question`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{App, CONVERSATION_PATIENCE, Person, Refusal, ask, object, refuse, tell};
use crate::message::ActorId;

/// `POST /api/chat`: `{"text"}` starts a turn of the agent; `{"answer","question"}` answers
/// the agent's open question (`question` is the question message's id; 400 unless the agent
/// put it to this person and it is open); an optional `room` speaks in that shared room.
/// Answers `{"id"}`.
pub(super) async fn chat(
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
pub(super) async fn stop_turn(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    body: Bytes,
) -> Response {
    let turn = match turn_field(&body) {
        Ok(turn) => turn,
        Err(refused) => return refused.into_response(),
    };
    let agent = ActorId::parse("agent").expect("valid");
    let stop = json!({"type": "stop", "turn": turn});
    let id = tell(&app, &person, &agent, &stop, None).await;
    Json(json!({ "id": id })).into_response()
}

/// The `turn` of a body `{"turn"}`: the id of the message that started the turn.
fn turn_field(body: &Bytes) -> Result<String, Refusal> {
    let fields = object(body)?;
    match fields.get("turn").and_then(Value::as_str) {
        Some(turn) => Ok(turn.to_string()),
        None => Err(Refusal(
            StatusCode::BAD_REQUEST,
            "`turn` must be the id of the message that started the turn".into(),
        )),
    }
}

/// How long a rewind may take: the broker puts back each actor the turn changed.
const REWIND_PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// `POST /api/chat/rewind` `{"turn"}`: asks the agent to undo what that turn changed (DESIGN
/// §21); answers the agent's `rewound` (what was put back and what cannot be recalled), or the
/// agent's refusal as 409.
pub(super) async fn rewind_turn(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    body: Bytes,
) -> Response {
    let turn = match turn_field(&body) {
        Ok(turn) => turn,
        Err(refused) => return refused.into_response(),
    };
    let request = json!({"type": "rewind", "turn": turn});
    match agent_reply(&app, &person, &request, REWIND_PATIENCE).await {
        Ok(body) if body["type"] == "rewound" => Json(body).into_response(),
        Ok(body) => {
            let why = body["reason"]
                .as_str()
                .unwrap_or("the agent did not say why");
            refuse(StatusCode::CONFLICT, why)
        }
        Err(refused) => refused,
    }
}

#[derive(Deserialize)]
pub(super) struct ConversationQuery {
    room: Option<String>,
}

/// `GET /api/conversation[?room=R]`: the person's conversation with the agent (or that shared
/// room's), as the agent tells it (`{"entries": [...]}`).
pub(super) async fn conversation(
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

/// `GET /api/rooms`: the shared rooms the person is a member of (`{"rooms":[{"room",
/// "members"}]}`), as the agent keeps them.
pub(super) async fn rooms(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
) -> Response {
    ask_agent(&app, &person, json!({"type": "rooms"}), "rooms").await
}

/// `GET /api/memory`: what the agent remembers about the person (`{"text"}`).
pub(super) async fn memory(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
) -> Response {
    ask_agent(&app, &person, json!({"type": "memory"}), "memory").await
}

/// `POST /api/memory/forget`: the agent forgets everything it remembers about the person.
pub(super) async fn forget(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
) -> Response {
    ask_agent(&app, &person, json!({"type": "forget"}), "forgotten").await
}

/// Asks the agent `request` for `person` and answers its reply when it is of type `expected`
/// (502 with the agent's reason otherwise, 404 without an agent).
async fn ask_agent(app: &App, person: &Person, request: Value, expected: &str) -> Response {
    match agent_reply(app, person, &request, CONVERSATION_PATIENCE).await {
        Ok(body) if body["type"] == expected => Json(body).into_response(),
        Ok(body) => {
            let why = body["reason"].as_str().unwrap_or("the agent did not say");
            refuse(
                StatusCode::BAD_GATEWAY,
                &format!("the agent cannot answer: {why}"),
            )
        }
        Err(refused) => refused,
    }
}

/// The body of the agent's reply to `request` for `person`, waited for up to `patience`; 404
/// without an agent, 504 when it does not answer in time.
async fn agent_reply(
    app: &App,
    person: &Person,
    request: &Value,
    patience: std::time::Duration,
) -> Result<Value, Response> {
    let agent = ActorId::parse("agent").expect("valid");
    if app.broker.router.mailbox(&agent).is_none() {
        return Err(refuse(
            StatusCode::NOT_FOUND,
            "there is no agent in this world (`sausage init` makes one)",
        ));
    }
    match ask(app, person, &agent, request, patience).await {
        Ok(reply) => Ok(reply.body_value()),
        Err(refused) => Err(refused.into_response()),
    }
}
