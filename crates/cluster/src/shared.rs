//! The world every host sees: the registry and people in [`super::REGISTRY_BUCKET`], versions in
//! [`super::VERSIONS_BUCKET`], snapshots in [`super::SNAPSHOTS_BUCKET`].
//!
//! The first host to join seeds the stores from its folder; a later host takes the registry and
//! people from them into its own folder, and each version when it first runs it. Each host's
//! folder stays a whole world (its `sausage.json` mirrors the shared registry), so the broker's
//! own code reads it as on a single host. What is written for one actor (its registry entry,
//! which snapshot is current) and the scheduler's table are written under the lease (`fence`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_nats::jetstream::kv;
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;

use super::Cluster;
use sausage_core::broker::Broker;
use sausage_core::broker::ports::SHIPPED_PREFIX;
use sausage_core::message::ActorId;
use sausage_core::world::{ActorEntry, Registry, World};

const SEEDED: &str = "seeded";
/// `snapshot.<id>`: the name of `id`'s current snapshot in [`super::SNAPSHOTS_BUCKET`].
const SNAPSHOT_PREFIX: &str = "snapshot.";
const SUBSCRIPTIONS: &str = "subscriptions";
/// The registry's `"limits"` (per tier, what a person may own), as the first host seeded them.
const LIMITS: &str = "limits";
/// The registry's `"hold"` rules and `"hold_above_usd"` (DESIGN §25), as the first host seeded
/// them: `{"hold": …, "hold_above_usd": …}`.
const HOLDS: &str = "holds";
/// The scheduler's table, shared by the host that leads it for the next one.
const SCHEDULES: &str = "schedules";
const PEOPLE: &str = "people";
/// The secrets file, sealed with the hosts' cluster key (DESIGN §25): NATS holds no value.
const SECRETS: &str = "secrets";
const ACTOR_PREFIX: &str = "actor.";
/// `route.<path in hex>`: an HTTP route (DESIGN §24), one key each, so 10,000 routes are
/// 10,000 small values rather than one large one (a key holds no `/` or `*`).
const ROUTE_PREFIX: &str = "route.";
const CREDENTIALS_PREFIX: &str = "credentials.";
/// How long a joining host waits for the first host to finish seeding.
const SEEDING_LIMIT: Duration = Duration::from_secs(120);
/// How long a version's file is tried again while the store does not answer.
const PUT_PATIENCE: Duration = Duration::from_secs(15);

/// What the registry says waits for approval, shared as one value.
#[derive(serde::Serialize, serde::Deserialize)]
struct Holds {
    hold: Option<Vec<sausage_core::world::HoldRule>>,
    hold_above_usd: Option<f64>,
}

/// A file of the world kept the same on every host through one key of the registry
/// ([`Cluster::keep_in_step`]): how to read and write it here, and how its bytes become the
/// shared value and back (sealed, for the secrets).
struct SharedFile {
    key: &'static str,
    /// What it holds, in the plural, for the log.
    what: &'static str,
    read: Box<dyn Fn() -> Vec<u8> + Send + Sync>,
    write: Write,
    seal: Transform,
    open: Transform,
}

/// Writes `theirs`, another host's value, into this host's file, which held `last` when both
/// were last the same: merged with this host's change, if it has one not shared yet (the next
/// tick shares the merge).
fn take_theirs(file: &SharedFile, last: &[u8], theirs: &[u8]) -> Result<()> {
    if theirs == last {
        return Ok(());
    }
    let now = (file.read)();
    let merged = match now != last && !now.is_empty() {
        true => super::merge::merge_bytes(last, &now, theirs),
        false => None,
    };
    (file.write)(merged.as_deref().unwrap_or(theirs))
}

/// Writes bytes another host shared into this host's file.
type Write = Box<dyn Fn(&[u8]) -> Result<()> + Send + Sync>;
/// Bytes made into other bytes: sealed, opened, or left as they are.
type Transform = Box<dyn Fn(&[u8]) -> Result<Vec<u8>> + Send + Sync>;

