//! People, for owners: `GET /api/people`, `POST /api/people` (adds one and answers their login
//! link) and `POST /api/people/{id}/tier|remove|link`.
//! Invariant: every call goes through `people_change`, which refuses all but owners and reads
//! or changes `people.json` on the blocking pool, never on the world's thread.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::{App, Person, Refusal, object, refuse};
use crate::message::Tier;
use crate::secrets::audit::Audit;

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

/// `GET /api/people` (owners): `{"people": [{"id","name","tier","created"}]}`.
pub(super) async fn people(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
) -> Response {
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
pub(super) async fn add_person(
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
    let audit = Audit::new(&app.broker.world);
    let by = person.id.clone();
    let added = people_change(&app, &person, move |people| {
        let token = people.add(&id, tier, name.as_deref())?;
        audit.append(json!({"event": "person_add", "by": by, "person": id,
            "tier": tier.as_str()}));
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
pub(super) async fn change_person(
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
            let audit = Audit::new(&app.broker.world);
            let by = person.id.clone();
            people_change(&app, &person, move |people| {
                people.set_tier(&id, tier)?;
                audit.append(json!({"event": "person_tier", "by": by, "person": id,
                    "tier": tier.as_str()}));
                Ok(json!({"type": "tier_changed", "person": id, "tier": tier}))
            })
            .await
        }
        "remove" => {
            let audit = Audit::new(&app.broker.world);
            let by = person.id.clone();
            people_change(&app, &person, move |people| {
                people.remove(&id)?;
                audit.append(json!({"event": "person_remove", "by": by, "person": id}));
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
