//! What the agent needs from the world around it, as one small trait: messages in (with a time
//! limit), messages out, and one HTTP POST. The component implements it over WASI
//! (`wasi_host.rs`); unit tests implement it with a script (`testing.rs`).
//! **Invariant:** nothing outside an implementation of [`Host`] touches stdin, stdout or the network.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::provider::{HttpRequest, HttpResponse};

/// A message as the broker delivers it: `{"id","from","reply_to"?,"body"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Incoming {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub from: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    pub body: Value,
}

impl Incoming {
    pub fn kind(&self) -> &str {
        self.body["type"].as_str().unwrap_or("")
    }

    /// Only a text that answers nothing starts a turn: replies never do, so two actors cannot
    /// keep the agent talking forever.
    pub fn starts_turn(&self) -> bool {
        self.kind() == "text" && self.reply_to.is_none()
    }

    /// The message as one JSON line, the way the model is shown messages.
    pub fn to_line(&self) -> String {
        // Strings and a JSON value always serialise.
        serde_json::to_string(self).expect("a message serialises")
    }
}

/// A message to write: `{"to"?,"id"?,"reply_to"?,"body"}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outgoing {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    pub body: Value,
}

/// What waiting for a message ended with.
#[derive(Debug)]
pub enum Event {
    Message(Incoming),
    TimedOut,
    /// `{"type":"shutdown"}` came, or stdin ended: the agent must save and exit.
    Stop,
}

/// How a POST ended.
#[derive(Debug)]
pub enum Posted {
    Answered(HttpResponse),
    /// No answer came (no network, refused, timed out); the text says why, for a person.
    Failed(String),
    /// A shutdown (or the end of stdin) came while waiting; the request was abandoned.
    Stopped,
}

pub trait Host {
    /// The next message, waiting at most `timeout` (forever when `None`; `Some(ZERO)` only takes
    /// what already arrived). After `Stop`, every later call returns `Stop`.
    fn receive(&mut self, timeout: Option<Duration>) -> Event;

    /// Writes one message and flushes it.
    fn send(&mut self, message: &Outgoing);

    /// Sends the request and waits for the whole answer. Messages that arrive meanwhile are kept
    /// for `receive`; a shutdown among them abandons the request with `Stopped`.
    fn post(&mut self, request: &HttpRequest) -> Posted;
}
