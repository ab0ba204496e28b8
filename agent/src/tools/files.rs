//! The tools that read and change files: `read_file` (whole, or some lines numbered; of a file
//! past [`MAX_READ_FILE_BYTES`] only its first or last part, saying so),
//! `list_dir`, `write_file`, `edit_file` (exact replacement, with the nearest lines when the text
//! is not found), `copy_dir` and `remove_path`. Each changes a file by writing it whole, which the
//! host's commit on close makes atomic: nobody sees half an edit.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;

use super::{MAX_TOOL_OUTPUT, failed, numbered, optional_count};

/// The most bytes of a file one `read_file` answers: the output limit less room for the line
/// that says which lines were shown, so a read stops at a line end (with the offset that reads
/// on) instead of being cut by the turn in the middle of a line.
const READ_BUDGET: usize = MAX_TOOL_OUTPUT - 1024;

/// The most bytes of a file `read_file` reads into memory, as `search` caps what it reads: a
/// huge log must not fill the agent's memory. Past it, only the first (or, for `tail`, the last)
/// this many bytes are read, in whole lines, and the answer says so and how to read on.
pub const MAX_READ_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// The most lines of a file an `edit_file` error shows: enough for the nearest lines of a long
/// `old`, not a second copy of the file.
const MAX_NEAREST_LINES: usize = 40;

/// The most line numbers an `edit_file` answer lists; more are counted.
const MAX_LISTED_LINES: usize = 20;

/// How many pairs of lines `edit_file` compares by their characters when `old` is not found
/// (lines of the file × lines of `old`). Past it, lines are compared only for equality but for
/// surrounding whitespace, so a huge file costs no more than a moment.
const MAX_LIKENESS_PAIRS: usize = 1_000_000;

/// Which lines `read_file` was asked for.
#[derive(Debug, PartialEq)]
pub enum Span {
    /// The whole file as it is, unnumbered.
    Whole,
    /// From line `first` (1-based), `limit` lines or to the end.
    From { first: usize, limit: Option<usize> },
    /// The last lines.
    Tail(usize),
}

impl Span {
    pub fn from_arguments(arguments: &Value) -> Result<Span, String> {
        let offset = optional_count(arguments, "offset")?;
        let limit = optional_count(arguments, "limit")?;
        match (optional_count(arguments, "tail")?, offset, limit) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(
                "error: `tail` shows the last lines, so it goes without `offset` and `limit`; \
                 give either `tail` or `offset`/`limit`"
                    .to_string(),
            ),
            (Some(tail), None, None) => Ok(Span::Tail(tail)),
            (None, None, None) => Ok(Span::Whole),
            (None, offset, limit) => Ok(Span::From {
                first: offset.unwrap_or(1),
                limit,
            }),
        }
    }
}

pub fn read_file(path: &Path, span: Span) -> Result<String, String> {
    let size = std::fs::metadata(path).map_err(|e| failed(path, e))?.len();
    if size > MAX_READ_FILE_BYTES {
        return read_huge(path, size, span);
    }
    let bytes = std::fs::read(path).map_err(|e| failed(path, e))?;
    let text = String::from_utf8_lossy(&bytes);
    if span == Span::Whole && text.len() <= READ_BUDGET {
        return Ok(text.into_owned());
    }
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    if total == 0 {
        return Ok(format!("{} is empty", path.display()));
    }
    // The lines asked for, 1-based and inclusive, then as many of them as fit.
    let (first, last) = match span {
        Span::Whole => {
            let last = fit_from_front(&lines, 1, total);
            let shown = lines[..last].join("\n");
            if last == total || shown.len() > READ_BUDGET {
                // A first line longer than the budget: the turn's cut is all there is to do.
                return Ok(text.into_owned());
            }
            return Ok(format!(
                "{shown}\n[{}: lines 1-{last} of {total} shown, as the rest is past {} KB; \
                 read_file with offset {} reads on, with tail reads the end]",
                path.display(),
                MAX_TOOL_OUTPUT / 1024,
                last + 1
            ));
        }
        Span::From { first, .. } if first > total => {
            return Err(format!(
                "error: {} has {total} lines, so offset {first} is past its end; tail shows \
                 the last lines",
                path.display()
            ));
        }
        Span::From { first, limit } => {
            let last = limit.map_or(total, |limit| total.min(first.saturating_add(limit - 1)));
            (first, fit_from_front(&lines, first, last))
        }
        Span::Tail(tail) => (
            fit_from_back(&lines, total.saturating_sub(tail) + 1, total),
            total,
        ),
    };
    let reads_on = if last < total {
        format!("; offset {} reads on", last + 1)
    } else {
        String::new()
    };
    Ok(format!(
        "[{}: lines {first}-{last} of {total}{reads_on}]\n{}",
        path.display(),
        numbered(lines[first - 1..last].iter().copied(), first, last)
    ))
}

