//! The console (DESIGN §5): the native actor `console`, a terminal onto the world.
//!
//! It turns typed lines into messages and shows every message it gets. It is a client of the
//! broker like any actor: it sends through the router and reads its own mailbox. Scripts drive
//! it on stdin (`run`) with `/sleep` and `/await` and see every message as one line; a person at
//! a terminal (`run_terminal`) gets a line editor, the agent's turns shown as they happen, and
//! Ctrl-C to clear a line, stop a turn, or (pressed twice) stop the world. End of input ends the
//! run like `/quit`.

pub mod render;
mod terminal;
mod turns;

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;

use crate::broker::Broker;
use crate::message::{ActorId, Envelope, Outgoing, Speaker};
use crate::people::People;
use render::{DEFAULT_WIDTH, Renderer, script_line};
use terminal::{Input, Known, LivePrompt, Printer, Terminal};
use turns::{AGENT, Interrupt, Turns};

/// A console command: how it is typed and what it does. `/help`, Tab completion and the error
/// for an unknown command all read [`COMMANDS`].
struct CommandInfo {
    name: &'static str,
    args: &'static str,
    does: &'static str,
}

const COMMANDS: [CommandInfo; 11] = [
    CommandInfo {
        name: "deploy",
        args: "<actor> <dir> [same|off]",
        does: "build the crate in <dir> with cargo, then spawn or upgrade <actor>\n\
               (upgrades are tried on its recent messages: same refuses any difference,\n\
               off skips the try)",
    },
    CommandInfo {
        name: "rewind",
        args: "[<turn>]",
        does: "undo what the agent's turn changed (the last that changed anything without an id):\n\
               the actors it upgraded, spawned or removed, the files it wrote, the conversation",
    },
    CommandInfo {
        name: "list",
        args: "",
        does: "list the actors (asks the broker): at a terminal a table of each actor's\n\
               state, version, owner, host, waiting messages and restarts",
    },
    CommandInfo {
        name: "schedules",
        args: "",
        does: "list the schedules, one line each (asks the scheduler)",
    },
    CommandInfo {
        name: "approvals",
        args: "",
        does: "list what waits for a decision (held actions, the agent's requests), one a\n\
               line, its id first",
    },
    CommandInfo {
        name: "approve",
        args: "<id>",
        does: "approve what waits as <id> (a requested secret: at a terminal its value\n\
               is typed next, hidden; in a script set it first with `sausage secret set`)",
    },
    CommandInfo {
        name: "deny",
        args: "<id>",
        does: "deny what waits as <id>",
    },
    CommandInfo {
        name: "sleep",
        args: "<seconds>",
        does: "wait (for scripts)",
    },
    CommandInfo {
        name: "await",
        args: "<actor> <seconds>",
        does: "wait for a message from <actor> that no earlier /await took\n\
               (it may have arrived already; a turn's progress and tool notices do not\n\
               count); fail after the time",
    },
    CommandInfo {
        name: "help",
        args: "",
        does: "this help",
    },
    CommandInfo {
        name: "quit",
        args: "",
        does: "stop every actor gracefully and exit (end of input does the same)",
    },
];

/// What lines other than commands do, for `/help`.
const LINES_HELP: &str = "\
@<actor> <json>     send that JSON object as the message body
@<actor> <text>     send {\"type\":\"text\",\"text\":<text>}
<text>              send text to the agent; while the agent asks a question, the answer";

/// What keys do at a terminal, for `/help`.
const KEYS_HELP: &str = "\
Ctrl-C              clear the line; on an empty line stop the agent's turn, or when no turn
                    runs ask to stop the world; pressed again, stop it
Tab                 complete a command, an actor id, a folder or an answer's choice";

/// The column where `/help` describes each command.
const HELP_COLUMN: usize = 20;

/// The text of `/help`.
fn help() -> String {
    let mut text = format!("{LINES_HELP}\n");
    for command in &COMMANDS {
        text.push_str(&usage(command));
        text.push('\n');
    }
    text.push_str(KEYS_HELP);
    text
}

/// One command's entry in `/help`: how it is typed, then what it does in the second column.
fn usage(command: &CommandInfo) -> String {
    let indent = " ".repeat(HELP_COLUMN);
    let typed = format!("/{} {}", command.name, command.args);
    let typed = typed.trim_end();
    let mut text = if typed.len() < HELP_COLUMN {
        format!("{typed:HELP_COLUMN$}")
    } else {
        format!("{typed}\n{indent}")
    };
    text.push_str(&command.does.replace('\n', &format!("\n{indent}")));
    text
}

/// How a console session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// `/quit`, end of input, or Ctrl-C.
    Quit,
    /// A script failed: an `/await` ran out of time, or a `/deploy` failed.
    Failed,
}

/// The longest a `/deploy` step waits for its reply: a build may take cargo's whole limit.
const DEPLOY_STEP_LIMIT: Duration = Duration::from_secs(16 * 60);

