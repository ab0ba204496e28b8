//! OpenAI Responses (`POST /v1/responses`): the replies a test scripts, in the API's exact shape
//! (keys as in the recorded fixtures); and, inside the crate, the checks of a request (with
//! `store: false`, reasoning must come back byte for byte as sent) and the event stream of a
//! whole answer.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::checks::{
    check_schema_object, check_strict_schema, must_stream, non_empty_str, object, one_of,
    only_keys, tool_name,
};
use crate::ids::{BASE62, BASE64URL, HEX, fresh_id, now};
use crate::script::Sent;
use crate::stream::{KEEP_ALIVE, merged, pieces};

/// The length OpenAI's `obfuscation` field pads a delta to (it hides the delta's size on the
/// wire); a field the agent must ignore.
const OBFUSCATION_BYTES: usize = 16;

/// Top-level fields the real Responses API knows; any other is rejected, as the real one does.
const OPENAI_FIELDS: &[&str] = &[
    "background",
    "conversation",
    "include",
    "input",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "model",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
];

/// A completed response whose `output` is `items` (from [`message`], [`function_call`],
/// [`reasoning`]). Its `usage` numbers are placeholders: the fake reports its own count.
pub fn reply(items: Vec<Value>) -> Value {
    let now = now();
    json!({
        "id": fresh_id("resp_", HEX, 50),
        "object": "response",
        "created_at": now,
        "status": "completed",
        "background": false,
        "billing": {"payer": "developer"},
        "completed_at": now,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "max_tool_calls": null,
        "model": "gpt-5-mini-2025-08-07",
        "output": items,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "prompt_cache_key": null,
        "prompt_cache_retention": null,
        "reasoning": {"effort": "medium", "summary": null},
        "safety_identifier": null,
        "service_tier": "default",
        "store": false,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": 0,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 0,
        },
        "user": null,
        "metadata": {},
    })
}

/// A reply that is one assistant message: the end of a turn.
pub fn text_reply(text: &str) -> Value {
    reply(vec![message(text)])
}

/// An assistant message output item.
pub fn message(text: &str) -> Value {
    json!({
        "id": fresh_id("msg_", HEX, 50),
        "type": "message",
        "status": "completed",
        "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}],
        "role": "assistant",
    })
}

/// A function call output item; `arguments` is sent as a string holding its JSON.
pub fn function_call(name: &str, arguments: Value) -> Value {
    json!({
        "type": "function_call",
        "id": fresh_id("fc_", HEX, 48),
        "call_id": fresh_id("call_", BASE62, 24),
        "name": name,
        "arguments": arguments.to_string(),
        "status": "completed",
    })
}

/// A reasoning item carrying a fresh `encrypted_content`, which the fake then expects back
/// unchanged; an empty `summary` sends `"summary": []`, as the API does without a summary.
pub fn reasoning(summary: &str) -> Value {
    let summary: Vec<Value> = if summary.is_empty() {
        vec![]
    } else {
        vec![json!({"type": "summary_text", "text": summary})]
    };
    json!({
        "id": fresh_id("rs_", HEX, 50),
        "type": "reasoning",
        "encrypted_content": fresh_id("gAAAAAB", BASE64URL, 400),
        "summary": summary,
    })
}

