//! The world on disk (DESIGN §7): the one place that knows which folder is whose.
//!
//! It owns the layout, the registry `sausage.json`, each actor's `status.json`, and the lock
//! that allows one `sausage run` per world. Every file it writes is replaced atomically, so a
//! hard kill of the host leaves the old or the new content, never a mix.

pub mod routes;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::fs::{Mount, write_atomically};
use crate::message::{ActorId, Envelope, NATIVES, Tier};
use crate::replace::{Applied, Replacement};
use crate::runtime::MAX_MEMORY_MB;
use crate::runtime::network::Credentials;

/// The manifest in an actor's source folder; its `"network"` lists the hosts the actor may
/// reach.
pub const MANIFEST: &str = "actor.json";

/// The registry file's name at the root of a world.
pub const REGISTRY: &str = "sausage.json";

/// The terminal console: the one sender whose requests may name host paths (DESIGN §18).
const CONSOLE: &str = "console";

/// Message ids are reserved in blocks of this many: `broker/next-message-id` records the end
/// of the current block, so ids stay unique across a hard kill at the cost of a gap.
pub const MESSAGE_ID_BLOCK: u64 = 100_000;

/// Size at which an actor's `stderr.log` is rotated (DESIGN §11), so an actor that floods its
/// stderr cannot fill the disk. When an append would take the log past it, `stderr.log` is
/// renamed to `stderr.log.1` (the one before is removed) and a new `stderr.log` starts with that
/// append: the newest 10 to 20 MiB are kept, the older half in `stderr.log.1`, and `stderr.log`
/// stays within the limit (an append is at most a guest's write chunk or one note). The guest's
/// stderr and the host's `[sausage]` notes both go through [`ActorLog::append`].
pub const STDERR_LOG_LIMIT: u64 = 10 * 1024 * 1024;

/// An actor's `stderr.log`, opened for appending at the first append and rotated at
/// [`STDERR_LOG_LIMIT`].
pub struct ActorLog {
    path: PathBuf,
    /// The open log, with the count of [`LOG_ROTATIONS`] it was opened at: after any rotation
    /// it may be `stderr.log.1` under its new name, so it is opened again.
    file: Option<(std::fs::File, u64)>,
}

/// How many logs this process has rotated. Held during every append, so that two writers of one
/// log (the guest's stderr, a note) never both rotate it for one passing of the limit, and no
/// append lands in a log while it is being renamed. Appends are short copies into the page cache.
static LOG_ROTATIONS: std::sync::Mutex<u64> = std::sync::Mutex::new(0);

impl ActorLog {
    pub fn new(path: PathBuf) -> ActorLog {
        ActorLog { path, file: None }
    }

    /// Appends `bytes`, rotating the log first when they would take it past
    /// [`STDERR_LOG_LIMIT`]. The error names the log.
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.rotate_and_append(bytes)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))
    }

    fn rotate_and_append(&mut self, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write;
        // A panic while holding the count cannot leave it wrong: it only ever grows.
        let mut rotations = LOG_ROTATIONS.lock().unwrap_or_else(|e| e.into_inner());
        let len = match &self.file {
            Some((file, seen)) if *seen == *rotations => file.metadata()?.len(),
            _ => self.reopen(*rotations)?,
        };
        if len > 0 && len + bytes.len() as u64 > STDERR_LOG_LIMIT {
            let mut older = self.path.clone().into_os_string();
            older.push(".1");
            // The older log is moved aside rather than replaced: a rename over a file makes
            // ext4 start writing the renamed one out and free the replaced one's blocks, both
            // at once, milliseconds on the world's thread. It is removed on the blocking pool.
            let dir = self.path.parent().unwrap_or(Path::new("."));
            let aside = crate::fs::temporary_path(dir);
            match std::fs::rename(&older, &aside) {
                Ok(()) => remove_aside(aside),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            std::fs::rename(&self.path, older)?;
            *rotations += 1;
            self.reopen(*rotations)?;
        }
        // Both the match and the rotation above leave the log open.
        let (file, _) = self.file.as_mut().expect("the log is open");
        file.write_all(bytes)
    }

    /// Opens the log (creating it) as of `rotations`; returns its length.
    fn reopen(&mut self, rotations: u64) -> io::Result<u64> {
        self.file = None;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        let len = file.metadata()?.len();
        self.file = Some((file, rotations));
        Ok(len)
    }
}

/// Removes a log moved aside by a rotation, on tokio's blocking pool when there is one (a
/// failure leaves a temporary, which the start after a crash removes).
fn remove_aside(path: PathBuf) {
    let remove = move || {
        let _ = std::fs::remove_file(path);
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(remove)),
        Err(_) => remove(),
    }
}

/// A world folder.
#[derive(Clone, Debug)]
pub struct World {
    root: PathBuf,
}

/// `sausage.json`: the registry of WASM actors and subscriptions.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Registry {
    /// WASM actors by id.
    pub actors: BTreeMap<String, ActorEntry>,
    /// Publisher id → the subscribers that get what it publishes.
    pub subscriptions: BTreeMap<String, Vec<String>>,
    /// `"limits"`: what each tier's people may own (DESIGN §11, §13); the host never changes
    /// it, only keeps it as read when the world started.
    #[serde(default, skip_serializing_if = "Limits::is_unset")]
    pub limits: Limits,
    /// HTTP routes by path (DESIGN §24).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub routes: BTreeMap<String, routes::Route>,
    /// `"hold"`: the actions that wait for a person's approval (DESIGN §25); `None` (left
    /// out) is [`DEFAULT_HOLDS`], `[]` holds nothing. Kept as read, like `limits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Vec<HoldRule>>,
    /// `"hold_above_usd"`: a turn whose cost passes this waits under a `spend` rule; left out,
    /// [`DEFAULT_HOLD_ABOVE_USD`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_above_usd: Option<f64>,
}

/// An action a `"hold"` rule can hold (DESIGN §25). `deploy` is a `spawn` or an `upgrade`;
/// `network` a spawn or upgrade whose `actor.json` lists a host the actor could not reach
/// before; `grant` a grant of a secret someone else set; `spend` a turn's cost past
/// `hold_above_usd`; `schedule` a new schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeldAction {
    Spawn,
    Upgrade,
    Remove,
    Deploy,
    Grant,
    Network,
    Spend,
    Schedule,
}

impl HeldAction {
    pub fn as_str(self) -> &'static str {
        match self {
            HeldAction::Spawn => "spawn",
            HeldAction::Upgrade => "upgrade",
            HeldAction::Remove => "remove",
            HeldAction::Deploy => "deploy",
            HeldAction::Grant => "grant",
            HeldAction::Network => "network",
            HeldAction::Spend => "spend",
            HeldAction::Schedule => "schedule",
        }
    }
}

