//! `ticker` sends numbered ticks on request.
//! `{"type":"start","to":T,"count":N,"interval_ms":M,"first":F,"record_every":K}` sends
//! `{"type":"tick","n":i}` for i in F..F+N (F defaults to 1) to T (or publishes them to
//! subscribers when `to` is absent), sleeping M ms between two ticks (0 or absent: no sleep),
//! then replies `{"type":"done","count":N}` to the requester.
//! With `record_every` K > 0 it records what it sent, "send, then record that it was sent": it
//! appends `{"n":F-1}` to `/data/sent.jsonl` before the first tick, then `{"n":i}` after every
//! K-th tick and after the last, each line committed on its own (opened, written, closed).
//! Messages that arrive meanwhile wait until the ticks are sent.
//! Anything else → `{"type":"error","reason":..}`. Exits 0 on shutdown or EOF.

use proto::Outgoing;
use serde_json::json;
use std::fs::OpenOptions;
use std::io::Write;
use std::thread;
use std::time::Duration;

const SENT: &str = "/data/sent.jsonl";

fn main() {
    for msg in proto::messages() {
        if msg.kind() != "start" {
            proto::reply_error(
                &msg,
                &format!("unknown type {:?}; known: start", msg.kind()),
            );
            continue;
        }
        let Some(count) = msg.body["count"].as_u64() else {
            proto::reply_error(&msg, "start needs a number `count`");
            continue;
        };
        let interval = Duration::from_millis(msg.body["interval_ms"].as_u64().unwrap_or(0));
        let first = msg.body["first"].as_u64().unwrap_or(1);
        let record_every = msg.body["record_every"].as_u64().unwrap_or(0);
        let to = msg.body["to"].as_str();
        if record_every > 0 {
            record(first - 1);
        }
        for n in first..first + count {
            if n > first && !interval.is_zero() {
                thread::sleep(interval);
            }
            let tick = json!({"type": "tick", "n": n});
            proto::send(match to {
                Some(to) => Outgoing::to(to, tick),
                None => Outgoing::publish(tick),
            });
            let sent = n - first + 1;
            if record_every > 0 && (sent % record_every == 0 || sent == count) {
                record(n);
            }
        }
        proto::reply(&msg, json!({"type": "done", "count": count}));
    }
}

/// Appends `{"n":n}` to [`SENT`]; the file commits when it closes at the end.
fn record(n: u64) {
    let appended = OpenOptions::new()
        .append(true)
        .create(true)
        .open(SENT)
        .and_then(|mut file| writeln!(file, "{}", json!({"n": n})));
    if let Err(e) = appended {
        eprintln!("{SENT}: cannot record tick {n}: {e}");
    }
}
