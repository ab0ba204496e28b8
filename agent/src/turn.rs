//! Turns: the agent's main loop and the state machine of one turn (message → model step → tools →
//! … → answer), with what must survive a restart saved in `/data` after every step:
//! `history.json` (the conversation), `turn.json` (the turn in progress: the message that started
//! it, the steps so far, a reply being waited for) and `inbox.json` (messages not yet shown).
//! **Invariant:** a turn always ends with exactly one answer to the message that started it, in
//! words even when everything failed; a shutdown ends it only by saving it for the next start.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::config::{self, Config};
use crate::history::{self, Entry, History};
use crate::host::{Event, Host, Incoming, Outgoing, Posted};
use crate::provider::{self, shorten};
use crate::tools::{self, DEFAULT_WAIT_SECONDS, MAX_WAIT_SECONDS, cut_output, string_arg};

/// The most model steps (requests) one turn may take; then the person is told what was done, so
/// a model that loops cannot spend without end.
pub const MAX_STEPS: u32 = 40;

/// How much of one step's description the step-limit answer shows.
const STEP_DESCRIPTION_CHARS: usize = 160;

/// The result of a tool call that a restart cut off.
pub const INTERRUPTED: &str = "interrupted: the agent restarted before this finished";

/// The turn in progress, as `turn.json` keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedTurn {
    /// The message that started the turn; the answer goes to its sender, replying to its id.
    pub message: Incoming,
    /// Model steps taken so far.
    pub steps: u32,
    /// One line per tool call made so far, for the answer when the step limit is reached.
    #[serde(default)]
    pub done: Vec<String>,
    /// A `send_message` waiting for its reply, so a restart can go on waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    /// The tool call that waits.
    pub call_id: String,
    /// The id the reply names in `reply_to`, such as `agent/t3`.
    pub reply_to: String,
    pub seconds: u64,
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
    Stop,
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
}

