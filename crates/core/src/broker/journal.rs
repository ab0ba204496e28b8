//! The mailbox journal: a checksummed append-only log of every message the broker accepts into a
//! mailbox and every message taken out of one, so a hard kill of the host loses no accepted
//! message. Replaying the log in order gives every mailbox back, in order.
//!
//! Mailboxes call it under their own lock (mailbox, then journal; never the other way), so the
//! log's order is the queues' order. It knows envelopes and actor ids, not routing or instances.
//! Invariant: a segment is removed only when it and every older segment hold no waiting
//! message, so a take never outlives its put.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};

use memmap2::{Advice, Mmap, MmapRaw};
use rustc_hash::FxHashMap;
use serde_json::value::RawValue;

use crate::fs::Change;
use crate::message::{ActorId, Envelope, Speaker, Tier, Trace};

/// Bytes of one segment file. Only the segment being written is mapped, so this bounds the
/// memory the journal adds to the host; a record larger than this gets a segment of its size.
pub const SEGMENT_BYTES: usize = 4 << 20;

/// The writer faults pages in a chunk at a time ahead of itself, on another thread: a page's
/// first write costs about 4.5 µs on a virtual machine, which would otherwise land on one
/// message in twenty and double the p99 of a round trip.
const PREFAULT_CHUNK: usize = 256 << 10;

/// When the segments on disk hold more than twice the waiting messages' bytes plus this many
/// segments, the oldest segment's waiting messages are copied forward and the segment goes, so
/// a message that waits for long does not keep the log growing behind it.
const SLACK_SEGMENTS: u64 = 4;

/// Every segment starts with these bytes; a file without them holds no records (a kill between
/// its creation and its first write).
const MAGIC: &[u8; 8] = b"sausage1";

/// Every record starts with its payload's length and CRC-32, 4 bytes each, little-endian. A zero
/// length ends a segment's records; so does a record whose checksum fails (a torn tail).
const HEADER: usize = 8;

/// The payload starts with its kind, then the key: the actor (a `u8` length and its bytes) and
/// the position (`i64`). A put goes on with the envelope: the id (`u32` length), the sender
/// (`u8` length), `reply_to` (`u32` length, [`NO_REPLY`] for none), and the body to the end.
/// A put with tags ([`PUT_TAGGED`]) has, between `reply_to` and the body, a byte of flags and
/// the tags they name: [`TAG_SPEAKER`], the person (`u8` length) and the tier (one byte,
/// [`tier_byte`]); [`TAG_SCHEDULE`], the schedule (`u8` length); [`TAG_TRACE`], the trace
/// id (`u128`), the span and its parent (`u64` each), the flags (`u8`) and when it was
/// accepted (`u64`). Every integer is little-endian.
const PUT: u8 = 1;
const TAKE: u8 = 2;
const PUT_TAGGED: u8 = 3;
/// An intent (the key's position is 0): the actor is about to change its files, and the
/// messages at the listed positions, read by it, count as taken exactly when that change
/// happened. It goes on with the count of positions (`u32`), each `i64`, then the change: a
/// kind byte ([`CHANGE_HOLDS`], [`CHANGE_ABSENT`], [`CHANGE_PRESENT`]), the host path (`u32`
/// length), and for `CHANGE_HOLDS` the device and inode (`u64` each). The takes follow once
/// the change is made; an intent without them is settled at the next open by looking at the
/// disk (DESIGN §20: a commit records the last message its actor had read).
const INTENT: u8 = 4;
const CHANGE_HOLDS: u8 = 1;
const CHANGE_ABSENT: u8 = 2;
const CHANGE_PRESENT: u8 = 3;
const TAG_SPEAKER: u8 = 1;
const TAG_SCHEDULE: u8 = 2;
const TAG_TRACE: u8 = 4;
const TRACE_BYTES: usize = 16 + 8 + 8 + 1 + 8;

/// The reply length that means "no `reply_to`".
const NO_REPLY: u32 = u32::MAX;

/// A waiting message: its actor and its position in that actor's mailbox. A mailbox numbers its
/// positions (pushes at the back count up, pushes at the front count down), so sorting the
/// keys of one actor gives its queue.
type Key = (ActorId, i64);

/// One actor's waiting messages with their positions, in queue order.
pub type Waiting = Vec<(i64, Arc<Envelope>)>;

pub struct Journal {
    log: Mutex<Log>,
    /// Waiting messages found at open, per actor in mailbox order, until the actor's mailbox
    /// claims them. Unclaimed ones stay in the log for a later run.
    recovered: Mutex<HashMap<ActorId, Waiting>>,
}

struct Log {
    dir: PathBuf,
    /// The segment being written, mapped whole.
    current: Current,
    /// Older segments, oldest first, with the bytes of their puts still waiting.
    sealed: BTreeMap<u64, Sealed>,
    /// Where each waiting message's put record is. Two lookups per message: a fast hash (the
    /// keys are the host's own, not chosen to collide).
    waiting: FxHashMap<Key, Place>,
    waiting_bytes: u64,
    /// Bytes of every segment file, the current one included.
    disk_bytes: u64,
    /// Sealed segments whose last records may not be on disk yet: synced by the next
    /// [`Journal::sync`].
    unsynced: Vec<u64>,
    /// Log → the prefaulter thread: a chunk of the current segment to fault in before the writer
    /// gets there. Dropping it (with the journal) ends the thread.
    prefault: mpsc::Sender<(Arc<MmapRaw>, usize)>,
}

