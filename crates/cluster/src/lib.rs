//! Several hosts (DESIGN §16): one world run by several `sausage run … --cluster` processes that
//! share it through NATS JetStream, the engine made for this.
//!
//! What is shared lives in JetStream: the registry, people and the message-id counter in the
//! key-value bucket [`REGISTRY_BUCKET`], every version (wasm, meta, source) in the object store
//! [`VERSIONS_BUCKET`], each actor's snapshots of `/data` and `/public` in [`SNAPSHOTS_BUCKET`]
//! and every change of its files since in the stream `SAUSAGE_COMMITS` ([`commits`]), and every
//! WASM actor's mailbox in the work-queue stream [`MAILBOX_STREAM`], one subject per actor
//! ([`mailboxes`]). On a NATS cluster each keeps a copy on up to three nodes ([`replicas`]),
//! and a host given every node (`--cluster`, [`Servers`]) goes on through another when its
//! own dies. Which host runs an actor is a lease in the registry bucket, taken by
//! compare-and-set; a host's heartbeat in [`HOSTS_BUCKET`] renews all its leases at once, and a
//! host not heard from for [`LEASE_TIMEOUT`] loses them ([`placement`]). A lease's revision is
//! the fencing token of every write for its actor ([`fence`]). The broker sees all this only
//! through its ports
//! (`sausage_core::broker::ports`, `router::Remote`, `mailbox::MailboxStream`), implemented
//! here; a single host without `--cluster` runs none of it.

mod approvals;
mod commits;
mod fence;
mod mailboxes;
mod merge;
pub use mailboxes::GROUP_MAX;
mod placement;
mod ports;
mod shared;
pub mod status;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_nats::jetstream::{self, kv, object_store, stream};
use tokio::sync::watch;

use sausage_core::broker::ports::Ports;
use sausage_core::message::{ActorId, Runs};
use sausage_core::runtime::run_until::RunUntil;

pub use placement::LeaseView;

/// The registry (`actor.<id>`, `subscriptions`), `people`, `message-ids` and `seeded`, and
/// everything written for one actor under its lease, in one stream so that each such write can
/// be conditional on the lease (`fence`): the leases (`lease.<id>`: the host that runs it),
/// which snapshot is each actor's current one (`snapshot.<id>`) and the `schedules`.
pub const REGISTRY_BUCKET: &str = "sausage-registry";
/// Host id → its heartbeat.
pub const HOSTS_BUCKET: &str = "sausage-hosts";
/// `<id>/<n>/actor.wasm`, `<id>/<n>/meta.json`, `<id>/<n>/source.tar`.
pub const VERSIONS_BUCKET: &str = "sausage-versions";
/// `<id>/<lease revision>-<time>`: a tar of the actor's `data/` and `public/`, each under a new
/// name; `snapshot.<id>` in the registry names the current one.
pub const SNAPSHOTS_BUCKET: &str = "sausage-snapshots";
/// Every WASM actor's mailbox: work-queue retention, subject `sausage.mailbox.<id>`.
pub const MAILBOX_STREAM: &str = "SAUSAGE_MAILBOXES";

/// Publications one mailbox's subject holds on the cluster (a hundred times a single host's
/// mailbox, and a publication carries up to [`GROUP_MAX`] messages: a reader on
/// another host does not slow its senders down, the stream holds the backlog); past it, a
/// message is `undeliverable`.
pub const MAILBOX_STREAM_LIMIT: i64 = 100 * sausage_core::broker::mailbox::MAILBOX_CAPACITY as i64;

/// A test knob, not a setting: `SAUSAGE_TEST_MAILBOX_STREAM_LIMIT` replaces
/// [`MAILBOX_STREAM_LIMIT`] when a host makes the mailbox stream, so a test fills a mailbox in
/// moments.
const MAILBOX_LIMIT_TEST_KNOB: &str = "SAUSAGE_TEST_MAILBOX_STREAM_LIMIT";

fn mailbox_stream_limit() -> i64 {
    std::env::var(MAILBOX_LIMIT_TEST_KNOB)
        .ok()
        .and_then(|limit| limit.parse().ok())
        .unwrap_or(MAILBOX_STREAM_LIMIT)
}
/// While something the host retries every [`HEARTBEAT`] keeps failing (a watch, a heartbeat,
/// while its NATS node is cut off, say), its log says so again this often, with how long and
/// how many tries: two lines a second per watch would bury everything else.
const OUTAGE_REMINDER: Duration = Duration::from_secs(30);

