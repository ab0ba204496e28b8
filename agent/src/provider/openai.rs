//! The OpenAI Responses API: `POST {base_url}/v1/responses`, non-streaming, `store: false`, with
//! encrypted reasoning requested and passed back so a reasoning model keeps its thread between
//! steps without the provider storing anything. Anthropic items in the history are skipped.

use serde_json::{Value, json};

use super::{HttpRequest, Reply};
use crate::config::{Api, Config};
use crate::history::Entry;
use crate::tools::ToolSpec;

pub fn request(
    config: &Config,
    system: &str,
    history: &[Entry],
    tools: &[ToolSpec],
) -> HttpRequest {
    let input: Vec<Value> = history.iter().filter_map(input_item).collect();
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "type": "function", "name": t.name, "description": t.description,
                // Strict mode would demand every property be required; ours has optional ones.
                "parameters": t.parameters, "strict": false,
            })
        })
        .collect();
    let mut body = json!({
        "model": config.model,
        "instructions": system,
        "input": input,
        "tools": tools,
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "max_output_tokens": config.max_tokens,
    });
    if let Some(effort) = &config.reasoning_effort {
        body["reasoning"] = json!({"effort": effort});
    }
    let mut headers = vec![("content-type".into(), "application/json".into())];
    // The host adds the token; one in an older configuration is still sent.
    if let Some(token) = &config.token {
        headers.push(("authorization".into(), format!("Bearer {token}")));
    }
    HttpRequest {
        url: format!("{}/v1/responses", config.base_url),
        headers,
        body: body.to_string().into_bytes(),
    }
}

