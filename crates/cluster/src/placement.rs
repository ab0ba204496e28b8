//! Which host runs each actor: leases (`lease.<id>` in [`super::REGISTRY_BUCKET`]) and
//! heartbeats in [`super::HOSTS_BUCKET`].
//!
//! Every [`super::HEARTBEAT`] a host writes its heartbeat (how many actors it runs and their
//! states), which renews all its leases at once, and then places: an actor without a lease, or
//! whose host has not been heard from for [`super::LEASE_TIMEOUT`], is taken (compare-and-set,
//! so only one host wins) by the least loaded live host; an actor this host runs whose lease
//! names another host is stopped here (it was taken over). Liveness is judged on each host's
//! own clock, by when a heartbeat last changed, so clocks need not agree, and against this
//! host's own heartbeat coming through the same watch, so a stalled watch makes nobody dead.
//! **Invariant:** a host whose last completed renewal was sent [`super::SELF_STOP_AFTER`] ago
//! runs nothing (`RunUntil`), and stops every actor and ends its term before it renews again,
//! so a paused host that resumes never runs or writes for an actor another host took.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::fence::{LEASE_PREFIX, lease_key};
use super::{Cluster, HEARTBEAT, LEASE_TIMEOUT, SELF_STOP_AFTER};
use sausage_core::broker::Broker;
use sausage_core::broker::ports::HostView;
use sausage_core::message::ActorId;

/// What one host knows of the others and of the leases.
pub struct View {
    /// When this host joined: a host it has not heard from yet counts as alive until
    /// [`LEASE_TIMEOUT`] after it (its heartbeat may not have come through the watch yet).
    joined: Instant,
    hosts: HashMap<String, Seen>,
    leases: HashMap<String, Lease>,
    /// Actors this host is starting or stopping: placement leaves them alone meanwhile.
    busy: HashSet<ActorId>,
    /// Lease key → the revision this host holds it at, from the start of the actor here (or
    /// the lead of the native) to its stop: the fencing token of its writes (`fence`).
    held: HashMap<String, u64>,
    /// Lease key → the revision of its removal, for leases removed since this host joined.
    removed: HashMap<String, u64>,
    /// Actors this host is starting after their last host died (another, or this one before a
    /// kill): their mailbox's consumer answers the HTTP requests that host took ([`View::taken_over`]).
    taken_over: HashSet<ActorId>,
}

/// A fencing token no lease has (revisions are stream sequences, far below it): the token of a
/// write for an actor another host holds, which is always refused.
const NOT_HELD: u64 = u64::MAX;

struct Seen {
    /// When this heartbeat's revision first came through the watch.
    at: Instant,
    /// Its revision: a watch made again hands every last heartbeat again, which is no sign of
    /// life.
    revision: u64,
    beat: Beat,
}

/// How long the watch of the hosts' heartbeats may hand nothing before it is taken for stalled
/// (the node its consumer lived on died) and made again: every host, this one included, writes
/// its heartbeat every [`HEARTBEAT`].
const HOSTS_WATCH_QUIET: Duration = Duration::from_secs(3);

/// A host's heartbeat.
#[derive(Serialize, Deserialize, Default, Clone)]
pub struct Beat {
    /// The actors it runs, with their states; only those not `running` when listing them all
    /// would pass [`BEAT_LIMIT`] (`running_unlisted` says so).
    pub states: BTreeMap<String, String>,
    /// How many `running` actors [`Beat::states`] leaves out.
    #[serde(default)]
    pub running_unlisted: usize,
    /// Whether it is leaving (a graceful stop).
    #[serde(default)]
    pub leaving: bool,
}

/// The size a heartbeat keeps under (a NATS message is at most 1 MiB by default): past it, it
/// names only the actors that are not running.
const BEAT_LIMIT: usize = 512 * 1024;

impl Beat {
    /// The heartbeat of a host whose actors are in these states, kept under [`BEAT_LIMIT`].
    fn of(states: BTreeMap<String, String>) -> (Beat, Vec<u8>) {
        let beat = Beat {
            states,
            running_unlisted: 0,
            leaving: false,
        };
        let value = serde_json::to_vec(&beat).expect("a heartbeat serialises");
        if value.len() <= BEAT_LIMIT {
            return (beat, value);
        }
        let total = beat.states.len();
        let states: BTreeMap<String, String> = beat
            .states
            .into_iter()
            .filter(|(_, state)| state != "running")
            .collect();
        let beat = Beat {
            running_unlisted: total - states.len(),
            states,
            leaving: false,
        };
        let value = serde_json::to_vec(&beat).expect("a heartbeat serialises");
        (beat, value)
    }

