//! The people of a world (DESIGN §13): who may speak to it, as which tier, and the login links
//! and web sessions that say who is at a page.
//!
//! `broker/people.json` (outside every mount) is owned here: surfaces and commands ask
//! [`People`], nobody else reads the file. Every change is a read-modify-write under an exclusive
//! `flock` of `broker/people.lock`, so `sausage people …` and a running world never lose each
//! other's change; the file itself is replaced atomically and synced.
//! **Invariant:** a world always has an owner, and login tokens are kept only as SHA-256 hashes.

pub mod readers;
pub mod sessions;
pub mod tiers;

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use crate::message::Tier;
use crate::message::{ActorId, Speaker};
use crate::world::World;

pub use sessions::Sessions;

/// The kind of handle that is a person's own id: a surface granted it speaks for anyone by id.
/// `sausage init` grants it to the agent, which acts for people and checks their tiers in its
/// own tools.
pub const PERSON_HANDLE: &str = "person";

/// The first owner's id when `sausage init` is not told one, and the owner of a world made
/// before people existed.
pub const DEFAULT_OWNER: &str = "owner";

/// An unused login link stops working after this many days.
pub const LINK_DAYS: u64 = 7;

/// Unused links kept per person; making one more drops the oldest, so links printed again and
/// again (one at every start of the world) do not pile up.
pub const LINKS_PER_PERSON: usize = 5;

/// One person of `people.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Person {
    /// Follows the rules of actor ids.
    pub id: String,
    pub name: String,
    pub tier: Tier,
    /// Seconds since the Unix epoch.
    #[serde(default)]
    pub created: u64,
    /// Random, new for every person added: a session opened for a removed person does not
    /// let in someone added later under the same id.
    #[serde(default)]
    pub key: String,
    /// Who the person is on other networks, by kind: `{"matrix": "@ann:example.org"}`. A
    /// surface actor granted a kind speaks for the person by that handle.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub handles: BTreeMap<String, String>,
    /// Login links not used yet, newest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    links: Vec<Link>,
    /// The hash of the person's bearer token for MCP (DESIGN §23, `sausage people token`); a
    /// new one replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<String>,
}

