//! The bridge between the homeserver and the world: the `/sync` loop and what each Matrix event
//! becomes (a text or an answer for the agent, spoken `as` its Matrix user), and what each of
//! the agent's messages about a turn becomes in Matrix (typing, one edited status line, a
//! question as a numbered list, the final answer as a reply with its cost).
//! **Invariant:** the `since` token is saved only after every event of its batch was handed on
//! (written on stdout), and every send to a room has a transaction id derived from the world
//! message or Matrix event it comes from, so neither a crash nor a retry loses or doubles one.
//! **Invariant:** only a member of a room's conversation (see [`Room::members`]) reaches the
//! agent from that room, and a private conversation is shown only in a room where its person
//! is alone with the bot; rooms are known by their full id, and the agent's name for a shared
//! one is a hash of it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::host::{Event, Host, Incoming, Outgoing, Request, Response};
use crate::markdown;
use crate::state::{Question, Room, State, Turn};
use sha2::{Digest, Sha256};

/// How long the homeserver holds a `/sync` open when nothing happens (`timeout`, in ms).
pub const SYNC_TIMEOUT_MS: u64 = 30_000;

/// What the `/sync` asks for: messages and memberships, nothing else (no presence, receipts,
/// typing or account data), so a quiet room costs nothing.
const SYNC_FILTER: &str = r#"{"presence":{"not_types":["*"]},"account_data":{"not_types":["*"]},"room":{"timeline":{"types":["m.room.message","m.room.member"],"limit":50},"state":{"types":["m.room.member"]},"ephemeral":{"not_types":["*"]},"account_data":{"not_types":["*"]}}}"#;

/// How long the room shows the bot typing after one notification; it is renewed every
/// [`TYPING_RENEW`] while a turn runs, so it never lapses mid-turn and ends soon after a crash.
const TYPING_TIMEOUT_MS: u64 = 30_000;
const TYPING_RENEW: Duration = Duration::from_secs(20);

/// A Matrix event is at most 64 KiB whole (the homeserver refuses more with 413): an answer is
/// sent in parts of at most [`MAX_ANSWER_PART`] bytes of text, and a part whose content (text
/// and HTML) still passes [`MAX_CONTENT_BYTES`] goes without its HTML.
const MAX_ANSWER_PART: usize = 24 * 1024;
const MAX_CONTENT_BYTES: usize = 60 * 1024;

/// The status line is edited at most this often, so a turn of many quick tool calls costs a
/// few edits, not two messages a call (which the homeserver's rate limit would refuse).
const STATUS_INTERVAL: Duration = Duration::from_secs(2);

/// A call is tried at most this many times when it fails (5xx, 401, no answer; a 429 is waited
/// out and not counted), so a homeserver that stays down delays the bridge a few minutes per
/// message at most, then the message is given up with a note in the log.
const MAX_ATTEMPTS: u32 = 8;

/// The longest wait a 429's `retry_after_ms` is trusted for; a longer one is waited this long
/// and tried again (and answered with another 429 if it still holds).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Backoff after a failure: 0.5 s × 2ⁿ, at most [`MAX_BACKOFF`] (also between failed `/sync`s,
/// which are retried forever: nothing is lost while the homeserver is away).
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The one notice a Matrix user this world does not know gets.
const UNKNOWN_NOTICE: &str = "Hello! I am this world's assistant, but the world does not know \
     you yet, so I cannot answer. Ask the world's owner to add you \
     (`sausage people add ID --matrix YOUR_MATRIX_ID`); until then I will stay quiet.";

/// The one notice a user who is in a room but no member of its conversation gets there; what
/// they say is handed to nobody.
const NOT_MEMBER_NOTICE: &str = "Hello! In this room I answer only the members of its \
     conversation: the person who invited me, the people a member invited, and the ones the \
     world's owner named. You are in the room without such an invitation, so I will stay quiet \
     for you here. Talk to me in a direct room, or ask the world's owner to add you.";

/// Shown instead of a private conversation's answer, question or progress when the room it was
/// asked in no longer holds its person alone with the bot: what the agent said stays in the
/// person's conversation (the web console shows it).
const NO_LONGER_PRIVATE_NOTICE: &str = "This room is no longer private (someone else is in \
     it), so the rest of my answer stays in your private conversation: read it on the web \
     console, or ask me again in a direct room.";

/// How many hexadecimal digits of the room id's SHA-256 name a shared room for the agent
/// (128 bits: no two Matrix rooms share a name, even rooms made to). With the actor's id and a
/// `-` in front it must fit an actor id's 64 characters, so the actor's id may have at most
/// [`MAX_ACTOR_ID_FOR_ROOMS`] of them; a longer one is refused at the start with that advice.
const ROOM_KEY_HEX: usize = 32;
const MAX_ACTOR_ID_FOR_ROOMS: usize = 64 - 1 - ROOM_KEY_HEX;

/// The most members an owner may name for one room's conversation (the agent's own limit of a
/// room's members): a longer list is refused whole, and the members stay as they were.
pub const MAX_NAMED_MEMBERS: usize = 50;

/// `/data/config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The homeserver's base URL, without a trailing `/`.
    pub homeserver: String,
    /// The bot's own Matrix id (`@sausage:server`).
    pub user_id: String,
    /// The actor that texts and answers go to.
    pub agent: String,
    /// This actor's own id (`SAUSAGE_ACTOR`, default `matrix`): an invite is checked by a
    /// message to itself.
    pub me: String,
}

impl Config {
    /// The configuration, for the actor named by `SAUSAGE_ACTOR` (default `matrix`).
    pub fn parse(bytes: &[u8]) -> Result<Config, String> {
        let me = std::env::var("SAUSAGE_ACTOR")
            .ok()
            .filter(|me| !me.is_empty())
            .unwrap_or_else(|| "matrix".into());
        Config::parse_for(bytes, me)
    }

    /// The configuration of the actor `me`.
    pub fn parse_for(bytes: &[u8], me: String) -> Result<Config, String> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let field = |name: &str| match value[name].as_str() {
            Some(text) if !text.is_empty() => Ok(text.to_string()),
            _ => Err(format!("`{name}` is missing (a string)")),
        };
        if me.len() > MAX_ACTOR_ID_FOR_ROOMS {
            return Err(format!(
                "the actor's id `{me}` is longer than {MAX_ACTOR_ID_FOR_ROOMS} characters, too \
                 long to name its shared rooms for the agent; spawn the bridge under a shorter id"
            ));
        }
        Ok(Config {
            homeserver: field("homeserver")?.trim_end_matches('/').to_string(),
            user_id: field("user_id")?,
            agent: field("agent").unwrap_or_else(|_| "agent".into()),
            me,
        })
    }
}

