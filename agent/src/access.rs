//! What a turn may make happen (DESIGN §13, tiers; §18, authority), decided in code before a
//! tool runs, never by the model's judgement. A turn acts for one [`Who`]: the person it answers
//! (in a room, the one who spoke) with their tier; in an actor's conversation the actor's owner
//! with the owner's tier, as the broker named them (a guest's rights when it named nobody).
//! A refusal is the tool's output, starting `refused: `, and nothing of the call has happened.
//!
//! | tier   | files                                   | messages                                   |
//! | ------ | --------------------------------------- | ------------------------------------------ |
//! | guest  | read                                    | only `list` to `broker`; nothing to actors, `cargo`, `scheduler` |
//! | member | read; write only `/data/work/<person>/` | builds; `spawn` (owned by them); changes to actors `list` says they own |
//! | owner  | everything                              | everything                                 |
//!
//! For every tier, reading or writing another conversation's files (`/data/people/<other>/`,
//! `/data/rooms/<room without them>/`, `/data/actors/`, the agent's own state files) is refused,
//! and so is searching, copying or removing a folder that holds them (such as `/data`); config
//! and spending are for owners. The `source` and `wasm` of a request to `broker` or `cargo` are
//! judged as reads of the whole folder, and must lie under `/data`, `/actor` or `/public`.
//! **Invariant:** a refused request never reaches its recipient; paths are judged after
//! normalising (`.`, `..`, `//`, trailing `/`).

use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};

use crate::config::McpServer;
use crate::conversations::{Conversation, Room};
use crate::message::{Incoming, Tier};

/// Who a turn acts for.
#[derive(Clone, Debug, PartialEq)]
pub struct Who {
    pub conversation: Conversation,
    /// The person the turn acts for (in a room: the speaker; in an actor's conversation: its
    /// owner); `None` when the turn acts for nobody.
    pub person: Option<String>,
    pub tier: Tier,
}

/// The host's own actor, which answers requests and reports undeliverable messages.
const BROKER: &str = "broker";

/// Native actors: the host's own, which no member may stop, upgrade or remove.
const NATIVE: &[&str] = &["broker", "console", "cargo", "web", "scheduler", "matrix"];

/// The broker requests that change one existing actor (its `actor` field): a member may send
/// them only for actors the registry says they own.
const OWNED_REQUESTS: &[&str] = &[
    "upgrade",
    "rollback",
    "stop",
    "start",
    "remove",
    "subscribe",
    "unsubscribe",
    "fork",
    "window",
];

/// The agent's files that hold every conversation's messages: no tool reads or writes them.
const STATE_FILES: &[&str] = &[
    "turn.json",
    "turn-unreadable.json",
    "inbox.json",
    "history.json",
    "history-unreadable.json",
    "surfaces.json",
    "subscriptions.json",
    "rate.json",
    "goals",
    "checkpoints",
];

/// The agent's files that only owners read: its configuration and the world's spending.
const OWNER_FILES: &[&str] = &["config.json", "spend.json"];

/// The folders of the agent's namespace a `source` or `wasm` may name: its data, the actors'
/// public files and sources, and the world's public files. Any other path would be resolved by
/// the host somewhere no turn may read, so it is refused before it is sent.
const SOURCE_ROOTS: &[&str] = &["/data", "/actor", "/public"];

/// What a `send_message` may do.
#[derive(Debug, PartialEq)]
pub enum Send {
    /// Send the body as the model gave it.
    Allow,
    /// Send this body instead: a `spawn` with the person as its `owner`.
    Rewritten(Value),
    /// Ask the broker's `list` first: a member may change `actor` only if they own it.
    IfOwned(String),
    Refuse(String),
}

impl Who {
    fn guest_refusal(&self, what: &str) -> String {
        format!(
            "refused: {} a guest in this world; only members and owners may {what}. Nothing was \
             done.",
            match &self.person {
                Some(person) => format!("you act for {person}, who is"),
                None => "this conversation is an actor's that acts for nobody, so it is".into(),
            }
        )
    }

