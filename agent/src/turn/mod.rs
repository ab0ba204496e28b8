//! Turns: the agent's main loop and the state machine of one turn (message → model step → tools →
//! … → answer), with what must survive a restart saved in `/data` after every step:
//! the conversation's `history.json` (see `conversations`), `turn.json` (the turn in progress:
//! its conversation, the message that started it, the steps so far, its usage, its trace, a reply
//! being waited for), `inbox.json` (texts waiting for their turn, and messages not yet shown, each
//! with its conversation), `arrived.jsonl` (messages read while the model was asked, until they
//! are kept; see `arrived`) and `spend.json` (the day's spending).
//! A turn acts for one person (DESIGN §13): its request holds only its conversation, its tools
//! pass `access` first, and everything about it goes to the people of that conversation with
//! `for` (and `room`). While a step streams, they see its text as `progress` messages; every
//! tool call is announced as `tool` started and finished; the final reply carries the turn's
//! `usage`.
//! The loop and the step are here; the same `Agent` is continued in `calls` (the tools the turn
//! runs itself), `inbox` (what arrives outside a wait) and `rounds` (goals), one file each;
//! `arrived` holds what the host read during a model request until it is kept; `spans` the
//! turn's trace, reported to the broker when the turn ends (DESIGN §22).
//! **Invariant:** a turn always ends with exactly one answer to the message that started it, in
//! words even when everything failed; a shutdown ends it only by saving it for the next start.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::access::{self, Who};
use crate::budget::{self, Payer, Spend};
use crate::config::{self, Config};
use crate::context;
use crate::conversations::{self, Conversation, Room, Subscriptions, Surfaces};
use crate::delegation::{self, SubAgent};
use crate::fairness::{self, Starts};
use crate::goals::{self, Goal, Goals};
use crate::history::{self, Entry, History};
use crate::host::{Event, Heard, Host, Posted};
use crate::mcp;
use crate::message::{HttpRequest, Incoming, Outgoing, Tier, shorten, valid_id};
use crate::provider::{self, Failure, Reply, Usage};
use crate::tools::{self, DEFAULT_WAIT_SECONDS, MAX_WAIT_SECONDS, card, cut_output, string_arg};

mod arrived;
mod calls;
mod delegate;
mod inbox;
mod rewind;
mod rounds;
mod spans;

use arrived::Arrived;
use calls::{answer_words, preview};
use spans::{Ended, Step, TurnTrace, What, unix_ms};

/// What the model is told at every step: the whole design of the world it works in.
/// The model's instructions: the world, then writing, serving and deploying actors (two files,
/// so the agent can read each whole with one `read_file` when it changes itself).
const PROMPT: &str = concat!(
    include_str!("../prompt.md"),
    "\n",
    include_str!("../actors.md")
);

/// The most model steps (requests) one turn may take; then the person is told what was done, so
/// a model that loops cannot spend without end.
pub const MAX_STEPS: u32 = 40;

/// How often a failed request is tried again (429, 5xx, overloaded, a broken stream) before the
/// turn ends in words.
pub const MAX_RETRIES: u32 = 3;

/// The wait before the first retry when the provider names none; it doubles for each next one.
pub const RETRY_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait before a retry, whatever `retry-after` asks: a person is waiting.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

/// Streamed text goes to the person at most this often, batched.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

/// A turn resumed this many times in a row without finishing a step ends: each resume repeats
/// a paid request, and a crash loop must not repeat it forever.
pub const MAX_RESUMES: u32 = 3;

/// The most characters of a tool message's `preview`.
pub const PREVIEW_CHARS: usize = 80;

/// The longest a question waits for its answer (across restarts): a person may be away.
pub const QUESTION_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// The most choices a question offers.
pub const MAX_CHOICES: usize = 10;

/// How much of one step's description the step-limit answer shows.
const STEP_DESCRIPTION_CHARS: usize = 160;

/// The most entries a `conversation` request is answered with: the latest ones.
pub const CONVERSATION_ENTRIES: usize = 300;

/// The result of a tool call that a restart cut off.
pub const INTERRUPTED: &str = "interrupted: the agent restarted before this finished";

/// The result of tool calls left unrun because the turn ended first.
const NOT_RUN: &str = "not run: the turn ended before this call";

/// How long a member's change to an actor waits for the broker's `list`, which says who owns
/// it; without an answer the change is not sent.
const OWNER_CHECK_SECONDS: u64 = 10;

/// How long a turn of an actor's conversation waits for the broker to say whom the actor acts
/// for (DESIGN §18); without an answer the turn has a guest's rights, and the model is told so.
pub const PRINCIPAL_WAIT_SECONDS: u64 = 10;

/// The most requests to the agent from actors (a stop, a rewind, a goal, a room) that wait for
/// the broker to say whom their actor acts for: past it another is refused, to be asked again,
/// so actors cannot grow `inbox.json` without end.
pub const MAX_OWNERS_ASKED: usize = 64;

/// The most recipients of the agent's own messages remembered (in `inbox.json`), so that a late
/// reply is taken only from the actor it was sent to. Past it the oldest is forgotten, and a
/// reply to it is judged like any message.
pub const MAX_REMEMBERED_SENDS: usize = 256;

/// The most messages kept for one conversation until its next turn: an actor that publishes
/// forever to a conversation that never speaks must not grow `inbox.json` without end. Past it,
/// the oldest is dropped (with a line on stderr).
pub const MAX_KEPT_NOTES: usize = 200;

/// The turn in progress, as `turn.json` keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedTurn {
    /// The conversation it speaks in; `legacy` in a turn saved before people.
    #[serde(default)]
    pub conversation: Conversation,
    /// The message that started the turn; the answer goes to its sender, replying to its id.
    pub message: Incoming,
    /// Model steps taken so far.
    pub steps: u32,
    /// One line per tool call made so far, for the answer when the turn ends early.
    #[serde(default)]
    pub done: Vec<String>,
    /// A `send_message` waiting for its reply, so a restart can go on waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// Tokens of every response of this turn (compaction included).
    #[serde(default)]
    pub usage: Usage,
    /// Their price, for the responses whose model has one.
    #[serde(default)]
    pub cost_usd: f64,
    /// What the broker's `spend` rule cleared this turn to spend (DESIGN §25): `None` until
    /// its first priced step asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend_cleared: Option<SpendCleared>,
    /// Some response's model had no price: the turn's cost is unknown.
    #[serde(default)]
    pub unpriced: bool,
    /// Restarts since the last finished step (see [`MAX_RESUMES`]).
    #[serde(default)]
    pub resumes: u32,
    /// Request bytes per prompt token, learnt from the last response, for estimating the next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_token: Option<f64>,
    /// The goal this turn is a round of; `None` for a turn that answers a message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// The to-do card (`plan`), as `[{"text","done"}]`; null before the first.
    #[serde(default)]
    pub plan: Value,
    /// How the model ended a goal's round with `goal_status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_end: Option<RoundEnd>,
    /// In an actor's conversation: whom the broker said the actor acts for, asked before the
    /// first step and kept, so a resumed turn has the same rights and payer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Principal>,
    /// The turn's span and its steps so far, from its first step on (see `spans`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TurnTrace>,
    /// The `delegate` calls of the step being run, until each has its output (`delegate`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegations: Vec<delegate::SavedDelegation>,
}

/// Whom an actor acts for (DESIGN §18), as the broker answered `{"type":"principal"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Principal {
    /// Its owner and the owner's tier (`owner`, `member` or `guest`).
    Person { person: String, tier: String },
    /// It acts for nobody, or the broker did not say: why, in words for the model.
    Nobody { why: String },
}

impl Principal {
    /// The person and their tier; an unknown tier counts as a guest's.
    fn person(&self) -> Option<(String, Tier)> {
        let Principal::Person { person, tier } = self else {
            return None;
        };
        let tier = match tier.as_str() {
            "owner" => Tier::Owner,
            "member" => Tier::Member,
            _ => Tier::Guest,
        };
        Some((person.clone(), tier))
    }

    /// The broker's answer about `actor`, or why it names nobody.
    fn of_reply(actor: &str, reply: &Incoming) -> Principal {
        let body = &reply.body;
        let nobody = |why: String| Principal::Nobody { why };
        match (
            body["type"].as_str(),
            body["person"].as_str(),
            body["tier"].as_str(),
        ) {
            (Some("principal"), Some(person), Some(tier))
                if body["actor"] == actor && valid_id(person) =>
            {
                Principal::Person {
                    person: person.to_string(),
                    tier: tier.to_string(),
                }
            }
            (Some("error"), _, _) => nobody(format!(
                "the broker says actor {actor} acts for nobody: {}",
                body["reason"].as_str().unwrap_or("it gave no reason")
            )),
            _ => nobody(format!(
                "the broker's answer about actor {actor} named no person: {}",
                shorten(&body.to_string(), STEP_DESCRIPTION_CHARS)
            )),
        }
    }
}

/// Whom a request to the agent itself (a stop, a rewind, a goal, a room) acts for (DESIGN §18):
/// a person's message, that person with their tier; an actor's, its owner with the owner's tier
/// as the broker named them, as for its turns (nobody, with a guest's rights, when it named
/// nobody).
#[derive(Clone, Debug, PartialEq)]
pub struct Acting {
    pub person: Option<String>,
    pub tier: Tier,
}

impl Acting {
    fn of_person(message: &Incoming) -> Acting {
        Acting {
            person: message.person.clone(),
            tier: message.tier(),
        }
    }

