//! Messages as they cross the broker (DESIGN §1): actor ids, the line an actor writes, and the
//! envelope the broker delivers.
//!
//! Bodies are kept as raw JSON text from the line that carried them: routing checks that a body
//! is an object and passes it on without parsing it into values or serialising it again.
//! **Invariant:** only the host sets who a message speaks for ([`Speaker`]): the line an actor
//! writes cannot carry one, whatever fields it holds.

pub mod http;

use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;

/// Longest actor id (DESIGN §1).
pub const MAX_ACTOR_ID_LEN: usize = 64;

/// The broker's own id: requests are messages to it, and it signs every notice it sends.
pub const BROKER: &str = "broker";

/// The scheduler's id (DESIGN §15): the native actor that sends messages when they are due.
pub const SCHEDULER: &str = "scheduler";

/// Where a native actor runs when the world spans several hosts (DESIGN §16).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Runs {
    /// Each host has its own.
    EveryHost,
    /// One host's serves the whole world: the one holding a lease under the actor's id.
    LedByOne,
}

/// A native actor: it runs inside the host, and no WASM actor may take its id.
pub struct Native {
    pub id: &'static str,
    pub runs: Runs,
    /// Made with the world: `sausage init` makes its folders, each broker start its mailbox.
    /// The others make their mailbox themselves when they start.
    pub made_at_init: bool,
}

/// The one table of native actors.
pub const NATIVES: [Native; 6] = [
    Native {
        id: BROKER,
        runs: Runs::EveryHost,
        made_at_init: true,
    },
    Native {
        id: "console",
        runs: Runs::EveryHost,
        made_at_init: true,
    },
    Native {
        id: "cargo",
        runs: Runs::EveryHost,
        made_at_init: true,
    },
    Native {
        id: "web",
        runs: Runs::EveryHost,
        made_at_init: false,
    },
    Native {
        id: "http",
        runs: Runs::EveryHost,
        made_at_init: false,
    },
    Native {
        id: SCHEDULER,
        runs: Runs::LedByOne,
        made_at_init: false,
    },
];

/// The native actor `id`, if it is one.
pub fn native(id: &str) -> Option<&'static Native> {
    NATIVES.iter().find(|n| n.id == id)
}

/// A valid actor id: `a-z`, `0-9`, `-`, `_`, 1 to 64 characters. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorId(Arc<str>);

