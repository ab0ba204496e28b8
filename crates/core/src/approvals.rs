//! Held actions and people's requests that wait for a decision (DESIGN §25).
//!
//! Two kinds wait here: an action a `"hold"` rule holds (a member's spawn with a new network
//! host, say), kept with the request that asked for it so it can go on once approved; and a
//! request the agent files for a person (`request_secret`, `request_grant`). Each has an id
//! (`h<n>`), who asked, what and why, who may decide, and an expiry ([`EXPIRES_AFTER`]).
//! They live in `broker/approvals.json`, changed under an exclusive `flock` and replaced whole,
//! so they survive a restart. On a cluster the hosts share one copy ([`SharedApprovals`]),
//! changed by compare-and-set, so that any host's broker lists and decides them, each once, and
//! what waits survives its host; each host's file follows the shared copy.
//!
//! A decision is made once: it is written into the entry before it is carried out, and the
//! entry goes when the broker has carried it out ([`Approvals::carried_out`]); a host that
//! dies between the two carries it out when it starts again. On a cluster the host that held
//! it carries it out, whichever host decided it, and another takes over once it is gone. Every hold,
//! decision and expiry is a line of the audit log. Nothing here ever holds a secret's value.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::message::Tier;
use crate::secrets::audit::Audit;
use crate::world::World;

/// How long a held action or a request waits for its decision.
pub const EXPIRES_AFTER: u64 = 24 * 60 * 60;

/// The most entries waiting at once: past it a new hold is refused (the asker is told why),
/// so a looping actor cannot fill the disk.
pub const MAX_WAITING: usize = 1000;

/// How many times a change is tried again when other hosts changed the shared copy first.
const CONFLICT_TRIES: usize = 50;

/// The copy of the approvals file a cluster's hosts share, replaced whole by compare-and-set.
/// Called on blocking threads.
pub trait SharedApprovals: Send + Sync {
    /// The shared file and its revision; `None` while no host has shared one.
    fn read(&self) -> Result<Option<(Vec<u8>, u64)>>;

    /// Replaces the shared file if it is still at `revision` (`None`: if there is none yet);
    /// false when another host changed it first.
    fn replace(&self, bytes: &[u8], revision: Option<u64>) -> Result<bool>;
}

/// One held action or request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Held {
    pub id: String,
    /// `spawn`, `upgrade`, `remove`, `network`, `grant`, `spend`, `schedule` or `secret` (a
    /// request for a secret's value).
    pub action: String,
    /// The person it was asked for.
    pub asked_by: String,
    /// The actor that asked, when an actor did (the agent for a person's turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Who decides: a person of this tier (or higher)…
    pub approver: Tier,
    /// …or, when set, only this person.
    #[serde(rename = "for", default, skip_serializing_if = "Option::is_none")]
    pub for_person: Option<String>,
    /// What it does, in words.
    pub what: String,
    pub why: String,
    /// Seconds since 1970.
    pub at: u64,
    pub expires: u64,
    /// What the broker needs to carry it out: the request as it came (`from`, `id`, `body`,
    /// `person`, `tier`) or the request's fields.
    pub request: Value,
    /// The cluster's host that held it, which carries out its decision while it lives (it
    /// answers the asker's native actors); `None` on one host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

/// How a held action was decided.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub approved: bool,
    pub by: String,
    pub at: u64,
    /// The cluster's host that carries it out: the one that held it, or one that took over
    /// from it once it was gone (`None` on one host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// What is asked when something is held.
#[derive(Clone)]
pub struct NewHold {
    pub action: String,
    pub asked_by: String,
    pub actor: Option<String>,
    pub approver: Tier,
    pub for_person: Option<String>,
    pub what: String,
    pub why: String,
    pub request: Value,
}

#[derive(Default, Serialize, Deserialize)]
struct File {
    next: u64,
    held: Vec<Held>,
}

/// The world's held actions and requests.
#[derive(Clone)]
pub struct Approvals {
    path: PathBuf,
    audit: Audit,
    shared: Option<Arc<dyn SharedApprovals>>,
    /// This host's id in a cluster: what it holds, it carries out.
    host: Option<String>,
}