pub struct Bridge<H: Host> {
    host: H,
    data: PathBuf,
    config: Config,
    state: State,
    /// When typing was last turned on in each room, to renew it; in memory only.
    typing: BTreeMap<String, Duration>,
    /// Failed `/sync`s in a row, for the backoff.
    sync_failures: u32,
    /// When each turn's status line was last sent or edited, and the changes not shown yet
    /// (the world message whose change an edit will show, its transaction id); in memory only:
    /// after a restart the final answer's edit shows the last state.
    status_sent: BTreeMap<String, Duration>,
    status_waiting: BTreeMap<String, String>,
    /// `/approvals`, `/approve` and `/deny` sent to the broker: request id → the room that
    /// gets the answer; in memory only.
    decisions: BTreeMap<String, String>,
}

/// How one `/sync` answer went.
#[derive(Debug, PartialEq)]
enum Synced {
    /// Every event was handed on and the token saved.
    Done,
    /// Rate limited: wait this long, then poll again.
    Limited(Duration),
    /// Failed in words; back off and poll again.
    Failed(String),
}

impl<H: Host> Bridge<H> {
    pub fn new(host: H, data: PathBuf, config: Config) -> Bridge<H> {
        let mut state = State::load(&data);
        state.upgrade(&config.user_id);
        Bridge {
            host,
            data,
            config,
            state,
            typing: BTreeMap::new(),
            sync_failures: 0,
            status_sent: BTreeMap::new(),
            status_waiting: BTreeMap::new(),
            decisions: BTreeMap::new(),
        }
    }

    #[cfg(test)]
    pub fn host(&self) -> &H {
        &self.host
    }

    /// Serves until a shutdown: one `/sync` always in flight, messages handled as they come.
    pub fn run(&mut self) {
        self.recheck_invites();
        let mut syncing = false;
        loop {
            if !syncing {
                self.host.start_sync(self.sync_request());
                syncing = true;
            }
            // Waits for: a message from the world, the `/sync`'s answer, or the moment a
            // typing renewal or a held-back status edit is due (then `TimedOut`).
            match self.host.next(self.wake_in()) {
                Event::Message(message) => self.on_message(message),
                Event::Synced(answer) => {
                    syncing = false;
                    let pause = match self.on_sync(answer) {
                        Synced::Done => {
                            self.sync_failures = 0;
                            Duration::ZERO
                        }
                        Synced::Limited(wait) => wait,
                        Synced::Failed(why) => {
                            self.sync_failures += 1;
                            let wait = backoff(self.sync_failures);
                            eprintln!("matrix: /sync: {why}; trying again in {wait:?}");
                            wait
                        }
                    };
                    if !pause.is_zero() && !self.host.pause(pause) {
                        break;
                    }
                }
                Event::TimedOut => {}
                Event::Stop => break,
            }
            self.show_waiting_statuses();
            self.renew_typing();
        }
        self.stop();
    }

    /// A clean stop: the rooms stop showing the bot typing, the state is saved. A `/sync` in
    /// flight is abandoned; its events come again at the next start (the token did not move).
    fn stop(&mut self) {
        let rooms: Vec<String> = self.typing.keys().cloned().collect();
        for room in rooms {
            // One try each: the world is stopping, and the typing ends by itself anyway.
            let _ = self.host.call(&self.typing_request(&room, false));
        }
        self.save();
        eprintln!("matrix: stopped");
    }

    fn url(&self, path: &str) -> String {
        format!("{}/_matrix/client/v3{path}", self.config.homeserver)
    }

    fn sync_request(&self) -> Request {
        let mut url = self.url(&format!("/sync?filter={}", encode(SYNC_FILTER)));
        match &self.state.since {
            Some(since) => url.push_str(&format!(
                "&timeout={SYNC_TIMEOUT_MS}&since={}",
                encode(since)
            )),
            // The first sync only learns the rooms; it does not wait.
            None => url.push_str("&timeout=0"),
        }
        Request {
            method: "GET",
            url,
            body: None,
        }
    }

    fn save(&mut self) {
        if let Err(e) = self.state.save(&self.data) {
            eprintln!("matrix: saving the state: {e}");
        }
    }

    // ---- From Matrix to the world ----

    /// One `/sync` answer: invites joined, members learnt, messages handed on in order, then
    /// the new token saved, then typing shown for the turns that started.
    fn on_sync(&mut self, answer: Result<Response, String>) -> Synced {
        let response = match answer {
            Ok(response) => response,
            Err(why) => return Synced::Failed(why),
        };
        if response.status == 429 {
            return Synced::Limited(retry_after(&response));
        }
        if !(200..300).contains(&response.status) {
            return Synced::Failed(describe(&response));
        }
        let sync = response.json();
        let Some(next_batch) = sync["next_batch"].as_str() else {
            return Synced::Failed("the answer has no next_batch".into());
        };
        // The first sync of a new bridge (no token yet) learns rooms and members but hands on
        // no old message: it would answer history.
        let first = self.state.since.is_none();
        let mut started = Vec::new();
        for (room, invite) in sync["rooms"]["invite"].as_object().into_iter().flatten() {
            self.check_invite(room, invite);
        }
        for (room_id, room) in sync["rooms"]["join"].as_object().into_iter().flatten() {
            let bot = self.config.user_id.as_str();
            let known = self.state.rooms.entry(room_id.clone()).or_default();
            for event in room["state"]["events"].as_array().into_iter().flatten() {
                learn_member(known, event, bot);
            }
            let timeline = room["timeline"]["events"].as_array().map_or(&[][..], |e| e);
            // Messages from before the bot was invited (or joined, when the batch shows no
            // invite) are the room's history, not questions for it.
            let arrived = |membership: &str| {
                timeline.iter().rposition(|e| {
                    e["type"] == "m.room.member"
                        && e["state_key"] == self.config.user_id.as_str()
                        && e["content"]["membership"] == membership
                })
            };
            let history = arrived("invite").or_else(|| arrived("join")).unwrap_or(0);
            for (n, event) in timeline.iter().enumerate() {
                match event["type"].as_str() {
                    Some("m.room.member") => {
                        if let Some(room) = self.state.rooms.get_mut(room_id) {
                            learn_member(room, event, &self.config.user_id);
                        }
                    }
                    Some("m.room.message") if !first && n >= history => {
                        if let Some(turn) = self.on_matrix_message(room_id, event) {
                            started.push(turn);
                        }
                    }
                    _ => {}
                }
            }
        }
        for (room, _) in sync["rooms"]["leave"].as_object().into_iter().flatten() {
            self.state.rooms.remove(room);
        }
        self.state.since = Some(next_batch.to_string());
        self.save();
        for room in started {
            self.start_typing(&room);
        }
        Synced::Done
    }