/// `read_file` of a file past [`MAX_READ_FILE_BYTES`]: the lines asked for within its first
/// that many bytes (numbered), or for `tail` the last lines of its final that many (unnumbered,
/// as the lines before them are not counted).
fn read_huge(path: &Path, size: u64, span: Span) -> Result<String, String> {
    let mut file = std::fs::File::open(path).map_err(|e| failed(path, e))?;
    let too_big = format!(
        "{} is {} MiB, more than the {} MiB read_file reads",
        path.display(),
        size / (1024 * 1024),
        MAX_READ_FILE_BYTES / (1024 * 1024)
    );
    let mut bytes = Vec::new();
    if let Span::Tail(tail) = span {
        file.seek(SeekFrom::Start(size - MAX_READ_FILE_BYTES))
            .and_then(|_| file.take(MAX_READ_FILE_BYTES).read_to_end(&mut bytes))
            .map_err(|e| failed(path, e))?;
        let text = String::from_utf8_lossy(&bytes);
        // The part most likely begins inside a line: only the lines after its first line end.
        let text = text.split_once('\n').map_or(&*text, |(_, rest)| rest);
        let lines: Vec<&str> = text.lines().collect();
        let last = lines.len().max(1);
        let first = fit_from_back(&lines, last.saturating_sub(tail) + 1, last);
        let shown = lines.get(first - 1..).unwrap_or_default();
        return Ok(format!(
            "[{too_big}: its last {} lines, unnumbered as the lines before them are not \
             counted; offset and limit read its first {} MiB]\n{}",
            shown.len(),
            MAX_READ_FILE_BYTES / (1024 * 1024),
            shown.join("\n")
        ));
    }
    file.take(MAX_READ_FILE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| failed(path, e))?;
    // Only whole lines: the part most likely ends inside one.
    if let Some(end) = bytes.iter().rposition(|&b| b == b'\n') {
        bytes.truncate(end + 1);
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    let (first, limit) = match span {
        Span::From { first, limit } => (first, limit),
        Span::Whole | Span::Tail(_) => (1, None),
    };
    if first > total {
        return Err(format!(
            "error: {too_big}, its first {total} lines; offset {first} is past them. tail \
             reads the end of the file, search finds text in smaller files"
        ));
    }
    let asked = limit.map_or(total, |limit| total.min(first.saturating_add(limit - 1)));
    let last = fit_from_front(&lines, first, asked);
    let reads_on = if last < total {
        format!("; offset {} reads on", last + 1)
    } else {
        String::new()
    };
    Ok(format!(
        "[{too_big}: lines {first}-{last} of its first {total} shown{reads_on}; tail reads its \
         end]\n{}",
        numbered(lines[first - 1..last].iter().copied(), first, last)
    ))
}

/// The bytes a line takes in `read_file`'s answer, with a number prefix as long as any.
fn shown_len(line: &str) -> usize {
    line.len() + 16
}

/// The last line from `first` up to `last` that fits in [`READ_BUDGET`] (at least `first`).
fn fit_from_front(lines: &[&str], first: usize, last: usize) -> usize {
    let mut used = 0;
    for number in first..=last {
        used += shown_len(lines[number - 1]);
        if used > READ_BUDGET && number > first {
            return number - 1;
        }
    }
    last
}

/// The first line from `last` back to `first` that fits in [`READ_BUDGET`] (at most `last`).
fn fit_from_back(lines: &[&str], first: usize, last: usize) -> usize {
    let mut used = 0;
    for number in (first..=last).rev() {
        used += shown_len(lines[number - 1]);
        if used > READ_BUDGET && number < last {
            return number + 1;
        }
    }
    first
}

pub fn list_dir(path: &Path) -> Result<String, String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| failed(path, e))? {
        let entry = entry.map_err(|e| failed(path, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        lines.push(match entry.metadata() {
            Ok(meta) if meta.is_dir() => format!("{name}/"),
            Ok(meta) => format!("{name} ({} bytes)", meta.len()),
            Err(e) => format!("{name} (unreadable: {e})"),
        });
    }
    lines.sort();
    if lines.is_empty() {
        return Ok(format!("{} is empty", path.display()));
    }
    Ok(lines.join("\n"))
}

pub fn write_file(path: &Path, content: &str) -> Result<String, String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| failed(parent, e))?;
    }
    std::fs::write(path, content).map_err(|e| failed(path, e))?;
    Ok(format!(
        "wrote {} bytes to {}",
        content.len(),
        path.display()
    ))
}

