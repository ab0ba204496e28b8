//! Mailboxes on the cluster: every WASM actor's mailbox is the subject
//! `sausage.mailbox.<id>` of the work-queue stream [`super::MAILBOX_STREAM`].
//!
//! Every host publishes into it through one ordered pipeline (a sender's messages reach the
//! stream in the order it wrote them, [`pipeline`]); only the host that runs the actor consumes
//! it, with the durable consumer `mailbox-<id>`, and acknowledges each message when the guest
//! reads it, which removes it from the stream. A consumer is made anew (deleted, created) when a
//! host takes an actor over and whenever a delivery went missing on the way (its number was
//! skipped, or the consumer says it sent more than came after the NATS connection moved to
//! another node or its heartbeat stopped), so everything not yet acknowledged comes again, in
//! order, and the mailbox keeps only what it lacks. Native
//! actors stay each host's own: a message for another host's native actor (a reply to its
//! console, say) goes to that host's subject `sausage.host.<host>`, and every host remembers
//! from which host the native actors' messages it received came ([`Origins`]).
//!
//! What a host sends for its actors (their messages, the acknowledgements of what they read)
//! carries the term of its `RunUntil` it was made in and goes out only while that term allows:
//! after a lapse, nothing queued before it leaves the host.
//!
//! Invariant: a mailbox hands its guest each publication once, in its publisher's order: each
//! names the one before it from the same publisher into the same mailbox ([`AFTER_HEADER`]),
//! and a copy stored out of that order is acknowledged and left out ([`Reading`]) while the
//! pipeline sends it again in its place.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

mod pipeline;

use anyhow::{Context, Result, bail};
use async_nats::jetstream::context::ConsumerInfoErrorKind;
use async_nats::jetstream::{self, ErrorCode, consumer};
use futures_util::StreamExt;
use rustc_hash::FxHashMap;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use sausage_core::broker::mailbox::{Arrival, MAILBOX_CAPACITY, Mailbox, MailboxStream};
use sausage_core::broker::router::{Remote, Router};
use sausage_core::message::{ActorId, Envelope};
use sausage_core::runtime::run_until::{RunUntil, Term};

pub use pipeline::{DUPLICATE_WINDOW, GROUP_MAX};

pub const SUBJECT_PREFIX: &str = "sausage.mailbox";
/// The header naming the host a message was routed on.
const ORIGIN_HEADER: &str = "Sausage-Host";
/// The header naming the native actor a message to another host is for.
const TO_HEADER: &str = "Sausage-To";
/// The header giving the number of the publication before this one from the same publisher
/// into the same mailbox (`0`: none), whose own number ends its `Nats-Msg-Id`
/// (`<publisher>/<number>`): the consumer hands a publication over only right after that one.
const AFTER_HEADER: &str = "Sausage-After";
/// The header of a publication sent again in a new epoch in place of one whose copy may be out
/// of order: the `Nats-Msg-Id` of the first publication of these messages. A consumer hands
/// over a publication whose first id it handed over already only in no case: it leaves it out.
const REPLACES_HEADER: &str = "Sausage-Replaces";
/// Publications that may wait for the stream's acknowledgement at once; past it, senders wait.
pub const PUBLISH_IN_FLIGHT: usize = 4096;
/// How long a request about the mailboxes (a consumer deleted or made) waits for JetStream's
/// answer at first: one sent while JetStream elects a leader gets none, and is sent again
/// sooner.
const MAILBOX_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a consumer's making waits: each attempt that fails waits twice as long as the
/// one before, up to this. A JetStream that syncs every write to disk under load can take
/// longer than [`MAILBOX_REQUEST_TIMEOUT`] to make a replicated consumer; were every attempt
/// cut off at it, each would delete the consumer the one before had made, forever.
const MAILBOX_REQUEST_PATIENCE: Duration = Duration::from_secs(16);
/// Native actors' message ids remembered with the host they came from.
const ORIGINS_KEPT: usize = 65_536;
/// How long the consumer of a mailbox leaves a message unacknowledged before the stream offers
/// it again: longer than any run, since only a new consumer (made again, or by a new owner)
/// should get a message twice.
const ACK_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often the server says a mailbox's consumer is alive while it has nothing to deliver;
/// two missed in a row (its node died, say) and the consumer is asked what it delivered, then
/// pulled from again.
const CONSUMER_HEARTBEAT: Duration = Duration::from_secs(1);
/// The pause before a mailbox's consumer that ended or could not be made is made again, or
/// before it is asked again what it delivered.
const CONSUMER_RETRY: Duration = Duration::from_millis(250);
/// How long a consumer is given to say what it delivered: its leader answers in milliseconds,
/// unless it is being elected, and then a prompt question again notices the new one sooner.
const CONSUMER_ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// How long deliveries a consumer says it sent may take to come after a trouble (the
/// connection moved, a heartbeat went missing) before they count as lost and the consumer is
/// made anew.
const CONSUMER_CATCH_UP: Duration = Duration::from_secs(1);
/// Positions of messages left out as out of order that are remembered, to be left out again
/// if the stream offers them again before their acknowledgement reached it.
const LEFT_OUT_KEPT: usize = 4096;

