//! Conversations (DESIGN §13): which conversation a message belongs to, and where each lives.
//! `/data/people/<id>/` holds a person's private `history.json` and `memory.md`;
//! `/data/rooms/<id>/` a shared room's `room.json` (its members) and `history.json`;
//! `/data/actors/<id>/` the history of an actor's messages (they speak for no person). Also
//! `/data/surfaces.json`, the actor each person last spoke from, `/data/subscriptions.json`,
//! the conversation that subscribed to each publisher, and the one-time move of the single
//! `/data/history.json` of an agent from before people.
//! **Invariant:** nothing here reads one conversation's files for another: a request built for a
//! conversation gets only its own history and, in a person's own conversation, their memory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::message::{Incoming, Tier, valid_id};

/// The most members of a room: every reply of a room's turn goes to each of them.
pub const MAX_ROOM_MEMBERS: usize = 50;

/// The longest memory file: it is part of every request of its person's conversation, so it must
/// stay a page, not a diary. At the limit, `remember` asks to forget something first.
pub const MAX_MEMORY_BYTES: usize = 16 * 1024;

/// The longest one remembered fact: a line of memory, not a document; longer ones are refused
/// with a request to keep it short.
pub const MAX_FACT_BYTES: usize = 1024;

/// The surface a person who never spoke to the agent is reached on.
pub const DEFAULT_SURFACE: &str = "web";

/// Actors that send for people but are no place a person reads: a schedule that fires for ann
/// does not make the scheduler her surface.
const NOT_SURFACES: &[&str] = &["scheduler"];

/// Whether a person's message from `from` came from a place the person reads.
pub fn is_surface(from: &str) -> bool {
    !NOT_SURFACES.contains(&from)
}

/// One conversation with its own history (saved in turns as `{"person":"ann"}`, `{"room":…}`,
/// `{"actor":…}`, or `"legacy"`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Conversation {
    /// A person's private conversation.
    Person(String),
    /// A shared room: one history that every member sees and speaks in.
    Room(String),
    /// The messages of an actor, which act for its owner with the owner's rights (DESIGN §18).
    Actor(String),
    /// The one conversation of an agent from before people (`/data/history.json`): only a turn
    /// that such an agent saved finishes in it, before the first owner's message moves it.
    #[default]
    Legacy,
}

impl Conversation {
    /// The folder of its files; the data folder itself for the legacy one.
    pub fn dir(&self, data: &Path) -> PathBuf {
        match self {
            Conversation::Person(id) => data.join("people").join(id),
            Conversation::Room(id) => data.join("rooms").join(id),
            Conversation::Actor(id) => data.join("actors").join(id),
            Conversation::Legacy => data.to_path_buf(),
        }
    }

    pub fn history(&self, data: &Path) -> PathBuf {
        self.dir(data).join("history.json")
    }

    /// The prefix of the ids of messages the agent sends for this conversation (`person.ann`),
    /// so a late reply finds its conversation again; ids cannot contain `.`.
    pub fn tag(&self) -> String {
        match self {
            Conversation::Person(id) => format!("person.{id}"),
            Conversation::Room(id) => format!("room.{id}"),
            Conversation::Actor(id) => format!("actor.{id}"),
            Conversation::Legacy => "legacy".into(),
        }
    }

    /// The conversation of an id made with [`Conversation::tag`] (`person.ann.t3`).
    fn of_sent_id(id: &str) -> Option<Conversation> {
        let mut parts = id.split('.');
        let (kind, name, _n) = (parts.next()?, parts.next()?, parts.next()?);
        let name = name.to_string();
        match kind {
            "person" => Some(Conversation::Person(name)),
            "room" => Some(Conversation::Room(name)),
            "actor" => Some(Conversation::Actor(name)),
            _ => None,
        }
    }

    pub fn room(&self) -> Option<&str> {
        match self {
            Conversation::Room(id) => Some(id),
            _ => None,
        }
    }

