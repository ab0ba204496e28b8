//! The broker (DESIGN §3): the native actor that routes messages, owns the mailboxes, runs
//! every WASM actor under a supervisor, and answers requests sent to `broker`.
//!
//! It accepts `.wasm` files and knows no source language. Operations on one actor never run
//! at once: they wait on that actor's operation queue, in arrival order.

mod candidate;
pub mod counters;
pub mod holds;
pub mod journal;
mod limits;
pub mod mailbox;
pub mod ports;
pub mod principal;
mod requests;
mod rewind;
pub mod router;
mod routes;
mod shadow;
mod spans;
pub mod stdio;
mod subagents;
pub mod supervisor;
pub mod transcript;
pub mod window;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::message::{ActorId, Envelope, NATIVES};
use crate::runtime::{Program, Runtime};
use crate::world::{Registry, State, Status, World};
use mailbox::Mailbox;
use ports::Ports;
use router::Router;
use supervisor::{ActorHandle, CrashLoop, Preread, Supervisor};

/// A registered actor on its way to being supervised at the start of a run.
struct Starting {
    id: ActorId,
    version: u32,
    running: bool,
    wasm: std::path::PathBuf,
    /// Its `status.json` as the last host left it (read beside the compile, off the world's
    /// thread).
    status: Status,
}

/// Actors of one program ready to be supervised, handed from a start's worker to the world's
/// thread.
struct Batch {
    program: std::result::Result<Program, String>,
    actors: Vec<(Starting, Preread)>,
}

/// Actors handed to the world's thread at once: a batch costs it one wake, and the first
/// instances are created while the files of later actors are still being read.
const START_BATCH: usize = 64;
/// A world that starts at least this many actors at once packs each actor's first instance as
/// soon as it waits for its first message (`runtime::hibernate`), rather than keeping every
/// instance's pages until the sweeps after the start pack the idle ones: its peak while it
/// starts stays near what its actors take once idle.
const PACK_AT_START_FROM: usize = 256;

/// Instances created before an actor's own at a start past which its `status.json` says
/// `starting` at once. Each takes about 100 µs to create, so an actor queued behind more than
/// this would be reported `starting` by its supervisor anyway (`STARTING_REPORT_AFTER`):
/// written here, on the blocking pool, rather than by the world's thread for each.
const STARTS_AHEAD_REPORTED: usize = 64;

/// Compiles the program of `group` and hands its actors to the world's thread in batches,
/// each with what its first start reads. False when nobody takes them any more (the start
/// failed).
fn prepare_group(
    runtime: &Runtime,
    world: &World,
    group: Vec<Starting>,
    placed: &AtomicUsize,
    ready: &mpsc::Sender<Batch>,
) -> bool {
    let Some(first) = group.first() else {
        return true;
    };
    let program = std::fs::read(&first.wasm)
        .map_err(anyhow::Error::from)
        .and_then(|bytes| runtime.compile(&bytes))
        .map_err(|e| format!("{e:#}"));
    let mut actors = group.into_iter();
    loop {
        let batch: Vec<(Starting, Preread)> = actors
            .by_ref()
            .take(START_BATCH)
            .map(|actor| prepare(world, actor, program.is_ok(), placed))
            .collect();
        if batch.is_empty() {
            return true;
        }
        let batch = Batch {
            program: program.clone(),
            actors: batch,
        };
        if ready.blocking_send(batch).is_err() {
            return false;
        }
    }
}

/// Reads `actor`'s status and what its first start needs. A host that died leaves `running`
/// behind, which is not true until an instance runs; an actor queued behind many others says
/// `starting` from now on.
fn prepare(
    world: &World,
    mut actor: Starting,
    will_run: bool,
    placed: &AtomicUsize,
) -> (Starting, Preread) {
    let mut status = world.read_status(&actor.id).unwrap_or_default();
    let queued = will_run
        && actor.running
        && placed.fetch_add(1, Ordering::Relaxed) >= STARTS_AHEAD_REPORTED;
    if status.state == State::Running || (queued && status.state != State::Starting) {
        status.state = State::Starting;
        if let Err(e) = world.write_status(&actor.id, &status) {
            tracing::warn!("{e:#}");
        }
    }
    actor.status = status;
    let preread = Preread::read(world, &actor.id);
    (actor, preread)
}

/// An operation on one actor, waiting its turn.
pub type Operation = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

