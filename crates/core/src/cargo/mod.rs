//! `cargo`, the native actor that turns Rust crates into actors (DESIGN §4): it builds a source
//! folder for `wasm32-wasip2` in release mode and publishes the `.wasm` under its `/public`.
//!
//! It is a client of the broker like any actor: requests come to its mailbox, replies go back
//! through the router. Builds run one at a time, each in the target folder of its principal
//! (DESIGN §18), so a second build of a similar crate for the same person is fast. The broker
//! never learns that Rust exists. Invariant: no code of a crate runs outside the [`jail`]
//! (DESIGN §28), which sees nothing of the world but the staged crate and its principal's target
//! folder; the one step outside it, `cargo fetch`, runs no code of the crate and reaches only the
//! package registry ([`registry_only`]), and no variable of the host's environment outside
//! [`BUILD_ENV`] reaches it.

pub mod jail;

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::broker::Broker;
use crate::broker::counters::Counters;
use crate::broker::principal::Principal;
use crate::broker::stdio::{Line, Lines, MAX_LINE_BYTES};
use crate::message::{ActorId, Envelope, Outgoing, Tier};
use crate::traces::{self, Span};
use crate::world::World;

/// A build still running after this long is killed and answered with `build_failed`.
pub const BUILD_TIME_LIMIT: Duration = Duration::from_secs(15 * 60);

/// The compilation target of every actor.
pub const TARGET: &str = "wasm32-wasip2";

/// The one sender whose crates may have path dependencies outside their own folder: the
/// terminal console, whose owner may name any path of the machine (DESIGN §18).
const CONSOLE: &str = "console";

/// The most path dependencies outside the crate's folder that a build of the console's owner
/// binds into the jail, counted over all the crates they lead to; past it the build is
/// refused, so a chain of manifests cannot make the host walk the disk without end.
pub const MAX_OUTSIDE_DEPENDENCIES: usize = 64;

/// The only variables of the host's environment that `cargo fetch` sees (DESIGN §11); every other
/// one is cleared, so a token of the host (`SAUSAGE_API_TOKEN`, a cloud key) never reaches it. The
/// build in the jail sees none of them ([`jail::View::env`]). What is kept is what cargo and
/// rustup need to fetch: where programs, the home, cargo's home and rustup's toolchains are; the
/// toolchain rustup chose for the host (set when the host runs under `cargo`); the proxies, in
/// both spellings, and the certificates a proxy that inspects TLS needs.
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

/// Compiles a build into the component cache as soon as it is published, on the blocking pool
/// and without waiting for it, so an `upgrade` or `/deploy` of it finds it compiled (one that
/// comes first waits for this compile rather than making its own). A build that does not
/// compile is refused when it is used, with why.
fn precompile(broker: &Broker, built: &Value) {
    let Some(rest) = built["wasm"]
        .as_str()
        .and_then(|w| w.strip_prefix("/actor/cargo/public/"))
    else {
        return;
    };
    let cargo = ActorId::parse("cargo").expect("valid id");
    let path = broker.world.public_dir(&cargo).join(rest);
    let runtime = broker.runtime.clone();
    tokio::task::spawn_blocking(move || {
        let compiled = std::fs::read(&path)
            .map_err(anyhow::Error::from)
            .and_then(|bytes| runtime.compile(&bytes));
        if let Err(e) = compiled {
            tracing::debug!("cargo: {} is not compiled ahead: {e:#}", path.display());
        }
    });
}