pub fn subject(actor: &ActorId) -> String {
    format!("{SUBJECT_PREFIX}.{actor}")
}

fn host_subject(host: &str) -> String {
    format!("sausage.host.{host}")
}

pub fn consumer_name(actor: &ActorId) -> String {
    format!("mailbox-{actor}")
}

/// A message into a WASM actor's stream.
struct Publication {
    to: ActorId,
    envelope: Arc<Envelope>,
    /// The term a WASM actor of this host wrote it in; `None` from a native actor, which
    /// holds no lease.
    term: Option<Term>,
}

/// A message for a native actor of another host.
struct Forward {
    host: Arc<str>,
    to: ActorId,
    envelope: Arc<Envelope>,
    term: Option<Term>,
}

/// A publication handed to a mailbox whose acknowledgement waits for every message of it to be
/// read (and the read to settle).
struct Unacknowledged {
    /// The subject that acknowledges it to the consumer that delivered it.
    reply: async_nats::Subject,
    /// The term of this host that consumer was made in.
    term: Term,
    /// The mailbox positions of its messages not read yet.
    unread: Vec<i64>,
}

/// The publications handed to this host's mailboxes and not acknowledged yet, by actor and
/// stream sequence.
#[derive(Default)]
struct Unacknowledgeds(FxHashMap<(ActorId, i64), Unacknowledged>);

impl Unacknowledgeds {
    /// The publication at stream sequence `seq` was handed to `actor`'s mailbox (again: then
    /// through a new consumer, whose reply subject acknowledges it now).
    fn handed(&mut self, actor: &ActorId, seq: i64, publication: Unacknowledged) {
        self.0.insert((actor.clone(), seq), publication);
    }

    /// The message at mailbox position `pos` was read (its read settled): its publication, once
    /// every message of it was, to be acknowledged.
    fn read(&mut self, actor: &ActorId, pos: i64) -> Option<Unacknowledged> {
        let key = (actor.clone(), pos >> LINE_BITS);
        let publication = self.0.get_mut(&key)?;
        publication.unread.retain(|unread| *unread != pos);
        if publication.unread.is_empty() {
            self.0.remove(&key)
        } else {
            None
        }
    }

    /// Forgets `actor`'s (this host no longer runs it).
    fn forget(&mut self, actor: &ActorId) {
        self.0.retain(|(a, _), _| a != actor);
    }
}

/// How many bits of a message's mailbox position number it within its publication.
const LINE_BITS: u32 = 10;
/// The most messages a publication may carry for its positions to stay apart.
const LINES_PER_PUBLICATION: usize = 1 << LINE_BITS;
const _: () = assert!(pipeline::GROUP_MAX <= LINES_PER_PUBLICATION);

/// The mailbox position of message `index` of the publication at stream sequence `seq`: the
/// positions of a mailbox's messages grow in the order they were written, across publications,
/// and a commit that records one ([`super::commits`]) names a message, not a publication.
pub fn position(seq: i64, index: usize) -> i64 {
    (seq << LINE_BITS) | index as i64
}

/// An acknowledgement of a message handed to a mailbox, sent once the first `after`
/// publications of this host finished (were stored), and only while `term` allows.
struct Ack {
    reply: async_nats::Subject,
    term: Term,
    after: u64,
}

impl Ack {
    /// An acknowledgement that waits for no publication (a message left out or dropped).
    fn now(reply: async_nats::Subject, term: Term) -> Ack {
        Ack {
            reply,
            term,
            after: 0,
        }
    }
}

/// How long a host has to take a message for one of its native actors before the sender hears
/// it is unreachable.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Streams {
    host: Arc<str>,
    client: async_nats::Client,
    js: jetstream::Context,
    publishing: mpsc::UnboundedSender<Publication>,
    forwarding: mpsc::UnboundedSender<Forward>,
    in_flight: AtomicUsize,
    space: Notify,
    /// Publications handed to the pipeline, and those finished (stored, or refused and
    /// reported), counted in the same order: [`MailboxStream::stored`] waits for the second to
    /// reach the first.
    sent: AtomicU64,
    done: AtomicU64,
    /// Notified when a publication finishes.
    done_changed: Notify,
    /// The publications handed to mailboxes and not acknowledged yet, by actor and stream
    /// sequence.
    acks: Mutex<Unacknowledgeds>,
    acking: mpsc::UnboundedSender<Ack>,
    origins: Mutex<Origins>,
    router: OnceLock<Weak<Router>>,
    view: Arc<Mutex<super::placement::View>>,
    run_until: Arc<RunUntil>,
    /// Counts the client's connections (`super::connect`): a change means it moved to another
    /// node, and what was on its way through the old one may be lost.
    connections: watch::Receiver<u64>,
}

