//! Embeds the sources of the actors the binary ships (the `agent/` and `matrix/` crates):
//! `sausage init` (and `sausage matrix setup`) write them into a world, which builds them like
//! any actor. Also gives the binary the commit it was built from, for `sausage --version`.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    commit();
    pack_relocations();
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let mut code = String::new();
    for (constant, folder, what) in [
        ("AGENT_SOURCE", "agent", "The agent's source files"),
        (
            "MATRIX_SOURCE",
            "matrix",
            "The `matrix` actor's source files",
        ),
    ] {
        let root = manifest.join("../..").join(folder);
        println!("cargo:rerun-if-changed={}", root.display());
        let mut files = Vec::new();
        collect(&root, &root, &mut files);
        files.sort();
        writeln!(
            code,
            "/// {what}: (path inside the crate, content); empty when the"
        )
        .unwrap();
        writeln!(code, "/// repository had no `{folder}/` folder.").unwrap();
        writeln!(code, "pub const {constant}: &[(&str, &[u8])] = &[").unwrap();
        for (relative, absolute) in &files {
            writeln!(code, "    ({relative:?}, include_bytes!({absolute:?})),")
                .expect("writing to a string");
        }
        code.push_str("];\n");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    std::fs::write(out.join("agent_source.rs"), code).expect("OUT_DIR is writable");
}

/// Every file of the crate but build output and hidden folders.
fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if name == "target" || name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect(root, &path, files);
        } else if path.is_file() {
            let relative = path
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .to_string();
            let absolute = path
                .canonicalize()
                .expect("the file exists")
                .to_string_lossy()
                .to_string();
            files.push((relative, absolute));
        }
    }
}

/// `SAUSAGE_COMMIT`: `git rev-parse` of the checkout, with `-dirty` when tracked files differ
/// from it; `unknown` outside a git checkout.
fn commit() {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(commit) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|changes| !changes.is_empty());
            if dirty {
                format!("{commit}-dirty")
            } else {
                commit
            }
        }
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=SAUSAGE_COMMIT={commit}");
    // Run again when the checkout moves to another commit or its index changes.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
    }
    if let (Some(common), Some(head)) = (
        git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ) {
        println!("cargo:rerun-if-changed={common}/{head}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}

/// Links the binary with its relative relocations packed (`DT_RELR`): the loader reads a few
/// kilobytes instead of a 2.5 MB table at each start, which stayed in the host's memory. Only
/// for GNU/Linux on x86-64 built on itself, with glibc 2.36 or later (the linker, binutils 2.38
/// on, makes the binary ask for it: it would not start on an older glibc); elsewhere the table
/// stays as it was.
fn pack_relocations() {
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    if target != "x86_64-unknown-linux-gnu" || host != target {
        return;
    }
    // "glibc 2.36"
    let version = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| {
            let (major, minor) = text.trim().strip_prefix("glibc ")?.split_once('.')?;
            let minor = minor.split('.').next()?;
            Some((major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?))
        });
    if version.is_some_and(|version| version >= (2, 36)) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