impl Approvals {
    /// This host's file, which is all of them on one host, and what a cluster shared last.
    pub fn new(world: &World) -> Approvals {
        Approvals {
            path: world.root().join("broker/approvals.json"),
            audit: Audit::new(world),
            shared: None,
            host: None,
        }
    }

    /// The approvals the hosts of a cluster share through `shared`, as host `host` changes
    /// them; this host's file follows.
    pub fn shared(world: &World, shared: Arc<dyn SharedApprovals>, host: &str) -> Approvals {
        Approvals {
            shared: Some(shared),
            host: Some(host.to_string()),
            ..Approvals::new(world)
        }
    }

    /// Writes what a cluster shares into this host's file (for `sausage approvals` and
    /// `sausage status`, which read the folder), unless it holds that already.
    pub fn follow(&self, bytes: &[u8]) -> Result<()> {
        let _: File = serde_json::from_slice(bytes).context("the cluster's approvals")?;
        if std::fs::read(&self.path).is_ok_and(|now| now == bytes) {
            return Ok(());
        }
        let _lock = self.lock()?;
        crate::fs::write_atomically(&self.path, bytes)
            .with_context(|| format!("{}: cannot save the approvals", self.path.display()))
    }

    /// This host's file as it is, empty when there is none.
    pub fn file_bytes(&self) -> Vec<u8> {
        std::fs::read(&self.path).unwrap_or_default()
    }

    /// Stores a new held action or request; its id is in the answer.
    pub fn hold(&self, new: NewHold) -> Result<Held> {
        let now = now();
        let held = self.change(|file| {
            let new = new.clone();
            let waiting = file.held.iter().filter(|h| h.decision.is_none()).count();
            if waiting >= MAX_WAITING {
                bail!(
                    "{MAX_WAITING} actions already wait for a decision; decide some \
                     (`sausage approvals` lists them) before asking for more"
                );
            }
            file.next += 1;
            let held = Held {
                id: format!("h{}", file.next),
                action: new.action,
                asked_by: new.asked_by,
                actor: new.actor,
                approver: new.approver,
                for_person: new.for_person,
                what: new.what,
                why: new.why,
                at: now,
                expires: now + EXPIRES_AFTER,
                request: new.request,
                host: self.host.clone(),
                decision: None,
            };
            file.held.push(held.clone());
            Ok(held)
        })?;
        self.audit.append(json!({
            "event": "held", "id": held.id, "action": held.action, "by": held.asked_by,
            "actor": held.actor, "what": held.what, "why": held.why,
        }));
        Ok(held)
    }

    /// Everything that waits for a decision, oldest first (expired ones included until the
    /// broker expires them).
    pub fn waiting(&self) -> Result<Vec<Held>> {
        Ok(self
            .read()?
            .held
            .into_iter()
            .filter(|h| h.decision.is_none())
            .collect())
    }

    /// What `person` of `tier` sees: everything for an owner; what they asked, what is for
    /// them and what their tier decides for anyone else.
    pub fn waiting_for(&self, person: &str, tier: Tier) -> Result<Vec<Held>> {
        Ok(self
            .waiting()?
            .into_iter()
            .filter(|h| {
                tier == Tier::Owner || h.asked_by == person || may_decide(h, person, tier).is_ok()
            })
            .collect())
    }

    /// The entry `id`, decided or not.
    pub fn get(&self, id: &str) -> Result<Held> {
        let file = self.read()?;
        find(&file, id).cloned()
    }

    /// Records `person`'s decision on `id`, once: refused when they may not decide it, when
    /// it was decided already or when it expired. The answer is the entry as decided; the
    /// broker then carries it out (on a cluster, this host's).
    pub fn decide(&self, id: &str, person: &str, tier: Tier, approved: bool) -> Result<Held> {
        let now = now();
        let held = self.change(|file| {
            let held = find_mut(file, id)?;
            if let Some(decision) = &held.decision {
                bail!(
                    "{id} was {} by {} already",
                    if decision.approved {
                        "approved"
                    } else {
                        "denied"
                    },
                    decision.by
                );
            }
            if held.expires <= now {
                bail!("{id} expired: nobody decided it within 24 hours; ask again");
            }
            may_decide(held, person, tier).map_err(anyhow::Error::msg)?;
            held.decision = Some(Decision {
                approved,
                by: person.to_string(),
                at: now,
                host: held.host.clone(),
            });
            Ok(held.clone())
        })?;
        self.audit.append(json!({
            "event": if approved { "approved" } else { "denied" }, "id": id, "by": person,
            "action": held.action, "asked_by": held.asked_by, "what": held.what,
        }));
        Ok(held)
    }