    /// The folder a member may write in.
    fn work_dir(&self, data: &Path) -> Option<PathBuf> {
        Some(data.join("work").join(self.person.as_ref()?))
    }

    /// The MCP server and tool that a call of `name` (`mcp__<server>__<tool>`) runs, if the
    /// configuration lists that tool for this tier; otherwise why not, and nothing is sent.
    pub fn mcp_tool<'a>(
        &self,
        servers: &'a [McpServer],
        name: &str,
    ) -> Result<(&'a McpServer, &'a str), String> {
        let found = servers.iter().find_map(|server| {
            let tool = server
                .tools
                .keys()
                .find(|tool| server.tool_name(tool) == name)?;
            Some((server, tool.as_str()))
        });
        match found {
            Some((server, tool)) if server.allows(tool, self.tier) => Ok((server, tool)),
            Some(_) => Err(format!(
                "refused: {name} is not for {} (the owners did not allow it to this tier in \
                 mcp_servers); nothing was sent",
                self.tier.a()
            )),
            None => Err(format!(
                "error: there is no tool `{name}`: no server of mcp_servers in \
                 /data/config.json allows it"
            )),
        }
    }

    /// Whether a file tool may run with these arguments; the refusal otherwise.
    pub fn file_tool(&self, data: &Path, name: &str, arguments: &Value) -> Result<(), String> {
        // A missing path is left to the tool, which says so.
        let path = |key: &str| arguments[key].as_str().map(|p| normalise(Path::new(p)));
        let (read, write) = match name {
            "read_file" | "list_dir" => (path("path").map(|p| (p, false)), None),
            "search" | "find_files" => (path("path").map(|p| (p, true)), None),
            "write_file" | "edit_file" | "remove_path" => (None, path("path")),
            "copy_dir" => (path("from").map(|p| (p, true)), path("to")),
            _ => (None, None),
        };
        if let Some((path, tree)) = read {
            self.may_read(data, &path, tree)?;
        }
        match write {
            Some(path) => self.may_write(data, &path, name),
            None => Ok(()),
        }
    }

    /// `tree`: the path is read with everything below it (search, copy), so a folder that holds
    /// private ones is refused too.
    fn may_read(&self, data: &Path, path: &Path, tree: bool) -> Result<(), String> {
        if tree && holds_private(data, path) {
            return Err(format!(
                "refused: {} holds other conversations' files (/data/people, /data/rooms, \
                 /data/actors, the agent's state); search or copy a folder below it, such as \
                 /data/work",
                path.display()
            ));
        }
        self.may_touch(data, path)
    }

    fn may_write(&self, data: &Path, path: &Path, tool: &str) -> Result<(), String> {
        if self.tier != Tier::Guest && holds_private(data, path) {
            return Err(format!(
                "refused: {} holds other conversations' files (/data/people, /data/rooms, \
                 /data/actors, the agent's state); {tool} only below it, such as in /data/work. \
                 Nothing was done.",
                path.display()
            ));
        }
        match self.tier {
            Tier::Guest => Err(self.guest_refusal(&format!("write files ({tool})"))),
            Tier::Member => {
                let work = self.work_dir(data).expect("a member is a person");
                if path.starts_with(&work) {
                    self.may_touch(data, path)
                } else {
                    Err(format!(
                        "refused: a member writes only under {}/ (your own work folder); {} is \
                         outside it. Nothing was done.",
                        work.display(),
                        path.display()
                    ))
                }
            }
            Tier::Owner => self.may_touch(data, path),
        }
    }

    /// The privacy of conversations, for every tier.
    fn may_touch(&self, data: &Path, path: &Path) -> Result<(), String> {
        let Ok(inside) = path.strip_prefix(normalise(data)) else {
            return Ok(());
        };
        let parts: Vec<String> = inside
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let first = parts.first().map_or("", String::as_str);
        let second = parts.get(1).map(String::as_str);
        let refuse = |whose: String| {
            Err(format!(
                "refused: {} is {whose}; a conversation never reads or changes another's files. \
                 Nothing was done.",
                path.display()
            ))
        };
        match (first, second) {
            ("people", Some(person)) => {
                if self.conversation == Conversation::Person(person.into()) {
                    Ok(())
                } else {
                    refuse(format!("{person}'s private conversation and memory"))
                }
            }
            ("rooms", Some(room)) => {
                let inside = self.conversation == Conversation::Room(room.into())
                    || matches!(&self.conversation, Conversation::Person(p)
                        if Room::member_of(data, room, p).is_ok());
                if inside {
                    Ok(())
                } else {
                    refuse(format!(
                        "the history of room `{room}`, which this conversation is not in"
                    ))
                }
            }
            ("actors", Some(_)) => refuse("an actor's conversation with the agent".into()),
            (file, None) if STATE_FILES.contains(&file) => {
                refuse("the agent's own state, which holds everyone's messages".into())
            }
            ("goals", Some(_)) => {
                refuse("a goal of the agent's, which holds its person's messages".into())
            }
            (file, None) if OWNER_FILES.contains(&file) && self.tier != Tier::Owner => {
                Err(format!(
                    "refused: {} is for owners (the agent's configuration and spending). Nothing was \
                 done.",
                    path.display()
                ))
            }
            _ => Ok(()),
        }
    }

    /// Whether `send_message` may send `body` to `to`, and how.
    pub fn send(&self, data: &Path, to: &str, body: &Value) -> Send {
        // Paths a build or an install reads, judged like a read of the whole folder.
        for key in ["source", "wasm"] {
            if let Some(path) = body[key].as_str()
                && matches!(to, "broker" | "cargo")
                && let Err(refusal) = self.may_name_source(data, key, path)
            {
                return Send::Refuse(refusal);
            }
        }
        let kind = body["type"].as_str().unwrap_or_default();
        match (to, self.tier) {
            ("broker", _) if kind == "list" => Send::Allow,
            // A request a person decides later; the broker files it for the turn's person.
            ("broker", _) if matches!(kind, "request_secret" | "request_grant" | "approvals") => {
                Send::Allow
            }
            ("broker", _) if kind == "decide" => Send::Refuse(
                "refused: only a person decides what waits for approval (on the web page, at \
                 the console or in Matrix); tell them what waits and its id. Nothing was sent."
                    .into(),
            ),
            ("broker", Tier::Guest) => Send::Refuse(self.guest_refusal(&format!(
                "ask the broker for `{kind}` (a guest may send it only `list`)"
            ))),
            (_, Tier::Guest) => Send::Refuse(self.guest_refusal(&format!(
                "send messages to actors (here to {to}); a guest's turn only talks with its \
                 person and may ask the broker for `list`"
            ))),
            ("broker", Tier::Member) => self.member_request(kind, body),
            ("broker", Tier::Owner) if kind == "spawn" && body["owner"].is_null() => {
                match &self.person {
                    Some(person) => Send::Rewritten(with_owner(body, person)),
                    None => Send::Allow,
                }
            }
            _ => Send::Allow,
        }
    }

    /// Whether the `key` (`source` or `wasm`) of a request may name `path`: an absolute path
    /// under [`SOURCE_ROOTS`] that this turn may read with everything below it.
    fn may_name_source(&self, data: &Path, key: &str, path: &str) -> Result<(), String> {
        let normal = normalise(Path::new(path));
        let rooted = path.starts_with('/')
            && SOURCE_ROOTS
                .iter()
                .any(|root| normal.starts_with(Path::new(root)));
        if !rooted {
            return Err(format!(
                "refused: `{key}` is {path}, but it must be an absolute path under {}, which \
                 this turn may read (such as /data/work/<person>/<crate>). Nothing was sent.",
                SOURCE_ROOTS.join(", ")
            ));
        }
        self.may_read(data, &normal, true)
    }

    fn member_request(&self, kind: &str, body: &Value) -> Send {
        let person = self.person.as_deref().expect("a member is a person");
        if kind == "spawn" {
            return Send::Rewritten(with_owner(body, person));
        }
        if !OWNED_REQUESTS.contains(&kind) {
            return Send::Refuse(format!(
                "refused: a member may ask the broker for list, spawn and, for actors they own, \
                 {}; `{kind}` is for owners. Nothing was sent.",
                OWNED_REQUESTS.join(", ")
            ));
        }
        match body["actor"].as_str() {
            Some("agent") => Send::Refuse(
                "refused: only owners may change the agent itself. Nothing was sent.".into(),
            ),
            Some(actor) if NATIVE.contains(&actor) => Send::Refuse(format!(
                "refused: {actor} is a native actor of the host; members change only actors they \
                 own. Nothing was sent."
            )),
            Some(actor) => Send::IfOwned(actor.to_string()),
            None => Send::Refuse(format!(
                "error: `{kind}` needs `actor`, the id of the actor. Nothing was sent."
            )),
        }
    }

    /// After [`Send::IfOwned`]: whether the broker's `list` reply says the person owns `actor`.
    pub fn owns(&self, actor: &str, list: &Value) -> Result<(), String> {
        let person = self.person.as_deref().unwrap_or_default();
        let Some(entry) = list["actors"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["id"] == actor)
        else {
            return Err(format!(
                "refused: the broker's list has no actor `{actor}`, so it is not yours to \
                 change. Nothing was sent."
            ));
        };
        if entry["kind"] == "native" {
            return Err(format!(
                "refused: {actor} is a native actor of the host. Nothing was sent."
            ));
        }
        match entry["owner"].as_str() {
            Some(owner) if owner == person => Ok(()),
            owner => Err(format!(
                "refused: {actor} belongs to {}, not to {person}; a member changes only actors \
                 they own (spawn your own). Nothing was sent.",
                owner.unwrap_or("nobody recorded (an actor from before owners)")
            )),
        }
    }

    /// Notes (`/data/notes.md`) reach every conversation, so only members and owners add to them.
    pub fn may_note(&self) -> Result<(), String> {
        match self.tier {
            Tier::Guest => Err(self.guest_refusal("add notes, which every conversation reads")),
            _ => Ok(()),
        }
    }
}