impl Cluster {
    /// At join, before the broker opens `world`: the first host to join seeds the shared
    /// registry, versions and people from its folder; a later one replaces its folder's
    /// registry and people with the shared ones.
    pub async fn seed_or_take(&self, world: &World) -> Result<()> {
        let seeding = format!("seeding by {}", self.host);
        if self
            .registry
            .create(SEEDED, seeding.clone().into())
            .await
            .is_ok()
        {
            tracing::info!(
                "host {}: the first host of the cluster; seeding it from {}",
                self.host,
                world.root().display()
            );
            self.seed(world).await?;
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + SEEDING_LIMIT;
        loop {
            let value = self.registry.get(SEEDED).await?.unwrap_or_default();
            if value.starts_with(b"seeded") {
                break;
            }
            if value == seeding.as_bytes() {
                // This host began seeding and was interrupted (JetStream did not answer): it
                // seeds again, every step of which replaces what it stored.
                self.seed(world).await?;
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "the cluster is still being seeded ({}) after {} s; start this host again \
                     once the first one runs",
                    String::from_utf8_lossy(&value),
                    SEEDING_LIMIT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let registry = self.shared_registry().await?;
        world.save_registry(&registry)?;
        if let Some(people) = self.registry.get(PEOPLE).await? {
            sausage_core::fs::write_atomically(&world.people_path(), &people)?;
        }
        self.share_credentials(world).await?;
        tracing::info!(
            "host {}: joined the cluster at {} ({} actors)",
            self.host,
            self.url,
            registry.actors.len()
        );
        Ok(())
    }

    /// Stores this host's world as the cluster's: the registry, every version, a snapshot of
    /// each actor's files, the people and the credentials, then marks the cluster seeded.
    async fn seed(&self, world: &World) -> Result<()> {
        let registry = world.load_registry()?;
        self.put_registry_changes(&Registry::default(), &registry)
            .await?;
        for id in registry.actors.keys() {
            let id = ActorId::parse(id).map_err(anyhow::Error::msg)?;
            for version in world.versions(&id) {
                self.upload_version(world, &id, version).await?;
            }
            if world.data_dir(&id).is_dir() {
                self.snapshot(world, &id).await?;
            }
        }
        if let Ok(people) = std::fs::read(world.people_path()) {
            self.registry.put(PEOPLE, people.into()).await?;
        }
        self.share_credentials(world).await?;
        self.registry
            .put(SEEDED, format!("seeded by {}", self.host).into())
            .await?;
        Ok(())
    }

    /// Keeps this host's `people.json` and the shared copy the same, both ways: a change made
    /// here (`sausage people …`, the People page) is shared within a [`super::HEARTBEAT`], one
    /// made on another host is written here as it comes; two at once are merged.
    pub async fn sync_people(self: std::sync::Arc<Self>, world: World) {
        let people = sausage_core::people::People::new(&world);
        let file = SharedFile {
            key: PEOPLE,
            what: "people",
            read: Box::new(move || people.file_bytes()),
            write: Box::new({
                let people = sausage_core::people::People::new(&world);
                move |bytes| people.replace_file(bytes)
            }),
            seal: Box::new(|bytes| Ok(bytes.to_vec())),
            open: Box::new(|bytes| Ok(bytes.to_vec())),
        };
        let last = (file.read)();
        self.keep_in_step(file, last).await
    }

    /// Keeps `file` and its shared value the same, both ways, from `last` (what both held when
    /// it began): a change here is shared within a [`super::HEARTBEAT`], one made on another
    /// host is written here as it comes. Two changes at once are merged ([`super::merge`]), not
    /// one lost: a change here is shared only over the value it started from (compare-and-set on
    /// the key's revision), else merged with the one that won and shared again; another host's
    /// value that comes while a change here is not shared yet is merged with it before it is
    /// written here.
    async fn keep_in_step(&self, file: SharedFile, mut last: Vec<u8>) {
        let mut ticks = tokio::time::interval(super::HEARTBEAT);
        let mut outage = super::Outage::default();
        // The revision of the shared value `last` is (`None`: nothing shared yet).
        let mut revision: Option<u64> = None;
        loop {
            // Made again, from the last value, a moment after it fails (its node died, say).
            let mut shared = match self.registry.watch_with_history(file.key).await {
                Ok(watch) => watch,
                Err(e) => {
                    outage.failed(|| {
                        format!(
                            "{} are not shared with the other hosts for now: {e}",
                            file.what
                        )
                    });
                    tokio::time::sleep(super::HEARTBEAT).await;
                    continue;
                }
            };
            outage.ended(|| format!("{} are shared with the other hosts", file.what));
            loop {
                tokio::select! {
                    entry = shared.next() => {
                        let Some(Ok(entry)) = entry else { break };
                        if entry.operation != kv::Operation::Put {
                            continue;
                        }
                        match (file.open)(&entry.value) {
                            Ok(theirs) => {
                                if let Err(e) = take_theirs(&file, &last, &theirs) {
                                    tracing::warn!("the cluster's {}: {e:#}", file.what);
                                    continue;
                                }
                                (last, revision) = (theirs, Some(entry.revision));
                            }
                            Err(e) => tracing::warn!("the cluster's {}: {e:#}", file.what),
                        }
                    }
                    _ = ticks.tick() => {
                        let now = (file.read)();
                        if now != last && !now.is_empty() {
                            match self.share(&file, &last, &now, revision).await {
                                Ok(Some((shared, at))) => (last, revision) = (shared, Some(at)),
                                Ok(None) => {}
                                Err(e) => tracing::warn!("cannot share the {}: {e:#}", file.what),
                            }
                        }
                    }
                }
            }
            tokio::time::sleep(super::HEARTBEAT).await;
        }
    }

    /// Shares `now`, this host's file, changed from `last` (the shared value at `revision`):
    /// over `revision` only; if another host's value won meanwhile, the two merged, written
    /// here and shared over that one's revision. What was shared and its revision; `None` when
    /// the file changed here again meanwhile (the next tick shares it).
    async fn share(
        &self,
        file: &SharedFile,
        last: &[u8],
        now: &[u8],
        revision: Option<u64>,
    ) -> Result<Option<(Vec<u8>, u64)>> {
        let value = bytes::Bytes::from((file.seal)(now)?);
        let stored = match revision {
            Some(revision) => self
                .registry
                .update(file.key, value, revision)
                .await
                .map_err(|e| match e.kind() {
                    kv::UpdateErrorKind::WrongLastRevision => None,
                    _ => Some(anyhow::Error::from(e)),
                }),
            None => self
                .registry
                .create(file.key, value)
                .await
                .map_err(|e| match e.kind() {
                    kv::CreateErrorKind::AlreadyExists => None,
                    _ => Some(anyhow::Error::from(e)),
                }),
        };
        match stored {
            Ok(at) => return Ok(Some((now.to_vec(), at))),
            Err(Some(e)) => return Err(e),
            Err(None) => {}
        }
        // Another host's change won: merge with it, here first, then share over it.
        let entry = (self.registry.entry(file.key).await?)
            .filter(|entry| entry.operation == kv::Operation::Put)
            .context("the shared value went")?;
        let theirs = (file.open)(&entry.value)?;
        let merged = super::merge::merge_bytes(last, now, &theirs).unwrap_or_else(|| now.to_vec());
        if (file.read)() != now {
            return Ok(None);
        }
        (file.write)(&merged)?;
        let value = bytes::Bytes::from((file.seal)(&merged)?);
        let at = self
            .registry
            .update(file.key, value, entry.revision)
            .await?;
        Ok(Some((merged, at)))
    }

    /// Keeps this host's secrets file and the cluster's sealed copy the same, both ways, as
    /// [`Cluster::sync_people`] does the people, from the first secret on; the first host with
    /// one makes the cluster key. A host
    /// without the key (or with another) shares nothing and says how to fix it; its actors run
    /// with the secrets its own folder has.
    pub async fn sync_secrets(self: std::sync::Arc<Self>, world: World) {
        use sausage_core::secrets::sealed::ClusterKey;
        let secrets = sausage_core::secrets::Secrets::new(&world);
        // Until this host or the cluster has a secret (or a model token still to be one),
        // nothing is watched (a world without secrets adds no consumer to what a dying NATS
        // node makes the hosts recreate).
        let shared_now = loop {
            let shared = self.registry.get(SECRETS).await;
            if !matches!(shared, Ok(None))
                || !secrets.file_bytes().is_empty()
                || sausage_core::secrets::model::has_legacy(&world)
            {
                break shared;
            }
            tokio::time::sleep(super::HEARTBEAT).await;
        };
        let key = match &shared_now {
            // Nothing shared yet: this host may start the cluster's key.
            Ok(None) => ClusterKey::read_or_make(&world).map(Some),
            _ => ClusterKey::read(&world),
        };
        let key = match key {
            Ok(Some(key)) => key,
            Ok(None) => {
                tracing::warn!(
                    "host {}: secrets are not shared with this host: it has no cluster key; copy \
                     {} from a host of the cluster (mode 0600) and start it again",
                    self.host,
                    ClusterKey::path(&world).display()
                );
                return;
            }
            Err(e) => {
                tracing::warn!(
                    "host {}: secrets are not shared with this host: {e:#}",
                    self.host
                );
                return;
            }
        };
        // The cluster's secrets replace this host's; with none shared yet, this host's are
        // shared at the first tick.
        let last = match shared_now {
            Ok(Some(sealed)) => match key.open(&sealed) {
                Ok(bytes) => {
                    if bytes != secrets.file_bytes()
                        && let Err(e) = secrets.replace_file(&bytes)
                    {
                        tracing::warn!("the cluster's secrets: {e:#}");
                    }
                    bytes
                }
                Err(e) => {
                    tracing::warn!(
                        "host {}: secrets are not shared with this host: {e:#}",
                        self.host
                    );
                    return;
                }
            },
            _ => Vec::new(),
        };
        let last = self.adopt_legacy_model_token(&world, &key, last).await;
        let key = std::sync::Arc::new(key);
        let (sealer, writer) = (key.clone(), secrets.clone());
        let file = SharedFile {
            key: SECRETS,
            what: "secrets",
            read: Box::new(move || secrets.file_bytes()),
            write: Box::new(move |bytes| writer.replace_file(bytes)),
            seal: Box::new(move |bytes| sealer.seal(bytes)),
            open: Box::new(move |bytes| key.open(bytes)),
        };
        self.keep_in_step(file, last).await
    }

    /// A world made before the model token was a secret: the token that the agent's credentials
    /// file still holds (this host's, or the cluster's unsealed copy taken at join) becomes the
    /// secret `model` now that this host's secrets are the cluster's; the secrets are shared
    /// sealed at once, and only then is the token dropped from the unsealed copy. `last` is
    /// what the cluster's sealed secrets held; returns what they hold now.
    async fn adopt_legacy_model_token(
        &self,
        world: &World,
        key: &sausage_core::secrets::sealed::ClusterKey,
        last: Vec<u8>,
    ) -> Vec<u8> {
        use sausage_core::secrets::model;
        let moved = format!(
            "host {}: the model token moved from {} into the secret `{}`",
            self.host,
            world.credentials_path(&model::agent()).display(),
            model::SECRET
        );
        match model::adopt_legacy(world) {
            Ok(true) => {}
            Ok(false) => return last,
            Err(e) => {
                tracing::warn!(
                    "host {}: the model token stays where it was: {e:#}",
                    self.host
                );
                return last;
            }
        }
        let now = sausage_core::secrets::Secrets::new(world).file_bytes();
        let shared = match key.seal(&now) {
            Ok(sealed) => {
                (self.registry.put(SECRETS, sealed.into()).await).map_err(anyhow::Error::from)
            }
            Err(e) => Err(e),
        };
        if let Err(e) = shared {
            // The next tick shares them; the unsealed copy goes at a later start.
            tracing::warn!("{moved}; the secrets are not shared yet: {e:#}");
            return last;
        }
        match self.reshare_credentials(world, &model::agent()).await {
            Ok(()) => tracing::info!("{moved}, shared sealed with the other hosts"),
            Err(e) => tracing::warn!("{moved}; the cluster's unsealed copy stays: {e:#}"),
        }
        now
    }

    /// Replaces the cluster's copy of `id`'s credentials with this host's file, or removes it
    /// (with its history) when this host has none.
    async fn reshare_credentials(&self, world: &World, id: &ActorId) -> Result<()> {
        let key = format!("{CREDENTIALS_PREFIX}{id}");
        match std::fs::read(world.credentials_path(id)) {
            Ok(bytes) => {
                self.registry.put(&key, bytes.into()).await?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.registry.purge(&key).await?,
            Err(e) => return Err(e).context(format!("actor {id}: its credentials")),
        }
        Ok(())
    }

    /// Shares the scheduler's table: only the host that leads the scheduler writes it, under
    /// the scheduler's lease.
    pub async fn share_schedules(&self, table: Vec<u8>) -> Result<()> {
        let scheduler = sausage_core::message::SCHEDULER;
        self.fenced_write(
            scheduler,
            SCHEDULES,
            Some(table.into()),
            "table of schedules",
        )
        .await?;
        Ok(())
    }

    /// Writes the last shared table of schedules (when there is one) to `path`, whole.
    pub async fn take_schedules(&self, path: &Path) -> Result<()> {
        if let Some(bytes) = self.registry.get(SCHEDULES).await? {
            std::fs::create_dir_all(path.parent().expect("a file in a folder"))?;
            sausage_core::fs::write_atomically(path, &bytes)
                .with_context(|| format!("{}", path.display()))?;
        }
        Ok(())
    }

    /// Ships the files a request to be forwarded names (`wasm`, `source`: on this host's disk,
    /// not the other's): each is stored under `shipped/<request id>/…` and the request names it
    /// as `cluster:shipped/…`. A path that cannot be read here goes on as it was, and the
    /// other host says what is wrong with it.
    pub async fn ship_files(
        &self,
        world: &World,
        request: std::sync::Arc<sausage_core::message::Envelope>,
        body: &serde_json::Value,
    ) -> std::sync::Arc<sausage_core::message::Envelope> {
        let mut shipped = body.clone();
        let mut changed = false;
        for field in ["wasm", "source"] {
            let Some(path) = body.get(field).and_then(|p| p.as_str()) else {
                continue;
            };
            let Ok(local) = world.resolve_request_path(&request.from, path) else {
                continue;
            };
            let name = format!("shipped/{}/{field}", request.id.replace('/', "-"));
            let bytes = if local.is_dir() {
                tokio::task::spawn_blocking(move || pack(&[("tree", &local)]))
                    .await
                    .map_err(anyhow::Error::from)
                    .and_then(|packed| packed)
            } else {
                tokio::fs::read(&local).await.map_err(anyhow::Error::from)
            };
            let stored = match bytes {
                Ok(bytes) => self.put_object(&name, bytes).await,
                Err(e) => Err(e),
            };
            match stored {
                Ok(()) => {
                    shipped[field] = format!("{SHIPPED_PREFIX}{name}").into();
                    changed = true;
                }
                Err(e) => tracing::warn!("{path}: cannot ship it to another host: {e:#}"),
            }
        }
        if !changed {
            return request;
        }
        std::sync::Arc::new(sausage_core::message::Envelope {
            id: request.id.clone(),
            from: request.from.clone(),
            reply_to: request.reply_to.clone(),
            speaker: request.speaker.clone(),
            schedule: request.schedule.clone(),
            trace: request.trace,
            body: sausage_core::message::raw(&shipped),
        })
    }

    /// A file another host shipped (see [`Cluster::ship_files`]), fetched into this host's
    /// scratch folder: the path of the file, or of the folder for a packed one.
    pub async fn fetch_shipped(&self, world: &World, name: &str) -> Result<std::path::PathBuf> {
        let Some(rest) = name.strip_prefix("shipped/") else {
            bail!("only files shipped with a forwarded request can be named this way");
        };
        let bytes = self.get_object(&self.versions, name).await?;
        let into = world
            .scratch_dir()
            .join("shipped")
            .join(rest.replace('/', "-"));
        let packed = name.ends_with("/source");
        tokio::task::spawn_blocking(move || -> Result<std::path::PathBuf> {
            std::fs::create_dir_all(&into)?;
            if packed {
                unpack(&bytes, &into)?;
                Ok(into.join("tree"))
            } else {
                let file = into.join("actor.wasm");
                std::fs::write(&file, &bytes)?;
                Ok(file)
            }
        })
        .await
        .context("fetching a shipped file")?
    }

    /// Shares the credentials (`broker/credentials/<id>.json`) this host has and the cluster
    /// lacks, then takes every one the cluster has: an actor that moves keeps its tokens. The
    /// NATS server holds them from then on, unsealed (keep it as private as the world's
    /// folder): they are the legacy way, which `sausage matrix setup` and `sausage mcp-server
    /// add` still take; the model token is a secret, shared sealed ([`Cluster::sync_secrets`]).
    pub async fn share_credentials(&self, world: &World) -> Result<()> {
        let dir = world.credentials_dir();
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            let key = format!("{CREDENTIALS_PREFIX}{id}");
            if ActorId::parse(id).is_err() || self.registry.get(&key).await?.is_some() {
                continue;
            }
            let bytes = std::fs::read(entry.path())?;
            self.registry.create(&key, bytes.into()).await.ok();
        }
        let mut keys = self.registry.keys().await?;
        let mut ids = Vec::new();
        while let Some(key) = keys.next().await {
            if let Some(id) = key?.strip_prefix(CREDENTIALS_PREFIX) {
                ids.push(id.to_string());
            }
        }
        for id in ids {
            if let Ok(id) = ActorId::parse(&id) {
                self.take_credentials(world, &id).await?;
            }
        }
        Ok(())
    }

    /// Writes `id`'s shared credentials, if the cluster has some, into this host's folder.
    pub async fn take_credentials(&self, world: &World, id: &ActorId) -> Result<()> {
        let Some(bytes) = self
            .registry
            .get(format!("{CREDENTIALS_PREFIX}{id}"))
            .await?
        else {
            return Ok(());
        };
        let credentials = sausage_core::runtime::network::Credentials::parse_all(&bytes)
            .with_context(|| format!("actor {id}: the cluster's credentials"))?;
        world.write_all_credentials(id, &credentials)
    }

    /// The registry as the stores hold it.
    pub async fn shared_registry(&self) -> Result<Registry> {
        let mut registry = Registry::default();
        let mut keys = self.registry.keys().await?;
        while let Some(key) = keys.next().await {
            let key = key?;
            let Some(id) = key.strip_prefix(ACTOR_PREFIX) else {
                continue;
            };
            if let Some(value) = self.registry.get(&key).await? {
                let entry: ActorEntry = serde_json::from_slice(&value)
                    .with_context(|| format!("the cluster's registry entry `{key}`"))?;
                registry.actors.insert(id.to_string(), entry);
            }
        }
        let mut keys = self.registry.keys().await?;
        while let Some(key) = keys.next().await {
            let key = key?;
            let Some(path) = key.strip_prefix(ROUTE_PREFIX).and_then(route_path) else {
                continue;
            };
            if let Some(value) = self.registry.get(&key).await? {
                let route = serde_json::from_slice(&value)
                    .with_context(|| format!("the cluster's route `{path}`"))?;
                registry.routes.insert(path, route);
            }
        }
        if let Some(value) = self.registry.get(SUBSCRIPTIONS).await? {
            registry.subscriptions =
                serde_json::from_slice(&value).context("the cluster's subscriptions")?;
        }
        if let Some(value) = self.registry.get(LIMITS).await? {
            registry.limits = serde_json::from_slice(&value).context("the cluster's limits")?;
        }
        if let Some(value) = self.registry.get(HOLDS).await? {
            let holds: Holds = serde_json::from_slice(&value).context("the cluster's holds")?;
            (registry.hold, registry.hold_above_usd) = (holds.hold, holds.hold_above_usd);
        }
        Ok(registry)
    }

    /// Writes what changed from `old` to `new` into the shared registry: each actor's entry is
    /// its own key, written under the actor's lease; the subscriptions, the limits and the
    /// hold rules one each.
    pub async fn put_registry_changes(&self, old: &Registry, new: &Registry) -> Result<()> {
        for (id, entry) in &new.actors {
            if old.actors.get(id) != Some(entry) {
                let value = serde_json::to_vec(entry).expect("an entry serialises");
                let key = format!("{ACTOR_PREFIX}{id}");
                self.fenced_write(id, &key, Some(value.into()), "registry entry")
                    .await
                    .with_context(|| format!("cannot share the registry entry of `{id}`"))?;
            }
        }
        for id in old.actors.keys() {
            if !new.actors.contains_key(id) {
                let key = format!("{ACTOR_PREFIX}{id}");
                self.fenced_write(id, &key, None, "registry entry")
                    .await
                    .with_context(|| format!("cannot remove `{id}` from the shared registry"))?;
            }
        }
        if old.subscriptions != new.subscriptions {
            let value = serde_json::to_vec(&new.subscriptions).expect("subscriptions serialise");
            self.registry
                .put(SUBSCRIPTIONS, value.into())
                .await
                .context("cannot share the subscriptions")?;
        }
        for (path, route) in &new.routes {
            if old.routes.get(path) != Some(route) {
                let value = serde_json::to_vec(route).expect("a route serialises");
                self.registry
                    .put(route_key(path), value.into())
                    .await
                    .with_context(|| format!("cannot share the route {path}"))?;
            }
        }
        for path in old.routes.keys() {
            if !new.routes.contains_key(path) {
                self.registry
                    .delete(route_key(path))
                    .await
                    .with_context(|| format!("cannot remove the shared route {path}"))?;
            }
        }
        if old.limits != new.limits {
            let value = serde_json::to_vec(&new.limits).expect("limits serialise");
            self.registry
                .put(LIMITS, value.into())
                .await
                .context("cannot share the limits")?;
        }
        if (&old.hold, old.hold_above_usd) != (&new.hold, new.hold_above_usd) {
            let holds = Holds {
                hold: new.hold.clone(),
                hold_above_usd: new.hold_above_usd,
            };
            let value = serde_json::to_vec(&holds).expect("holds serialise");
            self.registry
                .put(HOLDS, value.into())
                .await
                .context("cannot share the rules of what waits for approval")?;
        }
        Ok(())
    }

    /// Stores version `version` of `id` from this host's folder.
    pub async fn upload_version(&self, world: &World, id: &ActorId, version: u32) -> Result<()> {
        let dir = world.version_dir(id, version);
        let prefix = format!("{id}/{version}");
        let wasm = tokio::fs::read(dir.join("actor.wasm"))
            .await
            .with_context(|| format!("{}", dir.join("actor.wasm").display()))?;
        self.put_object(&format!("{prefix}/actor.wasm"), wasm)
            .await?;
        if let Ok(meta) = tokio::fs::read(dir.join("meta.json")).await {
            self.put_object(&format!("{prefix}/meta.json"), meta)
                .await?;
        }
        let source = dir.join("source");
        let tar = tokio::task::spawn_blocking(move || pack(&[("source", &source)]))
            .await
            .context("packing a source")??;
        self.put_object(&format!("{prefix}/source.tar"), tar).await
    }

    /// Stores `bytes` as `name` among the versions, tried again for [`PUT_PATIENCE`] while the
    /// store does not answer (its stream elects a leader: just made, or its node died).
    async fn put_object(&self, name: &str, bytes: Vec<u8>) -> Result<()> {
        let deadline = tokio::time::Instant::now() + PUT_PATIENCE;
        loop {
            match self.versions.put(name, &mut bytes.as_slice()).await {
                Ok(_) => return Ok(()),
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!("cannot store {name} in the cluster yet ({e}); trying again");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => {
                    return Err(anyhow::Error::from(e))
                        .with_context(|| format!("cannot store {name} in the cluster"));
                }
            }
        }
    }

    /// Makes sure this host's folder holds version `version` of `id`, fetching it from the
    /// stores when not.
    pub async fn ensure_version(&self, world: &World, id: &ActorId, version: u32) -> Result<()> {
        let dir = world.version_dir(id, version);
        if dir.join("actor.wasm").is_file() {
            return Ok(());
        }
        let prefix = format!("{id}/{version}");
        let wasm = self
            .get_object(&self.versions, &format!("{prefix}/actor.wasm"))
            .await?;
        let meta = self
            .get_object(&self.versions, &format!("{prefix}/meta.json"))
            .await
            .ok();
        let source = self
            .get_object(&self.versions, &format!("{prefix}/source.tar"))
            .await?;
        tokio::task::spawn_blocking(move || -> Result<()> {
            let parent = dir.parent().expect("inside broker/versions/<id>");
            std::fs::create_dir_all(parent)?;
            let staged = sausage_core::fs::create_temporary_dir(parent)?;
            let built = (|| -> Result<()> {
                std::fs::write(staged.join("actor.wasm"), &wasm)?;
                if let Some(meta) = meta {
                    std::fs::write(staged.join("meta.json"), meta)?;
                }
                unpack(&source, &staged)?;
                std::fs::create_dir_all(staged.join("source"))?;
                std::fs::rename(&staged, &dir)?;
                Ok(())
            })();
            if built.is_err() {
                // A hidden temporary: the start after this one's clean-up removes what is left.
                let _ = std::fs::remove_dir_all(&staged);
            }
            built
        })
        .await
        .context("storing a version")?
        .with_context(|| format!("actor {id}: cannot store version {version} from the cluster"))
    }

    async fn get_object(
        &self,
        store: &async_nats::jetstream::object_store::ObjectStore,
        name: &str,
    ) -> Result<Vec<u8>> {
        let mut object = store
            .get(name)
            .await
            .with_context(|| format!("the cluster has no {name}"))?;
        let mut bytes = Vec::new();
        object
            .read_to_end(&mut bytes)
            .await
            .with_context(|| format!("cannot read {name} from the cluster"))?;
        Ok(bytes)
    }

    /// Stores `id`'s `/data` and `/public` as they are now (committed files only) as its
    /// snapshot, which the next host to run it starts from. Packed into a file of the scratch
    /// folder and streamed from there, so a big `/data` takes no memory; skipped when no file
    /// changed since the last snapshot (same names, sizes, times and inodes).
    ///
    /// Stored under a name of its own, then made current by writing that name at
    /// `snapshot.<id>` under the actor's lease: a host that lost the lease stores an object
    /// nobody reads (and removes it), never the one the next owner restores.
    pub async fn snapshot(&self, world: &World, id: &ActorId) -> Result<()> {
        let (data, public) = (world.data_dir(id), world.public_dir(id));
        let scratch = world.scratch_dir();
        let last = self
            .fingerprints
            .lock()
            .expect("fingerprints lock")
            .get(id)
            .copied();
        // Taken before the files are read: the commits after it are replayed over the snapshot
        // (a commit made while packing is in both, and applying it again changes nothing).
        let through = self.commits.last_known(id).unwrap_or(0);
        let packed = tokio::task::spawn_blocking(move || -> Result<Option<(PathBuf, u64)>> {
            let print = fingerprint(&[&data, &public])?;
            if last == Some(print) {
                return Ok(None);
            }
            std::fs::create_dir_all(&scratch)?;
            let dir = sausage_core::fs::create_temporary_dir(&scratch)?;
            let file = std::fs::File::create(dir.join("snapshot.tar"))?;
            let covers = serde_json::to_vec(&serde_json::json!({"through": through}))?;
            pack_into(
                file,
                &[("data", &data), ("public", &public)],
                &[(COVERS, &covers)],
            )?;
            Ok(Some((dir, print)))
        })
        .await
        .context("packing a snapshot")??;
        let Some((dir, print)) = packed else {
            return Ok(());
        };
        let token = self.token(id.as_str());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("{id}/{}-{nanos}", token.revision);
        let stored = async {
            let mut file = tokio::fs::File::open(dir.join("snapshot.tar")).await?;
            self.snapshots.put(name.as_str(), &mut file).await?;
            anyhow::Ok(())
        }
        .await;
        // In the scratch folder, which every start empties: a leftover costs only disk.
        let _ = tokio::fs::remove_dir_all(&dir).await;
        stored.with_context(|| format!("actor {id}: cannot store its snapshot in the cluster"))?;
        let pointer = format!("{SNAPSHOT_PREFIX}{id}");
        let replaced = self.registry.get(&pointer).await.ok().flatten();
        let current = self
            .write_under(
                id.as_str(),
                token,
                &pointer,
                Some(name.clone().into()),
                "snapshot",
            )
            .await;
        let gone = match current {
            Ok(_) => replaced.map(|r| String::from_utf8_lossy(&r).into_owned()),
            Err(_) => Some(name),
        };
        if let Some(gone) = gone
            && let Err(e) = self.snapshots.delete(&gone).await
        {
            // Named by no pointer, so never restored: it costs only the store's space.
            tracing::warn!("actor {id}: an old snapshot stays in the cluster ({gone}): {e}");
        }
        current?;
        self.fingerprints
            .lock()
            .expect("fingerprints lock")
            .insert(id.clone(), print);
        // Snapshots compact the commits (DESIGN §20).
        self.commits.compact(id, through).await
    }

    /// Removes `id`'s current snapshot (the actor was removed), under its lease.
    pub async fn forget_snapshot(&self, id: &ActorId) -> Result<()> {
        let pointer = format!("{SNAPSHOT_PREFIX}{id}");
        let Some(name) = self.registry.get(&pointer).await? else {
            return Ok(());
        };
        self.fenced_write(id.as_str(), &pointer, None, "snapshot")
            .await?;
        let name = String::from_utf8_lossy(&name).into_owned();
        self.snapshots
            .delete(&name)
            .await
            .with_context(|| format!("actor {id}: its last snapshot stays in the cluster"))?;
        Ok(())
    }

    /// Replaces `id`'s `/data` and `/public` in this host's folder with its last snapshot in
    /// the stores, whole or not at all (fetched into a file, unpacked beside, swapped in).
    /// False when it has none.
    pub async fn restore_snapshot(&self, world: &World, id: &ActorId) -> Result<bool> {
        let pointer = format!("{SNAPSHOT_PREFIX}{id}");
        let (restored, through) = match self.registry.get(&pointer).await? {
            Some(name) => {
                let name = String::from_utf8_lossy(&name).into_owned();
                let object = self
                    .snapshots
                    .get(&name)
                    .await
                    .with_context(|| format!("actor {id}: its snapshot {name} is missing"))?;
                (true, self.unpack_snapshot(world, id, object).await?)
            }
            None => (false, 0),
        };
        // Every change committed since the snapshot, then this host's `take`: the actor goes
        // on from its last commit, and a message that commit had read is not given again.
        let replayed = self.commits.replay(world, id, through).await?;
        if let Some(read) = replayed.read
            && let Some(mailbox) = self.streams.router().and_then(|r| r.mailbox(id))
        {
            mailbox.read_through(read);
        }
        Ok(restored)
    }

    /// Replaces `id`'s files with the snapshot `object`; returns the last commit it covers.
    async fn unpack_snapshot(
        &self,
        world: &World,
        id: &ActorId,
        mut object: async_nats::jetstream::object_store::Object,
    ) -> Result<u64> {
        let scratch = world.scratch_dir();
        tokio::fs::create_dir_all(&scratch).await?;
        let dir = sausage_core::fs::create_temporary_dir(&scratch)?;
        let fetched = async {
            let mut file = tokio::fs::File::create(dir.join("snapshot.tar")).await?;
            tokio::io::copy(&mut object, &mut file).await?;
            anyhow::Ok(())
        }
        .await;
        let (into, actor, unpacked) = (world.clone(), id.clone(), dir.clone());
        let restored = match fetched {
            Err(e) => Err(e.context(format!("actor {id}: cannot fetch its snapshot"))),
            Ok(()) => tokio::task::spawn_blocking(move || -> Result<u64> {
                let file = std::fs::File::open(unpacked.join("snapshot.tar"))?;
                unpack_from(file, &unpacked.join("tree"))?;
                // A snapshot from before commits were replicated covers none.
                let through = std::fs::read(unpacked.join("tree").join(COVERS))
                    .ok()
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                    .and_then(|v| v["through"].as_u64())
                    .unwrap_or(0);
                sausage_core::replace::Replacement::prepare(vec![
                    (unpacked.join("tree/data"), into.data_dir(&actor)),
                    (unpacked.join("tree/public"), into.public_dir(&actor)),
                ])
                .and_then(sausage_core::replace::Replacement::apply)
                .map(sausage_core::replace::Applied::finish)?;
                Ok(through)
            })
            .await
            .context("restoring a snapshot")
            .and_then(|r| r),
        };
        // In the scratch folder, which every start empties: a leftover costs only disk.
        let _ = tokio::fs::remove_dir_all(&dir).await;
        self.fingerprints
            .lock()
            .expect("fingerprints lock")
            .remove(id);
        restored
    }
}

/// The entry of a snapshot's tar that says which commits it covers: `{"through": <sequence>}`.
const COVERS: &str = "commits.json";

/// What a snapshot of `folders` would hold, as one number: every committed file's path, size,
/// modification time and inode (a commit replaces the inode).
fn fingerprint(folders: &[&Path]) -> Result<u64> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    fn walk(dir: &Path, hasher: &mut std::collections::hash_map::DefaultHasher) -> Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            if sausage_core::fs::is_temporary_name(&entry.file_name()) {
                continue;
            }
            let meta = entry.metadata()?;
            (
                entry.file_name(),
                meta.len(),
                meta.mtime_nsec(),
                meta.mtime(),
                meta.ino(),
            )
                .hash(hasher);
            if meta.is_dir() {
                walk(&entry.path(), hasher)?;
            }
        }
        Ok(())
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for folder in folders {
        folder.hash(&mut hasher);
        if folder.is_dir() {
            walk(folder, &mut hasher)?;
        }
    }
    Ok(hasher.finish())
}

/// A tar of each `(name, folder)`, committed files only (no temporary of a writer).
fn pack(folders: &[(&str, &Path)]) -> Result<Vec<u8>> {
    pack_into(Vec::new(), folders, &[])
}

/// A tar of each `(name, folder)` and each `(name, bytes)` of `files`, written to `out`.
fn pack_into<W: std::io::Write>(
    out: W,
    folders: &[(&str, &Path)],
    files: &[(&str, &[u8])],
) -> Result<W> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    for (name, folder) in folders {
        builder.append_dir(name, ".")?;
        if folder.is_dir() {
            add_tree(&mut builder, folder, Path::new(name))?;
        }
    }
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, name, *bytes)?;
    }
    Ok(builder.into_inner()?)
}