    fn of_principal(principal: &Principal) -> Acting {
        match principal.person() {
            Some((person, tier)) => Acting {
                person: Some(person),
                tier,
            },
            None => Acting::NOBODY,
        }
    }

    const NOBODY: Acting = Acting {
        person: None,
        tier: Tier::Guest,
    };
}

/// A round's end as the model gave it with `goal_status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundEnd {
    /// `continue`, `done` or `blocked`.
    pub status: String,
    pub summary: String,
}

impl SavedTurn {
    /// A turn about to take its first step.
    pub fn new(message: Incoming, conversation: Conversation) -> SavedTurn {
        SavedTurn {
            conversation,
            message,
            steps: 0,
            done: Vec::new(),
            waiting: None,
            usage: Usage::default(),
            cost_usd: 0.0,
            spend_cleared: None,
            unpriced: false,
            resumes: 0,
            bytes_per_token: None,
            goal: None,
            plan: Value::Null,
            round_end: None,
            principal: None,
            trace: None,
            delegations: Vec::new(),
        }
    }

    /// Who the turn acts for: the person who spoke, with their tier; an actor's conversation
    /// acts for the actor's owner with the owner's tier (a guest's rights when the broker named
    /// nobody); a turn from before people had an owner's (that agent had no tiers).
    pub fn who(&self) -> Who {
        let (person, tier) = match self.conversation {
            Conversation::Legacy => (None, Tier::Owner),
            Conversation::Actor(_) => match self.principal.as_ref().and_then(Principal::person) {
                Some((person, tier)) => (Some(person), tier),
                None => (None, Tier::Guest),
            },
            _ => (self.message.person.clone(), self.message.tier()),
        };
        Who {
            conversation: self.conversation.clone(),
            person,
            tier,
        }
    }

    /// Who pays: the person the turn acts for (an actor's owner included); an actor that acts
    /// for nobody pays from its own (guest's) day.
    fn payer(&self) -> Payer {
        match (&self.conversation, &self.message.person) {
            (Conversation::Legacy, _) => Payer::World,
            (Conversation::Actor(actor), _) => match self.who().person {
                Some(owner) => Payer::Person(owner),
                None => Payer::Actor(actor.clone()),
            },
            (_, Some(person)) => Payer::Person(person.clone()),
            (_, None) => Payer::Actor(self.message.from.clone()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    /// The tool call that waits.
    pub call_id: String,
    /// The id the reply names in `reply_to`, such as `agent/t3`.
    pub reply_to: String,
    pub seconds: u64,
    /// The wait is for a person's answer to `ask`.
    #[serde(default)]
    pub question: bool,
    /// When the wait ends, in seconds since 1970 (the wall clock, so a restart keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// The actor a `send_message` was sent to: only its reply (or the broker's) ends the wait.
    /// `None` for a question, and in a turn saved before this was kept (then any reply does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// How far the broker's `spend` rule lets a turn spend without asking again.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpendCleared {
    /// Up to this cost; past it the broker is asked again (and holds the turn).
    UpTo(f64),
    /// No rule holds this turn's spending, or a person approved it.
    Unlimited,
}

/// What asking the broker to clear a turn's spending came to.
enum Cleared {
    Go,
    End(String, Option<Stopped>),
    Shutdown,
}

/// How long the broker has to answer a `spend` request before the turn goes on without it.
const SPEND_PATIENCE: u64 = 30;

/// Messages kept for later, as `inbox.json` keeps them.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Inbox {
    /// Shown to the model at its conversation's next turn (or by `wait_for_messages` in it).
    #[serde(default)]
    notes: Vec<Kept>,
    /// Texts waiting for their turn, served round-robin by sender (`fairness`).
    #[serde(default)]
    turns: Vec<Incoming>,
    /// The agent's latest messages as (the id a reply names, the actor it went to), at most
    /// [`MAX_REMEMBERED_SENDS`]: a reply from anyone else is not taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    sent: Vec<(String, String)>,
    /// Requests from actors waiting for the broker to name their owner: (the id its answer
    /// names, the request), at most [`MAX_OWNERS_ASKED`]; answered once it does (see
    /// [`Acting`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    owners_asked: Vec<(String, Incoming)>,
}

/// A message kept for a conversation: `{...the message, "conversation"}`.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    #[serde(flatten)]
    message: Incoming,
    /// Missing in an inbox from before people: then the message says it (see
    /// [`Conversation::of_note`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    conversation: Option<Conversation>,
}

/// One person (or actor) a turn's messages go to.
struct Recipient {
    to: String,
    /// The turn's message id for the one who asked; the others get no `reply_to`.
    reply_to: Option<String>,
    /// `for`: the person the message is for.
    person: Option<String>,
}

/// Whether the agent goes on or must exit (a shutdown came; everything is saved).
#[derive(Debug, PartialEq)]
pub enum Flow {
    Continue,
    Stop,
}

/// Whose message ends a wait for a reply.
#[derive(Clone, Copy)]
enum Expected<'a> {
    /// The actor the message went to (or the broker, for it).
    Actor(&'a str),
    /// A person of the conversation a question was put to.
    PeopleOf(&'a Conversation),
    /// Anyone: a wait saved before the recipient was kept.
    Anyone,
}

/// How waiting for a reply ended.
enum Awaited {
    Reply(Incoming),
    TimedOut,
    /// The person stopped the turn while it waited.
    Stopped,
    Stop,
}

/// Why a turn ended before the model finished it: the reply's `stopped`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stopped {
    Budget,
    Steps,
    Stop,
}

impl Stopped {
    fn name(self) -> &'static str {
        match self {
            Stopped::Budget => "budget",
            Stopped::Steps => "steps",
            Stopped::Stop => "stop",
        }
    }
}

/// How asking the model ended.
enum Asked {
    Reply(Reply),
    /// The request failed for good, or after its retries.
    Failed(Failure),
    /// The turn ends with these words: the person stopped it, or compacting failed.
    End(String, Option<Stopped>),
    /// A shutdown came: save and exit.
    Shutdown,
}

/// How a turn's step loop ended.
enum Outcome {
    /// The model answered: its final text.
    Answered(String),
    /// The turn was cut short, in words: by a limit (`Some`) or a failure (`None`).
    Cut(String, Option<Stopped>),
    /// The model ended a goal's round with `goal_status` (kept in the turn's `round_end`).
    Status,
}

/// Streamed text waiting to go to the person, batched to one message per [`PROGRESS_INTERVAL`].
struct Progress {
    pending: String,
    last: Option<Instant>,
}

impl Progress {
    /// The pending text, if it may go now.
    fn due(&mut self, now: Instant) -> Option<String> {
        let waited = self.last.is_none_or(|last| now - last >= PROGRESS_INTERVAL);
        if self.pending.is_empty() || !waited {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.pending))
    }
}

pub struct Agent<H: Host> {
    pub host: H,
    /// `/data` in the component; a temporary folder in tests.
    data: PathBuf,
    /// `SAUSAGE_ACTOR`: the prefix the broker gives our own message ids.
    actor: String,
    /// `SAUSAGE_VERSION`, told to the model after a restart.
    version: String,
    /// `SAUSAGE_CANDIDATE`: a test instance on a scratch copy of the running agent's `/data`.
    candidate: bool,
    inbox: Inbox,
    /// What the host read while the model was asked: kept (and so taken by `receive`) before
    /// anything read later, and in `arrived.jsonl` until then.
    arrived: Arrived,
    /// The id of the message whose turn is running, if one is.
    current: Option<String>,
    /// The running turn's conversation and message, for who may stop it and where unaddressed
    /// messages that arrive meanwhile belong.
    running: Option<(Conversation, Incoming)>,
    /// Where each person last spoke from.
    surfaces: Surfaces,
    /// Which conversation subscribed to each publisher.
    subscriptions: Subscriptions,
    /// Turn starts of the last hour, per sender.
    starts: Starts,
    /// When each sender's text was last served (a count of turns), for round-robin.
    served: HashMap<String, u64>,
    turns_served: u64,
    /// A `stop` came for the running turn: it ends after its current step.
    stop_asked: bool,
    /// The id of the message whose turn ended last: a `stop` for it crossed its answer.
    finished: Option<String>,
    /// When the last progress or tool message went out, for batching.
    progress: Progress,
    goals: Goals,
    /// The goal whose round runs now, if one does.
    round_of: Option<String>,
    /// The question waiting for its answer now: the id an answer names, and its conversation.
    asking: Option<(String, Conversation)>,
    /// A rewind is putting things back: another waits until it is done.
    rewinding: bool,
    /// The broker requests a rewind has sent, for their ids.
    rewind_asks: u64,
    /// The traceparent every line carries now (DESIGN §22): the running turn's span, or its
    /// tool call's while one runs; `None` outside a turn, and in a turn whose message had none.
    trace: Option<String>,
    /// The sessions of the MCP servers spoken to, kept across turns.
    mcp: mcp::Sessions,
    /// The running turn's MCP servers (its configuration's) and the tools of theirs offered
    /// to its person; set when the turn's step loop begins.
    mcp_turn: (Vec<config::McpServer>, Vec<tools::ToolSpec>),
    /// In a sub-agent (DESIGN §26), its role, parent and person (`/data/role.json`).
    subagent: Option<SubAgent>,
}

