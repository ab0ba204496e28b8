//! Secrets and grants (DESIGN §25): values people give the host for actors' outgoing requests.
//!
//! A secret is a value with the base URL it is for, the header it goes in and how the header
//! is written (`Bearer {}`). It is granted to actors; the host adds the header to a granted
//! actor's requests under the base URL (and lets the actor reach that host). The value lives in
//! `broker/secrets/secrets.json` only (a folder of mode 0700, the file 0600, outside every
//! mount): nothing else of the world, no message, log, span or listing ever holds it.
//! `sausage secret …` and a running world change the file under an exclusive `flock`, and a
//! running instance sees a grant or a revocation from its next request on.
//! Every set, grant, revocation, removal and use is a line of the audit log (`audit`).

pub mod audit;
pub mod model;
pub mod sealed;

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::message::{ActorId, Tier};
use crate::runtime::network::{Credentials, Granted, Grants};
use crate::world::World;
use audit::Audit;

/// The header a secret goes in when it does not say.
pub const DEFAULT_HEADER: &str = "authorization";
/// How the header is written when it does not say: `{}` is the value.
pub const DEFAULT_FORMAT: &str = "Bearer {}";
/// The longest value taken: longer than any token a service issues.
const MAX_VALUE_BYTES: usize = 8 * 1024;
/// Headers a secret may not go in: the connection's own.
const FORBIDDEN_HEADERS: [&str; 6] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
];

/// One secret as stored: its value is never serialised anywhere but its file.
#[derive(Clone, Serialize, Deserialize)]
struct Stored {
    url: String,
    header: String,
    format: String,
    value: String,
    set_by: String,
    set_at: u64,
    #[serde(default)]
    grants: Vec<Grant>,
}

/// An actor a secret is granted to, by whom and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub actor: String,
    pub by: String,
    pub at: u64,
}

/// What a listing shows of a secret: everything but its value.
#[derive(Clone, Debug, Serialize)]
pub struct Listed {
    pub name: String,
    pub url: String,
    pub header: String,
    pub format: String,
    pub set_by: String,
    pub set_at: u64,
    pub grants: Vec<Grant>,
    /// Its last use: `{"actor", "url", "at", "status"}`.
    pub last_use: Option<serde_json::Value>,
}

/// What `set` is given besides the value.
pub struct NewSecret<'a> {
    pub name: &'a str,
    pub url: &'a str,
    pub header: Option<&'a str>,
    pub format: Option<&'a str>,
}

/// Who acts on secrets, and as which tier (DESIGN §25): owners set and grant any secret,
/// members their own to their own actors, guests none.
pub struct Acting<'a> {
    pub person: &'a str,
    pub tier: Tier,
}

/// The secrets of a world.
#[derive(Clone)]
pub struct Secrets {
    dir: PathBuf,
    audit: Audit,
}

