//! Routing: who gets a message, under which id, and what the sender hears when it cannot be
//! delivered.
//!
//! The router owns the table of mailboxes and the subscriptions as routing sees them. It never
//! parses a body: a message is delivered as the raw JSON its sender wrote. Back-pressure lives
//! here: a delivery to a full mailbox waits (up to `FULL_MAILBOX_TIMEOUT`) before it fails.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use rustc_hash::FxHashMap;
use serde_json::json;

use super::journal::Journal;
use super::mailbox::{MAILBOX_BYTES, MAILBOX_CAPACITY, Mailbox, MailboxStream, Refused};
use crate::message::{ActorId, Envelope, Outgoing, Trace, raw};
use crate::people::People;
use crate::traces;
use crate::world::{MESSAGE_ID_BLOCK, World};

pub struct Router {
    /// Looked up once per recipient of every message: a fast hash, as the keys are a handful of
    /// actor ids the broker admitted, not sets an attacker can grow.
    mailboxes: RwLock<FxHashMap<ActorId, Arc<Mailbox>>>,
    /// Publisher → subscribers, mirrored from the registry by the broker.
    subscribers: RwLock<HashMap<ActorId, Vec<ActorId>>>,
    ids: MessageIds,
    /// Records every mailbox, so accepted messages survive a kill of the host.
    journal: Arc<Journal>,
    /// Who a surface actor's `"as"` handle speaks for (consulted only for lines that have one).
    people: People,
    /// The other hosts, when the world spans several (DESIGN §16); unset on a single host.
    remote: OnceLock<Joined>,
    /// Whether messages get a trace: while this host exports spans (DESIGN §22). Otherwise
    /// nothing of traces touches a message, so the round trip pays nothing for them.
    tracing: bool,
}

/// A router's view of the cluster it joined.
struct Joined {
    remote: Arc<dyn Remote>,
    streams: Arc<dyn MailboxStream>,
}

/// What routing needs of the other hosts of a world spread over several (DESIGN §16): WASM
/// actors' mailboxes are streams every host publishes to, and native actors are each host's
/// own, so a reply to a native actor of another host goes back there. Implemented by `cluster`.
pub trait Remote: Send + Sync {
    /// The host a native actor's message `id` came from, when it came here from another host.
    fn origin(&self, id: &str) -> Option<Arc<str>>;
    /// The other host whose `native` actor serves the whole world (the scheduler), if any.
    fn home_of(&self, native: &ActorId) -> Option<Arc<str>>;
    /// Hands `envelope` to `to`, a native actor of `host`.
    fn forward(&self, host: &str, to: &ActorId, envelope: &Arc<Envelope>);
}

/// One mailbox seen by [`Router::traffic`].
pub struct Traffic {
    pub actor: ActorId,
    /// Messages waiting in it now.
    pub queued: usize,
    /// Each sender's messages accepted into it since the host started.
    pub accepted_from: Vec<(ActorId, u64)>,
    /// The bytes of those messages (as stdin lines).
    pub accepted_bytes: u64,
    /// How long the messages its actor took waited in it.
    pub waits: super::counters::Waits,
}

/// A message on its way: its envelope and the recipients it has not reached yet.
pub struct Delivery {
    envelope: Arc<Envelope>,
    recipients: Recipients,
}

/// The recipients a delivery has not reached yet, in order. Most messages have one, which
/// takes no allocation.
#[derive(Default)]
struct Recipients {
    next: Option<ActorId>,
    after: VecDeque<ActorId>,
}

impl Recipients {
    fn one(to: ActorId) -> Recipients {
        Recipients {
            next: Some(to),
            after: VecDeque::new(),
        }
    }

    fn all(ids: impl IntoIterator<Item = ActorId>) -> Recipients {
        let mut after: VecDeque<ActorId> = ids.into_iter().collect();
        Recipients {
            next: after.pop_front(),
            after,
        }
    }

    fn front(&self) -> Option<&ActorId> {
        self.next.as_ref()
    }

    fn pop_front(&mut self) -> Option<ActorId> {
        let next = self.next.take();
        self.next = self.after.pop_front();
        next
    }
}

impl Router {
    pub fn new(world: World, first_message_id: u64, journal: Arc<Journal>) -> Router {
        Router {
            mailboxes: RwLock::default(),
            subscribers: RwLock::default(),
            people: People::new(&world),
            ids: MessageIds::new(world, first_message_id),
            journal,
            remote: OnceLock::new(),
            tracing: traces::on(),
        }
    }