/// Whose actions a rule holds: a person's of that tier (themselves or through an actor of
/// theirs, the agent included), or (`actor`) any asked by an actor other than the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HoldBy {
    Owner,
    Member,
    Guest,
    Actor,
}

/// One `"hold"` rule: `{"action": "network", "by": "member", "approver": "owner"}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldRule {
    pub action: HeldAction,
    pub by: HoldBy,
    /// The tier of the person who decides; an owner when left out.
    #[serde(default = "owner_tier")]
    pub approver: Tier,
}

fn owner_tier() -> Tier {
    Tier::Owner
}

/// The rules when `"hold"` is left out: a member's new network host, a member's grant of
/// another's secret and a member's turn spending past `hold_above_usd` wait for an owner.
pub const DEFAULT_HOLDS: [HoldRule; 3] = [
    HoldRule {
        action: HeldAction::Network,
        by: HoldBy::Member,
        approver: Tier::Owner,
    },
    HoldRule {
        action: HeldAction::Grant,
        by: HoldBy::Member,
        approver: Tier::Owner,
    },
    HoldRule {
        action: HeldAction::Spend,
        by: HoldBy::Member,
        approver: Tier::Owner,
    },
];

/// `hold_above_usd` when left out: well past a usual turn, below the agent's 5 dollars a turn.
pub const DEFAULT_HOLD_ABOVE_USD: f64 = 2.0;

impl Registry {
    /// The `"hold"` rules in force.
    pub fn holds(&self) -> &[HoldRule] {
        self.hold.as_deref().unwrap_or(&DEFAULT_HOLDS)
    }

    /// The rule that holds `action` asked by `by` (`Actor` when an actor other than the
    /// agent asked), if one does.
    pub fn hold_rule(&self, action: HeldAction, by: HoldBy) -> Option<HoldRule> {
        let matches = |a: HeldAction| {
            a == action
                || (a == HeldAction::Deploy
                    && matches!(action, HeldAction::Spawn | HeldAction::Upgrade))
        };
        self.holds()
            .iter()
            .find(|rule| matches(rule.action) && rule.by == by)
            .copied()
    }
}

/// A member's actors when `"limits"` does not say: enough for a person's own tools, few enough
/// that one member cannot fill the host's process table or registry.
pub const DEFAULT_MEMBER_MAX_ACTORS: u32 = 200;
/// The memory a member's actors may be given together when `"limits"` does not say, in MiB
/// (the sum of their `memory_mb` limits, not what they use): 8 GiB, 32 actors at the default
/// 256 MiB, so one member cannot promise away the host's memory.
pub const DEFAULT_MEMBER_MAX_MEMORY_MB: u64 = 8192;

/// `"limits"` in `sausage.json`, per tier: `{"member": {"max_actors": 200, "max_memory_mb":
/// 8192}, "guest": {...}, "owner": {...}}`. A tier or field left out has its default: members
/// [`DEFAULT_MEMBER_MAX_ACTORS`] and [`DEFAULT_MEMBER_MAX_MEMORY_MB`], guests none at all,
/// owners no limit. Unknown names are refused when the world opens, so a misspelt limit is
/// never silently no limit.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<TierLimits>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<TierLimits>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<TierLimits>,
}

/// One tier's limits as written; `None` is the tier's default.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TierLimits {
    /// How many actors one person of the tier may own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_actors: Option<u32>,
    /// How many MiB of `memory_mb` one person's actors may have together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mb: Option<u64>,
}

/// What one tier may own, the defaults applied: `None` is no limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Allowance {
    pub max_actors: Option<u32>,
    pub max_memory_mb: Option<u64>,
}

impl Limits {
    fn is_unset(&self) -> bool {
        *self == Limits::default()
    }

