//! The tools the model may call: every tool's JSON-schema description (`specs`, the interface
//! of DESIGN §12), the limits of their outputs, and the dispatch of the file tools, which run
//! here: `files` (read, list, write, edit, copy, remove) and `search` (`search`, `find_files`);
//! `card` checks the to-do card and keeps the notes.
//! The turn runs the tools that need the mailbox or the turn's state (`send_message`,
//! `wait_for_messages`, `plan`, `note`, `remember`, `forget`, `ask`, `goal_status`); every
//! output passes through [`cut_output`]. A tool's failure is an output starting with `error: `
//! that says what to do next, never a panic. Paths are absolute guest paths; what a turn may
//! touch is `access`'s decision, made before a tool here runs, and the host's filesystem's
//! refusals come back to the model as the tool's output.

pub mod card;
mod files;
mod search;

use std::path::Path;

use serde_json::{Value, json};

/// The most bytes of one tool's output the model sees; more is cut with a note saying so, so one
/// large file or log cannot fill the model's context.
pub const MAX_TOOL_OUTPUT: usize = 30 * 1024;

/// The longest a tool may wait for messages, in seconds: a build may take up to 15 minutes.
pub const MAX_WAIT_SECONDS: u64 = 15 * 60;

/// `wait_for_messages` without `seconds`.
pub const DEFAULT_WAIT_SECONDS: u64 = 30;

/// A tool as the model is told about it.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

fn path_schema(what: &str) -> Value {
    json!({"type": "string", "description": format!("{what}: an absolute guest path such as /data/notes/src/main.rs, /public/..., or /actor/<id>/... (read-only)")})
}

/// A whole number of lines, at least 1.
fn lines_schema(what: &str) -> Value {
    json!({"type": "integer", "minimum": 1, "description": what})
}

