//! The publishing pipeline: every message this host's senders write into a WASM actor's mailbox,
//! published to the mailbox stream in the order written, many at once. Messages written one
//! after another into the same mailbox while the pipeline was busy go out together, as one
//! publication of up to [`GROUP_MAX`] lines, so a flood costs the stream one store and one
//! acknowledgement per group rather than per message ([`super::position`] numbers each line).
//!
//! Each publication carries an id (`Nats-Msg-Id`, the same on every try, so the stream stores a
//! retry once) and names the one before it from this pipeline into the same mailbox
//! ([`super::AFTER_HEADER`]). When the oldest is not answered in time or is refused,
//! [`Pipeline::recover`] settles every publication in flight, in order, before anything new
//! goes out; a mailbox whose order broke gets its later publications again, each in its place,
//! in a new epoch, and its consumer leaves out the copies stored out of order
//! ([`super::Reading`]). Publications finish in the order they were published, as
//! `MailboxStream::stored` counts on, and none is sent once its writer's term has ended.
//!
//! Invariant: every publication reaches its mailbox's consumer once, in its sender's order (the
//! copies stored out of order are left out there), or its sender hears it is undeliverable.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, ErrorCode, publish::PublishAck};
use futures_util::future::BoxFuture;
use rustc_hash::FxHashMap;
use tokio::sync::mpsc;
use tokio::time::Instant;

use sausage_core::message::{ActorId, Envelope};
use sausage_core::runtime::run_until::Term;

use super::{
    AFTER_HEADER, ORIGIN_HEADER, Publication, REPLACES_HEADER, Streams, subject, undeliverable,
};

/// How long a publication's acknowledgement is awaited before the publication is taken for
/// lost (a node died under it, its stream elects a new leader) and sent again with its id.
/// Acknowledgements come in milliseconds; one too slow only costs a retry the stream drops.
const PUBLISH_ACK_WAIT: Duration = Duration::from_secs(2);
/// How long the answer to a publication sent again is awaited: its stream had trouble (a
/// stream electing a leader drops what it is sent, unanswered), and a prompt retry notices
/// sooner when the trouble is over.
const RETRY_ACK_WAIT: Duration = Duration::from_millis(500);
/// How long a publication is sent again while the cluster does not answer before its sender
/// hears it is undeliverable (it may still arrive: the stream may hold it unanswered).
const PUBLISH_PATIENCE: Duration = Duration::from_secs(60);
/// The first pause between two tries of a publication the cluster did not answer; each next
/// pause is twice as long, up to [`RETRY_PAUSE_MAX`].
const RETRY_PAUSE: Duration = Duration::from_millis(50);
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(250);
/// How long the mailbox stream remembers a publication's id, so that a retry within it is
/// stored once. Retries come within seconds; a longer window would only cost the servers
/// memory (one entry per message). A retry past it is still left out by [`super::Reading`].
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(30);
/// The most messages one publication carries ([`super::position`] has room for this many).
pub const GROUP_MAX: usize = 256;
/// The most bytes of lines one publication of several messages carries: well under the
/// stream's largest message, so a group never makes a message too big that alone would fit.
const GROUP_BYTES: usize = 256 * 1024;
/// The most publications taken from the queue at once to be grouped.
const BURST_MAX: usize = 4 * GROUP_MAX;

/// The publishing pipeline, one task per host: publications go out in order, many awaiting the
/// stream's answer at once, the oldest's awaited first. When that one is not answered in time
/// or is refused, [`Pipeline::recover`] settles every publication in flight before anything
/// new goes out.
struct Pipeline {
    streams: Arc<Streams>,
    /// Publications sent and not yet known to be stored, oldest first.
    window: VecDeque<InFlight>,
    /// This run of this host as a publisher, `<host>.<start in ms>`.
    name: String,
    /// Publication ids are `<name>.<epoch>/<number>`. A new epoch starts every mailbox's chain
    /// afresh, after a recovery that broke one.
    epoch: u64,
    /// The number the next publication gets.
    next: u64,
    /// The number of the last publication into each mailbox in this epoch.
    last: FxHashMap<ActorId, u64>,
}

