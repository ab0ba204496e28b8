//! The one helper every integration test drives Sausage through: real worlds on disk, the real
//! `sausage` binary, and the test actors built once for the whole test run.
//!
//! Boundary: console lines in (`Host::send`), console messages out (`Host::wait_for`), files on
//! disk checked directly. Tests never sleep a fixed time: they wait for a condition with a
//! deadline.

#![allow(dead_code)]

pub mod agent;
pub mod browser;
pub mod http;
pub mod mcp;
pub mod nats;
pub mod otlp;
pub mod partition;
pub mod prometheus;
pub mod random;
pub mod service;
pub mod synapse;
pub mod web;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sausage_fake_llm::TOKEN;
use serde_json::{Value, json};

/// How long a test waits for anything before it fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The folder of the built test actors: built once per test run, shared by every test binary.
pub fn actors_dir() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build_wasm("actors/Cargo.toml", "target/actors"))
}

/// The agent, built once per test run from `agent/` (into `target/agent`), like the test actors.
pub fn agent_wasm() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build_wasm("agent/Cargo.toml", "target/agent").join("agent.wasm"))
}

/// The `matrix` actor, built once per test run from `matrix/` (into `target/matrix`).
pub fn matrix_wasm() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build_wasm("matrix/Cargo.toml", "target/matrix").join("matrix.wasm"))
}

/// Builds a WASM workspace for `wasm32-wasip2` in release mode and returns the folder of its
/// `.wasm` files. Test binaries run at once share the work through a lock file (and cargo
/// itself skips it when nothing changed).
fn build_wasm(manifest: &str, target: &str) -> PathBuf {
    let target = repo().join(target);
    std::fs::create_dir_all(&target).unwrap();
    let lock = std::fs::File::create(target.join(".build-lock")).unwrap();
    lock.lock().unwrap();
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
        .arg(&target)
        .status()
        .expect("cargo runs");
    assert!(
        status.success(),
        "building {manifest} failed; is the wasm32-wasip2 target installed?"
    );
    target.join("wasm32-wasip2/release")
}

pub fn wasm(actor: &str) -> PathBuf {
    actors_dir().join(format!("{actor}.wasm"))
}

pub fn source(actor: &str) -> PathBuf {
    repo().join("actors").join(actor)
}

/// A std-only actor crate that answers every message with `{"type":"text","text":<greeting>}`,
/// with a transcript test: its files as (path inside the crate, content). Builds in a second.
pub fn greeter_crate(name: &str, greeting: &str) -> Vec<(&'static str, String)> {
    let main = r#"use std::io::BufRead;
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let key = format!("\"{name}\":\"");
    line.split(key.as_str()).nth(1).and_then(|r| r.split('"').next()).unwrap_or("")
}
fn main() {
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        if line.contains("\"shutdown\"") {
            return;
        }
        let (id, from) = (field(&line, "id"), field(&line, "from"));
        println!("{{\"to\":\"{from}\",\"reply_to\":\"{id}\",\"body\":{{\"type\":\"text\",\"text\":\"GREETING\"}}}}");
    }
}
"#;
    vec![
        (
            "Cargo.toml",
            format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n"),
        ),
        ("src/main.rs", main.replace("GREETING", greeting)),
        (
            "tests/greet.jsonl",
            format!(
                "{{\"send\": {{\"type\": \"text\", \"text\": \"hi\"}}}}\n{{\"expect\": {{\"type\": \"text\", \"text\": \"{greeting}\"}}, \"to\": \"test\"}}\n"
            ),
        ),
    ]
}

/// Writes [`greeter_crate`] into `dir`.
pub fn write_greeter_crate(dir: &Path, name: &str, greeting: &str) {
    for (path, content) in greeter_crate(name, greeting) {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, content).unwrap();
    }
}

/// A world in a temporary folder, laid out as `sausage init` does but without an agent (tests
/// that need one install it).
pub struct TestWorld {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
}

