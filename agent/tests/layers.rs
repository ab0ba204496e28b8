//! The agent's modules form a stack: each imports only the modules below it in [`LAYERS`], so a
//! file reads knowing only what is under it and no import circle can come back (STYLE.md).
//! This test reads every `.rs` file under `src/`, finds each `crate::<module>` path (in `use`
//! lines and inline) and each `super::` that climbs to the crate root, and fails on an edge the
//! table does not allow, naming the file and line. A module is the first segment after `crate::`.
//! Test code may import anything, since tests reach across layers for helpers such as
//! `testing::temp_dir` and none of it is in the component: a module declared under
//! `#[cfg(test)]`, inline (to its closing `}` at the indentation of the attribute) or as a file
//! (`testing.rs`, `turn/tests.rs`). Other `#[cfg(test)]` items are checked like the rest.
//! `main.rs`, the crate root, wires the top and is not checked.

use std::path::{Path, PathBuf};

/// The agent's top-level modules, bottom first: a module may import only those before it. A new
/// module gets its place here, above everything it imports.
const LAYERS: &[&str] = &[
    "message",
    "host",
    "history",
    "config",
    "conversations",
    "access",
    "fairness",
    "goals",
    "tools",
    "provider",
    "mcp",
    "budget",
    "context",
    "delegation",
    "turn",
    "wasi_host",
];

/// A source file: its path under `src/`, its module path (empty for the crate root) and its text.
struct Source {
    path: String,
    module: Vec<String>,
    text: String,
}

#[test]
fn every_module_imports_only_modules_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sources = read_sources(&src);
    let test_modules: Vec<Vec<String>> = sources.iter().flat_map(test_module_files).collect();
    let mut problems = Vec::new();
    for layer in LAYERS {
        if !src.join(format!("{layer}.rs")).is_file() && !src.join(layer).join("mod.rs").is_file() {
            problems.push(format!("LAYERS names `{layer}`, which has no file in src/"));
        }
    }
    let mut edges = 0;
    for source in &sources {
        let Some(top) = source.module.first() else {
            continue;
        };
        if test_modules.iter().any(|t| source.module.starts_with(t)) {
            continue;
        }
        let Some(place) = LAYERS.iter().position(|l| l == top) else {
            problems.push(format!(
                "src/{}: module `{top}` is not in LAYERS",
                source.path
            ));
            continue;
        };
        for (line, target) in edges_of(&source.module, &without_test_code(&source.text)) {
            edges += 1;
            let allowed = match &target {
                None => false,
                Some(target) if target == top => true,
                Some(target) => LAYERS
                    .iter()
                    .position(|l| l == target)
                    .is_some_and(|t| t < place),
            };
            if !allowed {
                let target = match target {
                    None => "the crate root (name the module: `crate::<module>`)".to_string(),
                    Some(t) if !LAYERS.contains(&t.as_str()) => format!("`{t}`, not in LAYERS"),
                    Some(t) => format!("`{t}`, which is not below it in LAYERS"),
                };
                problems.push(format!(
                    "src/{}:{line}: `{top}` imports {target}",
                    source.path
                ));
            }
        }
    }
    // A scanner that finds nothing would pass every tree.
    assert!(
        edges > 50,
        "only {edges} imports found in src/: is the scanner broken?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_scanner_finds_grouped_inline_and_climbing_paths() {
    let module = ["turn".to_string(), "calls".to_string()];
    let text = "use crate::{a::X, b::{c, d}};\n// crate::comment\nfn f() { crate::e::g(); }\n\
                use super::super::Y;\nuse super::Z;";
    let found = edges_of(&module, text);
    let names: Vec<(usize, Option<&str>)> = found.iter().map(|(l, m)| (*l, m.as_deref())).collect();
    assert_eq!(
        names,
        [
            (1, Some("a")),
            (1, Some("b")),
            (3, Some("e")),
            (4, None),
            (5, Some("turn"))
        ]
    );
    let text = "use crate::a;\n#[cfg(test)]\nmod tests {\n    use crate::b;\n}\nuse crate::c;";
    assert_eq!(edges_of(&[], &without_test_code(text)).len(), 2);
}

/// Every `.rs` file under `dir`, sorted by path.
fn read_sources(dir: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    collect(dir, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let path = file
                .strip_prefix(dir)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            let mut module: Vec<String> = path
                .trim_end_matches(".rs")
                .split('/')
                .map(str::to_string)
                .collect();
            if module
                .last()
                .is_some_and(|last| last == "mod" || last == "main")
            {
                module.pop();
            }
            let text = std::fs::read_to_string(&file).expect("a source file reads");
            Source { path, module, text }
        })
        .collect()
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ reads") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The module paths of the files `source` declares under `#[cfg(test)]` (`mod tests;`).
fn test_module_files(source: &Source) -> Vec<Vec<String>> {
    let lines: Vec<&str> = source.text.lines().collect();
    lines
        .windows(2)
        .filter(|pair| pair[0].trim() == "#[cfg(test)]")
        .filter_map(|pair| {
            declared_module(pair[1])?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .map(|name| [source.module.clone(), vec![name]].concat())
        .collect()
}

/// `NAME;` or `NAME {` of a line `mod NAME…` or `pub mod NAME…`.
fn declared_module(line: &str) -> Option<&str> {
    let line = line.trim();
    line.strip_prefix("mod ")
        .or_else(|| line.strip_prefix("pub mod "))
}

/// `text` with each inline `#[cfg(test)]` module blanked out, line numbers kept.
fn without_test_code(text: &str) -> String {
    let mut kept = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        kept.push(line);
        let inline_test_module = line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .and_then(|next| declared_module(next))
                .is_some_and(|m| m.ends_with('{'));
        if inline_test_module {
            let close = format!("{}}}", &line[..line.len() - line.trim_start().len()]);
            for inner in lines.by_ref() {
                kept.push("");
                if inner == close {
                    break;
                }
            }
        }
    }
    kept.join("\n")
}

/// Each (line, module) that `text`, the source of `module`, imports: the first segment after
/// `crate::` (each one of a `crate::{…}` group), or for `super::`, the top-level module it
/// names (`None` when it climbs to the crate root). Comments are skipped.
fn edges_of(module: &[String], text: &str) -> Vec<(usize, Option<String>)> {
    let code: String = text
        .lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n");
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let starts_path = |at: usize| {
        !code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$')
    };
    let mut edges = Vec::new();
    for (at, _) in code
        .match_indices("crate::")
        .filter(|(at, _)| starts_path(*at))
    {
        let rest = &code[at + "crate::".len()..];
        let names = match rest.strip_prefix('{') {
            Some(group) => group_heads(group),
            None => vec![identifier(rest)],
        };
        edges.extend(
            names
                .into_iter()
                .map(|name| (line_of(at), Some(name.to_string()))),
        );
    }
    for (at, _) in code
        .match_indices("super::")
        .filter(|(at, _)| starts_path(*at))
    {
        let climbs = (0..)
            .take_while(|k| code[at + k * "super::".len()..].starts_with("super::"))
            .count();
        let target = (climbs < module.len()).then(|| module[0].clone());
        edges.push((line_of(at), target));
    }
    edges.sort();
    edges
}

/// The first segment of each path in a `{…}` group, `group` starting after its `{`.
fn group_heads(group: &str) -> Vec<&str> {
    let mut heads = vec![identifier(group.trim_start())];
    let mut depth = 0;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => heads.push(identifier(group[at + 1..].trim_start())),
            _ => {}
        }
    }
    heads.retain(|head| !head.is_empty());
    heads
}

/// The identifier `text` starts with.
fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}