/// Which host each native actor's message that came from another host was sent on, for the
/// last [`ORIGINS_KEPT`] of them.
#[derive(Default)]
struct Origins {
    by_id: FxHashMap<String, Arc<str>>,
    order: VecDeque<String>,
}

impl Streams {
    /// Starts the publishing pipeline, the acknowledgements and this host's inbox. Routing
    /// begins once [`Streams::attach`] gives it the router.
    pub fn start(
        host: Arc<str>,
        connection: super::Connection,
        view: Arc<Mutex<super::placement::View>>,
        run_until: Arc<RunUntil>,
    ) -> Arc<Streams> {
        let js = jetstream::ContextBuilder::new()
            .timeout(MAILBOX_REQUEST_TIMEOUT)
            .build(connection.client.clone());
        let (publishing, publications) = mpsc::unbounded_channel();
        let (acking, acks) = mpsc::unbounded_channel();
        let (forwarding, forwards) = mpsc::unbounded_channel();
        let streams = Arc::new(Streams {
            host,
            client: connection.client,
            js,
            publishing,
            forwarding,
            in_flight: AtomicUsize::new(0),
            space: Notify::new(),
            sent: AtomicU64::new(0),
            done: AtomicU64::new(0),
            done_changed: Notify::new(),
            acks: Mutex::default(),
            acking,
            origins: Mutex::default(),
            router: OnceLock::new(),
            view,
            run_until,
            connections: connection.connections,
        });
        tokio::spawn(pipeline::run(streams.clone(), publications));
        tokio::spawn(forward(streams.clone(), forwards));
        tokio::spawn(acknowledge(streams.clone(), acks));
        streams
    }

    /// Gives routing to this host's inbox: messages other hosts send its native actors.
    pub async fn attach(self: &Arc<Self>, router: &Arc<Router>) -> Result<()> {
        let _ = self.router.set(Arc::downgrade(router));
        let mut inbox = self
            .client
            .subscribe(host_subject(&self.host))
            .await
            .context("cannot subscribe to this host's inbox")?;
        let streams = self.clone();
        tokio::spawn(async move {
            while let Some(message) = inbox.next().await {
                let header = |name: &str| {
                    message
                        .headers
                        .as_ref()
                        .and_then(|h| h.get(name))
                        .map(|v| v.as_str().to_string())
                };
                let (Some(to), origin) = (header(TO_HEADER), header(ORIGIN_HEADER)) else {
                    continue;
                };
                let (Ok(to), Ok(envelope)) =
                    (ActorId::parse(&to), Envelope::from_line(&message.payload))
                else {
                    tracing::error!("a message from another host cannot be read; dropped");
                    continue;
                };
                let envelope = Arc::new(envelope);
                streams.remember_origin(&envelope, origin.as_deref());
                let Some(router) = streams.router() else {
                    return;
                };
                router.deliver_routed(to, envelope);
                if let Some(reply) = message.reply {
                    let _ = streams.client.publish(reply, bytes::Bytes::new()).await;
                }
            }
        });
        Ok(())
    }

    pub(crate) fn router(&self) -> Option<Arc<Router>> {
        self.router.get()?.upgrade()
    }

    /// Remembers the host a native actor's message came from, so a reply goes back there.
    fn remember_origin(&self, envelope: &Envelope, origin: Option<&str>) {
        let Some(origin) = origin.filter(|o| *o != &*self.host) else {
            return;
        };
        if !envelope.from.is_native() {
            return;
        }
        let mut origins = self.origins.lock().expect("origins lock");
        if origins.order.len() >= ORIGINS_KEPT
            && let Some(old) = origins.order.pop_front()
        {
            origins.by_id.remove(&old);
        }
        origins.order.push_back(envelope.id.clone());
        origins.by_id.insert(envelope.id.clone(), Arc::from(origin));
    }