    /// What a person of `tier` may own.
    pub fn of(&self, tier: Tier) -> Allowance {
        let (written, default) = match tier {
            Tier::Owner => (self.owner, (None, None)),
            Tier::Member => (
                self.member,
                (
                    Some(DEFAULT_MEMBER_MAX_ACTORS),
                    Some(DEFAULT_MEMBER_MAX_MEMORY_MB),
                ),
            ),
            Tier::Guest => (self.guest, (Some(0), Some(0))),
        };
        let written = written.unwrap_or_default();
        Allowance {
            max_actors: written.max_actors.or(default.0),
            max_memory_mb: written.max_memory_mb.or(default.1),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ActorEntry {
    /// The version installed in `actor/<id>/source` and run.
    pub version: u32,
    /// The number the next upgrade will get.
    pub next_version: u32,
    /// Whether the actor should run: `stop` clears it, a host shutdown does not.
    pub running: bool,
    /// Who created it (DESIGN §13): a person's id, or the requesting actor's; `None` for an
    /// actor spawned before owners were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// A sub-agent (DESIGN §26): whose it is, how deep, in which role; `None` for any other
    /// actor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent: Option<SubAgent>,
}

/// What makes an actor a sub-agent of the agent (DESIGN §26).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SubAgent {
    /// The agent or sub-agent that delegated to it, which alone dismisses it.
    pub parent: String,
    /// 1 for the agent's own, 2 for theirs.
    pub depth: u8,
    pub role: String,
}

/// `actor/<id>/status.json`, kept current by the supervisor.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Status {
    pub state: State,
    pub version: u32,
    pub restarts: u32,
    pub last_exit: Option<String>,
    pub parked: Option<String>,
    pub previous_version: Option<u32>,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// An instance is being created; written only when that takes a while (see the
    /// supervisor's `STARTING_REPORT_AFTER`) or when the file still claimed `running`.
    Starting,
    /// The instance exists and its code runs.
    Running,
    Restarting,
    #[default]
    Stopped,
    Broken,
}

impl World {
    pub fn new(root: impl Into<PathBuf>) -> World {
        World { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn registry_path(&self) -> PathBuf {
        self.root.join(REGISTRY)
    }

    /// `actor/<id>/`: what every actor may read of `id`.
    pub fn actor_dir(&self, id: &ActorId) -> PathBuf {
        self.root.join("actor").join(id.as_str())
    }

    pub fn public_dir(&self, id: &ActorId) -> PathBuf {
        self.actor_dir(id).join("public")
    }

    pub fn source_dir(&self, id: &ActorId) -> PathBuf {
        self.actor_dir(id).join("source")
    }

    pub fn status_path(&self, id: &ActorId) -> PathBuf {
        self.actor_dir(id).join("status.json")
    }

    pub fn log_path(&self, id: &ActorId) -> PathBuf {
        self.actor_dir(id).join("stderr.log")
    }

    /// `private/<id>/data/`: the actor's `/data`.
    pub fn data_dir(&self, id: &ActorId) -> PathBuf {
        self.root.join("private").join(id.as_str()).join("data")
    }

    /// `private/console/data/history`: the lines a person typed at the console, like a shell's
    /// history. In the console's own folder, which no WASM actor mounts.
    pub fn console_history_path(&self) -> PathBuf {
        let console = ActorId::parse("console").expect("valid id");
        self.data_dir(&console).join("history")
    }

    /// `broker/versions/<id>/<n>/`.
    pub fn version_dir(&self, id: &ActorId, version: u32) -> PathBuf {
        self.root
            .join("broker/versions")
            .join(id.as_str())
            .join(version.to_string())
    }

    /// `broker/versions/<id>/<n>/snapshot/`: `/data` and `/public` as they were when the
    /// version was last replaced.
    pub fn snapshot_dir(&self, id: &ActorId, version: u32) -> PathBuf {
        self.version_dir(id, version).join("snapshot")
    }

    /// The numbers of every stored version of `id`, ascending.
    pub fn versions(&self, id: &ActorId) -> Vec<u32> {
        let dir = self.root.join("broker/versions").join(id.as_str());
        let mut versions: Vec<u32> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        versions.sort_unstable();
        versions
    }

    /// What snapshotting `/data` and `/public` into `version` replaces: `(from, to)` pairs for
    /// a [`Replacement`](crate::replace::Replacement).
    pub fn snapshot_parts(&self, id: &ActorId, version: u32) -> Vec<(PathBuf, PathBuf)> {
        let snapshot = self.snapshot_dir(id, version);
        vec![
            (self.data_dir(id), snapshot.join("data")),
            (self.public_dir(id), snapshot.join("public")),
        ]
    }

    /// What restoring the snapshot of `version` as `/data` and `/public` replaces; `None` when
    /// that version has no snapshot.
    pub fn restore_parts(&self, id: &ActorId, version: u32) -> Option<Vec<(PathBuf, PathBuf)>> {
        let snapshot = self.snapshot_dir(id, version);
        snapshot.is_dir().then(|| {
            vec![
                (snapshot.join("data"), self.data_dir(id)),
                (snapshot.join("public"), self.public_dir(id)),
            ]
        })
    }

    /// What installing the source of `version` as the running source, `actor/<id>/source`,
    /// replaces.
    pub fn source_parts(&self, id: &ActorId, version: u32) -> Vec<(PathBuf, PathBuf)> {
        vec![(
            self.version_dir(id, version).join("source"),
            self.source_dir(id),
        )]
    }

    /// Installs the source of `version` as the running source, whole or not at all.
    pub fn install_source(&self, id: &ActorId, version: u32) -> Result<()> {
        Replacement::prepare(self.source_parts(id, version))
            .and_then(Replacement::apply)
            .map(Applied::finish)
            .with_context(|| format!("actor {id}: cannot install the source of version {version}"))
    }

    /// Moves every folder of the actor into a new `archive/<id>-<k>/` and returns it.
    /// Nothing is deleted.
    pub fn archive(&self, id: &ActorId) -> Result<PathBuf> {
        let archive = (1..)
            .map(|k| self.archive_dir().join(format!("{id}-{k}")))
            .find(|dir| !dir.exists())
            .expect("some archive number is free");
        std::fs::create_dir_all(&archive)
            .with_context(|| format!("actor {id}: cannot create {}", archive.display()))?;
        let mut moved: Vec<(PathBuf, PathBuf)> = Vec::new();
        for (from, name) in self.archived_parts(id) {
            if !from.exists() {
                continue;
            }
            let to = archive.join(name);
            if let Err(e) = std::fs::rename(&from, &to) {
                // Whole or not at all: what moved goes back.
                self.move_back(&moved);
                let _ = std::fs::remove_dir(&archive);
                return Err(e)
                    .with_context(|| format!("actor {id}: cannot archive {}", from.display()));
            }
            moved.push((from, to));
        }
        Ok(archive)
    }

    /// Undoes [`World::archive`]: the actor's folders go back from `archive`, which is removed.
    pub fn unarchive(&self, id: &ActorId, archive: &Path) -> Result<()> {
        let moved: Vec<(PathBuf, PathBuf)> = self
            .archived_parts(id)
            .into_iter()
            .map(|(home, name)| (home, archive.join(name)))
            .filter(|(_, archived)| archived.exists())
            .collect();
        self.move_back(&moved);
        // Only an empty folder goes: anything left in it (a failed move back) stays to be seen.
        std::fs::remove_dir(archive)
            .with_context(|| format!("actor {id}: {} is not empty", archive.display()))
    }

    /// Each folder of `id` that `remove` archives, with its name inside the archive.
    fn archived_parts(&self, id: &ActorId) -> [(PathBuf, &'static str); 4] {
        [
            (self.parked_path(id), "parked.json"),
            (self.actor_dir(id), "actor"),
            (self.root.join("private").join(id.as_str()), "private"),
            (
                self.root.join("broker/versions").join(id.as_str()),
                "versions",
            ),
        ]
    }

    /// Moves archived folders back home, newest first, noting on stderr any that cannot go.
    fn move_back(&self, moved: &[(PathBuf, PathBuf)]) {
        for (home, archived) in moved.iter().rev() {
            if let Err(e) = std::fs::rename(archived, home) {
                tracing::error!(
                    "cannot move {} back to {}: {e}",
                    archived.display(),
                    home.display()
                );
            }
        }
    }

    /// `broker/parked/<id>.json`: the message the actor's last crashed instance had taken,
    /// kept until the next upgrade delivers it again (DESIGN §3). Outside every mount.
    pub fn parked_path(&self, id: &ActorId) -> PathBuf {
        self.root
            .join("broker/parked")
            .join(format!("{}.json", id.as_str()))
    }

    /// Keeps `message` as `id`'s parked message, durably (synced before it replaces the last).
    pub fn write_parked(&self, id: &ActorId, message: &Envelope) -> Result<()> {
        let path = self.parked_path(id);
        std::fs::create_dir_all(path.parent().expect("in broker/parked"))
            .and_then(|()| write_atomically(&path, &message.to_wire()))
            .with_context(|| format!("actor {id}: cannot keep parked message {}", message.id))
    }

    /// `id`'s parked message, if it has one. An unreadable file is reported and left in place
    /// for a person to look at; it parks nothing.
    pub fn read_parked(&self, id: &ActorId) -> Option<Envelope> {
        let path = self.parked_path(id);
        let bytes = std::fs::read(&path).ok()?;
        match Envelope::from_line(&bytes) {
            Ok(envelope) => Some(envelope),
            Err(e) => {
                tracing::warn!("{}: not a message ({e}); ignored", path.display());
                None
            }
        }
    }

    /// Forgets `id`'s parked message (it was delivered again). A file that cannot go is reported:
    /// it would bring the message back once more after the next upgrade.
    pub fn remove_parked(&self, id: &ActorId) {
        match std::fs::remove_file(self.parked_path(id)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                tracing::warn!("actor {id}: cannot forget its parked message: {e}");
            }
            _ => {}
        }
    }

    /// `broker/swaps/`: the logs of upgrade and rollback swaps not yet settled.
    pub fn swap_logs_dir(&self) -> PathBuf {
        self.root.join("broker/swaps")
    }

    /// `broker/swaps/<id>.json`: the log of `id`'s swap in progress.
    pub fn swap_log_path(&self, id: &ActorId) -> PathBuf {
        self.swap_logs_dir().join(format!("{}.json", id.as_str()))
    }

    /// `broker/credentials/<id>.json`: the header the host adds to the actor's requests to
    /// one base URL. Outside every mount: no actor can read it.
    pub fn credentials_path(&self, id: &ActorId) -> PathBuf {
        self.credentials_dir().join(format!("{}.json", id.as_str()))
    }

    /// `broker/people.json`: who may speak to the world (`people` owns it).
    pub fn people_path(&self) -> PathBuf {
        self.root.join("broker/people.json")
    }

    pub fn people_lock_path(&self) -> PathBuf {
        self.root.join("broker/people.lock")
    }

    /// `broker/web/questions.json`: the agent's questions people may answer on the web.
    pub fn web_questions_path(&self) -> PathBuf {
        self.root.join("broker/web/questions.json")
    }

    /// `broker/web/sessions.json`: the web console's sessions (hashes only).
    pub fn web_sessions_path(&self) -> PathBuf {
        self.root.join("broker/web/sessions.json")
    }

    /// `broker/web/address`: where the running world's web console listens, so login links
    /// made by `sausage people` point at it.
    pub fn web_address_path(&self) -> PathBuf {
        self.root.join("broker/web/address")
    }

    /// `broker/http/address`: where the running host serves the world's routes (DESIGN §24).
    pub fn http_address_path(&self) -> PathBuf {
        self.root.join("broker/http/address")
    }

    /// `broker/uploads/`: crates a person sent to deploy (MCP's `deploy`), each in a folder of 32
    /// random hex digits, named `/uploads/<id>` in requests by native senders; gone once used.
    pub fn uploads_dir(&self) -> PathBuf {
        self.root.join("broker/uploads")
    }

    /// `broker/web/metrics-token`: the SHA-256 of the token `/metrics` answers to (DESIGN
    /// §22), made by `sausage metrics token`; never the token itself.
    pub fn metrics_token_path(&self) -> PathBuf {
        self.root.join("broker/web/metrics-token")
    }

    /// `broker/web/local-token`: the token the running host's `/status` answers to, made at
    /// each start for `sausage status` on this machine (readable only by the world's user).
    pub fn local_token_path(&self) -> PathBuf {
        self.root.join("broker/web/local-token")
    }

    /// `broker/credentials/`: host-private headers, outside every mount (and hidden from
    /// sandboxed builds).
    pub fn credentials_dir(&self) -> PathBuf {
        self.root.join("broker/credentials")
    }

    /// `broker/secrets/`: the secrets file, its lock and a cluster's key (DESIGN §25), outside
    /// every mount (and hidden from sandboxed builds).
    pub fn secrets_dir(&self) -> PathBuf {
        self.root.join("broker/secrets")
    }

    /// The credentials of `id` (none when it has no file).
    pub fn read_credentials(&self, id: &ActorId) -> Result<Vec<Credentials>> {
        let path = self.credentials_path(id);
        match std::fs::read(&path) {
            Ok(text) => Credentials::parse_all(&text)
                .with_context(|| format!("{}: not valid credentials", path.display())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e).with_context(|| format!("{}", path.display())),
        }
    }

    /// Stores `credentials` for `id`, replacing the ones for the same base URL and keeping
    /// the others.
    pub fn write_credentials(&self, id: &ActorId, credentials: &Credentials) -> Result<()> {
        let mut all = self.read_credentials(id)?;
        all.retain(|c| c.base_url != credentials.base_url);
        all.push(credentials.clone());
        self.write_all_credentials(id, &all)
    }

    /// Stores exactly `all` as the credentials of `id`, readable by the host's user only; none
    /// removes its file.
    pub fn write_all_credentials(&self, id: &ActorId, all: &[Credentials]) -> Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        let path = self.credentials_path(id);
        if all.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    Err(e).with_context(|| format!("actor {id}: cannot remove its credentials"))
                }
                _ => Ok(()),
            };
        }
        let dir = path.parent().expect("a credentials file has a folder");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("{}: cannot create", dir.display()))?;
        let text = match all {
            [one] => serde_json::to_vec_pretty(one),
            all => serde_json::to_vec_pretty(all),
        }
        .expect("credentials serialise");
        write_atomically(&path, &text)
            .with_context(|| format!("actor {id}: cannot write its credentials"))
    }

    /// What the running source of `id` asks of the host (its `actor.json`). No manifest asks
    /// for nothing; a broken one's problems are in its fields.
    pub fn manifest(&self, id: &ActorId) -> Manifest {
        read_manifest(&self.source_dir(id))
    }

    /// `broker/cache/`: compiled components, kept across runs.
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("broker/cache")
    }

    /// `private/cargo/data/`: where builds kept their staged crates and target folders before
    /// they moved to [`World::build_cache_dir`]; `cargo` removes what is left there.
    pub fn old_cargo_build_dirs(&self) -> [PathBuf; 2] {
        let data = self.root.join("private/cargo/data");
        [data.join("target"), data.join("work")]
    }

    /// Where `cargo` stages crates and keeps one target folder per principal (DESIGN §28):
    /// `<cache>/sausage/builds/<id>/`, outside the world's folder, so that no path of the world
    /// shows in a build's jail (a mount shows its source's path in `/proc/self/mountinfo`).
    /// `<cache>` is `$XDG_CACHE_HOME`, else `$HOME/.cache`; `<id>` is a hash of the world's real
    /// path, so two worlds never share a folder and the name tells nothing of the world.
    pub fn build_cache_dir(&self) -> Result<PathBuf, String> {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|dir| dir.is_absolute())
            .or_else(|| {
                let home = PathBuf::from(std::env::var_os("HOME")?);
                home.is_absolute().then(|| home.join(".cache"))
            })
            .ok_or(
                "builds keep their files under $XDG_CACHE_HOME or $HOME/.cache, and neither \
                    is set to an absolute path; set HOME",
            )?;
        Ok(self.build_cache_dir_under(&cache))
    }

    /// [`World::build_cache_dir`] for the cache folder `cache`.
    pub fn build_cache_dir_under(&self, cache: &Path) -> PathBuf {
        let real = std::fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone());
        let hash = Sha256::digest(real.as_os_str().as_encoded_bytes());
        let id: String = hash[..8].iter().map(|b| format!("{b:02x}")).collect();
        cache.join("sausage/builds").join(id)
    }

    /// `<build cache>/target/<principal>/`: the target folder of the builds `cargo` runs for
    /// `principal` (DESIGN §18), which no build for anyone else sees. `principal` is one path
    /// component (a-z, 0-9, `-`, `_`): the id of the person the build is for.
    pub fn cargo_target_dir_of(&self, principal: &str) -> Result<PathBuf, String> {
        Ok(self.build_cache_dir()?.join("target").join(principal))
    }

    /// `<build cache>/work/<principal>/<binary>/`: where a crate is staged to be built.
    pub fn cargo_work_dir_of(&self, principal: &str, binary: &str) -> Result<PathBuf, String> {
        Ok(self
            .build_cache_dir()?
            .join("work")
            .join(principal)
            .join(binary))
    }

    /// `broker/mailboxes/`: the journal of every mailbox's waiting messages.
    pub fn journal_dir(&self) -> PathBuf {
        self.root.join("broker/mailboxes")
    }

    /// `broker/ended-cleanly`: written by a run that stopped gracefully with no operation
    /// under way (nothing of it half-written), removed by the next run as it starts. A start
    /// that finds none walks the world for temporaries left by a host that died.
    fn ended_cleanly_path(&self) -> PathBuf {
        self.root.join("broker/ended-cleanly")
    }

    /// Records that this run ends with every file whole (see `ended_cleanly_path`).
    pub fn mark_ended_cleanly(&self) -> Result<()> {
        let path = self.ended_cleanly_path();
        std::fs::write(&path, b"").with_context(|| format!("{}", path.display()))
    }

    /// Whether the last run ended cleanly, forgetting it: this run has not ended yet.
    pub fn take_ended_cleanly(&self) -> Result<bool> {
        let path = self.ended_cleanly_path();
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e).with_context(|| format!("{}: cannot remove it", path.display())),
        }
    }

    /// `broker/scratch/`: candidate test folders, emptied at start.
    pub fn scratch_dir(&self) -> PathBuf {
        self.root.join("broker/scratch")
    }

    /// `broker/window/<id>/`: the snapshots of an actor's files its window replays from
    /// (DESIGN §21); emptied at start, as a window lives as long as its host.
    pub fn window_dir(&self, id: &ActorId) -> PathBuf {
        self.windows_dir().join(id.as_str())
    }

    /// `broker/window/`: every actor's [`World::window_dir`].
    pub fn windows_dir(&self) -> PathBuf {
        self.root.join("broker/window")
    }

    /// `broker/checkpoints/`: what agent turns changed, kept so that a turn can be rewound
    /// (DESIGN §21).
    pub fn checkpoints_dir(&self) -> PathBuf {
        self.root.join("broker/checkpoints")
    }

    /// `broker/checkpoints/<turn>/<id>/`: `id` as it was before the turn `turn` first changed
    /// it. The turn's id is kept to letters, digits, `.`, `_` and `-`; every other byte is
    /// written `%XX`, so no id names another folder.
    pub fn checkpoint_dir(&self, turn: &str, id: &ActorId) -> PathBuf {
        let mut folder = String::new();
        for byte in turn.bytes() {
            match byte {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' => folder.push(byte as char),
                b'.' if !folder.is_empty() => folder.push('.'),
                _ => folder.push_str(&format!("%{byte:02X}")),
            }
        }
        self.checkpoints_dir().join(folder).join(id.as_str())
    }

    pub fn archive_dir(&self) -> PathBuf {
        self.root.join("archive")
    }

    /// The mounts of an instance of `id` (DESIGN §2): its `/data` and `/public`, and every
    /// actor's folder read-only under `/actor`.
    pub fn mounts(&self, id: &ActorId) -> Vec<Mount> {
        self.mounts_with(self.data_dir(id), self.public_dir(id))
    }

    /// The mounts of a candidate, whose `/data` and `/public` are scratch copies.
    pub fn mounts_with(&self, data: PathBuf, public: PathBuf) -> Vec<Mount> {
        vec![
            Mount {
                guest: "/data".into(),
                host: data,
                writable: true,
            },
            Mount {
                guest: "/public".into(),
                host: public,
                writable: true,
            },
            Mount {
                guest: "/actor".into(),
                host: self.root.join("actor"),
                writable: false,
            },
        ]
    }

    /// Resolves a path named in a request from `sender` (DESIGN §3, §18): `/actor/...` is
    /// global; `/public/...` and `/data/...` are a WASM sender's own; only the terminal console
    /// (its owner) names absolute host paths. Another native sender (`web`, `scheduler`) acts
    /// for a person, who has no `/data` of their own, so it may name only `/actor/...` and the
    /// uploads its person sent (`/uploads/<id>/...`). `..` is rejected everywhere.
    pub fn resolve_request_path(&self, sender: &ActorId, path: &str) -> Result<PathBuf, String> {
        let p = Path::new(path);
        if p.components().any(|c| c == std::path::Component::ParentDir) {
            return Err(format!(
                "path `{path}` contains `..`; name the file directly"
            ));
        }
        let under = |prefix: &str| -> Option<&str> {
            let rest = path.strip_prefix(prefix)?;
            (rest.is_empty() || rest.starts_with('/')).then(|| rest.trim_start_matches('/'))
        };
        if let Some(rest) = under("/actor") {
            return Ok(self.root.join("actor").join(rest));
        }
        if sender.is_native()
            && let Some(rest) = under("/uploads")
        {
            // An upload's folder is named by 32 random hex digits: only its uploader knows it.
            let id = rest.split('/').next().unwrap_or_default();
            if id.len() != 32 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return Err(format!("`{path}` names no upload"));
            }
            return Ok(self.uploads_dir().join(rest));
        }
        let console = sender.as_str() == CONSOLE;
        if !sender.is_native() || console {
            if let Some(rest) = under("/public") {
                return Ok(self.public_dir(sender).join(rest));
            }
            if let Some(rest) = under("/data") {
                return Ok(self.data_dir(sender).join(rest));
            }
        }
        if console && p.is_absolute() {
            return Ok(p.to_path_buf());
        }
        if console {
            return Err(format!(
                "path `{path}` is relative; give an absolute path (`/deploy` takes a folder \
                 relative to where sausage runs)"
            ));
        }
        if sender.is_native() {
            return Err(format!(
                "path `{path}` is outside what {sender} may name for a person; name a file \
                 under `/actor/<id>/public/...` or `/actor/<id>/source/...` (only the terminal \
                 console names host paths)"
            ));
        }
        Err(format!(
            "path `{path}` is outside your namespace; use `/actor/...`, `/public/...` or `/data/...`"
        ))
    }

    /// Creates a new world: the registry (with `console` subscribed to `agent`) and the
    /// folders of the native actors. Fails if `sausage.json` already exists.
    pub fn create(&self) -> Result<()> {
        self.check_new()?;
        for dir in [
            "actor",
            "private",
            "broker/versions",
            "broker/scratch",
            "archive",
        ] {
            std::fs::create_dir_all(self.root.join(dir))
                .with_context(|| format!("{}: cannot create {dir}", self.root.display()))?;
        }
        for native in NATIVES.iter().filter(|n| n.made_at_init) {
            let id = ActorId::parse(native.id).expect("native ids are valid");
            self.create_actor_dirs(&id)?;
            self.write_status(&id, &Status::default())?;
        }
        let mut registry = Registry::default();
        registry
            .subscriptions
            .insert("agent".into(), vec!["console".into()]);
        self.save_registry(&registry)
    }

    /// Fails when a world already exists here.
    pub fn check_new(&self) -> Result<()> {
        if self.registry_path().exists() {
            bail!(
                "{}: a world already exists here; run it with `sausage run {}`",
                self.root.display(),
                self.root.display()
            );
        }
        Ok(())
    }

    /// The folders every actor has: `actor/<id>/public` and `private/<id>/data`.
    pub fn create_actor_dirs(&self, id: &ActorId) -> Result<()> {
        for dir in [self.public_dir(id), self.data_dir(id)] {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("actor {id}: cannot create {}", dir.display()))?;
        }
        Ok(())
    }

    pub fn load_registry(&self) -> Result<Registry> {
        let path = self.registry_path();
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => bail!(
                "{}: no world here; create one with `sausage init {}`",
                self.root.display(),
                self.root.display()
            ),
            Err(e) => return Err(e).with_context(|| format!("{}", path.display())),
        };
        let registry: Registry = serde_json::from_slice(&text).with_context(|| {
            format!(
                "{}: the registry is not valid; fix the JSON or restore it",
                path.display()
            )
        })?;
        if let Some(usd) = registry.hold_above_usd
            && !(usd.is_finite() && usd >= 0.0)
        {
            bail!(
                "{}: \"hold_above_usd\" is {usd}; write a number of dollars, 0 or more",
                path.display()
            );
        }
        Ok(registry)
    }

    pub fn save_registry(&self, registry: &Registry) -> Result<()> {
        let text = serde_json::to_vec_pretty(registry).expect("the registry serialises");
        write_atomically(&self.registry_path(), &text)
            .with_context(|| format!("{}: cannot write the registry", self.root.display()))
    }

    pub fn write_status(&self, id: &ActorId, status: &Status) -> Result<()> {
        let text = serde_json::to_vec_pretty(status).expect("a status serialises");
        crate::fs::rewrite_unsynced(&self.status_path(id), &text)
            .with_context(|| format!("actor {id}: cannot write status.json"))
    }

    /// The first message number the next run may use (1 in a new world).
    pub fn load_next_message_id(&self) -> u64 {
        std::fs::read_to_string(self.root.join("broker/next-message-id"))
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(1)
    }

    /// Not synced: the reservation must survive a kill of the host, which the page cache does.
    /// A power cut may lose it and let ids be handed out again, but the messages that carried
    /// them are lost with it (the mailbox journal and guest commits are not synced either; only
    /// an archived `mailbox.jsonl` could still name one). A sync here would sit on the path of
    /// every run's first message.
    pub fn save_next_message_id(&self, next: u64) -> Result<()> {
        crate::fs::write_atomically_unsynced(
            &self.root.join("broker/next-message-id"),
            next.to_string().as_bytes(),
        )
        .with_context(|| format!("{}: cannot reserve message ids", self.root.display()))
    }

    pub fn read_status(&self, id: &ActorId) -> Option<Status> {
        let text = std::fs::read(self.status_path(id)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Appends a note of the host's to the actor's `stderr.log`, rotating it as the guest's
    /// output does.
    pub fn log_note(&self, id: &ActorId, note: &str) {
        let line = format!("[sausage] {note}\n");
        if let Err(e) = ActorLog::new(self.log_path(id)).append(line.as_bytes()) {
            tracing::warn!("actor {id}: cannot write a note: {e}");
        }
    }

    /// Whether a `sausage run` holds the world's lock now. Looks by taking the lock and letting
    /// go at once: a run starting in that instant is told the world is in use.
    pub fn is_running(&self) -> bool {
        use std::os::fd::AsRawFd;
        let Ok(file) = std::fs::File::open(self.root.join("broker/lock")) else {
            return false;
        };
        // SAFETY: flock on a descriptor we own; it has no memory effects. Closing the file
        // releases a lock taken.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) != 0 }
    }

    /// Takes the world's lock for this process; it is released when the process ends, even
    /// by a hard kill. Fails when another `sausage run` holds it.
    pub fn lock(&self) -> Result<std::fs::File> {
        use std::os::fd::AsRawFd;
        let path = self.root.join("broker/lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("{}: cannot open the lock file", path.display()))?;
        // SAFETY: flock on a descriptor we own; it has no memory effects.
        let taken = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !taken {
            bail!(
                "{}: another `sausage run` is using this world; stop it first",
                self.root.display()
            );
        }
        Ok(file)
    }
}

/// What an actor's manifest (`actor.json`) asks of the host. Each field is read on its own: a
/// problem with one (in `Err`, naming the file) leaves the other as asked.
#[derive(Debug, PartialEq)]
pub struct Manifest {
    /// `"network"`: the hosts it may reach, `host` or `host:port`; missing means none.
    pub network: Result<Vec<String>, String>,
    /// `"memory_mb"`: its instances' memory limit in MiB, if it sets one (1 to
    /// [`MAX_MEMORY_MB`]).
    pub memory_mb: Result<Option<u32>, String>,
    /// `"window"`: how many of the messages it read last the broker keeps for shadow runs and
    /// forks (DESIGN §21), if it sets it (0 to [`MAX_WINDOW`]; 0 keeps none).
    pub window: Result<Option<usize>, String>,
    /// `"http"`: the routes it serves (DESIGN §24), by path; missing means none.
    pub http: Result<Vec<(String, routes::Route)>, String>,
}

/// The messages an actor's window keeps when its manifest does not say (DESIGN §21).
pub const DEFAULT_WINDOW: usize = 256;
/// The most messages a window may keep (`"window"` in `actor.json`).
pub const MAX_WINDOW: usize = 4096;

/// The manifest in the source folder `source`: none there is an empty one.
pub fn read_manifest(source: &Path) -> Manifest {
    match std::fs::read(source.join(MANIFEST)) {
        Ok(text) => parse_manifest(&text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => parse_manifest(b"{}"),
        Err(e) => Manifest::broken(format!("{MANIFEST}: {e}")),
    }
}

/// Reads a manifest's text; a text that is not a JSON object breaks both fields.
pub fn parse_manifest(text: &[u8]) -> Manifest {
    let manifest: serde_json::Value = match serde_json::from_slice(text) {
        Ok(serde_json::Value::Object(fields)) => serde_json::Value::Object(fields),
        Ok(_) => return Manifest::broken(format!("{MANIFEST} must be a JSON object")),
        Err(e) => return Manifest::broken(format!("{MANIFEST} is not valid JSON ({e})")),
    };
    let network = match &manifest["network"] {
        serde_json::Value::Null => Ok(Vec::new()),
        serde_json::Value::Array(hosts) => hosts
            .iter()
            .map(|host| match host.as_str() {
                Some(host) if !host.trim().is_empty() && !host.contains('/') => {
                    Ok(host.trim().to_string())
                }
                _ => Err(format!(
                    "{MANIFEST}: \"network\" holds {host}, not a host such as \"api.example.com\" \
                     or \"127.0.0.1:8080\""
                )),
            })
            .collect(),
        other => Err(format!(
            "{MANIFEST}: \"network\" is {other}, not a list of hosts"
        )),
    };
    let memory_mb = match &manifest["memory_mb"] {
        serde_json::Value::Null => Ok(None),
        value => match value.as_u64() {
            Some(mb @ 1..) if mb <= u64::from(MAX_MEMORY_MB) => Ok(Some(mb as u32)),
            _ => Err(format!(
                "{MANIFEST}: \"memory_mb\" is {value}, not a number of MiB from 1 to \
                 {MAX_MEMORY_MB}"
            )),
        },
    };
    let window = match &manifest["window"] {
        serde_json::Value::Null => Ok(None),
        value => match value.as_u64() {
            Some(n) if n <= MAX_WINDOW as u64 => Ok(Some(n as usize)),
            _ => Err(format!(
                "{MANIFEST}: \"window\" is {value}, not a number of messages from 0 (none kept) \
                 to {MAX_WINDOW}"
            )),
        },
    };
    let http = match &manifest["http"] {
        serde_json::Value::Null => Ok(Vec::new()),
        serde_json::Value::Array(routes) => routes
            .iter()
            .map(|route| {
                routes::parse_route(route, "", true)
                    .map_err(|e| format!("{MANIFEST}: \"http\": {e}"))
            })
            .collect(),
        other => Err(format!(
            "{MANIFEST}: \"http\" is {other}, not a list of routes such as [{{\"path\": \"/hooks/github\"}}]"
        )),
    };
    Manifest {
        network,
        memory_mb,
        window,
        http,
    }
}

impl Manifest {
    fn broken(problem: String) -> Manifest {
        Manifest {
            network: Err(problem.clone()),
            memory_mb: Err(problem.clone()),
            window: Err(problem.clone()),
            http: Err(problem),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ActorId {
        ActorId::parse(s).unwrap()
    }

    #[test]
    fn request_paths_stay_in_the_senders_namespace() {
        let w = World::new("/w");
        let notes = id("notes");
        let ok = |p: &str| w.resolve_request_path(&notes, p).unwrap();
        assert_eq!(
            ok("/actor/cargo/public/b.wasm"),
            Path::new("/w/actor/cargo/public/b.wasm")
        );
        assert_eq!(
            ok("/public/x.wasm"),
            Path::new("/w/actor/notes/public/x.wasm")
        );
        assert_eq!(ok("/data/x"), Path::new("/w/private/notes/data/x"));
        for bad in [
            "/data/../../etc",
            "/etc/passwd",
            "relative",
            "/datax/y",
            "/actor/../x",
        ] {
            let err = w.resolve_request_path(&notes, bad).unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
        let console = id("console");
        assert_eq!(
            w.resolve_request_path(&console, "/tmp/a.wasm").unwrap(),
            Path::new("/tmp/a.wasm")
        );
        assert!(w.resolve_request_path(&console, "/tmp/../a").is_err());
        let relative = w
            .resolve_request_path(&console, "target/a.wasm")
            .unwrap_err();
        assert!(
            relative.contains("is relative; give an absolute path"),
            "{relative}"
        );
        // Other native senders act for a person: no host paths, no `/data` of their own.
        for native in ["web", "scheduler", "cargo"] {
            let native = id(native);
            assert_eq!(
                w.resolve_request_path(&native, "/actor/echo/source")
                    .unwrap(),
                Path::new("/w/actor/echo/source")
            );
            for bad in [
                "/w/broker/credentials",
                "/etc/passwd",
                "/data/x",
                "/public/y",
            ] {
                let err = w.resolve_request_path(&native, bad).unwrap_err();
                assert!(err.contains("only the terminal console"), "{err}");
            }
        }
        // An upload is named by its 32 hex digits, by native senders only.
        let upload = "/uploads/0123456789abcdef0123456789abcdef/Cargo.toml";
        assert_eq!(
            w.resolve_request_path(&id("web"), upload).unwrap(),
            Path::new("/w/broker/uploads/0123456789abcdef0123456789abcdef/Cargo.toml")
        );
        assert!(w.resolve_request_path(&notes, upload).is_err());
        for bad in [
            "/uploads",
            "/uploads/x",
            "/uploads/0123456789ABCDEF0123456789ABCDEF",
        ] {
            let err = w.resolve_request_path(&id("web"), bad).unwrap_err();
            assert!(err.contains("names no upload"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_new_world_has_the_layout_and_the_console_subscription() {
        let dir = tempfile::tempdir().unwrap();
        let w = World::new(dir.path().join("w"));
        w.create().unwrap();
        let registry = w.load_registry().unwrap();
        assert_eq!(registry.subscriptions["agent"], vec!["console"]);
        for native in ["broker", "console", "cargo"] {
            assert!(w.public_dir(&id(native)).is_dir());
            assert_eq!(w.read_status(&id(native)).unwrap().state, State::Stopped);
        }
        assert_eq!(
            w.console_history_path(),
            dir.path().join("w/private/console/data/history")
        );
        assert!(w.console_history_path().parent().unwrap().is_dir());
        let again = w.create().unwrap_err().to_string();
        assert!(again.contains("already exists"), "{again}");
    }

    #[test]
    fn a_manifest_lists_hosts_and_anything_else_means_no_network() {
        assert_eq!(
            parse_manifest(br#"{"network": ["api.openai.com", "127.0.0.1:8080"]}"#).network,
            Ok(vec!["api.openai.com".into(), "127.0.0.1:8080".into()])
        );
        assert_eq!(parse_manifest(br#"{"name": "x"}"#).network, Ok(vec![]));
        for (bad, says) in [
            (&b"{network"[..], "not valid JSON"),
            (b"[]", "JSON object"),
            (br#"{"network": "a.com"}"#, "not a list"),
            (br#"{"network": [1]}"#, "holds 1"),
            (br#"{"network": ["https://a.com/"]}"#, "not a host"),
        ] {
            let err = parse_manifest(bad).network.unwrap_err();
            assert!(err.contains(says) && err.contains("actor.json"), "{err}");
        }
        let dir = tempfile::tempdir().unwrap();
        let w = World::new(dir.path());
        let none = w.manifest(&id("x"));
        assert_eq!(none.network, Ok(vec![]), "no manifest");
        assert_eq!(none.memory_mb, Ok(None), "no manifest");
    }

    #[test]
    fn a_manifest_sets_the_memory_limit_within_bounds() {
        let memory = |text: &str| parse_manifest(text.as_bytes()).memory_mb;
        assert_eq!(memory(r#"{"network": []}"#), Ok(None));
        assert_eq!(memory(r#"{"memory_mb": 32}"#), Ok(Some(32)));
        assert_eq!(memory(r#"{"memory_mb": 4096}"#), Ok(Some(MAX_MEMORY_MB)));
        for bad in ["0", "4097", "-1", "1.5", "\"lots\""] {
            let err = memory(&format!(r#"{{"memory_mb": {bad}}}"#)).unwrap_err();
            assert!(
                err.contains("\"memory_mb\"") && err.contains("4096"),
                "{err}"
            );
        }
        let both = parse_manifest(br#"{"network": "a.com", "memory_mb": 64}"#);
        assert!(both.network.is_err());
        assert_eq!(
            both.memory_mb,
            Ok(Some(64)),
            "one bad field leaves the other"
        );
    }

    #[test]
    fn a_manifest_sets_the_window_within_bounds() {
        let window = |text: &str| parse_manifest(text.as_bytes()).window;
        assert_eq!(window("{}"), Ok(None));
        assert_eq!(window(r#"{"window": 0}"#), Ok(Some(0)));
        assert_eq!(window(r#"{"window": 4096}"#), Ok(Some(MAX_WINDOW)));
        for bad in ["4097", "-1", "2.5", "\"all\""] {
            let err = window(&format!(r#"{{"window": {bad}}}"#)).unwrap_err();
            assert!(err.contains("\"window\"") && err.contains("4096"), "{err}");
        }
    }

    #[test]
    fn credentials_live_outside_every_mount() {
        let dir = tempfile::tempdir().unwrap();
        let w = World::new(dir.path());
        let agent = id("agent");
        assert_eq!(w.read_credentials(&agent).unwrap(), []);
        let credentials = Credentials {
            base_url: "https://api.example.com".into(),
            header: "x-api-key".into(),
            value: "sk-1".into(),
        };
        w.write_credentials(&agent, &credentials).unwrap();
        assert_eq!(
            w.read_credentials(&agent).unwrap(),
            std::slice::from_ref(&credentials)
        );
        let mcp = Credentials {
            base_url: "http://127.0.0.1:9/mcp".into(),
            header: "authorization".into(),
            value: "Bearer m".into(),
        };
        w.write_credentials(&agent, &mcp).unwrap();
        let newer = Credentials {
            value: "sk-2".into(),
            ..credentials.clone()
        };
        w.write_credentials(&agent, &newer).unwrap();
        assert_eq!(w.read_credentials(&agent).unwrap(), [mcp, newer]);
        let path = w.credentials_path(&agent);
        assert!(
            w.mounts(&agent).iter().all(|m| !path.starts_with(&m.host)),
            "{}",
            path.display()
        );
    }

    #[test]
    fn one_lock_per_world() {
        let dir = tempfile::tempdir().unwrap();
        let w = World::new(dir.path());
        w.create().unwrap();
        let held = w.lock().unwrap();
        assert!(w.lock().unwrap_err().to_string().contains("another"));
        drop(held);
        w.lock().unwrap();
    }

    /// `"limits"` in `sausage.json`: each field falls back to its tier's default alone, a
    /// misspelt name keeps the world from opening, and a registry without limits is written
    /// without them.
    #[test]
    fn limits_fall_back_field_by_field_and_refuse_unknown_names() {
        let dir = tempfile::tempdir().unwrap();
        let w = World::new(dir.path());
        w.create().unwrap();
        let unset = w.load_registry().unwrap();
        assert_eq!(
            unset.limits.of(Tier::Member),
            Allowance {
                max_actors: Some(DEFAULT_MEMBER_MAX_ACTORS),
                max_memory_mb: Some(DEFAULT_MEMBER_MAX_MEMORY_MB)
            }
        );
        assert_eq!(unset.limits.of(Tier::Guest).max_actors, Some(0));
        assert_eq!(unset.limits.of(Tier::Owner).max_memory_mb, None);
        w.save_registry(&unset).unwrap();
        assert!(
            !std::fs::read_to_string(w.registry_path())
                .unwrap()
                .contains("limits")
        );

        let written = r#"{"actors": {}, "subscriptions": {},
            "limits": {"member": {"max_actors": 3}, "owner": {"max_memory_mb": 100}}}"#;
        std::fs::write(w.registry_path(), written).unwrap();
        let limits = w.load_registry().unwrap().limits;
        assert_eq!(
            limits.of(Tier::Member),
            Allowance {
                max_actors: Some(3),
                max_memory_mb: Some(DEFAULT_MEMBER_MAX_MEMORY_MB)
            }
        );
        assert_eq!(
            limits.of(Tier::Owner),
            Allowance {
                max_actors: None,
                max_memory_mb: Some(100)
            }
        );
        let mut registry = w.load_registry().unwrap();
        registry.subscriptions.insert("a".into(), vec!["b".into()]);
        w.save_registry(&registry).unwrap();
        assert_eq!(w.load_registry().unwrap().limits, limits, "kept by saves");

        for typo in [
            r#"{"member": {"max_actor": 3}}"#,
            r#"{"admin": {"max_actors": 3}}"#,
            r#"{"member": {"max_actors": -1}}"#,
        ] {
            let text = format!(r#"{{"actors": {{}}, "subscriptions": {{}}, "limits": {typo}}}"#);
            std::fs::write(w.registry_path(), text).unwrap();
            let e = format!("{:#}", w.load_registry().unwrap_err());
            assert!(e.contains("registry is not valid"), "{typo}: {e}");
        }
    }
}