impl Person {
    /// The person as surfaces show them: no link hashes.
    pub fn public(&self) -> Value {
        json!({
            "id": self.id, "name": self.name, "tier": self.tier, "created": self.created,
            "handles": self.handles,
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Link {
    /// SHA-256 of the token, in hex.
    hash: String,
    created: u64,
}

#[derive(Clone, Default, Serialize, Deserialize)]
struct PeopleFile {
    people: Vec<Person>,
    /// Surface actors and the kind of handle each may speak for people by (`"matrix":
    /// "matrix"`): an owner's grant, made outside every actor's reach.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    surfaces: BTreeMap<String, String>,
}

/// How long a read of the people file is trusted while its metadata stays the same: a change
/// within one tick of the file system's clock, into a reused inode of the same size, would
/// look unchanged, so no grant or removal goes unseen for longer than this.
const CACHE_TRUST: std::time::Duration = std::time::Duration::from_secs(1);

struct Cached {
    /// Inode, size and modification time.
    seen: (u64, u64, SystemTime),
    read_at: std::time::Instant,
    file: PeopleFile,
}

/// The people of one world.
#[derive(Clone)]
pub struct People {
    /// `broker/people.json`.
    path: PathBuf,
    /// `broker/people.lock`, held while a change reads and writes the file.
    lock: PathBuf,
    /// The file as last read, what its metadata said then and when, for
    /// [`People::speaker_by_handle`], which runs for every message a surface actor writes for
    /// someone.
    cached: Arc<Mutex<Option<Cached>>>,
}

impl std::fmt::Debug for People {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("People").field("path", &self.path).finish()
    }
}

impl People {
    pub fn new(world: &World) -> People {
        People {
            path: world.people_path(),
            lock: world.people_lock_path(),
            cached: Arc::default(),
        }
    }

    /// Everyone, in the order they were added. A world made before people existed has one
    /// owner, [`DEFAULT_OWNER`], until the first change writes the file.
    pub fn list(&self) -> Result<Vec<Person>> {
        Ok(self.read()?.people)
    }

    /// Everyone and the surface grants (actor id → kind of handle), from one read.
    pub fn read_all(&self) -> Result<(Vec<Person>, BTreeMap<String, String>)> {
        let file = self.read()?;
        Ok((file.people, file.surfaces))
    }

    pub fn get(&self, id: &str) -> Result<Option<Person>> {
        Ok(self.list()?.into_iter().find(|p| p.id == id))
    }

    /// The person the terminal console speaks as: the first owner.
    pub fn console_person(&self) -> Result<Person> {
        self.list()?
            .into_iter()
            .find(|p| p.tier == Tier::Owner)
            .with_context(|| format!("{}: the world has no owner", self.path.display()))
    }

    /// Starts a new world's people with its first owner.
    pub fn create(&self, owner: &str) -> Result<()> {
        check_id(owner)?;
        self.change(|people| {
            people.clear();
            people.push(new_person(owner, None, Tier::Owner));
            Ok(())
        })
    }

    /// Adds a person; returns a one-time login token for them.
    pub fn add(&self, id: &str, tier: Tier, name: Option<&str>) -> Result<String> {
        self.add_with(id, tier, name, BTreeMap::new())
    }

    /// Adds a person with their handles on other networks (`{"matrix": "@ann:example.org"}`).
    pub fn add_with(
        &self,
        id: &str,
        tier: Tier,
        name: Option<&str>,
        handles: BTreeMap<String, String>,
    ) -> Result<String> {
        check_id(id)?;
        for (kind, handle) in &handles {
            check_handle(kind, handle)?;
        }
        self.change(|people| {
            if people.iter().any(|p| p.id == id) {
                bail!("person {id} already exists; change their tier with `sausage people tier {id} TIER`");
            }
            for (kind, handle) in &handles {
                unclaimed(people, id, kind, handle)?;
            }
            let mut person = new_person(id, name, tier);
            person.handles = handles;
            let token = add_link(&mut person);
            people.push(person);
            Ok(token)
        })
    }

    /// Removes a person; their sessions end at their next request. The last owner stays.
    pub fn remove(&self, id: &str) -> Result<Person> {
        self.change(|people| {
            let at = position(people, id)?;
            if people[at].tier == Tier::Owner && owners(people) == 1 {
                bail!("person {id} is the world's only owner; make someone else an owner first");
            }
            Ok(people.remove(at))
        })
    }

    /// Changes a person's tier. The last owner keeps theirs.
    pub fn set_tier(&self, id: &str, tier: Tier) -> Result<()> {
        self.change(|people| {
            let at = position(people, id)?;
            if people[at].tier == Tier::Owner && tier != Tier::Owner && owners(people) == 1 {
                bail!("person {id} is the world's only owner; make someone else an owner first");
            }
            people[at].tier = tier;
            Ok(())
        })
    }

    /// Sets (or with `None` clears) a person's handle of `kind`, such as their Matrix id.
    pub fn set_handle(&self, id: &str, kind: &str, handle: Option<&str>) -> Result<()> {
        if let Some(handle) = handle {
            check_handle(kind, handle)?;
        }
        self.change(|people| {
            let at = position(people, id)?;
            match handle {
                Some(handle) => {
                    unclaimed(people, id, kind, handle)?;
                    people[at]
                        .handles
                        .insert(kind.to_string(), handle.to_string());
                }
                None => {
                    people[at].handles.remove(kind);
                }
            }
            Ok(())
        })
    }

    /// Lets the actor `surface` speak for people by their handles of `kind` (an owner's
    /// decision, such as `sausage matrix setup` makes for the actor `matrix`).
    pub fn grant_surface(&self, surface: &ActorId, kind: &str) -> Result<()> {
        check_kind(kind)?;
        self.change_file(|file| {
            file.surfaces.insert(surface.to_string(), kind.to_string());
            Ok(())
        })
    }

    /// Who `surface` speaks for when it writes `"as": handle` (DESIGN §13, §17): the person
    /// whose handle of the kind granted to `surface` it is. `Err` says why nobody: the actor is
    /// no surface, or the handle is nobody's. Reads the file again only when it changed.
    pub fn speaker_by_handle(&self, surface: &ActorId, handle: &str) -> Result<Speaker, String> {
        let seen = std::fs::metadata(&self.path).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            (
                m.ino(),
                m.len(),
                m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            )
        });
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = cached
            .as_ref()
            .is_some_and(|c| Some(c.seen) == seen && c.read_at.elapsed() < CACHE_TRUST);
        if !fresh {
            *cached = Some(Cached {
                seen: seen.unwrap_or((0, 0, SystemTime::UNIX_EPOCH)),
                read_at: std::time::Instant::now(),
                file: self.read().map_err(|e| format!("{e:#}"))?,
            });
        }
        let file = &cached.as_ref().expect("just read").file;
        let Some(kind) = file.surfaces.get(surface.as_str()) else {
            return Err(format!(
                "`as`: actor {surface} may not speak for people (an owner grants that to a \
                 surface, such as `sausage matrix setup` for matrix)"
            ));
        };
        // The kind `person` names people by their ids: the grant an agent gets, so that what it
        // asks for someone (a schedule) is theirs.
        let person = file
            .people
            .iter()
            .find(|p| match kind.as_str() {
                PERSON_HANDLE => p.id == handle,
                kind => p.handles.get(kind).is_some_and(|h| h == handle),
            })
            .ok_or_else(|| {
                format!(
                    "`as`: {handle} is not a person of this world; an owner adds them with \
                     `sausage people add {} --tier TIER`",
                    if kind == PERSON_HANDLE {
                        handle.to_string()
                    } else {
                        format!("ID --{kind} {handle}")
                    }
                )
            })?;
        Ok(Speaker {
            person: ActorId::parse(&person.id).map_err(|e| format!("people.json: {e}"))?,
            tier: person.tier,
        })
    }

    /// A new bearer token for a person (MCP over HTTP), replacing theirs; returned once, kept
    /// as its hash.
    pub fn new_token(&self, id: &str) -> Result<String> {
        self.change(|people| {
            let at = position(people, id)?;
            let token = sessions::random_token();
            people[at].token = Some(sessions::hash(&token));
            Ok(token)
        })
    }

    /// Revokes a person's bearer token: calls with it are refused from now on.
    pub fn revoke_token(&self, id: &str) -> Result<()> {
        self.change(|people| {
            let at = position(people, id)?;
            if people[at].token.take().is_none() {
                bail!("person {id} has no token to revoke");
            }
            Ok(())
        })
    }

    /// The person a bearer token is theirs, if any (read without the lock).
    pub fn person_by_token(&self, token: &str) -> Result<Option<Person>> {
        if token.is_empty() {
            return Ok(None);
        }
        let hash = sessions::hash(token);
        Ok(self
            .read()?
            .people
            .into_iter()
            .find(|p| p.token.as_deref() == Some(hash.as_str())))
    }

    /// A new one-time login token for a person.
    pub fn new_link(&self, id: &str) -> Result<String> {
        self.change(|people| {
            let at = position(people, id)?;
            Ok(add_link(&mut people[at]))
        })
    }

    /// The person a login token would log in, without using it (read without the lock, writing
    /// nothing): `None` for a token that is unknown, used or expired.
    pub fn link_person(&self, token: &str) -> Result<Option<Person>> {
        let hash = sessions::hash(token);
        let now = sessions::now();
        Ok(self.read()?.people.into_iter().find(|p| {
            p.links
                .iter()
                .any(|link| link.hash == hash && link_alive(link, now))
        }))
    }

    /// Uses a login token: the person it logs in, once; `None` for a token that is unknown,
    /// used or expired. The token is first looked for in the file read without the lock, so a
    /// wrong one (a guess, a stale link) takes no lock and writes nothing; only a match takes
    /// the lock, looks again (another login may have used it meanwhile) and writes.
    pub fn use_link(&self, token: &str) -> Result<Option<Person>> {
        if self.link_person(token)?.is_none() {
            return Ok(None);
        }
        let hash = sessions::hash(token);
        let now = sessions::now();
        let usable = |link: &Link| link.hash == hash && link_alive(link, now);
        self.change(|people| {
            for person in people.iter_mut() {
                if let Some(at) = person.links.iter().position(usable) {
                    person.links.remove(at);
                    return Ok(Some(person.clone()));
                }
            }
            Ok(None)
        })
    }

    fn read(&self) -> Result<PeopleFile> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // The same owner at every read, key included, until a change writes it.
                let owner = Person {
                    key: String::new(),
                    ..new_person(DEFAULT_OWNER, None, Tier::Owner)
                };
                return Ok(PeopleFile {
                    people: vec![owner],
                    surfaces: BTreeMap::new(),
                });
            }
            Err(e) => return Err(e).with_context(|| format!("{}", self.path.display())),
        };
        serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "{}: not a valid people file; fix the JSON or restore it",
                self.path.display()
            )
        })
    }

    /// Reads the file, lets `change` edit the people, and writes them back if it succeeded,
    /// all under the lock. Expired links are dropped on the way.
    /// The people file as it is on disk (empty when there is none yet).
    pub fn file_bytes(&self) -> Vec<u8> {
        std::fs::read(&self.path).unwrap_or_default()
    }

    /// Replaces the people file with `bytes`, another host's copy (DESIGN §16), under the
    /// lock; bytes that are not a people file change nothing.
    pub fn replace_file(&self, bytes: &[u8]) -> Result<()> {
        let _: PeopleFile = serde_json::from_slice(bytes).context("not a people file")?;
        let _lock = lock(&self.lock)?;
        crate::fs::write_atomically(&self.path, bytes)
            .with_context(|| format!("{}: cannot save the people", self.path.display()))
    }

    fn change<T>(&self, change: impl FnOnce(&mut Vec<Person>) -> Result<T>) -> Result<T> {
        self.change_file(|file| change(&mut file.people))
    }

    fn change_file<T>(&self, change: impl FnOnce(&mut PeopleFile) -> Result<T>) -> Result<T> {
        let _lock = lock(&self.lock)?;
        let mut file = self.read()?;
        let result = change(&mut file)?;
        let now = sessions::now();
        for person in &mut file.people {
            person.links.retain(|link| link_alive(link, now));
        }
        let bytes = serde_json::to_vec_pretty(&file).expect("people serialise");
        crate::fs::write_atomically(&self.path, &bytes)
            .with_context(|| format!("{}: cannot save the people", self.path.display()))?;
        Ok(result)
    }
}