impl<H: Host> Agent<H> {
    pub fn new(
        host: H,
        data: impl Into<PathBuf>,
        actor: &str,
        version: &str,
        candidate: bool,
    ) -> Self {
        let data = data.into();
        let subagent = SubAgent::load(&data);
        Agent {
            host,
            actor: actor.to_string(),
            version: version.to_string(),
            candidate,
            inbox: Inbox::default(),
            arrived: Arrived::new((!candidate).then(|| data.join("arrived.jsonl"))),
            current: None,
            running: None,
            surfaces: Surfaces::load(&data),
            subscriptions: Subscriptions::load(&data),
            starts: Starts::load(&data),
            served: HashMap::new(),
            turns_served: 0,
            stop_asked: false,
            finished: None,
            goals: Goals::new(&data),
            data,
            progress: Progress {
                pending: String::new(),
                last: None,
            },
            round_of: None,
            asking: None,
            rewinding: false,
            rewind_asks: 0,
            trace: None,
            mcp: mcp::Sessions::default(),
            mcp_turn: (Vec::new(), Vec::new()),
            subagent,
        }
    }

    /// Whether the model is offered `tool`: every tool for the agent (goal_status in goals'
    /// rounds only), a sub-agent's role's for a sub-agent.
    fn offers(&self, tool: &str, turn: &SavedTurn) -> bool {
        if tool == "goal_status" && turn.goal.is_none() {
            return false;
        }
        self.subagent.as_ref().is_none_or(|s| s.offers(tool))
    }

    /// The most this turn may spend: `max_turn_usd`, and in a sub-agent its share of its
    /// parent's turn too.
    fn turn_budget(&self, config: &Config) -> f64 {
        let share = self.subagent.as_ref().and_then(|s| s.role.budget_usd);
        share.map_or(config.max_turn_usd, |share| share.min(config.max_turn_usd))
    }

    /// Whom the turn's requests to the broker, cargo and the scheduler speak for (`"as"`): its
    /// person. A sub-agent's speak for its owner, who is that person, without it.
    fn speaks_for(&self, turn: &SavedTurn) -> Option<String> {
        match self.subagent {
            Some(_) => None,
            None => turn.who().person,
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.data.join(name)
    }

    /// Runs until a shutdown or the end of stdin: finishes a saved turn, then answers texts.
    pub fn run(&mut self) {
        // A candidate's /data is a copy of the running agent's: the saved turn and the waiting
        // messages belong to that agent, so a candidate leaves them alone and only answers
        // what it is sent.
        if !self.candidate {
            self.inbox = read_json(&self.file("inbox.json")).unwrap_or_default();
            // What a kill cut off before it was kept; `inbox.json` may have some of it already.
            let kept: HashSet<String> = (self.inbox.turns.iter())
                .chain(self.inbox.notes.iter().map(|kept| &kept.message))
                .chain(self.inbox.owners_asked.iter().map(|(_, request)| request))
                .map(|message| message.id.clone())
                .collect();
            for note in self.arrived.load(kept) {
                eprintln!("agent: {note}");
            }
            if let Some(saved) = self.saved_turn()
                && self.resume(saved) == Flow::Stop
            {
                return;
            }
        }
        // People's texts come first, round-robin by sender; a goal's rounds run when none
        // waits, so a goal never locks anyone out for longer than one round.
        loop {
            // What came while the last turn asked the model waits in `arrived`: people first.
            self.take_arrived();
            if !self.inbox.turns.is_empty() {
                let next = fairness::next(&self.inbox.turns, &self.served);
                let message = self.inbox.turns.remove(next);
                self.save_inbox();
                if self.start(message) == Flow::Stop {
                    return;
                }
                continue;
            }
            let goal = (!self.candidate).then(|| self.goals.active()).flatten();
            let wait = goal.as_ref().map(|_| Duration::ZERO);
            match (self.receive(wait), goal) {
                (Event::Message(message), _) => self.keep(message),
                (Event::TimedOut, Some(goal)) => {
                    if self.round(goal) == Flow::Stop {
                        return;
                    }
                }
                (Event::TimedOut, None) => {}
                (Event::Stop, _) => return,
            }
        }
    }

    /// The turn an earlier instance saved. One that cannot be read is moved aside and its
    /// sender, when the file still names one, is told in words; it is never dropped silently.
    fn saved_turn(&mut self) -> Option<SavedTurn> {
        let path = self.file("turn.json");
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => format!("{e}").into_bytes(),
        };
        let problem = match serde_json::from_slice::<SavedTurn>(&bytes) {
            Ok(turn) => return Some(turn),
            Err(e) => e.to_string(),
        };
        let aside = self.file("turn-unreadable.json");
        eprintln!(
            "agent: {}: not a turn this agent can read ({problem}); moved to {}",
            path.display(),
            aside.display()
        );
        self.report(std::fs::rename(&path, &aside).map_err(|e| format!("{}: {e}", path.display())));
        let saved = serde_json::from_slice::<Value>(&bytes).unwrap_or_default();
        let message = serde_json::from_value::<Incoming>(saved["message"].clone())
            .ok()
            .filter(|m| !m.from.is_empty());
        if let Some(message) = message {
            let words = format!(
                "I restarted in the middle of your request, but could not read the turn I had \
                 saved (/data/turn.json: {problem}). I moved it to /data/turn-unreadable.json. \
                 Please ask again; I may have done part of it already."
            );
            self.refuse_turn(&message, words, None);
        }
        None
    }

    /// Answers a text without running its turn (a refusal, a limit, a failure before the first
    /// step): only to its sender, with `for` and `room` as a turn's answer would have.
    fn refuse_turn(&mut self, message: &Incoming, words: String, stopped: Option<Stopped>) {
        let mut body = answer_body(message, words, &Usage::default(), Some(0.0), stopped);
        if let Some(room) = message.body["room"].as_str() {
            body["room"] = json!(room);
        }
        self.reply(message, body);
    }

    /// Starts a turn for a text message, in its conversation, unless its person's day is spent.
    fn start(&mut self, message: Incoming) -> Flow {
        eprintln!("agent: a turn for {} from {}", message.id, message.from);
        let conversation = match Conversation::of_text(&message, &self.data) {
            Ok(conversation) => conversation,
            Err(words) => {
                self.refuse_turn(&message, format!("I cannot take this: {words}."), None);
                return Flow::Continue;
            }
        };
        let config = match config::load(&self.file("config.json")) {
            Ok(config) => config,
            Err(words) => {
                self.refuse_turn(&message, words, None);
                return Flow::Continue;
            }
        };
        let mut turn = SavedTurn::new(message, conversation);
        // An actor's conversation: whom the actor acts for decides the turn's rights and payer.
        let mut actors_history = None;
        if let Conversation::Actor(actor) = &turn.conversation {
            let mut history = self.load_history(&turn.conversation);
            let trace = turn.message.trace.clone();
            let Some(principal) = self.ask_principal(&mut history, actor, trace) else {
                // A shutdown came: the text waits for its turn in the next instance.
                self.inbox.turns.insert(0, turn.message);
                self.save_inbox();
                return Flow::Stop;
            };
            turn.principal = Some(principal);
            actors_history = Some(history);
        }
        if let Some(words) = self.past_day_cap(&config, &turn) {
            self.refuse_turn(&turn.message, words, Some(Stopped::Budget));
            return Flow::Continue;
        }
        // An actor's turns count against its owner's hourly limit too.
        if let (Some(owner), Some(limit)) = (
            turn.principal.as_ref().and_then(Principal::person),
            fairness::turns_per_hour(turn.who().tier),
        ) && let Some(wait) = self
            .starts
            .wait(&owner.0, limit, 0, unix_seconds(self.host.now()))
        {
            let words = format!(
                "I cannot take this now: {} (who owns this actor) has started {limit} turns \
                 within the last hour, the most {} may; ask again in {}.",
                owner.0,
                owner.1.a(),
                budget::duration_words(wait)
            );
            self.refuse_turn(&turn.message, words, None);
            return Flow::Continue;
        }
        let sender = fairness::sender(&turn.message);
        self.turns_served += 1;
        self.served.insert(sender.clone(), self.turns_served);
        if !self.candidate {
            let now = unix_seconds(self.host.now());
            let recorded = self.starts.record(&self.data, &sender, now);
            self.report(recorded);
            if let Some((owner, _)) = turn.principal.as_ref().and_then(Principal::person) {
                let recorded = self.starts.record(&self.data, &owner, now);
                self.report(recorded);
            }
        }
        if let (Conversation::Person(person), Tier::Owner) = (&turn.conversation, turn.who().tier) {
            self.report(conversations::adopt_legacy(&self.data, person).map(|_| ()));
        }
        let mut history = match actors_history {
            Some(history) => history,
            None => self.load_history(&turn.conversation),
        };
        history.entries.extend(self.take_notes(&turn.conversation));
        let text = turn.message.body["text"].as_str().unwrap_or_default();
        // In a room several people speak: each message names its person.
        let by = match (&turn.conversation, &turn.message.person) {
            (Conversation::Room(_), Some(person)) => format!(" by {person}"),
            _ => String::new(),
        };
        history.entries.push(Entry::user(format!(
            "Message {} from {}{by}:\n{text}",
            turn.message.id, turn.message.from
        )));
        if let Some(Principal::Nobody { why }) = &turn.principal {
            history.entries.push(Entry::user(format!(
                "(This turn has a guest's rights: {why}. Messages to actors, builds, writing \
                 files and the broker's requests other than list are refused.)"
            )));
        }
        self.work(&config, history, turn)
    }