/// How long completion waits for the broker's list of actors; past it, the ids it offers stay
/// as they were.
const LIST_PATIENCE: Duration = Duration::from_secs(10);

/// Runs the console for a script on `input` until `/quit`, end of input, a failed `/await` or
/// a failed `/deploy`. Every message is printed as one line.
pub async fn run(broker: Arc<Broker>, input: impl AsyncBufRead + Unpin) -> End {
    let console = Console::new(broker, Output::Script, None);
    let printer = console.spawn_printer();
    let mut lines = input.lines();
    let end = loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break End::Quit,
            Err(e) => {
                eprintln!("console: cannot read input: {e}");
                break End::Quit;
            }
        };
        let command = console.command(&line);
        if let Some(end) = console.execute(command, true).await {
            break end;
        }
        flush();
    };
    printer.abort();
    end
}

/// Runs the console for a person at a terminal until `/quit`, Ctrl-D, or a Ctrl-C that stops
/// the world (see [`Turns::interrupt`]); a Ctrl-C on a half-typed line only clears it. Lines
/// typed are kept in the world's console history.
pub async fn run_terminal(broker: Arc<Broker>) -> Result<End> {
    let prompt = LivePrompt::new();
    let known = Arc::new(Mutex::new(Known::default()));
    let history = broker.world.console_history_path();
    let (mut terminal, printer) = Terminal::start(&history, prompt.clone(), known.clone())?;
    // From here on SIGINT no longer ends the process: it comes here, as a Ctrl-C.
    let mut interrupts = signal(SignalKind::interrupt())?;
    let view = View {
        prompt,
        known,
        refresh: Notify::new(),
    };
    let console = Console::new(broker, Output::terminal(printer), Some(view));
    let tasks = [console.spawn_printer(), console.spawn_refresher()];
    console.refresh_ids();
    let end = loop {
        let value_for = console.value_for.lock().expect("value lock").take();
        if let Some(id) = value_for {
            // Read hidden, kept in no history, sent once with the approval.
            match terminal.next_hidden().await {
                Input::Line(value) if !value.is_empty() => console.approve_with(&id, value).await,
                Input::End => break End::Quit,
                _ => console
                    .out
                    .line(&format!("{id}: no value typed; it still waits")),
            }
            continue;
        }
        // Waits for: what the person typed (a line, Ctrl-C in the editor, the end), or a
        // SIGINT, which comes while the editor is not reading (the terminal is not raw then).
        let input = tokio::select! {
            input = terminal.next() => input,
            Some(()) = interrupts.recv() => Input::Interrupted,
        };
        let command = match input {
            Input::Line(line) => {
                console.turns(Turns::typed);
                console.refresh_ids();
                console.command(&line)
            }
            Input::Cleared => {
                console.turns(Turns::typed);
                continue;
            }
            Input::Interrupted => match console.interrupt().await {
                Some(end) => break end,
                None => continue,
            },
            Input::End => break End::Quit,
        };
        let run = console.execute(command, false);
        tokio::pin!(run);
        // Waits for: the command to finish, or a SIGINT while it runs (a long `/deploy`, a
        // `/sleep`), which is decided like a Ctrl-C at the prompt.
        let done = loop {
            tokio::select! {
                done = &mut run => break done,
                Some(()) = interrupts.recv() => {
                    if let Some(end) = console.interrupt().await {
                        break Some(end);
                    }
                }
            }
        };
        if let Some(end) = done {
            break end;
        }
    };
    for task in tasks {
        task.abort();
    }
    Ok(end)
}

/// The console's parts, shared by its loop and its tasks (all on the world's thread).
struct Console {
    broker: Arc<Broker>,
    me: ActorId,
    /// The person the console speaks for: the world's first owner (DESIGN §13); `None` only
    /// when `people.json` cannot be read (reported at start), and then its messages speak for
    /// nobody, as an actor's do.
    speaker: Option<Speaker>,
    awaited: Awaited,
    arrivals: Arrivals,
    /// Changed through [`Console::turns`], which keeps the prompt and completion in step.
    turns: Mutex<Turns>,
    out: Output,
    /// At a terminal only.
    view: Option<View>,
    /// At a terminal, `/approve` of a requested secret: the approval whose value the next
    /// line is, read hidden.
    value_for: Mutex<Option<String>>,
}

/// What a person at a terminal sees of the console's state besides messages.
struct View {
    prompt: LivePrompt,
    known: Arc<Mutex<Known>>,
    /// Wakes the task that asks the broker for the actor ids completion offers (after each
    /// line and each finished turn, when actors may have come or gone).
    refresh: Notify,
}

impl Console {
    fn new(broker: Arc<Broker>, out: Output, view: Option<View>) -> Arc<Console> {
        let speaker = match People::new(&broker.world).console_person() {
            Ok(person) => ActorId::parse(&person.id).ok().map(|id| Speaker {
                person: id,
                tier: person.tier,
            }),
            Err(e) => {
                tracing::warn!("{e:#}; the console speaks for nobody");
                None
            }
        };
        Arc::new(Console {
            broker,
            me: ActorId::parse("console").expect("valid id"),
            speaker,
            awaited: Awaited::default(),
            arrivals: Arrivals::default(),
            turns: Mutex::default(),
            out,
            view,
            value_for: Mutex::default(),
        })
    }