    /// What this heartbeat says of `id`, an actor of its host.
    fn state_of(&self, id: &str) -> Option<String> {
        match self.states.get(id) {
            Some(state) => Some(state.clone()),
            None if self.running_unlisted > 0 => Some("running".into()),
            None => None,
        }
    }
}

#[derive(Clone)]
struct Lease {
    host: String,
    revision: u64,
}

/// A lease as `sausage cluster status` shows it.
pub struct LeaseView {
    pub actor: String,
    pub host: String,
}

impl Default for View {
    fn default() -> View {
        View {
            joined: Instant::now(),
            hosts: HashMap::new(),
            leases: HashMap::new(),
            busy: HashSet::new(),
            held: HashMap::new(),
            removed: HashMap::new(),
            taken_over: HashSet::new(),
        }
    }
}

impl View {
    /// The revision this host's writes for lease `id` are conditional on (`fence`).
    pub fn token(&self, id: &str) -> u64 {
        if let Some(revision) = self.held.get(id) {
            return *revision;
        }
        match self.leases.get(id) {
            Some(_) => NOT_HELD,
            None => self.removed.get(id).copied().unwrap_or(0),
        }
    }

    /// Whether this host holds lease `id` (runs the actor, or leads the native).
    pub fn holds(&self, id: &str) -> bool {
        self.held.contains_key(id)
    }

    /// This host runs `id` (or leads it) under its lease at `revision` from now on.
    pub fn hold(&mut self, id: &str, revision: u64) {
        self.held.insert(id.to_string(), revision);
    }

    /// Whether `id` is starting here after its last host died; asked once.
    pub fn taken_over(&mut self, id: &ActorId) -> bool {
        self.taken_over.remove(id)
    }

    /// The host lease `id` names, as this host last saw it.
    #[cfg(test)]
    pub fn holder(&self, id: &str) -> Option<String> {
        self.leases.get(id).map(|l| l.host.clone())
    }

    /// A change of lease `id` at `revision` (`host` `None`: removed), from the watch or read
    /// from the store; an older one than this host knows is ignored (the two may cross).
    fn saw_lease(&mut self, id: &str, revision: u64, host: Option<String>) {
        let known = self
            .leases
            .get(id)
            .map(|l| l.revision)
            .or(self.removed.get(id).copied())
            .unwrap_or(0);
        if revision < known {
            return;
        }
        match host {
            Some(host) => {
                self.removed.remove(id);
                self.leases.insert(id.to_string(), Lease { host, revision });
            }
            None => {
                self.leases.remove(id);
                self.removed.insert(id.to_string(), revision);
            }
        }
    }

    /// After this host's deadline passed: it holds nothing, and what it saw of the others may
    /// be as old as its pause, so it judges none of them dead before a whole
    /// [`LEASE_TIMEOUT`] of looking again.
    fn look_again(&mut self) {
        let now = Instant::now();
        self.joined = now;
        for seen in self.hosts.values_mut() {
            seen.at = now;
        }
        self.held.clear();
    }

    /// Whether `host` counts as alive: it has not left, and its heartbeat last changed less
    /// than [`LEASE_TIMEOUT`] before this host's own last came through the watch (before now,
    /// until this host's own first came). Judged against this host's own heartbeat rather than
    /// the clock alone, so that a watch or a bucket that stalls (a NATS node died, a stream
    /// elects its leader) makes nobody dead: no heartbeat comes through it then, this host's
    /// own included.
    fn alive(&self, host: &str, me: &str) -> bool {
        if host == me {
            return true;
        }
        let now = self.hosts.get(me).map_or_else(Instant::now, |own| own.at);
        match self.hosts.get(host) {
            Some(seen) => {
                !seen.beat.leaving && now.saturating_duration_since(seen.at) < LEASE_TIMEOUT
            }
            None => now.saturating_duration_since(self.joined) < LEASE_TIMEOUT,
        }
    }

    /// The other live host holding the lease `key`, if another does.
    pub fn elsewhere(&self, key: &str, me: &str) -> Option<String> {
        let lease = self.leases.get(key)?;
        (lease.host != me && self.alive(&lease.host, me)).then(|| lease.host.clone())
    }

