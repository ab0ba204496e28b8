//! The web console's sessions: what a login link opens, and who each one is.
//!
//! A link's token and a session's id are random (256 bits from the operating system) and kept
//! only as SHA-256 hashes. A link (in `people.json`) logs in once; a session lasts
//! [`SESSION_DAYS`] and survives restarts of the world (`broker/web/sessions.json`, outside every
//! mount), so a page open across a restart reconnects by itself. A session is only as good as
//! its person: once they are removed from `people.json`, it lets nobody in.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{People, Person};

/// How long a session lasts after its login.
pub const SESSION_DAYS: u64 = 30;

pub struct Sessions {
    /// `broker/web/sessions.json`.
    path: PathBuf,
    people: People,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Hash of a session id → the session.
    sessions: BTreeMap<String, Session>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Session {
    person: String,
    /// The person's [`Person::key`] at login.
    #[serde(default)]
    key: String,
    /// Seconds since the Unix epoch.
    created: u64,
}

#[derive(Default, Serialize, Deserialize)]
struct Saved {
    sessions: BTreeMap<String, Session>,
}

impl Sessions {
    /// The sessions saved at `path` that have not expired; none when the file is missing or
    /// unreadable (everyone logs in again; the problem is reported).
    pub fn load(path: PathBuf, people: People) -> Sessions {
        let saved: Saved = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(
                    "{}: unreadable ({e}); everyone logs in again",
                    path.display()
                );
                Saved::default()
            }),
            Err(_) => Saved::default(),
        };
        let now = now();
        let sessions = saved
            .sessions
            .into_iter()
            .filter(|(_, s)| now.saturating_sub(s.created) < SESSION_DAYS * 24 * 3600)
            .collect();
        Sessions {
            path,
            people,
            state: Mutex::new(State { sessions }),
        }
    }

    pub fn people(&self) -> &People {
        &self.people
    }

    /// Uses a login token: on success, the new session's id (for the cookie) and its person.
    /// A token works once; an unreadable `people.json` lets nobody in (and is reported).
    pub fn log_in(&self, token: &str) -> Option<(String, Person)> {
        let person = self.people.use_link(token).unwrap_or_else(|e| {
            tracing::error!("{e:#}");
            None
        })?;
        let mut state = self.lock();
        let id = random_token();
        state.sessions.insert(
            hash(&id),
            Session {
                person: person.id.clone(),
                key: person.key.clone(),
                created: now(),
            },
        );
        self.save(&state);
        Some((id, person))
    }

    /// The person a session id belongs to, as `people.json` says now: `None` once the session
    /// expired or the person was removed (the session is then forgotten).
    pub fn person(&self, id: &str) -> Option<Person> {
        let key = hash(id);
        let (who, person_key) = {
            let state = self.lock();
            let session = state.sessions.get(&key)?;
            if now().saturating_sub(session.created) >= SESSION_DAYS * 24 * 3600 {
                return None;
            }
            (session.person.clone(), session.key.clone())
        };
        match self.people.get(&who) {
            Ok(Some(person)) if person.key == person_key => Some(person),
            Ok(_) => {
                let mut state = self.lock();
                state.sessions.remove(&key);
                self.save(&state);
                None
            }
            Err(e) => {
                tracing::error!("{e:#}");
                None
            }
        }
    }

    /// The person of session `id` among `people` (the people file as just read), touching no
    /// file: `None` once the session expired or ended, or its person was removed (or re-added).
    /// Checks many pages against one read of the people.
    pub fn person_among(&self, id: &str, people: &[Person]) -> Option<Person> {
        let state = self.lock();
        let session = state.sessions.get(&hash(id))?;
        if now().saturating_sub(session.created) >= SESSION_DAYS * 24 * 3600 {
            return None;
        }
        people
            .iter()
            .find(|p| p.id == session.person && p.key == session.key)
            .cloned()
    }

    /// Ends a session.
    pub fn log_out(&self, id: &str) {
        let mut state = self.lock();
        if state.sessions.remove(&hash(id)).is_some() {
            self.save(&state);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the sessions (hashes only). A failure is reported: those sessions then end with
    /// the run.
    fn save(&self, state: &State) {
        let saved = Saved {
            sessions: state.sessions.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&saved).expect("sessions serialise");
        let written = std::fs::create_dir_all(self.path.parent().expect("in broker/web"))
            .and_then(|()| crate::fs::write_atomically(&self.path, &bytes));
        if let Err(e) = written {
            tracing::warn!(
                "{}: cannot save the web sessions ({e}); they end with this run",
                self.path.display()
            );
        }
    }
}

/// 256 random bits from the operating system, as 64 hex digits.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("the operating system gives random bytes");
    hex(&bytes)
}