    /// Reads or changes the turns, then shows their state in the prompt and completion.
    fn turns<R>(&self, change: impl FnOnce(&mut Turns) -> R) -> R {
        let mut turns = self.turns.lock().expect("turns lock");
        let result = change(&mut turns);
        if let Some(view) = &self.view {
            view.prompt.set(turns.prompt());
            view.known.lock().expect("known lock").choices = turns
                .question()
                .map(|q| q.choices.clone())
                .unwrap_or_default();
        }
        result
    }

    /// The task that shows every message to the console, except replies a command waits for.
    /// The turns' state changes before the message is shown, so the prompt redrawn under it
    /// already says what comes next.
    fn spawn_printer(self: &Arc<Self>) -> JoinHandle<()> {
        let mailbox = self.broker.native_mailbox("console");
        let console = self.clone();
        tokio::spawn(async move {
            loop {
                let message = mailbox.recv().await;
                let Some(message) = console.awaited.answer(message) else {
                    continue;
                };
                let body = message.body_value();
                // Another person's conversation (a room's copy for a member who last spoke
                // elsewhere) is theirs, not the console's person's (DESIGN §13).
                if let (Some(to), Some(me)) = (body["for"].as_str(), &console.speaker)
                    && to != me.person.as_str()
                {
                    continue;
                }
                let ended = console.turns(|t| {
                    t.observe(
                        &message.id,
                        &message.from,
                        message.reply_to.as_deref(),
                        &body,
                    )
                });
                if ended {
                    console.refresh_ids();
                }
                // A turn's progress and tool notices (DESIGN §12) are shown, but a script's
                // `/await agent` waits for what the turn comes to, as it did before they existed.
                let notice = matches!(
                    body["type"].as_str(),
                    Some("progress" | "tool" | "subagent")
                );
                console
                    .out
                    .message(&message.from, message.reply_to.is_some(), body);
                if !notice {
                    console.arrivals.count(&message.from);
                }
            }
        })
    }

    /// The task that keeps the actor ids completion offers, asking the broker for its `list`
    /// when [`Console::refresh_ids`] says so.
    fn spawn_refresher(self: &Arc<Self>) -> JoinHandle<()> {
        let console = self.clone();
        tokio::spawn(async move {
            let Some(view) = &console.view else { return };
            loop {
                view.refresh.notified().await;
                let list = json!({"type": "list"});
                if let Ok(list) = console.ask(&ActorId::broker(), list, LIST_PATIENCE).await {
                    let ids = list["actors"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a["id"].as_str().map(str::to_string))
                        .collect();
                    view.known.lock().expect("known lock").ids = ids;
                }
            }
        })
    }

    fn refresh_ids(&self) {
        if let Some(view) = &self.view {
            view.refresh.notify_one();
        }
    }

    fn command(&self, line: &str) -> Command {
        let question = self.turns(|t| t.question().map(|q| q.id.clone()));
        command(line, question.as_deref())
    }

    /// Runs one command. Returns how the session ends, if it does. In a `script`, a failed
    /// `/await` or `/deploy` ends it; a person just reads what failed.
    async fn execute(&self, command: Command, script: bool) -> Option<End> {
        match command {
            Command::Nothing => {}
            Command::Send { to, body } => self.send(&to, &body, None).await,
            Command::Answer { question, text } => {
                self.turns(Turns::answered);
                let agent = ActorId::parse(AGENT).expect("valid id");
                let body = json!({"type": "answer", "text": text});
                self.send(&agent, &body, Some(&question)).await;
            }
            Command::Rewind(turn) => {
                // Without an id the agent picks the last turn of this conversation that
                // changed something: only it knows which turns have a checkpoint.
                let agent = ActorId::parse(AGENT).expect("valid id");
                let body = match turn {
                    Some(turn) => json!({"type": "rewind", "turn": turn}),
                    None => json!({"type": "rewind"}),
                };
                self.send(&agent, &body, None).await;
            }
            Command::Help => self.out.line(&help()),
            Command::Schedules => {
                let scheduler = ActorId::parse(crate::message::SCHEDULER).expect("valid id");
                let asked = json!({"type": "schedules"});
                let lines = match self.ask(&scheduler, asked, LIST_PATIENCE).await {
                    Ok(reply) => render::schedule_lines(&reply),
                    Err(e) => vec![format!("schedules: {e}")],
                };
                self.out.line(&lines.join("\n"));
            }
            Command::Approvals => {
                let asked = json!({"type": "approvals"});
                let lines = match self.ask(&ActorId::broker(), asked, LIST_PATIENCE).await {
                    Ok(reply) => render::approval_lines(&reply),
                    Err(e) => vec![format!("approvals: {e}")],
                };
                self.out.line(&lines.join("\n"));
            }
            Command::Decide(id, approve) => {
                let word = if approve { "approve" } else { "deny" };
                let Some(by) = &self.speaker else {
                    eprintln!("console: /{word}: this console speaks for nobody");
                    return None;
                };
                if approve
                    && self.view.is_some()
                    && let Some(what) = self.asks_a_value(&id).await
                {
                    // At a terminal the value is typed next, hidden.
                    self.out.line(&format!(
                        "{id} asks to {what}: type its value (each character shows as *; an \
                         empty line leaves it waiting)"
                    ));
                    *self.value_for.lock().expect("value lock") = Some(id);
                    return None;
                }
                let deciding = crate::broker::holds::Deciding {
                    id: &id,
                    by,
                    approve,
                    value: None,
                };
                self.decided(&id, word, self.broker.decide(deciding).await);
            }
            Command::Quit => return Some(End::Quit),
            Command::Sleep(time) => tokio::time::sleep(time).await,
            Command::Await { from, time } => {
                if tokio::time::timeout(time, self.arrivals.take(&from))
                    .await
                    .is_err()
                {
                    eprintln!(
                        "console: /await {from}: no message within {} s",
                        time.as_secs_f64()
                    );
                    if script {
                        return Some(End::Failed);
                    }
                }
            }
            Command::Deploy { actor, dir, shadow } => {
                if !self.deploy(&actor, &dir, shadow).await && script {
                    return Some(End::Failed);
                }
            }
            Command::Error(message) => eprintln!("console: {message}"),
        }
        None
    }

