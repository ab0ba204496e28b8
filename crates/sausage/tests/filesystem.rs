//! The filesystem of an actor (DESIGN §2) through real guests: `fsprobe` instances run file
//! commands and answer what they saw, while the files are checked on disk. Commit on close,
//! truncation or a copy of the old content, exit versus trap, kill and host crash, directory
//! operations at once, invisible temporaries, mounts that cannot be left, and `/actor` as the
//! registry.
//!
//! While a host runs it may be replacing its own files (`status.json`, through a temporary), so
//! running checks look for temporaries in the actors' mounts only; the whole world is searched
//! once the host has quit or was killed.

mod support;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use support::*;

/// Sends one fsprobe command to `actor` and returns its answer: `ok` or `fs_error`.
fn probe(host: &mut Host, actor: &str, command: Value) -> Value {
    host.tell(actor, command.clone());
    let answer = host
        .wait_for(&format!("{actor}'s answer to {command}"), |m| {
            m.from == actor
                && ["ok", "fs_error", "error"].contains(&m.body["type"].as_str().unwrap_or(""))
        })
        .body;
    assert_ne!(
        answer["type"], "error",
        "fsprobe did not understand {command}: {answer}"
    );
    answer
}

/// [`probe`] for a command that must succeed.
fn ok(host: &mut Host, actor: &str, command: Value) -> Value {
    let answer = probe(host, actor, command.clone());
    assert_eq!(answer["type"], "ok", "{actor}: {command} → {answer}");
    answer
}

/// [`probe`] for a command that must fail with the guest's `io::ErrorKind` `kind`.
fn fails(host: &mut Host, actor: &str, command: Value, kind: &str) {
    let answer = probe(host, actor, command.clone());
    assert_eq!(answer["type"], "fs_error", "{actor}: {command} → {answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("{kind}:")),
        "{actor}: {command} → {error}, not {kind}"
    );
}

/// The text a guest reads at `path`.
fn read(host: &mut Host, actor: &str, path: &str) -> String {
    ok(host, actor, json!({"type": "read", "path": path}))["text"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The sorted names a guest lists at `path`.
fn list(host: &mut Host, actor: &str, path: &str) -> Value {
    ok(host, actor, json!({"type": "list", "path": path}))["names"].clone()
}

fn exists(host: &mut Host, actor: &str, path: &str) -> bool {
    ok(host, actor, json!({"type": "exists", "path": path}))["exists"]
        .as_bool()
        .unwrap()
}

/// Every temporary file under `dir` of `world`, at any depth.
fn temporaries(world: &TestWorld, dir: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![world.path(dir)];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                folders.push(entry.path());
            } else if sausage_core::fs::is_temporary_name(&entry.file_name()) {
                found.push(entry.path());
            }
        }
    }
    found
}

/// The temporaries in the mounts `/data` and `/public` of `actor`.
fn temporaries_of(world: &TestWorld, actor: &str) -> Vec<PathBuf> {
    let mut found = temporaries(world, &format!("private/{actor}/data"));
    found.extend(temporaries(world, &format!("actor/{actor}/public")));
    found
}

/// Ends the host and checks that no temporary is left anywhere in the world.
fn quit_and_check_no_temporary(world: &TestWorld, host: Host) {
    assert!(host.quit().success());
    assert_eq!(temporaries(world, ""), Vec::<PathBuf>::new());
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_str().unwrap().to_string()
}

