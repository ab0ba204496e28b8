//! Sessions: `GET /login?token=T` turns a one-time link into a session cookie, `GET /api/me`
//! says whose session it is and `POST /api/logout` ends it. The guard in `web` checks the cookie
//! on every other call; these only make and end it.
//! Invariant: the token never stays in an address (a login redirects to `/`), and the cookie is
//! always HttpOnly and SameSite=Strict.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{App, Person, refuse};
use crate::web::logins::client_of;
use crate::web::{SESSION_COOKIE, empty};

#[derive(Deserialize)]
pub(super) struct LoginQuery {
    token: Option<String>,
}

/// `GET /login?token=T`: a valid one-time link opens a session (cookie) and goes to the page,
/// whose address no longer holds the token. A wrong link writes nothing (401); a client whose
/// links failed too often lately gets 429 with `Retry-After`, its token unread (`logins`).
pub(super) async fn login(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<LoginQuery>,
) -> Response {
    let client = client_of(peer.ip());
    let began = Instant::now();
    if let Err(wait) = app.lock_logins().begin(client, began) {
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let why = format!(
            "too many failed logins from {client}: try again in {seconds} s, with a link `sausage run` or `sausage people link` printed"
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
pub(super) async fn me(Extension(person): Extension<Person>) -> Json<Value> {
    Json(json!({ "person": person.id, "name": person.name, "tier": person.tier }))
}

/// `POST /api/logout`: ends the session.
pub(super) async fn logout(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Some(id) = crate::web::session_id(&headers) {
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