pub fn edit_file(path: &Path, old: &str, new: &str, all: bool) -> Result<String, String> {
    if old.is_empty() {
        return Err(
            "error: `old` is empty; give the exact text to replace (write_file \
                    writes a whole file)"
                .to_string(),
        );
    }
    if old == new {
        return Err("error: `old` and `new` are the same, so nothing would change".to_string());
    }
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "error: {}: no such file; edit_file changes an existing file, write_file creates one",
            path.display()
        ),
        _ => failed(path, e),
    })?;
    let content = String::from_utf8(bytes).map_err(|_| {
        format!(
            "error: {}: not UTF-8 text; edit_file changes text files (write_file replaces a \
             file whole)",
            path.display()
        )
    })?;
    let starts: Vec<usize> = content.match_indices(old).map(|(at, _)| at).collect();
    if starts.is_empty() {
        return Err(not_found(path, &content, old));
    }
    let old_lines = line_numbers(&content, &starts);
    if starts.len() > 1 && !all {
        return Err(format!(
            "error: `old` occurs {} times in {}, at lines {}; add surrounding lines to `old` so \
             it occurs once, or set `all` to true to replace every one",
            starts.len(),
            path.display(),
            listed(&old_lines)
        ));
    }
    let edited = if all {
        content.replace(old, new)
    } else {
        content.replacen(old, new, 1)
    };
    std::fs::write(path, &edited).map_err(|e| failed(path, e))?;
    // Where each replacement starts in the new file: every earlier one moved it by the
    // difference in line breaks between `new` and `old`.
    let shift = new.matches('\n').count() as isize - old.matches('\n').count() as isize;
    let new_lines: Vec<usize> = old_lines
        .iter()
        .enumerate()
        .map(|(i, &line)| line.saturating_add_signed(shift * i as isize))
        .collect();
    let (places, at) = match new_lines.len() {
        1 => ("1 place".to_string(), "line"),
        n => (format!("{n} places"), "lines"),
    };
    Ok(format!(
        "edited {}: replaced {places} (now at {at} {})",
        path.display(),
        listed(&new_lines)
    ))
}

/// The 1-based line of each byte offset, for offsets in increasing order.
fn line_numbers(content: &str, starts: &[usize]) -> Vec<usize> {
    let (mut line, mut counted) = (1, 0);
    starts
        .iter()
        .map(|&at| {
            line += content[counted..at].matches('\n').count();
            counted = at;
            line
        })
        .collect()
}

/// Line numbers as a list, at most [`MAX_LISTED_LINES`] of them.
fn listed(numbers: &[usize]) -> String {
    let mut list: Vec<String> = numbers
        .iter()
        .take(MAX_LISTED_LINES)
        .map(usize::to_string)
        .collect();
    if numbers.len() > MAX_LISTED_LINES {
        list.push(format!("and {} more", numbers.len() - MAX_LISTED_LINES));
    }
    list.join(", ")
}