#[test]
fn a_write_is_invisible_until_close_to_others_the_host_and_the_writers_other_descriptors() {
    let world = TestWorld::new();
    world.install("a", "fsprobe");
    world.install("b", "fsprobe");
    let mut host = world.run();
    let h = &mut host;
    ok(
        h,
        "a",
        json!({"type": "write_file", "path": "/public/x", "text": "old"}),
    );

    ok(
        h,
        "a",
        json!({"type": "open", "handle": "w", "path": "/public/x", "mode": "write"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "w", "text": "new"}),
    );
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "n", "path": "/public/fresh", "mode": "write"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "n", "text": "fresh"}),
    );
    assert_eq!(read(h, "b", "/actor/a/public/x"), "old", "another actor");
    assert_eq!(world.read("actor/a/public/x"), "old", "the host's view");
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "r", "path": "/public/x", "mode": "read"}),
    );
    let own = ok(h, "a", json!({"type": "read_handle", "handle": "r"}));
    assert_eq!(own["text"], "old", "the writer's own second descriptor");
    assert_eq!(read(h, "a", "/public/x"), "old", "the writer, by path");
    assert!(
        !exists(h, "b", "/actor/a/public/fresh"),
        "a new file appears only at its commit"
    );
    assert!(!exists(h, "a", "/public/fresh"));
    assert!(!world.path("actor/a/public/fresh").exists());

    ok(h, "a", json!({"type": "close", "handle": "w"}));
    ok(h, "a", json!({"type": "close", "handle": "n"}));
    assert_eq!(read(h, "b", "/actor/a/public/x"), "new");
    assert_eq!(world.read("actor/a/public/x"), "new");
    assert_eq!(read(h, "a", "/public/x"), "new");
    // A descriptor opened before the commit keeps the file it opened, as after any rename into
    // place (`fs::File::open_read`); a descriptor opened after the close sees the commit.
    let before = ok(h, "a", json!({"type": "read_handle", "handle": "r"}));
    assert_eq!(
        before["text"], "old",
        "a descriptor opened before the close"
    );
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "r", "path": "/public/x", "mode": "read"}),
    );
    let after = ok(h, "a", json!({"type": "read_handle", "handle": "r"}));
    assert_eq!(after["text"], "new", "a descriptor opened after the close");
    assert_eq!(read(h, "b", "/actor/a/public/fresh"), "fresh");
    assert_eq!(world.read("actor/a/public/fresh"), "fresh");
    quit_and_check_no_temporary(&world, host);
}

#[test]
fn write_truncates_while_append_and_edit_start_from_a_copy_of_the_old_content() {
    let world = TestWorld::new();
    world.install("a", "fsprobe");
    let mut host = world.run();
    let h = &mut host;
    let on_disk = "private/a/data/f";
    ok(
        h,
        "a",
        json!({"type": "write_file", "path": "/data/f", "text": "0123456789"}),
    );

    ok(
        h,
        "a",
        json!({"type": "open", "handle": "h", "path": "/data/f", "mode": "write"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "h", "text": "ab"}),
    );
    assert_eq!(
        world.read(on_disk),
        "0123456789",
        "no truncation before the close"
    );
    ok(h, "a", json!({"type": "close", "handle": "h"}));
    assert_eq!(world.read(on_disk), "ab", "write mode starts empty");

    ok(
        h,
        "a",
        json!({"type": "open", "handle": "h", "path": "/data/f", "mode": "append"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "h", "text": "cd"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "h", "text": "ef"}),
    );
    assert_eq!(world.read(on_disk), "ab");
    ok(h, "a", json!({"type": "close", "handle": "h"}));
    assert_eq!(
        world.read(on_disk),
        "abcdef",
        "append starts from the old content"
    );

    ok(
        h,
        "a",
        json!({"type": "write_file", "path": "/data/f", "text": "0123456789"}),
    );
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "h", "path": "/data/f", "mode": "edit"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "h", "text": "XY"}),
    );
    assert_eq!(world.read(on_disk), "0123456789");
    ok(h, "a", json!({"type": "close", "handle": "h"}));
    assert_eq!(
        world.read(on_disk),
        "XY23456789",
        "edit writes over a copy at position 0 and keeps the tail"
    );

    ok(
        h,
        "a",
        json!({"type": "open", "handle": "h", "path": "/data/new", "mode": "edit"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "h", "text": "made"}),
    );
    assert!(!world.path("private/a/data/new").exists());
    ok(h, "a", json!({"type": "close", "handle": "h"}));
    assert_eq!(
        world.read("private/a/data/new"),
        "made",
        "edit creates a missing file"
    );
    quit_and_check_no_temporary(&world, host);
}

