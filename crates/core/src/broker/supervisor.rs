//! One supervisor per WASM actor: it starts the instance, stops it gracefully, restarts it
//! after a crash with back-off, and keeps `status.json` current.
//!
//! The supervisor is the only owner of its actor's instance. Everyone else talks to it through
//! an [`ActorHandle`]; the mailbox outlives every instance, so messages wait across restarts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::counters::Counters;
use super::mailbox::Mailbox;
use super::router::Router;
use super::stdio::{LogOutput, RoutedStdout};
use super::window::Window;
use crate::message::{ActorId, Envelope, Trace, raw};
use crate::runtime::network::{Credentials, Network};
use crate::runtime::{
    DEFAULT_MEMORY_MB, Exit, InstanceConfig, MAX_MEMORY_MB, Program, Replica, Runtime,
};
use crate::world::{DEFAULT_WINDOW, MANIFEST, Manifest, State, Status, World};

/// First restart delay; each further crash in a row doubles it.
pub const RESTART_BASE_DELAY: Duration = Duration::from_millis(500);
/// Longest restart delay.
pub const RESTART_MAX_DELAY: Duration = Duration::from_secs(30);
/// An instance that ran this long has recovered: its next crash starts the back-off afresh.
pub const RESTART_RESET_UPTIME: Duration = Duration::from_secs(60);
/// How long a stopping instance has to exit after its shutdown message and end of input
/// before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// Crashes after an upgrade that count as a crash loop…
pub const CRASH_LOOP_CRASHES: u32 = 3;
/// …when they all happen within this time of the upgrade: the broker then rolls back.
pub const CRASH_LOOP_WINDOW: Duration = Duration::from_secs(30);
/// How long an instance may take to be created before `status.json` says `starting`. Creating
/// one from a compiled component takes well under a millisecond, so on that path the file goes
/// from `stopped` or `restarting` straight to `running`: one write per start, not two.
const STARTING_REPORT_AFTER: Duration = Duration::from_millis(10);
/// Commands queued for one supervisor; senders wait beyond it.
const COMMAND_QUEUE: usize = 16;

/// What the rest of the host holds of a supervised actor.
#[derive(Clone)]
pub struct ActorHandle {
    /// To the supervisor task; closing it (every handle dropped) stops the actor and ends
    /// the task.
    commands: mpsc::Sender<Command>,
    /// The running instance's linear memory, in bytes (0 while none runs).
    pub memory: Arc<AtomicUsize>,
    /// While it waits to restart after a crash, when it restarts (ms since the Unix epoch);
    /// 0 otherwise.
    pub restarting: Arc<AtomicU64>,
}

enum Command {
    Start(oneshot::Sender<()>),
    /// Stops the instance gracefully; answers with how it ended (`None` if none ran).
    Stop(oneshot::Sender<Option<Exit>>),
    /// Makes `version` the one the next instance runs; sent while the actor is stopped.
    Install(Install, oneshot::Sender<()>),
}

/// A version to run from now on.
pub struct Install {
    pub version: u32,
    pub program: Program,
    /// After an upgrade: deliver the parked message again, first.
    pub redeliver_parked: bool,
    /// After an upgrade: watch for a crash loop and report it.
    pub watch: Option<Upgraded>,
}

/// Who asked for an upgrade and what it replaced, kept while the new version is watched.
#[derive(Clone, Debug)]
pub struct Upgraded {
    pub requester: ActorId,
    pub request_id: String,
    pub previous: u32,
}

/// A crash loop after an upgrade, reported to the broker, which rolls back.
#[derive(Debug)]
pub struct CrashLoop {
    pub actor: ActorId,
    pub version: u32,
    pub upgrade: Upgraded,
    pub last_exit: Exit,
}

/// Why the supervisor restarts an instance, and when.
#[derive(Debug, PartialEq, Eq)]
pub struct Restart {
    pub after: Duration,
    /// Crashes in a row, this one included.
    pub in_a_row: u32,
}

