//! Anthropic Messages (`POST /v1/messages`): the replies a test scripts, in the API's exact shape
//! (keys as in the recorded fixtures); and, inside the crate, the checks of a request (tool
//! pairing, thinking passed back as sent, `cache_control` breakpoints) and the event stream of a
//! whole answer.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};

use crate::checks::{
    check_schema_object, must_stream, non_empty_str, object, only_keys, tool_name,
};
use crate::ids::{BASE62, BASE64, fresh_id};
use crate::script::Sent;
use crate::stream::{merged, pieces};

/// The most `cache_control` breakpoints the Messages API accepts in one request; one more is
/// answered 400.
const MAX_CACHE_BREAKPOINTS: usize = 4;

/// The most spaces padded before the closing brace of an Anthropic `data:` line; the recordings
/// show such padding (a parser must not expect the line to end at the JSON).
const MAX_PADDING: usize = 15;

/// Top-level fields the real Messages API knows; any other is rejected, as the real one does.
const ANTHROPIC_FIELDS: &[&str] = &[
    "container",
    "context_management",
    "max_tokens",
    "mcp_servers",
    "messages",
    "metadata",
    "model",
    "output_config",
    "service_tier",
    "stop_sequences",
    "stream",
    "system",
    "temperature",
    "thinking",
    "tool_choice",
    "tools",
    "top_k",
    "top_p",
];

/// An assistant message made of `blocks` (from [`text`], [`tool_use`], [`thinking`]);
/// `stop_reason` is `tool_use` when a block is one, else `end_turn`. Its `usage` numbers are
/// placeholders: the fake reports its own count.
pub fn reply(blocks: Vec<Value>) -> Value {
    let stop_reason = if blocks.iter().any(|b| b["type"] == "tool_use") {
        "tool_use"
    } else {
        "end_turn"
    };
    json!({
        "content": blocks,
        "id": fresh_id("msg_01", BASE62, 22),
        "model": "claude-sonnet-4-5-20250929",
        "role": "assistant",
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "type": "message",
        "usage": {
            "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "inference_geo": "not_available",
            "input_tokens": 0,
            "output_tokens": 0,
            "service_tier": "standard",
        },
    })
}

/// A reply that is one text block: the end of a turn.
pub fn text_reply(text: &str) -> Value {
    reply(vec![self::text(text)])
}

pub fn text(text: &str) -> Value {
    json!({"text": text, "type": "text"})
}

pub fn tool_use(name: &str, input: Value) -> Value {
    json!({"id": fresh_id("toolu_01", BASE62, 22), "input": input, "name": name, "type": "tool_use"})
}

/// A thinking block with a fresh `signature`, which the fake then expects back unchanged
/// along with the thinking text.
pub fn thinking(thinking: &str) -> Value {
    let signature = fresh_id("Eq", BASE64, 300) + "==";
    json!({"signature": signature, "thinking": thinking, "type": "thinking"})
}

/// An error body, `{"type": "error", "error": {type, message}, "request_id"}`.
pub fn error(kind: &str, message: &str) -> Value {
    json!({
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": fresh_id("req_011", BASE62, 21),
    })
}

