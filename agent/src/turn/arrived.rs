//! The messages the host read while the model was asked (`Host::post`'s `meanwhile`), until the
//! turn keeps them: in memory, oldest first, and in `/data/arrived.jsonl`, one line each,
//! appended and closed in the wake-up that read them. A host counts a message delivered for good
//! once the agent commits a file after reading it (DESIGN §20), and a request can last minutes:
//! without this file a kill during one would lose every message read in it.
//! **Invariant:** every message waiting here is in the file, and the file is removed only when
//! none waits and the caller has kept every one it took; so after a kill its lines are read back
//! and kept, except those `inbox.json` already holds (a kill between the two writes).

use std::collections::{HashSet, VecDeque};
use std::io::Write;
use std::path::PathBuf;

use crate::message::Incoming;

pub(super) struct Arrived {
    /// Read, in the file, not yet taken by the turn; oldest first.
    waiting: VecDeque<Incoming>,
    /// `/data/arrived.jsonl`; `None` in a candidate, whose `/data` is the running agent's copy.
    path: Option<PathBuf>,
    /// The file may hold lines: set when it is written or found, cleared when it is removed.
    written: bool,
}

impl Arrived {
    pub fn new(path: Option<PathBuf>) -> Arrived {
        Arrived {
            waiting: VecDeque::new(),
            path,
            written: false,
        }
    }

    /// What a killed instance left in the file, in order, to be taken before anything read
    /// now. A message whose id is in `kept` (or already loaded) is left out, as it was kept;
    /// a line that is not a message is left out too, and the returned notes say which, for
    /// stderr.
    pub fn load(&mut self, mut kept: HashSet<String>) -> Vec<String> {
        let Some(path) = &self.path else {
            return Vec::new();
        };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => return vec![format!("{}: {e}", path.display())],
        };
        self.written = true;
        let mut notes = Vec::new();
        for (n, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if line.trim_ascii().is_empty() {
                continue;
            }
            match serde_json::from_slice::<Incoming>(line) {
                Ok(message) => {
                    // An empty id names nothing to compare with; any other is taken once.
                    if message.id.is_empty() || kept.insert(message.id.clone()) {
                        self.waiting.push_back(message);
                    }
                }
                Err(e) => notes.push(format!(
                    "{} line {}: skipped, not a message ({e})",
                    path.display(),
                    n + 1
                )),
            }
        }
        notes
    }

    /// Takes in the messages of one read, appending them to the file first (opened, written and
    /// closed here: a commit). A file that cannot be written is said on stderr; the messages
    /// still wait here, but a kill would lose them.
    pub fn add(&mut self, messages: Vec<Incoming>) {
        if let Some(path) = &self.path {
            // Whole, `trace` included (unlike the model's `to_line`), since a text among them may
            // start a turn; strings and a JSON value always serialise.
            let lines: String = (messages.iter())
                .map(|m| serde_json::to_string(m).expect("a message serialises") + "\n")
                .collect();
            let appended = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut file| file.write_all(lines.as_bytes()));
            match appended {
                Ok(()) => self.written = true,
                Err(e) => eprintln!(
                    "agent: {}: {e}; {} message(s) read during a model request are kept in \
                     memory only",
                    path.display(),
                    messages.len()
                ),
            }
        }
        self.waiting.extend(messages);
    }

    /// The oldest message waiting; the caller keeps it before it asks for the next.
    pub fn next(&mut self) -> Option<Incoming> {
        self.waiting.pop_front()
    }

    /// Removes the file once no message waits: every one taken has been kept by now.
    pub fn remove_if_empty(&mut self) -> Result<(), String> {
        let Some(path) = self.path.as_ref().filter(|_| self.written) else {
            return Ok(());
        };
        if !self.waiting.is_empty() {
            return Ok(());
        }
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("{}: {e}", path.display()))
            }
            _ => {
                self.written = false;
                Ok(())
            }
        }
    }
}