/// One thing the host keeps trying, said in its log when it first fails, every
/// [`OUTAGE_REMINDER`] while it goes on failing, and once when it works again.
#[derive(Default)]
struct Outage {
    /// When the current run of failures began, and when the log last said so.
    since: Option<(Instant, Instant)>,
    tries: u32,
}

impl Outage {
    /// A failure: `what` (for example "the cluster's approvals are not followed: timed out") is
    /// logged at the first and then at most every [`OUTAGE_REMINDER`].
    fn failed(&mut self, what: impl FnOnce() -> String) {
        self.failed_at(Instant::now(), what);
    }

    /// [`Outage::failed`] at `now`; whether it was logged.
    fn failed_at(&mut self, now: Instant, what: impl FnOnce() -> String) -> bool {
        self.tries += 1;
        match &mut self.since {
            None => {
                tracing::warn!(
                    "{}; trying again every {} ms",
                    what(),
                    HEARTBEAT.as_millis()
                );
                self.since = Some((now, now));
                true
            }
            Some((began, said)) if now - *said >= OUTAGE_REMINDER => {
                tracing::warn!(
                    "{} (still, for {} s, {} tries)",
                    what(),
                    (now - *began).as_secs(),
                    self.tries
                );
                *said = now;
                true
            }
            Some(_) => false,
        }
    }

    /// A success: after failures, `what` (for example "the cluster's approvals are followed")
    /// is logged with how long it took; whether it was.
    fn ended(&mut self, what: impl FnOnce() -> String) -> bool {
        let tries = std::mem::take(&mut self.tries);
        let Some((began, _)) = self.since.take() else {
            return false;
        };
        tracing::info!(
            "{} again, after {} s and {tries} tries",
            what(),
            began.elapsed().as_secs()
        );
        true
    }
}

/// How often a host writes its heartbeat (and so renews its leases) and looks at placement.
/// Half a second keeps a fail-over within [`LEASE_TIMEOUT`] plus half a second (the last
/// heartbeat of a killed host is at most that old, and the others look that often).
pub const HEARTBEAT: Duration = Duration::from_millis(500);
/// A host whose last completed renewal (heartbeat written and acknowledged) was *sent* this
/// long ago, on its monotonic clock, runs nothing more: no guest slice, no message or
/// acknowledgement out, no write for an actor (`RunUntil`), and it stops its actors before it
/// renews again. Measured from the send, so a slow acknowledgement only shortens it.
pub const SELF_STOP_AFTER: Duration = Duration::from_secs(5);
/// A host not heard from this long, on the clock of the host that looks, has lost its leases.
/// The hosts' bucket is one stream and its watch hands entries in the stream's order, so a host
/// that sees its own heartbeat has seen every renewal stored before it: the other host's last
/// renewal came through no earlier than it was sent, and is judged lost at least this long
/// after that send, while the old host stopped [`SELF_STOP_AFTER`] after it. The difference
/// (0.5 s) is the margin for the old host's last guest slice and for the two clocks' rates. A
/// killed host's actors are taken 5 to 6 s after the kill, then started.
pub const LEASE_TIMEOUT: Duration = Duration::from_millis(5500);
/// [`LEASE_TIMEOUT`] in the whole seconds of a stored entry's time stamp, rounded up.
const LEASE_TIMEOUT_SECS: i64 = LEASE_TIMEOUT.as_millis().div_ceil(1000) as i64;
/// How often a running actor's files are snapshotted at least.
pub const SNAPSHOT_EVERY: Duration = Duration::from_secs(60);
/// A test knob, not a setting: `SAUSAGE_TEST_SNAPSHOT_EVERY_MS` replaces [`SNAPSHOT_EVERY`] so
/// a test can see a paused host try to snapshot an actor it lost.
const SNAPSHOT_TEST_KNOB: &str = "SAUSAGE_TEST_SNAPSHOT_EVERY_MS";
/// Message numbers one run of a host reserves at once: `m-<n>` stays unique in the world.
const ID_BLOCK: u64 = 1 << 32;

