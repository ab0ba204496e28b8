//! OpenAI Chat Completions (`POST /v1/chat/completions`): the replies a test scripts, in the
//! API's exact shape (keys as in the recorded fixtures); and, inside the crate, the checks of a
//! request (every tool call answered before the next turn) and the chunk stream of a whole
//! answer.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::checks::{
    check_schema_object, check_strict_schema, must_stream, non_empty_str, object, only_keys,
    tool_name,
};
use crate::ids::{BASE62, HEX, fresh_id, now};
use crate::openai;
use crate::stream::{KEEP_ALIVE, merged, pieces};

/// Top-level fields the real Chat Completions API knows; any other is rejected, as the real one
/// does.
const CHAT_FIELDS: &[&str] = &[
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "messages",
    "metadata",
    "modalities",
    "model",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
];

/// A whole `chat.completion` whose one choice is `message` (from [`message`]);
/// `finish_reason` is `tool_calls` when it has any, else `stop`. Its `usage` numbers are
/// placeholders: the fake reports its own count.
pub fn reply(message: Value) -> Value {
    let calls = message["tool_calls"]
        .as_array()
        .is_some_and(|c| !c.is_empty());
    let finish_reason = if calls { "tool_calls" } else { "stop" };
    json!({
        "id": fresh_id("chatcmpl-", BASE62, 29),
        "object": "chat.completion",
        "created": now(),
        "model": "gpt-4o-2024-08-06",
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason,
        }],
        "usage": {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "total_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
        "system_fingerprint": fresh_id("fp_", HEX, 10),
    })
}

/// A reply that is one text message: the end of a turn.
pub fn text_reply(text: &str) -> Value {
    reply(message(Some(text), vec![]))
}

/// An assistant message: `content` (null without text, as the API sends it beside tool
/// calls) and `tool_calls` (from [`tool_call`]; the field is left out when there are none).
pub fn message(content: Option<&str>, tool_calls: Vec<Value>) -> Value {
    let mut message = json!({"role": "assistant", "content": content, "refusal": null});
    if !tool_calls.is_empty() {
        message["tool_calls"] = json!(tool_calls);
    }
    message
}

/// One tool call; `arguments` is sent as a string holding its JSON.
pub fn tool_call(name: &str, arguments: Value) -> Value {
    json!({
        "id": fresh_id("call_", BASE62, 24),
        "type": "function",
        "function": {"name": name, "arguments": arguments.to_string()},
    })
}

/// An error body: the same shape as [`openai::error`].
pub fn error(kind: &str, message: &str) -> Value {
    openai::error(kind, message)
}

pub(crate) fn check_chat(body: &Value) -> Result<(), String> {
    let body = object(body, "the body")?;
    if let Some(key) = body.keys().find(|k| !CHAT_FIELDS.contains(&k.as_str())) {
        return Err(format!("Unrecognized request argument supplied: {key}"));
    }
    non_empty_str(body.get("model"), "model")?;
    must_stream(body)?;
    let include_usage = body
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .is_some_and(|u| u == true);
    if !include_usage {
        return Err(
            "stream_options: must be {\"include_usage\": true}: a stream without it reports no \
             usage, and the agent must count what it spends"
                .to_string(),
        );
    }
    only_keys(
        object(&body["stream_options"], "stream_options")?,
        &["include_usage", "include_obfuscation"],
        "stream_options",
    )?;
    for key in ["max_tokens", "max_completion_tokens"] {
        let given = body.get(key).filter(|n| !n.is_null());
        if let Some(n) = given.filter(|n| n.as_u64().is_none_or(|n| n < 1)) {
            return Err(format!("{key}: expected a positive integer, got {n}"));
        }
    }
    if body.contains_key("max_tokens") && body.contains_key("max_completion_tokens") {
        return Err(
            "max_tokens and max_completion_tokens: give one of them, not both (max_tokens is \
             deprecated in favour of max_completion_tokens)"
                .to_string(),
        );
    }
    if let Some(tools) = body.get("tools") {
        check_chat_tools(tools)?;
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("messages: Missing required parameter: 'messages'.")?;
    if messages.is_empty() {
        return Err("messages: [] is too short - 'messages'".to_string());
    }
    check_chat_messages(messages)
}

fn check_chat_tools(tools: &Value) -> Result<(), String> {
    let tools = tools.as_array().ok_or("tools: expected an array")?;
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("tools[{i}]");
        let tool = object(tool, &at)?;
        only_keys(tool, &["type", "function"], &at)?;
        if tool.get("type") != Some(&json!("function")) {
            return Err(format!("{at}.type: expected \"function\""));
        }
        let at = format!("{at}.function");
        let function = object(tool.get("function").unwrap_or(&Value::Null), &at)?;
        only_keys(
            function,
            &["name", "description", "parameters", "strict"],
            &at,
        )?;
        tool_name(function.get("name"), &at)?;
        if let Some(description) = function.get("description") {
            description
                .as_str()
                .ok_or(format!("{at}.description: expected a string"))?;
        }
        let parameters = function.get("parameters").unwrap_or(&Value::Null);
        check_schema_object(parameters, &format!("{at}.parameters"))?;
        if function.get("strict") == Some(&json!(true)) {
            check_strict_schema(parameters, &format!("{at}.parameters"))?;
        }
    }
    Ok(())
}

