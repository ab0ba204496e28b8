//! An actor's window (DESIGN §21): the last messages it read, as delivered and when, and its
//! files as they were before the first of them, so that a shadow run can feed a candidate
//! version the actor's own recent traffic on its own data, and a fork can rebuild a past state.
//!
//! The files are kept as hard-linked snapshots (no file under `/data` or `/public` is ever
//! changed in place), one per *generation*: every quarter of the window's length a new
//! generation starts at the message read then, and the oldest goes once the next one alone
//! still covers the window's length. So the window holds between `limit` and `limit + limit/4`
//! messages, and a snapshot costs a link per file once per `limit/4` messages.
//!
//! A generation's snapshot is taken lazily, and still exactly "before its first message": the
//! files cannot change between that read and the guest's next change of them, and every such
//! change calls [`Window::before_change`] first (on the blocking pool), which takes the
//! snapshots still owed. The read path itself does no I/O: it copies the line the guest reads
//! into one ring of bytes per actor, under a lock only the blocking pool's snapshot work also
//! takes, briefly. (Keeping the messages themselves alive instead cost a round trip 3 to 4%: the
//! memory of every message stayed taken for hundreds more, where a copy reuses the same ring.)
//!
//! Invariant: `reads` starts at the first message of the oldest generation, whose snapshot (once
//! taken) holds the files as they were before it; snapshots are only linked or removed while
//! `io` is held.

use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use crate::message::{ActorId, Envelope};
use crate::world::World;

/// The most bytes of messages a window keeps, whatever its length: past it, the oldest
/// generation goes while a younger one remains.
pub const WINDOW_BYTES: usize = 16 << 20;

/// One message the actor read: as it was delivered, and when.
#[derive(Clone)]
pub struct Read {
    pub envelope: Arc<Envelope>,
    pub at: SystemTime,
}

/// What a window holds at one moment, for a shadow run or a fork: the messages in the order
/// they were read, and a copy of the files from before the first (made by [`Window::copy`]).
pub struct Recent {
    pub reads: Vec<Read>,
}

pub struct Window {
    world: World,
    id: ActorId,
    /// How many messages the window keeps; 0 keeps none.
    limit: AtomicUsize,
    /// Made at the first read: an actor that reads nothing costs no more than this struct.
    state: Mutex<Option<Box<State>>>,
    /// Held while snapshots are linked, copied from or removed.
    io: Mutex<()>,
    /// Whether a generation's snapshot is owed: the one thing a change of files looks at.
    owed: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Each message's line (as the guest read it), one after another.
    lines: VecDeque<u8>,
    /// Each message's length in `lines` and when it was read, oldest first.
    reads: VecDeque<(usize, SystemTime)>,
    /// The bytes of `lines`.
    bytes: usize,
    /// The number the next read gets (counted since the window began).
    next_read: u64,
    /// The number the next generation's folder gets.
    next_generation: u64,
    generations: VecDeque<Generation>,
    /// Snapshots of generations gone, to remove at the next snapshot work.
    doomed: Vec<PathBuf>,
}

struct Generation {
    /// The number of its first read.
    first: u64,
    dir: PathBuf,
    taken: bool,
}

impl Window {
    pub fn new(world: World, id: ActorId, limit: usize) -> Window {
        Window {
            world,
            id,
            limit: AtomicUsize::new(limit),
            state: Mutex::new(None),
            io: Mutex::new(()),
            owed: AtomicBool::new(false),
        }
    }