    /// Whether messages get a trace (the host exports spans).
    pub fn tracing(&self) -> bool {
        self.tracing
    }

    /// Joins a world spread over several hosts, before any WASM actor's mailbox is added: those
    /// become streams, and message ids come from `ids`, a range no other host uses.
    pub fn join(
        &self,
        remote: Arc<dyn Remote>,
        streams: Arc<dyn MailboxStream>,
        ids: std::ops::Range<u64>,
    ) {
        assert!(
            self.remote.set(Joined { remote, streams }).is_ok(),
            "a router joins one cluster"
        );
        self.ids.reserved_elsewhere(ids);
    }

    /// Resolves once every message this host published before the call is stored in its
    /// stream; at once on a single host, whose journal stores a message as it is accepted.
    pub async fn stored(&self) {
        if let Some(joined) = self.remote.get() {
            joined.streams.stored().await;
        }
    }

    /// Whether the world spans several hosts.
    pub fn is_joined(&self) -> bool {
        self.remote.get().is_some()
    }

    /// Adds an actor's mailbox (or returns the one it has). A new mailbox starts with the
    /// messages the journal kept for the actor.
    pub fn add(&self, id: &ActorId) -> Arc<Mailbox> {
        let mut mailboxes = self.mailboxes.write().expect("router lock");
        mailboxes
            .entry(id.clone())
            .or_insert_with(|| match self.remote.get() {
                Some(joined) if !id.is_native() => Arc::new(self.streamed(id, &joined.streams)),
                _ => Arc::new(Mailbox::durable(id.clone(), self.journal.clone())),
            })
            .clone()
    }

    /// A WASM actor's mailbox on a cluster. What this host's journal still held for it (from
    /// before the world spanned several hosts) moves into its stream first.
    fn streamed(&self, id: &ActorId, streams: &Arc<dyn MailboxStream>) -> Mailbox {
        let mailbox = Mailbox::streamed(id.clone(), streams.clone());
        let local = Mailbox::durable(id.clone(), self.journal.clone());
        while let Some(envelope) = local.take_now() {
            if mailbox.try_push(envelope.clone()).is_err() {
                tracing::warn!(
                    "actor {id}: message {} kept from before the cluster cannot move \
                     into its stream now; it stays in this host's journal",
                    envelope.id
                );
                local.push_front(envelope);
                break;
            }
        }
        mailbox
    }

    /// Delivers a message that another host routed already (its id and sender are set) to
    /// `to`, a mailbox of this host.
    pub fn deliver_routed(&self, to: ActorId, envelope: Arc<Envelope>) {
        let mut delivery = Delivery {
            envelope,
            recipients: Recipients::one(to),
        };
        if !self.try_deliver(&mut delivery) {
            let reason = "the mailbox is full; the sender's host could not wait for it";
            let to = delivery
                .recipients
                .pop_front()
                .expect("a blocked recipient");
            self.undeliverable(&delivery.envelope, to.as_str(), reason);
        }
    }

    /// Tells the sender of `failed` it did not reach `to`, because of `reason`.
    pub fn report_undeliverable(&self, failed: &Envelope, to: &str, reason: &str) {
        self.undeliverable(failed, to, reason);
    }

    /// Tells the sender of a message lost with a host that died (`"lost": true` in the
    /// notice): an HTTP request's caller is answered 502.
    pub fn report_lost(&self, failed: &Envelope, to: &str, reason: &str) {
        self.notify_undeliverable(failed, to, reason, true);
    }

    /// Every mailbox's depth and what each sender got into it since the host started, for
    /// rates and the graph of who talks to whom. Takes each mailbox's lock for a moment, like a
    /// push.
    pub fn traffic(&self) -> Vec<Traffic> {
        let mailboxes: Vec<(ActorId, Arc<Mailbox>)> = self
            .mailboxes
            .read()
            .expect("router lock")
            .iter()
            .map(|(id, mailbox)| (id.clone(), mailbox.clone()))
            .collect();
        mailboxes
            .into_iter()
            .map(|(actor, mailbox)| mailbox.traffic(actor))
            .collect()
    }

    /// Removes an actor's mailbox: later messages to it are undeliverable.
    pub fn remove(&self, id: &ActorId) -> Option<Arc<Mailbox>> {
        self.mailboxes.write().expect("router lock").remove(id)
    }

