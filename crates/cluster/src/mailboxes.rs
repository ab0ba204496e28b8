//! Mailboxes on the cluster: every WASM actor's mailbox is the subject
//! `sausage.mailbox.<id>` of the work-queue stream [`super::MAILBOX_STREAM`].
//!
//! Every host publishes into it through one ordered pipeline (a sender's messages reach the
//! stream in the order it wrote them); only the host that runs the actor consumes it, with the
//! durable consumer `mailbox-<id>`, and acknowledges each message when the guest reads it, which
//! removes it from the stream. A host taking an actor over deletes that consumer and makes it
//! again, so everything not yet acknowledged comes to it, in order. Native actors stay each
//! host's own: a message for another host's native actor (a reply to its console, say) goes to
//! that host's subject `sausage.host.<host>`, and every host remembers from which host the
//! native actors' messages it received came ([`Origins`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use anyhow::{Context, Result};
use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt;
use rustc_hash::FxHashMap;
use tokio::sync::{Notify, mpsc};

use sausage_core::broker::mailbox::{Arrival, MAILBOX_CAPACITY, Mailbox, MailboxStream};
use sausage_core::broker::router::{Remote, Router};
use sausage_core::message::{ActorId, Envelope};

pub const SUBJECT_PREFIX: &str = "sausage.mailbox";
/// The header naming the host a message was routed on.
const ORIGIN_HEADER: &str = "Sausage-Host";
/// The header naming the native actor a message to another host is for.
const TO_HEADER: &str = "Sausage-To";
/// Publications that may wait for the stream's acknowledgement at once; past it, senders wait.
pub const PUBLISH_IN_FLIGHT: usize = 4096;
/// Native actors' message ids remembered with the host they came from.
const ORIGINS_KEPT: usize = 65_536;
/// How long the consumer of a mailbox leaves a message unacknowledged before the stream offers
/// it again: longer than any run, since only a new owner (which makes the consumer again)
/// should get a message twice.
const ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

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
}

/// A message for a native actor of another host.
struct Forward {
    host: Arc<str>,
    to: ActorId,
    envelope: Arc<Envelope>,
}

/// How long a host has to take a message for one of its native actors before the sender hears
/// it is unreachable.
const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

pub struct Streams {
    host: Arc<str>,
    client: async_nats::Client,
    js: jetstream::Context,
    publishing: mpsc::UnboundedSender<Publication>,
    forwarding: mpsc::UnboundedSender<Forward>,
    in_flight: AtomicUsize,
    space: Notify,
    /// The reply subjects that acknowledge the messages handed to mailboxes, by actor and
    /// stream sequence.
    acks: Mutex<FxHashMap<(ActorId, i64), async_nats::Subject>>,
    acking: mpsc::UnboundedSender<async_nats::Subject>,
    origins: Mutex<Origins>,
    router: OnceLock<Weak<Router>>,
    view: Arc<Mutex<super::placement::View>>,
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
        client: async_nats::Client,
        js: jetstream::Context,
        view: Arc<Mutex<super::placement::View>>,
    ) -> Arc<Streams> {
        let (publishing, publications) = mpsc::unbounded_channel();
        let (acking, acks) = mpsc::unbounded_channel();
        let (forwarding, forwards) = mpsc::unbounded_channel();
        let streams = Arc::new(Streams {
            host,
            client,
            js,
            publishing,
            forwarding,
            in_flight: AtomicUsize::new(0),
            space: Notify::new(),
            acks: Mutex::default(),
            acking,
            origins: Mutex::default(),
            router: OnceLock::new(),
            view,
        });
        tokio::spawn(publish(streams.clone(), publications));
        tokio::spawn(forward(streams.clone(), forwards));
        tokio::spawn(acknowledge(streams.client.clone(), acks));
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

    fn router(&self) -> Option<Arc<Router>> {
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

    /// Consumes `actor`'s stream into `mailbox` while this host runs the actor: the consumer is
    /// made anew, so whatever no earlier owner acknowledged comes first, in order. Runs until
    /// the task running it is aborted.
    pub async fn consume(self: Arc<Self>, actor: ActorId, mailbox: Arc<Mailbox>) -> Result<()> {
        let stream = self
            .js
            .get_stream(super::MAILBOX_STREAM)
            .await
            .context("the mailbox stream")?;
        let name = consumer_name(&actor);
        // Absent the first time; a consumer that cannot go would make the next one fail.
        let _ = stream.delete_consumer(&name).await;
        let consumer = stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(name.clone()),
                filter_subject: subject(&actor),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: ACK_WAIT,
                deliver_policy: consumer::DeliverPolicy::All,
                max_ack_pending: MAILBOX_CAPACITY as i64,
                ..Default::default()
            })
            .await
            .with_context(|| format!("actor {actor}: cannot make its mailbox's consumer"))?;
        let mut messages = consumer
            .messages()
            .await
            .with_context(|| format!("actor {actor}: cannot read its mailbox"))?;
        while let Some(message) = messages.next().await {
            let message = match message {
                Ok(message) => message,
                Err(e) => {
                    tracing::warn!("actor {actor}: reading its mailbox: {e}");
                    continue;
                }
            };
            let Ok(info) = message.info() else {
                continue;
            };
            let pos = info.stream_sequence as i64;
            let origin = message
                .headers
                .as_ref()
                .and_then(|h| h.get(ORIGIN_HEADER))
                .map(|v| v.as_str().to_string());
            let envelope = match Envelope::from_line(&message.payload) {
                Ok(envelope) => Arc::new(envelope),
                Err(e) => {
                    tracing::error!("actor {actor}: message {pos} of its mailbox: {e}; dropped");
                    let _ = message.ack().await;
                    continue;
                }
            };
            self.remember_origin(&envelope, origin.as_deref());
            let Some(reply) = message.reply.clone() else {
                continue;
            };
            // Recorded first, so a read at once acknowledges it; a redelivery (a consumer made
            // again) is acknowledged through this consumer, the one the stream listens to.
            let key = (actor.clone(), pos);
            self.acks.lock().expect("acks lock").insert(key, reply);
            if mailbox.arrive(pos, envelope) == Arrival::Read {
                self.ack(&actor, pos);
            }
        }
        Ok(())
    }

    /// Forgets the acknowledgements of `actor`'s messages this host was handed (it no longer
    /// runs the actor; the stream offers them to the next owner).
    pub fn forget_acks(&self, actor: &ActorId) {
        self.acks
            .lock()
            .expect("acks lock")
            .retain(|(a, _), _| a != actor);
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

    fn finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.space.notify_waiters();
    }
}

