//! The build jail attacked (DESIGN §28): build scripts in `tests/fixtures/jail/` try what an
//! attacker's would (read the world's secrets, reach the host by a file handle, learn the world's
//! path from `/proc`, reach a local port, write outside the target folder, leave a process
//! behind, swap the artefact for a link, take every resource), on a host run as the tests run
//! (root in CI) and on one run as a user who is not root. Each build script ends by saying
//! whether the jail held, so an attack that did not run fails its test. The boundary helper is
//! [`Attacks`]: a running host whose console asks `cargo` to build a fixture.

mod support;

use std::path::{Path, PathBuf};

use sausage_core::cargo::jail::{LIMITS, REFUSED_SYSCALLS};
use sausage_core::world::World;
use serde_json::{Value, json};
use support::*;

/// A world with planted secrets and a host that builds attacks in it.
struct Attacks {
    world: TestWorld,
    host: Host,
    /// Files of the world no build may read: the model's token, another person's history.
    secrets: Vec<PathBuf>,
    /// The world's build cache, as its host finds it.
    cache: PathBuf,
}

/// What every planted secret holds.
const PLANTED: &str = "sausage-planted-secret";

impl Attacks {
    /// Plants secrets in a new world and starts its host: as the tests run, or as a user who is
    /// not root.
    fn start(as_user: bool) -> Attacks {
        let world = TestWorld::new();
        sausage_core::people::People::new(&World::new(&world.root))
            .create(sausage_core::people::DEFAULT_OWNER)
            .unwrap();
        let secrets = vec![
            world.path("broker/secrets/secrets.json"),
            world.path("broker/credentials/agent.json"),
            world.path("private/agent/data/people/ann/conversation.jsonl"),
        ];
        for file in &secrets {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, PLANTED).unwrap();
        }
        let host = match as_user {
            false => world.run(),
            true => Host::start_as_user(&world.root, false),
        };
        // SAFETY: `geteuid` has no preconditions and cannot fail.
        let cache = match as_user && unsafe { libc::geteuid() } == 0 {
            true => World::new(&world.root)
                .build_cache_dir_under(&world.root.parent().unwrap().join("cache")),
            false => World::new(&world.root).build_cache_dir().unwrap(),
        };
        Attacks {
            world,
            host,
            secrets,
            cache,
        }
    }

    /// Copies the fixture `name` into the console's `/data` with `aim.txt` (`key=value` lines)
    /// and asks `cargo` to build it; returns the reply's body.
    fn build(&mut self, name: &str, aim: &[(&str, String)]) -> Value {
        let fixtures = repo().join("crates/sausage/tests/fixtures/jail");
        let dir = self.world.path(&format!("private/console/data/{name}"));
        copy_dir(&fixtures.join(name), &dir);
        std::fs::copy(fixtures.join("common.rs"), dir.join("common.rs")).unwrap();
        let aim: String = aim.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(dir.join("aim.txt"), aim).unwrap();
        self.host.tell(
            "cargo",
            json!({"type": "build", "source": format!("/data/{name}")}),
        );
        self.host
            .wait_for("cargo's reply", |m| m.from == "cargo" && m.reply)
            .body
    }

    /// Builds an attack whose build script ends with its verdict, and checks that the jail held.
    fn held(&mut self, name: &str, aim: &[(&str, String)]) -> String {
        let reply = self.build(name, aim);
        assert_eq!(reply["type"], "build_failed", "{name}: {reply}");
        let errors = reply["errors"].as_str().unwrap_or("").to_string();
        assert!(
            errors.contains("jail held") && !errors.contains("jail broken"),
            "{name}: {errors}"
        );
        errors
    }

    /// Every path of the world's and the host's an attacker would aim at.
    fn paths(&self) -> String {
        let mut paths: Vec<String> = self
            .secrets
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        paths.push(self.world.path("broker/people.json").display().to_string());
        paths.push(self.world.root.display().to_string());
        paths.push(repo().display().to_string());
        paths.join(",")
    }

    /// The files `cargo` published, read whole.
    fn published(&self) -> Vec<Vec<u8>> {
        let builds = self.world.path("actor/cargo/public/builds");
        let mut files = Vec::new();
        for build in std::fs::read_dir(builds).into_iter().flatten().flatten() {
            for file in std::fs::read_dir(build.path()).unwrap().flatten() {
                files.push(std::fs::read(file.path()).unwrap());
            }
        }
        files
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Whether any process of this machine has `marker` in its command line.
fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|pid| {
        std::fs::read(pid.path().join("cmdline"))
            .map(|line| String::from_utf8_lossy(&line).contains(marker))
            .unwrap_or(false)
    })
}

