//! `notes` keeps notes in `/data/notes.jsonl`, one JSON object per line. Each note is appended by
//! opening the file in append mode, writing the line and closing it, so every note is committed
//! on its own. The file is the only state: counts and lists are read from it.
//! - `{"type":"add","text":T}` stores `{"text":T}`, replies `{"type":"added","count":N}`.
//! - `{"type":"tick","n":K}` (from a ticker) stores `{"n":K}`, no reply.
//! - `{"type":"list"}` → `{"type":"notes","notes":[every stored object, in order]}`.
//! - `{"type":"count"}` → `{"type":"count","count":N}`.
//! - anything else → `{"type":"error","reason":..}`. Exits 0 on shutdown or EOF.

use serde_json::{Value, json};
use std::fs::{self, OpenOptions};
use std::io::{self, Write};

const NOTES: &str = "/data/notes.jsonl";

fn main() {
    for msg in proto::messages() {
        match msg.kind() {
            "add" => {
                let Some(text) = msg.body["text"].as_str() else {
                    proto::reply_error(&msg, "add needs a string field `text`");
                    continue;
                };
                match append(&json!({"text": text})).and_then(|()| load()) {
                    Ok(notes) => proto::reply(&msg, json!({"type": "added", "count": notes.len()})),
                    Err(e) => proto::reply_error(&msg, &format!("{NOTES}: {e}")),
                }
            }
            "tick" => {
                if let Err(e) = append(&json!({"n": msg.body["n"]})) {
                    eprintln!(
                        "{NOTES}: tick {} from {} lost: {e}",
                        msg.body["n"], msg.from
                    );
                }
            }
            "list" => match load() {
                Ok(notes) => proto::reply(&msg, json!({"type": "notes", "notes": notes})),
                Err(e) => proto::reply_error(&msg, &format!("{NOTES}: {e}")),
            },
            "count" => match load() {
                Ok(notes) => proto::reply(&msg, json!({"type": "count", "count": notes.len()})),
                Err(e) => proto::reply_error(&msg, &format!("{NOTES}: {e}")),
            },
            other => proto::reply_error(
                &msg,
                &format!("unknown type {other:?}; known: add, tick, list, count"),
            ),
        }
    }
}

/// Appends one note; the file is closed (and so committed) when `file` drops at the end.
fn append(note: &Value) -> io::Result<()> {
    let mut file = OpenOptions::new().append(true).create(true).open(NOTES)?;
    writeln!(file, "{note}")
}

/// Every stored note, in order; none before the first is added. A line that is not JSON is logged
/// and skipped rather than making the whole list unreadable.
fn load() -> io::Result<Vec<Value>> {
    let text = match fs::read_to_string(NOTES) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        result => result?,
    };
    Ok(text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .filter_map(|line| {
            serde_json::from_str(line)
                .map_err(|e| eprintln!("{NOTES}: skipping a line that is not JSON: {e}"))
                .ok()
        })
        .collect())
}
