//! `echo` replies to every message with its body, unchanged, except one:
//! `{"type":"env"}` → `{"type":"env","actor":..,"version":..,"candidate":..}`, the values of
//! `SAUSAGE_ACTOR`, `SAUSAGE_VERSION` and `SAUSAGE_CANDIDATE` exactly as the instance sees them
//! (strings, `null` when unset). Exits 0 on `{"type":"shutdown"}` or at EOF.

use serde_json::json;
use std::env;

fn main() {
    for msg in proto::messages() {
        let body = if msg.kind() == "env" {
            json!({
                "type": "env",
                "actor": env::var("SAUSAGE_ACTOR").ok(),
                "version": env::var("SAUSAGE_VERSION").ok(),
                "candidate": env::var("SAUSAGE_CANDIDATE").ok(),
            })
        } else {
            msg.body.clone()
        };
        proto::reply(&msg, body);
    }
}