pub(crate) fn check_anthropic(body: &Value, sent: &Sent) -> Result<(), String> {
    let body = object(body, "the body")?;
    if let Some(key) = body
        .keys()
        .find(|k| !ANTHROPIC_FIELDS.contains(&k.as_str()))
    {
        return Err(format!("{key}: Extra inputs are not permitted"));
    }
    non_empty_str(body.get("model"), "model")?;
    let max_tokens = match body.get("max_tokens") {
        None => return Err("max_tokens: Field required".to_string()),
        Some(n) => n
            .as_u64()
            .filter(|n| *n >= 1)
            .ok_or(format!("max_tokens: expected a positive integer, got {n}"))?,
    };
    must_stream(body)?;
    match body.get("system") {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(blocks)) => {
            for (j, block) in blocks.iter().enumerate() {
                if block["type"] != "text" || !block["text"].is_string() {
                    return Err(format!("system.{j}: expected a text block"));
                }
                only_keys(
                    object(block, "system")?,
                    &["type", "text", "cache_control", "citations"],
                    &format!("system.{j}"),
                )?;
            }
        }
        Some(_) => return Err("system: expected a string or text blocks".to_string()),
    }
    let tools = match body.get("tools") {
        Some(tools) => check_anthropic_tools(tools)?,
        None => 0,
    };
    let thinking = match body.get("thinking") {
        None => false,
        Some(thinking) => match thinking["type"].as_str() {
            Some("disabled") => false,
            Some("adaptive") => true,
            Some("enabled") => {
                let budget = thinking["budget_tokens"].as_u64().unwrap_or(0);
                if budget < 1024 || budget >= max_tokens {
                    return Err(format!(
                        "thinking.budget_tokens: must be >= 1024 and less than max_tokens \
                         ({max_tokens}), got {}",
                        thinking["budget_tokens"]
                    ));
                }
                true
            }
            _ => {
                return Err(
                    "thinking.type: expected \"enabled\", \"adaptive\" or \"disabled\"".to_string(),
                );
            }
        },
    };
    let tool_choice = body.get("tool_choice").and_then(|c| c.get("type"));
    if thinking && tool_choice.is_some_and(|c| c == "any" || c == "tool") {
        return Err("Thinking may not be enabled when tool_choice forces tool use.".to_string());
    }
    check_cache_control(body)?;
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or("messages: expected a non-empty array")?;
    let uses_tools = check_anthropic_messages(messages, thinking, sent)?;
    if uses_tools && tools == 0 {
        return Err(
            "Requests which include `tool_use` or `tool_result` blocks must define tools."
                .to_string(),
        );
    }
    Ok(())
}

/// Checks tool definitions and returns how many there are.
fn check_anthropic_tools(tools: &Value) -> Result<usize, String> {
    let tools = tools.as_array().ok_or("tools: expected an array")?;
    let mut names = HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("tools.{i}");
        let tool = object(tool, &at)?;
        if tool.get("type").is_some_and(|t| t != "custom") {
            return Err(format!(
                "{at}.type: this fake knows only custom tools (no type, or \"custom\")"
            ));
        }
        only_keys(
            tool,
            &[
                "type",
                "name",
                "description",
                "input_schema",
                "cache_control",
            ],
            &at,
        )?;
        let name = tool_name(tool.get("name"), &at)?;
        if !names.insert(name) {
            return Err("tools: Tool names must be unique.".to_string());
        }
        if let Some(description) = tool.get("description") {
            description
                .as_str()
                .ok_or(format!("{at}.description: expected a string"))?;
        }
        let schema = tool.get("input_schema").unwrap_or(&Value::Null);
        check_schema_object(schema, &format!("{at}.input_schema"))?;
    }
    Ok(tools.len())
}