impl Who {
    /// The prompt's section on who the turn acts for and what that allows.
    pub fn prompt_section(&self, data: &Path) -> String {
        let rights = match self.tier {
            Tier::Guest => {
                "a guest: you may talk and read; writing files, builds (cargo), messages to \
                 actors, the broker's requests other than list, goals and notes are refused by \
                 your tools"
            }
            Tier::Member => {
                "a member: you may also build with cargo, spawn actors (they are owned by this \
                 person), change (upgrade, rollback, stop, start, remove, subscribe) only actors \
                 the broker's list says this person owns, never the agent or native actors, and \
                 write files only under /data/work/<person>/"
            }
            Tier::Owner => "an owner: everything is allowed, changing the agent and rooms included",
        };
        let person = self.person.as_deref().unwrap_or("nobody");
        let words = match &self.conversation {
            Conversation::Person(_) => format!(
                "This turn acts for {person}, in {person}'s private conversation. {person} is \
                 {rights}."
            ),
            Conversation::Room(room) => {
                let members = Room::load(data, room).map_or_else(Vec::new, |r| r.members);
                format!(
                    "This turn is in the shared room `{room}` (members: {}); {person} spoke, and \
                     everything you write reaches every member. Act with {person}'s rights: \
                     {person} is {rights}. Nobody's memory or private conversation is shown \
                     here; keep them out of the room.",
                    members.join(", ")
                )
            }
            Conversation::Actor(actor) => match &self.person {
                Some(owner) => format!(
                    "This conversation is with the actor {actor}, which acts for its owner \
                     {owner}: you act with {owner}'s rights, and {owner} is {rights}. Its \
                     messages are the actor's, not {owner}'s own words; {owner}'s private \
                     conversation and memory stay out of it."
                ),
                None => format!(
                    "This conversation is with the actor {actor}, which acts for nobody, so you \
                     act as {rights}."
                ),
            },
            Conversation::Legacy => "This turn began before the agent knew people; it finishes \
                with an owner's rights."
                .to_string(),
        };
        format!("\n\n## Who you act for\n\n{words}\n")
    }
}