#[test]
fn a_normal_exit_commits_every_file_still_open() {
    let world = TestWorld::new();
    world.install("a", "fsprobe");
    let mut host = world.run();
    let h = &mut host;
    ok(
        h,
        "a",
        json!({"type": "write_file", "path": "/public/log", "text": "line 1\n"}),
    );
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "d", "path": "/data/state", "mode": "write"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "d", "text": "saved by exit"}),
    );
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "p", "path": "/public/log", "mode": "append"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "p", "text": "line 2\n"}),
    );
    assert!(!world.path("private/a/data/state").exists());
    // `exit` has no answer: the instance ends at once, the supervisor starts a new one and that
    // one answers the next command.
    h.tell("a", json!({"type": "exit", "code": 0}));
    assert_eq!(read(h, "a", "/data/state"), "saved by exit");
    assert_eq!(read(h, "a", "/public/log"), "line 1\nline 2\n");
    assert_eq!(world.read("private/a/data/state"), "saved by exit");
    assert_eq!(world.status("a")["last_exit"], "exited cleanly");
    assert!(world.log("a").contains("2 handle(s) left open"));

    // An exit with an error code is still a process exit, which closes files.
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "d", "path": "/data/state", "mode": "edit"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "d", "text": "SAVED"}),
    );
    h.tell("a", json!({"type": "exit", "code": 3}));
    assert_eq!(read(h, "a", "/data/state"), "SAVED by exit");
    // WASI 0.2's `exit` carries only success or failure: any other code arrives as 1.
    let status = world.status("a");
    assert_eq!(status["last_exit"], "exited with code 1", "{status}");
    quit_and_check_no_temporary(&world, host);
}

#[test]
fn a_trap_discards_uncommitted_writes_and_leaves_the_old_file_whole() {
    let world = TestWorld::new();
    world.install("a", "fsprobe");
    let mut host = world.run();
    let h = &mut host;
    ok(
        h,
        "a",
        json!({"type": "write_file", "path": "/data/x", "text": "old and whole"}),
    );
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "x", "path": "/data/x", "mode": "write"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "x", "text": "half"}),
    );
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "y", "path": "/public/y", "mode": "edit"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "y", "text": "never"}),
    );
    assert_eq!(
        temporaries_of(&world, "a").len(),
        2,
        "one temporary per writer"
    );

    h.tell("a", json!({"type": "trap"}));
    assert!(!exists(h, "a", "/public/y"), "a new file is never made");
    let last_exit = world.status("a")["last_exit"].clone();
    assert!(
        last_exit.as_str().unwrap().contains("trapped"),
        "{last_exit}"
    );
    assert_eq!(read(h, "a", "/data/x"), "old and whole");
    assert_eq!(world.read("private/a/data/x"), "old and whole");
    assert_eq!(temporaries_of(&world, "a"), Vec::<PathBuf>::new());
    quit_and_check_no_temporary(&world, host);
}

#[test]
fn a_kill_discards_uncommitted_writes_and_leaves_the_old_file_whole() {
    let world = TestWorld::new();
    world.install("a", "fsprobe");
    let mut host = world.run();
    let h = &mut host;
    ok(
        h,
        "a",
        json!({"type": "write_file", "path": "/data/x", "text": "old and whole"}),
    );
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "x", "path": "/data/x", "mode": "append"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "x", "text": " and more"}),
    );
    h.tell("a", json!({"type": "spin"}));
    eventually("the probe to spin", || {
        world.log("a").contains("spinning forever")
    });
    // It reads no shutdown, so the stop kills it after 5 s.
    let stopped = h.request(json!({"type": "stop", "actor": "a"}));
    assert_eq!(stopped["exit"], "killed", "{stopped}");
    assert_eq!(world.read("private/a/data/x"), "old and whole");
    quit_and_check_no_temporary(&world, host);
}