impl ActorId {
    /// Checks `id` against the rules of DESIGN §1; the error says what is wrong.
    pub fn parse(id: &str) -> Result<ActorId, String> {
        if id.is_empty() {
            return Err("an actor id cannot be empty".into());
        }
        let chars = id.chars().count();
        if chars > MAX_ACTOR_ID_LEN {
            return Err(format!(
                "actor id `{}…` is {chars} characters long; the limit is {MAX_ACTOR_ID_LEN}",
                &id[..id.floor_char_boundary(16)],
            ));
        }
        if let Some(bad) = id
            .chars()
            .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-' | '_'))
        {
            return Err(format!(
                "actor id `{id}` has the character {bad:?}; use only a-z, 0-9, `-` and `_`"
            ));
        }
        Ok(ActorId(id.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_native(&self) -> bool {
        native(self.as_str()).is_some()
    }

    pub fn broker() -> ActorId {
        ActorId(BROKER.into())
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

/// What a person may make happen (DESIGN §13), from least to most. `people` keeps each
/// person's; the envelope carries the speaker's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Talks and reads.
    Guest,
    /// Also builds, deploys and upgrades the actors it owns.
    Member,
    /// Everything, including changing the agent and managing people.
    Owner,
}

impl Tier {
    pub const NAMES: &str = "owner, member or guest";

    pub fn parse(name: &str) -> Result<Tier, String> {
        match name {
            "owner" => Ok(Tier::Owner),
            "member" => Ok(Tier::Member),
            "guest" => Ok(Tier::Guest),
            _ => Err(format!("`{name}` is not a tier; use {}", Tier::NAMES)),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Owner => "owner",
            Tier::Member => "member",
            Tier::Guest => "guest",
        }
    }
}

/// The person a message speaks for and their tier, set by the surface (console, web) that took
/// the message from them: `"person"` and `"tier"` in the envelope. Person ids follow the rules
/// of actor ids, so they need no escaping.
#[derive(Clone, Debug, PartialEq)]
pub struct Speaker {
    pub person: ActorId,
    pub tier: Tier,
}

/// What an actor writes: `{"to": "notes", "id": "x1", "reply_to": "m-17", "body": {...}}`.
/// Only `body` is required; unknown fields are ignored, `person` and `tier` among them.
#[derive(Deserialize)]
pub struct Outgoing {
    #[serde(default)]
    pub to: Option<String>,
    /// The actor's own id for the message: a string, or a non-negative integer taken as its
    /// decimal string (`"id": 0` is `"0"`). Other numbers are refused: `1.5`, `-1` and `1e3`
    /// would have no single decimal spelling to reply to.
    #[serde(default, deserialize_with = "actor_chosen_id")]
    pub id: Option<String>,
    #[serde(default)]
    pub reply_to: Option<String>,
    pub body: Box<RawValue>,
    /// `"as"`: a surface actor (such as `matrix`) names the person it writes for by their
    /// handle on its network; the router makes that the speaker when the owner granted the
    /// actor that kind of handle, and refuses the message otherwise.
    #[serde(default, rename = "as")]
    pub as_handle: Option<String>,
    /// Set only by native surfaces and by the router (from `as`), never read from a line.
    #[serde(skip)]
    pub speaker: Option<Speaker>,
    /// The schedule a message fires for (DESIGN §15): set only by the native `scheduler`.
    #[serde(skip)]
    pub schedule: Option<Box<str>>,
    /// `"trace"`: the span this message continues, a W3C traceparent (DESIGN §22). Without
    /// it the host continues the trace of the message its sender is handling.
    #[serde(default, deserialize_with = "traceparent")]
    pub trace: Option<Trace>,
}

impl Outgoing {
    /// Parses one line an actor wrote. The error says why the line is not a message.
    pub fn parse(line: &[u8]) -> Result<Outgoing, String> {
        let out: Outgoing = serde_json::from_slice(line).map_err(|e| {
            if e.is_data() {
                format!("not a message: {e} (a message is a JSON object with a `body` object)")
            } else {
                format!("not JSON: {e}")
            }
        })?;
        if !out.body.get().starts_with('{') {
            return Err("the `body` must be a JSON object with a `type` field".into());
        }
        Ok(out)
    }

    /// A message whose body is built by the host (a `Value`, or anything that serialises as
    /// a JSON object).
    pub fn new(to: &ActorId, body: &(impl serde::Serialize + ?Sized)) -> Outgoing {
        Outgoing {
            to: Some(to.to_string()),
            id: None,
            reply_to: None,
            body: raw(body),
            as_handle: None,
            speaker: None,
            schedule: None,
            trace: None,
        }
    }

    pub fn replying_to(mut self, id: Option<&str>) -> Outgoing {
        self.reply_to = id.map(str::to_owned);
        self
    }

    /// The message speaks for a person: a surface's message from them.
    pub fn spoken_by(mut self, speaker: Option<Speaker>) -> Outgoing {
        self.speaker = speaker;
        self
    }
}

/// Reads an [`Outgoing::trace`]: a traceparent, or nothing for `null`.
fn traceparent<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Trace>, D::Error> {
    let Some(text) = Option::<&str>::deserialize(d)? else {
        return Ok(None);
    };
    Trace::parse(text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// Reads an [`Outgoing::id`]: a string, or a non-negative integer as its decimal string.
fn actor_chosen_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct Id;
    impl serde::de::Visitor<'_> for Id {
        type Value = Option<String>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an `id` that is a string or a non-negative integer")
        }

        fn visit_str<E: serde::de::Error>(self, id: &str) -> Result<Self::Value, E> {
            Ok(Some(id.to_owned()))
        }

        fn visit_u64<E: serde::de::Error>(self, id: u64) -> Result<Self::Value, E> {
            Ok(Some(id.to_string()))
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    // serde_json gives a negative integer to `visit_i64` and a fraction or an exponent to
    // `visit_f64`; the visitor's defaults refuse both, saying what is expected.
    d.deserialize_any(Id)
}

/// A message as the broker delivers it: `{"id": "m-17", "from": "console", "reply_to":
/// "agent/a3", "person": "ann", "tier": "member", "body": {...}}` (`reply_to`, `person` and
/// `tier` only when there are some).
#[derive(Debug)]
pub struct Envelope {
    pub id: String,
    pub from: ActorId,
    pub reply_to: Option<String>,
    pub speaker: Option<Speaker>,
    /// `"schedule":"<id>"`: the schedule this message fired for, set by the `scheduler` only;
    /// its ids follow the rules of actor ids, so they need no escaping.
    pub schedule: Option<Box<str>>,
    /// `"trace"`: the message's place in its trace (DESIGN §22); [`Trace::NONE`] for none.
    pub trace: Trace,
    pub body: Box<RawValue>,
}

impl Envelope {
    /// The line written to a guest's stdin, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        let body = self.body.get();
        let mut line = Vec::with_capacity(body.len() + self.id.len() + 64 + TRACE_FIELD);
        line.extend_from_slice(b"{\"id\":");
        push_json_string(&mut line, &self.id);
        line.extend_from_slice(b",\"from\":\"");
        // Actor ids contain no character JSON would escape.
        line.extend_from_slice(self.from.as_str().as_bytes());
        line.push(b'"');
        if let Some(reply_to) = &self.reply_to {
            line.extend_from_slice(b",\"reply_to\":");
            push_json_string(&mut line, reply_to);
        }
        if let Some(speaker) = &self.speaker {
            line.extend_from_slice(b",\"person\":\"");
            line.extend_from_slice(speaker.person.as_str().as_bytes());
            line.extend_from_slice(b"\",\"tier\":\"");
            line.extend_from_slice(speaker.tier.as_str().as_bytes());
            line.push(b'"');
        }
        if let Some(schedule) = &self.schedule {
            line.extend_from_slice(b",\"schedule\":\"");
            line.extend_from_slice(schedule.as_bytes());
            line.push(b'"');
        }
        if self.trace.is_some() {
            // Only a host that exports spans gives messages a trace (`broker::router`).
            line.extend_from_slice(b",\"trace\":\"");
            self.trace.push_traceparent(&mut line);
            line.push(b'"');
        }
        line.extend_from_slice(b",\"body\":");
        line.extend_from_slice(body.as_bytes());
        line.extend_from_slice(b"}\n");
        line
    }

    /// The length of [`Envelope::to_line`] without rendering it (escapes in ids not counted).
    pub fn line_len(&self) -> usize {
        const FRAME: usize = r#"{"id":"","from":"","body":}"#.len() + 1;
        const REPLY_FRAME: usize = r#","reply_to":"""#.len();
        const SPEAKER_FRAME: usize = r#","person":"","tier":"""#.len();
        const SCHEDULE_FRAME: usize = r#","schedule":"""#.len();

        self.body.get().len()
            + self.id.len()
            + self.from.as_str().len()
            + self.reply_to.as_ref().map_or(0, |r| r.len() + REPLY_FRAME)
            + self.speaker.as_ref().map_or(0, |s| {
                s.person.as_str().len() + s.tier.as_str().len() + SPEAKER_FRAME
            })
            + self
                .schedule
                .as_ref()
                .map_or(0, |s| s.len() + SCHEDULE_FRAME)
            + if self.trace.is_some() { TRACE_FIELD } else { 0 }
            + FRAME
    }

    /// The body parsed into a value, for the native actors that read it. Routing checks only
    /// the syntax, so a body may hold what a `Value` cannot (a number beyond `f64`, nesting
    /// deeper than serde_json's limit, a lone surrogate): such a body reads as
    /// `{"type": "unreadable", "reason": ...}`, which the reader answers like any unknown body.
    pub fn body_value(&self) -> serde_json::Value {
        serde_json::from_str(self.body.get()).unwrap_or_else(|e| {
            serde_json::json!({
                "type": "unreadable",
                "reason": format!("the body cannot be read: {e}"),
            })
        })
    }
}

impl Envelope {
    /// Reads back a line [`Envelope::to_line`] wrote (a parked message, one that crossed to
    /// another host). The error says what is wrong with it.
    pub fn from_line(line: &[u8]) -> Result<Envelope, String> {
        let stored: StoredEnvelope =
            serde_json::from_slice(line).map_err(|e| format!("not a message: {e}"))?;
        let speaker = match (stored.person, stored.tier) {
            (Some(person), Some(tier)) => Some(Speaker {
                person: ActorId::parse(&person)?,
                tier,
            }),
            (None, None) => None,
            _ => return Err("`person` and `tier` come together or not at all".into()),
        };
        Ok(Envelope {
            id: stored.id,
            from: ActorId::parse(&stored.from)?,
            reply_to: stored.reply_to,
            speaker,
            schedule: stored.schedule.map(Into::into),
            trace: match stored.trace {
                Some(text) => {
                    Trace::parse(&text)?.sent_from(stored.trace_parent, stored.trace_at)?
                }
                None => Trace::NONE,
            },
            body: stored.body,
        })
    }
}

/// A message as [`Envelope::to_line`] writes it, read back.
#[derive(Deserialize)]
struct StoredEnvelope {
    id: String,
    from: String,
    reply_to: Option<String>,
    person: Option<String>,
    tier: Option<Tier>,
    schedule: Option<String>,
    trace: Option<String>,
    /// What [`Envelope::to_wire`] adds for the host that reads the message next.
    trace_parent: Option<String>,
    trace_at: Option<u64>,
    body: Box<RawValue>,
}

impl Envelope {
    /// The line as it crosses to another host or waits on disk: [`Envelope::to_line`] with
    /// what of the trace a guest does not see (the parent span and when the message was
    /// accepted, for its delivery span), read back by [`Envelope::from_line`].
    pub fn to_wire(&self) -> Vec<u8> {
        let mut line = self.to_line();
        if self.trace.sampled && self.trace.parent != 0 {
            // Replace the closing `}\n`: the body stays last but one field.
            line.truncate(line.len() - 2);
            let extra = format!(
                ",\"trace_parent\":\"{:016x}\",\"trace_at\":{}}}\n",
                self.trace.parent, self.trace.at
            );
            line.extend_from_slice(extra.as_bytes());
        }
        line
    }
}

/// The length of a traceparent: `00-` 32 hex `-` 16 hex `-` 2 hex.
pub const TRACEPARENT_LEN: usize = 55;

/// A message's place in a trace (DESIGN §22): the W3C trace context of its delivery span.
/// `span` is the message's own span; `parent` the span it continues (the delivery of the
/// message its sender was handling, or a span the sender named), 0 for a trace's root.
/// `sampled` when this host exports traces; `at` is when the message was accepted (Unix
/// nanoseconds), kept only when sampled, the start of its delivery span.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    pub trace: u128,
    pub span: u64,
    pub parent: u64,
    pub sampled: bool,
    pub at: u64,
}

impl Trace {
    /// No trace: on a host that exports no spans, before traces, or a candidate's test message.
    pub const NONE: Trace = Trace {
        trace: 0,
        span: 0,
        parent: 0,
        sampled: false,
        at: 0,
    };

    pub fn is_some(&self) -> bool {
        self.trace != 0
    }

    /// A new span: a child of `parent` (its trace goes on), or the root of a new trace.
    pub fn child_of(parent: Option<&Trace>, sampled: bool) -> Trace {
        let (trace, parent) = match parent {
            Some(p) if p.is_some() => (p.trace, p.span),
            _ => (new_trace_id(), 0),
        };
        Trace {
            trace,
            span: new_span_id(),
            parent,
            sampled,
            at: if sampled { unix_nanos() } else { 0 },
        }
    }

    /// Reads a W3C traceparent, `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`
    /// (lowercase; neither id all zeros). The error says what is wrong and what is expected.
    pub fn parse(text: &str) -> Result<Trace, String> {
        let wrong = |what: &str| {
            format!(
                "`trace` {what}: a trace is a W3C traceparent such as \
                 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            )
        };
        let parts: Vec<&str> = text.split('-').collect();
        let [version, trace, span, flags] = parts[..] else {
            return Err(wrong("has not four parts joined by `-`"));
        };
        let hex = |part: &str, len: usize| {
            part.len() == len && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if version != "00" {
            return Err(wrong("is not of version 00"));
        }
        if !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
            return Err(wrong(
                "has ids that are not lowercase hex of 32, 16 and 2 digits",
            ));
        }
        let trace = u128::from_str_radix(trace, 16).expect("checked hex");
        let span = u64::from_str_radix(span, 16).expect("checked hex");
        if trace == 0 || span == 0 {
            return Err(wrong("names an id of zeros"));
        }
        let flags = u8::from_str_radix(flags, 16).expect("checked hex");
        Ok(Trace {
            trace,
            span,
            parent: 0,
            sampled: flags & 1 == 1,
            at: 0,
        })
    }

    /// This message's traceparent, as its envelope shows it.
    pub fn traceparent(&self) -> String {
        let mut out = Vec::with_capacity(TRACEPARENT_LEN);
        self.push_traceparent(&mut out);
        String::from_utf8(out).expect("hex is ASCII")
    }

    fn push_traceparent(&self, out: &mut Vec<u8>) {
        let mut text = *b"00-00000000000000000000000000000000-0000000000000000-00";
        hex_into(&mut text[3..35], &self.trace.to_be_bytes());
        hex_into(&mut text[36..52], &self.span.to_be_bytes());
        if self.sampled {
            text[54] = b'1';
        }
        out.extend_from_slice(&text);
    }

    /// What [`Envelope::to_wire`] carried besides the traceparent.
    fn sent_from(mut self, parent: Option<String>, at: Option<u64>) -> Result<Trace, String> {
        if let Some(parent) = parent {
            self.parent = u64::from_str_radix(&parent, 16)
                .map_err(|e| format!("`trace_parent` is not 16 hex digits: {e}"))?;
        }
        self.at = at.unwrap_or(0);
        Ok(self)
    }
}

/// Writes `bytes` as lowercase hex into `out`, two digits a byte (it is twice their length).
fn hex_into(out: &mut [u8], bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0xf)];
    }
}

/// The bytes `,"trace":"<traceparent>"` adds to a line.
const TRACE_FIELD: usize = r#","trace":"""#.len() + TRACEPARENT_LEN;

/// Span ids: a counter mixed by SplitMix64 from a seed drawn at start, so ids are distinct
/// within a process and unlikely to meet another host's, without a random draw per message.
fn new_span_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = splitmix64(n ^ id_seed());
        if id != 0 {
            return id;
        }
    }
}