pub struct Broker {
    pub world: World,
    pub runtime: Arc<Runtime>,
    pub router: Arc<Router>,
    /// The registry as last saved; every change goes through [`Broker::update_registry`].
    registry: tokio::sync::Mutex<Registry>,
    /// Supervisors of the WASM actors.
    actors: Mutex<HashMap<ActorId, ActorHandle>>,
    /// One operation queue per actor id: broker → that actor's operation task, which runs the
    /// operations (spawn, upgrade, rollback, stop, start, remove, crash-loop recovery) one
    /// after another in arrival order. The task ends when the host does.
    operations: Mutex<HashMap<ActorId, mpsc::UnboundedSender<Operation>>>,
    /// Requests being answered and operations queued or running, on every actor.
    under_way: Arc<AtomicUsize>,
    /// Supervisors → broker: crash loops after upgrades. `serve` takes the receiver.
    crash_loops: mpsc::UnboundedSender<CrashLoop>,
    crash_loop_reports: Mutex<Option<mpsc::UnboundedReceiver<CrashLoop>>>,
    /// One permit per request being answered: past [`REQUESTS_IN_FLIGHT`], requests wait in
    /// the broker's mailbox (bounded like every mailbox), so their senders slow down instead
    /// of the host's memory growing.
    requests_in_flight: Arc<tokio::sync::Semaphore>,
    /// The cluster this host runs its part of the world in (DESIGN §16); `None` on one host.
    pub cluster: Option<Ports>,
    /// What the metrics count beyond the mailboxes (DESIGN §22).
    pub counters: Arc<counters::Counters>,
    /// The per-person locks that keep a limit's check and the change it allowed together.
    admissions: limits::Admissions,
    /// The registry's HTTP routes as the public address looks them up (DESIGN §24), made anew
    /// at each change of them.
    routes: std::sync::RwLock<Arc<crate::world::routes::RouteTable>>,
    /// Where this host serves the routes, once it does: what replies about routes name.
    public_address: std::sync::OnceLock<std::net::SocketAddr>,
    /// Held while a sub-agent is made, so that two made at once get two names (`subagents`).
    delegating: tokio::sync::Mutex<()>,
    /// The decided approvals this host is carrying out, each started once (`holds`).
    carrying: Mutex<std::collections::HashSet<String>>,
    /// `holds` → `serve`: approved requests, to answer again as if they had just come (at most
    /// one per decision); `serve` takes the receiver, and the channel closes with the broker.
    resumed: mpsc::UnboundedSender<Arc<Envelope>>,
    resumed_requests: Mutex<Option<mpsc::UnboundedReceiver<Arc<Envelope>>>>,
}

/// Requests the broker answers at once; the next waits in its mailbox until one is answered.
pub const REQUESTS_IN_FLIGHT: usize = 256;

/// How often every running actor's stdin is checked for a write stalled past its timeout
/// (`mailbox::STDIN_WRITE_TIMEOUT`): one sweep of every mailbox by one task, so idle actors
/// cost no timer and no wake-up.
const STALL_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

impl Broker {
    /// Opens a world: cleans what a crashed host left, compiles every registered actor and
    /// starts the ones that were running. It returns once the temporaries an earlier host left
    /// are gone; that walk of the whole world (a million folders with 100,000 actors) runs on
    /// the blocking pool while the actors start, since it leaves this process's own alone.
    pub async fn start(world: World, runtime: Arc<Runtime>) -> Result<Arc<Broker>> {
        Broker::start_in(world, runtime, None).await
    }