    /// The live host with the fewest leases (ties by id), this host included.
    fn least_loaded(&self, me: &str) -> String {
        let mut load: BTreeMap<&str, usize> = BTreeMap::from([(me, 0)]);
        for host in self.hosts.keys() {
            if self.alive(host, me) {
                load.entry(host).or_default();
            }
        }
        for (key, lease) in &self.leases {
            if super::is_led_native(key) {
                continue;
            }
            if let Some(n) = load.get_mut(lease.host.as_str()) {
                *n += 1;
            }
        }
        let (host, _) = load
            .into_iter()
            .min_by_key(|(host, n)| (*n, *host))
            .expect("this host is in it");
        host.to_string()
    }
}

impl Cluster {
    /// Starts this host's part: the watches, the heartbeat and placement, snapshots.
    pub async fn run(self: &Arc<Self>, broker: Arc<Broker>) -> anyhow::Result<()> {
        let cluster = self.clone();
        tokio::spawn(follow(
            self.hosts.clone(),
            ">",
            Some(HOSTS_WATCH_QUIET),
            move |entry| {
                cluster.saw_host(entry);
                std::future::ready(())
            },
        ));
        let cluster = self.clone();
        let leases = format!("{LEASE_PREFIX}>");
        tokio::spawn(follow(self.registry.clone(), leases, None, move |entry| {
            if let Some(id) = entry.key.strip_prefix(LEASE_PREFIX) {
                cluster.saw_lease_entry(id, &entry);
            }
            std::future::ready(())
        }));
        let shared = broker.clone();
        tokio::spawn(follow(self.registry.clone(), ">", None, move |entry| {
            let broker = shared.clone();
            async move { super::shared::apply_registry_entry(&broker, entry).await }
        }));
        tokio::spawn(self.clone().place(broker.clone()));
        tokio::spawn(self.clone().sync_people(broker.world.clone()));
        tokio::spawn(self.clone().sync_secrets(broker.world.clone()));
        tokio::spawn(self.clone().follow_approvals(broker.clone()));
        tokio::spawn(self.clone().snapshot_often(broker));
        Ok(())
    }

    fn saw_host(&self, entry: kv::Entry) {
        let mut view = self.view.lock().expect("view lock");
        match entry.operation {
            kv::Operation::Put => {
                let beat = serde_json::from_slice(&entry.value).unwrap_or_default();
                let at = match view.hosts.get(&entry.key) {
                    Some(seen) if seen.revision == entry.revision => seen.at,
                    _ => Instant::now(),
                };
                let revision = entry.revision;
                let own = *entry.key == *self.host;
                view.hosts.insert(entry.key, Seen { at, revision, beat });
                if own {
                    self.own_beat.notify_waiters();
                }
            }
            kv::Operation::Delete | kv::Operation::Purge => {
                view.hosts.remove(&entry.key);
            }
        }
    }

    /// Lease `id`'s entry, from the watch or read from the store, into this host's view.
    pub(crate) fn saw_lease_entry(&self, id: &str, entry: &kv::Entry) {
        let host = (entry.operation == kv::Operation::Put)
            .then(|| String::from_utf8_lossy(&entry.value).into_owned());
        let mut view = self.view.lock().expect("view lock");
        view.saw_lease(id, entry.revision, host);
    }

    /// The heartbeat and placement, every [`HEARTBEAT`]. A heartbeat written and acknowledged
    /// renews this host's leases: its `RunUntil` moves to [`SELF_STOP_AFTER`] after the
    /// heartbeat was sent. Once that passes, guests stop at their next slice and nothing leaves
    /// for an actor; here every actor is stopped and the term ended before the next renewal.
    async fn place(self: Arc<Self>, broker: Arc<Broker>) {
        let mut ticks = tokio::time::interval(HEARTBEAT);
        // After a pause (a stopped process) the next beat is a tick away, not a burst of them.
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut outage = super::Outage::default();
        loop {
            ticks.tick().await;
            if self.run_until.lapsed() {
                self.stop_everything(&broker).await;
            }
            let term = self.run_until.term();
            let (_, value) = Beat::of(broker.local_states().await);
            let sent = Instant::now();
            let beat = self.hosts.put(&*self.host, value.into());
            match tokio::time::timeout(SELF_STOP_AFTER, beat).await {
                Ok(Ok(revision)) => {
                    outage.ended(|| format!("host {}: its heartbeat is written", self.host));
                    if !self.run_until.renewed(term, sent, sent + SELF_STOP_AFTER) {
                        continue;
                    }
                    self.own_beat_seen(revision).await;
                }
                Ok(Err(e)) => {
                    outage
                        .failed(|| format!("host {}: cannot write its heartbeat: {e}", self.host));
                    continue;
                }
                Err(_) => {
                    outage.failed(|| {
                        format!(
                            "host {}: its heartbeat was not acknowledged within {} s",
                            self.host,
                            SELF_STOP_AFTER.as_secs()
                        )
                    });
                    continue;
                }
            }
            self.place_once(&broker).await;
        }
    }