/// [`SNAPSHOT_EVERY`], or what [`SNAPSHOT_TEST_KNOB`] sets.
fn snapshot_every() -> Duration {
    std::env::var(SNAPSHOT_TEST_KNOB)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(SNAPSHOT_EVERY, Duration::from_millis)
}

/// A host's membership of a cluster.
pub struct Cluster {
    pub host: Arc<str>,
    pub url: String,
    js: jetstream::Context,
    /// The registry, the leases and what is written under them (see [`REGISTRY_BUCKET`]).
    registry: kv::Store,
    hosts: kv::Store,
    versions: object_store::ObjectStore,
    snapshots: object_store::ObjectStore,
    streams: Arc<mailboxes::Streams>,
    /// Every change of an actor's files, stored before it is made ([`commits`]).
    commits: Arc<commits::Commits>,
    /// What this host knows of the others and of the leases, kept by watches.
    view: Arc<Mutex<placement::View>>,
    /// What each actor's last snapshot from this host held (`shared::fingerprint`).
    fingerprints: Mutex<HashMap<ActorId, u64>>,
    /// The consumers of the mailboxes of the actors this host runs.
    consumers: Mutex<HashMap<ActorId, tokio::task::JoinHandle<()>>>,
    /// Until when this host may run its actors: moved forward by each renewal ([`placement`]),
    /// checked by its runtime before every guest slice and here before anything leaves the
    /// host for an actor.
    run_until: Arc<RunUntil>,
    /// Notified when this host's own heartbeat comes through the hosts' watch.
    own_beat: tokio::sync::Notify,
}

/// The stores of a cluster, opened (and made by the first host) in one place.
struct Stores {
    registry: kv::Store,
    hosts: kv::Store,
    versions: object_store::ObjectStore,
    snapshots: object_store::ObjectStore,
}

/// The NATS servers `--cluster` names: one URL, or the nodes of a NATS cluster separated by
/// commas. The client gets them all and tries them in the order written, so hosts given the
/// list in different orders spread over the nodes; when its node dies it goes on through the
/// next that answers (and any other the servers name).
#[derive(Clone, Debug)]
pub struct Servers {
    addresses: Vec<async_nats::ServerAddr>,
    /// As written, for messages.
    written: String,
}

/// How a list of NATS servers is written, for the errors that refuse one.
const SERVERS_EXAMPLE: &str = "nats://10.0.0.1:4222,nats://10.0.0.2:4222,nats://10.0.0.3:4222";

impl std::str::FromStr for Servers {
    type Err = String;

    fn from_str(list: &str) -> Result<Servers, String> {
        let mut addresses = Vec::new();
        for (n, entry) in list.split(',').enumerate() {
            let entry = entry.trim();
            if entry.is_empty() {
                return Err(format!(
                    "server {} of `{list}` is empty; write the NATS servers' URLs separated \
                     by commas, as in {SERVERS_EXAMPLE}",
                    n + 1
                ));
            }
            let address: async_nats::ServerAddr = entry
                .parse()
                .ok()
                .filter(|a: &async_nats::ServerAddr| !a.host().is_empty())
                .ok_or_else(|| {
                    format!(
                        "`{entry}` is not a NATS server's URL; write nats://HOST:PORT, several \
                         separated by commas, as in {SERVERS_EXAMPLE}"
                    )
                })?;
            addresses.push(address);
        }
        Ok(Servers {
            addresses,
            written: list.to_string(),
        })
    }
}

impl std::fmt::Display for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.written)
    }
}

/// How long the first connection to a server may take before the next is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the client pings its server: one that misses two pings in a row (a node that
/// hangs rather than dies) is left for the next server of the list.
const PING_INTERVAL: Duration = Duration::from_secs(2);

/// A client of the NATS cluster.
pub struct Connection {
    pub client: async_nats::Client,
    /// Counts the client's connections after the first: a change means it moved to another
    /// node, and what was on its way through the old one (deliveries, answers) may be lost.
    pub connections: watch::Receiver<u64>,
}