    /// [`Broker::start`], as one host of `cluster` when there is one: then no actor starts
    /// here until placement gives this host its lease (the caller runs the cluster's placement
    /// once this returns).
    pub async fn start_in(
        world: World,
        runtime: Arc<Runtime>,
        cluster: Option<Ports>,
    ) -> Result<Arc<Broker>> {
        let registry = world.load_registry()?;
        settle_swaps(&world, &registry)?;
        // Emptied before the walk starts, so that the two never remove the same files.
        clear_dir(&world.scratch_dir())?;
        clear_dir(&world.windows_dir())?;
        // After a graceful stop there is nothing to walk for (100,000 actors' folders take
        // seconds of a core to walk).
        let ended_cleanly = world.take_ended_cleanly()?;
        let cleaning = tokio::task::spawn_blocking({
            let world = world.clone();
            move || {
                if ended_cleanly {
                    return Ok(0);
                }
                crate::fs::clean_temporaries(world.root(), &world.old_cargo_build_dirs())
                    .with_context(|| {
                        format!("{}: cannot clean temporary files", world.root().display())
                    })
            }
        });

        let journal = journal::Journal::open(&world.journal_dir()).with_context(|| {
            format!(
                "{}: cannot open the mailbox journal",
                world.journal_dir().display()
            )
        })?;
        let waiting = journal.unclaimed();
        if !waiting.is_empty() {
            let each: Vec<String> = waiting.iter().map(|(a, n)| format!("{a}: {n}")).collect();
            tracing::info!(
                "{} messages accepted before the last run ended are waiting ({}); \
                 each actor gets its own as it runs",
                waiting.values().sum::<usize>(),
                each.join(", ")
            );
        }
        let router = Arc::new(Router::new(
            world.clone(),
            world.load_next_message_id(),
            Arc::new(journal),
        ));
        for native in NATIVES.iter().filter(|n| n.made_at_init) {
            router.add(&ActorId::parse(native.id).expect("native ids are valid"));
        }
        if let Some(cluster) = &cluster {
            cluster.placement.attach(&router).await?;
        }
        let (crash_loops, reports) = mpsc::unbounded_channel();
        let (resumed, resumed_requests) = mpsc::unbounded_channel();
        let broker = Arc::new(Broker {
            world,
            runtime,
            router,
            registry: tokio::sync::Mutex::new(registry.clone()),
            actors: Mutex::default(),
            operations: Mutex::default(),
            under_way: Arc::default(),
            crash_loops,
            crash_loop_reports: Mutex::new(Some(reports)),
            requests_in_flight: Arc::new(tokio::sync::Semaphore::new(REQUESTS_IN_FLIGHT)),
            counters: Arc::default(),
            cluster,
            admissions: limits::Admissions::default(),
            routes: std::sync::RwLock::default(),
            public_address: std::sync::OnceLock::new(),
            delegating: tokio::sync::Mutex::default(),
            carrying: Mutex::default(),
            resumed,
            resumed_requests: Mutex::new(Some(resumed_requests)),
        });
        broker.apply_subscriptions(&registry);
        broker.apply_routes(&registry);
        tokio::spawn(drop_stalled_writes(
            Arc::downgrade(&broker.router),
            broker.world.clone(),
        ));

        if broker.cluster.is_some() {
            for id in registry.actors.keys() {
                if let Ok(id) = ActorId::parse(id) {
                    broker.router.add(&id);
                }
            }
            cleaning.await.context("cleaning temporary files")??;
            return Ok(broker);
        }

        // Actors whose files are one (hard links of one install share an inode) share one
        // program: each `actor.wasm` is read and compiled once. Every actor has its mailbox
        // before any runs: a message to one still being prepared waits there.
        let mut files: HashMap<(u64, u64), Vec<Starting>> = HashMap::new();
        let mut alone = Vec::new();
        for (id, entry) in &registry.actors {
            let id = ActorId::parse(id).map_err(|e| {
                anyhow::anyhow!("{}: {e}; fix the registry", crate::world::REGISTRY)
            })?;
            broker.router.add(&id);
            let wasm = broker
                .world
                .version_dir(&id, entry.version)
                .join("actor.wasm");
            let file = std::fs::metadata(&wasm).map(|m| (m.dev(), m.ino()));
            let starting = Starting {
                id,
                version: entry.version,
                running: entry.running,
                wasm,
                status: Status::default(),
            };
            match file {
                Ok(file) => files.entry(file).or_default().push(starting),
                // It compiles alone, and fails with its own error.
                Err(_) => alone.push(vec![starting]),
            }
        }
        broker
            .start_all(files.into_values().chain(alone).collect())
            .await?;
        cleaning.await.context("cleaning temporary files")??;
        Ok(broker)
    }