impl TestWorld {
    pub fn new() -> TestWorld {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("world");
        sausage_core::world::World::new(&root).create().unwrap();
        TestWorld { _dir: dir, root }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    pub fn json(&self, rel: &str) -> Value {
        serde_json::from_str(&self.read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// Installs a test actor as version 1, running, the way `spawn` leaves it on disk, without
    /// its 2 s smoke test: for tests that are not about `spawn`.
    pub fn install(&self, id: &str, actor: &str) {
        let version = self.path(&format!("broker/versions/{id}/1"));
        std::fs::create_dir_all(version.join("source")).unwrap();
        std::fs::copy(wasm(actor), version.join("actor.wasm")).unwrap();
        for dir in [
            format!("actor/{id}/public"),
            format!("actor/{id}/source"),
            format!("private/{id}/data"),
        ] {
            std::fs::create_dir_all(self.path(&dir)).unwrap();
        }
        let mut registry = self.json("sausage.json");
        registry["actors"][id] = json!({"version": 1, "next_version": 2, "running": true});
        std::fs::write(self.path("sausage.json"), registry.to_string()).unwrap();
    }

    /// Records `owner` (a person) as the registry owner of the installed actor `id`: whom it
    /// acts for (DESIGN §18).
    pub fn set_owner(&self, id: &str, owner: &str) {
        let mut registry = self.json("sausage.json");
        registry["actors"][id]["owner"] = json!(owner);
        std::fs::write(self.path("sausage.json"), registry.to_string()).unwrap();
    }

    /// Lets the running source of `id` reach `hosts` (its `actor.json`).
    pub fn allow_network(&self, id: &str, hosts: &[&str]) {
        let manifest = json!({ "network": hosts }).to_string();
        std::fs::write(
            self.path(&format!("actor/{id}/source/actor.json")),
            manifest,
        )
        .unwrap();
    }

    /// Gives the agent what `sausage init` gives it for a provider at `base_url` speaking `api`:
    /// the token as the secret `model` granted to `agent`, in that API's header, and the
    /// provider's host in the `actor.json` of its source (installed and stored).
    pub fn give_agent_credentials(&self, base_url: &str, api: &str) {
        let (header, format) = match api {
            "anthropic-messages" => ("x-api-key", "{}"),
            _ => ("authorization", "Bearer {}"),
        };
        let world = sausage_core::world::World::new(&self.root);
        sausage_core::secrets::model::keep(&world, base_url, header, format, TOKEN).unwrap();
        self.allow_agent_provider(base_url);
    }

    /// Gives the agent what `sausage init` gave it before the token was a secret: the token in
    /// `broker/credentials/agent.json` as the OpenAI shapes' header, and the provider's host.
    pub fn give_agent_legacy_credentials(&self, base_url: &str) {
        std::fs::create_dir_all(self.path("broker/credentials")).unwrap();
        let credentials = json!({"base_url": base_url, "header": "authorization", "value": format!("Bearer {TOKEN}")});
        std::fs::write(
            self.path("broker/credentials/agent.json"),
            credentials.to_string(),
        )
        .unwrap();
        self.allow_agent_provider(base_url);
    }

    /// Lets the agent reach the provider at `base_url`: its host in the `actor.json` of the
    /// agent's source, installed and stored.
    fn allow_agent_provider(&self, base_url: &str) {
        let host = base_url.split_once("://").unwrap().1.trim_end_matches('/');
        self.allow_network("agent", &[host]);
        std::fs::write(
            self.path("broker/versions/agent/1/source/actor.json"),
            json!({ "network": [host] }).to_string(),
        )
        .unwrap();
    }

    /// Installs the agent (built from `agent/`, with its source) as version 1, with this
    /// `/data/config.json` if one is given (and no token: see
    /// [`TestWorld::give_agent_credentials`]).
    pub fn install_agent(&self, config: Option<Value>) {
        let version = self.path("broker/versions/agent/1");
        std::fs::create_dir_all(&version).unwrap();
        std::fs::copy(agent_wasm(), version.join("actor.wasm")).unwrap();
        copy_source(&repo().join("agent"), &version.join("source"));
        copy_source(&repo().join("agent"), &self.path("actor/agent/source"));
        std::fs::create_dir_all(self.path("actor/agent/public")).unwrap();
        std::fs::create_dir_all(self.path("private/agent/data")).unwrap();
        if let Some(config) = config {
            std::fs::write(
                self.path("private/agent/data/config.json"),
                config.to_string(),
            )
            .unwrap();
        }
        let mut registry = self.json("sausage.json");
        registry["actors"]["agent"] = json!({"version": 1, "next_version": 2, "running": true});
        std::fs::write(self.path("sausage.json"), registry.to_string()).unwrap();
        // As `sausage init` does: the agent speaks for the person it acts for (`"as"`).
        let agent = sausage_core::message::ActorId::parse("agent").unwrap();
        sausage_core::people::People::new(&sausage_core::world::World::new(&self.root))
            .grant_surface(&agent, sausage_core::people::PERSON_HANDLE)
            .unwrap();
    }

    /// Gives the world's `cargo` a copy of the target folder the agent was built in, for the
    /// builds the agent asks for itself, so a build of the agent's source inside the world only
    /// compiles the agent itself.
    pub fn warm_cargo_for_agent(&self) {
        warm_cargo_for_agent(&self.root, AGENTS_OWN_BUILDS);
    }

    /// Every file under the folders actors can see (`actor/`, `private/`) that contains `needle`.
    pub fn visible_files_containing(&self, needle: &str) -> Vec<PathBuf> {
        fn walk(dir: &Path, needle: &[u8], found: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if entry.file_type().unwrap().is_dir() {
                    walk(&path, needle, found);
                } else if let Ok(bytes) = std::fs::read(&path)
                    && bytes.windows(needle.len()).any(|w| w == needle)
                {
                    found.push(path);
                }
            }
        }
        let mut found = Vec::new();
        for dir in ["actor", "private"] {
            walk(&self.path(dir), needle.as_bytes(), &mut found);
        }
        found
    }

    /// The actor's `status.json`, or null before the host first writes it.
    pub fn status(&self, id: &str) -> Value {
        let rel = format!("actor/{id}/status.json");
        if !self.path(&rel).exists() {
            return Value::Null;
        }
        self.json(&rel)
    }

    pub fn log(&self, id: &str) -> String {
        std::fs::read_to_string(self.path(&format!("actor/{id}/stderr.log"))).unwrap_or_default()
    }

    /// A world made by `sausage init` itself, at `root`.
    pub fn adopt(dir: tempfile::TempDir, root: PathBuf) -> TestWorld {
        TestWorld { _dir: dir, root }
    }

    /// Starts `sausage run` on this world.
    pub fn run(&self) -> Host {
        Host::start(&self.root)
    }
}

/// Builds keep their folders outside the world (DESIGN §28), in the cache of the user the tests
/// run as: a test world takes its own along when it goes.
impl Drop for TestWorld {
    fn drop(&mut self) {
        if let Ok(cache) = sausage_core::world::World::new(&self.root).build_cache_dir() {
            // A world that never built has none.
            let _ = std::fs::remove_dir_all(cache);
        }
    }
}

/// Runs `sausage ARGS` to its end (a command that does not run a world).
pub fn sausage(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sausage"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `sausage ARGS` with `stdin` as its input, to its end.
pub fn sausage_with_input(args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sausage"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Every file under `dir`.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => folders.push(path),
                Ok(t) if t.is_file() => files.push(path),
                _ => {}
            }
        }
    }
    files
}

