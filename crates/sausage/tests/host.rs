//! The host as a whole: the command line, the lock, stopping on signals and end of input, a
//! hard kill, the console's script commands, epoch interruption and denied sockets.

mod support;

use std::process::{Command, Stdio};

use serde_json::json;
use support::*;

fn sausage(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sausage"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn init_refuses_an_existing_world_and_run_refuses_a_missing_one() {
    let world = TestWorld::new();
    let root = world.root.to_str().unwrap();
    let again = sausage(&["init", root]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    let missing = sausage(&["run", &format!("{root}/nope")]);
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("no world here") && err.contains("sausage init"),
        "{err}"
    );
}

#[test]
fn one_run_per_world() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let mut host = world.run();
    host.tell("echo", json!({"type": "ping"}));
    host.wait_type("echo", "ping");
    let second = sausage(&["run", world.root.to_str().unwrap()]);
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains("another `sausage run`"), "{err}");
    assert!(host.quit().success());
}

#[test]
fn sigterm_and_ctrl_c_stop_every_actor_gracefully_and_the_next_run_starts_them() {
    for signal in ["TERM", "INT"] {
        let world = TestWorld::new();
        world.install("echo", "echo");
        world.install("notes", "notes");
        let mut host = world.run();
        host.tell("notes", json!({"type": "add", "text": "kept"}));
        host.wait_type("notes", "added");
        host.signal(signal);
        assert!(host.wait_exit().success(), "SIG{signal}");
        for id in ["echo", "notes"] {
            let status = world.status(id);
            assert_eq!(status["state"], "stopped", "{id} after SIG{signal}");
            assert_eq!(
                status["last_exit"], "exited cleanly",
                "{id}: shutdown, then EOF"
            );
            assert_eq!(world.json("sausage.json")["actors"][id]["running"], true);
        }
        let mut host = world.run();
        host.tell("notes", json!({"type": "count"}));
        assert_eq!(host.wait_type("notes", "count")["count"], 1);
        host.send("/quit");
        assert!(host.wait_exit().success());
    }
}

#[test]
fn a_hard_kill_loses_no_accepted_message_nor_committed_file_and_the_next_run_starts_everything() {
    let world = TestWorld::new();
    world.install("ticker", "ticker");
    world.install("notes", "notes");
    let mut host = world.run();
    // The ticker records its start in a file (and every 10,000th tick), so its start is
    // handled for good and does not come again after the kill (DESIGN §20).
    host.tell(
        "ticker",
        json!({"type": "start", "to": "notes", "count": 100000, "interval_ms": 0,
               "record_every": 10000}),
    );
    // The ticker is much faster than notes, which commits a file per tick: the mailbox of
    // notes is full when the kill comes.
    eventually("notes being written", || {
        std::fs::metadata(world.path("private/notes/data/notes.jsonl"))
            .is_ok_and(|m| m.len() > 2000)
    });
    host.kill();
    let before = notes(&world);
    assert!(!before.is_empty());
    assert_eq!(before, (1..=before.len() as u64).collect::<Vec<_>>());

    // Leftovers anywhere in the world, as a kill in the middle of a host write leaves them.
    std::fs::write(world.path(".sausage-tmp-registry"), "half").unwrap();
    std::fs::write(world.path("archive/.sausage-tmp-mailbox"), "half").unwrap();
    let mut host = world.run();
    // This count queues behind the ticks the journal kept, so its answer comes after them.
    host.tell("notes", json!({"type": "count"}));
    let count = host.wait_type("notes", "count")["count"].as_u64().unwrap() as usize;
    let after = notes(&world);
    assert_eq!(count, after.len());
    assert!(
        after.len() > before.len() + 100,
        "the ticks waiting in the mailbox arrived after the restart: {} before, {} after",
        before.len(),
        after.len()
    );
    // The tick notes had read when the host died comes again unless its commit happened
    // (DESIGN §20): nothing is missing, nothing comes twice or out of order.
    let last = *after.last().unwrap();
    let missing: Vec<u64> = (1..=last).filter(|n| !after.contains(n)).collect();
    assert!(after.is_sorted_by(|a, b| a < b), "in order, none twice");
    assert!(missing.is_empty(), "no tick lost to the kill: {missing:?}");
    let leftovers = hidden_files(&world.root);
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    host.tell("ticker", json!({"type": "ping"}));
    host.wait_type("ticker", "error");
}