    /// Serves requests to `broker`, and rolls back crash loops, until the host stops.
    pub async fn serve(self: &Arc<Self>) {
        let mailbox = self
            .router
            .mailbox(&ActorId::broker())
            .expect("the broker has a mailbox");
        let mut crash_loops = self
            .crash_loop_reports
            .lock()
            .expect("broker lock")
            .take()
            .expect("serve runs once");
        tokio::spawn(self.clone().keep_approvals());
        let mut resumed =
            (self.resumed_requests.lock().expect("broker lock").take()).expect("serve runs once");
        let broker = self.clone();
        tokio::spawn(async move {
            while let Some(request) = resumed.recv().await {
                broker.take_request(request, None);
            }
        });
        loop {
            // Waits for: a request to the broker (once fewer than REQUESTS_IN_FLIGHT are being
            // answered), or a supervisor's crash-loop report. Each is handled in its own task;
            // operations on one actor queue on its lock. Both arms are cancel-safe: a permit
            // taken for a request that did not come is given back.
            let next_request = async {
                let permit = self
                    .requests_in_flight
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the semaphore is never closed");
                (permit, mailbox.recv().await)
            };
            tokio::select! {
                (permit, request) = next_request => self.take_request(request, Some(permit)),
                Some(report) = crash_loops.recv() => {
                    let id = report.actor.clone();
                    self.queue_operation(&id, Box::pin(self.clone().recover(report)));
                }
            }
        }
    }

    /// Answers `request` in a task of its own, queued behind the other operations on the actor
    /// it is about; on a cluster, one about an actor another host runs goes to that host.
    /// `permit` is held until it is answered.
    fn take_request(
        self: &Arc<Self>,
        request: Arc<Envelope>,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        let body = request.body_value();
        let operand = requests::operand(&body);
        if let (Some(cluster), Some(id)) = (&self.cluster, &operand)
            && let Some(host) = cluster.placement.runs_elsewhere(id)
        {
            // Operations on an actor run where it runs; that host answers. Files the request
            // names go with it.
            let (cluster, world) = (cluster.clone(), self.world.clone());
            tokio::spawn(async move {
                let request = cluster.shared.ship_files(&world, request, &body).await;
                cluster.placement.forward_request(&host, request);
                drop(permit);
            });
            return;
        }
        let answer = self.clone().answer(request, body);
        let under_way = UnderWay::count(&self.under_way);
        let job = Box::pin(async move {
            answer.await;
            drop((permit, under_way));
        });
        match operand {
            Some(id) => self.queue_operation(&id, job),
            None => drop(tokio::spawn(job)),
        }
    }

    /// Stops every WASM actor gracefully, all at once, and waits for them. Their registry
    /// entries keep `running`, so the next run starts them again.
    pub async fn shutdown(&self) {
        let handles: Vec<ActorHandle> = self
            .actors
            .lock()
            .expect("actors lock")
            .values()
            .cloned()
            .collect();
        let mut stopping = JoinSet::new();
        for handle in handles {
            stopping.spawn(async move { handle.stop().await });
        }
        while stopping.join_next().await.is_some() {}
        if let Some(cluster) = &self.cluster {
            cluster
                .placement
                .leave(&self.local_ids(), &self.world)
                .await;
        }
        // Every instance is down and its files committed or discarded; with no operation or
        // request under way either, nothing is half-written and the next start need not walk
        // the world for temporaries. (One a task still writes as the process ends stays until
        // a start after a crash walks: a hidden file, never read.) A host of a cluster also
        // takes snapshots and restores them in tasks of its own: its starts always walk.
        let idle = self.under_way.load(Ordering::SeqCst) == 0 && self.cluster.is_none();
        if idle && let Err(e) = self.world.mark_ended_cleanly() {
            tracing::warn!("{e:#}; the next start walks the world for temporaries");
        }
    }

    /// The linear memory of every running instance this host supervises, in bytes.
    pub fn memory_in_use(&self) -> HashMap<ActorId, usize> {
        self.actors
            .lock()
            .expect("actors lock")
            .iter()
            .map(|(id, handle)| (id.clone(), handle.memory.load(Ordering::Relaxed)))
            .collect()
    }

    /// How long until `id`, which this host supervises, restarts after a crash; `None` when it
    /// is not waiting to.
    pub fn restarts_in(&self, id: &ActorId) -> Option<Duration> {
        let at = (self.actors.lock().expect("actors lock").get(id))?
            .restarting
            .load(Ordering::Relaxed);
        let at = UNIX_EPOCH + Duration::from_millis(at);
        (at > UNIX_EPOCH)
            .then(|| at.duration_since(SystemTime::now()).ok())
            .flatten()
    }

    /// The WASM actors this host supervises.
    pub fn local_ids(&self) -> Vec<ActorId> {
        self.actors
            .lock()
            .expect("actors lock")
            .keys()
            .cloned()
            .collect()
    }

