//! What happens, for every open page: the hub behind `GET /api/events` (server-sent events).
//!
//! Two kinds of events: messages to `web` (each with an id `<run>:<n>`; the last [`RECENT`], at
//! most [`RECENT_BYTES`] of them, are kept, so a page that reconnects with `Last-Event-ID` gets
//! what it missed), and snapshots
//! (`actors`, `graph`) that replace each other, sent to a page when it connects and whenever
//! they change. A page whose `Last-Event-ID` is from another run of the world, or too old, gets a
//! `reset` event and reloads its data.
//! Each message event has an [`Audience`]: one person's pages, or owners' pages. A page gets
//! only what is for its person (DESIGN §13: one person's turns never show on another's page);
//! snapshots are for every page. Memory is bounded by bytes as well as by count: what is kept
//! for reconnects, and what waits for each page (a page that stops reading is dropped).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::message::Tier;

/// Message events kept for pages that reconnect.
pub const RECENT: usize = 1024;
/// The most bytes of message events kept for pages that reconnect: a flood of big messages to
/// `web` cannot take the host's memory. Past it the oldest events go first; a page whose
/// `Last-Event-ID` is among them gets `reset` and reloads its data.
pub const RECENT_BYTES: usize = 16 << 20;
/// Events waiting for one page; a page that falls this far behind is dropped (its browser
/// reconnects and catches up from [`RECENT`]).
const PER_PAGE: usize = 512;
/// The most bytes of events waiting for one page (a replay of everything kept, and as much
/// again): a page that stops reading cannot hold events the hub has let go. Past it the page is
/// dropped, as past [`PER_PAGE`].
const PER_PAGE_BYTES: usize = 2 * RECENT_BYTES;

/// One event as sent: id (empty for snapshots), kind, JSON data, and who may see it.
#[derive(Clone, Debug)]
pub struct Event {
    pub id: String,
    pub kind: &'static str,
    pub data: Arc<str>,
    pub audience: Audience,
}

/// Whose pages an event goes to.
#[derive(Clone, Debug, PartialEq)]
pub enum Audience {
    /// Every page (snapshots, and the stream's own `hello` and `reset`).
    Everyone,
    /// The pages of this person (by id).
    Person(String),
    /// The pages of owners: messages to `web` that are nobody's in particular.
    Owners,
}

/// Who a page is: its person's id and tier when it connected, and the session it came with
/// (so that the page can be dropped once that session or that tier no longer holds).
#[derive(Clone, Debug)]
pub struct Viewer {
    pub person: String,
    pub tier: Tier,
    pub session: String,
}

impl Audience {
    fn includes(&self, viewer: &Viewer) -> bool {
        match self {
            Audience::Everyone => true,
            Audience::Person(person) => *person == viewer.person,
            Audience::Owners => viewer.tier == Tier::Owner,
        }
    }
}

/// One page's stream and who it is.
struct Page {
    viewer: Viewer,
    /// Sends the page's events; dropping it (with the page) ends the page's stream.
    tx: mpsc::Sender<Event>,
    /// Bytes of events sent to `tx` and not yet taken by the page's stream.
    queued: Arc<AtomicUsize>,
}

impl Page {
    /// Queues `event` for the page; false when the page is gone or too far behind.
    fn offer(&self, event: &Event) -> bool {
        let bytes = event.data.len();
        if self.queued.load(Ordering::Relaxed) + bytes > PER_PAGE_BYTES {
            return false;
        }
        self.queued.fetch_add(bytes, Ordering::Relaxed);
        self.tx.try_send(event.clone()).is_ok()
    }
}

/// One page's events, as [`Events::subscribe`] gives them; `None` once the page was dropped.
pub struct PageEvents {
    rx: mpsc::Receiver<Event>,
    queued: Arc<AtomicUsize>,
}

impl PageEvents {
    pub async fn next(&mut self) -> Option<Event> {
        let event = self.rx.recv().await?;
        self.queued.fetch_sub(event.data.len(), Ordering::Relaxed);
        Some(event)
    }
}

pub struct Events {
    /// This run's id: event ids from another run cannot be replayed.
    run: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next: u64,
    recent: VecDeque<(u64, Event)>,
    /// The bytes of the data of `recent`, at most [`RECENT_BYTES`].
    recent_bytes: usize,
    snapshots: BTreeMap<&'static str, Event>,
    pages: Vec<Page>,
}

