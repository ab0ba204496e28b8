//! The framing every test actor speaks: one JSON message per line, read from stdin (stamped by the
//! broker with `id`, `from` and maybe `reply_to`) and written to stdout (`body`, maybe `to`, `id`
//! and `reply_to`). What a body means is each actor's business, not this crate's.
//! Invariant: every message written is flushed before the writing call returns, so the broker never
//! waits for a line still buffered inside the guest.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::io::{self, BufRead, BufWriter, Write};

/// A message as the broker delivers it.
#[derive(Debug, Deserialize)]
pub struct Message {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub from: String,
    #[serde(default)]
    pub reply_to: Option<String>,
    pub body: Value,
}

impl Message {
    /// The body's `"type"`, or `""` when it has none.
    pub fn kind(&self) -> &str {
        self.body["type"].as_str().unwrap_or("")
    }
}

/// A message to write. Without `to` the broker publishes it to the sender's subscribers; without
/// `id` the broker assigns one (an actor-chosen `x` comes back to others as `"<sender>/x"`).
#[derive(Debug, Serialize)]
pub struct Outgoing {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    pub body: Value,
}

impl Outgoing {
    pub fn to(to: &str, body: Value) -> Self {
        Outgoing {
            to: Some(to.to_string()),
            id: None,
            reply_to: None,
            body,
        }
    }

    pub fn publish(body: Value) -> Self {
        Outgoing {
            to: None,
            id: None,
            reply_to: None,
            body,
        }
    }

    /// A reply goes back to the sender and names the message it answers.
    pub fn reply(msg: &Message, body: Value) -> Self {
        Outgoing {
            to: Some(msg.from.clone()),
            id: None,
            reply_to: Some(msg.id.clone()),
            body,
        }
    }

    pub fn with_id(self, id: &str) -> Self {
        Outgoing {
            id: Some(id.to_string()),
            ..self
        }
    }
}

/// Reads the next message, skipping (and logging) lines that are not messages; `None` at EOF.
pub fn read() -> Option<Message> {
    let mut line = Vec::new();
    loop {
        if !read_line(&mut line) {
            return None;
        }
        match serde_json::from_slice(&line) {
            Ok(msg) => return Some(msg),
            Err(e) => eprintln!("stdin: skipping a line that is not a message: {e}"),
        }
    }
}

/// Reads the next line that is not blank into `line` (replacing what it held), for an actor that
/// parses its hot messages itself; `false` at EOF.
pub fn read_line(line: &mut Vec<u8>) -> bool {
    let mut stdin = io::stdin().lock();
    loop {
        line.clear();
        match stdin.read_until(b'\n', line) {
            Ok(0) => return false,
            Ok(_) if line.trim_ascii().is_empty() => {}
            Ok(_) => return true,
            Err(e) => {
                eprintln!("stdin: {e}; treating it as the end of input");
                return false;
            }
        }
    }
}

/// Every message up to `{"type":"shutdown"}` or EOF, the two ways the broker ends an instance.
/// When the iterator ends, the actor should return from `main` (exit 0).
pub fn messages() -> impl Iterator<Item = Message> {
    std::iter::from_fn(|| read().filter(|msg| msg.kind() != "shutdown"))
}

/// Writes one message and flushes it.
pub fn send(msg: Outgoing) {
    let mut line = serde_json::to_vec(&msg).expect("a message serializes");
    line.push(b'\n');
    send_raw(&line);
}

/// Writes messages, one per line, and flushes once at the end: for bursts.
pub fn send_all(msgs: impl IntoIterator<Item = Outgoing>) {
    let mut out = BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    let written = msgs.into_iter().try_for_each(|msg| {
        serde_json::to_writer(&mut out, &msg)?;
        out.write_all(b"\n")
    });
    if let Err(e) = written.and_then(|()| out.flush()) {
        exit_unread(e);
    }
}

/// Writes lines the caller made itself (each ending in a newline) in one write, and flushes.
pub fn send_raw(lines: &[u8]) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_all(lines).and_then(|()| out.flush()) {
        exit_unread(e);
    }
}

fn exit_unread(e: io::Error) -> ! {
    // Nobody reads our stdout any more, so nothing we do could reach anyone: stop.
    eprintln!("stdout: {e}; the broker no longer reads, exiting");
    std::process::exit(1);
}

pub fn reply(msg: &Message, body: Value) {
    send(Outgoing::reply(msg, body));
}

/// Answers a message this actor cannot handle with `{"type":"error","reason":...}`. A message that
/// is itself a reply only gets a log line, so two actors never trade errors forever.
pub fn reply_error(msg: &Message, reason: &str) {
    if msg.reply_to.is_some() {
        let to = msg.reply_to.as_deref().unwrap_or_default();
        eprintln!(
            "ignoring reply {} to {to} from {}: {reason}",
            msg.id, msg.from
        );
    } else {
        reply(msg, json!({"type": "error", "reason": reason}));
    }
}
