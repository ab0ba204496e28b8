//! Several hosts (DESIGN §16): one world run by several `sausage run … --cluster` processes that
//! share it through NATS JetStream, the engine made for this.
//!
//! What is shared lives in JetStream: the registry, people and the message-id counter in the
//! key-value bucket [`REGISTRY_BUCKET`], every version (wasm, meta, source) in the object store
//! [`VERSIONS_BUCKET`], each actor's last snapshot of `/data` and `/public` in
//! [`SNAPSHOTS_BUCKET`], and every WASM actor's mailbox in the work-queue stream
//! [`MAILBOX_STREAM`], one subject per actor ([`mailboxes`]). Which host runs an actor is a
//! lease in [`LEASES_BUCKET`], taken by compare-and-set; a host's heartbeat in [`HOSTS_BUCKET`]
//! renews all its leases at once, and a host not heard from for [`LEASE_TIMEOUT`] loses them
//! ([`placement`]). The broker sees all this only through its ports
//! (`sausage_core::broker::ports`, `router::Remote`, `mailbox::MailboxStream`), implemented
//! here; a single host without `--cluster` runs none of it.

mod mailboxes;
mod placement;
mod ports;
mod shared;
pub mod status;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_nats::jetstream::{self, kv, object_store, stream};

use sausage_core::broker::ports::Ports;
use sausage_core::message::{ActorId, Runs};

pub use placement::LeaseView;

/// The registry (`actor.<id>`, `subscriptions`), `people`, `message-ids` and `seeded`.
pub const REGISTRY_BUCKET: &str = "sausage-registry";
/// Actor id → the host that runs it.
pub const LEASES_BUCKET: &str = "sausage-leases";
/// Host id → its heartbeat.
pub const HOSTS_BUCKET: &str = "sausage-hosts";
/// `<id>/<n>/actor.wasm`, `<id>/<n>/meta.json`, `<id>/<n>/source.tar`.
pub const VERSIONS_BUCKET: &str = "sausage-versions";
/// `<id>`: a tar of the actor's `data/` and `public/`.
pub const SNAPSHOTS_BUCKET: &str = "sausage-snapshots";
/// Every WASM actor's mailbox: work-queue retention, subject `sausage.mailbox.<id>`.
pub const MAILBOX_STREAM: &str = "SAUSAGE_MAILBOXES";

/// Messages one mailbox's subject holds on the cluster (a hundred times a single host's
/// mailbox: a reader on another host does not slow its senders down, the stream holds the
/// backlog); past it, a message is `undeliverable`.
pub const MAILBOX_STREAM_LIMIT: i64 = 100 * sausage_core::broker::mailbox::MAILBOX_CAPACITY as i64;
/// How often a host writes its heartbeat (and so renews its leases).
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A host not heard from this long has lost its leases.
pub const LEASE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a running actor's files are snapshotted at least.
pub const SNAPSHOT_EVERY: Duration = Duration::from_secs(60);
/// Message numbers one run of a host reserves at once: `m-<n>` stays unique in the world.
const ID_BLOCK: u64 = 1 << 32;

/// A host's membership of a cluster.
pub struct Cluster {
    pub host: Arc<str>,
    pub url: String,
    registry: kv::Store,
    leases: kv::Store,
    hosts: kv::Store,
    versions: object_store::ObjectStore,
    snapshots: object_store::ObjectStore,
    streams: Arc<mailboxes::Streams>,
    /// What this host knows of the others and of the leases, kept by watches.
    view: Arc<Mutex<placement::View>>,
    /// What each actor's last snapshot from this host held (`shared::fingerprint`).
    fingerprints: Mutex<HashMap<ActorId, u64>>,
    /// The consumers of the mailboxes of the actors this host runs.
    consumers: Mutex<HashMap<ActorId, tokio::task::JoinHandle<()>>>,
}

/// The stores of a cluster, opened (and made by the first host) in one place.
struct Stores {
    registry: kv::Store,
    leases: kv::Store,
    hosts: kv::Store,
    versions: object_store::ObjectStore,
    snapshots: object_store::ObjectStore,
}