    /// The window's state, made if it was not yet.
    fn lock(&self) -> Locked<'_> {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        guard.get_or_insert_with(Box::default);
        Locked(guard)
    }

    fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
    }

    /// Sets how many messages the window keeps (from the manifest, at each start). A shorter
    /// window drops what it no longer needs at the next read; 0 forgets everything.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Release);
        if limit == 0 {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(state) = state.as_mut() {
                state.forget();
            }
        }
    }

    /// The actor read `line` (a message as its stdin gave it): called on the read path, under
    /// its mailbox's lock. No I/O.
    pub fn read(&self, line: &[u8]) {
        let limit = self.limit();
        if limit == 0 {
            return;
        }
        let mut state = self.lock();
        let number = state.next_read;
        state.next_read += 1;
        state.bytes += line.len();
        state.lines.extend(line);
        state.reads.push_back((line.len(), coarse_now()));
        let step = (limit / 4).max(1) as u64;
        if state
            .generations
            .back()
            .is_none_or(|newest| number - newest.first >= step)
        {
            state.begin_generation(&self.world.window_dir(&self.id), number);
            self.owed.store(true, Ordering::Release);
        }
        state.trim(limit);
    }

    /// The guest is about to change its files (on the blocking pool): the snapshots owed are
    /// taken first, while the files are still as they were before those generations began.
    pub fn before_change(&self) {
        if self.owed.load(Ordering::Acquire) {
            let io = self.io.lock().unwrap_or_else(|e| e.into_inner());
            self.settle_snapshots(&io);
        }
    }

    /// Forgets every message and snapshot (the host replaced the actor's files: what the
    /// window holds no longer leads to them).
    pub fn forget(&self) {
        self.lock().forget();
        self.owed.store(true, Ordering::Release);
    }

    /// The host put back older files (a rollback): the messages stay, and they start from the
    /// files as they are now, which a snapshot taken before the guest's next change keeps. So a
    /// shadow run after a rollback still tries the next candidate on the actor's own traffic,
    /// from the files the rollback restored.
    pub fn rebase(&self) {
        let mut state = self.lock();
        let first = state.next_read - state.reads.len() as u64;
        let gone: Vec<PathBuf> = (state.generations.drain(..))
            .filter(|g| g.taken)
            .map(|g| g.dir)
            .collect();
        state.doomed.extend(gone);
        if !state.reads.is_empty() {
            state.begin_generation(&self.world.window_dir(&self.id), first);
        }
        drop(state);
        self.owed.store(true, Ordering::Release);
    }

    /// What the window holds now, with a copy of its files from before the first message
    /// linked into `data` and `public` (on the blocking pool). `None` when it holds nothing.
    pub fn copy(&self, data: &Path, public: &Path) -> std::io::Result<Option<Recent>> {
        let io = self.io.lock().unwrap_or_else(|e| e.into_inner());
        self.settle_snapshots(&io);
        let (dir, reads) = {
            let state = self.lock();
            let Some(oldest) = state.generations.front() else {
                return Ok(None);
            };
            if !oldest.taken {
                return Ok(None);
            }
            (oldest.dir.clone(), state.messages())
        };
        crate::fs::link_tree(&dir.join("data"), data)?;
        crate::fs::link_tree(&dir.join("public"), public)?;
        Ok(Some(Recent { reads }))
    }

    /// The messages the window holds now, oldest first.
    pub fn reads(&self) -> Vec<Read> {
        self.lock().messages()
    }

    /// How many messages the window holds now.
    pub fn len(&self) -> usize {
        self.lock().reads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes every snapshot owed and removes those of generations gone; `io` is held.
    fn settle_snapshots(&self, _io: &MutexGuard<'_, ()>) {
        self.owed.store(false, Ordering::Release);
        let (owed, doomed) = {
            let mut state = self.lock();
            let owed: Vec<PathBuf> = state
                .generations
                .iter()
                .filter(|g| !g.taken)
                .map(|g| g.dir.clone())
                .collect();
            (owed, std::mem::take(&mut state.doomed))
        };
        for dir in doomed {
            remove(&dir);
        }
        let data = self.world.data_dir(&self.id);
        let public = self.world.public_dir(&self.id);
        for dir in owed {
            let linked = link_or_empty(&data, &dir.join("data"))
                .and_then(|()| link_or_empty(&public, &dir.join("public")));
            let mut state = self.lock();
            match linked {
                Ok(()) => match state.generations.iter_mut().find(|g| g.dir == dir) {
                    Some(generation) => generation.taken = true,
                    // Gone meanwhile (a read trimmed it): nobody needs it.
                    None => state.doomed.push(dir),
                },
                Err(e) => {
                    tracing::warn!(
                        "actor {}: cannot snapshot its files for its window ({e}); the window \
                         starts again",
                        self.id
                    );
                    state.forget();
                    drop(state);
                    remove(&dir);
                }
            }
        }
    }
}

