//! A burst into an actor that has not read its stdin for longer than the stdin stall limit loses
//! nothing (DESIGN §11): the limit counts from the moment a message is offered, never from an
//! earlier read. The limit is shortened through the host's test knob so the idle time is seconds.

mod support;

use std::time::Duration;

use serde_json::json;
use support::{Host, TestWorld};

/// Messages in the burst, and the padding of each: about 2 MB, thirty times a pipe's worth.
const BURST: u64 = 2000;
const PAD: u64 = 1000;

/// A world with two `pingpong`s, `source` (floods) and `sink` (counts, checking the order), run
/// with the stdin stall limit shortened to `stall`.
fn start(stall: Duration) -> (TestWorld, Host) {
    let world = TestWorld::new();
    world.install("source", "pingpong");
    world.install("sink", "pingpong");
    let ms = stall.as_millis().to_string();
    let host = Host::start_with_env(&world.root, &[("SAUSAGE_TEST_STDIN_STALL_MS", &ms)]);
    (world, host)
}

/// Floods `sink` from `source` and checks that every message arrived, in order.
fn burst_arrives_whole(world: &TestWorld, host: &mut Host) {
    host.tell(
        "source",
        json!({"type": "flood", "to": "sink", "count": BURST, "pad": PAD}),
    );
    host.wait_type("source", "flooded");
    host.tell("sink", json!({"type": "report"}));
    let report = host.wait_type("sink", "report");
    assert_eq!(
        report,
        json!({"type": "report", "received": BURST, "in_order": true, "last": BURST}),
        "sink's log:\n{}",
        world.log("sink")
    );
    assert!(
        !world.log("sink").contains("dropped"),
        "{}",
        world.log("sink")
    );
}

/// The case of DESIGN §11 as a person meets it. Counting from the last read would lose a message
/// here only when a check falls between the burst and the sink's first read (milliseconds), so
/// the next test is the one that catches that mistake every time.
#[test]
fn a_burst_into_an_actor_idle_past_the_stall_limit_arrives_whole_and_in_order() {
    let stall = Duration::from_millis(500);
    let (world, mut host) = start(stall);
    host.tell("sink", json!({"type": "ping", "n": 1}));
    host.wait_type("sink", "pong");
    // The scenario itself, not a wait for something: the sink reads nothing for longer than the
    // stall limit plus the supervisor's one-second check, waiting on its stdin.
    std::thread::sleep(stall * 2 + Duration::from_secs(1));
    burst_arrives_whole(&world, &mut host);
}

#[test]
fn a_burst_into_a_busy_actor_counts_from_the_offer_not_from_its_last_read() {
    // The sink reads its last message at 0 and sleeps until 5.5 s; the burst comes at 3.5 s.
    // From its last read, the first message beyond the pipe waits past the 3 s limit at every
    // check between 3.5 s and 5.5 s (the supervisor checks every second); from the offer, it
    // waits 2 s, within the limit.
    let (world, mut host) = start(Duration::from_secs(3));
    host.tell("sink", json!({"type": "sleep", "ms": 5500}));
    host.wait_type("sink", "sleeping");
    // The scenario again: the burst must come after the limit has passed since the last read.
    std::thread::sleep(Duration::from_millis(3500));
    burst_arrives_whole(&world, &mut host);
}

#[test]
fn a_message_left_unread_past_the_limit_is_dropped_with_a_note_naming_the_limit() {
    let (world, mut host) = start(Duration::from_secs(1));
    host.tell("sink", json!({"type": "sleep", "ms": 4000}));
    host.wait_type("sink", "sleeping");
    host.tell(
        "source",
        json!({"type": "flood", "to": "sink", "count": BURST, "pad": PAD}),
    );
    support::eventually("the note of a dropped message", || {
        world
            .log("sink")
            .contains("dropped: stdin was not read for 1 s after it was offered")
    });
}