    /// Asks the broker whom `actor` acts for (DESIGN §18), waiting at most
    /// [`PRINCIPAL_WAIT_SECONDS`] for the broker's own reply; `None` when a shutdown came.
    /// A candidate does not ask: its transcripts expect its answer as its next message, and a
    /// test instance needs no one's rights.
    fn ask_principal(
        &mut self,
        history: &mut History,
        actor: &str,
        trace: Option<String>,
    ) -> Option<Principal> {
        if self.candidate {
            return Some(Principal::Nobody {
                why: "a candidate (a test instance of the agent) acts for nobody".into(),
            });
        }
        let conversation = Conversation::Actor(actor.to_string());
        history.sent += 1;
        let id = format!("{}.p{}", conversation.tag(), history.sent);
        let published = format!("{}/{id}", self.actor);
        // Saved before asking: a restart must not reuse the id.
        self.report(self.save_history(&conversation, history));
        self.remember_sent(&published, "broker");
        // Asked before the turn's span begins: it continues the trace of the turn's message.
        self.send(Outgoing {
            to: Some("broker".into()),
            id: Some(id),
            reply_to: None,
            speaks_for: None,
            trace,
            body: json!({"type": "principal", "actor": actor}),
        });
        let expected = Expected::Actor("broker");
        Some(
            match self.await_reply(&published, PRINCIPAL_WAIT_SECONDS, expected) {
                Awaited::Reply(reply) => Principal::of_reply(actor, &reply),
                Awaited::TimedOut | Awaited::Stopped => Principal::Nobody {
                    why: format!(
                        "the broker did not say within {PRINCIPAL_WAIT_SECONDS} s whom actor \
                         {actor} acts for"
                    ),
                },
                Awaited::Stop => return None,
            },
        )
    }

    /// The words that end or refuse a turn whose payer has spent their day's cap, or when the
    /// world's turns together have spent the world's (`max_world_day_usd`); `None` while neither
    /// is reached (or the model has no price).
    fn past_day_cap(&self, config: &Config, turn: &SavedTurn) -> Option<String> {
        config.price?;
        let spend = Spend::load(&self.file("spend.json"), self.host.now());
        let resets = budget::duration_words(budget::until_midnight(self.host.now()));
        let payer = turn.payer();
        let tier = turn.who().tier;
        let cap = match payer {
            Payer::World => config.max_day_usd,
            _ => config.day_cap(tier),
        };
        let spent = spend.of(&payer);
        if spent >= cap {
            let (whose, setting) = match (&payer, tier) {
                (Payer::Person(person), Tier::Owner) => (format!("{person}'s"), "max_day_usd"),
                (Payer::Person(person), _) => (format!("{person}'s"), "tier_day_usd"),
                (Payer::Actor(actor), _) => (format!("actor {actor}'s"), "tier_day_usd"),
                (Payer::World, _) => ("the world's".to_string(), "max_day_usd"),
            };
            return Some(format!(
                "I stopped: {whose} model spending today is {}, and the daily cap of {} is {} \
                 ({setting} in /data/config.json). It resets at midnight UTC, in {resets}. \
                 Others are not affected; an owner can raise the cap.",
                budget::usd_words(spent),
                tier.a(),
                budget::usd_words(cap),
            ));
        }
        if spend.usd >= config.max_world_day_usd {
            return Some(format!(
                "I stopped: the world's model spending today is {}, and the world's daily cap \
                 over all turns is {} (max_world_day_usd in /data/config.json). It resets at \
                 midnight UTC, in {resets}; an owner can raise the cap.",
                budget::usd_words(spend.usd),
                budget::usd_words(config.max_world_day_usd),
            ));
        }
        None
    }

    /// Sends the broker `body` for the turn's person, under a new id tagged `kind` (saved
    /// first, so a restart never reuses it), and returns the id its answer will name.
    fn tell_broker(
        &mut self,
        history: &mut History,
        turn: &mut SavedTurn,
        kind: char,
        body: Value,
    ) -> String {
        history.sent += 1;
        let id = format!("{}.{kind}{}", turn.conversation.tag(), history.sent);
        let published = format!("{}/{id}", self.actor);
        self.save(history, turn);
        self.remember_sent(&published, "broker");
        self.send(Outgoing {
            to: Some("broker".into()),
            id: Some(id),
            reply_to: None,
            speaks_for: self.speaks_for(turn),
            trace: None,
            body,
        });
        published
    }