/// Every tool, in the order the model is told about them: messages, files, then the turn's own.
pub fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "send_message".into(),
            description: "Send a message to an actor (broker, cargo, console, or any actor id). \
                The message gets its own id, the conversation's tag and t<n> (such as \
                person.ann.t3), which others see as agent/person.ann.t3. With wait_seconds, wait \
                up to that long for the reply (the message whose reply_to is that) and return \
                it; other messages that arrive meanwhile are kept for their conversations \
                (wait_for_messages and the next turn). What the person you act for may not do \
                is refused before anything is sent."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "to": {"type": "string", "description": "the recipient's actor id"},
                    "body": {"type": "object", "description": "the message body: a JSON object with a \"type\" field"},
                    "wait_seconds": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECONDS,
                        "description": "how long to wait for the reply; 0 or absent: do not wait"},
                },
                "required": ["to", "body"],
            }),
        },
        ToolSpec {
            name: "wait_for_messages".into(),
            description: "Return the messages that arrived and were not shown yet (replies that \
                came too late, publications, notices); if none did, wait up to `seconds` for the \
                first one."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "seconds": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECONDS,
                        "description": format!("the longest to wait; default {DEFAULT_WAIT_SECONDS}")},
                },
            }),
        },
        ToolSpec {
            name: "read_file".into(),
            description: "Read a text file. Without offset, limit and tail: the whole file as it \
                is; past 30 KB it stops at a line end with a note saying which lines were shown. \
                With any of them: only those lines, each as `<number>│ <text>`, after a first line \
                `[<path>: lines <first>-<last> of <total>]` (plus the offset that reads on when \
                lines remain), so a long file or log is read in parts. Of a file past 8 MiB only \
                its first 8 MiB are read (its last 8 MiB with tail), as the first line says. \
                Copy text for edit_file without the `<number>│ ` prefix."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": path_schema("the file"),
                    "offset": lines_schema("the first line to show, counting from 1"),
                    "limit": lines_schema("how many lines to show (from offset, or from line 1)"),
                    "tail": lines_schema("show the last this many lines (not with offset or limit), such as the end of a stderr.log"),
                },
                "required": ["path"],
            }),
        },
        ToolSpec {
            name: "list_dir".into(),
            description:
                "List a folder: one entry a line, folders ending in /, files with their size."
                    .into(),
            parameters: json!({"type": "object", "properties": {"path": path_schema("the folder")}, "required": ["path"]}),
        },
        ToolSpec {
            name: "write_file".into(),
            description:
                "Write a text file whole (replacing it if it exists), creating its parent \
                folders. It becomes visible to others when written. To change part of a file, \
                use edit_file."
                    .into(),
            parameters: json!({
                "type": "object",
                "properties": {"path": path_schema("the file"), "content": {"type": "string", "description": "the whole new content"}},
                "required": ["path", "content"],
            }),
        },
        ToolSpec {
            name: "edit_file".into(),
            description: "Replace exact text in an existing text file. `old` must occur exactly \
                once, whitespace and indentation included, unless `all` is true (then every \
                occurrence is replaced). Answers how many places changed and at which lines. If \
                `old` is not found, the error shows the file's most similar lines with their \
                numbers; if it occurs more than once, the error lists the lines: add surrounding \
                lines to `old` to pick one."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": path_schema("the file"),
                    "old": {"type": "string", "description": "the exact text to replace, not empty"},
                    "new": {"type": "string", "description": "the text to put in its place (may be empty)"},
                    "all": {"type": "boolean", "description": "replace every occurrence; default false"},
                },
                "required": ["path", "old", "new"],
            }),
        },
        ToolSpec {
            name: "copy_dir".into(),
            description: "Copy a folder and everything in it to a new place (such as \
                /actor/agent/source to /data/agent-next), creating the destination's parents."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"from": path_schema("the folder to copy"), "to": path_schema("where the copy goes")},
                "required": ["from", "to"],
            }),
        },
        ToolSpec {
            name: "remove_path".into(),
            description: "Remove a file, or a folder with everything in it.".into(),
            parameters: json!({"type": "object", "properties": {"path": path_schema("what to remove")}, "required": ["path"]}),
        },
        ToolSpec {
            name: "search".into(),
            description: "Search the lines of a file, or of every file in a folder and its \
                subfolders, for a regular expression (Rust regex syntax, one line at a time; \
                (?i) ignores case). Answers one line per matching line, \
                `<path>:<line number>: <text>`, with absolute paths, in path order; lines longer \
                than 200 characters are shortened around the match. At most 200 lines, then a \
                note saying how many more matched; binary files are skipped and at most 20,000 \
                files and folders are looked at, with a note saying so."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "the regular expression, such as fn\\s+main or (?i)todo"},
                    "path": path_schema("the file or folder to search"),
                    "glob": {"type": "string", "description": "only files matching this glob: without / it matches file names at any depth (*.rs, *.{rs,toml}); with /, paths relative to `path` (src/**/*.rs)"},
                },
                "required": ["pattern", "path"],
            }),
        },
        ToolSpec {
            name: "find_files".into(),
            description: "Find files and folders under a folder by glob. Answers absolute paths, \
                sorted, one a line, folders ending in /; at most 500, then a note saying how many \
                more matched. A pattern without / matches names at any depth (*.rs, Cargo.toml); \
                with /, paths relative to `path` (src/**/*.rs); ** spans any number of folders."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "the glob, such as *.rs or src/**/mod.rs"},
                    "path": path_schema("the folder to look in"),
                },
                "required": ["pattern", "path"],
            }),
        },
        ToolSpec {
            name: "plan".into(),
            description: "Set the to-do card of this turn, which the person sees: the whole list \
                each time (it replaces the card), each item done or not. Use it for work of \
                several steps, and update it as items get done."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "items": {
                        "type": "array",
                        "description": "every item of the card, in order",
                        "items": {
                            "type": "object",
                            "properties": {
                                "text": {"type": "string", "description": "what to do, in a few words"},
                                "done": {"type": "boolean", "description": "whether it is done"},
                            },
                            "required": ["text", "done"],
                        },
                    },
                },
                "required": ["items"],
            }),
        },
        ToolSpec {
            name: "note".into(),
            description: "Append a note to /data/notes.md, which every conversation shows you, \
                whoever it is with: facts about the world and decisions with their reasons. \
                Everyone's turns read it, so never put a person's private facts here (use \
                remember). Guests may not add notes."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"text": {"type": "string", "description": "the note, short and self-contained"}},
                "required": ["text"],
            }),
        },
        ToolSpec {
            name: "remember".into(),
            description: "Remember a fact about the person this turn acts for (in a room, the \
                one who spoke), or a lasting preference of theirs, as one line of their memory \
                (/data/people/<id>/memory.md). Their private conversation shows it in every \
                request; nobody else's does. Use it when they ask you to remember something or \
                state a lasting preference."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"text": {"type": "string", "description": "the fact or preference, short and self-contained"}},
                "required": ["text"],
            }),
        },
        ToolSpec {
            name: "forget".into(),
            description: "Forget what you remember about the person this turn acts for: the \
                lines that contain `text` (ignoring case), or, without `text`, everything."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"text": {"type": "string", "description": "text of the facts to forget; leave it out to forget all"}},
            }),
        },
        ToolSpec {
            name: "ask".into(),
            description: "Ask the person who started this turn a question and wait for the \
                answer (up to 24 hours, across restarts); the answer is this tool's output. With \
                choices, the person may pick one. Ask only what you cannot decide or find out \
                yourself."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "question": {"type": "string", "description": "the question, in plain words"},
                    "choices": {"type": "array", "items": {"type": "string"}, "description": "the answers to offer, if the question has a few"},
                },
                "required": ["question"],
            }),
        },
        ToolSpec {
            name: "request_secret".into(),
            description: "Ask the person of this turn for a secret an actor needs (an API \
                token): they type its value on the web page or at their terminal, you never see \
                it. Waits for their answer (up to 24 hours, across restarts); the output says \
                whether it was set. Then grant it to the actor with request_grant, and call \
                the service from the actor with no token in its code: the host adds the header \
                to its requests under `url`."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "the secret's name: a-z, 0-9, - and _, such as github"},
                    "url": {"type": "string", "description": "the service's base URL, such as https://api.github.com"},
                    "header": {"type": "string", "description": "the header it goes in; authorization (as `Bearer <value>`) when left out"},
                    "why": {"type": "string", "description": "why it is needed, for the person"},
                },
                "required": ["name", "url", "why"],
            }),
        },
        ToolSpec {
            name: "request_grant".into(),
            description: "Ask for a secret to be granted to an actor, so the host adds it to \
                that actor's requests under the secret's URL. The person of this turn decides \
                (an owner, when the secret or the actor is not theirs). Waits for the decision \
                (up to 24 hours, across restarts)."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "secret": {"type": "string", "description": "the secret's name"},
                    "actor": {"type": "string", "description": "the actor that calls the service"},
                    "why": {"type": "string", "description": "why it is needed, for the person"},
                },
                "required": ["secret", "actor", "why"],
            }),
        },
        ToolSpec {
            name: "delegate".into(),
            description: "Hand a piece of work to a sub-agent in a role (the roles are listed \
                in your instructions): it runs as an actor of its own, for the same person with \
                at most their rights, with its own conversation, and answers with a report \
                (what it did or found, files and actors it changed, its cost), which is this \
                call's output. Several delegate calls in one step run at once. The brief is all \
                it knows of this conversation: say what to do, where, and what to report."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "role": {"type": "string", "description": "the role's name, such as scout, reviewer or worker"},
                    "brief": {"type": "string", "description": "the work, whole: what to do, where, and what the report must say"},
                },
                "required": ["role", "brief"],
            }),
        },
        ToolSpec {
            name: "goal_status".into(),
            description: "Only in a goal's rounds: say how the goal stands at the end of this \
                round. continue: more rounds are needed; done: the goal is reached; blocked: it \
                cannot go on without help (only after at least 3 rounds)."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "status": {"type": "string", "enum": ["continue", "done", "blocked"]},
                    "summary": {"type": "string", "description": "what this round did; when done, what was achieved; when blocked, what is needed"},
                },
                "required": ["status", "summary"],
            }),
        },
    ]
}

