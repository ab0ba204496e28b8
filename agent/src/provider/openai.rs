//! The OpenAI Responses API: `POST {base_url}/v1/responses`, streamed, `store: false`, with
//! encrypted reasoning requested and passed back so a reasoning model keeps its thread between
//! steps without the provider storing anything. Items of other APIs in the history are skipped.
//! The stream's final `response.completed` (or `response.incomplete`) holds the whole response,
//! read like a non-streaming answer; the items done before it stand in when its output is empty.

use serde_json::{Map, Value, json};

use super::{Failure, Reply, Usage};
use crate::config::Config;
use crate::history::Entry;
use crate::message::{Api, HttpRequest};
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
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "max_output_tokens": config.max_tokens,
        "stream": true,
    });
    if !tools.is_empty() {
        body["tools"] = json!(tools);
    }
    if let Some(effort) = &config.reasoning_effort {
        body["reasoning"] = json!({"effort": effort});
    }
    super::openai_style(config, "/v1/responses", &body)
}

/// One history entry as a Responses input item; `None` for what this API cannot take.
fn input_item(entry: &Entry) -> Option<Value> {
    Some(match entry {
        // `context::view` turns the summary into a user message first; one that gets here
        // all the same is sent as the user's words too.
        Entry::User { text } | Entry::Summary { text } => json!({"role": "user", "content": text}),
        Entry::Assistant { text, item_id, .. } => {
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

/// A whole response object (the non-streaming answer, or the stream's final event) as a reply.
pub fn parse(response: &Value) -> Result<Reply, String> {
    if let Some(message) = response["error"]["message"].as_str() {
        return Err(message.to_string());
    }
    let output = response["output"]
        .as_array()
        .ok_or("it has no `output` list")?;
    let mut reply = Reply {
        usage: usage(&response["usage"]),
        ..Reply::default()
    };
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
                    steps: None,
                    usage: None,
                });
            }
            Some("function_call") => reply.entries.push(Entry::ToolCall {
                id: item["call_id"]
                    .as_str()
                    .ok_or("a function_call has no call_id")?
                    .to_string(),
                name: item["name"].as_str().unwrap_or_default().to_string(),
                arguments: super::parse_arguments(item["arguments"].as_str().unwrap_or("{}")),
                item_id: item["id"].as_str().map(str::to_string),
            }),
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

/// `usage` in [`Usage`]'s meaning: here `input_tokens` counts the whole prompt, cached tokens
/// included, so those are taken out.
fn usage(usage: &Value) -> Usage {
    let details = &usage["input_tokens_details"];
    let read = super::count(&details["cached_tokens"]);
    let written = super::count(&details["cache_write_tokens"]);
    Usage {
        input_tokens: super::count(&usage["input_tokens"]).saturating_sub(read + written),
        output_tokens: super::count(&usage["output_tokens"]),
        cache_read_tokens: read,
        cache_write_tokens: written,
    }
}

/// The reading of one Responses stream.
#[derive(Debug, Default)]
pub struct Stream {
    /// The output items done so far, with their `output_index`.
    items: Vec<(u64, Value)>,
    /// The response of the final `response.completed` or `response.incomplete` event.
    end: Option<Map<String, Value>>,
    /// The `output_index` of the message whose text was shown last: the next message's text is
    /// shown after a blank line, as [`Reply::text`] joins them.
    showing: Option<u64>,
    /// Every text delta, for a stream whose items never came whole (see [`Stream::finish`]).
    text: String,
}

impl Stream {
    /// One event's data; returns the answer's text it adds.
    pub fn event(&mut self, data: &str) -> Result<String, Failure> {
        let mut event = super::json(data)?;
        match event["type"].as_str().unwrap_or_default() {
            "response.output_text.delta" | "response.refusal.delta" => {
                let delta = event["delta"].as_str().unwrap_or_default();
                let index = event["output_index"].as_u64();
                let shown = match self.showing.replace(index.unwrap_or_default()) {
                    Some(showing) if index.is_some_and(|i| i != showing) => format!("\n\n{delta}"),
                    _ => delta.to_string(),
                };
                self.text.push_str(&shown);
                return Ok(shown);
            }
            "response.output_item.done" => {
                let index = event["output_index"].as_u64().unwrap_or(u64::MAX);
                self.items.push((index, event["item"].take()));
            }
            "response.completed" | "response.incomplete" => {
                self.end = Some(match event["response"].take() {
                    Value::Object(response) => response,
                    _ => Map::new(),
                });
            }
            "response.failed" => {
                let error = match &event["response"]["error"] {
                    Value::Null => json!({"message": "the response failed"}),
                    error => error.clone(),
                };
                return Err(super::stream_error(&error));
            }
            // The spec puts the error's fields at the top; real streams nest them in `error`.
            "error" => return Err(super::stream_error(&event)),
            // Reasoning summaries, argument deltas, `response.created` and the like: the items
            // they build arrive whole in `response.output_item.done`.
            _ => {}
        }
        Ok(String::new())
    }

    pub fn finish(mut self) -> Result<Reply, Failure> {
        let Some(mut response) = self.end else {
            return Err(super::ended_early());
        };
        if response
            .get("output")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            self.items.sort_by_key(|(index, _)| *index);
            let mut items: Vec<Value> = self.items.into_iter().map(|(_, item)| item).collect();
            // A server that streams text deltas but neither the finished items nor the output
            // in `response.completed` still said something: keep it as one message.
            if items.is_empty() && !self.text.is_empty() {
                items.push(json!({"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": self.text, "annotations": []}]}));
            }
            response.insert("output".into(), Value::Array(items));
        }
        parse(&Value::Object(response)).map_err(super::unusable)
    }
}

