//! The world's public address (DESIGN §24): the native actor `http`, a client of the broker like
//! the web console, serving the routes actors hold.
//!
//! `start` binds the address and runs, on a tokio runtime of its own (threads apart from the
//! world's one, so parsing and files never queue behind actors; a request reaches its actor only as
//! a message in its mailbox), the accept loop (hyper's HTTP/1, with a deadline on each request's
//! head and a bound on its size), the reader of `http`'s mailbox (each answer goes to the request
//! waiting for it) and the writer of the access lines in actors' logs. A request is found in the
//! broker's route table; a static route is served from the actor's committed `/public` files
//! (`files`) without waking it; any other becomes a message in the actor's mailbox, journalled like
//! every message, and its answer is the response (`message`).
//! Security: nothing of the web console is served here (a separate listener and router, no
//! cookie of the console); `cookie`, `authorization` and the connection's headers reach an
//! actor only where its route passes them; bodies past the route's `max_body` are refused
//! before they are read whole; every failure is answered with its status and a short plain
//! body.

mod files;
mod peers;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::body::Body;
use bytes::Bytes;
use futures_util::StreamExt;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use http::{HeaderValue, Method, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::mpsc;

use crate::broker::Broker;
use crate::message::http::{self as message, Chunk};
use crate::message::{ActorId, Envelope, Outgoing, Trace};
use crate::traces::{self, Span};
use crate::world::routes::Route;

/// Where `sausage run` serves the world's routes unless `--http ADDR` says otherwise.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8080";
/// How long a client has to send a request's head; a slower one is cut off.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The read buffer a request head (request line and headers) must fit in: hyper refuses a
/// head that does not end within about twice this (its buffer grows by reads), with 431.
const MAX_HEAD_BYTES: usize = 32 << 10;
/// A request to an actor that restarts after a crash at least this far off is answered 503
/// with `Retry-After` rather than kept waiting; a nearer restart is waited for.
const CRASHING: Duration = Duration::from_secs(1);
/// How often the access lines waiting are appended to actors' logs: a batch a tenth of a
/// second rather than a file write (and a hop to a file thread) every few requests.
const ACCESS_LINES_EVERY: Duration = Duration::from_millis(100);
/// How often the rate limiters forget the clients they have not seen for a while.
const FORGET_CLIENTS_EVERY: Duration = Duration::from_secs(60);

/// The public address's own worker threads: hyper's parsing, static files and the waits for
/// actors' answers run there, beside the world's one thread rather than queued behind its
/// actors (two: this host's bench machine has two cores, and the world's thread takes one when
/// actors are busy).
const HTTP_THREADS: usize = 2;
/// The public address's threads for blocking work: the access lines' appends, and the worker
/// a chunked read of a large static file hands over while it reads (`block_in_place`). Few,
/// so that under load they find the next job queued instead of sleeping and being woken for
/// each (with tokio's default of 512, a hop to one cost about 15 thread switches a request);
/// 2 rather than 1, so that one slow read does not hold the others.
const HTTP_BLOCKING_THREADS: usize = 2;
/// How long [`Http::stop`] waits for the public address's threads to end.
const STOP_PATIENCE: Duration = Duration::from_secs(5);

/// A running public address.
pub struct Http {
    pub addr: SocketAddr,
    /// The runtime every task of the public address runs on; shutting it down drops them all
    /// (the accept loop, each connection with its request, the mailbox reader and the access
    /// log's writer). Taken by [`Http::stop`].
    runtime: Option<tokio::runtime::Runtime>,
}

impl Http {
    /// Stops serving: every connection is closed, a request waiting for its actor with it
    /// (its answer, if one comes, is dropped), and the public address's threads have ended
    /// when this returns (or [`STOP_PATIENCE`] passed).
    pub async fn stop(mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        // Waiting for threads to end blocks, so it is done off the world's thread. An error
        // only says the blocking pool is shutting down itself.
        let _ = tokio::task::spawn_blocking(move || runtime.shutdown_timeout(STOP_PATIENCE)).await;
    }
}

impl Drop for Http {
    /// Dropped without [`Http::stop`] (an error on the way out), the public address still
    /// stops, without waiting: a runtime dropped whole would block, which tokio refuses on the
    /// world's thread.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A route's limit of requests a second by client address.
type Limiter = DefaultKeyedRateLimiter<IpAddr>;

/// What the request handlers share.
struct App {
    broker: Arc<Broker>,
    me: ActorId,
    /// Requests sent to actors and waiting: message id → where the answer goes.
    waiting: Mutex<HashMap<String, Waiter>>,
    /// Each route's rate limiter (by client address), with the rate it was made for.
    limiters: Mutex<HashMap<String, (u32, Arc<Limiter>)>>,
    /// To the task that appends each answer's line to its actor's log.
    access: mpsc::UnboundedSender<(ActorId, String)>,
}

/// A request waiting for its actor's answer (and, for a streamed one, the rest of it).
struct Waiter {
    to: ActorId,
    answers: mpsc::Sender<Arc<Envelope>>,
}

/// The messages of a streamed answer that may wait for a slow client; past them the answer is
/// cut off, so an actor that streams faster than its client reads cannot fill the host.
const STREAM_BACKLOG: usize = 1024;

/// Binds `addr` and serves the routes of `broker`'s world there, on the public address's own
/// threads ([`HTTP_THREADS`]).
pub async fn start(broker: Arc<Broker>, addr: SocketAddr) -> Result<Http> {
    let cannot_listen = || {
        format!(
            "the public address cannot listen on {addr}; choose another with --http ADDR, or \
             --no-http"
        )
    };
    let listener = std::net::TcpListener::bind(addr).with_context(cannot_listen)?;
    listener.set_nonblocking(true).with_context(cannot_listen)?;
    let addr = listener.local_addr()?;
    broker.serving_http_at(addr);
    let world = broker.world.clone();
    tokio::task::spawn_blocking(move || {
        let path = world.http_address_path();
        std::fs::create_dir_all(path.parent().expect("in broker/http"))
            .and_then(|()| crate::fs::write_atomically_unsynced(&path, addr.to_string().as_bytes()))
            .with_context(|| format!("{}: cannot record the public address", path.display()))
    })
    .await
    .context("host bug: recording the public address failed")??;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(HTTP_THREADS)
        .max_blocking_threads(HTTP_BLOCKING_THREADS)
        .thread_name("sausage-http")
        .enable_all()
        .build()
        .context("the public address cannot start its threads")?;
    // A tokio listener belongs to the runtime it is made in: the public address's.
    let listener = {
        let _in_runtime = runtime.enter();
        tokio::net::TcpListener::from_std(listener)
    };
    let listener = match listener {
        Ok(listener) => listener,
        Err(e) => {
            runtime.shutdown_background();
            return Err(e).with_context(cannot_listen);
        }
    };
    let (access, lines) = mpsc::unbounded_channel();
    let app = Arc::new(App {
        me: ActorId::parse("http").expect("a valid id"),
        broker: broker.clone(),
        waiting: Mutex::default(),
        limiters: Mutex::default(),
        access,
    });
    let answers = Arc::downgrade(&app);
    broker
        .native_mailbox(app.me.as_str())
        .tap(Box::new(move |message| {
            answers.upgrade().is_some_and(|app| app.hand_over(message))
        }));
    runtime.spawn(accept(listener, app.clone()));
    runtime.spawn(read_mailbox(app.clone()));
    runtime.spawn(write_access_lines(broker.world.clone(), lines));
    runtime.spawn(forget_clients(app));
    Ok(Http {
        addr,
        runtime: Some(runtime),
    })
}

/// Accepts connections and serves each on its own task.
async fn accept(listener: tokio::net::TcpListener, app: Arc<App>) {
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, say: wait a little rather than spin.
                tracing::warn!("the public address cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let app = app.clone();
                async move { Ok::<_, Infallible>(handle(app, remote, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD_BYTES)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            // A client that goes away, or breaks the protocol, ends only its connection.
            let _ = connection.await;
        });
    }
}

/// Answers one request, counts the answer by route and status, and, for a route's actor, adds
/// its line to the actor's log.
async fn handle(
    app: Arc<App>,
    remote: SocketAddr,
    request: http::Request<Incoming>,
) -> Response<Body> {
    let started = Instant::now();
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let mut span = traces::on().then(|| {
        let parent = request
            .headers()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| Trace::parse(v).ok());
        let mut span = Span::start(format!("{method} http"), parent);
        span.set("http.request.method", method.to_string());
        span.set("url.path", path.clone());
        span
    });
    let trace = span.as_ref().map(Span::trace);
    let (route, response) = route_request(&app, remote, request, trace).await;
    let status = response.status().as_u16();
    let seconds = started.elapsed().as_secs_f64();
    let at = route.as_ref().map_or("none", |(at, _)| at.as_str());
    app.broker.counters.http.answered(at, status, seconds);
    if let Some(mut span) = span.take() {
        span.set("http.route", at.to_string());
        span.set("http.response.status_code", i64::from(status));
        if status >= 500 {
            span.fail(format!("answered {status}"));
        }
        span.end();
    }
    if let Some((_, actor)) = route {
        let line = format!(
            "{method} {path} {status} {} ms",
            started.elapsed().as_millis()
        );
        let _ = app.access.send((actor, line));
    }
    response
}

/// Finds the route of a request and answers it: the route's path and actor (when one matched)
/// and the response.
async fn route_request(
    app: &Arc<App>,
    remote: SocketAddr,
    request: http::Request<Incoming>,
    trace: Option<Trace>,
) -> (Option<(String, ActorId)>, Response<Body>) {
    let path = request.uri().path().to_string();
    if let Err(why) = files::check_request_path(&path) {
        return (None, plain(StatusCode::BAD_REQUEST, &why));
    }
    let table = app.broker.route_table();
    let Some((at, route)) = table.find(&path) else {
        let refused = plain(
            StatusCode::NOT_FOUND,
            &format!("nothing is served at {path}"),
        );
        return (None, refused);
    };
    // The table is a snapshot: held for the request rather than the route copied out of it.
    let at = at.to_string();
    let Ok(actor) = ActorId::parse(&route.actor) else {
        let refused = plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "the route's actor is not valid",
        );
        return (None, refused);
    };
    let method = request.method().clone();
    let allowed = match &route.static_dir {
        Some(_) => method == Method::GET || method == Method::HEAD,
        None => route.allows(method.as_str()) || (method == Method::HEAD && route.allows("GET")),
    };
    let response = if !allowed {
        let mut refused = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{path} does not answer {method}"),
        );
        let allow = match &route.static_dir {
            Some(_) => "GET, HEAD".to_string(),
            None => route.methods.join(", "),
        };
        if let Ok(allow) = HeaderValue::from_str(&allow) {
            refused.headers_mut().insert(header::ALLOW, allow);
        }
        refused
    } else if !app.admit(&at, route, remote.ip()) {
        let mut refused = plain(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "too many requests from {} to {at}; try again in a second",
                remote.ip()
            ),
        );
        (refused.headers_mut()).insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        refused
    } else {
        match &route.static_dir {
            Some(dir) => {
                let elsewhere = (app.broker.cluster.as_ref())
                    .and_then(|cluster| cluster.placement.runs_elsewhere(&actor));
                match elsewhere {
                    Some(host) => app.static_elsewhere(&host, &actor, dir, &at, request).await,
                    None => files::serve(&app.broker.world, &actor, dir, &at, request).await,
                }
            }
            None => app.ask(&actor, route, remote, request, trace).await,
        }
    };
    (Some((at, actor)), response)
}