impl Secrets {
    pub fn new(world: &World) -> Secrets {
        Secrets {
            dir: world.secrets_dir(),
            audit: Audit::new(world),
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.join("secrets.json")
    }

    /// Sets secret `name` to `value` (replacing its value, base URL, header and format, keeping
    /// its grants). True when it replaced one.
    pub fn set(&self, new: &NewSecret, value: &str, by: &str) -> Result<bool> {
        check_name(new.name)?;
        let url = check_url(new.url)?;
        let header = new.header.unwrap_or(DEFAULT_HEADER).to_ascii_lowercase();
        check_header(&header)?;
        let format = new.format.unwrap_or(DEFAULT_FORMAT).to_string();
        check_value(&format, value)?;
        let replaced = self.change(|all| {
            let grants = all
                .get(new.name)
                .map(|s| s.grants.clone())
                .unwrap_or_default();
            let stored = Stored {
                url: url.clone(),
                header: header.clone(),
                format: format.clone(),
                value: value.to_string(),
                set_by: by.to_string(),
                set_at: now(),
                grants,
            };
            Ok(all.insert(new.name.to_string(), stored).is_some())
        })?;
        self.audit.append(json!({
            "event": "secret_set", "by": by, "secret": new.name, "url": url, "header": header,
            "replaced": replaced,
        }));
        Ok(replaced)
    }

    /// Whether `who` may set, grant, revoke or remove secret `name` (which may not exist
    /// yet), and grant it to or take it from `actor` (with its owner) when one is named.
    pub fn check(
        &self,
        who: &Acting,
        name: &str,
        actor: Option<(&str, Option<&str>)>,
    ) -> Result<()> {
        match who.tier {
            Tier::Owner => return Ok(()),
            Tier::Guest => bail!(
                "{} is a guest, and guests may not set or grant secrets; ask a member or an owner",
                who.person
            ),
            Tier::Member => {}
        }
        if let Some(secret) = self.read()?.get(name)
            && secret.set_by != who.person
        {
            bail!(
                "secret `{name}` was set by {}: a member sets and grants only their own secrets",
                secret.set_by
            );
        }
        if let Some((actor, owner)) = actor
            && owner != Some(who.person)
        {
            bail!(
                "actor `{actor}` is {}: a member grants secrets to their own actors only",
                owner.map_or("nobody's".to_string(), |o| format!("{o}'s"))
            );
        }
        Ok(())
    }

    /// The secrets `who` may see: all for an owner, their own for a member, none for a guest.
    pub fn list_for(&self, who: &Acting) -> Result<Vec<Listed>> {
        match who.tier {
            Tier::Owner => self.list(),
            Tier::Member => Ok(self
                .list()?
                .into_iter()
                .filter(|s| s.set_by == who.person)
                .collect()),
            Tier::Guest => bail!("{} is a guest, and guests may not see secrets", who.person),
        }
    }

    /// Every secret, by name, without values.
    pub fn list(&self) -> Result<Vec<Listed>> {
        let all = self.read()?;
        let mut last_uses = self.audit.last_uses();
        Ok(all
            .into_iter()
            .map(|(name, s)| Listed {
                last_use: last_uses.remove(&name),
                name,
                url: s.url,
                header: s.header,
                format: s.format,
                set_by: s.set_by,
                set_at: s.set_at,
                grants: s.grants,
            })
            .collect())
    }

    /// The value of secret `name` (`None` when there is none), for the host's own use: a
    /// request of its own with it (`sausage model test`), or keeping it under new settings
    /// (`sausage model set`). Never printed, logged or handed to an actor.
    pub fn value(&self, name: &str) -> Result<Option<String>> {
        Ok(self.read()?.remove(name).map(|s| s.value))
    }

    /// Grants secret `name` to `actor`. False when it was granted already.
    pub fn grant(&self, name: &str, actor: &ActorId, by: &str) -> Result<bool> {
        let granted = self.change(|all| {
            let secret = known(all, name)?;
            if secret.grants.iter().any(|g| g.actor == actor.as_str()) {
                return Ok(false);
            }
            secret.grants.push(Grant {
                actor: actor.to_string(),
                by: by.to_string(),
                at: now(),
            });
            Ok(true)
        })?;
        if granted {
            self.audit.append(json!({
                "event": "grant", "by": by, "secret": name, "actor": actor.as_str(),
            }));
        }
        Ok(granted)
    }

    /// Takes secret `name` back from `actor`. False when it was not granted to it.
    pub fn revoke(&self, name: &str, actor: &ActorId, by: &str) -> Result<bool> {
        let revoked = self.change(|all| {
            let secret = known(all, name)?;
            let before = secret.grants.len();
            secret.grants.retain(|g| g.actor != actor.as_str());
            Ok(secret.grants.len() != before)
        })?;
        if revoked {
            self.audit.append(json!({
                "event": "revoke", "by": by, "secret": name, "actor": actor.as_str(),
            }));
        }
        Ok(revoked)
    }

    /// `actor`'s code was replaced by `by` (`None`: by nobody): every grant to it that `by`
    /// did not give is dropped (DESIGN §25; an owner's replacement keeps them all, and the
    /// caller does not ask then). Returns the secrets dropped.
    pub fn code_replaced(&self, actor: &ActorId, by: Option<&str>) -> Result<Vec<String>> {
        let why = "the actor's code was replaced by someone who did not grant it";
        self.drop_grants(actor, by, why)
    }

    /// `actor` was removed: every grant to it goes, so that no later actor of that name holds
    /// one. Returns the secrets dropped.
    pub fn actor_removed(&self, actor: &ActorId) -> Result<Vec<String>> {
        self.drop_grants(actor, None, "the actor was removed")
    }

    /// Drops every grant to `actor` except those `kept_from` gave, each with an audit line.
    fn drop_grants(
        &self,
        actor: &ActorId,
        kept_from: Option<&str>,
        why: &str,
    ) -> Result<Vec<String>> {
        let mut dropped = Vec::new();
        self.change(|all| {
            for (name, secret) in all.iter_mut() {
                let before = secret.grants.len();
                secret
                    .grants
                    .retain(|g| g.actor != actor.as_str() || Some(g.by.as_str()) == kept_from);
                if secret.grants.len() != before {
                    dropped.push(name.clone());
                }
            }
            Ok(())
        })?;
        for name in &dropped {
            self.audit.append(json!({
                "event": "revoke", "by": kept_from.unwrap_or("nobody"), "secret": name,
                "actor": actor.as_str(), "why": why,
            }));
        }
        Ok(dropped)
    }

    /// Removes secret `name`, and every grant of it.
    pub fn remove(&self, name: &str, by: &str) -> Result<()> {
        self.change(|all| {
            known(all, name)?;
            all.remove(name);
            Ok(())
        })?;
        self.audit
            .append(json!({"event": "secret_remove", "by": by, "secret": name}));
        Ok(())
    }

    /// What `actor`'s instances are granted, read again whenever the file changes.
    pub fn grants_for(&self, actor: &ActorId) -> Arc<dyn Grants> {
        Arc::new(ActorGrants {
            secrets: self.clone(),
            actor: actor.clone(),
            seen: Mutex::default(),
        })
    }

    /// The secrets file as it is (empty when there is none): what a cluster shares, sealed.
    pub fn file_bytes(&self) -> Vec<u8> {
        std::fs::read(self.path()).unwrap_or_default()
    }

    /// Replaces the secrets file with another host's copy, under the lock; bytes that are not
    /// a secrets file change nothing.
    pub fn replace_file(&self, bytes: &[u8]) -> Result<()> {
        let _: BTreeMap<String, Stored> =
            serde_json::from_slice(bytes).context("not a secrets file")?;
        self.change(|all| {
            *all = serde_json::from_slice(bytes).expect("checked above");
            Ok(())
        })
    }

    fn read(&self) -> Result<BTreeMap<String, Stored>> {
        let path = self.path();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not a secrets file", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(e).with_context(|| format!("{}: cannot read", path.display())),
        }
    }

