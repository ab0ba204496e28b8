//! Nothing slow runs on the thread that routes messages (DESIGN §11): while one actor's open of
//! a big file for append is still copying it, another actor's messages come and go. Proved by
//! what is on disk, not by timing: the writer's temporary is incomplete both before a message
//! is sent and after its reply is printed.

mod support;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use support::TestWorld;

/// The appender's file: big enough that copying it takes many round trips through the console.
const BIG_FILE_MB: u64 = 64;

/// How long the test looks for a copy that a round trip fits in.
const DEADLINE: Duration = Duration::from_secs(60);

/// The writer's temporary in `dir` (named by the filesystem layer) and its size, if one is open.
fn temporary(dir: &Path) -> Option<(String, u64)> {
    std::fs::read_dir(dir).ok()?.find_map(|entry| {
        let entry = entry.ok()?;
        let name = entry.file_name().into_string().ok()?;
        let size = entry.metadata().ok()?.len();
        name.starts_with(".sausage-tmp-").then_some((name, size))
    })
}

#[test]
fn messages_flow_while_a_big_file_is_copied_for_append() {
    let world = TestWorld::new();
    world.install("appender", "pingpong");
    world.install("echo", "echo");
    let data = world.path("private/appender/data");
    let big_size = BIG_FILE_MB << 20;
    let mut big = std::fs::File::create(data.join("big")).unwrap();
    let chunk = vec![b'.'; 1 << 20];
    for _ in 0..BIG_FILE_MB {
        big.write_all(&chunk).unwrap();
    }
    drop(big);

    let mut host = world.run();
    host.tell(
        "appender",
        json!({"type": "append", "path": "/data/big", "ms": DEADLINE.as_millis() as u64}),
    );
    host.wait_type("appender", "appending");
    let started = Instant::now();
    let mut round_trips = 0;
    loop {
        assert!(
            started.elapsed() < DEADLINE,
            "no reply came while a copy was in progress ({round_trips} round trips tried)"
        );
        let Some((name, size)) = temporary(&data).filter(|(_, size)| *size < big_size) else {
            // Between two copies; the next starts at once.
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        round_trips += 1;
        host.tell("echo", json!({"type": "ping", "n": round_trips}));
        host.wait_for("the echo", |p| {
            p.from == "echo" && p.body["n"] == round_trips
        });
        let after = temporary(&data);
        if after.is_some_and(|(later, now)| later == name && now >= size && now < big_size) {
            break;
        }
    }
    host.quit();
}