/// One history entry as a Responses input item; `None` for what this API cannot take.
fn input_item(entry: &Entry) -> Option<Value> {
    Some(match entry {
        Entry::User { text } => json!({"role": "user", "content": text}),
        Entry::Assistant { text, item_id } => {
            let mut item = json!({
                "type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            });
            if let Some(id) = item_id {
                item["id"] = json!(id);
                item["status"] = json!("completed");
            }
            item
        }
        Entry::ToolCall {
            id,
            name,
            arguments,
            item_id,
        } => {
            let arguments = super::arguments_object(arguments).to_string();
            let mut item = json!({
                "type": "function_call", "call_id": id, "name": name, "arguments": arguments,
            });
            if let Some(item_id) = item_id {
                item["id"] = json!(item_id);
            }
            item
        }
        Entry::ToolResult { id, output } => {
            json!({"type": "function_call_output", "call_id": id, "output": output})
        }
        Entry::Opaque {
            api: Api::OpenaiResponses,
            item,
        } => item.clone(),
        Entry::Opaque { .. } => return None,
    })
}

pub fn parse(response: &Value) -> Result<Reply, String> {
    if let Some(message) = response["error"]["message"].as_str() {
        return Err(message.to_string());
    }
    let output = response["output"]
        .as_array()
        .ok_or("it has no `output` list")?;
    let mut reply = Reply::default();
    for item in output {
        match item["type"].as_str() {
            Some("message") => {
                let text: Vec<&str> = item["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|part| match part["type"].as_str() {
                        Some("output_text") => part["text"].as_str(),
                        Some("refusal") => part["refusal"].as_str(),
                        _ => None,
                    })
                    .collect();
                reply.entries.push(Entry::Assistant {
                    text: text.concat(),
                    item_id: item["id"].as_str().map(str::to_string),
                });
            }
            Some("function_call") => {
                let raw = item["arguments"].as_str().unwrap_or("{}");
                reply.entries.push(Entry::ToolCall {
                    id: item["call_id"]
                        .as_str()
                        .ok_or("a function_call has no call_id")?
                        .to_string(),
                    name: item["name"].as_str().unwrap_or_default().to_string(),
                    // Arguments that are not JSON stay the model's raw text; the tool says so.
                    arguments: serde_json::from_str(raw).unwrap_or_else(|_| json!(raw)),
                    item_id: item["id"].as_str().map(str::to_string),
                });
            }
            Some("reasoning") => reply.entries.push(Entry::Opaque {
                api: Api::OpenaiResponses,
                item: item.clone(),
            }),
            // Other item types (built-in tools we never offer) have nothing for us.
            _ => {}
        }
    }
    if response["status"] == "incomplete" {
        reply.cut_short = Some(
            response["incomplete_details"]["reason"]
                .as_str()
                .unwrap_or("incomplete")
                .to_string(),
        );
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_MAX_TOKENS;
    use crate::testing::fixture;

    fn config(effort: Option<&str>) -> Config {
        Config {
            api: Api::OpenaiResponses,
            base_url: "https://api.example.com".into(),
            model: "gpt-test".into(),
            token: Some("sk-test".into()),
            reasoning_effort: effort.map(str::to_string),
            max_tokens: DEFAULT_MAX_TOKENS,
        }
    }

    fn body(request: &HttpRequest) -> Value {
        serde_json::from_slice(&request.body).unwrap()
    }

    #[test]
    fn the_request_asks_for_no_storage_and_encrypted_reasoning() {
        let request = request(
            &config(Some("high")),
            "the prompt",
            &[Entry::user("hi")],
            &crate::tools::specs(),
        );
        assert_eq!(request.url, "https://api.example.com/v1/responses");
        assert!(
            request
                .headers
                .contains(&("authorization".into(), "Bearer sk-test".into()))
        );
        let without_token = Config {
            token: None,
            ..config(None)
        };
        let request_without = super::request(&without_token, "p", &[], &[]);
        assert!(
            request_without
                .headers
                .iter()
                .all(|(name, _)| name != "authorization"),
            "the host adds the token"
        );
        let body = body(&request);
        assert_eq!(body["model"], "gpt-test");
        assert_eq!(body["instructions"], "the prompt");
        assert_eq!(body["store"], false);
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(body["max_output_tokens"], 16000);
        assert_eq!(body["reasoning"], json!({"effort": "high"}));
        assert_eq!(body["input"], json!([{"role": "user", "content": "hi"}]));
        let send = &body["tools"].as_array().unwrap()[0];
        assert_eq!(send["type"], "function");
        assert_eq!(send["name"], "send_message");
        assert_eq!(send["parameters"]["type"], "object");
        assert_eq!(send["parameters"]["required"], json!(["to", "body"]));
        assert!(body.get("stream").is_none());
    }

    #[test]
    fn no_reasoning_field_without_an_effort() {
        let body = body(&request(&config(None), "p", &[], &[]));
        assert!(body.get("reasoning").is_none());
    }

    #[test]
    fn reasoning_and_calls_go_back_in_order_and_anthropic_items_do_not() {
        let reasoning =
            json!({"id": "rs_1", "type": "reasoning", "encrypted_content": "gAAAA", "summary": []});
        let history = vec![
            Entry::user("list /data"),
            Entry::Opaque {
                api: Api::OpenaiResponses,
                item: reasoning.clone(),
            },
            Entry::Opaque {
                api: Api::AnthropicMessages,
                item: json!({"type": "thinking", "thinking": "hm", "signature": "sig"}),
            },
            Entry::ToolCall {
                id: "call_1".into(),
                name: "list_dir".into(),
                arguments: json!({"path": "/data"}),
                item_id: Some("fc_1".into()),
            },
            Entry::ToolResult {
                id: "call_1".into(),
                output: "config.json".into(),
            },
            Entry::Assistant {
                text: "One file.".into(),
                item_id: Some("msg_1".into()),
            },
        ];
        let body = body(&request(&config(None), "p", &history, &[]));
        assert_eq!(
            body["input"],
            json!([
                {"role": "user", "content": "list /data"},
                reasoning,
                {"type": "function_call", "call_id": "call_1", "name": "list_dir",
                 "arguments": "{\"path\":\"/data\"}", "id": "fc_1"},
                {"type": "function_call_output", "call_id": "call_1", "output": "config.json"},
                {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                 "content": [{"type": "output_text", "text": "One file.", "annotations": []}]},
            ])
        );
    }

    fn parse_fixture(name: &str) -> Option<Reply> {
        let body = fixture(name)?;
        Some(super::super::parse(Api::OpenaiResponses, &body).unwrap())
    }

    #[test]
    fn parses_a_text_answer() {
        let Some(reply) = parse_fixture("openai-responses_nonstream_text.json") else {
            return;
        };
        assert!(!reply.has_tool_calls());
        assert!(
            reply
                .text()
                .starts_with("I can't provide real-time updates")
        );
        assert!(matches!(&reply.entries[0],
            Entry::Assistant { item_id: Some(id), .. } if id.starts_with("msg_689a")));
        assert_eq!(reply.cut_short, None);
    }

    #[test]
    fn parses_a_function_call() {
        let Some(reply) = parse_fixture("openai-responses_nonstream_function-call.json") else {
            return;
        };
        assert_eq!(
            reply.entries,
            vec![Entry::ToolCall {
                id: "call_unLAR8MvFNptuiZK6K6HCy5k".into(),
                name: "get_current_weather".into(),
                arguments: json!({"location": "Boston, MA", "unit": "celsius"}),
                item_id: Some("fc_67ca09c6bedc8190a7abfec07b1a1332096610f474011cc0".into()),
            }]
        );
    }

    #[test]
    fn keeps_encrypted_reasoning_byte_for_byte() {
        let name = "openai-responses_nonstream_reasoning-encrypted_store-false.json";
        let (Some(reply), Some(raw)) = (parse_fixture(name), fixture(name)) else {
            return;
        };
        let raw: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(
            reply.entries[0],
            Entry::Opaque {
                api: Api::OpenaiResponses,
                item: raw["output"][0].clone()
            }
        );
        assert!(reply.text().ends_with("Final result: 570"));
        // Sent back next step, the item is exactly what came.
        let mut history = vec![Entry::user("compute")];
        history.extend(reply.entries.clone());
        history.push(Entry::user("thanks"));
        let body = body(&request(&config(None), "p", &history, &[]));
        assert_eq!(body["input"][1], raw["output"][0]);
        assert_eq!(body["input"][2]["id"], raw["output"][1]["id"]);
    }

    #[test]
    fn arguments_that_are_not_json_go_back_as_valid_json() {
        let reply = parse(&json!({"output": [{
            "type": "function_call", "call_id": "c1", "name": "read_file", "arguments": "{\"path\": "
        }]}))
        .unwrap();
        let history = [
            reply.entries[0].clone(),
            Entry::ToolResult {
                id: "c1".into(),
                output: "error".into(),
            },
        ];
        let body = body(&request(&config(None), "p", &history, &[]));
        assert_eq!(
            body["input"][0]["arguments"],
            r#"{"invalid_arguments":"{\"path\": "}"#
        );
    }

    #[test]
    fn an_incomplete_answer_says_why() {
        let reply = parse(&json!({
            "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "reasoning", "id": "rs", "summary": []}],
        }))
        .unwrap();
        assert_eq!(reply.cut_short.as_deref(), Some("max_output_tokens"));
        assert_eq!(reply.text(), "");
    }
}