    /// Waits, for half a heartbeat at most, until this host's heartbeat of `revision` came
    /// through the watch: the others are judged against it ([`View::alive`]) rather than
    /// against the one before, half a second older, so a dead host's actors are taken half a
    /// second sooner. A stalled watch only costs the wait.
    async fn own_beat_seen(&self, revision: u64) {
        let deadline = tokio::time::Instant::now() + HEARTBEAT / 2;
        loop {
            let seen = self.own_beat.notified();
            tokio::pin!(seen);
            // Registered before the check, so a heartbeat between the two wakes us.
            seen.as_mut().enable();
            let came = {
                let view = self.view.lock().expect("view lock");
                view.hosts
                    .get(&*self.host)
                    .is_some_and(|own| own.revision >= revision)
            };
            if came || tokio::time::timeout_at(deadline, seen).await.is_err() {
                return;
            }
        }
    }

    /// This host's deadline passed: ends the term (nothing begun in it runs or leaves the host
    /// again), stops every actor here at once, and looks at the others afresh. Returns once
    /// every actor is down, so the renewal that follows cannot revive any.
    async fn stop_everything(self: &Arc<Self>, broker: &Arc<Broker>) {
        self.run_until.end_term();
        let mut ids: BTreeSet<ActorId> = broker.local_ids().into_iter().collect();
        {
            let mut view = self.view.lock().expect("view lock");
            ids.extend(
                view.held
                    .keys()
                    .filter(|key| !super::is_led_native(key))
                    .filter_map(|key| ActorId::parse(key).ok()),
            );
            view.look_again();
        }
        tracing::warn!(
            "host {}: no lease renewal completed for {} s; its {} actors are stopped here \
             (other hosts may take them) before it renews",
            self.host,
            SELF_STOP_AFTER.as_secs(),
            ids.len()
        );
        let stopped: Vec<oneshot::Receiver<()>> =
            ids.into_iter().map(|id| self.release(broker, id)).collect();
        for done in stopped {
            // A dropped sender means the operation queue ended with the host.
            let _ = done.await;
        }
    }

    /// One look at placement, right after a renewal: takes the actors that have no live host,
    /// starts the ones whose lease names this host, stops the ones taken over.
    async fn place_once(self: &Arc<Self>, broker: &Arc<Broker>) {
        let registry = broker.registry().await;
        let local: HashSet<ActorId> = broker.local_ids().into_iter().collect();
        for id in registry.actors.keys() {
            let Ok(id) = ActorId::parse(id) else { continue };
            let decision = {
                let view = self.view.lock().expect("view lock");
                if view.busy.contains(&id) {
                    continue;
                }
                match view.leases.get(id.as_str()) {
                    Some(lease) if *lease.host == *self.host => {
                        (!local.contains(&id)).then_some((None, false))
                    }
                    Some(lease) if view.alive(&lease.host, &self.host) => None,
                    lease => (view.least_loaded(&self.host) == *self.host)
                        .then(|| (lease.map(|l| l.revision), true)),
                }
            };
            let Some((revision, take)) = decision else {
                continue;
            };
            // Only a lease nobody held is a fresh start: one named this host (which did not run
            // the actor) or a dead one means the host that ran it died.
            if !(take && revision.is_none()) {
                let mut view = self.view.lock().expect("view lock");
                view.taken_over.insert(id.clone());
            }
            if take {
                if !self.take_lease(id.as_str(), revision).await {
                    continue;
                }
                tracing::info!("host {}: took the lease of actor {id}", self.host);
            }
            self.start_here(broker, id);
        }
        for id in local {
            let elsewhere = {
                let view = self.view.lock().expect("view lock");
                !view.busy.contains(&id)
                    && view
                        .leases
                        .get(id.as_str())
                        .is_some_and(|l| *l.host != *self.host)
            };
            if elsewhere {
                tracing::warn!(
                    "host {}: actor {id} was taken over by another host; stopping it here",
                    self.host
                );
                // Stopped on its queue; nothing waits for it.
                drop(self.release(broker, id));
            }
        }
    }

