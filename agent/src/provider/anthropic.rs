//! The Anthropic Messages API: `POST {base_url}/v1/messages`, non-streaming. Its messages must
//! alternate user/assistant starting with user, and the `tool_result` blocks answering an
//! assistant's `tool_use` blocks open the next user turn; thinking blocks go back unchanged in
//! the assistant turn they came in. OpenAI items in the history are skipped.

use serde_json::{Value, json};

use super::{HttpRequest, Reply};
use crate::config::{Api, Config};
use crate::history::Entry;
use crate::tools::ToolSpec;

/// The API version the request and response shapes here follow.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The smallest thinking budget the API accepts; a smaller one turns thinking off.
const MIN_THINKING_BUDGET: u32 = 1024;

/// The user turn opening a conversation whose beginning was an assistant turn (after a cut or an
/// API switch), since the API wants a user turn first.
const OPENING: &str = "(The conversation continues.)";

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
    let mut body = json!({
        "model": config.model,
        "max_tokens": config.max_tokens,
        "system": system,
        "messages": messages(history),
        "tools": tools,
    });
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
            Entry::User { text } => ("user", json!({"type": "text", "text": text})),
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
        turns.insert(0, ("user", vec![json!({"type": "text", "text": OPENING})]));
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
    let mut reply = Reply::default();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixture;

    fn config(effort: Option<&str>) -> Config {
        Config {
            api: Api::AnthropicMessages,
            base_url: "https://api.example.com".into(),
            model: "claude-test".into(),
            token: Some("key".into()),
            reasoning_effort: effort.map(str::to_string),
            max_tokens: 4096,
        }
    }

    fn body(request: &HttpRequest) -> Value {
        serde_json::from_slice(&request.body).unwrap()
    }

    fn parse_fixture(name: &str) -> Option<Reply> {
        let body = fixture(name)?;
        Some(super::super::parse(Api::AnthropicMessages, &body).unwrap())
    }

    #[test]
    fn the_request_has_the_headers_and_tools_the_api_wants() {
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
        let body = body(&request);
        assert_eq!(body["system"], "the prompt");
        assert_eq!(body["max_tokens"], 4096);
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
        );
        let tool = &body["tools"][0];
        assert_eq!(tool["name"], "send_message");
        assert_eq!(tool["input_schema"]["type"], "object");
        assert!(body.get("thinking").is_none());
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
        let mut openai = config(None);
        openai.api = Api::OpenaiResponses;
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
