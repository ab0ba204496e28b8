//! The one conversation, `/data/history.json`, in a neutral format that no provider owns, so the
//! configured API can change between two turns and the next request still carries everything.
//!
//! The file is one JSON object: `{"sent": <n>, "entries": [<entry>, ...]}`. `sent` counts the
//! messages the tools have sent (the next one gets the id `t<sent + 1>`, unique across restarts).
//! Each entry has a `kind`:
//! - `{"kind":"user","text":...}`: what a person or actor said, or a note from the agent itself
//!   (messages that arrived meanwhile, a restart).
//! - `{"kind":"assistant","text":...,"item_id"?:...,"steps"?:[...]}`: text the model wrote (or,
//!   when the model could not answer, the words the person got instead); `steps` is the
//!   waterfall of the turn it ended.
//! - `{"kind":"tool_call","id":...,"name":...,"arguments":{...},"item_id"?:...}`: the model asked
//!   for a tool; `arguments` is the JSON object it gave.
//! - `{"kind":"tool_result","id":...,"output":...}`: what the tool with the same `id` returned.
//! - `{"kind":"opaque","api":"openai-responses"|"anthropic-messages","item":{...}}`: a provider
//!   item only that API understands (OpenAI `reasoning`, Anthropic `thinking` and
//!   `redacted_thinking`), kept byte for byte and sent back only to the API that made it.
//!
//! - `{"kind":"summary","text":...}`: the handoff summary that replaced the older history when it
//!   outgrew the model's context window (`context.rs`); at most one, and a new one replaces it.
//!
//! `item_id` is OpenAI's own id of an output item (`msg_…`, `fc_…`): only OpenAI gives one, and
//! only OpenAI is sent it, so its reasoning items keep the item that followed them.
//! **Invariant:** every `tool_call` is followed, before the next `user` or `assistant` entry, by a
//! `tool_result` with its id; the cut in [`History::cut`] never separates the two.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::Api;

/// The most entries the history keeps. Longer, it is cut from the front (see [`History::cut`]),
/// so a request never grows past what a model can read and the file stays a few megabytes at most.
pub const MAX_ENTRIES: usize = 600;

/// The user entry that replaces a cut beginning when no user entry could start the kept part.
const CUT_NOTE: &str = "(The beginning of this conversation was cut to keep it short.)";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    User {
        text: String,
    },
    Assistant {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        item_id: Option<String>,
        /// On a turn's final answer: the turn's waterfall, as the answer's `steps` gave it, so
        /// the conversation a page loads shows it too. No provider is sent it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        steps: Option<Value>,
        /// On a turn's final answer: its `usage` and `stopped`, as the answer gave them, so a
        /// reloaded page shows the same cost line. No provider is sent it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Value>,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        item_id: Option<String>,
    },
    ToolResult {
        id: String,
        output: String,
    },
    Opaque {
        api: Api,
        item: Value,
    },
    Summary {
        text: String,
    },
}

impl Entry {
    pub fn user(text: impl Into<String>) -> Entry {
        Entry::User { text: text.into() }
    }

