//! Turns: the agent's main loop and the state machine of one turn (message → model step → tools →
//! … → answer), with what must survive a restart saved in `/data` after every step:
//! `history.json` (the conversation), `turn.json` (the turn in progress: the message that started
//! it, the steps so far, its usage, a reply being waited for), `inbox.json` (messages not yet
//! shown) and `spend.json` (the day's spending).
//! While a step streams, the person sees its text as `progress` messages; every tool call is
//! announced as `tool` started and finished; the final reply carries the turn's `usage`.
//! **Invariant:** a turn always ends with exactly one answer to the message that started it, in
//! words even when everything failed; a shutdown ends it only by saving it for the next start.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::budget::{self, Spend};
use crate::config::{self, Config};
use crate::context;
use crate::goals::{self, Goal, Goals};
use crate::history::{self, Entry, History};
use crate::host::{Event, Host, Incoming, Outgoing, Posted};
use crate::provider::{self, Failure, Reply, Usage, shorten};
use crate::tools::{self, DEFAULT_WAIT_SECONDS, MAX_WAIT_SECONDS, card, cut_output, string_arg};

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

/// The turn in progress, as `turn.json` keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedTurn {
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
    pub fn new(message: Incoming) -> SavedTurn {
        SavedTurn {
            message,
            steps: 0,
            done: Vec::new(),
            waiting: None,
            usage: Usage::default(),
            cost_usd: 0.0,
            unpriced: false,
            resumes: 0,
            bytes_per_token: None,
            goal: None,
            plan: Value::Null,
            round_end: None,
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
}

/// Messages kept for later, as `inbox.json` keeps them.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Inbox {
    /// Shown to the model at the next turn (or by `wait_for_messages`).
    #[serde(default)]
    notes: Vec<Incoming>,
    /// Texts that arrived during a turn: each starts its own turn after it.
    #[serde(default)]
    turns: Vec<Incoming>,
}

/// Whether the agent goes on or must exit (a shutdown came; everything is saved).
#[derive(Debug, PartialEq)]
pub enum Flow {
    Continue,
    Stop,
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
    /// The id of the message whose turn is running, if one is.
    current: Option<String>,
    /// A `stop` came for the running turn: it ends after its current step.
    stop_asked: bool,
    /// The id of the message whose turn ended last: a `stop` for it crossed its answer.
    finished: Option<String>,
    /// When the last progress or tool message went out, for batching.
    progress: Progress,
    goals: Goals,
    /// The goal whose round runs now, if one does.
    round_of: Option<String>,
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
        Agent {
            host,
            actor: actor.to_string(),
            version: version.to_string(),
            candidate,
            inbox: Inbox::default(),
            current: None,
            stop_asked: false,
            finished: None,
            goals: Goals::new(&data),
            data,
            progress: Progress {
                pending: String::new(),
                last: None,
            },
            round_of: None,
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
            if let Some(saved) = self.saved_turn()
                && self.resume(saved) == Flow::Stop
            {
                return;
            }
        }
        // People's texts come first; a goal's rounds run when none waits, so a goal never locks
        // anyone out for longer than one round.
        loop {
            // What came while the last turn asked the model waits in the host: people first.
            self.take_arrived();
            let goal = (!self.candidate && self.inbox.turns.is_empty())
                .then(|| self.goals.active())
                .flatten();
            let wait = goal.as_ref().map(|_| Duration::ZERO);
            let message = if self.inbox.turns.is_empty() {
                match (self.host.receive(wait), goal) {
                    (Event::Message(message), _) => message,
                    (Event::TimedOut, Some(goal)) => {
                        if self.round(goal) == Flow::Stop {
                            return;
                        }
                        continue;
                    }
                    (Event::TimedOut, None) => continue,
                    (Event::Stop, _) => return,
                }
            } else {
                let message = self.inbox.turns.remove(0);
                self.save_inbox();
                message
            };
            if !message.starts_turn() {
                self.keep(message);
            } else if self.start(message) == Flow::Stop {
                return;
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
        let message = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| serde_json::from_value::<Incoming>(v["message"].clone()).ok())
            .filter(|m| !m.from.is_empty());
        if let Some(message) = message {
            let words = format!(
                "I restarted in the middle of your request, but could not read the turn I had \
                 saved (/data/turn.json: {problem}). I moved it to /data/turn-unreadable.json. \
                 Please ask again; I may have done part of it already."
            );
            self.answer_turn(&message, words, &Usage::default(), Some(0.0), None);
        }
        None
    }

    /// Starts a turn for a text message.
    fn start(&mut self, message: Incoming) -> Flow {
        eprintln!("agent: a turn for {} from {}", message.id, message.from);
        let config = match config::load(&self.file("config.json")) {
            Ok(config) => config,
            Err(words) => {
                self.answer_turn(&message, words, &Usage::default(), Some(0.0), None);
                return Flow::Continue;
            }
        };
        let spend = Spend::load(&self.file("spend.json"), self.host.now());
        if config.price.is_some() && spend.usd >= config.max_day_usd {
            let words = self.day_cap_words(&config, &spend);
            let usage = Usage::default();
            self.answer_turn(&message, words, &usage, Some(0.0), Some(Stopped::Budget));
            return Flow::Continue;
        }
        let mut history = self.load_history();
        history.entries.extend(self.take_notes());
        let text = message.body["text"].as_str().unwrap_or_default();
        history.entries.push(Entry::user(format!(
            "Message {} from {}:\n{text}",
            message.id, message.from
        )));
        self.work(&config, history, SavedTurn::new(message))
    }

