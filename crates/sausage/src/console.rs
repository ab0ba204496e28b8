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
use tokio::sync::Notify;

use crate::broker::Broker;
use crate::message::{ActorId, Envelope, Outgoing};

pub const HELP: &str = "\
@<actor> <json>     send that JSON object as the message body
@<actor> <text>     send {\"type\":\"text\",\"text\":<text>}
<text>              send text to the agent
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
    /// An `/await` ran out of time: a script failed.
    AwaitFailed,
}

/// Runs the console on `input` until `/quit`, end of input, or a failed `/await`.
pub async fn run(broker: Arc<Broker>, input: impl AsyncBufRead + Unpin) -> End {
    let me = ActorId::parse("console").expect("valid id");
    let mailbox = broker.native_mailbox("console");
    let arrivals = Arc::new(Arrivals::default());
    let printer = tokio::spawn({
        let arrivals = arrivals.clone();
        async move {
            loop {
                let message = mailbox.recv().await;
                print_message(&message);
                arrivals.count(&message.from);
            }
        }
    });

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
                    break End::AwaitFailed;
                }
            }
            Command::Error(message) => eprintln!("console: {message}"),
        }
        flush();
    };
    printer.abort();
    end
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
        ("sleep" | "await" | "help" | "quit" | "list", _) => {
            Command::Error(format!("/{name}: wrong arguments; usage:\n{HELP}"))
        }
        _ => Command::Error(format!(
            "unknown command `/{name}`; commands: /list, /help, /quit, /sleep, /await"
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
    let mut body = message.body_value();
    let mark = if message.reply_to.is_some() {
        " (reply)"
    } else {
        ""
    };
    let head = format!("[{}]{mark}", message.from);
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
            ("/deploy x y", "unknown command"),
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