    /// The state of each WASM actor this host supervises, from its `status.json`.
    pub async fn local_states(&self) -> BTreeMap<String, String> {
        let (world, ids) = (self.world.clone(), self.local_ids());
        tokio::task::spawn_blocking(move || {
            ids.iter()
                .map(|id| {
                    let state = world.read_status(id).unwrap_or_default().state;
                    let state = serde_json::to_value(state)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default();
                    (id.to_string(), state)
                })
                .collect()
        })
        .await
        .unwrap_or_default()
    }

    /// Starts `id` on this host (the cluster gave it the lease): its version fetched when this
    /// host's folder lacks it, its files restored from its last snapshot and every change
    /// committed since (the cluster's files are the truth, even when it last ran here: a
    /// change stored there may not have been made here before a kill), then supervised as at a
    /// start, its stream consumed.
    pub async fn run_here(&self, id: &ActorId) -> Result<()> {
        let cluster = self.cluster.as_ref().context("not in a cluster")?;
        if self.handle(id).is_some() {
            return Ok(());
        }
        let Some(entry) = self.registry().await.actors.get(id.as_str()).cloned() else {
            return Ok(());
        };
        cluster
            .shared
            .ensure_version(&self.world, id, entry.version)
            .await?;
        cluster.shared.take_credentials(&self.world, id).await?;
        let world = self.world.clone();
        let fresh = !world.source_dir(id).is_dir();
        if fresh {
            let (world, id) = (world.clone(), id.clone());
            tokio::task::spawn_blocking(move || {
                world.create_actor_dirs(&id)?;
                world.install_source(&id, entry.version)
            })
            .await
            .context("installing a source")??;
        }
        cluster.shared.restore_snapshot(&self.world, id).await?;
        let wasm = world.version_dir(id, entry.version).join("actor.wasm");
        let runtime = self.runtime.clone();
        let program = tokio::task::spawn_blocking(move || {
            std::fs::read(&wasm)
                .map_err(anyhow::Error::from)
                .and_then(|bytes| runtime.compile(&bytes))
        })
        .await
        .context("compiling an actor")??;
        let status = self.world.read_status(id).unwrap_or_default();
        tracing::info!("host {}: runs actor {id}", cluster.placement.host());
        let preread = Preread::read(&self.world, id);
        self.supervise(id, entry.version, program, entry.running, status, preread);
        Ok(())
    }

    /// Stops `id` here: another host runs it now. What its mailbox was handed and it did not
    /// read stays in its stream for that host.
    pub async fn release_here(&self, id: &ActorId) {
        let handle = self.actors.lock().expect("actors lock").remove(id);
        if let Some(handle) = handle {
            handle.stop().await;
        }
        if let Some(cluster) = &self.cluster {
            cluster
                .placement
                .stop_consuming(id, self.router.mailbox(id).as_deref());
        }
    }

    /// Another host changed `id`'s shared registry entry (`None`: removed it): this host's
    /// registry and routing follow.
    pub async fn apply_shared_entry(&self, id: &ActorId, entry: Option<crate::world::ActorEntry>) {
        let mut registry = self.registry.lock().await;
        if registry.actors.get(id.as_str()) == entry.as_ref() {
            return;
        }
        match entry {
            Some(entry) => {
                registry.actors.insert(id.to_string(), entry);
                self.router.add(id);
            }
            None => {
                registry.actors.remove(id.as_str());
                if self.handle(id).is_none() {
                    self.router.remove(id);
                }
            }
        }
        self.save_mirror(&registry).await;
    }

    /// Another host changed the subscriptions.
    pub async fn apply_shared_subscriptions(&self, subscriptions: BTreeMap<String, Vec<String>>) {
        let mut registry = self.registry.lock().await;
        if registry.subscriptions == subscriptions {
            return;
        }
        registry.subscriptions = subscriptions;
        self.apply_subscriptions(&registry);
        self.save_mirror(&registry).await;
    }

    /// Takes the route at `path` another host of the cluster made (`None`: removed).
    pub async fn apply_shared_route(&self, path: &str, route: Option<crate::world::routes::Route>) {
        let mut registry = self.registry.lock().await;
        if registry.routes.get(path) == route.as_ref() {
            return;
        }
        match route {
            Some(route) => registry.routes.insert(path.to_string(), route),
            None => registry.routes.remove(path),
        };
        self.apply_routes(&registry);
        self.save_mirror(&registry).await;
    }