    fn change<T>(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, Stored>) -> Result<T>,
    ) -> Result<T> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .with_context(|| format!("{}: cannot make the folder", self.dir.display()))?;
        // A folder made before, by hand or by an older host, is closed too.
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("{}: cannot close the folder", self.dir.display()))?;
        let _lock = crate::people::lock(&self.dir.join("secrets.lock"))?;
        let mut all = self.read()?;
        let result = change(&mut all)?;
        let path = self.path();
        let bytes = serde_json::to_vec_pretty(&all).expect("secrets serialise");
        crate::fs::write_atomically(&path, &bytes)
            .with_context(|| format!("{}: cannot save the secrets", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("{}: cannot close the file", path.display()))?;
        Ok(result)
    }
}

fn known<'a>(all: &'a mut BTreeMap<String, Stored>, name: &str) -> Result<&'a mut Stored> {
    let names: Vec<&str> = all.keys().map(String::as_str).collect();
    let known = match names.is_empty() {
        true => "there are none yet; set one with `sausage secret set`".to_string(),
        false => format!("known: {}", names.join(", ")),
    };
    all.get_mut(name)
        .ok_or_else(|| anyhow::anyhow!("no secret `{name}`; {known}"))
}

/// The actor grants of one actor, as the runtime asks for them at each request.
struct ActorGrants {
    secrets: Secrets,
    actor: ActorId,
    /// The file's identity when last read, and what it granted then.
    seen: Mutex<Option<(FileStamp, Arc<Vec<Granted>>)>>,
}

