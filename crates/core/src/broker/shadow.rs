//! Shadow runs (DESIGN §21): before an upgrade lands, the candidate and the running version are
//! each fed the actor's window (the messages it read last, with the original envelopes) on a
//! scratch copy of its files as they were before the first of them, with a clock that replays
//! the delivery times, the same seeded random numbers and no network. The running version runs
//! twice: what differs between its own two runs is noisy and not held against the candidate.
//! What each wrote for each message, and the files each left, are compared into a report; an
//! answer to an HTTP request of the window by the response it makes.
//!
//! Nothing a shadow run writes reaches the actor or any other (the answers to replayed `http`
//! requests included): its lines are only captured, its files are scratch copies removed after.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, watch};

use super::stdio::{Captured, Line, Lines, WRITE_CHUNK};
use super::window::{Read, Window};
use crate::message::http::{Chunk, answer, chunk};
use crate::message::{ActorId, Envelope};
use crate::runtime::network::Network;
use crate::runtime::replay::{Replay, ReplayClock};
use crate::runtime::stdio::{BoxFuture, GuestInput, GuestOutput};
use crate::runtime::{Exit, InstanceConfig, Program, Runtime};
use crate::world::World;

/// How many differing messages a report lists.
const LISTED: usize = 20;
/// How long one message of the window may take before the run goes on to the next (the
/// actor may be one that never waits for input between messages).
const MESSAGE_PATIENCE: Duration = Duration::from_secs(5);
/// How long a whole run may take; the messages after it are not compared.
const RUN_PATIENCE: Duration = Duration::from_secs(60);
/// How much of a crashed run's stderr a refusal quotes.
const STDERR_TAIL_CHARS: usize = 800;

/// What the request's `"shadow"` asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Install when the transcripts pass and the candidate did not crash on the window.
    Report,
    /// Also refuse when anything not noisy differs.
    Same,
    /// No shadow run.
    Off,
}

impl Mode {
    /// The request's `"shadow"`; missing is [`Mode::Report`].
    pub fn of(body: &Value) -> Result<Mode, String> {
        match body.get("shadow") {
            None | Some(Value::Null) => Ok(Mode::Report),
            Some(Value::String(mode)) if mode == "report" => Ok(Mode::Report),
            Some(Value::String(mode)) if mode == "same" => Ok(Mode::Same),
            Some(Value::String(mode)) if mode == "off" => Ok(Mode::Off),
            Some(other) => Err(format!(
                "`shadow` is {other}; it is \"report\" (the default: install unless the new \
                 version crashes on the actor's recent messages), \"same\" (refuse any \
                 difference that is not noise) or \"off\""
            )),
        }
    }
}

/// One version in a shadow run.
pub struct Version<'a> {
    pub number: u32,
    pub program: &'a Program,
    pub memory_mb: u32,
}

/// What a shadow run found: the report for the reply, and why the candidate is refused, if
/// it is.
pub struct Outcome {
    pub report: Value,
    pub refusal: Option<String>,
}

