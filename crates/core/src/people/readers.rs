//! Tokens that read a running world without a person's session (DESIGN §22): the metrics
//! token Prometheus scrapes `/metrics` with (only its hash is kept; a new one replaces the
//! old), and the host's local token, made at each start for `sausage status` on this machine.
//! **Invariant:** neither lets anything change: they only read figures and the actors' table.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::sessions::{hash, random_token};
use crate::world::World;

/// Makes a new metrics token, replacing the old one, and returns it: the only time it is
/// shown.
pub fn new_metrics_token(world: &World) -> io::Result<String> {
    let token = random_token();
    keep_private(&world.metrics_token_path(), hash(&token).as_bytes())?;
    Ok(token)
}

/// Makes the host's local token for this run and returns it.
pub fn new_local_token(world: &World) -> io::Result<String> {
    let token = random_token();
    keep_private(&world.local_token_path(), token.as_bytes())?;
    Ok(token)
}

/// The running host's local token, for `sausage status`.
pub fn local_token(world: &World) -> io::Result<String> {
    Ok(std::fs::read_to_string(world.local_token_path())?
        .trim()
        .to_string())
}

/// Which reader a bearer token is: the metrics token or the local one; `None` for neither.
/// Reads the files each time, so a new metrics token counts at once, running or not.
pub fn reader_of(world: &World, bearer: &str) -> Option<Reader> {
    if bearer.is_empty() {
        return None;
    }
    let metrics = std::fs::read_to_string(world.metrics_token_path()).unwrap_or_default();
    if !metrics.is_empty() && metrics.trim() == hash(bearer) {
        return Some(Reader::Metrics);
    }
    let local = local_token(world).unwrap_or_default();
    (!local.is_empty() && hash(&local) == hash(bearer)).then_some(Reader::Local)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    Metrics,
    Local,
}

fn keep_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    std::fs::create_dir_all(path.parent().expect("a world path has a folder"))?;
    crate::fs::write_atomically(path, bytes)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_metrics_token_replaces_the_old_and_only_its_hash_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(dir.path());
        assert_eq!(reader_of(&world, "anything"), None);
        let first = new_metrics_token(&world).unwrap();
        assert_eq!(reader_of(&world, &first), Some(Reader::Metrics));
        let kept = std::fs::read_to_string(world.metrics_token_path()).unwrap();
        assert!(!kept.contains(&first));
        let mode = std::fs::metadata(world.metrics_token_path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let second = new_metrics_token(&world).unwrap();
        assert_eq!(reader_of(&world, &first), None);
        assert_eq!(reader_of(&world, &second), Some(Reader::Metrics));
        let local = new_local_token(&world).unwrap();
        assert_eq!(reader_of(&world, &local), Some(Reader::Local));
        assert_eq!(reader_of(&world, ""), None);
        assert_eq!(reader_of(&world, &format!("{second}x")), None);
    }
}