    /// Saves this host's copy of the shared registry.
    async fn save_mirror(&self, registry: &Registry) {
        let (world, saved) = (self.world.clone(), registry.clone());
        match tokio::task::spawn_blocking(move || world.save_registry(&saved)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!("{e:#}"),
            Err(e) => tracing::error!("saving the registry failed: {e}"),
        }
    }

    /// Starts the actors of a run, `groups` of actors that share one `actor.wasm`. Workers on
    /// the blocking pool (one per core) compile each group's program, read what each of its
    /// actors' first start needs (`prepare`) and hand them over in batches, which this task
    /// supervises at once: the world's thread creates the first instances while the files of
    /// later actors are still being read.
    async fn start_all(self: &Arc<Self>, groups: Vec<Vec<Starting>>) -> Result<()> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let many = groups.iter().map(Vec::len).sum::<usize>() >= PACK_AT_START_FROM;
        let queue = Arc::new(Mutex::new(groups));
        let workers = cores.min(queue.lock().expect("start queue").len());
        let placed = Arc::new(AtomicUsize::new(0));
        let (ready, mut batches) = mpsc::channel::<Batch>(2 * workers.max(1));
        let mut working = JoinSet::new();
        for _ in 0..workers {
            let (queue, placed, ready) = (queue.clone(), placed.clone(), ready.clone());
            let (runtime, world) = (self.runtime.clone(), self.world.clone());
            working.spawn_blocking(move || {
                while let Some(group) = queue.lock().expect("start queue").pop() {
                    if !prepare_group(&runtime, &world, group, &placed, &ready) {
                        return;
                    }
                }
            });
        }
        drop(ready);
        while let Some(Batch { program, actors }) = batches.recv().await {
            for (actor, preread) in actors {
                let preread = match many {
                    true => preread.packed_at_first_wait(),
                    false => preread,
                };
                match &program {
                    Ok(program) => self.supervise(
                        &actor.id,
                        actor.version,
                        program.clone(),
                        actor.running,
                        actor.status,
                        preread,
                    ),
                    Err(e) => {
                        let e = format!("actor {}: {}: {e}", actor.id, actor.wasm.display());
                        tracing::error!("{e}; it cannot run until a good version is installed");
                        let mut status = actor.status;
                        status.state = State::Broken;
                        status.last_exit = Some(format!("cannot be compiled: {e}"));
                        if let Err(e) = self.world.write_status(&actor.id, &status) {
                            tracing::warn!("{e:#}");
                        }
                    }
                }
            }
        }
        while let Some(done) = working.join_next().await {
            done.context("preparing the actors' start")?;
        }
        Ok(())
    }

    /// Runs `id` under a supervisor from now on, starting from `status` (what its
    /// `status.json` says) and `preread` (what its first start reads from disk).
    fn supervise(
        &self,
        id: &ActorId,
        version: u32,
        program: Program,
        running: bool,
        status: Status,
        preread: Preread,
    ) {
        let mailbox = self.router.add(id);
        let handle = Supervisor {
            id: id.clone(),
            version,
            program,
            runtime: self.runtime.clone(),
            router: self.router.clone(),
            world: self.world.clone(),
            replica: (self.cluster.as_ref())
                .and_then(|cluster| cluster.shared.replica(&self.world, id, mailbox.clone())),
            mailbox,
            crash_loops: self.crash_loops.clone(),
            counters: self.counters.clone(),
            memory: Arc::default(),
            restarting: Arc::default(),
        }
        .spawn(running, status, preread);
        self.actors
            .lock()
            .expect("actors lock")
            .insert(id.clone(), handle);
        if let Some(cluster) = &self.cluster {
            cluster
                .placement
                .consume(id, self.router.mailbox(id).expect("just added"));
        }
    }

    fn handle(&self, id: &ActorId) -> Option<ActorHandle> {
        self.actors.lock().expect("actors lock").get(id).cloned()
    }

    /// Queues an operation on `id` behind the ones already queued.
    pub fn queue_operation(&self, id: &ActorId, operation: Operation) {
        let mut operations = self.operations.lock().expect("operations lock");
        let queue = operations.entry(id.clone()).or_insert_with(|| {
            let (queue, queued) = mpsc::unbounded_channel::<Operation>();
            tokio::spawn(run_operations(id.clone(), queued));
            queue
        });
        let under_way = UnderWay::count(&self.under_way);
        let operation = Box::pin(async move {
            let _under_way = under_way;
            operation.await
        });
        // The task only ends when this sender is dropped, so the send cannot fail.
        let _ = queue.send(operation);
    }

    /// Changes the registry and saves it before anyone sees the change.
    async fn update_registry<R>(&self, change: impl FnOnce(&mut Registry) -> R) -> Result<R> {
        let mut registry = self.registry.lock().await;
        let mut changed = registry.clone();
        let result = change(&mut changed);
        if let Some(cluster) = &self.cluster {
            // The shared registry first: a change no other host can see is not made here either.
            cluster
                .shared
                .put_registry_changes(&registry, &changed)
                .await?;
        }
        // The save syncs the file: on the blocking pool, off the thread that routes messages.
        let (world, saved) = (self.world.clone(), changed.clone());
        tokio::task::spawn_blocking(move || world.save_registry(&saved))
            .await
            .map_err(|e| anyhow::anyhow!("host bug: saving the registry failed: {e}"))??;
        self.apply_subscriptions(&changed);
        if registry.routes != changed.routes {
            self.apply_routes(&changed);
        }
        *registry = changed;
        Ok(result)
    }

    /// Whether `id` is a WASM actor that should run (not stopped).
    pub async fn runs(&self, id: &ActorId) -> bool {
        let registry = self.registry.lock().await;
        registry
            .actors
            .get(id.as_str())
            .is_some_and(|entry| entry.running)
    }

    pub async fn registry(&self) -> Registry {
        self.registry.lock().await.clone()
    }

    fn apply_subscriptions(&self, registry: &Registry) {
        let mut subscriptions = HashMap::new();
        for (publisher, subscribers) in &registry.subscriptions {
            let (Ok(publisher), subscribers) = (
                ActorId::parse(publisher),
                subscribers
                    .iter()
                    .filter_map(|s| ActorId::parse(s).ok())
                    .collect(),
            ) else {
                continue;
            };
            subscriptions.insert(publisher, subscribers);
        }
        self.router.set_subscriptions(subscriptions);
    }

    /// Every actor the world knows: registered WASM actors and running natives.
    pub async fn known_actors(&self) -> BTreeMap<String, &'static str> {
        let mut known: BTreeMap<String, &'static str> = self
            .registry()
            .await
            .actors
            .keys()
            .map(|id| (id.clone(), "wasm"))
            .collect();
        for native in NATIVES {
            if self
                .router
                .mailbox(&ActorId::parse(native.id).expect("valid"))
                .is_some()
            {
                known.insert(native.id.to_string(), "native");
            }
        }
        known
    }

    /// The mailbox of a native actor other than the broker, for its own loop.
    pub fn native_mailbox(&self, id: &str) -> Arc<Mailbox> {
        let id = ActorId::parse(id).expect("native ids are valid");
        self.router.add(&id)
    }

    /// Sends a message as `from` (a native actor), waiting on back-pressure.
    pub async fn send(&self, from: &ActorId, out: crate::message::Outgoing) -> String {
        self.router.send(from, out).await
    }
}