/// Connects to the first of `servers` that answers, as `name` (the name the servers' `/connz`
/// shows); the error says how to get one.
pub async fn connect(servers: &Servers, name: &str) -> Result<Connection> {
    let (counter, connections) = watch::channel(0);
    let connected_once = std::sync::atomic::AtomicBool::new(false);
    let who = name.to_string();
    let client = async_nats::ConnectOptions::new()
        .connection_timeout(CONNECT_TIMEOUT)
        .ping_interval(PING_INTERVAL)
        .retain_servers_order()
        .name(name)
        .event_callback(move |event| {
            match event {
                // The first connection moves nothing: the guard only marks it made.
                async_nats::Event::Connected
                    if connected_once.swap(true, std::sync::atomic::Ordering::Relaxed) =>
                {
                    counter.send_modify(|n| *n += 1);
                    tracing::info!("{who}: connected to the NATS cluster again");
                }
                async_nats::Event::Disconnected => {
                    tracing::warn!("{who}: lost its NATS server; trying the others it knows");
                }
                _ => {}
            }
            std::future::ready(())
        })
        .connect(servers.addresses.as_slice())
        .await
        .with_context(|| {
            format!(
                "cannot reach any NATS server at {servers}; start one with JetStream \
                 (`nats-server -js`) and give its address as --cluster nats://HOST:PORT \
                 (the nodes of a NATS cluster separated by commas)"
            )
        })?;
    Ok(Connection {
        client,
        connections,
    })
}

/// The most copies JetStream keeps of each stream and bucket: three survive the loss of any
/// one node (two of three are still a majority).
const MOST_REPLICAS: usize = 3;

/// How long a host waits to hear of a NATS cluster's other nodes before it counts them: a node
/// names its peers to clients as their routes come up, one by one, so right after a cluster
/// starts it may name fewer than it has.
const NODES_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// How many copies the cluster's stores get: `asked` (`--replicas`), else [`MOST_REPLICAS`]
/// or fewer when the NATS cluster has fewer nodes. More than its nodes is refused.
/// A node that names some peers but fewer than [`MOST_REPLICAS`] is listened to for up to
/// [`NODES_PATIENCE`] for more when the stores are still to be `made`: stores made with two
/// copies on a cluster of three stop when one of the two dies (two copies have no majority
/// without both).
async fn replicas(client: &async_nats::Client, asked: Option<usize>, made: bool) -> Result<usize> {
    let mut nodes = nodes(client);
    let deadline = tokio::time::Instant::now() + NODES_PATIENCE;
    while made && (2..MOST_REPLICAS).contains(&nodes) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        nodes = self::nodes(client);
    }
    if made && (2..MOST_REPLICAS).contains(&nodes) && holds_copies(client, MOST_REPLICAS).await {
        // The server named fewer peers than JetStream has (its INFO may lag a loaded machine's
        // routes): JetStream itself placed a stream of MOST_REPLICAS copies.
        nodes = MOST_REPLICAS;
    }
    match asked {
        Some(0) => bail!("--replicas 0: a store needs at least 1 copy"),
        Some(n) if n > nodes => bail!(
            "--replicas {n}: the NATS cluster has {nodes} node{}, and a store cannot have more \
             copies than nodes; give at most {nodes}, or start more nodes",
            if nodes == 1 { "" } else { "s" }
        ),
        Some(n) => Ok(n),
        None => Ok(nodes.min(MOST_REPLICAS)),
    }
}

/// Whether JetStream can place a stream of `copies` copies now: a throwaway stream in memory is
/// made and deleted.
async fn holds_copies(client: &async_nats::Client, copies: usize) -> bool {
    let js = jetstream::new(client.clone());
    let name = format!("SAUSAGE_PROBE_{:x}", std::process::id());
    let made = js
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![format!("sausage.probe.{:x}", std::process::id())],
            num_replicas: copies,
            storage: stream::StorageType::Memory,
            ..Default::default()
        })
        .await;
    let _ = js.delete_stream(&name).await;
    made.is_ok()
}

/// How many nodes the NATS cluster has, as its server tells clients: `connect_urls` in its
/// INFO names every node's client address, its own included (a single server names none). A
/// node listening on every interface of a machine with several names each of its addresses,
/// which counts too many; `--replicas` says the right number then.
fn nodes(client: &async_nats::Client) -> usize {
    let info = client.server_info();
    let urls: std::collections::HashSet<&String> = info.connect_urls.iter().collect();
    urls.len().max(1)
}