/// Checks roles and contents, and that every tool call is answered by a tool message before the
/// next message of another role, and no tool message answers nothing.
fn check_chat_messages(messages: &[Value]) -> Result<(), String> {
    // The latest assistant message's tool call ids not answered yet.
    let mut open: Vec<&str> = Vec::new();
    let mut call_ids = HashSet::new();
    for (i, message) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let message = object(message, &at)?;
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "tool" && !open.is_empty() {
            return Err(unanswered_tool_calls(&open));
        }
        let content = message.get("content").filter(|c| !c.is_null());
        match role {
            "system" | "developer" => {
                only_keys(message, &["role", "content", "name"], &at)?;
                check_chat_content(content, &["text"], &format!("{at}.content"))?;
            }
            "user" => {
                only_keys(message, &["role", "content", "name"], &at)?;
                let parts = ["text", "image_url", "input_audio", "file"];
                check_chat_content(content, &parts, &format!("{at}.content"))?;
            }
            "assistant" => {
                only_keys(
                    message,
                    &[
                        "role",
                        "content",
                        "name",
                        "tool_calls",
                        "refusal",
                        "audio",
                        "function_call",
                    ],
                    &at,
                )?;
                let calls = match message.get("tool_calls") {
                    None | Some(Value::Null) => &[][..],
                    Some(Value::Array(calls)) if !calls.is_empty() => calls.as_slice(),
                    Some(_) => {
                        return Err(format!(
                            "{at}.tool_calls: expected a non-empty array ([] is too short)"
                        ));
                    }
                };
                if content.is_some() || calls.is_empty() {
                    check_chat_content(content, &["text", "refusal"], &format!("{at}.content"))
                        .map_err(|e| {
                            format!("{e} (content is required unless tool_calls are given)")
                        })?;
                }
                for (j, call) in calls.iter().enumerate() {
                    let id = check_chat_tool_call(call, &format!("{at}.tool_calls[{j}]"))?;
                    if !call_ids.insert(id) {
                        return Err(format!(
                            "{at}.tool_calls[{j}].id: duplicate tool call id {id}"
                        ));
                    }
                    open.push(id);
                }
            }
            "tool" => {
                only_keys(message, &["role", "content", "tool_call_id"], &at)?;
                let id = non_empty_str(message.get("tool_call_id"), &format!("{at}.tool_call_id"))?;
                check_chat_content(content, &["text"], &format!("{at}.content"))?;
                let Some(k) = open.iter().position(|c| *c == id) else {
                    return Err(format!(
                        "{at}: Invalid parameter: messages with role 'tool' must be a response \
                         to a preceeding message with 'tool_calls' (no open call {id})."
                    ));
                };
                open.remove(k);
            }
            _ => {
                return Err(format!(
                    "{at}.role: Invalid value: {role:?}. Supported values are: 'system', \
                     'developer', 'user', 'assistant' and 'tool'."
                ));
            }
        }
    }
    if !open.is_empty() {
        return Err(unanswered_tool_calls(&open));
    }
    Ok(())
}

