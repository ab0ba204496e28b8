//! What the three APIs' event streams share: the choice of stream for a whole answer, the cutting
//! of text into deltas, and the streams that carry an error. Each API's own sequence of events
//! lives in its module; every event returned here is framed already (`event:`/`data:` lines and
//! the blank line), ready for one chunk of the body.

use serde_json::{Value, json};

use crate::anthropic::messages_stream;
use crate::chat::chat_stream;
use crate::openai::{responses_event, responses_skeleton, responses_stream};
use crate::usage::{Prompt, usage};
use crate::{Api, anthropic, chat, openai};

/// The longest piece (in bytes) of text or arguments one delta event carries. Text is cut at
/// words first, so even a short answer arrives as several deltas, as from the real services.
const MAX_DELTA_BYTES: usize = 8;

/// The comment OpenAI-style streams carry (as proxies and local servers send while a model
/// thinks); an SSE parser ignores it.
pub(crate) const KEEP_ALIVE: &str = ": keep-alive\n\n";

/// The framed events of a whole answer (whose `usage` is the fake's count).
pub(crate) fn stream(api: Api, answer: &Value) -> Vec<String> {
    match api {
        Api::OpenAi => responses_stream(answer),
        Api::Anthropic => messages_stream(answer),
        Api::Chat => chat_stream(answer),
    }
}

/// `text` cut into pieces of at most [`MAX_DELTA_BYTES`], each starting at a word where it can;
/// joined, they give `text` back.
pub(crate) fn pieces(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut previous_space = true;
    for (at, c) in text.char_indices() {
        let word_starts = c.is_whitespace() && !previous_space;
        if at > start && (word_starts || at + c.len_utf8() - start > MAX_DELTA_BYTES) {
            pieces.push(&text[start..at]);
            start = at;
        }
        previous_space = c.is_whitespace();
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

/// `base`'s fields and `fields`' together.
pub(crate) fn merged(base: &Value, fields: Value) -> Value {
    let mut all = base.clone();
    for (key, value) in fields.as_object().into_iter().flatten() {
        all[key] = value.clone();
    }
    all
}

/// A 200 stream that fails with `error` (the API's error body): Responses `response.created`,
/// `response.in_progress`, `error` (fields nested under `error`, as recorded) and
/// `response.failed`; Anthropic `message_start`, `ping` and `event: error` with the body as its
/// data; Chat its first chunk, then `data:` the body, and no `[DONE]`.
pub(crate) fn stream_error(api: Api, prompt: &Prompt, error: &Value) -> Vec<String> {
    match api {
        Api::OpenAi => {
            let skeleton = responses_skeleton(&openai::reply(vec![]));
            let inner = &error["error"];
            let code = match &inner["code"] {
                Value::Null => inner["type"].clone(),
                code => code.clone(),
            };
            let mut failed = skeleton.clone();
            failed["status"] = json!("failed");
            failed["error"] = json!({"code": code, "message": inner["message"]});
            let events = [
                json!({"type": "response.created", "response": skeleton}),
                json!({"type": "response.in_progress", "response": skeleton}),
                json!({"type": "error", "error": {
                    "type": inner["type"], "code": code, "message": inner["message"], "param": inner["param"],
                }}),
                json!({"type": "response.failed", "response": failed}),
            ];
            let mut framed: Vec<String> = events
                .into_iter()
                .enumerate()
                .map(|(sequence, payload)| responses_event(sequence, payload))
                .collect();
            framed.insert(2, KEEP_ALIVE.to_string());
            framed
        }
        Api::Anthropic => {
            let mut empty = anthropic::reply(vec![]);
            empty["usage"] = usage(api, prompt, &empty);
            let mut events = messages_stream(&empty);
            // `message_start` and its `ping`, then the error instead of the rest.
            events.truncate(2);
            events.push(format!("event: error\ndata: {error}\n\n"));
            events
        }
        Api::Chat => {
            let mut events = chat_stream(&chat::text_reply(""));
            events.truncate(2);
            events.push(format!("data: {error}\n\n"));
            events
        }
    }
}
