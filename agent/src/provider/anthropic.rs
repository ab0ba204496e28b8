//! The Anthropic Messages API: `POST {base_url}/v1/messages`, streamed. Its messages must
//! alternate user/assistant starting with user, and the `tool_result` blocks answering an
//! assistant's `tool_use` blocks open the next user turn; thinking blocks go back unchanged in
//! the assistant turn they came in. Items of other APIs in the history are skipped. The system
//! prompt and the latest turns are marked for prompt caching. The stream is read by building the
//! very `message` a non-streaming request would have answered, then reading that.

use serde_json::{Value, json};

use super::{Failure, Reply, Usage};
use crate::config::Config;
use crate::history::Entry;
use crate::message::{Api, HttpRequest};
use crate::tools::ToolSpec;

/// The API version the request and response shapes here follow.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The smallest thinking budget the API accepts; a smaller one turns thinking off.
const MIN_THINKING_BUDGET: u32 = 1024;

pub fn request(
    config: &Config,
    system: &str,
    history: &[Entry],
    tools: &[ToolSpec],
) -> HttpRequest {
    let tools: Vec<Value> = tools
        .iter()
        .map(
            |t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}),
        )
        .collect();
    let mut messages = messages(history);
    mark_for_cache(&mut messages);
    let mut body = json!({
        "model": config.model,
        "max_tokens": config.max_tokens,
        "messages": messages,
        "stream": true,
    });
    // The API refuses an empty text block, the system prompt's included.
    if !system.is_empty() {
        body["system"] =
            json!([{"type": "text", "text": system, "cache_control": cache_breakpoint()}]);
    }
    if !tools.is_empty() {
        body["tools"] = json!(tools);
    }
    if let Some(budget) = config
        .reasoning_effort
        .as_deref()
        .and_then(|effort| thinking_budget(effort, config.max_tokens))
    {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    }
    HttpRequest {
        url: format!("{}/v1/messages", config.base_url),
        headers: [
            // The host adds the token; one in an older configuration is still sent.
            config
                .token
                .clone()
                .map(|token| ("x-api-key".into(), token)),
            Some(("anthropic-version".into(), ANTHROPIC_VERSION.into())),
            Some(("content-type".into(), "application/json".into())),
        ]
        .into_iter()
        .flatten()
        .collect(),
        body: body.to_string().into_bytes(),
        timeout: None,
    }
}

/// `reasoning_effort` as a thinking budget: Anthropic has no effort levels, only a token budget,
/// which must stay below `max_tokens`.
fn thinking_budget(effort: &str, max_tokens: u32) -> Option<u32> {
    let wanted = match effort {
        "low" => 2_048,
        "medium" => 8_192,
        "high" | "xhigh" => 16_384,
        _ => return None,
    };
    Some(u32::min(wanted, max_tokens / 2)).filter(|&b| b >= MIN_THINKING_BUDGET)
}

/// The history as alternating turns: consecutive entries of one role share a turn.
fn messages(history: &[Entry]) -> Vec<Value> {
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for entry in history {
        let (role, block) = match entry {
            // `context::view` turns the summary into a user message first; one that gets here
            // all the same is sent as the user's words too.
            Entry::User { text } | Entry::Summary { text } => {
                ("user", json!({"type": "text", "text": text}))
            }
            // The API refuses empty text blocks; an empty text says nothing anyway.
            Entry::Assistant { text, .. } if text.is_empty() => continue,
            Entry::Assistant { text, .. } => ("assistant", json!({"type": "text", "text": text})),
            Entry::ToolCall {
                id,
                name,
                arguments,
                ..
            } => {
                let input = super::arguments_object(arguments);
                let block =
                    json!({"type": "tool_use", "id": tool_id(id), "name": name, "input": input});
                ("assistant", block)
            }
            Entry::ToolResult { id, output } => (
                "user",
                json!({"type": "tool_result", "tool_use_id": tool_id(id), "content": output}),
            ),
            Entry::Opaque {
                api: Api::AnthropicMessages,
                item,
            } => ("assistant", item.clone()),
            Entry::Opaque { .. } => continue,
        };
        match turns.last_mut() {
            Some((last, blocks)) if *last == role => blocks.push(block),
            _ => turns.push((role, vec![block])),
        }
    }
    if turns.first().is_some_and(|(role, _)| *role == "assistant") {
        let opening = json!({"type": "text", "text": super::OPENING});
        turns.insert(0, ("user", vec![opening]));
    }
    turns
        .into_iter()
        .map(|(role, mut blocks)| {
            // In a user turn, tool results must come before any text.
            blocks.sort_by_key(|b| b["type"] != "tool_result");
            json!({"role": role, "content": blocks})
        })
        .collect()
}