#[test]
fn directory_operations_take_effect_at_once() {
    let world = TestWorld::new();
    world.install("a", "fsprobe");
    world.install("b", "fsprobe");
    let mut host = world.run();
    let h = &mut host;
    // A writer stays open throughout: directory operations wait for no close.
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "w", "path": "/public/open", "mode": "write"}),
    );

    ok(h, "a", json!({"type": "mkdir", "path": "/public/d"}));
    assert!(world.path("actor/a/public/d").is_dir());
    assert_eq!(list(h, "b", "/actor/a/public"), json!(["d"]));
    let stat = ok(h, "a", json!({"type": "stat", "path": "/public/d"}));
    assert_eq!(stat["is_dir"], true);

    ok(
        h,
        "a",
        json!({"type": "write_file", "path": "/public/d/f", "text": "f"}),
    );
    ok(
        h,
        "a",
        json!({"type": "rename", "from": "/public/d/f", "to": "/public/g"}),
    );
    assert!(!world.path("actor/a/public/d/f").exists());
    assert_eq!(world.read("actor/a/public/g"), "f");
    assert_eq!(list(h, "b", "/actor/a/public"), json!(["d", "g"]));

    ok(
        h,
        "a",
        json!({"type": "rename", "from": "/public/d", "to": "/public/e"}),
    );
    assert!(world.path("actor/a/public/e").is_dir());
    assert!(!world.path("actor/a/public/d").exists());

    ok(
        h,
        "a",
        json!({"type": "write_file", "path": "/public/e/inside", "text": "i"}),
    );
    // The guest's std has no `ErrorKind` for WASI's `not-empty`; the message says it.
    let refused = probe(h, "a", json!({"type": "rmdir", "path": "/public/e"}));
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("Directory not empty"),
        "{refused}"
    );
    ok(
        h,
        "a",
        json!({"type": "remove", "path": "/public/e/inside"}),
    );
    assert!(!world.path("actor/a/public/e/inside").exists());
    ok(h, "a", json!({"type": "rmdir", "path": "/public/e"}));
    assert!(!world.path("actor/a/public/e").exists());
    ok(h, "a", json!({"type": "remove", "path": "/public/g"}));
    assert!(!world.path("actor/a/public/g").exists());
    assert_eq!(list(h, "b", "/actor/a/public"), json!([]));

    ok(h, "a", json!({"type": "close", "handle": "w"}));
    assert_eq!(list(h, "b", "/actor/a/public"), json!(["open"]));
    quit_and_check_no_temporary(&world, host);
}

#[test]
fn a_writer_whose_folder_is_renamed_commits_into_the_folders_new_place() {
    let world = TestWorld::new();
    world.install("a", "fsprobe");
    let mut host = world.run();
    let h = &mut host;
    ok(h, "a", json!({"type": "mkdir", "path": "/data/d"}));
    for name in ["kept", "dropped"] {
        ok(
            h,
            "a",
            json!({"type": "write_file", "path": format!("/data/d/{name}"), "text": "old"}),
        );
    }
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "k", "path": "/data/d/kept", "mode": "write"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "k", "text": "new"}),
    );
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "t", "path": "/data/d/dropped", "mode": "append"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "t", "text": " and lost"}),
    );
    ok(
        h,
        "a",
        json!({"type": "rename", "from": "/data/d", "to": "/data/e"}),
    );
    ok(h, "a", json!({"type": "close", "handle": "k"}));
    assert_eq!(read(h, "a", "/data/e/kept"), "new");
    assert!(
        !exists(h, "a", "/data/d"),
        "the old folder is not made again"
    );
    assert_eq!(temporaries_of(&world, "a").len(), 1, "the other writer's");

    h.tell("a", json!({"type": "trap"}));
    assert_eq!(read(h, "a", "/data/e/dropped"), "old");
    assert_eq!(
        temporaries_of(&world, "a"),
        Vec::<PathBuf>::new(),
        "the discard found its temporary in the renamed folder"
    );
    ok(h, "a", json!({"type": "remove", "path": "/data/e/kept"}));
    ok(h, "a", json!({"type": "remove", "path": "/data/e/dropped"}));
    ok(h, "a", json!({"type": "rmdir", "path": "/data/e"}));
    quit_and_check_no_temporary(&world, host);
}