/// Cuts a tool's output at [`MAX_TOOL_OUTPUT`] bytes (on a character boundary) with a note.
pub fn cut_output(output: String) -> String {
    if output.len() <= MAX_TOOL_OUTPUT {
        return output;
    }
    let mut at = MAX_TOOL_OUTPUT;
    while !output.is_char_boundary(at) {
        at -= 1;
    }
    format!(
        "{}\n[output cut at 30 KB: {} more bytes were not shown]",
        &output[..at],
        output.len() - at
    )
}

/// A string argument, or a sentence for the model saying it is missing.
pub fn string_arg<'a>(arguments: &'a Value, name: &str) -> Result<&'a str, String> {
    arguments[name]
        .as_str()
        .ok_or_else(|| format!("error: missing string argument `{name}`"))
}

/// Runs one file tool; `None` when `name` is not a file tool.
pub fn run_file_tool(name: &str, arguments: &Value) -> Option<String> {
    let result = match name {
        "read_file" => path_arg(arguments, "path").and_then(|path| {
            let span = files::Span::from_arguments(arguments)?;
            files::read_file(path, span)
        }),
        "list_dir" => path_arg(arguments, "path").and_then(files::list_dir),
        "write_file" => path_arg(arguments, "path").and_then(|path| {
            let content = string_arg(arguments, "content")?;
            files::write_file(path, content)
        }),
        "edit_file" => path_arg(arguments, "path").and_then(|path| {
            let old = string_arg(arguments, "old")?;
            let new = string_arg(arguments, "new")?;
            let all = optional_bool(arguments, "all")?;
            files::edit_file(path, old, new, all)
        }),
        "copy_dir" => path_arg(arguments, "from").and_then(|from| {
            let to = path_arg(arguments, "to")?;
            files::copy_dir(from, to)
        }),
        "remove_path" => path_arg(arguments, "path").and_then(files::remove_path),
        "search" => path_arg(arguments, "path").and_then(|path| {
            let pattern = string_arg(arguments, "pattern")?;
            let glob = optional_string(arguments, "glob")?;
            search::search(pattern, path, glob)
        }),
        "find_files" => path_arg(arguments, "path").and_then(|path| {
            let pattern = string_arg(arguments, "pattern")?;
            search::find_files(pattern, path)
        }),
        _ => return None,
    };
    Some(result.unwrap_or_else(|e| e))
}