    /// An invite is taken only from a person of this world (DESIGN §17). Who that is, the host
    /// knows: a message to itself written `as` the inviter arrives when they are a person, and
    /// comes back `undeliverable` when not. The check is kept in the state, so a restart asks
    /// again rather than forgetting the invite.
    fn check_invite(&mut self, room: &str, invite: &Value) {
        if self.state.invites.values().any(|r| r == room) {
            return;
        }
        let inviter = invite["invite_state"]["events"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| {
                e["type"] == "m.room.member"
                    && e["state_key"] == self.config.user_id.as_str()
                    && e["content"]["membership"] == "invite"
            })
            .and_then(|e| e["sender"].as_str());
        let Some(inviter) = inviter else {
            eprintln!("matrix: an invite to {room} names no inviter; declined");
            return self.leave(room);
        };
        let id = self.state.new_id();
        let world_id = format!("{}/{id}", self.config.me);
        self.state
            .invites
            .insert(world_id.clone(), room.to_string());
        self.state.inviters.insert(world_id, inviter.to_string());
        self.save();
        self.send_invite_check(&id, inviter, room);
    }

    fn send_invite_check(&mut self, id: &str, inviter: &str, room: &str) {
        self.host.send(&Outgoing {
            to: Some(self.config.me.clone()),
            speaks_as: Some(inviter.to_string()),
            id: Some(id.to_string()),
            reply_to: None,
            body: json!({"type": "invited", "room": room, "by": inviter}),
        });
    }

    /// Asks again about the invites a restart left unchecked.
    fn recheck_invites(&mut self) {
        let pending: Vec<(String, String)> = self
            .state
            .invites
            .iter()
            .map(|(id, room)| (id.clone(), room.clone()))
            .collect();
        for (world_id, room) in pending {
            let own = world_id.rsplit('/').next().unwrap_or_default().to_string();
            let inviter = self.state.inviters.get(&world_id).cloned();
            match inviter {
                Some(inviter) => self.send_invite_check(&own, &inviter, &room),
                None => {
                    self.state.invites.remove(&world_id);
                }
            }
        }
    }

    /// Joins `room` at the invitation of `inviter`, a person of this world checked just now:
    /// they are the room conversation's first member.
    fn join(&mut self, room: &str, inviter: &str) {
        let request = Request {
            method: "POST",
            url: self.url(&format!("/join/{}", encode(room))),
            body: Some(json!({})),
        };
        match self.call(&request) {
            Ok(_) => {
                eprintln!("matrix: joined {room}, invited by {inviter}");
                let known = self.state.rooms.entry(room.to_string()).or_default();
                if !inviter.is_empty() {
                    known.present.insert(inviter.to_string());
                    known.members.insert(inviter.to_string());
                }
            }
            Err(why) => eprintln!("matrix: joining {room}: {why}"),
        }
    }

    /// A message in a joined room: from a member of the room's conversation, an answer to the
    /// sender's open question there or a text that starts a turn; from anyone else, nothing
    /// but one notice. Returns the room to show typing in when a turn started.
    fn on_matrix_message(&mut self, room: &str, event: &Value) -> Option<String> {
        let sender = event["sender"].as_str()?;
        let content = &event["content"];
        // Notices are what bots say (this one too): answering them could loop.
        let said = matches!(content["msgtype"].as_str(), Some("m.text" | "m.emote"));
        let edit = content["m.relates_to"]["rel_type"] == "m.replace";
        if sender == self.config.user_id || !said || edit {
            return None;
        }
        let text = without_reply_fallback(content)?;
        let known = self.state.rooms.get(room)?;
        if !known.members.contains(sender) {
            self.tell_not_member(room, sender, event["event_id"].as_str().unwrap_or_default());
            return None;
        }
        let private = known.direct_with() == Some(sender);
        if let Some(request) = approval_command(&text) {
            // Decided by the broker for the person who typed it; a secret's value is never
            // taken here (the broker refuses one), only approve or deny.
            let id = self.state.new_id();
            self.decisions
                .insert(format!("matrix/{id}"), room.to_string());
            self.host.send(&Outgoing {
                to: Some("broker".into()),
                speaks_as: Some(sender.to_string()),
                id: Some(id),
                reply_to: None,
                body: request,
            });
            return Some(room.to_string());
        }
        let asked = self
            .state
            .questions
            .iter()
            .find(|(_, q)| q.room == room && q.sender == sender)
            .map(|(id, _)| id.clone());
        if let Some(question_id) = asked {
            // Just found above.
            let question = self.state.questions.remove(&question_id).expect("found");
            let answer = choice(&question.choices, &text);
            let id = self.state.new_id();
            self.host.send(&Outgoing {
                to: Some(self.config.agent.clone()),
                speaks_as: Some(sender.to_string()),
                id: Some(id),
                reply_to: Some(question_id),
                body: json!({"type": "answer", "text": answer}),
            });
            return Some(room.to_string());
        }
        let mut body = json!({"type": "text", "text": text});
        if !private {
            body["room"] = json!(self.room_key(room));
        }
        let id = self.state.new_id();
        self.host.send(&Outgoing {
            to: Some(self.config.agent.clone()),
            speaks_as: Some(sender.to_string()),
            id: Some(id.clone()),
            reply_to: None,
            body,
        });
        let turn = Turn {
            room: room.to_string(),
            event: event["event_id"].as_str().unwrap_or_default().to_string(),
            sender: sender.to_string(),
            private,
            ..Turn::default()
        };
        self.state.turns.insert(format!("matrix/{id}"), turn);
        Some(room.to_string())
    }

