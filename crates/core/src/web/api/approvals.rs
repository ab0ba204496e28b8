//! Approvals (DESIGN §25): `GET /api/approvals` lists what waits that the person may see
//! (`{"approvals": [{"id","action","asked_by","actor","approver","for","what","why","at",
//! "expires"}]}`); `POST /api/approvals/{id}/approve` (`{"value"}` for a requested secret) and
//! `…/deny` decide one, answering `{"type":"approved"|"denied","approval","what"}`. The broker
//! checks who may decide; a refusal changes nothing and says why: 404 for what no longer waits,
//! 403 for whoever may not decide it, 400 for a missing or wrong value.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::{App, Person, object, refuse};
use crate::broker::holds::{Deciding, Undecided, shown};
use crate::message::{ActorId, Speaker};

/// `GET /api/approvals`.
pub(super) async fn approvals(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
) -> Response {
    let approvals = app.broker.approvals();
    let (id, tier) = (person.id.clone(), person.tier);
    match tokio::task::spawn_blocking(move || approvals.waiting_for(&id, tier)).await {
        Ok(Ok(waiting)) => {
            let shown: Vec<Value> = waiting.iter().map(shown).collect();
            Json(json!({ "approvals": shown })).into_response()
        }
        Ok(Err(e)) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}")),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// `POST /api/approvals/{id}/approve|deny`.
pub(super) async fn decide(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    UrlPath((id, action)): UrlPath<(String, String)>,
    body: Bytes,
) -> Response {
    let approve = match action.as_str() {
        "approve" => true,
        "deny" => false,
        other => {
            return refuse(
                StatusCode::NOT_FOUND,
                &format!("no action `{other}` on an approval; use approve or deny"),
            );
        }
    };
    let value = match body.is_empty() {
        true => None,
        false => match object(&body) {
            Ok(fields) => match fields.get("value") {
                None | Some(Value::Null) => None,
                Some(Value::String(value)) => Some(value.clone()),
                Some(_) => {
                    return refuse(
                        StatusCode::BAD_REQUEST,
                        "send {\"value\": \"…\"}: a requested secret's value, as a string",
                    );
                }
            },
            Err(refused) => return refused.into_response(),
        },
    };
    let Ok(who) = ActorId::parse(&person.id) else {
        return refuse(StatusCode::FORBIDDEN, "this session's person is not valid");
    };
    let by = Speaker {
        person: who,
        tier: person.tier,
    };
    let deciding = Deciding {
        id: &id,
        by: &by,
        approve,
        value,
    };
    let undecided = match app.broker.decide(deciding).await {
        Ok(answer) => return Json(answer).into_response(),
        Err(undecided) => undecided,
    };
    let status = match &undecided {
        Undecided::Unknown(_) => StatusCode::NOT_FOUND,
        Undecided::NotTheirs(_) => StatusCode::FORBIDDEN,
        Undecided::Invalid(_) => StatusCode::BAD_REQUEST,
        Undecided::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    refuse(status, &undecided.to_string())
}
