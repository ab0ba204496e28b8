//! The web console (DESIGN §14): the native actor `web`, a client of the broker like the
//! console, serving a page and its API over HTTP.
//!
//! `start` binds the address, prints the owner's login link and runs three tasks: the HTTP
//! server (axum), the reader of `web`'s mailbox (replies to API calls go to their waiting call;
//! every other message becomes an event for the open pages), and a sampler that turns the
//! router's counters into rates and the graph once a second while a page is open.
//! Security: every `/api/` call needs a session cookie (HttpOnly, SameSite=Strict) made by a
//! one-time login link; a state-changing call must carry the page's own `Origin`; the `Host`
//! header must name this server (no DNS rebinding); bodies over [`BODY_LIMIT`] are refused with
//! 413; every response forbids framing and sniffing, and the page allows only its own scripts.

mod api;
mod events;
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
use rates::Rates;

/// Where `sausage run` serves the page unless `--web ADDR` says otherwise.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7878";
/// The largest request body; larger ones are refused with 413.
pub const BODY_LIMIT: usize = 1 << 20;
/// The session cookie's name.
pub const SESSION_COOKIE: &str = "sausage_session";
/// How often the sampler reads the router's counters while a page is open.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// How many of the messages sent for people `web` remembers the person of. A reply to an
/// older one, without a `for`, goes to owners' pages only: never to the wrong person.
const SENT_REMEMBERED: usize = 10_000;

/// The people that `web`'s latest messages were sent for.
#[derive(Default)]
struct Sent {
    person: HashMap<String, String>,
    order: std::collections::VecDeque<String>,
}

impl Sent {
    fn remember(&mut self, id: String, person: String) {
        if self.order.len() >= SENT_REMEMBERED
            && let Some(oldest) = self.order.pop_front()
        {
            self.person.remove(&oldest);
        }
        self.order.push_back(id.clone());
        self.person.insert(id, person);
    }
}

/// The web console's shared state.
pub struct App {
    broker: Arc<Broker>,
    me: ActorId,
    sessions: Sessions,
    events: Events,
    /// Requests the API sent and waits on: message id → the call waiting for its reply.
    waiting: Mutex<HashMap<String, oneshot::Sender<Arc<Envelope>>>>,
    /// Whom the messages `web` sent for people were from: message id → person, so that replies
    /// and a turn's messages go to that person's pages only. The oldest are forgotten past
    /// [`SENT_REMEMBERED`].
    sent: Mutex<Sent>,
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

/// Binds `addr` and serves the console of `broker`'s world there.
pub async fn start(broker: Arc<Broker>, addr: SocketAddr) -> Result<Web> {
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
    let (login_link, sessions) = tokio::task::spawn_blocking(move || -> Result<_> {
        let people = People::new(&world);
        let owner = people.console_person()?;
        let token = people.new_link(&owner.id)?;
        let sessions = Sessions::load(world.web_sessions_path(), people);
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
        Ok((format!("{link_origin}/login?token={token}"), sessions))
    })
    .await
    .context("host bug: starting the web console failed")??;
    let run = format!("{:x}", std::process::id() ^ rand_u32());
    let app = Arc::new(App {
        me: ActorId::parse("web").expect("a valid id"),
        broker: broker.clone(),
        sessions,
        events: Events::new(run),
        waiting: Mutex::default(),
        sent: Mutex::default(),
        origin,
        hosts,
        rates: Mutex::new(Rates::default()),
    });
    let router = routes(app.clone());
    let server = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            eprintln!("sausage: the web console stopped: {e}");
        }
    });
    let mailbox = tokio::spawn(read_mailbox(app.clone()));
    let sampler = tokio::spawn(sample(app));
    Ok(Web {
        login_link,
        addr,
        tasks: vec![server, mailbox, sampler],
    })
}

fn routes(app: Arc<App>) -> Router {
    Router::new()
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
        let Some(person) = session_of(&app, &request) else {
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
        headers.insert(name, HeaderValue::from_static(value));
    }
    if path.starts_with("/api/") || path == "/login" {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

fn header_str(request: &Request, name: header::HeaderName) -> Option<&str> {
    request.headers().get(name)?.to_str().ok()
}

/// The session cookie's person, if the session is valid.
fn session_of(app: &App, request: &Request) -> Option<Person> {
    app.sessions.person(&session_id(request.headers())?)
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
        let waiter = message
            .reply_to
            .as_ref()
            .and_then(|id| app.lock_waiting().remove(id));
        match waiter {
            Some(waiter) => {
                // The call may have given up waiting; then the reply has nobody to go to.
                let _ = waiter.send(message);
            }
            None => {
                let body = message.body_value();
                let audience = app.audience(&message, &body);
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

impl App {
    /// Whose pages a message to `web` is for: the person its body names in `for` (the agent
    /// names the person of every message about a conversation), else the person of the message
    /// it replies to or of the turn it belongs to, else owners.
    fn audience(&self, message: &Envelope, body: &serde_json::Value) -> Audience {
        if let Some(person) = body["for"].as_str() {
            return Audience::Person(person.to_string());
        }
        let sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        [message.reply_to.as_deref(), body["turn"].as_str()]
            .into_iter()
            .flatten()
            .find_map(|id| sent.person.get(id))
            .map_or(Audience::Owners, |person| Audience::Person(person.clone()))
    }

    /// Notes that message `id` was sent for `person`.
    fn sent_for(&self, id: &str, person: &str) {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.remember(id.to_string(), person.to_string());
    }

    fn lock_waiting(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Arc<Envelope>>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
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
