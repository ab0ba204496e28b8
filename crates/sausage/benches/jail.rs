//! What the build jail (DESIGN §28) costs a build: `cargo bench --bench jail`.
//!
//! One small crate (a `serde_json` actor), staged once, is built for `wasm32-wasip2` by the same
//! `cargo build --frozen --release` two ways, each with its own target folder warmed first: as
//! the host's user with nothing around it, and in the jail exactly as the `cargo` actor runs it
//! (`sausage_core::cargo::jail::command`: two bubblewraps, on a root host `setpriv`, `prlimit`,
//! the seccomp filter). Each round changes `main.rs`, so both rebuild the crate and reuse their
//! dependencies: a warm build, as when the agent edits an actor. Then the jail alone: a jailed
//! `true`, start to end. Medians of `ROUNDS` rounds, run alternately; `ROUNDS=n` changes it.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sausage_core::cargo::jail::{self, JAIL_CRATE, JAIL_TARGET, View};

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(7);
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("crate");
    let (direct_target, jail_target) = (dir.path().join("direct"), dir.path().join("jailed"));
    write_crate(&work, 0);
    let fetched = Command::new("cargo")
        .args(["fetch", "--manifest-path"])
        .arg(work.join("Cargo.toml"))
        .current_dir(&work)
        .status()
        .unwrap();
    assert!(fetched.success(), "cargo fetch failed");
    std::fs::create_dir_all(&jail_target).unwrap();
    jail::own_target(&jail_target).unwrap();
    make_readable(dir.path());

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _inside = runtime.enter();
    let build_args = [
        "build",
        "--frozen",
        "--release",
        "--quiet",
        "--target",
        "wasm32-wasip2",
        "--manifest-path",
    ];
    let direct = |target: &Path| {
        let started = Instant::now();
        let status = Command::new("cargo")
            .args(build_args)
            .arg(work.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", target)
            .status()
            .unwrap();
        assert!(status.success(), "the direct build failed");
        started.elapsed()
    };
    let mut view = View::default().with_toolchain();
    view.read_only.push((
        std::fs::canonicalize(&work).unwrap(),
        PathBuf::from(JAIL_CRATE),
    ));
    view.writable = Some((
        std::fs::canonicalize(&jail_target).unwrap(),
        PathBuf::from(JAIL_TARGET),
    ));
    let manifest = format!("{JAIL_CRATE}/Cargo.toml");
    let jailed = |program: &[&str]| {
        let program: Vec<&OsStr> = program.iter().map(OsStr::new).collect();
        let mut command = jail::command(&view, &program).unwrap();
        let started = Instant::now();
        let output = runtime.block_on(command.command.output()).unwrap();
        assert!(
            output.status.success(),
            "the jailed command failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        started.elapsed()
    };
    let jailed_build = || {
        let mut program = vec!["cargo"];
        program.extend(build_args);
        program.push(&manifest);
        jailed(&program)
    };

    eprintln!("warming both target folders (a cold build each)");
    direct(&direct_target);
    jailed_build();
    let (mut plain, mut in_jail, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        write_crate(&work, round);
        plain.push(direct(&direct_target));
        in_jail.push(jailed_build());
        alone.push(jailed(&["true"]));
        eprintln!("round {round} of {rounds}");
    }
    let (plain, in_jail, alone) = (median(plain), median(in_jail), median(alone));
    println!(
        "warm build of a serde_json actor for wasm32-wasip2, median of {rounds} alternate rounds"
    );
    println!();
    println!("| | warm build | beside the build without the jail |");
    println!("| --- | --- | --- |");
    println!(
        "| without the jail (`cargo build` as the host's user) | {} | |",
        ms(plain)
    );
    println!(
        "| in the jail, as the `cargo` actor runs it | {} | {:+} ms |",
        ms(in_jail),
        in_jail.as_millis() as i64 - plain.as_millis() as i64
    );
    println!("| the jail alone (a jailed `true`) | {} | |", ms(alone));
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Writes the crate; `round` changes `main.rs`, so the crate itself is built again.
fn write_crate(dir: &Path, round: usize) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"bench\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         [dependencies]\nserde_json = \"1\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("src/main.rs"),
        format!(
            "fn main() {{\n    let round = serde_json::json!({{\"round\": {round}}});\n    \
             println!(\"{{round}}\");\n}}\n"
        ),
    )
    .unwrap();
}

/// The jail's user (not the host's on a root host) reads the staged crate.
fn make_readable(dir: &Path) {
    let status = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
}