/// An error body, `{"error": {message, type, param, code}}`; `code` repeats `kind` as the
/// API does for quota and server errors.
pub fn error(kind: &str, message: &str) -> Value {
    let code = if kind == "invalid_request_error" {
        Value::Null
    } else {
        json!(kind)
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

pub(crate) fn check_openai(body: &Value, sent: &Sent) -> Result<(), String> {
    let body = object(body, "the body")?;
    if let Some(key) = body.keys().find(|k| !OPENAI_FIELDS.contains(&k.as_str())) {
        return Err(format!("Unknown parameter: '{key}'."));
    }
    non_empty_str(body.get("model"), "model")?;
    if body.get("store") != Some(&json!(false)) {
        return Err(
            "store: must be false: nothing is kept at the provider (an absent store \
                    means true)"
                .to_string(),
        );
    }
    let includes_reasoning = body
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|i| i.contains(&json!("reasoning.encrypted_content")));
    if !includes_reasoning {
        return Err(
            "include: must contain \"reasoning.encrypted_content\", or reasoning cannot be \
             passed back with store false"
                .to_string(),
        );
    }
    for key in ["previous_response_id", "conversation"] {
        if body.get(key).is_some_and(|v| !v.is_null()) {
            return Err(format!(
                "{key}: needs state stored at the provider, but store is false"
            ));
        }
    }
    must_stream(body)?;
    let max_output = body.get("max_output_tokens").filter(|v| !v.is_null());
    if let Some(max) = max_output.filter(|max| max.as_u64().is_none_or(|n| n < 16)) {
        return Err(format!(
            "max_output_tokens: expected an integer >= 16, got {max}"
        ));
    }
    if let Some(reasoning) = body.get("reasoning").filter(|v| !v.is_null()) {
        let reasoning = object(reasoning, "reasoning")?;
        only_keys(reasoning, &["effort", "summary"], "reasoning")?;
        one_of(
            reasoning.get("effort"),
            &["none", "minimal", "low", "medium", "high", "xhigh"],
            "reasoning.effort",
        )?;
        one_of(
            reasoning.get("summary"),
            &["auto", "concise", "detailed"],
            "reasoning.summary",
        )?;
    }
    if let Some(tools) = body.get("tools") {
        check_openai_tools(tools)?;
    }
    let input = body
        .get("input")
        .and_then(Value::as_array)
        .ok_or("input: expected an array of items")?;
    check_openai_input(input, sent)
}

fn check_openai_tools(tools: &Value) -> Result<(), String> {
    let tools = tools.as_array().ok_or("tools: expected an array")?;
    let mut names = HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("tools[{i}]");
        let tool = object(tool, &at)?;
        if tool.get("type") != Some(&json!("function")) {
            return Err(format!("{at}.type: expected \"function\""));
        }
        only_keys(
            tool,
            &["type", "name", "description", "parameters", "strict"],
            &at,
        )?;
        let name = tool_name(tool.get("name"), &at)?;
        if !names.insert(name) {
            return Err(format!("{at}.name: duplicate tool name {name:?}"));
        }
        if let Some(description) = tool.get("description") {
            description
                .as_str()
                .ok_or(format!("{at}.description: expected a string"))?;
        }
        let parameters = tool.get("parameters").unwrap_or(&Value::Null);
        check_schema_object(parameters, &format!("{at}.parameters"))?;
        if tool.get("strict") == Some(&json!(true)) {
            check_strict_schema(parameters, &format!("{at}.parameters"))?;
        }
    }
    Ok(())
}