#[test]
fn temporary_names_are_invisible_to_guests() {
    let world = TestWorld::new();
    world.install("a", "fsprobe");
    world.install("b", "fsprobe");
    let mut host = world.run();
    let h = &mut host;
    ok(
        h,
        "a",
        json!({"type": "write_file", "path": "/data/x", "text": "old"}),
    );
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "w", "path": "/data/x", "mode": "write"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "w", "text": "new"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write_file", "path": "/public/p", "text": "p"}),
    );
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "p", "path": "/public/p", "mode": "append"}),
    );
    let data_temps = temporaries(&world, "private/a/data");
    let public_temps = temporaries(&world, "actor/a/public");
    assert_eq!((data_temps.len(), public_temps.len()), (1, 1));
    let (data_temp, public_temp) = (file_name(&data_temps[0]), file_name(&public_temps[0]));

    assert_eq!(list(h, "a", "/data"), json!(["x"]), "not listed");
    assert_eq!(
        list(h, "b", "/actor/a/public"),
        json!(["p"]),
        "not listed to others"
    );
    let t = format!("/data/{data_temp}");
    let refused = [
        (json!({"type": "stat", "path": t}), "NotFound"),
        (json!({"type": "read", "path": t}), "NotFound"),
        (
            json!({"type": "open", "handle": "t", "path": t, "mode": "read"}),
            "NotFound",
        ),
        (
            json!({"type": "open", "handle": "t", "path": t, "mode": "edit"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "open", "handle": "t", "path": t, "mode": "write"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "write_file", "path": t, "text": "overwrite"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "rename", "from": t, "to": "/data/stolen"}),
            "NotFound",
        ),
        (
            json!({"type": "rename", "from": "/data/x", "to": t}),
            "PermissionDenied",
        ),
        (json!({"type": "remove", "path": t}), "NotFound"),
        (json!({"type": "rmdir", "path": t}), "NotFound"),
        (
            json!({"type": "read", "path": format!("{t}/../x")}),
            "NotFound",
        ),
        (
            json!({"type": "mkdir", "path": "/data/.sausage-tmp-mine"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "write_file", "path": "/data/.sausage-tmp-mine", "text": "mine"}),
            "PermissionDenied",
        ),
    ];
    for (command, kind) in refused {
        fails(h, "a", command, kind);
    }
    assert!(!exists(h, "a", &t));
    let others_view = format!("/actor/a/public/{public_temp}");
    fails(
        h,
        "b",
        json!({"type": "read", "path": others_view}),
        "NotFound",
    );
    assert!(!exists(h, "b", &others_view));

    // The temporaries are untouched and commit as if nothing had been tried.
    assert_eq!(world.read(&format!("private/a/data/{data_temp}")), "new");
    assert!(!world.path("private/a/data/stolen").exists());
    assert!(!world.path("private/a/data/.sausage-tmp-mine").exists());
    ok(h, "a", json!({"type": "close", "handle": "w"}));
    ok(h, "a", json!({"type": "close", "handle": "p"}));
    assert_eq!(world.read("private/a/data/x"), "new");
    quit_and_check_no_temporary(&world, host);
}