fn unanswered_tool_calls(ids: &[&str]) -> String {
    format!(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to \
         each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
        ids.join(", ")
    )
}

/// One tool call of an assistant message; returns its id.
fn check_chat_tool_call<'a>(call: &'a Value, at: &str) -> Result<&'a str, String> {
    let call = object(call, at)?;
    only_keys(call, &["id", "type", "function"], at)?;
    let id = non_empty_str(call.get("id"), &format!("{at}.id"))?;
    if call.get("type") != Some(&json!("function")) {
        return Err(format!("{at}.type: expected \"function\""));
    }
    let at = format!("{at}.function");
    let function = object(call.get("function").unwrap_or(&Value::Null), &at)?;
    only_keys(function, &["name", "arguments"], &at)?;
    non_empty_str(function.get("name"), &format!("{at}.name"))?;
    let arguments = function
        .get("arguments")
        .and_then(Value::as_str)
        .ok_or(format!("{at}.arguments: expected a string holding JSON"))?;
    if serde_json::from_str::<Value>(arguments).is_err() {
        return Err(format!("{at}.arguments: not JSON: {arguments:?}"));
    }
    Ok(id)
}

/// A message's content: a string, or an array of parts whose types are among `parts`.
fn check_chat_content(content: Option<&Value>, parts: &[&str], at: &str) -> Result<(), String> {
    match content {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(list)) => {
            for (j, part) in list.iter().enumerate() {
                let kind = part["type"].as_str().unwrap_or("");
                if !parts.contains(&kind) {
                    return Err(format!(
                        "{at}[{j}].type: Invalid value: {kind:?}. Supported values are: {parts:?}."
                    ));
                }
                if kind == "text" && !part["text"].is_string() {
                    return Err(format!("{at}[{j}].text: expected a string"));
                }
            }
            Ok(())
        }
        _ => Err(format!("{at}: expected a string or an array of parts")),
    }
}

/// Chat: a first chunk with the role (and the first tool call when there is no text), content
/// deltas, tool call deltas (id and name in a call's first fragment only), a chunk with
/// `finish_reason`, a `choices: []` chunk with the usage, then `data: [DONE]`.
pub(crate) fn chat_stream(answer: &Value) -> Vec<String> {
    let base = json!({
        "id": answer["id"],
        "object": "chat.completion.chunk",
        "created": answer["created"],
        "model": answer["model"],
        "system_fingerprint": answer["system_fingerprint"],
    });
    let chunk = |delta: Value, finish: Value| {
        let choice = json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish});
        let chunk = merged(&base, json!({"choices": [choice]}));
        format!("data: {chunk}\n\n")
    };
    let choice = &answer["choices"][0];
    let text = choice["message"]["content"].as_str().unwrap_or("");
    let calls = choice["message"]["tool_calls"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let first_fragment = |i: usize| {
        let call = &calls[i];
        json!({"index": i, "id": call["id"], "type": "function",
               "function": {"name": call["function"]["name"], "arguments": ""}})
    };
    let mut events = Vec::new();
    let opened_with_call = text.is_empty() && !calls.is_empty();
    if opened_with_call {
        let delta = json!({"role": "assistant", "content": null,
                           "tool_calls": [first_fragment(0)], "refusal": null});
        events.push(chunk(delta, Value::Null));
    } else {
        let delta = json!({"role": "assistant", "content": "", "refusal": null});
        events.push(chunk(delta, Value::Null));
    }
    events.push(KEEP_ALIVE.to_string());
    for piece in pieces(text) {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (i, call) in calls.iter().enumerate() {
        if i > 0 || !opened_with_call {
            events.push(chunk(
                json!({"tool_calls": [first_fragment(i)]}),
                Value::Null,
            ));
        }
        for piece in pieces(call["function"]["arguments"].as_str().unwrap_or("")) {
            let fragment = json!({"index": i, "function": {"arguments": piece}});
            events.push(chunk(json!({"tool_calls": [fragment]}), Value::Null));
        }
    }
    events.push(chunk(json!({}), choice["finish_reason"].clone()));
    let last = merged(&base, json!({"choices": [], "usage": answer["usage"]}));
    events.push(format!("data: {last}\n\n"));
    events.push("data: [DONE]\n\n".to_string());
    events
}
