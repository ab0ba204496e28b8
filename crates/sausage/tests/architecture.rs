//! ARCHITECTURE.md stays true (DESIGN §19): every repository path it names (`crates/…`,
//! `agent/…`, `docs/…`) exists, and every module path (`broker::router`, `fs::link_tree`,
//! `sausage_core::scheduler`) names a module of one of the crates, or a function or module
//! declared in one. Type paths (`Broker::start_in`) are left to the compiler's readers.

use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where a module path's first segment is looked for, in order.
fn source_roots() -> Vec<PathBuf> {
    [
        "crates/core/src",
        "crates/cluster/src",
        "crates/sausage/src",
        "agent/src",
        "matrix/src",
    ]
    .iter()
    .map(|r| root().join(r))
    .collect()
}

#[test]
fn every_path_and_module_architecture_md_names_exists() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let lines = text.lines().count();
    assert!(
        lines <= 300,
        "ARCHITECTURE.md has {lines} lines; keep it to about 300 (DESIGN §19)"
    );
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (number, line) in text.lines().enumerate() {
        for token in backticked(line) {
            let problem = if is_repository_path(token) {
                (!root().join(token).exists()).then(|| "no such file or folder".to_string())
            } else if is_module_path(token) {
                resolve_module_path(token).err()
            } else {
                continue;
            };
            checked += 1;
            if let Some(problem) = problem {
                wrong.push(format!(
                    "ARCHITECTURE.md:{}: `{token}`: {problem}",
                    number + 1
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "names that do not exist:\n{}",
        wrong.join("\n")
    );
    assert!(
        checked > 30,
        "only {checked} names checked: is the scanner broken?"
    );
}

#[test]
fn the_checker_tells_real_names_from_stale_ones() {
    assert!(resolve_module_path("broker::router").is_ok());
    assert!(resolve_module_path("fs::link_tree").is_ok());
    assert!(resolve_module_path("sausage_core::scheduler").is_ok());
    assert!(resolve_module_path("main::run").is_ok());
    assert!(resolve_module_path("broker::nowhere").is_err());
    assert!(
        resolve_module_path("cluster::placement").is_err(),
        "the cluster is a crate now"
    );
    assert!(is_repository_path("crates/core/src/world.rs"));
    assert!(!is_repository_path("broker/versions/<id>/"));
    assert!(!root().join("crates/sausage/src/world.rs").exists());
}

/// The spans between backticks on one line.
fn backticked(line: &str) -> impl Iterator<Item = &str> {
    line.split('`').skip(1).step_by(2)
}

fn is_repository_path(token: &str) -> bool {
    [
        "crates/", "agent/", "matrix/", "actors/", "docs/", "scripts/",
    ]
    .iter()
    .any(|prefix| token.starts_with(prefix))
        && !token.contains(['<', '*', ' '])
}

/// `a::b` with lowercase segments only: a module path, maybe ending in a function.
fn is_module_path(token: &str) -> bool {
    token.contains("::")
        && token.split("::").all(|s| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
}

/// Finds the module `token` names (its last segment may be a function or module declared in
/// or re-exported in the module before it).
fn resolve_module_path(token: &str) -> Result<(), String> {
    let mut segments: Vec<&str> = token.split("::").collect();
    let roots = match segments[0] {
        "sausage_core" => vec![root().join("crates/core/src")],
        "sausage_cluster" => vec![root().join("crates/cluster/src")],
        _ => source_roots(),
    };
    let crate_named = segments[0].starts_with("sausage_");
    if crate_named {
        segments.remove(0);
    }
    for source in roots {
        if resolves_in(&source, &segments, crate_named) {
            return Ok(());
        }
    }
    Err("no module of a crate has this path".into())
}

fn resolves_in(source: &Path, segments: &[&str], crate_named: bool) -> bool {
    // The crate root: `lib.rs` or `main.rs`; `main::x` names the binary's `main.rs`.
    let mut file = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| source.join(f))
        .find(|f| f.exists());
    let mut dir = source.to_path_buf();
    for (i, segment) in segments.iter().enumerate() {
        if i == 0 && *segment == "main" && source.join("main.rs").exists() {
            file = Some(source.join("main.rs"));
            continue;
        }
        let as_file = dir.join(format!("{segment}.rs"));
        let as_dir = dir.join(segment).join("mod.rs");
        if as_file.exists() {
            file = Some(as_file);
            dir = dir.join(segment);
        } else if as_dir.exists() {
            file = Some(as_dir);
            dir = dir.join(segment);
        } else {
            // Only the last segment may be an item of the module found so far.
            let last = i == segments.len() - 1;
            let declared = file
                .as_ref()
                .and_then(|f| std::fs::read_to_string(f).ok())
                .is_some_and(|code| {
                    [
                        format!("fn {segment}("),
                        format!("fn {segment}<"),
                        format!("mod {segment}"),
                    ]
                    .iter()
                    .any(|d| code.contains(d.as_str()))
                        || code.lines().any(|line| {
                            // A re-export: `pub use tree::{copy_tree, link_tree};`
                            line.trim_start().starts_with("pub use")
                                && line
                                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                                    .any(|word| word == *segment)
                        })
                });
            // A bare first segment is a module; `sausage_core::x` may be the crate root's item.
            return last && (i > 0 || crate_named) && declared;
        }
    }
    true
}