    /// The agent's name for the shared room `room` (a full Matrix room id).
    fn room_key(&self, room: &str) -> String {
        room_key(&self.config.me, room)
    }

    /// Tells `sender`, once per room, that they are no member of its conversation.
    fn tell_not_member(&mut self, room: &str, sender: &str, event: &str) {
        let Some(known) = self.state.rooms.get_mut(room) else {
            return;
        };
        eprintln!("matrix: {sender} spoke in {room} but is no member of its conversation");
        if known.told_not_member.insert(sender.to_string()) {
            self.notice(room, &format!("not-member.{event}"), NOT_MEMBER_NOTICE);
        }
    }

    /// Whether everyone in `room` but the bot is a user told they are unknown.
    fn nobody_known_in(&self, room: &str) -> bool {
        self.state.rooms.get(room).is_some_and(|r| {
            r.present
                .iter()
                .all(|m| self.state.told_unknown.contains(m))
        })
    }

    // ---- From the world to Matrix ----

    fn on_message(&mut self, message: Incoming) {
        if message.from == "broker" && message.kind() == "undeliverable" {
            self.on_undeliverable(&message);
        } else if let Some(room) = (message.from == "broker")
            .then(|| {
                message
                    .reply_to
                    .as_ref()
                    .and_then(|id| self.decisions.remove(id))
            })
            .flatten()
        {
            let text = decision_words(&message.body);
            self.notice(&room, &format!("decided.{}", message.id), &text);
        } else if message.from == self.config.me && message.kind() == "invited" {
            // Our own check came through: the inviter is a person of this world.
            if let Some(room) = self.state.invites.remove(&message.id) {
                let inviter = self.state.inviters.remove(&message.id).unwrap_or_default();
                self.join(&room, &inviter);
                self.save();
            }
        } else if message.from == self.config.agent {
            self.on_agent(&message);
        } else if matches!(message.kind(), "members" | "rooms") {
            let answer = self.owners_request(&message);
            self.host.send(&Outgoing {
                to: Some(message.from.clone()),
                speaks_as: None,
                id: None,
                reply_to: Some(message.id.clone()),
                body: answer,
            });
        } else {
            eprintln!(
                "matrix: ignoring a {:?} message from {}",
                message.kind(),
                message.from
            );
        }
    }

    /// An owner's request about rooms: `{"type":"rooms"}` lists the rooms (full id, the
    /// agent's name, who is present, who is a member); `{"type":"members","room","members"}`
    /// makes exactly those Matrix users the members of a room's conversation. The answer is the
    /// room(s), or an `error` that says why and changes nothing.
    fn owners_request(&mut self, message: &Incoming) -> Value {
        let kind = message.kind().to_string();
        let error = |reason: String| json!({"type": "error", "request": kind, "reason": reason});
        if message.tier.as_deref() != Some("owner") {
            let who = match (&message.person, &message.tier) {
                (Some(person), Some(tier)) => format!("{person} is a {tier}"),
                _ => format!("{} speaks for no person", message.from),
            };
            return error(format!(
                "refused: only the world's owners see and set who is in a room's conversation, \
                 and {who}"
            ));
        }
        if kind == "rooms" {
            let rooms: Vec<Value> = self
                .state
                .rooms
                .iter()
                .map(|(id, room)| self.describe_room(id, room))
                .collect();
            return json!({"type": "rooms", "rooms": rooms});
        }
        let members = match self.named_members(&message.body) {
            Ok(members) => members,
            Err(reason) => return error(reason),
        };
        let room_id = message.body["room"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let Some(room) = self.state.rooms.get_mut(&room_id) else {
            return error(format!(
                "`room` is {}; give the full id of a room the bridge is in (`!abc:server`, as \
                 {{\"type\":\"rooms\"}} lists them)",
                message.body["room"]
            ));
        };
        room.members = members;
        for member in &room.members {
            room.invited.remove(member);
            room.told_not_member.remove(member);
        }
        let room = room.clone();
        eprintln!(
            "matrix: {} set the members of {room_id}: {:?}",
            message.person.as_deref().unwrap_or_default(),
            room.members
        );
        self.save();
        let mut answer = self.describe_room(&room_id, &room);
        answer["type"] = json!("members_set");
        answer
    }

    /// The `members` of an owner's request: Matrix user ids, each once, not the bot's own, at
    /// most [`MAX_NAMED_MEMBERS`].
    fn named_members(&self, body: &Value) -> Result<BTreeSet<String>, String> {
        let Some(given) = body["members"].as_array() else {
            return Err(format!(
                "`members` is {}; give the Matrix ids of the room conversation's members, such \
                 as [\"@ann:example.org\"] ([] for none)",
                body["members"]
            ));
        };
        if given.len() > MAX_NAMED_MEMBERS {
            return Err(format!(
                "a room's conversation has at most {MAX_NAMED_MEMBERS} members, not {}",
                given.len()
            ));
        }
        let mut members = BTreeSet::new();
        for member in given {
            let id = member.as_str().unwrap_or_default();
            let local_and_server = id.strip_prefix('@').and_then(|rest| rest.split_once(':'));
            if !local_and_server
                .is_some_and(|(local, server)| !local.is_empty() && !server.is_empty())
            {
                return Err(format!(
                    "member {member} is not a Matrix user id; write it as `@name:server`"
                ));
            }
            if id == self.config.user_id {
                return Err(format!(
                    "member {id} is the bridge itself; name only people"
                ));
            }
            if !members.insert(id.to_string()) {
                return Err(format!("member {id} is named twice; name each once"));
            }
        }
        Ok(members)
    }

    fn describe_room(&self, id: &str, room: &Room) -> Value {
        json!({
            "room": id,
            "name": self.room_key(id),
            "present": room.present,
            "members": room.members,
        })
    }

    /// A text that could not reach the agent. When its sender is no person of this world, they
    /// are told so once, and a room whose every member proved unknown is left.
    fn on_undeliverable(&mut self, message: &Incoming) {
        let Some(turn_id) = message.reply_to.as_deref() else {
            return;
        };
        if let Some(room) = self.state.invites.remove(turn_id) {
            let inviter = self.state.inviters.remove(turn_id).unwrap_or_default();
            eprintln!(
                "matrix: declined the invite to {room} from {inviter}, who is no person of this world"
            );
            self.leave(&room);
            self.save();
            return;
        }
        let Some(turn) = self.state.turns.remove(turn_id) else {
            eprintln!("matrix: undeliverable: {}", message.body["reason"]);
            return;
        };
        self.stop_typing(&turn.room);
        let reason = message.body["reason"].as_str().unwrap_or("");
        let unknown = reason.contains("not a person");
        if !unknown {
            let text = format!("Your message could not reach the assistant: {reason}");
            self.notice(&turn.room, &format!("undeliverable.{}", turn.event), &text);
        } else if self.state.told_unknown.insert(turn.sender.clone()) {
            let txn = format!("unknown.{}", turn.event);
            self.notice(&turn.room, &txn, UNKNOWN_NOTICE);
        }
        if unknown && self.nobody_known_in(&turn.room) {
            self.leave(&turn.room);
        }
        self.save();
    }

    fn leave(&mut self, room: &str) {
        let request = Request {
            method: "POST",
            url: self.url(&format!("/rooms/{}/leave", encode(room))),
            body: Some(json!({})),
        };
        match self.call(&request) {
            Ok(_) => {
                eprintln!("matrix: left {room}, where nobody is a person of this world");
                self.state.rooms.remove(room);
            }
            Err(why) => eprintln!("matrix: leaving {room}: {why}"),
        }
    }

    /// A message about a turn. Only the asker's copy counts (`reply_to` = the turn): in a
    /// shared room every member's copy comes here.
    fn on_agent(&mut self, message: &Incoming) {
        let body = &message.body;
        let Some(turn_id) = body["turn"].as_str().or(message.reply_to.as_deref()) else {
            eprintln!(
                "matrix: ignoring a {:?} of the agent's with no turn",
                message.kind()
            );
            return;
        };
        let turn_id = turn_id.to_string();
        let Some(turn) = self.state.turns.get(&turn_id).cloned() else {
            self.on_other_turn(message, &turn_id);
            return;
        };
        if message.reply_to.as_deref() != Some(turn_id.as_str()) && !body["room"].is_null() {
            return;
        }
        // The agent speaks to the sender: the world knows them (again, if it did not before).
        self.state.told_unknown.remove(&turn.sender);
        if turn.private && !self.alone_with_bot(&turn) {
            return self.withhold(&turn_id, &turn, message);
        }
        match message.kind() {
            "progress" => {}
            "tool" => {
                let tool = body["tool"].as_str().unwrap_or("a tool");
                let line = if body["state"] == "started" {
                    match body["preview"].as_str().filter(|p| !p.is_empty()) {
                        Some(preview) => format!("⚙️ {tool}: {preview}"),
                        None => format!("⚙️ {tool}"),
                    }
                } else {
                    let mark = if body["ok"] == false { "✗" } else { "✓" };
                    let seconds = body["seconds"].as_f64().unwrap_or(0.0);
                    format!("{mark} {tool} ({seconds:.1} s)")
                };
                self.update_status(&turn_id, &message.id, |turn| {
                    if body["state"] != "started" {
                        turn.tools_done += 1;
                    }
                    turn.tool_line = line;
                });
            }
            "plan" => {
                let items: Vec<String> = body["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|item| {
                        let mark = if item["done"] == true { "☑" } else { "☐" };
                        format!("{mark} {}", item["text"].as_str().unwrap_or(""))
                    })
                    .collect();
                self.update_status(&turn_id, &message.id, |turn| turn.plan = items);
            }
            "question" => self.ask(&turn_id, &turn, message),
            "text" => self.answer(&turn_id, &turn, message),
            other => eprintln!("matrix: ignoring a {other:?} of the agent's"),
        }
    }

