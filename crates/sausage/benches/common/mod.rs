//! What the benches share: the repository, building the test actors and the agent, worlds with
//! actors installed as `spawn` leaves them, and `sausage run` driven through its console.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use sausage_core::message::ActorId;
use sausage_core::world::{ActorEntry, World};

/// How long a bench waits for an answer before it gives up.
const PATIENCE: Duration = Duration::from_secs(3600);

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository exists")
}

fn cargo_build(manifest: &str, target: &str) {
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(repo().join(manifest))
        .arg("--target-dir")
        .arg(repo().join(target))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building {manifest} failed");
}

/// Builds the test actors; returns the folder of their `.wasm` files.
pub fn build_actors() -> PathBuf {
    cargo_build("actors/Cargo.toml", "target/actors");
    repo().join("target/actors/wasm32-wasip2/release")
}

/// Builds the agent; returns its `.wasm`.
pub fn build_agent() -> PathBuf {
    cargo_build("agent/Cargo.toml", "target/agent");
    repo().join("target/agent/wasm32-wasip2/release/agent.wasm")
}

/// A new world in a temporary folder with these actors installed as version 1, as `spawn`
/// leaves them.
pub fn world(actors: &Path, installs: &[(&str, &str)]) -> (tempfile::TempDir, World) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let world = World::new(dir.path().join("world"));
    world.create().expect("a new world");
    let mut registry = world.load_registry().expect("its registry");
    for (id, actor) in installs {
        let id = ActorId::parse(id).expect("a valid id");
        let version = world.version_dir(&id, 1);
        std::fs::create_dir_all(version.join("source")).unwrap();
        std::fs::copy(
            actors.join(format!("{actor}.wasm")),
            version.join("actor.wasm"),
        )
        .unwrap();
        sausage_core::fs::copy_tree(&repo().join("actors").join(actor), &version.join("source"))
            .unwrap();
        world.create_actor_dirs(&id).unwrap();
        world.install_source(&id, 1).unwrap();
        registry.actors.insert(
            id.to_string(),
            ActorEntry {
                version: 1,
                next_version: 2,
                running: true,
                owner: None,
                subagent: None,
            },
        );
    }
    world.save_registry(&registry).unwrap();
    (dir, world)
}

/// `sausage run` on a world, driven through its console.
pub struct Host {
    pub child: Child,
    stdin: ChildStdin,
    /// Each line the console printed, with when it was read.
    lines: mpsc::Receiver<(Instant, String)>,
    /// Replies read while waiting for another, kept for a later wait.
    unclaimed: Vec<(Instant, String, Value)>,
}

impl Host {
    pub fn start(world: &World) -> Host {
        Host::start_with(world, &[])
    }

    /// `sausage run WORLD ARGS…`, with the host `SAUSAGE_BIN` names if set (another build, to
    /// compare before and after a change).
    pub fn start_with(world: &World, args: &[&str]) -> Host {
        let bin = std::env::var_os("SAUSAGE_BIN").unwrap_or(env!("CARGO_BIN_EXE_sausage").into());
        let mut child = Command::new(bin)
            .arg("run")
            .arg(world.root())
            .args(args)
            // The public address on any free port, so benches beside a running world work.
            .env("SAUSAGE_HTTP", "127.0.0.1:0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sausage runs");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().expect("piped");
        Host {
            child,
            stdin,
            lines,
            unclaimed: Vec::new(),
        }
    }

    pub fn tell(&mut self, to: &str, body: Value) {
        writeln!(self.stdin, "@{to} {body}").expect("the console reads");
        self.stdin.flush().expect("the console reads");
    }

    /// The body of the next printed reply from `from` whose type is `kind`; an `error` from it
    /// ends the bench.
    pub fn wait(&mut self, from: &str, kind: &str) -> Value {
        self.wait_timed(from, kind).1
    }

    /// [`Host::wait`], with the moment the console printed it. Other replies read meanwhile are
    /// kept for later waits, so two actors' replies may come in either order.
    pub fn wait_timed(&mut self, from: &str, kind: &str) -> (Instant, Value) {
        let head = format!("[{from}] (reply) ");
        if let Some(k) = self.unclaimed.iter().position(|(_, line, body)| {
            line.starts_with(&head) && (body["type"] == kind || body["type"] == "error")
        }) {
            let (at, _, body) = self.unclaimed.remove(k);
            assert_ne!(body["type"], "error", "{from}: {body}");
            return (at, body);
        }
        loop {
            let (at, line) = self
                .lines
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("no `{kind}` from {from}"));
            let Some((_, body)) = line.split_once(" (reply) ") else {
                continue;
            };
            let Ok(body) = serde_json::from_str::<Value>(body) else {
                continue;
            };
            if line.starts_with(&head) {
                assert_ne!(body["type"], "error", "{from}: {body}");
                if body["type"] == kind {
                    return (at, body);
                }
            } else {
                self.unclaimed.push((at, line, body));
            }
        }
    }

    /// Ends the console's input and waits for the host to stop every actor and exit.
    pub fn quit(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}
