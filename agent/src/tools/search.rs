//! The tools that look through many files at once: `search` (a regular expression, line by line)
//! and `find_files` (a glob over paths). Both walk a folder in path order through one [`walk`]
//! and read the globs through one [`PathGlob`]; every limit below bounds what one call costs the
//! turn (it blocks while it runs) and what it adds to the model's context. Nothing is skipped by
//! name (no hidden folders, no `target/`): only binary, unreadable and very large files, each
//! counted in a note.

use std::path::{Path, PathBuf};

use regex::Regex;

use super::failed;

/// The most matching lines one `search` answers; the rest are counted in a note, so a pattern
/// that matches everywhere costs the context a few KB instead of filling it.
pub const MAX_SEARCH_HITS: usize = 200;

/// The most characters of a matching line `search` shows; a longer line (minified code, a log
/// line holding a whole document) is shortened around its match.
pub const MAX_HIT_CHARS: usize = 200;

/// How many characters before the match a shortened line keeps, so the match has some context.
const HIT_CONTEXT_CHARS: usize = 40;

/// The most files and folders one `search` or `find_files` walks through; past it the walk
/// stops with a note, so a call on a huge tree (such as `/actor`) ends in moments.
pub const MAX_WALKED_ENTRIES: usize = 20_000;

/// The largest file `search` reads; larger ones are skipped and counted, so one huge log or
/// data file cannot stall the turn or exhaust the agent's memory.
const MAX_SEARCHED_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// The most paths one `find_files` answers; the rest are counted in a note.
pub const MAX_FOUND_PATHS: usize = 500;

pub fn search(pattern: &str, path: &Path, glob: Option<&str>) -> Result<String, String> {
    let regex = Regex::new(pattern).map_err(|e| {
        format!("error: `pattern` is not a valid regular expression (Rust regex syntax): {e}")
    })?;
    let glob = glob.map(|glob| PathGlob::new(glob, "glob")).transpose()?;
    let meta = std::fs::metadata(path).map_err(|e| failed(path, e))?;
    let walk = if meta.is_dir() {
        walk(path)?
    } else {
        Walk::one_file(path)
    };
    let mut found = Found::default();
    for (file, _) in walk.entries.iter().filter(|(file, is_dir)| {
        !is_dir && glob.as_ref().is_none_or(|glob| glob.matches(path, file))
    }) {
        found.search_file(&regex, file);
    }

    let mut answer = found.lines.join("\n");
    if found.matched == 0 {
        answer = format!(
            "no line matches `{pattern}` in {} ({} files searched)",
            path.display(),
            found.searched
        );
    } else if found.matched > found.lines.len() {
        answer += &format!(
            "\n[{} of {} matching lines shown; narrow `pattern`, `path` or `glob` to see the rest]",
            found.lines.len(),
            found.matched
        );
    }
    let skipped = [
        (found.binary, "binary"),
        (found.unreadable, "unreadable"),
        (
            found.too_large,
            &format!("larger than {} MB", MAX_SEARCHED_FILE_BYTES / 1024 / 1024),
        ),
    ]
    .into_iter()
    .filter(|(count, _)| *count > 0)
    .map(|(count, what)| format!("{count} {what}"))
    .collect::<Vec<String>>();
    if !skipped.is_empty() {
        answer += &format!("\n[files skipped: {}]", skipped.join(", "));
    }
    answer += &walk.notes();
    Ok(answer)
}

/// What a `search` found and skipped so far.
#[derive(Default)]
struct Found {
    /// The matching lines shown, at most [`MAX_SEARCH_HITS`].
    lines: Vec<String>,
    /// Every matching line, shown or not.
    matched: usize,
    searched: usize,
    binary: usize,
    unreadable: usize,
    too_large: usize,
}

