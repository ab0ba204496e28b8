//! `sausage logs ACTOR [-f]` (DESIGN §22): an actor's `stderr.log`, read from the world's folder
//! whether it runs or not, with the rotated `stderr.log.1` before it; `-f` keeps printing what is
//! appended and goes on in the new file when the log rotates.

use std::fs::File;
use std::io::Write;
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
    let mut printed = 0;
    if let Ok(mut file) = File::open(&rotated) {
        printed +=
            std::io::copy(&mut file, &mut out).with_context(|| format!("{}", rotated.display()))?;
    }
    // The log is read through one open handle, which follows the file when it is renamed:
    // what is appended to it up to the rotation is read before the new file is opened.
    let mut current = File::open(&log).ok();
    if let Some(file) = current.as_mut() {
        printed += std::io::copy(file, &mut out).with_context(|| format!("{}", log.display()))?;
    }
    out.flush()?;
    if printed == 0 {
        // On stderr, so that what stdout carries is the log and nothing else.
        let next = if follow { "; waiting for lines" } else { "" };
        eprintln!(
            "sausage: {id} has written nothing to its log ({}){next}",
            log.display()
        );
    }
    if !follow {
        return Ok(ExitCode::SUCCESS);
    }
    loop {
        std::thread::sleep(FOLLOW_EVERY);
        if let Some(file) = current.as_mut() {
            std::io::copy(file, &mut out)?;
        }
        let now = std::fs::metadata(&log).ok().map(|m| m.ino());
        let open = current
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map(|m| m.ino());
        if now.is_some() && now != open {
            // Rotated (or made): the rest of the old file, then the new one from its start.
            if let Some(file) = current.as_mut() {
                std::io::copy(file, &mut out)?;
            }
            current = File::open(&log).ok();
            if let Some(file) = current.as_mut() {
                std::io::copy(file, &mut out)?;
            }
        }
        out.flush()?;
    }
}