#[test]
fn guests_cannot_leave_their_mounts_make_links_or_write_under_actor() {
    let world = TestWorld::new();
    world.install("a", "fsprobe");
    world.install("b", "fsprobe");
    std::fs::write(world.path("private/b/data/secret"), "b's secret").unwrap();
    std::fs::write(world.path("actor/b/public/shared"), "b's public file").unwrap();
    let mut host = world.run();
    let h = &mut host;
    ok(
        h,
        "a",
        json!({"type": "write_file", "path": "/data/x", "text": "mine"}),
    );
    ok(h, "a", json!({"type": "mkdir", "path": "/data/sub"}));
    // `..` that stays inside the mount is fine: the refusals below are about leaving it.
    assert_eq!(read(h, "a", "/data/sub/../x"), "mine");
    assert_eq!(
        read(h, "a", "/actor/b/../b/public/shared"),
        "b's public file"
    );

    let refused = [
        // Leaving a mount.
        (
            json!({"type": "read", "path": "/data/../actor/b/public/shared"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "read", "path": "/data/../../etc/passwd"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "read", "path": "/data/sub/../../actor/b/public/shared"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "read", "path": "/data/./../data/x"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "list", "path": "/data/.."}),
            "PermissionDenied",
        ),
        (
            json!({"type": "read", "path": "/public/../data/x"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "write_file", "path": "/data/../escaped", "text": "out"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "read", "path": "/actor/b/../../private/b/data/secret"}),
            "PermissionDenied",
        ),
        (json!({"type": "read", "path": "/etc/passwd"}), "NotFound"),
        // Another actor's /data is not there at all.
        (
            json!({"type": "read", "path": "/private/b/data/secret"}),
            "NotFound",
        ),
        (json!({"type": "list", "path": "/private"}), "NotFound"),
        (
            json!({"type": "read", "path": "/actor/b/data/secret"}),
            "NotFound",
        ),
        // No links of either kind, whatever they point at.
        (
            json!({"type": "symlink", "target": "/etc", "link": "/data/etc"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "symlink", "target": "x", "link": "/data/link"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "symlink", "target": "../../private/b/data", "link": "/public/b-data"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "hardlink", "from": "/data/x", "to": "/data/x2"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "hardlink", "from": "/data/x", "to": "/public/x2"}),
            "PermissionDenied",
        ),
        (
            json!({"type": "hardlink", "from": "/actor/b/public/shared", "to": "/data/shared"}),
            "PermissionDenied",
        ),
        // /actor is read-only, an actor's own public files included.
        (
            json!({"type": "write_file", "path": "/actor/a/public/x", "text": "no"}),
            "ReadOnlyFilesystem",
        ),
        (
            json!({"type": "write_file", "path": "/actor/b/public/shared", "text": "no"}),
            "ReadOnlyFilesystem",
        ),
        (
            json!({"type": "open", "handle": "h", "path": "/actor/b/public/shared", "mode": "append"}),
            "ReadOnlyFilesystem",
        ),
        (
            json!({"type": "mkdir", "path": "/actor/b/public/d"}),
            "ReadOnlyFilesystem",
        ),
        (
            json!({"type": "remove", "path": "/actor/b/public/shared"}),
            "ReadOnlyFilesystem",
        ),
        (
            json!({"type": "remove", "path": "/actor/b/status.json"}),
            "ReadOnlyFilesystem",
        ),
        (
            json!({"type": "rename", "from": "/actor/b/public/shared", "to": "/actor/b/public/moved"}),
            "ReadOnlyFilesystem",
        ),
        (
            json!({"type": "rmdir", "path": "/actor/b/public"}),
            "ReadOnlyFilesystem",
        ),
    ];
    for (command, kind) in refused {
        fails(h, "a", command, kind);
    }

    let in_b = list(h, "a", "/actor/b");
    assert!(!in_b.as_array().unwrap().contains(&json!("data")), "{in_b}");
    assert_eq!(world.read("private/b/data/secret"), "b's secret");
    assert_eq!(world.read("actor/b/public/shared"), "b's public file");
    for never in [
        "private/a/escaped",
        "private/a/data/etc",
        "private/a/data/link",
        "private/a/data/x2",
        "private/a/data/shared",
        "actor/a/public/b-data",
        "actor/a/public/x",
        "actor/a/public/x2",
        "actor/b/public/d",
        "actor/b/public/moved",
    ] {
        assert!(
            std::fs::symlink_metadata(world.path(never)).is_err(),
            "{never} was made"
        );
    }
}

