//! Keeping every request inside the model's context window (DESIGN §12, Context): estimating a
//! request's tokens, deciding when to compact, the transcript the model summarises, and the
//! history that replaces the old one (the recent user messages verbatim, then the summary).
//! Also the view of the history a request carries, where tool outputs of earlier turns are
//! shortened to their first lines.
//! **Invariant:** a compacted history holds at most one summary, never a summary of a summary's
//! text nested inside another, and no tool result without its call.

use crate::config::Config;
use crate::history::Entry;
use crate::message::shorten;

/// A request is compacted before it would fill more than this share of the context window.
pub const COMPACT_AT: f64 = 0.85;

/// The share of the window that the recent user messages, kept verbatim, may take.
pub const RECENT_USERS_SHARE: f64 = 0.20;

/// The share of the window the transcript sent for summarising may take; the rest is left for
/// the prompt and the summary itself.
pub const TRANSCRIPT_SHARE: f64 = 0.50;

/// Bytes of a request per token until a response tells the real figure: low, so the estimate
/// errs towards compacting early rather than overflowing.
pub const DEFAULT_BYTES_PER_TOKEN: f64 = 3.0;

/// Tool outputs of earlier turns longer than this are shortened in requests.
pub const FAR_OUTPUT_BYTES: usize = 2 * 1024;

/// How many first lines of a shortened tool output a request keeps.
pub const FAR_OUTPUT_LINES: usize = 12;

/// In a transcript for summarising, the most characters of one tool output.
const TRANSCRIPT_OUTPUT_CHARS: usize = 1_500;

/// What the model is asked to do when it writes the handoff summary.
pub const SUMMARY_PROMPT: &str = "You are the agent of a Sausage world, and your conversation \
has grown too long for your context window. Below is a transcript of it. Write a handoff summary \
that you will continue from: the conversation will go on from this summary and the most recent \
user messages alone. Include what each person asked and prefers, the goal being worked on and \
how far it got, what was done (files written with their paths, actors built, deployed or \
upgraded and their versions), decisions and their reasons, errors met and how they were solved \
or not, and the exact next steps. Keep names, ids and paths exact. Write plain notes, as short \
as completeness allows; do not call tools.";

/// The estimated tokens of a request of `bytes` bytes.
pub fn estimate(bytes: usize, bytes_per_token: f64) -> u64 {
    (bytes as f64 / bytes_per_token).ceil() as u64
}

/// Whether a request of `tokens` estimated tokens must wait for a compaction: past
/// [`COMPACT_AT`] of the window, or leaving no room for the answer.
pub fn too_big(tokens: u64, config: &Config) -> bool {
    let window = config.context_window as f64;
    tokens as f64 > COMPACT_AT * window || tokens + u64::from(config.max_tokens) > window as u64
}

/// The history as a request carries it: the summary as a user message, and tool outputs from
/// before `turn_start` (earlier turns) shortened to their first lines. Outputs of the turn in
/// progress stay whole, and the shortened part only moves when a turn starts, so a provider's
/// prompt cache stays valid within a turn.
pub fn view(entries: &[Entry], turn_start: usize) -> Vec<Entry> {
    entries
        .iter()
        .enumerate()
        .map(|(n, entry)| match entry {
            Entry::Summary { text } => Entry::user(summary_message(text)),
            Entry::ToolResult { id, output }
                if n < turn_start && output.len() > FAR_OUTPUT_BYTES =>
            {
                Entry::ToolResult {
                    id: id.clone(),
                    output: first_lines(output),
                }
            }
            other => other.clone(),
        })
        .collect()
}

fn summary_message(text: &str) -> String {
    format!(
        "(The conversation before this point outgrew the context window and was replaced by \
         this summary, which you wrote:)\n{text}"
    )
}

fn first_lines(output: &str) -> String {
    let lines: Vec<&str> = output.lines().take(FAR_OUTPUT_LINES).collect();
    let kept = shorten(&lines.join("\n"), FAR_OUTPUT_BYTES);
    format!(
        "{kept}\n[shortened: this output is from an earlier turn and was {} bytes; read it again \
         if you need it]",
        output.len()
    )
}