/// A prompt-cache breakpoint: the prompt up to the block that carries it is cached. The API
/// refuses more than 4 in one request; a request here has 3: the system prompt (which caches the
/// tools before it too), the latest message, and the user message before it (where the previous
/// request put its latest, so the cache it wrote is read back).
fn cache_breakpoint() -> Value {
    json!({"type": "ephemeral"})
}

/// Marks the last block that may carry a cache breakpoint (not a thinking block, not an empty
/// one) in the latest message and in the user message before it.
fn mark_for_cache(messages: &mut [Value]) {
    let Some(latest) = messages.len().checked_sub(1) else {
        return;
    };
    let before = (0..latest).rev().find(|&i| messages[i]["role"] == "user");
    for at in [Some(latest), before].into_iter().flatten() {
        let blocks = messages[at]["content"].as_array_mut().into_iter().flatten();
        if let Some(block) = blocks.rev().find(|block| cacheable(block)) {
            block["cache_control"] = cache_breakpoint();
        }
    }
}

fn cacheable(block: &Value) -> bool {
    match block["type"].as_str() {
        Some("thinking" | "redacted_thinking") => false,
        Some("text") => block["text"].as_str().is_some_and(|text| !text.is_empty()),
        Some("tool_result") => block["content"] != "",
        // An opaque item from a history edited by hand may be anything.
        _ => block.is_object(),
    }
}

/// A tool call id as this API accepts it (`[a-zA-Z0-9_-]+`): ids that came from another API are
/// mapped the same way in the call and in its result, so the pair still matches.
fn tool_id(id: &str) -> String {
    let mapped: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if mapped.is_empty() {
        "call".into()
    } else {
        mapped
    }
}

/// A whole `message` (the non-streaming answer, or one built from the stream) as a reply.
pub fn parse(response: &Value) -> Result<Reply, String> {
    if response["type"] == "error" {
        return Err(response["error"]["message"]
            .as_str()
            .unwrap_or("an error without a message")
            .to_string());
    }
    let content = response["content"]
        .as_array()
        .ok_or("it has no `content` list")?;
    let mut reply = Reply {
        usage: usage(&response["usage"]),
        ..Reply::default()
    };
    for block in content {
        match block["type"].as_str() {
            Some("text") => reply
                .entries
                .push(Entry::assistant(block["text"].as_str().unwrap_or_default())),
            Some("tool_use") => reply.entries.push(Entry::ToolCall {
                id: block["id"]
                    .as_str()
                    .ok_or("a tool_use block has no id")?
                    .to_string(),
                name: block["name"].as_str().unwrap_or_default().to_string(),
                arguments: block["input"].clone(),
                item_id: None,
            }),
            Some("thinking" | "redacted_thinking") => reply.entries.push(Entry::Opaque {
                api: Api::AnthropicMessages,
                item: block.clone(),
            }),
            _ => {}
        }
    }
    if let Some(reason @ ("max_tokens" | "refusal")) = response["stop_reason"].as_str() {
        reply.cut_short = Some(reason.to_string());
    }
    Ok(reply)
}

