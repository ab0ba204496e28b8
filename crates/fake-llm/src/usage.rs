//! Usage: the tokens a request and its answer count, and the providers' prompt caches,
//! simulated. Every number is derived from bytes (see [`BYTES_PER_TOKEN`]), so a test can compute
//! what it expects; a cached count never exceeds the prompt's.

use std::collections::HashSet;
use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;

use serde_json::{Value, json};

use crate::Api;

/// Bytes the fake counts as one token, roughly what real tokenizers give for English and JSON. A
/// request's prompt is ceil(body bytes / 4) tokens and an answer's output ceil(bytes written / 4)
/// (at least 1): deterministic, so a test can compute every number it expects.
const BYTES_PER_TOKEN: usize = 4;

/// ceil(bytes / [`BYTES_PER_TOKEN`]).
pub(crate) fn tokens(bytes: usize) -> u64 {
    bytes.div_ceil(BYTES_PER_TOKEN) as u64
}

/// The prompt side of one request's usage. `tokens` is the whole prompt; `cache_read` of it came
/// from the cache and `cache_5m` + `cache_1h` were written to it (Anthropic only).
#[derive(Default)]
pub(crate) struct Prompt {
    tokens: u64,
    cache_read: u64,
    cache_5m: u64,
    cache_1h: u64,
}

/// The providers' prompt caches, simulated. OpenAI's two APIs cache automatically: a request
/// reads from the cache the longest byte prefix its body shares with a body served before (no
/// minimum length, no 128-token steps). Anthropic caches only what `cache_control` marks: the
/// prefix up to and including each marked block (tools, then system, then messages, with
/// `cache_control` itself left out so a moved breakpoint does not change the prefix) is written;
/// a later request whose last breakpoint is at or after a remembered prefix reads the longest
/// one, and what lies between that and its own breakpoints is written (no expiry, no minimum
/// length, no 20-block look-back).
#[derive(Default)]
pub(crate) struct Caches {
    /// Bodies served on `/v1/responses`.
    responses: Vec<Vec<u8>>,
    /// Bodies served on `/v1/chat/completions`.
    chat: Vec<Vec<u8>>,
    /// Hashes of the Anthropic prefixes written.
    messages: HashSet<u64>,
}

/// The end of one unit of a Messages request's cacheable prefix.
struct PrefixEnd {
    /// The hash of the prefix up to and including this unit.
    hash: u64,
    /// That prefix's length in bytes, as the fake serialises it.
    bytes: usize,
    /// Whether this unit carries `cache_control`, and for how long (`true`: `1h`).
    mark: Option<bool>,
}

impl Caches {
    /// Measures a request's prompt; `write` records what it puts into the cache (a served
    /// stream does; a streamed error does not).
    pub(crate) fn prompt(&mut self, api: Api, body: &Value, raw: &[u8], write: bool) -> Prompt {
        let total = tokens(raw.len());
        match api {
            Api::OpenAi | Api::Chat => {
                let served = match api {
                    Api::OpenAi => &mut self.responses,
                    _ => &mut self.chat,
                };
                let shared = served
                    .iter()
                    .map(|old| old.iter().zip(raw).take_while(|(a, b)| a == b).count())
                    .max()
                    .unwrap_or(0);
                if write {
                    served.push(raw.to_vec());
                }
                Prompt {
                    tokens: total,
                    cache_read: tokens(shared),
                    ..Prompt::default()
                }
            }
            Api::Anthropic => {
                let ends = prefix_ends(body);
                let Some(last) = ends.iter().rposition(|e| e.mark.is_some()) else {
                    return Prompt {
                        tokens: total,
                        ..Prompt::default()
                    };
                };
                let read_at = (0..=last)
                    .rev()
                    .find(|&k| self.messages.contains(&ends[k].hash));
                let read = read_at.map_or(0, |k| tokens(ends[k].bytes));
                let (mut cache_5m, mut cache_1h, mut before) = (0, 0, read);
                for end in &ends[read_at.map_or(0, |k| k + 1)..=last] {
                    let Some(one_hour) = end.mark else { continue };
                    let written = tokens(end.bytes) - before;
                    before = tokens(end.bytes);
                    if one_hour {
                        cache_1h += written;
                    } else {
                        cache_5m += written;
                    }
                }
                if write {
                    let marked = ends.iter().filter(|e| e.mark.is_some());
                    self.messages.extend(marked.map(|e| e.hash));
                }
                // The fake's serialisation of the prefix is not the body's own bytes: never
                // report more cached tokens than the prompt has.
                let cache_read = read.min(total);
                let cache_5m = cache_5m.min(total - cache_read);
                let cache_1h = cache_1h.min(total - cache_read - cache_5m);
                Prompt {
                    tokens: total,
                    cache_read,
                    cache_5m,
                    cache_1h,
                }
            }
        }
    }
}