/// Checks roles, blocks, tool_use/tool_result pairing and thinking passback; returns whether any
/// tool_use or tool_result block appears.
fn check_anthropic_messages(
    messages: &[Value],
    thinking: bool,
    sent: &Sent,
) -> Result<bool, String> {
    // The previous assistant message's tool_use ids, which the next user message must answer.
    let mut pending: Vec<&str> = Vec::new();
    let mut tool_use_ids = HashSet::new();
    let mut uses_tools = false;
    for (i, message) in messages.iter().enumerate() {
        let at = format!("messages.{i}");
        let message = object(message, &at)?;
        only_keys(message, &["role", "content"], &at)?;
        let expected = if i % 2 == 0 { "user" } else { "assistant" };
        if message.get("role") != Some(&json!(expected)) {
            return Err(format!(
                "{at}.role: expected {expected:?}: roles must alternate between \"user\" and \
                 \"assistant\", starting with \"user\""
            ));
        }
        let blocks = match message.get("content") {
            Some(Value::String(text)) if text.is_empty() => {
                return Err(format!("{at}.content: text content must be non-empty"));
            }
            Some(Value::String(_)) => &[][..],
            Some(Value::Array(blocks)) if !blocks.is_empty() => blocks.as_slice(),
            _ => {
                return Err(format!(
                    "{at}.content: expected a string or non-empty blocks"
                ));
            }
        };
        let mut answered = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let at = format!("{at}.content.{j}");
            let block = object(block, &at)?;
            let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
            let for_role = match kind {
                "tool_result" | "image" | "document" => Some("user"),
                "tool_use" | "thinking" | "redacted_thinking" => Some("assistant"),
                _ => None,
            };
            if for_role.is_some_and(|role| role != expected) {
                return Err(format!(
                    "{at}.type: {kind} blocks belong in {} messages, not {expected} ones",
                    for_role.unwrap_or_default()
                ));
            }
            match kind {
                "text" => {
                    only_keys(block, &["type", "text", "citations", "cache_control"], &at)?;
                    non_empty_str(block.get("text"), &format!("{at}.text"))
                        .map_err(|_| format!("{at}.text: text content blocks must be non-empty"))?;
                }
                "image" | "document" => {}
                "tool_use" => {
                    uses_tools = true;
                    only_keys(
                        block,
                        &["type", "id", "name", "input", "cache_control", "caller"],
                        &at,
                    )?;
                    let id = non_empty_str(block.get("id"), &format!("{at}.id"))?;
                    if !id
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
                    {
                        return Err(format!("{at}.id: must match ^[a-zA-Z0-9_-]+$"));
                    }
                    if !tool_use_ids.insert(id) {
                        return Err(format!("{at}: `tool_use` ids must be unique: {id}"));
                    }
                    non_empty_str(block.get("name"), &format!("{at}.name"))?;
                    object(
                        block.get("input").unwrap_or(&Value::Null),
                        &format!("{at}.input"),
                    )?;
                }
                "tool_result" => {
                    uses_tools = true;
                    only_keys(
                        block,
                        &[
                            "type",
                            "tool_use_id",
                            "content",
                            "is_error",
                            "cache_control",
                        ],
                        &at,
                    )?;
                    let id = non_empty_str(block.get("tool_use_id"), &format!("{at}.tool_use_id"))?;
                    if !pending.contains(&id) || answered.contains(&id) {
                        return Err(format!(
                            "{at}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. \
                             Each `tool_result` block must have a corresponding `tool_use` block \
                             in the previous message."
                        ));
                    }
                    answered.push(id);
                    match block.get("content") {
                        None | Some(Value::String(_) | Value::Array(_)) => {}
                        _ => return Err(format!("{at}.content: expected a string or blocks")),
                    }
                    if block.get("is_error").is_some_and(|e| !e.is_boolean()) {
                        return Err(format!("{at}.is_error: expected a boolean"));
                    }
                }
                "thinking" => {
                    only_keys(block, &["type", "thinking", "signature"], &at)?;
                    let text = block.get("thinking").and_then(Value::as_str);
                    let signature = block.get("signature").and_then(Value::as_str);
                    let known = sent
                        .thinking
                        .iter()
                        .any(|(t, s)| Some(t.as_str()) == text && Some(s.as_str()) == signature);
                    if !known {
                        return Err(format!(
                            "{at}: Invalid `signature` in `thinking` block (the thinking and its \
                             signature must come back exactly as the fake sent them)"
                        ));
                    }
                }
                "redacted_thinking" => {
                    only_keys(block, &["type", "data"], &at)?;
                    let data = block.get("data").and_then(Value::as_str).unwrap_or("");
                    if !sent.redacted.iter().any(|d| d == data) {
                        return Err(format!(
                            "{at}.data: not a redacted_thinking block this fake sent"
                        ));
                    }
                }
                other => return Err(format!("{at}.type: unknown block type {other:?}")),
            }
        }
        if expected == "user" {
            let unanswered: Vec<&str> = pending
                .iter()
                .filter(|id| !answered.contains(id))
                .copied()
                .collect();
            if !unanswered.is_empty() {
                return Err(unanswered_tool_uses(i - 1, &unanswered));
            }
            pending.clear();
        } else {
            pending = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str())
                .collect();
        }
    }
    if !pending.is_empty() {
        return Err(unanswered_tool_uses(messages.len() - 1, &pending));
    }
    if thinking {
        check_thinking_leads(messages)?;
    }
    Ok(uses_tools)
}

