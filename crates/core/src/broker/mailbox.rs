//! One actor's mailbox: the messages the broker accepted for it, in order, and the stdin its
//! running instance reads them from.
//!
//! The mailbox *is* the instance's stdin: a guest's read takes the next message straight from
//! the queue, so messages never sit in a buffer that a crash would lose. Between instances
//! (stopped, restarting, upgrading) the queue keeps accepting up to [`MAILBOX_CAPACITY`].
//! A durable mailbox records every push and every take in the [`Journal`] before it returns, so
//! a kill of the host loses nothing accepted; a message counts as delivered once it is read.
//! When a world spans several hosts (DESIGN §16), a WASM actor's mailbox is a JetStream stream
//! instead ([`MailboxStream`]): a push publishes to it, the owning host's consumer hands each
//! message to [`Mailbox::arrive`], and a read acknowledges it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustc_hash::FxHashMap;
use tokio::sync::Notify;

use super::counters::Waits;
use super::journal::{Journal, Waiting};
use super::router::Traffic;
use super::window::Window;
use crate::message::{ActorId, Envelope, Trace};
use crate::runtime::stdio::{BoxFuture, GuestInput};
use crate::traces;

/// Messages a mailbox holds. While it is full, senders wait (a WASM sender's stdout is not
/// read); a message still blocked after [`FULL_MAILBOX_TIMEOUT`] becomes `undeliverable`.
pub const MAILBOX_CAPACITY: usize = 1000;

/// Bytes of queued messages (as their stdin lines) a mailbox holds: full at this many too, so a
/// thousand messages of a megabyte each cannot take a gigabyte of the host's memory. A message
/// into an empty mailbox always goes in (a line is at most 1 MiB anyway).
pub const MAILBOX_BYTES: usize = 64 * 1024 * 1024;

/// How long a sender waits on a full mailbox before its message becomes `undeliverable`.
pub const FULL_MAILBOX_TIMEOUT: Duration = Duration::from_secs(30);

/// The bytes of queued messages that count as already written into a running instance's stdin,
/// as a pipe buffer would hold them. A message beyond this window is "being written".
pub const STDIN_PIPE_BYTES: usize = 64 * 1024;

/// A message being written into a running instance's stdin (beyond [`STDIN_PIPE_BYTES`]) that
/// the guest leaves unread this long is dropped, with a note in the actor's log. The clock starts
/// when the message is offered to the instance (queued while it runs, or the instance started),
/// or at the guest's last read if that is later; never at a read before the offer, so an actor
/// idle for an hour that then gets a burst loses nothing (DESIGN §11).
pub const STDIN_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// A message an instance read settles (is not given again after a kill of the host) at the
/// guest's next change of its files, when it next waits for input with nothing left to read,
/// when the instance ends, or this long after the read, whichever comes first. An actor that
/// keeps its state in files handles each message once across kills (DESIGN §20); one that
/// keeps none and never waits (under a flood) may see the messages of its last seconds again,
/// as a Kafka consumer with its default auto-commit does.
pub const READ_SETTLES_AFTER: Duration = Duration::from_secs(5);

/// At most this many reads of one instance wait to settle: past it, the oldest settles. A
/// flood into an actor that neither commits nor waits keeps its journal (or its stream's
/// unacknowledged messages, which the stream stops delivering past the mailbox's capacity)
/// from growing; an actor that commits once per batch handles each message once across a kill
/// for batches up to this size.
pub const MAX_UNSETTLED: usize = 256;

/// A test knob, not a setting: `SAUSAGE_TEST_STDIN_STALL_MS` replaces [`STDIN_WRITE_TIMEOUT`]
/// so a test can wait out a stall in seconds rather than minutes. Read once, at the first use.
const STDIN_STALL_TEST_KNOB: &str = "SAUSAGE_TEST_STDIN_STALL_MS";

/// [`STDIN_WRITE_TIMEOUT`], or what [`STDIN_STALL_TEST_KNOB`] sets.
pub fn stdin_write_timeout() -> Duration {
    static TIMEOUT: OnceLock<Duration> = OnceLock::new();
    *TIMEOUT.get_or_init(|| {
        std::env::var(STDIN_STALL_TEST_KNOB)
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map_or(STDIN_WRITE_TIMEOUT, Duration::from_millis)
    })
}

pub struct Mailbox {
    state: Mutex<Inner>,
    /// Wakes the one reader (the running instance's stdin, or a native actor's loop) when a
    /// message arrives or the input closes. `notify_one` keeps a permit if nobody waits yet.
    arrived: Notify,
    /// Wakes every sender blocked on a full mailbox when a message is taken out.
    space: Notify,
    /// Where the queue is recorded.
    store: Store,
    /// The messages a WASM actor read last, for shadow runs and forks (DESIGN §21); made at
    /// its first start.
    window: OnceLock<Arc<Window>>,
    /// A native actor's hand that takes the messages it wants as they are pushed, before the
    /// queue (see [`Mailbox::tap`]).
    tap: OnceLock<Tap>,
}

/// Takes a message pushed into a native actor's mailbox on the pusher's thread, or leaves it
/// (false) to be queued as any other.
pub type Tap = Box<dyn Fn(&Arc<Envelope>) -> bool + Send + Sync>;

enum Store {
    /// A candidate's scratch mailbox, which must not outlive its test.
    Memory,
    /// This host's journal.
    Journal {
        journal: Arc<Journal>,
        actor: ActorId,
    },
    /// The actor's stream on the cluster: pushes go there, the queue holds what its consumer
    /// handed over and the guest has not read yet.
    Stream {
        stream: Arc<dyn MailboxStream>,
        actor: ActorId,
    },
}

/// The mailboxes of a world spread over several hosts (DESIGN §16): one stream per actor that
/// the host owning the actor consumes. Implemented by `cluster`.
pub trait MailboxStream: Send + Sync {
    /// Publishes a message into `actor`'s stream, after everything published before it. False
    /// when too many publications wait for the stream's acknowledgement: the sender waits for
    /// [`MailboxStream::space`].
    fn publish(&self, actor: &ActorId, envelope: &Arc<Envelope>) -> bool;
    /// The message at stream sequence `pos` of `actor`'s stream was read: it leaves the stream.
    fn ack(&self, actor: &ActorId, pos: i64);
    /// Notified when publications are acknowledged.
    fn space(&self) -> &Notify;
    /// Resolves once every message published before the call is stored in its stream (or was
    /// refused and reported): what output before commit waits for on a cluster (DESIGN §20).
    fn stored(&self) -> BoxFuture<'_> {
        Box::pin(async {})
    }
}