    /// What approval `id` asks, when it is a request for a secret's value that this console's
    /// person may answer.
    async fn asks_a_value(&self, id: &str) -> Option<String> {
        let approvals = self.broker.approvals();
        let id = id.to_string();
        let held = tokio::task::spawn_blocking(move || approvals.get(&id))
            .await
            .ok()?
            .ok()?;
        (held.action == "secret" && held.decision.is_none()).then_some(held.what)
    }

    /// Approves the requested secret `id` with the value typed hidden.
    async fn approve_with(&self, id: &str, value: String) {
        let Some(by) = &self.speaker else {
            return;
        };
        let deciding = crate::broker::holds::Deciding {
            id,
            by,
            approve: true,
            value: Some(value),
        };
        self.decided(id, "approve", self.broker.decide(deciding).await);
    }

    /// Shows how a decision went.
    fn decided(
        &self,
        id: &str,
        word: &str,
        answer: Result<Value, crate::broker::holds::Undecided>,
    ) {
        match answer {
            Ok(answer) => self.out.line(&format!(
                "{id} {}: {}",
                answer["type"].as_str().unwrap_or_default(),
                answer["what"].as_str().unwrap_or_default()
            )),
            Err(why) => eprintln!("console: /{word} {id}: {why}"),
        }
    }

    /// Sends a message. A text to the agent starts a turn, known by the message's id, which
    /// the console follows until its final reply.
    async fn send(&self, to: &ActorId, body: &Value, reply_to: Option<&str>) {
        let out = Outgoing::new(to, body)
            .replying_to(reply_to)
            .spoken_by(self.speaker.clone());
        let delivery = self.broker.router.accept(&self.me, out);
        if to.as_str() == AGENT && reply_to.is_none() && body["type"] == "text" {
            // Noted before delivery, so even the quickest reply finds its turn.
            self.turns(|t| t.started(delivery.id()));
        }
        self.broker.router.deliver(delivery).await;
    }

    /// Ctrl-C: stops the agent's running turns, or says how the session ends.
    async fn interrupt(&self) -> Option<End> {
        match self.turns(Turns::interrupt) {
            Interrupt::Quit => Some(End::Quit),
            Interrupt::Ask => {
                self.out
                    .line("press Ctrl-C again or type /quit to stop the world");
                None
            }
            Interrupt::Stop(turns) => {
                let agent = ActorId::parse(AGENT).expect("valid id");
                for turn in turns {
                    let body = json!({"type": "stop", "turn": turn});
                    self.send(&agent, &body, None).await;
                }
                self.out
                    .line("stopping the turn; press Ctrl-C again to stop the world");
                None
            }
        }
    }

    /// Sends a request and waits up to `patience` for its reply, which is not shown.
    async fn ask(&self, to: &ActorId, body: Value, patience: Duration) -> Result<Value, String> {
        let (tx, rx) = oneshot::channel();
        let delivery = self.broker.router.accept(
            &self.me,
            Outgoing::new(to, &body).spoken_by(self.speaker.clone()),
        );
        self.awaited
            .waiting
            .lock()
            .expect("awaited lock")
            .insert(delivery.id().to_string(), tx);
        self.broker.router.deliver(delivery).await;
        match tokio::time::timeout(patience, rx).await {
            Ok(Ok(reply)) => Ok(reply.body_value()),
            _ => Err(format!("no reply from {to}")),
        }
    }