/// Whether `reply` to a question of `conversation` comes from one of its people (for an
/// actor's conversation, the actor): nobody else answers for them.
pub fn may_answer(data: &Path, conversation: &Conversation, reply: &Incoming) -> bool {
    match (conversation, &reply.person) {
        (Conversation::Legacy, _) => true,
        (Conversation::Person(person), Some(from)) => person == from,
        (Conversation::Room(room), Some(from)) => Room::member_of(data, room, from).is_ok(),
        (Conversation::Actor(actor), None) => *actor == reply.from,
        _ => false,
    }
}

/// Whether `reply` may end a wait for the reply to a message sent to `to`: only that actor
/// answers for itself, and the broker (the host) may answer for any message it could not
/// deliver or refused. Anyone else's message naming the same id is not the reply.
pub fn is_reply_of(to: &str, reply: &Incoming) -> bool {
    reply.from == to || reply.from == BROKER
}

/// Why an `answer` that no open question took is refused, in words its sender can act on.
/// `open`: the question waiting now (the id its answer names, and its conversation).
pub fn answer_refusal(open: Option<(&str, &Conversation)>, answer: &Incoming) -> String {
    let named = answer.reply_to.as_deref().unwrap_or_default();
    match open {
        _ if named.is_empty() => "refused: an answer names the question it answers in \
            `reply_to` (the question's id); this one names none, so it was not taken"
            .to_string(),
        Some((id, conversation)) if id == named => {
            let whose = match conversation {
                Conversation::Person(person) => format!("only {person} answers it"),
                Conversation::Room(room) => format!("only a member of room `{room}` answers it"),
                Conversation::Actor(actor) => format!("only actor {actor} answers it"),
                Conversation::Legacy => "it has its own asker".to_string(),
            };
            format!("refused: question {named} was not put to you; {whose}. Nothing changed.")
        }
        _ => format!(
            "refused: {named} is no open question of yours (it was answered, timed out or \
             never asked), so this answer was not taken; answer a question while it waits"
        ),
    }
}