    /// Hands `actor`'s stream to `mailbox` for as long as this host runs the actor (until the
    /// task running this is aborted) in `term` (then the consumer is the new owner's): a
    /// consumer that ends or fails is made again after [`CONSUMER_RETRY`], and what it offers
    /// again reaches the guest only if the mailbox lacks it.
    pub async fn keep_consuming(
        self: Arc<Self>,
        actor: ActorId,
        mailbox: Arc<Mailbox>,
        term: Term,
    ) {
        let mut reading = Reading::default();
        let taken_over = (self.view.lock().expect("view lock")).taken_over(&actor);
        if taken_over {
            // Its last host died: the requests it may have handled are answered, not given again.
            match self.last_position().await {
                Ok(pos) => mailbox.lose_requests_through(pos),
                Err(e) => tracing::warn!(
                    "actor {actor}: taken over, but the mailboxes' last position is unknown ({e:#}); \
                     HTTP requests its last host took may be given again"
                ),
            }
        }
        let mut patience = MAILBOX_REQUEST_TIMEOUT;
        while self.run_until.settled(term).await {
            match self
                .consume(&actor, &mailbox, &mut reading, term, patience)
                .await
            {
                Ok(why) => {
                    tracing::debug!("actor {actor}: its mailbox's consumer is made again: {why}");
                    patience = MAILBOX_REQUEST_TIMEOUT;
                }
                Err(e) => {
                    tracing::warn!(
                        "actor {actor}: {e:#} (waited {patience:?}; tried again, waiting longer)"
                    );
                    patience = (patience * 2).min(MAILBOX_REQUEST_PATIENCE);
                }
            }
            tokio::time::sleep(CONSUMER_RETRY).await;
        }
    }