impl Cluster {
    /// Joins the cluster at `servers` as host `host`: opens the shared stores (making them with
    /// `replicas` copies, see [`replicas`], when this is the first host) and starts publishing.
    pub async fn join(
        servers: &Servers,
        host: &str,
        replicas: Option<usize>,
    ) -> Result<Arc<Cluster>> {
        let host_id = ActorId::parse(host)
            .map_err(|e| anyhow::anyhow!("--host-id: {}", e.replace("actor id", "host id")))?;
        let connection = connect(servers, &format!("sausage host {host_id}")).await?;
        let js = jetstream::new(connection.client.clone());
        // Only the first host makes the stores; the others need not wait to count nodes.
        let first = js.get_stream(MAILBOX_STREAM).await.is_err();
        let replicas = self::replicas(&connection.client, replicas, first).await?;
        let stores = patiently("opening the cluster's stores", || {
            open_stores(&js, replicas)
        })
        .await
        .with_context(|| {
            format!("{servers}: cannot open the cluster's stores; is JetStream enabled (`-js`)?")
        })?;
        patiently("looking for another host of this id", || {
            refuse_a_host_id_in_use(&stores.hosts, host_id.as_str())
        })
        .await?;
        let view = Arc::new(Mutex::default());
        let run_until = RunUntil::until_renewed();
        let streams = mailboxes::Streams::start(
            Arc::from(host_id.as_str()),
            connection,
            Arc::clone(&view),
            run_until.clone(),
        );
        Ok(Arc::new(Cluster {
            host: Arc::from(host_id.as_str()),
            url: servers.to_string(),
            commits: Arc::new(commits::Commits::new(js.clone())),
            js,
            registry: stores.registry,
            hosts: stores.hosts,
            versions: stores.versions,
            snapshots: stores.snapshots,
            streams,
            view,
            fingerprints: Mutex::default(),
            consumers: Mutex::default(),
            run_until,
            own_beat: tokio::sync::Notify::new(),
        }))
    }

    /// The deadline this host's runtime must run its guests by (`Runtime::bounded`).
    pub fn run_until(&self) -> Arc<RunUntil> {
        self.run_until.clone()
    }

