//! Which host runs each actor: leases in [`super::LEASES_BUCKET`] and heartbeats in
//! [`super::HOSTS_BUCKET`].
//!
//! Every [`super::HEARTBEAT`] a host writes its heartbeat (how many actors it runs and their
//! states), which renews all its leases at once, and then places: an actor without a lease, or
//! whose host has not been heard from for [`super::LEASE_TIMEOUT`], is taken (compare-and-set,
//! so only one host wins) by the least loaded live host; an actor this host runs whose lease
//! names another host is stopped here (it was taken over); a host whose own heartbeat could not
//! be written for that long stops every actor, as the others will take them. Liveness is
//! judged on each host's own clock, by when a heartbeat last changed, so clocks need not agree.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::{Cluster, HEARTBEAT, LEASE_TIMEOUT, SNAPSHOT_EVERY};
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
}

struct Seen {
    at: Instant,
    beat: Beat,
}

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
        }
    }
}

impl View {
    fn alive(&self, host: &str, me: &str) -> bool {
        if host == me {
            return true;
        }
        match self.hosts.get(host) {
            Some(seen) => !seen.beat.leaving && seen.at.elapsed() < LEASE_TIMEOUT,
            None => self.joined.elapsed() < LEASE_TIMEOUT,
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
        tokio::spawn(follow(self.hosts.clone(), move |entry| {
            cluster.saw_host(entry);
            std::future::ready(())
        }));
        let cluster = self.clone();
        tokio::spawn(follow(self.leases.clone(), move |entry| {
            cluster.saw_lease(entry);
            std::future::ready(())
        }));
        let shared = broker.clone();
        tokio::spawn(follow(self.registry.clone(), move |entry| {
            let broker = shared.clone();
            async move { super::shared::apply_registry_entry(&broker, entry).await }
        }));
        tokio::spawn(self.clone().place(broker.clone()));
        tokio::spawn(self.clone().sync_people(broker.world.clone()));
        tokio::spawn(self.clone().snapshot_often(broker));
        Ok(())
    }

    fn saw_host(&self, entry: kv::Entry) {
        let mut view = self.view.lock().expect("view lock");
        match entry.operation {
            kv::Operation::Put => {
                let beat = serde_json::from_slice(&entry.value).unwrap_or_default();
                let at = Instant::now();
                view.hosts.insert(entry.key, Seen { at, beat });
            }
            kv::Operation::Delete | kv::Operation::Purge => {
                view.hosts.remove(&entry.key);
            }
        }
    }

    fn saw_lease(&self, entry: kv::Entry) {
        let mut view = self.view.lock().expect("view lock");
        match entry.operation {
            kv::Operation::Put => {
                let host = String::from_utf8_lossy(&entry.value).into_owned();
                let revision = entry.revision;
                view.leases.insert(entry.key, Lease { host, revision });
            }
            kv::Operation::Delete | kv::Operation::Purge => {
                view.leases.remove(&entry.key);
            }
        }
    }

    /// The heartbeat and placement, every [`HEARTBEAT`].
    async fn place(self: Arc<Self>, broker: Arc<Broker>) {
        let mut last_beat = Instant::now();
        let mut ticks = tokio::time::interval(HEARTBEAT);
        loop {
            ticks.tick().await;
            let (_, value) = Beat::of(broker.local_states().await);
            match self.hosts.put(&*self.host, value.into()).await {
                Ok(_) => last_beat = Instant::now(),
                Err(e) => tracing::warn!("host {}: cannot write its heartbeat: {e}", self.host),
            }
            if last_beat.elapsed() >= LEASE_TIMEOUT {
                // The others may have taken every actor: none runs twice.
                for id in broker.local_ids() {
                    self.release(&broker, id);
                }
                continue;
            }
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
                if take && !self.take_lease(id.as_str(), revision).await {
                    continue;
                }
                self.start_here(&broker, id, take);
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
                    self.release(&broker, id);
                }
            }
        }
    }

    /// Takes `id`'s lease for this host: made when it has none (`revision` `None`), else
    /// taken from the lease at `revision`. False when another host won.
    async fn take_lease(&self, id: &str, revision: Option<u64>) -> bool {
        let value = bytes::Bytes::copy_from_slice(self.host.as_bytes());
        let taken = match revision {
            None => self.leases.create(id, value).await.ok(),
            Some(revision) => self.leases.update(id, value, revision).await.ok(),
        };
        let Some(revision) = taken else { return false };
        self.view.lock().expect("view lock").leases.insert(
            id.to_string(),
            Lease {
                host: self.host.to_string(),
                revision,
            },
        );
        true
    }

    /// Places a new actor on the least loaded live host; returns that host.
    pub async fn place_new(&self, id: &ActorId) -> anyhow::Result<String> {
        let host = self
            .view
            .lock()
            .expect("view lock")
            .least_loaded(&self.host);
        let value = bytes::Bytes::copy_from_slice(host.as_bytes());
        let revision = self
            .leases
            .put(id.as_str(), value)
            .await
            .map_err(|e| anyhow::anyhow!("cannot place actor {id}: {e}"))?;
        self.view.lock().expect("view lock").leases.insert(
            id.to_string(),
            Lease {
                host: host.clone(),
                revision,
            },
        );
        Ok(host)
    }

    /// Starts `id` on this host, on its operation queue; `restore` when it last ran elsewhere.
    fn start_here(self: &Arc<Self>, broker: &Arc<Broker>, id: ActorId, restore: bool) {
        self.view.lock().expect("view lock").busy.insert(id.clone());
        let (cluster, broker2) = (self.clone(), broker.clone());
        broker.queue_operation(
            &id.clone(),
            Box::pin(async move {
                if let Err(e) = broker2.run_here(&id, restore).await {
                    tracing::error!("host {}: actor {id} cannot start here: {e:#}", cluster.host);
                }
                cluster.view.lock().expect("view lock").busy.remove(&id);
            }),
        );
    }

    /// Stops `id` here, on its operation queue (another host runs it now).
    fn release(self: &Arc<Self>, broker: &Arc<Broker>, id: ActorId) {
        self.view.lock().expect("view lock").busy.insert(id.clone());
        let (cluster, broker2) = (self.clone(), broker.clone());
        broker.queue_operation(
            &id.clone(),
            Box::pin(async move {
                broker2.release_here(&id).await;
                cluster.view.lock().expect("view lock").busy.remove(&id);
            }),
        );
    }

    /// Starts consuming `id`'s mailbox into `mailbox` (this host runs it now).
    pub fn consume(&self, id: &ActorId, mailbox: Arc<sausage_core::broker::mailbox::Mailbox>) {
        let streams = self.streams.clone();
        let actor = id.clone();
        // Until this host stops running the actor (the task is aborted then): a consumer that
        // ends (the server restarted, say) is made again, and redelivers only what the mailbox
        // does not hold yet.
        let task = tokio::spawn(async move {
            loop {
                match streams
                    .clone()
                    .consume(actor.clone(), mailbox.clone())
                    .await
                {
                    Ok(()) => tracing::warn!("actor {actor}: its mailbox's consumer ended"),
                    Err(e) => tracing::warn!("actor {actor}: {e:#}"),
                }
                tokio::time::sleep(HEARTBEAT).await;
            }
        });
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

    /// Forgets a removed actor: its consumer, its stream's messages, its lease and snapshot.
    pub async fn forget_actor(&self, id: &ActorId) {
        self.stop_consuming(id, None);
        if let Err(e) = self.streams.remove(id).await {
            tracing::warn!("actor {id}: its mailbox stays on the cluster: {e:#}");
        }
        // A lease left behind is harmless: placement looks only at registered actors, and a
        // new actor of the same id overwrites it (`place_new` puts, it does not compare).
        let _ = self.leases.delete(id.as_str()).await;
        self.view
            .lock()
            .expect("view lock")
            .leases
            .remove(id.as_str());
        // Not harmless: a new actor of the same id that starts on another host would restore
        // it, so say so where an operator looks.
        if let Err(e) = self.snapshots.delete(id.as_str()).await {
            tracing::warn!(
                "actor {id}: its last snapshot stays on the cluster ({e}); a new actor named \
                 `{id}` would start from its files: remove it with `nats object del \
                 {} {id}`",
                super::SNAPSHOTS_BUCKET
            );
        }
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
            let decision = {
                let view = self.view.lock().expect("view lock");
                match view.leases.get(key) {
                    Some(lease) if *lease.host == *self.host => return,
                    Some(lease) if view.alive(&lease.host, &self.host) => None,
                    lease => Some(lease.map(|l| l.revision)),
                }
            };
            if let Some(revision) = decision
                && self.take_lease(key, revision).await
            {
                return;
            }
            tokio::time::sleep(HEARTBEAT).await;
        }
    }

    /// Returns once another host holds the lease `key` this host held.
    pub async fn lost(&self, key: &str) {
        loop {
            tokio::time::sleep(HEARTBEAT).await;
            let view = self.view.lock().expect("view lock");
            if view.leases.get(key).is_some_and(|l| *l.host != *self.host) {
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

    /// Snapshots every actor this host runs, at least every [`SNAPSHOT_EVERY`].
    async fn snapshot_often(self: Arc<Self>, broker: Arc<Broker>) {
        let mut ticks = tokio::time::interval(SNAPSHOT_EVERY);
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
            view.leases
                .iter()
                .filter(|(_, l)| *l.host == *self.host)
                .map(|(id, l)| (id.clone(), l.revision))
                .collect()
        };
        for (id, revision) in leases {
            // A lease not given up is taken over once this host's heartbeat is LEASE_TIMEOUT
            // old; the revision keeps this from deleting one another host took meanwhile.
            let _ = self
                .leases
                .delete_expect_revision(&id, Some(revision))
                .await;
        }
    }
}

/// Hands every key's last value of `store`, then every change, to `apply`, for as long as the
/// host runs: a watch that fails (the server restarted, say) is made again, from each key's last
/// value, after a [`HEARTBEAT`].
async fn follow<F, Done>(store: kv::Store, mut apply: F)
where
    F: FnMut(kv::Entry) -> Done,
    Done: std::future::Future<Output = ()>,
{
    loop {
        match store.watch_with_history(">").await {
            Ok(mut watch) => {
                while let Some(entry) = watch.next().await {
                    match entry {
                        Ok(entry) => apply(entry).await,
                        Err(e) => {
                            tracing::warn!("watching the cluster's {}: {e}", store.name);
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::error!("cannot watch the cluster's {}: {e}", store.name),
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
    fn the_least_loaded_live_host_gets_new_actors_and_ties_go_by_id() {
        let mut view = View::default();
        for host in ["b", "c"] {
            let beat = Beat::default();
            view.hosts.insert(
                host.into(),
                Seen {
                    at: Instant::now(),
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
