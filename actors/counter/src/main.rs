//! `counter` commits a counter in `/data/count` and says which instance of it did: each instance
//! draws a random `run` when it starts, so a test can tell the steps of one host's instance from
//! another's (two hosts must never both step it).
//! - `{"type":"step"}` adds 1 to the counter, commits it (the file is written whole and closed),
//!   then replies `{"type":"count","n":N,"run":R}`, with the request's `tag` when it has one.
//! - `{"type":"get"}` → `{"type":"count","n":N,"run":R}` without a step.
//! - `{"type":"run","every_ms":T}` makes it step on its own every T ms, for good (it reads no
//!   more messages), replying `{"type":"ticked","n":N,"run":R}` to that message after each
//!   commit.
//! - anything else → `{"type":"error","reason":..}`. Exits 0 on shutdown or EOF.

use serde_json::json;
use std::hash::BuildHasher;

const COUNT: &str = "/data/count";

fn main() {
    // Random keys from the host's `wasi:random`: a new value for every instance.
    let run = std::collections::hash_map::RandomState::new().hash_one(0u8);
    let run = format!("{run:016x}");
    for msg in proto::messages() {
        let counted = match msg.kind() {
            "step" => step(),
            "get" => load(),
            "run" => {
                let every = msg.body["every_ms"].as_u64().unwrap_or(100);
                loop {
                    std::thread::sleep(std::time::Duration::from_millis(every));
                    match step() {
                        // Replies, so they find the asker on whichever host it is.
                        Ok(n) => proto::reply(&msg, json!({"type": "ticked", "n": n, "run": run})),
                        Err(e) => eprintln!("{COUNT}: {e}"),
                    }
                }
            }
            other => Err(format!("unknown type {other:?}; known: step, get, run")),
        };
        match counted {
            Ok(n) => proto::reply(
                &msg,
                json!({"type": "count", "n": n, "run": run, "tag": msg.body["tag"]}),
            ),
            Err(reason) => proto::reply_error(&msg, &format!("{COUNT}: {reason}")),
        }
    }
}

/// Adds 1 to the counter and commits it; returns the new count.
fn step() -> Result<u64, String> {
    let n = load()? + 1;
    std::fs::write(COUNT, n.to_string()).map_err(|e| e.to_string())?;
    Ok(n)
}

/// The committed counter, 0 before the first step.
fn load() -> Result<u64, String> {
    match std::fs::read_to_string(COUNT) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|e| format!("not a number: {e}")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e.to_string()),
    }
}
