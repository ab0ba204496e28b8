//! Static routes on a cluster (DESIGN §24): every host serves every route, but an actor's
//! committed `/public` files are on the host that runs it. A host that does not asks that host's
//! `http`, through the cluster, for the response (`http_static`), which it makes as it would
//! for its own client and sends back whole, its body in base64.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::{Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{App, Pending, Waiter, plain, unavailable};
use crate::message::{ActorId, Envelope, Outgoing, http as message};

/// The largest file part one host sends another: its base64 stays within a NATS message's
/// default limit of 1 MiB. A larger file is served by ranges (a client's `Range`).
const MAX_FORWARDED_BODY: usize = 512 << 10;
/// How long a host waits for the host that runs the actor to answer.
const PEER_TIMEOUT: Duration = Duration::from_secs(30);
/// The request headers that change a static answer, passed to the host that makes it.
const PASSED: [&str; 4] = ["range", "if-none-match", "if-modified-since", "if-range"];

/// What one host asks another: serve `path` of the static route `at` of `actor`.
pub const ASK: &str = "http_static";

impl App {
    /// Asks `host`, which runs `actor`, for the answer to `request` of its static route `at`.
    pub(super) async fn static_elsewhere<B>(
        self: &Arc<Self>,
        host: &str,
        actor: &ActorId,
        dir: &str,
        at: &str,
        request: Request<B>,
    ) -> Response<Body> {
        let mut headers = serde_json::Map::new();
        for name in PASSED {
            if let Some(value) = request.headers().get(name).and_then(|v| v.to_str().ok()) {
                headers.insert(name.to_string(), json!(value));
            }
        }
        let ask = json!({
            "type": ASK, "actor": actor.as_str(), "dir": dir, "at": at,
            "method": request.method().as_str(), "path": request.uri().path(),
            "query": request.uri().query(), "headers": headers,
        });
        let own = self.broker.router.next_id();
        let id = format!("{}/{own}", self.me);
        let (answers, mut answered) = mpsc::channel(1);
        let _pending = Pending {
            app: self.clone(),
            id: id.clone(),
        };
        let waiter = Waiter {
            to: self.me.clone(),
            answers,
        };
        self.lock_waiting().insert(id, waiter);
        let mut out = Outgoing::new(&self.me, &ask);
        out.id = Some(own);
        if self
            .broker
            .router
            .send_to_host(host, &self.me, out)
            .is_none()
        {
            return unavailable(&format!(
                "actor `{actor}` runs on host {host}, out of reach"
            ));
        }
        let reply = match tokio::time::timeout(PEER_TIMEOUT, answered.recv()).await {
            Ok(Some(reply)) => reply,
            Ok(None) | Err(_) => {
                return plain(
                    StatusCode::GATEWAY_TIMEOUT,
                    &format!("host {host}, which runs actor `{actor}`, did not answer in time"),
                );
            }
        };
        match message::answer(&reply.body) {
            Ok(answer) => {
                let mut response = Response::new(Body::from(answer.body));
                *response.status_mut() = answer.status;
                *response.headers_mut() = answer.headers;
                response
            }
            Err(_) => unavailable(&format!(
                "host {host}, which runs actor `{actor}`, could not serve the file"
            )),
        }
    }
}

/// Answers another host's `http_static`: the response this host makes for the file, whole.
pub(super) async fn answer_peer(app: Arc<App>, asked: Arc<Envelope>) {
    let body = asked.body_value();
    let reply = match serve_for_peer(&app, &body).await {
        Ok(reply) => reply,
        Err(why) => json!({"type": "http_response", "status": 502, "body": format!("{why}\n")}),
    };
    let out = Outgoing::new(&asked.from, &reply).replying_to(Some(&asked.id));
    app.broker.send(&app.me, out).await;
}

async fn serve_for_peer(app: &App, body: &Value) -> Result<Value, String> {
    let text = |field: &str| body[field].as_str().ok_or(format!("`{field}` is missing"));
    let actor = ActorId::parse(text("actor")?)?;
    let (dir, at) = (text("dir")?, text("at")?);
    if dir != "/public" && !dir.starts_with("/public/") {
        return Err(format!("{dir} is not a folder under /public"));
    }
    let mut uri = text("path")?.to_string();
    if let Some(query) = body["query"].as_str() {
        uri = format!("{uri}?{query}");
    }
    let mut request = Request::builder().method(text("method")?).uri(uri);
    for name in PASSED {
        if let Some(value) = body["headers"][name].as_str() {
            request = request.header(name, value);
        }
    }
    let request = request
        .body(())
        .map_err(|e| format!("a request cannot be made: {e}"))?;
    let response = super::files::serve(&app.broker.world, &actor, dir, at, request).await;
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_FORWARDED_BODY)
        .await
        .map_err(|_| {
            format!(
                "the file is larger than one host sends another ({MAX_FORWARDED_BODY} bytes); ask \
             for it in ranges, or from the host that runs actor `{actor}`"
            )
        })?;
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in &parts.headers {
        if let Ok(value) = value.to_str() {
            headers
                .entry(name.to_string())
                .or_default()
                .push(value.to_string());
        }
    }
    Ok(json!({
        "type": "http_response", "status": parts.status.as_u16(), "headers": headers,
        "body_base64": BASE64.encode(&bytes),
    }))
}
