//! How every command names its world (DESIGN §27): a positional `DIR` or `--world DIR`, the
//! same folder either way, `world` when neither is given; and the one error for a folder that
//! holds no world, which names the folder it looked at and how to name another.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use sausage_core::world::{REGISTRY, World};

/// The folder a command works on when none is named.
pub const DEFAULT_WORLD: &str = "world";

#[derive(clap::Args, Clone, Debug, Default)]
pub struct WorldArg {
    /// The world's folder (default: `world`).
    #[arg(value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The world's folder, as a flag: the same as DIR.
    #[arg(long = "world", value_name = "DIR")]
    world: Option<PathBuf>,
}

impl WorldArg {
    pub fn new(dir: Option<PathBuf>, world: Option<PathBuf>) -> WorldArg {
        WorldArg { dir, world }
    }

    /// The folder named, or [`DEFAULT_WORLD`]; naming two different ones is an error.
    pub fn folder(&self) -> Result<PathBuf> {
        match (&self.dir, &self.world) {
            (Some(dir), Some(world)) if dir != world => bail!(
                "two worlds named: {} and --world {}; name one",
                dir.display(),
                world.display()
            ),
            (Some(dir), _) | (None, Some(dir)) => Ok(dir.clone()),
            (None, None) => Ok(PathBuf::from(DEFAULT_WORLD)),
        }
    }

    /// The world in the folder named, which must hold one. `usage` is how the command is
    /// typed before its folder (`people list`, `logs ACTOR`), for the error's example.
    pub fn existing(&self, usage: &str) -> Result<World> {
        let folder = self.folder()?;
        must_hold_a_world(&folder, usage, false)?;
        Ok(World::new(folder))
    }
}

/// Fails, in words, when `folder` holds no world: the folder as an absolute path (a relative
/// `world` alone reads as a riddle), and how to name another; with `or_create`, how to make one
/// there too.
pub fn must_hold_a_world(folder: &Path, usage: &str, or_create: bool) -> Result<()> {
    if folder.join(REGISTRY).is_file() {
        return Ok(());
    }
    let shown = std::path::absolute(folder).unwrap_or_else(|_| folder.to_path_buf());
    let create = if or_create {
        format!(
            ", or create one there with `sausage init {}`",
            folder.display()
        )
    } else {
        String::new()
    };
    bail!(
        "{}: no world here (no {REGISTRY}); name the world's folder: `sausage {usage} DIR` or \
         `sausage {usage} --world DIR`{create}",
        shown.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_world_is_named_either_way_and_twice_only_if_the_same() {
        let named = |dir: Option<&str>, world: Option<&str>| {
            WorldArg::new(dir.map(PathBuf::from), world.map(PathBuf::from)).folder()
        };
        assert_eq!(named(None, None).unwrap(), PathBuf::from("world"));
        assert_eq!(named(Some("w"), None).unwrap(), PathBuf::from("w"));
        assert_eq!(named(None, Some("w")).unwrap(), PathBuf::from("w"));
        assert_eq!(named(Some("w"), Some("w")).unwrap(), PathBuf::from("w"));
        let two = named(Some("a"), Some("b")).unwrap_err().to_string();
        assert_eq!(two, "two worlds named: a and --world b; name one");
    }

    #[test]
    fn a_missing_world_names_the_folder_looked_at_and_how_to_name_another() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("nope");
        let error = must_hold_a_world(&folder, "people list", false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            format!(
                "{}: no world here (no sausage.json); name the world's folder: `sausage people \
                 list DIR` or `sausage people list --world DIR`",
                folder.display()
            )
        );
    }
}