    /// Puts back a mailbox [`Router::remove`] took, with what waits in it (a removal that
    /// failed changes nothing).
    pub fn restore(&self, id: &ActorId, mailbox: Arc<Mailbox>) {
        self.mailboxes
            .write()
            .expect("router lock")
            .insert(id.clone(), mailbox);
    }

    pub fn mailbox(&self, id: &ActorId) -> Option<Arc<Mailbox>> {
        self.mailboxes.read().expect("router lock").get(id).cloned()
    }

    /// Drops every stdin write stalled past its timeout, in one pass over the mailboxes (see
    /// [`Mailbox::drop_stalled_write`]), and returns whose message was dropped. Only mailboxes
    /// read by a running instance can stall. The same pass settles reads older than
    /// [`READ_SETTLES_AFTER`](super::mailbox::READ_SETTLES_AFTER).
    pub fn drop_stalled_writes(&self, now: std::time::Instant) -> Vec<(ActorId, Arc<Envelope>)> {
        let mailboxes = self.mailboxes.read().expect("router lock");
        mailboxes
            .iter()
            .filter_map(|(id, mailbox)| {
                mailbox.settle_old_reads(now);
                Some((id.clone(), mailbox.drop_stalled_write(now)?))
            })
            .collect()
    }

    pub fn set_subscriptions(&self, subscriptions: HashMap<ActorId, Vec<ActorId>>) {
        *self.subscribers.write().expect("router lock") = subscriptions;
    }

    /// A fresh `m-<n>` id, unique within the world across restarts.
    pub fn next_id(&self) -> String {
        let mut id = String::with_capacity(22);
        id.push_str("m-");
        push_decimal(&mut id, self.ids.next());
        id
    }

    /// Gives a message written by `from` its id and recipients: `to`, or every subscriber of
    /// `from` when `to` is absent. A line with `"as"` speaks for the person that handle names,
    /// or goes nowhere (the sender hears why).
    pub fn accept(&self, from: &ActorId, mut out: Outgoing) -> Delivery {
        let trace = match self.tracing {
            true => Trace::child_of(out.trace.or_else(traces::handling_now).as_ref(), true),
            false => Trace::NONE,
        };
        let id = match out.id {
            Some(own) => format!("{from}/{own}"),
            None => self.next_id(),
        };
        let spoken = match out.as_handle.take() {
            Some(handle) => self.people.speaker_by_handle(from, &handle).map(Some),
            None => Ok(out.speaker.take()),
        };
        let recipients = match (out.to, spoken) {
            (to, Err(reason)) => {
                let envelope = Envelope {
                    id,
                    from: from.clone(),
                    reply_to: out.reply_to,
                    speaker: None,
                    schedule: None,
                    trace,
                    body: out.body,
                };
                self.undeliverable(
                    &envelope,
                    to.as_deref().unwrap_or("its subscribers"),
                    &reason,
                );
                return Delivery {
                    envelope: Arc::new(envelope),
                    recipients: Recipients::default(),
                };
            }
            (to, Ok(speaker)) => {
                out.speaker = speaker;
                to
            }
        };
        let recipients = match recipients {
            Some(to) => match ActorId::parse(&to) {
                Ok(to) => Recipients::one(to),
                Err(reason) => {
                    let envelope = Envelope {
                        id,
                        from: from.clone(),
                        reply_to: out.reply_to,
                        speaker: out.speaker,
                        schedule: out.schedule,
                        trace,
                        body: out.body,
                    };
                    self.undeliverable(&envelope, &to, &reason);
                    return Delivery {
                        envelope: Arc::new(envelope),
                        recipients: Recipients::default(),
                    };
                }
            },
            None => self
                .subscribers
                .read()
                .expect("router lock")
                .get(from)
                .map(|subs| Recipients::all(subs.iter().cloned()))
                .unwrap_or_default(),
        };
        Delivery {
            envelope: Arc::new(Envelope {
                id,
                from: from.clone(),
                reply_to: out.reply_to,
                speaker: out.speaker,
                schedule: out.schedule,
                trace,
                body: out.body,
            }),
            recipients,
        }
    }