    /// Reserves [`ID_BLOCK`] message numbers for this run, by compare-and-set on the counter.
    /// A set that fails (another host reserved meanwhile, or the bucket's stream is electing a
    /// leader after a node died, or a replica it read from lags) is tried again, after a pause
    /// that doubles up to half a second, for [`JOIN_PATIENCE`].
    pub async fn reserve_ids(&self) -> Result<std::ops::Range<u64>> {
        const KEY: &str = "message-ids";
        let deadline = tokio::time::Instant::now() + JOIN_PATIENCE;
        let mut pause = Duration::from_millis(10);
        loop {
            let why = match self.registry.entry(KEY).await {
                Err(e) => format!("reading it: {e}"),
                Ok(entry) => {
                    let (start, revision) = match &entry {
                        Some(e) if e.operation == kv::Operation::Put => (
                            std::str::from_utf8(&e.value)
                                .ok()
                                .and_then(|v| v.parse::<u64>().ok())
                                .context("the cluster's message-id counter is not a number")?,
                            Some(e.revision),
                        ),
                        _ => (1, None),
                    };
                    let end = start + ID_BLOCK;
                    let value = bytes::Bytes::from(end.to_string());
                    let set = match revision {
                        Some(revision) => self
                            .registry
                            .update(KEY, value, revision)
                            .await
                            .err()
                            .map(|e| e.to_string()),
                        None => self
                            .registry
                            .create(KEY, value)
                            .await
                            .err()
                            .map(|e| e.to_string()),
                    };
                    match set {
                        None => return Ok(start..end),
                        Some(e) => format!("setting it: {e}"),
                    }
                }
            };
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "cannot reserve message ids: the cluster's counter could not be moved for {} \
                     s (last: {why})",
                    JOIN_PATIENCE.as_secs()
                );
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// The broker's ports, implemented by this host's membership (`ports.rs`).
    pub fn ports(self: &Arc<Self>) -> Ports {
        Ports {
            placement: self.clone(),
            shared: self.clone(),
        }
    }
}

/// Whether the lease `key` is a native actor's that one host leads for the whole world, rather
/// than a WASM actor's.
fn is_led_native(key: &str) -> bool {
    sausage_core::message::native(key).is_some_and(|n| n.runs == Runs::LedByOne)
}

/// Opens the cluster's stores, making those missing with `replicas` copies; a store made
/// with fewer copies than that (by a first host on a smaller NATS cluster) is used as it is,
/// and said.
async fn open_stores(js: &jetstream::Context, replicas: usize) -> Result<Stores> {
    let bucket = |name: &str, history: i64| kv::Config {
        bucket: name.to_string(),
        history,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        ..Default::default()
    };
    let objects = |name: &'static str| async move {
        if let Ok(store) = js.get_object_store(name).await {
            return Ok::<_, anyhow::Error>(store);
        }
        let config = object_store::Config {
            bucket: name.to_string(),
            storage: stream::StorageType::File,
            num_replicas: replicas,
            ..Default::default()
        };
        match js.create_object_store(config).await {
            Ok(store) => Ok(store),
            Err(made) => js
                .get_object_store(name)
                .await
                .map_err(|read| unreadable(name, read, made)),
        }
    };
    js.get_or_create_stream(stream::Config {
        name: MAILBOX_STREAM.to_string(),
        subjects: vec![format!("{}.*", mailboxes::SUBJECT_PREFIX)],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        // A message is a line of at most 1 MiB, with its envelope and headers.
        max_message_size: 2 * 1024 * 1024,
        // One mailbox holds at most this many: past it, a message is undeliverable.
        max_messages_per_subject: mailbox_stream_limit(),
        discard: stream::DiscardPolicy::New,
        discard_new_per_subject: true,
        duplicate_window: mailboxes::DUPLICATE_WINDOW,
        ..Default::default()
    })
    .await
    .context(MAILBOX_STREAM)?;
    js.get_or_create_stream(commits::stream_config(replicas))
        .await
        .context(commits::COMMITS_STREAM)?;
    let stores = Stores {
        registry: key_value(js, bucket(REGISTRY_BUCKET, 1)).await?,
        hosts: key_value(js, bucket(HOSTS_BUCKET, 1)).await?,
        versions: objects(VERSIONS_BUCKET).await?,
        snapshots: objects(SNAPSHOTS_BUCKET).await?,
    };
    let streams = [
        MAILBOX_STREAM.to_string(),
        commits::COMMITS_STREAM.to_string(),
        format!("KV_{REGISTRY_BUCKET}"),
        format!("KV_{HOSTS_BUCKET}"),
        format!("OBJ_{VERSIONS_BUCKET}"),
        format!("OBJ_{SNAPSHOTS_BUCKET}"),
    ];
    for name in streams {
        let stream = wait_for_leader(js, &name).await?;
        let copies = stream.cached_info().config.num_replicas;
        if copies < replicas {
            tracing::warn!(
                "the cluster's stream {name} keeps {copies} cop{} of its data, fewer than the \
                 {replicas} this NATS cluster allows, so losing one node can lose it or stop \
                 it; raise it with `nats stream edit {name} --replicas {replicas}`",
                if copies == 1 { "y" } else { "ies" }
            );
        }
    }
    Ok(stores)
}

/// How long a host waits for a stream of the cluster to have a leader before it goes on
/// regardless (its writes are then retried where they matter).
const LEADER_PATIENCE: Duration = Duration::from_secs(30);

