//! The OpenAI Chat Completions API: `POST {base_url}/v1/chat/completions`, streamed, as local
//! model servers (llama.cpp, vLLM, Ollama) speak it. Messages are `system`, `user`, `assistant`
//! (text and tool calls in one message) and `tool` (one result each, right after the assistant
//! message that made the calls). This API has no items to pass back, so opaque items of the
//! other APIs are skipped, and reasoning a server streams (`reasoning_content`) is dropped.
//! The stream is read by building the `chat.completion` a non-streaming request would have
//! answered, then reading that.

use serde_json::{Value, json};

use super::{Failure, Reply, Usage, sse};
use crate::config::Config;
use crate::history::Entry;
use crate::message::HttpRequest;
use crate::tools::ToolSpec;

pub fn request(
    config: &Config,
    system: &str,
    history: &[Entry],
    tools: &[ToolSpec],
) -> HttpRequest {
    let mut body = json!({
        "model": config.model,
        "messages": messages(system, history),
        "stream": true,
        "stream_options": {"include_usage": true},
        // Not OpenAI's newer `max_completion_tokens`: llama.cpp, vLLM and Ollama take this one.
        "max_tokens": config.max_tokens,
    });
    if !tools.is_empty() {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters,
                }})
            })
            .collect();
        body["tools"] = json!(tools);
    }
    if let Some(effort) = &config.reasoning_effort {
        body["reasoning_effort"] = json!(effort);
    }
    super::openai_style(config, "/v1/chat/completions", &body)
}

/// The history as chat messages after the system prompt. Some servers' chat templates insist
/// that users and assistants alternate, so consecutive user entries share one message and a
/// conversation never opens with the assistant.
fn messages(system: &str, history: &[Entry]) -> Vec<Value> {
    let mut messages = vec![json!({"role": "system", "content": system})];
    for entry in history {
        let last = messages.last_mut().filter(|m| m["role"] != "system");
        match entry {
            // `context::view` turns the summary into a user message first; one that gets here
            // all the same is sent as the user's words too.
            Entry::User { text } | Entry::Summary { text } => match last {
                Some(last) if last["role"] == "user" => append_text(last, text),
                _ => messages.push(json!({"role": "user", "content": text})),
            },
            // An empty text says nothing.
            Entry::Assistant { text, .. } if text.is_empty() => {}
            Entry::Assistant { text, .. } => match last {
                Some(last) if last["role"] == "assistant" => append_text(last, text),
                _ => messages.push(json!({"role": "assistant", "content": text})),
            },
            Entry::ToolCall {
                id,
                name,
                arguments,
                ..
            } => {
                let call = json!({"id": id, "type": "function", "function": {
                    "name": name, "arguments": super::arguments_object(arguments).to_string(),
                }});
                match last {
                    Some(last) if last["role"] == "assistant" => {
                        match last["tool_calls"].as_array_mut() {
                            Some(calls) => calls.push(call),
                            None => last["tool_calls"] = json!([call]),
                        }
                    }
                    _ => messages
                        .push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            Entry::ToolResult { id, output } => {
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}))
            }
            Entry::Opaque { .. } => {}
        }
    }
    if messages.get(1).is_some_and(|m| m["role"] == "assistant") {
        messages.insert(1, json!({"role": "user", "content": super::OPENING}));
    }
    messages
}

/// Adds `text` to a message's text, a blank line apart.
fn append_text(message: &mut Value, text: &str) {
    message["content"] = match message["content"].as_str() {
        Some(before) if !before.is_empty() => json!(format!("{before}\n\n{text}")),
        _ => json!(text),
    };
}

/// A whole `chat.completion` (the non-streaming answer, or one built from the stream) as a
/// reply: the first choice's text, then its tool calls.
pub fn parse(completion: &Value) -> Result<Reply, String> {
    let choice = &completion["choices"][0];
    let message = &choice["message"];
    let mut reply = Reply {
        usage: usage(&completion["usage"]),
        ..Reply::default()
    };
    let text = match &message["content"] {
        Value::String(text) => text.as_str(),
        _ => message["refusal"].as_str().unwrap_or_default(),
    };
    if !text.is_empty() {
        reply.entries.push(Entry::assistant(text));
    }
    for (n, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let function = &call["function"];
        reply.entries.push(Entry::ToolCall {
            // A server that gives no id still needs one to pair the result with.
            id: match call["id"].as_str() {
                Some(id) if !id.is_empty() => id.to_string(),
                _ => format!("{}_call_{n}", completion["id"].as_str().unwrap_or("chat")),
            },
            name: function["name"].as_str().unwrap_or_default().to_string(),
            arguments: match &function["arguments"] {
                Value::String(raw) => super::parse_arguments(raw),
                // Some servers send the object itself.
                other => other.clone(),
            },
            item_id: None,
        });
    }
    reply.cut_short = match choice["finish_reason"].as_str() {
        Some("length") => Some("max_tokens".into()),
        Some("content_filter") => Some("content_filter".into()),
        _ => None,
    };
    Ok(reply)
}

