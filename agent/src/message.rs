//! The types every module of the agent shares: a message in ([`Incoming`]) and out
//! ([`Outgoing`]), a person's [`Tier`], ids ([`valid_id`]), the model [`Api`] a configuration
//! and a history entry name, one HTTP request and its answer, and [`shorten`], the one way text
//! is cut for a person.
//! **Invariant:** this is the bottom of the agent's modules (`tests/layers.rs`): it imports none
//! of them, and holds no state and no I/O.

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    Ok(id.filter(|id| valid_id(id)))
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

/// What a person may make happen (DESIGN §13), from least to most.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    Guest,
    Member,
    Owner,
}

impl Tier {
    /// The tier in a sentence: `a guest`, `a member`, `an owner`.
    pub fn a(self) -> &'static str {
        match self {
            Tier::Guest => "a guest",
            Tier::Member => "a member",
            Tier::Owner => "an owner",
        }
    }
}

/// Actor ids, and so people's and rooms' ids: `a-z`, `0-9`, `-`, `_`, 1 to 64 characters
/// (DESIGN §1).
pub fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// The three API shapes the agent speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Api {
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
    #[serde(rename = "anthropic-messages")]
    AnthropicMessages,
    /// `POST {base_url}/v1/chat/completions`, which llama.cpp's server, vLLM and Ollama speak.
    #[serde(rename = "openai-chat")]
    OpenaiChat,
}

/// A request ready to send: `POST url` with these headers and body.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// An answer that is not a 2xx stream: its status, headers (names lowercased) and whole body.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Cuts `text` to at most `max` characters, marking the cut.
pub fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{} …", &text[..at]),
        None => text.to_string(),
    }
}