struct Current {
    number: u64,
    /// Shared with the prefaulter, which only faults pages in and changes no byte; only
    /// `Log::append` writes, through `&mut Current`.
    map: Arc<MmapRaw>,
    /// Bytes written, the magic included: the next record goes here.
    used: usize,
    /// Bytes known to be on disk ([`Journal::sync`]); 0 until the segment's name is too.
    synced: usize,
    waiting_bytes: u64,
}

struct Sealed {
    size: u64,
    waiting_bytes: u64,
}

/// A put record in the log.
#[derive(Clone, Copy)]
struct Place {
    segment: u64,
    offset: u64,
    /// The whole record, header included.
    len: u32,
}

impl Journal {
    /// Opens the journal in `dir` (creating it), reads back every waiting message, and starts a
    /// new segment for this run. A torn tail, as a kill leaves it, ends a segment's records.
    pub fn open(dir: &Path) -> io::Result<Journal> {
        std::fs::create_dir_all(dir)?;
        let mut numbers: Vec<u64> = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            if let Some(number) = segment_number(&entry?.file_name().to_string_lossy()) {
                numbers.push(number);
            }
        }
        numbers.sort_unstable();

        let mut waiting = FxHashMap::default();
        let mut messages = HashMap::new();
        let mut intents = HashMap::new();
        let mut sealed = BTreeMap::new();
        for &number in &numbers {
            let path = segment_path(dir, number);
            let file = File::open(&path)?;
            let size = file.metadata()?.len();
            if size > 0 {
                // SAFETY: the world lock lets one host at a time open this world, and the host
                // never writes a sealed segment, so the mapped file does not change under us.
                let map = unsafe { Mmap::map(&file)? };
                // Only the written head of a segment is read; read-ahead would fetch (and, for
                // allocated but unwritten blocks, zero) megabytes nobody reads.
                map.advise(Advice::Random)?;
                replay(
                    number,
                    &map,
                    &mut waiting,
                    &mut messages,
                    &mut intents,
                    &path,
                );
            }
            sealed.insert(
                number,
                Sealed {
                    size,
                    waiting_bytes: 0,
                },
            );
        }
        // An intent whose takes did not follow: its change either happened (the reads are
        // handled, taken now and recorded so, before the disk can change again) or not (the
        // messages come again).
        let mut settled: Vec<Key> = Vec::new();
        for (actor, intent) in intents {
            if intent.positions.is_empty() || !intent.change.happened() {
                continue;
            }
            for pos in intent.positions {
                let key = (actor.clone(), pos);
                if messages.remove(&key).is_some() {
                    settled.push(key);
                }
            }
        }
        let mut waiting_bytes = 0;
        for place in waiting.values() {
            let segment: &mut Sealed = sealed.get_mut(&place.segment).expect("replayed segment");
            segment.waiting_bytes += u64::from(place.len);
            waiting_bytes += u64::from(place.len);
        }
        let disk_bytes = sealed.values().map(|s| s.size).sum();
        let number = numbers.last().map_or(1, |n| n + 1);
        let (prefault, chunks) = mpsc::channel::<(Arc<MmapRaw>, usize)>();
        std::thread::Builder::new()
            .name("sausage-journal".into())
            .spawn(move || {
                for (map, offset) in chunks {
                    let len = PREFAULT_CHUNK.min(map.len() - offset);
                    // Only an optimisation: where it fails (a kernel before 5.14), the writer
                    // faults the pages in itself.
                    let _ = map.advise_range(Advice::PopulateWrite, offset, len);
                }
            })?;
        let mut log = Log {
            dir: dir.to_path_buf(),
            current: Current::create(dir, number, SEGMENT_BYTES)?,
            sealed,
            waiting,
            waiting_bytes,
            disk_bytes,
            unsynced: Vec::new(),
            prefault,
        };
        log.disk_bytes += log.current.map.len() as u64;
        log.prefault_ahead(0);
        log.collect();

        let mut recovered: HashMap<ActorId, Waiting> = HashMap::new();
        for ((actor, pos), envelope) in messages {
            recovered.entry(actor).or_default().push((pos, envelope));
        }
        for queue in recovered.values_mut() {
            queue.sort_unstable_by_key(|(pos, _)| *pos);
        }
        let journal = Journal {
            log: Mutex::new(log),
            recovered: Mutex::new(recovered),
        };
        for (actor, pos) in settled {
            journal.take(&actor, pos)?;
        }
        Ok(journal)
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        // A panic while holding this lock is a bug elsewhere; keep the log usable.
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The messages that were waiting for `actor` when the journal was opened, in mailbox
    /// order, with their positions; each is handed out once.
    pub fn claim(&self, actor: &ActorId) -> Waiting {
        let mut recovered = self.recovered.lock().unwrap_or_else(|e| e.into_inner());
        recovered.remove(actor).unwrap_or_default()
    }

    /// How many messages wait for each actor, as found at open and not claimed yet, by id.
    pub fn unclaimed(&self) -> BTreeMap<ActorId, usize> {
        let recovered = self.recovered.lock().unwrap_or_else(|e| e.into_inner());
        recovered
            .iter()
            .map(|(a, w)| (a.clone(), w.len()))
            .collect()
    }