    /// `/deploy <actor> <dir> [shadow]`: build with `cargo`, then `spawn` or `upgrade`, showing
    /// each step and the outcome. Returns whether the actor runs the new version.
    async fn deploy(&self, actor: &ActorId, dir: &str, shadow: Option<&str>) -> bool {
        let dir = match std::path::absolute(dir) {
            Ok(dir) => dir.display().to_string(),
            Err(e) => {
                self.out.line(&format!("deploy: `{dir}`: {e}"));
                return false;
            }
        };
        match self.try_deploy(actor, &dir, shadow).await {
            Ok(()) => true,
            Err(reason) => {
                self.out
                    .line(&format!("deploy: {actor} was not deployed: {reason}"));
                false
            }
        }
    }

    async fn try_deploy(
        &self,
        actor: &ActorId,
        dir: &str,
        shadow: Option<&str>,
    ) -> Result<(), String> {
        let cargo = ActorId::parse("cargo").expect("valid id");
        self.out.line(&format!("deploy: building {dir} …"));
        let build = json!({"type": "build", "source": dir});
        let built = self.ask(&cargo, build, DEPLOY_STEP_LIMIT).await?;
        if built["type"] != "built" {
            self.out.line(&script_line("cargo", true, built.clone()));
            return Err("the build failed".into());
        }
        self.out.line(&format!(
            "deploy: built {} in {} s",
            built["wasm"].as_str().unwrap_or("?"),
            built["seconds"]
        ));
        if let Some(warnings) = built["warnings"].as_str().filter(|w| !w.is_empty()) {
            let mut text = "  warnings:".to_string();
            for line in warnings.lines() {
                text.push_str(&format!("\n    {line}"));
            }
            self.out.line(&text);
        }
        let list = json!({"type": "list"});
        let list = self
            .ask(&ActorId::broker(), list, DEPLOY_STEP_LIMIT)
            .await?;
        let exists = list["actors"]
            .as_array()
            .is_some_and(|actors| actors.iter().any(|a| a["id"] == actor.as_str()));
        let kind = if exists { "upgrade" } else { "spawn" };
        self.out.line(&format!("deploy: {kind} {actor} …"));
        let mut request = json!({
            "type": kind, "actor": actor.as_str(), "wasm": built["wasm"],
            "source": dir, "built_by": "cargo",
        });
        if let (true, Some(shadow)) = (exists, shadow) {
            request["shadow"] = json!(shadow);
        }
        let reply = self
            .ask(&ActorId::broker(), request, DEPLOY_STEP_LIMIT)
            .await?;
        self.out.line(&script_line("broker", true, reply.clone()));
        match reply["type"].as_str() {
            Some("spawned" | "upgraded") => {
                if let Some(summary) = shadow_summary(&reply["shadow"]) {
                    self.out.line(&format!("deploy: shadow run: {summary}"));
                }
                self.out.line(&format!(
                    "deploy: {actor} runs version {}",
                    reply["version"]
                ));
                Ok(())
            }
            _ => Err(format!("the {kind} failed")),
        }
    }
}

/// One line about an upgrade's shadow run report (DESIGN §21), if it ran one.
fn shadow_summary(shadow: &Value) -> Option<String> {
    let messages = shadow.get("messages")?.as_u64()?;
    if messages == 0 {
        return Some("no recent messages to try it on".into());
    }
    let count = |field: &str| shadow[field].as_array().map_or(0, Vec::len);
    Some(format!(
        "of the actor's last {messages} messages {} answered the same, {} differently \
         (the first {} in the reply), {} noisy; {} files differ",
        shadow["same"],
        count("different"),
        count("different"),
        shadow["noisy"],
        count("files"),
    ))
}

/// Where the console's lines go.
enum Output {
    /// A script's stdout: every message as one line.
    Script,
    /// A person's terminal: above the line being typed, the agent's turns rendered.
    Terminal {
        printer: Printer,
        screen: Box<Mutex<Screen>>,
    },
}

/// What the console printed above the prompt, as far as it knows.
struct Screen {
    renderer: Renderer,
    /// The unfinished line of streamed text drawn as the last row above the prompt, which the
    /// next print erases and draws again (longer, or finished).
    live: Option<String>,
}

/// Erases the live line of `columns` columns from the row below it (where the editor's cleared
/// prompt starts, or the cursor rests while it does not read): up as many rows as the line
/// takes on a terminal `width` columns wide, to the row's start, and erase to the screen's end.
fn erase_live_line(columns: usize, width: usize) -> String {
    let rows = columns.div_ceil(width.max(1)).max(1);
    format!("\x1b[{rows}A\r\x1b[J")
}

impl Output {
    fn terminal(printer: Printer) -> Output {
        Output::Terminal {
            printer,
            screen: Box::new(Mutex::new(Screen {
                renderer: Renderer::new(DEFAULT_WIDTH),
                live: None,
            })),
        }
    }