    /// Entries decided and not carried out yet (a host died in between).
    pub fn decided(&self) -> Result<Vec<Held>> {
        Ok(self
            .read()?
            .held
            .into_iter()
            .filter(|h| h.decision.is_some())
            .collect())
    }

    /// Makes `to` the host that carries out the decided `id` when `from` still is (it died
    /// before it did): the entry as taken, `None` when another host took it first or it went.
    pub fn take_over(&self, id: &str, from: Option<&str>, to: &str) -> Result<Option<Held>> {
        self.change(|file| {
            let held = file.held.iter_mut().find(|h| h.id == id);
            let Some(held) = held else { return Ok(None) };
            match &mut held.decision {
                Some(decision) if decision.host.as_deref() == from => {
                    decision.host = Some(to.to_string());
                    Ok(Some(held.clone()))
                }
                _ => Ok(None),
            }
        })
    }

    /// Takes out the approved entry `kept` finds its request in (true), as the request passes
    /// the rule that held it; false, changing nothing, when none is.
    pub fn pass(&self, kept: impl Fn(&Held) -> bool) -> Result<bool> {
        let approved = |h: &Held| h.decision.as_ref().is_some_and(|d| d.approved) && kept(h);
        if !self.read()?.held.iter().any(approved) {
            return Ok(false);
        }
        self.change(|file| {
            let before = file.held.len();
            file.held.retain(|h| !approved(h));
            Ok(file.held.len() < before)
        })
    }

    /// Forgets `id`: its decision was carried out.
    pub fn carried_out(&self, id: &str) -> Result<()> {
        self.change(|file| {
            file.held.retain(|h| h.id != id);
            Ok(())
        })
    }

    /// Takes out every undecided entry past its expiry (`now`, seconds since 1970) and
    /// answers them: the broker tells each asker.
    pub fn expire(&self, now: u64) -> Result<Vec<Held>> {
        if self.shared.is_none() && !self.path.exists() {
            return Ok(Vec::new());
        }
        let expired = self.change(|file| {
            let (gone, kept) = std::mem::take(&mut file.held)
                .into_iter()
                .partition(|h| h.decision.is_none() && h.expires <= now);
            file.held = kept;
            Ok(gone)
        })?;
        for held in &expired {
            self.audit.append(json!({
                "event": "expired", "id": held.id, "action": held.action,
                "asked_by": held.asked_by, "what": held.what,
            }));
        }
        Ok(expired)
    }

    fn read(&self) -> Result<File> {
        match &self.shared {
            Some(shared) => match shared.read()? {
                Some((bytes, _)) => parse(&bytes, "the cluster's approvals"),
                None => self.read_here(),
            },
            None => self.read_here(),
        }
    }