    /// Asks the broker whether the turn may spend what it has (a `spend` rule, DESIGN §25),
    /// once its cost passes what was cleared: the answer says up to where, or holds the turn
    /// until a person decides. A broker that does not answer does not stop the turn.
    fn clear_spend(
        &mut self,
        config: &Config,
        history: &mut History,
        turn: &mut SavedTurn,
    ) -> Cleared {
        if config.price.is_none() || turn.cost_usd <= 0.0 || turn.message.from.is_empty() {
            return Cleared::Go;
        }
        match turn.spend_cleared {
            Some(SpendCleared::Unlimited) => return Cleared::Go,
            Some(SpendCleared::UpTo(usd)) if turn.cost_usd <= usd => return Cleared::Go,
            _ => {}
        }
        let spend = json!({"type": "spend", "usd": turn.cost_usd});
        let published = self.tell_broker(history, turn, 's', spend);
        let mut reply =
            match self.await_reply(&published, SPEND_PATIENCE, Expected::Actor("broker")) {
                Awaited::Reply(reply) => reply,
                Awaited::TimedOut => return Cleared::Go,
                Awaited::Stopped => {
                    return Cleared::End("I stopped, as you asked.".into(), Some(Stopped::Stop));
                }
                Awaited::Stop => return Cleared::Shutdown,
            };
        if reply.kind() == "held" {
            let reason = reply.body["reason"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            self.tell(
                turn,
                json!({"type": "progress", "text": format!("\n({reason})\n")}),
            );
            let now = unix_seconds(self.host.now());
            let until = reply.body["expires"].as_u64().unwrap_or(now);
            reply = match self.await_reply(
                &published,
                until.saturating_sub(now),
                Expected::Actor("broker"),
            ) {
                Awaited::Reply(reply) => reply,
                Awaited::TimedOut => {
                    return Cleared::End(
                        format!("I stopped: {reason}, and nobody decided in time."),
                        Some(Stopped::Budget),
                    );
                }
                Awaited::Stopped => {
                    return Cleared::End("I stopped, as you asked.".into(), Some(Stopped::Stop));
                }
                Awaited::Stop => return Cleared::Shutdown,
            };
        }
        match (reply.kind(), reply.body["up_to_usd"].as_f64()) {
            ("spend_ok", Some(usd)) => turn.spend_cleared = Some(SpendCleared::UpTo(usd)),
            ("spend_ok", None) => turn.spend_cleared = Some(SpendCleared::Unlimited),
            _ => {
                let why = reply.body["reason"]
                    .as_str()
                    .unwrap_or("the broker refused");
                return Cleared::End(format!("I stopped: {why}."), Some(Stopped::Budget));
            }
        }
        self.save(history, turn);
        Cleared::Go
    }

    /// Finishes a turn saved by an earlier instance: every call left open gets a result (the
    /// awaited reply if it comes now), then the model hears that it restarted and goes on.
    fn resume(&mut self, mut turn: SavedTurn) -> Flow {
        eprintln!(
            "agent: resuming the turn for {} from {}",
            turn.message.id, turn.message.from
        );
        self.current = Some(turn.message.id.clone());
        self.running = Some((turn.conversation.clone(), turn.message.clone()));
        turn.resumes += 1;
        if let Some(trace) = &mut turn.trace {
            trace.interrupt(unix_ms(self.host.now()), INTERRUPTED);
        }
        self.enter(&mut turn);
        let mut history = self.load_history(&turn.conversation);
        if turn.resumes >= MAX_RESUMES {
            let words = format!(
                "I stopped this turn: I restarted {} times in a row in the middle of it without \
                 finishing a step (each restart repeats a paid request to the model, so I do not \
                 go on in a loop). Look at /actor/agent/stderr.log for what happened, then ask \
                 me again.",
                turn.resumes
            );
            self.close_open_calls(&mut history, INTERRUPTED);
            let words = self.failure_words(&turn, words);
            return self.conclude(history, turn, Outcome::Cut(words, None));
        }
        self.save(&mut history, &turn);
        let config = match config::load(&self.file("config.json")) {
            Ok(config) => config,
            Err(words) => {
                self.close_open_calls(&mut history, INTERRUPTED);
                return self.conclude(history, turn, Outcome::Cut(words, None));
            }
        };
        // A batch of sub-agents the restart cut off: the same ones report.
        let mut delegated = HashMap::new();
        if !turn.delegations.is_empty() {
            match self.resume_delegations(&config, &mut history, &mut turn) {
                Some(outputs) => delegated = outputs,
                None => return self.stop(&history, &turn),
            }
        }
        for id in history.open_calls() {
            if let Some(output) = delegated.remove(&id) {
                history.entries.push(Entry::ToolResult { id, output });
                continue;
            }
            let output = match turn.waiting.clone().filter(|w| w.call_id == id) {
                Some(waiting) if waiting.question => {
                    // The same question, waited for until its deadline, whatever the restarts.
                    let now = unix_seconds(self.host.now());
                    let left = waiting
                        .until
                        .map_or(waiting.seconds, |u| u.saturating_sub(now));
                    let asked = turn.conversation.clone();
                    let expected = Expected::PeopleOf(&asked);
                    let awaited = self.await_reply(&waiting.reply_to, left, expected);
                    match answer_words(awaited, &waiting.reply_to) {
                        Some(words) => format!("(asked before the agent restarted) {words}"),
                        None => return self.stop(&history, &turn),
                    }
                }
                Some(waiting) => match self.await_reply(
                    &waiting.reply_to,
                    // A wait for a decision keeps its deadline, whatever the restarts.
                    waiting.until.map_or(waiting.seconds, |until| {
                        until.saturating_sub(unix_seconds(self.host.now()))
                    }),
                    waiting
                        .to
                        .as_deref()
                        .map_or(Expected::Anyone, Expected::Actor),
                ) {
                    Awaited::Reply(reply) => format!(
                        "The agent restarted while waiting for this reply (for example because \
                         it upgraded itself); after the restart it came: {}",
                        reply.to_line()
                    ),
                    Awaited::TimedOut | Awaited::Stopped => format!(
                        "{INTERRUPTED}; no reply to {} came within {} s after the restart (it \
                         may still come: use wait_for_messages)",
                        waiting.reply_to, waiting.seconds
                    ),
                    Awaited::Stop => return self.stop(&history, &turn),
                },
                None => INTERRUPTED.to_string(),
            };
            history.entries.push(Entry::ToolResult { id, output });
        }
        turn.waiting = None;
        history.entries.extend(self.take_notes(&turn.conversation));
        let what = match &turn.goal {
            Some(goal) => format!("the round of goal {goal} you were in; end it with goal_status"),
            None => format!(
                "the turn you were in: your last text will answer message {} from {}",
                turn.message.id, turn.message.from
            ),
        };
        history.entries.push(Entry::user(format!(
            "(You restarted, for example after upgrading yourself, and now run as version {} \
             of `{}`. Finish {what}. Check what an interrupted step did before repeating it.)",
            self.version, self.actor
        )));
        self.work(&config, history, turn)
    }

    /// The step loop: ask the model, run the tools it calls, until it answers in text, fails,
    /// is stopped, reaches its budget, or reaches [`MAX_STEPS`].
    fn work(&mut self, config: &Config, mut history: History, mut turn: SavedTurn) -> Flow {
        self.enter(&mut turn);
        self.current = Some(turn.message.id.clone());
        self.running = Some((turn.conversation.clone(), turn.message.clone()));
        self.stop_asked = false;
        self.round_of = turn.goal.clone();
        self.offer_mcp_tools(config, &turn);
        let (answer, stopped) = loop {
            self.take_arrived();
            if let Some(end) = self.limit(config, &turn) {
                break end;
            }
            match self.clear_spend(config, &mut history, &mut turn) {
                Cleared::Go => {}
                Cleared::End(words, stopped) => break (self.failure_words(&turn, words), stopped),
                Cleared::Shutdown => return self.stop(&history, &turn),
            }
            self.save(&mut history, &turn);
            let reply = match self.step(config, &mut history, &mut turn) {
                Asked::Reply(reply) => reply,
                Asked::Failed(failure) => {
                    break (self.failure_words(&turn, failure.words().to_string()), None);
                }
                Asked::End(words, stopped) => break (self.failure_words(&turn, words), stopped),
                Asked::Shutdown => return self.stop(&history, &turn),
            };
            turn.steps += 1;
            turn.resumes = 0;
            history.entries.extend(reply.entries.iter().cloned());
            if !reply.has_tool_calls() {
                let text = reply.text();
                match (&reply.cut_short, text.is_empty()) {
                    (None, false) => return self.conclude(history, turn, Outcome::Answered(text)),
                    (None, true) => {
                        break ("(The model ended its turn without any text.)".into(), None);
                    }
                    (Some(why), true) => {
                        break (
                            format!("The model stopped ({why}) before it wrote an answer."),
                            None,
                        );
                    }
                    (Some(why), false) => {
                        let text = format!("{text}\n\n(The answer was cut short: {why}.)");
                        return self.conclude(history, turn, Outcome::Answered(text));
                    }
                }
            }
            // The reply's `delegate` calls run together, when the first of them comes.
            let mut delegated: Option<HashMap<String, String>> = None;
            for entry in &reply.entries {
                let Entry::ToolCall {
                    id,
                    name,
                    arguments,
                    ..
                } = entry
                else {
                    continue;
                };
                if self.stop_asked {
                    // The person stopped the turn during this step: what is left is not run.
                    history.entries.push(Entry::ToolResult {
                        id: id.clone(),
                        output: NOT_RUN.into(),
                    });
                    continue;
                }
                if name == "delegate" && self.offers(name, &turn) {
                    if delegated.is_none() {
                        let calls = delegate_calls(&reply.entries);
                        match self.delegate_all(config, &mut history, &mut turn, &calls) {
                            Some(outputs) => delegated = Some(outputs),
                            None => return self.stop(&history, &turn),
                        }
                    }
                    let output = (delegated.as_mut().and_then(|d| d.remove(id)))
                        .unwrap_or_else(|| NOT_RUN.into());
                    history.entries.push(Entry::ToolResult {
                        id: id.clone(),
                        output: cut_output(output),
                    });
                    continue;
                }
                turn.done.push(shorten(
                    &format!("{name} {arguments}"),
                    STEP_DESCRIPTION_CHARS,
                ));
                let preview = preview(name, arguments);
                let span = self.span_id();
                let step = Step {
                    id: span.clone(),
                    start_ms: unix_ms(self.host.now()),
                    end_ms: None,
                    error: None,
                    what: What::Tool {
                        tool: name.clone(),
                        preview: preview.clone(),
                        ok: true,
                    },
                };
                // The call's lines (a build asked of `cargo`, a message to an actor) name its span.
                if let Some(trace) = &mut turn.trace
                    && trace.add(step)
                {
                    self.trace = trace.line_trace(Some(&span));
                }
                self.save(&mut history, &turn);
                self.tell(
                    &turn,
                    json!({"type": "tool", "tool": name, "state": "started", "preview": preview}),
                );
                let began = Instant::now();
                let output = match self.call(&mut history, &mut turn, id, name, arguments) {
                    Some(output) => output,
                    None => return self.stop(&history, &turn),
                };
                let ok = !output.starts_with("error");
                if let Some(trace) = &mut turn.trace {
                    let failed = (!ok).then_some(output.as_str());
                    trace.finish_tool(&span, unix_ms(self.host.now()), failed);
                }
                self.tell(
                    &turn,
                    json!({"type": "tool", "tool": name, "state": "finished",
                    "ok": ok, "seconds": round_seconds(began.elapsed())}),
                );
                // Back to the turn's span.
                self.enter(&mut turn);
                history.entries.push(Entry::ToolResult {
                    id: id.clone(),
                    output: cut_output(output),
                });
            }
            if turn.round_end.is_some() {
                return self.conclude(history, turn, Outcome::Status);
            }
        };
        self.conclude(history, turn, Outcome::Cut(answer, stopped))
    }

    /// Asks each MCP server with a tool for the turn's person's tier for its tools, once per
    /// turn; a server that fails is left out of this turn, with a note on stderr.
    fn offer_mcp_tools(&mut self, config: &Config, turn: &SavedTurn) {
        for problem in &config.problems {
            eprintln!("agent: {problem}");
        }
        let tier = turn.who().tier;
        let mut offered = Vec::new();
        let arrived = &mut self.arrived;
        let mut client = mcp::Client {
            host: &mut self.host,
            sessions: &mut self.mcp,
            meanwhile: &mut |messages| {
                arrived.add(messages);
                Heard::GoOn
            },
        };
        let servers = config.mcp_servers.iter();
        for server in servers.filter(|s| s.tools.values().any(|tiers| tiers.contains(&tier))) {
            match client.list_tools(server) {
                Ok(listed) => offered.extend(mcp::offered(server, tier, listed)),
                Err(mcp::Failed::Said(why)) => {
                    eprintln!("agent: {why}; its tools are left out of this turn");
                }
                // The shutdown is seen by the step's next wait.
                Err(mcp::Failed::Shutdown) => break,
            }
        }
        self.mcp_turn = (config.mcp_servers.clone(), offered);
    }

    /// Ends the turn: a message's turn answers it; a goal's round reports to the goal. Then its
    /// spans go to the broker.
    fn conclude(&mut self, mut history: History, mut turn: SavedTurn, outcome: Outcome) -> Flow {
        self.close_open_calls(&mut history, NOT_RUN);
        // Sub-agents a turn that ends early leaves behind are dismissed with it.
        self.dismiss_left(&mut turn);
        if let Outcome::Cut(words, _) = &outcome {
            // Words the model did not write still reached the person; the next turn should
            // know them.
            history.entries.push(Entry::assistant(words.clone()));
        }
        let (stopped, error) = match &outcome {
            Outcome::Cut(words, stopped) => (
                stopped.map(Stopped::name),
                stopped.is_none().then(|| words.clone()),
            ),
            Outcome::Answered(_) | Outcome::Status => (None, None),
        };
        // The answer's waterfall and cost line stay with it in the history, so a page that
        // reloads shows the turn as it showed it live.
        if !matches!(outcome, Outcome::Status) {
            let waterfall = turn
                .trace
                .as_ref()
                .map(|trace| trace.waterfall(unix_ms(self.host.now())).0);
            let cost = (!turn.unpriced).then_some(turn.cost_usd);
            let mut ending = json!({"usage": usage_body(&turn.usage, cost)});
            if let Some(stopped) = stopped {
                ending["stopped"] = json!(stopped);
            }
            let answer = history
                .entries
                .iter_mut()
                .rev()
                .find_map(|entry| match entry {
                    Entry::Assistant {
                        text, steps, usage, ..
                    } if !text.is_empty() => Some((steps, usage)),
                    _ => None,
                });
            if let Some((steps, usage)) = answer {
                if let Some(waterfall) = waterfall {
                    *steps = Some(Value::Array(waterfall));
                }
                *usage = Some(ending);
            }
        }
        match (&turn.goal, outcome) {
            (None, Outcome::Answered(text)) => self.answer_ending(&turn, text, None),
            (None, Outcome::Cut(words, stopped)) => self.answer_ending(&turn, words, stopped),
            // `goal_status` is refused outside a goal's rounds, so this does not happen; an
            // answer is owed all the same.
            (None, Outcome::Status) => {
                let words = turn
                    .round_end
                    .take()
                    .map(|end| end.summary)
                    .unwrap_or_default();
                self.answer_ending(&turn, words, None);
            }
            (Some(_), outcome) => self.end_round(&mut turn, outcome),
        }
        self.report_spans(&turn, stopped, error);
        self.finish(&mut history, &turn.conversation)
    }

    /// Begins the turn's trace at its start (kept in `turn.json` from its first save on) and
    /// lets the agent's lines carry the turn's span.
    fn enter(&mut self, turn: &mut SavedTurn) {
        if turn.trace.is_none() {
            let now = unix_ms(self.host.now());
            let host = &mut self.host;
            turn.trace = Some(TurnTrace::begin(&turn.message, now, &mut || host.random()));
        }
        self.trace = turn.trace.as_ref().and_then(|t| t.line_trace(None));
    }

    fn span_id(&mut self) -> String {
        spans::span_id(&mut || self.host.random())
    }

    /// Sends the ended turn's spans to the broker as one `spans` request, however the turn
    /// ended (DESIGN §22); its answer is dropped where it arrives (`keep`). The request is the
    /// agent's own report, for no person: it carries no `"as"`. A candidate's turns are tests,
    /// not the world's, and are not reported.
    fn report_spans(
        &mut self,
        turn: &SavedTurn,
        stopped: Option<&'static str>,
        error: Option<String>,
    ) {
        let Some(trace) = turn.trace.as_ref().filter(|_| !self.candidate) else {
            return;
        };
        let ended = Ended {
            end_ms: unix_ms(self.host.now()),
            stopped,
            error,
        };
        let person = turn.who().person;
        let body = trace.request(&self.actor, &turn.message.id, person.as_deref(), ended);
        self.send(Outgoing {
            to: Some("broker".into()),
            id: None,
            reply_to: None,
            speaks_for: None,
            trace: None,
            body,
        });
    }

    /// Whether the turn must end before its next step, and with what words: a stop asked for,
    /// the step limit, or a budget reached.
    fn limit(&mut self, config: &Config, turn: &SavedTurn) -> Option<(String, Option<Stopped>)> {
        if self.stop_asked {
            let words = "I stopped, as you asked.".to_string();
            return Some((self.failure_words(turn, words), Some(Stopped::Stop)));
        }
        if turn.steps >= MAX_STEPS {
            return Some((self.limit_words(turn), Some(Stopped::Steps)));
        }
        config.price?;
        let most = self.turn_budget(config);
        if turn.cost_usd >= most {
            let words = match self.subagent {
                Some(_) => format!(
                    "I stopped: I have spent {}, all the budget my parent gave me ({}).",
                    budget::usd_words(turn.cost_usd),
                    budget::usd_words(most)
                ),
                None => format!(
                    "I stopped: this turn has cost {}, and a turn may cost at most {} \
                     (max_turn_usd in /data/config.json). Ask me to go on if there is more to do.",
                    budget::usd_words(turn.cost_usd),
                    budget::usd_words(most)
                ),
            };
            return Some((self.failure_words(turn, words), Some(Stopped::Budget)));
        }
        let words = self.past_day_cap(config, turn)?;
        Some((self.failure_words(turn, words), Some(Stopped::Budget)))
    }

    /// One model step: the request (compacting the history first when it would not fit), its
    /// retries, and its price.
    fn step(&mut self, config: &Config, history: &mut History, turn: &mut SavedTurn) -> Asked {
        // One compaction before the request and one after a refusal, at most: each is a paid
        // request, and a history that a compaction cannot shrink must not loop.
        let (mut compacted, mut compacted_after_error) = (false, false);
        loop {
            let request = self.request(config, history, turn);
            let estimate = context::estimate(request.body.len(), self.bytes_per_token(turn));
            let bytes = request.body.len();
            if !compacted && context::too_big(estimate, config) {
                compacted = true;
                match self.compact(config, history, turn) {
                    Some(Asked::Reply(_)) => continue,
                    Some(end) => return end,
                    None => {}
                }
            }
            match self.ask(config, &request, turn, true) {
                Asked::Reply(reply) => {
                    if reply.usage.prompt_tokens() > 0 {
                        turn.bytes_per_token =
                            Some(bytes as f64 / reply.usage.prompt_tokens() as f64);
                    }
                    return Asked::Reply(reply);
                }
                Asked::Failed(Failure::ContextTooLong(_)) if !compacted_after_error => {
                    (compacted, compacted_after_error) = (true, true);
                    // The estimate was wrong: learn from the refusal that the window is smaller.
                    turn.bytes_per_token = Some(
                        bytes as f64 / (config.context_window as f64 * context::COMPACT_AT) * 0.9,
                    );
                    if let Some(end @ (Asked::Failed(_) | Asked::End(..) | Asked::Shutdown)) =
                        self.compact(config, history, turn)
                    {
                        return end;
                    }
                }
                other => return other,
            }
        }
    }

    fn bytes_per_token(&self, turn: &SavedTurn) -> f64 {
        turn.bytes_per_token
            .filter(|b| b.is_finite() && *b > 0.5)
            .unwrap_or(context::DEFAULT_BYTES_PER_TOKEN)
    }

    /// The next step's request: the history as [`context::view`] shows it.
    fn request(&self, config: &Config, history: &History, turn: &SavedTurn) -> HttpRequest {
        let opening = format!("Message {} from ", turn.message.id);
        let turn_start = history
            .entries
            .iter()
            .rposition(|e| matches!(e, Entry::User { text } if text.starts_with(&opening)))
            .unwrap_or(0);
        let entries = context::view(&history.entries, turn_start);
        // `goal_status` ends a goal's round: other turns are not offered it; a sub-agent is
        // offered its role's tools.
        let tools: Vec<tools::ToolSpec> = tools::specs()
            .into_iter()
            .filter(|t| self.offers(&t.name, turn))
            .chain(self.mcp_turn.1.iter().cloned())
            .filter(|t| self.subagent.as_ref().is_none_or(|s| s.offers(&t.name)))
            .collect();
        provider::request(config, &self.system_prompt(&turn.who()), &entries, &tools)
    }

    /// Replaces the older history by a handoff summary the model writes (DESIGN §12, Context).
    /// `None` when there was nothing to compact; otherwise how asking for the summary ended
    /// (its reply is already in the history).
    fn compact(
        &mut self,
        config: &Config,
        history: &mut History,
        turn: &mut SavedTurn,
    ) -> Option<Asked> {
        if history.entries.len() < 2 {
            return None;
        }
        eprintln!("agent: compacting the conversation");
        let window = config.context_window as f64;
        let per_token = self.bytes_per_token(turn);
        let transcript = context::transcript(
            &history.entries,
            (window * context::TRANSCRIPT_SHARE * per_token) as usize,
        );
        self.tell(
            turn,
            json!({"type": "progress", "text": "\n(My conversation is near the model's context \
                window, so I am writing a summary of its older part to go on from.)\n"}),
        );
        let request = provider::request(
            config,
            context::SUMMARY_PROMPT,
            &[Entry::user(transcript)],
            &[],
        );
        let reply = match self.ask(config, &request, turn, false) {
            Asked::Reply(reply) => reply,
            Asked::Failed(failure) => {
                return Some(Asked::End(
                    format!(
                        "I could not compact my conversation to fit the model's context window: \
                         {}",
                        failure.words()
                    ),
                    None,
                ));
            }
            end @ Asked::End(..) => return Some(end),
            Asked::Shutdown => return Some(Asked::Shutdown),
        };
        let summary = reply.text();
        if summary.trim().is_empty() {
            return Some(Asked::End(
                "I could not compact my conversation: the model wrote an empty summary.".into(),
                None,
            ));
        }
        history.entries = context::compacted(
            &history.entries,
            summary,
            (window * context::RECENT_USERS_SHARE * per_token) as usize,
        );
        self.save(history, turn);
        Some(Asked::Reply(reply))
    }

    /// Sends `request`, streaming its text to the person when `show` is set, and tries again
    /// after the failures worth it; the response is priced into the turn and the day.
    fn ask(
        &mut self,
        config: &Config,
        request: &HttpRequest,
        turn: &mut SavedTurn,
        show: bool,
    ) -> Asked {
        let mut attempt = 0;
        loop {
            let start_ms = unix_ms(self.host.now());
            let posted = self.post(config, request, turn, show);
            let failure = match posted {
                Ok(reply) => {
                    let cost = self.charge(config, turn, &reply.usage);
                    self.add_model_step(config, turn, start_ms, (reply.usage, cost), None);
                    return Asked::Reply(reply);
                }
                // The request is made again after the restart; this one is not reported.
                Err(None) => return Asked::Shutdown,
                Err(Some(Failure::Dropped)) => {
                    let why = Some(Failure::Dropped.words().to_string());
                    self.add_model_step(config, turn, start_ms, (Usage::default(), None), why);
                    // The stop is weighed now (who may stop this turn); one refused asks again.
                    self.take_arrived();
                    if self.stop_asked {
                        return Asked::End("I stopped, as you asked.".into(), Some(Stopped::Stop));
                    }
                    continue;
                }
                Err(Some(failure)) => failure,
            };
            let why = Some(failure.words().to_string());
            self.add_model_step(config, turn, start_ms, (Usage::default(), None), why);
            let after = match failure {
                Failure::Retry { after, .. } if attempt < MAX_RETRIES => after,
                Failure::Retry { why, .. } => {
                    return Asked::Failed(Failure::Fatal(format!(
                        "{why} I tried {} times; the provider may be busy, so ask again in a \
                         while.",
                        attempt + 1
                    )));
                }
                _ => return Asked::Failed(failure),
            };
            let wait = after
                .unwrap_or(RETRY_BACKOFF * 2u32.pow(attempt))
                .min(MAX_RETRY_WAIT);
            attempt += 1;
            let why = failure.words().trim_end_matches('.').to_string();
            eprintln!("agent: {why}; retry {attempt} of {MAX_RETRIES} in {wait:?}");
            self.tell(
                turn,
                json!({"type": "progress", "text": format!(
                    "\n({why}. I wait {} and try again, {attempt} of {MAX_RETRIES}.)\n",
                    budget::duration_words(wait.max(Duration::from_secs(1)))
                )}),
            );
            match self.pause(wait) {
                Awaited::Stop => return Asked::Shutdown,
                Awaited::Stopped => {
                    return Asked::End("I stopped, as you asked.".into(), Some(Stopped::Stop));
                }
                Awaited::Reply(_) | Awaited::TimedOut => {}
            }
        }
    }

    /// One POST with its streamed answer; `Err(None)` when a shutdown came.
    fn post(
        &mut self,
        config: &Config,
        request: &HttpRequest,
        turn: &SavedTurn,
        show: bool,
    ) -> Result<Reply, Option<Failure>> {
        let mut stream = provider::Stream::new(config.api);
        let mut broken: Option<Failure> = None;
        let audience = self.audience(turn);
        let room = turn.conversation.room().map(str::to_string);
        let id = turn.message.id.clone();
        let trace = self.trace.clone();
        let progress = &mut self.progress;
        let arrived = &mut self.arrived;
        let posted = self.host.post(
            request,
            &mut |bytes| {
                if broken.is_none() && !bytes.is_empty() {
                    match stream.feed(bytes) {
                        Ok(text) if show => progress.pending.push_str(&text),
                        Ok(_) => {}
                        Err(failure) => broken = Some(failure),
                    }
                }
                let Some(text) = progress.due(Instant::now()) else {
                    return Vec::new();
                };
                let body = json!({"type": "progress", "text": text});
                let mut lines = addressed(&audience, room.as_deref(), Some(&id), &body, None);
                for line in &mut lines {
                    line.trace = trace.clone();
                }
                lines
            },
            // In the file before the host waits again; kept by the next wait, or after the step.
            // A stop for this turn drops the request at once: the rest of the answer could call
            // a tool (a deploy), and none that comes after a stop may run.
            &mut |messages| {
                let stop = messages.iter().any(|m| stops_turn(m, &id));
                arrived.add(messages);
                if stop { Heard::Drop } else { Heard::GoOn }
            },
        );
        if !self.progress.pending.is_empty() {
            // The rest of the text goes now, keeping the batching interval.
            if let Some(last) = self.progress.last {
                std::thread::sleep(PROGRESS_INTERVAL.saturating_sub(last.elapsed()));
            }
            let text = std::mem::take(&mut self.progress.pending);
            self.tell(turn, json!({"type": "progress", "text": text}));
        }
        match posted {
            Posted::Streamed { .. } => match broken {
                Some(failure) => Err(Some(failure)),
                None => stream.finish().map_err(Some),
            },
            Posted::Refused(response) => Err(Some(provider::failure(
                response.status,
                &response.headers,
                &response.body,
            ))),
            Posted::Failed { why, retry } => {
                let why = format!(
                    "I could not reach the model provider at {}: {why}",
                    config.base_url
                );
                Err(Some(if retry {
                    Failure::Retry { why, after: None }
                } else {
                    Failure::Fatal(why)
                }))
            }
            Posted::Stopped => Err(None),
            Posted::Dropped => Err(Some(Failure::Dropped)),
        }
    }

    /// Keeps the model request that began at `start_ms` and ends now in the turn's trace, with
    /// its usage and price, or why it failed.
    fn add_model_step(
        &mut self,
        config: &Config,
        turn: &mut SavedTurn,
        start_ms: f64,
        (usage, cost_usd): (Usage, Option<f64>),
        error: Option<String>,
    ) {
        let step = Step {
            id: self.span_id(),
            start_ms,
            end_ms: Some(unix_ms(self.host.now())),
            error,
            what: What::Model {
                model: config.model.clone(),
                api: config.api,
                usage,
                cost_usd,
            },
        };
        if let Some(trace) = &mut turn.trace {
            // Past the most a turn reports, the step is only counted (see `spans::MAX_SPANS`).
            trace.add(step);
        }
    }

    /// Adds a response's usage to the turn, and its price to the turn and the day; returns the
    /// price, `None` when the model has none.
    fn charge(&mut self, config: &Config, turn: &mut SavedTurn, usage: &Usage) -> Option<f64> {
        turn.usage.add(*usage);
        let priced = config
            .price
            .as_ref()
            .map(|price| budget::cost(usage, price));
        turn.unpriced |= priced.is_none();
        let cost = priced.unwrap_or(0.0);
        turn.cost_usd += cost;
        let path = self.file("spend.json");
        let mut spend = Spend::load(&path, self.host.now());
        spend.add(&turn.payer(), cost, usage);
        if !self.candidate {
            self.report(spend.save(&path));
        }
        priced
    }

    /// Waits `time`, keeping what arrives; ends early when the person stops the turn.
    fn pause(&mut self, time: Duration) -> Awaited {
        let deadline = Instant::now() + time;
        loop {
            if self.stop_asked {
                return Awaited::Stopped;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Awaited::TimedOut;
            }
            match self.receive(Some(left)) {
                Event::Message(m) => self.keep(m),
                Event::TimedOut => return Awaited::TimedOut,
                Event::Stop => return Awaited::Stop,
            }
        }
    }

    /// Keeps the messages that arrived while the model was asked (a `stop` among them counts),
    /// then removes their file, then keeps those the host has read since.
    fn take_arrived(&mut self) {
        while let Some(message) = self.arrived.next() {
            self.keep(message);
        }
        let removed = self.arrived.remove_if_empty();
        self.report(removed);
        for message in self.host.arrived() {
            self.keep(message);
        }
    }

    /// The next message: those read while the model was asked first, as they came first.
    /// Each caller keeps (or otherwise handles) a message before it asks for the next, so
    /// once none of them waits, their file can go.
    fn receive(&mut self, timeout: Option<Duration>) -> Event {
        if let Some(message) = self.arrived.next() {
            return Event::Message(message);
        }
        let removed = self.arrived.remove_if_empty();
        self.report(removed);
        self.host.receive(timeout)
    }

    /// Gives every call still without a result this `output`, so the history stays whole.
    fn close_open_calls(&self, history: &mut History, output: &str) {
        for id in history.open_calls() {
            history.entries.push(Entry::ToolResult {
                id,
                output: output.to_string(),
            });
        }
    }

    fn limit_words(&self, turn: &SavedTurn) -> String {
        format!(
            "I stopped: a turn may take at most {MAX_STEPS} model steps, and this one used them \
             all. What I did:\n- {}\nAsk me to go on if there is more to do.",
            turn.done.join("\n- ")
        )
    }

    fn failure_words(&self, turn: &SavedTurn, words: String) -> String {
        if turn.done.is_empty() {
            words
        } else {
            format!("{words}\nBefore that, I did:\n- {}", turn.done.join("\n- "))
        }
    }

    /// Who gets the turn's messages: the one who asked, on the surface they asked from, and in
    /// a room every other member on the surface they last spoke from (DESIGN §13).
    /// A text the scheduler sent for a person is answered where that person reads (the
    /// surface they last spoke from), not to the scheduler.
    fn audience(&self, turn: &SavedTurn) -> Vec<Recipient> {
        let message = &turn.message;
        // A sub-agent tells its parent alone, which passes it on nested under its call.
        if self.subagent.is_some() && !message.from.is_empty() {
            return vec![Recipient {
                to: message.from.clone(),
                reply_to: Some(message.id.clone()),
                person: message.person.clone(),
            }];
        }
        let asker = match &message.person {
            Some(person) if !conversations::is_surface(&message.from) => Recipient {
                to: self.surfaces.of(person).to_string(),
                reply_to: None,
                person: Some(person.clone()),
            },
            _ => Recipient {
                to: message.from.clone(),
                reply_to: Some(message.id.clone()),
                person: message.person.clone(),
            },
        };
        let mut all = vec![asker];
        let Conversation::Room(room) = &turn.conversation else {
            return all;
        };
        let members = Room::load(&self.data, room).map_or_else(Vec::new, |r| r.members);
        for member in members {
            if message.person.as_ref() != Some(&member) {
                all.push(Recipient {
                    to: self.surfaces.of(&member).to_string(),
                    reply_to: None,
                    person: Some(member),
                });
            }
        }
        all
    }

    /// Sends a message about the turn to its people (DESIGN §12: `turn` is the turn's message
    /// id, and the asker's copy replies to it). Flushes batched progress first so the order
    /// stays true.
    fn tell(&mut self, turn: &SavedTurn, body: Value) {
        self.tell_with_id(turn, body, None);
    }

    fn tell_with_id(&mut self, turn: &SavedTurn, body: Value, id: Option<String>) {
        if turn.message.from.is_empty() {
            return;
        }
        let audience = self.audience(turn);
        let (room, turn_id) = (turn.conversation.room(), Some(turn.message.id.as_str()));
        let mut messages = Vec::new();
        if body["type"] != "progress" && !self.progress.pending.is_empty() {
            let text = std::mem::take(&mut self.progress.pending);
            let pending = json!({"type": "progress", "text": text});
            messages.extend(addressed(&audience, room, turn_id, &pending, None));
        }
        self.progress.last = Some(Instant::now());
        messages.extend(addressed(&audience, room, turn_id, &body, id));
        for message in messages {
            self.send(message);
        }
    }

    /// Writes one line; while a turn runs, it carries the turn's trace unless it names its own.
    fn send(&mut self, mut message: Outgoing) {
        if message.trace.is_none() {
            message.trace = self.trace.clone();
        }
        self.host.send(&message);
    }

    /// The final reply of a turn, with its usage, to everyone who follows the turn.
    /// It carries the turn's waterfall: `steps`, and `steps_dropped` past
    /// [`spans::MAX_STEPS_SHOWN`]; and `rewindable`, whether it changed something to undo.
    fn answer_ending(&mut self, turn: &SavedTurn, text: String, stopped: Option<Stopped>) {
        let cost = (!turn.unpriced).then_some(turn.cost_usd);
        let mut body = answer_body(&turn.message, text, &turn.usage, cost, stopped);
        // A turn that changed an actor or a file has a checkpoint: it can be rewound.
        let kept = rewind::load(&self.data, &turn.message.id);
        body["rewindable"] = json!(kept.is_some());
        if self.subagent.is_some() {
            // The report says what changed, for the parent's person.
            let (files, actors) = kept.map_or_else(Default::default, |kept| {
                let files: Vec<String> = kept.paths.into_iter().map(|p| p.path).collect();
                (files, kept.actors)
            });
            body["changed"] = json!({"files": files, "actors": actors});
        }
        if let Some(trace) = &turn.trace {
            let (steps, dropped) = trace.waterfall(unix_ms(self.host.now()));
            body["steps"] = json!(steps);
            if dropped > 0 {
                body["steps_dropped"] = json!(dropped);
            }
        }
        self.tell(turn, body);
    }

    /// The prompt, with the agent's notes, who the turn acts for, and (in their own
    /// conversation) what is remembered about them.
    fn system_prompt(&self, who: &Who) -> String {
        let mut prompt = PROMPT.to_string() + &card::notes_section(&self.file("notes.md"));
        prompt.push_str(&who.prompt_section(&self.data));
        if let Some(subagent) = &self.subagent {
            prompt.push_str(&subagent.prompt_section());
        }
        if self.subagent.as_ref().is_none_or(|s| s.offers("delegate")) {
            let roles = sausage_roles::load(&self.file("roles"));
            prompt.push_str(&delegation::roles_section(&roles));
        }
        if let (Conversation::Person(person), Some(_)) = (&who.conversation, &who.person) {
            prompt.push_str(&conversations::memory_section(&self.data, person));
        }
        prompt
    }

    /// A shutdown came inside a turn: keep what already arrived, save, and let the agent exit.
    fn stop(&mut self, history: &History, turn: &SavedTurn) -> Flow {
        while let Event::Message(m) = self.receive(Some(Duration::ZERO)) {
            self.keep(m);
        }
        let mut history = history.clone();
        self.save(&mut history, turn);
        eprintln!("agent: shutdown inside a turn; it is saved in turn.json");
        Flow::Stop
    }

    fn finish(&mut self, history: &mut History, conversation: &Conversation) -> Flow {
        self.finished = self.current.take();
        self.trace = None;
        self.running = None;
        self.round_of = None;
        self.stop_asked = false;
        history.cut();
        self.report(self.save_history(conversation, history));
        self.end_turn();
        Flow::Continue
    }

    fn save_history(&self, conversation: &Conversation, history: &History) -> Result<(), String> {
        let dir = conversation.dir(&self.data);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        history::save(&conversation.history(&self.data), history)
    }

    fn end_turn(&mut self) {
        let path = self.file("turn.json");
        if path.exists() {
            self.report(
                std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display())),
            );
        }
    }

    /// The conversation; one that cannot be read is moved aside (kept for a person to look at)
    /// and the agent starts a new one, rather than being stuck for good.
    fn load_history(&mut self, conversation: &Conversation) -> History {
        let path = conversation.history(&self.data);
        history::load(&path).unwrap_or_else(|e| {
            let aside = conversation.dir(&self.data).join("history-unreadable.json");
            eprintln!(
                "agent: {e}; moved to {} and starting a new conversation",
                aside.display()
            );
            self.report(
                std::fs::rename(&path, &aside).map_err(|e| format!("{}: {e}", path.display())),
            );
            History::default()
        })
    }

    /// Saves the history and the turn, so a kill loses at most the step in progress.
    fn save(&mut self, history: &mut History, turn: &SavedTurn) {
        history.cut();
        self.report(self.save_history(&turn.conversation, history));
        self.report(write_json(&self.file("turn.json"), turn));
    }

    /// A file the agent cannot write costs it its memory, not its answer: the turn goes on.
    fn report(&self, result: Result<(), String>) {
        if let Err(e) = result {
            eprintln!("agent: {e}");
        }
    }
}

