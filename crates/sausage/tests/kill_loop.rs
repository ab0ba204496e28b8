//! A host killed with SIGKILL again and again, at random moments, during a flood and during
//! upgrades: every run opens the world, every file is whole, and each actor's messages arrive in
//! order, none twice, none lost: a message a guest had read when the host died comes again
//! unless the guest's commit of its handling happened (DESIGN §20).

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::random::Random;
use support::*;

const KILLS: usize = 6;

/// The tick numbers notes committed, in file order; every line must be whole.
fn ticks(world: &TestWorld) -> Vec<u64> {
    let text =
        std::fs::read_to_string(world.path("private/notes/data/notes.jsonl")).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the last line is whole"
    );
    text.lines()
        .map(|line| {
            let note: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a line is not whole: {line:?}: {e}"));
            note["n"].as_u64().expect("a tick")
        })
        .collect()
}

/// Every file under `dir`, relative, with its content.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else {
                let content = std::fs::read(&path).unwrap();
                found.push((path.strip_prefix(dir).unwrap().to_path_buf(), content));
            }
        }
    }
    found.sort();
    found
}

/// Hidden temporaries anywhere in the world (the cargo target folder aside).
fn hidden(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(".sausage-tmp")
            {
                found.push(entry.path());
            } else if entry.file_type().unwrap().is_dir() {
                folders.push(entry.path());
            }
        }
    }
    found
}

#[test]
fn kills_at_random_moments_during_floods_and_upgrades_lose_nothing_accepted() {
    let world = TestWorld::new();
    world.install("ticker", "ticker");
    world.install("notes", "notes");
    let (mut random, seed) = Random::from_env("SAUSAGE_KILL_SEED");
    eprintln!("kill loop seed: {seed} (SAUSAGE_KILL_SEED={seed} repeats it)");
    for kill in 0..KILLS {
        let mut host = world.run();
        let before = ticks(&world).len();
        // The ticker records its start (record_every), so a start it began is handled for
        // good and does not come again after the kill (DESIGN §20).
        host.tell(
            "ticker",
            json!({"type": "start", "to": "notes", "count": 3000, "interval_ms": 0,
                   "record_every": 3000}),
        );
        // Kill once notes has stored a random number of further ticks…
        let more = 1 + random.below(400) as usize;
        eventually("notes to store more ticks", || {
            ticks(&world).len() >= before + more
        });
        if kill % 2 == 1 {
            // …or, every other time, a random moment into an upgrade of notes (tests, swap and
            // restart take a few hundred milliseconds).
            host.tell(
                "broker",
                json!({"type": "upgrade", "actor": "notes", "wasm": wasm("notes"),
                       "source": source("notes")}),
            );
            std::thread::sleep(Duration::from_millis(random.below(1500)));
        }
        host.kill();
    }

    let mut host = world.run();
    // This count queues behind every tick the journal kept, so it answers after them.
    host.tell("notes", json!({"type": "count"}));
    let count = host.wait_type("notes", "count")["count"].as_u64().unwrap() as usize;
    let ticks = ticks(&world);
    assert_eq!(count, ticks.len());

    // Each start of the ticker begins a run 1, 2, 3…; a new run starts where a number does not
    // follow the one before (a start the ticker had read when a kill came, and had not settled,
    // comes again: DESIGN §20). Within a run, numbers only grow (no duplicate, no reordering),
    // and none is missing: a tick notes had read when the kill came comes again unless its
    // commit happened, so notes stores each tick once.
    let mut runs: Vec<Vec<u64>> = Vec::new();
    for &n in &ticks {
        match runs.last_mut() {
            Some(run) if n > *run.last().unwrap() => run.push(n),
            _ => runs.push(vec![n]),
        }
    }
    let mut missing = Vec::new();
    for run in &runs {
        assert!(
            run[0] <= 2,
            "a run starts at its beginning: {:?}…",
            &run[..3.min(run.len())]
        );
        for pair in run.windows(2) {
            if pair[1] != pair[0] + 1 {
                missing.extend(pair[0] + 1..pair[1]);
            }
        }
    }
    eprintln!(
        "{KILLS} kills: {} ticks stored in {} runs, {} missing: {missing:?}",
        ticks.len(),
        runs.len(),
        missing.len()
    );
    assert!(missing.is_empty(), "no tick lost to a kill: {missing:?}");

    // The registry opens and names a stored version whose source is the running source, whole.
    let registry = world.json("sausage.json");
    let version = registry["actors"]["notes"]["version"].as_u64().unwrap();
    eprintln!(
        "notes runs version {version} after {} upgrades asked",
        KILLS / 2
    );
    let stored = world.path(&format!("broker/versions/notes/{version}/source"));
    assert_eq!(
        files(&world.path("actor/notes/source")),
        files(&stored),
        "the running source is version {version}'s, whole"
    );
    assert!(
        world
            .path(&format!("broker/versions/notes/{version}/actor.wasm"))
            .is_file()
    );
    let leftovers = hidden(&world.root);
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    host.tell("ticker", json!({"type": "ping"}));
    host.wait_type("ticker", "error");
}

/// A host killed between an upgrade's swap and the registry's save leaves a log; the next start
/// puts the folders back to the version the registry names.
#[test]
fn a_swap_interrupted_before_the_registry_was_saved_is_undone_at_start() {
    use std::os::unix::fs::MetadataExt;
    let world = TestWorld::new();
    world.install("echo", "echo");
    let source = world.path("actor/echo/source");
    std::fs::write(source.join("which"), "version 1").unwrap();
    // As the swap left it: version 2's source in place, version 1's hidden beside it.
    let beside = world.path("actor/echo/.sausage-tmp-dir-1-0");
    std::fs::rename(&source, &beside).unwrap();
    std::fs::create_dir(&source).unwrap();
    std::fs::write(source.join("which"), "version 2").unwrap();
    let log = json!({
        "swaps": [{
            "target": source, "beside": beside, "target_existed": true,
            "new_inode": std::fs::metadata(&source).unwrap().ino(),
        }],
        "note": {"version": 2},
    });
    std::fs::create_dir_all(world.path("broker/swaps")).unwrap();
    std::fs::write(world.path("broker/swaps/echo.json"), log.to_string()).unwrap();

    let mut host = world.run();
    host.tell("echo", json!({"type": "hello"}));
    host.wait_type("echo", "hello");
    assert_eq!(world.read("actor/echo/source/which"), "version 1");
    assert!(!beside.exists());
    assert!(!world.path("broker/swaps/echo.json").exists());
    assert!(
        host.stderr()
            .contains("interrupted swap to version 2 was undone")
    );
}
