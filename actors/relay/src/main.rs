//! `relay` carries messages for whoever asks, the way a person's own bot would:
//! `{"type":"relay","to":T,"body":B}` sends `B` to `T` (with `"as":A` when the request has an
//! `as`, which the host refuses unless this actor was granted handles), and once `T` replies,
//! answers the asker with `{"type":"relayed","from":<T's reply's from>,"body":<its body>}`.
//! Anything else that is not a reply gets an error. Exits 0 on shutdown or EOF.

use std::collections::HashMap;

use serde_json::{Value, json};

fn main() {
    // Relayed message id → the message that asked for it, to answer once the reply comes.
    let mut asked: HashMap<String, proto::Message> = HashMap::new();
    let me = std::env::var("SAUSAGE_ACTOR").unwrap_or_default();
    for (n, msg) in proto::messages().enumerate() {
        if let Some(reply_to) = &msg.reply_to {
            let Some(asker) = reply_to
                .strip_prefix(&format!("{me}/"))
                .and_then(|id| asked.remove(id))
            else {
                eprintln!("a reply to nothing relayed: {}", msg.body);
                continue;
            };
            proto::reply(
                &asker,
                json!({"type": "relayed", "from": msg.from, "body": msg.body}),
            );
            continue;
        }
        if msg.kind() != "relay" {
            proto::reply_error(&msg, "relay knows {\"type\":\"relay\",\"to\",\"body\"}");
            continue;
        }
        let (Some(to), Some(body)) = (msg.body["to"].as_str(), msg.body.get("body")) else {
            proto::reply_error(&msg, "`relay` needs `to` (an actor) and `body` (an object)");
            continue;
        };
        let id = format!("r{n}");
        let mut line = json!({"to": to, "id": id, "body": body});
        if let Some(as_handle) = msg.body.get("as").filter(|a| !a.is_null()) {
            line["as"] = as_handle.clone();
        }
        write_line(&line);
        asked.insert(id, msg);
    }
}

/// Writes one raw line (`proto::Outgoing` has no `as`).
fn write_line(line: &Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let written = writeln!(out, "{line}").and_then(|()| out.flush());
    if let Err(e) = written {
        eprintln!("stdout: {e}; exiting");
        std::process::exit(1);
    }
}
