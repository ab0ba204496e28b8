//! What the bridge needs from the world around it, as one small trait: messages in, messages
//! out, one long-polled `/sync` in flight beside short HTTP calls, pauses, and a clock. The
//! component implements it over WASI (`wasi_host.rs`); unit tests with a script (`testing.rs`).
//! **Invariant:** nothing outside an implementation of [`Host`] touches stdin, stdout or the
//! network.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A message as the broker delivers it: `{"id","from","reply_to"?,"person"?,"tier"?,"body"}`
/// (`person` and `tier` set by the host when a person sent it; an actor cannot set them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Incoming {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub from: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    pub body: Value,
}

impl Incoming {
    pub fn kind(&self) -> &str {
        self.body["type"].as_str().unwrap_or("")
    }
}

/// A line to write: `{"to"?,"as"?,"id"?,"reply_to"?,"body"}`. `as` is the Matrix user the
/// message speaks for; the host turns it into the world's person (only this actor may use it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outgoing {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(rename = "as", skip_serializing_if = "Option::is_none")]
    pub speaks_as: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    pub body: Value,
}

/// An HTTP request to the homeserver. The host adds the access token; the actor never has it.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub method: &'static str,
    /// The whole URL, `http://host:port/_matrix/...`.
    pub url: String,
    /// A JSON body, sent with `content-type: application/json`.
    pub body: Option<Value>,
}

/// An answer, whole.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    pub status: u16,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What waiting ended with.
#[derive(Debug)]
pub enum Event {
    Message(Incoming),
    /// The `/sync` started with [`Host::start_sync`] answered (or failed, in words).
    Synced(Result<Response, String>),
    TimedOut,
    /// `{"type":"shutdown"}` came, or stdin ended: the bridge saves and exits. Every later call
    /// returns `Stop` too.
    Stop,
}

pub trait Host {
    /// Sends the long poll; its answer comes as [`Event::Synced`] from [`Host::next`]. At most
    /// one is in flight: the bridge starts the next only after the last one answered.
    fn start_sync(&mut self, request: Request);

    /// The next message or the sync's answer, waiting at most `timeout` (forever when `None`).
    fn next(&mut self, timeout: Option<Duration>) -> Event;

    /// One short request, answered whole; `Err` when no answer came (no network, denied).
    fn call(&mut self, request: &Request) -> Result<Response, String>;

    /// Writes one line and flushes it.
    fn send(&mut self, message: &Outgoing);

    /// Waits `duration` (a 429's `retry_after_ms`, a backoff); `false` when a shutdown came
    /// meanwhile, so the bridge stops at once. Messages that arrive are kept for `next`.
    fn pause(&mut self, duration: Duration) -> bool;

    /// A monotonic clock: time since the actor started.
    fn now(&self) -> Duration;
}