    fn read_here(&self) -> Result<File> {
        match std::fs::read(&self.path) {
            Ok(bytes) => parse(&bytes, &self.path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(File::default()),
            Err(e) => Err(e).with_context(|| format!("{}: cannot read", self.path.display())),
        }
    }

    /// Changes the file by `change`: this host's under its lock, and on a cluster the shared
    /// copy first, by compare-and-set (`change` runs again on what another host wrote first;
    /// the first copy shared is this host's file).
    fn change<T>(&self, mut change: impl FnMut(&mut File) -> Result<T>) -> Result<T> {
        let _lock = self.lock()?;
        for _ in 0..CONFLICT_TRIES {
            let (mut file, revision) = match &self.shared {
                Some(shared) => match shared.read()? {
                    Some((bytes, revision)) => {
                        (parse(&bytes, "the cluster's approvals")?, Some(revision))
                    }
                    None => (self.read_here()?, None),
                },
                None => (self.read_here()?, None),
            };
            let result = change(&mut file)?;
            let bytes = serde_json::to_vec_pretty(&file).expect("approvals serialise");
            if let Some(shared) = &self.shared
                && !shared.replace(&bytes, revision)?
            {
                continue;
            }
            crate::fs::write_atomically(&self.path, &bytes)
                .with_context(|| format!("{}: cannot save the approvals", self.path.display()))?;
            return Ok(result);
        }
        bail!(
            "the cluster's approvals changed under this host {CONFLICT_TRIES} times running; \
             try again"
        )
    }

    fn lock(&self) -> Result<std::fs::File> {
        let dir = self
            .path
            .parent()
            .expect("broker/approvals.json has a folder");
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot make the folder", dir.display()))?;
        crate::people::lock(&dir.join("approvals.lock"))
    }
}

fn parse(bytes: &[u8], what: &str) -> Result<File> {
    serde_json::from_slice(bytes)
        .with_context(|| format!("{what}: not an approvals file; fix or remove it"))
}

/// Whether `person` of `tier` may decide `held` (DESIGN §25): the person it is for, when it
/// names one; else a person of the approver's tier or higher who did not ask it, except that
/// an owner may decide what an actor of theirs asked.
pub fn may_decide(held: &Held, person: &str, tier: Tier) -> Result<(), String> {
    if let Some(for_person) = &held.for_person {
        return match for_person == person {
            true => Ok(()),
            false => Err(format!(
                "{} is {for_person}'s to answer, not {person}'s",
                held.id
            )),
        };
    }
    if tier < held.approver {
        return Err(format!(
            "{} waits for an {}'s decision, and {person} is a {}",
            held.id,
            held.approver.as_str(),
            tier.as_str()
        ));
    }
    if held.asked_by == person && !(tier == Tier::Owner && held.actor.is_some()) {
        return Err(format!(
            "{person} asked for {} and may not approve it too; another {} decides",
            held.id,
            held.approver.as_str()
        ));
    }
    Ok(())
}

fn find<'a>(file: &'a File, id: &str) -> Result<&'a Held> {
    file.held
        .iter()
        .find(|h| h.id == id)
        .ok_or_else(|| unknown(file, id))
}

fn find_mut<'a>(file: &'a mut File, id: &str) -> Result<&'a mut Held> {
    if !file.held.iter().any(|h| h.id == id) {
        return Err(unknown(file, id));
    }
    Ok(file.held.iter_mut().find(|h| h.id == id).expect("found"))
}

