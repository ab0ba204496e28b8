//! What happens, for every open page: the hub behind `GET /api/events` (server-sent events).
//!
//! Two kinds of events: messages to `web` (each with an id `<run>:<n>`; the last [`RECENT`] are
//! kept, so a page that reconnects with `Last-Event-ID` gets what it missed), and snapshots
//! (`actors`, `graph`) that replace each other, sent to a page when it connects and whenever
//! they change. A page whose `Last-Event-ID` is from another run of the world, or too old, gets a
//! `reset` event and reloads its data.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Message events kept for pages that reconnect.
pub const RECENT: usize = 1024;
/// Events waiting for one page; a page that falls this far behind is dropped (its browser
/// reconnects and catches up from [`RECENT`]).
const PER_PAGE: usize = 512;

/// One event as sent: id (empty for snapshots), kind, JSON data.
#[derive(Clone, Debug)]
pub struct Event {
    pub id: String,
    pub kind: &'static str,
    pub data: Arc<str>,
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
    pages: Vec<mpsc::Sender<Event>>,
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
        state.pages.retain(|page| !page.is_closed());
        !state.pages.is_empty()
    }

    /// Sends an event that pages replay after a reconnect.
    pub fn publish(&self, kind: &'static str, data: &Value) {
        let mut state = self.lock();
        state.next += 1;
        let n = state.next;
        let event = Event {
            id: format!("{}:{n}", self.run),
            kind,
            data: data.to_string().into(),
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
        };
        state.snapshots.insert(kind, event.clone());
        send_all(&mut state.pages, &event);
    }

    /// A new page's stream: `hello`, then what it missed since `last_id` (or `reset` when that
    /// cannot be told), then the current snapshots, then everything new.
    pub fn subscribe(&self, last_id: Option<&str>) -> mpsc::Receiver<Event> {
        let (tx, rx) = mpsc::channel(PER_PAGE + RECENT);
        let mut state = self.lock();
        let hello = json!({"run": self.run});
        let _ = tx.try_send(Event {
            id: String::new(),
            kind: "hello",
            data: hello.to_string().into(),
        });
        if let Some(last) = last_id {
            let seen = last
                .strip_prefix(&format!("{}:", self.run))
                .and_then(|n| n.parse::<u64>().ok());
            let oldest = state.recent.front().map_or(state.next + 1, |(n, _)| *n);
            match seen {
                // Everything after `seen` is still kept (or nothing came since).
                Some(seen) if seen + 1 >= oldest || seen == state.next => {
                    for (_, event) in state.recent.iter().filter(|(n, _)| *n > seen) {
                        let _ = tx.try_send(event.clone());
                    }
                }
                _ => {
                    let _ = tx.try_send(Event {
                        id: String::new(),
                        kind: "reset",
                        data: "{}".into(),
                    });
                }
            }
        }
        for event in state.snapshots.values() {
            let _ = tx.try_send(event.clone());
        }
        state.pages.push(tx);
        rx
    }
}

/// Sends to every page; a page that is gone or too far behind is dropped.
fn send_all(pages: &mut Vec<mpsc::Sender<Event>>, event: &Event) {
    pages.retain(|page| page.try_send(event.clone()).is_ok());
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

    #[test]
    fn a_page_that_reconnects_gets_what_it_missed_or_a_reset() {
        let events = Events::new("r1".into());
        let mut first = events.subscribe(None);
        events.publish("message", &json!({"n": 1}));
        events.snapshot("actors", &json!([]));
        events.snapshot("actors", &json!([]));
        events.publish("message", &json!({"n": 2}));
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
        let mut again = events.subscribe(Some("r1:1"));
        assert_eq!(
            drain(&mut again),
            [
                ("".into(), "hello"),
                ("r1:2".into(), "message"),
                ("".into(), "actors"),
            ]
        );
        let mut up_to_date = events.subscribe(Some("r1:2"));
        assert_eq!(drain(&mut up_to_date).len(), 2, "hello and the snapshot");
        for other in ["r0:2", "garbage", "r1:x"] {
            let mut stale = events.subscribe(Some(other));
            let kinds: Vec<&str> = drain(&mut stale).into_iter().map(|e| e.1).collect();
            assert_eq!(kinds, ["hello", "reset", "actors"], "{other}");
        }
        for n in 0..RECENT + 10 {
            events.publish("message", &json!({"n": n}));
        }
        let mut too_old = events.subscribe(Some("r1:2"));
        let kinds: Vec<&str> = drain(&mut too_old).into_iter().map(|e| e.1).collect();
        assert_eq!(kinds, ["hello", "reset", "actors"]);
    }
}