/// A path argument; guest paths are absolute, since an actor has no useful working folder.
fn path_arg<'a>(arguments: &'a Value, name: &str) -> Result<&'a Path, String> {
    let path = string_arg(arguments, name)?;
    if !path.starts_with('/') {
        return Err(format!(
            "error: `{name}` must be an absolute path such as /data/{path}"
        ));
    }
    Ok(Path::new(path))
}

// Optional arguments: absent and `null` mean "not given", since some models fill every optional
// argument with `null`.

/// An optional whole number of at least 1.
fn optional_count(arguments: &Value, name: &str) -> Result<Option<usize>, String> {
    match &arguments[name] {
        Value::Null => Ok(None),
        value => match value.as_u64() {
            Some(n) if n >= 1 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            _ => Err(format!(
                "error: `{name}` must be a whole number of at least 1, not {value}"
            )),
        },
    }
}

/// An optional flag, false when absent.
fn optional_bool(arguments: &Value, name: &str) -> Result<bool, String> {
    match &arguments[name] {
        Value::Null => Ok(false),
        Value::Bool(flag) => Ok(*flag),
        value => Err(format!(
            "error: `{name}` must be true or false, not {value}"
        )),
    }
}

/// An optional string; an empty one counts as absent.
fn optional_string<'a>(arguments: &'a Value, name: &str) -> Result<Option<&'a str>, String> {
    match &arguments[name] {
        Value::Null => Ok(None),
        Value::String(text) if text.is_empty() => Ok(None),
        Value::String(text) => Ok(Some(text)),
        value => Err(format!("error: `{name}` must be a string, not {value}")),
    }
}

fn failed(path: &Path, e: std::io::Error) -> String {
    format!("error: {}: {e}", path.display())
}