pub(crate) fn hash(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::people::Tier;
    use crate::world::World;

    fn world() -> (tempfile::TempDir, People) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("broker/web")).unwrap();
        let people = People::new(&World::new(dir.path()));
        people.create("boss").unwrap();
        (dir, people)
    }

    #[test]
    fn a_link_logs_in_once_and_the_session_outlives_the_run_but_not_a_log_out() {
        let (dir, people) = world();
        let path = dir.path().join("broker/web/sessions.json");
        let sessions = Sessions::load(path.clone(), people.clone());
        let token = people.new_link("boss").unwrap();
        assert_eq!(token.len(), 64);
        let (id, person) = sessions.log_in(&token).expect("the link works");
        assert_eq!(person.id, "boss");
        assert!(sessions.log_in(&token).is_none(), "a link works once");
        assert!(sessions.log_in("not a token").is_none());
        assert_eq!(sessions.person(&id).unwrap().id, "boss");

        let saved = std::fs::read_to_string(&path).unwrap();
        assert!(
            !saved.contains(&id) && !saved.contains(&token),
            "only hashes on disk"
        );
        let next_run = Sessions::load(path.clone(), people.clone());
        assert_eq!(next_run.person(&id).unwrap().id, "boss");
        next_run.log_out(&id);
        assert!(next_run.person(&id).is_none());
        assert!(Sessions::load(path, people).person(&id).is_none());
    }

    #[test]
    fn removing_a_person_ends_their_sessions_and_a_tier_change_shows_at_once() {
        let (dir, people) = world();
        let sessions = Sessions::load(dir.path().join("broker/web/sessions.json"), people.clone());
        let token = people.add("ann", Tier::Guest, None).unwrap();
        let (id, _) = sessions.log_in(&token).unwrap();
        people.set_tier("ann", Tier::Member).unwrap();
        assert_eq!(sessions.person(&id).unwrap().tier, Tier::Member);
        let (again, _) = sessions.log_in(&people.new_link("ann").unwrap()).unwrap();
        let list = people.list().unwrap();
        assert_eq!(
            sessions.person_among(&id, &list).unwrap().tier,
            Tier::Member
        );
        people.remove("ann").unwrap();
        let list = people.list().unwrap();
        assert!(sessions.person_among(&id, &list).is_none());
        assert!(sessions.person(&id).is_none());
        people.add("ann", Tier::Guest, None).unwrap();
        assert!(
            sessions.person(&again).is_none(),
            "a new ann is not let in by the old session"
        );
    }

    #[test]
    fn an_expired_or_unreadable_session_file_lets_nobody_in() {
        let (dir, people) = world();
        let path = dir.path().join("sessions.json");
        let old = now() - SESSION_DAYS * 24 * 3600 - 1;
        let id = "a".repeat(64);
        std::fs::write(
            &path,
            serde_json::json!({"sessions": {hash(&id): {"person": "boss", "created": old}}})
                .to_string(),
        )
        .unwrap();
        assert!(
            Sessions::load(path.clone(), people.clone())
                .person(&id)
                .is_none()
        );
        std::fs::write(&path, "{not json").unwrap();
        assert!(Sessions::load(path, people).person(&id).is_none());
    }
}
