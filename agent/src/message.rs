//! The types every module of the agent shares: a message in ([`Incoming`]) and out
//! ([`Outgoing`]), a person's [`Tier`], ids ([`valid_id`], [`valid_traceparent`]), the model
//! [`Api`] a configuration
//! and a history entry name, one HTTP request and its answer, and [`shorten`], the one way text
//! is cut for a person.
//! **Invariant:** this is the bottom of the agent's modules (`tests/layers.rs`): it imports none
//! of them, and holds no state and no I/O.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A message as the broker delivers it:
/// `{"id","from","reply_to"?,"person"?,"tier"?,"trace"?,"body"}`.
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
    /// The W3C traceparent of the message's delivery (DESIGN §22): a turn it starts is a child
    /// of it. Absent on envelopes of a host before traces; one that is not valid counts as none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "traceparent"
    )]
    pub trace: Option<String>,
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

    /// The message as one JSON line, the way the model is shown messages: without its
    /// `trace`, which tells the model nothing and costs tokens.
    pub fn to_line(&self) -> String {
        let shown = Incoming {
            trace: None,
            ..self.clone()
        };
        // Strings and a JSON value always serialise.
        serde_json::to_string(&shown).expect("a message serialises")
    }
}

/// Any value that is not a valid traceparent string reads as none: a message is never lost to
/// its trace.
fn traceparent<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let trace = Value::deserialize(d)?;
    Ok(trace
        .as_str()
        .filter(|t| valid_traceparent(t))
        .map(str::to_string))
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
    /// `"trace": "<traceparent>"`: the span this message's delivery is a child of (DESIGN §22):
    /// the running turn's or its tool call's. Without it the host continues the trace of the
    /// message the agent read last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
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

/// A W3C traceparent of version 00: `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`,
/// lowercase, neither id all zeros. The host refuses to route a line whose `trace` is not one.
pub fn valid_traceparent(trace: &str) -> bool {
    let parts: Vec<&str> = trace.split('-').collect();
    let hex = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let nonzero = |part: &str| part.bytes().any(|b| b != b'0');
    matches!(parts[..], ["00", trace_id, span_id, flags]
        if hex(trace_id, 32) && hex(span_id, 16) && hex(flags, 2)
            && nonzero(trace_id) && nonzero(span_id))
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
    /// The longest the whole exchange may take, answer included; past it the POST fails.
    /// `None`: only the host's own limits, which let a model think for minutes.
    pub timeout: Option<std::time::Duration>,
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

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn only_a_w3c_traceparent_of_version_00_is_valid() {
        assert!(valid_traceparent(TRACE));
        assert!(valid_traceparent(&TRACE.replace("-01", "-00")));
        for wrong in [
            "",
            "00",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        ] {
            assert!(!valid_traceparent(wrong), "{wrong:?} is not a traceparent");
        }
    }

    #[test]
    fn an_envelopes_trace_is_read_and_a_bad_one_counts_as_none() {
        let read = |trace: serde_json::Value| {
            let line = serde_json::json!({"id": "m-1", "from": "web", "trace": trace,
                "body": {"type": "text", "text": "hi"}});
            serde_json::from_value::<Incoming>(line)
                .expect("a message")
                .trace
        };
        assert_eq!(read(TRACE.into()), Some(TRACE.to_string()));
        assert_eq!(read("00-xyz".into()), None);
        assert_eq!(read(serde_json::Value::Null), None);
        assert_eq!(
            read(17.into()),
            None,
            "a number is not a trace, and no reason to drop"
        );
    }

    #[test]
    fn the_model_is_shown_a_message_without_its_trace() {
        let message = Incoming {
            id: "m-1".into(),
            from: "web".into(),
            trace: Some(TRACE.into()),
            body: serde_json::json!({"type": "text", "text": "hi"}),
            ..Incoming::default()
        };
        assert!(!message.to_line().contains("trace"));
        assert!(serde_json::to_string(&message).unwrap().contains(TRACE));
    }
}
