//! The console end to end: the answer rule for the agent's questions (DESIGN §12) in a script,
//! and the console at a person's terminal (a pseudo-terminal: keys in, screen out), where
//! Ctrl-C stops the agent's turn before it stops the world. In these tests the test actor
//! `crasher` plays the agent: its `say` request makes it write any line, so it can ask a
//! question, and it answers what it does not know (a text, a stop) with an `error` reply.

mod support;

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use serde_json::{Value, json};
use support::*;

use sausage_core::broker::Broker;
use sausage_core::message::{ActorId, Outgoing};
use sausage_core::runtime::Runtime;
use sausage_core::world::World;

/// The line that makes `crasher` (installed as `agent`) ask the console a question whose id is
/// `agent/q1`.
fn ask_the_console(choices: &[&str]) -> Value {
    let question = json!({
        "to": "console", "id": "q1",
        "body": {"type": "question", "turn": "m-0", "text": "Which colour?", "choices": choices},
    });
    json!({"type": "say", "line": question.to_string()})
}

#[test]
fn the_answer_replies_to_the_question_and_the_line_after_is_a_text_again() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::new(dir.path().join("world"));
    world.create().unwrap();
    let rt = sausage_core::scheduler().unwrap();
    rt.block_on(async {
        let runtime = Runtime::new(None).unwrap();
        let broker = Broker::start(world, runtime).await.unwrap();
        // The test plays the agent, with a mailbox of its own.
        let agent = ActorId::parse("agent").unwrap();
        let agents_mailbox = broker.native_mailbox("agent");
        let console = ActorId::parse("console").unwrap();
        broker.native_mailbox("console");
        let question = json!({"type": "question", "turn": "m-0", "text": "Which?"});
        let question_id = broker
            .send(&agent, Outgoing::new(&console, &question))
            .await;

        // `/await` makes sure the console has seen the question before the next line.
        let script = "/await agent 10\n  red  \nblue\n";
        let end = sausage_core::console::run(broker.clone(), std::io::Cursor::new(script)).await;
        assert_eq!(end, sausage_core::console::End::Quit);

        let next = || async {
            tokio::time::timeout(PATIENCE, agents_mailbox.recv())
                .await
                .expect("a message for the agent")
        };
        let answer = next().await;
        assert_eq!(answer.from, console);
        assert_eq!(answer.reply_to.as_deref(), Some(question_id.as_str()));
        assert_eq!(
            answer.body_value(),
            json!({"type": "answer", "text": "red"})
        );
        let text = next().await;
        assert_eq!(
            text.reply_to, None,
            "one line answers, the next starts a turn"
        );
        assert_eq!(text.body_value(), json!({"type": "text", "text": "blue"}));
        broker.shutdown().await;
    });
}

