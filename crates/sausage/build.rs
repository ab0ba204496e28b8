//! Embeds the agent's source (the `agent/` crate) in the binary: `sausage init` writes it into
//! the new world and builds it like any actor.

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let agent = manifest.join("../../agent");
    println!("cargo:rerun-if-changed={}", agent.display());
    let mut files = Vec::new();
    collect(&agent, &agent, &mut files);
    files.sort();
    let mut code =
        String::from("/// The agent's source files: (path inside the crate, content).\n");
    code.push_str("pub const AGENT_SOURCE: &[(&str, &[u8])] = &[\n");
    for (relative, absolute) in &files {
        writeln!(code, "    ({relative:?}, include_bytes!({absolute:?})),")
            .expect("writing to a string");
    }
    code.push_str("];\n");
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