/// The files under `dir` that hold `needle`.
pub fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|f| std::fs::read(f).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)))
        .collect()
}

/// Bytes a command printed, as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The principal of the builds the agent asks `cargo` for in a [`TestWorld`]: it asks for the
/// person it acts for (`"as"`), the terminal's owner, whose target folder the build uses.
pub const AGENTS_OWN_BUILDS: &str = sausage_core::people::DEFAULT_OWNER;

/// [`TestWorld::warm_cargo_for_agent`] for a world folder that may not exist yet, for the
/// builds of `principal` (the person a console deploys as, or [`AGENTS_OWN_BUILDS`]).
pub fn warm_cargo_for_agent(world: &Path, principal: &str) {
    agent_wasm();
    warm_cargo_from(world, "target/agent", principal);
}

/// The same for the `matrix` actor, for the builds of the console's owner of a [`TestWorld`]
/// (`sausage matrix setup` deploys through the console): its dependencies come pre-built from
/// `target/matrix`.
pub fn warm_cargo_for_matrix(world: &Path) {
    matrix_wasm();
    warm_cargo_from(world, "target/matrix", sausage_core::people::DEFAULT_OWNER);
}

/// Copies `target` of the repository into the world's target folder of `principal`: builds
/// of other principals never see it.
fn warm_cargo_from(world: &Path, target: &str, principal: &str) {
    let to = sausage_core::world::World::new(world)
        .cargo_target_dir_of(principal)
        .unwrap();
    std::fs::create_dir_all(&to).unwrap();
    let status = Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(repo().join(target).join("."))
        .arg(&to)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Copies a crate's source, leaving out build output.
fn copy_source(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_source(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

/// The `n` of each note a `notes` actor listed (ticks it stored), in its order.
pub fn ticks(notes: &Value) -> Vec<u64> {
    notes["notes"]
        .as_array()
        .expect("a list of notes")
        .iter()
        .map(|n| n["n"].as_u64().expect("a tick"))
        .collect()
}

/// Waits until `check` holds, polling, or fails the test after [`PATIENCE`].
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One message the console printed.
#[derive(Debug, Clone)]
pub struct Printed {
    pub from: String,
    pub reply: bool,
    /// The body; a text body is `{"type":"text","text":...}`. Multi-line fields printed as
    /// blocks are put back in place.
    pub body: Value,
}

#[derive(Default)]
struct Output {
    /// Messages printed and not yet taken by a `wait_for`.
    messages: Vec<Printed>,
    /// Lines of stdout that are no message (a command's own output, such as `/approvals`).
    other_lines: String,
    stderr: String,
    closed: bool,
}

/// A running `sausage run`, driven through its console.
pub struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    output: Arc<(Mutex<Output>, Condvar)>,
}

impl Host {
    pub fn start(world: &Path) -> Host {
        Host::start_with_env(world, &[])
    }

    /// [`Host::start`] with these variables added to the host's environment.
    pub fn start_with_env(world: &Path, vars: &[(&str, &str)]) -> Host {
        Host::start_with(world, &["--no-web"], vars)
    }

    /// `sausage run WORLD ARGS…` with these variables added to the host's environment.
    pub fn start_with(world: &Path, args: &[&str], vars: &[(&str, &str)]) -> Host {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sausage"));
        command.arg("run").arg(world).args(args);
        Host::spawn(command, vars)
    }

    /// [`Host::start`] with `dir` as the folder the host runs in, as a person's shell would.
    pub fn start_in(dir: &Path, world: &Path) -> Host {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sausage"));
        command
            .current_dir(dir)
            .arg("run")
            .arg(world)
            .arg("--no-web");
        Host::spawn(command, &[])
    }

    /// [`Host::start`] as a user who is not root. When the tests run as root, the host runs as
    /// uid 1000, which owns the world's folder, with the toolchain shown where that user reads
    /// it (rustup's home is usually under `/root`, which only root passes through) and its
    /// cache beside the world. With `no_namespaces` it runs instead in a user namespace where no
    /// further one can be made (as a machine with user namespaces off).
    pub fn start_as_user(world: &Path, no_namespaces: bool) -> Host {
        let sausage = env!("CARGO_BIN_EXE_sausage");
        let mut command = Command::new("bwrap");
        if no_namespaces {
            command
                .args([
                    "--unshare-user",
                    "--uid",
                    "1000",
                    "--gid",
                    "1000",
                    "--disable-userns",
                ])
                .args(["--dev-bind", "/", "/", "--die-with-parent", "--", sausage]);
            command.arg("run").arg(world).arg("--no-web");
            return Host::spawn(command, &[]);
        }
        // SAFETY: `geteuid` has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            let mut command = Command::new(sausage);
            command.arg("run").arg(world).arg("--no-web");
            return Host::spawn(command, &[]);
        }
        let home = std::path::PathBuf::from(std::env::var_os("HOME").unwrap());
        let toolchain = |variable: &str, default: &str| {
            std::env::var_os(variable)
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| home.join(default))
        };
        let (cargo_home, rustup_home) = (
            toolchain("CARGO_HOME", ".cargo"),
            toolchain("RUSTUP_HOME", ".rustup"),
        );
        let around = world.parent().unwrap();
        let (user_cargo, user_rustup) = (
            around.join("toolchain/cargo"),
            around.join("toolchain/rustup"),
        );
        std::fs::create_dir_all(&user_cargo).unwrap();
        std::fs::create_dir_all(&user_rustup).unwrap();
        let status = Command::new("chown")
            .args(["-R", "1000:1000"])
            .arg(around)
            .status()
            .unwrap();
        assert!(status.success());
        command
            .args(["--dev-bind", "/", "/", "--die-with-parent"])
            .arg("--ro-bind")
            .arg(&cargo_home)
            .arg(&user_cargo)
            .arg("--ro-bind")
            .arg(&rustup_home)
            .arg(&user_rustup)
            .args([
                "--",
                "setpriv",
                "--reuid=1000",
                "--regid=1000",
                "--clear-groups",
                "--",
            ])
            .arg(sausage)
            .arg("run")
            .arg(world)
            .arg("--no-web");
        let path = format!(
            "{}/bin:{}",
            user_cargo.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let cache = around.join("cache").display().to_string();
        let user_home = around.display().to_string();
        Host::spawn(
            command,
            &[
                ("CARGO_HOME", &user_cargo.display().to_string()),
                ("RUSTUP_HOME", &user_rustup.display().to_string()),
                ("PATH", &path),
                ("HOME", &user_home),
                ("XDG_CACHE_HOME", &cache),
            ],
        )
    }

    fn spawn(mut command: Command, vars: &[(&str, &str)]) -> Host {
        let mut child = command
            // Tests run many hosts at once: each serves its public address on a free port.
            .env("SAUSAGE_HTTP", "127.0.0.1:0")
            .envs(vars.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let output: Arc<(Mutex<Output>, Condvar)> = Arc::default();
        let stdout = child.stdout.take().unwrap();
        let shared = output.clone();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
            while let Some(line) = lines.next() {
                let Some(mut message) = parse_printed(&line) else {
                    let (lock, ready) = &*shared;
                    let mut out = lock.lock().unwrap();
                    out.other_lines.push_str(&line);
                    out.other_lines.push('\n');
                    ready.notify_all();
                    continue;
                };
                // Multi-line fields follow as blocks, each announced as "(N lines below)".
                for field in ["errors", "warnings", "reason"] {
                    let Some(n) = message.body[field].as_str().and_then(lines_below) else {
                        continue;
                    };
                    lines.next(); // the `  field:` header
                    let text: Vec<String> = (0..n)
                        .filter_map(|_| lines.next())
                        .map(|l| l.strip_prefix("    ").unwrap_or(&l).to_string())
                        .collect();
                    message.body[field] = json!(text.join("\n"));
                }
                let (lock, ready) = &*shared;
                lock.lock().unwrap().messages.push(message);
                ready.notify_all();
            }
            let (lock, ready) = &*shared;
            lock.lock().unwrap().closed = true;
            ready.notify_all();
        });
        let stderr = child.stderr.take().unwrap();
        let shared = output.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let (lock, ready) = &*shared;
                let mut out = lock.lock().unwrap();
                out.stderr.push_str(&line);
                out.stderr.push('\n');
                ready.notify_all();
            }
        });
        Host {
            stdin: child.stdin.take(),
            child,
            output,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Types one console line.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a JSON body to an actor through the console.
    pub fn tell(&mut self, to: &str, body: Value) {
        self.send(&format!("@{to} {body}"));
    }

    /// Sends a request to the broker and returns its reply's body.
    pub fn request(&mut self, body: Value) -> Value {
        let kind = body["type"].as_str().unwrap_or("").to_string();
        self.tell("broker", body);
        self.wait_for(&format!("the broker's reply to {kind}"), |m| {
            m.from == "broker" && m.reply && m.body["type"] != "undeliverable"
        })
        .body
    }

    /// Waits for the first message not yet taken that matches, takes it and returns it.
    pub fn wait_for(&mut self, what: &str, matches: impl Fn(&Printed) -> bool) -> Printed {
        self.wait_for_within(PATIENCE, what, matches)
    }

    /// [`Host::wait_for`] with a patience of its own, for waits the design makes long.
    pub fn wait_for_within(
        &mut self,
        patience: Duration,
        what: &str,
        matches: impl Fn(&Printed) -> bool,
    ) -> Printed {
        let deadline = Instant::now() + patience;
        let (lock, ready) = &*self.output;
        let mut out = lock.lock().unwrap();
        loop {
            if let Some(i) = out.messages.iter().position(&matches) {
                return out.messages.remove(i);
            }
            let now = Instant::now();
            if now >= deadline || out.closed {
                let seen: Vec<String> = out
                    .messages
                    .iter()
                    .map(|m| format!("[{}] {}", m.from, m.body))
                    .collect();
                panic!(
                    "no message for {what} ({}); untaken messages:\n{}\nstderr:\n{}",
                    if out.closed {
                        "the host ended"
                    } else {
                        "timed out"
                    },
                    seen.join("\n"),
                    out.stderr
                );
            }
            out = ready.wait_timeout(out, deadline - now).unwrap().0;
        }
    }

    /// Waits for a message from `from` whose body's type is `kind`.
    pub fn wait_type(&mut self, from: &str, kind: &str) -> Value {
        self.wait_for(&format!("`{kind}` from {from}"), |m| {
            m.from == from && m.body["type"] == kind
        })
        .body
    }

    /// Messages printed and not taken yet, taking them.
    pub fn take_all(&mut self) -> Vec<Printed> {
        std::mem::take(&mut self.output.0.lock().unwrap().messages)
    }

    pub fn stderr(&self) -> String {
        self.output.0.lock().unwrap().stderr.clone()
    }

    /// Waits until a line of stdout that is no message holds `text` (what a console command
    /// printed), or fails the test with those lines.
    pub fn wait_stdout(&self, text: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let printed = self.output.0.lock().unwrap().other_lines.clone();
            if printed.contains(text) {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out waiting for the console to print {text:?}; it printed:\n{printed}"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the host's stderr holds `text`, or fails the test with what it said.
    pub fn wait_stderr(&self, text: &str) {
        let deadline = Instant::now() + PATIENCE;
        while !self.stderr().contains(text) {
            if Instant::now() >= deadline {
                panic!(
                    "timed out waiting for the host to say {text:?}; it said:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ends input (like `/quit`) and waits for the host to exit.
    pub fn quit(mut self) -> ExitStatus {
        drop(self.stdin.take());
        self.wait_exit()
    }

    /// Sends a signal to the host.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Kills the host hard (SIGKILL) and waits for it to be gone.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn wait_exit(&mut self) -> ExitStatus {
        wait_exit(&mut self.child)
    }
}

/// Waits for a host process to exit, or fails the test after [`PATIENCE`].
pub fn wait_exit(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the host did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // A test that failed half-way must not leave a host behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `[from] (reply) {json}` or `[from] text`.
fn parse_printed(line: &str) -> Option<Printed> {
    let rest = line.strip_prefix('[')?;
    let (from, rest) = rest.split_once(']')?;
    let (reply, rest) = match rest.strip_prefix(" (reply)") {
        Some(rest) => (true, rest),
        None => (false, rest),
    };
    let rest = rest.strip_prefix(' ').unwrap_or(rest);
    let body = match serde_json::from_str::<Value>(rest) {
        Ok(body @ Value::Object(_)) => body,
        _ => json!({"type": "text", "text": rest}),
    };
    Some(Printed {
        from: from.to_string(),
        reply,
        body,
    })
}

/// `(N lines below)` → N.
fn lines_below(text: &str) -> Option<usize> {
    text.strip_prefix('(')?
        .strip_suffix(" lines below)")?
        .parse()
        .ok()
}