    /// Takes `id`'s lease for this host: made when it has none (`revision` `None`), else
    /// taken from the lease at `revision`. False when another host won.
    async fn take_lease(&self, id: &str, revision: Option<u64>) -> bool {
        let value = bytes::Bytes::copy_from_slice(self.host.as_bytes());
        let key = lease_key(id);
        let taken = match revision {
            None => self.registry.create(key, value).await.ok(),
            Some(revision) => self.registry.update(key, value, revision).await.ok(),
        };
        let Some(revision) = taken else { return false };
        let mut view = self.view.lock().expect("view lock");
        view.saw_lease(id, revision, Some(self.host.to_string()));
        true
    }

    /// Places a new actor on the least loaded live host (this one when `here`); returns that
    /// host.
    pub async fn place_new(&self, id: &ActorId, here: bool) -> anyhow::Result<String> {
        let host = match here {
            true => self.host.to_string(),
            false => self
                .view
                .lock()
                .expect("view lock")
                .least_loaded(&self.host),
        };
        let value = bytes::Bytes::copy_from_slice(host.as_bytes());
        // Made, never replaced: a lease another host took already (it saw the new actor in the
        // registry first) stays its own, and the actor runs there.
        let key = lease_key(id.as_str());
        let revision = match self.registry.create(&key, value).await {
            Ok(revision) => revision,
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                let entry = (self.registry.entry(&key).await)
                    .map_err(|e| anyhow::anyhow!("cannot place actor {id}: {e}"))?
                    .filter(|entry| entry.operation == kv::Operation::Put)
                    .ok_or_else(|| anyhow::anyhow!("cannot place actor {id}: its lease went"))?;
                let holder = String::from_utf8_lossy(&entry.value).into_owned();
                let mut view = self.view.lock().expect("view lock");
                view.saw_lease(id.as_str(), entry.revision, Some(holder.clone()));
                return Ok(holder);
            }
            Err(e) => return Err(anyhow::anyhow!("cannot place actor {id}: {e}")),
        };
        let mut view = self.view.lock().expect("view lock");
        view.saw_lease(id.as_str(), revision, Some(host.clone()));
        if host == *self.host {
            // The spawn that placed it here supervises it at once.
            view.hold(id.as_str(), revision);
        }
        Ok(host)
    }

    /// Starts `id` on this host, on its operation queue.
    fn start_here(self: &Arc<Self>, broker: &Arc<Broker>, id: ActorId) {
        self.view.lock().expect("view lock").busy.insert(id.clone());
        let (cluster, broker2) = (self.clone(), broker.clone());
        broker.queue_operation(
            &id.clone(),
            Box::pin(async move {
                // The watch may lag behind (this host may have been paused): the store says
                // whether the lease is still this host's, and at which revision, the token of
                // every write for the actor from now on.
                match cluster.lease_now(id.as_str()).await {
                    Some((host, revision)) if *host == *cluster.host => {
                        cluster
                            .view
                            .lock()
                            .expect("view lock")
                            .hold(id.as_str(), revision);
                        if let Err(e) = broker2.run_here(&id).await {
                            tracing::error!(
                                "host {}: actor {id} cannot start here: {e:#}",
                                cluster.host
                            );
                        }
                    }
                    other => tracing::info!(
                        "host {}: actor {id} is not started here: its lease is {}",
                        cluster.host,
                        other.map_or("gone".into(), |(host, _)| format!("host {host}'s"))
                    ),
                }
                cluster.view.lock().expect("view lock").busy.remove(&id);
            }),
        );
    }

    /// Stops `id` here, on its operation queue (another host runs it now, or may): the
    /// receiver hears when it is down.
    fn release(self: &Arc<Self>, broker: &Arc<Broker>, id: ActorId) -> oneshot::Receiver<()> {
        self.view.lock().expect("view lock").busy.insert(id.clone());
        let (cluster, broker2) = (self.clone(), broker.clone());
        let (done, stopped) = oneshot::channel();
        broker.queue_operation(
            &id.clone(),
            Box::pin(async move {
                broker2.release_here(&id).await;
                let mut view = cluster.view.lock().expect("view lock");
                view.busy.remove(&id);
                view.held.remove(id.as_str());
                // Nobody waits when placement stopped an actor taken over.
                let _ = done.send(());
            }),
        );
        stopped
    }

    /// Starts consuming `id`'s mailbox into `mailbox` (this host runs it now).
    pub fn consume(&self, id: &ActorId, mailbox: Arc<sausage_core::broker::mailbox::Mailbox>) {
        // Until this host stops running the actor (the task is aborted then) or its term ends
        // (the consumer is the new owner's then).
        let term = self.run_until.term();
        let task = tokio::spawn(
            self.streams
                .clone()
                .keep_consuming(id.clone(), mailbox, term),
        );
        if let Some(old) = self
            .consumers
            .lock()
            .expect("consumers lock")
            .insert(id.clone(), task)
        {
            old.abort();
        }
    }

    /// Stops consuming `id`'s mailbox: what was handed over and not read stays in the stream.
    pub fn stop_consuming(
        &self,
        id: &ActorId,
        mailbox: Option<&sausage_core::broker::mailbox::Mailbox>,
    ) {
        if let Some(task) = self.consumers.lock().expect("consumers lock").remove(id) {
            task.abort();
        }
        if let Some(mailbox) = mailbox {
            mailbox.release_arrived();
        }
        self.streams.forget_acks(id);
    }

    /// Forgets a removed actor: its consumer, its stream's messages, its snapshot and lease
    /// (the last, as the snapshot's removal is written under it).
    pub async fn forget_actor(&self, id: &ActorId) {
        self.stop_consuming(id, None);
        if let Err(e) = self.streams.remove(id).await {
            tracing::warn!("actor {id}: its mailbox stays on the cluster: {e:#}");
        }
        if let Err(e) = self.commits.remove(id).await {
            tracing::warn!(
                "actor {id}: its commits stay on the cluster ({e:#}); a new actor named `{id}` \
                 would start from its files"
            );
        }
        // Not harmless to leave: a new actor of the same id would restore it, so say so where
        // an operator looks.
        if let Err(e) = self.forget_snapshot(id).await {
            tracing::warn!(
                "{e:#}; a new actor named `{id}` would start from its files: remove them with \
                 `nats kv del {} snapshot.{id}`",
                super::REGISTRY_BUCKET
            );
        }
        let token = self.token(id.as_str()).revision;
        if let Err(e) = self
            .registry
            .delete_expect_revision(lease_key(id.as_str()), Some(token))
            .await
        {
            // Placement looks only at registered actors, but a new actor of the same id cannot
            // be placed while it is there (its registry entry is written under it).
            tracing::warn!(
                "actor {id}: its lease stays on the cluster ({e}); remove it with `nats kv del \
                 {} lease.{id}` before an actor of that name is spawned again",
                super::REGISTRY_BUCKET
            );
        }
        let mut view = self.view.lock().expect("view lock");
        view.held.remove(id.as_str());
        view.leases.remove(id.as_str());
    }

    /// The host whose lease `id` is under, when that is another live host.
    pub fn runs_elsewhere(&self, id: &ActorId) -> Option<String> {
        let view = self.view.lock().expect("view lock");
        view.elsewhere(id.as_str(), &self.host)
    }

    /// Returns once this host holds the lease `key` (of a native actor one host serves for
    /// all): taken when nobody holds it or its holder is gone.
    pub async fn lead(&self, key: &str) {
        loop {
            // Only while this host's own renewals are current (its view of the others too).
            if self.run_until.allows(self.run_until.term()) {
                let decision = {
                    let mut view = self.view.lock().expect("view lock");
                    match view.leases.get(key).cloned() {
                        Some(lease) if *lease.host == *self.host => {
                            view.hold(key, lease.revision);
                            return;
                        }
                        Some(lease) if view.alive(&lease.host, &self.host) => None,
                        lease => Some(lease.map(|l| l.revision)),
                    }
                };
                if let Some(revision) = decision
                    && self.take_lease(key, revision).await
                {
                    let mut view = self.view.lock().expect("view lock");
                    let revision = view.leases.get(key).map_or(NOT_HELD, |l| l.revision);
                    view.hold(key, revision);
                    return;
                }
            }
            tokio::time::sleep(HEARTBEAT).await;
        }
    }

    /// Returns once another host holds the lease `key` this host held, or this host's term
    /// ended (its leases lapsed: it leads again only once [`Cluster::lead`] says so).
    pub async fn lost(&self, key: &str) {
        let term = self.run_until.term();
        loop {
            tokio::time::sleep(HEARTBEAT).await;
            let mut view = self.view.lock().expect("view lock");
            let taken = view.leases.get(key).is_some_and(|l| *l.host != *self.host);
            if taken || self.run_until.term() != term {
                view.held.remove(key);
                return;
            }
        }
    }

    /// The host `id` runs on and its state there, as the last heartbeat said.
    pub fn placement_of(&self, id: &str) -> Option<(String, Option<String>)> {
        let view = self.view.lock().expect("view lock");
        let lease = view.leases.get(id)?;
        let state = view
            .hosts
            .get(&lease.host)
            .and_then(|s| s.beat.state_of(id));
        Some((lease.host.clone(), state))
    }

    /// Every host this one has heard of.
    pub fn hosts_view(&self) -> Vec<HostView> {
        let view = self.view.lock().expect("view lock");
        let mut hosts: Vec<HostView> = view
            .hosts
            .keys()
            .chain(std::iter::once(&self.host.to_string()))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|id| HostView {
                id: id.clone(),
                alive: view.alive(id, &self.host),
                actors: view
                    .leases
                    .iter()
                    .filter(|(key, l)| l.host == *id && !super::is_led_native(key))
                    .count(),
            })
            .collect();
        hosts.sort_by(|a, b| a.id.cmp(&b.id));
        hosts
    }

    /// Snapshots every actor this host runs, at least every [`super::SNAPSHOT_EVERY`].
    async fn snapshot_often(self: Arc<Self>, broker: Arc<Broker>) {
        let mut ticks = tokio::time::interval(super::snapshot_every());
        ticks.tick().await;
        loop {
            ticks.tick().await;
            for id in broker.local_ids() {
                if let Err(e) = self.snapshot(&broker.world, &id).await {
                    tracing::warn!("{e:#}");
                }
            }
        }
    }

    /// A graceful stop: every actor this host ran is snapshotted (the supervisors stopped
    /// them), its lease given up and this host's heartbeat marked leaving, so the others take
    /// them at once.
    pub async fn leave(&self, ran: &[ActorId], world: &sausage_core::world::World) {
        for id in ran {
            if let Err(e) = self.snapshot(world, id).await {
                tracing::warn!("{e:#}");
            }
        }
        let beat = Beat {
            states: BTreeMap::new(),
            running_unlisted: 0,
            leaving: true,
        };
        let value = serde_json::to_vec(&beat).expect("a heartbeat serialises");
        // Without the leaving beat the others take this host's actors after LEASE_TIMEOUT
        // instead of at once: slower, never wrong.
        let _ = self.hosts.put(&*self.host, value.into()).await;
        let leases: Vec<(String, u64)> = {
            let view = self.view.lock().expect("view lock");
            view.held.iter().map(|(id, r)| (id.clone(), *r)).collect()
        };
        for (id, revision) in leases {
            // A lease not given up is taken over once this host's heartbeat is LEASE_TIMEOUT
            // old; the revision keeps this from deleting one another host took meanwhile.
            let _ = self
                .registry
                .delete_expect_revision(lease_key(&id), Some(revision))
                .await;
        }
    }
}