/// What tells that a file changed: a commit renames a new file in.
#[derive(PartialEq, Eq, Clone, Copy)]
struct FileStamp {
    inode: u64,
    size: u64,
    modified: Option<SystemTime>,
}

impl Grants for ActorGrants {
    fn current(&self) -> Arc<Vec<Granted>> {
        use std::os::unix::fs::MetadataExt;
        let stamp = std::fs::metadata(self.secrets.path())
            .ok()
            .map(|m| FileStamp {
                inode: m.ino(),
                size: m.size(),
                modified: m.modified().ok(),
            });
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(stamp), Some((was, granted))) = (stamp, seen.as_ref())
            && stamp == *was
        {
            return granted.clone();
        }
        let Some(stamp) = stamp else {
            *seen = None;
            return Arc::default();
        };
        let granted: Vec<Granted> = match self.secrets.read() {
            Ok(all) => all
                .into_iter()
                .filter(|(_, s)| s.grants.iter().any(|g| g.actor == self.actor.as_str()))
                .map(|(name, s)| Granted {
                    secret: name,
                    credentials: Credentials {
                        value: s.format.replacen("{}", &s.value, 1),
                        base_url: s.url,
                        header: s.header,
                    },
                })
                .collect(),
            Err(e) => {
                tracing::warn!("actor {}: its secrets are not added: {e:#}", self.actor);
                Vec::new()
            }
        };
        let granted = Arc::new(granted);
        *seen = Some((stamp, granted.clone()));
        granted
    }

    fn used(&self, secret: &str, url: &str, status: Result<u16, String>) {
        let status = match status {
            Ok(code) => json!(code),
            Err(error) => json!(error),
        };
        self.secrets.audit.append(json!({
            "event": "use", "secret": secret, "actor": self.actor.as_str(), "url": url,
            "status": status,
        }));
    }
}

/// Seconds since the Unix epoch.
fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A secret's name: what `grant` and the agent's tools call it by.
pub fn check_name(name: &str) -> Result<()> {
    let fine = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !fine {
        bail!(
            "`{name}` cannot name a secret: use 1 to 64 letters, digits, `-`, `_` or `.`, \
             starting with a letter or digit (for example `github-token`)"
        );
    }
    Ok(())
}