    /// Shows a message to the console.
    fn message(&self, from: &ActorId, reply: bool, body: Value) {
        match self {
            Output::Script => Output::script(&script_line(from.as_str(), reply, body)),
            Output::Terminal { printer, screen } => {
                let mut screen = screen.lock().expect("screen lock");
                // One column is left free: a line that fills the last one makes some
                // terminals wrap an empty line after it.
                screen.renderer.width =
                    terminal::width().map_or(DEFAULT_WIDTH, |w| w.saturating_sub(1));
                screen.print(printer, |renderer| {
                    renderer.message(from.as_str(), reply, body)
                });
            }
        }
    }

    /// Shows a line of the console's own (a step of `/deploy`, `/help`).
    fn line(&self, text: &str) {
        match self {
            Output::Script => Output::script(text),
            Output::Terminal { printer, screen } => {
                let mut screen = screen.lock().expect("screen lock");
                screen.print(printer, |renderer| {
                    let mut lines = renderer.end_block();
                    lines.push(text.to_string());
                    lines
                });
            }
        }
    }

    fn script(text: &str) {
        println!("{text}");
        flush();
    }
}

impl Screen {
    /// Prints the lines `render` gives, then the unfinished streamed line, in one piece so
    /// that the prompt is redrawn once. The live line drawn last is erased first, since what
    /// follows it replaces it, unless something else went below it meanwhile: then it stays
    /// as drawn and the renderer starts anew.
    fn print(&mut self, printer: &Printer, render: impl FnOnce(&mut Renderer) -> Vec<String>) {
        if printer.moved() && self.live.take().is_some() {
            self.renderer.freeze();
        }
        let mut lines = render(&mut self.renderer);
        let partial = self.renderer.partial();
        if lines.is_empty() && partial == self.live {
            return;
        }
        let erase = match &self.live {
            Some(live) => erase_live_line(
                unicode_width::UnicodeWidthStr::width(live.as_str()),
                terminal::width().unwrap_or(DEFAULT_WIDTH),
            ),
            None => String::new(),
        };
        lines.extend(partial.clone());
        self.live = partial;
        if lines.is_empty() {
            // Nothing replaces the live line: it stays as drawn, which is all it said.
            return;
        }
        let mut text = format!("{erase}{}", lines.join("\n"));
        text.push('\n');
        printer.print(text);
    }
}

/// Replies a console command waits for itself (by the id of its request): they go to the
/// command instead of being shown.
#[derive(Default)]
struct Awaited {
    waiting: Mutex<HashMap<String, oneshot::Sender<Arc<Envelope>>>>,
}

impl Awaited {
    /// Hands a reply to the command waiting for it; gives back any other message.
    fn answer(&self, message: Arc<Envelope>) -> Option<Arc<Envelope>> {
        let waiter = message
            .reply_to
            .as_ref()
            .and_then(|id| self.waiting.lock().expect("awaited lock").remove(id));
        match waiter {
            // A command that gave up waiting no longer needs its reply.
            Some(waiter) => waiter.send(message).err(),
            None => Some(message),
        }
    }
}

/// Messages shown per sender and not yet taken by an `/await`, so that a reply shown before
/// its script reached `/await` still counts.
#[derive(Default)]
struct Arrivals {
    untaken: Mutex<HashMap<ActorId, u64>>,
    /// Wakes every waiting `/await` after each message shown.
    printed: Notify,
}

impl Arrivals {
    fn count(&self, from: &ActorId) {
        *self
            .untaken
            .lock()
            .expect("arrivals lock")
            .entry(from.clone())
            .or_default() += 1;
        self.printed.notify_waiters();
    }

    /// Waits for a message from `from` that no earlier call took, and takes it.
    async fn take(&self, from: &ActorId) {
        loop {
            let printed = self.printed.notified();
            tokio::pin!(printed);
            printed.as_mut().enable();
            if let Some(n) = self.untaken.lock().expect("arrivals lock").get_mut(from)
                && *n > 0
            {
                *n -= 1;
                return;
            }
            printed.await;
        }
    }
}

/// One console line, understood.
#[derive(Debug, PartialEq)]
enum Command {
    Nothing,
    Send {
        to: ActorId,
        body: Value,
    },
    /// A plain line while the agent's question `question` is open.
    Answer {
        question: String,
        text: String,
    },
    Help,
    /// `/schedules`: asks the scheduler and prints one line per schedule.
    Schedules,
    Quit,
    Sleep(Duration),
    Await {
        from: ActorId,
        time: Duration,
    },
    Deploy {
        actor: ActorId,
        dir: String,
        /// The upgrade's `"shadow"`, when given.
        shadow: Option<&'static str>,
    },
    /// `/rewind [<turn>]`: the turn to undo, or (none) the last one that changed something.
    Rewind(Option<String>),
    /// `/approvals`: asks the broker and prints one line per held action.
    Approvals,
    /// `/approve <id>` (true) or `/deny <id>` (false).
    Decide(String, bool),
    Error(String),
}