/// Runs the `cargo` actor until the host stops: one request at a time, in order.
pub async fn serve(broker: Arc<Broker>) {
    let me = ActorId::parse("cargo").expect("valid id");
    let mailbox = broker.native_mailbox("cargo");
    let builder = Builder::new(broker.world.clone());
    let old = broker.world.old_cargo_build_dirs();
    match tokio::task::spawn_blocking(move || retire_old_build_dirs(&old)).await {
        Ok(Ok(false)) => {}
        Ok(Ok(true)) => tracing::info!(
            "cargo: removed the build folders kept inside the world (private/cargo/data/target \
             and work); builds now keep them outside it, where their jail shows no path of the \
             world"
        ),
        Ok(Err(e)) => tracing::warn!(
            "cargo: cannot remove the build folders kept inside the world ({e}); remove \
             private/cargo/data/target and private/cargo/data/work by hand"
        ),
        Err(e) => tracing::warn!("cargo: the removal of the old build folders failed: {e}"),
    }
    loop {
        let request = mailbox.recv().await;
        let body = request.body_value();
        let mut span = Span::start("build", Some(request.trace));
        let trace = span.trace();
        let reply = match body.get("type").and_then(Value::as_str) {
            Some("build") => match may_build(&broker.principal(&request).await) {
                Ok(person) => {
                    span.set("sausage.person", person.clone());
                    if let Some(source) = body.get("source").and_then(Value::as_str) {
                        span.set("sausage.source", source.to_string());
                    }
                    let started = Instant::now();
                    let built =
                        traces::handling(trace, builder.build(&request, &person, &body)).await;
                    let ok = built["type"] == "built";
                    let counter = match ok {
                        true => &broker.counters.builds_ok,
                        false => &broker.counters.builds_failed,
                    };
                    Counters::add(counter, 1);
                    if ok {
                        let seconds = started.elapsed().as_secs_f64();
                        broker.counters.durations.builds.observe(seconds);
                        precompile(&broker, &built);
                    }
                    if !ok {
                        span.fail(built["type"].as_str().unwrap_or("error").to_string());
                    }
                    span.end();
                    built
                }
                Err(reason) => json!({"type": "error", "request": "build", "reason": reason}),
            },
            Some("undeliverable" | "shutdown") => continue,
            other => json!({
                "type": "error",
                "request": other.unwrap_or(""),
                "reason": "cargo knows one request: {\"type\": \"build\", \"source\": \"<folder with Cargo.toml>\"}",
            }),
        };
        let mut out = Outgoing::new(&request.from, &reply).replying_to(Some(&request.id));
        out.trace = Some(trace);
        broker.send(&me, out).await;
    }
}

/// Whether the one a build is for may build (DESIGN §18: `cargo` builds for the one who asked,
/// with no power of its own): members and owners, and actors for them; not guests, nor
/// nobody. `Ok` is the person whose target folder the build uses: builds of different people
/// never share one.
fn may_build(principal: &Principal) -> Result<String, String> {
    match principal {
        Principal::Person(p) if p.tier >= Tier::Member => Ok(p.person.to_string()),
        Principal::Person(p) => Err(format!(
            "{} is a guest in this world: guests cannot build; a member or an owner can (an \
             owner changes tiers with `sausage people tier {} member`)",
            p.person, p.person
        )),
        Principal::Nobody(why) => Err(format!("`build` refused: {why}")),
    }
}

/// Removes the build folders an older Sausage kept inside the world (`private/cargo/data/target`
/// and `work`): a jail would show their path, and their artefacts may come from anyone's build
/// script. Returns whether there were any.
fn retire_old_build_dirs(dirs: &[PathBuf]) -> std::io::Result<bool> {
    let mut removed = false;
    for dir in dirs.iter().filter(|dir| dir.exists()) {
        std::fs::remove_dir_all(dir)?;
        removed = true;
    }
    Ok(removed)
}

/// Builds crates into the world's build cache and publishes them under `cargo`'s `/public`.
struct Builder {
    world: World,
    /// `actor/cargo/public/builds/`: one numbered folder per successful build.
    builds_dir: PathBuf,
    /// Whether this machine made the jail whole once ([`jail::check`]); until it has, each
    /// build checks again, so a machine fixed while the host runs builds from then on.
    jail_checked: std::sync::atomic::AtomicBool,
}

/// One build: what is built, for whom, and what its jail binds.
struct Job {
    /// The binary whose `.wasm` is the actor.
    binary: String,
    /// The staged copy of the crate, the only folder of it the build sees (read-only).
    work: PathBuf,
    /// The principal's target folder (writable).
    target: PathBuf,
    /// The canonical folders of path dependencies outside the crate, bound read-only at their
    /// own paths (their manifests name each other by relative paths): only ever non-empty for
    /// the console's owner, who may name any path of the machine.
    outside: Vec<PathBuf>,
    /// The crate's folder as the request gave it, which diagnostics name instead of the places
    /// where the build saw it.
    given: String,
}