    /// The conversation a message that starts no turn belongs to (a reply, a notice): the one
    /// whose message it answers, else the person's own, else its actor's.
    pub fn of_note(message: &Incoming, actor: &str) -> Conversation {
        let answered = message
            .reply_to
            .as_deref()
            .and_then(|r| r.strip_prefix(actor)?.strip_prefix('/'))
            .and_then(Conversation::of_sent_id);
        // An agent from before people named its messages `t<n>` and `q<n>`, without a tag.
        let untagged = message
            .reply_to
            .as_deref()
            .and_then(|r| r.strip_prefix(actor)?.strip_prefix('/'))
            .is_some_and(|id| !id.contains('.'));
        match (answered, &message.person) {
            (Some(conversation), _) => conversation,
            (None, Some(person)) => Conversation::Person(person.clone()),
            (None, None) if untagged => Conversation::Legacy,
            (None, None) => Conversation::Actor(message.from.clone()),
        }
    }

    /// The conversation a text speaks in: a room when its body names one (only for a member),
    /// else the person's own, else its actor's. The error is the refusal, in words.
    pub fn of_text(message: &Incoming, data: &Path) -> Result<Conversation, String> {
        let room = match &message.body["room"] {
            Value::Null => None,
            Value::String(room) => Some(room.as_str()),
            other => return Err(format!("`room` must be a room's id, not {other}")),
        };
        match (room, &message.person) {
            (None, Some(person)) => Ok(Conversation::Person(person.clone())),
            (None, None) => Ok(Conversation::Actor(message.from.clone())),
            (Some(_), None) => {
                Err("only people speak in rooms; this message speaks for none".into())
            }
            (Some(room), Some(person)) => {
                Room::speak_from_surface(data, room, &message.from, person)?;
                Room::member_of(data, room, person).map(|()| Conversation::Room(room.to_string()))
            }
        }
    }
}

/// A shared room, as `rooms/<id>/room.json` keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Room {
    pub room: String,
    pub members: Vec<String>,
    /// The surface actor whose own room this is (`matrix` for `matrix-…`): made by the first
    /// person who spoke in it there, joined by each next one. `None` for an owner's room,
    /// whose members only an owner changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface: Option<String>,
}

