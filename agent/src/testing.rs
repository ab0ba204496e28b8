//! Test helpers: temporary folders, the recorded provider answers in `../shared/llm-fixtures/`
//! (read in place, never copied), and [`ScriptedHost`], the one helper through which tests drive
//! the agent: messages and HTTP answers in, messages and requests out.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use crate::host::{Event, Heard, Host, Posted};
use crate::message::{Api, HttpRequest, HttpResponse, Incoming, Outgoing};

/// A new empty folder for one test, under the test binary's target folder (not the system's
/// temporary folder): each run of the tests empties the folders of the run before.
pub fn temp_dir(name: &str) -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let root = ROOT.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary has a path");
        let root = exe
            .parent()
            .expect("the test binary is in a folder")
            .join("agent-test-folders");
        let _ = std::fs::remove_dir_all(&root); // The folders of the previous run, if any.
        root
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = root.join(format!("{name}-{n}"));
    std::fs::create_dir_all(&dir).expect("temporary folder");
    dir
}

/// A recorded provider body, or `None` (with a note) when the fixtures are not beside the checkout.
pub fn fixture(name: &str) -> Option<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/llm-fixtures");
    match std::fs::read(dir.join(name)) {
        Ok(bytes) => Some(bytes),
        Err(e) => {
            eprintln!(
                "skipping: fixture {name} not found in {} ({e})",
                dir.display()
            );
            None
        }
    }
}

/// One scripted answer to a POST.
pub enum Answer {
    /// A 2xx answer whose body is streamed to the agent in small pieces.
    Stream(Vec<u8>),
    /// A 2xx answer with these headers (names lowercased), its body streamed like `Stream`'s.
    Headed(Vec<(String, String)>, Vec<u8>),
    Refused(HttpResponse),
    Failed {
        why: String,
        retry: bool,
    },
    /// A shutdown came while the request was in flight.
    Stopped,
    /// The host is killed (`kill -9`) while this body streams: after it (the request's
    /// arrivals in its middle) the fake panics with [`KILLED`], so nothing after it runs, and
    /// what the agent committed to `/data` by then is all a restart finds.
    Kill(Vec<u8>),
}

/// The panic of [`Answer::Kill`].
pub const KILLED: &str = "the scripted host was killed";

/// A host that plays a script: `receive` returns `events` in order (then times out, or `Stop`s
/// a wait without a limit), `post` answers with `answers` in order (then asks `respond`);
/// `arrivals` are messages that come while the request with the given index (0 = the first) is
/// in flight, handed to its `meanwhile` in the middle of a streamed answer (or before any other
/// answer). What the agent sends and posts is recorded.
#[derive(Default)]
pub struct ScriptedHost {
    pub events: VecDeque<Event>,
    pub answers: VecDeque<Answer>,
    pub arrivals: Vec<(usize, Incoming)>,
    pub sent: Vec<Outgoing>,
    pub requests: Vec<HttpRequest>,
    /// The timeout of every `receive`, to check waits.
    pub waits: Vec<Option<Duration>>,
    /// The wall clock the agent sees; the real one when `None`.
    pub clock: Option<SystemTime>,
    /// Answers each request once `answers` is empty, for scripts too long to write out.
    pub respond: Option<Responder>,
    /// The random numbers `random` gives first; then a fixed sequence, so ids repeat run to run.
    pub randoms: VecDeque<u64>,
    /// How many numbers of the fixed sequence were given.
    pub drawn: u64,
}

/// Answers a request from what it holds.
pub type Responder = Box<dyn FnMut(&HttpRequest) -> Answer>;

/// How many bytes of a scripted stream the agent gets at a time: few, so parsers meet events,
/// lines and characters cut anywhere.
const STREAM_PIECE: usize = 7;

impl ScriptedHost {
    /// A 200 answer that streams this whole answer of whichever API shape it has (a Responses
    /// `response`, a Messages `message` or a `chat.completion`).
    pub fn ok(body: serde_json::Value) -> Answer {
        let api = if body["object"] == "chat.completion" || body.get("choices").is_some() {
            Api::OpenaiChat
        } else if body["type"] == "message" || body.get("content").is_some() {
            Api::AnthropicMessages
        } else {
            Api::OpenaiResponses
        };
        Answer::Stream(crate::provider::stream_of(api, &body))
    }

    /// An answer with this status, headers and JSON body.
    pub fn refused(status: u16, headers: &[(&str, &str)], body: serde_json::Value) -> Answer {
        Answer::Refused(HttpResponse {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: body.to_string().into_bytes(),
        })
    }
}

impl Host for ScriptedHost {
    /// Past the script, a wait with a time limit times out (as nothing else comes) and a wait
    /// without one ends the run.
    fn receive(&mut self, timeout: Option<Duration>) -> Event {
        self.waits.push(timeout);
        match (self.events.pop_front(), timeout) {
            (Some(event), _) => event,
            (None, Some(_)) => Event::TimedOut,
            (None, None) => Event::Stop,
        }
    }

    fn send(&mut self, message: &Outgoing) {
        self.sent.push(message.clone());
    }

    fn post(
        &mut self,
        request: &HttpRequest,
        stream: &mut dyn FnMut(&[u8]) -> Vec<Outgoing>,
        meanwhile: &mut dyn FnMut(Vec<Incoming>) -> Heard,
    ) -> Posted {
        let index = self.requests.len();
        self.requests.push(request.clone());
        let answer = match (self.answers.pop_front(), &mut self.respond) {
            (Some(answer), _) => answer,
            (None, Some(respond)) => respond(request),
            (None, None) => Answer::Failed {
                why: "the script has no more answers".into(),
                retry: false,
            },
        };
        let (now, later) = std::mem::take(&mut self.arrivals)
            .into_iter()
            .partition(|(during, _)| *during == index);
        self.arrivals = later;
        let mut now: Vec<Incoming> = now.into_iter().map(|(_, message)| message).collect();
        let body: &[u8] = match &answer {
            Answer::Stream(bytes) | Answer::Kill(bytes) | Answer::Headed(_, bytes) => bytes,
            _ => &[],
        };
        let pieces: Vec<&[u8]> = body.chunks(STREAM_PIECE).collect();
        for (n, piece) in pieces.iter().enumerate() {
            if n == pieces.len() / 2
                && !now.is_empty()
                && meanwhile(std::mem::take(&mut now)) == Heard::Drop
            {
                return Posted::Dropped;
            }
            self.sent.extend(stream(piece));
        }
        if !now.is_empty() && meanwhile(now) == Heard::Drop {
            return Posted::Dropped;
        }
        match answer {
            Answer::Stream(_) => Posted::Streamed {
                headers: Vec::new(),
            },
            Answer::Headed(headers, _) => Posted::Streamed { headers },
            Answer::Refused(response) => Posted::Refused(response),
            Answer::Failed { why, retry } => Posted::Failed { why, retry },
            Answer::Stopped => Posted::Stopped,
            Answer::Kill(_) => panic!("{KILLED}"),
        }
    }

    /// A script's messages come one at a time: through `receive`, or during a request through
    /// `post`'s `meanwhile`. None is ever read ahead.
    fn arrived(&mut self) -> Vec<Incoming> {
        Vec::new()
    }

    fn now(&self) -> SystemTime {
        self.clock.unwrap_or_else(SystemTime::now)
    }

    /// `randoms`, then SplitMix64 of 1, 2, 3…: well spread, never the same twice in a run.
    fn random(&mut self) -> u64 {
        if let Some(n) = self.randoms.pop_front() {
            return n;
        }
        self.drawn += 1;
        let mut z = self.drawn.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