impl App {
    /// Whether `client` may make one more request of route `at` now.
    fn admit(&self, at: &str, route: &Route, client: IpAddr) -> bool {
        let Some(rate) = NonZeroU32::new(route.rate()) else {
            return true;
        };
        let limiter = {
            let mut limiters = self.limiters.lock().unwrap_or_else(|e| e.into_inner());
            match limiters.get(at) {
                Some((made_for, limiter)) if *made_for == rate.get() => limiter.clone(),
                _ => {
                    let limiter = Arc::new(RateLimiter::keyed(Quota::per_second(rate)));
                    limiters.insert(at.to_string(), (rate.get(), limiter.clone()));
                    limiter
                }
            }
        };
        limiter.check_key(&client).is_ok()
    }

    /// Sends `request` to `actor` as a message and makes its answer the response.
    async fn ask(
        self: &Arc<Self>,
        actor: &ActorId,
        route: &Route,
        remote: SocketAddr,
        request: http::Request<Incoming>,
        trace: Option<Trace>,
    ) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let max_body = route.max_body();
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max_body) {
            return too_large(max_body);
        }
        let timeout = Duration::from_secs(u64::from(route.timeout_s()));
        // A request without a body (most GETs) has nothing to wait for: no timer is set.
        let body = if hyper::body::Body::is_end_stream(&body) {
            Bytes::new()
        } else {
            match read_body(body, max_body, timeout).await {
                Ok(body) => body,
                Err(refused) => return refused,
            }
        };
        if !self.broker.runs(actor).await {
            return unavailable(&format!("actor `{actor}` is stopped"));
        }
        // A crash loop's back-off is not waited out: the caller is told when to come back.
        if let Some(left) = self
            .broker
            .restarts_in(actor)
            .filter(|left| *left >= CRASHING)
        {
            let seconds = left.as_secs() + 1;
            let mut response = unavailable(&format!(
                "actor `{actor}` is crashing; it restarts in {seconds} s"
            ));
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            return response;
        }
        let message = message::Request {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            query: parts.uri.query(),
            headers: &parts.headers,
            remote: remote.to_string(),
            body: &body,
            pass: &route.pass,
        };
        let own = self.broker.router.next_id();
        let id = format!("{}/{own}", self.me);
        let (answers, mut answered) = mpsc::channel(STREAM_BACKLOG);
        let pending = Pending {
            app: self.clone(),
            id: id.clone(),
        };
        self.lock_waiting().insert(
            id.clone(),
            Waiter {
                to: actor.clone(),
                answers,
            },
        );
        let mut out = Outgoing::new(actor, &message);
        out.id = Some(own);
        out.trace = trace;
        let mut delivery = self.broker.router.accept(&self.me, out);
        if !self.broker.router.try_deliver(&mut delivery) {
            return unavailable(&format!("actor `{actor}` has a full mailbox"));
        }
        let first = match tokio::time::timeout(timeout, answered.recv()).await {
            Ok(Some(first)) => first,
            Ok(None) | Err(_) => {
                return plain(
                    StatusCode::GATEWAY_TIMEOUT,
                    &format!(
                        "actor `{actor}` did not answer within {} s",
                        timeout.as_secs()
                    ),
                );
            }
        };
        if first.from == ActorId::broker() {
            let reply = first.body_value();
            let reason = reply["reason"]
                .as_str()
                .unwrap_or("the request did not reach it");
            let why = format!("actor `{actor}` could not answer: {reason}");
            if reply["lost"] == true {
                return plain(StatusCode::BAD_GATEWAY, &why);
            }
            return unavailable(&why);
        }
        let answer = match message::answer(&first.body) {
            Ok(answer) => answer,
            Err(why) => {
                self.broker.world.log_note(
                    actor,
                    &format!(
                        "the answer to {} {} was not sent: {why}",
                        parts.method,
                        parts.uri.path()
                    ),
                );
                return plain(
                    StatusCode::BAD_GATEWAY,
                    &format!("actor `{actor}` answered with something that is not a response"),
                );
            }
        };
        let mut response = Response::new(Body::empty());
        *response.status_mut() = answer.status;
        *response.headers_mut() = answer.headers;
        if !answer.stream {
            *response.body_mut() = Body::from(answer.body);
            return response;
        }
        let first =
            (!answer.body.is_empty()).then(|| Ok::<_, Infallible>(Bytes::from(answer.body)));
        let world = self.broker.world.clone();
        let actor = actor.clone();
        let rest = futures_util::stream::unfold(
            (answered, pending, false),
            move |(mut answered, pending, ended)| {
                let (world, actor) = (world.clone(), actor.clone());
                async move {
                    if ended {
                        return None;
                    }
                    let next = answered.recv().await?;
                    match message::chunk(&next.body_value()) {
                        Ok(Chunk::Data(data)) => {
                            Some((Ok(Bytes::from(data)), (answered, pending, false)))
                        }
                        Ok(Chunk::End) => None,
                        Err(why) => {
                            world
                                .log_note(&actor, &format!("a streamed answer was cut off: {why}"));
                            None
                        }
                    }
                }
            },
        );
        let stream = futures_util::stream::iter(first).chain(rest);
        *response.body_mut() = Body::from_stream(stream);
        response
    }

    /// Gives an answer to the request waiting for it, when it comes from the actor the request
    /// went to (or is the broker's notice that it could not go); anything else with a
    /// `reply_to` (an answer after its request gave up) is dropped. Runs on the thread that
    /// delivers the answer (the world's, mostly), as `http`'s mailbox's tap: an answer is
    /// handed on without a hop through the mailbox, and never journalled (its client does not
    /// outlive the host). False for what is no answer, which the mailbox keeps.
    fn hand_over(&self, message: &Arc<Envelope>) -> bool {
        let Some(id) = message.reply_to.as_deref() else {
            return false;
        };
        let waiting = self.lock_waiting();
        if let Some(waiter) = waiting.get(id)
            && (message.from == waiter.to || message.from == ActorId::broker())
            && let Err(mpsc::error::TrySendError::Full(_)) =
                waiter.answers.try_send(message.clone())
        {
            // The client reads slower than the actor streams: its answer ends here.
            let note = format!(
                "a streamed answer was cut off: its client read slower than {STREAM_BACKLOG} \
                 messages could wait"
            );
            let actor = waiter.to.clone();
            drop(waiting);
            self.lock_waiting().remove(id);
            self.broker.world.log_note(&actor, &note);
        }
        true
    }

    fn lock_waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiter>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A request's place among the waiting ones, given up when the response is done with it (or
