//! The tools the model may call: their JSON-schema descriptions, their limits, and the file
//! tools themselves. The message tools (`send_message`, `wait_for_messages`) need the mailbox, so
//! the turn runs them (`turn.rs`); every tool's output passes through [`cut_output`].
//! Paths are guest paths (`/data`, `/public`, `/actor/<id>/...`); the host's filesystem decides
//! what may be written, and its refusals come back to the model as the tool's output.

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
    pub name: &'static str,
    pub description: &'static str,
    pub parameters: Value,
}

fn path_schema(what: &str) -> Value {
    json!({"type": "string", "description": format!("{what}: an absolute guest path such as /data/notes/src/main.rs, /public/..., or /actor/<id>/... (read-only)")})
}

/// Every tool, in the order the model is told about them.
pub fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "send_message",
            description: "Send a message to an actor (broker, cargo, console, or any actor id). \
                The message gets its own id t<n>, which others see as agent/t<n>. With \
                wait_seconds, wait up to that long for the reply (the message whose reply_to is \
                agent/t<n>) and return it; other messages that arrive meanwhile are kept for \
                wait_for_messages and the next turn.",
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
            name: "wait_for_messages",
            description: "Return the messages that arrived and were not shown yet (replies that \
                came too late, publications, notices); if none did, wait up to `seconds` for the \
                first one.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "seconds": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECONDS,
                        "description": format!("the longest to wait; default {DEFAULT_WAIT_SECONDS}")},
                },
            }),
        },
        ToolSpec {
            name: "read_file",
            description: "Read a text file.",
            parameters: json!({"type": "object", "properties": {"path": path_schema("the file")}, "required": ["path"]}),
        },
        ToolSpec {
            name: "list_dir",
            description: "List a folder: one entry a line, folders ending in /, files with their size.",
            parameters: json!({"type": "object", "properties": {"path": path_schema("the folder")}, "required": ["path"]}),
        },
        ToolSpec {
            name: "write_file",
            description: "Write a text file whole (replacing it if it exists), creating its parent \
                folders. It becomes visible to others when written.",
            parameters: json!({
                "type": "object",
                "properties": {"path": path_schema("the file"), "content": {"type": "string", "description": "the whole new content"}},
                "required": ["path", "content"],
            }),
        },
        ToolSpec {
            name: "copy_dir",
            description: "Copy a folder and everything in it to a new place (such as \
                /actor/agent/source to /data/agent-next), creating the destination's parents.",
            parameters: json!({
                "type": "object",
                "properties": {"from": path_schema("the folder to copy"), "to": path_schema("where the copy goes")},
                "required": ["from", "to"],
            }),
        },
        ToolSpec {
            name: "remove_path",
            description: "Remove a file, or a folder with everything in it.",
            parameters: json!({"type": "object", "properties": {"path": path_schema("what to remove")}, "required": ["path"]}),
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
        "read_file" => path_arg(arguments, "path").and_then(read_file),
        "list_dir" => path_arg(arguments, "path").and_then(list_dir),
        "write_file" => path_arg(arguments, "path").and_then(|path| {
            let content = string_arg(arguments, "content")?;
            write_file(path, content)
        }),
        "copy_dir" => path_arg(arguments, "from").and_then(|from| {
            let to = path_arg(arguments, "to")?;
            copy_dir(from, to)
        }),
        "remove_path" => path_arg(arguments, "path").and_then(remove_path),
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

fn failed(path: &Path, e: std::io::Error) -> String {
    format!("error: {}: {e}", path.display())
}

fn read_file(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| failed(path, e))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn list_dir(path: &Path) -> Result<String, String> {
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

fn write_file(path: &Path, content: &str) -> Result<String, String> {
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

fn copy_dir(from: &Path, to: &Path) -> Result<String, String> {
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

fn remove_path(path: &Path) -> Result<String, String> {
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
        let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "send_message",
                "wait_for_messages",
                "read_file",
                "list_dir",
                "write_file",
                "copy_dir",
                "remove_path"
            ]
        );
        for spec in specs {
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
        }
    }

    #[test]
    fn file_tools_write_list_copy_read_and_remove() {
        let dir = crate::testing::temp_dir("tools");
        let at = |p: &str| dir.join(p).display().to_string();
        let run = |name: &str, args: Value| run_file_tool(name, &args).unwrap();

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
        assert!(run("read_file", json!({"path": "relative.txt"})).contains("absolute path"));
        assert!(run("write_file", json!({"path": at("x")})).contains("`content`"));
        assert!(run_file_tool("send_message", &json!({})).is_none());
    }
}