/// A Messages request's cacheable prefix, unit by unit: each tool, each system block (a string
/// system is one text block), each message block with its role (a string content is one text
/// block).
fn prefix_ends(body: &Value) -> Vec<PrefixEnd> {
    // Each unit: the role of its message (none for tools and system), and the block.
    let mut units: Vec<(Option<&Value>, Value)> = Vec::new();
    let tools = body["tools"].as_array().into_iter().flatten();
    units.extend(tools.map(|tool| (None, tool.clone())));
    match &body["system"] {
        Value::String(text) => units.push((None, json!({"type": "text", "text": text}))),
        Value::Array(blocks) => units.extend(blocks.iter().map(|b| (None, b.clone()))),
        _ => {}
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let role = Some(&message["role"]);
        match &message["content"] {
            Value::String(text) => units.push((role, json!({"type": "text", "text": text}))),
            Value::Array(blocks) => units.extend(blocks.iter().map(|b| (role, b.clone()))),
            _ => {}
        }
    }
    let mut hasher = DefaultHasher::new();
    let mut bytes = 0;
    let mut ends = Vec::new();
    for (role, mut block) in units {
        let control = block
            .as_object_mut()
            .and_then(|b| b.remove("cache_control"))
            .filter(|c| !c.is_null());
        let text = match role {
            Some(role) => json!({"role": role, "block": block}).to_string(),
            None => block.to_string(),
        };
        hasher.write(text.as_bytes());
        bytes += text.len();
        ends.push(PrefixEnd {
            hash: hasher.finish(),
            bytes,
            mark: control.map(|c| c["ttl"] == "1h"),
        });
    }
    ends
}

/// The bytes of what the model wrote in a whole answer (texts, refusals, tool arguments,
/// thinking and reasoning summaries), and of those the reasoning alone.
fn written_bytes(api: Api, answer: &Value) -> (usize, usize) {
    let len = |v: &Value| v.as_str().map_or(0, str::len);
    let (mut all, mut reasoning) = (0, 0);
    match api {
        Api::OpenAi => {
            for item in answer["output"].as_array().into_iter().flatten() {
                match item["type"].as_str() {
                    Some("message") => {
                        for part in item["content"].as_array().into_iter().flatten() {
                            all += len(&part["text"]) + len(&part["refusal"]);
                        }
                    }
                    Some("function_call") => all += len(&item["arguments"]),
                    Some("reasoning") => {
                        for part in item["summary"].as_array().into_iter().flatten() {
                            reasoning += len(&part["text"]);
                        }
                    }
                    _ => {}
                }
            }
        }
        Api::Anthropic => {
            for block in answer["content"].as_array().into_iter().flatten() {
                match block["type"].as_str() {
                    Some("text") => all += len(&block["text"]),
                    Some("thinking") => reasoning += len(&block["thinking"]),
                    Some("tool_use") => all += block["input"].to_string().len(),
                    _ => {}
                }
            }
        }
        Api::Chat => {
            let message = &answer["choices"][0]["message"];
            all += len(&message["content"]);
            for call in message["tool_calls"].as_array().into_iter().flatten() {
                all += len(&call["function"]["arguments"]);
            }
        }
    }
    (all + reasoning, reasoning)
}

/// The usage object a whole answer reports, in the API's own fields: Responses and Chat count
/// cached tokens inside the prompt's; Anthropic's `input_tokens` exclude what was read from or
/// written to the cache. Anthropic keeps the scripted usage's other fields (`service_tier`, …).
pub(crate) fn usage(api: Api, prompt: &Prompt, answer: &Value) -> Value {
    let (written, reasoning) = written_bytes(api, answer);
    let output = tokens(written).max(1);
    match api {
        Api::OpenAi => json!({
            "input_tokens": prompt.tokens,
            "input_tokens_details": {"cached_tokens": prompt.cache_read},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": tokens(reasoning)},
            "total_tokens": prompt.tokens + output,
        }),
        Api::Anthropic => {
            let mut usage = answer["usage"].as_object().cloned().unwrap_or_default();
            let created = prompt.cache_5m + prompt.cache_1h;
            let fields = json!({
                "input_tokens": prompt.tokens - prompt.cache_read - created,
                "cache_creation_input_tokens": created,
                "cache_read_input_tokens": prompt.cache_read,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": prompt.cache_5m,
                    "ephemeral_1h_input_tokens": prompt.cache_1h,
                },
                "output_tokens": output,
            });
            if let Value::Object(fields) = fields {
                usage.extend(fields);
            }
            Value::Object(usage)
        }
        Api::Chat => json!({
            "prompt_tokens": prompt.tokens,
            "completion_tokens": output,
            "total_tokens": prompt.tokens + output,
            "prompt_tokens_details": {"cached_tokens": prompt.cache_read},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }),
    }
}