fn check_id(id: &str) -> Result<()> {
    ActorId::parse(id)
        .map(drop)
        .map_err(|e| anyhow::anyhow!("{}", e.replace("actor id", "person id")))
}

/// A handle's kind names a network: a-z only (`matrix`).
fn check_kind(kind: &str) -> Result<()> {
    if kind.is_empty() || kind.len() > 32 || !kind.bytes().all(|b| b.is_ascii_lowercase()) {
        bail!("`{kind}` is not a kind of handle; use a network's name in a-z, such as matrix");
    }
    Ok(())
}

/// A handle is one short line; a Matrix id looks like `@user:server`.
fn check_handle(kind: &str, handle: &str) -> Result<()> {
    check_kind(kind)?;
    if handle.is_empty() || handle.len() > 255 || handle.chars().any(char::is_whitespace) {
        bail!("`{handle}` is not a {kind} handle: 1 to 255 characters without spaces");
    }
    if kind == "matrix" {
        let valid = handle
            .strip_prefix('@')
            .and_then(|rest| rest.split_once(':'))
            .is_some_and(|(user, server)| !user.is_empty() && !server.is_empty());
        if !valid {
            bail!("`{handle}` is not a Matrix user id; it looks like @ann:example.org");
        }
    }
    Ok(())
}

