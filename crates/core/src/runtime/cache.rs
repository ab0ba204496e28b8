//! Compiled components on disk, so each distinct component is compiled once, ever.
//!
//! An entry is keyed by the SHA-256 of the component's bytes and of the engine's configuration
//! (wasmtime's compatibility hash and version), and stored with a CRC-32 of the compiled bytes
//! after them (it guards against corruption, and is cheap enough to check at every start). The
//! compiled bytes start the file so that wasmtime maps them from it: no copy in memory, which
//! for a large actor such as the agent saves thousands of page faults at each start. An entry
//! whose bytes do not match their checksum, or that wasmtime refuses, is compiled again and
//! replaced: the cache is never trusted over the component. Identical components loaded in one
//! run share one compiled copy.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::fs::write_atomically;

/// Length of the checksum stored after the compiled bytes (a CRC-32, little-endian), which
/// wasmtime's ELF reader never looks at.
const CHECKSUM_LEN: usize = 4;

/// The layout of an entry, part of every key: entries of another layout are never read.
const LAYOUT: &[u8] = b"compiled bytes, then their CRC-32";

pub struct Cache {
    dir: PathBuf,
    /// Hex digest of the engine's configuration: part of every key.
    engine: String,
    /// Components loaded in this run, by entry: a component used by several actors (or by a
    /// candidate and then its run) is deserialized once and shares its code. Each entry has
    /// its own lock, so loads of one component wait for the first while others go on.
    loaded: Mutex<HashMap<PathBuf, Arc<Mutex<Option<Component>>>>>,
}

/// Where a component came from, for the benchmarks and the log.
#[derive(Debug, PartialEq, Eq)]
pub enum Origin {
    /// Read from the cache.
    Cached,
    /// Compiled now (no entry yet, or the entry was bad and was replaced).
    Compiled,
}

impl Cache {
    pub fn new(dir: PathBuf, engine: &Engine) -> Cache {
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        hasher.0.update(env!("CARGO_PKG_VERSION").as_bytes());
        hasher.0.update(LAYOUT);
        Cache {
            dir,
            engine: hex(&hasher.0.finalize()),
            loaded: Mutex::default(),
        }
    }

    fn entry(&self, wasm: &[u8]) -> PathBuf {
        let mut key = Sha256::new();
        key.update(self.engine.as_bytes());
        key.update(wasm);
        self.dir.join(format!("{}.cwasm", hex(&key.finalize())))
    }

    /// The compiled component for `wasm`, from the cache when a sound entry exists.
    pub fn component(&self, engine: &Engine, wasm: &[u8]) -> Result<(Component, Origin)> {
        let entry = self.entry(wasm);
        let slot = self
            .loaded
            .lock()
            .expect("cache lock")
            .entry(entry.clone())
            .or_default()
            .clone();
        let mut slot = slot.lock().expect("cache entry lock");
        if let Some(component) = &*slot {
            return Ok((component.clone(), Origin::Cached));
        }
        let (component, origin) = match self.load(engine, &entry) {
            Some(component) => (component, Origin::Cached),
            None => {
                let component = Component::new(engine, wasm)?;
                if let Err(e) = self.store(&component, &entry) {
                    // Only the next start pays for it: it compiles again.
                    tracing::warn!(
                        "cannot cache a compiled component in {}: {e:#}",
                        self.dir.display()
                    );
                }
                (component, Origin::Compiled)
            }
        };
        *slot = Some(component.clone());
        Ok((component, origin))
    }