#[test]
fn a_script_sees_the_question_as_json_and_answers_it_with_the_next_plain_line() {
    let world = TestWorld::new();
    world.install("agent", "crasher");
    let mut host = world.run();
    host.tell("agent", ask_the_console(&["red", "blue"]));
    let question = host.wait_type("agent", "question");
    assert_eq!(question["choices"], json!(["red", "blue"]));
    host.send("red");
    // The answer is a reply, so the crasher only notes that it does not know it.
    eventually("the answer to reach the agent", || {
        world.log("agent").contains(r#"unknown type "answer""#)
    });
    host.send("blue");
    let reply = host.wait_for("the agent's reply to a text", |m| {
        m.from == "agent" && m.reply && m.body["type"] == "error"
    });
    assert!(
        reply.body["reason"]
            .as_str()
            .unwrap()
            .contains(r#"unknown type "text""#),
        "the line after the answer is a text again: {}",
        reply.body
    );
    assert!(host.quit().success());
    assert!(
        !world.path("private/console/data/history").exists(),
        "a script keeps no history"
    );
}

#[test]
fn at_a_terminal_the_prompt_follows_the_turn_and_ctrl_c_stops_it_before_the_world() {
    let world = TestWorld::new();
    world.install("agent", "crasher");
    let mut screen = Screen::start(&world.root);
    screen.wait_for("sausage> ");

    // A text to the agent starts a turn: the crasher answers it with an error, which is not
    // the turn's final reply, so the turn still runs.
    screen.type_keys("hello\r");
    screen.wait_for(r#"[agent] error: unknown type "text""#);
    screen.wait_for("working> ");

    // Tab completes a command and an actor id.
    screen.type_keys("/he\t");
    screen.wait_for("/help ");
    screen.type_keys("\x15@ag"); // Ctrl-U empties the line first.
    screen.tab_until("@agent ");
    let question = ask_the_console(&["red", "blue"]).to_string();
    screen.type_keys(&format!("{question}\r"));
    screen.wait_for("[agent] asks: Which colour?");
    screen.wait_for("choices: red · blue");
    screen.wait_for(" answer> ");
    screen.type_keys("red\r");
    eventually("the answer to reach the agent", || {
        world.log("agent").contains(r#"unknown type "answer""#)
    });
    screen.wait_for("working> ");

    screen.type_keys("\x03");
    screen.wait_for("stopping the turn; press Ctrl-C again to stop the world");
    screen.wait_for(r#"[agent] error: unknown type "stop""#);
    screen.wait_for("working> ");
    screen.type_keys("\x03");
    screen.wait_for("sausage: stopping every actor");
    assert!(screen.wait_exit().success());

    let history = world.read("private/console/data/history");
    let lines: Vec<&str> = history.lines().collect();
    assert!(
        lines.len() == 3
            && lines[0] == "hello"
            && lines[1].starts_with("@agent {")
            && lines[2] == "red",
        "the lines typed are kept: {history}"
    );
}

#[test]
fn at_a_terminal_ctrl_c_clears_a_half_line_and_on_an_empty_line_asks_before_it_stops_the_world() {
    let world = TestWorld::new();
    let mut screen = Screen::start(&world.root);
    screen.wait_for("sausage> ");

    screen.type_keys("half a line\x03");
    screen.wait_for("sausage> ");
    // The world still runs: the next line is read and answered.
    screen.type_keys("/list\r");
    screen.wait_for("actors");
    let shown = screen.everything();
    assert!(
        !shown.contains("stop the world") && !shown.contains("undeliverable"),
        "a cleared line is neither sent nor a step toward stopping:\n{shown}"
    );

    screen.type_keys("\x03");
    screen.wait_for("press Ctrl-C again or type /quit to stop the world");
    // A line typed in between starts over: the next Ctrl-C asks again.
    screen.type_keys("/list\r");
    screen.wait_for("actors");
    screen.type_keys("\x03");
    screen.wait_for("press Ctrl-C again or type /quit to stop the world");
    screen.type_keys("\x03");
    screen.wait_for("sausage: stopping every actor");
    assert!(screen.wait_exit().success());

    let history = world.read("private/console/data/history");
    assert_eq!(history, "/list\n", "a cleared line is not kept");
}

/// The line that makes `crasher` (installed as `agent`) send the console these messages about
/// the turn `m-0`, one right after the other, with ids `agent/<id>`.
fn tell_the_console(messages: &[(&str, Value)]) -> String {
    let lines: Vec<String> = messages
        .iter()
        .map(|(id, body)| json!({"to": "console", "id": id, "body": body}).to_string())
        .collect();
    let say = json!({"type": "say", "line": lines.join("\n")});
    format!("@agent {say}\r")
}

fn progress(text: &str) -> Value {
    json!({"type": "progress", "turn": "m-0", "text": text})
}

#[test]
fn at_a_terminal_the_agents_unfinished_line_is_drawn_as_it_grows_and_never_twice() {
    let world = TestWorld::new();
    world.install("agent", "crasher");
    let mut screen = Screen::start(&world.root);
    screen.wait_for("sausage> ");

    screen.type_keys(&tell_the_console(&[("p1", progress("Hello wor"))]));
    screen.wait_for("[agent] Hello wor");
    // The line typed next went below the unfinished one, which stays as it was drawn: the rest
    // starts a block of its own. It comes in two pieces at once: the unfinished line is drawn,
    // then erased and drawn again in place, finished.
    screen.type_keys(&tell_the_console(&[
        ("p2", progress("ld, and ")),
        ("p3", progress("more.\nThen")),
    ]));
    screen.wait_for("[agent] ld, and");
    screen.wait_for("\x1b[1A\r\x1b[J[agent] ld, and more.\r\n        Then");
    // The final reply, all of which was streamed, is not printed again.
    let reply = json!({"type": "text", "turn": "m-0",
        "text": "Hello world, and more.\nThen it ended.",
        "usage": {"input_tokens": 1, "output_tokens": 2, "cost_usd": null}});
    screen.type_keys(&tell_the_console(&[
        ("p4", progress(" it ended.\n")),
        ("p5", reply),
    ]));
    screen.wait_for("[agent] it ended.");
    screen.wait_for("1 in · 2 out · cost unknown");
    // The typed lines hold the same words, so only the console's own lines are counted.
    let shown = screen.everything();
    for (text, times) in [
        ("[agent] Hello wor", 1),
        ("[agent] ld, and more.", 1),
        ("        Then", 1),
        ("[agent] it ended.", 1),
        ("[agent] Hello world", 0),
    ] {
        assert_eq!(shown.matches(text).count(), times, "{text:?} in:\n{shown}");
    }
    screen.type_keys("/quit\r");
    assert!(screen.wait_exit().success());
}

#[test]
fn at_a_terminal_the_login_link_is_printed_before_the_first_prompt() {
    let world = TestWorld::new();
    let mut screen = Screen::start_with(&world.root, &["--web", "127.0.0.1:0"]);
    screen.wait_for("sausage> ");
    let shown = screen.everything();
    let link = shown.find("web console: http://");
    assert!(
        link.is_some_and(|at| !shown[..at].contains("sausage> ")),
        "the link comes before the prompt, not over it:\n{shown}"
    );
    screen.type_keys("/quit\r");
    assert!(screen.wait_exit().success());
}

#[test]
fn at_a_terminal_an_error_reply_is_words_and_broken_json_is_refused_where_it_breaks() {
    let world = TestWorld::new();
    world.install("echo", "echo");
    let mut screen = Screen::start(&world.root);
    screen.wait_for("sausage> ");

    // A line that starts with `{` was meant as JSON: it is refused, not sent as text.
    screen.type_keys("{\"type\": \"ping\"\r");
    screen.wait_for("not JSON: EOF while parsing an object at line 1 column 15");

    // The scheduler's refusal reads as words, and names the cron field that is wrong.
    let schedule = json!({"type": "schedule", "cron": "0 25 * * *", "to": "echo",
        "body": {"type": "ping"}});
    screen.type_keys(&format!("@scheduler {schedule}\r"));
    screen.wait_for(r#"[scheduler] error: `cron` "0 25 * * *": the hour field `25` is wrong"#);
    screen.type_keys("/quit\r");
    assert!(screen.wait_exit().success());
}

#[test]
fn at_a_terminal_a_requested_secret_is_typed_hidden_and_kept_nowhere_but_its_file() {
    const VALUE: &str = "typed-h1dden-v4lue";
    let world = TestWorld::new();
    // What the agent's `request_secret` files for the console's person.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let waiting = json!({"next": 1, "held": [{
        "id": "h1", "action": "secret", "asked_by": "owner", "actor": "agent",
        "approver": "owner", "for": "owner", "why": "to read issues",
        "what": "set secret `gh` for https://api.github.com (header authorization)",
        "at": now, "expires": now + 3600,
        "request": {"name": "gh", "url": "https://api.github.com", "header": "authorization"},
    }]});
    std::fs::write(world.path("broker/approvals.json"), waiting.to_string()).unwrap();
    let mut screen = Screen::start(&world.root);
    screen.wait_for("sausage> ");
    screen.type_keys("/approve h1\r");
    screen.wait_for("type its value");
    screen.wait_for("  value> ");
    // An empty line leaves it waiting; the value typed next shows as stars.
    screen.type_keys("\r");
    screen.wait_for("h1: no value typed; it still waits");
    screen.type_keys("/approve h1\r");
    screen.wait_for("  value> ");
    screen.type_keys(VALUE);
    screen.wait_for(&"*".repeat(VALUE.len()));
    screen.type_keys("\r");
    screen.wait_for("h1 approved: set secret `gh`");
    screen.type_keys("/quit\r");
    assert!(screen.wait_exit().success());

    assert!(
        !screen.everything().contains(VALUE),
        "the screen showed the value"
    );
    let stored = world.read("broker/secrets/secrets.json");
    assert!(stored.contains(VALUE));
    let holding: Vec<_> = support::files_holding(&world.root, VALUE.as_bytes());
    assert_eq!(holding, [world.path("broker/secrets/secrets.json")]);
    assert!(!world.read("private/console/data/history").contains(VALUE));
}

/// `sausage run` on a pseudo-terminal: keys typed in, the screen's bytes (escape codes
/// included) read out.
struct Screen {
    child: Child,
    master: std::fs::File,
    /// Everything the host wrote, and a wake-up for each new piece.
    output: Arc<(Mutex<Vec<u8>>, Condvar)>,
    /// Where the next `wait_for` starts looking: each wait looks past the text the last one
    /// found.
    seen: usize,
}

impl Screen {
    fn start(world: &std::path::Path) -> Screen {
        Screen::start_with(world, &["--no-web"])
    }

    /// `sausage run WORLD ARGS…`.
    fn start_with(world: &std::path::Path, args: &[&str]) -> Screen {
        let (master, terminal) = open_pty();
        let mut command = Command::new(env!("CARGO_BIN_EXE_sausage"));
        command
            .arg("run")
            .arg(world)
            .args(args)
            .env("TERM", "xterm")
            .stdin(Stdio::from(terminal.try_clone().unwrap()))
            .stdout(Stdio::from(terminal.try_clone().unwrap()))
            .stderr(Stdio::from(terminal));
        // SAFETY: between fork and exec the closure only makes two system calls, which
        // allocate nothing and take no lock.
        unsafe {
            command.pre_exec(|| {
                // The host's own session, whose controlling terminal is the pseudo-terminal: a
                // Ctrl-C typed while the editor is not reading becomes a SIGINT, as at a real
                // terminal.
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
        let child = command.spawn().unwrap();
        let master = std::fs::File::from(master);
        let output: Arc<(Mutex<Vec<u8>>, Condvar)> = Arc::default();
        let mut reader = master.try_clone().unwrap();
        let shared = output.clone();
        std::thread::spawn(move || {
            let mut buffer = [0; 4096];
            // The read fails (EIO) once the host and every copy of the terminal are gone.
            while let Ok(n @ 1..) = reader.read(&mut buffer) {
                let (lock, ready) = &*shared;
                lock.lock().unwrap().extend_from_slice(&buffer[..n]);
                ready.notify_all();
            }
        });
        Screen {
            child,
            master,
            output,
            seen: 0,
        }
    }

    /// Everything the screen showed so far.
    fn everything(&self) -> String {
        String::from_utf8_lossy(&self.output.0.lock().unwrap()).into_owned()
    }

    fn type_keys(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).unwrap();
    }

    /// Waits until the screen shows `text` after what the last wait found.
    fn wait_for(&mut self, text: &str) {
        self.wait_for_one_of(&[text]);
    }

    /// Waits until the screen shows one of `texts` after what the last wait found; returns
    /// the index of the one shown first.
    fn wait_for_one_of(&mut self, texts: &[&str]) -> usize {
        let deadline = Instant::now() + PATIENCE;
        let (lock, ready) = &*self.output;
        let mut output = lock.lock().unwrap();
        loop {
            let shown = String::from_utf8_lossy(&output[self.seen..]).into_owned();
            let found = texts
                .iter()
                .enumerate()
                .filter_map(|(i, text)| shown.find(text).map(|at| (at + text.len(), i)))
                .min();
            if let Some((end, i)) = found {
                self.seen += shown[..end].len();
                return i;
            }
            let now = Instant::now();
            assert!(
                now < deadline,
                "the screen never showed {texts:?}; after the last wait it shows:\n{shown}"
            );
            output = ready.wait_timeout(output, deadline - now).unwrap().0;
        }
    }

    /// Presses Tab until the line completes to `text`. The actor ids completion offers come
    /// from the broker's `list`, which may still be on its way just after start; a Tab that
    /// finds nothing rings the bell.
    fn tab_until(&mut self, text: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            self.type_keys("\t");
            if self.wait_for_one_of(&[text, "\x07"]) == 0 {
                return;
            }
            assert!(Instant::now() < deadline, "Tab never completed to {text:?}");
        }
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        support::wait_exit(&mut self.child)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        // A test that failed half-way must not leave a host behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pseudo-terminal of 100 columns: its master (the test's end) and its terminal (the host's).
fn open_pty() -> (OwnedFd, OwnedFd) {
    let (mut master, mut terminal) = (0, 0);
    let size = libc::winsize {
        ws_row: 30,
        ws_col: 100,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two file descriptors into the integers given, reads the window
    // size given, and takes no name buffer or settings (null).
    let opened = unsafe {
        libc::openpty(
            &mut master,
            &mut terminal,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened by openpty and nothing else owns them.
    unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(terminal)) }
}