impl Found {
    fn search_file(&mut self, regex: &Regex, path: &Path) {
        let bytes = match std::fs::metadata(path) {
            Ok(meta) if meta.len() > MAX_SEARCHED_FILE_BYTES => {
                self.too_large += 1;
                return;
            }
            Ok(_) => std::fs::read(path),
            Err(e) => Err(e),
        };
        let Ok(bytes) = bytes else {
            self.unreadable += 1;
            return;
        };
        // As ripgrep and git decide it: text has no NUL byte.
        if bytes.contains(&0) {
            self.binary += 1;
            return;
        }
        self.searched += 1;
        let text = String::from_utf8_lossy(&bytes);
        for (number, line) in (1..).zip(text.lines()) {
            let Some(found) = regex.find(line) else {
                continue;
            };
            self.matched += 1;
            if self.lines.len() < MAX_SEARCH_HITS {
                let shown = shorten(line, found.start());
                self.lines
                    .push(format!("{}:{number}: {shown}", path.display()));
            }
        }
    }
}

/// A line cut to [`MAX_HIT_CHARS`] characters around the byte offset `at` of its match, with
/// `…` where something was left out.
fn shorten(line: &str, at: usize) -> String {
    let length = line.chars().count();
    if length <= MAX_HIT_CHARS {
        return line.to_string();
    }
    let skip = line[..at]
        .chars()
        .count()
        .saturating_sub(HIT_CONTEXT_CHARS)
        .min(length - MAX_HIT_CHARS);
    let kept: String = line.chars().skip(skip).take(MAX_HIT_CHARS).collect();
    let before = if skip > 0 { "…" } else { "" };
    let after = if skip + MAX_HIT_CHARS < length {
        "…"
    } else {
        ""
    };
    format!("{before}{kept}{after}")
}

pub fn find_files(pattern: &str, path: &Path) -> Result<String, String> {
    let glob = PathGlob::new(pattern, "pattern")?;
    let meta = std::fs::metadata(path).map_err(|e| failed(path, e))?;
    if !meta.is_dir() {
        return Err(format!(
            "error: {}: not a folder; find_files looks under a folder (read_file reads a file)",
            path.display()
        ));
    }
    let walk = walk(path)?;
    let found: Vec<String> = walk
        .entries
        .iter()
        .filter(|(entry, _)| glob.matches(path, entry))
        .map(|(entry, is_dir)| match is_dir {
            true => format!("{}/", entry.display()),
            false => entry.display().to_string(),
        })
        .collect();
    let mut answer = found
        .iter()
        .take(MAX_FOUND_PATHS)
        .cloned()
        .collect::<Vec<String>>()
        .join("\n");
    if found.is_empty() {
        answer = format!(
            "nothing under {} matches `{pattern}` ({} files and folders looked at)",
            path.display(),
            walk.entries.len()
        );
    } else if found.len() > MAX_FOUND_PATHS {
        answer += &format!(
            "\n[{MAX_FOUND_PATHS} of {} matching paths shown; narrow `pattern` or `path` to see \
             the rest]",
            found.len()
        );
    }
    answer += &walk.notes();
    Ok(answer)
}

/// A glob as `search` and `find_files` read it, the way `.gitignore` does: without `/` it
/// matches a file's or folder's name at any depth (`*.rs`, `Cargo.toml`); with `/` the path
/// relative to the folder walked (`src/**/*.rs`), or the absolute path when it starts with `/`.
/// `*` and `?` never match a `/`; `**` as a whole part of the path matches any number of
/// folders; `[abc]`, `[a-z]` and `[!abc]` match one character; `{a,b}` matches either.
struct PathGlob {
    matcher: Regex,
    against: Against,
}

/// Which part of a path a [`PathGlob`] is matched against.
enum Against {
    Name,
    Relative,
    Absolute,
}

impl PathGlob {
    /// The glob given as the argument `name`, or an error for the model.
    fn new(glob: &str, name: &str) -> Result<PathGlob, String> {
        let glob = glob.strip_prefix("./").unwrap_or(glob);
        let against = match glob {
            _ if glob.starts_with('/') => Against::Absolute,
            _ if glob.contains('/') => Against::Relative,
            _ => Against::Name,
        };
        let matcher = glob_regex(glob)
            .and_then(|regex| Regex::new(&regex).map_err(|e| e.to_string()))
            .map_err(|why| {
                format!(
                    "error: `{name}` is not a valid glob: {why}; a glob looks like *.rs or \
                     src/**/*.rs"
                )
            })?;
        Ok(PathGlob { matcher, against })
    }

