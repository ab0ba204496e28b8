//! Sessions: `GET /login?token=T` turns a one-time link into a session cookie (or, when that
//! would replace another person's session, asks first, and `POST /login` answers), `GET
//! /api/me` says whose session it is and `POST /api/logout` ends it. The guard in `web` checks
//! the cookie on every other call; these only make and end it.
//! Invariant: the token never stays in an address (a login redirects to `/`), the cookie is
//! always HttpOnly and SameSite=Strict, and only a link opened with no session or the same
//! person's, or a POST from the console's own page, replaces a browser's session.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{App, Person, refuse};
use crate::web::logins::client_of;
use crate::web::{SESSION_COOKIE, empty};

/// The page a login link answers when logging in would replace another person's session: a
/// form that POSTs the token to `/login`. No script, so the page's policy holds as it is.
const ASK_PAGE: &str = include_str!("../assets/login.html");

/// The page a used, unknown or out-of-date login link answers.
const NOT_VALID_PAGE: &str = include_str!("../assets/link-not-valid.html");

/// The ask page's referrer policy. Browsers send `Origin: null` with a form's POST from a page
/// whose policy is `no-referrer` (every other page's), and the POST must carry the console's own
/// `Origin`; `strict-origin` sends the origin, never the address (which holds the token).
const ASK_REFERRER_POLICY: &str = "strict-origin";

/// A login link's token, from the link's query or the ask page's form.
#[derive(Deserialize)]
pub(super) struct LoginToken {
    token: Option<String>,
}

/// What a login comes to.
enum Login {
    /// A session was opened: its id, for the cookie.
    Opened(String),
    /// The link is good, but it would replace a session the browser may hold: the link's
    /// person, and what the page says first.
    Ask { person: Person, why: String },
    /// The token is unknown, used or expired.
    Refused,
}

/// `GET /login?token=T`: a valid one-time link opens a session (cookie) and goes to the page,
/// whose address no longer holds the token. When the browser holds another person's session,
/// or a page on another site opened the link (a `SameSite=Strict` cookie does not come then, so
/// a session would be replaced unseen), the link is not used: a page asks first, and only its
/// POST logs in ([`confirm_login`]). A wrong link writes nothing (401); a client whose links
/// failed too often lately gets 429 with `Retry-After`, its token unread (`logins`).
pub(super) async fn login(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(query): Query<LoginToken>,
) -> Response {
    let here = Here {
        session: crate::web::session_id(&headers),
        elsewhere: headers
            .get("sec-fetch-site")
            .is_some_and(|site| site == "cross-site"),
    };
    log_in(app, peer, query.token, Some(here)).await
}

/// `POST /login` with `token=T` (a form's body): the ask page's answer, which replaces the
/// browser's session. The guard let it in only with the console's own `Origin`, so no page
/// elsewhere can send it.
pub(super) async fn confirm_login(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    form: Result<Form<LoginToken>, FormRejection>,
) -> Response {
    let Ok(Form(form)) = form else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "a login's body is a form with the token (`token=…`, \
             application/x-www-form-urlencoded): open the login link instead",
        );
    };
    log_in(app, peer, form.token, None).await
}

/// What a browser brought to a login link: its session cookie, and whether a page on another
/// site led it there.
struct Here {
    session: Option<String>,
    elsewhere: bool,
}

/// Logs in with `token`, after asking when `here` (a link opened, not the ask page's answer)
/// may hold a session of someone else.
async fn log_in(
    app: Arc<App>,
    peer: SocketAddr,
    token: Option<String>,
    here: Option<Here>,
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
    let login = match token {
        Some(token) => {
            let app = app.clone();
            tokio::task::spawn_blocking(move || {
                let login = decide(&app, &token, here.as_ref());
                (login, token)
            })
            .await
            .ok()
        }
        None => None,
    };
    let Some((login, token)) = login else {
        return not_valid();
    };
    match login {
        Login::Refused => not_valid(),
        Login::Ask { person, why } => {
            // The link is good: asking is no failed attempt.
            app.lock_logins().succeeded(client, began);
            ask_page(&person, &why, &token)
        }
        Login::Opened(session) => {
            app.lock_logins().succeeded(client, began);
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
    }
}

/// Whether `token` logs in now or asks first (see [`login`]); reads and writes files.
fn decide(app: &App, token: &str, here: Option<&Here>) -> Login {
    if let Some(here) = here {
        let person = match app.sessions.people().link_person(token) {
            Ok(Some(person)) => person,
            Ok(None) => return Login::Refused,
            Err(e) => {
                tracing::error!("{e:#}");
                return Login::Refused;
            }
        };
        let holder = here
            .session
            .as_deref()
            .and_then(|id| app.sessions.person(id));
        match holder {
            Some(holder) if holder.id != person.id => {
                let why = format!(
                    "This browser is logged in as {} ({}). Logging in as {} ({}) ends that \
                     session here.",
                    holder.name,
                    holder.tier.as_str(),
                    person.name,
                    person.tier.as_str()
                );
                return Login::Ask { person, why };
            }
            None if here.elsewhere => {
                let why = format!(
                    "A page on another site opened this login link. If you did not mean to \
                     log in as {} ({}), keep the session this browser has: it stays as it is.",
                    person.name,
                    person.tier.as_str()
                );
                return Login::Ask { person, why };
            }
            _ => {}
        }
    }
    match app.sessions.log_in(token) {
        Some((session, _person)) => Login::Opened(session),
        None => Login::Refused,
    }
}

/// The page that asks before a link replaces a session: its form POSTs the token (in the body,
/// never in an address) to `/login`.
fn ask_page(person: &Person, why: &str, token: &str) -> Response {
    let page = fill(
        ASK_PAGE,
        &[
            ("person", &person.name),
            ("why", why),
            ("token", token),
            ("stay", "Keep this browser's session"),
        ],
    );
    let mut response = Html(page).into_response();
    response.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static(ASK_REFERRER_POLICY),
    );
    response
}

/// `template` with each `{name}` of `values` replaced by its value, escaped, in one pass (a
/// value that holds `{token}` stays as it is).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut filled = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('{') {
        filled.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        let named = values.iter().find(|(name, _)| {
            rest.strip_prefix(name)
                .is_some_and(|after| after.starts_with('}'))
        });
        match named {
            Some((name, value)) => {
                filled.push_str(&escape(value));
                rest = &rest[name.len() + 1..];
            }
            None => filled.push('{'),
        }
    }
    filled.push_str(rest);
    filled
}

/// `text` as HTML text or an attribute's value.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// The answer to a link that logs nobody in: a page in the console's style that says how to
/// get a new link (no script, like the ask page).
fn not_valid() -> Response {
    (StatusCode::UNAUTHORIZED, Html(NOT_VALID_PAGE)).into_response()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ask_page_shows_a_name_as_text_and_fills_each_place_once() {
        let filled = fill(
            "<h1>{person}</h1><input value=\"{token}\">{missing}",
            &[("person", "<b>\"{token}\"</b>"), ("token", "ab12")],
        );
        assert_eq!(
            filled,
            "<h1>&lt;b&gt;&quot;{token}&quot;&lt;/b&gt;</h1><input value=\"ab12\">{missing}"
        );
    }
}