/// A base URL: `http(s)://host[:port][/path]`, without query, fragment or user; given back
/// without a trailing `/`.
pub fn check_url(url: &str) -> Result<String> {
    let wrong = |why: &str| {
        anyhow::anyhow!(
            "`{url}` is not a base URL ({why}); write it as `https://api.example.com` or \
             `https://api.example.com/v1`"
        )
    };
    let uri: http::Uri = url.parse().map_err(|_| wrong("it does not parse"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(wrong("it must start with https:// or http://")),
    }
    let authority = uri.authority().ok_or_else(|| wrong("it has no host"))?;
    if authority.as_str().contains('@') {
        return Err(wrong("it may not hold a user or password"));
    }
    if authority.host().is_empty() {
        return Err(wrong("it has no host"));
    }
    if uri.query().is_some() || url.contains('#') {
        return Err(wrong("it may not hold a query or fragment"));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// A header a secret may go in (lower case).
pub fn check_header(header: &str) -> Result<()> {
    if http::HeaderName::try_from(header).is_err() {
        bail!("`{header}` is not a header name (for example `authorization` or `x-api-key`)");
    }
    if FORBIDDEN_HEADERS.contains(&header) {
        bail!("a secret cannot go in the `{header}` header: the connection sets it");
    }
    Ok(())
}

/// The value, written by `format`, must be one header value; the error never holds it.
fn check_value(format: &str, value: &str) -> Result<()> {
    if format.matches("{}").count() != 1 {
        bail!("the format `{format}` must hold `{{}}` once, where the value goes (`Bearer {{}}`)");
    }
    if value.is_empty() {
        bail!("the value is empty; give the secret's value on stdin or at the prompt");
    }
    if value.len() > MAX_VALUE_BYTES {
        bail!(
            "the value is {} bytes, more than the {MAX_VALUE_BYTES} a secret may hold",
            value.len()
        );
    }
    if http::HeaderValue::try_from(format.replacen("{}", value, 1)).is_err() {
        bail!(
            "the value holds a character a header cannot (a line break or a control \
             character); check what was pasted"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world() -> (tempfile::TempDir, World) {
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(dir.path().join("w"));
        std::fs::create_dir_all(world.root().join("broker")).unwrap();
        (dir, world)
    }

    fn secret<'a>(name: &'a str, url: &'a str) -> NewSecret<'a> {
        NewSecret {
            name,
            url,
            header: None,
            format: None,
        }
    }

    #[test]
    fn a_secret_is_kept_private_granted_and_listed_without_its_value() {
        let (_dir, world) = world();
        let secrets = Secrets::new(&world);
        let a = ActorId::parse("a").unwrap();
        assert!(
            !secrets
                .set(&secret("gh", "https://api.github.com/"), "s3cr3t", "ann")
                .unwrap()
        );
        assert!(
            secrets
                .set(&secret("gh", "https://api.github.com"), "s3cr3t2", "ann")
                .unwrap()
        );
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&world.root().join("broker/secrets")), 0o700);
        assert_eq!(
            mode(&world.root().join("broker/secrets/secrets.json")),
            0o600
        );

        let grants = secrets.grants_for(&a);
        assert!(grants.current().is_empty());
        assert!(secrets.grant("gh", &a, "ann").unwrap());
        assert!(!secrets.grant("gh", &a, "ann").unwrap(), "granted once");
        let now = grants.current();
        assert_eq!(now.len(), 1);
        assert_eq!(now[0].credentials.value, "Bearer s3cr3t2");
        assert_eq!(now[0].credentials.base_url, "https://api.github.com");
        grants.used("gh", "https://api.github.com/user", Ok(200));

        let listed = secrets.list().unwrap();
        let text = serde_json::to_string(&listed).unwrap();
        assert!(!text.contains("s3cr3t"), "{text}");
        assert_eq!(listed[0].grants[0].actor, "a");
        assert_eq!(listed[0].last_use.as_ref().unwrap()["status"], 200);

        // Replaced by the giver: kept; by someone else: dropped.
        assert!(secrets.code_replaced(&a, Some("ann")).unwrap().is_empty());
        assert_eq!(secrets.code_replaced(&a, Some("bob")).unwrap(), ["gh"]);
        assert!(grants.current().is_empty());
        assert!(secrets.grant("gh", &a, "ann").unwrap());
        assert!(secrets.revoke("gh", &a, "ann").unwrap());
        assert!(
            grants.current().is_empty(),
            "a revocation holds from the next request"
        );
        secrets.remove("gh", "ann").unwrap();
        assert!(secrets.list().unwrap().is_empty());
        let audit = std::fs::read_to_string(world.root().join("broker/audit.log")).unwrap();
        assert!(!audit.contains("s3cr3t"), "{audit}");
        let events: Vec<String> = audit
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"].to_string())
            .collect();
        assert_eq!(
            events,
            [
                "\"secret_set\"",
                "\"secret_set\"",
                "\"grant\"",
                "\"use\"",
                "\"revoke\"",
                "\"grant\"",
                "\"revoke\"",
                "\"secret_remove\""
            ]
        );
    }

    #[test]
    fn owners_set_and_grant_any_members_their_own_to_their_own_guests_none() {
        let (_dir, world) = world();
        let secrets = Secrets::new(&world);
        secrets
            .set(&secret("bobs", "https://b.example"), "v", "bob")
            .unwrap();
        secrets
            .set(&secret("anns", "https://a.example"), "v", "ann")
            .unwrap();
        let ann = Acting {
            person: "ann",
            tier: Tier::Member,
        };
        let gus = Acting {
            person: "gus",
            tier: Tier::Guest,
        };
        let olga = Acting {
            person: "olga",
            tier: Tier::Owner,
        };
        assert!(
            secrets
                .check(&ann, "anns", Some(("ann-bot", Some("ann"))))
                .is_ok()
        );
        assert!(secrets.check(&ann, "new-one", None).is_ok());
        let err = secrets.check(&ann, "bobs", None).unwrap_err().to_string();
        assert!(err.contains("was set by bob"), "{err}");
        let err = (secrets.check(&ann, "anns", Some(("bob-bot", Some("bob")))))
            .unwrap_err()
            .to_string();
        assert!(err.contains("actor `bob-bot` is bob's"), "{err}");
        let err = secrets
            .check(&gus, "new-one", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("guests may not"), "{err}");
        assert!(
            secrets
                .check(&olga, "bobs", Some(("x", Some("ann"))))
                .is_ok()
        );
        let names = |who: &Acting| -> Vec<String> {
            secrets
                .list_for(who)
                .unwrap()
                .into_iter()
                .map(|s| s.name)
                .collect()
        };
        assert_eq!(names(&ann), ["anns"]);
        assert_eq!(names(&olga), ["anns", "bobs"]);
        assert!(secrets.list_for(&gus).is_err());
    }

    #[test]
    fn wrong_input_says_what_to_write_and_never_shows_the_value() {
        let (_dir, world) = world();
        let secrets = Secrets::new(&world);
        let set =
            |name: &str, url: &str, header: Option<&str>, format: Option<&str>, value: &str| {
                let new = NewSecret {
                    name,
                    url,
                    header,
                    format,
                };
                secrets.set(&new, value, "ann").unwrap_err().to_string()
            };
        let fine = "https://x.example";
        for (got, wanted) in [
            (set("", fine, None, None, "v"), "cannot name a secret"),
            (set("a b", fine, None, None, "v"), "cannot name a secret"),
            (set("-a", fine, None, None, "v"), "cannot name a secret"),
            (
                set("a", "ftp://x", None, None, "v"),
                "must start with https://",
            ),
            (
                set("a", "x.example", None, None, "v"),
                "must start with https://",
            ),
            (
                set("a", "https://u:p@x.example", None, None, "v"),
                "user or password",
            ),
            (
                set("a", "https://x.example/?a=1", None, None, "v"),
                "query or fragment",
            ),
            (set("a", fine, Some("a b"), None, "v"), "not a header name"),
            (
                set("a", fine, Some("Host"), None, "v"),
                "the connection sets it",
            ),
            (
                set("a", fine, None, Some("Bearer"), "v"),
                "must hold `{}` once",
            ),
            (
                set("a", fine, None, Some("{} {}"), "v"),
                "must hold `{}` once",
            ),
            (set("a", fine, None, None, ""), "the value is empty"),
            (
                set("a", fine, None, None, "pl4nted\nx"),
                "a character a header cannot",
            ),
        ] {
            assert!(got.contains(wanted), "{got:?} should say {wanted:?}");
            assert!(!got.contains("pl4nted"), "{got}");
        }
        let a = ActorId::parse("a").unwrap();
        let unknown = secrets.grant("nope", &a, "ann").unwrap_err().to_string();
        assert!(
            unknown.contains("no secret `nope`; there are none yet"),
            "{unknown}"
        );
        assert!(!world.root().join("broker/secrets/secrets.json").exists());
    }
}