    /// Whether the sender of a private turn is still alone with the bot in its room.
    fn alone_with_bot(&self, turn: &Turn) -> bool {
        self.state.rooms.get(&turn.room).and_then(Room::direct_with) == Some(turn.sender.as_str())
    }

    /// A private turn's message when someone else came into its room: nothing of it is shown
    /// there but one notice; its final text ends the turn here.
    fn withhold(&mut self, turn_id: &str, turn: &Turn, message: &Incoming) {
        if !turn.withheld {
            eprintln!(
                "matrix: {} is no longer alone in {}; turn {turn_id} is not shown there",
                turn.sender, turn.room
            );
            self.stop_typing_for(turn_id, &turn.room);
            self.status_waiting.remove(turn_id);
            let txn = format!("private.{}", turn.event);
            self.notice(&turn.room, &txn, NO_LONGER_PRIVATE_NOTICE);
            if let Some(kept) = self.state.turns.get_mut(turn_id) {
                kept.withheld = true;
            }
        }
        if message.kind() == "text" {
            self.status_sent.remove(turn_id);
            self.state.questions.retain(|_, q| q.turn != turn_id);
            self.state.finish(turn_id);
        }
        self.save();
    }

    /// A message about a turn that did not start here: in a shared room mapped to a Matrix
    /// room, its final text is shown there (once, though each member's copy comes).
    fn on_other_turn(&mut self, message: &Incoming, turn_id: &str) {
        let finished = self.state.finished.iter().any(|t| t == turn_id);
        let shared = message.body["room"].as_str();
        let room = shared.and_then(|shared| {
            self.state
                .rooms
                .keys()
                .find(|room| self.room_key(room) == shared)
                .cloned()
        });
        match (message.kind(), room) {
            ("text", Some(room)) if !finished => {
                self.send_answer(&room, &message.id, &message.body, None);
                self.state.finish(turn_id);
                self.save();
            }
            _ => {}
        }
    }

    /// Sends the turn's status line (plan and latest tool) as a notice, or edits the one sent.
    /// Changes the turn's status line and shows it: the first one at once, later ones as an
    /// edit at most every [`STATUS_INTERVAL`] (a change in between waits for the next edit).
    fn update_status(&mut self, turn_id: &str, message_id: &str, change: impl FnOnce(&mut Turn)) {
        let Some(turn) = self.state.turns.get_mut(turn_id) else {
            return;
        };
        change(turn);
        let first = turn.status_event.is_none();
        let due = self
            .status_sent
            .get(turn_id)
            .is_none_or(|at| self.host.now().saturating_sub(*at) >= STATUS_INTERVAL);
        if first || due {
            self.show_status(turn_id, message_id);
        } else {
            self.status_waiting
                .insert(turn_id.to_string(), message_id.to_string());
        }
        self.save();
    }