#[test]
fn an_actor_whose_wasm_cannot_be_compiled_is_reported_broken_not_running() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    world.install("spoilt", "echo");
    std::fs::write(
        world.path("broker/versions/spoilt/1/actor.wasm"),
        "not wasm",
    )
    .unwrap();
    // As a host killed while it ran leaves it.
    std::fs::write(
        world.path("actor/spoilt/status.json"),
        r#"{"state":"running","version":1,"restarts":0,"last_exit":null,"parked":null,"previous_version":null}"#,
    )
    .unwrap();
    let mut host = world.run();
    host.tell("echo", json!({"type": "ping"}));
    host.wait_type("echo", "ping");
    let status = world.status("spoilt");
    assert_eq!(status["state"], "broken", "{status}");
    let why = status["last_exit"].as_str().unwrap();
    assert!(why.contains("cannot be compiled"), "{why}");
    assert!(host.stderr().contains("spoilt"), "{}", host.stderr());
}

#[test]
fn messages_waiting_for_a_stopped_actor_survive_a_hard_kill() {
    let world = TestWorld::new();
    world.install("ticker", "ticker");
    world.install("notes", "notes");
    let mut host = world.run();
    let stopped = host.request(json!({"type": "stop", "actor": "notes"}));
    assert_eq!(stopped["type"], "stopped", "{stopped}");
    host.tell(
        "ticker",
        json!({"type": "start", "to": "notes", "count": 300, "interval_ms": 0}),
    );
    // The ticker says `done` after its last tick, and the broker reads its lines in order: by
    // then every tick was accepted into the mailbox of notes.
    host.wait_type("ticker", "done");
    // The ticker's `start` settles only when it next waits for input (DESIGN §20): stopped, it
    // has settled, so the journal holds the 300 ticks and nothing of the ticker's.
    let stopped = host.request(json!({"type": "stop", "actor": "ticker"}));
    assert_eq!(stopped["type"], "stopped", "{stopped}");
    host.kill();

    let mut host = world.run();
    eventually("notes to stay stopped", || {
        world.status("notes")["state"] == "stopped"
    });
    host.wait_stderr("300 messages accepted before the last run ended are waiting (notes: 300)");
    let started = host.request(json!({"type": "start", "actor": "notes"}));
    assert_eq!(started["type"], "started", "{started}");
    host.tell("notes", json!({"type": "count"}));
    assert_eq!(host.wait_type("notes", "count")["count"], 300);
    assert_eq!(notes(&world), (1..=300).collect::<Vec<_>>());
    let journal = world.path("broker/mailboxes");
    assert!(journal.is_dir(), "the journal lives in broker/mailboxes");
}

/// The tick numbers notes has committed, checking that every line is whole.
fn notes(world: &TestWorld) -> Vec<u64> {
    let text = world.read("private/notes/data/notes.jsonl");
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the last line is whole"
    );
    text.lines()
        .map(|line| {
            let note: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a line is not whole: {line:?}: {e}"));
            note["n"].as_u64().expect("a tick")
        })
        .collect()
}