/// The error for an `old` that is not in `content`: the window of lines most like `old`, and
/// whether it differs only in whitespace, so the model can copy the text as it really is.
fn not_found(path: &Path, content: &str, old: &str) -> String {
    let lines: Vec<Line> = content.lines().map(Line::new).collect();
    let wanted: Vec<Line> = old.lines().map(Line::new).collect();
    if lines.is_empty() {
        return format!(
            "error: `old` was not found: {} is empty; write_file writes it",
            path.display()
        );
    }
    let Some((first, count)) = nearest_window(&lines, &wanted) else {
        return format!(
            "error: `old` was not found in {}, and no line of it resembles `old`; read_file the \
             part to change and copy `old` from it exactly",
            path.display()
        );
    };
    let window = &lines[first..first + count];
    let squeezed = |text: &str| -> String { text.split_whitespace().collect() };
    let window_text: Vec<&str> = window.iter().map(|line| line.text).collect();
    let whitespace_only =
        !squeezed(old).is_empty() && squeezed(&window_text.join("\n")).contains(&squeezed(old));
    let (first, last) = (first + 1, first + count);
    let (lines_at, differ) = match count {
        1 => (format!("line {first}"), "differs"),
        _ => (format!("lines {first}-{last}"), "differ"),
    };
    let mut error = if whitespace_only {
        format!(
            "error: `old` was not found in {}, but {lines_at} {differ} from it only in \
             whitespace (indentation, spaces or line ends). `old` must match exactly: copy it \
             from these lines, without the `<number>│ ` prefix:\n",
            path.display()
        )
    } else {
        format!(
            "error: `old` was not found in {}; it must match the file exactly, whitespace \
             included. Most similar: {lines_at}:\n",
            path.display()
        )
    };
    let shown = count.min(MAX_NEAREST_LINES);
    error += &numbered(window_text[..shown].iter().copied(), first, last);
    if shown < count {
        error += &format!(
            "\n[{} more lines; read_file with offset {} shows them]",
            count - shown,
            first + shown
        );
    }
    if !whitespace_only {
        error += "\nread_file the part to change and copy `old` from it, without the \
                  `<number>│ ` prefix.";
    }
    error
}

/// A line as `edit_file` compares it: without surrounding whitespace, and its pairs of adjacent
/// characters, sorted.
struct Line<'a> {
    text: &'a str,
    trimmed: &'a str,
    pairs: Vec<(char, char)>,
}

