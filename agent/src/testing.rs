//! Test helpers: temporary folders, the recorded provider answers in `../shared/llm-fixtures/`
//! (read in place, never copied), and [`ScriptedHost`], the one helper through which tests drive
//! the agent: messages and HTTP answers in, messages and requests out.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::host::{Event, Host, Outgoing, Posted};
use crate::provider::{HttpRequest, HttpResponse};

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

/// A host that plays a script: `receive` returns `events` in order (then `Stop`), `post`
/// returns `answers` in order; what the agent sends and posts is recorded.
#[derive(Default)]
pub struct ScriptedHost {
    pub events: VecDeque<Event>,
    pub answers: VecDeque<Posted>,
    pub sent: Vec<Outgoing>,
    pub requests: Vec<HttpRequest>,
    /// The timeout of every `receive`, to check waits.
    pub waits: Vec<Option<Duration>>,
}

impl ScriptedHost {
    /// A 200 answer with this JSON body.
    pub fn ok(body: serde_json::Value) -> Posted {
        Posted::Answered(HttpResponse {
            status: 200,
            body: body.to_string().into_bytes(),
        })
    }
}

impl Host for ScriptedHost {
    fn receive(&mut self, timeout: Option<Duration>) -> Event {
        self.waits.push(timeout);
        self.events.pop_front().unwrap_or(Event::Stop)
    }

    fn send(&mut self, message: &Outgoing) {
        self.sent.push(message.clone());
    }

    fn post(&mut self, request: &HttpRequest) -> Posted {
        self.requests.push(request.clone());
        self.answers
            .pop_front()
            .unwrap_or_else(|| Posted::Failed("the script has no more answers".into()))
    }
}