/// Runs `old` (twice) and `new` on `window` and compares them.
pub async fn run(
    runtime: &Arc<Runtime>,
    world: &World,
    id: &ActorId,
    window: Option<&Arc<Window>>,
    old: Version<'_>,
    new: Version<'_>,
    mode: Mode,
) -> Result<Outcome, String> {
    let scratch = Scratch::new(world, id, new.number);
    let copied = match window {
        None => None,
        Some(window) => {
            let (window, roots) = (window.clone(), scratch.roots());
            tokio::task::spawn_blocking(move || -> std::io::Result<_> {
                let [first, rest @ ..] = &roots;
                let Some(recent) = window.copy(&first.join("data"), &first.join("public"))? else {
                    return Ok(None);
                };
                for root in rest {
                    for part in ["data", "public"] {
                        crate::fs::link_tree(&first.join(part), &root.join(part))?;
                    }
                }
                Ok(Some(recent.reads))
            })
            .await
            .map_err(|e| format!("host bug: copying the window failed: {e}"))?
            .map_err(|e| format!("cannot copy the actor's files for its shadow run: {e}"))?
        }
    };
    let Some(reads) = copied else {
        return Ok(Outcome {
            report: empty_report(),
            refusal: None,
        });
    };
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let [first, second, third] = scratch.roots();
    let run =
        |version: &Version<'_>, root: PathBuf| Run::of(runtime, world, id, version, root, seed);
    let (one, two, candidate) = tokio::join!(
        run(&old, first).feed(&reads),
        run(&old, second).feed(&reads),
        run(&new, third).feed(&reads),
    );
    let (one, two, candidate) = tokio::task::spawn_blocking(move || {
        let (mut one, mut two, mut candidate) = (one, two, candidate);
        hash_differences([&mut one, &mut two, &mut candidate]);
        (one, two, candidate)
    })
    .await
    .map_err(|e| format!("host bug: comparing the shadow runs' files failed: {e}"))?;
    Ok(compare(
        &reads,
        [&one, &two, &candidate],
        new.number,
        id,
        mode,
    ))
}

/// Feeds `reads` to one run of `version` on the files under `root` (`data` and `public`, a copy
/// of the window's snapshot), as a shadow run would: what a fork starts from.
pub async fn replay(
    runtime: &Arc<Runtime>,
    world: &World,
    id: &ActorId,
    version: Version<'_>,
    root: &Path,
    reads: &[Read],
) {
    Run::of(runtime, world, id, &version, root.to_owned(), 0)
        .feed(reads)
        .await;
}

fn empty_report() -> Value {
    json!({
        "messages": 0, "same": 0, "different": [], "files": [], "noisy": 0, "crashed": null,
    })
}

/// The three scratch folders of one shadow run, removed when dropped.
struct Scratch {
    base: PathBuf,
}

impl Scratch {
    fn new(world: &World, id: &ActorId, version: u32) -> Scratch {
        Scratch {
            base: world.scratch_dir().join(format!("{id}-shadow-{version}")),
        }
    }

    fn roots(&self) -> [PathBuf; 3] {
        ["old-1", "old-2", "new"].map(|run| self.base.join(run))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // A leftover is emptied at the next start; nothing depends on it.
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// One run of one version over the window.
struct Run<'a> {
    runtime: &'a Arc<Runtime>,
    world: &'a World,
    id: &'a ActorId,
    number: u32,
    program: Program,
    memory_mb: u32,
    root: PathBuf,
    seed: u64,
}

/// What one run did.
struct Ran {
    /// What it wrote for each message it was fed, in order.
    wrote: Vec<Vec<Value>>,
    /// Where it crashed first: the message's index, how it ended, and its stderr's tail.
    crashed: Option<(usize, String)>,
    /// Every file it left: path (as the guest sees it) → size and SHA-256 (once
    /// [`hash_differences`] ran).
    files: BTreeMap<String, (u64, String)>,
}

impl<'a> Run<'a> {
    fn of(
        runtime: &'a Arc<Runtime>,
        world: &'a World,
        id: &'a ActorId,
        version: &Version<'_>,
        root: PathBuf,
        seed: u64,
    ) -> Run<'a> {
        Run {
            runtime,
            world,
            id,
            number: version.number,
            program: version.program.clone(),
            memory_mb: version.memory_mb,
            root,
            seed,
        }
    }

