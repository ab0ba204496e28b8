//! Host notes go through one seam, `tracing` (DESIGN §19): no `eprintln!` or `eprint!` in the
//! core's or the cluster's source, except in the files of [`ALLOWED`], each with its reason.
//! A failure names the file and line of each print. Comments are skipped.

use std::path::{Path, PathBuf};

/// Files (relative to the crates folder) that may print to stderr themselves, and why.
const ALLOWED: &[(&str, &str)] = &[
    (
        "core/src/console/mod.rs",
        "the console's own words to the person (`console: …`, a failed `/await`) are its output",
    ),
    (
        "core/src/console/terminal.rs",
        "the console's words to the person at a terminal (its history, the terminal itself)",
    ),
];

#[test]
fn no_host_note_bypasses_tracing() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/core is in crates/")
        .to_path_buf();
    let mut files = Vec::new();
    for src in ["core/src", "cluster/src"] {
        collect_rs(&crates.join(src), &mut files);
    }
    assert!(files.len() > 20, "the source was not found: {files:?}");
    let mut bare = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&crates).expect("under crates/");
        if ALLOWED
            .iter()
            .any(|(allowed, _)| relative == Path::new(allowed))
        {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a source file reads");
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if !code.starts_with("//") && is_print(code) {
                bare.push(format!("crates/{}:{}: {}", relative.display(), n + 1, code));
            }
        }
    }
    assert!(
        bare.is_empty(),
        "host notes go through `tracing` (info!, warn!, error!, debug!), not stderr:\n{}",
        bare.join("\n")
    );
    for (allowed, _) in ALLOWED {
        assert!(
            crates.join(allowed).exists(),
            "crates/{allowed} is allowed to print but is not there any more; remove it from ALLOWED"
        );
    }
}

/// Whether a line calls `eprintln!` or `eprint!` (not, say, a function named `eprint_all`).
fn is_print(code: &str) -> bool {
    ["eprintln!", "eprint!"].iter().any(|m| code.contains(m))
}

fn collect_rs(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder reads") {
        let path = entry.expect("a folder entry reads").path();
        if path.is_dir() {
            collect_rs(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}