/// Whether `stopper`, acting for `acting` (its person, or an actor's owner, with their tier),
/// may stop the turn `started` began in `conversation`: its person, a member of its room, an
/// owner, for an actor's turn that actor, and an actor for its owner what they may.
pub fn may_stop(
    data: &Path,
    stopper: &Incoming,
    acting: (Option<&str>, Tier),
    conversation: &Conversation,
    started: &Incoming,
) -> bool {
    match (acting.0, conversation) {
        _ if acting.1 == Tier::Owner => true,
        _ if stopper.person.is_none()
            && started.person.is_none()
            && started.from == stopper.from =>
        {
            true
        }
        (Some(person), Conversation::Room(room)) => Room::member_of(data, room, person).is_ok(),
        (Some(person), _) => started.person.as_deref() == Some(person),
        (None, _) => false,
    }
}

/// Whether `actor` is one of the host's own, which act for nobody by themselves.
pub fn is_native(actor: &str) -> bool {
    NATIVE.contains(&actor)
}

fn with_owner(body: &Value, person: &str) -> Value {
    let mut body = body.clone();
    body["owner"] = json!(person);
    body
}

/// Whether `path` is a folder that holds private areas of the data folder: the data folder
/// itself, `people/`, `rooms/`, `actors/`, `goals/`, or an ancestor of them such as `/`.
fn holds_private(data: &Path, path: &Path) -> bool {
    let data = normalise(data);
    ["people", "rooms", "actors", "goals"]
        .iter()
        .any(|area| data.join(area).starts_with(path))
}

