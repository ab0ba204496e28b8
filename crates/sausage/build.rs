//! Embeds the sources of the actors the binary ships (the `agent/` and `matrix/` crates):
//! `sausage init` (and `sausage matrix setup`) write them into a world, which builds them like
//! any actor.

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let mut code = String::new();
    for (constant, folder, what) in [
        ("AGENT_SOURCE", "agent", "The agent's source files"),
        (
            "MATRIX_SOURCE",
            "matrix",
            "The `matrix` actor's source files",
        ),
    ] {
        let root = manifest.join("../..").join(folder);
        println!("cargo:rerun-if-changed={}", root.display());
        let mut files = Vec::new();
        collect(&root, &root, &mut files);
        files.sort();
        writeln!(
            code,
            "/// {what}: (path inside the crate, content); empty when the"
        )
        .unwrap();
        writeln!(code, "/// repository had no `{folder}/` folder.").unwrap();
        writeln!(code, "pub const {constant}: &[(&str, &[u8])] = &[").unwrap();
        for (relative, absolute) in &files {
            writeln!(code, "    ({relative:?}, include_bytes!({absolute:?})),")
                .expect("writing to a string");
        }
        code.push_str("];\n");
    }
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