/// Hands the last value of every key of `store` that `keys` matches, then every change, to
/// `apply`, for as long as the host runs: a watch that fails (the server restarted, say), or
/// that hands nothing for `quiet` when that is given, is made again, from each key's last
/// value, after a [`HEARTBEAT`].
async fn follow<F, Done>(
    store: kv::Store,
    keys: impl AsRef<str>,
    quiet: Option<Duration>,
    mut apply: F,
) where
    F: FnMut(kv::Entry) -> Done,
    Done: std::future::Future<Output = ()>,
{
    let mut outage = super::Outage::default();
    loop {
        match store.watch_with_history(keys.as_ref()).await {
            Ok(mut watch) => loop {
                outage.ended(|| format!("the cluster's {} is watched", store.name));
                let next = match quiet {
                    Some(quiet) => tokio::time::timeout(quiet, watch.next()).await,
                    None => Ok(watch.next().await),
                };
                match next {
                    Ok(Some(Ok(entry))) => apply(entry).await,
                    Ok(Some(Err(e))) => {
                        tracing::warn!("watching the cluster's {}: {e}", store.name);
                        break;
                    }
                    Ok(None) => break,
                    Err(_) => {
                        tracing::warn!(
                            "watching the cluster's {}: nothing came for {} s; watching again",
                            store.name,
                            quiet.unwrap_or_default().as_secs()
                        );
                        break;
                    }
                }
            },
            Err(e) => outage.failed(|| format!("cannot watch the cluster's {}: {e}", store.name)),
        }
        tokio::time::sleep(HEARTBEAT).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_too_big_to_send_names_only_the_actors_not_running() {
        let few: BTreeMap<String, String> = [("a", "running"), ("b", "crashed")]
            .iter()
            .map(|(id, s)| (id.to_string(), s.to_string()))
            .collect();
        let (beat, _) = Beat::of(few);
        assert_eq!(beat.states.len(), 2);
        assert_eq!(beat.state_of("a").as_deref(), Some("running"));
        assert_eq!(beat.state_of("zzz"), None, "not its actor");

        let mut many: BTreeMap<String, String> = (0..40_000)
            .map(|n| (format!("actor-number-{n}"), "running".to_string()))
            .collect();
        many.insert("broken-one".into(), "broken".into());
        let (beat, value) = Beat::of(many);
        assert!(value.len() <= BEAT_LIMIT, "{} bytes", value.len());
        assert_eq!(beat.running_unlisted, 40_000);
        assert_eq!(beat.state_of("broken-one").as_deref(), Some("broken"));
        assert_eq!(beat.state_of("actor-number-7").as_deref(), Some("running"));
    }

    #[test]
    fn a_host_not_heard_from_yet_is_alive_until_the_lease_timeout_after_joining() {
        let mut view = View::default();
        assert!(
            view.alive("other", "me"),
            "just joined: its heartbeat may be on its way"
        );
        view.joined = Instant::now() - LEASE_TIMEOUT;
        assert!(!view.alive("other", "me"));
        assert!(view.alive("me", "me"));
        view.hosts.insert(
            "other".into(),
            Seen {
                at: Instant::now(),
                revision: 1,
                beat: Beat::default(),
            },
        );
        assert!(view.alive("other", "me"));
        view.hosts.get_mut("other").unwrap().beat.leaving = true;
        assert!(
            !view.alive("other", "me"),
            "a host that left is gone at once"
        );
    }

    #[test]
    fn a_host_is_dead_only_once_this_one_has_heard_itself_for_the_lease_timeout_without_it() {
        let mut view = View::default();
        let seen = |ago: Duration, revision: u64| Seen {
            at: Instant::now() - ago,
            revision,
            beat: Beat::default(),
        };
        // The watch stalled half a minute ago: no heartbeat came since, this host's own
        // neither, so the other, heard a second before it, is not dead.
        view.hosts
            .insert("me".into(), seen(Duration::from_secs(30), 7));
        view.hosts
            .insert("other".into(), seen(Duration::from_secs(31), 3));
        assert!(view.alive("other", "me"));
        // This host's own heartbeat comes through again; the other's does not.
        view.hosts.insert("me".into(), seen(Duration::ZERO, 8));
        assert!(!view.alive("other", "me"));
    }

    #[test]
    fn the_least_loaded_live_host_gets_new_actors_and_ties_go_by_id() {
        let mut view = View::default();
        for host in ["b", "c"] {
            let beat = Beat::default();
            view.hosts.insert(
                host.into(),
                Seen {
                    at: Instant::now(),
                    revision: 1,
                    beat,
                },
            );
        }
        let lease = |host: &str| Lease {
            host: host.into(),
            revision: 1,
        };
        view.leases.insert("x".into(), lease("a"));
        view.leases.insert("y".into(), lease("b"));
        view.leases.insert("scheduler".into(), lease("c"));
        assert_eq!(
            view.least_loaded("a"),
            "c",
            "the scheduler's lease is not a load"
        );
        view.leases.insert("z".into(), lease("c"));
        assert_eq!(view.least_loaded("a"), "a", "a tie goes to the first id");
    }
}
