//! The web console (DESIGN §14): the native actor `web`, a client of the broker like the
//! console, serving a page and its API over HTTP.
//!
//! `start` binds the address, prints the owner's login link and runs three tasks: the HTTP
//! server (axum), the reader of `web`'s mailbox (replies to API calls go to their waiting call;
//! every other message becomes an event for the open pages), and a sampler that turns the
//! router's counters into rates and the graph once a second while a page is open, and a watch
//! that ends the event streams of pages whose person was removed or changed tier.
//! No handler or task reads or writes a file on the world's thread: sessions, people, statuses
//! and actors' files are read on the blocking pool.
//! Security: every `/api/` call needs a session cookie (HttpOnly, SameSite=Strict) made by a
//! one-time login link (which asks before it replaces another person's session); a
//! state-changing call, and that question's answer (`POST /login`), must carry the page's own
//! `Origin`; the `Host`
//! header must name this server (no DNS rebinding); bodies over [`BODY_LIMIT`] are refused with
//! 413; every response forbids framing and sniffing, and the page allows only its own scripts.

mod api;
mod events;
mod logins;
pub mod metrics;
mod questions;
mod rates;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::broker::Broker;
use crate::message::{ActorId, Envelope};
use crate::people::{People, Person, Sessions};
pub use events::{Audience, Events, Viewer};
use logins::Attempts;
use questions::Questions;
use rates::Rates;

/// Where `sausage run` serves the page unless `--web ADDR` says otherwise.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7878";
/// The largest request body; larger ones are refused with 413.
pub const BODY_LIMIT: usize = 1 << 20;
/// The session cookie's name.
pub const SESSION_COOKIE: &str = "sausage_session";
/// How often the sampler reads the router's counters while a page is open.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// How often the open pages are checked against `people.json`: a page whose person was
/// removed, or whose tier or session changed, stops getting events within this long.
const PAGE_RECHECK: Duration = Duration::from_secs(2);
/// How many of the messages sent for people `web` remembers the person of. A reply to an
/// older one, without a `for`, goes to owners' pages only: never to the wrong person.
const SENT_REMEMBERED: usize = 10_000;
/// The one actor whose `for` and `turn` say whose page a message is for: the agent names the
/// person of every message about a conversation. Any other actor's are ignored, or an actor
/// could show its message on any person's page.
const AGENT: &str = "agent";

/// A message `web` sent for a person: whom for, and to whom (only that actor's reply, or the
/// broker's `undeliverable`, is theirs).
struct SentFor {
    person: String,
    to: ActorId,
}

/// The people that `web`'s latest messages were sent for.
#[derive(Default)]
struct Sent {
    by_id: HashMap<String, SentFor>,
    order: std::collections::VecDeque<String>,
}

impl Sent {
    fn remember(&mut self, id: String, sent: SentFor) {
        if self.order.len() >= SENT_REMEMBERED
            && let Some(oldest) = self.order.pop_front()
        {
            self.by_id.remove(&oldest);
        }
        self.order.push_back(id.clone());
        self.by_id.insert(id, sent);
    }
}

/// A call waiting for the reply to the message it sent to `to`.
struct Waiter {
    to: ActorId,
    reply: oneshot::Sender<Arc<Envelope>>,
}

