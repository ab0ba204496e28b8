//! `kvstore` keeps state the way an embedded database does: it commits with fsync and keeps its
//! files open, never closing them, so only the host's sync-commits (DESIGN §2) make its writes
//! durable. A reply is sent only once the write is committed.
//! - `{"type":"put","key":K,"value":V}` (strings) commits a redb write transaction to
//!   `/data/kv.redb`, replies `{"type":"stored","key":K}`.
//! - `{"type":"get","key":K}` → `{"type":"value","key":K,"value":V}` (`null` when absent).
//! - `{"type":"append","line":L}` appends `L` and a newline to `/data/log.txt` and calls
//!   `sync_all`, replies `{"type":"appended","bytes":N}` (the file's size). With
//!   `"after_ms":T` it first works on something else for T ms, the message read and not yet
//!   handled (a crash test writes the host's pages back meanwhile).
//! - `{"type":"lines"}` → `{"type":"lines","lines":[every line of /data/log.txt]}`.
//! - anything else → `{"type":"error","reason":..}`. Exits 0 on shutdown or EOF.

use redb::{Database, ReadableDatabase, TableDefinition};
use serde_json::{Value, json};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};

const DATABASE: &str = "/data/kv.redb";
const LOG: &str = "/data/log.txt";
const TABLE: TableDefinition<&str, &str> = TableDefinition::new("kv");

fn main() {
    let db = Database::create(DATABASE)
        .unwrap_or_else(|e| panic!("{DATABASE}: cannot open the database: {e}"));
    // Opened once, like a database's log: every append is committed by its sync, not by a close.
    let mut log = OpenOptions::new()
        .append(true)
        .create(true)
        .open(LOG)
        .unwrap_or_else(|e| panic!("{LOG}: cannot open: {e}"));
    for msg in proto::messages() {
        let answer = match msg.kind() {
            "put" => match (msg.body["key"].as_str(), msg.body["value"].as_str()) {
                (Some(key), Some(value)) => put(&db, key, value)
                    .map(|()| json!({"type": "stored", "key": key}))
                    .map_err(|e| format!("{DATABASE}: {e}")),
                _ => Err("put needs string fields `key` and `value`".to_string()),
            },
            "get" => match msg.body["key"].as_str() {
                Some(key) => get(&db, key)
                    .map(|value| json!({"type": "value", "key": key, "value": value}))
                    .map_err(|e| format!("{DATABASE}: {e}")),
                None => Err("get needs a string field `key`".to_string()),
            },
            "append" => match msg.body["line"].as_str() {
                Some(line) => {
                    if let Some(ms) = msg.body["after_ms"].as_u64() {
                        std::thread::sleep(std::time::Duration::from_millis(ms));
                    }
                    append(&mut log, line)
                        .map(|bytes| json!({"type": "appended", "bytes": bytes}))
                        .map_err(|e| format!("{LOG}: {e}"))
                }
                None => Err("append needs a string field `line`".to_string()),
            },
            "lines" => fs::read_to_string(LOG)
                .map(|text| json!({"type": "lines", "lines": text.lines().collect::<Vec<_>>()}))
                .map_err(|e| format!("{LOG}: {e}")),
            other => Err(format!(
                "unknown type {other:?}; known: put, get, append, lines"
            )),
        };
        match answer {
            Ok(body) => proto::reply(&msg, body),
            Err(reason) => proto::reply_error(&msg, &reason),
        }
    }
}

/// One write transaction; redb syncs the file when it commits.
fn put(db: &Database, key: &str, value: &str) -> Result<(), redb::Error> {
    let transaction = db.begin_write()?;
    transaction.open_table(TABLE)?.insert(key, value)?;
    transaction.commit()?;
    Ok(())
}

fn get(db: &Database, key: &str) -> Result<Value, redb::Error> {
    let transaction = db.begin_read()?;
    let table = match transaction.open_table(TABLE) {
        // Nothing was ever put.
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Value::Null),
        result => result?,
    };
    Ok(table
        .get(key)?
        .map_or(Value::Null, |value| value.value().into()))
}

/// Appends one line and syncs it; returns the file's size.
fn append(log: &mut File, line: &str) -> io::Result<u64> {
    writeln!(log, "{line}")?;
    log.sync_all()?;
    Ok(log.metadata()?.len())
}