fn unanswered_tool_uses(assistant: usize, ids: &[&str]) -> String {
    format!(
        "messages.{assistant}: `tool_use` ids were found without `tool_result` blocks immediately \
         after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the \
         next message.",
        ids.join(", ")
    )
}

/// With thinking enabled, a tool loop in progress (the last message carries tool results) must
/// show the model its own thinking: the assistant message before it starts with a thinking block.
fn check_thinking_leads(messages: &[Value]) -> Result<(), String> {
    let n = messages.len();
    let last = &messages[n - 1];
    let in_tool_loop = last["content"]
        .as_array()
        .is_some_and(|b| b.iter().any(|b| b["type"] == "tool_result"));
    if !in_tool_loop {
        return Ok(());
    }
    let first = &messages[n - 2]["content"][0]["type"];
    if first != "thinking" && first != "redacted_thinking" {
        return Err(format!(
            "messages.{}.content.0.type: Expected `thinking` or `redacted_thinking`, but found \
             {first}. When `thinking` is enabled, a final `assistant` message must start with a \
             thinking block.",
            n - 2
        ));
    }
    Ok(())
}

/// Prompt caching's rules: at most [`MAX_CACHE_BREAKPOINTS`] blocks (tools, system blocks,
/// message blocks) carry `cache_control`, each `{"type": "ephemeral"}` with an optional `ttl` of
/// `5m` or `1h` (every `1h` one before the `5m` ones), and never on an empty text block.
fn check_cache_control(body: &Map<String, Value>) -> Result<(), String> {
    let marked = cache_breakpoints(body);
    if marked.len() > MAX_CACHE_BREAKPOINTS {
        return Err(format!(
            "A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. \
             Found {}.",
            marked.len()
        ));
    }
    let mut five_minutes_seen = false;
    for (at, block) in marked {
        let control = object(&block["cache_control"], &format!("{at}.cache_control"))?;
        only_keys(control, &["type", "ttl"], &format!("{at}.cache_control"))?;
        if control.get("type") != Some(&json!("ephemeral")) {
            return Err(format!(
                "{at}.cache_control.type: Input should be 'ephemeral'"
            ));
        }
        let one_hour = match control.get("ttl") {
            None => false,
            Some(ttl) if ttl == "5m" => false,
            Some(ttl) if ttl == "1h" => true,
            Some(ttl) => {
                return Err(format!(
                    "{at}.cache_control.ttl: Input should be '5m' or '1h', got {ttl}"
                ));
            }
        };
        if one_hour && five_minutes_seen {
            return Err(format!(
                "{at}.cache_control.ttl: a ttl='1h' cache_control block must not come after a \
                 ttl='5m' one"
            ));
        }
        five_minutes_seen |= !one_hour;
        if block["type"] == "text" && block["text"] == "" {
            return Err(format!(
                "{at}.text: cache_control cannot be set for empty text blocks"
            ));
        }
    }
    Ok(())
}

/// The blocks of a Messages request that carry a `cache_control` (not null), with where they
/// are, in the order the API caches them: tools, system blocks, then message blocks.
fn cache_breakpoints(body: &Map<String, Value>) -> Vec<(String, &Value)> {
    let marked = |block: &&Value| block.get("cache_control").is_some_and(|c| !c.is_null());
    let mut found = Vec::new();
    let tools = body.get("tools").and_then(Value::as_array);
    for (i, tool) in tools.into_iter().flatten().enumerate() {
        found.push((format!("tools.{i}"), tool));
    }
    let system = body.get("system").and_then(Value::as_array);
    for (j, block) in system.into_iter().flatten().enumerate() {
        found.push((format!("system.{j}"), block));
    }
    let messages = body.get("messages").and_then(Value::as_array);
    for (i, message) in messages.into_iter().flatten().enumerate() {
        let blocks = message["content"].as_array();
        for (j, block) in blocks.into_iter().flatten().enumerate() {
            found.push((format!("messages.{i}.content.{j}"), block));
        }
    }
    found.retain(|(_, block)| marked(block));
    found
}