/// The web console's shared state.
pub struct App {
    broker: Arc<Broker>,
    /// The binary's version and commit, for `sausage_build_info`.
    build: metrics::Build,
    me: ActorId,
    sessions: Sessions,
    events: Events,
    /// Requests the API sent and waits on: message id → the call waiting for its reply (only
    /// from the actor it asked, or the broker's `undeliverable`).
    waiting: Mutex<HashMap<String, Waiter>>,
    /// Turns an MCP call follows: the id of the message that started one → where every message
    /// of it goes (from the agent, or the broker's `undeliverable`) until the call ends.
    turns: Arc<Mutex<HashMap<String, TurnSender>>>,
    /// Whom the messages `web` sent for people were from: message id → person, so that replies
    /// and a turn's messages go to that person's pages only. The oldest are forgotten past
    /// [`SENT_REMEMBERED`].
    sent: Mutex<Sent>,
    /// The agent's questions each person may answer (`POST /api/chat` with `answer`).
    questions: Mutex<Questions>,
    /// The open questions as last changed → the task that keeps them in
    /// `broker/web/questions.json` (only the newest matters; closing it ends that task).
    questions_saved: tokio::sync::watch::Sender<Vec<u8>>,
    /// Login attempts per client, for the 429 past too many failures.
    logins: Mutex<Attempts>,
    /// `http://ADDR`: the only `Origin` a state-changing call may carry.
    origin: String,
    /// The `Host` headers that name this server.
    hosts: Vec<String>,
    rates: Mutex<Rates>,
}

/// A running web console.
pub struct Web {
    /// The owner's login link, printed at start.
    pub login_link: String,
    pub addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Web {
    /// Stops serving.
    pub fn stop(self) {
        for task in self.tasks {
            task.abort();
        }
    }
}

/// Binds `addr` and serves the console of `broker`'s world there; `build` is what `/metrics`
/// says the binary is.
pub async fn start(broker: Arc<Broker>, addr: SocketAddr, build: metrics::Build) -> Result<Web> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!(
            "the web console cannot listen on {addr}; choose another with --web ADDR, or --no-web"
        )
    })?;
    let addr = listener.local_addr()?;
    let origin = format!("http://{addr}");
    let mut hosts = vec![addr.to_string()];
    if addr.ip().is_loopback() {
        hosts.push(format!("localhost:{}", addr.port()));
    }
    // The people file's change is synced: on the blocking pool, off the world's thread.
    let world = broker.world.clone();
    let link_origin = origin.clone();
    let (login_link, sessions, questions) = tokio::task::spawn_blocking(move || -> Result<_> {
        let questions =
            Questions::load(&std::fs::read(world.web_questions_path()).unwrap_or_default());
        let people = People::new(&world);
        let owner = people.console_person()?;
        let token = people.new_link(&owner.id)?;
        let sessions = Sessions::load(world.web_sessions_path(), people);
        crate::people::readers::new_local_token(&world).with_context(|| {
            format!(
                "{}: cannot make the token `sausage status` reads with",
                world.local_token_path().display()
            )
        })?;
        let address = world.web_address_path();
        std::fs::create_dir_all(address.parent().expect("in broker/web"))
            .and_then(|()| {
                crate::fs::write_atomically_unsynced(&address, addr.to_string().as_bytes())
            })
            .with_context(|| {
                format!(
                    "{}: cannot record the web console's address",
                    address.display()
                )
            })?;
        Ok((
            format!("{link_origin}/login?token={token}"),
            sessions,
            questions,
        ))
    })
    .await
    .context("host bug: starting the web console failed")??;
    let run = format!("{:x}", std::process::id() ^ rand_u32());
    let (questions_saved, question_changes) = tokio::sync::watch::channel(questions.save());
    let app = Arc::new(App {
        me: ActorId::parse("web").expect("a valid id"),
        broker: broker.clone(),
        build,
        sessions,
        events: Events::new(run),
        waiting: Mutex::default(),
        turns: Arc::default(),
        sent: Mutex::default(),
        questions: Mutex::new(questions),
        questions_saved,
        logins: Mutex::default(),
        origin,
        hosts,
        rates: Mutex::new(Rates::default()),
    });
    let router = routes(app.clone());
    // Each connection's address is the client whose failed logins count (`logins`).
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, service).await {
            tracing::error!("the web console stopped: {e}");
        }
    });
    let mailbox = tokio::spawn(read_mailbox(app.clone()));
    let sampler = tokio::spawn(sample(app.clone()));
    let keeper = tokio::spawn(keep_questions(
        broker.world.web_questions_path(),
        question_changes,
    ));
    let watch = tokio::spawn(watch_pages(app));
    Ok(Web {
        login_link,
        addr,
        tasks: vec![server, mailbox, sampler, watch, keeper],
    })
}