    /// Records that `envelope` waits in `actor`'s mailbox at `pos`. When this returns `Ok`, the
    /// message survives a kill of the host; an error means it was not recorded (no room for a
    /// new segment) and the caller must not accept it.
    pub fn put(&self, actor: &ActorId, pos: i64, envelope: &Envelope) -> io::Result<()> {
        let mut log = self.log();
        let id = envelope.id.as_bytes();
        let from = envelope.from.as_str().as_bytes();
        let reply_to = envelope.reply_to.as_deref().map(str::as_bytes);
        let speaker = envelope.speaker.as_ref();
        let schedule = envelope.schedule.as_deref().map(str::as_bytes);
        let trace = envelope.trace.is_some().then_some(&envelope.trace);
        let tagged = speaker.is_some() || schedule.is_some() || trace.is_some();
        let body = envelope.body.get().as_bytes();
        let len = key_len(actor)
            + 4
            + id.len()
            + 1
            + from.len()
            + 4
            + reply_to.map_or(0, <[u8]>::len)
            + usize::from(tagged)
            + speaker.map_or(0, |s| 1 + s.person.as_str().len() + 1)
            + schedule.map_or(0, |s| 1 + s.len())
            + trace.map_or(0, |_| TRACE_BYTES)
            + body.len();
        let place = log.append(len, |out| {
            let mut out = Writer(out);
            out.key(if tagged { PUT_TAGGED } else { PUT }, actor, pos);
            out.u32(id.len() as u32);
            out.bytes(id);
            out.u8(from.len() as u8);
            out.bytes(from);
            match reply_to {
                Some(reply_to) => {
                    out.u32(reply_to.len() as u32);
                    out.bytes(reply_to);
                }
                None => out.u32(NO_REPLY),
            }
            if tagged {
                let flags = if speaker.is_some() { TAG_SPEAKER } else { 0 }
                    | if schedule.is_some() { TAG_SCHEDULE } else { 0 }
                    | if trace.is_some() { TAG_TRACE } else { 0 };
                out.u8(flags);
            }
            if let Some(speaker) = speaker {
                out.u8(speaker.person.as_str().len() as u8);
                out.bytes(speaker.person.as_str().as_bytes());
                out.u8(tier_byte(speaker.tier));
            }
            if let Some(schedule) = schedule {
                // Schedule ids follow the rules of actor ids: at most 64 bytes.
                out.u8(schedule.len() as u8);
                out.bytes(schedule);
            }
            if let Some(trace) = trace {
                out.bytes(&trace.trace.to_le_bytes());
                out.bytes(&trace.span.to_le_bytes());
                out.bytes(&trace.parent.to_le_bytes());
                out.u8(u8::from(trace.sampled));
                out.bytes(&trace.at.to_le_bytes());
            }
            out.bytes(body);
        })?;
        log.wait(actor.clone(), pos, place);
        log.compact_if_wasteful();
        Ok(())
    }

