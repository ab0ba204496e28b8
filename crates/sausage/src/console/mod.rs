//! The console (DESIGN §5): the native actor `console`, a terminal onto the world.
//!
//! It turns typed lines into messages and prints every message it gets. It is a client of the
//! broker like any actor: it sends through the router and reads its own mailbox. Scripts drive
//! it on stdin with `/sleep` and `/await`; end of input ends the run like `/quit`.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use tokio::sync::{Notify, oneshot};

use crate::broker::Broker;
use crate::message::{ActorId, Envelope, Outgoing};

pub const HELP: &str = "\
@<actor> <json>     send that JSON object as the message body
@<actor> <text>     send {\"type\":\"text\",\"text\":<text>}
<text>              send text to the agent
/deploy <actor> <dir>
                    build the crate in <dir> with cargo, then spawn or upgrade <actor>
/list               list the actors (asks the broker)
/sleep <seconds>    wait (for scripts)
/await <actor> <seconds>
                    wait for a message from <actor> that no earlier /await took
                    (it may have arrived already); fail after the time
/help               this help
/quit               stop every actor gracefully and exit (end of input does the same)";

/// Fields whose multi-line text is printed below the message, indented.
const BLOCK_FIELDS: [&str; 3] = ["errors", "warnings", "reason"];

/// How a console session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// `/quit` or end of input.
    Quit,
    /// A script failed: an `/await` ran out of time, or a `/deploy` failed in a script.
    Failed,
}

/// Runs the console on `input` until `/quit`, end of input, or a failed `/await`. When
/// `script` is set (input is not a person at a terminal), a failed `/deploy` ends it too.
pub async fn run(broker: Arc<Broker>, input: impl AsyncBufRead + Unpin, script: bool) -> End {
    let me = ActorId::parse("console").expect("valid id");
    let mailbox = broker.native_mailbox("console");
    let arrivals = Arc::new(Arrivals::default());
    let awaited = Arc::new(Awaited::default());
    let printer = tokio::spawn({
        let (arrivals, awaited) = (arrivals.clone(), awaited.clone());
        async move {
            loop {
                let message = mailbox.recv().await;
                let Some(message) = awaited.answer(message) else {
                    continue;
                };
                print_message(&message);
                arrivals.count(&message.from);
            }
        }
    });
    let session = Session {
        broker: broker.clone(),
        me: me.clone(),
        awaited,
    };

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
        match command(&line) {
            Command::Nothing => {}
            Command::Send { to, body } => {
                broker.send(&me, Outgoing::new(&to, &body)).await;
            }
            Command::Help => println!("{HELP}"),
            Command::Quit => break End::Quit,
            Command::Sleep(time) => tokio::time::sleep(time).await,
            Command::Await { from, time } => {
                if tokio::time::timeout(time, arrivals.take(&from))
                    .await
                    .is_err()
                {
                    eprintln!(
                        "console: /await {from}: no message within {} s",
                        time.as_secs_f64()
                    );
                    break End::Failed;
                }
            }
            Command::Deploy { actor, dir } => {
                if !session.deploy(&actor, &dir).await && script {
                    break End::Failed;
                }
            }
            Command::Error(message) => eprintln!("console: {message}"),
        }
        flush();
    };
    printer.abort();
    end
}

/// Replies a console command waits for itself (by the id of its request): they go to the
/// command instead of being printed.
#[derive(Default)]
struct Awaited {
    waiting: std::sync::Mutex<HashMap<String, oneshot::Sender<Arc<Envelope>>>>,
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

/// What console commands that talk to other actors need.
struct Session {
    broker: Arc<Broker>,
    me: ActorId,
    awaited: Arc<Awaited>,
}

/// The longest a `/deploy` step waits for its reply: a build may take cargo's whole limit.
const DEPLOY_STEP_LIMIT: Duration = Duration::from_secs(16 * 60);

impl Session {
    /// Sends a request and waits for its reply, which is not printed.
    async fn ask(&self, to: &ActorId, body: Value) -> Result<Value, String> {
        let (tx, rx) = oneshot::channel();
        let delivery = self
            .broker
            .router
            .accept(&self.me, Outgoing::new(to, &body));
        self.awaited
            .waiting
            .lock()
            .expect("awaited lock")
            .insert(delivery.id().to_string(), tx);
        self.broker.router.deliver(delivery).await;
        match tokio::time::timeout(DEPLOY_STEP_LIMIT, rx).await {
            Ok(Ok(reply)) => Ok(reply.body_value()),
            _ => Err(format!("no reply from {to}")),
        }
    }

    /// `/deploy <actor> <dir>`: build with `cargo`, then `spawn` or `upgrade`, printing each
    /// step and the outcome. Returns whether the actor runs the new version.
    async fn deploy(&self, actor: &ActorId, dir: &str) -> bool {
        let dir = match std::path::absolute(dir) {
            Ok(dir) => dir.display().to_string(),
            Err(e) => {
                println!("deploy: `{dir}`: {e}");
                return false;
            }
        };
        match self.try_deploy(actor, &dir).await {
            Ok(()) => true,
            Err(reason) => {
                println!("deploy: {actor} was not deployed: {reason}");
                false
            }
        }
    }