fn check_openai_input(input: &[Value], sent: &Sent) -> Result<(), String> {
    // Function calls not answered yet, in order, and every call id seen.
    let mut open: Vec<&str> = Vec::new();
    let mut calls = HashSet::new();
    for (i, item) in input.iter().enumerate() {
        let at = format!("input[{i}]");
        let item = object(item, &at)?;
        let kind = match item.get("type") {
            None if item.contains_key("role") => "message",
            None => return Err(format!("{at}: an item needs a type or a role")),
            Some(kind) => kind
                .as_str()
                .ok_or(format!("{at}.type: expected a string"))?,
        };
        match kind {
            "message" => {
                only_keys(
                    item,
                    &["type", "role", "content", "id", "status", "phase"],
                    &at,
                )?;
                let role = item.get("role").and_then(Value::as_str).unwrap_or("");
                let parts: &[&str] = match role {
                    "assistant" => &["output_text", "refusal"],
                    "user" | "system" | "developer" => &["input_text", "input_image", "input_file"],
                    _ => {
                        return Err(format!(
                            "{at}.role: expected user, assistant, system or developer"
                        ));
                    }
                };
                check_openai_content(item.get("content"), parts, &format!("{at}.content"))?;
            }
            "function_call" => {
                only_keys(
                    item,
                    &["type", "call_id", "name", "arguments", "id", "status"],
                    &at,
                )?;
                let call_id = non_empty_str(item.get("call_id"), &format!("{at}.call_id"))?;
                non_empty_str(item.get("name"), &format!("{at}.name"))?;
                let arguments = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .ok_or(format!("{at}.arguments: expected a string holding JSON"))?;
                if serde_json::from_str::<Value>(arguments).is_err() {
                    return Err(format!("{at}.arguments: not JSON: {arguments:?}"));
                }
                if !calls.insert(call_id) {
                    return Err(format!("{at}: duplicate function call {call_id}"));
                }
                open.push(call_id);
            }
            "function_call_output" => {
                only_keys(item, &["type", "call_id", "output", "id", "status"], &at)?;
                let call_id = non_empty_str(item.get("call_id"), &format!("{at}.call_id"))?;
                match item.get("output") {
                    Some(Value::String(_) | Value::Array(_)) => {}
                    _ => return Err(format!("{at}.output: expected a string or content parts")),
                }
                let Some(k) = open.iter().position(|c| *c == call_id) else {
                    return Err(format!(
                        "{at}: No tool call found for function call output with call_id \
                         {call_id}."
                    ));
                };
                open.remove(k);
            }
            "reasoning" => {
                only_keys(
                    item,
                    &[
                        "type",
                        "id",
                        "summary",
                        "encrypted_content",
                        "content",
                        "status",
                    ],
                    &at,
                )?;
                if !item.get("summary").is_some_and(Value::is_array) {
                    return Err(format!("{at}.summary: required, an array"));
                }
                check_reasoning_passback(item, sent, &at)?;
                let follows = input.get(i + 1).is_some_and(|next| {
                    next["type"] == "function_call"
                        || next["type"] == "reasoning"
                        || next["role"] == "assistant"
                });
                if !follows {
                    return Err(format!(
                        "{at}: Item of type 'reasoning' was provided without its required \
                         following item."
                    ));
                }
            }
            other => return Err(format!("{at}.type: unknown item type {other:?}")),
        }
    }
    match open.first() {
        Some(call_id) => Err(format!("No tool output found for function call {call_id}.")),
        None => Ok(()),
    }
}

/// With store false the provider keeps nothing: a reasoning item must come back whole, its
/// `encrypted_content` byte for byte as the fake sent it.
fn check_reasoning_passback(
    item: &Map<String, Value>,
    sent: &Sent,
    at: &str,
) -> Result<(), String> {
    let encrypted = item
        .get("encrypted_content")
        .and_then(Value::as_str)
        .ok_or(format!(
            "{at}.encrypted_content: required with store false (the provider cannot look the \
             item up by id)"
        ))?;
    let Some((sent_id, _)) = sent.reasoning.iter().find(|(_, e)| e == encrypted) else {
        return Err(format!(
            "{at}.encrypted_content: not one this fake sent; it must be passed back unchanged"
        ));
    };
    match item.get("id").and_then(Value::as_str) {
        Some(id) if id != sent_id => Err(format!(
            "{at}.id: {id} is not the id {sent_id} sent with this encrypted_content"
        )),
        _ => Ok(()),
    }
}

fn check_openai_content(content: Option<&Value>, parts: &[&str], at: &str) -> Result<(), String> {
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
                let text_field = match kind {
                    "input_text" | "output_text" => "text",
                    "refusal" => "refusal",
                    _ => continue,
                };
                part[text_field]
                    .as_str()
                    .ok_or(format!("{at}[{j}].{text_field}: expected a string"))?;
            }
            Ok(())
        }
        _ => Err(format!("{at}: expected a string or an array of parts")),
    }
}

/// The `event:` line is the payload's `type`, as in every Responses recording.
pub(crate) fn responses_event(sequence: usize, mut payload: Value) -> String {
    payload["sequence_number"] = json!(sequence);
    format!(
        "event: {}\ndata: {payload}\n\n",
        payload["type"].as_str().unwrap_or("")
    )
}

/// A random-looking `obfuscation` value that pads `delta` towards [`OBFUSCATION_BYTES`].
fn obfuscation(delta: &str) -> String {
    fresh_id(
        "",
        BASE62,
        OBFUSCATION_BYTES.saturating_sub(delta.len()).max(4),
    )
}

/// The answer as it looks while in progress: no output, no usage yet.
pub(crate) fn responses_skeleton(answer: &Value) -> Value {
    let mut skeleton = answer.clone();
    skeleton["status"] = json!("in_progress");
    skeleton["output"] = json!([]);
    skeleton["usage"] = Value::Null;
    if skeleton.get("completed_at").is_some() {
        skeleton["completed_at"] = Value::Null;
    }
    skeleton
}