/// The restart decision (DESIGN §3): every exit nobody asked for restarts the actor, after
/// `0.5 s × 2ⁿ` (n = earlier crashes in a row), at most 30 s; an instance that was up for
/// 60 s starts the count again.
///
/// | uptime | crashes in a row before | delay |
/// | --- | --- | --- |
/// | ≥ 60 s | any | 0.5 s |
/// | < 60 s | n | min(0.5 s × 2ⁿ, 30 s) |
pub fn restart_after(uptime: Duration, in_a_row_before: u32) -> Restart {
    let n = if uptime >= RESTART_RESET_UPTIME {
        0
    } else {
        in_a_row_before
    };
    let after = RESTART_BASE_DELAY
        .saturating_mul(1u32.checked_shl(n).unwrap_or(u32::MAX))
        .min(RESTART_MAX_DELAY);
    Restart {
        after,
        in_a_row: n + 1,
    }
}

impl ActorHandle {
    /// Starts the actor (no-op if it runs).
    pub async fn start(&self) {
        let (done, wait) = oneshot::channel();
        if self.commands.send(Command::Start(done)).await.is_ok() {
            // The supervisor answers unless it is gone, which means there is nothing to start.
            let _ = wait.await;
        }
    }

    /// Stops the actor gracefully and waits until it is down. Returns how the instance
    /// ended, if one was running.
    pub async fn stop(&self) -> Option<Exit> {
        let (done, wait) = oneshot::channel();
        self.commands.send(Command::Stop(done)).await.ok()?;
        wait.await.ok().flatten()
    }

    /// Installs another version for the next start (stop the actor first).
    pub async fn install(&self, install: Install) {
        let (done, wait) = oneshot::channel();
        if self
            .commands
            .send(Command::Install(install, done))
            .await
            .is_ok()
        {
            // The supervisor answers unless it is gone, and then nothing runs anyway.
            let _ = wait.await;
        }
    }
}

/// The supervisor task's state.
pub struct Supervisor {
    pub id: ActorId,
    pub version: u32,
    pub program: Program,
    pub runtime: Arc<Runtime>,
    pub router: Arc<Router>,
    pub world: World,
    pub mailbox: Arc<Mailbox>,
    /// On a host of a cluster, where each change of the actor's files is copied first.
    pub replica: Option<Arc<dyn Replica>>,
    /// To the broker: crash loops after upgrades. The broker's receiver lives as long as the
    /// host; a failed send means the host is shutting down.
    pub crash_loops: mpsc::UnboundedSender<CrashLoop>,
    /// What the metrics count (restarts).
    pub counters: Arc<Counters>,
    /// The running instance's linear memory, in bytes.
    pub memory: Arc<AtomicUsize>,
    /// When it restarts after a crash (see [`ActorHandle::restarting`]).
    pub restarting: Arc<AtomicU64>,
}

impl Supervisor {
    /// Spawns the supervisor task, which goes on from `status` (what `status.json` says) and
    /// `preread`; the actor starts at once when `running`.
    pub fn spawn(self, running: bool, status: Status, preread: Preread) -> ActorHandle {
        let (commands, rx) = mpsc::channel(COMMAND_QUEUE);
        let (memory, restarting) = (self.memory.clone(), self.restarting.clone());
        // A parked message outlives the host: a restart between a crash and the upgrade that
        // fixes it still delivers it. `status.json` says what is really parked, not what a
        // host before this one last wrote.
        let parked = preread.parked.map(Arc::new);
        let status = Status {
            parked: parked.as_ref().map(|m| m.id.clone()),
            ..status
        };
        tokio::spawn(
            Task {
                sup: self,
                commands: rx,
                want_running: running,
                status,
                parked,
                next_start: Some(preread.start),
                pack_at_first_wait: preread.pack_at_first_wait,
                watch: None,
            }
            .run(),
        );
        ActorHandle {
            commands,
            memory,
            restarting,
        }
    }
}

/// What a supervisor reads from disk before its first instance: read by whoever spawns it, so
/// that a host starting 100,000 actors reads their files on the blocking pool, beside the
/// world's thread, rather than on it one actor at a time.
pub struct Preread {
    /// The message its last crashed instance took, kept for the upgrade that fixes it.
    parked: Option<Envelope>,
    start: StartFiles,
    /// Its first instance is packed as soon as it waits for its first message.
    pack_at_first_wait: bool,
}

impl Preread {
    pub fn read(world: &World, id: &ActorId) -> Preread {
        Preread {
            parked: world.read_parked(id),
            start: StartFiles::read(world, id),
            pack_at_first_wait: false,
        }
    }