/// `usage` in [`Usage`]'s meaning, which is this API's own: `input_tokens` leaves out the
/// tokens read from or written to the cache.
fn usage(usage: &Value) -> Usage {
    Usage {
        input_tokens: super::count(&usage["input_tokens"]),
        output_tokens: super::count(&usage["output_tokens"]),
        cache_read_tokens: super::count(&usage["cache_read_input_tokens"]),
        cache_write_tokens: super::count(&usage["cache_creation_input_tokens"]),
    }
}

/// The reading of one Messages stream: the `message` it builds.
#[derive(Debug, Default)]
pub struct Stream {
    /// The message of `message_start`, with `message_delta`'s stop reason and usage merged in.
    message: Value,
    /// The content blocks, with their `index`; a `tool_use` block's input is the JSON text of
    /// its deltas until the end.
    blocks: Vec<(u64, Value, String)>,
    /// `message_stop` came: the message is whole.
    stopped: bool,
    /// The index of the block whose text was shown last: the next block's text is shown after
    /// a blank line, as [`Reply::text`] joins them.
    showing: Option<u64>,
}

impl Stream {
    /// One event's data; returns the answer's text it adds.
    pub fn event(&mut self, data: &str) -> Result<String, Failure> {
        let mut event = super::json(data)?;
        let index = event["index"].as_u64().unwrap_or_default();
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => self.message = event["message"].take(),
            "content_block_start" => {
                self.blocks.retain(|(i, ..)| *i != index);
                self.blocks
                    .push((index, event["content_block"].take(), String::new()));
            }
            "content_block_delta" => {
                let Some((_, block, input)) = self.blocks.iter_mut().find(|(i, ..)| *i == index)
                else {
                    return Ok(String::new());
                };
                let delta = &event["delta"];
                let (field, piece) = match delta["type"].as_str().unwrap_or_default() {
                    "text_delta" => ("text", &delta["text"]),
                    "thinking_delta" => ("thinking", &delta["thinking"]),
                    "signature_delta" => ("signature", &delta["signature"]),
                    "input_json_delta" => {
                        input.push_str(delta["partial_json"].as_str().unwrap_or_default());
                        return Ok(String::new());
                    }
                    // Citations and kinds of delta this agent does not know.
                    _ => return Ok(String::new()),
                };
                let piece = piece.as_str().unwrap_or_default();
                if let Value::Object(block) = block {
                    match block.entry(field).or_insert_with(|| json!("")) {
                        Value::String(text) => text.push_str(piece),
                        other => *other = json!(piece),
                    }
                }
                if field == "text" {
                    return Ok(match self.showing.replace(index) {
                        Some(showing) if showing != index => format!("\n\n{piece}"),
                        _ => piece.to_string(),
                    });
                }
            }
            "message_delta" => {
                if !self.message.is_object() {
                    self.message = json!({});
                }
                for (key, value) in event["delta"].as_object().into_iter().flatten() {
                    self.message[key] = value.clone();
                }
                // The final output count, and sometimes the input counts again.
                if !self.message["usage"].is_object() {
                    self.message["usage"] = json!({});
                }
                for (key, value) in event["usage"].as_object().into_iter().flatten() {
                    self.message["usage"][key] = value.clone();
                }
            }
            "message_stop" => self.stopped = true,
            "error" => return Err(super::stream_error(&event)),
            // `ping`, `content_block_stop` and events added later.
            _ => {}
        }
        Ok(String::new())
    }

    pub fn finish(mut self) -> Result<Reply, Failure> {
        if !self.stopped {
            return Err(super::ended_early());
        }
        self.blocks.sort_by_key(|(index, ..)| *index);
        let content: Vec<Value> = (self.blocks.into_iter())
            .map(|(_, mut block, input)| {
                // The first delta may be `""`; no delta at all is the empty input of the start.
                if block["type"] == "tool_use" && !input.trim().is_empty() {
                    block["input"] = super::parse_arguments(&input);
                }
                block
            })
            .collect();
        if !self.message.is_object() {
            self.message = json!({});
        }
        self.message["content"] = Value::Array(content);
        parse(&self.message).map_err(super::unusable)
    }
}