/// The lock on a window's state, which [`Window::lock`] made sure exists.
struct Locked<'a>(MutexGuard<'a, Option<Box<State>>>);

impl Deref for Locked<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        self.0.as_deref().expect("made by Window::lock")
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.0.as_deref_mut().expect("made by Window::lock")
    }
}

impl State {
    /// A new generation beginning at read `first`, its snapshot owed, in a new folder of
    /// `windows` (the actor's window folder).
    fn begin_generation(&mut self, windows: &Path, first: u64) {
        let dir = windows.join(self.next_generation.to_string());
        self.next_generation += 1;
        self.generations.push_back(Generation {
            first,
            dir,
            taken: false,
        });
    }

    /// Drops the oldest generation while the next alone still covers the window's length, or
    /// the window holds more than [`WINDOW_BYTES`] and a younger generation remains.
    fn trim(&mut self, limit: usize) {
        while self.generations.len() >= 2 {
            let next = self.generations[1].first;
            let covered = self.next_read - next >= limit as u64;
            if !covered && self.bytes <= WINDOW_BYTES {
                break;
            }
            let oldest = self.generations.pop_front().expect("two or more");
            // A snapshot never taken left nothing on disk.
            if oldest.taken {
                self.doomed.push(oldest.dir);
            }
            while let Some(&(len, _)) = self.reads.front() {
                let number = self.next_read - self.reads.len() as u64;
                if number >= next {
                    break;
                }
                self.bytes -= len;
                self.lines.drain(..len);
                self.reads.pop_front();
            }
        }
    }

    /// The messages kept, read back from their lines, oldest first.
    fn messages(&self) -> Vec<Read> {
        let mut messages = Vec::with_capacity(self.reads.len());
        let mut line = Vec::new();
        let mut at_byte = 0;
        for &(len, at) in &self.reads {
            line.clear();
            line.extend(self.lines.range(at_byte..at_byte + len));
            at_byte += len;
            // A line the broker wrote always reads back.
            if let Ok(envelope) = Envelope::from_line(&line) {
                messages.push(Read {
                    envelope: Arc::new(envelope),
                    at,
                });
            }
        }
        messages
    }

    fn forget(&mut self) {
        self.reads.clear();
        self.lines.clear();
        self.bytes = 0;
        let gone = self
            .generations
            .drain(..)
            .filter(|g| g.taken)
            .map(|g| g.dir);
        self.doomed.extend(gone);
    }
}

/// The wall clock to the last tick of the kernel (a few milliseconds): what a read records, as
/// cheaply as a clock can be read (`CLOCK_REALTIME_COARSE` reads no hardware counter).
fn coarse_now() -> SystemTime {
    match super::mailbox::coarse_clock(libc::CLOCK_REALTIME_COARSE) {
        Some(since_epoch) => std::time::UNIX_EPOCH + since_epoch,
        None => SystemTime::now(),
    }
}

/// Links the tree at `from` into `to`, made anew; a missing `from` makes `to` empty.
fn link_or_empty(from: &Path, to: &Path) -> std::io::Result<()> {
    remove(to);
    if from.is_dir() {
        crate::fs::link_tree(from, to)
    } else {
        std::fs::create_dir_all(to)
    }
}