    /// The actor starts among many (see `Broker::start_all`): its first instance gives its
    /// pages back as soon as it waits for its first message.
    pub fn packed_at_first_wait(self) -> Preread {
        Preread {
            pack_at_first_wait: true,
            ..self
        }
    }
}

/// The files each start of an instance reads (at every start, so an upgrade's manifest and
/// changed credentials apply).
struct StartFiles {
    manifest: Manifest,
    credentials: anyhow::Result<Vec<Credentials>>,
}

impl StartFiles {
    fn read(world: &World, id: &ActorId) -> StartFiles {
        StartFiles {
            manifest: world.manifest(id),
            credentials: world.read_credentials(id),
        }
    }
}

struct Task {
    sup: Supervisor,
    commands: mpsc::Receiver<Command>,
    want_running: bool,
    status: Status,
    /// The message the last crashed instance took; delivered again after an upgrade.
    parked: Option<Arc<Envelope>>,
    /// The files the next start reads, when they were read before it (the first start).
    next_start: Option<StartFiles>,
    /// The next instance is packed as soon as it first waits for input (the first, in a world
    /// that starts many actors).
    pack_at_first_wait: bool,
    /// After an upgrade: the upgrade, when the watch ends, and the crashes counted so far.
    watch: Option<(Upgraded, Instant, u32)>,
}

/// How one instance's run ended, from the supervisor's side.
enum Ended {
    /// It stopped because we asked; these waiters get the exit.
    Stopped(Exit, oneshot::Sender<Option<Exit>>),
    /// It exited on its own (a crash, or an exit nobody asked for).
    ByItself(Exit),
}

impl Task {
    async fn run(mut self) {
        let mut in_a_row = 0;
        loop {
            if !self.want_running {
                // A stopped or broken actor's status is already on disk; writing it again
                // could race with the host's exit.
                if !matches!(self.status.state, State::Broken | State::Stopped) {
                    self.set_state(State::Stopped);
                }
                match self.commands.recv().await {
                    None => return,
                    Some(Command::Start(done)) => {
                        self.want_running = true;
                        let _ = done.send(());
                    }
                    Some(Command::Stop(done)) => {
                        let _ = done.send(None);
                    }
                    Some(Command::Install(install, done)) => {
                        self.install(install);
                        let _ = done.send(());
                    }
                }
                continue;
            }

            let started = Instant::now();
            match self.run_instance().await {
                Ended::Stopped(exit, done) => {
                    self.want_running = false;
                    self.status.last_exit = Some(exit.to_string());
                    self.set_state(State::Stopped);
                    let _ = done.send(Some(exit));
                }
                Ended::ByItself(exit) => {
                    if self.crash_loop(&exit) {
                        continue;
                    }
                    let restart = restart_after(started.elapsed(), in_a_row);
                    in_a_row = restart.in_a_row;
                    self.status.restarts += 1;
                    self.sup.counters.restarted(&self.sup.id);
                    self.status.last_exit = Some(exit.to_string());
                    if let Exit::MemoryLimit(mb) = exit {
                        self.sup.world.log_note(&self.sup.id, &memory_note(mb));
                    }
                    self.sup.world.log_note(
                        &self.sup.id,
                        &format!(
                            "{exit}; restarting in {:.1} s ({} in a row)",
                            restart.after.as_secs_f64(),
                            restart.in_a_row
                        ),
                    );
                    self.set_state(State::Restarting);
                    let at = SystemTime::now() + restart.after;
                    let at_ms = at
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_millis();
                    (self.sup.restarting).store(at_ms as u64, Ordering::Relaxed);
                    self.wait_to_restart(restart.after).await;
                    self.sup.restarting.store(0, Ordering::Relaxed);
                }
            }
        }
    }

    fn install(&mut self, install: Install) {
        if install.version != self.sup.version {
            self.status.previous_version = Some(self.sup.version);
        }
        self.sup.version = install.version;
        self.sup.program = install.program;
        if install.redeliver_parked
            && let Some(parked) = self.parked.take()
        {
            // Into the journal first, so no kill between the two can lose it.
            self.sup.mailbox.push_front(parked);
            self.sup.world.remove_parked(&self.sup.id);
            self.status.parked = None;
        }
        self.watch = install
            .watch
            .map(|upgrade| (upgrade, Instant::now() + CRASH_LOOP_WINDOW, 0));
        self.status.version = install.version;
        self.status.restarts = 0;
        self.set_state(self.status.state);
    }

