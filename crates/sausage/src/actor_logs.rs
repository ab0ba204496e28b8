//! `sausage logs ACTOR [-f]` (DESIGN §22): an actor's `stderr.log`, read from the world's folder
//! whether it runs or not, with the rotated `stderr.log.1` before it; `-f` keeps printing what is
//! appended and goes on in the new file when the log rotates.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use sausage_core::message::ActorId;
use sausage_core::world::World;

/// How often `-f` looks for more.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

pub fn print(world: &World, actor: &str, follow: bool) -> Result<ExitCode> {
    let id = ActorId::parse(actor).map_err(|e| anyhow::anyhow!("`{actor}`: {e}"))?;
    if !world.registry_path().is_file() {
        bail!(
            "{} is not a world (no {}); give the world's folder with --world",
            world.root().display(),
            sausage_core::world::REGISTRY
        );
    }
    let registry = world.load_registry()?;
    if !registry.actors.contains_key(id.as_str()) && !world.actor_dir(&id).is_dir() {
        let mut known: Vec<&str> = registry.actors.keys().map(String::as_str).collect();
        known.sort_unstable();
        bail!(
            "no actor `{id}` in {}; its actors: {}",
            world.root().display(),
            known.join(", ")
        );
    }
    let log = world.log_path(&id);
    let mut out = std::io::stdout().lock();
    let rotated = log.with_extension("log.1");
    for path in [&rotated, &log] {
        if let Ok(mut file) = File::open(path) {
            std::io::copy(&mut file, &mut out).with_context(|| format!("{}", path.display()))?;
        }
    }
    out.flush()?;
    if !follow {
        return Ok(ExitCode::SUCCESS);
    }
    // Follows the file at `log`: what is appended, and from the start of a new file when the
    // log rotated (another inode) or was cut.
    let mut at = std::fs::metadata(&log).map_or(0, |m| m.len());
    let mut inode = std::fs::metadata(&log).map_or(0, |m| m.ino());
    loop {
        std::thread::sleep(FOLLOW_EVERY);
        let Ok(meta) = std::fs::metadata(&log) else {
            continue;
        };
        if meta.ino() != inode || meta.len() < at {
            // Rotated: what was appended to the old file before it moved is in `stderr.log.1`.
            if let Ok(mut old) = File::open(&rotated)
                && old.metadata().is_ok_and(|m| m.ino() == inode)
            {
                old.seek(SeekFrom::Start(at))?;
                std::io::copy(&mut old, &mut out)?;
            }
            inode = meta.ino();
            at = 0;
        }
        if meta.len() == at {
            continue;
        }
        let Ok(mut file) = File::open(&log) else {
            continue;
        };
        file.seek(SeekFrom::Start(at))?;
        let mut appended = Vec::new();
        file.take(meta.len() - at).read_to_end(&mut appended)?;
        at += appended.len() as u64;
        out.write_all(&appended)?;
        out.flush()?;
    }
}