    fn day_cap_words(&self, config: &Config, spend: &Spend) -> String {
        let now = self.host.now();
        format!(
            "I stopped: today's model spending is {} and my daily cap (max_day_usd in \
             /data/config.json) is {}. It resets at midnight UTC, in {}. To go on now, raise \
             max_day_usd.",
            budget::usd_words(spend.usd),
            budget::usd_words(config.max_day_usd),
            budget::duration_words(budget::until_midnight(now)),
        )
    }

    /// Finishes a turn saved by an earlier instance: every call left open gets a result (the
    /// awaited reply if it comes now), then the model hears that it restarted and goes on.
    fn resume(&mut self, mut turn: SavedTurn) -> Flow {
        eprintln!(
            "agent: resuming the turn for {} from {}",
            turn.message.id, turn.message.from
        );
        self.current = Some(turn.message.id.clone());
        turn.resumes += 1;
        let mut history = self.load_history();
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
        for id in history.open_calls() {
            let output = match turn.waiting.clone().filter(|w| w.call_id == id) {
                Some(waiting) if waiting.question => {
                    // The same question, waited for until its deadline, whatever the restarts.
                    let now = unix_seconds(self.host.now());
                    let left = waiting
                        .until
                        .map_or(waiting.seconds, |u| u.saturating_sub(now));
                    let awaited = self.await_reply(&waiting.reply_to, left);
                    match answer_words(awaited, &waiting.reply_to) {
                        Some(words) => format!("(asked before the agent restarted) {words}"),
                        None => return self.stop(&history, &turn),
                    }
                }
                Some(waiting) => match self.await_reply(&waiting.reply_to, waiting.seconds) {
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
        history.entries.extend(self.take_notes());
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
        self.current = Some(turn.message.id.clone());
        self.stop_asked = false;
        self.round_of = turn.goal.clone();
        let (answer, stopped) = loop {
            self.take_arrived();
            if let Some(end) = self.limit(config, &turn) {
                break end;
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
                turn.done.push(shorten(
                    &format!("{name} {arguments}"),
                    STEP_DESCRIPTION_CHARS,
                ));
                self.save(&mut history, &turn);
                self.tell(
                    &turn,
                    json!({"type": "tool", "tool": name, "state": "started",
                    "preview": preview(name, arguments)}),
                );
                let began = Instant::now();
                let output = match self.call(&mut history, &mut turn, id, name, arguments) {
                    Some(output) => output,
                    None => return self.stop(&history, &turn),
                };
                let ok = !output.starts_with("error");
                self.tell(
                    &turn,
                    json!({"type": "tool", "tool": name, "state": "finished",
                    "ok": ok, "seconds": round_seconds(began.elapsed())}),
                );
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

    /// Ends the turn: a message's turn answers it; a goal's round reports to the goal.
    fn conclude(&mut self, mut history: History, mut turn: SavedTurn, outcome: Outcome) -> Flow {
        self.close_open_calls(&mut history, NOT_RUN);
        if let Outcome::Cut(words, _) = &outcome {
            // Words the model did not write still reached the person; the next turn should
            // know them.
            history.entries.push(Entry::assistant(words.clone()));
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
        self.finish(&mut history)
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
        if turn.cost_usd >= config.max_turn_usd {
            let words = format!(
                "I stopped: this turn has cost {}, and a turn may cost at most {} (max_turn_usd \
                 in /data/config.json). Ask me to go on if there is more to do.",
                budget::usd_words(turn.cost_usd),
                budget::usd_words(config.max_turn_usd)
            );
            return Some((self.failure_words(turn, words), Some(Stopped::Budget)));
        }
        let spend = Spend::load(&self.file("spend.json"), self.host.now());
        if spend.usd >= config.max_day_usd {
            let words = self.day_cap_words(config, &spend);
            return Some((self.failure_words(turn, words), Some(Stopped::Budget)));
        }
        None
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
    fn request(
        &self,
        config: &Config,
        history: &History,
        turn: &SavedTurn,
    ) -> provider::HttpRequest {
        let opening = format!("Message {} from ", turn.message.id);
        let turn_start = history
            .entries
            .iter()
            .rposition(|e| matches!(e, Entry::User { text } if text.starts_with(&opening)))
            .unwrap_or(0);
        let entries = context::view(&history.entries, turn_start);
        // `goal_status` ends a goal's round: other turns are not offered it.
        let tools: Vec<tools::ToolSpec> = tools::specs()
            .into_iter()
            .filter(|t| turn.goal.is_some() || t.name != "goal_status")
            .collect();
        provider::request(config, &self.system_prompt(), &entries, &tools)
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
        request: &provider::HttpRequest,
        turn: &mut SavedTurn,
        show: bool,
    ) -> Asked {
        let mut attempt = 0;
        loop {
            let failure = match self.post(config, request, turn, show) {
                Ok(reply) => {
                    self.charge(config, turn, &reply.usage);
                    return Asked::Reply(reply);
                }
                Err(None) => return Asked::Shutdown,
                Err(Some(failure)) => failure,
            };
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
        request: &provider::HttpRequest,
        turn: &SavedTurn,
        show: bool,
    ) -> Result<Reply, Option<Failure>> {
        let mut stream = provider::Stream::new(config.api);
        let mut broken: Option<Failure> = None;
        let (to, id) = (turn.message.from.clone(), turn.message.id.clone());
        let progress = &mut self.progress;
        let posted = self.host.post(request, &mut |bytes| {
            if broken.is_none() && !bytes.is_empty() {
                match stream.feed(bytes) {
                    Ok(text) if show => progress.pending.push_str(&text),
                    Ok(_) => {}
                    Err(failure) => broken = Some(failure),
                }
            }
            let text = progress.due(Instant::now())?;
            Some(turn_message(
                &to,
                &id,
                json!({"type": "progress", "text": text}),
            ))
        });
        if !self.progress.pending.is_empty() {
            // The rest of the text goes now, keeping the batching interval.
            if let Some(last) = self.progress.last {
                std::thread::sleep(PROGRESS_INTERVAL.saturating_sub(last.elapsed()));
            }
            let text = std::mem::take(&mut self.progress.pending);
            self.tell(turn, json!({"type": "progress", "text": text}));
        }
        match posted {
            Posted::Streamed => match broken {
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
        }
    }

    /// Adds a response's usage to the turn, and its price to the turn and the day.
    fn charge(&mut self, config: &Config, turn: &mut SavedTurn, usage: &Usage) {
        turn.usage.add(*usage);
        let cost = match &config.price {
            Some(price) => budget::cost(usage, price),
            None => {
                turn.unpriced = true;
                0.0
            }
        };
        turn.cost_usd += cost;
        let path = self.file("spend.json");
        let mut spend = Spend::load(&path, self.host.now());
        spend.usd += cost;
        spend.usage.add(*usage);
        if !self.candidate {
            self.report(spend.save(&path));
        }
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
            match self.host.receive(Some(left)) {
                Event::Message(m) => self.keep(m),
                Event::TimedOut => return Awaited::TimedOut,
                Event::Stop => return Awaited::Stop,
            }
        }
    }

    /// Keeps the messages that arrived while the model was asked (a `stop` among them counts).
    fn take_arrived(&mut self) {
        for message in self.host.arrived() {
            self.keep(message);
        }
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

    /// Sends a message about the turn to its sender (DESIGN §12: `reply_to` and `turn` are the
    /// turn's message id). Flushes batched progress first so the order stays true.
    fn tell(&mut self, turn: &SavedTurn, body: Value) {
        if turn.message.from.is_empty() {
            return;
        }
        let (to, id) = (&turn.message.from, &turn.message.id);
        if body["type"] != "progress" && !self.progress.pending.is_empty() {
            let text = std::mem::take(&mut self.progress.pending);
            let pending = turn_message(to, id, json!({"type": "progress", "text": text}));
            self.host.send(&pending);
        }
        self.progress.last = Some(Instant::now());
        let message = turn_message(to, id, body);
        self.host.send(&message);
    }

    /// The final reply of a turn, with its usage.
    fn answer_ending(&mut self, turn: &SavedTurn, text: String, stopped: Option<Stopped>) {
        let cost = (!turn.unpriced).then_some(turn.cost_usd);
        self.answer_turn(&turn.message, text, &turn.usage, cost, stopped);
    }

    fn answer_turn(
        &mut self,
        message: &Incoming,
        text: String,
        usage: &Usage,
        cost_usd: Option<f64>,
        stopped: Option<Stopped>,
    ) {
        let mut body = json!({
            "type": "text", "text": text, "turn": message.id,
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
                "cost_usd": cost_usd.map(|usd| (usd * 1e6).round() / 1e6),
            },
        });
        if let Some(stopped) = stopped {
            body["stopped"] = json!(stopped.name());
        }
        self.host.send(&Outgoing {
            to: Some(message.from.clone()),
            id: None,
            reply_to: Some(message.id.clone()),
            body,
        });
    }

    /// Runs one tool call; `None` when a shutdown came while it waited.
    fn call(
        &mut self,
        history: &mut History,
        turn: &mut SavedTurn,
        id: &str,
        name: &str,
        arguments: &Value,
    ) -> Option<String> {
        if !arguments.is_object() {
            return Some(format!(
                "error: the arguments must be a JSON object, not {arguments}"
            ));
        }
        match name {
            "send_message" => self.send_message(history, turn, id, arguments),
            "wait_for_messages" => self.wait_for_messages(arguments),
            "ask" => self.ask_person(history, turn, id, arguments),
            "plan" => Some(self.plan(turn, arguments)),
            "note" => Some(self.note(arguments)),
            "goal_status" => Some(self.goal_status(turn, arguments)),
            _ => Some(tools::run_file_tool(name, arguments).unwrap_or_else(|| {
                let names: Vec<&str> = tools::specs().iter().map(|s| s.name).collect();
                format!(
                    "error: there is no tool `{name}`; the tools are {}",
                    names.join(", ")
                )
            })),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Goals (DESIGN §12): rounds of a turn each, between people's turns.

    /// `{"type":"goal","text","max_rounds"?,"max_usd"?}`: a new goal, answered `goal_started`.
    fn new_goal(&mut self, message: Incoming) {
        let added = goals::parse_request(&message.body)
            .and_then(|(text, rounds, usd)| self.goals.add(message.clone(), text, rounds, usd));
        let body = match added {
            Ok(goal) => {
                eprintln!("agent: goal {} from {}", goal.id, message.from);
                let mut body = json!({"type": "goal_started", "goal": goal.id});
                if goal.state == goals::State::Queued {
                    body["queued"] = json!(true);
                }
                body
            }
            Err(reason) => json!({"type": "error", "request": "goal", "reason": reason}),
        };
        self.reply(&message, body);
    }

    /// `{"type":"goal_stop","goal"}`: the goal ends; a round in progress ends after its step.
    fn stop_goal(&mut self, message: Incoming) {
        let id = message.body["goal"].as_str().unwrap_or_default();
        let Some(mut goal) = self.goals.get(id) else {
            let known: Vec<String> = self.goals.all().into_iter().map(|g| g.id).collect();
            let reason = format!(
                "there is no goal `{id}`; the goals are: {}",
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            );
            return self.reply(
                &message,
                json!({"type": "error", "request": "goal_stop", "reason": reason}),
            );
        };
        if goal.finished() {
            let reason = format!("goal {id} has already ended ({:?})", goal.state).to_lowercase();
            return self.reply(
                &message,
                json!({"type": "error", "request": "goal_stop", "reason": reason}),
            );
        }
        let reason = format!("stopped by {} (goal_stop)", message.from);
        goal.stop = Some(reason.clone());
        if self.round_of.as_deref() == Some(id) {
            // The round ends after its current step and reports the stop.
            self.stop_asked = true;
            self.report(self.goals.save(&goal));
        } else {
            self.stop_goal_because(&mut goal, reason.clone());
        }
        if message.from != goal.message.from {
            self.reply(
                &message,
                json!({"type": "goal_stopped", "goal": goal.id, "reason": reason}),
            );
        }
    }

    /// One round of `goal`: a turn of up to [`MAX_STEPS`] steps that ends with `goal_status`.
    fn round(&mut self, mut goal: Goal) -> Flow {
        if let Some(reason) = goal.stop.clone() {
            self.stop_goal_because(&mut goal, reason);
            return Flow::Continue;
        }
        let config = match config::load(&self.file("config.json")) {
            Ok(config) => config,
            Err(words) => {
                self.stop_goal_because(&mut goal, words);
                return Flow::Continue;
            }
        };
        let spend = Spend::load(&self.file("spend.json"), self.host.now());
        if config.price.is_some() && spend.usd >= config.max_day_usd {
            let reason = self.day_cap_words(&config, &spend);
            self.stop_goal_because(&mut goal, reason);
            return Flow::Continue;
        }
        goal.state = goals::State::Running;
        self.report(self.goals.save(&goal));
        let round = goal.rounds + 1;
        eprintln!("agent: goal {} round {round}", goal.id);
        let mut history = self.load_history();
        history.entries.extend(self.take_notes());
        let earlier: Vec<String> = goal
            .summaries
            .iter()
            .enumerate()
            .map(|(n, summary)| format!("- round {}: {summary}", n + 1))
            .collect();
        history.entries.push(Entry::user(format!(
            "Goal {} from {}, round {round} of at most {} ({} of {} spent so far):\n{}\n\n\
             Earlier rounds:\n{}\n\nWork on the goal in this round (up to {MAX_STEPS} steps): \
             keep the to-do card (plan) current, test each step. End the round with \
             goal_status: `continue` with what this round did and what comes next, `done` when \
             the goal is reached and tested, or `blocked` with what you need (allowed from round \
             {}).",
            goal.id,
            goal.message.from,
            goal.max_rounds,
            budget::usd_words(goal.spent_usd),
            budget::usd_words(goal.max_usd),
            goal.text,
            if earlier.is_empty() {
                "(none: this is the first)".to_string()
            } else {
                earlier.join("\n")
            },
            goals::BLOCKED_FROM_ROUND,
        )));
        let mut message = goal.message.clone();
        message.body = json!({"type": "text", "text": goal.text});
        let turn = SavedTurn {
            goal: Some(goal.id.clone()),
            plan: goal.plan.clone(),
            ..SavedTurn::new(message)
        };
        self.work(&config, history, turn)
    }

    /// A round ended: `goal_progress`, then the goal goes on or ends (done, blocked, stopped by
    /// a stop, a limit, or a failure).
    fn end_round(&mut self, turn: &mut SavedTurn, outcome: Outcome) {
        let id = turn.goal.clone().unwrap_or_default();
        let Some(mut goal) = self.goals.get(&id) else {
            eprintln!("agent: the goal {id} of this round is gone; its round's end is dropped");
            return;
        };
        goal.rounds += 1;
        goal.spent_usd += turn.cost_usd;
        goal.plan = turn.plan.clone();
        let (status, summary, ended) = match outcome {
            Outcome::Status => {
                let end = turn
                    .round_end
                    .take()
                    .expect("a status outcome carries its end");
                (end.status, end.summary, None)
            }
            Outcome::Answered(text) => ("continue".to_string(), text, None),
            Outcome::Cut(words, Some(Stopped::Steps)) => ("continue".to_string(), words, None),
            Outcome::Cut(words, _) => ("continue".to_string(), words.clone(), Some(words)),
        };
        goal.summaries.push(summary.clone());
        self.tell_goal_owner(
            &goal,
            json!({"type": "goal_progress", "goal": goal.id,
            "round": goal.rounds, "summary": summary}),
        );
        let stopped = |reason: String| {
            (
                goals::State::Stopped,
                "goal_stopped",
                json!({"reason": reason}),
            )
        };
        let (state, kind, fields) = if let Some(reason) = goal.stop.clone() {
            stopped(reason)
        } else if let Some(words) = ended {
            stopped(words)
        } else if status == "done" {
            (goals::State::Done, "goal_done", json!({"summary": summary}))
        } else if status == "blocked" {
            (
                goals::State::Blocked,
                "goal_blocked",
                json!({"summary": summary}),
            )
        } else if goal.rounds >= goal.max_rounds {
            stopped(format!(
                "it reached its limit of {} rounds (max_rounds)",
                goal.max_rounds
            ))
        } else if turn.cost_usd > 0.0 && goal.spent_usd >= goal.max_usd {
            stopped(format!(
                "it has cost {}, and its limit is {} (max_usd)",
                budget::usd_words(goal.spent_usd),
                budget::usd_words(goal.max_usd)
            ))
        } else {
            self.report(self.goals.save(&goal));
            return;
        };
        self.end_goal(&mut goal, state, kind, fields);
    }

    /// Ends `goal` as stopped, telling its owner why.
    fn stop_goal_because(&mut self, goal: &mut Goal, reason: String) {
        self.end_goal(
            goal,
            goals::State::Stopped,
            "goal_stopped",
            json!({"reason": reason}),
        );
    }

    /// Ends `goal` in `state`, telling its owner with a `kind` message carrying `fields`.
    fn end_goal(&mut self, goal: &mut Goal, state: goals::State, kind: &str, fields: Value) {
        goal.state = state;
        self.report(self.goals.save(goal));
        let mut body = json!({"type": kind, "goal": goal.id});
        for (key, value) in fields.as_object().into_iter().flatten() {
            body[key] = value.clone();
        }
        eprintln!("agent: goal {} ends: {kind}", goal.id);
        self.tell_goal_owner(goal, body);
    }

    fn tell_goal_owner(&mut self, goal: &Goal, body: Value) {
        let message = goal.message.clone();
        self.reply(&message, body);
    }

    /// A reply to `message`, to its sender.
    fn reply(&mut self, message: &Incoming, body: Value) {
        self.host.send(&Outgoing {
            to: Some(message.from.clone()),
            id: None,
            reply_to: Some(message.id.clone()),
            body,
        });
    }

    /// `goal_status`: ends the round, unless it gives up before [`goals::BLOCKED_FROM_ROUND`].
    fn goal_status(&mut self, turn: &mut SavedTurn, arguments: &Value) -> String {
        let Some(id) = turn.goal.clone() else {
            return "error: goal_status ends a goal's round, and this turn answers a message: \
                    end it with your answer instead"
                .into();
        };
        let status = match arguments["status"].as_str() {
            Some(s @ ("continue" | "done" | "blocked")) => s.to_string(),
            other => {
                return format!(
                    "error: `status` is {other:?}; it must be \"continue\", \"done\" or \"blocked\""
                );
            }
        };
        let summary = match arguments["summary"].as_str().map(str::trim) {
            Some(summary) if !summary.is_empty() => summary.to_string(),
            _ => {
                return "error: `summary` must say what this round did (and what comes next)"
                    .into();
            }
        };
        let round = self.goals.get(&id).map_or(1, |g| g.rounds + 1);
        if status == "blocked" && round < goals::BLOCKED_FROM_ROUND {
            return format!(
                "error: this is round {round}; a goal may be given up as blocked only from round \
                 {} on. Keep going: try another way (a smaller step, a different approach, \
                 reading the logs and sources again), or ask the person with `ask` if only they \
                 can decide. The round goes on.",
                goals::BLOCKED_FROM_ROUND
            );
        }
        turn.round_end = Some(RoundEnd {
            status: status.clone(),
            summary,
        });
        format!("round {round} of goal {id} ends here ({status})")
    }

    // -----------------------------------------------------------------------------------------
    // The to-do card, notes, and asking the person.

    /// `plan`: the whole to-do card; the person gets it as `plan` whenever it changes.
    fn plan(&mut self, turn: &mut SavedTurn, arguments: &Value) -> String {
        let card = match card::plan(arguments) {
            Ok(card) => card,
            Err(error) => return error,
        };
        let words = card::plan_words(&card);
        if card != turn.plan {
            turn.plan = card.clone();
            self.tell(turn, json!({"type": "plan", "items": card}));
        }
        words
    }

    /// `note`: appended to `/data/notes.md`, which every request shows the model.
    fn note(&mut self, arguments: &Value) -> String {
        card::note(&self.file("notes.md"), arguments)
    }

    /// The prompt, with the agent's notes.
    fn system_prompt(&self) -> String {
        crate::PROMPT.to_string() + &card::notes_section(&self.file("notes.md"))
    }

    /// `ask`: a `question` to the turn's sender; the turn waits for the answer, durably, up to
    /// [`QUESTION_WAIT`].
    fn ask_person(
        &mut self,
        history: &mut History,
        turn: &mut SavedTurn,
        call_id: &str,
        arguments: &Value,
    ) -> Option<String> {
        let question = match arguments["question"].as_str().map(str::trim) {
            Some(q) if !q.is_empty() => q.to_string(),
            _ => return Some("error: `question` must be the question, in words".into()),
        };
        let choices = match &arguments["choices"] {
            Value::Null => None,
            Value::Array(items)
                if (1..=MAX_CHOICES).contains(&items.len())
                    && items
                        .iter()
                        .all(|c| c.as_str().is_some_and(|c| !c.trim().is_empty())) =>
            {
                Some(items.clone())
            }
            other => {
                return Some(format!(
                    "error: `choices` is {other}; give 1 to {MAX_CHOICES} non-empty strings, or \
                     leave it out for a free answer"
                ));
            }
        };
        if turn.message.from.is_empty() {
            return Some("error: this turn has no sender to ask".into());
        }
        history.sent += 1;
        let id = format!("q{}", history.sent);
        let published = format!("{}/{id}", self.actor);
        let seconds = QUESTION_WAIT.as_secs();
        turn.waiting = Some(Waiting {
            call_id: call_id.to_string(),
            reply_to: published.clone(),
            seconds,
            question: true,
            until: Some(unix_seconds(self.host.now()) + seconds),
        });
        // Saved before asking: a restart goes on waiting for this very question.
        self.save(history, turn);
        let mut body = json!({"type": "question", "turn": turn.message.id, "text": question});
        if let Some(choices) = choices {
            body["choices"] = Value::Array(choices);
        }
        self.host.send(&Outgoing {
            to: Some(turn.message.from.clone()),
            id: Some(id),
            reply_to: Some(turn.message.id.clone()),
            body,
        });
        let output = answer_words(self.await_reply(&published, seconds), &published)?;
        turn.waiting = None;
        Some(output)
    }

    fn send_message(
        &mut self,
        history: &mut History,
        turn: &mut SavedTurn,
        call_id: &str,
        arguments: &Value,
    ) -> Option<String> {
        let to = match string_arg(arguments, "to") {
            Ok(to) if valid_actor_id(to) => to,
            Ok(to) => {
                return Some(format!(
                    "error: `{to}` is not an actor id (a-z, 0-9, -, _; 1 to 64 characters)"
                ));
            }
            Err(e) => return Some(e),
        };
        let body = &arguments["body"];
        if !body["type"].is_string() {
            return Some("error: `body` must be a JSON object with a string \"type\"".into());
        }
        let seconds = arguments["wait_seconds"]
            .as_u64()
            .unwrap_or(0)
            .min(MAX_WAIT_SECONDS);
        history.sent += 1;
        let id = format!("t{}", history.sent);
        let published = format!("{}/{id}", self.actor);
        if seconds > 0 {
            turn.waiting = Some(Waiting {
                call_id: call_id.to_string(),
                reply_to: published.clone(),
                seconds,
                question: false,
                until: None,
            });
        }
        // Saved before sending: a restart must neither reuse the id nor forget the wait.
        self.save(history, turn);
        self.host.send(&Outgoing {
            to: Some(to.to_string()),
            id: Some(id),
            reply_to: None,
            body: body.clone(),
        });
        if seconds == 0 {
            return Some(format!("sent as {published}"));
        }
        let output = match self.await_reply(&published, seconds) {
            Awaited::Reply(reply) => reply.to_line(),
            Awaited::TimedOut => format!(
                "sent as {published}; no reply came within {seconds} s (it may still come: use \
                 wait_for_messages)"
            ),
            Awaited::Stopped => {
                format!("sent as {published}; the person stopped the turn before the reply came")
            }
            Awaited::Stop => return None,
        };
        turn.waiting = None;
        Some(output)
    }

    /// Waits for the message whose `reply_to` is `reply_to`; the others are kept. A `stop` for
    /// the turn ends the wait.
    fn await_reply(&mut self, reply_to: &str, seconds: u64) -> Awaited {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            if self.stop_asked {
                return Awaited::Stopped;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.host.receive(Some(left)) {
                Event::Message(m) if m.reply_to.as_deref() == Some(reply_to) => {
                    return Awaited::Reply(m);
                }
                Event::Message(m) => self.keep(m),
                Event::TimedOut => return Awaited::TimedOut,
                Event::Stop => return Awaited::Stop,
            }
        }
    }

    fn wait_for_messages(&mut self, arguments: &Value) -> Option<String> {
        let seconds = arguments["seconds"]
            .as_u64()
            .unwrap_or(DEFAULT_WAIT_SECONDS)
            .min(MAX_WAIT_SECONDS);
        if self.inbox.notes.is_empty() {
            let deadline = Instant::now() + Duration::from_secs(seconds);
            let mut timeout = deadline.saturating_duration_since(Instant::now());
            // The first message ends the wait; whatever arrived with it is taken too.
            while !self.stop_asked {
                match self.host.receive(Some(timeout)) {
                    Event::Message(m) => self.keep(m),
                    Event::TimedOut => break,
                    Event::Stop => return None,
                }
                timeout = Duration::ZERO;
            }
        }
        let notes = std::mem::take(&mut self.inbox.notes);
        let mut output: Vec<String> = notes.iter().map(Incoming::to_line).collect();
        if output.is_empty() {
            output.push(format!("no message came within {seconds} s"));
        }
        if !self.inbox.turns.is_empty() {
            output.push(format!(
                "({} text message(s) wait for their own turn after this one.)",
                self.inbox.turns.len()
            ));
        }
        self.save_inbox();
        Some(output.join("\n"))
    }

    /// Keeps a message that does not belong to the current wait: a text for its own turn, any
    /// other for the model to see later. A `stop` is obeyed instead of kept.
    fn keep(&mut self, message: Incoming) {
        match message.kind() {
            "stop" => return self.obey_stop(message),
            "goal" => return self.new_goal(message),
            "goal_stop" => return self.stop_goal(message),
            "conversation" => return self.tell_conversation(&message),
            _ => {}
        }
        if message.starts_turn() {
            self.inbox.turns.push(message);
        } else {
            self.inbox.notes.push(message);
        }
        self.save_inbox();
    }

    /// `{"type":"conversation"}`: the conversation as a person reads it (see [`conversation`]),
    /// answered at once when idle, and at the next step during a turn.
    fn tell_conversation(&mut self, message: &Incoming) {
        let body = match history::load(&self.file("history.json")) {
            Ok(history) => json!({"type": "conversation", "entries": conversation(&history)}),
            Err(e) => json!({
                "type": "error", "request": "conversation",
                "reason": format!("the conversation cannot be read: {e}"),
            }),
        };
        self.host.send(&Outgoing {
            to: Some(message.from.clone()),
            id: None,
            reply_to: Some(message.id.clone()),
            body,
        });
    }

    /// `{"type":"stop","turn"}`: the running turn ends after its current step; a turn still
    /// waiting for its start is answered at once without running; any other is told so.
    fn obey_stop(&mut self, message: Incoming) {
        let turn = message.body["turn"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if self.finished.as_deref() == Some(turn.as_str()) {
            // The turn ended while the stop was on its way: it is done, as asked.
            return;
        }
        if self.current.as_deref() == Some(turn.as_str()) {
            eprintln!("agent: {} stops the turn {turn}", message.from);
            self.stop_asked = true;
            return;
        }
        if let Some(n) = self.inbox.turns.iter().position(|m| m.id == turn) {
            let queued = self.inbox.turns.remove(n);
            self.save_inbox();
            let words = "Stopped before it started, as asked.".to_string();
            let usage = Usage::default();
            self.answer_turn(&queued, words, &usage, Some(0.0), Some(Stopped::Stop));
            return;
        }
        let words = if turn.is_empty() {
            "A stop needs the id of the turn to stop: {\"type\":\"stop\",\"turn\":\"<id of the \
             message that started it>\"}."
                .to_string()
        } else {
            format!("There is no turn {turn} running; it may have ended already.")
        };
        self.host.send(&Outgoing {
            to: Some(message.from.clone()),
            id: None,
            reply_to: Some(message.id.clone()),
            body: json!({"type": "error", "request": "stop", "reason": words}),
        });
    }

    /// The notes as one user entry, emptying the inbox's notes.
    fn take_notes(&mut self) -> Option<Entry> {
        if self.inbox.notes.is_empty() {
            return None;
        }
        let lines: Vec<String> = std::mem::take(&mut self.inbox.notes)
            .iter()
            .map(Incoming::to_line)
            .collect();
        self.save_inbox();
        Some(Entry::user(cut_output(format!(
            "Messages that arrived meanwhile:\n{}",
            lines.join("\n")
        ))))
    }

    /// A shutdown came inside a turn: keep what already arrived, save, and let the agent exit.
    fn stop(&mut self, history: &History, turn: &SavedTurn) -> Flow {
        while let Event::Message(m) = self.host.receive(Some(Duration::ZERO)) {
            self.keep(m);
        }
        let mut history = history.clone();
        self.save(&mut history, turn);
        eprintln!("agent: shutdown inside a turn; it is saved in turn.json");
        Flow::Stop
    }

    fn finish(&mut self, history: &mut History) -> Flow {
        self.finished = self.current.take();
        self.round_of = None;
        self.stop_asked = false;
        history.cut();
        self.report(history::save(&self.file("history.json"), history));
        self.end_turn();
        Flow::Continue
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
    fn load_history(&mut self) -> History {
        let path = self.file("history.json");
        history::load(&path).unwrap_or_else(|e| {
            let aside = self.file("history-unreadable.json");
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
        self.report(history::save(&self.file("history.json"), history));
        self.report(write_json(&self.file("turn.json"), turn));
    }

    fn save_inbox(&mut self) {
        if self.candidate {
            return;
        }
        let path = self.file("inbox.json");
        if self.inbox.notes.is_empty() && self.inbox.turns.is_empty() {
            if path.exists() {
                self.report(
                    std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display())),
                );
            }
        } else {
            self.report(write_json(&path, &self.inbox));
        }
    }

    /// A file the agent cannot write costs it its memory, not its answer: the turn goes on.
    fn report(&self, result: Result<(), String>) {
        if let Err(e) = result {
            eprintln!("agent: {e}");
        }
    }
}

/// A message about the turn started by message `id` from `to`.
fn turn_message(to: &str, id: &str, mut body: Value) -> Outgoing {
    body["turn"] = json!(id);
    Outgoing {
        to: Some(to.to_string()),
        id: None,
        reply_to: Some(id.to_string()),
        body,
    }
}

/// What a tool call does, in at most [`PREVIEW_CHARS`] characters: a path, a recipient and a
/// body type; never a file's content.
/// The last [`CONVERSATION_ENTRIES`] entries of `history` as a person reads them:
/// `{"role":"user","from","id","text"}` for a message that started a turn, `{"role":"note",
/// "text"}` for other messages shown to the model, `{"role":"assistant","text"}`,
/// `{"role":"tool","name","preview"}` for each call (no arguments, no output), and
/// `{"role":"summary","text"}` where older entries were summarised. Provider items are left out.
pub fn conversation(history: &History) -> Vec<Value> {
    let start = history.entries.len().saturating_sub(CONVERSATION_ENTRIES);
    history.entries[start..]
        .iter()
        .filter_map(|entry| match entry {
            Entry::User { text } => Some(user_entry(text)),
            Entry::Assistant { text, .. } if !text.is_empty() => {
                Some(json!({"role": "assistant", "text": text}))
            }
            Entry::ToolCall {
                name, arguments, ..
            } => Some(json!({"role": "tool", "name": name, "preview": preview(name, arguments)})),
            Entry::Summary { text } => Some(json!({"role": "summary", "text": text})),
            Entry::Assistant { .. } | Entry::ToolResult { .. } | Entry::Opaque { .. } => None,
        })
        .collect()
}

/// A user entry: a turn's message (`Message <id> from <sender>:\n<text>`, as [`Agent::start`]
/// writes it) or notes.
fn user_entry(text: &str) -> Value {
    let parsed = text.strip_prefix("Message ").and_then(|rest| {
        let (head, body) = rest.split_once(":\n")?;
        let (id, from) = head.split_once(" from ")?;
        Some(json!({"role": "user", "id": id, "from": from, "text": body}))
    });
    parsed.unwrap_or_else(|| json!({"role": "note", "text": text}))
}

fn preview(name: &str, arguments: &Value) -> String {
    let text = |key: &str| arguments[key].as_str().unwrap_or("?");
    let words = match name {
        "send_message" => {
            let kind = arguments["body"]["type"].as_str().unwrap_or("?");
            match arguments["wait_seconds"].as_u64() {
                Some(s) if s > 0 => format!("{} {kind} (waits up to {s} s)", text("to")),
                _ => format!("{} {kind}", text("to")),
            }
        }
        "wait_for_messages" => format!(
            "up to {} s",
            arguments["seconds"]
                .as_u64()
                .unwrap_or(DEFAULT_WAIT_SECONDS)
        ),
        "copy_dir" => format!("{} → {}", text("from"), text("to")),
        "search" | "find_files" => format!("{} in {}", text("pattern"), text("path")),
        "plan" => {
            let items = arguments["items"].as_array();
            let done = items
                .into_iter()
                .flatten()
                .filter(|i| i["done"] == true)
                .count();
            format!("{} items, {done} done", items.map_or(0, Vec::len))
        }
        "note" => "/data/notes.md".into(),
        "ask" => text("question").to_string(),
        "goal_status" => text("status").to_string(),
        "write_file" => format!(
            "{} ({} bytes)",
            text("path"),
            arguments["content"].as_str().map_or(0, str::len)
        ),
        _ => match arguments["path"].as_str() {
            Some(path) => path.to_string(),
            None => String::new(),
        },
    };
    match words.char_indices().nth(PREVIEW_CHARS - 1) {
        Some((at, _)) => format!("{}…", &words[..at]),
        None => words,
    }
}

/// What a question's wait came to, as the `ask` tool's output; `None` on a shutdown.
fn answer_words(awaited: Awaited, question: &str) -> Option<String> {
    Some(match awaited {
        Awaited::Reply(reply) if reply.kind() == "answer" => format!(
            "{} answered: {}",
            reply.from,
            reply.body["text"].as_str().unwrap_or_default()
        ),
        Awaited::Reply(reply) => format!("a reply to the question came: {}", reply.to_line()),
        Awaited::TimedOut => format!(
            "no answer to {question} came within {} hours; decide without it (say what you              assumed) or ask again later",
            QUESTION_WAIT.as_secs() / 3600
        ),
        Awaited::Stopped => "the person stopped the turn before answering".into(),
        Awaited::Stop => return None,
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

/// Actor ids: `a-z`, `0-9`, `-`, `_`, 1 to 64 characters (DESIGN §1).
fn valid_actor_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
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
#[path = "turn_tests.rs"]
mod tests;