    async fn try_deploy(&self, actor: &ActorId, dir: &str) -> Result<(), String> {
        let cargo = ActorId::parse("cargo").expect("valid id");
        println!("deploy: building {dir} …");
        flush();
        let built = self
            .ask(&cargo, json!({"type": "build", "source": dir}))
            .await?;
        if built["type"] != "built" {
            println!("{}", render_body("cargo", true, built.clone()));
            return Err("the build failed".into());
        }
        println!(
            "deploy: built {} in {} s",
            built["wasm"].as_str().unwrap_or("?"),
            built["seconds"]
        );
        if let Some(warnings) = built["warnings"].as_str().filter(|w| !w.is_empty()) {
            println!("  warnings:");
            for line in warnings.lines() {
                println!("    {line}");
            }
        }
        let list = self
            .ask(&ActorId::broker(), json!({"type": "list"}))
            .await?;
        let exists = list["actors"]
            .as_array()
            .is_some_and(|actors| actors.iter().any(|a| a["id"] == actor.as_str()));
        let kind = if exists { "upgrade" } else { "spawn" };
        println!("deploy: {kind} {actor} …");
        flush();
        let reply = self
            .ask(
                &ActorId::broker(),
                json!({
                    "type": kind, "actor": actor.as_str(), "wasm": built["wasm"],
                    "source": dir, "built_by": "cargo",
                }),
            )
            .await?;
        println!("{}", render_body("broker", true, reply.clone()));
        match reply["type"].as_str() {
            Some("spawned" | "upgraded") => {
                println!("deploy: {actor} runs version {}", reply["version"]);
                Ok(())
            }
            _ => Err(format!("the {kind} failed")),
        }
    }
}

/// Messages printed per sender and not yet taken by an `/await`, so that a reply printed
/// before its script reached `/await` still counts.
#[derive(Default)]
struct Arrivals {
    untaken: std::sync::Mutex<HashMap<ActorId, u64>>,
    /// Wakes every waiting `/await` after each printed message.
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
    Send { to: ActorId, body: Value },
    Help,
    Quit,
    Sleep(Duration),
    Await { from: ActorId, time: Duration },
    Deploy { actor: ActorId, dir: String },
    Error(String),
}

fn command(line: &str) -> Command {
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
        let body = match serde_json::from_str::<Value>(text) {
            Ok(body @ Value::Object(_)) => body,
            _ => json!({"type": "text", "text": text}),
        };
        return Command::Send { to, body };
    }
    let Some(rest) = line.strip_prefix('/') else {
        return Command::Send {
            to: ActorId::parse("agent").expect("valid id"),
            body: json!({"type": "text", "text": line}),
        };
    };
    let mut words = rest.split_whitespace();
    let name = words.next().unwrap_or("");
    let args: Vec<&str> = words.collect();
    match (name, args.as_slice()) {
        ("help", []) => Command::Help,
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
        ("deploy", [actor, dir]) => match ActorId::parse(actor) {
            Ok(actor) => Command::Deploy {
                actor,
                dir: dir.to_string(),
            },
            Err(e) => Command::Error(format!("/deploy: {e}")),
        },
        ("sleep" | "await" | "help" | "quit" | "list" | "deploy", _) => {
            Command::Error(format!("/{name}: wrong arguments; usage:\n{HELP}"))
        }
        _ => Command::Error(format!(
            "unknown command `/{name}`; commands: /deploy, /list, /help, /quit, /sleep, /await"
        )),
    }
}

fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("`{text}` is not a number of seconds"))
}

/// Prints one message: `[from] text` for text bodies, `[from] {json}` otherwise, with
/// multi-line `errors`/`warnings`/`reason` below as indented blocks; replies are marked.
fn print_message(message: &Envelope) {
    println!("{}", render(message));
    flush();
}

fn render(message: &Envelope) -> String {
    render_body(
        message.from.as_str(),
        message.reply_to.is_some(),
        message.body_value(),
    )
}

fn render_body(from: &str, reply: bool, mut body: Value) -> String {
    let mark = if reply { " (reply)" } else { "" };
    let head = format!("[{from}]{mark}");
    if body["type"] == "text"
        && let Some(text) = body["text"].as_str()
    {
        return format!("{head} {text}");
    }
    let mut blocks = String::new();
    for field in BLOCK_FIELDS {
        if let Some(text) = body.get(field).and_then(Value::as_str)
            && text.contains('\n')
        {
            blocks.push_str(&format!("\n  {field}:"));
            let mut lines = 0;
            for line in text.lines() {
                blocks.push_str(&format!("\n    {line}"));
                lines += 1;
            }
            // The count tells a reader (a person or a script) where the message ends.
            body[field] = json!(format!("({lines} lines below)"));
        }
    }
    format!("{head} {body}{blocks}")
}

fn flush() {
    // A closed terminal is noticed at the next read; nothing to do here.
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::raw;

    fn to(s: &str) -> ActorId {
        ActorId::parse(s).unwrap()
    }

    #[test]
    fn lines_become_commands() {
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
        assert_eq!(command("  "), Command::Nothing);
        assert_eq!(command("/quit"), Command::Quit);
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
            ("/frobnicate", "unknown command `/frobnicate`"),
            ("/deploy x", "usage"),
            ("/deploy X dir", "character"),
        ] {
            match command(line) {
                Command::Error(e) => assert!(e.contains(expect), "{line}: {e}"),
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[test]
    fn messages_print_text_json_and_blocks() {
        let message = |body: Value, reply: bool| Envelope {
            id: "m-1".into(),
            from: to("echo"),
            reply_to: reply.then(|| "m-0".into()),
            body: raw(&body),
        };
        assert_eq!(
            render(&message(json!({"type": "text", "text": "hi"}), false)),
            "[echo] hi"
        );
        assert_eq!(
            render(&message(json!({"type": "pong"}), true)),
            r#"[echo] (reply) {"type":"pong"}"#
        );
        let shown = render(&message(
            json!({"type": "error", "reason": "line one\nline two"}),
            true,
        ));
        assert_eq!(
            shown,
            "[echo] (reply) {\"reason\":\"(2 lines below)\",\"type\":\"error\"}\n  reason:\n    line one\n    line two"
        );
    }
}