/// A whole response as the events that stream it: `response.created`, each item's text deltas
/// and `response.output_item.done`, then `response.completed` with everything.
#[cfg(test)]
pub fn stream_of(response: &Value) -> String {
    use super::sse::frame;
    let event = |value: Value| frame(value["type"].as_str(), &value.to_string());
    let mut created = response.clone();
    created["output"] = json!([]);
    created["status"] = json!("in_progress");
    let mut stream = event(json!({"type": "response.created", "response": created}));
    let output = response["output"].as_array().cloned().unwrap_or_default();
    for (index, item) in output.iter().enumerate() {
        for part in item["content"].as_array().into_iter().flatten() {
            if let Some(text) = part["text"].as_str() {
                let delta = json!({"type": "response.output_text.delta", "output_index": index,
                    "item_id": item["id"], "delta": text, "obfuscation": "xyz"});
                stream.push_str(&event(delta));
            }
        }
        let done =
            json!({"type": "response.output_item.done", "output_index": index, "item": item});
        stream.push_str(&event(done));
    }
    let kind = match response["status"].as_str() {
        Some("incomplete") => "response.incomplete",
        _ => "response.completed",
    };
    stream + &event(json!({"type": kind, "response": response}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Failure, streamed, test_config};
    use crate::testing::fixture;

    fn config(effort: Option<&str>) -> Config {
        Config {
            reasoning_effort: effort.map(str::to_string),
            ..test_config(Api::OpenaiResponses)
        }
    }

    fn body(request: &HttpRequest) -> Value {
        serde_json::from_slice(&request.body).unwrap()
    }

    #[test]
    fn the_request_streams_and_asks_for_no_storage_and_encrypted_reasoning() {
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
        assert_eq!(body["model"], "model-test");
        assert_eq!(body["instructions"], "the prompt");
        assert_eq!(body["stream"], true);
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
    }

    #[test]
    fn no_reasoning_field_without_an_effort_and_no_tools_field_without_tools() {
        let body = body(&request(&config(None), "p", &[], &[]));
        assert!(body.get("reasoning").is_none());
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn reasoning_and_calls_go_back_in_order_and_other_items_do_not() {
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
                steps: None,
                usage: None,
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

    /// A recorded stream, read; `None` without the fixtures.
    fn read_fixture(name: &str) -> Option<(String, Result<Reply, Failure>)> {
        Some(streamed(Api::OpenaiResponses, &fixture(name)?))
    }

    /// The `.chunks.jsonl` recordings (data lines only) framed again as the server sent them,
    /// one stream per `response.created`.
    fn framed_chunks(name: &str) -> Option<Vec<Vec<u8>>> {
        let text = String::from_utf8(fixture(name)?).unwrap();
        let mut streams: Vec<String> = Vec::new();
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            let value: Value = serde_json::from_str(line).unwrap();
            let kind = value["type"].as_str().unwrap();
            if kind == "response.created" || streams.is_empty() {
                streams.push(String::new());
            }
            let last = streams.last_mut().unwrap();
            last.push_str(&super::super::sse::frame(Some(kind), line));
        }
        Some(streams.into_iter().map(String::into_bytes).collect())
    }

    /// The item of the final event's output at `index`, as recorded.
    fn completed_item(stream: &[u8], index: usize) -> Value {
        let text = String::from_utf8_lossy(stream);
        let data = text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .find(|data| {
                data.contains("\"type\":\"response.completed\"")
                    || data.contains("\"type\": \"response.completed\"")
            })
            .unwrap();
        let event: Value = serde_json::from_str(data).unwrap();
        event["response"]["output"][index].clone()
    }

    #[test]
    fn streams_a_text_answer() {
        let Some((shown, reply)) = read_fixture("openai-responses_stream_text.sse") else {
            return;
        };
        let reply = reply.unwrap();
        assert_eq!(shown, "2+2 = 4");
        assert_eq!(
            reply.entries,
            vec![Entry::Assistant {
                text: "2+2 = 4".into(),
                item_id: Some("msg_0dbef2d9d14a548c00696d5e6fb1a08190941cffd38695ae38".into()),
                steps: None,
                usage: None,
            }]
        );
        assert_eq!(reply.cut_short, None);
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 20,
                output_tokens: 10,
                cache_read_tokens: 0,
                cache_write_tokens: 0
            }
        );
    }

    #[test]
    fn streams_encrypted_reasoning_and_a_call_byte_for_byte() {
        let name = "openai-responses_stream_reasoning-encrypted_function-call.sse";
        let (Some((shown, reply)), Some(raw)) = (read_fixture(name), fixture(name)) else {
            return;
        };
        let reply = reply.unwrap();
        assert_eq!(shown, "", "reasoning is not shown");
        let reasoning = completed_item(&raw, 0);
        assert!(
            reasoning["encrypted_content"]
                .as_str()
                .unwrap()
                .starts_with("gAAAAABoyXvy")
        );
        assert_eq!(
            reply.entries,
            vec![
                Entry::Opaque {
                    api: Api::OpenaiResponses,
                    item: reasoning.clone()
                },
                Entry::ToolCall {
                    id: "call_CWXgs68YprAjp6t0371hiPOI".into(),
                    name: "final_result".into(),
                    arguments: json!({"result": 6666}),
                    item_id: Some("fc_0050471a34b36ae60068c97bf19d9c819590eaf42c0edc1042".into()),
                },
            ]
        );
        assert_eq!(
            (reply.usage.input_tokens, reply.usage.output_tokens),
            (53, 469)
        );
        // Sent back next step, the reasoning item is exactly what came.
        let mut history = vec![Entry::user("go")];
        history.extend(reply.entries);
        history.push(Entry::ToolResult {
            id: "call_CWXgs68YprAjp6t0371hiPOI".into(),
            output: "ok".into(),
        });
        let body = body(&request(&config(None), "p", &history, &[]));
        assert_eq!(body["input"][1], reasoning);
    }

    #[test]
    fn streams_reasoning_commentary_and_a_call_of_a_newer_model() {
        let name = "openai-responses_stream_reasoning_text_function-call.sse";
        let (Some((shown, reply)), Some(raw)) = (read_fixture(name), fixture(name)) else {
            return;
        };
        let reply = reply.unwrap();
        assert_eq!(
            shown,
            "I’ll check the capital lookup tool for “PotatoLand.”"
        );
        // The final event's items are authoritative (its encrypted content differs from the
        // earlier `output_item` events').
        assert_eq!(
            reply.entries[0],
            Entry::Opaque {
                api: Api::OpenaiResponses,
                item: completed_item(&raw, 0)
            }
        );
        assert_eq!(reply.text(), shown);
        assert!(
            matches!(&reply.entries[2], Entry::ToolCall { name, arguments, .. }
            if name == "get_capital" && *arguments == json!({"country": "PotatoLand"}))
        );
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 63,
                output_tokens: 69,
                cache_read_tokens: 0,
                cache_write_tokens: 0
            }
        );
    }

    #[test]
    fn streams_a_four_step_tool_loop() {
        let Some(streams) =
            framed_chunks("openai-responses_stream_reasoning-encrypted_store-false.chunks.jsonl")
        else {
            return;
        };
        assert_eq!(streams.len(), 4);
        let replies: Vec<(String, Reply)> = streams
            .iter()
            .map(|stream| {
                let (shown, reply) = streamed(Api::OpenaiResponses, stream);
                (shown, reply.unwrap())
            })
            .collect();
        let calls: Vec<Value> = replies
            .iter()
            .flat_map(|(_, reply)| &reply.entries)
            .filter_map(|entry| match entry {
                Entry::ToolCall { arguments, .. } => Some(arguments.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            calls,
            [
                json!({"a": 12, "b": 7, "op": "add"}),
                json!({"a": 19, "b": 3, "op": "multiply"}),
                json!({"a": 57, "b": 10, "op": "multiply"}),
            ]
        );
        let reasoning = completed_item(&streams[0], 0);
        assert_eq!(reasoning["type"], "reasoning");
        assert!(replies[0].1.entries.contains(&Entry::Opaque {
            api: Api::OpenaiResponses,
            item: reasoning
        }));
        let (shown, last) = &replies[3];
        assert_eq!(shown, "The final result is **570**.");
        assert_eq!(last.text(), "The final result is **570**.");
        let inputs: Vec<u64> = replies.iter().map(|(_, r)| r.usage.input_tokens).collect();
        assert_eq!(inputs, [134, 221, 260, 299]);
    }

    #[test]
    fn the_insufficient_quota_error_in_a_stream_ends_it() {
        let Some(streams) =
            framed_chunks("openai-responses_stream_error-insufficient-quota.chunks.jsonl")
        else {
            return;
        };
        let (shown, outcome) = streamed(Api::OpenaiResponses, &streams[0]);
        assert_eq!(shown, "");
        let Err(Failure::Fatal(words)) = outcome else {
            panic!("{outcome:?}");
        };
        assert!(
            words.starts_with(
                "The model provider reported an error: You exceeded your current quota"
            ),
            "{words}"
        );
        // `response.failed` alone says the same.
        let text = String::from_utf8(streams[0].clone()).unwrap();
        let failed = text
            .split("\n\n")
            .find(|e| e.contains("response.failed"))
            .unwrap();
        let (_, alone) = streamed(Api::OpenaiResponses, failed.as_bytes());
        assert_eq!(alone, Err(Failure::Fatal(words)));
    }

    #[test]
    fn a_stream_cut_before_its_final_event_is_retried() {
        let Some(body) = fixture("openai-responses_stream_text.sse") else {
            return;
        };
        let text = String::from_utf8(body).unwrap();
        let cut = &text[..text.find("event: response.completed").unwrap()];
        let (shown, outcome) = streamed(Api::OpenaiResponses, cut.as_bytes());
        assert_eq!(shown, "2+2 = 4");
        assert_eq!(outcome, Err(super::super::ended_early()));
        // Cut inside the final event's data, too.
        let cut = &text[..text.len() - 40];
        assert_eq!(
            streamed(Api::OpenaiResponses, cut.as_bytes()).1,
            Err(super::super::ended_early())
        );
    }

    #[test]
    fn a_final_event_alone_is_a_whole_answer() {
        let response = json!({"output": [{"type": "message", "id": "m1", "content": [{"type": "output_text", "text": "hi"}]}],
            "usage": {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 150}, "output_tokens": 3}});
        let event = json!({"type": "response.completed", "response": response});
        let body = format!("data: {event}\n\n");
        let (_, reply) = streamed(Api::OpenaiResponses, body.as_bytes());
        let reply = reply.unwrap();
        assert_eq!(reply.text(), "hi");
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 50,
                output_tokens: 3,
                cache_read_tokens: 1000,
                cache_write_tokens: 150
            }
        );
    }

    #[test]
    fn the_text_of_two_messages_is_shown_apart() {
        let message = |id: &str, text: &str| json!({"type": "message", "id": id, "content": [{"type": "output_text", "text": text}]});
        let response = json!({"output": [message("m1", "Looking."), message("m2", "Done.")]});
        let stream = super::super::stream_of(Api::OpenaiResponses, &response);
        let (shown, reply) = streamed(Api::OpenaiResponses, &stream);
        assert_eq!(shown, "Looking.\n\nDone.");
        assert_eq!(shown, reply.unwrap().text());
    }

    #[test]
    fn items_done_stand_in_for_an_empty_final_output() {
        let body = [
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"type": "function_call", "call_id": "c2", "name": "b", "arguments": "{}"}}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{}"}}),
            json!({"type": "response.completed", "response": {"output": [], "status": "completed"}}),
        ]
        .iter()
        .map(|e| super::super::sse::frame(e["type"].as_str(), &e.to_string()))
        .collect::<String>();
        let reply = streamed(Api::OpenaiResponses, body.as_bytes()).1.unwrap();
        let ids: Vec<&str> = reply
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::ToolCall { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["c1", "c2"]);
    }

    #[test]
    fn a_whole_answer_streams_to_the_same_reply() {
        for name in [
            "openai-responses_nonstream_text.json",
            "openai-responses_nonstream_function-call.json",
            "openai-responses_nonstream_reasoning-encrypted_store-false.json",
        ] {
            let Some(raw) = fixture(name) else {
                return;
            };
            let whole: Value = serde_json::from_slice(&raw).unwrap();
            let (shown, reply) = streamed(
                Api::OpenaiResponses,
                &super::super::stream_of(Api::OpenaiResponses, &whole),
            );
            let reply = reply.unwrap();
            assert_eq!(reply, parse(&whole).unwrap(), "{name}");
            assert_eq!(shown, reply.text(), "{name}");
        }
    }

    #[test]
    fn parses_a_text_answer_with_cache_usage() {
        let Some(raw) = fixture("openai-responses_nonstream_text.json") else {
            return;
        };
        let whole: Value = serde_json::from_slice(&raw).unwrap();
        let reply = parse(&whole).unwrap();
        assert!(!reply.has_tool_calls());
        assert!(
            reply
                .text()
                .starts_with("I can't provide real-time updates")
        );
        assert!(matches!(&reply.entries[0],
            Entry::Assistant { item_id: Some(id), .. } if id.starts_with("msg_689a")));
        let details = &whole["usage"]["input_tokens_details"];
        let (read, written) = (
            super::super::count(&details["cached_tokens"]),
            super::super::count(&details["cache_write_tokens"]),
        );
        assert_eq!(reply.usage.cache_read_tokens, read);
        assert_eq!(reply.usage.cache_write_tokens, written);
        assert_eq!(
            reply.usage.prompt_tokens(),
            super::super::count(&whole["usage"]["input_tokens"])
        );
    }

    #[test]
    fn parses_a_function_call() {
        let Some(raw) = fixture("openai-responses_nonstream_function-call.json") else {
            return;
        };
        let reply = parse(&serde_json::from_slice(&raw).unwrap()).unwrap();
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
        let Some(raw) = fixture("openai-responses_nonstream_reasoning-encrypted_store-false.json")
        else {
            return;
        };
        let raw: Value = serde_json::from_slice(&raw).unwrap();
        let reply = parse(&raw).unwrap();
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
        let response = json!({
            "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "reasoning", "id": "rs", "summary": []}],
        });
        let reply = streamed(
            Api::OpenaiResponses,
            &super::super::stream_of(Api::OpenaiResponses, &response),
        )
        .1
        .unwrap();
        assert_eq!(reply.cut_short.as_deref(), Some("max_output_tokens"));
        assert_eq!(reply.text(), "");
    }

    #[test]
    fn text_deltas_alone_still_make_the_answer() {
        let stream = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"Hel\"}\n\n\
                      event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"lo.\"}\n\n\
                      event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":2}}}\n\n";
        let mut parsed = super::super::Stream::new(Api::OpenaiResponses);
        assert_eq!(parsed.feed(stream.as_bytes()).unwrap(), "Hello.");
        let reply = parsed.finish().unwrap();
        assert_eq!(reply.text(), "Hello.");
        assert_eq!(reply.usage.input_tokens, 5);
    }
}