/// Responses: `response.created`, `response.in_progress`, then per output item its `added`, its
/// parts and deltas and its `done`, then `response.completed` with the whole answer. As the
/// real API does, a reasoning item's `added` carries another `encrypted_content` than its
/// `done` (only the final one can be passed back).
pub(crate) fn responses_stream(answer: &Value) -> Vec<String> {
    let skeleton = responses_skeleton(answer);
    let mut events = vec![
        json!({"type": "response.created", "response": skeleton}),
        json!({"type": "response.in_progress", "response": skeleton}),
    ];
    for (index, item) in answer["output"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let id = &item["id"];
        let mut added = item.clone();
        if added.get("status").is_some() {
            added["status"] = json!("in_progress");
        }
        match item["type"].as_str() {
            Some("message") => added["content"] = json!([]),
            Some("function_call") => added["arguments"] = json!(""),
            Some("reasoning") => {
                added["summary"] = json!([]);
                if added.get("encrypted_content").is_some() {
                    added["encrypted_content"] = json!(fresh_id("gAAAAAB", BASE64URL, 400));
                }
            }
            _ => {}
        }
        events.push(
            json!({"type": "response.output_item.added", "output_index": index, "item": added}),
        );
        match item["type"].as_str() {
            Some("message") => {
                for (c, part) in item["content"].as_array().into_iter().flatten().enumerate() {
                    let (field, kind) = match part["type"].as_str() {
                        Some("refusal") => ("refusal", "response.refusal"),
                        _ => ("text", "response.output_text"),
                    };
                    let text = part[field].as_str().unwrap_or("");
                    let mut empty = part.clone();
                    empty[field] = json!("");
                    let at = json!({"item_id": id, "output_index": index, "content_index": c});
                    let with = |fields: Value| merged(&at, fields);
                    events.push(with(
                        json!({"type": "response.content_part.added", "part": empty}),
                    ));
                    for piece in pieces(text) {
                        events.push(with(json!({
                            "type": format!("{kind}.delta"),
                            "delta": piece,
                            "logprobs": [],
                            "obfuscation": obfuscation(piece),
                        })));
                    }
                    events.push(with(
                        json!({"type": format!("{kind}.done"), field: text, "logprobs": []}),
                    ));
                    events.push(with(
                        json!({"type": "response.content_part.done", "part": part}),
                    ));
                }
            }
            Some("function_call") => {
                let arguments = item["arguments"].as_str().unwrap_or("");
                let at = json!({"item_id": id, "output_index": index});
                for piece in pieces(arguments) {
                    events.push(merged(
                        &at,
                        json!({
                            "type": "response.function_call_arguments.delta",
                            "delta": piece,
                            "obfuscation": obfuscation(piece),
                        }),
                    ));
                }
                events.push(merged(
                    &at,
                    json!({
                        "type": "response.function_call_arguments.done",
                        "arguments": arguments,
                    }),
                ));
            }
            Some("reasoning") => {
                for (s, part) in item["summary"].as_array().into_iter().flatten().enumerate() {
                    let text = part["text"].as_str().unwrap_or("");
                    let at = json!({"item_id": id, "output_index": index, "summary_index": s});
                    let empty = json!({"type": "summary_text", "text": ""});
                    events.push(merged(
                        &at,
                        json!({"type": "response.reasoning_summary_part.added", "part": empty}),
                    ));
                    for piece in pieces(text) {
                        events.push(merged(
                            &at,
                            json!({
                                "type": "response.reasoning_summary_text.delta",
                                "delta": piece,
                                "obfuscation": obfuscation(piece),
                            }),
                        ));
                    }
                    events.push(merged(
                        &at,
                        json!({"type": "response.reasoning_summary_text.done", "text": text}),
                    ));
                    events.push(merged(
                        &at,
                        json!({"type": "response.reasoning_summary_part.done", "part": part}),
                    ));
                }
            }
            _ => {}
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
    }
    events.push(json!({"type": "response.completed", "response": answer}));
    let mut framed: Vec<String> = events
        .into_iter()
        .enumerate()
        .map(|(sequence, payload)| responses_event(sequence, payload))
        .collect();
    framed.insert(2, KEEP_ALIVE.to_string());
    framed
}