/// Keeps the open questions in `path`, written off the world's thread after each change; a
/// change made while one is written is written next (only the newest counts). Derived state:
/// unsynced, and a crash loses at most the last change (the agent still asks again).
async fn keep_questions(
    path: std::path::PathBuf,
    mut changes: tokio::sync::watch::Receiver<Vec<u8>>,
) {
    while changes.changed().await.is_ok() {
        let bytes = changes.borrow_and_update().clone();
        let at = path.clone();
        let written =
            tokio::task::spawn_blocking(move || crate::fs::write_atomically_unsynced(&at, &bytes))
                .await;
        if let Ok(Err(e)) = written {
            tracing::warn!("{}: cannot keep the open questions: {e}", path.display());
        }
    }
}

fn routes(app: Arc<App>) -> Router {
    Router::new()
        .route("/metrics", axum::routing::get(metrics::metrics))
        .route("/status", axum::routing::get(metrics::status))
        .merge(
            Router::new()
                .nest_service("/mcp", api::mcp::service(app.clone()))
                .layer(middleware::from_fn_with_state(
                    app.clone(),
                    api::mcp::authenticate,
                )),
        )
        .merge(api::routes())
        .merge(api::pages())
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Checks every request before its handler: the `Host` names this server; `/api/` needs a
/// session, and a state-changing call the page's `Origin`. Adds the security headers to every
/// response.
async fn guard(State(app): State<Arc<App>>, mut request: Request, next: Next) -> Response {
    let host = header_str(&request, header::HOST);
    if !host.is_some_and(|h| app.hosts.iter().any(|ok| ok == h)) {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "this server answers only to its own address",
        );
    }
    let path = request.uri().path().to_string();
    if path.starts_with("/api/") {
        let id = session_id(request.headers());
        let Some(person) = session_of(&app, id).await else {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "not logged in: open the login link `sausage run` printed",
            );
        };
        let changes = !matches!(*request.method(), Method::GET | Method::HEAD);
        if changes && header_str(&request, header::ORIGIN) != Some(app.origin.as_str()) {
            return refuse(
                StatusCode::FORBIDDEN,
                "a change must come from the console's own page (its Origin header)",
            );
        }
        request.extensions_mut().insert(person);
    } else if path == "/login"
        && request.method() == Method::POST
        && header_str(&request, header::ORIGIN) != Some(app.origin.as_str())
    {
        // The answer of the page that asks before a link replaces a session: only that page may
        // send it, or a page elsewhere could swap the session with a form of its own.
        return refuse(
            StatusCode::FORBIDDEN,
            "a login must come from the console's own page (its Origin header): open the \
             login link again",
        );
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; \
             form-action 'self'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        // A page may choose its own referrer policy (the login's ask page does, so that its
        // form's POST carries its `Origin`); the others get these.
        headers
            .entry(name)
            .or_insert(HeaderValue::from_static(value));
    }
    if path.starts_with("/api/") || path == "/login" {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

fn header_str(request: &Request, name: header::HeaderName) -> Option<&str> {
    request.headers().get(name)?.to_str().ok()
}

/// The person of the session id a cookie carried, if the session is valid. The check reads `people.json` (and
/// may forget a dead session in `sessions.json`): on the blocking pool.
async fn session_of(app: &Arc<App>, id: Option<String>) -> Option<Person> {
    let id = id?;
    let app = app.clone();
    tokio::task::spawn_blocking(move || app.sessions.person(&id))
        .await
        .ok()
        .flatten()
}

/// The session id the request's cookie carries.
fn session_id(headers: &axum::http::HeaderMap) -> Option<String> {
    let cookies = headers.get(header::COOKIE)?.to_str().ok()?;
    cookies.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == SESSION_COOKIE).then(|| value.to_string())
    })
}