/// `usage` in [`Usage`]'s meaning: here `prompt_tokens` counts the whole prompt, cached tokens
/// included, so those are taken out.
fn usage(usage: &Value) -> Usage {
    let cached = super::count(&usage["prompt_tokens_details"]["cached_tokens"]);
    Usage {
        input_tokens: super::count(&usage["prompt_tokens"]).saturating_sub(cached),
        output_tokens: super::count(&usage["completion_tokens"]),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    }
}

/// The reading of one Chat Completions stream: the completion it builds.
#[derive(Debug, Default)]
pub struct Stream {
    /// The completion's `id`, from its chunks.
    id: Option<Value>,
    text: String,
    /// The tool calls by `index`: id and name come in the first fragment, the arguments' JSON
    /// text in pieces.
    calls: Vec<(u64, Call)>,
    finish_reason: Value,
    /// The last chunk's, which has no choices.
    usage: Value,
    /// `data: [DONE]` came: the stream is whole.
    done: bool,
}

#[derive(Debug, Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

impl Stream {
    /// One event; returns the answer's text it adds.
    pub fn event(&mut self, event: &sse::Event) -> Result<String, Failure> {
        if event.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(String::new());
        }
        let mut chunk = super::json(&event.data)?;
        // An error chunk, or llama.cpp's `error:` field.
        if !chunk["error"].is_null() || event.name.as_deref() == Some("error") {
            return Err(super::stream_error(&chunk));
        }
        if self.id.is_none() && chunk["id"].is_string() {
            self.id = Some(chunk["id"].take());
        }
        if chunk["usage"].is_object() {
            self.usage = chunk["usage"].take();
        }
        let mut shown = String::new();
        // Only the first choice is read; the request asks for one.
        let choices = chunk["choices"].as_array().into_iter().flatten();
        for choice in choices.filter(|c| c["index"].as_u64().unwrap_or_default() == 0) {
            let delta = &choice["delta"];
            // `reasoning_content` (llama.cpp, vLLM, DeepSeek) is neither shown nor kept.
            if let Some(text) = delta["content"].as_str() {
                self.text.push_str(text);
                shown.push_str(text);
            }
            for (n, fragment) in delta["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                self.call_fragment(n, fragment);
            }
            if choice["finish_reason"].is_string() {
                self.finish_reason = choice["finish_reason"].clone();
            }
        }
        Ok(shown)
    }

    fn call_fragment(&mut self, n: usize, fragment: &Value) {
        let index = fragment["index"].as_u64().unwrap_or(n as u64);
        let at = match self.calls.iter().position(|(i, _)| *i == index) {
            Some(at) => at,
            None => {
                self.calls.push((index, Call::default()));
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[at].1;
        let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
        if call.id.is_empty() {
            call.id = text(&fragment["id"]);
        }
        // Some servers repeat the name in every fragment: the first is the name.
        if call.name.is_empty() {
            call.name = text(&fragment["function"]["name"]);
        }
        let arguments = fragment["function"]["arguments"].as_str();
        call.arguments.push_str(arguments.unwrap_or_default());
    }

    pub fn finish(mut self) -> Result<Reply, Failure> {
        // A finish reason says the answer is whole, even when the stream then ends without its
        // usage chunk or `[DONE]` (servers differ; only the usage is lost).
        if !self.done && !self.finish_reason.is_string() {
            return Err(super::ended_early());
        }
        self.calls.sort_by_key(|(index, _)| *index);
        let calls: Vec<Value> = (self.calls.into_iter())
            .map(|(_, call)| {
                json!({"id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments}})
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": self.text});
        if !calls.is_empty() {
            message["tool_calls"] = json!(calls);
        }
        let completion = json!({
            "id": self.id,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        });
        parse(&completion).map_err(super::unusable)
    }
}

/// A whole completion as the chunks that stream it: the role, the text, each call's id and name
/// and then its arguments in two pieces, the finish reason, the usage alone, and `[DONE]`.
#[cfg(test)]
pub fn stream_of(completion: &Value) -> String {
    let chunk = |choices: Value| {
        let chunk =
            json!({"id": completion["id"], "object": "chat.completion.chunk", "choices": choices});
        super::sse::frame(None, &chunk.to_string())
    };
    let delta = |delta: Value| chunk(json!([{"index": 0, "delta": delta, "finish_reason": null}]));
    let message = &completion["choices"][0]["message"];
    let mut stream = delta(json!({"role": "assistant", "content": ""}));
    if let Some(text) = message["content"].as_str() {
        stream += &delta(json!({"content": text}));
    }
    for (index, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let opening = json!({"index": index, "id": call["id"], "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""}});
        stream += &delta(json!({"tool_calls": [opening]}));
        let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
        let middle = (0..=arguments.len() / 2)
            .rev()
            .find(|&at| arguments.is_char_boundary(at));
        let (a, b) = arguments.split_at(middle.unwrap_or_default());
        for piece in [a, b] {
            stream +=
                &delta(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}));
        }
    }
    let reason = &completion["choices"][0]["finish_reason"];
    stream += &chunk(json!([{"index": 0, "delta": {}, "finish_reason": reason}]));
    let usage = json!({"id": completion["id"], "choices": [], "usage": completion["usage"]});
    stream + &super::sse::frame(None, &usage.to_string()) + "data: [DONE]\n\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Api;
    use crate::provider::{streamed, test_config};
    use crate::testing::fixture;

    fn body(request: &HttpRequest) -> Value {
        serde_json::from_slice(&request.body).unwrap()
    }

    fn call(id: &str, name: &str, arguments: Value) -> Entry {
        Entry::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
            item_id: None,
        }
    }

    fn result(id: &str, output: &str) -> Entry {
        Entry::ToolResult {
            id: id.into(),
            output: output.into(),
        }
    }

    #[test]
    fn the_request_has_the_shape_local_servers_take() {
        let config = Config {
            reasoning_effort: Some("low".into()),
            ..test_config(Api::OpenaiChat)
        };
        let request = request(
            &config,
            "the prompt",
            &[Entry::user("hi")],
            &crate::tools::specs(),
        );
        assert_eq!(request.url, "https://api.example.com/v1/chat/completions");
        assert_eq!(
            request.headers,
            [
                ("content-type".to_string(), "application/json".to_string()),
                ("authorization".to_string(), "Bearer sk-test".to_string())
            ]
        );
        let sent = body(&request);
        assert_eq!(sent["model"], "model-test");
        assert_eq!(sent["stream"], true);
        assert_eq!(sent["stream_options"], json!({"include_usage": true}));
        assert_eq!(sent["max_tokens"], 16000);
        assert_eq!(sent["reasoning_effort"], "low");
        assert_eq!(
            sent["messages"],
            json!([
                {"role": "system", "content": "the prompt"},
                {"role": "user", "content": "hi"},
            ])
        );
        let tool = &sent["tools"][0];
        assert_eq!(tool["type"], "function");
        assert_eq!(tool["function"]["name"], "send_message");
        assert_eq!(tool["function"]["parameters"]["type"], "object");
        let config = Config {
            token: None,
            ..test_config(Api::OpenaiChat)
        };
        let request = super::request(&config, "p", &[], &[]);
        assert_eq!(request.headers.len(), 1, "the host adds the token");
        let sent = body(&request);
        assert!(sent.get("tools").is_none() && sent.get("reasoning_effort").is_none());
    }

    #[test]
    fn a_history_of_every_api_becomes_chat_messages() {
        let history = vec![
            Entry::user("list /data"),
            Entry::user("and be quick"),
            Entry::Opaque {
                api: Api::OpenaiResponses,
                item: json!({"type": "reasoning", "encrypted_content": "gAAAA"}),
            },
            Entry::Assistant {
                text: "Looking.".into(),
                item_id: Some("msg_1".into()),
                steps: None,
                usage: None,
            },
            call("call_1", "list_dir", json!({"path": "/data"})),
            call("call_2", "read_file", json!("{\"path\": ")),
            result("call_1", "config.json"),
            result("call_2", "error"),
            Entry::Opaque {
                api: Api::AnthropicMessages,
                item: json!({"type": "thinking", "thinking": "hm", "signature": "sig"}),
            },
            call("toolu_1", "read_file", json!({"path": "/data/config.json"})),
            result("toolu_1", "{}"),
            Entry::assistant(""),
            Entry::assistant("Empty config."),
            Entry::user("thanks"),
        ];
        let body = body(&request(&test_config(Api::OpenaiChat), "p", &history, &[]));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "p"},
                {"role": "user", "content": "list /data\n\nand be quick"},
                {"role": "assistant", "content": "Looking.", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "list_dir", "arguments": "{\"path\":\"/data\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "read_file",
                     "arguments": "{\"invalid_arguments\":\"{\\\"path\\\": \"}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "config.json"},
                {"role": "tool", "tool_call_id": "call_2", "content": "error"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "read_file",
                     "arguments": "{\"path\":\"/data/config.json\"}"}},
                ]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "{}"},
                {"role": "assistant", "content": "Empty config."},
                {"role": "user", "content": "thanks"},
            ])
        );
    }

    #[test]
    fn a_conversation_never_opens_with_the_assistant() {
        let messages = messages("p", &[Entry::assistant("hello"), Entry::user("hi")]);
        let roles: Vec<&str> = messages
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
    }

    #[test]
    fn a_conversation_switches_api_and_back() {
        // A chat step's answer, added to a history, goes to the other two APIs and back.
        let completion = json!({"id": "chatcmpl-1", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "call_x", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\":\"/\"}"}}]}}]});
        let reply = streamed(
            Api::OpenaiChat,
            &super::super::stream_of(Api::OpenaiChat, &completion),
        )
        .1
        .unwrap();
        let mut history = vec![Entry::user("go")];
        history.extend(reply.entries);
        history.push(result("call_x", "data"));
        history.push(Entry::user("next"));
        let anthropic =
            super::super::request(&test_config(Api::AnthropicMessages), "p", &history, &[]);
        let anthropic = body(&anthropic);
        assert_eq!(anthropic["messages"][1]["content"][1]["id"], "call_x");
        assert_eq!(
            anthropic["messages"][2]["content"][0]["tool_use_id"],
            "call_x"
        );
        let responses =
            super::super::request(&test_config(Api::OpenaiResponses), "p", &history, &[]);
        let responses = body(&responses);
        assert_eq!(responses["input"][2]["call_id"], "call_x");
        assert_eq!(responses["input"][3]["call_id"], "call_x");
        let chat = body(&request(&test_config(Api::OpenaiChat), "p", &history, &[]));
        assert_eq!(chat["messages"].as_array().unwrap().len(), 5);
    }

    #[test]
    fn streams_text_with_usage() {
        let Some(raw) = fixture("openai-chat_stream_text.sse") else {
            return;
        };
        let (shown, reply) = streamed(Api::OpenaiChat, &raw);
        let reply = reply.unwrap();
        assert!(
            shown.starts_with("I'm unable to provide real-time weather updates."),
            "{shown}"
        );
        assert!(shown.ends_with(" app."), "{shown}");
        assert_eq!(reply.entries, [Entry::assistant(shown)]);
        assert_eq!(reply.cut_short, None);
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 14,
                output_tokens: 30,
                cache_read_tokens: 0,
                cache_write_tokens: 0
            }
        );
    }

    #[test]
    fn streams_a_tool_call_in_fragments() {
        let Some(raw) = fixture("openai-chat_stream_tool-call.sse") else {
            return;
        };
        let (shown, reply) = streamed(Api::OpenaiChat, &raw);
        let reply = reply.unwrap();
        assert_eq!(shown, "");
        assert_eq!(
            reply.entries,
            [call(
                "call_CTf1nWJLqSeRgDqaCG27xZ74",
                "get_weather",
                json!({"city": "San Francisco", "state": "CA"})
            )]
        );
        assert_eq!(
            (reply.usage.input_tokens, reply.usage.output_tokens),
            (48, 19)
        );
    }

    #[test]
    fn a_stream_cut_before_its_finish_reason_is_retried_and_after_it_is_whole() {
        let Some(raw) = fixture("openai-chat_stream_tool-call.sse") else {
            return;
        };
        let text = String::from_utf8(raw).unwrap();
        // Cut after the finish reason, before the usage and `[DONE]`: the answer is whole.
        let cut = &text[..text.find("\"choices\":[]").unwrap()];
        let cut = &cut[..cut.rfind("data: ").unwrap()];
        assert!(cut.contains("\"finish_reason\":\"tool_calls\""));
        let (_, reply) = streamed(Api::OpenaiChat, cut.as_bytes());
        assert!(reply.unwrap().has_tool_calls());
        // Cut before it: the answer may be missing its end.
        let cut = &cut[..cut.rfind("data: ").unwrap()];
        assert!(!cut.contains("\"finish_reason\":\"tool_calls\""));
        assert_eq!(
            streamed(Api::OpenaiChat, cut.as_bytes()).1,
            Err(super::super::ended_early())
        );
    }

    #[test]
    fn parallel_calls_stream_to_the_same_reply() {
        let Some(raw) = fixture("openai-chat_nonstream_parallel-tool-calls.json") else {
            return;
        };
        let whole: Value = serde_json::from_slice(&raw).unwrap();
        let stream = super::super::stream_of(Api::OpenaiChat, &whole);
        let reply = streamed(Api::OpenaiChat, &stream).1.unwrap();
        assert_eq!(reply, parse(&whole).unwrap());
        assert_eq!(reply.entries.len(), 2);
        assert!(
            reply
                .entries
                .iter()
                .all(|e| matches!(e, Entry::ToolCall { arguments, .. } if arguments.is_object()))
        );
        assert_eq!(
            reply.usage.output_tokens,
            super::super::count(&whole["usage"]["completion_tokens"])
        );
    }

    #[test]
    fn reasoning_is_not_shown_and_a_long_answer_is_cut_short() {
        let chunks = [
            json!({"id": "c", "choices": [{"index": 0, "delta": {"reasoning_content": "Let me think"}}]}),
            json!({"id": "c", "choices": [{"index": 0, "delta": {"content": "Once"}}]}),
            json!({"id": "c", "choices": [{"index": 0, "delta": {"content": " upon"}, "finish_reason": "length"}],
                   "usage": {"prompt_tokens": 1000, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 900}}}),
        ];
        let body: String = chunks
            .iter()
            .map(|c| format!("data: {c}\n\n"))
            .collect::<String>()
            + "data: [DONE]\n\n";
        let (shown, reply) = streamed(Api::OpenaiChat, body.as_bytes());
        let reply = reply.unwrap();
        assert_eq!(shown, "Once upon");
        assert_eq!(reply.text(), "Once upon");
        assert_eq!(reply.cut_short.as_deref(), Some("max_tokens"));
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 100,
                output_tokens: 2,
                cache_read_tokens: 900,
                cache_write_tokens: 0
            }
        );
    }

    #[test]
    fn llama_cpp_error_field_is_classified() {
        let body = "error: {\"code\":400,\"message\":\"the request exceeds the available context size, try increasing it\",\"type\":\"exceed_context_size_error\"}\n\n";
        let (_, outcome) = streamed(Api::OpenaiChat, body.as_bytes());
        assert!(
            matches!(outcome, Err(Failure::ContextTooLong(_))),
            "{outcome:?}"
        );
    }

    #[test]
    fn calls_without_ids_get_one() {
        let chunks = [
            json!({"id": "chatcmpl-9", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "plan", "arguments": "{}"}}]}}]}),
            json!({"id": "chatcmpl-9", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ];
        let body: String = chunks
            .iter()
            .map(|c| format!("data: {c}\n\n"))
            .collect::<String>()
            + "data: [DONE]\n\n";
        let reply = streamed(Api::OpenaiChat, body.as_bytes()).1.unwrap();
        assert_eq!(
            reply.entries,
            [call("chatcmpl-9_call_0", "plan", json!({}))]
        );
    }

    #[test]
    fn an_error_chunk_ends_the_stream_classified() {
        let body = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n\
                    data: {\"error\":{\"message\":\"the context size was exceeded\",\"type\":\"exceed_context_size_error\",\"code\":400}}\n\n";
        let (shown, outcome) = streamed(Api::OpenaiChat, body.as_bytes());
        assert_eq!(shown, "Hi");
        assert_eq!(
            outcome,
            Err(Failure::ContextTooLong(
                "The model provider answered 400: the context size was exceeded".into()
            ))
        );
    }
}
