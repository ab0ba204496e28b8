//! What the bridge keeps in `/data/state.json` across restarts: the `/sync` token, the rooms
//! and their members, the turns and questions it is waiting on (so a reply after a restart
//! still finds its Matrix room and event), and the users already told they are unknown.
//! Rooms are keyed by their full Matrix id (`!abc:server`), never by a shortened form.
//! **Invariant:** the file is replaced whole (a new file, synced, renamed over the old), so a
//! crash leaves the old state or the new one, never a mix.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The version of the file's layout this bridge writes. Version 0 (no `version`) kept one
/// `members` set of everyone joined or invited; [`State::upgrade`] moves it to `present`, so nobody
/// becomes a member of a room's conversation by having been in the room then, except the one
/// person of a direct room.
pub const STATE_VERSION: u32 = 1;

/// How many finished turns are remembered, so a copy of a turn's message that comes late (a
/// shared room's members each get one) is recognised and not shown twice.
pub const FINISHED_TURNS_KEPT: usize = 256;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct State {
    /// The layout's version ([`STATE_VERSION`]).
    pub version: u32,
    /// `next_batch` of the last `/sync` whose events were all handed on.
    pub since: Option<String>,
    /// The next own message id (`t<n>`).
    pub next_id: u64,
    /// Joined rooms by their full Matrix room id.
    pub rooms: BTreeMap<String, Room>,
    /// Turns started here, by the world id of the text that started them (`matrix/t<n>`).
    pub turns: BTreeMap<String, Turn>,
    /// Open questions of the agent, by the question message's world id.
    pub questions: BTreeMap<String, Question>,
    /// Matrix users who were told, once, that this world does not know them.
    pub told_unknown: BTreeSet<String>,
    /// The last turns that ended, oldest first (at most [`FINISHED_TURNS_KEPT`]).
    pub finished: VecDeque<String>,
    /// Invites being checked: the world id of the check sent to ourselves → the room.
    pub invites: BTreeMap<String, String>,
    /// … and who invited, so a restart can ask again.
    pub inviters: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Room {
    /// Everyone joined or invited, the bot excluded: who sees what is said in the room.
    pub present: BTreeSet<String>,
    /// The members of the room's conversation with the agent: the person whose invite the bot
    /// took, the users a member invited (once they joined), the ones an owner named. Joining on
    /// one's own or speaking makes nobody a member; leaving ends it.
    pub members: BTreeSet<String>,
    /// Invitations a member made that are not taken yet: the invitee → the member.
    pub invited: BTreeMap<String, String>,
    /// Users present but no members who were told so, once.
    pub told_not_member: BTreeSet<String>,
}

impl Room {
    /// The one person in a direct room: present alone, and a member. A room with anyone else
    /// present is shared, whoever speaks.
    pub fn direct_with(&self) -> Option<&str> {
        let mut present = self.present.iter();
        match (present.next(), present.next()) {
            (Some(only), None) if self.members.contains(only) => Some(only),
            _ => None,
        }
    }
}

/// A turn the agent is working on for a Matrix message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Turn {
    pub room: String,
    /// The Matrix event that asked: answers reply to it.
    pub event: String,
    pub sender: String,
    /// Whether the turn is the sender's private conversation (a direct room): what it shows
    /// goes to the room only while the sender is still alone there with the bot.
    pub private: bool,
    /// Set once someone else came into a private turn's room: the rest of the turn is not
    /// shown there (one notice says so).
    pub withheld: bool,
    /// The one status message edited as tools run (its event id), once sent.
    pub status_event: Option<String>,
    /// The plan card's items as `[x] text` lines, and the latest tool line.
    pub plan: Vec<String>,
    pub tool_line: String,
    /// How many tool calls finished.
    pub tools_done: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Question {
    pub room: String,
    pub sender: String,
    pub choices: Vec<String>,
    /// The turn that asked.
    pub turn: String,
}

impl State {
    pub fn path(data: &Path) -> PathBuf {
        data.join("state.json")
    }

    /// The saved state; a fresh one when there is none. An unreadable file is moved aside
    /// (`state-unreadable.json`) with a note, so the actor starts rather than crash-looping.
    pub fn load(data: &Path) -> State {
        let path = State::path(data);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(_) => return State::default(),
        };
        match serde_json::from_slice(&bytes) {
            Ok(state) => state,
            Err(e) => {
                eprintln!(
                    "matrix: {}: {e}; starting afresh, the old file is state-unreadable.json",
                    path.display()
                );
                let _ = std::fs::rename(&path, data.join("state-unreadable.json"));
                State::default()
            }
        }
    }

    /// Brings a state of an older layout to this one (`bot` is the bridge's own Matrix id).
    /// Version 0's `members` were everyone joined or invited, the bot included: they become
    /// `present`, and only a direct room's one person stays a member.
    pub fn upgrade(&mut self, bot: &str) {
        if self.version < 1 {
            for room in self.rooms.values_mut() {
                room.present = std::mem::take(&mut room.members);
                room.present.remove(bot);
                if room.present.len() == 1 {
                    room.members = room.present.clone();
                }
            }
        }
        self.version = STATE_VERSION;
    }

    /// Writes the state: a new file, synced, renamed into place.
    pub fn save(&self, data: &Path) -> Result<(), String> {
        let path = State::path(data);
        let new = data.join("state.json.new");
        // A map of strings and numbers always serialises.
        let bytes = serde_json::to_vec(self).expect("the state serialises");
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::File::create(&new)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            drop(file);
            std::fs::rename(&new, &path)
        };
        write().map_err(|e| format!("{}: {e}", path.display()))
    }

    /// A new own id for a line, `t<n>`.
    pub fn new_id(&mut self) -> String {
        self.next_id += 1;
        format!("t{}", self.next_id)
    }

    /// Ends a turn: it is forgotten, and remembered as finished.
    pub fn finish(&mut self, turn: &str) {
        self.turns.remove(turn);
        if !self.finished.iter().any(|t| t == turn) {
            self.finished.push_back(turn.to_string());
            while self.finished.len() > FINISHED_TURNS_KEPT {
                self.finished.pop_front();
            }
        }
    }
}