/// A publication sent and not yet known to be stored: one message, or several written one after
/// another into the same mailbox in the same term.
struct InFlight {
    to: ActorId,
    /// Its messages, in the order written; its payload is their lines (each ends with `\n`).
    envelopes: Vec<Arc<Envelope>>,
    /// The term its writer wrote it in ([`super::Publication::term`]).
    term: Option<Term>,
    /// Its payload, once grouped: its messages' lines.
    line: bytes::Bytes,
    /// Its payload while it is being grouped.
    payload: bytes::BytesMut,
    /// Its `Nats-Msg-Id`, the same on every try.
    id: String,
    /// Its [`AFTER_HEADER`].
    after: u64,
    /// Sent again in a new epoch: the id of the first publication of its messages
    /// ([`REPLACES_HEADER`]).
    replaces: Option<String>,
    tries: u32,
    answer: Answer,
    /// When its answer is awaited no longer.
    deadline: Instant,
}

enum Answer {
    Awaited(BoxFuture<'static, Result<PublishAck, PublishError>>),
    Came(Fate),
}

/// What became of a publication.
#[derive(Clone)]
enum Fate {
    /// The stream holds it; `late` when a retry stored it because the first copy was lost, so
    /// that it may sit behind later publications into its mailbox.
    Stored { late: bool },
    /// The stream said no (its mailbox is full, it is too big), for this reason.
    Refused(String),
    /// No answer (a node died, the stream elects its leader): it may or may not be stored.
    Unknown(String),
    /// Not sent (again): its writer's term ended, as the log says (`Streams::may_send`).
    Withheld,
}

impl Fate {
    fn of(answer: Result<PublishAck, PublishError>, tries: u32) -> Fate {
        match answer {
            Ok(ack) => Fate::Stored {
                late: tries > 1 && !ack.duplicate,
            },
            Err(e) if refused(&e) => Fate::Refused(e.to_string()),
            Err(e) => Fate::Unknown(e.to_string()),
        }
    }
}

/// Whether the stream said no to the publication itself, rather than nobody answering (a
/// timeout, no responders while a stream elects its leader, a broken connection, JetStream
/// unavailable for a moment): only a no is final.
fn refused(e: &PublishError) -> bool {
    match e.kind() {
        PublishErrorKind::MaxPayloadExceeded => true,
        PublishErrorKind::Other => std::error::Error::source(e)
            .and_then(|source| source.downcast_ref::<jetstream::Error>())
            .is_some_and(|e| e.error_code() != ErrorCode::CLUSTER_NOT_AVAILABLE),
        _ => false,
    }
}

impl InFlight {
    /// The stream's answer, once it comes or the deadline passes (an answer that came late
    /// still counts, when asked again). Cancel-safe: the answer is awaited by reference.
    async fn answer(&mut self) -> Fate {
        let Answer::Awaited(answer) = &mut self.answer else {
            let Answer::Came(fate) = &self.answer else {
                unreachable!("an answer is awaited or came")
            };
            return fate.clone();
        };
        match tokio::time::timeout_at(self.deadline, answer).await {
            Ok(answer) => {
                let fate = Fate::of(answer, self.tries);
                self.answer = Answer::Came(fate.clone());
                fate
            }
            Err(_) => Fate::Unknown("no answer in time".into()),
        }
    }
}

/// Publishes what comes on `publications` for as long as they come.
pub(super) async fn run(streams: Arc<Streams>, publications: mpsc::UnboundedReceiver<Publication>) {
    Pipeline::new(streams).run(publications).await
}

impl Pipeline {
    fn new(streams: Arc<Streams>) -> Pipeline {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Pipeline {
            name: format!("{}.{started}", streams.host),
            streams,
            window: VecDeque::new(),
            epoch: 0,
            next: 1,
            last: FxHashMap::default(),
        }
    }