impl<'a> Line<'a> {
    fn new(text: &'a str) -> Line<'a> {
        let trimmed = text.trim();
        let chars: Vec<char> = trimmed.chars().collect();
        let mut pairs: Vec<(char, char)> = chars.windows(2).map(|w| (w[0], w[1])).collect();
        pairs.sort_unstable();
        Line {
            text,
            trimmed,
            pairs,
        }
    }

    /// How alike two lines are, from 0 (no pair of characters in common) to 1 (equal but for
    /// surrounding whitespace): the Dice coefficient of their character pairs.
    fn likeness(&self, other: &Line, by_characters: bool) -> f64 {
        if self.trimmed == other.trimmed {
            return 1.0;
        }
        if !by_characters || self.pairs.is_empty() || other.pairs.is_empty() {
            return 0.0;
        }
        let (mut a, mut b, mut common) = (0, 0, 0);
        while a < self.pairs.len() && b < other.pairs.len() {
            match self.pairs[a].cmp(&other.pairs[b]) {
                std::cmp::Ordering::Less => a += 1,
                std::cmp::Ordering::Greater => b += 1,
                std::cmp::Ordering::Equal => (a, b, common) = (a + 1, b + 1, common + 1),
            }
        }
        2.0 * common as f64 / (self.pairs.len() + other.pairs.len()) as f64
    }
}

/// The window of `wanted.len()` consecutive lines (fewer in a shorter file) most like `wanted`,
/// line by line, as (index of its first line, its length); `None` when nothing is alike at all.
fn nearest_window(lines: &[Line], wanted: &[Line]) -> Option<(usize, usize)> {
    let count = wanted.len().clamp(1, lines.len());
    let by_characters = lines.len().saturating_mul(count) <= MAX_LIKENESS_PAIRS;
    let score = |first: usize| -> f64 {
        wanted
            .iter()
            .zip(&lines[first..first + count])
            .map(|(want, line)| want.likeness(line, by_characters))
            .sum()
    };
    let (mut best, mut best_score) = (0, 0.0);
    for first in 0..=lines.len() - count {
        let score = score(first);
        if score > best_score {
            (best, best_score) = (first, score);
        }
    }
    (best_score > 0.0).then_some((best, count))
}

pub fn copy_dir(from: &Path, to: &Path) -> Result<String, String> {
    if !from.is_dir() {
        return Err(format!("error: {}: not a folder", from.display()));
    }
    if to.starts_with(from) {
        return Err(format!(
            "error: cannot copy {} into itself ({})",
            from.display(),
            to.display()
        ));
    }
    let files = copy_tree(from, to)?;
    Ok(format!(
        "copied {files} files from {} to {}",
        from.display(),
        to.display()
    ))
}

fn copy_tree(from: &Path, to: &Path) -> Result<usize, String> {
    std::fs::create_dir_all(to).map_err(|e| failed(to, e))?;
    let mut files = 0;
    for entry in std::fs::read_dir(from).map_err(|e| failed(from, e))? {
        let entry = entry.map_err(|e| failed(from, e))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().map_err(|e| failed(&source, e))?.is_dir() {
            files += copy_tree(&source, &target)?;
        } else {
            std::fs::copy(&source, &target).map_err(|e| failed(&source, e))?;
            files += 1;
        }
    }
    Ok(files)
}

pub fn remove_path(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| failed(path, e))?;
    if meta.is_dir() {
        std::fs::remove_dir_all(path).map_err(|e| failed(path, e))?;
    } else {
        std::fs::remove_file(path).map_err(|e| failed(path, e))?;
    }
    Ok(format!("removed {}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::json;

    use super::super::run_file_tool;
    use super::*;

    /// Runs a file tool with these arguments; the boundary every test here goes through.
    fn run(name: &str, arguments: Value) -> String {
        run_file_tool(name, &arguments).unwrap()
    }

    /// A new folder holding one file `f.txt` with `content`; the file's path as a string.
    fn file_with(name: &str, content: &str) -> String {
        let path = crate::testing::temp_dir(name).join("f.txt");
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    }

    /// `count` lines `line 1` … `line <count>`, each ending in a line break.
    fn numbered_lines(count: usize) -> String {
        (1..=count).map(|n| format!("line {n}\n")).collect()
    }

    #[test]
    fn file_tools_write_list_copy_read_and_remove() {
        let dir = crate::testing::temp_dir("tools");
        let at = |p: &str| dir.join(p).display().to_string();

        let wrote = run(
            "write_file",
            json!({"path": at("a/b/c.txt"), "content": "hello"}),
        );
        assert_eq!(wrote, format!("wrote 5 bytes to {}", at("a/b/c.txt")));
        assert_eq!(run("list_dir", json!({"path": at("a")})), "b/");
        assert_eq!(
            run("list_dir", json!({"path": at("a/b")})),
            "c.txt (5 bytes)"
        );
        assert!(
            run("copy_dir", json!({"from": at("a"), "to": at("z/a2")}))
                .starts_with("copied 1 files")
        );
        assert_eq!(
            run("read_file", json!({"path": at("z/a2/b/c.txt")})),
            "hello"
        );
        assert!(
            run("copy_dir", json!({"from": at("a"), "to": at("a/inner")})).contains("into itself")
        );
        assert!(run("remove_path", json!({"path": at("a")})).starts_with("removed"));
        assert!(run("read_file", json!({"path": at("a/b/c.txt")})).starts_with("error: "));
    }

    #[test]
    fn read_file_shows_numbered_lines_from_an_offset() {
        let path = file_with("read-offset", &numbered_lines(12));
        assert_eq!(
            run("read_file", json!({"path": path, "offset": 9, "limit": 2})),
            format!("[{path}: lines 9-10 of 12; offset 11 reads on]\n 9│ line 9\n10│ line 10")
        );
        assert_eq!(
            run("read_file", json!({"path": path, "offset": 11})),
            format!("[{path}: lines 11-12 of 12]\n11│ line 11\n12│ line 12")
        );
        assert_eq!(
            run("read_file", json!({"path": path, "limit": 1})),
            format!("[{path}: lines 1-1 of 12; offset 2 reads on]\n1│ line 1")
        );
        assert_eq!(
            run(
                "read_file",
                json!({"path": path, "offset": 12, "limit": 50})
            ),
            format!("[{path}: lines 12-12 of 12]\n12│ line 12")
        );
    }

    #[test]
    fn read_file_of_a_huge_file_reads_only_its_first_or_last_part_and_says_so() {
        let dir = crate::testing::temp_dir("read-huge");
        let path = dir.join("huge.log");
        let line = format!("{}\n", "x".repeat(99));
        let count = MAX_READ_FILE_BYTES as usize / line.len() + 1000;
        let mut text = line.repeat(count - 1);
        text.push_str("the very last line\n");
        std::fs::write(&path, &text).unwrap();
        let path = path.display().to_string();
        let read = |extra: Value| {
            let mut arguments = extra;
            arguments["path"] = json!(path);
            run("read_file", arguments)
        };
        let within = MAX_READ_FILE_BYTES as usize / line.len();
        let whole = read(json!({}));
        assert!(whole.len() <= MAX_TOOL_OUTPUT, "{}", whole.len());
        assert!(
            whole.starts_with(&format!(
                "[{path} is 8 MiB, more than the 8 MiB read_file reads: lines 1-"
            )) && whole.contains(&format!("of its first {within} shown; offset "))
                && whole.contains("tail reads its end]"),
            "{}",
            &whole[..200]
        );
        let on = read(json!({"offset": within - 1}));
        assert!(
            on.contains(&format!(
                "lines {}-{within} of its first {within} shown;",
                within - 1
            )),
            "{}",
            &on[..200]
        );
        let past = read(json!({"offset": within + 1}));
        assert!(
            past.starts_with("error: ") && past.contains("tail reads the end"),
            "{past}"
        );
        let tail = read(json!({"tail": 2}));
        assert!(tail.contains("its last 2 lines"), "{tail}");
        assert!(
            tail.ends_with(&format!("{}\nthe very last line", "x".repeat(99))),
            "{tail}"
        );
    }

    #[test]
    fn read_file_tail_shows_the_last_lines() {
        let path = file_with("read-tail", "first\r\nsecond\r\nthird");
        assert_eq!(
            run("read_file", json!({"path": path, "tail": 2})),
            format!("[{path}: lines 2-3 of 3]\n2│ second\n3│ third")
        );
        assert_eq!(
            run("read_file", json!({"path": path, "tail": 100})),
            format!("[{path}: lines 1-3 of 3]\n1│ first\n2│ second\n3│ third")
        );
        let empty = file_with("read-empty", "");
        assert_eq!(
            run("read_file", json!({"path": empty, "tail": 5})),
            format!("{empty} is empty")
        );
        assert_eq!(run("read_file", json!({"path": empty})), "");
    }

    #[test]
    fn read_file_refuses_bad_lines() {
        let path = file_with("read-bad", &numbered_lines(3));
        let read = |extra: Value| {
            let mut arguments = extra;
            arguments["path"] = json!(path);
            run("read_file", arguments)
        };
        assert_eq!(
            read(json!({"offset": 0})),
            "error: `offset` must be a whole number of at least 1, not 0"
        );
        assert!(read(json!({"limit": -2})).contains("`limit` must be a whole number"));
        assert!(read(json!({"tail": "ten"})).contains("not \"ten\""));
        assert!(read(json!({"tail": 2, "offset": 1})).starts_with("error: `tail` shows the last"));
        assert!(read(json!({"tail": 2, "limit": 1})).starts_with("error: `tail`"));
        assert_eq!(
            read(json!({"offset": 4})),
            format!(
                "error: {path} has 3 lines, so offset 4 is past its end; tail shows the last lines"
            )
        );
        // `null` is "not given", as some models send every optional argument.
        assert_eq!(
            read(json!({"offset": null, "limit": null, "tail": null})),
            numbered_lines(3)
        );
    }

    #[test]
    fn a_long_read_stops_at_a_line_end_and_says_where_to_read_on() {
        // 5,000 lines of 10 bytes: 50 KB, past the 30 KB a tool's output may have.
        let path = file_with("read-long", &numbered_lines(5000));
        let whole = run("read_file", json!({"path": path}));
        assert!(whole.len() <= MAX_TOOL_OUTPUT, "{}", whole.len());
        assert!(whole.starts_with("line 1\nline 2\n"));
        let note = whole.lines().last().unwrap();
        let last: usize = whole.lines().rev().nth(1).unwrap()[5..].parse().unwrap();
        assert_eq!(
            note,
            format!(
                "[{path}: lines 1-{last} of 5000 shown, as the rest is past 30 KB; read_file \
                 with offset {} reads on, with tail reads the end]",
                last + 1
            )
        );
        let part = run("read_file", json!({"path": path, "offset": last + 1}));
        assert!(part.len() <= MAX_TOOL_OUTPUT);
        assert!(part.starts_with(&format!("[{path}: lines {}-", last + 1)));
        assert!(part.lines().next().unwrap().contains("reads on"));
        // A long tail keeps the end and gives up its beginning.
        let tail = run("read_file", json!({"path": path, "tail": 5000}));
        assert!(tail.len() <= MAX_TOOL_OUTPUT);
        assert!(tail.ends_with("5000│ line 5000"));
        assert!(tail.lines().next().unwrap().ends_with("of 5000]"));
    }

    #[test]
    fn edit_file_replaces_text_that_occurs_once() {
        let path = file_with("edit-once", "fn main() {\n    println!(\"hi\");\n}\n");
        assert_eq!(
            run(
                "edit_file",
                json!({"path": path, "old": "\"hi\"", "new": "\"hello\""})
            ),
            format!("edited {path}: replaced 1 place (now at line 2)")
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "fn main() {\n    println!(\"hello\");\n}\n"
        );
        // `new` may be empty: the text is removed.
        run(
            "edit_file",
            json!({"path": path, "old": "    println!(\"hello\");\n", "new": ""}),
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "fn main() {\n}\n");
    }

    #[test]
    fn edit_file_with_all_replaces_every_occurrence_and_says_where() {
        let path = file_with("edit-all", "a\nx\nb\nx\nc\nx\n");
        assert_eq!(
            run(
                "edit_file",
                json!({"path": path, "old": "x\n", "new": "y\nz\n", "all": true})
            ),
            // Each earlier replacement added a line: the lines of the new file.
            format!("edited {path}: replaced 3 places (now at lines 2, 5, 8)")
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "a\ny\nz\nb\ny\nz\nc\ny\nz\n"
        );
    }

    #[test]
    fn edit_file_names_the_lines_of_several_occurrences() {
        let path = file_with("edit-several", "let a = 1;\nlet b = 1;\n\nlet c = 1;\n");
        assert_eq!(
            run(
                "edit_file",
                json!({"path": path, "old": "= 1;", "new": "= 2;"})
            ),
            format!(
                "error: `old` occurs 3 times in {path}, at lines 1, 2, 4; add surrounding lines \
                 to `old` so it occurs once, or set `all` to true to replace every one"
            )
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "let a = 1;\nlet b = 1;\n\nlet c = 1;\n",
            "unchanged"
        );
        let many = file_with("edit-many", &"x\n".repeat(25));
        let error = run("edit_file", json!({"path": many, "old": "x", "new": "y"}));
        assert!(error.contains("at lines 1, 2, 3,"), "{error}");
        assert!(error.contains(", 20, and 5 more;"), "{error}");
    }

    #[test]
    fn edit_file_not_found_shows_the_most_similar_lines() {
        let content = "use std::io;\n\nfn main() {\n    let total = add(2, 3);\n    println!(\"{total}\");\n}\n\nfn add(a: u32, b: u32) -> u32 {\n    a + b\n}\n";
        let path = file_with("edit-near", content);
        let error = run(
            "edit_file",
            json!({"path": path, "old": "fn add(a: i32, b: i32) -> i32 {\n    a + b", "new": "x"}),
        );
        assert_eq!(
            error,
            format!(
                "error: `old` was not found in {path}; it must match the file exactly, \
                 whitespace included. Most similar: lines 8-9:\n\
                 8│ fn add(a: u32, b: u32) -> u32 {{\n\
                 9│     a + b\n\
                 read_file the part to change and copy `old` from it, without the `<number>│ ` prefix."
            )
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            content,
            "unchanged"
        );
        let error = run(
            "edit_file",
            json!({"path": path, "old": "println!(\"{totl}\");", "new": "x"}),
        );
        assert!(
            error.contains("Most similar: line 5:\n5│     println!(\"{total}\");\n"),
            "{error}"
        );
        let error = run(
            "edit_file",
            json!({"path": path, "old": "qqqq", "new": "x"}),
        );
        assert!(error.contains("no line of it resembles `old`"), "{error}");
    }

    #[test]
    fn edit_file_says_when_only_whitespace_differs() {
        let path = file_with(
            "edit-space",
            "fn main() {\n    if ok {\n        go();\n    }\n}\n",
        );
        let error = run(
            "edit_file",
            json!({"path": path, "old": "if ok {\n  go();\n}", "new": "go();"}),
        );
        assert_eq!(
            error,
            format!(
                "error: `old` was not found in {path}, but lines 2-4 differ from it only in \
                 whitespace (indentation, spaces or line ends). `old` must match exactly: copy \
                 it from these lines, without the `<number>│ ` prefix:\n\
                 2│     if ok {{\n\
                 3│         go();\n\
                 4│     }}"
            )
        );
        // Windows line ends count as whitespace too.
        let crlf = file_with("edit-crlf", "one\r\ntwo\r\n");
        let error = run(
            "edit_file",
            json!({"path": crlf, "old": "one\ntwo", "new": "x"}),
        );
        assert!(error.contains("only in whitespace"), "{error}");
    }

    #[test]
    fn edit_file_refuses_empty_or_unchanged_text_and_missing_files() {
        let path = file_with("edit-refuse", "text\n");
        assert_eq!(
            run("edit_file", json!({"path": path, "old": "", "new": "x"})),
            "error: `old` is empty; give the exact text to replace (write_file writes a whole file)"
        );
        assert_eq!(
            run(
                "edit_file",
                json!({"path": path, "old": "text", "new": "text"})
            ),
            "error: `old` and `new` are the same, so nothing would change"
        );
        assert!(
            run("edit_file", json!({"path": path, "old": "text"})).contains("`new`"),
            "`new` is required"
        );
        assert!(
            run(
                "edit_file",
                json!({"path": path, "old": "text", "new": "x", "all": "yes"})
            )
            .contains("`all` must be true or false")
        );
        let missing = PathBuf::from(&path).with_file_name("missing.txt");
        assert_eq!(
            run(
                "edit_file",
                json!({"path": missing, "old": "a", "new": "b"})
            ),
            format!(
                "error: {}: no such file; edit_file changes an existing file, write_file creates one",
                missing.display()
            )
        );
        let empty = file_with("edit-empty", "");
        assert!(
            run("edit_file", json!({"path": empty, "old": "a", "new": "b"}))
                .contains("is empty; write_file writes it")
        );
        let binary = PathBuf::from(&path).with_file_name("binary");
        std::fs::write(&binary, [0xff, 0xfe, b'a']).unwrap();
        assert!(
            run("edit_file", json!({"path": binary, "old": "a", "new": "b"}))
                .contains("not UTF-8 text")
        );
    }

    #[test]
    fn the_nearest_window_of_a_long_old_is_shown_in_part() {
        let content = numbered_lines(100);
        let path = file_with("edit-long-old", &content);
        // 60 lines of the file, each changed a little.
        let old: String = (21..=80).map(|n| format!("line {n}!\n")).collect();
        let error = run("edit_file", json!({"path": path, "old": old, "new": "x"}));
        assert!(error.contains("Most similar: lines 21-80:"), "{error}");
        assert!(error.contains("\n60│ line 60\n"), "{error}");
        assert!(!error.contains("61│"), "{error}");
        assert!(
            error.contains("[20 more lines; read_file with offset 61 shows them]"),
            "{error}"
        );
    }
}
