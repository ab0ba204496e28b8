//! `cargo`, the native actor that turns Rust crates into actors (DESIGN §4): it builds a source
//! folder for `wasm32-wasip2` in release mode and publishes the `.wasm` under its `/public`.
//!
//! It is a client of the broker like any actor: requests come to its mailbox, replies go back
//! through the router. Builds run one at a time and share one target folder, so a second build
//! of a similar crate is fast. The broker never learns that Rust exists. Invariant: no code of a
//! crate runs outside the bubblewrap sandbox (see [`Builder::sandboxed_build`]), and no variable
//! of the host's environment outside [`BUILD_ENV`] reaches cargo.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::broker::Broker;
use crate::broker::principal::Principal;
use crate::broker::stdio::{Line, Lines, MAX_LINE_BYTES};
use crate::message::{ActorId, Envelope, Outgoing, Tier};
use crate::world::World;

/// A build still running after this long is killed and answered with `build_failed`.
pub const BUILD_TIME_LIMIT: Duration = Duration::from_secs(15 * 60);

/// The program that sandboxes builds (bubblewrap); without it nothing is built.
const SANDBOX: &str = "bwrap";

/// The compilation target of every actor.
pub const TARGET: &str = "wasm32-wasip2";

/// The only variables of the host's environment that `cargo fetch` and the sandboxed build see
/// (DESIGN §11); every other one is cleared, so a token of the host (`SAUSAGE_API_TOKEN`, a cloud
/// key) never reaches a build script or a proc macro, which could bake it into the `.wasm`.
/// What is kept is what cargo and rustup need to work: where programs, the home, cargo's home
/// and rustup's toolchains are; the toolchain rustup chose for the host (set when the host runs
/// under `cargo`, so builds use the same compiler); the proxies, in both spellings, and the
/// certificates a proxy that inspects TLS needs, for `cargo fetch`.
pub const BUILD_ENV: [&str; 16] = [
    "PATH",
    "HOME",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CARGO_HTTP_CAINFO",
];

/// How much of each kind of diagnostics a build keeps: the last this many bytes of the errors,
/// of the warnings and of cargo's stderr. A crate whose build prints without end (a build
/// script's `cargo:warning` lines, a macro's expansion errors) costs the host no more memory
/// than about twice this per stream; the older lines are dropped and a note at the top says how
/// many bytes. It also keeps a reply well under [`MAX_LINE_BYTES`], so an actor can forward it.
pub const DIAGNOSTICS_LIMIT: usize = 256 * 1024;

/// Cargo's progress lines, dropped from diagnostics shown to people.
const PROGRESS_WORDS: [&str; 14] = [
    "Compiling",
    "Checking",
    "Downloading",
    "Downloaded",
    "Updating",
    "Locking",
    "Adding",
    "Blocking",
    "Finished",
    "Fresh",
    "Running",
    "Building",
    "Packaging",
    "Removing",
];

/// Runs the `cargo` actor until the host stops: one request at a time, in order.
pub async fn serve(broker: Arc<Broker>) {
    let me = ActorId::parse("cargo").expect("valid id");
    let mailbox = broker.native_mailbox("cargo");
    let builder = Builder::new(broker.world.clone());
    loop {
        let request = mailbox.recv().await;
        let body = request.body_value();
        let reply = match body.get("type").and_then(Value::as_str) {
            Some("build") => match may_build(&broker.principal(&request).await) {
                Ok(()) => builder.build(&request, &body).await,
                Err(reason) => json!({"type": "error", "request": "build", "reason": reason}),
            },
            Some("undeliverable" | "shutdown") => continue,
            other => json!({
                "type": "error",
                "request": other.unwrap_or(""),
                "reason": "cargo knows one request: {\"type\": \"build\", \"source\": \"<folder with Cargo.toml>\"}",
            }),
        };
        let out = Outgoing::new(&request.from, &reply).replying_to(Some(&request.id));
        broker.send(&me, out).await;
    }
}