    /// Delivers to every recipient whose mailbox has room, in order, without waiting. Returns
    /// true when the delivery is done; false when it must wait for the next recipient's space.
    pub fn try_deliver(&self, delivery: &mut Delivery) -> bool {
        while let Some(to) = delivery.recipients.front() {
            if to.is_native()
                && let Some(joined) = self.remote.get()
                && let Some(host) = (delivery.envelope.reply_to.as_deref())
                    .and_then(|r| joined.remote.origin(r))
                    .or_else(|| joined.remote.home_of(to))
            {
                let to = delivery.recipients.pop_front().expect("front exists");
                joined.remote.forward(&host, &to, &delivery.envelope);
                continue;
            }
            let Some(mailbox) = self.mailbox(to) else {
                let to = delivery.recipients.pop_front().expect("front exists");
                self.undeliverable(&delivery.envelope, to.as_str(), &self.unknown(&to));
                continue;
            };
            match mailbox.try_push(delivery.envelope.clone()) {
                Ok(()) => {}
                Err(Refused::Full(_)) => return false,
                Err(Refused::Unstored(_, reason)) => {
                    self.undeliverable(&delivery.envelope, to.as_str(), &reason);
                }
            }
            delivery.recipients.pop_front();
        }
        true
    }

    /// Delivers to every recipient, waiting on full mailboxes; a mailbox that stays full past
    /// its timeout makes the message undeliverable to that recipient.
    pub async fn deliver(&self, mut delivery: Delivery) {
        while !self.try_deliver(&mut delivery) {
            let to = delivery
                .recipients
                .pop_front()
                .expect("a blocked recipient");
            let Some(mailbox) = self.mailbox(&to) else {
                continue;
            };
            match mailbox.push(delivery.envelope.clone()).await {
                Ok(()) => {}
                Err(Refused::Full(_)) => {
                    let reason = format!(
                        "the mailbox of `{to}` stayed full ({MAILBOX_CAPACITY} messages or {} MiB) \
                         for 30 s; `{to}` is not keeping up",
                        MAILBOX_BYTES >> 20
                    );
                    self.undeliverable(&delivery.envelope, to.as_str(), &reason);
                }
                Err(Refused::Unstored(_, reason)) => {
                    self.undeliverable(&delivery.envelope, to.as_str(), &reason);
                }
            }
        }
    }

    /// Sends a message from the native actor `from` to the native actor of the same id on
    /// `host`, another host of the cluster (`out.to` names it); its id, or `None` when this
    /// host is in no cluster.
    pub fn send_to_host(&self, host: &str, from: &ActorId, out: Outgoing) -> Option<String> {
        let joined = self.remote.get()?;
        let to = ActorId::parse(out.to.as_deref()?).ok()?;
        let delivery = self.accept(from, out);
        joined.remote.forward(host, &to, &delivery.envelope);
        Some(delivery.envelope.id.clone())
    }

    /// Routes one message from `from` to the end, waiting as needed.
    pub async fn send(&self, from: &ActorId, out: Outgoing) -> String {
        let delivery = self.accept(from, out);
        let id = delivery.envelope.id.clone();
        self.deliver(delivery).await;
        id
    }

    /// Tells the sender its message did not reach `to`. Never waits and never reports on a
    /// report, so two actors cannot bounce notices forever.
    fn undeliverable(&self, failed: &Envelope, to: &str, reason: &str) {
        self.notify_undeliverable(failed, to, reason, false);
    }

    fn notify_undeliverable(&self, failed: &Envelope, to: &str, reason: &str, lost: bool) {
        let broker = ActorId::broker();
        if failed.from == broker {
            return;
        }
        let Some(sender) = self.mailbox(&failed.from) else {
            return;
        };
        let notice = Envelope {
            id: self.next_id(),
            from: broker,
            reply_to: Some(failed.id.clone()),
            speaker: None,
            schedule: None,
            trace: match self.tracing {
                true => Trace::child_of(Some(&failed.trace), true),
                false => Trace::NONE,
            },
            body: raw(&match lost {
                true => json!({"type": "undeliverable", "reason": reason, "to": to, "lost": true}),
                false => json!({"type": "undeliverable", "reason": reason, "to": to}),
            }),
        };
        // A native sender on another host of a cluster (a request of its web console or
        // public address) hears where it waits.
        if failed.from.is_native()
            && let Some(joined) = self.remote.get()
            && let Some(host) = joined.remote.origin(&failed.id)
        {
            joined
                .remote
                .forward(&host, &failed.from, &Arc::new(notice));
            return;
        }
        // Dropping the notice when the sender's own mailbox is full is right: waiting here
        // could deadlock two actors that flood each other.
        let _ = sender.try_push(Arc::new(notice));
    }

