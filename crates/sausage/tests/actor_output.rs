//! What an actor writes, as the host takes it: a numeric outgoing id (DESIGN §1) and a stderr
//! flood that rotates `stderr.log` (DESIGN §11).

mod support;

use serde_json::json;
use support::{TestWorld, eventually};

#[test]
fn a_numeric_id_is_taken_as_its_decimal_string() {
    let world = TestWorld::new();
    world.install("crasher", "crasher");
    world.install("echo", "echo");
    let mut host = world.run();
    // echo sends the body back as a reply to `crasher/0`; crasher logs a reply it cannot use,
    // with the id it answers.
    host.tell(
        "crasher",
        json!({"type": "say", "line": r#"{"id": 0, "to": "echo", "body": {"type": "numbered"}}"#}),
    );
    eventually("echo's reply to crasher/0 in crasher's log", || {
        world.log("crasher").contains("to crasher/0 from echo")
    });
    // Numbers without one decimal spelling are refused, with a note saying what is allowed.
    for id in ["-1", "1.5"] {
        let line = format!(r#"{{"id": {id}, "to": "echo", "body": {{"type": "numbered"}}}}"#);
        host.tell("crasher", json!({"type": "say", "line": line}));
    }
    eventually("two notes about refused ids", || {
        world
            .log("crasher")
            .matches("a string or a non-negative integer")
            .count()
            == 2
    });
    host.tell("crasher", json!({"type": "ping"}));
    host.wait_type("crasher", "pong");
    assert_eq!(
        world.log("crasher").matches("from echo").count(),
        1,
        "{}",
        world.log("crasher")
    );
}

#[test]
fn a_stderr_flood_rotates_the_log_and_keeps_the_newest_lines() {
    const LIMIT: u64 = sausage_core::world::STDERR_LOG_LIMIT;
    let world = TestWorld::new();
    world.install("crasher", "crasher");
    let mut host = world.run();
    // About 2.4 times the limit, in lines of 1,000 bytes numbered from 1.
    let lines = 5 * LIMIT / 2 / 1000;
    host.tell(
        "crasher",
        json!({"type": "log", "lines": lines, "width": 1000}),
    );
    host.wait_type("crasher", "logged");
    // A host note goes to the same, rotated, log.
    host.tell("crasher", json!({"type": "say", "line": "not json"}));
    eventually("the note about the line that is not json", || {
        world
            .log("crasher")
            .contains("[sausage] stdout line not routed")
    });

    let log = world.log("crasher");
    let older = world.read("actor/crasher/stderr.log.1");
    assert!(
        log.len() as u64 <= LIMIT,
        "stderr.log is {} bytes",
        log.len()
    );
    assert!(
        older.len() as u64 <= LIMIT,
        "stderr.log.1 is {} bytes",
        older.len()
    );
    assert!(older.len() as u64 + log.len() as u64 >= LIMIT);
    // The two files are one stretch of the newest lines: the first may be cut (its head went
    // with the log before), the rest run on to the last line written, then the note.
    let joined = older + &log;
    let numbers: Vec<u64> = joined
        .lines()
        .skip(1)
        .filter_map(|line| line.strip_prefix("line "))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect();
    let first = numbers[0];
    assert_eq!(numbers, (first..=lines).collect::<Vec<_>>());
    assert!(
        log.trim_end().ends_with("not json"),
        "{}",
        &log[log.len() - 300..]
    );
    // Each rotation moved the older log aside and removed it on the blocking pool: nothing of
    // it stays in the actor's folder.
    let folder = world.path("actor/crasher");
    eventually("the older logs moved aside to be removed", || {
        std::fs::read_dir(&folder)
            .unwrap()
            .all(|entry| !sausage_core::fs::is_temporary_name(&entry.unwrap().file_name()))
    });
}