/// Whether the one a build is for may build (DESIGN §18: `cargo` builds for the one who asked,
/// with no power of its own): members and owners, and actors for them; not guests, nor
/// nobody.
fn may_build(principal: &Principal) -> Result<(), String> {
    match principal {
        Principal::Person(p) if p.tier >= Tier::Member => Ok(()),
        Principal::Person(p) => Err(format!(
            "{} is a guest in this world: guests cannot build; a member or an owner can (an \
             owner changes tiers with `sausage people tier {} member`)",
            p.person, p.person
        )),
        Principal::Nobody(why) => Err(format!("`build` refused: {why}")),
    }
}

/// Builds crates into the world's `cargo` folders.
struct Builder {
    world: World,
    /// The one target folder every build shares.
    target_dir: PathBuf,
    /// Where crates are copied to be built on their own.
    work_dir: PathBuf,
    /// `actor/cargo/public/builds/`: one numbered folder per successful build.
    builds_dir: PathBuf,
}

/// A crate's manifest, as far as building it needs.
struct Crate {
    /// The binary whose `.wasm` is the actor.
    binary: String,
}

impl Builder {
    fn new(world: World) -> Builder {
        let cargo = ActorId::parse("cargo").expect("valid id");
        let data = world.data_dir(&cargo);
        Builder {
            target_dir: world.cargo_target_dir(),
            work_dir: data.join("work"),
            builds_dir: world.public_dir(&cargo).join("builds"),
            world,
        }
    }

    async fn build(&self, request: &Envelope, body: &Value) -> Value {
        let given = match body.get("source") {
            Some(Value::String(source)) => source.as_str(),
            _ => {
                return json!({
                    "type": "error", "request": "build",
                    "reason": "missing field `source` (a string): the folder with the crate's Cargo.toml",
                });
            }
        };
        match self.try_build(&request.from, given).await {
            Ok(built) => built,
            Err(Failure::Request(reason)) => {
                json!({"type": "error", "request": "build", "reason": reason})
            }
            Err(Failure::Build(errors)) => {
                json!({"type": "build_failed", "source": given, "errors": errors})
            }
        }
    }