    /// Whether `path`, met while walking `root`, matches.
    fn matches(&self, root: &Path, path: &Path) -> bool {
        let candidate = match self.against {
            Against::Name => path.file_name().map(Path::new),
            Against::Relative => path.strip_prefix(root).ok(),
            Against::Absolute => Some(path),
        };
        candidate.is_some_and(|candidate| self.matcher.is_match(&candidate.to_string_lossy()))
    }
}

/// The regular expression that matches what `glob` matches (see [`PathGlob`]). Globs are
/// translated here rather than by the `globset` crate, which needs all of regex's `perf`
/// features: with it and its own code the agent's binary grew 17% (1.24 MB to 1.45 MB) for no
/// faster search.
fn glob_regex(glob: &str) -> Result<String, String> {
    let chars: Vec<char> = glob.chars().collect();
    let mut regex = String::from("(?s)^");
    let mut open_braces = 0;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            '*' if chars.get(i) == Some(&'*') => {
                i += 1;
                let whole_part =
                    (i == 2 || chars[i - 3] == '/') && matches!(chars.get(i), None | Some('/'));
                if !whole_part {
                    regex += "[^/]*";
                } else if chars.get(i) == Some(&'/') {
                    i += 1;
                    regex += "(?:.*/)?";
                } else {
                    regex += ".*";
                }
            }
            '*' => regex += "[^/]*",
            '?' => regex += "[^/]",
            '[' => {
                let negated = matches!(chars.get(i), Some('!' | '^'));
                if negated {
                    i += 1;
                }
                // A `]` first in the class is one of its characters.
                let mut class = String::new();
                let start = i;
                loop {
                    match chars.get(i) {
                        None => return Err("a `[` is not closed by `]`".to_string()),
                        Some(']') if i > start => break,
                        Some('-') => class.push('-'),
                        Some(&c) => class += &regex::escape(&c.to_string()),
                    }
                    i += 1;
                }
                i += 1;
                regex += &format!("[{}{class}]", if negated { "^/" } else { "" });
            }
            '{' => {
                open_braces += 1;
                regex += "(?:";
            }
            ',' if open_braces > 0 => regex += "|",
            '}' if open_braces > 0 => {
                open_braces -= 1;
                regex += ")";
            }
            '\\' if i < chars.len() => {
                regex += &regex::escape(&chars[i].to_string());
                i += 1;
            }
            c => regex += &regex::escape(&c.to_string()),
        }
    }
    if open_braces > 0 {
        return Err("a `{` is not closed by `}`".to_string());
    }
    Ok(regex + "$")
}

/// What a walk under a folder met, in path order (a folder, then what it holds): at most
/// [`MAX_WALKED_ENTRIES`] files and folders.
struct Walk {
    /// Each path met, and whether it is a folder.
    entries: Vec<(PathBuf, bool)>,
    /// The most entries, [`MAX_WALKED_ENTRIES`] but in tests.
    limit: usize,
    /// Folders below the first that could not be listed.
    unlisted: usize,
    /// Whether the walk stopped at [`MAX_WALKED_ENTRIES`].
    cut: bool,
}

/// Walks everything under `root`, at most [`MAX_WALKED_ENTRIES`]; only `root` itself must be
/// listable.
fn walk(root: &Path) -> Result<Walk, String> {
    walk_at_most(root, MAX_WALKED_ENTRIES)
}

/// [`walk`] with another limit, so tests need not make 20,000 files.
fn walk_at_most(root: &Path, limit: usize) -> Result<Walk, String> {
    let top = sorted_entries(root).map_err(|e| failed(root, e))?;
    let mut walk = Walk {
        entries: Vec::new(),
        limit,
        unlisted: 0,
        cut: false,
    };
    walk.visit(top);
    Ok(walk)
}

/// A folder's entries sorted by name, each with whether it is a folder (not following links).
fn sorted_entries(folder: &Path) -> std::io::Result<Vec<(PathBuf, bool)>> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(folder)? {
        let entry = entry?;
        entries.push((entry.path(), entry.file_type()?.is_dir()));
    }
    entries.sort();
    Ok(entries)
}

impl Walk {
    fn one_file(path: &Path) -> Walk {
        Walk {
            entries: vec![(path.to_path_buf(), false)],
            limit: 1,
            unlisted: 0,
            cut: false,
        }
    }