#[test]
fn the_actor_folder_is_the_registry_as_others_see_it() {
    let world = TestWorld::new();
    world.install("a", "fsprobe");
    world.install("b", "fsprobe");
    // The running version's source, where `spawn` would have installed it.
    let manifest = std::fs::read_to_string(source("fsprobe").join("Cargo.toml")).unwrap();
    for dir in ["broker/versions/b/1/source", "actor/b/source"] {
        std::fs::write(world.path(dir).join("Cargo.toml"), &manifest).unwrap();
    }
    let mut host = world.run();
    let h = &mut host;

    let names = list(h, "a", "/actor");
    let mut on_disk: Vec<String> = std::fs::read_dir(world.path("actor"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    assert_eq!(names, json!(on_disk));
    let registered = world.json("sausage.json")["actors"].clone();
    let natives = ["broker", "cargo", "console"];
    for id in registered.as_object().unwrap().keys().map(String::as_str) {
        assert!(names.as_array().unwrap().contains(&json!(id)), "{id}");
    }
    for id in natives {
        assert!(names.as_array().unwrap().contains(&json!(id)), "{id}");
    }

    eventually("b's status to say running", || {
        world.status("b")["state"] == "running"
    });
    let status: Value = serde_json::from_str(&read(h, "a", "/actor/b/status.json")).unwrap();
    assert_eq!(status["state"], "running", "{status}");
    assert_eq!(status["version"], 1);
    assert_eq!(list(h, "a", "/actor/b/source"), json!(["Cargo.toml"]));
    assert_eq!(read(h, "a", "/actor/b/source/Cargo.toml"), manifest);
    let log = ok(
        h,
        "a",
        json!({"type": "stat", "path": "/actor/b/stderr.log"}),
    );
    assert_eq!(log["is_dir"], false);
}

/// Whether the last run left `broker/ended-cleanly` (a graceful stop with nothing under way).
fn ended_cleanly(world: &TestWorld) -> bool {
    world.path("broker/ended-cleanly").exists()
}

#[test]
fn a_host_crash_leaves_no_temporary_and_the_old_file_whole() {
    let world = TestWorld::new();
    world.install("a", "fsprobe");
    let mut host = world.run();
    let h = &mut host;
    ok(
        h,
        "a",
        json!({"type": "write_file", "path": "/data/x", "text": "old and whole"}),
    );
    assert!(host.quit().success());
    assert!(ended_cleanly(&world), "a graceful stop says so");
    // A start after a graceful stop does not walk the world for temporaries: one planted while
    // no host ran (as no host of Sausage leaves after a graceful stop) stays.
    let planted = world.path("private/a/data/.sausage-tmp-1-planted");
    std::fs::write(&planted, "left by nobody").unwrap();
    let mut host = world.run();
    let h = &mut host;
    assert_eq!(read(h, "a", "/data/x"), "old and whole");
    assert!(planted.exists());
    assert!(!ended_cleanly(&world), "a running world has not ended");
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "w", "path": "/data/x", "mode": "write"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "w", "text": "uncommitted"}),
    );
    ok(
        h,
        "a",
        json!({"type": "open", "handle": "n", "path": "/public/new", "mode": "write"}),
    );
    ok(
        h,
        "a",
        json!({"type": "write", "handle": "n", "text": "uncommitted"}),
    );
    host.kill();
    assert!(!ended_cleanly(&world));
    assert_eq!(
        temporaries_of(&world, "a").len(),
        3,
        "the kill left the writers' temporaries beside the planted one"
    );

    let mut host = world.run();
    let h = &mut host;
    assert_eq!(read(h, "a", "/data/x"), "old and whole");
    assert!(!exists(h, "a", "/public/new"));
    assert_eq!(world.read("private/a/data/x"), "old and whole");
    assert_eq!(temporaries_of(&world, "a"), Vec::<PathBuf>::new());
    quit_and_check_no_temporary(&world, host);
    assert!(ended_cleanly(&world));
}