    /// Records that `actor` is about to make `change`, having read the messages at
    /// `positions`: should no take of them follow, they are taken at the next open exactly
    /// when the disk shows the change happened.
    pub fn intend(&self, actor: &ActorId, positions: &[i64], change: &Change) -> io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let (kind, path, inode) = match change {
            Change::Holds { path, dev, ino } => (CHANGE_HOLDS, path, Some((*dev, *ino))),
            Change::Absent { path } => (CHANGE_ABSENT, path, None),
            Change::Present { path } => (CHANGE_PRESENT, path, None),
        };
        let path = path.as_os_str().as_bytes();
        let len =
            key_len(actor) + 4 + 8 * positions.len() + 1 + 4 + path.len() + inode.map_or(0, |_| 16);
        let mut log = self.log();
        log.append(len, |out| {
            let mut out = Writer(out);
            out.key(INTENT, actor, 0);
            out.u32(positions.len() as u32);
            for pos in positions {
                out.bytes(&pos.to_le_bytes());
            }
            out.u8(kind);
            out.u32(path.len() as u32);
            out.bytes(path);
            if let Some((dev, ino)) = inode {
                out.bytes(&dev.to_le_bytes());
                out.bytes(&ino.to_le_bytes());
            }
        })?;
        Ok(())
    }

    /// Makes every record so far survive a power loss, not only a kill of the host: the pages
    /// written since the last sync go to disk (`msync` of the current segment, `fdatasync` of
    /// segments sealed since), and a new segment's name with a sync of the folder. The journal
    /// is otherwise never synced; this is for a guest's fsync, whose commit must not survive
    /// without the record of the messages it settled (they would be handled twice).
    pub fn sync(&self) -> io::Result<()> {
        let mut log = self.log();
        for number in std::mem::take(&mut log.unsynced) {
            match File::open(segment_path(&log.dir, number)) {
                Ok(segment) => segment.sync_data()?,
                // Removed meanwhile: it held nothing that waits.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        let (synced, used) = (log.current.synced, log.current.used);
        log.current.map.flush_range(synced, used - synced)?;
        if synced == 0 {
            File::open(&log.dir)?.sync_all()?;
        }
        log.current.synced = used;
        Ok(())
    }

    /// Records that the message at `pos` left `actor`'s mailbox (taken by its reader, drained or
    /// dropped), so it is never delivered again. An error means the log could not record it:
    /// the message would come back after a kill.
    pub fn take(&self, actor: &ActorId, pos: i64) -> io::Result<()> {
        let mut log = self.log();
        let key = (actor.clone(), pos);
        let Some(place) = log.waiting.remove(&key) else {
            // Its put was never recorded (a parked message the log had no room for).
            return Ok(());
        };
        if let Err(e) = log.append(key_len(actor), |out| Writer(out).key(TAKE, actor, pos)) {
            log.waiting.insert(key, place);
            return Err(e);
        }
        log.done(place);
        Ok(())
    }
}

impl Log {
    /// Appends one record whose payload `write` fills (exactly `len` bytes), starting a new
    /// segment when the current one has no room. Returns where the record went.
    fn append(&mut self, len: usize, write: impl FnOnce(&mut [u8])) -> io::Result<Place> {
        let record = HEADER + len;
        let record_len = u32::try_from(record)
            .map_err(|_| io::Error::other(format!("a record of {record} bytes is too large")))?;
        if self.current.used + record > self.current.map.len() {
            self.roll(record)?;
        }
        let offset = self.current.used;
        let (header, payload) = self.current.bytes(offset, record).split_at_mut(HEADER);
        write(payload);
        header[4..].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
        // The length goes last: until it is there, the record does not exist. A kill that tears
        // the record anyway is caught by the checksum.
        fence(Ordering::Release);
        header[..4].copy_from_slice(&(len as u32).to_le_bytes());
        self.current.used += record;
        if offset / PREFAULT_CHUNK != self.current.used / PREFAULT_CHUNK {
            self.prefault_ahead(self.current.used);
        }
        Ok(Place {
            segment: self.current.number,
            offset: offset as u64,
            len: record_len,
        })
    }

    /// Seals the current segment and starts the next, big enough for a record of `record`
    /// bytes.
    fn roll(&mut self, record: usize) -> io::Result<()> {
        let size = SEGMENT_BYTES.max((MAGIC.len() + record).next_multiple_of(4096));
        let next = Current::create(&self.dir, self.current.number + 1, size)?;
        let old = std::mem::replace(&mut self.current, next);
        if old.synced < old.used {
            self.unsynced.push(old.number);
        }
        self.disk_bytes += size as u64;
        self.sealed.insert(
            old.number,
            Sealed {
                size: old.map.len() as u64,
                waiting_bytes: old.waiting_bytes,
            },
        );
        self.prefault_ahead(0);
        self.collect();
        Ok(())
    }

    /// Asks the prefaulter for the chunk after the one holding `offset`, and for that one too
    /// at the start of a segment.
    fn prefault_ahead(&self, offset: usize) {
        let chunk = offset / PREFAULT_CHUNK;
        let first = if chunk == 0 { 0 } else { chunk + 1 };
        for chunk in first..=chunk + 1 {
            let start = chunk * PREFAULT_CHUNK;
            if start < self.current.map.len() {
                // The thread ends only when this sender is dropped; a send cannot fail before.
                let _ = self.prefault.send((self.current.map.clone(), start));
            }
        }
    }

    /// Notes a put as waiting.
    fn wait(&mut self, actor: ActorId, pos: i64, place: Place) {
        let len = u64::from(place.len);
        self.waiting_bytes += len;
        *self.waiting_bytes_of(place.segment) += len;
        // A mailbox never reuses a waiting position, but a compaction copy replaces its put.
        if let Some(old) = self.waiting.insert((actor, pos), place) {
            self.waiting_bytes -= u64::from(old.len);
            *self.waiting_bytes_of(old.segment) -= u64::from(old.len);
        }
    }

    /// Notes a put, just removed from `waiting`, as no longer waiting, and removes the
    /// segments that emptied.
    fn done(&mut self, place: Place) {
        let len = u64::from(place.len);
        self.waiting_bytes -= len;
        let left = self.waiting_bytes_of(place.segment);
        *left -= len;
        if *left == 0 && self.sealed.first_key_value().map(|(n, _)| *n) == Some(place.segment) {
            self.collect();
        }
    }

    fn waiting_bytes_of(&mut self, segment: u64) -> &mut u64 {
        if segment == self.current.number {
            &mut self.current.waiting_bytes
        } else {
            &mut self
                .sealed
                .get_mut(&segment)
                .expect("a waiting message's segment is on disk")
                .waiting_bytes
        }
    }

    /// Removes sealed segments, oldest first, while they hold no waiting message. A segment that
    /// cannot be removed stops the removal (removing a newer one could resurrect the messages
    /// its takes took); it is tried again later.
    fn collect(&mut self) {
        while let Some(entry) = self.sealed.first_entry() {
            if entry.get().waiting_bytes > 0 {
                return;
            }
            let path = segment_path(&self.dir, *entry.key());
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!("{}: cannot remove: {e}", path.display());
                return;
            }
            self.disk_bytes -= entry.remove().size;
        }
    }

    /// Copies the oldest sealed segment's waiting messages forward and removes it, when the log
    /// holds much more than the messages that wait (see [`SLACK_SEGMENTS`]).
    fn compact_if_wasteful(&mut self) {
        let slack = SLACK_SEGMENTS * SEGMENT_BYTES as u64;
        if self.disk_bytes <= 2 * self.waiting_bytes + slack {
            return;
        }
        let Some((&oldest, _)) = self.sealed.first_key_value() else {
            return;
        };
        if let Err(e) = self.copy_forward(oldest) {
            tracing::warn!(
                "{}: cannot compact the mailbox journal: {e}",
                self.dir.display()
            );
        }
        self.collect();
    }

    fn copy_forward(&mut self, segment: u64) -> io::Result<()> {
        let mut moving: Vec<(Key, Place)> = self
            .waiting
            .iter()
            .filter(|(_, place)| place.segment == segment)
            .map(|(key, place)| (key.clone(), *place))
            .collect();
        moving.sort_unstable_by_key(|(_, place)| place.offset);
        let file = File::open(segment_path(&self.dir, segment))?;
        for ((actor, pos), place) in moving {
            let mut record = vec![0; place.len as usize];
            file.read_exact_at(&mut record, place.offset)?;
            let payload = &record[HEADER..];
            let copied = self.append(payload.len(), |out| out.copy_from_slice(payload))?;
            self.wait(actor, pos, copied);
        }
        Ok(())
    }
}