    async fn try_build(&self, sender: &ActorId, given: &str) -> Result<Value, Failure> {
        let started = Instant::now();
        let source = self
            .world
            .resolve_request_path(sender, given)
            .map_err(Failure::Request)?;
        let manifest = source.join("Cargo.toml");
        if !source.is_dir() {
            return Err(Failure::Request(format!(
                "source `{given}` is not a folder"
            )));
        }
        let text = std::fs::read_to_string(&manifest).map_err(|_| {
            Failure::Request(format!(
                "`{given}` has no Cargo.toml; point `source` at the folder of a crate"
            ))
        })?;
        let krate = read_manifest(&text, &source)
            .map_err(|e| Failure::Request(format!("`{given}`: {e}")))?;

        let work = self.work_dir.join(&krate.binary);
        stage(&source, &text, &work)
            .map_err(|e| Failure::Request(format!("cannot copy `{given}` to build it: {e}")))?;
        let (artifact, warnings) = self.cargo_build(&source, &work, &krate).await?;

        let n = next_build_number(&self.builds_dir);
        let dir = self.builds_dir.join(n.to_string());
        let wasm_name = format!("{}.wasm", krate.binary);
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::copy(&artifact, dir.join(&wasm_name)).map(drop))
            .map_err(|e| Failure::Request(format!("cannot publish the build: {e}")))?;
        Ok(json!({
            "type": "built",
            "wasm": format!("/actor/cargo/public/builds/{n}/{wasm_name}"),
            "source": given,
            "built_by": "cargo",
            "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            "warnings": warnings,
        }))
    }

    /// Fetches the crate's dependencies, then builds it in the sandbox; returns the built
    /// `.wasm` and the rendered warnings. Both steps together get [`BUILD_TIME_LIMIT`].
    async fn cargo_build(
        &self,
        source: &Path,
        work: &Path,
        krate: &Crate,
    ) -> Result<(PathBuf, String), Failure> {
        let steps = async {
            fetch(work).await?;
            self.sandboxed_build(source, work, krate).await
        };
        tokio::time::timeout(BUILD_TIME_LIMIT, steps)
            .await
            .map_err(|_| {
                Failure::Build(format!(
                    "the build ran longer than {} minutes and was stopped",
                    BUILD_TIME_LIMIT.as_secs() / 60
                ))
            })?
    }

    /// Runs `cargo build --offline` under bubblewrap. The build sees the host read-only, with a
    /// private `/tmp`, `/dev` and `/proc`, no network and no other processes; it writes only the
    /// staged crate and the shared target folder. The world (where sources and their path
    /// dependencies live) is bound read-only again over the private `/tmp`, since worlds may live
    /// there. Cargo's home stays read-only: [`fetch`] already downloaded and unpacked every
    /// dependency, and cargo skips its `.package-cache` lock on a read-only file system, so
    /// nothing there needs writing, and a build script cannot tamper with the sources later
    /// builds use.
    async fn sandboxed_build(
        &self,
        source: &Path,
        work: &Path,
        krate: &Crate,
    ) -> Result<(PathBuf, String), Failure> {
        std::fs::create_dir_all(&self.target_dir)
            .map_err(|e| Failure::Request(format!("cannot create the target folder: {e}")))?;
        let real = |path: &Path| {
            std::fs::canonicalize(path)
                .map_err(|e| Failure::Request(format!("{}: {e}", path.display())))
        };
        let (root, source, work, target) = (
            real(self.world.root())?,
            real(source)?,
            real(work)?,
            real(&self.target_dir)?,
        );
        let mut command = tokio::process::Command::new(SANDBOX);
        command
            .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"])
            .args(["--tmpfs", "/tmp"]);
        for (how, path) in [
            ("--ro-bind", &root),
            ("--ro-bind", &source),
            ("--bind", &work),
            ("--bind", &target),
        ] {
            command.arg(how).arg(path).arg(path);
        }
        // Secrets stay out of reach: a build script could otherwise read a token and bake it
        // into the `.wasm` it builds.
        let credentials = self.world.credentials_dir();
        if let Ok(credentials) = std::fs::canonicalize(credentials) {
            command.arg("--tmpfs").arg(credentials);
        }
        let child = command
            .args([
                "--unshare-net",
                "--unshare-pid",
                "--die-with-parent",
                "--new-session",
            ])
            .args(["--", "cargo", "build", "--offline", "--release"])
            .args(["--color", "never", "--message-format", "json"])
            .args([
                "--target",
                TARGET,
                "--bin",
                &krate.binary,
                "--manifest-path",
            ])
            .arg(work.join("Cargo.toml"))
            .env_clear()
            .envs(build_env())
            .env("CARGO_TARGET_DIR", &target)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Failure::Request(
                    "cannot sandbox the build: bubblewrap (`bwrap`) is not installed, and builds \
                     never run without it; install it (Debian: `apt-get install bubblewrap`)"
                        .into(),
                ),
                _ => Failure::Request(format!("cannot run bubblewrap (`bwrap`): {e}")),
            })?;
        let mut report = Report::default();
        let (succeeded, stderr) = run_to_end(child, |line| report.read(line, &krate.binary)).await;
        match report.artifact {
            Some(artifact) if succeeded => Ok((artifact, report.warnings.finish())),
            _ if !report.errors.is_empty() => Err(Failure::Build(report.errors.finish())),
            _ => Err(Failure::Build(stderr)),
        }
    }
}

/// Downloads (and unpacks) the dependencies of the staged crate into cargo's home, outside the
/// sandbox: this is the one step with network, and it runs no code of the crate's (no build
/// script, no proc macro), so the build that follows can be offline.
async fn fetch(work: &Path) -> Result<(), Failure> {
    let child = tokio::process::Command::new("cargo")
        .args(["fetch", "--color", "never", "--manifest-path"])
        .arg(work.join("Cargo.toml"))
        .env_clear()
        .envs(build_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Failure::Request(format!("cannot run cargo: {e}; is Rust installed?")))?;
    match run_to_end(child, |_| {}).await {
        (true, _) => Ok(()),
        (false, stderr) => Err(Failure::Build(stderr)),
    }
}

/// The host's values of the [`BUILD_ENV`] variables it has.
fn build_env() -> impl Iterator<Item = (&'static str, std::ffi::OsString)> {
    BUILD_ENV
        .into_iter()
        .filter_map(|name| Some((name, std::env::var_os(name)?)))
}