/// Whether `message` asks to stop the turn `turn`: such a message drops the turn's model request
/// before the agent weighs whether its sender may stop it (`obey_stop`); a refused one only costs
/// the request again.
/// The `delegate` calls of a reply: (call id, arguments).
fn delegate_calls(entries: &[Entry]) -> Vec<(String, Value)> {
    (entries.iter())
        .filter_map(|entry| match entry {
            Entry::ToolCall {
                id,
                name,
                arguments,
                ..
            } if name == "delegate" => Some((id.clone(), arguments.clone())),
            _ => None,
        })
        .collect()
}

fn stops_turn(message: &Incoming, turn: &str) -> bool {
    message.kind() == "stop" && message.body["turn"].as_str() == Some(turn)
}

/// `body` for each of `audience`, with `for` (its person), `room` and `turn` (the id of the
/// turn's message) when there are some; the asker's copy replies to the turn's message.
fn addressed(
    audience: &[Recipient],
    room: Option<&str>,
    turn: Option<&str>,
    body: &Value,
    id: Option<String>,
) -> Vec<Outgoing> {
    audience
        .iter()
        .filter(|r| !r.to.is_empty())
        .map(|recipient| {
            let mut body = body.clone();
            if let Some(turn) = turn {
                body["turn"] = json!(turn);
            }
            if let Some(person) = &recipient.person {
                body["for"] = json!(person);
            }
            if let Some(room) = room {
                body["room"] = json!(room);
            }
            Outgoing {
                to: Some(recipient.to.clone()),
                id: id.clone(),
                reply_to: recipient.reply_to.clone(),
                speaks_for: None,
                trace: None,
                body,
            }
        })
        .collect()
}