impl Events {
    pub fn new(run: String) -> Events {
        Events {
            run,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether any page listens (snapshots are only worth making then).
    pub fn has_pages(&self) -> bool {
        let mut state = self.lock();
        state.pages.retain(|page| !page.tx.is_closed());
        !state.pages.is_empty()
    }

    /// Sends an event, to the pages of `audience`, that they replay after a reconnect.
    pub fn publish(&self, kind: &'static str, data: &Value, audience: Audience) {
        let mut state = self.lock();
        state.next += 1;
        let n = state.next;
        let event = Event {
            id: format!("{}:{n}", self.run),
            kind,
            data: data.to_string().into(),
            audience,
        };
        state.recent_bytes += event.data.len();
        state.recent.push_back((n, event.clone()));
        while state.recent.len() > RECENT || state.recent_bytes > RECENT_BYTES {
            let Some((_, old)) = state.recent.pop_front() else {
                break;
            };
            state.recent_bytes -= old.data.len();
        }
        send_all(&mut state.pages, &event);
    }

    /// Replaces the snapshot of `kind` and sends it, unless it did not change.
    pub fn snapshot(&self, kind: &'static str, data: &Value) {
        let data: Arc<str> = data.to_string().into();
        let mut state = self.lock();
        if state.snapshots.get(kind).is_some_and(|e| e.data == data) {
            return;
        }
        let event = Event {
            id: String::new(),
            kind,
            data,
            audience: Audience::Everyone,
        };
        state.snapshots.insert(kind, event.clone());
        send_all(&mut state.pages, &event);
    }

    /// Drops the pages whose viewer `keep` says no longer holds (their person was removed,
    /// their tier changed, their session ended): their streams end, and the browser's
    /// reconnection is answered as the session is now (401, or the new tier's view).
    pub fn keep_pages(&self, keep: impl Fn(&Viewer) -> bool) {
        self.lock().pages.retain(|page| keep(&page.viewer));
    }

    /// A new page's stream, of what `viewer` may see: `hello`, then what it missed since
    /// `last_id` (or `reset` when that cannot be told), then the current snapshots, then
    /// everything new.
    pub fn subscribe(&self, viewer: Viewer, last_id: Option<&str>) -> PageEvents {
        let (tx, rx) = mpsc::channel(PER_PAGE + RECENT);
        let mut state = self.lock();
        let hello = json!({"run": self.run});
        let page = Page {
            viewer,
            tx,
            queued: Arc::default(),
        };
        // The channel holds the replay whole: at most `RECENT` events of `RECENT_BYTES`, the
        // hello or reset and the snapshots, within `PER_PAGE + RECENT` and `PER_PAGE_BYTES`.
        page.offer(&Event {
            id: String::new(),
            kind: "hello",
            data: hello.to_string().into(),
            audience: Audience::Everyone,
        });
        if let Some(last) = last_id {
            let seen = last
                .strip_prefix(&format!("{}:", self.run))
                .and_then(|n| n.parse::<u64>().ok());
            let oldest = state.recent.front().map_or(state.next + 1, |(n, _)| *n);
            match seen {
                // Everything after `seen` is still kept (or nothing came since).
                Some(seen) if seen + 1 >= oldest || seen == state.next => {
                    let missed = state
                        .recent
                        .iter()
                        .filter(|(n, e)| *n > seen && e.audience.includes(&page.viewer));
                    for (_, event) in missed {
                        page.offer(event);
                    }
                }
                _ => {
                    page.offer(&Event {
                        id: String::new(),
                        kind: "reset",
                        data: "{}".into(),
                        audience: Audience::Everyone,
                    });
                }
            }
        }
        for event in state.snapshots.values() {
            page.offer(event);
        }
        let queued = page.queued.clone();
        state.pages.push(page);
        PageEvents { rx, queued }
    }
}

/// Sends to every page of the event's audience; a page that is gone or too far behind is
/// dropped.
fn send_all(pages: &mut Vec<Page>, event: &Event) {
    pages.retain(|page| !event.audience.includes(&page.viewer) || page.offer(event));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(page: &mut PageEvents) -> Vec<(String, &'static str)> {
        let mut got = Vec::new();
        while let Ok(event) = page.rx.try_recv() {
            page.queued.fetch_sub(event.data.len(), Ordering::Relaxed);
            got.push((event.id, event.kind));
        }
        got
    }

    fn viewer(person: &str, tier: Tier) -> Viewer {
        Viewer {
            person: person.into(),
            tier,
            session: format!("session of {person}"),
        }
    }

    fn owner() -> Viewer {
        viewer("olga", Tier::Owner)
    }

    #[test]
    fn a_page_that_reconnects_gets_what_it_missed_or_a_reset() {
        let events = Events::new("r1".into());
        let mut first = events.subscribe(owner(), None);
        events.publish("message", &json!({"n": 1}), Audience::Owners);
        events.snapshot("actors", &json!([]));
        events.snapshot("actors", &json!([]));
        events.publish("message", &json!({"n": 2}), Audience::Owners);
        assert_eq!(
            drain(&mut first),
            [
                ("".into(), "hello"),
                ("r1:1".into(), "message"),
                ("".into(), "actors"),
                ("r1:2".into(), "message"),
            ],
            "an unchanged snapshot is not sent again"
        );
        let mut again = events.subscribe(owner(), Some("r1:1"));
        assert_eq!(
            drain(&mut again),
            [
                ("".into(), "hello"),
                ("r1:2".into(), "message"),
                ("".into(), "actors"),
            ]
        );
        let mut up_to_date = events.subscribe(owner(), Some("r1:2"));
        assert_eq!(drain(&mut up_to_date).len(), 2, "hello and the snapshot");
        for other in ["r0:2", "garbage", "r1:x"] {
            let mut stale = events.subscribe(owner(), Some(other));
            let kinds: Vec<&str> = drain(&mut stale).into_iter().map(|e| e.1).collect();
            assert_eq!(kinds, ["hello", "reset", "actors"], "{other}");
        }
        for n in 0..RECENT + 10 {
            events.publish("message", &json!({"n": n}), Audience::Owners);
        }
        let mut too_old = events.subscribe(owner(), Some("r1:2"));
        let kinds: Vec<&str> = drain(&mut too_old).into_iter().map(|e| e.1).collect();
        assert_eq!(kinds, ["hello", "reset", "actors"]);
    }

    #[test]
    fn a_page_sees_only_its_persons_messages() {
        let events = Events::new("r1".into());
        let mut ann = events.subscribe(viewer("ann", Tier::Member), None);
        let mut bob = events.subscribe(viewer("bob", Tier::Guest), None);
        let mut olga = events.subscribe(owner(), None);
        events.publish(
            "message",
            &json!({"for": "ann"}),
            Audience::Person("ann".into()),
        );
        events.publish("message", &json!({"stray": 1}), Audience::Owners);
        events.snapshot("actors", &json!([]));
        let kinds = |rx: &mut PageEvents| -> Vec<String> {
            drain(rx)
                .into_iter()
                .map(|(id, kind)| format!("{kind}{id}"))
                .collect()
        };
        assert_eq!(kinds(&mut ann), ["hello", "messager1:1", "actors"]);
        assert_eq!(kinds(&mut bob), ["hello", "actors"]);
        assert_eq!(kinds(&mut olga), ["hello", "messager1:2", "actors"]);
        let mut bob_again = events.subscribe(viewer("bob", Tier::Guest), Some("r1:0"));
        assert_eq!(
            kinds(&mut bob_again),
            ["hello", "actors"],
            "nor after a reconnect"
        );
    }

    #[test]
    fn big_events_are_kept_by_bytes_and_a_page_that_stops_reading_is_dropped() {
        let events = Events::new("r1".into());
        let mut reading = events.subscribe(owner(), None);
        let stalled = events.subscribe(owner(), None);
        let big = json!({"pad": "x".repeat(1 << 20)});
        let count = RECENT_BYTES / (1 << 20) * 3;
        assert_eq!(drain(&mut reading).len(), 1, "hello");
        for _ in 0..count {
            events.publish("message", &big, Audience::Owners);
            assert_eq!(
                drain(&mut reading).len(),
                1,
                "a page that reads gets every event"
            );
        }
        let state = events.lock();
        assert!(state.recent_bytes <= RECENT_BYTES, "{}", state.recent_bytes);
        assert!(
            state.recent.len() < RECENT_BYTES / (1 << 20),
            "the oldest went first"
        );
        assert_eq!(
            state.recent.back().unwrap().0,
            count as u64,
            "the newest stay"
        );
        assert_eq!(
            state.pages.len(),
            1,
            "the page that stopped reading was dropped"
        );
        assert!(stalled.queued.load(Ordering::Relaxed) <= PER_PAGE_BYTES);
        drop(state);
        let mut late = events.subscribe(owner(), Some("r1:1"));
        let kinds: Vec<&str> = drain(&mut late).into_iter().map(|e| e.1).collect();
        assert_eq!(kinds, ["hello", "reset"], "the first event is gone");
    }

    #[test]
    fn pages_whose_viewer_no_longer_holds_end() {
        let events = Events::new("r1".into());
        let mut ann = events.subscribe(viewer("ann", Tier::Member), None);
        let mut olga = events.subscribe(owner(), None);
        events.keep_pages(|v| v.person != "ann");
        drain(&mut ann);
        assert!(
            matches!(
                ann.rx.try_recv(),
                Err(mpsc::error::TryRecvError::Disconnected)
            ),
            "ann's stream ended"
        );
        events.publish("message", &json!({}), Audience::Owners);
        assert_eq!(drain(&mut olga).len(), 2, "hello and the message");
    }
}