/// A refusal as JSON: `{"error": why}`.
pub fn refuse(status: StatusCode, why: &str) -> Response {
    (status, axum::Json(json!({ "error": why }))).into_response()
}

/// Reads `web`'s mailbox: a reply an API call waits for goes to it; everything else is an
/// event for the open pages.
async fn read_mailbox(app: Arc<App>) {
    let mailbox = app.broker.native_mailbox(app.me.as_str());
    loop {
        let message = mailbox.recv().await;
        let waiter = message.reply_to.as_ref().and_then(|id| {
            let mut waiting = app.lock_waiting();
            let asked = waiting
                .get(id)
                .is_some_and(|w| message.from == w.to || message.from == ActorId::broker());
            asked.then(|| waiting.remove(id)).flatten()
        });
        if waiter.is_none()
            && (message.from.as_str() == "agent" || message.from == ActorId::broker())
            && let Some(id) = &message.reply_to
        {
            // A turn an MCP call follows; its person's pages see it too.
            let turns = app.lock_turns();
            if let Some(turn) = turns.get(id) {
                let _ = turn.send(message.clone());
            }
        }
        match waiter {
            Some(waiter) => {
                // The call may have given up waiting; then the reply has nobody to go to.
                let _ = waiter.reply.send(message);
            }
            None => {
                let body = message.body_value();
                let audience = app.audience(&message, &body);
                app.note_questions(&message, &body, &audience);
                app.events.publish(
                    "message",
                    &json!({
                        "id": message.id, "from": message.from.as_str(),
                        "reply_to": message.reply_to, "body": body,
                    }),
                    audience,
                );
            }
        }
    }
}

/// Once a second while a page is open: the router's counters become rates and the graph,
/// and the actors' table and the graph go out as snapshots when they changed.
async fn sample(app: Arc<App>) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let traffic = app.broker.router.traffic();
        app.lock_rates().add(std::time::Instant::now(), &traffic);
        if !app.events.has_pages() {
            continue;
        }
        let actors = api::actors_table(&app).await;
        app.events.snapshot("actors", &actors);
        let graph = app.lock_rates().graph();
        app.events.snapshot("graph", &graph);
    }
}

/// Every [`PAGE_RECHECK`] while a page is open: the pages whose session ended, whose person
/// was removed or whose tier changed are dropped, which ends their event streams. The people
/// file is read once for all pages, on the blocking pool.
async fn watch_pages(app: Arc<App>) {
    let mut tick = tokio::time::interval(PAGE_RECHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !app.events.has_pages() {
            continue;
        }
        let people = app.sessions.people().clone();
        let people = match tokio::task::spawn_blocking(move || people.list()).await {
            Ok(Ok(people)) => people,
            // An unreadable people file lets nobody in (`Sessions::person` says why at the
            // next request), so no page goes on either.
            Ok(Err(_)) => Vec::new(),
            Err(_) => continue,
        };
        app.events.keep_pages(|viewer| {
            app.sessions
                .person_among(&viewer.session, &people)
                .is_some_and(|person| person.tier == viewer.tier)
        });
    }
}

/// The messages of one agent turn an MCP call follows, in order; it stops being followed when
/// this is dropped.
pub struct FollowedTurn {
    messages: tokio::sync::mpsc::UnboundedReceiver<Arc<Envelope>>,
    id: String,
    turns: Arc<Mutex<HashMap<String, TurnSender>>>,
}

type TurnSender = tokio::sync::mpsc::UnboundedSender<Arc<Envelope>>;

impl Drop for FollowedTurn {
    fn drop(&mut self) {
        self.turns.lock().expect("turns lock").remove(&self.id);
    }
}

impl FollowedTurn {
    /// The turn's next message; `None` once nothing more can come.
    pub async fn next(&mut self) -> Option<Arc<Envelope>> {
        self.messages.recv().await
    }
}