impl<H: Host> Agent<H> {
    pub fn new(
        host: H,
        data: impl Into<PathBuf>,
        actor: &str,
        version: &str,
        candidate: bool,
    ) -> Self {
        Agent {
            host,
            data: data.into(),
            actor: actor.to_string(),
            version: version.to_string(),
            candidate,
            inbox: Inbox::default(),
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
            if let Some(saved) = read_json::<SavedTurn>(&self.file("turn.json"))
                && self.resume(saved) == Flow::Stop
            {
                return;
            }
        }
        loop {
            let message = if self.inbox.turns.is_empty() {
                match self.host.receive(None) {
                    Event::Message(message) => message,
                    Event::TimedOut => continue,
                    Event::Stop => return,
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

    /// Starts a turn for a text message.
    fn start(&mut self, message: Incoming) -> Flow {
        eprintln!("agent: a turn for {} from {}", message.id, message.from);
        let config = match config::load(&self.file("config.json")) {
            Ok(config) => config,
            Err(words) => {
                self.answer(&message, words);
                return Flow::Continue;
            }
        };
        let mut history = self.load_history();
        history.entries.extend(self.take_notes());
        let text = message.body["text"].as_str().unwrap_or_default();
        history.entries.push(Entry::user(format!(
            "Message {} from {}:\n{text}",
            message.id, message.from
        )));
        let turn = SavedTurn {
            message,
            steps: 0,
            done: Vec::new(),
            waiting: None,
        };
        self.work(&config, history, turn)
    }

    /// Finishes a turn saved by an earlier instance: every call left open gets a result (the
    /// awaited reply if it comes now), then the model hears that it restarted and goes on.
    fn resume(&mut self, mut turn: SavedTurn) -> Flow {
        eprintln!(
            "agent: resuming the turn for {} from {}",
            turn.message.id, turn.message.from
        );
        let config = match config::load(&self.file("config.json")) {
            Ok(config) => config,
            Err(words) => {
                self.answer(&turn.message, words);
                self.end_turn();
                return Flow::Continue;
            }
        };
        let mut history = self.load_history();
        for id in history.open_calls() {
            let output = match turn.waiting.clone().filter(|w| w.call_id == id) {
                Some(waiting) => match self.await_reply(&waiting.reply_to, waiting.seconds) {
                    Awaited::Reply(reply) => format!(
                        "The agent restarted while waiting for this reply (for example because \
                         it upgraded itself); after the restart it came: {}",
                        reply.to_line()
                    ),
                    Awaited::TimedOut => format!(
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
        history.entries.push(Entry::user(format!(
            "(You restarted, for example after upgrading yourself, and now run as version {} \
             of `{}`. Finish the turn you were in: your last text will answer message {} from \
             {}. Check what an interrupted step did before repeating it.)",
            self.version, self.actor, turn.message.id, turn.message.from
        )));
        self.work(&config, history, turn)
    }

    /// The step loop: ask the model, run the tools it calls, until it answers in text, fails,
    /// or reaches [`MAX_STEPS`].
    fn work(&mut self, config: &Config, mut history: History, mut turn: SavedTurn) -> Flow {
        let answer = loop {
            if turn.steps >= MAX_STEPS {
                break self.limit_words(&turn);
            }
            self.save(&mut history, &turn);
            let request =
                provider::request(config, crate::PROMPT, &history.entries, &tools::specs());
            let response = match self.host.post(&request) {
                Posted::Answered(response) => response,
                Posted::Failed(why) => {
                    break self.failure_words(
                        &turn,
                        format!(
                            "I could not reach the model provider at {}: {why}",
                            config.base_url
                        ),
                    );
                }
                Posted::Stopped => return self.stop(&history, &turn),
            };
            if !(200..300).contains(&response.status) {
                let words = provider::error_words(response.status, &response.body);
                break self.failure_words(&turn, words);
            }
            let reply = match provider::parse(config.api, &response.body) {
                Ok(reply) => reply,
                Err(words) => break self.failure_words(&turn, words),
            };
            turn.steps += 1;
            history.entries.extend(reply.entries.iter().cloned());
            if !reply.has_tool_calls() {
                let text = reply.text();
                match (&reply.cut_short, text.is_empty()) {
                    (None, false) => {
                        self.answer(&turn.message, text);
                        return self.finish(&mut history);
                    }
                    (None, true) => break "(The model ended its turn without any text.)".into(),
                    (Some(why), true) => {
                        break format!("The model stopped ({why}) before it wrote an answer.");
                    }
                    (Some(why), false) => {
                        let text = format!("{text}\n\n(The answer was cut short: {why}.)");
                        self.answer(&turn.message, text);
                        return self.finish(&mut history);
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
                turn.done.push(shorten(
                    &format!("{name} {arguments}"),
                    STEP_DESCRIPTION_CHARS,
                ));
                self.save(&mut history, &turn);
                let output = match self.call(&mut history, &mut turn, id, name, arguments) {
                    Some(output) => output,
                    None => return self.stop(&history, &turn),
                };
                history.entries.push(Entry::ToolResult {
                    id: id.clone(),
                    output: cut_output(output),
                });
            }
        };
        // Words the model did not write still reached the person; the next turn should know them.
        history.entries.push(Entry::assistant(answer.clone()));
        self.answer(&turn.message, answer);
        self.finish(&mut history)
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
            _ => Some(tools::run_file_tool(name, arguments).unwrap_or_else(|| {
                let names: Vec<&str> = tools::specs().iter().map(|s| s.name).collect();
                format!(
                    "error: there is no tool `{name}`; the tools are {}",
                    names.join(", ")
                )
            })),
        }
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
            Awaited::Stop => return None,
        };
        turn.waiting = None;
        Some(output)
    }

    /// Waits for the message whose `reply_to` is `reply_to`; the others are kept.
    fn await_reply(&mut self, reply_to: &str, seconds: u64) -> Awaited {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
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
            loop {
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
    /// other for the model to see later.
    fn keep(&mut self, message: Incoming) {
        if message.starts_turn() {
            self.inbox.turns.push(message);
        } else {
            self.inbox.notes.push(message);
        }
        self.save_inbox();
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

    fn answer(&mut self, message: &Incoming, text: String) {
        self.host.send(&Outgoing {
            to: Some(message.from.clone()),
            id: None,
            reply_to: Some(message.id.clone()),
            body: json!({"type": "text", "text": text}),
        });
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