impl Current {
    /// Creates segment `number` with all of its `size` bytes allocated, so writing into the
    /// mapping never needs a disk block (a full disk would otherwise kill the host with SIGBUS).
    fn create(dir: &Path, number: u64, size: usize) -> io::Result<Current> {
        let path = segment_path(dir, number);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        // SAFETY: a plain system call on a file descriptor this function owns.
        let failed = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size as libc::off_t) };
        if failed != 0 {
            let _ = std::fs::remove_file(&path);
            return Err(io::Error::from_raw_os_error(failed));
        }
        // The world lock lets one host at a time open this world, and this segment is only
        // written through this mapping, so no one else changes the memory under us.
        let map = MmapRaw::map_raw(&file)?;
        // Pages are written one after another, each once. Without this, the first write fault
        // reads ahead (zero-fills) megabytes of the fresh file: 1.5 ms measured at every start.
        map.advise(Advice::Random)?;
        let mut current = Current {
            number,
            map: Arc::new(map),
            used: MAGIC.len(),
            synced: 0,
            waiting_bytes: 0,
        };
        current.bytes(0, MAGIC.len()).copy_from_slice(MAGIC);
        Ok(current)
    }

    /// The `len` bytes of the mapping at `offset`, to write.
    fn bytes(&mut self, offset: usize, len: usize) -> &mut [u8] {
        assert!(offset + len <= self.map.len(), "a write inside the segment");
        // SAFETY: the range lies inside the mapping, which lives as long as `self`; `&mut self`
        // makes this the only reference into it (the prefaulter holds no reference to bytes).
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(offset), len) }
    }
}

/// The last intent of an actor found in the log, with the positions no take followed yet.
struct Intent {
    positions: Vec<i64>,
    change: Change,
}

/// Applies a segment's records, in order, to the waiting messages. Reading stops at the end of
/// the records or at a torn one; a record with a good checksum that cannot be decoded (a bug)
/// is skipped with a note.
fn replay(
    number: u64,
    map: &[u8],
    waiting: &mut FxHashMap<Key, Place>,
    messages: &mut HashMap<Key, Arc<Envelope>>,
    intents: &mut HashMap<ActorId, Intent>,
    path: &Path,
) {
    if !map.starts_with(MAGIC) {
        return;
    }
    let mut offset = MAGIC.len();
    while let Some(header) = map.get(offset..offset + HEADER) {
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let Some(payload) = map.get(offset + HEADER..offset + HEADER + len) else {
            return;
        };
        if len == 0 || crc32fast::hash(payload) != crc {
            return;
        }
        match decode(payload) {
            Ok(Record::Put(key, envelope)) => {
                let place = Place {
                    segment: number,
                    offset: offset as u64,
                    len: (HEADER + len) as u32,
                };
                waiting.insert(key.clone(), place);
                messages.insert(key, Arc::new(envelope));
            }
            Ok(Record::Take(key)) => {
                if let Some(intent) = intents.get_mut(&key.0) {
                    intent.positions.retain(|pos| *pos != key.1);
                }
                waiting.remove(&key);
                messages.remove(&key);
            }
            Ok(Record::Intent(actor, intent)) => {
                // A later change of the actor means the one before was made: only the last
                // intent can be unfinished.
                intents.insert(actor, intent);
            }
            Err(e) => tracing::error!(
                "{}: the record at byte {offset} cannot be read ({e}); skipped",
                path.display()
            ),
        }
        offset += HEADER + len;
    }
}

enum Record {
    Put(Key, Envelope),
    Take(Key),
    Intent(ActorId, Intent),
}