    async fn run(mut self, mut publications: mpsc::UnboundedReceiver<Publication>) {
        let mut connections = self.streams.connections.clone();
        loop {
            // Waits for one of: the client's connection moving to another node (what is in
            // flight is then settled at once: its answers went with the old connection); the
            // oldest publication's answer or deadline; a new publication, sent behind the rest.
            tokio::select! {
                biased;
                Ok(()) = connections.changed() => {
                    let now = Instant::now();
                    for flight in &mut self.window {
                        flight.deadline = flight.deadline.min(now);
                    }
                }
                fate = oldest_answer(&mut self.window), if !self.window.is_empty() => {
                    if let Fate::Stored { .. } = fate {
                        let flight = self.window.pop_front().expect("the oldest answered");
                        self.finished(&flight);
                    } else {
                        self.recover().await;
                    }
                }
                publication = publications.recv() => match publication {
                    Some(first) => {
                        // Whatever else waits goes out with it, grouped by mailbox.
                        let mut burst = vec![first];
                        while burst.len() < BURST_MAX {
                            match publications.try_recv() {
                                Ok(publication) => burst.push(publication),
                                Err(_) => break,
                            }
                        }
                        for mut flight in group(burst) {
                            self.chain(&mut flight);
                            self.send(&mut flight, PUBLISH_ACK_WAIT).await;
                            self.window.push_back(flight);
                        }
                    }
                    None => return,
                },
            }
        }
    }

    /// Gives `flight` its place in the current epoch: the next number, after the last one into
    /// its mailbox, and an id of its own (a copy sent again in a new epoch is a new
    /// publication to the stream).
    fn chain(&mut self, flight: &mut InFlight) {
        let n = self.next;
        self.next += 1;
        flight.after = self.last.insert(flight.to.clone(), n).unwrap_or(0);
        flight.id = format!("{}.{}/{n}", self.name, self.epoch);
        flight.tries = 0;
    }

    /// Starts a new epoch: every mailbox's chain starts afresh, so what follows is judged
    /// apart from copies of the old one the stream may hold out of order.
    fn new_epoch(&mut self) {
        self.epoch += 1;
        self.last.clear();
    }

    /// Sends `flight` (again), with its id, to be answered within `wait`; not once its writer's
    /// term has ended.
    async fn send(&mut self, flight: &mut InFlight, wait: Duration) {
        let (term, envelope, to) = (flight.term, &flight.envelopes[0], &flight.to);
        if !self.streams.may_send(term, envelope, to).await {
            flight.answer = Answer::Came(Fate::Withheld);
            return;
        }
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(ORIGIN_HEADER, &*self.streams.host);
        headers.insert(AFTER_HEADER, flight.after.to_string().as_str());
        if let Some(first) = &flight.replaces {
            headers.insert(REPLACES_HEADER, first.as_str());
        }
        let message = PublishMessage::build()
            .payload(flight.line.clone())
            .headers(headers)
            .message_id(&flight.id);
        flight.tries += 1;
        flight.deadline = Instant::now() + wait;
        let sent = self
            .streams
            .js
            .send_publish(subject(&flight.to), message)
            .await;
        flight.answer = match sent {
            Ok(answer) => Answer::Awaited(std::future::IntoFuture::into_future(answer)),
            Err(e) => Answer::Came(Fate::of(Err(e), flight.tries)),
        };
    }