/// The stream `name` once it has a leader: one just made on a NATS cluster (or whose leader's
/// node died) takes a moment to elect one, and until then nobody answers what is written to it.
async fn wait_for_leader(js: &jetstream::Context, name: &str) -> Result<stream::Stream> {
    let deadline = tokio::time::Instant::now() + LEADER_PATIENCE;
    loop {
        let mut stream = js.get_stream(name).await.context(name.to_string())?;
        let led = stream
            .info()
            .await
            .map(|info| info.cluster.as_ref().is_none_or(|c| c.leader.is_some()))
            .unwrap_or(false);
        if led {
            return Ok(stream);
        }
        if tokio::time::Instant::now() > deadline {
            tracing::warn!(
                "the cluster's stream {name} has no leader after {} s; going on",
                LEADER_PATIENCE.as_secs()
            );
            return Ok(stream);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The bucket `config` names, made when it does not exist yet (by this host or, in a race, by
/// another).
async fn key_value(js: &jetstream::Context, config: kv::Config) -> Result<kv::Store> {
    if let Ok(store) = js.get_key_value(&config.bucket).await {
        return Ok(store);
    }
    let name = config.bucket.clone();
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        Err(made) => js
            .get_key_value(&name)
            .await
            .map_err(|read| unreadable(&name, read, made)),
    }
}

/// A store that could be neither read nor made. Making fails when the store exists with other
/// copies than this host would give it (it could not read it a moment ago: its stream was
/// electing a leader), so the reading's error leads: when it is JetStream not answering,
/// [`patiently`] waits it out rather than the host giving up.
fn unreadable(
    name: &str,
    read: impl std::error::Error + Send + Sync + 'static,
    made: impl std::fmt::Display,
) -> anyhow::Error {
    anyhow::Error::from(read).context(format!("{name}: cannot read it (making it: {made})"))
}

/// How long a host joining keeps trying what JetStream does not answer yet: a NATS cluster just
/// formed, or one whose node just died, elects the leaders of its streams for seconds, and
/// meanwhile a request gets no responder or times out.
const JOIN_PATIENCE: Duration = Duration::from_secs(30);

/// Runs `attempt` until it succeeds, fails for good, or [`JOIN_PATIENCE`] passes while it fails
/// only for want of an answer ([`unanswered`]); each such failure is logged.
pub async fn patiently<T, F, Fut>(what: &str, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + JOIN_PATIENCE;
    loop {
        match attempt().await {
            Ok(done) => return Ok(done),
            Err(e) if unanswered(&e) && tokio::time::Instant::now() < deadline => {
                tracing::warn!("{what}: {e:#}; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether `e` says only that JetStream did not answer (no responder, a timeout, no leader
/// yet), which passes once the cluster has elected its leaders; not that it refused.
fn unanswered(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        let said = cause.to_string().to_lowercase();
        [
            "no responders",
            "timed out",
            "timeout",
            "temporarily unavailable",
            "no leader",
        ]
        .iter()
        .any(|sign| said.contains(sign))
    })
}

/// Refuses to join as `host` while another process is that host: its heartbeat still changes.
/// A host killed a moment ago is not refused; it only waits to see no heartbeat come.
async fn refuse_a_host_id_in_use(hosts: &kv::Store, host: &str) -> Result<()> {
    let Some(last) = hosts.entry(host).await? else {
        return Ok(());
    };
    let beat: placement::Beat = serde_json::from_slice(&last.value).unwrap_or_default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if beat.leaving || now - last.created.unix_timestamp() > LEASE_TIMEOUT_SECS {
        return Ok(());
    }
    tokio::time::sleep(HEARTBEAT * 5 / 2).await;
    match hosts.entry(host).await? {
        Some(now) if now.revision != last.revision => bail!(
            "host id `{host}` is in use by a host that runs now; give this one another \
             --host-id"
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_said_at_its_start_every_reminder_and_its_end_not_at_every_try() {
        let mut outage = Outage::default();
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let what = || "cannot watch".to_string();
        let said: Vec<bool> = [0, 1, 29, 30, 31, 59, 60]
            .into_iter()
            .map(|s| outage.failed_at(at(s), what))
            .collect();
        assert_eq!(said, [true, false, false, true, false, false, true]);
        assert_eq!(outage.tries, 7);
        assert!(outage.ended(what), "its end is said");
        assert!(!outage.ended(what), "once");
        assert!(
            outage.failed_at(at(61), what),
            "a new outage is said at once"
        );
    }

    #[test]
    fn a_list_of_nats_servers_keeps_its_order_and_a_bad_one_says_how_to_write_it() {
        let servers: Servers = "nats://10.0.0.1:4222, nats://10.0.0.2:4223,10.0.0.3"
            .parse()
            .unwrap();
        let hosts: Vec<(&str, u16)> = servers
            .addresses
            .iter()
            .map(|a| (a.host(), a.port()))
            .collect();
        assert_eq!(
            hosts,
            [("10.0.0.1", 4222), ("10.0.0.2", 4223), ("10.0.0.3", 4222)]
        );
        for bad in [
            "",
            "nats://a:1,,nats://b:2",
            "nats://a:1,",
            "http://a:1",
            "nats://",
        ] {
            let e = bad.parse::<Servers>().unwrap_err();
            assert!(e.contains(SERVERS_EXAMPLE), "{bad}: {e}");
        }
    }
}