/// Settles every upgrade or rollback a killed host left between its swap and the end: forwards
/// when the registry names the version the swap was for, backwards otherwise. Runs before the
/// clean-up of temporaries, which would take the old folders with it.
fn settle_swaps(world: &World, registry: &Registry) -> Result<()> {
    let Ok(logs) = std::fs::read_dir(world.swap_logs_dir()) else {
        return Ok(());
    };
    for log in logs {
        let log = log?.path();
        let Some(id) = log.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
            continue;
        };
        let installed = registry.actors.get(&id).map(|entry| entry.version);
        crate::replace::recover(&log, |note| {
            let keep = note["version"].as_u64() == installed.map(u64::from);
            tracing::warn!(
                "actor {id}: an interrupted swap to version {} was {}",
                note["version"],
                if keep { "completed" } else { "undone" }
            );
            keep
        })
        .unwrap_or_else(|e| {
            // The world still starts: each folder is whole, old or new, and the hidden rest
            // goes with the clean-up.
            tracing::error!(
                "{}: cannot settle this interrupted swap ({e}); check that actor {id}'s \
                 source and data are the version the registry names",
                log.display()
            )
        });
    }
    Ok(())
}

/// Removes everything inside `dir` (creating it if missing).
fn clear_dir(dir: &std::path::Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("{}: cannot empty", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))
}