    /// Settles every publication in flight, oldest first, once the oldest was not answered in
    /// time or was refused:
    /// - stored where it was sent: done;
    /// - refused: its sender hears why;
    /// - no answer: sent again with its id until the stream answers ([`Pipeline::retry`]); a
    ///   copy found means it was stored in its place, a copy stored now may sit behind later
    ///   publications into its mailbox.
    ///
    /// A mailbox whose chain broke here (one stored late, refused, given up on or withheld)
    /// has its later publications in flight sent again, each in its place, in a new epoch:
    /// copies of them the stream holds already are out of order, and its consumer leaves them
    /// out. Each publication finishes here, in order.
    async fn recover(&mut self) {
        let started = Instant::now();
        let unsettled = self.window.len();
        let mut broken: std::collections::HashSet<ActorId> = Default::default();
        let mut retried = 0;
        while let Some(mut flight) = self.window.pop_front() {
            let mut fate = flight.answer().await;
            let again = broken.contains(&flight.to);
            if !again && let Fate::Unknown(reason) = &fate {
                if retried == 0 {
                    tracing::warn!(
                        "host {}: the cluster did not answer a publication ({reason}); sending \
                         the {unsettled} in flight again where needed",
                        self.streams.host
                    );
                }
                retried += 1;
                fate = self.retry(&mut flight).await;
            }
            // Stored late: later publications into its mailbox may be stored before it. A
            // consumer that read all along leaves those out and takes this one; a consumer new
            // to the mailbox (the actor moved) may have taken them and leaves this one out. So
            // it goes again too, in the new epoch, naming its first id: whichever consumer
            // handed over one of its copies leaves the other out.
            let late = !again && matches!(fate, Fate::Stored { late: true });
            if late {
                if broken.is_empty() {
                    self.new_epoch();
                }
                broken.insert(flight.to.clone());
            }
            if (again || late) && !matches!(fate, Fate::Refused(_) | Fate::Withheld) {
                // Its copy, if the stream holds one, may be out of order: a new one in its
                // place, naming the first.
                let after = self.last.get(&flight.to).copied().unwrap_or(0);
                flight.replaces.get_or_insert_with(|| flight.id.clone());
                self.chain(&mut flight);
                fate = self.retry(&mut flight).await;
                if !matches!(fate, Fate::Stored { .. }) {
                    // The next in its mailbox follows the one before this, which it did not.
                    self.last.insert(flight.to.clone(), after);
                }
            }
            let uncertain = matches!(fate, Fate::Unknown(_) | Fate::Withheld);
            let broke = match fate {
                Fate::Stored { .. } => false,
                Fate::Refused(reason) => {
                    let reason = format!("its stream refused it: {reason}");
                    flight.undeliverable(&self.streams, &reason);
                    !again
                }
                Fate::Unknown(reason) => {
                    let reason = format!(
                        "the cluster did not store it within {} s ({reason}); it may still \
                         arrive",
                        PUBLISH_PATIENCE.as_secs()
                    );
                    flight.undeliverable(&self.streams, &reason);
                    true
                }
                Fate::Withheld => true,
            };
            if broke {
                // Whether a copy is stored is unknown for an unanswered one: a fresh epoch
                // keeps what follows apart from it, whichever way it went.
                if broken.is_empty() || uncertain {
                    self.new_epoch();
                }
                broken.insert(flight.to.clone());
            }
            self.finished(&flight);
        }
        if retried > 0 || !broken.is_empty() {
            tracing::info!(
                "host {}: {unsettled} publications in flight settled in {} ms ({retried} sent \
                 again, {} mailboxes sent again in order)",
                self.streams.host,
                started.elapsed().as_millis(),
                broken.len()
            );
        }
    }

    /// Every message of `flight` finished (stored, or its sender told why not), in order.
    fn finished(&self, flight: &InFlight) {
        for _ in &flight.envelopes {
            self.streams.finished();
        }
    }

    /// Sends `flight` again with its id until the stream answers, pausing longer each time,
    /// for at most [`PUBLISH_PATIENCE`].
    async fn retry(&mut self, flight: &mut InFlight) -> Fate {
        let given_up = Instant::now() + PUBLISH_PATIENCE;
        let mut pause = RETRY_PAUSE;
        loop {
            self.send(flight, RETRY_ACK_WAIT).await;
            match flight.answer().await {
                Fate::Unknown(_) if Instant::now() < given_up => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_PAUSE_MAX);
                }
                fate => return fate,
            }
        }
    }
}

impl InFlight {
    /// Tells the sender of each of its messages that it is undeliverable, and why.
    fn undeliverable(&self, streams: &Streams, reason: &str) {
        for envelope in &self.envelopes {
            undeliverable(streams, envelope, &self.to, reason);
        }
    }
}

/// Groups `burst` into publications, in order: a run of messages into the same mailbox in the
/// same term goes out as one, up to [`GROUP_MAX`] messages and [`GROUP_BYTES`] (a message
/// bigger than that goes alone).
fn group(burst: Vec<Publication>) -> Vec<InFlight> {
    let mut flights: Vec<InFlight> = Vec::new();
    for Publication { to, envelope, term } in burst {
        let line = envelope.to_wire();
        if let Some(last) = flights.last_mut()
            && last.to == to
            && last.term == term
            && last.envelopes.len() < GROUP_MAX
            && last.payload.len() + line.len() < GROUP_BYTES
        {
            last.payload.extend_from_slice(&line);
            last.envelopes.push(envelope);
            continue;
        }
        let payload = bytes::BytesMut::from(&line[..]);
        flights.push(InFlight {
            id: String::new(),
            to,
            envelopes: vec![envelope],
            term,
            payload,
            line: bytes::Bytes::new(),
            after: 0,
            replaces: None,
            tries: 0,
            answer: Answer::Came(Fate::Withheld),
            deadline: Instant::now(),
        });
    }
    for flight in &mut flights {
        flight.line = std::mem::take(&mut flight.payload).freeze();
    }
    flights
}

