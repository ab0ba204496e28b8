//! The command line's ways of seeing inside (DESIGN §22): `sausage --version` with the commit,
//! and `sausage logs ACTOR [-f]`, on worlds whose logs the test writes itself; and how every
//! command names its world (DESIGN §27), its words and exit codes when there is none.

mod support;

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::*;

fn sausage(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sausage"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let out = sausage(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo())
        .output()
        .unwrap();
    let head = String::from_utf8(head.stdout).unwrap();
    assert!(
        text.starts_with(&format!("sausage 0.1.0 (commit {}", head.trim())),
        "{text}"
    );
}

#[test]
fn logs_prints_the_rotated_log_then_the_current_one_and_says_what_is_wrong() {
    let world = TestWorld::new();
    world.install("x", "echo");
    std::fs::write(world.path("actor/x/stderr.log.1"), "older\n").unwrap();
    std::fs::write(world.path("actor/x/stderr.log"), "newer\n").unwrap();
    let root = world.root.to_str().unwrap();
    let out = sausage(&["logs", "x", "--world", root]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "older\nnewer\n");

    for (args, says) in [
        (vec!["logs", "nobody", "--world", root], "no actor `nobody`"),
        (vec!["logs", "Bad Id", "--world", root], "`Bad Id`"),
        (
            vec!["logs", "x", "--world", "/nonexistent/w"],
            "/nonexistent/w: no world here",
        ),
    ] {
        let out = sausage(&args);
        assert!(!out.status.success(), "{args:?}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let out = sausage(&["logs", "nobody", "--world", root]);
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("its actors: x"),
        "the error lists the actors"
    );

    std::fs::remove_file(world.path("actor/x/stderr.log.1")).unwrap();
    std::fs::write(world.path("actor/x/stderr.log"), "").unwrap();
    let out = sausage(&["logs", "x", "--world", root]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout.is_empty(),
        "stdout carries only the log: {out:?}"
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("x has written nothing to its log") && err.contains("stderr.log"),
        "an empty log says so: {err}"
    );
}

#[test]
fn status_of_a_stopped_world_says_stopped() {
    let world = TestWorld::new();
    world.install("x", "echo");
    let root = world.root.to_str().unwrap();
    let out = sausage(&["status", "--world", root]);
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("is not running"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["x", "stopped"])),
        "{table}"
    );
}

#[test]
fn logs_follow_goes_on_across_a_rotation() {
    let world = TestWorld::new();
    world.install("x", "echo");
    let log = world.path("actor/x/stderr.log");
    std::fs::write(&log, "one\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sausage"))
        .args(["logs", "x", "-f", "--world", world.root.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (sent, printed) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(n @ 1..) = stdout.read(&mut buffer) {
            if sent.send(buffer[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    let mut text = String::new();
    let mut until = |needle: &str| {
        let deadline = Instant::now() + PATIENCE;
        while !text.contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk = printed
                .recv_timeout(left.max(Duration::from_millis(1)))
                .unwrap_or_else(|_| panic!("`{needle}` never came; printed: {text:?}"));
            text.push_str(&String::from_utf8(chunk).unwrap());
        }
        text.clone()
    };
    until("one\n");
    let append = |line: &str| {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        file.write_all(line.as_bytes()).unwrap();
    };
    append("two\n");
    until("two\n");
    // The host's rotation: stderr.log becomes stderr.log.1 and a new one starts.
    append("three\n");
    std::fs::rename(&log, world.path("actor/x/stderr.log.1")).unwrap();
    std::fs::write(&log, "four\n").unwrap();
    let all = until("four\n");
    assert_eq!(all, "one\ntwo\nthree\nfour\n", "nothing lost or twice");
    child.kill().unwrap();
    let _ = child.wait();
}

/// `sausage ARGS` run in `cwd`, with nothing on stdin: exit code, stdout, stderr.
fn sausage_in(cwd: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sausage"))
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_command_names_its_world_by_folder_or_flag() {
    let world = TestWorld::new();
    world.install("x", "echo");
    std::fs::write(world.path("actor/x/stderr.log"), "hello\n").unwrap();
    let root = world.root.to_str().unwrap();
    let cwd = world.root.parent().unwrap();
    for args in [
        vec!["status", root],
        vec!["status", "--world", root],
        vec!["logs", "x", root],
        vec!["logs", "x", "--world", root],
        vec!["people", "add", "ann", "--tier", "member", root],
        vec!["people", "list", root],
        vec!["people", "list", "--world", root],
        vec!["people", "tier", "ann", "guest", root],
        vec!["people", "matrix", "ann", "@ann:localhost", root],
        // A folder in the user id's place names the world: it cannot start with `@`.
        vec!["people", "matrix", "ann", root],
        vec!["people", "link", "ann", root],
        vec!["metrics", "token", root],
        vec!["metrics", "token", "--world", root],
        // The same folder twice is one world.
        vec!["status", root, "--world", root],
        // No folder is `./world`.
        vec!["status"],
    ] {
        let (code, out, err) = sausage_in(cwd, &args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
    }
    let people = world.json("broker/people.json");
    let ann = people["people"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "ann")
        .unwrap();
    assert_eq!(ann["tier"], "guest");
    assert!(
        ann.get("handles").is_none_or(|h| h.get("matrix").is_none()),
        "cleared: {ann}"
    );
    // `mcp` finds the world and says it does not run, either way.
    for args in [vec!["mcp", root], vec!["mcp", "--world", root]] {
        let (code, _, err) = sausage_in(cwd, &args);
        assert_eq!(code, 1, "{args:?}");
        assert!(err.contains("is not running"), "{args:?}: {err}");
    }
    let (code, _, err) = sausage_in(cwd, &["status", root, "--world", "/elsewhere"]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!(
            "two worlds named: {root} and --world /elsewhere; name one"
        )),
        "{err}"
    );
}

#[test]
fn a_missing_world_names_the_folder_it_looked_at_and_how_to_name_another() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let looked_at = cwd.join("world");
    for (args, usage) in [
        (vec!["status"], "status"),
        (vec!["logs", "x"], "logs ACTOR"),
        (vec!["people", "list"], "people list"),
        (
            vec!["people", "add", "ann", "--tier", "member"],
            "people add ID --tier TIER",
        ),
        (vec!["metrics", "token"], "metrics token"),
        (vec!["mcp"], "mcp"),
        (
            vec![
                "mcp-server",
                "add",
                "t",
                "http://127.0.0.1:9/mcp",
                "--tool",
                "a=owner",
            ],
            "mcp-server add NAME URL --tool TOOL=TIERS",
        ),
        (vec!["run"], "run"),
    ] {
        let (code, out, err) = sausage_in(cwd, &args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(
            err.contains(&format!(
                "sausage: {}: no world here (no sausage.json); name the world's folder: \
                 `sausage {usage} DIR` or `sausage {usage} --world DIR`",
                looked_at.display()
            )),
            "{args:?}: {err}"
        );
        // Only `run` may mean a world to be made; the others name an existing one.
        assert_eq!(
            err.contains("sausage init"),
            args[0] == "run",
            "{args:?}: {err}"
        );
    }
    let (code, _, err) = sausage_in(cwd, &["people", "list", "elsewhere"]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!(
            "{}: no world here",
            cwd.join("elsewhere").display()
        )),
        "{err}"
    );
    assert!(
        !cwd.join("world").exists() && !cwd.join("elsewhere").exists(),
        "nothing made"
    );
}