    /// Makes `actor`'s consumer anew, so whatever nobody acknowledged comes first, in order, and
    /// hands what it delivers to `mailbox` until a delivery may have been lost on the way: then
    /// says why, for the consumer to be made anew again. After a trouble that loses nothing
    /// (the connection moved to another node, or the consumer's node died and it elected a new
    /// leader), it goes on with the same consumer: making one needs JetStream's meta leader,
    /// which may be the node that died.
    async fn consume(
        &self,
        actor: &ActorId,
        mailbox: &Mailbox,
        reading: &mut Reading,
        term: Term,
        patience: Duration,
    ) -> Result<&'static str> {
        let mut connections = self.connections.clone();
        connections.borrow_and_update();
        let name = consumer_name(actor);
        let mut js = self.js.clone();
        js.set_timeout(patience);
        match js
            .delete_consumer_from_stream(&name, super::MAILBOX_STREAM)
            .await
        {
            Ok(_) => {}
            Err(e) if consumer_not_found(&e) => {}
            // Strictly anew: a consumer kept would not offer again what it delivered already.
            Err(e) => bail!("cannot make its mailbox's consumer anew: {e}"),
        }
        let config = consumer::pull::Config {
            durable_name: Some(name.clone()),
            filter_subject: subject(actor),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: ACK_WAIT,
            deliver_policy: consumer::DeliverPolicy::All,
            max_ack_pending: MAILBOX_CAPACITY as i64,
            ..Default::default()
        };
        let mut consumer = js
            .create_consumer_strict_on_stream(config, super::MAILBOX_STREAM)
            .await
            .context("cannot make its mailbox's consumer")?;
        let mut delivery = Delivery {
            actor,
            mailbox,
            reading,
            term,
            delivered: 0,
        };
        let mut messages = pull(&consumer).await?;
        loop {
            // Waits for the next delivery, or for the connection to move to another node
            // (whatever was on its way through the old one is lost; the client pulls again
            // through the new one by itself).
            let failed = loop {
                let message = tokio::select! {
                    message = messages.next() => message,
                    Ok(()) = connections.changed() => break None,
                };
                match message {
                    Some(Ok(message)) => {
                        if !self.hand_over(&mut delivery, message)? {
                            return Ok("a delivery went missing");
                        }
                    }
                    Some(Err(e)) => break Some(e),
                    None => return Ok("its consumer ended"),
                }
            };
            let trouble = match &failed {
                None => "the connection moved to another NATS node".to_string(),
                Some(e) => format!("reading its mailbox: {e}"),
            };
            tracing::debug!("actor {actor}: {trouble}; asking its consumer what it delivered");
            // Asked until its (perhaps newly elected) leader answers.
            let sent = loop {
                match tokio::time::timeout(CONSUMER_ASK_TIMEOUT, consumer.info()).await {
                    Ok(Ok(info)) => break info.delivered.consumer_sequence,
                    Ok(Err(e)) if e.kind() == ConsumerInfoErrorKind::NotFound => {
                        return Ok("its consumer is gone");
                    }
                    Ok(Err(e)) => tracing::debug!("actor {actor}: its consumer's state: {e}"),
                    Err(_) => tracing::debug!("actor {actor}: its consumer does not answer yet"),
                }
                tokio::time::sleep(CONSUMER_RETRY).await;
            };
            // What it sent must come within a moment (what is on its way), else it was lost.
            let late = Instant::now() + CONSUMER_CATCH_UP;
            while delivery.delivered < sent {
                let handed = match tokio::time::timeout_at(late, messages.next()).await {
                    Ok(Some(Ok(message))) => self.hand_over(&mut delivery, message)?,
                    _ => false,
                };
                if !handed {
                    return Ok("deliveries went missing");
                }
            }
            if failed.is_some() {
                // A failed pull (its consumer's node died, say) is not made again by the
                // client before it expires.
                messages = pull(&consumer).await?;
            }
        }
    }

    /// Hands one delivery to the mailbox, unless it is out of its publisher's order; false
    /// when a delivery before it went missing (the consumer numbers them 1, 2, 3…), or when
    /// this host's term ended (another host may consume the mailbox now: what came here goes
    /// back unacknowledged).
    fn hand_over(&self, delivery: &mut Delivery, message: jetstream::Message) -> Result<bool> {
        let (actor, term) = (delivery.actor, delivery.term);
        if self.run_until.term() != term {
            return Ok(false);
        }
        let info = message
            .info()
            .map_err(|e| anyhow::anyhow!("a delivery without its JetStream reply: {e}"))?;
        if info.consumer_sequence != delivery.delivered + 1 {
            return Ok(false);
        }
        delivery.delivered = info.consumer_sequence;
        let seq = info.stream_sequence as i64;
        let header = |name: &str| {
            message
                .headers
                .as_ref()
                .and_then(|h| h.get(name))
                .map(|v| v.as_str())
        };
        let judgement = delivery.reading.judge(
            seq,
            header(async_nats::header::NATS_MESSAGE_ID.as_ref()),
            header(AFTER_HEADER),
            header(REPLACES_HEADER),
        );
        let origin = header(ORIGIN_HEADER).map(str::to_string);
        let reply = message
            .reply
            .clone()
            .expect("info() read the reply subject");
        if matches!(judgement, Judgement::LeftOut | Judgement::Copy) {
            tracing::debug!(
                "actor {actor}: publication {seq} of its mailbox is {}; left out",
                match judgement {
                    Judgement::Copy => "a copy of one handed over",
                    _ => "out of order",
                }
            );
            let _ = self.acking.send(Ack::now(reply, term));
            return Ok(true);
        }
        let mut envelopes = Vec::new();
        for (index, line) in message
            .payload
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .enumerate()
        {
            if index >= LINES_PER_PUBLICATION {
                tracing::error!(
                    "actor {actor}: publication {seq} of its mailbox holds more than \
                     {LINES_PER_PUBLICATION} messages; the rest are dropped"
                );
                break;
            }
            match Envelope::from_line(line) {
                Ok(envelope) => envelopes.push((position(seq, index), Arc::new(envelope))),
                Err(e) => tracing::error!(
                    "actor {actor}: message {index} of publication {seq} of its mailbox: {e}; \
                     dropped"
                ),
            }
        }
        if envelopes.is_empty() {
            let _ = self.acking.send(Ack::now(reply, term));
            return Ok(true);
        }
        // Recorded first, so a read at once acknowledges it; a publication offered again (a
        // consumer made again) is acknowledged through this consumer, the one the stream
        // listens to, once every message of it was read.
        let unread = envelopes.iter().map(|(pos, _)| *pos).collect();
        self.acks.lock().expect("acks lock").handed(
            actor,
            seq,
            Unacknowledged {
                reply,
                term,
                unread,
            },
        );
        for (pos, envelope) in envelopes {
            self.remember_origin(&envelope, origin.as_deref());
            match delivery.mailbox.arrive(pos, envelope.clone()) {
                Arrival::Read => self.ack(actor, pos),
                Arrival::Lost => {
                    self.ack(actor, pos);
                    if let Some(router) = self.router.get().and_then(Weak::upgrade) {
                        let reason = "the host that ran it died with the request";
                        router.report_lost(&envelope, actor.as_str(), reason);
                    }
                }
                Arrival::New | Arrival::Held => {}
            }
        }
        Ok(true)
    }

    /// The position of the last message of any mailbox stored so far.
    async fn last_position(&self) -> Result<i64> {
        let mut stream = self.js.get_stream(super::MAILBOX_STREAM).await?;
        let last = stream.info().await?.state.last_sequence;
        Ok(position(last as i64 + 1, 0) - 1)
    }

    /// Forgets the acknowledgements of `actor`'s messages this host was handed (it no longer
    /// runs the actor; the stream offers them to the next owner).
    pub fn forget_acks(&self, actor: &ActorId) {
        self.acks.lock().expect("acks lock").forget(actor);
    }

    /// Ends `actor`'s mailbox on the cluster (it was removed): its consumer and whatever
    /// still waits in its subject go.
    pub async fn remove(&self, actor: &ActorId) -> Result<()> {
        let stream = self.js.get_stream(super::MAILBOX_STREAM).await?;
        // A consumer left behind has nobody pulling from it, and its subject is purged next.
        let _ = stream.delete_consumer(&consumer_name(actor)).await;
        stream.purge().filter(subject(actor)).await?;
        Ok(())
    }

    /// The term a message goes out under: the current one for a WASM actor's (it runs here
    /// under a lease), none for a native actor's.
    fn term_of(&self, envelope: &Envelope) -> Option<Term> {
        (!envelope.from.is_native()).then(|| self.run_until.term())
    }

    /// Whether a message of `term` may leave now: waits while its term's deadline has passed
    /// but a renewal may still come; false (and said) once the term has ended.
    async fn may_send(&self, term: Option<Term>, envelope: &Envelope, to: &ActorId) -> bool {
        let Some(term) = term else { return true };
        if self.run_until.settled(term).await {
            return true;
        }
        tracing::warn!(
            "host {}: message {} from {} to {to} is not sent: this host's leases lapsed after \
             it was written",
            self.host,
            envelope.id,
            envelope.from
        );
        false
    }

    /// Waits until the first `target` publications handed to the pipeline finished.
    async fn finished_through(&self, target: u64) {
        loop {
            let changed = self.done_changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so a finish between the two wakes us.
            changed.as_mut().enable();
            if self.done.load(Ordering::Acquire) >= target {
                return;
            }
            changed.await;
        }
    }

    /// One publication finished: stored, or refused or withheld and said so. Called once for
    /// each, in the order they were published ([`MailboxStream::stored`] counts on it).
    fn finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.done.fetch_add(1, Ordering::AcqRel);
        self.space.notify_waiters();
        self.done_changed.notify_waiters();
    }
}