fn add_tree<W: std::io::Write>(
    builder: &mut tar::Builder<W>,
    dir: &Path,
    name: &Path,
) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if sausage_core::fs::is_temporary_name(&entry.file_name()) {
            continue;
        }
        let (path, inner) = (entry.path(), name.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            builder.append_dir(&inner, &path)?;
            add_tree(builder, &path, &inner)?;
        } else if kind.is_file() {
            builder.append_path_with_name(&path, &inner)?;
        }
    }
    Ok(())
}

/// Unpacks a tar [`pack`] made into `into`; no entry may leave it.
fn unpack(tar: &[u8], into: &Path) -> Result<()> {
    unpack_from(tar, into)
}

fn unpack_from(tar: impl std::io::Read, into: &Path) -> Result<()> {
    std::fs::create_dir_all(into)?;
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries()? {
        let mut entry = entry?;
        if !entry.unpack_in(into)? {
            bail!("an archive from the cluster names a path outside its folder");
        }
    }
    Ok(())
}

/// A change of the shared registry, from a watch of it, applied to `broker`: an actor's entry
/// (put or removed) or the subscriptions; the bucket's other keys (people, the message-id
/// counter, the schedules) are read where they are used.
pub async fn apply_registry_entry(broker: &Broker, entry: kv::Entry) {
    let put = entry.operation == kv::Operation::Put;
    if let Some(id) = entry.key.strip_prefix(ACTOR_PREFIX) {
        let Ok(id) = ActorId::parse(id) else { return };
        let value = if put {
            serde_json::from_slice(&entry.value).ok()
        } else {
            None
        };
        broker.apply_shared_entry(&id, value).await;
    } else if let Some(path) = entry.key.strip_prefix(ROUTE_PREFIX).and_then(route_path) {
        let route = if put {
            serde_json::from_slice(&entry.value).ok()
        } else {
            None
        };
        broker.apply_shared_route(&path, route).await;
    } else if entry.key == SUBSCRIPTIONS
        && put
        && let Ok(subscriptions) = serde_json::from_slice(&entry.value)
    {
        broker.apply_shared_subscriptions(subscriptions).await;
    }
}