/// Every [`STALL_CHECK`], drops the stdin writes stalled past their timeout and notes each in
/// its actor's log; ends with the router.
async fn drop_stalled_writes(router: std::sync::Weak<Router>, world: World) {
    let mut tick = tokio::time::interval(STALL_CHECK);
    loop {
        tick.tick().await;
        let Some(router) = router.upgrade() else {
            return;
        };
        for (id, dropped) in router.drop_stalled_writes(std::time::Instant::now()) {
            world.log_note(
                &id,
                &format!(
                    "message {} from {} dropped: stdin was not read for {} s after it was offered",
                    dropped.id,
                    dropped.from,
                    mailbox::stdin_write_timeout().as_secs_f64()
                ),
            );
        }
    }
}

/// A request or an operation counted in `Broker::under_way` until it is dropped: done, failed
/// or unwound by a panic.
struct UnderWay(Arc<AtomicUsize>);

impl UnderWay {
    fn count(counter: &Arc<AtomicUsize>) -> UnderWay {
        counter.fetch_add(1, Ordering::SeqCst);
        UnderWay(counter.clone())
    }
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs one actor's operations in arrival order until its queue's sender is dropped. Each runs
/// in a task of its own, so an operation that panics (a bug) loses only itself: the ones after
/// it still run and answer.
async fn run_operations(id: ActorId, mut queued: mpsc::UnboundedReceiver<Operation>) {
    while let Some(operation) = queued.recv().await {
        if let Err(e) = tokio::spawn(operation).await {
            tracing::error!(
                "bug: an operation on actor {id} failed ({e}); its later operations go on"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::mailbox::MAILBOX_CAPACITY;
    use super::*;
    use crate::message::Outgoing;

    #[tokio::test]
    async fn an_operation_that_panics_does_not_stop_the_ones_after_it() {
        let (queue, queued) = mpsc::unbounded_channel::<Operation>();
        let done = Arc::new(AtomicUsize::new(0));
        let id = ActorId::parse("echo").unwrap();
        let running = tokio::spawn(run_operations(id, queued));
        queue
            .send(Box::pin(async { panic!("a bug in an operation") }))
            .unwrap();
        for _ in 0..2 {
            let done = done.clone();
            queue
                .send(Box::pin(async move {
                    done.fetch_add(1, Ordering::SeqCst);
                }))
                .unwrap();
        }
        drop(queue);
        running.await.unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 2);
    }

    /// Polls `check` every few milliseconds until it holds, or fails after 20 s.
    async fn until(what: &str, mut check: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        while !check() {
            assert!(tokio::time::Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_past_the_in_flight_limit_wait_in_the_mailbox_and_none_is_lost() {
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(dir.path());
        world.create().unwrap();
        let broker = Broker::start(world, Runtime::new(None).unwrap())
            .await
            .unwrap();
        tokio::spawn({
            let broker = broker.clone();
            async move { broker.serve().await }
        });
        // A console that asks and asks and reads none of the answers.
        let console = ActorId::parse("console").unwrap();
        let answers = broker.native_mailbox("console");
        let asked = 3 * MAILBOX_CAPACITY;
        let asking = tokio::spawn({
            let (broker, console) = (broker.clone(), console.clone());
            async move {
                for _ in 0..asked {
                    let list =
                        Outgoing::new(&ActorId::broker(), &serde_json::json!({"type": "list"}));
                    broker.send(&console, list).await;
                }
            }
        });
        let broker_mailbox = broker.router.mailbox(&ActorId::broker()).unwrap();
        until(
            "the answers to fill the console's mailbox, and the limit to be reached",
            || {
                answers.len() == MAILBOX_CAPACITY
                    && broker.requests_in_flight.available_permits() == 0
                    && broker_mailbox.len() == MAILBOX_CAPACITY
            },
        )
        .await;
        assert!(
            !asking.is_finished(),
            "the asker is slowed down, not served without bound"
        );
        // Reading the answers lets everything through, each request answered once.
        for n in 0..asked {
            let answer = answers.recv().await;
            assert_eq!(answer.body_value()["type"], "actors", "answer {n}");
        }
        asking.await.unwrap();
        // Every permit is back but the one the broker holds while it waits for a request.
        until("every permit back", || {
            broker.requests_in_flight.available_permits() == REQUESTS_IN_FLIGHT - 1
        })
        .await;
        assert!(answers.is_empty());
    }
}