/// A whole message as the events that stream it, the way the API sends them: padded data
/// lines, a `ping`, an empty first `input_json_delta`, the signature in its own delta, and no
/// blank line after `message_stop`.
#[cfg(test)]
pub fn stream_of(message: &Value) -> String {
    let event = |value: Value| {
        let name = value["type"].as_str().unwrap_or_default().to_string();
        format!("event: {name}\ndata: {value}      \n\n")
    };
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"]["output_tokens"] = json!(1);
    let mut stream = event(json!({"type": "message_start", "message": start}));
    for (index, block) in message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let delta = |delta: Value| {
            event(json!({"type": "content_block_delta", "index": index, "delta": delta}))
        };
        let (opening, deltas) = match block["type"].as_str() {
            Some("text") => (
                json!({"type": "text", "text": ""}),
                vec![delta(json!({"type": "text_delta", "text": block["text"]}))],
            ),
            Some("thinking") => (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                vec![
                    delta(json!({"type": "thinking_delta", "thinking": block["thinking"]})),
                    delta(json!({"type": "signature_delta", "signature": block["signature"]})),
                ],
            ),
            Some("tool_use") => {
                let mut opening = block.clone();
                opening["input"] = json!({});
                let input = block["input"].to_string();
                let middle = (0..=input.len() / 2)
                    .rev()
                    .find(|&at| input.is_char_boundary(at));
                let (a, b) = input.split_at(middle.unwrap_or_default());
                (
                    opening,
                    [json!(""), json!(a), json!(b)]
                        .into_iter()
                        .map(|part| {
                            delta(json!({"type": "input_json_delta", "partial_json": part}))
                        })
                        .collect(),
                )
            }
            _ => (block.clone(), Vec::new()),
        };
        stream += &event(
            json!({"type": "content_block_start", "index": index, "content_block": opening}),
        );
        if index == 0 {
            stream += &event(json!({"type": "ping"}));
        }
        stream += &deltas.concat();
        stream += &event(json!({"type": "content_block_stop", "index": index}));
    }
    let delta =
        json!({"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]});
    let usage = json!({"output_tokens": message["usage"]["output_tokens"]});
    stream += &event(json!({"type": "message_delta", "delta": delta, "usage": usage}));
    stream + "event: message_stop\ndata: {\"type\":\"message_stop\"}"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Failure, streamed, test_config};
    use crate::testing::fixture;

    fn config(effort: Option<&str>) -> Config {
        Config {
            token: Some("key".into()),
            reasoning_effort: effort.map(str::to_string),
            max_tokens: 4096,
            ..test_config(Api::AnthropicMessages)
        }
    }

    fn body(request: &HttpRequest) -> Value {
        serde_json::from_slice(&request.body).unwrap()
    }

    /// A recorded non-streaming answer, read the way its stream would be.
    fn parse_fixture(name: &str) -> Option<Reply> {
        let whole: Value = serde_json::from_slice(&fixture(name)?).unwrap();
        let stream = super::super::stream_of(Api::AnthropicMessages, &whole);
        Some(streamed(Api::AnthropicMessages, &stream).1.unwrap())
    }

    /// A recorded stream, read; `None` without the fixtures.
    fn read_fixture(name: &str) -> Option<(String, Result<Reply, Failure>)> {
        Some(streamed(Api::AnthropicMessages, &fixture(name)?))
    }

    /// Where a request's cache breakpoints are: `system`, or `message <n> block <m>`.
    fn breakpoints(body: &Value) -> Vec<String> {
        let mut found = Vec::new();
        for block in body["system"].as_array().into_iter().flatten() {
            if block.get("cache_control").is_some() {
                found.push("system".to_string());
            }
        }
        for (n, message) in body["messages"].as_array().unwrap().iter().enumerate() {
            for (m, block) in message["content"].as_array().unwrap().iter().enumerate() {
                if block.get("cache_control").is_some() {
                    assert_eq!(block["cache_control"], json!({"type": "ephemeral"}));
                    found.push(format!("message {n} block {m}"));
                }
            }
        }
        assert!(found.len() <= 4, "the API refuses more than 4: {found:?}");
        found
    }

    #[test]
    fn the_request_streams_with_the_headers_and_tools_the_api_wants() {
        let request = request(
            &config(None),
            "the prompt",
            &[Entry::user("hi")],
            &crate::tools::specs(),
        );
        assert_eq!(request.url, "https://api.example.com/v1/messages");
        for header in [
            ("x-api-key", "key"),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
        ] {
            assert!(
                request
                    .headers
                    .contains(&(header.0.into(), header.1.into())),
                "{header:?}"
            );
        }
        let without_token = Config {
            token: None,
            ..config(None)
        };
        let headers = super::request(&without_token, "p", &[], &[]).headers;
        assert!(
            headers.iter().all(|(name, _)| name != "x-api-key"),
            "the host adds the token: {headers:?}"
        );
        let sent = body(&request);
        assert_eq!(sent["stream"], true);
        assert_eq!(
            sent["system"],
            json!([{"type": "text", "text": "the prompt", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(sent["max_tokens"], 4096);
        assert_eq!(
            sent["messages"],
            json!([{"role": "user", "content": [
                {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
            ]}])
        );
        let tool = &sent["tools"][0];
        assert_eq!(tool["name"], "send_message");
        assert_eq!(tool["input_schema"]["type"], "object");
        assert!(sent.get("thinking").is_none());
        let bare = body(&super::request(&config(None), "p", &[], &[]));
        assert!(bare.get("tools").is_none(), "no tools, no tools field");
    }

    #[test]
    fn the_latest_message_and_the_user_message_before_it_are_cached() {
        let history = vec![
            Entry::user("first"),
            Entry::assistant("ok"),
            Entry::user("list /"),
            Entry::Opaque {
                api: Api::AnthropicMessages,
                item: json!({"type": "thinking", "thinking": "hm", "signature": "sig"}),
            },
            Entry::ToolCall {
                id: "c1".into(),
                name: "list_dir".into(),
                arguments: json!({"path": "/"}),
                item_id: None,
            },
            Entry::ToolResult {
                id: "c1".into(),
                output: "data".into(),
            },
            Entry::user(""),
        ];
        let sent = body(&request(&config(None), "the prompt", &history, &[]));
        // The latest turn holds the result and an empty text: the breakpoint goes on the result.
        assert_eq!(
            breakpoints(&sent),
            ["system", "message 2 block 0", "message 4 block 0"]
        );
        // A latest message of thinking only carries none.
        let sent = body(&request(&config(None), "p", &history[..4], &[]));
        assert_eq!(breakpoints(&sent), ["system", "message 2 block 0"]);
        let messages = sent["messages"].as_array().unwrap();
        assert_eq!(messages[3]["content"][0].get("cache_control"), None);
        // The stored history is not marked.
        assert!(
            !serde_json::to_string(&history)
                .unwrap()
                .contains("cache_control")
        );
    }

    #[test]
    fn an_effort_turns_thinking_on_within_max_tokens() {
        let body = body(&request(&config(Some("high")), "p", &[], &[]));
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert_eq!(thinking_budget("low", 1000), None);
        assert_eq!(thinking_budget("none", 100_000), None);
    }

    /// The recorded two-step exchange: the assistant turn repeats thinking (with its signature),
    /// text and tool_use verbatim, then a user turn carries the tool_result.
    #[test]
    fn thinking_goes_back_unchanged_and_results_open_the_next_user_turn() {
        let (Some(reply), Some(recorded)) = (
            parse_fixture("anthropic-messages_nonstream_thinking_tool-use.json"),
            fixture("anthropic-messages_request_thinking-passback.json"),
        ) else {
            return;
        };
        let recorded: Value = serde_json::from_slice(&recorded).unwrap();
        let mut history = vec![Entry::user("What is the largest city in the user country?")];
        history.extend(reply.entries);
        history.push(Entry::ToolResult {
            id: "toolu_01YGzqpRE16Vricda3Aqcejo".into(),
            output: "Mexico".into(),
        });
        let messages = messages(&history);
        assert_eq!(messages[0], recorded["messages"][0]);
        assert_eq!(messages[1], recorded["messages"][1]);
        assert_eq!(messages[2]["role"], "user");
        let result = &messages[2]["content"][0];
        let expected = &recorded["messages"][2]["content"][0];
        for key in ["type", "tool_use_id", "content"] {
            assert_eq!(result[key], expected[key], "{key}");
        }
    }

    #[test]
    fn turns_alternate_and_results_come_before_text() {
        let history = vec![
            Entry::user("a"),
            Entry::user("b"),
            Entry::assistant("thinking aloud"),
            Entry::ToolCall {
                id: "c1".into(),
                name: "list_dir".into(),
                arguments: json!({"path": "/"}),
                item_id: None,
            },
            Entry::ToolCall {
                id: "c2".into(),
                name: "read_file".into(),
                arguments: json!({"path": "/x"}),
                item_id: None,
            },
            Entry::ToolResult {
                id: "c1".into(),
                output: "one".into(),
            },
            Entry::ToolResult {
                id: "c2".into(),
                output: "two".into(),
            },
            Entry::user("You restarted."),
        ];
        let messages = messages(&history);
        let roles: Vec<&str> = messages
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        assert_eq!(messages[0]["content"].as_array().unwrap().len(), 2);
        let kinds: Vec<&str> = messages[2]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["tool_result", "tool_result", "text"]);
    }

    #[test]
    fn openai_history_renders_for_anthropic_and_back() {
        // A conversation held with OpenAI (reasoning, a call with an id Anthropic would refuse)…
        let history = vec![
            Entry::user("go"),
            Entry::Opaque {
                api: Api::OpenaiResponses,
                item: json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA"}),
            },
            Entry::ToolCall {
                id: "call.1:x".into(),
                name: "list_dir".into(),
                arguments: json!({"path": "/data"}),
                item_id: Some("fc_1".into()),
            },
            Entry::ToolResult {
                id: "call.1:x".into(),
                output: "[]".into(),
            },
            Entry::Assistant {
                text: "Empty.".into(),
                item_id: Some("msg_1".into()),
                steps: None,
                usage: None,
            },
            Entry::user("and now?"),
        ];
        // …is sent to Anthropic without the reasoning, with matching mapped ids…
        let body = body(&request(&config(None), "p", &history, &[]));
        let text = body.to_string();
        assert!(!text.contains("gAAA") && !text.contains("fc_1") && !text.contains("msg_1"));
        assert_eq!(body["messages"][1]["content"][0]["id"], "call_1_x");
        assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "call_1_x");
        // …and Anthropic's answer, added to it, goes back to OpenAI without the thinking block.
        let mut history = history;
        history.push(Entry::Opaque {
            api: Api::AnthropicMessages,
            item: json!({"type": "thinking", "thinking": "t", "signature": "s"}),
        });
        history.push(Entry::assistant("Still empty."));
        history.push(Entry::user("ok"));
        let openai = Config {
            api: Api::OpenaiResponses,
            ..config(None)
        };
        let request = super::super::request(&openai, "p", &history, &[]);
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let input = body["input"].as_array().unwrap();
        assert!(input.iter().all(|item| item["type"] != "thinking"));
        assert!(input.iter().any(|item| item["encrypted_content"] == "gAAA"));
        assert_eq!(input.len(), 8);
    }

    #[test]
    fn a_conversation_never_opens_with_an_assistant_turn() {
        let messages = messages(&[Entry::assistant("hello"), Entry::user("hi")]);
        assert_eq!(messages[0]["role"], "user");
        assert_eq!(messages[1]["role"], "assistant");
    }

    #[test]
    fn streams_padded_text_with_a_ping() {
        let Some((shown, reply)) = read_fixture("anthropic-messages_stream_text.sse") else {
            return;
        };
        let reply = reply.unwrap();
        assert_eq!(shown, "[12345,67890]");
        assert_eq!(reply.entries, [Entry::assistant("[12345,67890]")]);
        assert_eq!(reply.cut_short, None);
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 135,
                output_tokens: 10,
                cache_read_tokens: 0,
                cache_write_tokens: 0
            }
        );
    }

    #[test]
    fn streams_thinking_with_its_signature_byte_for_byte() {
        let name = "anthropic-messages_stream_thinking.sse";
        let (Some((shown, reply)), Some(raw)) = (read_fixture(name), fixture(name)) else {
            return;
        };
        let reply = reply.unwrap();
        // The recorded deltas, joined by hand.
        let (mut thinking, mut signature) = (String::new(), String::new());
        for line in String::from_utf8(raw).unwrap().lines() {
            let Some(data) = line.strip_prefix("data: ") else {
                continue;
            };
            let event: Value = serde_json::from_str(data).unwrap();
            thinking += event["delta"]["thinking"].as_str().unwrap_or_default();
            signature += event["delta"]["signature"].as_str().unwrap_or_default();
        }
        assert!(thinking.starts_with("This is a straightforward question about pedestrian"));
        assert!(signature.starts_with("EvMCCkYICxgCKkCHP2c"));
        assert_eq!(
            reply.entries[0],
            Entry::Opaque {
                api: Api::AnthropicMessages,
                item: json!({"type": "thinking", "thinking": thinking, "signature": signature}),
            }
        );
        assert_eq!(reply.entries.len(), 2);
        assert_eq!(shown, reply.text(), "thinking is not shown");
        assert!(shown.starts_with("Here are the basic steps for safely crossing the street:"));
        assert_eq!(
            (reply.usage.input_tokens, reply.usage.output_tokens),
            (43, 282)
        );
    }

    #[test]
    fn streams_a_tool_call_whose_first_delta_is_empty() {
        let Some((shown, reply)) = read_fixture("anthropic-messages_stream_tool-use.sse") else {
            return;
        };
        let reply = reply.unwrap();
        assert_eq!(shown, "I'll check the current weather in Paris for you.");
        assert_eq!(
            reply.entries,
            [
                Entry::assistant("I'll check the current weather in Paris for you."),
                Entry::ToolCall {
                    id: "toolu_01NRLabsLyVHZPKxbKvkfSMn".into(),
                    name: "get_weather".into(),
                    arguments: json!({"location": "Paris"}),
                    item_id: None,
                }
            ]
        );
        assert_eq!(
            (reply.usage.input_tokens, reply.usage.output_tokens),
            (377, 65)
        );
    }

    #[test]
    fn a_tool_call_without_deltas_has_empty_input() {
        let message = json!({"content": [{"type": "tool_use", "id": "t1", "name": "plan", "input": {}}], "stop_reason": "tool_use"});
        let stream = super::super::stream_of(Api::AnthropicMessages, &message);
        let stream = String::from_utf8(stream).unwrap();
        let without: String = stream
            .split("\n\n")
            .filter(|event| !event.contains("input_json_delta"))
            .map(|event| format!("{event}\n\n"))
            .collect();
        let reply = streamed(Api::AnthropicMessages, without.as_bytes())
            .1
            .unwrap();
        assert!(
            matches!(&reply.entries[0], Entry::ToolCall { arguments, .. } if *arguments == json!({}))
        );
    }

    #[test]
    fn a_stream_cut_before_message_stop_is_retried() {
        let Some(body) = fixture("anthropic-messages_stream_tool-use.sse") else {
            return;
        };
        let text = String::from_utf8(body).unwrap();
        let cut = &text[..text.find("event: message_stop").unwrap()];
        let (_, outcome) = streamed(Api::AnthropicMessages, cut.as_bytes());
        assert_eq!(outcome, Err(super::super::ended_early()));
    }

    #[test]
    fn an_overloaded_error_in_the_stream_is_retried() {
        let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[]}}\n\n\
                    event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
        let (_, outcome) = streamed(Api::AnthropicMessages, body.as_bytes());
        assert!(
            matches!(&outcome, Err(Failure::Retry { why, after: None }) if why.contains("Overloaded")),
            "{outcome:?}"
        );
    }

    #[test]
    fn the_text_of_two_blocks_is_shown_apart() {
        let message = json!({"content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "t1", "name": "plan", "input": {"items": []}},
            {"type": "text", "text": "Done."},
        ], "stop_reason": "end_turn"});
        let stream = super::super::stream_of(Api::AnthropicMessages, &message);
        let (shown, reply) = streamed(Api::AnthropicMessages, &stream);
        assert_eq!(shown, "Looking.\n\nDone.");
        assert_eq!(shown, reply.unwrap().text());
    }

    #[test]
    fn a_long_or_refused_answer_is_cut_short() {
        for reason in ["max_tokens", "refusal"] {
            let message =
                json!({"content": [{"type": "text", "text": "Once upon"}], "stop_reason": reason});
            let stream = super::super::stream_of(Api::AnthropicMessages, &message);
            let reply = streamed(Api::AnthropicMessages, &stream).1.unwrap();
            assert_eq!(reply.cut_short.as_deref(), Some(reason));
        }
    }

    #[test]
    fn a_whole_answer_streams_to_the_same_reply() {
        for name in [
            "anthropic-messages_nonstream_thinking_tool-use.json",
            "anthropic-messages_nonstream_parallel-tool-use.json",
            "anthropic-messages_nonstream_cache-read.json",
        ] {
            let Some(raw) = fixture(name) else {
                return;
            };
            let whole: Value = serde_json::from_slice(&raw).unwrap();
            let stream = super::super::stream_of(Api::AnthropicMessages, &whole);
            let (shown, reply) = streamed(Api::AnthropicMessages, &stream);
            let reply = reply.unwrap();
            assert_eq!(reply, parse(&whole).unwrap(), "{name}");
            assert_eq!(shown, reply.text(), "{name}");
        }
    }

    #[test]
    fn parses_parallel_tool_use() {
        let Some(reply) = parse_fixture("anthropic-messages_nonstream_parallel-tool-use.json")
        else {
            return;
        };
        assert!(
            reply
                .text()
                .starts_with("I'll help you find out who is the youngest")
        );
        let calls: Vec<(&str, &Value)> = reply
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::ToolCall { id, arguments, .. } => Some((id.as_str(), arguments)),
                _ => None,
            })
            .collect();
        assert_eq!(calls.len(), 4);
        assert_eq!(
            calls[0],
            ("toolu_0167cfEnoQaPviGdVXA95zcu", &json!({"name": "Alice"}))
        );
    }

    #[test]
    fn parses_text_with_cache_usage() {
        let Some(reply) = parse_fixture("anthropic-messages_nonstream_cache-read.json") else {
            return;
        };
        assert!(!reply.has_tool_calls());
        assert!(reply.text().starts_with("Python is a beginner-friendly"));
        assert_eq!(reply.usage.input_tokens, 3);
        assert_eq!(reply.usage.cache_read_tokens, 1111);
        assert_eq!(reply.usage.cache_write_tokens, 418);
    }

    #[test]
    fn keeps_thinking_with_its_signature() {
        let Some(reply) = parse_fixture("anthropic-messages_nonstream_thinking_tool-use.json")
        else {
            return;
        };
        let Entry::Opaque { api, item } = &reply.entries[0] else {
            panic!("thinking first: {:?}", reply.entries[0]);
        };
        assert_eq!(*api, Api::AnthropicMessages);
        assert!(
            item["signature"]
                .as_str()
                .unwrap()
                .starts_with("EqEECkYICxgCKkAo3UA4")
        );
        assert!(
            matches!(&reply.entries[2], Entry::ToolCall { name, arguments, .. }
            if name == "get_user_country" && *arguments == json!({}))
        );
    }
}