fn decode(payload: &[u8]) -> Result<Record, String> {
    let mut r = Reader(payload);
    let kind = r.u8()?;
    let len = r.u8()? as usize;
    let actor = ActorId::parse(r.str(len)?)?;
    let pos = i64::from_le_bytes(r.bytes(8)?.try_into().expect("8 bytes"));
    if kind == TAKE {
        return Ok(Record::Take((actor, pos)));
    }
    if kind == INTENT {
        use std::os::unix::ffi::OsStrExt;
        let count = r.u32()? as usize;
        let mut positions = Vec::with_capacity(count.min(r.0.len() / 8));
        for _ in 0..count {
            positions.push(r.i64()?);
        }
        let change_kind = r.u8()?;
        let len = r.u32()? as usize;
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(r.bytes(len)?));
        let change = match change_kind {
            CHANGE_HOLDS => Change::Holds {
                path,
                dev: r.u64()?,
                ino: r.u64()?,
            },
            CHANGE_ABSENT => Change::Absent { path },
            CHANGE_PRESENT => Change::Present { path },
            other => return Err(format!("unknown change kind {other}")),
        };
        return Ok(Record::Intent(actor, Intent { positions, change }));
    }
    if kind != PUT && kind != PUT_TAGGED {
        return Err(format!("unknown record kind {kind}"));
    }
    let len = r.u32()? as usize;
    let id = r.str(len)?.to_string();
    let len = r.u8()? as usize;
    let from = ActorId::parse(r.str(len)?)?;
    let reply_to = match r.u32()? {
        NO_REPLY => None,
        len => Some(r.str(len as usize)?.to_string()),
    };
    let flags = if kind == PUT_TAGGED { r.u8()? } else { 0 };
    let speaker = if flags & TAG_SPEAKER != 0 {
        let len = r.u8()? as usize;
        let person = ActorId::parse(r.str(len)?)?;
        let tier = match r.u8()? {
            0 => Tier::Guest,
            1 => Tier::Member,
            2 => Tier::Owner,
            other => return Err(format!("unknown tier {other}")),
        };
        Some(Speaker { person, tier })
    } else {
        None
    };
    let schedule = if flags & TAG_SCHEDULE != 0 {
        let len = r.u8()? as usize;
        Some(r.str(len)?.into())
    } else {
        None
    };
    let trace = if flags & TAG_TRACE != 0 {
        Trace {
            trace: u128::from_le_bytes(r.bytes(16)?.try_into().expect("16 bytes")),
            span: r.u64()?,
            parent: r.u64()?,
            sampled: r.u8()? == 1,
            at: r.u64()?,
        }
    } else {
        Trace::NONE
    };
    let body = RawValue::from_string(r.str(r.0.len())?.to_string())
        .map_err(|e| format!("the body is not JSON: {e}"))?;
    Ok(Record::Put(
        (actor, pos),
        Envelope {
            id,
            from,
            reply_to,
            speaker,
            schedule,
            trace,
            body,
        },
    ))
}

/// A tier as one byte of a record.
fn tier_byte(tier: Tier) -> u8 {
    match tier {
        Tier::Guest => 0,
        Tier::Member => 1,
        Tier::Owner => 2,
    }
}

/// Bytes of a record's kind, actor and position.
fn key_len(actor: &ActorId) -> usize {
    1 + 1 + actor.as_str().len() + 8
}

/// Fills a payload front to back.
struct Writer<'a>(&'a mut [u8]);

impl Writer<'_> {
    fn bytes(&mut self, bytes: &[u8]) {
        let (head, rest) = std::mem::take(&mut self.0).split_at_mut(bytes.len());
        head.copy_from_slice(bytes);
        self.0 = rest;
    }

    fn u8(&mut self, n: u8) {
        self.bytes(&[n]);
    }

    fn u32(&mut self, n: u32) {
        self.bytes(&n.to_le_bytes());
    }

    fn key(&mut self, kind: u8, actor: &ActorId, pos: i64) {
        self.u8(kind);
        // Actor ids are at most 64 bytes (`MAX_ACTOR_ID_LEN`).
        self.u8(actor.as_str().len() as u8);
        self.bytes(actor.as_str().as_bytes());
        self.bytes(&pos.to_le_bytes());
    }
}

/// Reads a payload front to back; running short is an error, not a panic.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("the record ends early".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn str(&mut self, n: usize) -> Result<&'a str, String> {
        std::str::from_utf8(self.bytes(n)?).map_err(|e| e.to_string())
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }

    fn i64(&mut self) -> Result<i64, String> {
        Ok(i64::from_le_bytes(
            self.bytes(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.bytes(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.bytes(4)?.try_into().expect("4 bytes"),
        ))
    }
}

fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}.log"))
}