/// Fails when someone other than `id` has `handle` already: a handle speaks for one person.
fn unclaimed(people: &[Person], id: &str, kind: &str, handle: &str) -> Result<()> {
    if let Some(other) = people
        .iter()
        .find(|p| p.id != id && p.handles.get(kind).is_some_and(|h| h == handle))
    {
        bail!(
            "{handle} is {}'s already; a {kind} handle speaks for one person",
            other.id
        );
    }
    Ok(())
}

fn new_person(id: &str, name: Option<&str>, tier: Tier) -> Person {
    Person {
        id: id.to_string(),
        name: name.unwrap_or(id).to_string(),
        tier,
        created: sessions::now(),
        key: sessions::random_token()[..16].to_string(),
        handles: BTreeMap::new(),
        links: Vec::new(),
        token: None,
    }
}

/// Whether a link made at `link.created` still logs in at `now` (seconds since the epoch).
fn link_alive(link: &Link, now: u64) -> bool {
    now.saturating_sub(link.created) < LINK_DAYS * 24 * 3600
}

fn add_link(person: &mut Person) -> String {
    let token = sessions::random_token();
    if person.links.len() >= LINKS_PER_PERSON {
        person.links.remove(0);
    }
    person.links.push(Link {
        hash: sessions::hash(&token),
        created: sessions::now(),
    });
    token
}