/// the client went away).
struct Pending {
    app: Arc<App>,
    id: String,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.app.lock_waiting().remove(&self.id);
    }
}

/// Reads what of `http`'s mailbox its tap left ([`App::hand_over`]): another host's asks for a
/// static answer, and answers that came before the tap was set.
async fn read_mailbox(app: Arc<App>) {
    let mailbox = app.broker.native_mailbox(app.me.as_str());
    loop {
        let message = mailbox.recv().await;
        if message.reply_to.is_some() {
            app.hand_over(&message);
        } else if message.from == app.me && message.body_value()["type"] == peers::ASK {
            // Another host of the cluster asks for a static answer of an actor this one runs.
            tokio::spawn(peers::answer_peer(app.clone(), message));
        }
    }
}

/// Appends each answer's line (`GET /path 200 3 ms`) to its actor's log, off the world's
/// thread, a batch at most every [`ACCESS_LINES_EVERY`].
async fn write_access_lines(
    world: crate::world::World,
    mut lines: mpsc::UnboundedReceiver<(ActorId, String)>,
) {
    let mut batch = Vec::new();
    while lines.recv_many(&mut batch, usize::MAX).await > 0 {
        let (world, lines) = (world.clone(), std::mem::take(&mut batch));
        let written = tokio::task::spawn_blocking(move || {
            let mut by_actor: HashMap<ActorId, String> = HashMap::new();
            for (actor, line) in lines {
                let text = by_actor.entry(actor).or_default();
                text.push_str("[sausage] http: ");
                text.push_str(&line);
                text.push('\n');
            }
            for (actor, text) in by_actor {
                let mut log = crate::world::ActorLog::new(world.log_path(&actor));
                if let Err(e) = log.append(text.as_bytes()) {
                    tracing::warn!("actor {actor}: cannot write its HTTP lines: {e}");
                }
            }
        })
        .await;
        if written.is_err() {
            return;
        }
        tokio::time::sleep(ACCESS_LINES_EVERY).await;
    }
}