/// Connects to the NATS server at `url`; the error says how to get one.
pub async fn connect(url: &str) -> Result<async_nats::Client> {
    async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .name("sausage")
        .connect(url)
        .await
        .with_context(|| {
            format!(
                "cannot reach the NATS server at {url}; start one with JetStream \
                 (`nats-server -js`) and give its address as --cluster nats://HOST:PORT"
            )
        })
}

impl Cluster {
    /// Joins the cluster at `url` as host `host`: opens the shared stores (making them when this
    /// is the first host) and reserves this run's message ids.
    pub async fn join(url: &str, host: &str) -> Result<Arc<Cluster>> {
        let host_id = ActorId::parse(host)
            .map_err(|e| anyhow::anyhow!("--host-id: {}", e.replace("actor id", "host id")))?;
        let client = connect(url).await?;
        let js = jetstream::new(client.clone());
        let stores = open_stores(&js).await.with_context(|| {
            format!("{url}: cannot open the cluster's stores; is JetStream enabled (`-js`)?")
        })?;
        refuse_a_host_id_in_use(&stores.hosts, host_id.as_str()).await?;
        let view = Arc::new(Mutex::default());
        let streams = mailboxes::Streams::start(
            Arc::from(host_id.as_str()),
            client,
            js.clone(),
            Arc::clone(&view),
        );
        Ok(Arc::new(Cluster {
            host: Arc::from(host_id.as_str()),
            url: url.to_string(),
            registry: stores.registry,
            leases: stores.leases,
            hosts: stores.hosts,
            versions: stores.versions,
            snapshots: stores.snapshots,
            streams,
            view,
            fingerprints: Mutex::default(),
            consumers: Mutex::default(),
        }))
    }

    /// Reserves [`ID_BLOCK`] message numbers for this run, by compare-and-set on the counter.
    pub async fn reserve_ids(&self) -> Result<std::ops::Range<u64>> {
        const KEY: &str = "message-ids";
        for _ in 0..100 {
            let entry = self.registry.entry(KEY).await?;
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
            let reserved = match revision {
                Some(revision) => self.registry.update(KEY, value, revision).await.is_ok(),
                None => self.registry.create(KEY, value).await.is_ok(),
            };
            if reserved {
                return Ok(start..end);
            }
        }
        bail!("cannot reserve message ids: the counter kept changing under 100 attempts")
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

async fn open_stores(js: &jetstream::Context) -> Result<Stores> {
    let bucket = |name: &str, history: i64| kv::Config {
        bucket: name.to_string(),
        history,
        storage: stream::StorageType::File,
        ..Default::default()
    };
    let objects = |name: &'static str| async move {
        match js.get_object_store(name).await {
            Ok(store) => Ok::<_, anyhow::Error>(store),
            Err(_) => Ok(js
                .create_object_store(object_store::Config {
                    bucket: name.to_string(),
                    storage: stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .context(name)?),
        }
    };
    js.get_or_create_stream(stream::Config {
        name: MAILBOX_STREAM.to_string(),
        subjects: vec![format!("{}.*", mailboxes::SUBJECT_PREFIX)],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        // A message is a line of at most 1 MiB, with its envelope and headers.
        max_message_size: 2 * 1024 * 1024,
        // One mailbox holds at most this many: past it, a message is undeliverable.
        max_messages_per_subject: MAILBOX_STREAM_LIMIT,
        discard: stream::DiscardPolicy::New,
        discard_new_per_subject: true,
        ..Default::default()
    })
    .await
    .context(MAILBOX_STREAM)?;
    Ok(Stores {
        registry: key_value(js, bucket(REGISTRY_BUCKET, 1)).await?,
        leases: key_value(js, bucket(LEASES_BUCKET, 1)).await?,
        hosts: key_value(js, bucket(HOSTS_BUCKET, 1)).await?,
        versions: objects(VERSIONS_BUCKET).await?,
        snapshots: objects(SNAPSHOTS_BUCKET).await?,
    })
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
        Err(e) => js
            .get_key_value(&name)
            .await
            .map_err(|_| anyhow::Error::from(e).context(name)),
    }
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
    if beat.leaving || now - last.created.unix_timestamp() > LEASE_TIMEOUT.as_secs() as i64 {
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
