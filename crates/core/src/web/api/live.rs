//! What an open page watches: `GET /api/events` (server-sent events, resumable with
//! `Last-Event-ID`) and `GET /api/graph` (who sent to whom over the last 60 s).
//! Invariant: each stream is tied to its page's session and tier (`Viewer`), so that
//! `watch_pages` ends it when either ends or changes.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::{Extension, Json};
use futures_util::stream;
use serde_json::Value;

use super::{App, Person};
use crate::web::Viewer;

/// `GET /api/graph`: who sent to whom over the last 60 s.
pub(super) async fn graph(State(app): State<Arc<App>>) -> Json<Value> {
    Json(app.lock_rates().graph())
}

/// `GET /api/events`: server-sent events (`hello`, `message`, `actors`, `graph`, `reset`),
/// resumable with `Last-Event-ID`. The stream ends when the page's session ends, its person is
/// removed or their tier changes (`watch_pages`); the browser reconnects as it is now.
/// The response says `Connection: close`: when a stream ends, its connection ends with it. A
/// kept-alive connection would outlive the stream's last chunk, and a client that watches the
/// connection would see the stream of a demoted person still open.
pub(super) async fn events(
    State(app): State<Arc<App>>,
    Extension(person): Extension<Person>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // The guard let the session in, so the cookie is there.
    let session = crate::web::session_id(&headers).unwrap_or_default();
    let viewer = Viewer {
        person: person.id,
        tier: person.tier,
        session,
    };
    let receiver = app.events.subscribe(viewer, last.as_deref());
    let stream = stream::unfold(receiver, |mut receiver| async move {
        let event = receiver.next().await?;
        let mut sse = SseEvent::default().event(event.kind).data(&*event.data);
        if !event.id.is_empty() {
            sse = sse.id(event.id);
        }
        Some((Ok::<_, std::convert::Infallible>(sse), receiver))
    });
    (
        [(header::CONNECTION, "close")],
        Sse::new(stream).keep_alive(KeepAlive::default()),
    )
}