impl MailboxStream for Streams {
    fn publish(&self, actor: &ActorId, envelope: &Arc<Envelope>) -> bool {
        if self.in_flight.load(Ordering::Acquire) >= PUBLISH_IN_FLIGHT {
            return false;
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let publication = Publication {
            to: actor.clone(),
            envelope: envelope.clone(),
        };
        if self.publishing.send(publication).is_err() {
            self.finished();
            return false;
        }
        true
    }

    fn ack(&self, actor: &ActorId, pos: i64) {
        let reply = self
            .acks
            .lock()
            .expect("acks lock")
            .remove(&(actor.clone(), pos));
        if let Some(reply) = reply {
            let _ = self.acking.send(reply);
        }
    }

    fn space(&self) -> &Notify {
        &self.space
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
        });
    }
}

/// The publishing pipeline: publications go out in order; their acknowledgements are awaited
/// in order by a second task, so many are in flight at once.
async fn publish(streams: Arc<Streams>, mut publications: mpsc::UnboundedReceiver<Publication>) {
    let (confirming, mut confirmations) =
        mpsc::unbounded_channel::<(jetstream::context::PublishAckFuture, ActorId, Arc<Envelope>)>();
    let confirmer = streams.clone();
    tokio::spawn(async move {
        while let Some((ack, to, envelope)) = confirmations.recv().await {
            if let Err(e) = ack.await {
                undeliverable(
                    &confirmer,
                    &envelope,
                    &to,
                    &format!("its stream refused it: {e}"),
                );
            }
            confirmer.finished();
        }
    });
    while let Some(Publication { to, envelope }) = publications.recv().await {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(ORIGIN_HEADER, &*streams.host);
        let line = bytes::Bytes::from(envelope.to_line());
        match streams
            .js
            .publish_with_headers(subject(&to), headers, line)
            .await
        {
            Ok(ack) => {
                let _ = confirming.send((ack, to, envelope));
            }
            Err(e) => {
                let reason = format!("the cluster is unreachable: {e}");
                undeliverable(&streams, &envelope, &to, &reason);
                streams.finished();
            }
        }
    }
}

/// Messages for other hosts' native actors, in order, each taken by that host (it answers the
/// request) or reported undeliverable to its sender.
async fn forward(streams: Arc<Streams>, mut forwards: mpsc::UnboundedReceiver<Forward>) {
    while let Some(Forward { host, to, envelope }) = forwards.recv().await {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(ORIGIN_HEADER, &*streams.host);
        headers.insert(TO_HEADER, to.as_str());
        let line = bytes::Bytes::from(envelope.to_line());
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

async fn acknowledge(
    client: async_nats::Client,
    mut acks: mpsc::UnboundedReceiver<async_nats::Subject>,
) {
    while let Some(reply) = acks.recv().await {
        if let Err(e) = client
            .publish(reply, bytes::Bytes::from_static(b"+ACK"))
            .await
        {
            tracing::warn!("a read message cannot be acknowledged ({e}); it may come again");
        }
    }
}