    /// Sends (or edits) the status line as the turn now has it; `txn` names the world message
    /// whose change it shows.
    fn show_status(&mut self, turn_id: &str, txn: &str) {
        self.status_waiting.remove(turn_id);
        let Some(turn) = self.state.turns.get(turn_id).cloned() else {
            return;
        };
        let mut text = turn.plan.join("\n");
        if !turn.tool_line.is_empty() {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&turn.tool_line);
        }
        let sent = self.send_status(&turn, txn, &text);
        self.status_sent
            .insert(turn_id.to_string(), self.host.now());
        if let (Some(event), Some(turn)) = (sent, self.state.turns.get_mut(turn_id))
            && turn.status_event.is_none()
        {
            turn.status_event = Some(event);
        }
    }

    /// Shows the status changes whose interval has passed.
    fn show_waiting_statuses(&mut self) {
        let now = self.host.now();
        let due: Vec<(String, String)> = self
            .status_waiting
            .iter()
            .filter(|(turn, _)| {
                self.status_sent
                    .get(*turn)
                    .is_none_or(|at| now.saturating_sub(*at) >= STATUS_INTERVAL)
            })
            .map(|(turn, txn)| (turn.clone(), txn.clone()))
            .collect();
        if due.is_empty() {
            return;
        }
        for (turn, txn) in due {
            self.show_status(&turn, &txn);
        }
        self.save();
    }

    /// How long the loop may wait before something is due: a typing renewal while a turn
    /// runs, a waiting status edit.
    fn wake_in(&self) -> Option<Duration> {
        let now = self.host.now();
        let status = self
            .status_waiting
            .keys()
            .filter_map(|turn| self.status_sent.get(turn))
            .map(|at| STATUS_INTERVAL.saturating_sub(now.saturating_sub(*at)))
            .min();
        let typing = (!self.state.turns.is_empty()).then_some(TYPING_RENEW);
        status.into_iter().chain(typing).min()
    }

    /// The status notice: a new one (threaded to the asking message), or an `m.replace` edit
    /// of the one already sent. Returns the new notice's event id.
    fn send_status(&mut self, turn: &Turn, txn: &str, text: &str) -> Option<String> {
        let new = json!({"msgtype": "m.notice", "body": text});
        let content = match &turn.status_event {
            Some(event) => json!({
                "msgtype": "m.notice",
                "body": format!("* {text}"),
                "m.new_content": new,
                "m.relates_to": {"rel_type": "m.replace", "event_id": event},
            }),
            None => with_reply(new, &turn.event),
        };
        let event = self.send_event(&turn.room, txn, content);
        if turn.status_event.is_some() {
            None
        } else {
            event
        }
    }

    /// A question of the agent's: its text and numbered choices, as a reply to the asker; the
    /// asker's next message in that room answers it.
    fn ask(&mut self, turn_id: &str, turn: &Turn, message: &Incoming) {
        let body = &message.body;
        let text = body["text"].as_str().unwrap_or("");
        let choices: Vec<String> = body["choices"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_str().map(str::to_string))
            .collect();
        let mut plain = text.to_string();
        let mut html = markdown::to_html(text);
        if !choices.is_empty() {
            plain.push('\n');
            html.push_str("\n<ol>\n");
            for (n, choice) in choices.iter().enumerate() {
                plain.push_str(&format!("\n{}. {choice}", n + 1));
                html.push_str(&format!("<li>{}</li>\n", markdown::escape(choice)));
            }
            html.push_str("</ol>");
            plain.push_str("\n\nAnswer with a number or in your own words.");
            html.push_str("\n<p>Answer with a number or in your own words.</p>");
        }
        let content = with_reply(
            json!({
                "msgtype": "m.text",
                "body": plain,
                "format": "org.matrix.custom.html",
                "formatted_body": html,
            }),
            &turn.event,
        );
        self.stop_typing(&turn.room);
        self.send_event(&turn.room, &message.id, content);
        self.state.questions.insert(
            message.id.clone(),
            Question {
                room: turn.room.clone(),
                sender: turn.sender.clone(),
                choices,
                turn: turn_id.to_string(),
            },
        );
        self.save();
    }

    /// The turn's final text: the status line says it is done, then the answer comes, Markdown
    /// rendered, with the turn's cost, as a reply to the message that asked.
    fn answer(&mut self, turn_id: &str, turn: &Turn, message: &Incoming) {
        self.stop_typing_for(turn_id, &turn.room);
        // The status line says "done" first, so the answer is the last thing in the room.
        self.status_waiting.remove(turn_id);
        self.status_sent.remove(turn_id);
        if turn.status_event.is_some() {
            let done = match turn.tools_done {
                1 => "✓ done, 1 tool call".to_string(),
                n => format!("✓ done, {n} tool calls"),
            };
            let mut text = turn.plan.join("\n");
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&done);
            self.send_status(turn, &format!("{}.done", message.id), &text);
        }
        self.send_answer(&turn.room, &message.id, &message.body, Some(&turn.event));
        self.state.questions.retain(|_, q| q.turn != turn_id);
        self.state.finish(turn_id);
        self.save();
    }

    /// Sends a final text, in parts when it is too long for one event (transaction ids
    /// `<id>`, `<id>.2`, `<id>.3`…); the cost line ends the last part.
    fn send_answer(&mut self, room: &str, id: &str, body: &Value, event: Option<&str>) {
        let text = body["text"].as_str().unwrap_or("");
        let parts = split_text(text, MAX_ANSWER_PART);
        let last = parts.len() - 1;
        for (n, part) in parts.iter().enumerate() {
            let cost = (n == last).then(|| cost_line(body));
            let content = answer_content(part, cost.as_deref(), event);
            let txn = match n {
                0 => id.to_string(),
                n => format!("{id}.{}", n + 1),
            };
            self.send_event(room, &txn, content);
        }
    }

    fn notice(&mut self, room: &str, txn: &str, text: &str) {
        let content = json!({
            "msgtype": "m.notice",
            "body": text,
            "format": "org.matrix.custom.html",
            "formatted_body": markdown::to_html(text),
        });
        self.send_event(room, txn, content);
    }

    /// `PUT /rooms/{room}/send/m.room.message/{txn}`: the homeserver keeps one event per
    /// transaction id, so sending again after a failure or a crash never doubles it. Returns
    /// the event's id.
    fn send_event(&mut self, room: &str, txn: &str, content: Value) -> Option<String> {
        let request = Request {
            method: "PUT",
            url: self.url(&format!(
                "/rooms/{}/send/m.room.message/{}",
                encode(room),
                encode(txn)
            )),
            body: Some(content),
        };
        match self.call(&request) {
            Ok(response) => response.json()["event_id"].as_str().map(str::to_string),
            Err(why) => {
                eprintln!("matrix: sending to {room}: {why}");
                None
            }
        }
    }

    // ---- Typing ----

    fn typing_request(&self, room: &str, typing: bool) -> Request {
        let body = if typing {
            json!({"typing": true, "timeout": TYPING_TIMEOUT_MS})
        } else {
            json!({"typing": false})
        };
        Request {
            method: "PUT",
            url: self.url(&format!(
                "/rooms/{}/typing/{}",
                encode(room),
                encode(&self.config.user_id)
            )),
            body: Some(body),
        }
    }

    /// Typing is a courtesy: one try, and a failure only noted.
    fn set_typing(&mut self, room: &str, typing: bool) {
        let request = self.typing_request(room, typing);
        match self.host.call(&request) {
            Ok(response) if (200..300).contains(&response.status) => {}
            Ok(response) => eprintln!("matrix: typing in {room}: {}", describe(&response)),
            Err(why) => eprintln!("matrix: typing in {room}: {why}"),
        }
    }

    fn start_typing(&mut self, room: &str) {
        self.set_typing(room, true);
        self.typing.insert(room.to_string(), self.host.now());
    }

    fn stop_typing(&mut self, room: &str) {
        if self.typing.remove(room).is_some() {
            self.set_typing(room, false);
        }
    }

    /// Stops typing in `room` unless another turn there still runs.
    fn stop_typing_for(&mut self, turn_id: &str, room: &str) {
        let others = self
            .state
            .turns
            .iter()
            .any(|(id, t)| id != turn_id && t.room == room);
        if !others {
            self.stop_typing(room);
        }
    }

    /// Typing is renewed in every room with a turn that runs and waits for no answer.
    fn renew_typing(&mut self) {
        let now = self.host.now();
        let waiting: Vec<&str> = self
            .state
            .questions
            .values()
            .map(|q| q.turn.as_str())
            .collect();
        let mut rooms: Vec<String> = self
            .state
            .turns
            .iter()
            .filter(|(id, t)| !waiting.contains(&id.as_str()) && !t.withheld)
            .map(|(_, t)| t.room.clone())
            .collect();
        rooms.dedup();
        for room in rooms {
            let due = self
                .typing
                .get(&room)
                .is_none_or(|since| now.saturating_sub(*since) >= TYPING_RENEW);
            if due {
                self.start_typing(&room);
            }
        }
    }

    // ---- Calls ----

    /// A call, retried: a 429 after its `retry_after_ms`, for as long as the homeserver asks
    /// (a shutdown ends the wait); a 5xx, a 401 (the host may not have the token yet) or no
    /// answer after a backoff, at most [`MAX_ATTEMPTS`] tries.
    fn call(&mut self, request: &Request) -> Result<Response, String> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (wait, why) = match self.host.call(request) {
                Ok(response) if (200..300).contains(&response.status) => return Ok(response),
                Ok(response) if response.status == 429 => {
                    let (wait, why) = (retry_after(&response), describe(&response));
                    eprintln!(
                        "matrix: {} {}: {why}; waiting {wait:?} as asked",
                        request.method,
                        path_of(&request.url)
                    );
                    // Being asked to wait is no failure: it does not count as a try.
                    attempt -= 1;
                    (wait, why)
                }
                Ok(response) if response.status == 401 || response.status >= 500 => {
                    let why = describe(&response);
                    eprintln!(
                        "matrix: {} {}: {why}",
                        request.method,
                        path_of(&request.url)
                    );
                    (backoff(attempt), why)
                }
                Ok(response) => return Err(describe(&response)),
                Err(why) => (backoff(attempt), why),
            };
            if attempt >= MAX_ATTEMPTS {
                return Err(format!("{why} (gave up after {attempt} tries)"));
            }
            if !self.host.pause(wait) {
                return Err(format!("{why} (stopping)"));
            }
        }
    }
}