/// A text that starts with `{` was meant as JSON: one that does not parse is refused with the
/// parser's position rather than sent as text.
fn looks_like_json(text: &str) -> Result<(), String> {
    if !text.starts_with('{') {
        return Ok(());
    }
    serde_json::from_str::<Value>(text).map(drop).map_err(|e| {
        format!(
            "this starts with `{{` but is not JSON: {e}; fix it, or write text that does not \
             start with `{{`"
        )
    })
}

/// Understands a line. A plain line goes to the agent: as the answer while its `question` is
/// open (DESIGN §12), as a text otherwise.
fn command(line: &str, question: Option<&str>) -> Command {
    let line = line.trim();
    if line.is_empty() {
        return Command::Nothing;
    }
    if let Some(rest) = line.strip_prefix('@') {
        let (to, text) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let to = match ActorId::parse(to) {
            Ok(to) => to,
            Err(e) => return Command::Error(format!("@{to}: {e}")),
        };
        let text = text.trim();
        if text.is_empty() {
            return Command::Error(format!("@{to}: say what to send, as JSON or text"));
        }
        if let Err(e) = looks_like_json(text) {
            return Command::Error(format!("@{to}: {e}"));
        }
        let body = match serde_json::from_str::<Value>(text) {
            Ok(body @ Value::Object(_)) => body,
            _ => json!({"type": "text", "text": text}),
        };
        return Command::Send { to, body };
    }
    if let Err(e) = looks_like_json(line) {
        return Command::Error(e);
    }
    let Some(rest) = line.strip_prefix('/') else {
        return match question {
            Some(question) => Command::Answer {
                question: question.to_string(),
                text: line.to_string(),
            },
            None => Command::Send {
                to: ActorId::parse(AGENT).expect("valid id"),
                body: json!({"type": "text", "text": line}),
            },
        };
    };
    let mut words = rest.split_whitespace();
    let name = words.next().unwrap_or("");
    let args: Vec<&str> = words.collect();
    match (name, args.as_slice()) {
        ("help", []) => Command::Help,
        ("schedules", []) => Command::Schedules,
        ("quit", []) => Command::Quit,
        ("list", []) => Command::Send {
            to: ActorId::broker(),
            body: json!({"type": "list"}),
        },
        ("sleep", [secs]) => match seconds(secs) {
            Ok(time) => Command::Sleep(time),
            Err(e) => Command::Error(format!("/sleep: {e}")),
        },
        ("await", [actor, secs]) => match (ActorId::parse(actor), seconds(secs)) {
            (Ok(from), Ok(time)) => Command::Await { from, time },
            (Err(e), _) | (_, Err(e)) => Command::Error(format!("/await: {e}")),
        },
        ("approvals", []) => Command::Approvals,
        ("approve", [id]) => Command::Decide(id.to_string(), true),
        ("deny", [id]) => Command::Decide(id.to_string(), false),
        ("rewind", []) => Command::Rewind(None),
        ("rewind", [turn]) => Command::Rewind(Some(turn.to_string())),
        ("deploy", [actor, dir, rest @ ..]) if rest.len() <= 1 => {
            let shadow = match rest.first().copied() {
                None => Ok(None),
                Some("report") => Ok(Some("report")),
                Some("same") => Ok(Some("same")),
                Some("off") => Ok(Some("off")),
                Some(other) => Err(format!(
                    "/deploy: `{other}` is not a shadow run; give same (refuse any difference), \
                     off (skip it) or report (the default)"
                )),
            };
            match (ActorId::parse(actor), shadow) {
                (Ok(actor), Ok(shadow)) => Command::Deploy {
                    actor,
                    dir: dir.to_string(),
                    shadow,
                },
                (Err(e), _) => Command::Error(format!("/deploy: {e}")),
                (_, Err(e)) => Command::Error(e),
            }
        }
        _ if let Some(info) = COMMANDS.iter().find(|c| c.name == name) => {
            Command::Error(format!("/{name}: wrong arguments; usage:\n{}", usage(info)))
        }
        _ => {
            let names: Vec<String> = COMMANDS.iter().map(|c| format!("/{}", c.name)).collect();
            Command::Error(format!(
                "unknown command `/{name}`; commands: {}",
                names.join(", ")
            ))
        }
    }
}

fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("`{text}` is not a number of seconds"))
}

