//! Host notes on stderr (DESIGN §19): by default each is the line `sausage: <message>` as it
//! always was, `SAUSAGE_LOG` chooses which print, and a value it cannot read stops the host
//! before it starts, saying what to write.

mod support;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use support::*;

/// What `sausage run WORLD --no-web` did with `script` on stdin and these variables added:
/// its exit status, stdout and stderr, each read to its end.
fn run_script(world: &Path, vars: &[(&str, &str)], script: &str) -> (ExitStatus, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sausage"))
        .args(["run", world.to_str().unwrap(), "--no-web"])
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let read_all = |mut from: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            from.read_to_string(&mut text).unwrap();
            text
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().unwrap()));
    let stderr = read_all(Box::new(child.stderr.take().unwrap()));
    // Dropping stdin ends the script once the console has read it. A host that stopped at
    // start reads none of it: the write may then fail, and the status says why.
    let _ = child.stdin.take().unwrap().write_all(script.as_bytes());
    let status = wait_exit(&mut child);
    (status, stdout.join().unwrap(), stderr.join().unwrap())
}

const PING: &str = "@echo hello\n/await echo 20\n";

#[test]
fn a_note_prints_as_its_plain_line_and_sausage_log_warn_hides_the_info_ones() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let running = format!(
        "sausage: world `{}` is running; type /help for commands",
        world.root.display()
    );

    let (status, stdout, stderr) = run_script(&world.root, &[], PING);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("[echo] (reply) hello"), "{stdout}");
    // The whole line: no time, level, target or colour around the message.
    assert!(stderr.lines().any(|l| l == running), "{stderr}");
    assert!(
        stderr.lines().any(|l| l == "sausage: stopping every actor"),
        "{stderr}"
    );

    let (status, stdout, stderr) = run_script(&world.root, &[("SAUSAGE_LOG", "warn")], PING);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("[echo] (reply) hello"), "{stdout}");
    assert!(
        !stderr.contains("is running") && !stderr.contains("stopping every actor"),
        "{stderr}"
    );
}

#[test]
fn a_sausage_log_that_is_not_a_filter_stops_the_host_saying_what_to_write() {
    let world = TestWorld::new();
    let (status, stdout, stderr) = run_script(&world.root, &[("SAUSAGE_LOG", "loud")], PING);
    assert!(!status.success());
    assert_eq!(
        stderr,
        "sausage: SAUSAGE_LOG=loud: `loud` is not a level; write a level (off, error, warn, \
         info, debug or trace), optionally followed by targets with their own, such as \
         SAUSAGE_LOG=warn or SAUSAGE_LOG=info,sausage_cluster=debug\n"
    );
    assert!(stdout.is_empty(), "the world did not start: {stdout}");
}