    pub fn assistant(text: impl Into<String>) -> Entry {
        Entry::Assistant {
            text: text.into(),
            item_id: None,
            steps: None,
            usage: None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    #[serde(default)]
    pub sent: u64,
    #[serde(default)]
    pub entries: Vec<Entry>,
}

impl History {
    /// The ids of tool calls that have no result yet, in order.
    pub fn open_calls(&self) -> Vec<String> {
        let mut open: Vec<String> = Vec::new();
        for entry in &self.entries {
            match entry {
                Entry::ToolCall { id, .. } => open.push(id.clone()),
                Entry::ToolResult { id, .. } => open.retain(|o| o != id),
                _ => {}
            }
        }
        open
    }

    /// Keeps at most [`MAX_ENTRIES`] entries by dropping the oldest ones. The kept part starts at
    /// a user entry, and no tool result is kept without its call. When no user entry can start
    /// it (one enormous turn), the kept part starts after a pair and a note replaces the rest.
    pub fn cut(&mut self) {
        let len = self.entries.len();
        if len <= MAX_ENTRIES {
            return;
        }
        let splits_no_pair = |start: usize| {
            let before: Vec<&str> = self.entries[..start]
                .iter()
                .filter_map(|e| match e {
                    Entry::ToolCall { id, .. } => Some(id.as_str()),
                    _ => None,
                })
                .collect();
            !self.entries[start..]
                .iter()
                .any(|e| matches!(e, Entry::ToolResult { id, .. } if before.contains(&id.as_str())))
        };
        let at_user = (len - MAX_ENTRIES..len)
            .find(|&s| matches!(self.entries[s], Entry::User { .. }) && splits_no_pair(s));
        // Dropping the drain removes what the search did not look at too.
        let summary = |mut dropped: std::vec::Drain<'_, Entry>| {
            dropped.rfind(|e| matches!(e, Entry::Summary { .. }))
        };
        // The summary stands for everything before it, so it outlives the cut.
        let kept_summary = match at_user {
            Some(start) => summary(self.entries.drain(..start)),
            None => {
                let start = (len - MAX_ENTRIES + 1..len)
                    .find(|&s| splits_no_pair(s))
                    .unwrap_or(len);
                let kept = summary(self.entries.drain(..start));
                self.entries.insert(0, Entry::user(CUT_NOTE));
                kept
            }
        };
        if let Some(summary) = kept_summary {
            self.entries.insert(0, summary);
        }
    }
}

/// Reads a history file; a missing file is an empty conversation.
pub fn load(path: &std::path::Path) -> Result<History, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: not a history this agent can read: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(History::default()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes the history, one entry a line so a person can read and diff it. Commit-on-close makes
/// the write atomic: a kill leaves the previous version whole.
pub fn save(path: &std::path::Path, history: &History) -> Result<(), String> {
    let mut text = format!("{{\"sent\": {}, \"entries\": [", history.sent);
    for (n, entry) in history.entries.iter().enumerate() {
        text.push_str(if n == 0 { "\n" } else { ",\n" });
        // An entry is built from strings and JSON values only, so it always serialises.
        text.push_str(&serde_json::to_string(entry).expect("an entry serialises"));
    }
    text.push_str("\n]}\n");
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Entry {
        Entry::ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: json!({"path": "/data"}),
            item_id: None,
        }
    }

    fn result(id: &str) -> Entry {
        Entry::ToolResult {
            id: id.into(),
            output: "ok".into(),
        }
    }

    #[test]
    fn a_short_history_is_not_cut() {
        let mut h = History {
            sent: 0,
            entries: vec![Entry::user("hi"), Entry::assistant("hello")],
        };
        h.cut();
        assert_eq!(h.entries.len(), 2);
    }

    #[test]
    fn the_cut_starts_at_a_user_entry_and_keeps_pairs_whole() {
        // Turns of: user, call, result, assistant (4 entries) ×200 = 800 entries.
        let mut entries = Vec::new();
        for n in 0..200 {
            entries.push(Entry::user(format!("question {n}")));
            entries.push(call(&format!("c{n}")));
            entries.push(result(&format!("c{n}")));
            entries.push(Entry::assistant(format!("answer {n}")));
        }
        let mut h = History { sent: 7, entries };
        h.cut();
        assert!(h.entries.len() <= MAX_ENTRIES);
        assert_eq!(h.entries[0], Entry::user("question 50"));
        assert_eq!(h.entries.len(), 600);
        assert!(h.open_calls().is_empty());
        assert_eq!(h.sent, 7);
    }

    #[test]
    fn the_cut_never_keeps_a_result_without_its_call() {
        // One old question, then a user note placed (wrongly) between a call and its result
        // exactly where the cut would fall: the cut must move past the pair.
        let mut entries = vec![Entry::user("old")];
        for n in 0..(MAX_ENTRIES / 2) {
            entries.push(call(&format!("c{n}")));
            entries.push(result(&format!("c{n}")));
        }
        let cut_at = entries.len() - MAX_ENTRIES;
        entries.insert(cut_at + 1, Entry::user("between"));
        let mut h = History { sent: 0, entries };
        h.cut();
        assert!(h.entries.len() <= MAX_ENTRIES);
        assert!(matches!(h.entries[0], Entry::User { .. }));
        let calls = h
            .entries
            .iter()
            .filter(|e| matches!(e, Entry::ToolCall { .. }))
            .count();
        let results = h
            .entries
            .iter()
            .filter(|e| matches!(e, Entry::ToolResult { .. }))
            .count();
        assert_eq!(calls, results);
    }

    #[test]
    fn a_history_round_trips_through_its_file() {
        let dir = crate::testing::temp_dir("history");
        let path = dir.join("history.json");
        assert_eq!(load(&path).unwrap(), History::default());
        let h = History {
            sent: 3,
            entries: vec![
                Entry::user("hi"),
                Entry::Opaque {
                    api: Api::OpenaiResponses,
                    item: json!({"type": "reasoning", "encrypted_content": "gAAA"}),
                },
                call("c1"),
                result("c1"),
                Entry::assistant("done"),
            ],
        };
        save(&path, &h).unwrap();
        assert_eq!(load(&path).unwrap(), h);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("{\"kind\":\"opaque\",\"api\":\"openai-responses\""));
    }
}
