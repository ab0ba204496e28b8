//! Messages as they cross the broker (DESIGN §1): actor ids, the line an actor writes, and the
//! envelope the broker delivers.
//!
//! Bodies are kept as raw JSON text from the line that carried them: routing checks that a body
//! is an object and passes it on without parsing it into values or serialising it again.
//! **Invariant:** only the host sets who a message speaks for ([`Speaker`]): the line an actor
//! writes cannot carry one, whatever fields it holds.

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
pub const NATIVES: [Native; 5] = [
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

    /// A message whose body is built by the host.
    pub fn new(to: &ActorId, body: &serde_json::Value) -> Outgoing {
        Outgoing {
            to: Some(to.to_string()),
            id: None,
            reply_to: None,
            body: raw(body),
            as_handle: None,
            speaker: None,
            schedule: None,
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
    pub body: Box<RawValue>,
}

impl Envelope {
    /// The line written to a guest's stdin, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        let body = self.body.get();
        let mut line = Vec::with_capacity(body.len() + self.id.len() + 64);
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
    body: Box<RawValue>,
}

/// Serialises a host-built body once, for routing.
pub fn raw(body: &serde_json::Value) -> Box<RawValue> {
    // Serialising a `Value` cannot fail: its keys are strings.
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
            body: RawValue::from_string(r#"{"type":"text"}"#.into()).unwrap(),
        };
        let line = env.to_line();
        assert_eq!(line.len(), env.line_len());
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            (&v["person"], &v["tier"], &v["schedule"]),
            (&"ann".into(), &"member".into(), &"every-morning".into())
        );
        assert_eq!(
            Tier::parse("admin").unwrap_err(),
            "`admin` is not a tier; use owner, member or guest"
        );
    }
}