/// Pulls from `consumer`, the server saying every [`CONSUMER_HEARTBEAT`] that it is alive.
async fn pull(consumer: &consumer::PullConsumer) -> Result<consumer::pull::Stream> {
    consumer
        .stream()
        .heartbeat(CONSUMER_HEARTBEAT)
        .messages()
        .await
        .context("cannot read its mailbox")
}

fn consumer_not_found(e: &jetstream::stream::ConsumerError) -> bool {
    matches!(
        e.kind(),
        jetstream::stream::ConsumerErrorKind::JetStream(e)
            if e.error_code() == ErrorCode::CONSUMER_NOT_FOUND
    )
}

/// One consumer's deliveries into a mailbox.
struct Delivery<'a> {
    actor: &'a ActorId,
    mailbox: &'a Mailbox,
    reading: &'a mut Reading,
    /// The term of this host the consumer was made in.
    term: Term,
    /// The number of the last delivery handed over.
    delivered: u64,
}

/// What one host has read of one mailbox while it runs the actor, across the consumers it
/// makes: which stream positions it judged, and where each publisher's chain stands.
#[derive(Default)]
struct Reading {
    /// The highest stream position judged: one at or below it is offered again.
    judged: i64,
    /// Positions left out as out of their publisher's order (the last [`LEFT_OUT_KEPT`]).
    left_out: BTreeSet<i64>,
    /// Each publisher's number handed over last.
    last: FxHashMap<String, u64>,
    /// The first ids ([`REPLACES_HEADER`]) of the publications handed over (the last
    /// [`LEFT_OUT_KEPT`]): a copy of one of them is not handed over again.
    handed: std::collections::HashSet<String>,
    handed_order: VecDeque<String>,
}

/// What becomes of a delivered message ([`Reading::judge`]).
#[derive(Debug, PartialEq)]
enum Judgement {
    /// Next in its publisher's order: handed to the mailbox.
    Next,
    /// Offered again by a consumer made again: the mailbox knows whether it holds it already.
    Again,
    /// Out of its publisher's order (a copy stored late, or a retry of one stored already):
    /// acknowledged and left out, as its publisher sends it again in its place.
    LeftOut,
    /// In its publisher's order, but a copy of messages handed over already (their first
    /// publication came through): acknowledged and left out.
    Copy,
}

impl Reading {
    /// Judges the message at stream position `pos` by its `Nats-Msg-Id` (`<publisher>/<n>`)
    /// and [`AFTER_HEADER`]: it is next when it follows the last one handed over from its
    /// publisher. A publisher not seen yet (the actor just came to this host, the publisher just
    /// started an epoch) starts anywhere; a message without these headers is taken as it comes.
    fn judge(
        &mut self,
        pos: i64,
        id: Option<&str>,
        after: Option<&str>,
        replaces: Option<&str>,
    ) -> Judgement {
        if pos <= self.judged {
            return if self.left_out.contains(&pos) {
                Judgement::LeftOut
            } else {
                Judgement::Again
            };
        }
        self.judged = pos;
        let chained = id
            .and_then(|id| id.rsplit_once('/'))
            .and_then(|(publisher, n)| {
                Some((
                    publisher,
                    n.parse::<u64>().ok()?,
                    after?.parse::<u64>().ok()?,
                ))
            });
        let Some((publisher, n, after)) = chained else {
            return Judgement::Next;
        };
        let first = replaces.or(id).expect("a chained publication has an id");
        match self.last.get_mut(publisher) {
            Some(last) if *last != after => {
                if self.left_out.len() >= LEFT_OUT_KEPT {
                    self.left_out.pop_first();
                }
                self.left_out.insert(pos);
                return Judgement::LeftOut;
            }
            Some(last) => *last = n,
            None => {
                self.last.insert(publisher.to_string(), n);
            }
        }
        if self.handed.contains(first) {
            return Judgement::Copy;
        }
        if self.handed_order.len() >= LEFT_OUT_KEPT
            && let Some(oldest) = self.handed_order.pop_front()
        {
            self.handed.remove(&oldest);
        }
        self.handed.insert(first.to_string());
        self.handed_order.push_back(first.to_string());
        Judgement::Next
    }
}

