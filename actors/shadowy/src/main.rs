//! `shadowy` plays a running version and its candidates in the shadow-run tests (DESIGN §21):
//! one build behaves by its version number (`SAUSAGE_VERSION`), so an upgrade of it to itself
//! is an upgrade to a version that behaves differently.
//! - `{"type":"double","n":K}` → `{"type":"doubled","n":K,"result":2K}`; version 2 answers
//!   K = 7 with 15 (one answer out of many changed).
//! - `{"type":"record","text":T}` appends a record to `/data/records.jsonl` (`{"text":T}`, and
//!   `"v":3` from version 3) and answers `{"type":"recorded","count":N}`.
//! - `{"type":"count"}` → `{"type":"count","count":N}`; version 3 panics on a record without
//!   `"v"` (it breaks on an old record in `/data`).
//! - `{"type":"noise"}` → `{"type":"noise","at_ms":..,"lucky":..}`: the wall clock and a random
//!   number, which a shadow run replays.
//! - anything else → `{"type":"error","reason":..}`. Exits 0 on shutdown or EOF.

use serde_json::{Value, json};
use std::fs::{self, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

const RECORDS: &str = "/data/records.jsonl";

fn main() {
    let version: u32 = std::env::var("SAUSAGE_VERSION")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for msg in proto::messages() {
        match msg.kind() {
            "double" => {
                let n = msg.body["n"].as_i64().unwrap_or(0);
                let result = if version == 2 && n == 7 { 15 } else { 2 * n };
                proto::reply(&msg, json!({"type": "doubled", "n": n, "result": result}));
            }
            "record" => {
                let mut record = json!({"text": msg.body["text"]});
                if version >= 3 {
                    record["v"] = json!(3);
                }
                let mut file = OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(RECORDS)
                    .expect("records open");
                writeln!(file, "{record}").expect("record written");
                drop(file);
                proto::reply(&msg, json!({"type": "recorded", "count": records().len()}));
            }
            "count" => {
                let records = records();
                if version == 3 {
                    for record in &records {
                        record["v"].as_u64().expect("a record of version 3");
                    }
                }
                proto::reply(&msg, json!({"type": "count", "count": records.len()}));
            }
            "noise" => {
                let at_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                let lucky = std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish();
                proto::reply(
                    &msg,
                    json!({"type": "noise", "at_ms": at_ms, "lucky": lucky}),
                );
            }
            other => proto::reply_error(
                &msg,
                &format!("unknown type {other:?}; known: double, record, count, noise"),
            ),
        }
    }
}

fn records() -> Vec<Value> {
    fs::read_to_string(RECORDS)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}