    /// Counts a crash against a watched upgrade. On the crash that makes a loop, reports it to
    /// the broker, marks the actor broken and returns true: the broker rolls back.
    fn crash_loop(&mut self, exit: &Exit) -> bool {
        let Some((_, until, crashes)) = &mut self.watch else {
            return false;
        };
        if Instant::now() > *until {
            self.watch = None;
            return false;
        }
        *crashes += 1;
        if *crashes < CRASH_LOOP_CRASHES {
            return false;
        }
        let (upgrade, _, _) = self.watch.take().expect("watched");
        self.status.restarts += 1;
        self.sup.counters.restarted(&self.sup.id);
        self.status.last_exit = Some(exit.to_string());
        self.want_running = false;
        self.sup.world.log_note(
            &self.sup.id,
            &format!(
                "{exit}; {CRASH_LOOP_CRASHES} crashes within {} s of the upgrade to version {}: \
                 rolling back to version {}",
                CRASH_LOOP_WINDOW.as_secs(),
                self.sup.version,
                upgrade.previous
            ),
        );
        self.set_state(State::Broken);
        let report = CrashLoop {
            actor: self.sup.id.clone(),
            version: self.sup.version,
            upgrade,
            last_exit: exit.clone(),
        };
        // The broker outlives every supervisor but for the host's own shutdown.
        let _ = self.sup.crash_loops.send(report);
        true
    }

    /// Runs one instance until it exits or is stopped. `status.json` says `running` once the
    /// instance exists and its code runs, `starting` before that if creating it takes longer
    /// than [`STARTING_REPORT_AFTER`] (or at once if the file still claims `running`, left by a
    /// host that died).
    async fn run_instance(&mut self) -> Ended {
        self.status.version = self.sup.version;
        let sup = &self.sup;
        let files = self
            .next_start
            .take()
            .unwrap_or_else(|| StartFiles::read(&sup.world, &sup.id));
        let memory_mb = memory_mb(&sup.world, &sup.id, &files.manifest);
        let window = window_limit(&sup.world, &sup.id, &files.manifest);
        if window > 0 || sup.mailbox.window().is_some() {
            sup.mailbox
                .keep_window(|| Window::new(sup.world.clone(), sup.id.clone(), window))
                .set_limit(window);
        }
        let config = InstanceConfig {
            env: vec![
                ("SAUSAGE_ACTOR".into(), sup.id.to_string()),
                ("SAUSAGE_VERSION".into(), sup.version.to_string()),
            ],
            mounts: sup.world.mounts(&sup.id),
            stdin: sup.mailbox.attach(),
            stdout: InstanceConfig::output(RoutedStdout::new(
                sup.id.clone(),
                sup.router.clone(),
                sup.world.clone(),
                sup.mailbox.clone(),
            )),
            stderr: InstanceConfig::output(LogOutput::append_to(&sup.world.log_path(&sup.id))),
            network: network(&sup.world, &sup.id, files),
            replica: sup.replica.clone(),
            replay: None,
            memory_in_use: Some(sup.memory.clone()),
            pack_at_first_wait: std::mem::take(&mut self.pack_at_first_wait),
        };
        // The instance task says when its code starts to run; dropping the sender unsent
        // means it was never created.
        let (now_running, mut running) = oneshot::channel();
        let mut instance: JoinHandle<Exit> = tokio::spawn({
            let (runtime, program) = (sup.runtime.clone(), sup.program.clone());
            async move {
                let on_running = move || {
                    // The supervisor waits for this while the instance task lives.
                    let _ = now_running.send(());
                };
                runtime
                    .run_with(&program, config, memory_mb, on_running)
                    .await
            }
        });
        if self.status.state == State::Running {
            self.set_state(State::Starting);
        }
        let starting_report = tokio::time::sleep(STARTING_REPORT_AFTER);
        tokio::pin!(starting_report);
        let mut created = false;

        let ended = loop {
            // Waits for: the instance ending by itself; its code starting to run (or its
            // creation failing); creation taking long enough to report `starting`; a command (a
            // stop ends the loop). Stalled stdin writes are the broker's sweep's, not ours: a
            // timer per idle actor would wake the world's thread 100,000 times a second.
            tokio::select! {
                exit = &mut instance => break Ended::ByItself(joined(exit)),
                ran = &mut running, if !created => {
                    created = true;
                    if ran.is_ok() {
                        self.set_state(State::Running);
                    }
                }
                _ = &mut starting_report, if !created && self.status.state != State::Starting => {
                    self.set_state(State::Starting);
                }
                command = self.commands.recv() => match command {
                    Some(Command::Start(done)) => {
                        let _ = done.send(());
                    }
                    Some(Command::Stop(done)) => {
                        let exit = self.stop_instance(&mut instance).await;
                        break Ended::Stopped(exit, done);
                    }
                    Some(Command::Install(install, done)) => {
                        // Only the broker installs, and it stops the actor first; should a
                        // race bring one here, it takes effect at the next start.
                        self.install(install);
                        let _ = done.send(());
                    }
                    None => {
                        let exit = self.stop_instance(&mut instance).await;
                        let (done, _) = oneshot::channel();
                        break Ended::Stopped(exit, done);
                    }
                },
            }
        };
        let last_taken = self.sup.mailbox.detach();
        match (&ended, last_taken) {
            // An HTTP request is answered once and never given again: its caller hears now.
            (Ended::ByItself(exit), Some(message)) if message.from.as_str() == "http" => {
                let reason = format!("it crashed while handling the request ({exit})");
                (self.sup.router).report_undeliverable(&message, self.sup.id.as_str(), &reason);
            }
            (Ended::ByItself(_), Some(message)) => self.park(message),
            _ => {}
        }
        ended
    }