/// A final text's content: Markdown rendered, the cost line below (on the last part), threaded
/// to `event`. Should the HTML make the event too big (text that escapes to many times its
/// size), it goes without `formatted_body`: plain, but whole.
/// The broker request a room's `/approvals`, `/approve ID` or `/deny ID` makes, if the text
/// is one of them.
fn approval_command(text: &str) -> Option<Value> {
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        ["/approvals"] => Some(json!({"type": "approvals"})),
        ["/approve", id] => Some(json!({"type": "decide", "approval": id, "approve": true})),
        ["/deny", id] => Some(json!({"type": "decide", "approval": id, "approve": false})),
        _ => None,
    }
}

/// What the broker answered a room's approval command, in words for the room.
fn decision_words(body: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
    match body["type"].as_str() {
        Some("approvals") => {
            let waiting = body["approvals"].as_array().cloned().unwrap_or_default();
            if waiting.is_empty() {
                return "Nothing waits for a decision.".into();
            }
            let lines: Vec<String> = waiting
                .iter()
                .map(|h| {
                    format!(
                        "- **{}** ({}) {}: {}",
                        text(&h["id"]),
                        text(&h["action"]),
                        text(&h["asked_by"]),
                        text(&h["what"])
                    )
                })
                .collect();
            format!(
                "Waiting for a decision:\n{}\n\nAnswer with /approve ID or /deny ID (a secret's \
                 value only on the web page).",
                lines.join("\n")
            )
        }
        Some(kind @ ("approved" | "denied")) => {
            format!(
                "{} {kind}: {}",
                text(&body["approval"]),
                text(&body["what"])
            )
        }
        _ => format!("Not done: {}", text(&body["reason"])),
    }
}

pub fn answer_content(text: &str, cost: Option<&str>, event: Option<&str>) -> Value {
    let (mut plain, mut html) = (text.to_string(), markdown::to_html(text));
    if let Some(cost) = cost {
        plain.push_str(&format!("\n\n{cost}"));
        html.push_str(&format!("\n<p><em>{}</em></p>", markdown::escape(cost)));
    }
    let mut content = json!({
        "msgtype": "m.text",
        "body": plain,
        "format": "org.matrix.custom.html",
        "formatted_body": html,
    });
    if content.to_string().len() > MAX_CONTENT_BYTES {
        content = json!({"msgtype": "m.text", "body": content["body"]});
    }
    match event {
        Some(event) => with_reply(content, event),
        None => content,
    }
}