    fn unknown(&self, to: &ActorId) -> String {
        let mailboxes = self.mailboxes.read().expect("router lock");
        let mut known: Vec<&str> = mailboxes.keys().map(ActorId::as_str).collect();
        known.sort_unstable();
        format!("no actor `{to}`; known actors: {}", known.join(", "))
    }
}

impl Delivery {
    pub fn id(&self) -> &str {
        &self.envelope.id
    }
}

/// Hands out message numbers, reserving them in blocks of [`MESSAGE_ID_BLOCK`] on disk first,
/// so a number is never handed out twice, even after a hard kill.
struct MessageIds {
    next: AtomicU64,
    /// The end of the block saved on disk; numbers below it may be used. Read without the
    /// lock, which only the number that reaches it takes, to save the next block.
    reserved: AtomicU64,
    /// Held while a block is saved, so that two numbers reaching the end save one block.
    saving: Mutex<()>,
    world: World,
}

impl MessageIds {
    fn new(world: World, first: u64) -> MessageIds {
        MessageIds {
            next: AtomicU64::new(first),
            reserved: AtomicU64::new(first),
            saving: Mutex::new(()),
            world,
        }
    }

    /// From now on numbers come from `range`, which the cluster reserved for this host: none is
    /// saved on disk.
    fn reserved_elsewhere(&self, range: std::ops::Range<u64>) {
        let _saving = self.saving.lock().expect("id lock");
        self.reserved.store(u64::MAX, Ordering::Release);
        self.next.store(range.start, Ordering::Relaxed);
    }

    fn next(&self) -> u64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        if n < self.reserved.load(Ordering::Acquire) {
            return n;
        }
        let _saving = self.saving.lock().expect("id lock");
        // Another number may have saved a block past this one meanwhile.
        if n >= self.reserved.load(Ordering::Acquire) {
            let end = n + MESSAGE_ID_BLOCK;
            if let Err(e) = self.world.save_next_message_id(end) {
                // Ids stay unique within this run; only a hard kill could then reuse some.
                tracing::warn!("cannot reserve message ids: {e:#}");
            }
            self.reserved.store(end, Ordering::Release);
        }
        n
    }
}