fn new_trace_id() -> u128 {
    (u128::from(new_span_id()) << 64) | u128::from(new_span_id())
}

fn id_seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(unix_nanos())
    })
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Now, in nanoseconds since the Unix epoch.
pub fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Serialises a host-built body once, for routing.
pub fn raw(body: &(impl serde::Serialize + ?Sized)) -> Box<RawValue> {
    // What the host serialises has string keys only, so it cannot fail.
    serde_json::value::to_raw_value(body).expect("a JSON value serialises")
}

fn push_json_string(out: &mut Vec<u8>, s: &str) {
    // Serialising a string into a Vec cannot fail.
    serde_json::to_writer(&mut *out, s).expect("a string serialises");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actor_ids_follow_the_rules() {
        for good in ["a", "echo", "notes-2", "x_y", &"a".repeat(64)] {
            assert!(ActorId::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "Echo", "a b", "a/b", "..", "é", &"a".repeat(65), "a\n"] {
            let err = ActorId::parse(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
        assert!(ActorId::parse("caf\u{e9}").unwrap_err().contains("'é'"));
    }

    #[test]
    fn outgoing_lines_need_an_object_body() {
        let ok = Outgoing::parse(br#"{"to":"a","id":"x","body":{"type":"t"},"extra":1}"#).unwrap();
        assert_eq!(ok.to.as_deref(), Some("a"));
        assert_eq!(ok.body.get(), r#"{"type":"t"}"#);
        for bad in [
            &b"not json"[..],
            b"[1,2]",
            br#"{"to":"a"}"#,
            br#"{"body":3}"#,
            br#"{"body":"text"}"#,
            br#"{"to":5,"body":{}}"#,
            b"\xff\xfe",
        ] {
            assert!(
                Outgoing::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn an_actor_chosen_id_is_a_string_or_a_non_negative_integer() {
        let id = |line: &str| Outgoing::parse(line.as_bytes()).map(|out| out.id);
        assert_eq!(
            id(r#"{"id":"x1","body":{}}"#).unwrap().as_deref(),
            Some("x1")
        );
        assert_eq!(id(r#"{"id":0,"body":{}}"#).unwrap().as_deref(), Some("0"));
        assert_eq!(
            id(r#"{"id":18446744073709551615,"body":{}}"#)
                .unwrap()
                .as_deref(),
            Some("18446744073709551615")
        );
        assert_eq!(id(r#"{"id":null,"body":{}}"#).unwrap(), None);
        assert_eq!(id(r#"{"body":{}}"#).unwrap(), None);
        for bad in [
            "-1",
            "1.5",
            "1e3",
            "0.0",
            "true",
            "[1]",
            "{}",
            "18446744073709551616",
        ] {
            let err = id(&format!(r#"{{"id":{bad},"body":{{}}}}"#)).unwrap_err();
            assert!(
                err.contains("a string or a non-negative integer"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn envelope_lines_are_json_with_the_body_verbatim() {
        let env = Envelope {
            id: "a/q".into(),
            from: ActorId::parse("echo").unwrap(),
            reply_to: Some("m-1".into()),
            speaker: None,
            schedule: None,
            trace: Default::default(),
            body: RawValue::from_string(r#"{ "type" : "t" }"#.into()).unwrap(),
        };
        let line = env.to_line();
        assert_eq!(line.len(), env.line_len());
        assert!(line.ends_with(b"}\n"));
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["id"], "a/q");
        assert_eq!(v["from"], "echo");
        assert_eq!(v["reply_to"], "m-1");
        assert_eq!(v["body"]["type"], "t");
        assert!(
            String::from_utf8(line)
                .unwrap()
                .contains(r#"{ "type" : "t" }"#)
        );
    }

    #[test]
    fn only_the_host_says_who_a_message_speaks_for() {
        let forged = br#"{"to":"agent","person":"boss","tier":"owner","schedule":"s1","body":{"type":"text"}}"#;
        let parsed = Outgoing::parse(forged).unwrap();
        assert_eq!((parsed.speaker, parsed.schedule), (None, None));

        let env = Envelope {
            id: "m-9".into(),
            from: ActorId::parse("web").unwrap(),
            reply_to: None,
            speaker: Some(Speaker {
                person: ActorId::parse("ann").unwrap(),
                tier: Tier::Member,
            }),
            schedule: Some("every-morning".into()),
            trace: Trace::child_of(None, true),
            body: RawValue::from_string(r#"{"type":"text"}"#.into()).unwrap(),
        };
        let line = env.to_line();
        assert_eq!(line.len(), env.line_len());
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            (&v["person"], &v["tier"], &v["schedule"]),
            (&"ann".into(), &"member".into(), &"every-morning".into())
        );
        assert_eq!(v["trace"], env.trace.traceparent());
        assert_eq!(
            Tier::parse("admin").unwrap_err(),
            "`admin` is not a tier; use owner, member or guest"
        );
    }

    #[test]
    fn a_trace_is_a_w3c_traceparent_and_a_child_continues_it() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let trace = Trace::parse(text).unwrap();
        assert_eq!(trace.traceparent(), text);
        assert!(trace.sampled);
        let child = Trace::child_of(Some(&trace), false);
        assert_eq!((child.trace, child.parent), (trace.trace, trace.span));
        assert_ne!(child.span, trace.span);
        assert!(child.traceparent().ends_with("-00"));
        let root = Trace::child_of(None, false);
        assert_eq!(root.parent, 0);
        assert_ne!(root.trace, trace.trace);
        assert_eq!(root.traceparent().len(), TRACEPARENT_LEN);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        ] {
            let err = Trace::parse(bad).unwrap_err();
            assert!(err.contains("W3C traceparent"), "{bad}: {err}");
        }
        let line =
            br#"{"trace":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","body":{}}"#;
        assert_eq!(Outgoing::parse(line).unwrap().trace, Some(trace));
        let err = Outgoing::parse(br#"{"trace":"nope","body":{}}"#)
            .err()
            .unwrap();
        assert!(err.contains("traceparent"), "{err}");
        let err = Outgoing::parse(br#"{"trace":7,"body":{}}"#).err().unwrap();
        assert!(err.contains("not a message"), "{err}");
        assert_eq!(
            Outgoing::parse(br#"{"trace":null,"body":{}}"#)
                .unwrap()
                .trace,
            None
        );
    }

    #[test]
    fn the_wire_form_keeps_what_a_guest_does_not_see() {
        let parent = Trace::child_of(None, true);
        let env = Envelope {
            id: "m-1".into(),
            from: ActorId::parse("a").unwrap(),
            reply_to: None,
            speaker: None,
            schedule: None,
            trace: Trace::child_of(Some(&parent), true),
            body: RawValue::from_string(r#"{"type":"t"}"#.into()).unwrap(),
        };
        let guest: serde_json::Value = serde_json::from_slice(&env.to_line()).unwrap();
        assert!(guest.get("trace_parent").is_none());
        let back = Envelope::from_line(&env.to_wire()).unwrap();
        assert_eq!(back.trace, env.trace);
        assert_eq!(back.to_line(), env.to_line());
        let untraced = Envelope {
            trace: Trace::NONE,
            ..back
        };
        assert!(
            !String::from_utf8(untraced.to_line())
                .unwrap()
                .contains("trace")
        );
        assert_eq!(untraced.to_line().len(), untraced.line_len());
    }
}