impl MailboxStream for Streams {
    fn publish(&self, actor: &ActorId, envelope: &Arc<Envelope>) -> bool {
        if self.in_flight.load(Ordering::Acquire) >= PUBLISH_IN_FLIGHT {
            return false;
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.sent.fetch_add(1, Ordering::AcqRel);
        let publication = Publication {
            to: actor.clone(),
            envelope: envelope.clone(),
            term: self.term_of(envelope),
        };
        if self.publishing.send(publication).is_err() {
            self.finished();
            return false;
        }
        true
    }

    fn ack(&self, actor: &ActorId, pos: i64) {
        let done = self.acks.lock().expect("acks lock").read(actor, pos);
        if let Some(Unacknowledged { reply, term, .. }) = done {
            // What the guest wrote before it was done with this message goes first: should this
            // host die before that is stored, the message comes again rather than being lost
            // with what it caused.
            let after = self.sent.load(Ordering::Acquire);
            let _ = self.acking.send(Ack { reply, term, after });
        }
    }

    fn space(&self) -> &Notify {
        &self.space
    }

    fn stored(&self) -> sausage_core::runtime::stdio::BoxFuture<'_> {
        Box::pin(self.finished_through(self.sent.load(Ordering::Acquire)))
    }
}

impl Remote for Streams {
    fn origin(&self, id: &str) -> Option<Arc<str>> {
        self.origins
            .lock()
            .expect("origins lock")
            .by_id
            .get(id)
            .cloned()
    }

    fn home_of(&self, native: &ActorId) -> Option<Arc<str>> {
        if !super::is_led_native(native.as_str()) {
            return None;
        }
        let view = self.view.lock().expect("view lock");
        view.elsewhere(native.as_str(), &self.host).map(Arc::from)
    }

    fn forward(&self, host: &str, to: &ActorId, envelope: &Arc<Envelope>) {
        let _ = self.forwarding.send(Forward {
            host: Arc::from(host),
            to: to.clone(),
            envelope: envelope.clone(),
            term: self.term_of(envelope),
        });
    }
}

/// Messages for other hosts' native actors, in order, each taken by that host (it answers the
/// request) or reported undeliverable to its sender.
async fn forward(streams: Arc<Streams>, mut forwards: mpsc::UnboundedReceiver<Forward>) {
    while let Some(Forward {
        host,
        to,
        envelope,
        term,
    }) = forwards.recv().await
    {
        if !streams.may_send(term, &envelope, &to).await {
            continue;
        }
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(ORIGIN_HEADER, &*streams.host);
        headers.insert(TO_HEADER, to.as_str());
        let line = bytes::Bytes::from(envelope.to_wire());
        let taken = tokio::time::timeout(
            FORWARD_TIMEOUT,
            streams
                .client
                .request_with_headers(host_subject(&host), headers, line),
        )
        .await;
        let failed = match taken {
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => format!("host {host} is not reachable ({e}); it may have stopped"),
            Err(_) => format!(
                "host {host} did not take it within {} s; it may have stopped",
                FORWARD_TIMEOUT.as_secs()
            ),
        };
        undeliverable(&streams, &envelope, &to, &failed);
    }
}

fn undeliverable(streams: &Streams, envelope: &Envelope, to: &ActorId, reason: &str) {
    if let Some(router) = streams.router() {
        router.report_undeliverable(envelope, to.as_str(), reason);
    }
}