    /// Keeps the message a crashed instance took last, on disk, for the next upgrade. An
    /// instance that crashed before taking anything parks nothing and keeps what was parked.
    fn park(&mut self, message: Arc<Envelope>) {
        let id = &self.sup.id;
        if let Some(earlier) = &self.parked {
            self.sup.world.log_note(
                id,
                &format!(
                    "message {} is parked in place of message {}, which will not come again",
                    message.id, earlier.id
                ),
            );
        }
        if let Err(e) = self.sup.world.write_parked(id, &message) {
            self.sup.world.log_note(
                id,
                &format!("{e:#}; it is kept in memory only, until the host stops"),
            );
        }
        self.status.parked = Some(message.id.clone());
        self.parked = Some(message);
    }

    /// Graceful stop: `shutdown`, end of input, then a kill after [`STOP_GRACE`].
    async fn stop_instance(&mut self, instance: &mut JoinHandle<Exit>) -> Exit {
        let shutdown = Envelope {
            id: self.sup.router.next_id(),
            from: ActorId::broker(),
            reply_to: None,
            speaker: None,
            schedule: None,
            trace: match self.sup.router.tracing() {
                true => Trace::child_of(None, true),
                false => Trace::NONE,
            },
            body: raw(&json!({"type": "shutdown"})),
        };
        self.sup.mailbox.close_input(shutdown.to_line());
        // A host whose lease lapsed runs no guest (`runtime::run_until`): none could take
        // the shutdown, so none is waited for.
        let run_until = self.sup.runtime.run_until();
        let grace = if run_until.allows(run_until.term()) {
            STOP_GRACE
        } else {
            Duration::ZERO
        };
        match tokio::time::timeout(grace, &mut *instance).await {
            Ok(exit) => joined(exit),
            Err(_) => {
                instance.abort();
                // The task ends at its next await (within an epoch tick); its result is moot.
                let _ = instance.await;
                let why = if grace.is_zero() {
                    "killed: this host's leases lapsed".to_string()
                } else {
                    format!("killed: still running {} s after shutdown", grace.as_secs())
                };
                self.sup.world.log_note(&self.sup.id, &why);
                Exit::Killed
            }
        }
    }

    /// Sleeps before a restart, still answering commands: a stop cancels the restart.
    async fn wait_to_restart(&mut self, delay: Duration) {
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return,
                command = self.commands.recv() => match command {
                    Some(Command::Start(done)) => {
                        let _ = done.send(());
                    }
                    Some(Command::Stop(done)) => {
                        self.want_running = false;
                        let _ = done.send(None);
                        return;
                    }
                    Some(Command::Install(install, done)) => {
                        self.install(install);
                        let _ = done.send(());
                    }
                    None => {
                        self.want_running = false;
                        return;
                    }
                },
            }
        }
    }

    fn set_state(&mut self, state: State) {
        self.status.state = state;
        if let Err(e) = self.sup.world.write_status(&self.sup.id, &self.status) {
            tracing::warn!("{e:#}");
        }
    }
}

