//! The agent's own bookkeeping tools: the to-do card (`plan`), checked here and sent to the person
//! by the turn, and the notes (`note`), appended to `/data/notes.md` and shown to the model in
//! every request ([`notes_section`]).

use std::path::Path;

use serde_json::{Value, json};

use crate::message::shorten;

/// The most items of the to-do card: a card longer than this is a plan nobody reads.
pub const MAX_PLAN_ITEMS: usize = 30;

/// The most characters of one item; longer ones are shortened.
const PLAN_ITEM_CHARS: usize = 200;

/// The longest note: notes are reminders, not documents.
pub const MAX_NOTE_BYTES: usize = 2 * 1024;

/// How much of `notes.md` (its newest end) every request shows the model.
pub const NOTES_SHOWN: usize = 8 * 1024;

/// `plan`'s `items`, checked and normalised to `[{"text","done"}]`, or an error for the model.
pub fn plan(arguments: &Value) -> Result<Value, String> {
    let Some(items) = arguments["items"].as_array() else {
        return Err(
            "error: `items` must be an array of {\"text\": \"...\", \"done\": false}".into(),
        );
    };
    if items.len() > MAX_PLAN_ITEMS {
        return Err(format!(
            "error: a card holds at most {MAX_PLAN_ITEMS} items; merge some"
        ));
    }
    let mut card = Vec::new();
    for (n, item) in items.iter().enumerate() {
        let text = item["text"].as_str().map(str::trim).unwrap_or_default();
        let Some(done) = item["done"].as_bool() else {
            return Err(format!("error: item {n} needs `done`: true or false"));
        };
        if text.is_empty() {
            return Err(format!("error: item {n} needs a `text` saying what to do"));
        }
        card.push(json!({"text": shorten(text, PLAN_ITEM_CHARS), "done": done}));
    }
    Ok(Value::Array(card))
}

/// What `plan` answers: how far the card is.
pub fn plan_words(card: &Value) -> String {
    let items = card.as_array().map_or(&[][..], Vec::as_slice);
    let done = items.iter().filter(|i| i["done"] == true).count();
    format!("the card has {} items, {done} done", items.len())
}

/// `note`: one line (continued lines indented) appended to the notes file.
pub fn note(path: &Path, arguments: &Value) -> String {
    let text = match arguments["text"].as_str().map(str::trim) {
        Some(text) if !text.is_empty() => text,
        _ => return "error: `text` must say what to remember".into(),
    };
    if text.len() > MAX_NOTE_BYTES {
        return format!("error: a note is at most {MAX_NOTE_BYTES} bytes; keep it short");
    }
    let mut notes = std::fs::read_to_string(path).unwrap_or_default();
    notes.push_str(&format!("- {}\n", text.replace('\n', "\n  ")));
    match std::fs::write(path, &notes) {
        Ok(()) => format!("noted in /data/notes.md ({} bytes in all)", notes.len()),
        Err(e) => format!("error: /data/notes.md: {e}"),
    }
}

/// The prompt's section with the notes, their newest [`NOTES_SHOWN`] bytes; empty without notes.
pub fn notes_section(path: &Path) -> String {
    let notes = std::fs::read_to_string(path).unwrap_or_default();
    if notes.trim().is_empty() {
        return String::new();
    }
    let mut from = notes.len().saturating_sub(NOTES_SHOWN);
    while !notes.is_char_boundary(from) {
        from += 1;
    }
    let cut = if from > 0 {
        "(older notes are in the file)\n"
    } else {
        ""
    };
    format!(
        "\n\n## Your notes\n\nWhat you wrote down with `note` (in /data/notes.md, the newest \
         last):\n\n{cut}{}",
        &notes[from..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_is_checked_item_by_item_and_long_ones_refused() {
        let card = plan(&json!({"items": [{"text": " write ", "done": true}]})).unwrap();
        assert_eq!(card, json!([{"text": "write", "done": true}]));
        assert_eq!(plan_words(&card), "the card has 1 items, 1 done");
        let many: Vec<Value> = (0..=MAX_PLAN_ITEMS)
            .map(|n| json!({"text": format!("step {n}"), "done": false}))
            .collect();
        assert!(
            plan(&json!({"items": many}))
                .unwrap_err()
                .contains("at most 30")
        );
        let no_done = plan(&json!({"items": [{"text": "x"}]})).unwrap_err();
        assert!(no_done.contains("needs `done`"), "{no_done}");
    }

    #[test]
    fn notes_are_appended_and_only_their_newest_end_is_shown() {
        let path = crate::testing::temp_dir("notes").join("notes.md");
        assert_eq!(notes_section(&path), "");
        assert!(note(&path, &json!({"text": "two\nlines"})).starts_with("noted"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "- two\n  lines\n");
        let long = "x".repeat(MAX_NOTE_BYTES + 1);
        assert!(note(&path, &json!({"text": long})).contains("at most"));
        for n in 0..10 {
            note(&path, &json!({"text": format!("{n} {}", "é".repeat(500))}));
        }
        let shown = notes_section(&path);
        assert!(shown.contains("(older notes are in the file)"));
        assert!(shown.len() < NOTES_SHOWN + 200);
        assert!(shown.contains("- 9 "));
    }
}