/// Acknowledges read messages, in order, each once what this host published before its read
/// settled is stored, and only while the term it was read in allows: one read before a lapse
/// stays in the stream for the next owner.
async fn acknowledge(streams: Arc<Streams>, mut acks: mpsc::UnboundedReceiver<Ack>) {
    while let Some(Ack { reply, term, after }) = acks.recv().await {
        streams.finished_through(after).await;
        if !streams.run_until.settled(term).await {
            continue;
        }
        if let Err(e) = streams
            .client
            .publish(reply, bytes::Bytes::from_static(b"+ACK"))
            .await
        {
            tracing::warn!("a read message cannot be acknowledged ({e}); it may come again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publication_is_acknowledged_once_each_of_its_messages_was_read_in_any_order() {
        let (actor, other) = (ActorId::parse("a").unwrap(), ActorId::parse("b").unwrap());
        let publication = |subject: &str, positions: &[i64]| Unacknowledged {
            reply: async_nats::Subject::from(subject),
            term: 1,
            unread: positions.to_vec(),
        };
        let mut acks = Unacknowledgeds::default();
        let three = [position(7, 0), position(7, 1), position(7, 2)];
        acks.handed(&actor, 7, publication("first", &three));
        acks.handed(&actor, 8, publication("single", &[position(8, 0)]));
        acks.handed(&other, 7, publication("other's", &[position(7, 0)]));
        assert!(acks.read(&actor, three[2]).is_none());
        // A read counted twice (settled, then offered again) counts once.
        assert!(acks.read(&actor, three[2]).is_none());
        assert!(acks.read(&actor, three[0]).is_none());
        // Offered again through a new consumer: acknowledged through that one, once the two
        // read before are found read again (the mailbox says so as they arrive) and the third
        // is read.
        acks.handed(&actor, 7, publication("again", &three));
        assert!(acks.read(&actor, three[0]).is_none());
        assert!(acks.read(&actor, three[2]).is_none());
        let done = acks.read(&actor, three[1]).expect("all three read");
        assert_eq!(done.reply.as_str(), "again");
        assert!(acks.read(&actor, three[1]).is_none(), "acknowledged once");
        assert_eq!(
            acks.read(&actor, position(8, 0)).unwrap().reply.as_str(),
            "single"
        );
        // Positions of one publication stay apart from the next's, and grow in order.
        assert!(position(7, 2) < position(8, 0));
        assert!(position(7, LINES_PER_PUBLICATION - 1) < position(8, 0));
        acks.forget(&other);
        assert!(acks.read(&other, position(7, 0)).is_none());
    }

    #[test]
    fn a_copy_stored_out_of_its_publishers_order_is_left_out_and_its_copy_sent_again_taken() {
        use Judgement::{Again, LeftOut, Next};
        let mut reading = Reading::default();
        let mut judge =
            |pos, id: &str, after: &str| reading.judge(pos, Some(id), Some(after), None);
        // Host a sent 1, 2 and 3 into this mailbox; 2 was lost with a dying node, so 3 (after
        // 2) was stored first, then the retry of 2, then 3 again in a new epoch.
        assert_eq!(judge(10, "a.1.0/1", "0"), Next);
        assert_eq!(judge(11, "a.1.0/3", "2"), LeftOut);
        assert_eq!(judge(12, "a.1.0/2", "1"), Next);
        assert_eq!(judge(13, "a.1.1/4", "0"), Next);
        // A retry of one handed over already (past the stream's duplicate window) is left out.
        assert_eq!(judge(14, "a.1.0/2", "1"), LeftOut);
        // A consumer made again offers them again: what was left out stays out, the mailbox
        // knows the rest.
        assert_eq!(judge(11, "a.1.0/3", "2"), LeftOut);
        assert_eq!(judge(12, "a.1.0/2", "1"), Again);
        // Another publisher's chain is its own; a message without one is taken as it comes.
        assert_eq!(judge(15, "b.7.0/9", "5"), Next);
        assert_eq!(reading.judge(16, None, None, None), Next);
    }

    #[test]
    fn a_copy_sent_in_place_of_one_stored_late_is_handed_over_only_when_that_one_was_not() {
        use Judgement::{Copy, LeftOut, Next};
        // Host a's 2 was lost with a node, 3 stored before 2's retry; a sends 2 and 3 again in
        // a new epoch, each naming its first id.
        let stream = [
            (10, "a.1.0/1", "0", None),
            (11, "a.1.0/3", "2", None),
            (12, "a.1.0/2", "1", None),
            (13, "a.1.1/4", "0", Some("a.1.0/2")),
            (14, "a.1.1/5", "4", Some("a.1.0/3")),
        ];
        let judged = |from: usize| {
            let mut reading = Reading::default();
            stream[from..]
                .iter()
                .map(|(pos, id, after, first)| reading.judge(*pos, Some(id), Some(after), *first))
                .collect::<Vec<_>>()
        };
        // A consumer that read all along: 3 waits for its copy, 2 came, its copy is left out.
        assert_eq!(judged(0), [Next, LeftOut, Next, Copy, Next]);
        // A consumer new to the mailbox (the actor moved) starts at 3: 2's late copy is out of
        // its order and left out, so its copy in the new epoch is what hands 2 over; 3's copy
        // is left out.
        assert_eq!(judged(1), [Next, LeftOut, Next, Copy]);
    }
}