struct Inner {
    queue: VecDeque<Queued>,
    /// The stdin bytes of everything in `queue`, kept with it by [`Inner::enqueue`] and
    /// [`Inner::dequeue`]: the mailbox is full at [`MAILBOX_BYTES`].
    bytes: usize,
    /// Messages accepted since the host started, by sender: what the web console's rates and
    /// graph are made of. Counted under the lock a push takes anyway.
    accepted_from: FxHashMap<ActorId, u64>,
    /// The stdin bytes of every message accepted since the host started.
    accepted_bytes: u64,
    /// The positions the next push at the back and at the front get: the journal's keys, which
    /// sort in queue order.
    next_back: i64,
    next_front: i64,
    input: Input,
    /// The line the instance is part-way through reading.
    partial: Option<Bytes>,
    /// The message the instance took last: it is parked if the instance crashes.
    last_taken: Option<Arc<Envelope>>,
    /// Messages the instance read that still count as waiting on disk, oldest first: a kill
    /// of the host gives them again. They settle at the guest's next change of its files,
    /// when it next waits for input with nothing left to read, when the instance ends,
    /// [`READ_SETTLES_AFTER`] after the read, or past [`MAX_UNSETTLED`] of them.
    unsettled: VecDeque<Unsettled>,
    /// The position of the last message an instance read (for a streamed mailbox, its stream
    /// sequence): what a replicated commit records (DESIGN §20).
    last_read_pos: Option<i64>,
    /// On a streamed mailbox taken over from a host that died, the last stream position
    /// published before: an HTTP request at or before it is [`Arrival::Lost`].
    lost_through: i64,
    /// When the instance last took bytes, was attached, or had a stalled message dropped: the
    /// latest moment the stall clock of [`STDIN_WRITE_TIMEOUT`] can start from.
    last_read: Instant,
    /// How long the messages taken so far waited; made at the first, so an idle actor's
    /// mailbox holds a pointer only.
    waits: Option<Box<Waits>>,
}

/// Who reads the queue now.
enum Input {
    /// No instance: messages wait.
    Detached,
    /// An instance reads its stdin from the queue.
    Open,
    /// A graceful stop: the instance reads this shutdown line, then end of input.
    Closing(Option<Bytes>),
}

/// A message read by the instance and not settled yet: its position, and when it was read.
struct Unsettled {
    pos: i64,
    read_at: Instant,
}

struct Queued {
    pos: i64,
    envelope: Arc<Envelope>,
    /// When it was queued: the earliest moment the stall clock of [`STDIN_WRITE_TIMEOUT`] can
    /// start from for this message (a message queued before the instance started counts from
    /// the start, through `last_read`).
    queued_at: Instant,
}

/// What [`Mailbox::arrive`] made of a message from the stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Queued for the guest.
    New,
    /// Handed over before and still waiting, or read and not settled yet: acknowledged when
    /// its read settles.
    Held,
    /// Handed over before and read already.
    Read,
    /// An HTTP request from before this host took the actor over from one that died: it may
    /// have been handled there, so it is not given again (DESIGN §24, at most once); its
    /// caller is answered 502.
    Lost,
}

/// Why a push did not go in; the message comes back.
pub enum Refused {
    /// The mailbox holds [`MAILBOX_CAPACITY`] messages or [`MAILBOX_BYTES`] of them.
    Full(Arc<Envelope>),
    /// The journal could not record the message (no room on disk, say); accepting it anyway
    /// would risk losing it.
    Unstored(Arc<Envelope>, String),
}

impl Default for Mailbox {
    /// A mailbox that lives in memory only.
    fn default() -> Self {
        Mailbox::with_queue(Vec::new(), Store::Memory)
    }
}

impl Mailbox {
    /// `actor`'s mailbox, recorded in `journal`, holding the messages that were waiting for it
    /// when the journal was opened.
    pub fn durable(actor: ActorId, journal: Arc<Journal>) -> Mailbox {
        let mut waiting = journal.claim(&actor);
        // An HTTP request is delivered at most once: its caller was answered (or cut off) when
        // the host that took it ended, so it is not given again.
        waiting.retain(|(pos, envelope)| {
            let request = envelope.from.as_str() == HTTP;
            if request && let Err(e) = journal.take(&actor, *pos) {
                tracing::warn!("actor {actor}: an old HTTP request stays in the journal: {e}");
            }
            !request
        });
        Mailbox::with_queue(waiting, Store::Journal { journal, actor })
    }

    /// `actor`'s mailbox on the cluster: its stream, consumed by the host that runs it.
    pub fn streamed(actor: ActorId, stream: Arc<dyn MailboxStream>) -> Mailbox {
        let mailbox = Mailbox::with_queue(Vec::new(), Store::Stream { stream, actor });
        // Stream sequences start at 1; positions below are the front's (a parked message).
        mailbox.lock().next_back = 1;
        mailbox
    }

