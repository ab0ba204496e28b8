//! Secrets (DESIGN §25): `GET /api/secrets` (owners all, members their own), `POST
//! /api/secrets` `{"name","url","header"?,"format"?,"value"}` and `POST
//! /api/secrets/{name}/grant|revoke` `{"actor"}`, `…/remove`. No answer ever holds a value.
//! A member's grant of another's secret to their own actor is held for an owner (202 `held`)
//! when a `grant` rule says so (`broker::holds`).
//! Invariant: every change goes through `secrets_change`, which checks the person's tier with
//! `Secrets::check` and touches the file on the blocking pool, never on the world's thread.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::{App, Person, Refusal, object, refuse};
use crate::broker::principal::Principal;
use crate::message::ActorId;
use crate::secrets::{Acting, NewSecret, Secrets};

/// Runs `change` on the blocking pool once `person` may act on secret `name` (and `actor`):
/// 403 with why when they may not, 400 with the reason when the change is refused.
async fn secrets_change<T: Send + 'static>(
    app: &App,
    person: &Person,
    name: String,
    actor: Option<String>,
    change: impl FnOnce(&Secrets, &str) -> anyhow::Result<T> + Send + 'static,
) -> Result<T, Refusal> {
    let owner = match &actor {
        Some(actor) => Some(actor_owner(app, actor).await?),
        None => None,
    };
    let secrets = Secrets::new(&app.broker.world);
    let (id, tier) = (person.id.clone(), person.tier);
    let work = move || {
        let who = Acting { person: &id, tier };
        let actor = actor
            .as_deref()
            .zip(owner.as_ref())
            .map(|(a, o)| (a, o.as_deref()));
        if let Err(e) = secrets.check(&who, &name, actor) {
            return Err(Refusal(StatusCode::FORBIDDEN, format!("{e:#}")));
        }
        change(&secrets, &id).map_err(|e| Refusal(StatusCode::BAD_REQUEST, format!("{e:#}")))
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done,
        Err(e) => Err(Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    }
}

/// Whom `actor` acts for (`None`: nobody); 404 when there is no such actor.
async fn actor_owner(app: &App, actor: &str) -> Result<Option<String>, Refusal> {
    let registry = app.broker.registry().await;
    if !registry.actors.contains_key(actor) {
        let known: Vec<&str> = registry.actors.keys().map(String::as_str).collect();
        return Err(Refusal(
            StatusCode::NOT_FOUND,
            format!("no actor `{actor}`; known: {}", known.join(", ")),
        ));
    }
    let people = app
        .broker
        .people_now()
        .await
        .map_err(|why| Refusal(StatusCode::INTERNAL_SERVER_ERROR, why))?;
    Ok(match people.owner_of(&registry, actor) {
        Principal::Person(speaker) => Some(speaker.person.to_string()),
        Principal::Nobody(_) => None,
    })
}

/// `GET /api/secrets`: `{"secrets": [{"name","url","header","format","set_by","set_at",
/// "grants","last_use"}]}`, the ones the person may see.
pub(super) async fn secrets(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
) -> Response {
    let secrets = Secrets::new(&app.broker.world);
    let (id, tier) = (person.id.clone(), person.tier);
    let listed =
        tokio::task::spawn_blocking(move || secrets.list_for(&Acting { person: &id, tier })).await;
    match listed {
        Ok(Ok(list)) => Json(json!({ "secrets": list })).into_response(),
        Ok(Err(e)) => refuse(StatusCode::FORBIDDEN, &format!("{e:#}")),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// `POST /api/secrets` `{"name","url","header"?,"format"?,"value"}`: sets a secret (or its new
/// value); answers `{"type":"secret_set","name","replaced"}`.
pub(super) async fn set_secret(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    body: Bytes,
) -> Response {
    let fields = match object(&body) {
        Ok(fields) => fields,
        Err(refused) => return refused.into_response(),
    };
    let text = |name: &str| fields.get(name).and_then(Value::as_str).map(str::to_owned);
    let (Some(name), Some(url), Some(value)) = (text("name"), text("url"), text("value")) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "send {\"name\": \"gh\", \"url\": \"https://api.github.com\", \"value\": \"…\"} \
             (\"header\" and \"format\" optional)",
        );
    };
    let (header, format) = (text("header"), text("format"));
    let set = secrets_change(&app, &person, name.clone(), None, move |secrets, by| {
        let new = NewSecret {
            name: &name,
            url: &url,
            header: header.as_deref().filter(|h| !h.is_empty()),
            format: format.as_deref().filter(|f| !f.is_empty()),
        };
        let replaced = secrets.set(&new, &value, by)?;
        Ok(json!({"type": "secret_set", "name": name, "replaced": replaced}))
    })
    .await;
    match set {
        Ok(done) => Json(done).into_response(),
        Err(refused) => refused.into_response(),
    }
}

/// `POST /api/secrets/{name}/grant|revoke` `{"actor"}` and `…/remove`.
pub(super) async fn change_secret(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    UrlPath((name, action)): UrlPath<(String, String)>,
    body: Bytes,
) -> Response {
    let actor = || -> Result<String, Refusal> {
        let fields = object(&body)?;
        let actor = fields
            .get("actor")
            .and_then(Value::as_str)
            .unwrap_or_default();
        ActorId::parse(actor)
            .map(|_| actor.to_owned())
            .map_err(|_| {
                Refusal(
                    StatusCode::BAD_REQUEST,
                    "send {\"actor\": \"notifier\"}".into(),
                )
            })
    };
    let changed = match action.as_str() {
        "grant" | "revoke" => {
            let actor = match actor() {
                Ok(actor) => actor,
                Err(refused) => return refused.into_response(),
            };
            let grant = action == "grant";
            // A member's grant of someone else's secret to their own actor may wait for
            // an owner (a `grant` rule) rather than be refused.
            if grant && person.tier == crate::message::Tier::Member {
                let why = object(&body)
                    .ok()
                    .and_then(|f| f.get("why").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_default();
                let (Ok(who), Ok(id)) = (ActorId::parse(&person.id), ActorId::parse(&actor)) else {
                    return refuse(StatusCode::FORBIDDEN, "this session's person is not valid");
                };
                let by = crate::message::Speaker {
                    person: who,
                    tier: person.tier,
                };
                match app.broker.hold_grant(&by, &name, &id, &why).await {
                    Ok(Some(held)) => return (StatusCode::ACCEPTED, Json(held)).into_response(),
                    Ok(None) => {}
                    Err(why) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, &why),
                }
            }
            let named = actor.clone();
            secrets_change(
                &app,
                &person,
                name.clone(),
                Some(named),
                move |secrets, by| {
                    let id = ActorId::parse(&actor).expect("checked");
                    let changed = match grant {
                        true => secrets.grant(&name, &id, by)?,
                        false => secrets.revoke(&name, &id, by)?,
                    };
                    let kind = if grant { "granted" } else { "revoked" };
                    Ok(json!({"type": kind, "secret": name, "actor": actor, "changed": changed}))
                },
            )
            .await
        }
        "remove" => {
            secrets_change(&app, &person, name.clone(), None, move |secrets, by| {
                secrets.remove(&name, by)?;
                Ok(json!({"type": "secret_removed", "secret": name}))
            })
            .await
        }
        _ => {
            return refuse(
                StatusCode::NOT_FOUND,
                &format!("no action `{action}` on a secret; actions are grant, revoke and remove"),
            );
        }
    };
    match changed {
        Ok(done) => Json(done).into_response(),
        Err(refused) => refused.into_response(),
    }
}

/// The most audit lines the page is sent: the newest; `sausage audit` prints them all.
const AUDIT_LINES: usize = 500;

/// `GET /api/audit` (owners): `{"audit": [...]}`, the newest [`AUDIT_LINES`] lines of the audit
/// log, newest first; never a value, as the log holds none.
pub(super) async fn audit(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
) -> Response {
    if person.tier != crate::message::Tier::Owner {
        return refuse(
            StatusCode::FORBIDDEN,
            &format!(
                "{} is a {}: only owners read the audit log",
                person.id,
                person.tier.as_str()
            ),
        );
    }
    let audit = crate::secrets::audit::Audit::new(&app.broker.world);
    match tokio::task::spawn_blocking(move || audit.read()).await {
        Ok(Ok(lines)) => {
            let newest: Vec<Value> = lines.into_iter().rev().take(AUDIT_LINES).collect();
            Json(json!({ "audit": newest })).into_response()
        }
        Ok(Err(e)) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}")),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}
