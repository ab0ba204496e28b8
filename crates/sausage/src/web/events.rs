//! What happens, for every open page: the hub behind `GET /api/events` (server-sent events).
//!
//! Two kinds of events: messages to `web` (each with an id `<run>:<n>`; the last [`RECENT`] are
//! kept, so a page that reconnects with `Last-Event-ID` gets what it missed), and snapshots
//! (`actors`, `graph`) that replace each other, sent to a page when it connects and whenever
//! they change. A page whose `Last-Event-ID` is from another run of the world, or too old, gets a
//! `reset` event and reloads its data.
//! Each message event has an [`Audience`]: one person's pages, or owners' pages. A page gets
//! only what is for its person (DESIGN §13: one person's turns never show on another's page);
//! snapshots are for every page.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Message events kept for pages that reconnect.
pub const RECENT: usize = 1024;
/// Events waiting for one page; a page that falls this far behind is dropped (its browser
/// reconnects and catches up from [`RECENT`]).
const PER_PAGE: usize = 512;

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

/// Who a page is: its person's id and whether they are an owner.
#[derive(Clone, Debug)]
pub struct Viewer {
    pub person: String,
    pub owner: bool,
}

impl Audience {
    fn includes(&self, viewer: &Viewer) -> bool {
        match self {
            Audience::Everyone => true,
            Audience::Person(person) => *person == viewer.person,
            Audience::Owners => viewer.owner,
        }
    }
}

/// One page's stream and who it is.
struct Page {
    viewer: Viewer,
    tx: mpsc::Sender<Event>,
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
        state.recent.push_back((n, event.clone()));
        if state.recent.len() > RECENT {
            state.recent.pop_front();
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

    /// A new page's stream, of what `viewer` may see: `hello`, then what it missed since
    /// `last_id` (or `reset` when that cannot be told), then the current snapshots, then
    /// everything new.
    pub fn subscribe(&self, viewer: Viewer, last_id: Option<&str>) -> mpsc::Receiver<Event> {
        let (tx, rx) = mpsc::channel(PER_PAGE + RECENT);
        let mut state = self.lock();
        let hello = json!({"run": self.run});
        let _ = tx.try_send(Event {
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
                        .filter(|(n, e)| *n > seen && e.audience.includes(&viewer));
                    for (_, event) in missed {
                        let _ = tx.try_send(event.clone());
                    }
                }
                _ => {
                    let _ = tx.try_send(Event {
                        id: String::new(),
                        kind: "reset",
                        data: "{}".into(),
                        audience: Audience::Everyone,
                    });
                }
            }
        }
        for event in state.snapshots.values() {
            let _ = tx.try_send(event.clone());
        }
        state.pages.push(Page { viewer, tx });
        rx
    }
}

/// Sends to every page of the event's audience; a page that is gone or too far behind is
/// dropped.
fn send_all(pages: &mut Vec<Page>, event: &Event) {
    pages.retain(|page| {
        !event.audience.includes(&page.viewer) || page.tx.try_send(event.clone()).is_ok()
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(rx: &mut mpsc::Receiver<Event>) -> Vec<(String, &'static str)> {
        let mut got = Vec::new();
        while let Ok(event) = rx.try_recv() {
            got.push((event.id, event.kind));
        }
        got
    }

    fn owner() -> Viewer {
        Viewer {
            person: "olga".into(),
            owner: true,
        }
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
        let viewer = |person: &str, owner| Viewer {
            person: person.into(),
            owner,
        };
        let mut ann = events.subscribe(viewer("ann", false), None);
        let mut bob = events.subscribe(viewer("bob", false), None);
        let mut olga = events.subscribe(viewer("olga", true), None);
        events.publish(
            "message",
            &json!({"for": "ann"}),
            Audience::Person("ann".into()),
        );
        events.publish("message", &json!({"stray": 1}), Audience::Owners);
        events.snapshot("actors", &json!([]));
        let kinds = |rx: &mut mpsc::Receiver<Event>| -> Vec<String> {
            drain(rx)
                .into_iter()
                .map(|(id, kind)| format!("{kind}{id}"))
                .collect()
        };
        assert_eq!(kinds(&mut ann), ["hello", "messager1:1", "actors"]);
        assert_eq!(kinds(&mut bob), ["hello", "actors"]);
        assert_eq!(kinds(&mut olga), ["hello", "messager1:2", "actors"]);
        let mut bob_again = events.subscribe(viewer("bob", false), Some("r1:0"));
        assert_eq!(
            kinds(&mut bob_again),
            ["hello", "actors"],
            "nor after a reconnect"
        );
    }
}
