//! Replicated commits (DESIGN §20): on a host of a cluster, every change of an actor's files (a
//! commit at close or sync, a rename, an unlink, a mkdir or rmdir) is stored in the stream
//! [`COMMITS_STREAM`], subject `sausage.commit.<id>`, before the host makes it; the next host
//! to run the actor starts from its last snapshot plus the commits after it, so a dead host
//! loses no committed file. Each commit says which mailbox message the actor had read last
//! (`Sausage-Read`), so a message whose handling committed is not given again after a
//! fail-over.
//!
//! Fencing is JetStream's: every publish expects the subject's last sequence to be the one this
//! host last stored or replayed (`Nats-Expected-Last-Subject-Sequence`), and a host that takes
//! an actor first stores a `take` marker. A host that lost the actor can then store nothing for
//! it, and its change is refused (the guest gets an error) instead of made.
//! **Invariant:** a change is made on the host only after the stream stored it.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use async_nats::jetstream::{self, stream};
use async_nats::{HeaderMap, HeaderValue};
use bytes::Bytes;

use sausage_core::broker::mailbox::Mailbox;
use sausage_core::fs::{Changing, Edit, ErrorCode, FsResult};
use sausage_core::message::ActorId;
use sausage_core::runtime::Replica;
use sausage_core::runtime::run_until::{RunUntil, Term};
use sausage_core::world::World;

/// Every actor's changes, subject `sausage.commit.<id>`.
pub const COMMITS_STREAM: &str = "SAUSAGE_COMMITS";
const SUBJECT_PREFIX: &str = "sausage.commit";

/// How long a change is tried again while the cluster cannot be reached (a NATS node died and
/// the client moves to another): the guest waits meanwhile, as for a slow disk.
const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(15);

/// A write's content goes in parts of at most this many bytes (a NATS message is at most
/// 1 MiB by default, headers included).
const PART_BYTES: usize = 512 * 1024;

/// What a commit does: `write`, `rename`, `remove`, `mkdir`, or `take` (a host took the actor).
const EDIT: &str = "Sausage-Edit";
/// The path, under the actor's folder (`data/…` or `public/…`).
const PATH: &str = "Sausage-Path";
/// A rename's new path.
const TO: &str = "Sausage-To";
/// A write's part: `<n>/<of>`, from 1; the parts of one write are stored one after another.
const PART: &str = "Sausage-Part";
/// The stream sequence of the last mailbox message the actor had read.
const READ: &str = "Sausage-Read";

pub fn subject(id: &ActorId) -> String {
    format!("{SUBJECT_PREFIX}.{id}")
}

/// The commits stream's configuration, with `replicas` copies.
pub fn stream_config(replicas: usize) -> stream::Config {
    stream::Config {
        name: COMMITS_STREAM.to_string(),
        subjects: vec![format!("{SUBJECT_PREFIX}.*")],
        storage: stream::StorageType::File,
        max_message_size: 2 * 1024 * 1024,
        num_replicas: replicas,
        ..Default::default()
    }
}

/// This host's side of the commits stream.
pub struct Commits {
    js: jetstream::Context,
    /// The last sequence of each actor's subject as this host stored or replayed it: what its
    /// next publish expects.
    last: Mutex<HashMap<ActorId, u64>>,
}

/// What [`Commits::replay`] found.
pub struct Replayed {
    /// The last commit's sequence: what the next snapshot covers.
    pub through: u64,
    /// The last mailbox message a commit said the actor had read.
    pub read: Option<i64>,
}

impl Commits {
    pub fn new(js: jetstream::Context) -> Commits {
        Commits {
            js,
            last: Mutex::new(HashMap::new()),
        }
    }

    async fn stream(&self) -> Result<stream::Stream> {
        self.js
            .get_stream(COMMITS_STREAM)
            .await
            .context("the commits stream")
    }