/// `text` in parts of at most `limit` bytes, cut at a blank line, else a line end, else a space,
/// else anywhere between characters; one part (maybe empty) when it fits.
fn split_text(text: &str, limit: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = text;
    while rest.len() > limit {
        let mut end = limit;
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let head = &rest[..end];
        let cut = ["\n\n", "\n", " "]
            .iter()
            .find_map(|sep| head.rfind(sep).filter(|&i| i > 0).map(|i| i + sep.len()))
            .unwrap_or(end);
        parts.push(rest[..cut].trim_end());
        rest = &rest[cut..];
    }
    parts.push(rest);
    parts
}

/// `m.relates_to.m.in_reply_to`: the message shows as a reply to `event`.
fn with_reply(mut content: Value, event: &str) -> Value {
    if !event.is_empty() {
        content["m.relates_to"] = json!({"m.in_reply_to": {"event_id": event}});
    }
    content
}

/// The end of a turn in words: its cost and tokens, and why it stopped early if it did.
fn cost_line(body: &Value) -> String {
    let usage = &body["usage"];
    let cost = match usage["cost_usd"].as_f64() {
        Some(cost) => format!("${cost:.4}"),
        None => "cost unknown".to_string(),
    };
    let tokens = |name: &str| usage[name].as_u64().unwrap_or(0);
    let mut line = format!(
        "— {cost} · {} tokens in, {} out",
        tokens("input_tokens"),
        tokens("output_tokens")
    );
    if let Some(stopped) = body["stopped"].as_str() {
        line.push_str(&format!(" · stopped: {stopped}"));
    }
    line
}

/// What a membership event (other than the bot's own) changes: who is present, and who is a
/// member of the room's conversation. An invite by a member is noted; joining on it makes the
/// invitee a member (also when the homeserver says so of an older join: Synapse's
/// `unsigned.prev_sender` and `prev_content` name the invite it followed). Joining on one's own
/// or on a non-member's invite makes nobody a member; leaving, a kick or a ban ends it.
fn learn_member(room: &mut Room, event: &Value, bot: &str) {
    if event["type"] != "m.room.member" {
        return;
    }
    let Some(user) = event["state_key"].as_str().filter(|user| *user != bot) else {
        return;
    };
    let by_member = |sender: &Value| sender.as_str().is_some_and(|s| room.members.contains(s));
    match event["content"]["membership"].as_str() {
        Some("invite") => {
            if by_member(&event["sender"]) {
                let inviter = event["sender"].as_str().unwrap_or_default().to_string();
                room.invited.insert(user.to_string(), inviter);
            }
            room.present.insert(user.to_string());
        }
        Some("join") => {
            let unsigned = &event["unsigned"];
            let followed_an_invite = unsigned["prev_content"]["membership"] == "invite"
                && by_member(&unsigned["prev_sender"]);
            if room.invited.remove(user).is_some() || followed_an_invite {
                room.members.insert(user.to_string());
            }
            room.present.insert(user.to_string());
        }
        _ => {
            room.present.remove(user);
            room.members.remove(user);
            room.invited.remove(user);
        }
    }
}

/// The text a person wrote, without the quoted fallback of the message it replies to (`> …`
/// lines and a blank line before the reply, as older clients send).
fn without_reply_fallback(content: &Value) -> Option<String> {
    let body = content["body"].as_str()?;
    if content["m.relates_to"]["m.in_reply_to"].is_null() || !body.starts_with("> ") {
        return Some(body.to_string());
    }
    let rest: Vec<&str> = body.lines().skip_while(|l| l.starts_with('>')).collect();
    Some(rest.join("\n").trim_start_matches('\n').to_string())
}

/// An answer to a question: a number picks that choice, anything else is the answer itself.
fn choice(choices: &[String], text: &str) -> String {
    let trimmed = text.trim().trim_end_matches('.');
    match trimmed.parse::<usize>() {
        Ok(n) if (1..=choices.len()).contains(&n) => choices[n - 1].clone(),
        _ => text.trim().to_string(),
    }
}

/// The agent's room id for a shared Matrix room: the bridge's actor id, `-`, and the first
/// [`ROOM_KEY_HEX`] hexadecimal digits of the SHA-256 of the full room id (`!abc:server`), so
/// it follows the rules of actor ids and the agent takes it as this surface's own room, and two
/// rooms never share one (not even rooms whose ids differ only in case or server).
pub fn room_key(me: &str, room: &str) -> String {
    let hash: String = Sha256::digest(room.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{me}-{}", &hash[..ROOM_KEY_HEX])
}

/// A 429's wait: `retry_after_ms` in the body, else `Retry-After` in seconds, else a second;
/// at most [`MAX_RETRY_AFTER`].
fn retry_after(response: &Response) -> Duration {
    let body = response.json();
    let from_body = body["retry_after_ms"].as_u64().map(Duration::from_millis);
    let from_header = response
        .header("retry-after")
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    from_body
        .or(from_header)
        .unwrap_or(Duration::from_secs(1))
        .min(MAX_RETRY_AFTER)
}

fn backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1).min(16)))
        .min(MAX_BACKOFF)
}

/// An answer that is not a success, in words: the status and Matrix's `errcode` and `error`.
fn describe(response: &Response) -> String {
    let body = response.json();
    match (body["errcode"].as_str(), body["error"].as_str()) {
        (Some("M_UNKNOWN_TOKEN"), _) => format!(
            "{} M_UNKNOWN_TOKEN: the homeserver does not take the access token the host adds \
             (broker/credentials/matrix.json)",
            response.status
        ),
        (Some(code), Some(error)) => format!("{} {code}: {error}", response.status),
        (Some(code), None) => format!("{} {code}", response.status),
        _ => format!(
            "HTTP {}: {}",
            response.status,
            String::from_utf8_lossy(&response.body[..response.body.len().min(200)])
        ),
    }
}

/// The path of a URL, for a log line without the query.
fn path_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    path.split('?').next().unwrap_or(path)
}

/// Percent-encodes everything but the unreserved characters, for a path segment or a query
/// value.
pub fn encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