fn unknown(file: &File, id: &str) -> anyhow::Error {
    let waiting: Vec<&str> = (file.held.iter())
        .filter(|h| h.decision.is_none())
        .map(|h| h.id.as_str())
        .collect();
    match waiting.is_empty() {
        true => anyhow::anyhow!("nothing waits as {id}; nothing waits for a decision now"),
        false => anyhow::anyhow!(
            "nothing waits as {id}; waiting: {} (it may have been decided or expired)",
            waiting.join(", ")
        ),
    }
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approvals() -> (tempfile::TempDir, Approvals) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("broker")).unwrap();
        let approvals = Approvals::new(&World::new(dir.path()));
        (dir, approvals)
    }

    fn spawn_by(person: &str, actor: Option<&str>) -> NewHold {
        NewHold {
            action: "network".into(),
            asked_by: person.into(),
            actor: actor.map(str::to_owned),
            approver: Tier::Owner,
            for_person: None,
            what: "spawn `fetcher` reaching api.example.com".into(),
            why: "it reads the weather".into(),
            request: json!({"from": "agent", "id": "agent/t1", "body": {"type": "spawn"}}),
        }
    }

    #[test]
    fn a_hold_is_decided_once_by_someone_else_of_the_approvers_tier() {
        let (_dir, approvals) = approvals();
        let held = approvals.hold(spawn_by("mia", Some("agent"))).unwrap();
        assert_eq!(held.id, "h1");
        let refused = |person, tier| {
            approvals
                .decide("h1", person, tier, true)
                .unwrap_err()
                .to_string()
        };
        assert!(refused("mia", Tier::Member).contains("waits for an owner's"));
        assert!(refused("gus", Tier::Guest).contains("waits for an owner's"));
        assert!(approvals.waiting().unwrap()[0].decision.is_none());
        let decided = approvals.decide("h1", "olga", Tier::Owner, false).unwrap();
        assert_eq!(decided.decision.as_ref().unwrap().by, "olga");
        let twice = approvals
            .decide("h1", "otto", Tier::Owner, true)
            .unwrap_err();
        assert!(
            twice.to_string().contains("denied by olga already"),
            "{twice}"
        );
        assert!(approvals.waiting().unwrap().is_empty());
        assert_eq!(approvals.decided().unwrap().len(), 1);
        approvals.carried_out("h1").unwrap();
        assert!(approvals.decided().unwrap().is_empty());
        let gone = approvals
            .decide("h1", "olga", Tier::Owner, true)
            .unwrap_err();
        assert!(gone.to_string().contains("nothing waits as h1"), "{gone}");
        let events: Vec<Value> = Audit::new(&World::new(_dir.path()))
            .read()
            .unwrap()
            .into_iter()
            .map(|e| e["event"].clone())
            .collect();
        assert_eq!(events, [json!("held"), json!("denied")]);
    }

    #[test]
    fn an_owner_decides_what_their_actor_asked_but_not_what_they_asked_themselves() {
        let (_dir, approvals) = approvals();
        approvals.hold(spawn_by("olga", Some("agent"))).unwrap();
        approvals.hold(spawn_by("olga", None)).unwrap();
        approvals.decide("h1", "olga", Tier::Owner, true).unwrap();
        let own = approvals
            .decide("h2", "olga", Tier::Owner, true)
            .unwrap_err();
        assert!(own.to_string().contains("may not approve it too"), "{own}");
    }

    #[test]
    fn a_request_for_a_person_is_theirs_alone_to_answer() {
        let (_dir, approvals) = approvals();
        let mut new = spawn_by("mia", Some("agent"));
        new.action = "secret".into();
        new.for_person = Some("mia".into());
        approvals.hold(new).unwrap();
        let other = approvals
            .decide("h1", "olga", Tier::Owner, true)
            .unwrap_err();
        assert!(other.to_string().contains("mia's to answer"), "{other}");
        assert_eq!(approvals.waiting_for("mia", Tier::Member).unwrap().len(), 1);
        assert!(
            approvals
                .waiting_for("max", Tier::Member)
                .unwrap()
                .is_empty()
        );
        approvals.decide("h1", "mia", Tier::Member, true).unwrap();
    }

    #[test]
    fn what_nobody_decided_expires_and_cannot_be_decided_then() {
        let (_dir, approvals) = approvals();
        let held = approvals.hold(spawn_by("mia", Some("agent"))).unwrap();
        assert!(approvals.expire(held.expires - 1).unwrap().is_empty());
        let expired = approvals.expire(held.expires).unwrap();
        assert_eq!(expired.len(), 1);
        assert!(approvals.waiting().unwrap().is_empty());
    }

    #[test]
    fn a_damaged_file_is_refused_with_what_to_do_and_left_as_it_is() {
        let (dir, approvals) = approvals();
        let path = dir.path().join("broker/approvals.json");
        std::fs::write(&path, "{half").unwrap();
        let e = approvals.hold(spawn_by("mia", None)).unwrap_err();
        assert!(format!("{e:#}").contains("fix or remove it"), "{e:#}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{half");
    }

    /// A cluster's shared copy in memory; `meddle` runs once before the next replace, as
    /// another host writing first.
    #[derive(Default)]
    struct Shared {
        file: std::sync::Mutex<Option<(Vec<u8>, u64)>>,
        meddle: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
    }

    impl SharedApprovals for Shared {
        fn read(&self) -> Result<Option<(Vec<u8>, u64)>> {
            Ok(self.file.lock().unwrap().clone())
        }

        fn replace(&self, bytes: &[u8], revision: Option<u64>) -> Result<bool> {
            let meddle = self.meddle.lock().unwrap().take();
            if let Some(meddle) = meddle {
                meddle();
            }
            let mut file = self.file.lock().unwrap();
            if file.as_ref().map(|(_, r)| *r) != revision {
                return Ok(false);
            }
            let next = revision.unwrap_or(0) + 1;
            *file = Some((bytes.to_vec(), next));
            Ok(true)
        }
    }

    /// Two hosts' approvals over one shared copy, each with its own folder.
    fn two_hosts() -> (Vec<tempfile::TempDir>, Arc<Shared>, Approvals, Approvals) {
        let shared = Arc::new(Shared::default());
        let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let host =
            |n: usize, id: &str| Approvals::shared(&World::new(dirs[n].path()), shared.clone(), id);
        let (a, b) = (host(0, "a"), host(1, "b"));
        (dirs, shared, a, b)
    }

    #[test]
    fn hosts_sharing_approvals_see_one_list_and_decide_each_once() {
        let (dirs, shared, a, b) = two_hosts();
        assert_eq!(a.hold(spawn_by("mia", None)).unwrap().id, "h1");
        assert_eq!(b.hold(spawn_by("max", None)).unwrap().id, "h2");
        let ids = |approvals: &Approvals| -> Vec<String> {
            approvals
                .waiting()
                .unwrap()
                .into_iter()
                .map(|h| h.id)
                .collect()
        };
        assert_eq!(ids(&a), ["h1", "h2"]);
        assert_eq!(ids(&b), ["h1", "h2"]);

        // Decided on b, carried out by a, which held it.
        let decided = b.decide("h1", "olga", Tier::Owner, true).unwrap();
        assert_eq!(decided.host.as_deref(), Some("a"));
        assert_eq!(decided.decision.unwrap().host.as_deref(), Some("a"));
        let twice = a.decide("h1", "otto", Tier::Owner, false).unwrap_err();
        assert!(
            twice.to_string().contains("approved by olga already"),
            "{twice}"
        );

        // Another host decides first, between this one's read and its write: this one's
        // decision is tried on what that host wrote, and refused.
        let other = Approvals::shared(&World::new(dirs[1].path()), shared.clone(), "b");
        *shared.meddle.lock().unwrap() = Some(Box::new(move || {
            other.decide("h2", "olga", Tier::Owner, false).unwrap();
        }));
        let late = a.decide("h2", "otto", Tier::Owner, true).unwrap_err();
        assert!(
            late.to_string().contains("denied by olga already"),
            "{late}"
        );
        assert!(ids(&a).is_empty());

        // This host's file holds what it wrote last; `follow` writes what others wrote since.
        let here = Approvals::new(&World::new(dirs[0].path()));
        let on_a: Vec<String> = here.waiting().unwrap().into_iter().map(|h| h.id).collect();
        assert_eq!(on_a, ["h1"]);
        let (bytes, _) = shared.read().unwrap().unwrap();
        here.follow(&bytes).unwrap();
        assert_eq!(here.decided().unwrap().len(), 2);
        assert_eq!(here.file_bytes(), bytes);
        assert!(here.follow(b"[1, 2]").is_err(), "not an approvals file");
        assert_eq!(here.file_bytes(), bytes, "a bad copy changes nothing");
    }

    #[test]
    fn a_gone_hosts_decision_is_taken_over_once_and_an_approved_request_passes_once() {
        let (_dirs, _shared, a, b) = two_hosts();
        a.hold(spawn_by("mia", None)).unwrap();
        a.hold(spawn_by("max", None)).unwrap();
        a.decide("h1", "olga", Tier::Owner, true).unwrap();
        a.decide("h2", "olga", Tier::Owner, false).unwrap();
        let taken = b.take_over("h1", Some("a"), "b").unwrap().unwrap();
        assert_eq!(taken.decision.unwrap().host.as_deref(), Some("b"));
        assert!(
            a.take_over("h1", Some("a"), "c").unwrap().is_none(),
            "taken already"
        );

        let asked_by = |who: &'static str| move |h: &Held| h.asked_by == who;
        assert!(
            !b.pass(asked_by("max")).unwrap(),
            "denied: it does not pass"
        );
        assert!(!b.pass(asked_by("ann")).unwrap(), "nothing of ann's");
        assert!(b.pass(asked_by("mia")).unwrap());
        assert!(!a.pass(asked_by("mia")).unwrap(), "it passed once");
        let left: Vec<String> = a.decided().unwrap().into_iter().map(|h| h.id).collect();
        assert_eq!(left, ["h2"]);
    }
}
