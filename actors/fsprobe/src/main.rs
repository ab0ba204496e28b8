//! `fsprobe` runs filesystem commands and replies with what happened, so tests can observe the
//! host's filesystem from inside a guest. Open files live across messages in a map of named
//! handles. Each command replies `{"type":"ok", ..result}` or
//! `{"type":"fs_error","op":<command>,"error":"<io error kind>: <message>"}`:
//! - `open` {handle, path, mode}: `write` (create, truncate), `append`, `edit` (write without
//!   truncating, create if missing) or `read`; `write` {handle, text} at the handle's position;
//!   `read_handle` {handle} → {text}, the whole file through that handle (seek to 0, read all);
//!   `close` {handle}.
//! - `read` {path} → {text}; `write_file` {path, text} in one go; `list` {path} → {names}, sorted;
//!   `stat` {path} → {size, is_dir}; `exists` {path} → {exists}; `env` → {env}, every variable;
//!   `rename` {from, to}; `remove` {path} (a file); `mkdir` {path}; `rmdir` {path}; `symlink` {target, link}; `hardlink` {from, to}.
//! - `exit` {code}: exits at once with open handles left as they are (no close); `trap`: panics,
//!   which traps; `spin`: busy-loops forever without reading stdin.
//!
//! Anything else → `{"type":"error","reason":..}`. Exits 0 on shutdown or EOF, closing every handle.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Seek, SeekFrom, Write};

const COMMANDS: [&str; 19] = [
    "open",
    "write",
    "read_handle",
    "close",
    "read",
    "write_file",
    "list",
    "stat",
    "exists",
    "env",
    "rename",
    "remove",
    "mkdir",
    "rmdir",
    "symlink",
    "hardlink",
    "exit",
    "trap",
    "spin",
];

fn main() {
    let mut handles = HashMap::new();
    for msg in proto::messages() {
        let op = msg.kind();
        if !COMMANDS.contains(&op) {
            let known = COMMANDS.join(", ");
            proto::reply_error(&msg, &format!("unknown command {op:?}; known: {known}"));
            continue;
        }
        let body = match run(op, &msg.body, &mut handles) {
            Ok(mut result) => {
                result["type"] = json!("ok");
                result
            }
            Err(e) => {
                json!({"type": "fs_error", "op": op, "error": format!("{:?}: {e}", e.kind())})
            }
        };
        proto::reply(&msg, body);
    }
}

/// Runs one known command; the result is a JSON object to which the caller adds `"type":"ok"`.
fn run(op: &str, args: &Value, handles: &mut HashMap<String, File>) -> io::Result<Value> {
    let ok = || Ok(json!({}));
    match op {
        "open" => {
            let (name, path) = (arg(args, "handle")?, arg(args, "path")?);
            let mut options = OpenOptions::new();
            match arg(args, "mode")? {
                "write" => options.write(true).create(true).truncate(true),
                "append" => options.append(true).create(true),
                "edit" => options.write(true).create(true).truncate(false),
                "read" => options.read(true),
                mode => {
                    return Err(invalid(format!(
                        "unknown mode {mode:?}; known: write, append, edit, read"
                    )));
                }
            };
            let file = options.open(path)?;
            // Reusing a name drops (closes) the file it held, as a `close` would.
            handles.insert(name.to_string(), file);
            ok()
        }
        "write" => {
            handle(handles, args)?.write_all(arg(args, "text")?.as_bytes())?;
            ok()
        }
        "read_handle" => {
            let file = handle(handles, args)?;
            file.seek(SeekFrom::Start(0))?;
            let mut text = String::new();
            file.read_to_string(&mut text)?;
            Ok(json!({"text": text}))
        }
        "close" => {
            let name = arg(args, "handle")?;
            let file = handles.remove(name).ok_or_else(|| no_handle(name))?;
            // Dropping the file closes it, which is what commits its writes.
            drop(file);
            ok()
        }
        "read" => Ok(json!({"text": fs::read_to_string(arg(args, "path")?)?})),
        "write_file" => {
            fs::write(arg(args, "path")?, arg(args, "text")?)?;
            ok()
        }
        "list" => {
            let mut names = fs::read_dir(arg(args, "path")?)?
                .map(|entry| Ok(entry?.file_name().to_string_lossy().into_owned()))
                .collect::<io::Result<Vec<_>>>()?;
            names.sort();
            Ok(json!({"names": names}))
        }
        "stat" => {
            let meta = fs::metadata(arg(args, "path")?)?;
            Ok(json!({"size": meta.len(), "is_dir": meta.is_dir()}))
        }
        "exists" => Ok(json!({"exists": fs::exists(arg(args, "path")?)?})),
        "env" => Ok(json!({"env": std::env::vars().collect::<HashMap<_, _>>()})),
        "rename" => {
            fs::rename(arg(args, "from")?, arg(args, "to")?)?;
            ok()
        }
        "remove" => {
            fs::remove_file(arg(args, "path")?)?;
            ok()
        }
        "mkdir" => {
            fs::create_dir(arg(args, "path")?)?;
            ok()
        }
        "rmdir" => {
            fs::remove_dir(arg(args, "path")?)?;
            ok()
        }
        "symlink" => {
            symlink(arg(args, "target")?, arg(args, "link")?)?;
            ok()
        }
        "hardlink" => {
            fs::hard_link(arg(args, "from")?, arg(args, "to")?)?;
            ok()
        }
        "exit" => {
            let code = args["code"]
                .as_i64()
                .ok_or_else(|| invalid("exit needs a number `code`".into()))?;
            eprintln!(
                "exiting with {code} as asked, {} handle(s) left open",
                handles.len()
            );
            // `process::exit` runs no destructors: the open files are left for the host to close.
            std::process::exit(code as i32)
        }
        "trap" => panic!("trap requested"),
        "spin" => {
            eprintln!("spinning forever as asked");
            loop {
                std::hint::spin_loop();
            }
        }
        _ => unreachable!("main checked {op:?} against COMMANDS"),
    }
}

/// A required string field of the command.
fn arg<'a>(args: &'a Value, key: &str) -> io::Result<&'a str> {
    args[key]
        .as_str()
        .ok_or_else(|| invalid(format!("missing string field `{key}`")))
}

fn handle<'a>(handles: &'a mut HashMap<String, File>, args: &Value) -> io::Result<&'a mut File> {
    let name = arg(args, "handle")?;
    handles.get_mut(name).ok_or_else(|| no_handle(name))
}

fn no_handle(name: &str) -> io::Error {
    invalid(format!("no open handle {name:?}"))
}

/// Makes a symbolic link through wasi-libc's `symlink` (the guest's libc, linked into every
/// wasm32-wasip2 program): std's own `symlink_path` is still unstable on this target.
fn symlink(target: &str, link: &str) -> io::Result<()> {
    use std::ffi::{CString, c_char, c_int};
    unsafe extern "C" {
        fn symlink(target: *const c_char, link: *const c_char) -> c_int;
    }
    let target = CString::new(target).map_err(|e| invalid(e.to_string()))?;
    let link = CString::new(link).map_err(|e| invalid(e.to_string()))?;
    // SAFETY: both pointers are NUL-terminated strings that outlive the call, which only reads them.
    match unsafe { symlink(target.as_ptr(), link.as_ptr()) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(ErrorKind::InvalidInput, message)
}