/// Lines as `read_file` and `edit_file` show them: `<number>│ <text>`, numbers right-aligned,
/// counting from `first`.
fn numbered<'a>(lines: impl IntoIterator<Item = &'a str>, first: usize, last: usize) -> String {
    let width = last.to_string().len();
    let shown: Vec<String> = (first..)
        .zip(lines)
        .map(|(number, line)| format!("{number:>width$}│ {line}"))
        .collect();
    shown.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_cut_at_30_kb_with_a_note() {
        let short = "x".repeat(MAX_TOOL_OUTPUT);
        assert_eq!(cut_output(short.clone()), short);
        let long = "é".repeat(MAX_TOOL_OUTPUT); // 2 bytes each: twice the limit.
        let cut = cut_output(long);
        let (kept, note) = cut.split_once('\n').unwrap();
        assert_eq!(kept.len(), MAX_TOOL_OUTPUT);
        assert_eq!(
            note,
            format!("[output cut at 30 KB: {MAX_TOOL_OUTPUT} more bytes were not shown]")
        );
    }

    #[test]
    fn every_tool_has_an_object_schema() {
        let specs = specs();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "send_message",
                "wait_for_messages",
                "read_file",
                "list_dir",
                "write_file",
                "edit_file",
                "copy_dir",
                "remove_path",
                "search",
                "find_files",
                "plan",
                "note",
                "remember",
                "forget",
                "ask",
                "request_secret",
                "request_grant",
                "delegate",
                "goal_status",
            ]
        );
        for spec in specs {
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
            let properties = spec.parameters["properties"].as_object().unwrap();
            for required in spec.parameters["required"].as_array().into_iter().flatten() {
                let required = required.as_str().unwrap();
                assert!(
                    properties.contains_key(required),
                    "{}: {required}",
                    spec.name
                );
            }
        }
    }

    #[test]
    fn the_descriptions_state_the_limits() {
        let description = |name: &str| specs().into_iter().find(|s| s.name == name).unwrap();
        // As the descriptions write numbers: 20,000.
        let with_commas = |n: usize| match n {
            0..1000 => n.to_string(),
            _ => format!("{},{:03}", n / 1000, n % 1000),
        };
        let search = description("search").description;
        for limit in [
            search::MAX_SEARCH_HITS,
            search::MAX_HIT_CHARS,
            search::MAX_WALKED_ENTRIES,
        ] {
            assert!(search.contains(&with_commas(limit)), "{limit}: {search}");
        }
        let find = description("find_files").description;
        assert!(
            find.contains(&with_commas(search::MAX_FOUND_PATHS)),
            "{find}"
        );
        let read = description("read_file").description;
        assert!(
            read.contains(&format!("{} KB", MAX_TOOL_OUTPUT / 1024)),
            "{read}"
        );
    }

    #[test]
    fn optional_arguments_take_null_as_absent_and_refuse_other_types() {
        let arguments = json!({"n": null, "zero": 0, "text": "12", "flag": "yes", "glob": 3});
        assert_eq!(optional_count(&arguments, "n"), Ok(None));
        assert_eq!(optional_count(&arguments, "missing"), Ok(None));
        assert_eq!(optional_count(&json!({"n": 7}), "n"), Ok(Some(7)));
        assert_eq!(
            optional_count(&arguments, "zero"),
            Err("error: `zero` must be a whole number of at least 1, not 0".into())
        );
        assert!(
            optional_count(&arguments, "text")
                .unwrap_err()
                .contains("not \"12\"")
        );
        assert!(optional_count(&json!({"n": -3}), "n").is_err());
        assert!(optional_count(&json!({"n": 2.5}), "n").is_err());
        assert_eq!(optional_bool(&arguments, "n"), Ok(false));
        assert_eq!(optional_bool(&json!({"all": true}), "all"), Ok(true));
        assert!(optional_bool(&arguments, "flag").is_err());
        assert_eq!(optional_string(&json!({"glob": ""}), "glob"), Ok(None));
        assert!(optional_string(&arguments, "glob").is_err());
    }

    #[test]
    fn file_tools_take_absolute_paths_and_leave_other_tools_to_the_turn() {
        let run = |name: &str, args: Value| run_file_tool(name, &args).unwrap();
        for tool in ["read_file", "edit_file", "search", "find_files"] {
            let answer = run(tool, json!({"path": "relative.txt", "pattern": "x"}));
            assert!(answer.contains("absolute path"), "{tool}: {answer}");
        }
        assert!(run("write_file", json!({"path": "/data/x"})).contains("`content`"));
        for tool in [
            "send_message",
            "plan",
            "note",
            "remember",
            "forget",
            "ask",
            "goal_status",
        ] {
            assert!(run_file_tool(tool, &json!({})).is_none(), "{tool}");
        }
    }
}