fn position(people: &[Person], id: &str) -> Result<usize> {
    people.iter().position(|p| p.id == id).with_context(|| {
        format!("there is no person {id}; `sausage people list` shows who there is")
    })
}

fn owners(people: &[Person]) -> usize {
    people.iter().filter(|p| p.tier == Tier::Owner).count()
}

/// Takes the exclusive lock of `path` until the returned file is dropped (or the process ends).
pub(crate) fn lock(path: &Path) -> Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("{}: cannot open the lock file", path.display()))?;
    // SAFETY: flock on a descriptor we own; it has no memory effects. It blocks only while
    // another process changes the people, which takes a few milliseconds.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("{}: cannot lock", path.display()));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn people() -> (tempfile::TempDir, People) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("broker")).unwrap();
        let people = People::new(&World::new(dir.path()));
        (dir, people)
    }

    #[test]
    fn a_world_without_the_file_has_one_owner_and_the_first_change_writes_it() {
        let (dir, people) = people();
        assert_eq!(people.console_person().unwrap().id, DEFAULT_OWNER);
        people.add("alice", Tier::Guest, Some("Alice")).unwrap();
        let written = std::fs::read_to_string(dir.path().join("broker/people.json")).unwrap();
        assert!(written.contains("\"owner\"") && written.contains("\"Alice\""));
    }

    #[test]
    fn links_log_in_once_and_are_kept_only_as_hashes() {
        let (dir, people) = people();
        people.create("boss").unwrap();
        let token = people.add("bob", Tier::Member, None).unwrap();
        let written = std::fs::read_to_string(dir.path().join("broker/people.json")).unwrap();
        assert!(!written.contains(&token), "only the hash is on disk");
        assert_eq!(people.use_link(&token).unwrap().unwrap().id, "bob");
        assert!(
            people.use_link(&token).unwrap().is_none(),
            "a link works once"
        );
        assert!(people.use_link("not a token").unwrap().is_none());
        for _ in 0..LINKS_PER_PERSON + 2 {
            people.new_link("bob").unwrap();
        }
        assert_eq!(
            people.get("bob").unwrap().unwrap().links.len(),
            LINKS_PER_PERSON
        );
    }

    #[test]
    fn a_wrong_link_takes_no_lock_and_writes_nothing() {
        let (dir, people) = people();
        people.create("boss").unwrap();
        let path = dir.path().join("broker/people.json");
        let before = (
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            std::fs::read(&path).unwrap(),
        );
        let held = lock(&people.lock).unwrap();
        let (done, checked) = std::sync::mpsc::channel();
        let other = people.clone();
        std::thread::spawn(move || done.send(other.use_link("a guess").unwrap().is_none()));
        let answer = checked.recv_timeout(std::time::Duration::from_secs(30));
        assert_eq!(answer, Ok(true), "answered while another holds the lock");
        let after = (
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            std::fs::read(&path).unwrap(),
        );
        assert_eq!(after, before);
        drop(held);
    }

    #[test]
    fn wrong_requests_change_nothing_and_say_what_to_do() {
        let (_dir, people) = people();
        people.create("boss").unwrap();
        let wrong = [
            people.add("Bad Id", Tier::Guest, None).map(drop),
            people.add("boss", Tier::Guest, None).map(drop),
            people.remove("nobody").map(drop),
            people.remove("boss").map(drop),
            people.set_tier("boss", Tier::Guest),
            people.new_link("nobody").map(drop),
        ];
        let reasons: Vec<String> = wrong
            .into_iter()
            .map(|r| r.unwrap_err().to_string())
            .collect();
        assert!(reasons[0].contains("person id `Bad Id`"), "{reasons:?}");
        assert!(reasons[1].contains("already exists"), "{reasons:?}");
        assert!(reasons[2].contains("`sausage people list`"), "{reasons:?}");
        assert!(reasons[3].contains("only owner"), "{reasons:?}");
        assert!(reasons[4].contains("only owner"), "{reasons:?}");
        let list = people.list().unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].tier, Tier::Owner);

        people.add("carol", Tier::Owner, None).unwrap();
        people.set_tier("boss", Tier::Guest).unwrap();
        assert_eq!(people.console_person().unwrap().id, "carol");
    }

    #[test]
    fn changes_from_two_processes_both_land() {
        let (dir, people) = people();
        people.create("boss").unwrap();
        let threads: Vec<_> = (0..8)
            .map(|n| {
                let people = People::new(&World::new(dir.path()));
                std::thread::spawn(move || people.add(&format!("p{n}"), Tier::Guest, None).unwrap())
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(people.list().unwrap().len(), 9);
    }

    #[test]
    fn a_surface_speaks_only_for_the_people_whose_handle_it_was_granted() {
        let (_dir, people) = people();
        people.create("boss").unwrap();
        let matrix = ActorId::parse("matrix").unwrap();
        let handles = BTreeMap::from([("matrix".to_string(), "@ann:example.org".to_string())]);
        people.add_with("ann", Tier::Member, None, handles).unwrap();
        let refused = people
            .speaker_by_handle(&matrix, "@ann:example.org")
            .unwrap_err();
        assert!(refused.contains("may not speak for people"), "{refused}");
        people.grant_surface(&matrix, "matrix").unwrap();
        let ann = people
            .speaker_by_handle(&matrix, "@ann:example.org")
            .unwrap();
        assert_eq!((ann.person.as_str(), ann.tier), ("ann", Tier::Member));
        let nobody = people
            .speaker_by_handle(&matrix, "@eve:example.org")
            .unwrap_err();
        assert!(nobody.contains("--matrix @eve:example.org"), "{nobody}");
        let other = ActorId::parse("echo").unwrap();
        assert!(
            people
                .speaker_by_handle(&other, "@ann:example.org")
                .is_err()
        );

        // Changes show at once; a handle is one person's; wrong handles are refused.
        people.set_tier("ann", Tier::Guest).unwrap();
        assert_eq!(
            people
                .speaker_by_handle(&matrix, "@ann:example.org")
                .unwrap()
                .tier,
            Tier::Guest
        );
        let taken = people
            .set_handle("boss", "matrix", Some("@ann:example.org"))
            .unwrap_err();
        assert!(taken.to_string().contains("ann's already"), "{taken}");
        for wrong in ["ann", "@ann", "@:x", "@a b:x", ""] {
            assert!(
                people.set_handle("boss", "matrix", Some(wrong)).is_err(),
                "{wrong}"
            );
        }
        people.remove("ann").unwrap();
        assert!(
            people
                .speaker_by_handle(&matrix, "@ann:example.org")
                .is_err()
        );
    }
}