/// Appends `n` in decimal, without `format!`'s machinery (an id is made for every message).
fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    out.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ActorId {
        ActorId::parse(s).unwrap()
    }

    fn out(line: &str) -> Outgoing {
        Outgoing::parse(line.as_bytes()).unwrap()
    }

    fn router() -> (tempfile::TempDir, Router) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("broker")).unwrap();
        let world = World::new(dir.path());
        let journal = Journal::open(&world.journal_dir()).unwrap();
        let router = Router::new(world, 1, Arc::new(journal));
        (dir, router)
    }

    /// Lines in, messages out: every message each mailbox holds, as `(id, from, reply_to,
    /// body)`.
    fn drain(router: &Router, who: &str) -> Vec<serde_json::Value> {
        let mailbox = router.mailbox(&id(who)).unwrap();
        let input = mailbox.attach();
        let mut lines = Vec::new();
        let mut text = Vec::new();
        while let Some(chunk) = input.read(1 << 16) {
            if chunk.is_empty() {
                break;
            }
            text.extend_from_slice(&chunk);
        }
        mailbox.detach();
        for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            lines.push(serde_json::from_slice(line).unwrap());
        }
        lines
    }

    #[tokio::test]
    async fn a_message_continues_the_trace_it_names_or_the_one_under_way() {
        let (_dir, untraced) = router();
        let plain = untraced.accept(&id("a"), out(r#"{"to":"b","body":{}}"#));
        assert_eq!(plain.envelope.trace, Trace::NONE, "no exporter, no trace");
        assert!(
            !String::from_utf8(plain.envelope.to_line())
                .unwrap()
                .contains("trace")
        );
        let (_dir, mut router) = router();
        router.tracing = true;
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let named = router.accept(
            &id("a"),
            out(&format!(r#"{{"to":"b","trace":"{parent}","body":{{}}}}"#)),
        );
        let trace = named.envelope.trace;
        assert_eq!(trace.trace, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(trace.parent, 0x00f067aa0ba902b7);
        assert!(trace.sampled);
        let root = router.accept(&id("a"), out(r#"{"to":"b","body":{}}"#));
        assert!(root.envelope.trace.is_some());
        assert_eq!(root.envelope.trace.parent, 0);
        let handling = Trace::child_of(None, true);
        let under_way = crate::traces::handling(handling, async {
            router.accept(&id("a"), out(r#"{"to":"b","body":{}}"#))
        })
        .await;
        assert_eq!(under_way.envelope.trace.trace, handling.trace);
        assert_eq!(under_way.envelope.trace.parent, handling.span);
        let line = String::from_utf8(under_way.envelope.to_line()).unwrap();
        assert!(
            line.contains(&format!(r#""trace":"00-{:032x}-"#, handling.trace)),
            "{line}"
        );
    }

    #[tokio::test]
    async fn ids_are_assigned_or_prefixed_with_the_sender() {
        let (_dir, r) = router();
        r.add(&id("a"));
        r.add(&id("b"));
        r.send(&id("a"), out(r#"{"to":"b","body":{"type":"x"}}"#))
            .await;
        r.send(
            &id("a"),
            out(r#"{"to":"b","id":"q1","reply_to":"m-9","body":{"type":"y"}}"#),
        )
        .await;
        let got = drain(&r, "b");
        assert_eq!(got[0]["id"], "m-1");
        assert_eq!(got[0]["from"], "a");
        assert!(got[0].get("reply_to").is_none());
        assert_eq!(got[1]["id"], "a/q1");
        assert_eq!(got[1]["reply_to"], "m-9");
        assert_eq!(got[1]["body"]["type"], "y");
    }

    #[tokio::test]
    async fn a_surface_speaks_for_a_person_by_their_handle_and_nobody_else_can() {
        let (dir, r) = router();
        for a in ["matrix", "agent", "echo"] {
            r.add(&id(a));
        }
        let people = People::new(&World::new(dir.path()));
        let handles = [("matrix".to_string(), "@ann:x.org".to_string())].into();
        people
            .add_with("ann", crate::message::Tier::Member, None, handles)
            .unwrap();
        people.grant_surface(&id("matrix"), "matrix").unwrap();
        let line = r#"{"to":"agent","as":"@ann:x.org","person":"owner","body":{"type":"text"}}"#;
        r.send(&id("matrix"), out(line)).await;
        r.send(&id("echo"), out(line)).await;
        let unknown = r#"{"to":"agent","as":"@eve:x.org","body":{"type":"text"}}"#;
        r.send(&id("matrix"), out(unknown)).await;
        let got = drain(&r, "agent");
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (&got[0]["person"], &got[0]["tier"]),
            (&json!("ann"), &json!("member"))
        );
        let echo = drain(&r, "echo");
        assert!(
            echo[0]["body"]["reason"]
                .as_str()
                .unwrap()
                .contains("may not speak"),
            "{echo:?}"
        );
        let matrix = drain(&r, "matrix");
        assert_eq!(matrix[0]["body"]["type"], "undeliverable");
        assert!(
            matrix[0]["body"]["reason"]
                .as_str()
                .unwrap()
                .contains("not a person"),
            "{matrix:?}"
        );
    }

    #[tokio::test]
    async fn publish_goes_to_every_subscriber() {
        let (_dir, r) = router();
        for a in ["pub", "s1", "s2"] {
            r.add(&id(a));
        }
        r.set_subscriptions(HashMap::from([(id("pub"), vec![id("s1"), id("s2")])]));
        r.send(&id("pub"), out(r#"{"body":{"type":"news"}}"#)).await;
        let (s1, s2) = (drain(&r, "s1"), drain(&r, "s2"));
        assert_eq!(s1.len(), 1);
        assert_eq!(s1, s2, "one message, one id, for every subscriber");
        assert!(drain(&r, "pub").is_empty());
    }

    #[tokio::test]
    async fn an_unknown_recipient_makes_the_message_undeliverable() {
        let (_dir, r) = router();
        r.add(&id("a"));
        let sent = r
            .send(&id("a"), out(r#"{"to":"ghost","body":{"type":"x"}}"#))
            .await;
        r.send(&id("a"), out(r#"{"to":"Bad Id","body":{"type":"x"}}"#))
            .await;
        let got = drain(&r, "a");
        assert_eq!(got[0]["from"], "broker");
        assert_eq!(got[0]["reply_to"], sent.as_str());
        assert_eq!(got[0]["body"]["type"], "undeliverable");
        assert_eq!(got[0]["body"]["to"], "ghost");
        let reason = got[0]["body"]["reason"].as_str().unwrap();
        assert!(
            reason.contains("no actor `ghost`") && reason.contains("a"),
            "{reason}"
        );
        assert!(
            got[1]["body"]["reason"]
                .as_str()
                .unwrap()
                .contains("character")
        );
    }

    #[tokio::test]
    async fn a_full_mailbox_blocks_the_sender_until_there_is_room() {
        let (_dir, r) = router();
        r.add(&id("a"));
        let b = r.add(&id("b"));
        for _ in 0..MAILBOX_CAPACITY {
            r.send(&id("a"), out(r#"{"to":"b","body":{"type":"x"}}"#))
                .await;
        }
        let mut blocked = r.accept(&id("a"), out(r#"{"to":"b","body":{"type":"last"}}"#));
        assert!(
            !r.try_deliver(&mut blocked),
            "a full mailbox must not take more"
        );
        b.recv().await;
        assert!(r.try_deliver(&mut blocked));
        assert_eq!(b.len(), MAILBOX_CAPACITY);
    }

    #[tokio::test]
    async fn traffic_counts_each_sender_into_each_mailbox() {
        let (_dir, r) = router();
        for name in ["a", "b", "c"] {
            r.add(&id(name));
        }
        for _ in 0..3 {
            r.send(&id("a"), out(r#"{"to":"b","body":{"type":"x"}}"#))
                .await;
        }
        r.send(&id("c"), out(r#"{"to":"b","body":{"type":"x"}}"#))
            .await;
        r.send(&id("b"), out(r#"{"to":"a","body":{"type":"x"}}"#))
            .await;
        let traffic = r.traffic();
        let b = traffic.iter().find(|t| t.actor == id("b")).unwrap();
        assert_eq!(b.queued, 4, "four wait in b");
        let mut from = b.accepted_from.clone();
        from.sort();
        assert_eq!(from, [(id("a"), 3), (id("c"), 1)]);
        let a = traffic.iter().find(|t| t.actor == id("a")).unwrap();
        assert_eq!(a.accepted_from, [(id("b"), 1)]);
    }

    #[tokio::test]
    async fn a_message_the_journal_cannot_record_is_undeliverable_and_says_why() {
        let (dir, r) = router();
        r.add(&id("a"));
        r.add(&id("b"));
        // A message larger than what is left of the journal's segment needs a new one, which
        // cannot be made once the folder is gone (as on a full or broken disk).
        std::fs::remove_dir_all(World::new(dir.path()).journal_dir()).unwrap();
        let big = format!(
            r#"{{"to":"b","body":{{"type":"big","pad":"{}"}}}}"#,
            "x".repeat(5 << 20)
        );
        let sent = r.send(&id("a"), out(&big)).await;
        assert!(drain(&r, "b").is_empty(), "not accepted");
        let got = drain(&r, "a");
        assert_eq!(got[0]["reply_to"], sent.as_str());
        assert_eq!(got[0]["body"]["type"], "undeliverable");
        let reason = got[0]["body"]["reason"].as_str().unwrap();
        assert!(
            reason.contains("actor b: cannot record a message on disk"),
            "{reason}"
        );
    }

    #[test]
    fn message_ids_are_reserved_on_disk_before_use() {
        let (dir, r) = router();
        assert_eq!(r.next_id(), "m-1");
        let world = World::new(dir.path());
        assert_eq!(world.load_next_message_id(), 1 + MESSAGE_ID_BLOCK);
        let journal = Arc::new(Journal::open(&world.journal_dir()).unwrap());
        let again = Router::new(world.clone(), world.load_next_message_id(), journal);
        assert_eq!(again.next_id(), format!("m-{}", 1 + MESSAGE_ID_BLOCK));
        // Every number of the block is handed out once; the next block is saved first.
        let ids: Vec<String> = (0..MESSAGE_ID_BLOCK).map(|_| again.next_id()).collect();
        assert_eq!(ids[0], format!("m-{}", 2 + MESSAGE_ID_BLOCK));
        assert_eq!(
            ids.last().unwrap(),
            &format!("m-{}", 1 + 2 * MESSAGE_ID_BLOCK)
        );
        assert_eq!(world.load_next_message_id(), 1 + 3 * MESSAGE_ID_BLOCK);
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for n in [0, 7, 10, 99, 100, 123_456_789, u64::MAX] {
            let mut out = String::from("m-");
            push_decimal(&mut out, n);
            assert_eq!(out, format!("m-{n}"));
        }
    }
}