/// The network of the next instance of `id`: the hosts its manifest lists, its credentials if
/// it has any, the secrets granted to it (read at each request), and a note in its log for every denied request. Problems go to its log; the
/// instance then runs without what could not be read.
fn network(world: &World, id: &ActorId, files: StartFiles) -> Network {
    let allowed = files.manifest.network.unwrap_or_else(|problem| {
        world.log_note(id, &format!("{problem}; running without network"));
        Vec::new()
    });
    let credentials = files.credentials.unwrap_or_else(|e| {
        world.log_note(id, &format!("{e:#}; running without credentials"));
        Vec::new()
    });
    let granted = Some(crate::secrets::Secrets::new(world).grants_for(id));
    let (world, id) = (world.clone(), id.clone());
    Network {
        allowed,
        credentials,
        granted,
        on_denied: Some(Arc::new(move |host: &str| {
            world.log_note(
                &id,
                &format!(
                    "request to {host} denied: add \"{host}\" to \"network\" in the actor's \
                     source {MANIFEST}"
                ),
            )
        })),
    }
}

/// The memory limit of the next instance of `id`, in MiB: its manifest's `"memory_mb"`, or
/// [`DEFAULT_MEMORY_MB`] with a note in its log when that is not a valid limit.
fn memory_mb(world: &World, id: &ActorId, manifest: &Manifest) -> u32 {
    match &manifest.memory_mb {
        Ok(mb) => mb.unwrap_or(DEFAULT_MEMORY_MB),
        Err(problem) => {
            world.log_note(
                id,
                &format!("{problem}; running with the default of {DEFAULT_MEMORY_MB} MiB"),
            );
            DEFAULT_MEMORY_MB
        }
    }
}

/// How many messages the window of `id` keeps (DESIGN §21): its manifest's `"window"`, or
/// [`DEFAULT_WINDOW`] with a note in its log when that is not a valid length.
fn window_limit(world: &World, id: &ActorId, manifest: &Manifest) -> usize {
    match &manifest.window {
        Ok(n) => n.unwrap_or(DEFAULT_WINDOW),
        Err(problem) => {
            world.log_note(
                id,
                &format!("{problem}; keeping the default window of {DEFAULT_WINDOW} messages"),
            );
            DEFAULT_WINDOW
        }
    }
}

/// The note after an instance trapped at its memory limit of `mb` MiB, with the fix.
fn memory_note(mb: u32) -> String {
    let fix = if mb < MAX_MEMORY_MB {
        format!("raise \"memory_mb\" in {MANIFEST} (at most {MAX_MEMORY_MB})")
    } else {
        "that is the most an instance may have; use less".to_string()
    };
    format!("memory: the instance asked for more than its {mb} MiB; {fix}")
}

/// The exit of an instance task; a panic in the host's instance code is a bug, reported as a
/// trap so the actor is restarted rather than lost.
fn joined(result: Result<Exit, tokio::task::JoinError>) -> Exit {
    result.unwrap_or_else(|e| Exit::Trap(format!("host bug: the instance task failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sequence of crashes (uptime of each instance) in, the restart log out.
    fn restart_log(uptimes: &[u64]) -> Vec<f64> {
        let mut in_a_row = 0;
        uptimes
            .iter()
            .map(|&secs| {
                let r = restart_after(Duration::from_secs(secs), in_a_row);
                in_a_row = r.in_a_row;
                r.after.as_secs_f64()
            })
            .collect()
    }

    #[test]
    fn back_off_doubles_up_to_thirty_seconds_and_resets_after_a_minute_up() {
        assert_eq!(
            restart_log(&[0, 1, 1, 1, 1, 1, 1, 1, 1]),
            [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
        );
        assert_eq!(restart_log(&[0, 0, 0, 60, 0]), [0.5, 1.0, 2.0, 0.5, 1.0]);
        assert_eq!(restart_after(Duration::ZERO, 400).after, RESTART_MAX_DELAY);
    }
}