    async fn feed(self, reads: &[Read]) -> Ran {
        let clock = ReplayClock::new();
        if let Some(first) = reads.first() {
            clock.set(first.at);
        }
        let deadline = tokio::time::Instant::now() + RUN_PATIENCE;
        let mut wrote = Vec::with_capacity(reads.len());
        let mut crashed = None;
        let mut instance = None;
        for (index, read) in reads.iter().enumerate() {
            if tokio::time::Instant::now() > deadline {
                break;
            }
            clock.set(read.at);
            let mut ended = None;
            if instance.is_none() {
                match self.start(&clock).await {
                    Ok(running) => instance = Some(running),
                    Err((exit, stderr)) => ended = Some((exit, stderr, Vec::new())),
                }
            }
            if let Some(running) = &mut instance {
                let exit = running.handle(&read.envelope).await;
                let written = running.take_written();
                match exit {
                    None => wrote.push(written),
                    Some(exit) => {
                        ended = Some((exit, running.stderr.tail(STDERR_TAIL_CHARS), written))
                    }
                }
            }
            let Some((exit, stderr, written)) = ended else {
                continue;
            };
            wrote.push(written);
            if !exit.is_clean() && crashed.is_none() {
                let stderr = if stderr.is_empty() {
                    String::new()
                } else {
                    format!("; stderr ends with:\n{stderr}")
                };
                crashed = Some((index, format!("{exit}{stderr}")));
            }
            // As the supervisor would, a new instance takes the next message.
            instance = None;
        }
        // Its files are read once its last instance is gone (an open writer's data is lost,
        // as a kill would lose it).
        drop(instance);
        let root = self.root.clone();
        let files = tokio::task::spawn_blocking(move || digest(&root))
            .await
            .unwrap_or_default();
        Ran {
            wrote,
            crashed,
            files,
        }
    }

    /// Starts an instance and waits until it first waits for input (what it writes at its
    /// start is not compared: it answers no message). An instance that ends first gives how,
    /// and its stderr's tail.
    async fn start(&self, clock: &Arc<ReplayClock>) -> Result<Running, (Exit, String)> {
        let feed = Arc::new(Feed::default());
        let written = Arc::new(Mutex::new(Vec::new()));
        let stderr = Captured::default();
        let config = InstanceConfig {
            env: vec![
                ("SAUSAGE_ACTOR".into(), self.id.to_string()),
                ("SAUSAGE_VERSION".into(), self.number.to_string()),
                ("SAUSAGE_SHADOW".into(), "1".into()),
            ],
            mounts: self
                .world
                .mounts_with(self.root.join("data"), self.root.join("public")),
            stdin: feed.clone(),
            stdout: InstanceConfig::output(Written {
                lines: Lines::default(),
                written: written.clone(),
            }),
            stderr: InstanceConfig::output(stderr.clone()),
            network: Network::default(),
            replica: None,
            replay: Some(Replay {
                clock: clock.clone(),
                seed: self.seed,
            }),
            memory_in_use: None,
            pack_at_first_wait: false,
        };
        let (runtime, program, memory_mb) =
            (self.runtime.clone(), self.program.clone(), self.memory_mb);
        let task =
            tokio::spawn(async move { runtime.run_with(&program, config, memory_mb, || ()).await });
        let mut running = Running {
            progress: feed.progress.subscribe(),
            feed,
            written,
            stderr,
            task,
            fed: 0,
        };
        if let Some(exit) = running.settle().await {
            return Err((exit, running.stderr.tail(STDERR_TAIL_CHARS)));
        }
        running.take_written();
        Ok(running)
    }
}

/// A running instance of a shadow run.
struct Running {
    feed: Arc<Feed>,
    progress: watch::Receiver<Progress>,
    written: Arc<Mutex<Vec<Value>>>,
    stderr: Captured,
    task: tokio::task::JoinHandle<Exit>,
    /// Messages pushed so far.
    fed: usize,
}

impl Running {
    /// Feeds one message and waits until the instance is done with it: it waits for input
    /// again with nothing left to read, it ended (returned), or [`MESSAGE_PATIENCE`] passed.
    async fn handle(&mut self, envelope: &Envelope) -> Option<Exit> {
        self.feed.push(Bytes::from(envelope.to_line()));
        self.fed += 1;
        self.settle().await
    }

    async fn settle(&mut self) -> Option<Exit> {
        let fed = self.fed;
        let done = self.progress.wait_for(|p| p.taken >= fed && p.waiting);
        tokio::select! {
            exit = &mut self.task => Some(exit.unwrap_or_else(|e| Exit::Trap(e.to_string()))),
            _ = tokio::time::timeout(MESSAGE_PATIENCE, done) => None,
        }
    }

