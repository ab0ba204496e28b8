//! Who may use the web console: one-time login links, and the sessions they open.
//!
//! A link's token and a session's id are random (256 bits from the operating system) and kept
//! only as SHA-256 hashes. A link logs in once, during the run that printed it; a session lasts
//! [`SESSION_DAYS`] and survives restarts of the world (`broker/web/sessions.json`, outside every
//! mount), so a page open across a restart reconnects by itself.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How long a session lasts after its login.
pub const SESSION_DAYS: u64 = 30;

pub struct Sessions {
    /// `broker/web/sessions.json`.
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Hash of a login token → the person it logs in.
    links: HashMap<String, String>,
    /// Hash of a session id → the session.
    sessions: BTreeMap<String, Session>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Session {
    person: String,
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
    pub fn load(path: PathBuf) -> Sessions {
        let saved: Saved = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                eprintln!(
                    "sausage: {}: unreadable ({e}); everyone logs in again",
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
            state: Mutex::new(State {
                links: HashMap::new(),
                sessions,
            }),
        }
    }

    /// A new one-time login token for `person`.
    pub fn new_link(&self, person: &str) -> String {
        let token = random_token();
        self.lock().links.insert(hash(&token), person.to_string());
        token
    }

    /// Uses a login token: on success, the new session's id (for the cookie) and its person.
    /// A token works once.
    pub fn log_in(&self, token: &str) -> Option<(String, String)> {
        let mut state = self.lock();
        let person = state.links.remove(&hash(token))?;
        let id = random_token();
        state.sessions.insert(
            hash(&id),
            Session {
                person: person.clone(),
                created: now(),
            },
        );
        self.save(&state);
        Some((id, person))
    }

    /// The person a session id belongs to, while it lasts.
    pub fn person(&self, id: &str) -> Option<String> {
        let state = self.lock();
        let session = state.sessions.get(&hash(id))?;
        (now().saturating_sub(session.created) < SESSION_DAYS * 24 * 3600)
            .then(|| session.person.clone())
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
            eprintln!(
                "sausage: {}: cannot save the web sessions ({e}); they end with this run",
                self.path.display()
            );
        }
    }
}

/// 256 random bits from the operating system, as 64 hex digits.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("the operating system gives random bytes");
    hex(&bytes)
}

fn hash(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_logs_in_once_and_the_session_outlives_the_run_but_not_a_log_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web/sessions.json");
        let sessions = Sessions::load(path.clone());
        let token = sessions.new_link("owner");
        assert_eq!(token.len(), 64);
        let (id, person) = sessions.log_in(&token).expect("the link works");
        assert_eq!(person, "owner");
        assert!(sessions.log_in(&token).is_none(), "a link works once");
        assert!(sessions.log_in("not a token").is_none());
        assert_eq!(sessions.person(&id).as_deref(), Some("owner"));

        let saved = std::fs::read_to_string(&path).unwrap();
        assert!(
            !saved.contains(&id) && !saved.contains(&token),
            "only hashes on disk"
        );
        let next_run = Sessions::load(path.clone());
        assert_eq!(next_run.person(&id).as_deref(), Some("owner"));
        assert!(
            next_run.log_in(&token).is_none(),
            "links end with their run"
        );
        next_run.log_out(&id);
        assert!(next_run.person(&id).is_none());
        assert!(Sessions::load(path).person(&id).is_none());
    }

    #[test]
    fn an_expired_or_unreadable_session_file_lets_nobody_in() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.json");
        let old = now() - SESSION_DAYS * 24 * 3600 - 1;
        let id = "a".repeat(64);
        std::fs::write(
            &path,
            serde_json::json!({"sessions": {hash(&id): {"person": "owner", "created": old}}})
                .to_string(),
        )
        .unwrap();
        assert!(Sessions::load(path.clone()).person(&id).is_none());
        std::fs::write(&path, "{not json").unwrap();
        assert!(Sessions::load(path).person(&id).is_none());
    }
}
