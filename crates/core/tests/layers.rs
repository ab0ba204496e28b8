//! The core's layers (DESIGN §19), read off its own source: every `crate::<module>` a module
//! names (in `use crate::…` lines, `use crate::{…}` groups, inline paths, and `super::` chains
//! that climb to the crate root) must be a module of a lower layer in [`LAYERS`]. A failure
//! names the file and line of each edge the table does not allow.
//!
//! Test code is exempt: a `#[cfg(test)]` module (inline or a `tests.rs` file) may use any layer
//! to set its scene. Comments are skipped (a doc link is not an import).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The core's modules, bottom layer first. A module imports only modules of layers below its
/// own; modules of one layer never import each other (so no native actor imports another).
const LAYERS: &[&[&str]] = &[
    &["message", "fs"],
    &["replace", "runtime", "traces"],
    &["world"],
    &["people"],
    &["secrets"],
    &["approvals"],
    &["broker"],
    // The native actors.
    &["console", "cargo", "http", "schedules", "web"],
];

/// One `crate::<module>` a file names.
#[derive(Debug, PartialEq)]
struct Edge {
    line: usize,
    to: String,
}

#[test]
fn every_module_imports_only_modules_of_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect_rs(&src, &mut files);
    let mut wrong = Vec::new();
    let mut seen = 0;
    let mut modules = BTreeSet::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let path = module_path(relative);
        let Some(from) = path.first() else { continue }; // lib.rs, the crate root
        modules.insert(from.clone());
        if relative.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let Some(from_layer) = layer_of(from) else {
            wrong.push(format!(
                "{}: module `{from}` is in no layer of LAYERS; add it where it belongs",
                shown(file)
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("a source file reads");
        for edge in edges(&text, &path) {
            seen += 1;
            if edge.to == *from {
                continue;
            }
            match layer_of(&edge.to) {
                Some(to_layer) if to_layer < from_layer => {}
                Some(_) => wrong.push(format!(
                    "{}:{}: `{from}` imports `{}`, which is not below it in LAYERS (DESIGN §19)",
                    shown(file),
                    edge.line,
                    edge.to
                )),
                None => wrong.push(format!(
                    "{}:{}: `{from}` imports `{}`, which is in no layer of LAYERS",
                    shown(file),
                    edge.line,
                    edge.to
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "edges the layers do not allow:\n{}",
        wrong.join("\n")
    );
    // A scanner that finds nothing passes everything: the core has hundreds of these.
    assert!(
        seen > 100,
        "only {seen} imports found: is the scanner broken?"
    );
    let listed: BTreeSet<String> = LAYERS
        .iter()
        .flat_map(|l| l.iter())
        .map(|m| m.to_string())
        .collect();
    assert_eq!(listed, modules, "LAYERS and the modules in src/ differ");
}

#[test]
fn the_scanner_finds_uses_groups_inline_paths_and_climbs_and_skips_comments_and_tests() {
    let text = "\
//! Links to [`crate::web`] are not imports.
use crate::message::ActorId;
use crate::{
    fs::{self, Dir},
    world::World,
};
use super::super::people::People;
use super::mailbox::Mailbox;

fn f() {
    crate::runtime::go(); // crate::cargo in a comment
}

#[cfg(test)]
mod tests {
    use crate::console;
}
";
    let found: Vec<(usize, &str)> = edges(text, &["broker".into(), "requests".into()])
        .iter()
        .map(|e| (e.line, leak(&e.to)))
        .collect();
    assert_eq!(
        found,
        [
            (2, "message"),
            (3, "fs"),
            (3, "world"),
            (7, "people"),
            (8, "broker"),
            (11, "runtime")
        ]
    );
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// `broker/requests.rs` → `[broker, requests]`; `broker/mod.rs` → `[broker]`; `lib.rs` → `[]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
        path.pop();
    }
    path
}

/// The top-level modules `text` (the file of module `path`) names, in the order they come.
fn edges(text: &str, path: &[String]) -> Vec<Edge> {
    let mut edges = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((index, line)) = lines.next() {
        let code = line.split("//").next().unwrap_or_default();
        let trimmed = code.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            // A test module: skip to its closing brace at its own indentation.
            if let Some((_, next)) = lines.peek()
                && next.trim_start().starts_with("mod ")
                && next.trim_end().ends_with('{')
            {
                let indent = &next[..next.len() - next.trim_start().len()];
                let close = format!("{indent}}}");
                for (_, line) in lines.by_ref() {
                    if line.trim_end() == close {
                        break;
                    }
                }
            }
            continue;
        }
        if let Some(group) = trimmed.strip_prefix("use crate::{") {
            // A group runs to its closing brace, maybe lines later.
            let mut body = group.to_string();
            let mut depth = 1 + group.matches('{').count() - group.matches('}').count();
            while depth > 0 {
                let Some((_, more)) = lines.next() else { break };
                let more = more.split("//").next().unwrap_or_default();
                depth = depth + more.matches('{').count() - more.matches('}').count();
                body.push_str(more);
            }
            for item in top_level_items(&body) {
                let name: String = item
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != "self" {
                    edges.push(Edge {
                        line: index + 1,
                        to: name,
                    });
                }
            }
            continue;
        }
        for (at, _) in code.match_indices("crate::") {
            // `sausage_core::` or `my_crate::` is not this crate.
            if code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let name: String = code[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                edges.push(Edge {
                    line: index + 1,
                    to: name,
                });
            }
        }
        if let Some(at) = code.find("super::") {
            let mut rest = &code[at..];
            let mut climbs = 0;
            while let Some(after) = rest.strip_prefix("super::") {
                climbs += 1;
                rest = after;
            }
            // From `broker/requests.rs`, one `super::` is `broker`; two reach the crate root.
            let depth = path.len();
            if climbs >= depth {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                edges.push(Edge {
                    line: index + 1,
                    to: name,
                });
            } else if climbs == depth - 1 {
                edges.push(Edge {
                    line: index + 1,
                    to: path[0].clone(),
                });
            }
        }
    }
    edges
}

/// `a::{b, c}, d::e, f` → `["a::{b, c}", "d::e", "f"]`: the items at depth 0 of a `use` group.
fn top_level_items(body: &str) -> Vec<String> {
    let mut items = vec![String::new()];
    let mut depth = 0;
    for c in body.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(String::new());
                continue;
            }
            _ => {}
        }
        items.last_mut().expect("never empty").push(c);
    }
    items
        .into_iter()
        .map(|i| i.trim().to_string())
        .filter(|i| !i.is_empty())
        .collect()
}

fn collect_rs(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src reads") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            collect_rs(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
}

fn shown(file: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap_or(root);
    file.strip_prefix(&root)
        .unwrap_or(file)
        .display()
        .to_string()
}
