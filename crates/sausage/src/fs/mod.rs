//! TEMPORARY stand-in until the commit-on-close filesystem lands from the `fs` branch.
use std::path::{Path, PathBuf};

pub struct Mount {
    pub guest: String,
    pub host: PathBuf,
    pub writable: bool,
}
pub fn clean_temporaries(_root: &Path) -> std::io::Result<u64> {
    Ok(0)
}
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("sausage-tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(tmp, path)
}
pub fn is_temporary_name(name: &std::ffi::OsStr) -> bool {
    name.to_string_lossy().ends_with("sausage-tmp")
}