fn segment_number(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::raw;
    use serde_json::json;

    fn actor(id: &str) -> ActorId {
        ActorId::parse(id).unwrap()
    }

    fn envelope(n: usize, pad: usize) -> Envelope {
        Envelope {
            id: format!("m-{n}"),
            from: actor("sender"),
            reply_to: n.is_multiple_of(2).then(|| format!("x/{n}")),
            speaker: None,
            schedule: None,
            trace: Default::default(),
            body: raw(&json!({"type": "n", "n": n, "pad": "é".repeat(pad)})),
        }
    }

    /// Every message claimed for `who` at a fresh open of `dir`: (position, id).
    fn reopened(dir: &Path, who: &str) -> Vec<(i64, String)> {
        let journal = Journal::open(dir).unwrap();
        journal
            .claim(&actor(who))
            .into_iter()
            .map(|(pos, e)| (pos, e.id.clone()))
            .collect()
    }

    fn segments(dir: &Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    #[test]
    fn who_a_message_speaks_for_and_its_schedule_come_back_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let spoken = |n: usize, tier| Envelope {
            speaker: Some(Speaker {
                person: actor("ann"),
                tier,
            }),
            schedule: (tier == Tier::Owner).then(|| "daily".into()),
            ..envelope(n, 1)
        };
        {
            let journal = Journal::open(dir.path()).unwrap();
            journal
                .put(&actor("a"), 0, &spoken(0, Tier::Guest))
                .unwrap();
            journal.put(&actor("a"), 1, &envelope(1, 1)).unwrap();
            journal
                .put(&actor("a"), 2, &spoken(2, Tier::Owner))
                .unwrap();
        }
        let journal = Journal::open(dir.path()).unwrap();
        let speakers: Vec<_> = journal
            .claim(&actor("a"))
            .into_iter()
            .map(|(_, e)| {
                let speaker = e.speaker.as_ref().map(|s| (s.person.to_string(), s.tier));
                (speaker, e.schedule.as_deref().map(str::to_string))
            })
            .collect();
        assert_eq!(
            speakers,
            [
                (Some(("ann".to_string(), Tier::Guest)), None),
                (None, None),
                (
                    Some(("ann".to_string(), Tier::Owner)),
                    Some("daily".to_string())
                )
            ]
        );
    }

    #[test]
    fn waiting_messages_come_back_whole_and_in_order_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let journal = Journal::open(dir.path()).unwrap();
            for n in 0..5 {
                journal
                    .put(&actor("a"), n, &envelope(n as usize, 3))
                    .unwrap();
            }
            journal.put(&actor("b"), 0, &envelope(9, 0)).unwrap();
            journal.take(&actor("a"), 0).unwrap();
            journal.take(&actor("a"), 2).unwrap();
            journal.put(&actor("a"), -1, &envelope(7, 0)).unwrap();
        }
        let journal = Journal::open(dir.path()).unwrap();
        let a = journal.claim(&actor("a"));
        let got: Vec<(i64, &str)> = a.iter().map(|(p, e)| (*p, e.id.as_str())).collect();
        assert_eq!(got, [(-1, "m-7"), (1, "m-1"), (3, "m-3"), (4, "m-4")]);
        let original = envelope(4, 3);
        let back = &a[3].1;
        assert_eq!(back.to_line(), original.to_line(), "every field comes back");
        assert!(journal.claim(&actor("a")).is_empty(), "claimed once");
        assert_eq!(journal.claim(&actor("b"))[0].1.id, "m-9");
    }

    /// The change a test commits: `file` holds what the temporary `temp` held.
    fn landing(temp: &Path, file: &Path) -> Change {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(temp).unwrap();
        Change::Holds {
            path: file.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    /// DESIGN §20: reads settled by a change that a kill interrupted count as taken exactly
    /// when the disk shows the change happened, and that verdict is kept by the next open.
    #[test]
    fn reads_noted_before_a_change_are_taken_exactly_when_the_change_happened() {
        let dir = tempfile::tempdir().unwrap();
        let files = tempfile::tempdir().unwrap();
        let (temp, file) = (files.path().join(".tmp"), files.path().join("state"));
        std::fs::write(&temp, "new").unwrap();
        std::fs::write(&file, "old").unwrap();
        let change = landing(&temp, &file);
        {
            let journal = Journal::open(dir.path()).unwrap();
            for pos in 0..4 {
                journal
                    .put(&actor("a"), pos, &envelope(pos as usize, 0))
                    .unwrap();
            }
            journal.take(&actor("a"), 0).unwrap();
            // Read 1 and 2, about to commit: the kill comes before the rename.
            journal.intend(&actor("a"), &[1, 2], &change).unwrap();
        }
        let ids = |waiting: Vec<(i64, String)>| -> Vec<i64> {
            waiting.into_iter().map(|(pos, _)| pos).collect()
        };
        assert_eq!(
            ids(reopened(dir.path(), "a")),
            [1, 2, 3],
            "not committed: they come again"
        );

        {
            let journal = Journal::open(dir.path()).unwrap();
            journal.claim(&actor("a"));
            journal.intend(&actor("a"), &[1, 2], &change).unwrap();
        }
        // The rename happened; the takes after it did not.
        std::fs::rename(&temp, &file).unwrap();
        assert_eq!(
            ids(reopened(dir.path(), "a")),
            [3],
            "committed: handled once"
        );
        // The next commit replaces the file: the verdict was recorded, 1 and 2 stay taken.
        std::fs::write(&temp, "newer").unwrap();
        std::fs::rename(&temp, &file).unwrap();
        assert_eq!(ids(reopened(dir.path(), "a")), [3]);

        // Takes that followed the intent leave nothing for it to decide; a later intent
        // replaces an earlier one.
        {
            let journal = Journal::open(dir.path()).unwrap();
            journal.claim(&actor("a"));
            journal.put(&actor("a"), 4, &envelope(4, 0)).unwrap();
            journal
                .intend(&actor("a"), &[3], &Change::Absent { path: file.clone() })
                .unwrap();
            journal.take(&actor("a"), 3).unwrap();
            journal
                .intend(&actor("a"), &[4], &Change::Present { path: file.clone() })
                .unwrap();
        }
        assert_eq!(
            ids(reopened(dir.path(), "a")),
            Vec::<i64>::new(),
            "the file is present"
        );
    }

    #[test]
    fn a_torn_tail_loses_only_the_record_it_tore() {
        let dir = tempfile::tempdir().unwrap();
        {
            let journal = Journal::open(dir.path()).unwrap();
            for n in 0..3 {
                journal
                    .put(&actor("a"), n, &envelope(n as usize, 0))
                    .unwrap();
            }
            // A kill in the middle of the third record's copy: its last bytes never arrive.
            let mut log = journal.log();
            let used = log.current.used;
            log.current.bytes(used - 3, 3).fill(0);
        }
        assert_eq!(
            reopened(dir.path(), "a"),
            [(0, "m-0".to_string()), (1, "m-1".to_string())]
        );
        // The next run writes a new segment; what follows the torn record still counts.
        {
            let journal = Journal::open(dir.path()).unwrap();
            journal.take(&actor("a"), 0).unwrap();
            journal.put(&actor("a"), 2, &envelope(5, 0)).unwrap();
        }
        assert_eq!(
            reopened(dir.path(), "a"),
            [(1, "m-1".to_string()), (2, "m-5".to_string())]
        );
    }

    #[test]
    fn garbage_in_a_segment_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        {
            let journal = Journal::open(dir.path()).unwrap();
            journal.put(&actor("a"), 0, &envelope(0, 0)).unwrap();
        }
        let mut segment = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .max()
            .unwrap();
        std::fs::write(&segment, b"not a segment").unwrap();
        assert!(reopened(dir.path(), "a").is_empty());
        segment.set_file_name(format!("{:020}.log", 999));
        let mut forged = MAGIC.to_vec();
        forged.extend_from_slice(&[0xff; 64]);
        std::fs::write(&segment, forged).unwrap();
        assert!(reopened(dir.path(), "a").is_empty());
    }

    #[test]
    fn segments_are_removed_once_nothing_in_them_waits() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let big = envelope(0, 100_000);
        for n in 0..400 {
            journal.put(&actor("a"), n, &big).unwrap();
            journal.take(&actor("a"), n).unwrap();
        }
        assert!(
            segments(dir.path()) <= 2,
            "{} segments",
            segments(dir.path())
        );
        assert!(journal.log().disk_bytes <= 2 * SEGMENT_BYTES as u64);
    }

    #[test]
    fn a_message_that_waits_long_does_not_keep_the_log_growing() {
        let dir = tempfile::tempdir().unwrap();
        {
            let journal = Journal::open(dir.path()).unwrap();
            journal.put(&actor("stuck"), 0, &envelope(1, 10)).unwrap();
            let big = envelope(0, 100_000);
            for n in 0..2000 {
                journal.put(&actor("a"), n, &big).unwrap();
                journal.take(&actor("a"), n).unwrap();
            }
            let bound = (SLACK_SEGMENTS + 2) * SEGMENT_BYTES as u64;
            let disk_bytes = journal.log().disk_bytes;
            assert!(disk_bytes <= bound, "{disk_bytes}");
            assert!(segments(dir.path()) as u64 <= SLACK_SEGMENTS + 2);
        }
        assert_eq!(reopened(dir.path(), "stuck"), [(0, "m-1".to_string())]);
    }

    #[test]
    fn a_record_larger_than_a_segment_gets_its_own() {
        let dir = tempfile::tempdir().unwrap();
        {
            let journal = Journal::open(dir.path()).unwrap();
            journal.put(&actor("a"), 0, &envelope(0, 3 << 20)).unwrap();
            journal.put(&actor("a"), 1, &envelope(1, 0)).unwrap();
        }
        let back: Vec<i64> = reopened(dir.path(), "a").iter().map(|(p, _)| *p).collect();
        assert_eq!(back, [0, 1]);
    }

    #[test]
    fn other_files_in_the_folder_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        std::fs::write(dir.path().join("12.log"), "short name").unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        journal.put(&actor("a"), 0, &envelope(0, 0)).unwrap();
        drop(journal);
        assert_eq!(reopened(dir.path(), "a").len(), 1);
        assert!(dir.path().join("notes.txt").exists());
        assert!(dir.path().join("12.log").exists());
    }

    mod hostile {
        use super::*;
        use proptest::prelude::*;

        /// A record with a correct header around `payload`.
        fn framed(payload: &[u8]) -> Vec<u8> {
            let mut record = (payload.len() as u32).to_le_bytes().to_vec();
            record.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
            record.extend_from_slice(payload);
            record
        }

        proptest! {
            /// Whatever a segment holds (torn, forged or random records), opening the journal
            /// does not panic, and the journal works afterwards.
            #[test]
            fn any_segment_content_opens_without_panic(
                raw in proptest::collection::vec(any::<u8>(), 0..512),
                payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
                kinds in proptest::collection::vec(0u8..4, 8),
            ) {
                let dir = tempfile::tempdir().unwrap();
                let mut segment = MAGIC.to_vec();
                for (payload, kind) in payloads.iter().zip(&kinds) {
                    // Half-plausible records: a real kind and actor, then random bytes.
                    let mut plausible = vec![*kind, 1, b'a'];
                    plausible.extend_from_slice(payload);
                    segment.extend_from_slice(&framed(&plausible));
                }
                segment.extend_from_slice(&raw);
                std::fs::write(dir.path().join(format!("{:020}.log", 1)), &segment).unwrap();
                let journal = Journal::open(dir.path()).unwrap();
                let _ = journal.claim(&actor("a"));
                journal.put(&actor("a"), 1000, &envelope(1, 0)).unwrap();
                journal.take(&actor("a"), 1000).unwrap();
            }
        }
    }
}