/// Waits for a cargo command to end, reading its stdout and its stderr at the same time: read
/// one after the other, a child that fills the pipe not being read (64 KiB) would block on it
/// and never end. Each stdout line goes to `each_line`; returns whether the command succeeded
/// and the last [`DIAGNOSTICS_LIMIT`] bytes of its stderr without progress lines.
async fn run_to_end(
    mut child: tokio::process::Child,
    each_line: impl FnMut(&str),
) -> (bool, String) {
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut text = Tail::default();
    tokio::join!(
        read_lines(stdout, each_line),
        read_lines(stderr, |line| {
            if !is_progress(line) {
                text.push(line);
            }
        }),
    );
    let succeeded = child.wait().await.is_ok_and(|s| s.success());
    (succeeded, text.finish())
}

/// Calls `each` with every line of `from` until it ends; a line longer than
/// [`MAX_LINE_BYTES`] is replaced by a note, so no line costs the host more than that. A read
/// error ends the stream: it only loses detail, the exit status still tells the outcome.
async fn read_lines(from: impl AsyncRead + Unpin, mut each: impl FnMut(&str)) {
    let mut from = BufReader::new(from);
    let mut lines = Lines::default();
    let mut each_line = |line: Line<'_>| match line {
        Line::Whole(bytes) => each(&String::from_utf8_lossy(bytes)),
        Line::Overlong => each(&format!(
            "[a line longer than {MAX_LINE_BYTES} bytes was left out]"
        )),
    };
    loop {
        let read = match from.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(bytes) => {
                lines.push(bytes, &mut each_line);
                bytes.len()
            }
        };
        from.consume(read);
    }
    // A last line without its newline; at worst this adds an empty line, which nobody sees.
    lines.push(b"\n", &mut each_line);
}

enum Failure {
    /// The request cannot be built as asked: an `error` reply.
    Request(String),
    /// The compiler (or cargo) refused the crate: a `build_failed` reply.
    Build(String),
}

/// What cargo's JSON messages said.
#[derive(Default)]
struct Report {
    errors: Tail,
    warnings: Tail,
    artifact: Option<PathBuf>,
}

impl Report {
    fn read(&mut self, line: &str, binary: &str) {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            return;
        };
        match message["reason"].as_str() {
            Some("compiler-message") => {
                let rendered = message["message"]["rendered"]
                    .as_str()
                    .unwrap_or("")
                    .trim_end();
                match message["message"]["level"].as_str() {
                    Some("error" | "error: internal compiler error") => self.errors.push(rendered),
                    Some("warning") => self.warnings.push(rendered),
                    _ => {}
                }
            }
            Some("compiler-artifact") if message["target"]["name"] == binary => {
                self.artifact = message["filenames"]
                    .as_array()
                    .and_then(|files| {
                        files
                            .iter()
                            .filter_map(Value::as_str)
                            .find(|f| f.ends_with(".wasm"))
                    })
                    .map(PathBuf::from);
            }
            _ => {}
        }
    }
}

/// The last [`DIAGNOSTICS_LIMIT`] bytes of diagnostics pushed line by line, cut at a line's
/// start where one fits.
#[derive(Default)]
struct Tail {
    /// What is kept: at most twice the limit between trims, so pushes stay cheap.
    text: String,
    /// How many bytes were cut from the front.
    dropped: usize,
}

impl Tail {
    fn push(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
        if self.text.len() > 2 * DIAGNOSTICS_LIMIT {
            self.trim();
        }
    }

    fn is_empty(&self) -> bool {
        self.text.is_empty() && self.dropped == 0
    }

    /// Cuts the front down to the limit: at the next line's start, or mid-line (on a
    /// character) when the last line alone is longer than the limit.
    fn trim(&mut self) {
        let mut cut = self.text.len().saturating_sub(DIAGNOSTICS_LIMIT);
        if cut == 0 {
            return;
        }
        while !self.text.is_char_boundary(cut) {
            cut += 1;
        }
        let at_line_start = self.text.as_bytes()[cut - 1] == b'\n';
        if let Some(n) = self.text[cut..]
            .trim_end()
            .find('\n')
            .filter(|_| !at_line_start)
        {
            cut += n + 1;
        }
        self.text.drain(..cut);
        self.dropped += cut;
    }