/// Every file whose name marks it as a commit-on-close temporary.
fn hidden_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                dirs.push(path);
            } else if sausage_core::fs::is_temporary_name(&entry.file_name()) {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn a_script_on_stdin_runs_and_a_failed_await_fails_the_run() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let script = "/help\n@echo hello\n/await echo 20\n/sleep 0.1\n/frob\n@Bad x\n/list\n/await broker 20\n/await echo 0.3\n@echo never\n";
    let out = sausage_with_input(&["run", world.root.to_str().unwrap(), "--no-web"], script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a failed /await fails the run");
    assert!(
        stdout.contains("/await <actor> <seconds>"),
        "help: {stdout}"
    );
    assert!(stdout.contains("[echo] (reply) hello"), "{stdout}");
    assert!(
        stdout.contains(r#"[broker] (reply) {"actors":"#),
        "{stdout}"
    );
    assert!(
        !stdout.contains("never"),
        "the script stops at the failed /await: {stdout}"
    );
    assert!(stderr.contains("unknown command `/frob`"), "{stderr}");
    assert!(stderr.contains("@Bad"), "{stderr}");
    assert!(
        stderr.contains("/await echo: no message within 0.3 s"),
        "{stderr}"
    );
}

#[test]
fn a_busy_actor_does_not_starve_the_others() {
    let world = TestWorld::new();
    world.install("spinner", "fsprobe");
    world.install("echo", "echo");
    let mut host = world.run();
    host.tell("spinner", json!({"type": "spin"}));
    host.tell("spinner", json!({"type": "spin"}));
    eventually("the spinner to run", || {
        std::fs::read_to_string(world.path("actor/spinner/status.json"))
            .is_ok_and(|s| s.contains(r#""state": "running""#))
    });
    for n in 0..20 {
        host.tell("echo", json!({"type": "n", "n": n}));
        assert_eq!(host.wait_type("echo", "n")["n"], n);
    }
    // The spinner never reads its shutdown: the host kills it after the grace period.
    let stopped = host.request(json!({"type": "stop", "actor": "spinner"}));
    assert_eq!(stopped["exit"], "killed");
}

#[test]
fn raw_sockets_are_denied() {
    let world = TestWorld::new();
    world.install("crasher", "crasher");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut host = world.run();
    host.tell("crasher", json!({"type": "connect", "addr": addr}));
    let reply = host.wait_type("crasher", "connect");
    assert_eq!(reply["ok"], false, "{reply}");
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "nothing connected");
}

/// A local HTTP server that answers one request with `howdy` and returns the request line.
fn serve_once(server: std::net::TcpListener) -> std::thread::JoinHandle<String> {
    use std::io::{BufRead, BufReader, Write};
    std::thread::spawn(move || {
        let (stream, _) = server.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut request = String::new();
        reader.read_line(&mut request).unwrap();
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap() > 2 {
            line.clear();
        }
        let mut stream = stream;
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-test: yes\r\nconnection: close\r\n\r\nhowdy")
            .unwrap();
        request
    })
}

#[test]
fn actors_reach_http_servers_through_wasi_http() {
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap().to_string();
    let url = format!("http://{addr}/hello");
    let serving = serve_once(server);
    let world = TestWorld::new();
    world.install("fetcher", "fetcher");
    world.allow_network("fetcher", &["example.com", &addr]);
    let mut host = world.run();
    host.tell("fetcher", json!({"type": "get", "url": url}));
    let response = host.wait_type("fetcher", "response");
    assert_eq!(response["status"], 200, "{response}");
    assert_eq!(response["body"], "howdy");
    assert_eq!(response["headers"]["x-test"], "yes");
    assert_eq!(serving.join().unwrap().trim(), "GET /hello HTTP/1.1");
}

#[test]
fn a_host_missing_from_the_manifest_is_denied_at_once_and_the_log_says_how_to_allow_it() {
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    server.set_nonblocking(true).unwrap();
    let addr = server.local_addr().unwrap().to_string();
    let world = TestWorld::new();
    world.install("fetcher", "fetcher");
    world.install("other", "fetcher");
    world.allow_network("other", &["127.0.0.1:1"]);
    let mut host = world.run();
    for id in ["fetcher", "other"] {
        host.tell(id, json!({"type": "get", "url": format!("http://{addr}/")}));
        let error = host.wait_type(id, "http_error");
        assert!(
            error["error"]
                .as_str()
                .unwrap()
                .contains("HttpRequestDenied"),
            "{id}: {error}"
        );
        let note = format!(
            "[sausage] request to {addr} denied: add \"{addr}\" to \"network\" in the actor's \
             source actor.json"
        );
        eventually("the note about the denied host", || {
            world.log(id).contains(&note)
        });
    }
    assert!(
        server.accept().is_err(),
        "a denied request never reaches the server"
    );
}

#[test]
fn candidates_have_no_network_and_an_upgrades_manifest_applies() {
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap().to_string();
    let url = format!("http://{addr}/hello");
    let world = TestWorld::new();
    world.install("fetcher", "fetcher");
    let source = world.path("fetcher-next");
    std::fs::create_dir_all(source.join("tests")).unwrap();
    std::fs::write(
        source.join("actor.json"),
        json!({ "network": [addr] }).to_string(),
    )
    .unwrap();
    std::fs::write(
        source.join("tests/offline.jsonl"),
        format!(
            "{}\n{}\n",
            json!({"send": {"type": "get", "url": url}}),
            json!({"expect": {"type": "http_error", "error": "ErrorCode::HttpRequestDenied"}, "to": "test"})
        ),
    )
    .unwrap();
    let mut host = world.run();
    let upgraded = host.request(json!({
        "type": "upgrade", "actor": "fetcher",
        "wasm": wasm("fetcher"), "source": source,
    }));
    assert_eq!(upgraded["type"], "upgraded", "{upgraded}");
    let serving = serve_once(server);
    host.tell("fetcher", json!({"type": "get", "url": url}));
    let response = host.wait_type("fetcher", "response");
    assert_eq!(
        response["body"], "howdy",
        "the new source's manifest applies"
    );
    assert_eq!(serving.join().unwrap().trim(), "GET /hello HTTP/1.1");
}

#[test]
fn compiled_components_are_cached_across_runs() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    world.install("notes", "notes");
    let mut host = world.run();
    host.tell("echo", json!({"type": "ping"}));
    host.wait_type("echo", "ping");
    assert!(host.quit().success());
    let entries = || -> Vec<(std::path::PathBuf, std::time::SystemTime)> {
        let mut found: Vec<_> = std::fs::read_dir(world.path("broker/cache"))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path(), e.metadata().unwrap().modified().unwrap())
            })
            .collect();
        found.sort();
        found
    };
    let first = entries();
    assert_eq!(first.len(), 2, "one entry per distinct component");
    let mut host = world.run();
    host.tell("echo", json!({"type": "ping"}));
    host.wait_type("echo", "ping");
    assert!(host.quit().success());
    assert_eq!(entries(), first, "the second run compiled nothing");
}