    fn take_written(&self) -> Vec<Value> {
        std::mem::take(&mut *self.written.lock().expect("written lock"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A shadow instance's stdin: the messages pushed, one line each, and whether the guest waits
/// for more.
#[derive(Default)]
struct Feed {
    state: Mutex<FeedState>,
    arrived: Notify,
    progress: watch::Sender<Progress>,
}

#[derive(Default)]
struct FeedState {
    queue: VecDeque<Bytes>,
    partial: Option<Bytes>,
}

/// How far the guest got: lines it began to read, and whether it now waits with nothing left.
#[derive(Clone, Copy, Default)]
struct Progress {
    taken: usize,
    waiting: bool,
}

impl Feed {
    fn push(&self, line: Bytes) {
        self.state.lock().expect("feed lock").queue.push_back(line);
        self.progress.send_modify(|p| p.waiting = false);
        self.arrived.notify_one();
    }
}

impl GuestInput for Feed {
    fn read(&self, max: usize) -> Option<Bytes> {
        let mut state = self.state.lock().expect("feed lock");
        if state.partial.is_none() {
            state.partial = state.queue.pop_front();
            if state.partial.is_some() {
                self.progress.send_modify(|p| p.taken += 1);
            }
        }
        let Some(partial) = state.partial.as_mut() else {
            return Some(Bytes::new());
        };
        let chunk = partial.split_to(max.min(partial.len()));
        if partial.is_empty() {
            state.partial = None;
        }
        Some(chunk)
    }

    fn readable(&self) -> BoxFuture<'_> {
        Box::pin(async move {
            loop {
                let arrived = self.arrived.notified();
                {
                    let state = self.state.lock().expect("feed lock");
                    if state.partial.is_some() || !state.queue.is_empty() {
                        return;
                    }
                }
                self.progress.send_modify(|p| p.waiting = true);
                arrived.await;
            }
        })
    }
}

/// A shadow instance's stdout: every message it writes, parsed (lines that are not messages
/// are skipped, as routing would skip them).
struct Written {
    lines: Lines,
    written: Arc<Mutex<Vec<Value>>>,
}

impl GuestOutput for Written {
    fn capacity(&mut self) -> usize {
        WRITE_CHUNK
    }

    fn write(&mut self, bytes: &[u8]) {
        let written = &self.written;
        self.lines.push(bytes, |line| {
            if let Line::Whole(line) = line
                && let Ok(message @ Value::Object(_)) = serde_json::from_slice::<Value>(line)
                && message["body"].is_object()
            {
                written.lock().expect("written lock").push(message);
            }
        });
    }

    fn writable(&mut self) -> BoxFuture<'_> {
        Box::pin(async {})
    }
}

/// Every regular file under `root`'s `data` and `public`, as `/data/...` and `/public/...`,
/// with its size and where it is (hidden temporaries left out); the third field, its hash, is
/// filled by [`hash_differences`].
fn digest(root: &Path) -> BTreeMap<String, (u64, String)> {
    fn walk(dir: &Path, shown: &str, into: &mut BTreeMap<String, (u64, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".sausage-tmp-") {
                continue;
            }
            let (path, shown) = (entry.path(), format!("{shown}/{name}"));
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => walk(&path, &shown, into),
                Ok(kind) if kind.is_file() => {
                    if let Ok(meta) = entry.metadata() {
                        use std::os::unix::fs::MetadataExt;
                        let at = format!("{}:{}:{}", meta.dev(), meta.ino(), path.display());
                        into.insert(shown, (meta.len(), at));
                    }
                }
                _ => {}
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(&root.join("data"), "/data", &mut files);
    walk(&root.join("public"), "/public", &mut files);
    files
}

/// Makes the three runs' files comparable by content, reading as little as it can: a file no
/// run rewrote is one inode (hard links of the one snapshot) in all three, the same without
/// reading it; the others are hashed (SHA-256), each inode once.
fn hash_differences(runs: [&mut Ran; 3]) {
    let paths: std::collections::BTreeSet<String> = runs
        .iter()
        .flat_map(|run| run.files.keys().cloned())
        .collect();
    let inode = |at: &str| at.splitn(3, ':').take(2).collect::<Vec<_>>().join(":");
    let mut hashes: std::collections::HashMap<String, String> = Default::default();
    let [one, two, three] = runs;
    for path in paths {
        let ats: Vec<Option<String>> = [&*one, &*two, &*three]
            .iter()
            .map(|run| run.files.get(&path).map(|(_, at)| at.clone()))
            .collect();
        let shared = ats.iter().all(Option::is_some)
            && ats
                .iter()
                .flatten()
                .map(|at| inode(at))
                .collect::<std::collections::HashSet<_>>()
                .len()
                == 1;
        for run in [&mut *one, &mut *two, &mut *three] {
            let Some((_, at)) = run.files.get_mut(&path) else {
                continue;
            };
            let key = inode(at);
            *at = if shared {
                format!("unchanged {key}")
            } else {
                hashes
                    .entry(key)
                    .or_insert_with(|| {
                        let file = at.splitn(3, ':').nth(2).unwrap_or_default();
                        std::fs::read(file).map_or_else(
                            |e| format!("unreadable ({e})"),
                            |bytes| format!("{:x}", Sha256::digest(&bytes)),
                        )
                    })
                    .clone()
            };
        }
    }
}

/// The report, and the refusal `mode` makes of it.
fn compare(
    reads: &[Read],
    [one, two, candidate]: [&Ran; 3],
    version: u32,
    id: &ActorId,
    mode: Mode,
) -> Outcome {
    let compared = one
        .wrote
        .len()
        .min(two.wrote.len())
        .min(candidate.wrote.len());
    let crashed_at = |ran: &Ran| ran.crashed.as_ref().map(|(index, _)| *index);
    let says = |ran: &Ran, index: usize| ran.wrote[index].iter().map(said).collect::<Vec<_>>();
    let (mut same, mut noisy, mut different) = (0, 0, Vec::new());
    for index in 0..compared {
        let old = says(one, index);
        let noise = old != says(two, index)
            || (crashed_at(one) == Some(index)) != (crashed_at(two) == Some(index));
        if old == says(candidate, index) {
            same += 1;
        } else if noise {
            noisy += 1;
        } else {
            different.push(index);
        }
    }
    let mut files = Vec::new();
    let paths: std::collections::BTreeSet<&String> = one
        .files
        .keys()
        .chain(two.files.keys())
        .chain(candidate.files.keys())
        .collect();
    let shown = |file: Option<&(u64, String)>| match file {
        Some((size, hash)) => json!({"size": size, "sha256": hash}),
        None => Value::Null,
    };
    for path in paths {
        let (old, again, new) = (
            one.files.get(path),
            two.files.get(path),
            candidate.files.get(path),
        );
        if old != new && old == again {
            files.push(json!({"path": path, "old": shown(old), "new": shown(new)}));
        }
    }
    // The candidate crashed where the running version did not: the message broke it.
    let crashed = candidate
        .crashed
        .as_ref()
        .filter(|(index, _)| crashed_at(one) != Some(*index));
    let message = |index: usize| envelope_value(&reads[index].envelope);
    let report = json!({
        "messages": compared,
        "same": same,
        "different": different.iter().take(LISTED).map(|&index| json!({
            "message": message(index),
            "old": one.wrote[index],
            "new": candidate.wrote[index],
        })).collect::<Vec<_>>(),
        "files": files,
        "noisy": noisy,
        "crashed": crashed.map(|(index, exit)| json!({"message": message(*index), "exit": exit})),
    });
    let refusal = if let Some((index, exit)) = crashed {
        let read = &reads[*index].envelope;
        Some(format!(
            "version {version} of `{id}` crashed on message {} from `{}` of the actor's \
             recent traffic ({}), which the running version handled: it {exit}; make it \
             handle that message with the actor's files as they were, or upgrade with \
             \"shadow\": \"off\" to skip this check",
            read.id,
            read.from,
            read.body.get()
        ))
    } else if mode == Mode::Same && (!different.is_empty() || !files.is_empty()) {
        let first = match different.first() {
            Some(&index) => format!(
                "for message {} ({}) the running version wrote {} and version {version} \
                 wrote {}",
                reads[index].envelope.id,
                reads[index].envelope.body.get(),
                Value::from(one.wrote[index].clone()),
                Value::from(candidate.wrote[index].clone()),
            ),
            None => format!("it left other files: {}", Value::from(files.clone())),
        };
        Some(format!(
            "version {version} of `{id}` differs from the running version on the actor's \
             last {compared} messages ({} messages and {} files differ, not counting noise): \
             {first}. Upgrade with \"shadow\": \"report\" to install it anyway",
            different.len(),
            files.len()
        ))
    } else {
        None
    };
    Outcome { report, refusal }
}

/// What a written message says, for comparing: an answer to the public address (`to` `http`)
/// as the response it makes (status, headers, body bytes), so two answers that make the same
/// response are the same however each is written (`"status": 200` or none, a JSON body as an
/// object or as its text with its type); any other message as written.
fn said(message: &Value) -> Value {
    if message["to"] != "http" {
        return message.clone();
    }
    let body = &message["body"];
    let response = match (answer(&crate::message::raw(body)), chunk(body)) {
        (Ok(answer), _) => {
            let mut headers: Vec<(String, Vec<u8>)> = (answer.headers.iter())
                .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
                .collect();
            headers.sort();
            json!({
                "status": answer.status.as_u16(), "headers": headers, "body": answer.body,
                "stream": answer.stream,
            })
        }
        (_, Ok(Chunk::Data(data))) => json!({"chunk": data}),
        (_, Ok(Chunk::End)) => json!({"end": true}),
        // An answer the public address would refuse (502) is compared as written.
        (Err(_), Err(_)) => return message.clone(),
    };
    json!({"to": "http", "reply_to": message["reply_to"], "says": response})
}

/// A message as the actor read it.
fn envelope_value(envelope: &Envelope) -> Value {
    serde_json::from_slice(&envelope.to_line()).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::raw;

    fn reads(n: usize) -> Vec<Read> {
        (0..n)
            .map(|i| Read {
                envelope: Arc::new(Envelope {
                    id: format!("m-{i}"),
                    from: ActorId::parse("test").unwrap(),
                    reply_to: None,
                    speaker: None,
                    schedule: None,
                    trace: Default::default(),
                    body: raw(&json!({"type": "n", "n": i})),
                }),
                at: SystemTime::now(),
            })
            .collect()
    }

    fn ran(answers: &[i64], files: &[(&str, &str)]) -> Ran {
        Ran {
            wrote: answers
                .iter()
                .map(|a| vec![json!({"to": "test", "body": {"answer": a}})])
                .collect(),
            crashed: None,
            files: files
                .iter()
                .map(|(path, hash)| (path.to_string(), (1, hash.to_string())))
                .collect(),
        }
    }

    #[test]
    fn what_differs_between_the_running_versions_own_runs_is_noise() {
        let id = ActorId::parse("a").unwrap();
        let one = ran(&[1, 2, 3, 4], &[("/data/a", "x"), ("/data/clock", "t1")]);
        let two = ran(&[1, 9, 3, 4], &[("/data/a", "x"), ("/data/clock", "t2")]);
        let new = ran(&[1, 5, 6, 4], &[("/data/a", "y"), ("/data/clock", "t3")]);
        let outcome = compare(&reads(4), [&one, &two, &new], 2, &id, Mode::Report);
        let report = outcome.report;
        assert_eq!(report["messages"], 4);
        assert_eq!(report["same"], 2);
        assert_eq!(report["noisy"], 1, "{report}");
        let different = report["different"].as_array().unwrap();
        assert_eq!(different.len(), 1, "{report}");
        assert_eq!(different[0]["message"]["id"], "m-2");
        assert_eq!(different[0]["old"][0]["body"]["answer"], 3);
        assert_eq!(different[0]["new"][0]["body"]["answer"], 6);
        assert_eq!(report["files"].as_array().unwrap().len(), 1, "{report}");
        assert_eq!(report["files"][0]["path"], "/data/a");
        assert!(outcome.refusal.is_none(), "report installs");

        let same = compare(&reads(4), [&one, &two, &new], 2, &id, Mode::Same);
        let refusal = same.refusal.expect("same refuses a difference");
        assert!(
            refusal.contains("m-2") && refusal.contains("\"report\""),
            "{refusal}"
        );
        // Noise alone is not held against the candidate.
        let quiet = ran(&[1, 7, 3, 4], &[("/data/a", "x"), ("/data/clock", "t4")]);
        let outcome = compare(&reads(4), [&one, &two, &quiet], 2, &id, Mode::Same);
        assert!(outcome.refusal.is_none(), "{}", outcome.report);
    }

    #[test]
    fn a_candidate_that_crashes_where_the_running_version_did_not_is_refused() {
        let id = ActorId::parse("a").unwrap();
        let one = ran(&[1, 2, 3], &[]);
        let mut new = ran(&[1, 2], &[]);
        new.wrote.push(Vec::new());
        new.crashed = Some((2, "trapped: unreachable".into()));
        let outcome = compare(&reads(3), [&one, &one, &new], 4, &id, Mode::Report);
        let refusal = outcome.refusal.expect("refused");
        assert!(
            refusal.contains("version 4 of `a` crashed on message m-2")
                && refusal.contains("trapped: unreachable"),
            "{refusal}"
        );
        assert_eq!(outcome.report["crashed"]["message"]["id"], "m-2");
        // Where the running version crashed too, the message is not the candidate's fault.
        let mut old = ran(&[1, 2], &[]);
        old.wrote.push(Vec::new());
        old.crashed = Some((2, "trapped: unreachable".into()));
        let outcome = compare(&reads(3), [&old, &old, &new], 4, &id, Mode::Report);
        assert!(outcome.refusal.is_none(), "{}", outcome.report);
    }

    #[test]
    fn http_answers_are_compared_by_the_response_they_make() {
        let id = ActorId::parse("a").unwrap();
        let answers = |bodies: &[Value]| Ran {
            wrote: bodies
                .iter()
                .map(|body| vec![json!({"to": "http", "reply_to": "http/m-1", "body": body})])
                .collect(),
            crashed: None,
            files: BTreeMap::new(),
        };
        let old = answers(&[
            json!({"type": "http_response", "status": 200, "body": {"id": 7}}),
            json!({"type": "http_response", "body": "hi"}),
            json!({"type": "http_chunk", "data": "a"}),
        ]);
        let new = answers(&[
            json!({"type": "http_response", "headers": {"content-type": "application/json"},
                   "body_base64": "eyJpZCI6N30="}),
            json!({"type": "http_response", "status": 404, "body": "hi"}),
            json!({"type": "http_chunk", "data_base64": "YQ=="}),
        ]);
        let outcome = compare(&reads(3), [&old, &old, &new], 2, &id, Mode::Same);
        let report = outcome.report;
        assert_eq!(report["same"], 2, "{report}");
        assert_eq!(report["different"][0]["message"]["id"], "m-1", "{report}");
        assert_eq!(report["different"][0]["new"][0]["body"]["status"], 404);
        assert!(outcome.refusal.is_some());
    }

    #[test]
    fn the_shadow_field_names_its_values() {
        assert_eq!(Mode::of(&json!({})), Ok(Mode::Report));
        assert_eq!(Mode::of(&json!({"shadow": "same"})), Ok(Mode::Same));
        assert_eq!(Mode::of(&json!({"shadow": "off"})), Ok(Mode::Off));
        for bad in [json!("maybe"), json!(3), json!(true), json!(["same"])] {
            let err = Mode::of(&json!({ "shadow": bad })).unwrap_err();
            assert!(
                err.contains("\"report\"") && err.contains("\"off\""),
                "{err}"
            );
        }
    }
}