    fn visit(&mut self, entries: Vec<(PathBuf, bool)>) {
        for (path, is_dir) in entries {
            if self.cut || self.entries.len() == self.limit {
                self.cut = true;
                return;
            }
            self.entries.push((path.clone(), is_dir));
            if is_dir {
                match sorted_entries(&path) {
                    Ok(inner) => self.visit(inner),
                    Err(_) => self.unlisted += 1,
                }
            }
        }
    }

    /// The notes that end an answer: where the walk stopped and what it could not list.
    fn notes(&self) -> String {
        let mut notes = String::new();
        if self.unlisted > 0 {
            notes += &format!("\n[{} folders could not be listed]", self.unlisted);
        }
        if self.cut {
            notes += &format!(
                "\n[stopped after {} files and folders; give a smaller `path` to see past them]",
                self.limit
            );
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::run_file_tool;
    use super::*;

    /// Runs a file tool with these arguments; the boundary every test here goes through.
    fn run(name: &str, arguments: Value) -> String {
        run_file_tool(name, &arguments).unwrap()
    }

    /// A new folder holding `files` (path inside it, content), as a string.
    fn tree(name: &str, files: &[(&str, &[u8])]) -> String {
        let dir = crate::testing::temp_dir(name);
        for (path, content) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        dir.display().to_string()
    }

    #[test]
    fn search_answers_path_line_and_text_in_path_order() {
        let dir = tree(
            "search",
            &[
                ("src/main.rs", b"fn main() {\n    run();\n}\nfn run() {}\n"),
                ("src/deep/lib.rs", b"pub fn run_all() {}\n"),
                ("notes.md", b"run the tests\n"),
                (".hidden/x.rs", b"fn run() {}\n"),
            ],
        );
        assert_eq!(
            run("search", json!({"pattern": r"fn run\w*\(", "path": dir})),
            format!(
                "{dir}/.hidden/x.rs:1: fn run() {{}}\n\
                 {dir}/src/deep/lib.rs:1: pub fn run_all() {{}}\n\
                 {dir}/src/main.rs:4: fn run() {{}}"
            )
        );
        // One file, and (?i).
        assert_eq!(
            run(
                "search",
                json!({"pattern": "(?i)RUN THE", "path": format!("{dir}/notes.md")})
            ),
            format!("{dir}/notes.md:1: run the tests")
        );
        assert_eq!(
            run("search", json!({"pattern": "nowhere", "path": dir})),
            format!("no line matches `nowhere` in {dir} (4 files searched)")
        );
    }

    #[test]
    fn search_with_a_glob_looks_only_at_matching_files() {
        let dir = tree(
            "search-glob",
            &[
                ("src/main.rs", b"todo\n"),
                ("src/deep/lib.rs", b"todo\n"),
                ("src/deep/notes.md", b"todo\n"),
                ("Cargo.toml", b"# todo\n"),
            ],
        );
        let search = |glob: &str| {
            let answer = run(
                "search",
                json!({"pattern": "todo", "path": dir, "glob": glob}),
            );
            answer
                .lines()
                .map(|line| line.strip_prefix(&format!("{dir}/")).unwrap().to_string())
                .collect::<Vec<String>>()
        };
        assert_eq!(
            search("*.rs"),
            ["src/deep/lib.rs:1: todo", "src/main.rs:1: todo"]
        );
        assert_eq!(search("src/*.rs"), ["src/main.rs:1: todo"]);
        assert_eq!(
            search("src/**/*.rs"),
            ["src/deep/lib.rs:1: todo", "src/main.rs:1: todo"]
        );
        assert_eq!(
            search("*.{md,toml}"),
            ["Cargo.toml:1: # todo", "src/deep/notes.md:1: todo"]
        );
        assert_eq!(search(&format!("{dir}/src/deep/*")).len(), 2);
        assert_eq!(
            run(
                "search",
                json!({"pattern": "todo", "path": dir, "glob": "src/[x"})
            ),
            "error: `glob` is not a valid glob: a `[` is not closed by `]`; a glob looks like \
             *.rs or src/**/*.rs"
        );
    }

    #[test]
    fn search_shows_at_most_200_lines_and_counts_the_rest() {
        let many: String = (1..=250).map(|n| format!("hit {n}\n")).collect();
        let dir = tree(
            "search-cap",
            &[("a.txt", many.as_bytes()), ("b.txt", b"hit b\n")],
        );
        let answer = run("search", json!({"pattern": "hit", "path": dir}));
        let lines: Vec<&str> = answer.lines().collect();
        assert_eq!(lines.len(), MAX_SEARCH_HITS + 1);
        assert_eq!(lines[199], format!("{dir}/a.txt:200: hit 200"));
        assert_eq!(
            lines[200],
            "[200 of 251 matching lines shown; narrow `pattern`, `path` or `glob` to see the rest]"
        );
    }

    #[test]
    fn search_skips_binary_files_and_shortens_long_lines() {
        let long = format!("{}needle{}", "a".repeat(300), "b".repeat(300));
        let dir = tree(
            "search-binary",
            &[
                ("app.wasm", b"\0asm needle"),
                ("long.txt", long.as_bytes()),
                ("latin1.txt", b"caf\xe9 needle"),
            ],
        );
        // A file past the size limit is not even read (this one is sparse: it takes no room).
        let huge = std::fs::File::create(format!("{dir}/huge.log")).unwrap();
        huge.set_len(MAX_SEARCHED_FILE_BYTES + 1).unwrap();
        let answer = run("search", json!({"pattern": "needle", "path": dir}));
        let lines: Vec<&str> = answer.lines().collect();
        assert_eq!(lines.len(), 3, "{answer}");
        // Text that is not UTF-8 is still text.
        assert_eq!(lines[0], format!("{dir}/latin1.txt:1: caf\u{fffd} needle"));
        let shown = lines[1]
            .strip_prefix(&format!("{dir}/long.txt:1: "))
            .unwrap();
        assert_eq!(
            shown,
            format!("…{}needle{}…", "a".repeat(40), "b".repeat(154))
        );
        assert_eq!(lines[2], "[files skipped: 1 binary, 1 larger than 8 MB]");
    }

    #[test]
    fn search_refuses_a_bad_regex_and_a_missing_path() {
        let dir = tree("search-bad", &[("a.txt", b"x\n")]);
        let answer = run("search", json!({"pattern": "fn (main", "path": dir}));
        assert!(
            answer.starts_with(
                "error: `pattern` is not a valid regular expression (Rust regex syntax): regex \
                 parse error:"
            ),
            "{answer}"
        );
        assert!(answer.contains("unclosed group"), "{answer}");
        let missing = format!("{dir}/missing");
        assert!(
            run("search", json!({"pattern": "x", "path": missing}))
                .starts_with(&format!("error: {missing}: "))
        );
        assert!(run("search", json!({"path": dir})).contains("`pattern`"));
    }

    #[test]
    fn globs_match_like_gitignore() {
        let matches = |glob: &str, path: &str| {
            let glob = PathGlob::new(glob, "glob").unwrap();
            glob.matches(Path::new("/w"), &Path::new("/w").join(path))
        };
        let cases = [
            ("*.rs", "main.rs", true),
            ("*.rs", "src/deep/main.rs", true),
            ("*.rs", "main.rsx", false),
            ("src/*.rs", "src/main.rs", true),
            ("src/*.rs", "src/deep/main.rs", false),
            ("src/**/*.rs", "src/main.rs", true),
            ("src/**/*.rs", "src/a/b/main.rs", true),
            ("src/**/*.rs", "lib/src/main.rs", false),
            ("**/tests/*.rs", "tests/a.rs", true),
            ("**/tests/*.rs", "x/y/tests/a.rs", true),
            ("src/**", "src/a/b", true),
            ("./src/*.rs", "src/main.rs", true),
            ("/w/src/*.rs", "src/main.rs", true),
            ("/other/*.rs", "main.rs", false),
            ("ma?n.rs", "main.rs", true),
            ("m[a-c]in.rs", "main.rs", true),
            ("m[!a]in.rs", "main.rs", false),
            ("m[!x]in.rs", "main.rs", true),
            ("[]]", "]", true),
            ("*.{rs,toml}", "Cargo.toml", true),
            ("*.{rs,toml}", "main.rs", true),
            ("*.{rs,toml}", "notes.md", false),
            ("{src,tests}/**/*.rs", "tests/a.rs", true),
            ("a.b(c)+", "a.b(c)+", true),
            ("a.b", "axb", false),
            ("\\*", "*", true),
            ("\\*", "x", false),
        ];
        for (glob, path, expected) in cases {
            assert_eq!(matches(glob, path), expected, "{glob} against {path}");
        }
        assert_eq!(
            PathGlob::new("[ab", "pattern").err().unwrap(),
            "error: `pattern` is not a valid glob: a `[` is not closed by `]`; a glob looks like \
             *.rs or src/**/*.rs"
        );
        assert!(PathGlob::new("{a,b", "glob").is_err());
    }

    #[test]
    fn find_files_matches_names_and_relative_paths() {
        let dir = tree(
            "find",
            &[
                ("Cargo.toml", b""),
                ("src/main.rs", b""),
                ("src/tools/mod.rs", b""),
                ("src/tools/files.rs", b""),
                ("tests/tools.rs", b""),
            ],
        );
        let find = |pattern: &str| run("find_files", json!({"pattern": pattern, "path": dir}));
        assert_eq!(
            find("*.rs"),
            format!(
                "{dir}/src/main.rs\n{dir}/src/tools/files.rs\n{dir}/src/tools/mod.rs\n\
                 {dir}/tests/tools.rs"
            )
        );
        assert_eq!(
            find("src/**/*.rs"),
            format!("{dir}/src/main.rs\n{dir}/src/tools/files.rs\n{dir}/src/tools/mod.rs")
        );
        assert_eq!(find("src/*.rs"), format!("{dir}/src/main.rs"));
        assert_eq!(
            find("tools*"),
            format!("{dir}/src/tools/\n{dir}/tests/tools.rs")
        );
        assert_eq!(find("Cargo.toml"), format!("{dir}/Cargo.toml"));
        assert_eq!(
            find("*.py"),
            format!("nothing under {dir} matches `*.py` (8 files and folders looked at)")
        );
        assert!(find("a{b").starts_with("error: `pattern` is not a valid glob: a `{` is not"));
        let file = format!("{dir}/Cargo.toml");
        assert_eq!(
            run("find_files", json!({"pattern": "*", "path": file})),
            format!(
                "error: {file}: not a folder; find_files looks under a folder (read_file reads a \
                 file)"
            )
        );
    }

    #[test]
    fn find_files_shows_at_most_500_paths() {
        let dir = crate::testing::temp_dir("find-cap");
        for n in 0..MAX_FOUND_PATHS + 20 {
            std::fs::write(dir.join(format!("f{n:04}.txt")), "").unwrap();
        }
        let dir = dir.display().to_string();
        let answer = run("find_files", json!({"pattern": "*.txt", "path": dir}));
        let lines: Vec<&str> = answer.lines().collect();
        assert_eq!(lines.len(), MAX_FOUND_PATHS + 1);
        assert_eq!(lines[499], format!("{dir}/f0499.txt"));
        assert_eq!(
            lines[500],
            "[500 of 520 matching paths shown; narrow `pattern` or `path` to see the rest]"
        );
    }

    #[test]
    fn a_walk_goes_in_path_order_and_stops_at_its_limit() {
        let dir = tree(
            "walk",
            &[("b/1", b""), ("b/2", b""), ("a", b""), ("c/d/e", b"")],
        );
        let file = |path: &str| (PathBuf::from(format!("{dir}/{path}")), false);
        let folder = |path: &str| (PathBuf::from(format!("{dir}/{path}")), true);
        let walked = walk(Path::new(&dir)).unwrap();
        assert_eq!(
            walked.entries,
            [
                file("a"),
                folder("b"),
                file("b/1"),
                file("b/2"),
                folder("c"),
                folder("c/d"),
                file("c/d/e")
            ]
        );
        assert!(!walked.cut);
        assert_eq!(walked.notes(), "");
        let cut = walk_at_most(Path::new(&dir), 3).unwrap();
        assert_eq!(cut.entries, [file("a"), folder("b"), file("b/1")]);
        assert_eq!(
            cut.notes(),
            "\n[stopped after 3 files and folders; give a smaller `path` to see past them]"
        );
    }
}
