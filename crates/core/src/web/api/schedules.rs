//! Schedules: `GET /api/schedules` and `POST /api/schedules/{id}/unschedule`, asked of the
//! scheduler for the person.
//! Invariant: the scheduler decides, by the speaker, what a person may see and end; this file
//! only relays and never reads the schedules itself.

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{App, CONVERSATION_PATIENCE, Person, ask, refuse};
use crate::message::ActorId;

/// `GET /api/schedules`: `{"schedules": [...]}` as the scheduler lists them for the person:
/// every one for owners, their own for the others (the scheduler decides, by the speaker).
pub(super) async fn schedules(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
) -> Response {
    ask_scheduler(&app, &person, json!({"type": "schedules"}), "schedules").await
}

/// `POST /api/schedules/{id}/unschedule`: ends a schedule (its creator's or any, for owners);
/// 400 with the scheduler's reason when it refuses.
pub(super) async fn unschedule(
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