/// One Anthropic event, its data line padded before the closing brace as the recordings are.
fn messages_event(payload: &Value) -> String {
    // Steps through the paddings so they vary from line to line, as in the recordings.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let data = payload.to_string();
    let padding = (NEXT.fetch_add(7, Ordering::Relaxed) as usize) % (MAX_PADDING + 1);
    let (json, brace) = data.split_at(data.len() - 1);
    let kind = payload["type"].as_str().unwrap_or("");
    format!(
        "event: {kind}\ndata: {json}{}{brace}\n\n",
        " ".repeat(padding)
    )
}

/// Messages: `message_start` (usage with the prompt's counts and `output_tokens: 1`), a `ping`
/// after the first block starts, per block its start, deltas and stop, `message_delta` (stop
/// reason, final usage) and `message_stop`, which ends the body with no newline after it (as
/// the tool-use recording does).
pub(crate) fn messages_stream(answer: &Value) -> Vec<String> {
    let usage = &answer["usage"];
    let mut start = answer.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["stop_sequence"] = Value::Null;
    start["usage"]["output_tokens"] = json!(1);
    let ping = "event: ping\ndata: {\"type\": \"ping\"}\n\n".to_string();
    let mut events = vec![messages_event(
        &json!({"type": "message_start", "message": start}),
    )];
    let blocks = answer["content"].as_array().map_or(&[][..], Vec::as_slice);
    if blocks.is_empty() {
        events.push(ping.clone());
    }
    for (index, block) in blocks.iter().enumerate() {
        let started = match block["type"].as_str() {
            Some("text") => json!({"type": "text", "text": ""}),
            Some("thinking") => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Some("tool_use") => merged(block, json!({"input": {}})),
            _ => block.clone(),
        };
        events.push(messages_event(
            &json!({"type": "content_block_start", "index": index, "content_block": started}),
        ));
        if index == 0 {
            events.push(ping.clone());
        }
        let delta = |delta: Value| {
            messages_event(&json!({"type": "content_block_delta", "index": index, "delta": delta}))
        };
        match block["type"].as_str() {
            Some("text") => {
                for piece in pieces(block["text"].as_str().unwrap_or("")) {
                    events.push(delta(json!({"type": "text_delta", "text": piece})));
                }
            }
            Some("thinking") => {
                for piece in pieces(block["thinking"].as_str().unwrap_or("")) {
                    events.push(delta(json!({"type": "thinking_delta", "thinking": piece})));
                }
                let signature = &block["signature"];
                events.push(delta(
                    json!({"type": "signature_delta", "signature": signature}),
                ));
            }
            Some("tool_use") => {
                let input = block["input"].to_string();
                events.push(delta(
                    json!({"type": "input_json_delta", "partial_json": ""}),
                ));
                for piece in pieces(&input) {
                    events.push(delta(
                        json!({"type": "input_json_delta", "partial_json": piece}),
                    ));
                }
            }
            _ => {}
        }
        events.push(messages_event(
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    let final_usage = json!({
        "input_tokens": usage["input_tokens"],
        "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
        "cache_read_input_tokens": usage["cache_read_input_tokens"],
        "output_tokens": usage["output_tokens"],
    });
    events.push(messages_event(&json!({
        "type": "message_delta",
        "delta": {"stop_reason": answer["stop_reason"], "stop_sequence": answer["stop_sequence"]},
        "usage": final_usage,
    })));
    let stop = messages_event(&json!({"type": "message_stop"}));
    events.push(stop.trim_end_matches('\n').to_string());
    events
}