fn remove(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("{}: cannot remove ({e})", dir.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::raw;

    fn message(n: usize) -> Arc<Envelope> {
        Arc::new(Envelope {
            id: format!("m-{n}"),
            from: ActorId::parse("test").unwrap(),
            reply_to: None,
            speaker: None,
            schedule: None,
            trace: Default::default(),
            body: raw(&serde_json::json!({"type": "n", "n": n})),
        })
    }

    fn ids(recent: &Recent) -> Vec<String> {
        recent.reads.iter().map(|r| r.envelope.id.clone()).collect()
    }

    /// The guest's pattern: read a message, then write `/data/n` with its number.
    fn handle(world: &World, id: &ActorId, window: &Window, n: usize) {
        window.read(&message(n).to_line());
        window.before_change();
        let data = world.data_dir(id);
        std::fs::create_dir_all(&data).unwrap();
        // Committed by rename, as every guest write is.
        std::fs::write(data.join(".tmp"), n.to_string()).unwrap();
        std::fs::rename(data.join(".tmp"), data.join("n")).unwrap();
    }

    #[test]
    fn the_window_keeps_its_length_and_the_files_from_before_its_first_message() {
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(dir.path());
        let id = ActorId::parse("a").unwrap();
        let window = Window::new(world.clone(), id.clone(), 8);
        for n in 0..30 {
            handle(&world, &id, &window, n);
            let held = window.len();
            assert!(
                held >= (n + 1).min(8) && held <= 10,
                "after {n}: {held} held"
            );
        }
        let copy = dir.path().join("copy");
        let recent = window
            .copy(&copy.join("data"), &copy.join("public"))
            .unwrap()
            .unwrap();
        let first: usize = ids(&recent)[0][2..].parse().unwrap();
        assert_eq!(ids(&recent).last().unwrap(), "m-29");
        // The files as they were before the first message: the one before it had written them.
        let before = std::fs::read_to_string(copy.join("data/n")).unwrap();
        assert_eq!(before, (first - 1).to_string());
        // Only the generations still needed keep a snapshot.
        let snapshots = std::fs::read_dir(world.window_dir(&id)).unwrap().count();
        assert!(snapshots <= 5, "{snapshots} snapshots kept");
    }

    #[test]
    fn a_window_that_never_saw_a_change_snapshots_when_copied() {
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(dir.path());
        let id = ActorId::parse("a").unwrap();
        std::fs::create_dir_all(world.data_dir(&id)).unwrap();
        std::fs::write(world.data_dir(&id).join("f"), "kept").unwrap();
        let window = Window::new(world.clone(), id, 256);
        for n in 0..3 {
            window.read(&message(n).to_line());
        }
        let copy = dir.path().join("copy");
        let recent = window
            .copy(&copy.join("data"), &copy.join("public"))
            .unwrap()
            .unwrap();
        assert_eq!(ids(&recent), ["m-0", "m-1", "m-2"]);
        assert_eq!(
            std::fs::read_to_string(copy.join("data/f")).unwrap(),
            "kept"
        );
        assert!(copy.join("public").is_dir());
    }

    #[test]
    fn a_window_of_zero_keeps_nothing_and_forgetting_empties_it() {
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(dir.path());
        let id = ActorId::parse("a").unwrap();
        let window = Window::new(world.clone(), id.clone(), 0);
        window.read(&message(1).to_line());
        assert!(window.is_empty());
        window.set_limit(4);
        handle(&world, &id, &window, 2);
        assert_eq!(window.len(), 1);
        window.forget();
        assert!(window.is_empty());
        let copy = dir.path().join("copy");
        assert!(
            window
                .copy(&copy.join("data"), &copy.join("public"))
                .unwrap()
                .is_none()
        );
        assert_eq!(
            std::fs::read_dir(world.window_dir(&id)).unwrap().count(),
            0,
            "its snapshots are gone"
        );
    }
}