impl Job {
    /// `text` with the staged crate's paths, on the host and in the jail, said as the folder
    /// the request gave: a person reads their own paths, and no path of the host reaches them.
    fn guest_paths(&self, text: &str) -> String {
        let given = self.given.trim_end_matches('/');
        text.replace(&self.work.display().to_string(), given)
            .replace(jail::JAIL_CRATE, given)
    }
}

impl Builder {
    fn new(world: World) -> Builder {
        let cargo = ActorId::parse("cargo").expect("valid id");
        Builder {
            builds_dir: world.public_dir(&cargo).join("builds"),
            world,
            jail_checked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    async fn build(&self, request: &Envelope, principal: &str, body: &Value) -> Value {
        let given = match body.get("source") {
            Some(Value::String(source)) => source.as_str(),
            _ => {
                return json!({
                    "type": "error", "request": "build",
                    "reason": "missing field `source` (a string): the folder with the crate's Cargo.toml",
                });
            }
        };
        match self.try_build(request, principal, given).await {
            Ok(built) => built,
            Err(Failure::Request(reason)) => {
                json!({"type": "error", "request": "build", "reason": reason})
            }
            Err(Failure::Build(errors)) => {
                json!({"type": "build_failed", "source": given, "errors": errors})
            }
        }
    }

    async fn try_build(
        &self,
        request: &Envelope,
        principal: &str,
        given: &str,
    ) -> Result<Value, Failure> {
        let started = Instant::now();
        if principal.is_empty()
            || !principal
                .bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_'))
        {
            return Err(Failure::Request(format!(
                "principal `{principal}` cannot name a target folder; this is a bug of the host"
            )));
        }
        let source = self
            .world
            .resolve_request_path(&request.from, given)
            .map_err(Failure::Request)?;
        if !source.is_dir() {
            return Err(Failure::Request(format!(
                "source `{given}` is not a folder"
            )));
        }
        let source = std::fs::canonicalize(&source)
            .map_err(|e| Failure::Request(format!("source `{given}`: {e}")))?;
        let text = std::fs::read_to_string(source.join("Cargo.toml")).map_err(|_| {
            Failure::Request(format!(
                "`{given}` has no Cargo.toml; point `source` at the folder of a crate"
            ))
        })?;
        let binary = read_manifest(&text, &source)
            .map_err(|e| Failure::Request(format!("`{given}`: {e}")))?;
        let outside_allowed = request.from.as_str() == CONSOLE;
        let (manifest, outside) = staged_manifest(&text, &source, outside_allowed)
            .map_err(|e| Failure::Request(format!("`{given}`: {e}")))?;

        registry_only(&manifest).map_err(|e| Failure::Request(format!("`{given}`: {e}")))?;
        check_cargo_is_visible()?;
        self.check_jail().await?;

        let job = Job {
            work: (self.world.cargo_work_dir_of(principal, &binary)).map_err(Failure::Request)?,
            target: self
                .world
                .cargo_target_dir_of(principal)
                .map_err(Failure::Request)?,
            binary,
            outside,
            given: given.to_string(),
        };
        stage(&source, &manifest, &job.work)
            .map_err(|e| Failure::Request(format!("cannot copy `{given}` to build it: {e}")))?;
        let (wasm, warnings) = self.cargo_build(&job).await?;

        let n = next_build_number(&self.builds_dir);
        let dir = self.builds_dir.join(n.to_string());
        let wasm_name = format!("{}.wasm", job.binary);
        std::fs::create_dir_all(&dir)
            .and_then(|()| crate::fs::write_atomically(&dir.join(&wasm_name), &wasm))
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

    /// Refuses the build unless this machine makes the jail whole (checked until it once did).
    async fn check_jail(&self) -> Result<(), Failure> {
        use std::sync::atomic::Ordering;
        if self.jail_checked.load(Ordering::Relaxed) {
            return Ok(());
        }
        jail::check().await.map_err(Failure::Request)?;
        self.jail_checked.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Fetches the crate's dependencies, then builds it in the jail; returns the built
    /// component and the rendered warnings. Both steps together get [`BUILD_TIME_LIMIT`].
    async fn cargo_build(&self, job: &Job) -> Result<(Vec<u8>, String), Failure> {
        let steps = async {
            fetch(&job.work).await?;
            self.jailed_build(job).await
        };
        let built = tokio::time::timeout(BUILD_TIME_LIMIT, steps)
            .await
            .map_err(|_| {
                Failure::Build(format!(
                    "the build ran longer than {} minutes and was stopped",
                    BUILD_TIME_LIMIT.as_secs() / 60
                ))
            })?;
        match built {
            Ok((wasm, warnings)) => Ok((wasm, job.guest_paths(&warnings))),
            Err(Failure::Build(errors)) => Err(Failure::Build(job.guest_paths(&errors))),
            Err(other) => Err(other),
        }
    }

    /// Runs `cargo build --frozen` in the [`jail`]: the staged crate read-only at
    /// [`jail::JAIL_CRATE`], the principal's target folder at [`jail::JAIL_TARGET`], the
    /// toolchain and cargo's download cache read-only, the console owner's outside path
    /// dependencies read-only (with the world's credentials and secrets hidden when one holds
    /// them). Cargo's home is read-only: [`fetch`] already downloaded and unpacked every
    /// dependency and wrote `Cargo.lock`, and cargo skips its `.package-cache` lock on a
    /// read-only file system, so a build script cannot tamper with the sources later builds use. The artefact is taken by
    /// [`jail::take_artifact`] once the jail, and every process in it, has ended.
    async fn jailed_build(&self, job: &Job) -> Result<(Vec<u8>, String), Failure> {
        std::fs::create_dir_all(&job.target)
            .and_then(|()| jail::own_target(&job.target))
            .map_err(|e| Failure::Request(format!("cannot prepare the target folder: {e}")))?;
        let real = |path: &Path| {
            std::fs::canonicalize(path)
                .map_err(|e| Failure::Request(format!("cannot find a build folder: {e}")))
        };
        let (work, target) = (real(&job.work)?, real(&job.target)?);
        let mut view = jail::View::default().with_toolchain();
        view.read_only.push((work, PathBuf::from(jail::JAIL_CRATE)));
        for dir in &job.outside {
            view.read_only.push((dir.clone(), dir.clone()));
        }
        view.writable = Some((target.clone(), PathBuf::from(jail::JAIL_TARGET)));
        // Secrets stay out of reach even when a path dependency of the console's owner lies
        // around them: a build script could otherwise read a token and bake it into the `.wasm`.
        for secrets in [self.world.credentials_dir(), self.world.secrets_dir()] {
            if let Ok(secrets) = std::fs::canonicalize(secrets)
                && job.outside.iter().any(|dir| secrets.starts_with(dir))
            {
                view.hidden.push(secrets);
            }
        }
        let manifest = Path::new(jail::JAIL_CRATE).join("Cargo.toml");
        let program: Vec<&OsStr> = [
            "cargo",
            "build",
            "--frozen",
            "--release",
            "--color",
            "never",
            "--message-format",
            "json",
            "--target",
            TARGET,
            "--bin",
            &job.binary,
            "--manifest-path",
        ]
        .into_iter()
        .map(OsStr::new)
        .chain([manifest.as_os_str()])
        .collect();
        let jailed = jail::command(&view, &program).map_err(Failure::Request)?;
        let mut command = jailed.command;
        let child = command
            .spawn()
            .map_err(|e| Failure::Request(format!("cannot start the build's jail: {e}")))?;
        let mut report = Report::default();
        let (succeeded, stderr) = run_to_end(child, |line| report.read(line, &job.binary)).await;
        match report.artifact {
            Some(artifact) if succeeded => {
                // Cargo names the artefact as the jail sees it; the host finds it in the
                // principal's target folder.
                let inside = artifact.strip_prefix(jail::JAIL_TARGET).map_err(|_| {
                    Failure::Build(format!(
                        "cargo put the `.wasm` at {}, outside the target folder",
                        artifact.display()
                    ))
                })?;
                let wasm = jail::take_artifact(&target, inside).map_err(Failure::Build)?;
                Ok((wasm, report.warnings.finish()))
            }
            _ if !report.errors.is_empty() => Err(Failure::Build(report.errors.finish())),
            _ => Err(Failure::Build(stderr)),
        }
    }
}

/// Refuses a build whose `cargo` (the first on `PATH`) the jail would not show: it lies neither
/// in a system folder nor in cargo's or rustup's home.
fn check_cargo_is_visible() -> Result<(), Failure> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let Some(cargo) = std::env::split_paths(&path)
        .map(|dir| dir.join("cargo"))
        .find(|file| file.is_file())
    else {
        return Err(Failure::Request(
            "cannot build: `cargo` is not on PATH; install Rust (https://rustup.rs)".into(),
        ));
    };
    let real = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let seen = real(&cargo);
    let toolchain = jail::View::default().with_toolchain();
    let visible = jail::SYSTEM_DIRS
        .iter()
        .map(Path::new)
        .chain(toolchain.read_only.iter().map(|(host, _)| host.as_path()))
        .any(|dir| seen.starts_with(real(dir)));
    if visible {
        Ok(())
    } else {
        Err(Failure::Request(format!(
            "cannot build: cargo ({}) lies outside what the build jail shows (/usr, cargo's \
             home and rustup's home); install Rust with rustup or the system's packages",
            cargo.display()
        )))
    }
}

/// Downloads (and unpacks) the dependencies of the staged crate into cargo's home and writes its
/// `Cargo.lock`, outside the jail: this is the one step with network, it runs no code of the
/// crate's (no build script, no proc macro), and it reaches only the package registry
/// ([`registry_only`] refused every other source before), so the build that follows is offline.
/// It runs in the staged folder, which holds no `.cargo/` and no `rust-toolchain` file, so
/// neither cargo's configuration nor rustup's choice of toolchain comes from the crate.
async fn fetch(work: &Path) -> Result<(), Failure> {
    let child = tokio::process::Command::new("cargo")
        .args(["fetch", "--color", "never", "--manifest-path"])
        .arg(work.join("Cargo.toml"))
        .current_dir(work)
        .env_clear()
        .envs(build_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Failure::Request(format!("cannot run cargo: {e}; is Rust installed?")))?;
    match run_to_end(child, |_| {}).await {
        // The jail's user reads the lock cargo wrote, whatever the host's umask.
        (true, _) => std::fs::set_permissions(
            work.join("Cargo.lock"),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .map_err(|e| Failure::Request(format!("cannot share Cargo.lock with the build: {e}"))),
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
fn read_manifest(text: &str, source: &Path) -> Result<String, String> {
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
    Ok(binary)
}

/// The manifest the staged copy is built with, and the outside folders its build binds: it
/// gets an empty `[workspace]` (so no parent workspace claims it), and each path dependency
/// (in every dependency section, `[patch]` and `[replace]`) a new `path`: one inside the
/// crate's folder becomes relative to it (the staged copy has it); one outside it, allowed only
/// when `outside_allowed`, becomes the absolute path of its real folder, which is returned
/// together with the outside folders its own path dependencies lead to. Otherwise the build is
/// refused here, before anything runs.
fn staged_manifest(
    manifest: &str,
    source: &Path,
    outside_allowed: bool,
) -> Result<(String, Vec<PathBuf>), String> {
    let mut doc: toml_edit::DocumentMut = manifest
        .parse()
        .map_err(|e| format!("Cargo.toml is not valid TOML: {e}"))?;
    if !doc.contains_key("workspace") {
        doc["workspace"] = toml_edit::table();
    }
    let mut outside = Vec::new();
    for_each_path_dependency(&mut doc, &mut |name, path| {
        let at = lexical(&source.join(&*path));
        if let Ok(inside) = at.strip_prefix(source) {
            *path = match inside.to_str() {
                Some("") => ".".to_string(),
                Some(inside) => inside.to_string(),
                None => return Err(format!("path dependency `{name}`: its path is not UTF-8")),
            };
            return Ok(());
        }
        if !outside_allowed {
            return Err(format!(
                "path dependency `{name}` (`{path}`) lies outside the crate's folder, and only \
                 the terminal console's owner may build with one; copy it into the crate's \
                 folder and point its `path` there"
            ));
        }
        let real = std::fs::canonicalize(&at)
            .ok()
            .filter(|real| real.is_dir())
            .ok_or_else(|| format!("path dependency `{name}` (`{path}`) is not a folder"))?;
        *path = real.to_string_lossy().into_owned();
        outside.push(real);
        Ok(())
    })?;
    let outside = with_their_dependencies(outside)?;
    Ok((doc.to_string(), outside))
}

/// `outside` and the outside folders their own path dependencies lead to, each once and none
/// inside another, at most [`MAX_OUTSIDE_DEPENDENCIES`] of them. A dependency whose manifest
/// cannot be read adds nothing: cargo says what is wrong with it.
fn with_their_dependencies(mut outside: Vec<PathBuf>) -> Result<Vec<PathBuf>, String> {
    let mut seen: Vec<PathBuf> = Vec::new();
    while let Some(dir) = outside.pop() {
        if seen.iter().any(|s| dir.starts_with(s)) {
            continue;
        }
        seen.retain(|s| !s.starts_with(&dir));
        seen.push(dir.clone());
        if seen.len() > MAX_OUTSIDE_DEPENDENCIES {
            return Err(format!(
                "its path dependencies lead to more than {MAX_OUTSIDE_DEPENDENCIES} folders \
                 outside it; build with fewer"
            ));
        }
        let Ok(text) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let Ok(mut doc) = text.parse::<toml_edit::DocumentMut>() else {
            continue;
        };
        let _ = for_each_path_dependency(&mut doc, &mut |_, path| {
            let at = lexical(&dir.join(&*path));
            if let Ok(real) = std::fs::canonicalize(&at)
                && !real.starts_with(&dir)
            {
                outside.push(real);
            }
            Ok(())
        });
    }
    Ok(seen)
}

/// Refuses a manifest with a dependency from anywhere but the package registry (a git
/// repository, another registry): `cargo fetch` runs outside the jail, and must reach no host
/// but the registry's.
fn registry_only(manifest: &str) -> Result<(), String> {
    let mut doc: toml_edit::DocumentMut = manifest
        .parse()
        .map_err(|e| format!("Cargo.toml is not valid TOML: {e}"))?;
    for_each_dependency(&mut doc, &mut |name, dep| {
        for key in ["git", "registry", "registry-index"] {
            if let Some(from) = dep.get(key) {
                let from = from.as_str().unwrap_or("?");
                return Err(format!(
                    "dependency `{name}` comes from {key} `{from}`; builds fetch only from the \
                     package registry (crates.io): depend on a published version, or copy the \
                     crate into this one's folder and name it by `path`"
                ));
            }
        }
        Ok(())
    })
}

/// Calls `each` with the name and the `path` of every path dependency of a manifest: in its
/// dependency sections (also per target), in `[patch.<registry>]` and in `[replace]`. `each`
/// may change the path; its error ends the walk.
fn for_each_path_dependency(
    doc: &mut toml_edit::DocumentMut,
    each: &mut impl FnMut(&str, &mut String) -> Result<(), String>,
) -> Result<(), String> {
    for_each_dependency(doc, &mut |name, dep| {
        let Some(given) = dep.get("path").and_then(|p| p.as_str()) else {
            return Ok(());
        };
        let mut path = given.to_string();
        each(name, &mut path)?;
        if path != given {
            dep.insert("path", toml_edit::value(path));
        }
        Ok(())
    })
}

/// Calls `each` with the name and the table of every dependency of a manifest given as a table
/// (`x = "1"` has nothing but a version): in its dependency sections (also per target), in
/// `[patch.<source>]` and in `[replace]`. Its error ends the walk.
fn for_each_dependency(
    doc: &mut toml_edit::DocumentMut,
    each: &mut impl FnMut(&str, &mut dyn toml_edit::TableLike) -> Result<(), String>,
) -> Result<(), String> {
    fn table_of_dependencies(
        deps: &mut dyn toml_edit::TableLike,
        each: &mut impl FnMut(&str, &mut dyn toml_edit::TableLike) -> Result<(), String>,
    ) -> Result<(), String> {
        for (name, dep) in deps.iter_mut() {
            if let Some(dep) = dep.as_table_like_mut() {
                each(name.get(), dep)?;
            }
        }
        Ok(())
    }
    fn sections(
        table: &mut dyn toml_edit::TableLike,
        each: &mut impl FnMut(&str, &mut dyn toml_edit::TableLike) -> Result<(), String>,
    ) -> Result<(), String> {
        for section in [
            "dependencies",
            "dev-dependencies",
            "dev_dependencies",
            "build-dependencies",
            "build_dependencies",
        ] {
            if let Some(deps) = table.get_mut(section).and_then(|d| d.as_table_like_mut()) {
                table_of_dependencies(deps, each)?;
            }
        }
        Ok(())
    }
    sections(doc.as_table_mut(), each)?;
    for (key, per_entry) in [("target", true), ("patch", false)] {
        let Some(tables) = doc.get_mut(key).and_then(|t| t.as_table_like_mut()) else {
            continue;
        };
        for (_, table) in tables.iter_mut() {
            match table.as_table_like_mut() {
                Some(table) if per_entry => sections(table, each)?,
                Some(table) => table_of_dependencies(table, each)?,
                None => {}
            }
        }
    }
    if let Some(replace) = doc.get_mut("replace").and_then(|t| t.as_table_like_mut()) {
        table_of_dependencies(replace, each)?;
    }
    Ok(())
}

/// `path` with `.` and `..` resolved by its words alone, as cargo reads a dependency's path.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Copies the crate to `work` with `manifest` (from [`staged_manifest`]) as its Cargo.toml, so
/// it builds on its own. File times are kept, so an unchanged crate is not rebuilt.
fn stage(source: &Path, manifest: &str, work: &Path) -> std::io::Result<()> {
    if work.exists() {
        std::fs::remove_dir_all(work)?;
    }
    copy_crate(source, work)?;
    let staged = work.join("Cargo.toml");
    let times = std::fs::metadata(source.join("Cargo.toml"))?.modified()?;
    std::fs::write(&staged, manifest)?;
    std::fs::set_permissions(&staged, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    std::fs::File::options()
        .write(true)
        .open(&staged)?
        .set_modified(times)
}

/// Files of a crate that are never staged: rustup would take the toolchain they name (a
/// `path` toolchain runs any program as `cargo`) instead of the host's.
const NOT_STAGED: [&str; 2] = ["rust-toolchain", "rust-toolchain.toml"];

/// Copies a crate's files, leaving out `target/`, hidden folders such as `.git` and `.cargo`
/// (cargo's configuration) and [`NOT_STAGED`]. Folders become 0755 and files 0644 (0755 when
/// executable): the jail's user, who is not the host's on a host run as root, reads them.
fn copy_crate(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))?;
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
            if NOT_STAGED.iter().any(|n| name == *n) {
                continue;
            }
            std::fs::copy(entry.path(), &target)?;
            let executable = entry.metadata()?.permissions().mode() & 0o111 != 0;
            let mode = if executable { 0o755 } else { 0o644 };
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
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
        let read = |text: &str| read_manifest(text, src);
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
    fn a_staged_crate_is_its_own_workspace_and_keeps_its_path_dependencies_inside() {
        let dir = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        let source = dir.join("crate");
        std::fs::create_dir_all(source.join("src")).unwrap();
        std::fs::create_dir_all(source.join("target/junk")).unwrap();
        std::fs::create_dir_all(dir.join("proto")).unwrap();
        std::fs::write(source.join("src/main.rs"), "fn main() {}").unwrap();
        let manifest = "[package]\nname = \"x\"\n[dependencies]\nproto = { path = \"../proto\" }\nserde = \"1\"\n[target.'cfg(unix)'.dependencies]\nlib = { path = \"../crate/./lib\" }\n";
        std::fs::write(source.join("Cargo.toml"), manifest).unwrap();

        let refused = staged_manifest(manifest, &source, false).unwrap_err();
        assert!(
            refused.contains("`proto` (`../proto`) lies outside the crate's folder")
                && refused.contains("console's owner"),
            "{refused}"
        );

        let (staged, outside) = staged_manifest(manifest, &source, true).unwrap();
        assert!(staged.contains("[workspace]"), "{staged}");
        let proto = dir.join("proto");
        assert!(
            staged.contains(&format!("path = \"{}\"", proto.display())),
            "{staged}"
        );
        assert!(staged.contains("path = \"lib\""), "{staged}");
        assert_eq!(outside, [proto]);

        let work = dir.join("work");
        stage(&source, &staged, &work).unwrap();
        assert_eq!(
            std::fs::read_to_string(work.join("Cargo.toml")).unwrap(),
            staged
        );
        assert!(work.join("src/main.rs").is_file());
        assert!(!work.join("target").exists(), "target/ is not copied");
    }

    #[test]
    fn outside_dependencies_bring_theirs_each_folder_once() {
        let dir = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        for (name, deps) in [
            ("a", "b = { path = \"../b\" }\ninner = { path = \"inner\" }"),
            ("b", "a = { path = \"../a\" }\nc = { path = \"../c\" }"),
            ("c", ""),
        ] {
            std::fs::create_dir_all(dir.join(name).join("inner")).unwrap();
            std::fs::write(
                dir.join(name).join("Cargo.toml"),
                format!("[package]\nname = \"{name}\"\n[dependencies]\n{deps}\n"),
            )
            .unwrap();
        }
        let mut found = with_their_dependencies(vec![dir.join("a")]).unwrap();
        found.sort();
        assert_eq!(found, [dir.join("a"), dir.join("b"), dir.join("c")]);
        let folder_and_one_inside = vec![dir.join("a/inner"), dir.join("a")];
        assert_eq!(
            with_their_dependencies(folder_and_one_inside)
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn dependencies_come_from_the_registry_alone() {
        let ok = "[package]\nname = \"x\"\n[dependencies]\nserde = \"1\"\nlocal = { path = \"lib\" }\nj = { version = \"1\", features = [\"a\"] }\n";
        registry_only(ok).unwrap();
        for (bad, what) in [
            (
                "[dependencies]\nevil = { git = \"http://127.0.0.1:9/x\" }",
                "git",
            ),
            (
                "[build-dependencies]\nevil = { version = \"1\", registry = \"mine\" }",
                "registry",
            ),
            (
                "[dev-dependencies.evil]\nversion = \"1\"\nregistry-index = \"http://10.0.0.1/\"",
                "registry-index",
            ),
            (
                "[target.'cfg(unix)'.dependencies]\nevil = { git = \"http://x/y\" }",
                "git",
            ),
            (
                "[patch.crates-io]\nserde = { git = \"http://x/serde\" }",
                "git",
            ),
            (
                "[replace]\n\"serde:1.0.0\" = { git = \"http://x/serde\" }",
                "git",
            ),
        ] {
            let why = registry_only(&format!("[package]\nname = \"x\"\n{bad}\n")).unwrap_err();
            assert!(
                why.contains(&format!("comes from {what} `")) && why.contains("package registry"),
                "{bad}: {why}"
            );
        }
    }

    #[test]
    fn old_build_folders_inside_the_world_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (target, work) = (dir.path().join("target"), dir.path().join("work"));
        assert!(!retire_old_build_dirs(&[target.clone(), work.clone()]).unwrap());
        std::fs::create_dir_all(target.join("ann/release")).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        assert!(retire_old_build_dirs(&[target.clone(), work.clone()]).unwrap());
        assert!(!target.exists() && !work.exists());
    }

    #[test]
    fn diagnostics_name_the_given_folder_not_where_the_build_saw_it() {
        let job = Job {
            binary: "x".into(),
            work: PathBuf::from("/home/w/.cache/sausage/builds/ab/work/ann/x"),
            target: PathBuf::from("/t"),
            outside: Vec::new(),
            given: "/data/x/".into(),
        };
        let text = "error: --> /sausage/crate/src/main.rs:1\n failed to parse /home/w/.cache/sausage/builds/ab/work/ann/x/Cargo.toml";
        assert_eq!(
            job.guest_paths(text),
            "error: --> /data/x/src/main.rs:1\n failed to parse /data/x/Cargo.toml"
        );
    }

    #[test]
    fn toolchain_files_and_hidden_folders_are_not_staged() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("src");
        for file in [
            "Cargo.toml",
            "src/main.rs",
            "rust-toolchain.toml",
            "rust-toolchain",
            ".cargo/config.toml",
        ] {
            let at = source.join(file);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, "x").unwrap();
        }
        let work = dir.path().join("work");
        stage(&source, "[package]\nname = \"x\"\n", &work).unwrap();
        assert!(work.join("src/main.rs").is_file());
        for absent in ["rust-toolchain.toml", "rust-toolchain", ".cargo"] {
            assert!(!work.join(absent).exists(), "{absent} was staged");
        }
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