/// Every [`FORGET_CLIENTS_EVERY`]: the rate limiters forget clients whose allowance is full
/// again, and the limiters of routes that are gone.
async fn forget_clients(app: Arc<App>) {
    let mut tick = tokio::time::interval(FORGET_CLIENTS_EVERY);
    loop {
        tick.tick().await;
        let table = app.broker.route_table();
        let mut limiters = app.limiters.lock().unwrap_or_else(|e| e.into_inner());
        limiters.retain(|at, _| table.has(at));
        for (_, limiter) in limiters.values() {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

/// Reads a request's body whole, within `timeout` and `max_body` bytes, or says why not.
async fn read_body(
    body: Incoming,
    max_body: u64,
    timeout: Duration,
) -> Result<Bytes, Response<Body>> {
    let limited = http_body_util::Limited::new(body, max_body as usize);
    match tokio::time::timeout(timeout, limited.collect()).await {
        Err(_) => Err(plain(
            StatusCode::REQUEST_TIMEOUT,
            "the request's body did not arrive in time",
        )),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large(max_body)),
        Ok(Err(_)) => Err(plain(
            StatusCode::BAD_REQUEST,
            "the request's body was cut off",
        )),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

/// A response with a short plain body.
fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Body::from(format!("{text}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn unavailable(why: &str) -> Response<Body> {
    let mut response = plain(StatusCode::SERVICE_UNAVAILABLE, why);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn too_large(max_body: u64) -> Response<Body> {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the body is larger than this route takes ({max_body} bytes)"),
    )
}