fn flush() {
    // A closed terminal is noticed at the next read; nothing to do here.
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(s: &str) -> ActorId {
        ActorId::parse(s).unwrap()
    }

    #[test]
    fn lines_become_commands() {
        let command = |line| command(line, None);
        assert_eq!(
            command(r#"@echo {"type":"ping"}"#),
            Command::Send {
                to: to("echo"),
                body: json!({"type": "ping"})
            }
        );
        assert_eq!(
            command("@echo hello there"),
            Command::Send {
                to: to("echo"),
                body: json!({"type": "text", "text": "hello there"})
            }
        );
        assert_eq!(
            command("@echo [1,2]"),
            Command::Send {
                to: to("echo"),
                body: json!({"type": "text", "text": "[1,2]"})
            }
        );
        assert_eq!(
            command("make me a counter"),
            Command::Send {
                to: to("agent"),
                body: json!({"type": "text", "text": "make me a counter"})
            }
        );
        assert_eq!(
            command("/sleep 0.5"),
            Command::Sleep(Duration::from_millis(500))
        );
        assert_eq!(
            command("/await echo 3"),
            Command::Await {
                from: to("echo"),
                time: Duration::from_secs(3)
            }
        );
        assert_eq!(
            command("/deploy c ./counter same"),
            Command::Deploy {
                actor: to("c"),
                dir: "./counter".into(),
                shadow: Some("same")
            }
        );
        assert_eq!(
            command("/deploy c ./counter"),
            Command::Deploy {
                actor: to("c"),
                dir: "./counter".into(),
                shadow: None
            }
        );
        assert_eq!(command("/approvals"), Command::Approvals);
        assert_eq!(command("/approve h3"), Command::Decide("h3".into(), true));
        assert_eq!(command("/deny h3"), Command::Decide("h3".into(), false));
        assert_eq!(command("/rewind"), Command::Rewind(None));
        assert_eq!(command("/rewind m-7"), Command::Rewind(Some("m-7".into())));
        assert_eq!(command("  "), Command::Nothing);
        assert_eq!(command("/quit"), Command::Quit);
    }

    #[test]
    fn while_a_question_is_open_the_next_plain_line_is_its_answer() {
        let question = Some("m-7");
        assert_eq!(
            command("  blue, please ", question),
            Command::Answer {
                question: "m-7".into(),
                text: "blue, please".into()
            }
        );
        assert_eq!(
            command("@agent blue", question),
            Command::Send {
                to: to("agent"),
                body: json!({"type": "text", "text": "blue"})
            },
            "an addressed line is not the answer"
        );
        assert_eq!(command("/list", question), command("/list", None));
        assert_eq!(
            command(" ", question),
            Command::Nothing,
            "nor is an empty one"
        );
    }

    #[test]
    fn wrong_lines_say_what_to_do() {
        for (line, expect) in [
            ("@Echo hi", "character"),
            ("@echo", "say what to send"),
            ("@", "empty"),
            ("/sleep soon", "not a number"),
            ("/sleep -1", "not a number"),
            ("/await echo", "usage"),
            ("/await ../x 1", "character"),
            (
                "/frobnicate",
                "unknown command `/frobnicate`; commands: /deploy, /rewind, /list, /schedules, \
                 /approvals, /approve, /deny, /sleep, /await, /help, /quit",
            ),
            ("/approve", "usage:\n/approve <id>"),
            ("/deny h1 h2", "usage:\n/deny <id>"),
            ("/approvals all", "usage:\n/approvals"),
            ("/deploy x", "usage"),
            ("/deploy X dir", "character"),
            ("/deploy x dir maybe", "not a shadow run; give same"),
            ("/rewind m-1 m-2", "usage"),
            ("/deploy x dir same more", "usage"),
            (
                "{\"type\": \"ping\"",
                "not JSON: EOF while parsing an object at line 1 column 15",
            ),
            (
                "@echo {\"type\": ping}",
                "@echo: this starts with `{` but is not JSON: expected value at line 1 column 10",
            ),
            ("/deploy", "usage:\n/deploy <actor> <dir> [same|off]\n"),
        ] {
            match command(line, None) {
                Command::Error(e) => assert!(e.contains(expect), "{line}: {e}"),
                other => panic!("{line}: {other:?}"),
            }
        }
        match command("/deploy", None) {
            Command::Error(e) => assert!(
                !e.contains("/list") && !e.contains("Ctrl-C"),
                "only its own usage, not all of /help: {e}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_live_line_is_erased_over_as_many_rows_as_it_takes() {
        assert_eq!(erase_live_line(12, 80), "\x1b[1A\r\x1b[J");
        assert_eq!(erase_live_line(80, 80), "\x1b[1A\r\x1b[J", "a full row");
        assert_eq!(erase_live_line(81, 80), "\x1b[2A\r\x1b[J", "wrapped once");
        assert_eq!(erase_live_line(0, 0), "\x1b[1A\r\x1b[J");
    }

    #[test]
    fn help_lists_every_command_in_one_column() {
        let help = help();
        assert!(
            help.contains(
                "/deploy <actor> <dir> [same|off]\n                    build the crate in <dir> with cargo"
            ),
            "{help}"
        );
        assert!(
            help.contains("/list               list the actors (asks the broker): at a terminal"),
            "{help}"
        );
        assert!(
            help.contains("that no earlier /await took\n                    (it may have arrived"),
            "{help}"
        );
        for command in &COMMANDS {
            assert!(help.contains(&format!("\n/{}", command.name)), "{help}");
        }
    }
}
