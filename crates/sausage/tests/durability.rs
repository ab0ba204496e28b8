//! What an actor commits with fsync survives a hard kill of the host (DESIGN §2): an embedded
//! database (redb, in the `kvstore` test actor) and a plain file, both kept open and never
//! closed, so nothing but the syncs can have committed them.

mod support;

use serde_json::{Value, json};
use support::*;

/// Puts `key` and waits until the actor answers that the transaction is committed.
fn put(host: &mut Host, key: &str, value: &str) {
    host.tell("kv", json!({"type": "put", "key": key, "value": value}));
    let stored = host.wait_type("kv", "stored");
    assert_eq!(stored["key"], key);
}

fn get(host: &mut Host, key: &str) -> Value {
    host.tell("kv", json!({"type": "get", "key": key}));
    let answer = host.wait_type("kv", "value");
    assert_eq!(answer["key"], key);
    answer["value"].clone()
}

/// Appends `line` and waits until the actor answers that it is synced.
fn append(host: &mut Host, line: &str) {
    host.tell("kv", json!({"type": "append", "line": line}));
    host.wait_type("kv", "appended");
}

fn lines(host: &mut Host) -> Value {
    host.tell("kv", json!({"type": "lines"}));
    host.wait_type("kv", "lines")["lines"].clone()
}

#[test]
fn a_database_keeps_every_committed_transaction_across_host_kills() {
    let world = TestWorld::new();
    world.install("kv", "kvstore");
    let mut host = world.run();
    put(&mut host, "colour", "blue");
    put(&mut host, "shape", "round");
    put(&mut host, "colour", "green");
    host.kill();

    let mut host = world.run();
    assert_eq!(get(&mut host, "colour"), "green");
    assert_eq!(get(&mut host, "shape"), "round");
    assert_eq!(get(&mut host, "size"), Value::Null);
    // The reopened database goes on committing, and a second kill keeps that too.
    put(&mut host, "size", "small");
    host.kill();

    let mut host = world.run();
    assert_eq!(get(&mut host, "size"), "small");
    assert_eq!(get(&mut host, "colour"), "green");
    host.quit();
}

#[test]
fn a_synced_line_of_a_file_kept_open_survives_a_host_kill() {
    let world = TestWorld::new();
    world.install("kv", "kvstore");
    let mut host = world.run();
    append(&mut host, "first");
    append(&mut host, "second");
    host.kill();
    assert_eq!(world.read("private/kv/data/log.txt"), "first\nsecond\n");

    let mut host = world.run();
    assert_eq!(lines(&mut host), json!(["first", "second"]));
    append(&mut host, "third");
    host.kill();

    let mut host = world.run();
    assert_eq!(lines(&mut host), json!(["first", "second", "third"]));
    host.quit();
}