/// `path` without `.`, `..` (which stops at the root), repeated or trailing `/`.
pub fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(conversation: Conversation, person: Option<&str>, tier: Tier) -> Who {
        Who {
            conversation,
            person: person.map(str::to_string),
            tier,
        }
    }

    fn ann(tier: Tier) -> Who {
        who(Conversation::Person("ann".into()), Some("ann"), tier)
    }

    #[test]
    fn paths_are_judged_after_normalising() {
        assert_eq!(
            normalise(Path::new("/data/work/ann/../../people//bob/")),
            Path::new("/data/people/bob")
        );
        assert_eq!(normalise(Path::new("/../data/./x")), Path::new("/data/x"));
    }

    #[test]
    fn no_tier_reads_another_persons_or_rooms_files() {
        let data = Path::new("/data");
        let read = |who: &Who, path: &str| who.file_tool(data, "read_file", &json!({"path": path}));
        for tier in [Tier::Guest, Tier::Member, Tier::Owner] {
            let ann = ann(tier);
            assert!(read(&ann, "/data/people/ann/memory.md").is_ok());
            assert!(read(&ann, "/data/actor/x").is_ok());
            for private in [
                "/data/people/bob/memory.md",
                "/data/work/ann/../../people/bob/history.json",
                "/data//people/bob/",
                "/data/rooms/team/history.json",
                "/data/actors/echo/history.json",
                "/data/turn.json",
                "/data/inbox.json",
                "/data/goals/g1.json",
            ] {
                let e = read(&ann, private).unwrap_err();
                assert!(e.starts_with("refused: "), "{private}: {e}");
            }
            let config = read(&ann, "/data/config.json");
            assert_eq!(config.is_ok(), tier == Tier::Owner, "{config:?}");
            let search = ann.file_tool(data, "search", &json!({"path": "/data/", "pattern": "x"}));
            assert!(search.unwrap_err().contains("holds other conversations"));
            assert!(
                ann.file_tool(data, "search", &json!({"path": "/actor/x"}))
                    .is_ok()
            );
        }
        // In a room, even the speaker's own private files stay out: the room would read them.
        let in_room = who(Conversation::Room("team".into()), Some("ann"), Tier::Owner);
        assert!(read(&in_room, "/data/people/ann/memory.md").is_err());
    }

    #[test]
    fn guests_write_nothing_and_members_only_in_their_work_folder() {
        let data = Path::new("/data");
        let write = |who: &Who, path: &str| {
            who.file_tool(data, "write_file", &json!({"path": path, "content": "x"}))
        };
        let e = write(&ann(Tier::Guest), "/data/work/ann/x").unwrap_err();
        assert!(
            e.starts_with("refused: you act for ann, who is a guest"),
            "{e}"
        );
        assert!(write(&ann(Tier::Member), "/data/work/ann/src/main.rs").is_ok());
        let e = write(&ann(Tier::Member), "/data/work/ann/../bob/x").unwrap_err();
        assert!(e.contains("writes only under /data/work/ann/"), "{e}");
        assert!(write(&ann(Tier::Owner), "/data/agent-next/src/main.rs").is_ok());
        assert!(write(&ann(Tier::Owner), "/data/people/bob/memory.md").is_err());
        for everything in ["/data", "/data/people", "/data/rooms/", "/"] {
            let remove = json!({"path": everything});
            let e = ann(Tier::Owner)
                .file_tool(data, "remove_path", &remove)
                .unwrap_err();
            assert!(e.contains("holds other conversations"), "{everything}: {e}");
            let copy = json!({"from": "/actor/x/source", "to": everything});
            assert!(ann(Tier::Owner).file_tool(data, "copy_dir", &copy).is_err());
        }
        let copy = json!({"from": "/actor/agent/source", "to": "/data/agent-next"});
        assert!(
            ann(Tier::Member)
                .file_tool(data, "copy_dir", &copy)
                .is_err()
        );
    }

    #[test]
    fn messages_by_tier() {
        let data = Path::new("/data");
        let spawn =
            json!({"type": "spawn", "actor": "x", "wasm": "/data/work/ann/x.wasm", "owner": "bob"});
        let guest = ann(Tier::Guest);
        assert_eq!(
            guest.send(data, "broker", &json!({"type": "list"})),
            Send::Allow
        );
        assert!(matches!(
            guest.send(data, "broker", &spawn),
            Send::Refuse(_)
        ));
        assert!(matches!(
            guest.send(data, "cargo", &json!({"type": "build"})),
            Send::Refuse(_)
        ));
        let Send::Refuse(refusal) = guest.send(data, "echo", &json!({"type": "hi"})) else {
            panic!("a guest's turn sends nothing to actors");
        };
        assert!(
            refusal.contains("messages to actors (here to echo)"),
            "{refusal}"
        );
        let member = ann(Tier::Member);
        let Send::Rewritten(body) = member.send(data, "broker", &spawn) else {
            panic!("a member's spawn is owned by them");
        };
        assert_eq!(body["owner"], "ann");
        let upgrade =
            |actor: &str| json!({"type": "upgrade", "actor": actor, "wasm": "/actor/c/x.wasm"});
        assert_eq!(
            member.send(data, "broker", &upgrade("notes")),
            Send::IfOwned("notes".into())
        );
        assert!(matches!(
            member.send(data, "broker", &upgrade("agent")),
            Send::Refuse(_)
        ));
        assert!(matches!(
            member.send(data, "broker", &upgrade("cargo")),
            Send::Refuse(_)
        ));
        let from_bobs = json!({"type": "build", "source": "/data/people/bob"});
        assert!(matches!(
            member.send(data, "cargo", &from_bobs),
            Send::Refuse(_)
        ));
        let list = json!({"actors": [{"id": "notes", "kind": "wasm", "owner": "ann"},
            {"id": "echo", "kind": "wasm", "owner": "bob"}]});
        assert!(member.owns("notes", &list).is_ok());
        assert!(
            member
                .owns("echo", &list)
                .unwrap_err()
                .contains("belongs to bob")
        );
        assert!(member.owns("ghost", &list).is_err());
    }

    #[test]
    fn a_source_or_wasm_is_a_path_the_turns_person_may_read() {
        let data = Path::new("/data");
        let spawn = |key: &str, path: &str| json!({"type": "spawn", "actor": "x", key: path});
        let build = |path: &str| json!({"type": "build", "source": path});
        let (member, owner) = (ann(Tier::Member), ann(Tier::Owner));
        for (who, to, body) in [
            (&member, "broker", spawn("source", "/data/people/bob")),
            (
                &member,
                "broker",
                spawn("source", "/data/work/../people/bob/"),
            ),
            (&member, "broker", spawn("source", "/data/config.json")),
            (&owner, "broker", spawn("source", "/data/turn.json")),
            (
                &owner,
                "broker",
                spawn("wasm", "/data/actors/echo/history.json"),
            ),
            (&owner, "broker", spawn("source", "/data")),
            (
                &owner,
                "broker",
                spawn("source", "/world/broker/credentials"),
            ),
            (&owner, "broker", spawn("source", "broker/credentials")),
            (&owner, "cargo", build("/etc")),
            (&member, "cargo", build("/data/people/bob/crate")),
        ] {
            let Send::Refuse(refusal) = who.send(data, to, &body) else {
                panic!("{body} to {to} is refused");
            };
            assert!(refusal.starts_with("refused: "), "{refusal}");
        }
        let own = spawn("source", "/data/work/ann/crate");
        assert!(matches!(
            member.send(data, "broker", &own),
            Send::Rewritten(_)
        ));
        assert_eq!(
            member.send(data, "cargo", &build("/data/work/ann/crate")),
            Send::Allow
        );
        let rooted = owner.send(data, "broker", &spawn("source", "/etc/passwd"));
        let Send::Refuse(refusal) = rooted else {
            panic!("a host path is refused");
        };
        assert!(
            refusal.contains("under /data, /actor, /public"),
            "{refusal}"
        );
    }
}