    fn load(&self, engine: &Engine, entry: &Path) -> Option<Component> {
        let file = std::fs::File::open(entry).ok()?;
        // SAFETY: entries are replaced by a rename (`write_atomically`), never written in
        // place, and only by this process, which holds the entry's lock: the mapped bytes do
        // not change while they are read.
        let stored = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let (compiled, checksum) =
            stored.split_at_checked(stored.len().checked_sub(CHECKSUM_LEN)?)?;
        if checksum != crc32fast::hash(compiled).to_le_bytes() {
            tracing::warn!("{}: corrupt cache entry; compiling again", entry.display());
            return None;
        }
        drop(stored);
        // SAFETY: the file starts with exactly what `store` wrote from `Component::serialize`
        // (their checksum matches, and nothing rewrites it, as above), for an engine with this
        // configuration (the key includes it); the checksum after them lies outside every
        // section of the ELF object, and wasmtime checks its own compatibility header again.
        match unsafe { Component::deserialize_file(engine, entry) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::debug!(
                    "{}: stale cache entry ({e}); compiling again",
                    entry.display()
                );
                None
            }
        }
    }

    fn store(&self, component: &Component, entry: &Path) -> Result<()> {
        let mut stored = component.serialize()?;
        let checksum = crc32fast::hash(&stored).to_le_bytes();
        stored.extend_from_slice(&checksum);
        std::fs::create_dir_all(&self.dir)?;
        write_atomically(entry, &stored)?;
        Ok(())
    }
}

/// Feeds `Hash` values into SHA-256, so the engine's hash is stable across runs.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        unreachable!("only the digest is used")
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest valid component: the header of an empty one.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    fn engine() -> Engine {
        Engine::new(wasmtime::Config::new().wasm_component_model(true)).unwrap()
    }

    fn entries(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }

    #[test]
    fn a_component_is_compiled_once_and_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine();
        let first = Cache::new(dir.path().into(), &engine);
        assert_eq!(
            first.component(&engine, EMPTY_COMPONENT).unwrap().1,
            Origin::Compiled
        );
        // A new cache on the same folder (the next run) reads it back.
        let again = Cache::new(dir.path().into(), &engine);
        assert_eq!(
            again.component(&engine, EMPTY_COMPONENT).unwrap().1,
            Origin::Cached
        );
        assert_eq!(entries(dir.path()).len(), 1);
    }

    #[test]
    fn a_corrupt_or_truncated_entry_is_compiled_again_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine();
        let cache = Cache::new(dir.path().into(), &engine);
        cache.component(&engine, EMPTY_COMPONENT).unwrap();
        let entry = entries(dir.path()).remove(0);
        let good = std::fs::read(&entry).unwrap();
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        for bad in [flipped, good[..good.len() / 2].to_vec(), b"abc".to_vec()] {
            std::fs::write(&entry, bad).unwrap();
            // The next run: nothing is loaded in memory yet.
            let cache = Cache::new(dir.path().into(), &engine);
            assert_eq!(
                cache.component(&engine, EMPTY_COMPONENT).unwrap().1,
                Origin::Compiled
            );
            assert_eq!(
                std::fs::read(&entry).unwrap(),
                good,
                "the entry is replaced"
            );
        }
    }

    #[test]
    fn a_component_loaded_twice_in_a_run_is_shared() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine();
        let cache = Cache::new(dir.path().into(), &engine);
        cache.component(&engine, EMPTY_COMPONENT).unwrap();
        std::fs::remove_file(entries(dir.path()).remove(0)).unwrap();
        assert_eq!(
            cache.component(&engine, EMPTY_COMPONENT).unwrap().1,
            Origin::Cached
        );
    }

    #[test]
    fn another_engine_configuration_uses_another_entry() {
        let dir = tempfile::tempdir().unwrap();
        let plain = engine();
        Cache::new(dir.path().into(), &plain)
            .component(&plain, EMPTY_COMPONENT)
            .unwrap();
        let other = Engine::new(
            wasmtime::Config::new()
                .wasm_component_model(true)
                .epoch_interruption(true),
        )
        .unwrap();
        let cache = Cache::new(dir.path().into(), &other);
        assert_eq!(
            cache.component(&other, EMPTY_COMPONENT).unwrap().1,
            Origin::Compiled
        );
        assert_eq!(entries(dir.path()).len(), 2);
    }
}