    /// The text kept, with a note first when some was cut.
    fn finish(mut self) -> String {
        self.trim();
        let text = self.text.trim();
        match self.dropped {
            0 => text.to_string(),
            n => format!("[{n} earlier bytes of diagnostics were left out]\n{text}"),
        }
    }
}

/// Reads the package's binary name out of its manifest.
fn read_manifest(text: &str, source: &Path) -> Result<Crate, String> {
    let manifest: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| format!("Cargo.toml is not valid TOML: {e}"))?;
    let package = manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .ok_or("Cargo.toml has no [package] name; point `source` at a crate, not a workspace")?;
    let bins: Vec<String> = manifest
        .get("bin")
        .and_then(|b| b.as_array_of_tables())
        .map(|tables| {
            tables
                .iter()
                .filter_map(|t| t.get("name")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let binary = match bins.as_slice() {
        [] if source.join("src/main.rs").is_file() => package.to_string(),
        [] => {
            return Err(
                "the crate has no binary (no src/main.rs and no [[bin]]); an actor is a program"
                    .into(),
            );
        }
        [one] => one.clone(),
        many if many.iter().any(|b| b == package) => package.to_string(),
        many => {
            return Err(format!(
                "the crate has several binaries ({}); keep one, or name one like the package",
                many.join(", ")
            ));
        }
    };
    Ok(Crate { binary })
}

/// Copies the crate to `work` so it builds on its own: the copy's manifest gets an empty
/// `[workspace]` (so no parent workspace claims it) and absolute paths for path dependencies.
/// File times are kept, so an unchanged crate is not rebuilt.
fn stage(source: &Path, manifest: &str, work: &Path) -> std::io::Result<()> {
    if work.exists() {
        std::fs::remove_dir_all(work)?;
    }
    copy_crate(source, work)?;
    let mut doc: toml_edit::DocumentMut = manifest
        .parse()
        .map_err(|e| std::io::Error::other(format!("Cargo.toml: {e}")))?;
    if !doc.contains_key("workspace") {
        doc["workspace"] = toml_edit::table();
    }
    absolute_path_dependencies(doc.as_table_mut(), source);
    if let Some(targets) = doc.get_mut("target").and_then(|t| t.as_table_like_mut()) {
        for (_, target) in targets.iter_mut() {
            if let Some(target) = target.as_table_like_mut() {
                absolute_path_dependencies(target, source);
            }
        }
    }
    let staged = work.join("Cargo.toml");
    let times = std::fs::metadata(source.join("Cargo.toml"))?.modified()?;
    std::fs::write(&staged, doc.to_string())?;
    std::fs::File::options()
        .write(true)
        .open(&staged)?
        .set_modified(times)
}

/// Makes the `path` of every dependency in `table`'s dependency sections absolute, relative to
/// the crate's real folder.
fn absolute_path_dependencies(table: &mut dyn toml_edit::TableLike, source: &Path) {
    for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
        let Some(deps) = table.get_mut(section).and_then(|d| d.as_table_like_mut()) else {
            continue;
        };
        for (_, dep) in deps.iter_mut() {
            let Some(dep) = dep.as_table_like_mut() else {
                continue;
            };
            let Some(path) = dep.get("path").and_then(|p| p.as_str()) else {
                continue;
            };
            let absolute = source.join(path);
            dep.insert(
                "path",
                toml_edit::value(absolute.to_string_lossy().as_ref()),
            );
        }
    }
}

/// Copies a crate's files, leaving out `target/` and hidden folders such as `.git`.
fn copy_crate(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        let kind = entry.file_type()?;
        let target = to.join(&name);
        if kind.is_dir() {
            if name == "target" || name.to_string_lossy().starts_with('.') {
                continue;
            }
            copy_crate(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
            let times = entry.metadata()?.modified()?;
            std::fs::File::options()
                .write(true)
                .open(&target)?
                .set_modified(times)?;
        }
    }
    Ok(())
}

fn next_build_number(builds: &Path) -> u64 {
    std::fs::read_dir(builds)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
        + 1
}

/// Whether a line of cargo's stderr is a progress line.
fn is_progress(line: &str) -> bool {
    let first = line.split_whitespace().next().unwrap_or("");
    line.starts_with(' ') && PROGRESS_WORDS.contains(&first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binary_comes_from_the_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        let read = |text: &str| read_manifest(text, src).map(|c| c.binary);
        assert!(
            read("[package]\nname = \"x\"")
                .unwrap_err()
                .contains("no binary")
        );
        std::fs::create_dir(src.join("src")).unwrap();
        std::fs::write(src.join("src/main.rs"), "fn main() {}").unwrap();
        assert_eq!(read("[package]\nname = \"x\"").unwrap(), "x");
        assert_eq!(
            read("[package]\nname = \"x\"\n[[bin]]\nname = \"y\"").unwrap(),
            "y"
        );
        assert!(
            read("[package]\nname = \"x\"\n[[bin]]\nname = \"y\"\n[[bin]]\nname = \"z\"")
                .unwrap_err()
                .contains("several binaries")
        );
        assert!(
            read("[workspace]\nmembers = []")
                .unwrap_err()
                .contains("not a workspace")
        );
        assert!(read("not toml [").unwrap_err().contains("not valid TOML"));
    }

    #[test]
    fn a_staged_crate_is_its_own_workspace_with_absolute_path_dependencies() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("crate");
        std::fs::create_dir_all(source.join("src")).unwrap();
        std::fs::create_dir_all(source.join("target/junk")).unwrap();
        std::fs::write(source.join("src/main.rs"), "fn main() {}").unwrap();
        let manifest = "[package]\nname = \"x\"\n[dependencies]\nproto = { path = \"../proto\" }\nserde = \"1\"\n[target.'cfg(unix)'.dependencies]\nlib = { path = \"lib\" }\n";
        std::fs::write(source.join("Cargo.toml"), manifest).unwrap();
        let work = dir.path().join("work");
        stage(&source, manifest, &work).unwrap();
        let staged = std::fs::read_to_string(work.join("Cargo.toml")).unwrap();
        assert!(staged.contains("[workspace]"), "{staged}");
        let proto = source.join("../proto");
        assert!(
            staged.contains(&format!("path = \"{}\"", proto.display())),
            "{staged}"
        );
        assert!(
            staged.contains(&format!("path = \"{}\"", source.join("lib").display())),
            "{staged}"
        );
        assert!(work.join("src/main.rs").is_file());
        assert!(!work.join("target").exists(), "target/ is not copied");
    }

    #[test]
    fn progress_lines_are_removed() {
        let stderr = "    Updating crates.io index\n   Compiling x v0.1.0\nerror: could not find `Cargo.toml`\n  Downloaded y\n";
        let kept: Vec<&str> = stderr.lines().filter(|l| !is_progress(l)).collect();
        assert_eq!(kept, ["error: could not find `Cargo.toml`"]);
    }

    #[test]
    fn diagnostics_keep_their_last_lines_within_the_limit() {
        let mut tail = Tail::default();
        tail.push("first");
        assert_eq!(tail.finish(), "first");

        let mut tail = Tail::default();
        let line = "x".repeat(999);
        for _ in 0..(3 * DIAGNOSTICS_LIMIT / 1000) {
            tail.push(&line);
        }
        tail.push("the end");
        let text = tail.finish();
        let (note, kept) = text.split_once('\n').unwrap();
        assert!(
            note.ends_with("earlier bytes of diagnostics were left out]"),
            "{note}"
        );
        assert!(kept.len() <= DIAGNOSTICS_LIMIT, "{}", kept.len());
        assert!(kept.len() > DIAGNOSTICS_LIMIT - 1000, "{}", kept.len());
        assert!(kept.starts_with(&line) && kept.ends_with("\nthe end"));

        let mut tail = Tail::default();
        tail.push(&"é".repeat(DIAGNOSTICS_LIMIT));
        let text = tail.finish();
        assert!(text.lines().nth(1).unwrap().len() <= DIAGNOSTICS_LIMIT);
    }
}
