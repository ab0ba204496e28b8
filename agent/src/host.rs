//! What the agent needs from the world around it, as one small trait: messages in (with a time
//! limit), messages out, one streaming HTTP POST, and the wall clock. The component implements it over WASI
//! (`wasi_host.rs`); unit tests implement it with a script (`testing.rs`).
//! **Invariant:** nothing outside an implementation of [`Host`] touches stdin, stdout or the network.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conversations::Tier;
use crate::provider::{HttpRequest, HttpResponse};

/// A message as the broker delivers it: `{"id","from","reply_to"?,"person"?,"tier"?,"body"}`.
/// `person` and `tier` are set by the host on what a person sent through a surface (DESIGN §13);
/// an actor cannot set them, so a message without them speaks for no person.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Incoming {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub from: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// Only an id by the rules of actor ids: it names folders (`/data/people/<id>/`), so any
    /// other value is read as no person at all.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "person_id"
    )]
    pub person: Option<String>,
    /// Kept as the host wrote it: a tier this agent does not know counts as a guest's, and never
    /// makes the message unreadable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    pub body: Value,
}

impl Incoming {
    pub fn kind(&self) -> &str {
        self.body["type"].as_str().unwrap_or("")
    }

    /// What the sender may make happen: the person's tier; guest for a message of an actor, so
    /// an actor cannot borrow a person's power.
    pub fn tier(&self) -> Tier {
        match (&self.person, self.tier.as_deref()) {
            (Some(_), Some("owner")) => Tier::Owner,
            (Some(_), Some("member")) => Tier::Member,
            _ => Tier::Guest,
        }
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

fn person_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let id = Option::<String>::deserialize(d)?;
    Ok(id.filter(|id| crate::conversations::valid_id(id)))
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
    /// `"as": "<person id>"`: the message is that person's (the owner granted the agent the
    /// handle kind `person`). Written only on requests to `broker`, `cargo` and `scheduler` for
    /// the person a turn acts for (an actor's owner included), so the host checks each against
    /// that person's tier too, and a schedule made in a person's conversation is theirs
    /// (DESIGN §15, §18).
    #[serde(rename = "as", skip_serializing_if = "Option::is_none")]
    pub speaks_for: Option<String>,
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

/// How often, at least, [`Host::post`] calls its `stream` while a 2xx answer is silent, so
/// that progress batched for a person goes out on time.
pub const STREAM_TICK: Duration = Duration::from_millis(250);

/// How a POST ended.
#[derive(Debug)]
pub enum Posted {
    /// A 2xx answer, whose whole body went to `stream`.
    Streamed,
    /// Any other answer, whole.
    Refused(HttpResponse),
    /// No answer came (no network, refused, timed out), or the answer's body broke off; `why`
    /// says why, for a person, and `retry` whether trying again may help (not for a request
    /// the host denies, such as a candidate's).
    Failed { why: String, retry: bool },
    /// A shutdown (or the end of stdin) came while waiting; the request was abandoned.
    Stopped,
}

pub trait Host {
    /// The next message, waiting at most `timeout` (forever when `None`; `Some(ZERO)` only takes
    /// what already arrived). After `Stop`, every later call returns `Stop`.
    fn receive(&mut self, timeout: Option<Duration>) -> Event;

    /// Writes one message and flushes it.
    fn send(&mut self, message: &Outgoing);

    /// Sends the request. A 2xx answer's body goes to `stream` piece by piece as it arrives,
    /// and `stream(&[])` is called at least every [`STREAM_TICK`] while it is silent; any other
    /// answer comes back whole as `Refused`. Messages that arrive meanwhile are kept for
    /// `receive`; a shutdown among them abandons the request with `Stopped`.
    /// Whatever `stream` returns (batched progress, one message for each person who follows
    /// the turn) is sent at once.
    fn post(
        &mut self,
        request: &HttpRequest,
        stream: &mut dyn FnMut(&[u8]) -> Vec<Outgoing>,
    ) -> Posted;

    /// The messages that arrived while a request was in flight and were not taken yet, without
    /// waiting (a shutdown among them is kept for the next `receive`).
    fn arrived(&mut self) -> Vec<Incoming>;

    /// The wall clock: the day a turn's spending counts for.
    fn now(&self) -> SystemTime;
}