    /// Stores one part of a change of `id`, expecting the subject's last sequence to be the one
    /// this host knows; returns its sequence. An error means the change must not be made.
    /// A publish that may not have arrived (a NATS node died, a timeout) is tried again for up
    /// to [`RETRY_FOR`] under the same message id, so JetStream stores it once; one refused for
    /// the sequence means another host stored something since: it runs the actor now.
    async fn publish(&self, id: &ActorId, headers: HeaderMap, payload: Bytes) -> Result<u64> {
        use jetstream::context::PublishErrorKind;
        let expected = self.last.lock().expect("commits lock").get(id).copied();
        let expected = match expected {
            Some(seq) => seq,
            None => self.last_stored(id).await?,
        };
        let message_id = format!("{id}.{expected}");
        let deadline = std::time::Instant::now() + RETRY_FOR;
        loop {
            let publish = jetstream::message::PublishMessage::build()
                .payload(payload.clone())
                .headers(headers.clone())
                .expected_last_subject_sequence(expected)
                .message_id(&message_id);
            let stored = match self.js.send_publish(subject(id), publish).await {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match stored {
                Ok(ack) => {
                    self.last
                        .lock()
                        .expect("commits lock")
                        .insert(id.clone(), ack.sequence);
                    return Ok(ack.sequence);
                }
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                    self.last.lock().expect("commits lock").remove(id);
                    bail!(
                        "actor {id}: the cluster did not store its change: another host stored \
                         one since, it runs the actor now ({e})"
                    );
                }
                Err(e) if std::time::Instant::now() >= deadline => {
                    bail!(
                        "actor {id}: the cluster did not store its change within {} s ({e}); \
                         is NATS reachable?",
                        RETRY_FOR.as_secs()
                    );
                }
                Err(e) => {
                    tracing::debug!("actor {id}: storing a change again after: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// The last sequence stored for `id`, 0 when none is.
    async fn last_stored(&self, id: &ActorId) -> Result<u64> {
        let stream = self.stream().await?;
        match stream.get_last_raw_message_by_subject(&subject(id)).await {
            Ok(message) => Ok(message.sequence),
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(0),
            Err(e) => Err(anyhow::Error::from(e).context(format!("actor {id}: its commits"))),
        }
    }

    /// Stores `changing`, a change of `id`'s files in `world` about to be made, having read up
    /// to `read` in its mailbox.
    async fn record(
        &self,
        world: &World,
        id: &ActorId,
        changing: &Changing<'_>,
        read: Option<i64>,
    ) -> Result<()> {
        let headers = |edit: &str, path: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(EDIT, edit);
            headers.insert(PATH, path);
            if let Some(read) = read {
                headers.insert(READ, HeaderValue::from(read.to_string().as_str()));
            }
            headers
        };
        let under = |path: &Path| -> Result<String> { under_actor(world, id, path) };
        match &changing.edit {
            Edit::Write { path, file } => {
                let path = under(path)?;
                let content = read_whole(file)?;
                let parts: Vec<&[u8]> = if content.is_empty() {
                    vec![&[]]
                } else {
                    content.chunks(PART_BYTES).collect()
                };
                let of = parts.len();
                for (n, part) in parts.into_iter().enumerate() {
                    let mut headers = headers("write", &path);
                    headers.insert(PART, format!("{}/{of}", n + 1).as_str());
                    self.publish(id, headers, Bytes::copy_from_slice(part))
                        .await?;
                }
            }
            Edit::Rename { from, to } => {
                let mut headers = headers("rename", &under(from)?);
                headers.insert(TO, under(to)?.as_str());
                self.publish(id, headers, Bytes::new()).await?;
            }
            Edit::Remove { path } => {
                self.publish(id, headers("remove", &under(path)?), Bytes::new())
                    .await?;
            }
            Edit::MakeDir { path } => {
                self.publish(id, headers("mkdir", &under(path)?), Bytes::new())
                    .await?;
            }
        }
        Ok(())
    }

    /// Applies to `id`'s files in `world` every commit stored after sequence `after` (what its
    /// snapshot covers), in order, then stores a `take` marker: from here on only this host
    /// stores changes of `id`. Applying is idempotent (whole files, renames and removals of
    /// what is there), so a commit the snapshot already holds does no harm.
    pub async fn replay(&self, world: &World, id: &ActorId, after: u64) -> Result<Replayed> {
        let stream = self.stream().await?;
        let subject = subject(id);
        let mut replayed = Replayed {
            through: after,
            read: None,
        };
        let mut write: Option<(PathBuf, Vec<u8>)> = None;
        let mut next = after + 1;
        loop {
            let message = match stream
                .raw_message_builder()
                .next_by_subject(subject.clone())
                .sequence(next)
                .send()
                .await
            {
                Ok(message) => message,
                Err(e) if e.kind() == stream::RawMessageErrorKind::NoMessageFound => break,
                Err(e) => {
                    return Err(anyhow::Error::from(e).context(format!("actor {id}: its commits")));
                }
            };
            next = message.sequence + 1;
            replayed.through = message.sequence;
            let header = |name: &str| message.headers.get(name).map(|v| v.as_str().to_string());
            if let Some(read) = header(READ).and_then(|r| r.parse().ok()) {
                replayed.read = Some(read);
            }
            let path = |name: &str| -> Result<PathBuf> {
                let rel = header(name).with_context(|| format!("a commit without {name}"))?;
                in_actor(world, id, &rel)
            };
            let applied = match header(EDIT).as_deref() {
                Some("write") => {
                    let target = path(PATH)?;
                    let (n, of) = parse_part(header(PART).as_deref())?;
                    let bytes = match write.take() {
                        Some((at, mut bytes)) if n > 1 && at == target => {
                            bytes.extend_from_slice(&message.payload);
                            bytes
                        }
                        _ if n == 1 => message.payload.to_vec(),
                        // A part without the ones before it (compacted away): the snapshot
                        // holds a later state of the file anyway.
                        _ => continue,
                    };
                    if n < of {
                        write = Some((target, bytes));
                        continue;
                    }
                    apply_write(&target, &bytes)
                }
                Some("rename") => apply_rename(&path(PATH)?, &path(TO)?),
                Some("remove") => apply_remove(&path(PATH)?),
                Some("mkdir") => std::fs::create_dir_all(path(PATH)?).map_err(Into::into),
                Some("take") => Ok(()),
                other => Err(anyhow::anyhow!("unknown edit {other:?}")),
            };
            applied.with_context(|| {
                format!("actor {id}: commit {} cannot be applied", message.sequence)
            })?;
        }
        self.last
            .lock()
            .expect("commits lock")
            .insert(id.clone(), replayed.through);
        let mut headers = HeaderMap::new();
        headers.insert(EDIT, "take");
        replayed.through = self.publish(id, headers, Bytes::new()).await?;
        Ok(replayed)
    }

    /// Drops `id`'s commits before sequence `through`, which a snapshot now covers. The commit
    /// at `through` stays, so the subject's last sequence (what the next publish expects) does
    /// not go.
    pub async fn compact(&self, id: &ActorId, through: u64) -> Result<()> {
        if through <= 1 {
            return Ok(());
        }
        self.stream()
            .await?
            .purge()
            .filter(subject(id))
            .sequence(through)
            .await
            .with_context(|| format!("actor {id}: compacting its commits"))?;
        Ok(())
    }

    /// The last sequence this host stored or replayed for `id`, if it knows one.
    pub fn last_known(&self, id: &ActorId) -> Option<u64> {
        self.last.lock().expect("commits lock").get(id).copied()
    }

    /// Forgets what this host knew of `id`'s subject (it no longer runs the actor).
    pub fn forget(&self, id: &ActorId) {
        self.last.lock().expect("commits lock").remove(id);
    }

    /// Removes every commit of `id` (the actor was removed).
    pub async fn remove(&self, id: &ActorId) -> Result<()> {
        self.forget(id);
        self.stream()
            .await?
            .purge()
            .filter(subject(id))
            .await
            .with_context(|| format!("actor {id}: removing its commits"))?;
        Ok(())
    }
}

/// One actor's [`Replica`]: each change is stored before the host makes it.
pub struct ActorReplica {
    pub commits: Arc<Commits>,
    pub world: World,
    pub id: ActorId,
    pub mailbox: Arc<Mailbox>,
    pub runtime: tokio::runtime::Handle,
    /// This host's leases, and the term the actor started in here: a change is made only in
    /// that term, once renewed past any lapse. A message the guest wrote before the change and that was not sent
    /// because the term ended (`mailboxes`) must not be recorded as sent by it.
    pub run_until: Arc<RunUntil>,
    pub term: Term,
}

impl Replica for ActorReplica {
    fn record(&self, changing: &Changing<'_>) -> FsResult<()> {
        // After the output before the change settled: withheld in an ended term, or stored. A
        // deadline passed with a renewal still possible (a slow heartbeat) waits for it.
        if !self.runtime.block_on(self.run_until.settled(self.term)) {
            tracing::warn!(
                "actor {}: this host's leases lapsed; a change of its files was not made",
                self.id
            );
            return Err(ErrorCode::Io);
        }
        let read = self.mailbox.last_read_pos();
        // On the blocking pool, as a change of a file is: the guest waits for it either way.
        let stored =
            self.runtime
                .block_on(self.commits.record(&self.world, &self.id, changing, read));
        stored.map_err(|e| {
            tracing::warn!("{e:#}; the change was not made");
            ErrorCode::Io
        })
    }
}

/// `path`, a host path in `id`'s `/data` or `/public`, as `data/…` or `public/…`.
fn under_actor(world: &World, id: &ActorId, path: &Path) -> Result<String> {
    for (name, dir) in [
        ("data", world.data_dir(id)),
        ("public", world.public_dir(id)),
    ] {
        if let Ok(rel) = path.strip_prefix(&dir) {
            let rel = rel.to_str().context("a path that is not UTF-8")?;
            return Ok(if rel.is_empty() {
                name.to_string()
            } else {
                format!("{name}/{rel}")
            });
        }
    }
    bail!("{} is not a file of actor {id}", path.display())
}

/// A commit's path (`data/…` or `public/…`) as the host path in `id`'s folders; refused when
/// it would leave them.
fn in_actor(world: &World, id: &ActorId, rel: &str) -> Result<PathBuf> {
    let (name, rest) = rel.split_once('/').unwrap_or((rel, ""));
    let dir = match name {
        "data" => world.data_dir(id),
        "public" => world.public_dir(id),
        _ => bail!("a commit names {rel:?}, outside the actor's data and public folders"),
    };
    let rest = Path::new(rest);
    if !rest.components().all(|c| matches!(c, Component::Normal(_)))
        || rest
            .components()
            .any(|c| sausage_core::fs::is_temporary_name(c.as_os_str()))
    {
        bail!("a commit names {rel:?}, which is not a plain path");
    }
    Ok(dir.join(rest))
}

fn parse_part(part: Option<&str>) -> Result<(usize, usize)> {
    let part = part.context("a write without its part")?;
    let (n, of) = part.split_once('/').context("a part is `<n>/<of>`")?;
    let (n, of): (usize, usize) = (n.parse()?, of.parse()?);
    if n == 0 || n > of {
        bail!("part {part} does not exist");
    }
    Ok((n, of))
}

fn read_whole(file: &std::fs::File) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len() as usize;
    let mut bytes = vec![0; len];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(bytes)
}

fn apply_write(target: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    sausage_core::fs::write_atomically_unsynced(target, bytes)?;
    Ok(())
}

fn apply_rename(from: &Path, to: &Path) -> Result<()> {
    match std::fs::rename(from, to) {
        // Already renamed (the snapshot holds the later state).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        done => Ok(done?),
    }
}

fn apply_remove(path: &Path) -> Result<()> {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        done => Ok(done?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_path_stays_in_the_actors_folders() {
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(dir.path());
        let id = ActorId::parse("notes").unwrap();
        let data = world.data_dir(&id);
        assert_eq!(
            under_actor(&world, &id, &data.join("a/b.json")).unwrap(),
            "data/a/b.json"
        );
        assert_eq!(
            in_actor(&world, &id, "data/a/b.json").unwrap(),
            data.join("a/b.json")
        );
        for bad in [
            "data/../x",
            "/etc/passwd",
            "source/x",
            "data//x/../../y",
            "data/.sausage-tmp-1",
        ] {
            assert!(in_actor(&world, &id, bad).is_err(), "{bad}");
        }
        assert!(under_actor(&world, &id, Path::new("/etc/passwd")).is_err());
        assert_eq!(parse_part(Some("2/3")).unwrap(), (2, 3));
        for bad in [None, Some("0/1"), Some("3/2"), Some("x")] {
            assert!(parse_part(bad).is_err(), "{bad:?}");
        }
    }
}