/// The transcript the model summarises: every entry as a line or block, the earlier summary
/// first, long tool outputs shortened; when longer than `max_bytes`, the oldest entries after
/// the earlier summary are left out (and the transcript says how many).
pub fn transcript(entries: &[Entry], max_bytes: usize) -> String {
    let mut earlier = None;
    let mut parts: Vec<String> = Vec::new();
    for entry in entries {
        match entry {
            Entry::Summary { text } => earlier = Some(format!("[earlier summary]\n{text}")),
            Entry::User { text } => parts.push(format!("[user]\n{text}")),
            Entry::Assistant { text, .. } if text.trim().is_empty() => {}
            Entry::Assistant { text, .. } => parts.push(format!("[you]\n{text}")),
            Entry::ToolCall {
                id,
                name,
                arguments,
                ..
            } => parts.push(format!(
                "[tool call {id}] {name} {}",
                shorten(&arguments.to_string(), TRANSCRIPT_OUTPUT_CHARS)
            )),
            Entry::ToolResult { id, output } => parts.push(format!(
                "[tool result {id}]\n{}",
                shorten(output, TRANSCRIPT_OUTPUT_CHARS)
            )),
            Entry::Opaque { .. } => {}
        }
    }
    let head = earlier.unwrap_or_default();
    let mut total = head.len();
    let mut kept = parts.len();
    while kept > 0 && total + parts[kept - 1].len() + 2 <= max_bytes {
        total += parts[kept - 1].len() + 2;
        kept -= 1;
    }
    let left_out = kept;
    let mut text = head;
    if left_out > 0 {
        text.push_str(&format!(
            "\n\n[{left_out} older entries are left out: the transcript was too long]"
        ));
    }
    for part in &parts[left_out..] {
        text.push_str("\n\n");
        text.push_str(part);
    }
    format!("{SUMMARY_REQUEST}\n\n{}", text.trim_start())
}

/// The user message that carries the transcript.
const SUMMARY_REQUEST: &str = "Write the handoff summary of this conversation.";

/// The history after a compaction: the latest user messages verbatim (newest first until they
/// would pass `keep_bytes`; the newest is always kept, shortened if it alone is too long), in
/// their order, then the new summary, then any tool call still waiting for its result.
pub fn compacted(entries: &[Entry], summary: String, keep_bytes: usize) -> Vec<Entry> {
    let mut users: Vec<Entry> = Vec::new();
    let mut total = 0;
    for entry in entries.iter().rev() {
        let Entry::User { text } = entry else {
            continue;
        };
        if total + text.len() > keep_bytes {
            if users.is_empty() {
                users.push(Entry::user(shorten(text, keep_bytes)));
            }
            break;
        }
        total += text.len();
        users.push(entry.clone());
    }
    users.reverse();
    let answered: Vec<&str> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::ToolResult { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    let open = entries
        .iter()
        .filter(|e| matches!(e, Entry::ToolCall { id, .. } if !answered.contains(&id.as_str())))
        .cloned();
    users.push(Entry::Summary { text: summary });
    users.extend(open);
    users
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(id: &str) -> Entry {
        Entry::ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: json!({"path": "/data/x"}),
            item_id: None,
        }
    }

    fn result(id: &str, output: &str) -> Entry {
        Entry::ToolResult {
            id: id.into(),
            output: output.into(),
        }
    }

    #[test]
    fn earlier_turns_outputs_are_shortened_and_the_current_turns_kept() {
        let long: String = (0..500).map(|n| format!("line {n}\n")).collect();
        let entries = vec![
            Entry::user("first"),
            call("c1"),
            result("c1", &long),
            Entry::user("second"),
            call("c2"),
            result("c2", &long),
        ];
        let view = view(&entries, 3);
        let Entry::ToolResult { output, .. } = &view[2] else {
            panic!()
        };
        assert!(output.starts_with("line 0\nline 1\n"), "{output}");
        assert!(output.contains("[shortened"), "{output}");
        assert!(output.len() < FAR_OUTPUT_BYTES + 200);
        assert_eq!(view[5], entries[5], "the current turn's output is whole");
    }

    #[test]
    fn a_compaction_keeps_recent_users_then_one_summary() {
        let entries = vec![
            Entry::Summary {
                text: "old summary".into(),
            },
            Entry::user("a".repeat(100)),
            call("c1"),
            result("c1", "ok"),
            Entry::assistant("done"),
            Entry::user("b".repeat(30)),
            Entry::user("c".repeat(30)),
            call("c2"),
        ];
        let new = compacted(&entries, "new summary".into(), 70);
        assert_eq!(
            new,
            vec![
                Entry::user("b".repeat(30)),
                Entry::user("c".repeat(30)),
                Entry::Summary {
                    text: "new summary".into()
                },
                call("c2"),
            ]
        );
        // The newest user message is kept even when it alone is too long, shortened.
        let new = compacted(&entries[..7], "s".into(), 10);
        assert!(matches!(&new[0], Entry::User { text } if text.starts_with("cccccccccc")));
        assert_eq!(new.len(), 2);
    }

    #[test]
    fn the_transcript_starts_with_the_earlier_summary_and_fits() {
        let mut entries = vec![Entry::Summary {
            text: "what happened before".into(),
        }];
        for n in 0..100 {
            entries.push(Entry::user(format!("question {n}")));
            entries.push(Entry::assistant(format!("answer {n}")));
        }
        let text = transcript(&entries, 400);
        assert!(text.starts_with(SUMMARY_REQUEST), "{text}");
        assert!(
            text.contains("[earlier summary]\nwhat happened before"),
            "{text}"
        );
        assert!(text.contains("older entries are left out"), "{text}");
        assert!(
            text.contains("answer 99") && !text.contains("question 0\n"),
            "{text}"
        );
        assert!(text.len() < 600, "{}", text.len());
    }
}
