//! [`ScriptedHost`], the one helper through which tests drive the bridge: messages and `/sync`
//! answers in, lines and HTTP requests out, each line recorded with the `since` token that was
//! saved when it was written.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::host::{Event, Host, Outgoing, Request, Response};
use crate::state::State;

/// A new empty folder for one test, under the test binary's target folder.
pub fn temp_dir(name: &str) -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let root = ROOT.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary has a path");
        let root = exe
            .parent()
            .expect("the test binary is in a folder")
            .join("matrix-test-folders");
        let _ = std::fs::remove_dir_all(&root); // The folders of the previous run, if any.
        root
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = root.join(format!("{name}-{n}"));
    std::fs::create_dir_all(&dir).expect("temporary folder");
    dir
}

/// Answers a call from what it holds.
pub type Responder = Box<dyn FnMut(&Request) -> Result<Response, String>>;

/// A host that plays a script: `next` returns `events` in order, then `Stop`; `call` answers
/// with `answers` in order, then with [`ScriptedHost::ok`] (an event id for a send).
pub struct ScriptedHost {
    data: PathBuf,
    pub events: VecDeque<Event>,
    pub answers: VecDeque<Result<Response, String>>,
    pub respond: Option<Responder>,
    /// Each line written, with the `since` saved in `/data/state.json` at that moment.
    pub sent: Vec<(Outgoing, Option<String>)>,
    pub syncs: Vec<Request>,
    pub calls: Vec<Request>,
    pub pauses: Vec<Duration>,
    /// The timeout of every `next`.
    pub waits: Vec<Option<Duration>>,
    clock: Duration,
    events_made: usize,
}

impl ScriptedHost {
    pub fn new(data: &Path) -> ScriptedHost {
        ScriptedHost {
            data: data.to_path_buf(),
            events: VecDeque::new(),
            answers: VecDeque::new(),
            respond: None,
            sent: Vec::new(),
            syncs: Vec::new(),
            calls: Vec::new(),
            pauses: Vec::new(),
            waits: Vec::new(),
            clock: Duration::ZERO,
            events_made: 0,
        }
    }

    pub fn answer(status: u16, body: Value) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: body.to_string().into_bytes(),
        }
    }

    /// What the homeserver answers a call that succeeds: a new event id for a send.
    fn ok(&mut self, request: &Request) -> Response {
        if request.url.contains("/send/") {
            self.events_made += 1;
            ScriptedHost::answer(
                200,
                json!({"event_id": format!("$made{}", self.events_made)}),
            )
        } else {
            ScriptedHost::answer(200, json!({}))
        }
    }

    /// The lines written, without the saved token.
    pub fn lines(&self) -> Vec<&Outgoing> {
        self.sent.iter().map(|(line, _)| line).collect()
    }

    /// The calls to a URL containing `part`.
    pub fn calls_to(&self, part: &str) -> Vec<&Request> {
        self.calls.iter().filter(|c| c.url.contains(part)).collect()
    }
}

impl Host for ScriptedHost {
    fn start_sync(&mut self, request: Request) {
        self.syncs.push(request);
    }

    /// A scripted `TimedOut` moves the clock by the wait asked for, as a real wait would.
    fn next(&mut self, timeout: Option<Duration>) -> Event {
        let event = self.events.pop_front().unwrap_or(Event::Stop);
        if let (Event::TimedOut, Some(timeout)) = (&event, timeout) {
            self.clock += timeout;
        }
        self.waits.push(timeout);
        event
    }

    fn call(&mut self, request: &Request) -> Result<Response, String> {
        self.calls.push(request.clone());
        if let Some(answer) = self.answers.pop_front() {
            return answer;
        }
        if let Some(respond) = &mut self.respond {
            return respond(request);
        }
        Ok(self.ok(request))
    }

    fn send(&mut self, message: &Outgoing) {
        let since = State::load(&self.data).since;
        self.sent.push((message.clone(), since));
    }

    fn pause(&mut self, duration: Duration) -> bool {
        self.pauses.push(duration);
        self.clock += duration;
        true
    }

    fn now(&self) -> Duration {
        self.clock
    }
}