/// The final `text` of a turn (DESIGN §12), with its usage.
fn answer_body(
    message: &Incoming,
    text: String,
    usage: &Usage,
    cost_usd: Option<f64>,
    stopped: Option<Stopped>,
) -> Value {
    let mut body = json!({
        "type": "text", "text": text, "turn": message.id,
        "usage": usage_body(usage, cost_usd),
    });
    if let Some(stopped) = stopped {
        body["stopped"] = json!(stopped.name());
    }
    body
}

/// A turn's `usage` as its answer (and its history entry) tells it.
fn usage_body(usage: &Usage, cost_usd: Option<f64>) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cost_usd": cost_usd.map(|usd| (usd * 1e6).round() / 1e6),
    })
}

fn unix_seconds(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Seconds with a tenth, as a person reads a duration.
fn round_seconds(time: Duration) -> f64 {
    (time.as_secs_f64() * 10.0).round() / 10.0
}

/// Reads a JSON state file; `None` when it is missing or unreadable (which is logged).
fn read_json<T: for<'de> Deserialize<'de>>(path: &std::path::Path) -> Option<T> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes)
        .map_err(|e| eprintln!("agent: {}: ignored, not readable: {e}", path.display()))
        .ok()
}

fn write_json(path: &std::path::Path, value: &impl Serialize) -> Result<(), String> {
    // State files hold strings and JSON values only, so they always serialise.
    let text = serde_json::to_string_pretty(value).expect("state serialises");
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod delegate_tests;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod people_tests;

#[cfg(test)]
mod authority_tests;

#[cfg(test)]
mod arrived_tests;

#[cfg(test)]
mod rewind_tests;

#[cfg(test)]
mod spans_tests;

#[cfg(test)]
mod mcp_tests;
