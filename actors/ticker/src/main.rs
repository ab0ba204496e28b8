//! `ticker` sends numbered ticks on request.
//! `{"type":"start","to":T,"count":N,"interval_ms":M}` sends `{"type":"tick","n":i}` for i in
//! 1..=N to T (or publishes them to subscribers when `to` is absent), sleeping M ms between two
//! ticks (0 or absent: no sleep), then replies `{"type":"done","count":N}` to the requester.
//! Messages that arrive meanwhile wait until the ticks are sent.
//! Anything else → `{"type":"error","reason":..}`. Exits 0 on shutdown or EOF.

use proto::Outgoing;
use serde_json::json;
use std::thread;
use std::time::Duration;

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
        let to = msg.body["to"].as_str();
        for n in 1..=count {
            if n > 1 && !interval.is_zero() {
                thread::sleep(interval);
            }
            let tick = json!({"type": "tick", "n": n});
            proto::send(match to {
                Some(to) => Outgoing::to(to, tick),
                None => Outgoing::publish(tick),
            });
        }
        proto::reply(&msg, json!({"type": "done", "count": count}));
    }
}