    /// `waiting` is in queue order, with its positions.
    fn with_queue(waiting: Waiting, store: Store) -> Mailbox {
        let next_back = waiting.last().map_or(0, |(pos, _)| pos + 1);
        let next_front = waiting.first().map_or(-1, |(pos, _)| pos - 1);
        let queued_at = Instant::now();
        let queue: VecDeque<Queued> = waiting
            .into_iter()
            .map(|(pos, envelope)| Queued {
                pos,
                envelope,
                queued_at,
            })
            .collect();
        let bytes = queue.iter().map(|q| q.envelope.line_len()).sum();
        Mailbox {
            state: Mutex::new(Inner {
                queue,
                bytes,
                accepted_from: FxHashMap::default(),
                accepted_bytes: 0,
                next_back,
                next_front,
                input: Input::Detached,
                partial: None,
                last_taken: None,
                unsettled: VecDeque::new(),
                last_read_pos: None,
                lost_through: 0,
                last_read: Instant::now(),
                waits: None,
            }),
            arrived: Notify::new(),
            space: Notify::new(),
            store,
            window: OnceLock::new(),
            tap: OnceLock::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock is a bug elsewhere; the queue itself stays
        // consistent, so keep serving rather than poisoning every actor that writes here.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Has `tap` take the messages it wants of those pushed from now on, as they are pushed:
    /// they are counted as accepted but never queued nor journalled, and the reader never
    /// sees them. For a native actor whose messages are handed on at once and mean nothing
    /// after a restart (the public address's answers, whose clients a restart cuts off). A
    /// mailbox is tapped once; a later tap is ignored.
    pub fn tap(&self, tap: Tap) {
        let _ = self.tap.set(tap);
    }

    /// Appends a message unless the mailbox is full or the journal cannot record it.
    pub fn try_push(&self, envelope: Arc<Envelope>) -> Result<(), Refused> {
        if let Some(tap) = self.tap.get()
            && tap(&envelope)
        {
            self.lock().count_accepted(&envelope);
            return Ok(());
        }
        if let Store::Stream { stream, actor } = &self.store {
            if !stream.publish(actor, &envelope) {
                return Err(Refused::Full(envelope));
            }
            let mut inner = self.lock();
            inner.count_accepted(&envelope);
            return Ok(());
        }
        let mut inner = self.lock();
        if inner.is_full_for(&envelope) {
            return Err(Refused::Full(envelope));
        }
        let pos = inner.next_back;
        if let Err(e) = self.record(pos, &envelope) {
            let reason = format!("the host cannot accept it: {e}");
            return Err(Refused::Unstored(envelope, reason));
        }
        inner.next_back += 1;
        inner.accept(pos, envelope);
        drop(inner);
        self.arrived.notify_one();
        Ok(())
    }

    /// Appends a message, waiting while the mailbox is full, at most [`FULL_MAILBOX_TIMEOUT`].
    /// On `Err(Refused::Full)` the time ran out.
    pub async fn push(&self, mut envelope: Arc<Envelope>) -> Result<(), Refused> {
        let deadline = tokio::time::Instant::now() + FULL_MAILBOX_TIMEOUT;
        let space = match &self.store {
            Store::Stream { stream, .. } => stream.space(),
            Store::Memory | Store::Journal { .. } => &self.space,
        };
        loop {
            let space = space.notified();
            tokio::pin!(space);
            // Registered before the check, so a take between the check and the wait wakes us.
            space.as_mut().enable();
            match self.try_push(envelope) {
                Err(Refused::Full(back)) => envelope = back,
                done => return done,
            }
            if tokio::time::timeout_at(deadline, space).await.is_err() {
                return Err(Refused::Full(envelope));
            }
        }
    }

    /// Puts messages back at the front, in order, ahead of everything queued (a parked message
    /// after an upgrade). They may take the mailbox over its capacity for a moment.
    /// A message the journal cannot record is still queued, in memory only.
    pub fn push_front(&self, envelope: Arc<Envelope>) {
        let mut inner = self.lock();
        let pos = inner.next_front;
        if let Err(e) = self.record(pos, &envelope) {
            tracing::warn!("{e}; a kill of the host would lose message {}", envelope.id);
        }
        inner.next_front -= 1;
        inner.enqueue(pos, envelope, End::Front);
        drop(inner);
        self.arrived.notify_one();
    }

    /// A message the stream's consumer hands over, at its stream sequence `pos`. One before a
    /// position already handed over is a redelivery (a consumer made again), and is left out:
    /// the answer says whether the mailbox still holds it or it was read.
    pub fn arrive(&self, pos: i64, envelope: Arc<Envelope>) -> Arrival {
        let mut inner = self.lock();
        if pos < inner.next_back {
            let waits = inner.queue.iter().any(|q| q.pos == pos)
                || inner.unsettled.iter().any(|read| read.pos == pos);
            return if waits { Arrival::Held } else { Arrival::Read };
        }
        inner.next_back = pos + 1;
        if pos <= inner.lost_through && envelope.from.as_str() == HTTP {
            return Arrival::Lost;
        }
        inner.accept(pos, envelope);
        drop(inner);
        self.arrived.notify_one();
        Arrival::New
    }

    /// This host took the actor over from a host that died (or from its own run before a
    /// kill): HTTP requests the stream holds up to position `pos` may have been handled there,
    /// and are not given again ([`Arrival::Lost`]).
    pub fn lose_requests_through(&self, pos: i64) {
        self.lock().lost_through = pos;
    }

    /// The position of the last message the actor's instances read on this host, if any.
    pub fn last_read_pos(&self) -> Option<i64> {
        self.lock().last_read_pos
    }

    /// The actor's last replicated commit said it had read up to stream sequence `pos`: a
    /// message at or before it that the stream gives again is not given to the actor, it was
    /// handled (DESIGN §20, effectively once after a fail-over).
    pub fn read_through(&self, pos: i64) {
        let mut inner = self.lock();
        inner.next_back = inner.next_back.max(pos + 1);
        inner.last_read_pos = Some(pos);
    }

    /// Forgets what the stream's consumer handed over and nobody read (this host no longer runs
    /// the actor): the stream keeps it for the next owner.
    pub fn release_arrived(&self) {
        let mut inner = self.lock();
        inner.queue.clear();
        inner.bytes = 0;
        inner.next_back = 1;
    }

    /// Takes every queued message out (the actor is being removed) after `keep` stored them
    /// elsewhere. When `keep` fails, the messages stay and its error comes back.
    pub fn drain<E>(&self, keep: impl FnOnce(&[&Envelope]) -> Result<(), E>) -> Result<(), E> {
        let mut inner = self.lock();
        let waiting: Vec<&Envelope> = inner.queue.iter().map(|q| &*q.envelope).collect();
        keep(&waiting)?;
        inner.bytes = 0;
        for queued in std::mem::take(&mut inner.queue) {
            self.forget(&queued);
        }
        drop(inner);
        self.space.notify_waiters();
        Ok(())
    }

    /// Records that a message waits at `pos` (nothing to do for a memory-only mailbox). The
    /// error names the actor.
    fn record(&self, pos: i64, envelope: &Envelope) -> Result<(), String> {
        let Store::Journal { journal, actor } = &self.store else {
            // A stream keeps what was published to it; a parked message pushed back at the
            // front lives in memory, as it was taken once already.
            return Ok(());
        };
        journal
            .put(actor, pos, envelope)
            .map_err(|e| format!("actor {actor}: cannot record a message on disk: {e}"))
    }

    /// Records that a message left the queue for good.
    fn forget(&self, queued: &Queued) {
        self.forget_at(queued.pos);
    }

    /// Records that the message at `pos` left the queue for good.
    fn forget_at(&self, pos: i64) {
        match &self.store {
            Store::Journal { journal, actor } => {
                if let Err(e) = journal.take(actor, pos) {
                    tracing::warn!(
                        "actor {actor}: the delivery of the message at position {pos} cannot be \
                         recorded on disk ({e}); after a kill of the host it may come again"
                    );
                }
            }
            Store::Stream { stream, actor } if pos > 0 => stream.ack(actor, pos),
            Store::Stream { .. } | Store::Memory => {}
        }
    }

    /// The instance is about to make `change`: should the host die before its reads settle,
    /// they count as handled exactly when `change` happened (the journal records it). For a
    /// `durable` change (a guest's fsync) the journal is synced first: a power loss that keeps
    /// the change keeps this record too, so its messages are not handled twice.
    pub fn intend(&self, change: &crate::fs::Change, durable: bool) {
        let inner = self.lock();
        let Store::Journal { journal, actor } = &self.store else {
            return;
        };
        if inner.unsettled.is_empty() {
            return;
        }
        let positions: Vec<i64> = inner.unsettled.iter().map(|read| read.pos).collect();
        if let Err(e) = journal.intend(actor, &positions, change) {
            tracing::warn!(
                "actor {actor}: which change settles its reads cannot be recorded on disk ({e}); \
                 after a kill of the host they may come again"
            );
        } else if durable && let Err(e) = journal.sync() {
            tracing::warn!(
                "actor {actor}: the mailbox journal cannot be synced ({e}); after a power loss \
                 the messages its fsync settled may come again"
            );
        }
    }

    /// Every message the instance read counts as handled from now on: it is not given again.
    pub fn settle_reads(&self) {
        let mut inner = self.lock();
        // Drained, not taken: the queue keeps its room for the next reads.
        for read in inner.unsettled.drain(..) {
            self.forget_at(read.pos);
        }
    }

    /// Settles the reads made before `now` less [`READ_SETTLES_AFTER`]: an actor that never
    /// changes a file is not given a message again after hours.
    pub fn settle_old_reads(&self, now: Instant) {
        let mut inner = self.lock();
        self.settle_old(&mut inner, now);
    }

    fn settle_old(&self, inner: &mut Inner, now: Instant) {
        while let Some(read) = inner.unsettled.front() {
            if now.duration_since(read.read_at) < READ_SETTLES_AFTER {
                break;
            }
            let read = inner.unsettled.pop_front().expect("front exists");
            self.forget_at(read.pos);
        }
    }

    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// What went through this mailbox, `actor`'s, read together.
    pub fn traffic(&self, actor: ActorId) -> Traffic {
        let inner = self.lock();
        Traffic {
            actor,
            queued: inner.queue.len(),
            accepted_from: inner
                .accepted_from
                .iter()
                .map(|(from, n)| (from.clone(), *n))
                .collect(),
            accepted_bytes: inner.accepted_bytes,
            waits: inner.waits.as_deref().cloned().unwrap_or_default(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// For native actors: waits for the next message and takes it.
    pub async fn recv(&self) -> Arc<Envelope> {
        loop {
            let arrived = self.arrived.notified();
            if let Some(envelope) = self.take_now() {
                return envelope;
            }
            arrived.await;
        }
    }

    /// Takes the next message, if one waits.
    pub fn take_now(&self) -> Option<Arc<Envelope>> {
        let mut inner = self.lock();
        let queued = inner.dequeue(0)?;
        inner.delivered(&queued, coarse_now());
        self.forget(&queued);
        drop(inner);
        self.space.notify_waiters();
        if queued.envelope.trace.sampled
            && let Some(actor) = self.owner()
        {
            traces::delivered(&queued.envelope, actor);
        }
        Some(queued.envelope)
    }

    /// The trace of the message the running instance read last: what the lines it writes
    /// now continue (DESIGN §22).
    pub fn reading_trace(&self) -> Option<Trace> {
        self.lock()
            .last_taken
            .as_ref()
            .map(|envelope| envelope.trace)
    }

    /// Whose mailbox this is; none for a candidate's scratch mailbox.
    fn owner(&self) -> Option<&ActorId> {
        match &self.store {
            Store::Memory => None,
            Store::Journal { actor, .. } | Store::Stream { actor, .. } => Some(actor),
        }
    }

    /// The actor's window, made by `make` if it has none yet: from then on every message an
    /// instance reads is kept in it.
    pub fn keep_window(&self, make: impl FnOnce() -> Window) -> &Arc<Window> {
        self.window.get_or_init(|| Arc::new(make()))
    }

    /// The actor's window, if it has one.
    pub fn window(&self) -> Option<&Arc<Window>> {
        self.window.get()
    }

    /// Opens the mailbox as the stdin of a new instance.
    pub fn attach(self: &Arc<Self>) -> Arc<dyn GuestInput> {
        let mut inner = self.lock();
        inner.input = Input::Open;
        inner.partial = None;
        inner.last_taken = None;
        inner.last_read = Instant::now();
        drop(inner);
        Arc::new(MailboxInput(self.clone()))
    }

    /// Starts a graceful stop: the instance reads `shutdown`, then end of input. Queued
    /// messages stay for the next instance.
    pub fn close_input(&self, shutdown: Vec<u8>) {
        self.lock().input = Input::Closing(Some(shutdown.into()));
        self.arrived.notify_one();
    }

    /// Ends the instance's stdin after it exited, settling what it read. Returns the message
    /// it took last, which the supervisor parks if the instance crashed.
    pub fn detach(&self) -> Option<Arc<Envelope>> {
        self.settle_reads();
        let mut inner = self.lock();
        inner.input = Input::Detached;
        inner.partial = None;
        inner.last_taken.take()
    }

    /// Enforces [`STDIN_WRITE_TIMEOUT`]: when the first message beyond the [`STDIN_PIPE_BYTES`]
    /// window has been offered to the instance for that long, and the instance has read nothing
    /// meanwhile, that message is dropped and returned (the caller notes it in the log). The
    /// clock restarts after each drop.
    pub fn drop_stalled_write(&self, now: Instant) -> Option<Arc<Envelope>> {
        let timeout = stdin_write_timeout();
        let mut inner = self.lock();
        if !matches!(inner.input, Input::Open) || now.duration_since(inner.last_read) < timeout {
            return None;
        }
        let mut in_pipe = inner.partial.as_ref().map_or(0, Bytes::len);
        let blocked = inner.queue.iter().position(|queued| {
            in_pipe += queued.envelope.line_len();
            in_pipe > STDIN_PIPE_BYTES
        })?;
        if now.duration_since(inner.queue[blocked].queued_at) < timeout {
            return None;
        }
        inner.last_read = now;
        let dropped = inner.dequeue(blocked)?;
        self.forget(&dropped);
        drop(inner);
        self.space.notify_waiters();
        Some(dropped.envelope)
    }
}

/// The native actor whose requests are never given twice (DESIGN §24).
const HTTP: &str = "http";

/// Which end of the queue a message joins.
enum End {
    Back,
    Front,
}

impl Inner {
    /// Whether `envelope` must wait: the mailbox holds [`MAILBOX_CAPACITY`] messages, or adding
    /// it would pass [`MAILBOX_BYTES`] (an empty mailbox takes any message).
    fn is_full_for(&self, envelope: &Envelope) -> bool {
        self.queue.len() >= MAILBOX_CAPACITY
            || (!self.queue.is_empty() && self.bytes + envelope.line_len() > MAILBOX_BYTES)
    }

    /// Queues an accepted message at the back, counting it for its sender.
    fn accept(&mut self, pos: i64, envelope: Arc<Envelope>) {
        self.count_accepted(&envelope);
        self.enqueue(pos, envelope, End::Back);
    }

    /// Counts an accepted message for its sender; a sender's id is cloned into the map only
    /// with its first message.
    fn count_accepted(&mut self, envelope: &Envelope) {
        match self.accepted_from.get_mut(&envelope.from) {
            Some(count) => *count += 1,
            None => {
                self.accepted_from.insert(envelope.from.clone(), 1);
            }
        }
        self.accepted_bytes += envelope.line_len() as u64;
    }

    fn enqueue(&mut self, pos: i64, envelope: Arc<Envelope>, end: End) {
        self.bytes += envelope.line_len();
        let queued = Queued {
            pos,
            envelope,
            queued_at: coarse_now(),
        };
        match end {
            End::Back => self.queue.push_back(queued),
            End::Front => self.queue.push_front(queued),
        }
    }

    /// Whether the reader has something to read: a line, or the end of its input.
    fn readable(&self) -> bool {
        self.partial.is_some()
            || match self.input {
                Input::Open => !self.queue.is_empty(),
                Input::Closing(_) | Input::Detached => true,
            }
    }

    /// Counts how long `queued` waited, as its actor takes it `now`.
    fn delivered(&mut self, queued: &Queued, now: Instant) {
        let waited = now.saturating_duration_since(queued.queued_at);
        self.waits.get_or_insert_default().observe(waited);
    }

    /// Takes the message at `index` out of the queue.
    fn dequeue(&mut self, index: usize) -> Option<Queued> {
        let queued = self.queue.remove(index)?;
        self.bytes -= queued.envelope.line_len();
        Some(queued)
    }
}

/// `Instant::now()` as of the kernel's last tick (a few milliseconds behind at most), from
/// `CLOCK_MONOTONIC_COARSE`, which reads no hardware counter: what a message's queueing and
/// reading record, for limits counted in seconds. Reading the precise clock three times a
/// message was 2.4% of the flood's samples (docs/profile.md).
fn coarse_now() -> Instant {
    static START: std::sync::OnceLock<(Instant, Duration)> = std::sync::OnceLock::new();
    let monotonic = || coarse_clock(libc::CLOCK_MONOTONIC_COARSE);
    let &(start, at) = START.get_or_init(|| (Instant::now(), monotonic().unwrap_or_default()));
    match monotonic() {
        Some(now) => start + now.saturating_sub(at),
        None => Instant::now(),
    }
}

/// A coarse clock's time (`CLOCK_MONOTONIC_COARSE`, `CLOCK_REALTIME_COARSE`: the kernel's last
/// tick, read without a hardware counter), or `None` when the kernel has none.
pub(super) fn coarse_clock(clock: libc::clockid_t) -> Option<Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill.
    match unsafe { libc::clock_gettime(clock, &mut now) } {
        0 => Some(Duration::new(
            now.tv_sec.max(0) as u64,
            now.tv_nsec.clamp(0, 999_999_999) as u32,
        )),
        _ => None,
    }
}

/// A running instance's view of its mailbox.
struct MailboxInput(Arc<Mailbox>);

impl GuestInput for MailboxInput {
    fn read(&self, max: usize) -> Option<Bytes> {
        let mailbox = &self.0;
        let mut inner = mailbox.lock();
        if inner.partial.is_none() {
            let next = match &mut inner.input {
                Input::Closing(shutdown) => Some(shutdown.take()?),
                Input::Detached => None,
                Input::Open => inner.dequeue(0).map(|queued| {
                    // Read, but on disk it still waits until it settles: a kill of the host
                    // before the guest commits gives it again.
                    let now = coarse_now();
                    inner.delivered(&queued, now);
                    mailbox.settle_old(&mut inner, now);
                    while inner.unsettled.len() >= MAX_UNSETTLED {
                        let oldest = inner.unsettled.pop_front().expect("not empty");
                        mailbox.forget_at(oldest.pos);
                    }
                    inner.unsettled.push_back(Unsettled {
                        pos: queued.pos,
                        read_at: now,
                    });
                    inner.last_read_pos = Some(queued.pos);
                    let line = queued.envelope.to_line();
                    if let Some(window) = mailbox.window.get() {
                        window.read(&line);
                    }
                    let line = Bytes::from(line);
                    if queued.envelope.trace.sampled
                        && let Some(actor) = mailbox.owner()
                    {
                        traces::delivered(&queued.envelope, actor);
                    }
                    inner.last_taken = Some(queued.envelope);
                    mailbox.space.notify_waiters();
                    line
                }),
            };
            inner.partial = next;
        }
        let Some(partial) = inner.partial.as_mut() else {
            return Some(Bytes::new());
        };
        // A line that fits is handed over whole: splitting it would make its bytes shared
        // (an allocation) only to drop the empty rest.
        let chunk = match partial.len() <= max {
            true => inner.partial.take().expect("a partial line"),
            false => partial.split_to(max),
        };
        inner.last_read = coarse_now();
        Some(chunk)
    }

    fn before_change(&self, change: &crate::fs::Change, durable: bool) {
        if let Some(window) = self.0.window.get() {
            window.before_change();
        }
        self.0.intend(change, durable);
    }

    fn settle(&self) -> BoxFuture<'_> {
        self.0.settle_reads();
        Box::pin(async {})
    }

    fn ready_now(&self) -> bool {
        self.0.lock().readable()
    }

    fn readable(&self) -> BoxFuture<'_> {
        Box::pin(async move {
            loop {
                let arrived = self.0.arrived.notified();
                if self.0.lock().readable() {
                    // Another reader may be waiting too (a guest can poll stdin from two
                    // streams); pass the wake-up on. (`notify_waiters`, which keeps no permit
                    // for this reader's next wait, was tried: no gain in the world bench, and
                    // the routing bench's p99 went from 8-17 µs to 39-53 µs.)
                    self.0.arrived.notify_one();
                    return;
                }
                // The guest waits for input with nothing left unread: it is done with what it
                // read.
                self.0.settle_reads();
                arrived.await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ActorId, raw};

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

    fn read_line(input: &dyn GuestInput) -> Option<String> {
        let mut line = Vec::new();
        loop {
            let chunk = input.read(7)?;
            if chunk.is_empty() {
                return (!line.is_empty()).then(|| String::from_utf8(line).unwrap());
            }
            line.extend_from_slice(&chunk);
            if line.ends_with(b"\n") {
                return Some(String::from_utf8(line).unwrap());
            }
        }
    }

    /// A tapped mailbox: what its tap takes is counted as accepted but neither queued nor
    /// journalled (a restart finds none of it); what it leaves is queued and journalled as
    /// any other message.
    #[test]
    fn what_a_tap_takes_is_counted_but_never_queued_nor_journalled() {
        let dir = tempfile::tempdir().unwrap();
        let id = ActorId::parse("http").unwrap();
        let taken = Arc::new(std::sync::Mutex::new(Vec::new()));
        {
            let journal = Arc::new(Journal::open(dir.path()).unwrap());
            let mailbox = Mailbox::durable(id.clone(), journal);
            let into = taken.clone();
            mailbox.tap(Box::new(move |envelope| {
                let even = envelope
                    .id
                    .trim_start_matches("m-")
                    .parse::<usize>()
                    .unwrap()
                    % 2
                    == 0;
                if even {
                    into.lock().unwrap().push(envelope.id.clone());
                }
                even
            }));
            for n in 0..4 {
                assert!(mailbox.try_push(message(n)).is_ok());
            }
            assert_eq!(*taken.lock().unwrap(), ["m-0", "m-2"]);
            let traffic = mailbox.traffic(id.clone());
            assert_eq!(traffic.queued, 2);
            assert_eq!(
                traffic.accepted_from,
                [(ActorId::parse("test").unwrap(), 4)]
            );
            assert_eq!(mailbox.take_now().unwrap().id, "m-1");
        }
        let journal = Arc::new(Journal::open(dir.path()).unwrap());
        let kept: Vec<String> = (journal.claim(&id).into_iter())
            .map(|(_, e)| e.id.clone())
            .collect();
        assert_eq!(kept, ["m-3"]);
    }

    /// Reads that never settle by a commit or a wait: past [`MAX_UNSETTLED`] the oldest settle,
    /// so a kill gives back only the last ones read, and those in order before the rest.
    #[test]
    fn a_flood_read_without_a_commit_keeps_only_the_last_reads_unsettled() {
        let dir = tempfile::tempdir().unwrap();
        let id = ActorId::parse("a").unwrap();
        {
            let journal = Arc::new(Journal::open(dir.path()).unwrap());
            let mailbox = Arc::new(Mailbox::durable(id.clone(), journal));
            for n in 0..MAX_UNSETTLED + 50 {
                assert!(mailbox.try_push(message(n)).is_ok());
            }
            let input = mailbox.attach();
            for _ in 0..MAX_UNSETTLED + 40 {
                read_line(&*input).unwrap();
            }
            // The host dies here: nothing settles the reads still waiting to.
        }
        let journal = Arc::new(Journal::open(dir.path()).unwrap());
        let ids: Vec<String> = (journal.claim(&id).into_iter())
            .map(|(_, e)| e.id.clone())
            .collect();
        let want: Vec<String> = (40..MAX_UNSETTLED + 50).map(|n| format!("m-{n}")).collect();
        assert_eq!(ids, want);
    }

    #[test]
    fn a_full_mailbox_refuses_and_keeps_order() {
        let mailbox = Mailbox::default();
        for n in 0..MAILBOX_CAPACITY {
            assert!(mailbox.try_push(message(n)).is_ok());
        }
        let Err(Refused::Full(back)) = mailbox.try_push(message(9999)) else {
            panic!("a full mailbox accepted a message");
        };
        assert_eq!(back.id, "m-9999");
        assert_eq!(mailbox.len(), MAILBOX_CAPACITY);
    }

    /// A stream that records what it is asked, standing in for the cluster's.
    #[derive(Default)]
    struct Recorded {
        published: Mutex<Vec<String>>,
        acked: Mutex<Vec<i64>>,
        space: Notify,
        full: std::sync::atomic::AtomicBool,
    }

    impl MailboxStream for Recorded {
        fn publish(&self, _: &ActorId, envelope: &Arc<Envelope>) -> bool {
            if self.full.load(std::sync::atomic::Ordering::Relaxed) {
                return false;
            }
            self.published.lock().unwrap().push(envelope.id.clone());
            true
        }
        fn ack(&self, _: &ActorId, pos: i64) {
            self.acked.lock().unwrap().push(pos);
        }
        fn space(&self) -> &Notify {
            &self.space
        }
    }

    #[test]
    fn a_streamed_mailbox_publishes_pushes_queues_arrivals_and_acks_reads_once() {
        let stream = Arc::new(Recorded::default());
        let mailbox = Arc::new(Mailbox::streamed(
            ActorId::parse("a").unwrap(),
            stream.clone(),
        ));
        assert!(mailbox.try_push(message(1)).is_ok());
        assert_eq!(*stream.published.lock().unwrap(), ["m-1"]);
        assert!(
            mailbox.is_empty(),
            "a push goes to the stream, not the queue"
        );
        stream
            .full
            .store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(matches!(
            mailbox.try_push(message(2)),
            Err(Refused::Full(_))
        ));

        assert_eq!(mailbox.arrive(5, message(5)), Arrival::New);
        assert_eq!(mailbox.arrive(6, message(6)), Arrival::New);
        let input = mailbox.attach();
        assert!(read_line(&*input).unwrap().contains("\"m-5\""));
        assert!(
            stream.acked.lock().unwrap().is_empty(),
            "a read is acknowledged when it settles, not before"
        );
        mailbox.settle_reads();
        assert_eq!(
            *stream.acked.lock().unwrap(),
            [5],
            "acknowledged when settled"
        );
        // A consumer made again offers both once more: 5 was read, 6 still waits.
        assert_eq!(mailbox.arrive(5, message(5)), Arrival::Read);
        assert_eq!(mailbox.arrive(6, message(6)), Arrival::Held);
        assert_eq!(mailbox.len(), 1);
        assert!(read_line(&*input).unwrap().contains("\"m-6\""));
        // Read and not settled: offered again, it is held, acknowledged only when it settles
        // (a host dying before then gives it again).
        assert_eq!(mailbox.arrive(6, message(6)), Arrival::Held);
        assert_eq!(*stream.acked.lock().unwrap(), [5]);
        mailbox.detach();
        assert_eq!(
            *stream.acked.lock().unwrap(),
            [5, 6],
            "the instance's end settles"
        );
        // Another host runs it now: nothing handed over stays here, nothing is acknowledged.
        assert_eq!(mailbox.arrive(7, message(7)), Arrival::New);
        mailbox.release_arrived();
        assert!(mailbox.is_empty());
        assert_eq!(
            mailbox.arrive(7, message(7)),
            Arrival::New,
            "the next owner starts over"
        );
    }

    #[test]
    fn a_mailbox_taken_over_from_a_dead_host_gives_none_of_its_old_http_requests() {
        let mailbox =
            Mailbox::streamed(ActorId::parse("a").unwrap(), Arc::new(Recorded::default()));
        let from_http = |n: usize| {
            Arc::new(Envelope {
                id: format!("http/m-{n}"),
                from: ActorId::parse(HTTP).unwrap(),
                reply_to: None,
                speaker: None,
                schedule: None,
                trace: Default::default(),
                body: raw(&serde_json::json!({"type": "http", "path": "/"})),
            })
        };
        mailbox.lose_requests_through(10);
        assert_eq!(mailbox.arrive(9, from_http(9)), Arrival::Lost);
        assert_eq!(
            mailbox.arrive(10, message(10)),
            Arrival::New,
            "any other message is given"
        );
        assert_eq!(
            mailbox.arrive(11, from_http(11)),
            Arrival::New,
            "a request that came after the take-over is given"
        );
        assert_eq!(mailbox.len(), 2);
    }

    /// A body of about `kib` KiB.
    fn sized(n: usize, kib: usize) -> Arc<Envelope> {
        Arc::new(Envelope {
            id: format!("m-{n}"),
            from: ActorId::parse("test").unwrap(),
            reply_to: None,
            speaker: None,
            schedule: None,
            trace: Default::default(),
            body: raw(&serde_json::json!({"type": "big", "pad": "x".repeat(kib << 10)})),
        })
    }

    #[test]
    fn a_mailbox_is_full_at_its_byte_limit_too_and_counts_what_leaves() {
        let mailbox = Mailbox::default();
        // 63 messages of a MiB fit in 64 MiB with their framing; the 64th does not.
        let fit = MAILBOX_BYTES / sized(0, 1024).line_len();
        for n in 0..fit {
            assert!(
                mailbox.try_push(sized(n, 1024)).is_ok(),
                "message {n} refused"
            );
        }
        assert!(matches!(
            mailbox.try_push(sized(fit, 1024)),
            Err(Refused::Full(_))
        ));
        // A small one still fits in what is left; then one read makes room for a big one.
        assert!(mailbox.try_push(message(1)).is_ok());
        mailbox.take_now().unwrap();
        assert!(mailbox.try_push(sized(fit, 1024)).is_ok());
        // Emptied, the count is back to nothing: an empty mailbox takes any message.
        mailbox.drain(|_| Ok::<(), ()>(())).unwrap();
        assert_eq!(mailbox.lock().bytes, 0);
        assert!(mailbox.try_push(sized(0, 1024)).is_ok());
    }

    #[tokio::test]
    async fn a_blocked_sender_gets_in_when_the_reader_takes() {
        let mailbox = Arc::new(Mailbox::default());
        for n in 0..MAILBOX_CAPACITY {
            mailbox.try_push(message(n)).ok().unwrap();
        }
        let sender = tokio::spawn({
            let mailbox = mailbox.clone();
            async move { mailbox.push(message(5000)).await.is_ok() }
        });
        assert_eq!(mailbox.recv().await.id, "m-0");
        assert!(sender.await.unwrap());
        assert_eq!(mailbox.len(), MAILBOX_CAPACITY);
    }

    #[test]
    fn stdin_reads_lines_in_order_and_shutdown_then_eof() {
        let mailbox = Arc::new(Mailbox::default());
        mailbox.try_push(message(1)).ok().unwrap();
        let input = mailbox.attach();
        assert!(input.ready_now(), "m-1 waits");
        mailbox.try_push(message(2)).ok().unwrap();
        assert!(read_line(&*input).unwrap().contains("\"m-1\""));
        assert_eq!(input.read(3).unwrap(), "{\"i");
        assert!(input.ready_now(), "the rest of m-2's line waits");
        assert!(read_line(&*input).unwrap().contains("\"m-2\""));
        assert!(!input.ready_now(), "nothing waits");
        assert_eq!(input.read(10), Some(Bytes::new()), "nothing ready yet");
        mailbox.try_push(message(3)).ok().unwrap();
        mailbox.close_input(b"{\"shutdown\"}\n".to_vec());
        assert!(input.ready_now(), "the shutdown waits");
        assert_eq!(read_line(&*input).unwrap(), "{\"shutdown\"}\n");
        assert!(input.ready_now(), "the end of input is there to read");
        assert_eq!(input.read(10), None, "end of input after the shutdown");
        assert_eq!(
            mailbox.detach().unwrap().id,
            "m-2",
            "the last message taken"
        );
        assert_eq!(mailbox.len(), 1, "m-3 waits for the next instance");
    }

    fn big(n: usize) -> Arc<Envelope> {
        Arc::new(Envelope {
            id: format!("m-{n:04}"),
            from: ActorId::parse("test").unwrap(),
            reply_to: None,
            speaker: None,
            schedule: None,
            trace: Default::default(),
            body: raw(&serde_json::json!({"type": "big", "pad": "x".repeat(1000)})),
        })
    }

    #[test]
    fn a_stalled_write_beyond_the_pipe_is_dropped() {
        let mailbox = Arc::new(Mailbox::default());
        let _input = mailbox.attach();
        let fit = STDIN_PIPE_BYTES / big(0).line_len();
        for n in 0..fit + 3 {
            mailbox.try_push(big(n)).ok().unwrap();
        }
        let now = Instant::now();
        assert!(mailbox.drop_stalled_write(now).is_none(), "too early");
        let later = now + STDIN_WRITE_TIMEOUT + Duration::from_secs(1);
        let dropped = mailbox.drop_stalled_write(later).unwrap();
        assert_eq!(dropped.id, format!("m-{fit:04}"));
        assert!(
            mailbox.drop_stalled_write(later).is_none(),
            "the clock restarts"
        );
    }

    #[test]
    fn a_burst_into_an_idle_instance_is_not_stalled_by_the_idle_time() {
        let mailbox = Arc::new(Mailbox::default());
        let _input = mailbox.attach();
        // The instance read last a long time ago, then a burst far beyond the pipe arrives.
        let long_ago = Instant::now()
            .checked_sub(STDIN_WRITE_TIMEOUT * 4)
            .expect("the clock starts before the test");
        mailbox.lock().last_read = long_ago;
        let burst = 4 * STDIN_PIPE_BYTES / big(0).line_len();
        for n in 0..burst {
            mailbox.try_push(big(n)).ok().unwrap();
        }
        let offered = Instant::now();
        assert!(
            mailbox.drop_stalled_write(offered).is_none(),
            "the clock starts at the offer, not at the last read"
        );
        let just_before = offered + STDIN_WRITE_TIMEOUT - Duration::from_secs(1);
        assert!(mailbox.drop_stalled_write(just_before).is_none());
        // Left unread for the whole limit after the offer, the first message beyond the pipe goes.
        let after = offered + STDIN_WRITE_TIMEOUT + Duration::from_secs(1);
        assert!(mailbox.drop_stalled_write(after).is_some());
    }

    #[test]
    fn a_read_after_the_offer_restarts_the_stall_clock() {
        let mailbox = Arc::new(Mailbox::default());
        let input = mailbox.attach();
        let burst = 4 * STDIN_PIPE_BYTES / big(0).line_len();
        for n in 0..burst {
            mailbox.try_push(big(n)).ok().unwrap();
        }
        let long_ago = Instant::now()
            .checked_sub(STDIN_WRITE_TIMEOUT * 4)
            .expect("the clock starts before the test");
        for queued in &mut mailbox.lock().queue {
            queued.queued_at = long_ago;
        }
        read_line(&*input).unwrap();
        let read = mailbox.lock().last_read;
        assert!(
            mailbox
                .drop_stalled_write(read + STDIN_WRITE_TIMEOUT / 2)
                .is_none()
        );
        let after = read + STDIN_WRITE_TIMEOUT + Duration::from_secs(1);
        assert!(mailbox.drop_stalled_write(after).is_some());
    }

    /// Durable mailboxes against a model: any sequence of pushes (back and front), reads
    /// settled or not, and reopenings of the journal (a kill of the host) leaves each mailbox
    /// holding what the model holds: a read settles at its instance's end, and a read not
    /// settled when the host dies comes back in its place.
    mod durable {
        use super::*;
        use proptest::prelude::*;
        use std::collections::{BTreeMap, BTreeSet};

        #[derive(Debug, Clone)]
        enum Op {
            Push(usize, usize),
            Front(usize, usize),
            /// A read by an instance that then ends: settled.
            Read(usize),
            /// A read by an instance that goes on running: not settled yet.
            ReadOn(usize),
            /// The instance changes a file: its reads settle.
            Commit(usize),
            Reopen,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                6 => (0..2usize, 0..3000usize).prop_map(|(a, pad)| Op::Push(a, pad)),
                1 => (0..2usize, 0..10usize).prop_map(|(a, pad)| Op::Front(a, pad)),
                2 => (0..2usize).prop_map(Op::Read),
                3 => (0..2usize).prop_map(Op::ReadOn),
                1 => (0..2usize).prop_map(Op::Commit),
                1 => Just(Op::Reopen),
            ]
        }

        /// One mailbox as the model sees it: every message on disk by position, which of them
        /// were read and not settled, and the positions the next pushes get.
        #[derive(Default)]
        struct Model {
            on_disk: BTreeMap<i64, String>,
            unsettled: BTreeSet<i64>,
            next_back: i64,
            next_front: i64,
        }

        impl Model {
            fn new() -> Model {
                Model {
                    next_front: -1,
                    ..Model::default()
                }
            }

            fn queue(&self) -> Vec<String> {
                (self.on_disk.iter())
                    .filter(|(pos, _)| !self.unsettled.contains(pos))
                    .map(|(_, id)| id.clone())
                    .collect()
            }

            fn read(&mut self) -> Option<String> {
                let (&pos, id) =
                    (self.on_disk.iter()).find(|(pos, _)| !self.unsettled.contains(pos))?;
                let id = id.clone();
                self.unsettled.insert(pos);
                Some(id)
            }

            fn settle(&mut self) {
                for pos in std::mem::take(&mut self.unsettled) {
                    self.on_disk.remove(&pos);
                }
            }

            fn reopen(&mut self) {
                self.unsettled.clear();
                self.next_back = self.on_disk.last_key_value().map_or(0, |(pos, _)| pos + 1);
                self.next_front = self
                    .on_disk
                    .first_key_value()
                    .map_or(-1, |(pos, _)| pos - 1);
            }
        }

        fn open(dir: &std::path::Path) -> Vec<Arc<Mailbox>> {
            let journal = Arc::new(Journal::open(dir).unwrap());
            ["a", "b"]
                .map(|id| {
                    let id = ActorId::parse(id).unwrap();
                    Arc::new(Mailbox::durable(id, journal.clone()))
                })
                .to_vec()
        }

        fn ids(mailbox: &Mailbox) -> Vec<String> {
            let inner = mailbox.lock();
            inner.queue.iter().map(|q| q.envelope.id.clone()).collect()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]
            #[test]
            fn reopened_mailboxes_hold_what_the_model_holds(ops in proptest::collection::vec(op(), 1..120)) {
                let dir = tempfile::tempdir().unwrap();
                let mut boxes = open(dir.path());
                let mut inputs: Vec<Option<Arc<dyn GuestInput>>> = vec![None, None];
                let mut model = [Model::new(), Model::new()];
                for (n, op) in ops.into_iter().enumerate() {
                    let padded = |pad: usize| Arc::new(Envelope {
                        id: format!("m-{n}"),
                        from: ActorId::parse("x").unwrap(),
                        reply_to: None,
                        speaker: None,
                        schedule: None,
                        trace: Default::default(),
                        body: raw(&serde_json::json!({"pad": "y".repeat(pad * 100)})),
                    });
                    match op {
                        Op::Push(a, pad) => {
                            prop_assert!(boxes[a].try_push(padded(pad)).is_ok());
                            let pos = model[a].next_back;
                            model[a].next_back += 1;
                            model[a].on_disk.insert(pos, format!("m-{n}"));
                        }
                        Op::Front(a, pad) => {
                            boxes[a].push_front(padded(pad));
                            let pos = model[a].next_front;
                            model[a].next_front -= 1;
                            model[a].on_disk.insert(pos, format!("m-{n}"));
                        }
                        Op::Read(a) | Op::ReadOn(a) => {
                            let input = inputs[a].get_or_insert_with(|| boxes[a].attach()).clone();
                            let got = input.read(1 << 20).filter(|line| !line.is_empty());
                            let got = got.map(|line| String::from_utf8_lossy(&line).into_owned());
                            let want = model[a].read();
                            prop_assert_eq!(got.is_some(), want.is_some());
                            if let (Some(got), Some(want)) = (got, want) {
                                let quoted = format!("\"{}\"", want);
                                prop_assert!(got.contains(&quoted), "{} in {}", want, got);
                            }
                            if matches!(op, Op::Read(_)) {
                                inputs[a] = None;
                                boxes[a].detach();
                                model[a].settle();
                            }
                        }
                        Op::Commit(a) => {
                            if let Some(input) = &inputs[a] {
                                ready_now(input.settle());
                                model[a].settle();
                            }
                        }
                        Op::Reopen => {
                            inputs = vec![None, None];
                            drop(boxes);
                            boxes = open(dir.path());
                            for m in &mut model {
                                m.reopen();
                            }
                        }
                    }
                    for (a, mailbox) in boxes.iter().enumerate() {
                        prop_assert_eq!(ids(mailbox), model[a].queue());
                    }
                }
            }
        }

        /// Runs a future that is ready at once (settling a journal's reads does not wait).
        fn ready_now(future: BoxFuture<'_>) {
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            let mut future = future;
            assert!(
                future.as_mut().poll(&mut cx).is_ready(),
                "settling waits for nothing here"
            );
        }
    }
}