impl Room {
    pub fn load(data: &Path, id: &str) -> Option<Room> {
        if !valid_id(id) {
            return None;
        }
        let bytes =
            std::fs::read(Conversation::Room(id.into()).dir(data).join("room.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// A surface's own room (its id starts with the surface's actor id and `-`, such as
    /// `matrix-abc` for a Matrix group room): a person speaking there from that surface joins
    /// it, and the first makes it. The surface decides who is in its room (Matrix's own
    /// members, whose invites came from people of the world), and everything said there is seen
    /// by them on it anyway. Any other room, or a text from elsewhere, is left as it is.
    pub fn speak_from_surface(
        data: &Path,
        room: &str,
        from: &str,
        person: &str,
    ) -> Result<(), String> {
        let own = room
            .strip_prefix(from)
            .is_some_and(|rest| rest.starts_with('-'));
        if !own || !valid_id(room) {
            return Ok(());
        }
        let mut kept = match Room::load(data, room) {
            Some(kept) if kept.surface.as_deref() != Some(from) => return Ok(()),
            Some(kept) => kept,
            None => Room {
                room: room.to_string(),
                members: Vec::new(),
                surface: Some(from.to_string()),
            },
        };
        if kept.members.iter().any(|m| m == person) {
            return Ok(());
        }
        if kept.members.len() >= MAX_ROOM_MEMBERS {
            return Err(format!(
                "room `{room}` has its {MAX_ROOM_MEMBERS} members already"
            ));
        }
        kept.members.push(person.to_string());
        eprintln!("agent: {person} joins {from}'s room {room}");
        kept.save(data)
    }

    /// Whether `person` may speak in (and read) `room`; the error says why not.
    pub fn member_of(data: &Path, room: &str, person: &str) -> Result<(), String> {
        match Room::load(data, room) {
            None => Err(format!(
                "there is no room `{room}`; an owner creates one with {{\"type\":\"room\",\"room\":\"{room}\",\"members\":[…]}}"
            )),
            Some(r) if r.members.iter().any(|m| m == person) => Ok(()),
            // Who is in a room is the room's business: a non-member is not told.
            Some(_) => Err(format!(
                "{person} is not a member of room `{room}`; an owner can add them with \
                 {{\"type\":\"room\",\"room\":\"{room}\",\"members\":[…]}}"
            )),
        }
    }

    /// A `room` request's fields, checked; the error says what would be right.
    pub fn parse(body: &Value) -> Result<Room, String> {
        let room = match body["room"].as_str() {
            Some(room) if valid_id(room) => room.to_string(),
            _ => {
                return Err(format!(
                    "`room` is {}; a room's id follows the rules of actor ids (a-z, 0-9, -, _; \
                     1 to 64 characters), such as \"team\"",
                    body["room"]
                ));
            }
        };
        let Some(given) = body["members"].as_array().filter(|m| !m.is_empty()) else {
            return Err(format!(
                "`members` is {}; give the ids of the people in the room, such as [\"ann\",\"bob\"]",
                body["members"]
            ));
        };
        if given.len() > MAX_ROOM_MEMBERS {
            return Err(format!(
                "a room has at most {MAX_ROOM_MEMBERS} members, not {}",
                given.len()
            ));
        }
        let mut members: Vec<String> = Vec::new();
        for member in given {
            match member.as_str() {
                Some(id) if !valid_id(id) || members.iter().any(|m| m == id) => {
                    return Err(format!(
                        "member `{id}` is {}; members are people's ids (a-z, 0-9, -, _; 1 to 64 \
                         characters), each once",
                        if valid_id(id) {
                            "named twice"
                        } else {
                            "not a person's id"
                        }
                    ));
                }
                Some(id) => members.push(id.to_string()),
                None => return Err(format!("member {member} is not a person's id (a string)")),
            }
        }
        Ok(Room {
            room,
            members,
            surface: None,
        })
    }

    pub fn save(&self, data: &Path) -> Result<(), String> {
        let dir = Conversation::Room(self.room.clone()).dir(data);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join("room.json");
        // Two strings and a list of strings always serialise.
        let text = serde_json::to_string_pretty(self).expect("a room serialises");
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The actor each person last spoke from (`/data/surfaces.json`): where a room's messages reach
/// the members who did not speak.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Surfaces(BTreeMap<String, String>);

impl Surfaces {
    pub fn load(data: &Path) -> Surfaces {
        std::fs::read(data.join("surfaces.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    pub fn of(&self, person: &str) -> &str {
        self.0.get(person).map_or(DEFAULT_SURFACE, String::as_str)
    }

    /// Notes where `message`'s person spoke from; writes the file only when that changed.
    pub fn heard(&mut self, data: &Path, message: &Incoming) -> Result<(), String> {
        let Some(person) = &message.person else {
            return Ok(());
        };
        let from = message.from.as_str();
        if self.0.get(person).map(String::as_str) == Some(from)
            || from.is_empty()
            || NOT_SURFACES.contains(&from)
        {
            return Ok(());
        }
        self.0.insert(person.clone(), message.from.clone());
        let path = data.join("surfaces.json");
        // A map of strings always serialises.
        let text = serde_json::to_string_pretty(self).expect("surfaces serialise");
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// Which conversation subscribed the agent to each publisher (`/data/subscriptions.json`):
/// what a publisher publishes belongs to the conversation that asked for it.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Subscriptions(BTreeMap<String, Conversation>);

impl Subscriptions {
    pub fn load(data: &Path) -> Subscriptions {
        std::fs::read(data.join("subscriptions.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    pub fn of(&self, publisher: &str) -> Option<&Conversation> {
        self.0.get(publisher)
    }

    /// After a `subscribe` (`Some`, the asking conversation) or an `unsubscribe` (`None`).
    pub fn set(
        &mut self,
        data: &Path,
        publisher: &str,
        conversation: Option<Conversation>,
    ) -> Result<(), String> {
        match conversation {
            Some(conversation) => self.0.insert(publisher.to_string(), conversation),
            None => self.0.remove(publisher),
        };
        let path = data.join("subscriptions.json");
        // Ids and conversations always serialise.
        let text = serde_json::to_string_pretty(self).expect("subscriptions serialise");
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// Moves the single history of an agent from before people to `person`'s conversation, once:
/// when it exists and the person has none yet. One rename, so it is whole in one place or the
/// other. Returns whether it moved.
pub fn adopt_legacy(data: &Path, person: &str) -> Result<bool, String> {
    let legacy = Conversation::Legacy.history(data);
    let target = Conversation::Person(person.into()).history(data);
    if !legacy.exists() || target.exists() {
        return Ok(false);
    }
    let dir = Conversation::Person(person.into()).dir(data);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::rename(&legacy, &target).map_err(|e| format!("{}: {e}", legacy.display()))?;
    eprintln!("agent: the conversation from before people is now {person}'s");
    Ok(true)
}

/// `{"type":"room","room","members"}` from an owner creates or changes a shared room; the answer
/// is `room_created` (`room`, `members`, and `unheard`: members who never spoke to the agent) or
/// an `error` whose reason says what would be right.
/// `tier` is the asker's: a person's own, or an actor's owner's (DESIGN §18).
pub fn room_request(data: &Path, message: &Incoming, tier: Tier) -> Value {
    let error = |reason: String| json!({"type": "error", "request": "room", "reason": reason});
    if tier != Tier::Owner {
        return error(match &message.person {
            Some(person) => format!(
                "refused: only owners create or change rooms, and {person} is {}",
                tier.a()
            ),
            None => format!(
                "refused: only owners create or change rooms, and actor {} does not act for one",
                message.from
            ),
        });
    }
    match Room::parse(&message.body).and_then(|room| room.save(data).map(|()| room)) {
        Ok(room) => {
            eprintln!("agent: room {} has {}", room.room, room.members.join(", "));
            let mut body =
                json!({"type": "room_created", "room": room.room, "members": room.members});
            // The agent cannot see the world's people; it says whom it has never heard from, as
            // a hint at a misspelt id, and reaches them on the default surface.
            let surfaces = Surfaces::load(data);
            let unheard: Vec<&String> = room
                .members
                .iter()
                .filter(|m| !surfaces.0.contains_key(*m) && message.person.as_ref() != Some(m))
                .collect();
            if !unheard.is_empty() {
                body["unheard"] = json!(unheard);
            }
            body
        }
        Err(reason) => error(reason),
    }
}

/// `{"type":"rooms"}`: the rooms the asking person is a member of, answered `rooms` with
/// `[{"room","members"}]` sorted by id, so a surface can offer them. Owners see only their own
/// rooms too: who talks where is each room's business.
pub fn rooms_request(data: &Path, message: &Incoming) -> Value {
    let Some(person) = &message.person else {
        return json!({"type": "error", "request": "rooms",
            "reason": "rooms have people as members, and this message speaks for none"});
    };
    let dir = data.join("rooms");
    let mut rooms: Vec<Room> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| Room::load(data, entry.file_name().to_str()?))
        .filter(|room| room.members.iter().any(|m| m == person))
        .collect();
    rooms.sort_by(|a, b| a.room.cmp(&b.room));
    json!({"type": "rooms", "rooms": rooms})
}

/// `{"type":"memory"}` (answered `memory` with `text`) and `{"type":"forget"}` (answered
/// `forgotten`): what the agent remembers about the asking person, for surfaces to show and
/// clear.
pub fn memory_request(data: &Path, message: &Incoming) -> Value {
    let kind = message.kind();
    match (&message.person, kind) {
        (None, _) => json!({"type": "error", "request": kind,
            "reason": "memory is kept for people, and this message speaks for none"}),
        (Some(person), "memory") => json!({"type": "memory", "text": memory(data, person)}),
        (Some(person), _) => {
            let words = forget(data, person, None);
            if words.starts_with("error") {
                json!({"type": "error", "request": "forget", "reason": words})
            } else {
                json!({"type": "forgotten"})
            }
        }
    }
}

fn memory_path(data: &Path, person: &str) -> PathBuf {
    Conversation::Person(person.into())
        .dir(data)
        .join("memory.md")
}

/// What the agent remembers about `person`, as the file keeps it (empty when nothing).
pub fn memory(data: &Path, person: &str) -> String {
    std::fs::read_to_string(memory_path(data, person)).unwrap_or_default()
}

/// `remember`: one fact appended as a line to the person's memory.
pub fn remember(data: &Path, person: &str, text: &str) -> String {
    let text = text.trim();
    if text.is_empty() {
        return "error: `text` must be the fact or preference to remember, in words".into();
    }
    if text.len() > MAX_FACT_BYTES {
        return format!("error: one fact is at most {MAX_FACT_BYTES} bytes; keep it short");
    }
    let mut kept = memory(data, person);
    let line = format!("- {}\n", text.replace('\n', " "));
    if kept.len() + line.len() > MAX_MEMORY_BYTES {
        return format!(
            "error: {person}'s memory is full ({MAX_MEMORY_BYTES} bytes); forget facts that no \
             longer matter first (forget with their text)"
        );
    }
    kept.push_str(&line);
    let path = memory_path(data, person);
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&path, &kept));
    match written {
        Ok(()) => format!(
            "remembered for {person} ({} facts in all)",
            kept.lines().count()
        ),
        Err(e) => format!("error: {}: {e}", path.display()),
    }
}

/// `forget`: the lines of the person's memory that contain `text` (ignoring case), or all of it
/// without `text`.
pub fn forget(data: &Path, person: &str, text: Option<&str>) -> String {
    let path = memory_path(data, person);
    let kept = memory(data, person);
    let (left, gone): (Vec<&str>, Vec<&str>) = match text.map(str::trim).filter(|t| !t.is_empty()) {
        None => (Vec::new(), kept.lines().collect()),
        Some(text) => {
            let text = text.to_lowercase();
            kept.lines()
                .partition(|line| !line.to_lowercase().contains(&text))
        }
    };
    if gone.is_empty() {
        return match text {
            Some(text) => {
                format!("no remembered fact of {person} contains `{text}`; nothing was forgotten")
            }
            None => format!("nothing is remembered about {person}"),
        };
    }
    let result = if left.is_empty() {
        std::fs::remove_file(&path)
    } else {
        std::fs::write(&path, left.join("\n") + "\n")
    };
    match result {
        Ok(()) => format!(
            "forgot {} fact(s) of {person}; {} left",
            gone.len(),
            left.len()
        ),
        Err(e) => format!("error: {}: {e}", path.display()),
    }
}

/// The prompt's section with what is remembered about `person`; empty without memory.
pub fn memory_section(data: &Path, person: &str) -> String {
    let kept = memory(data, person);
    if kept.trim().is_empty() {
        return String::new();
    }
    format!(
        "\n\n## What you remember about {person}\n\nWhat {person} asked you to remember or told \
         you as lasting facts (with `remember`, kept in /data/people/{person}/memory.md; only \
         {person}'s own conversation shows it):\n\n{kept}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(reply_to: Option<&str>, person: Option<&str>) -> Incoming {
        Incoming {
            id: "m-1".into(),
            from: "echo".into(),
            reply_to: reply_to.map(str::to_string),
            person: person.map(str::to_string),
            body: json!({"type": "echo"}),
            ..Incoming::default()
        }
    }

    #[test]
    fn a_note_belongs_to_the_conversation_whose_message_it_answers() {
        let of = |r, p| Conversation::of_note(&note(r, p), "agent");
        assert_eq!(
            of(Some("agent/person.ann.t3"), None),
            Conversation::Person("ann".into())
        );
        assert_eq!(
            of(Some("agent/room.team.q1"), Some("bob")),
            Conversation::Room("team".into())
        );
        assert_eq!(
            of(Some("agent/t3"), Some("bob")),
            Conversation::Person("bob".into())
        );
        assert_eq!(of(Some("agent/t3"), None), Conversation::Legacy);
        assert_eq!(
            of(Some("other/person.ann.t3"), None),
            Conversation::Actor("echo".into())
        );
        assert_eq!(of(None, None), Conversation::Actor("echo".into()));
    }

    #[test]
    fn a_person_id_that_could_name_another_folder_is_no_person() {
        for bad in ["../bob", "a/b", "", "Ann"] {
            let line =
                json!({"id": "m-1", "from": "web", "person": bad, "tier": "owner", "body": {}});
            let message: Incoming = serde_json::from_value(line).unwrap();
            assert_eq!(message.person, None, "{bad}");
            assert_eq!(message.tier(), Tier::Guest);
        }
        let line =
            json!({"id": "m-1", "from": "web", "person": "ann", "tier": "member", "body": {}});
        let message: Incoming = serde_json::from_value(line).unwrap();
        assert_eq!(
            (message.person.as_deref(), message.tier()),
            (Some("ann"), Tier::Member)
        );
    }

    #[test]
    fn room_requests_are_checked_and_say_what_would_be_right() {
        let room = Room::parse(&json!({"room": "team", "members": ["ann", "bob"]})).unwrap();
        assert_eq!(room.members, ["ann", "bob"]);
        for (body, says) in [
            (
                json!({"room": "Team!", "members": ["ann"]}),
                "rules of actor ids",
            ),
            (json!({"members": ["ann"]}), "`room` is null"),
            (json!({"room": "team", "members": []}), "give the ids"),
            (
                json!({"room": "team", "members": ["Ann"]}),
                "not a person's id",
            ),
            (
                json!({"room": "team", "members": ["ann", "ann"]}),
                "named twice",
            ),
            (json!({"room": "team", "members": [3]}), "(a string)"),
            (
                json!({"room": "team", "members": (0..=MAX_ROOM_MEMBERS).map(|n| format!("p{n}")).collect::<Vec<_>>()}),
                "at most 50 members",
            ),
        ] {
            let e = Room::parse(&body).unwrap_err();
            assert!(e.contains(says), "{body}: {e}");
        }
    }

    #[test]
    fn a_surfaces_own_room_is_made_and_joined_by_who_speaks_there_and_no_other_room_is() {
        let data = crate::testing::temp_dir("surface-rooms");
        Room::speak_from_surface(&data, "matrix-abc", "matrix", "ann").unwrap();
        Room::speak_from_surface(&data, "matrix-abc", "matrix", "bob").unwrap();
        Room::speak_from_surface(&data, "matrix-abc", "matrix", "ann").unwrap();
        let made = Room::load(&data, "matrix-abc").unwrap();
        assert_eq!(made.members, ["ann", "bob"]);
        assert_eq!(made.surface.as_deref(), Some("matrix"));
        // From another surface, or a room of another name, nothing changes.
        Room::speak_from_surface(&data, "matrix-abc", "web", "eve").unwrap();
        Room::speak_from_surface(&data, "kitchen", "matrix", "eve").unwrap();
        Room::speak_from_surface(&data, "matrixabc", "matrix", "eve").unwrap();
        assert_eq!(
            Room::load(&data, "matrix-abc").unwrap().members,
            ["ann", "bob"]
        );
        assert!(Room::load(&data, "kitchen").is_none() && Room::load(&data, "matrixabc").is_none());
        // An owner's room keeps the members the owner gave, whatever its name.
        let owners = Room {
            room: "matrix-own".into(),
            members: vec!["ann".into()],
            surface: None,
        };
        owners.save(&data).unwrap();
        Room::speak_from_surface(&data, "matrix-own", "matrix", "eve").unwrap();
        assert_eq!(Room::load(&data, "matrix-own").unwrap().members, ["ann"]);
        assert!(Room::member_of(&data, "matrix-own", "eve").is_err());
    }

    #[test]
    fn a_person_is_told_the_rooms_they_are_in_and_no_others() {
        let data = crate::testing::temp_dir("rooms");
        for (room, members) in [
            ("team", vec!["ann", "bob"]),
            ("attic", vec!["bob"]),
            ("b", vec!["ann"]),
        ] {
            let members = members.into_iter().map(String::from).collect();
            Room {
                room: room.into(),
                members,
                surface: None,
            }
            .save(&data)
            .unwrap();
        }
        let asked = |person: Option<&str>| {
            let message = Incoming {
                body: json!({"type": "rooms"}),
                ..note(None, person)
            };
            rooms_request(&data, &message)
        };
        let ann = asked(Some("ann"));
        let names: Vec<&str> = ann["rooms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["room"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["b", "team"]);
        assert_eq!(ann["rooms"][1]["members"], json!(["ann", "bob"]));
        assert_eq!(asked(Some("eve"))["rooms"], json!([]));
        assert_eq!(asked(None)["type"], "error");
    }

    #[test]
    fn memory_is_remembered_per_person_and_forgotten_by_text_or_whole() {
        let data = crate::testing::temp_dir("memory");
        assert!(remember(&data, "ann", "  ").starts_with("error"));
        assert!(remember(&data, "ann", "likes tea").starts_with("remembered"));
        assert!(remember(&data, "ann", "lives in Oslo").contains("2 facts"));
        assert_eq!(memory(&data, "bob"), "");
        assert!(memory_section(&data, "ann").contains("- likes tea\n- lives in Oslo\n"));
        assert!(forget(&data, "ann", Some("TEA")).starts_with("forgot 1"));
        assert_eq!(memory(&data, "ann"), "- lives in Oslo\n");
        assert!(forget(&data, "ann", Some("coffee")).contains("nothing was forgotten"));
        assert!(forget(&data, "ann", None).starts_with("forgot 1"));
        assert_eq!(memory_section(&data, "ann"), "");
    }
}