impl App {
    /// Says `text` to `agent` for `person`, as the chat does, and follows the turn it starts.
    pub async fn follow_turn(
        &self,
        person: &Person,
        agent: &ActorId,
        text: &str,
    ) -> Result<FollowedTurn, String> {
        let own = self.broker.router.next_id();
        let id = format!("{}/{own}", self.me);
        let (sender, messages) = tokio::sync::mpsc::unbounded_channel();
        self.lock_turns().insert(id.clone(), sender);
        self.sent_for(&id, &person.id, agent);
        let mut out = crate::message::Outgoing::new(agent, &json!({"type": "text", "text": text}))
            .spoken_by(Some(crate::message::Speaker {
                person: ActorId::parse(&person.id).map_err(|e| format!("people.json: {e}"))?,
                tier: person.tier,
            }));
        out.id = Some(own);
        let turn = FollowedTurn {
            messages,
            id: id.clone(),
            turns: self.turns.clone(),
        };
        self.broker.send(&self.me, out).await;
        Ok(turn)
    }

    fn lock_turns(&self) -> std::sync::MutexGuard<'_, HashMap<String, TurnSender>> {
        self.turns.lock().expect("turns lock")
    }
}

impl App {
    /// Whose pages a message to `web` is for. From `agent` (and the broker's `approval` for
    /// one person): the person its body names in `for` (the agent names the person of every
    /// message about a conversation), else the
    /// person of the turn it belongs to. From anyone: the person of the message it replies to,
    /// when it comes from the actor that message went to (or is the broker's). Else owners.
    fn audience(&self, message: &Envelope, body: &serde_json::Value) -> Audience {
        let from_agent = message.from.as_str() == AGENT;
        let from_broker = message.from == ActorId::broker();
        if (from_agent || from_broker)
            && let Some(person) = body["for"].as_str()
        {
            return Audience::Person(person.to_string());
        }
        let sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let replied = message
            .reply_to
            .as_deref()
            .and_then(|id| sent.by_id.get(id))
            .filter(|s| message.from == s.to || message.from == ActorId::broker());
        let turn = body["turn"]
            .as_str()
            .filter(|_| from_agent)
            .and_then(|id| sent.by_id.get(id));
        replied
            .or(turn)
            .map_or(Audience::Owners, |s| Audience::Person(s.person.clone()))
    }

    /// Keeps the agent's questions open for the people they were put to, and closes those of
    /// a turn that ended (its final `text`).
    fn note_questions(&self, message: &Envelope, body: &serde_json::Value, audience: &Audience) {
        if message.from.as_str() != AGENT {
            return;
        }
        let turn = body["turn"].as_str();
        let mut questions = self.questions.lock().unwrap_or_else(|e| e.into_inner());
        match (body["type"].as_str(), audience, turn) {
            (Some("question"), Audience::Person(person), _) => {
                questions.asked(&message.id, person, turn);
            }
            (Some("text"), _, Some(turn)) => questions.turn_ended(turn),
            _ => return,
        }
        self.questions_saved.send_replace(questions.save());
    }

    /// Closes question `id` for `person`'s answer (`Questions::answer`), and keeps the change.
    fn answer_question(&self, id: &str, person: &str) -> Result<(), String> {
        let mut questions = self.lock_questions();
        questions.answer(id, person)?;
        self.questions_saved.send_replace(questions.save());
        Ok(())
    }

    /// Notes that message `id` was sent to `to` for `person`.
    fn sent_for(&self, id: &str, person: &str, to: &ActorId) {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let sent_for = SentFor {
            person: person.to_string(),
            to: to.clone(),
        };
        sent.remember(id.to_string(), sent_for);
    }

    fn lock_waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiter>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_questions(&self) -> std::sync::MutexGuard<'_, Questions> {
        self.questions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_logins(&self) -> std::sync::MutexGuard<'_, Attempts> {
        self.logins.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_rates(&self) -> std::sync::MutexGuard<'_, Rates> {
        self.rates.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A little randomness for the run id (not a secret).
fn rand_u32() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

/// An empty body with a status, for redirects and the like.
fn empty(status: StatusCode) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    response
}