/// The answer of the oldest publication in flight ([`InFlight::answer`]).
async fn oldest_answer(window: &mut VecDeque<InFlight>) -> Fate {
    let oldest = window
        .front_mut()
        .expect("awaited only while a publication is in flight");
    oldest.answer().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use sausage_core::message::raw;

    fn publication(to: &str, n: usize, pad: usize, term: Option<Term>) -> Publication {
        Publication {
            to: ActorId::parse(to).unwrap(),
            envelope: Arc::new(Envelope {
                id: format!("m-{n}"),
                from: ActorId::parse("producer").unwrap(),
                reply_to: None,
                speaker: None,
                schedule: None,
                trace: Default::default(),
                body: raw(&serde_json::json!({"n": n, "pad": "x".repeat(pad)})),
            }),
            term,
        }
    }

    /// What each publication carries: its mailbox and its messages' numbers.
    fn shape(flights: &[InFlight]) -> Vec<(String, Vec<usize>)> {
        flights
            .iter()
            .map(|f| {
                let numbers = f
                    .envelopes
                    .iter()
                    .map(|e| e.id.trim_start_matches("m-").parse().unwrap())
                    .collect();
                (f.to.to_string(), numbers)
            })
            .collect()
    }

    #[test]
    fn a_run_of_messages_into_one_mailbox_goes_out_as_one_publication_in_order() {
        let burst = vec![
            publication("a", 1, 0, Some(1)),
            publication("a", 2, 0, Some(1)),
            publication("b", 3, 0, Some(1)),
            publication("a", 4, 0, Some(1)),
            // Another term (the host's leases lapsed and came back) starts another publication.
            publication("a", 5, 0, Some(2)),
            publication("a", 6, 0, None),
        ];
        let flights = group(burst);
        assert_eq!(
            shape(&flights),
            [
                ("a".into(), vec![1, 2]),
                ("b".into(), vec![3]),
                ("a".into(), vec![4]),
                ("a".into(), vec![5]),
                ("a".into(), vec![6]),
            ]
        );
        // The payload is the lines in order, each as a guest reads it.
        let lines: Vec<&[u8]> = flights[0].line.split_inclusive(|b| *b == b'\n').collect();
        assert_eq!(lines.len(), 2);
        for (line, envelope) in lines.iter().zip(&flights[0].envelopes) {
            assert_eq!(*line, envelope.to_line().as_slice());
            assert_eq!(Envelope::from_line(line).unwrap().id, envelope.id);
        }
    }

    #[test]
    fn a_publication_holds_at_most_group_max_messages_and_group_bytes() {
        let many: Vec<_> = (0..GROUP_MAX + 3)
            .map(|n| publication("a", n, 0, Some(1)))
            .collect();
        let flights = group(many);
        assert_eq!(
            flights
                .iter()
                .map(|f| f.envelopes.len())
                .collect::<Vec<_>>(),
            [GROUP_MAX, 3]
        );
        // Big messages: as many as fit under GROUP_BYTES go together; one bigger goes alone.
        let big = GROUP_BYTES / 3;
        let burst = vec![
            publication("a", 1, big, Some(1)),
            publication("a", 2, big, Some(1)),
            publication("a", 3, big, Some(1)),
            publication("a", 4, GROUP_BYTES * 2, Some(1)),
            publication("a", 5, 0, Some(1)),
        ];
        let flights = group(burst);
        assert_eq!(
            shape(&flights),
            [
                ("a".into(), vec![1, 2]),
                ("a".into(), vec![3]),
                ("a".into(), vec![4]),
                ("a".into(), vec![5]),
            ]
        );
        assert!(
            flights
                .iter()
                .all(|f| f.line.len() < GROUP_BYTES || f.envelopes.len() == 1)
        );
    }
}