/// The key of the route at `path`.
fn route_key(path: &str) -> String {
    let mut key = String::from(ROUTE_PREFIX);
    for byte in path.bytes() {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}

/// The path a route key's hex names, if it names one.
fn route_path(hex: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_key_names_its_path_and_nothing_else() {
        for path in ["/", "/shop/*", "/a-b_c.d~e"] {
            let key = route_key(path);
            assert!(
                key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.'),
                "{key}"
            );
            assert_eq!(
                route_path(key.strip_prefix(ROUTE_PREFIX).unwrap()).as_deref(),
                Some(path)
            );
        }
        assert_eq!(route_path("2"), None);
        assert_eq!(route_path("zz"), None);
    }

    #[test]
    fn a_packed_tree_unpacks_whole_without_temporaries_and_its_fingerprint_follows_commits() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("sub")).unwrap();
        std::fs::write(data.join("a.txt"), "one").unwrap();
        std::fs::write(data.join("sub/b.txt"), "two").unwrap();
        std::fs::write(data.join(".sausage-tmp-1-2"), "uncommitted").unwrap();
        let before = fingerprint(&[&data]).unwrap();
        assert_eq!(
            before,
            fingerprint(&[&data]).unwrap(),
            "the same files, the same print"
        );

        let tar = pack(&[("data", &data)]).unwrap();
        let into = dir.path().join("into");
        unpack(&tar, &into).unwrap();
        assert_eq!(
            std::fs::read_to_string(into.join("data/a.txt")).unwrap(),
            "one"
        );
        assert_eq!(
            std::fs::read_to_string(into.join("data/sub/b.txt")).unwrap(),
            "two"
        );
        assert!(
            !into.join("data/.sausage-tmp-1-2").exists(),
            "only committed files"
        );

        // A commit replaces the file (a new inode): the print changes.
        std::fs::write(data.join("new"), "three").unwrap();
        std::fs::rename(data.join("new"), data.join("a.txt")).unwrap();
        assert_ne!(before, fingerprint(&[&data]).unwrap());
    }

    #[test]
    fn an_archive_naming_a_path_outside_its_folder_is_refused() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        // `set_path` refuses `..`, as a tar from another host might not.
        let name = b"../escape";
        header.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
        header.set_cksum();
        builder.append(&header, &b"x"[..]).unwrap();
        let tar = builder.into_inner().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let into = dir.path().join("into");
        assert!(unpack(&tar, &into).is_err());
        assert!(!dir.path().join("escape").exists());
    }
}