/// Every attack, on one host.
fn every_attack_is_refused_or_without_effect(as_user: bool) {
    let mut attacks = Attacks::start(as_user);
    let paths = attacks.paths();

    attacks.held("read", &[("paths", paths.clone())]);
    let refused = attacks.held("handle", &[]);
    assert!(
        refused.contains("open_by_handle_at: Operation not permitted"),
        "{refused}"
    );
    // The folder around the world too, but where this test keeps the user's cache in it.
    let mut hidden = paths.clone();
    if !as_user {
        hidden.push_str(&format!(
            ",{}",
            attacks.world.root.parent().unwrap().display()
        ));
    }
    attacks.held("procfs", &[("paths", hidden)]);
    attacks.held("write", &[("paths", paths.clone())]);
    let powers = attacks.held("powers", &[]);
    assert!(powers.contains("CapEff 0000000000000000"), "{powers}");
    assert!(
        REFUSED_SYSCALLS
            .iter()
            .any(|(n, _)| *n == "open_by_handle_at")
    );

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap().to_string();
    attacks.held("connect", &[("address", address)]);
    assert!(
        listener
            .accept()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "nobody connected"
    );

    attacks.held(
        "limits",
        &[
            ("processes", LIMITS.processes.to_string()),
            ("open_files", LIMITS.open_files.to_string()),
            ("memory_bytes", LIMITS.memory_bytes.to_string()),
        ],
    );

    // A process left behind is gone when the build answers, and writes nothing later.
    // Its own marker: the other test of this file runs beside it in this process.
    let marker = format!("4242{}{}.5", std::process::id(), as_user as u8);
    let built = attacks.build("linger", &[("marker", marker.clone())]);
    assert_eq!(built["type"], "built", "{built}");
    assert!(!running(&marker), "a process of the build outlived it");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let target = attacks
        .cache
        .join("target")
        .join(sausage_core::people::DEFAULT_OWNER);
    assert!(
        target.join("mine").is_file(),
        "the build wrote its target folder"
    );
    assert!(
        !target.join("late").exists(),
        "a process of the build wrote after it"
    );

    // The artefact swapped for a link to the credentials: refused, or the swap came too late;
    // either way nothing of the credentials is published.
    let secret = attacks.secrets[0].display().to_string();
    let swapped = attacks.build("swap", &[("secret", secret)]);
    println!("the swap attack: {swapped}");
    match swapped["type"].as_str() {
        Some("build_failed") => {
            let errors = swapped["errors"].as_str().unwrap();
            assert!(errors.contains("symbolic link"), "{errors}");
        }
        _ => assert_eq!(swapped["type"], "built", "{swapped}"),
    }
    for file in attacks.published() {
        assert!(file.starts_with(b"\0asm"), "only components are published");
        assert!(
            !String::from_utf8_lossy(&file).contains(PLANTED),
            "a secret was published"
        );
    }
    for secret in &attacks.secrets {
        assert_eq!(std::fs::read_to_string(secret).unwrap(), PLANTED);
    }
}

#[test]
fn every_attack_is_refused_or_without_effect_on_this_host() {
    every_attack_is_refused_or_without_effect(false);
}

#[test]
fn every_attack_is_refused_or_without_effect_on_a_host_of_a_user_who_is_not_root() {
    every_attack_is_refused_or_without_effect(true);
}

#[test]
fn where_the_jail_cannot_be_made_nothing_is_built_and_the_refusal_says_how_to_allow_it() {
    let world = TestWorld::new();
    sausage_core::people::People::new(&World::new(&world.root))
        .create(sausage_core::people::DEFAULT_OWNER)
        .unwrap();
    let dir = world.path("private/console/data/plain");
    copy_dir(
        &repo().join("crates/sausage/tests/fixtures/jail/linger"),
        &dir,
    );
    std::fs::remove_file(dir.join("build.rs")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"plain\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
    )
    .unwrap();
    let mut host = Host::start_as_user(&world.root, true);
    host.tell("cargo", json!({"type": "build", "source": "/data/plain"}));
    let refused = host
        .wait_for("cargo's reply", |m| m.from == "cargo" && m.reply)
        .body;
    assert_eq!(refused["type"], "error", "{refused}");
    let reason = refused["reason"].as_str().unwrap();
    assert!(
        reason.contains("cannot make the build jail")
            && reason.contains("user.max_user_namespaces")
            && reason.contains("sysctl -w")
            && reason.contains("never run without it"),
        "{reason}"
    );
    assert!(!world.path("actor/cargo/public/builds").exists());
    let cache = World::new(&world.root).build_cache_dir().unwrap();
    assert!(!cache.exists(), "nothing was staged");
}
