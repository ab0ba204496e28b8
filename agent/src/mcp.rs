//! The agent as an MCP client (DESIGN §23): JSON-RPC over streamable HTTP to the servers of
//! `mcp_servers`: `initialize` (keeping the server's `Mcp-Session-Id`), then
//! `notifications/initialized`, `tools/list` and `tools/call`, each answered as one JSON body or
//! as server-sent events. Which tools a person sees or calls is decided before anything here
//! runs (`config`'s tiers, `access`).
//! **Invariant:** every request carries its server's timeout and never an `Authorization`
//! header (the host adds the server's token by URL); every failure comes back in words that
//! name the server, never a panic and never a wait without end.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::config::McpServer;
use crate::host::{Heard, Host, Posted};
use crate::message::{HttpRequest, Incoming, Tier, shorten};
use crate::provider::sse;
use crate::tools::ToolSpec;

/// The MCP revision the agent speaks.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// Every tool name the model calls an MCP server's tool by starts with this.
pub const PREFIX: &str = "mcp__";

/// The most bytes of one answer read: past it the answer is refused as too big, so a server
/// cannot fill the agent's memory.
pub const MAX_ANSWER_BYTES: usize = 4 << 20;

/// The most `tools/list` pages followed (`nextCursor`): a server that pages forever ends there.
pub const MAX_LIST_PAGES: usize = 10;

/// How much of an unreadable answer a failure quotes.
const QUOTED_CHARS: usize = 200;

/// How much of a server's tool description the model is shown.
const MAX_DESCRIPTION_CHARS: usize = 2_000;

/// Why a request to a server came to nothing.
#[derive(Debug, PartialEq)]
pub enum Failed {
    /// In words for the model, naming the server.
    Said(String),
    /// A shutdown came while waiting: the turn must save and stop.
    Shutdown,
}

/// The sessions of the servers spoken to, by server name and URL (a changed URL is another
/// server). They last as long as the agent runs; a session the server forgot (404) is made anew
/// once per request.
#[derive(Default)]
pub struct Sessions {
    by_server: HashMap<(String, String), Session>,
}

/// One server's session: its id, once the server gave one, and the next JSON-RPC id.
#[derive(Default)]
struct Session {
    id: Option<String>,
    next_id: u64,
    /// `initialize` and `notifications/initialized` went through.
    ready: bool,
}

/// A tool as `tools/list` describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// The tools of `listed` a person of `tier` may use, as the model is told of them: only those
/// the configuration lists for `tier`, named `mcp__<server>__<tool>`.
pub fn offered(server: &McpServer, tier: Tier, listed: Vec<RemoteTool>) -> Vec<ToolSpec> {
    listed
        .into_iter()
        .filter(|tool| server.allows(&tool.name, tier))
        .map(|tool| ToolSpec {
            name: server.tool_name(&tool.name),
            description: shorten(&tool.description, MAX_DESCRIPTION_CHARS),
            parameters: match tool.input_schema {
                schema @ Value::Object(_) => schema,
                _ => json!({"type": "object"}),
            },
        })
        .collect()
}

/// What one HTTP exchange came to.
enum Exchanged {
    /// The JSON-RPC answer whose id was asked for (`Value::Null` for a notification), and the
    /// session id the answer's headers gave.
    Answer(Value, Option<String>),
    /// 404: the server does not know the session (any more).
    Gone,
}

/// A client for one piece of a turn: the host, where the messages that arrive meanwhile go
/// (the caller's from then on, as with [`Host::post`]), and the sessions.
pub struct Client<'a, H: Host> {
    pub host: &'a mut H,
    pub sessions: &'a mut Sessions,
    pub meanwhile: &'a mut dyn FnMut(Vec<Incoming>) -> Heard,
}

impl<H: Host> Client<'_, H> {
    /// Every tool the server lists.
    pub fn list_tools(&mut self, server: &McpServer) -> Result<Vec<RemoteTool>, Failed> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let result = self.request(server, "tools/list", params)?;
            let Some(listed) = result["tools"].as_array() else {
                return Err(said(
                    server,
                    format!(
                        "its tools/list answer has no list of tools: {}",
                        quote(result.to_string().as_bytes())
                    ),
                ));
            };
            tools.extend(listed.iter().filter_map(|tool| {
                Some(RemoteTool {
                    name: tool["name"].as_str()?.to_string(),
                    description: tool["description"].as_str().unwrap_or_default().to_string(),
                    input_schema: tool["inputSchema"].clone(),
                })
            }));
            cursor = result["nextCursor"].as_str().map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        Ok(tools)
    }

    /// Calls `tool` with `arguments`: the output for the model is the result's text content,
    /// joined, starting with `error: ` when the server says the call failed (`isError`).
    pub fn call_tool(
        &mut self,
        server: &McpServer,
        tool: &str,
        arguments: &Value,
    ) -> Result<String, Failed> {
        let params = json!({"name": tool, "arguments": arguments});
        let result = self.request(server, "tools/call", params)?;
        let Some(content) = result["content"].as_array() else {
            return Err(said(
                server,
                format!(
                    "its tools/call answer has no content: {}",
                    quote(result.to_string().as_bytes())
                ),
            ));
        };
        let parts: Vec<String> = content
            .iter()
            .map(
                |item| match (item["type"].as_str(), item["text"].as_str()) {
                    (Some("text"), Some(text)) => text.to_string(),
                    (kind, _) => format!("[{} content, not shown]", kind.unwrap_or("unknown")),
                },
            )
            .collect();
        let text = parts.join("\n");
        Ok(if result["isError"] == true {
            format!("error: {text}")
        } else {
            text
        })
    }

    /// One JSON-RPC request in the server's session, opening it first when needed; a session
    /// the server answers 404 for is opened anew, once.
    fn request(
        &mut self,
        server: &McpServer,
        method: &str,
        params: Value,
    ) -> Result<Value, Failed> {
        let key = (server.name.clone(), server.url.clone());
        for fresh in [false, true] {
            if fresh || !self.sessions.by_server.get(&key).is_some_and(|s| s.ready) {
                self.initialize(server)?;
            }
            let session = self.sessions.by_server.entry(key.clone()).or_default();
            session.next_id += 1;
            let id = session.next_id;
            let session_id = session.id.clone();
            let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            match self.exchange(server, session_id.as_deref(), &body, Some(id))? {
                Exchanged::Answer(answer, _) => return result_of(server, method, answer),
                // Only a session that was there can be forgotten; without one, 404 is the URL's.
                Exchanged::Gone if !fresh && session_id.is_some() => {}
                Exchanged::Gone => return Err(said(server, "answered HTTP 404 (not found)")),
            }
        }
        Err(said(server, "forgot its new session at once (HTTP 404)"))
    }

    /// `initialize`, keeping the session id the answer gives, then `notifications/initialized`.
    fn initialize(&mut self, server: &McpServer) -> Result<(), Failed> {
        let key = (server.name.clone(), server.url.clone());
        let session = self.sessions.by_server.entry(key.clone()).or_default();
        *session = Session {
            next_id: session.next_id + 1,
            ..Session::default()
        };
        let body = json!({"jsonrpc": "2.0", "id": session.next_id, "method": "initialize",
            "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                "clientInfo": {"name": "sausage-agent", "version": env!("CARGO_PKG_VERSION")}}});
        let id = session.next_id;
        let (answer, session_id) = match self.exchange(server, None, &body, Some(id))? {
            Exchanged::Answer(answer, session_id) => (answer, session_id),
            Exchanged::Gone => return Err(said(server, "answered HTTP 404 (not found)")),
        };
        result_of(server, "initialize", answer)?;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        if let Exchanged::Gone = self.exchange(server, session_id.as_deref(), &initialized, None)? {
            return Err(said(server, "forgot its new session at once (HTTP 404)"));
        }
        let session = self.sessions.by_server.entry(key).or_default();
        session.id = session_id;
        session.ready = true;
        Ok(())
    }

    /// One POST of `body`, and the answer whose JSON-RPC id is `id` (none for a notification).
    fn exchange(
        &mut self,
        server: &McpServer,
        session_id: Option<&str>,
        body: &Value,
        id: Option<u64>,
    ) -> Result<Exchanged, Failed> {
        let mut headers = vec![
            ("content-type".to_string(), "application/json".to_string()),
            (
                "accept".to_string(),
                "application/json, text/event-stream".to_string(),
            ),
        ];
        if let Some(session_id) = session_id {
            headers.push(("mcp-session-id".into(), session_id.into()));
            headers.push(("mcp-protocol-version".into(), PROTOCOL_VERSION.into()));
        }
        let request = HttpRequest {
            url: server.url.clone(),
            headers,
            body: body.to_string().into_bytes(),
            timeout: Some(server.timeout),
        };
        let mut answer = Vec::new();
        let mut too_big = false;
        let posted = self.host.post(
            &request,
            &mut |bytes| {
                if answer.len() + bytes.len() > MAX_ANSWER_BYTES {
                    too_big = true;
                } else {
                    answer.extend_from_slice(bytes);
                }
                Vec::new()
            },
            self.meanwhile,
        );
        if too_big {
            return Err(said(
                server,
                format!("answered more than {} MiB", MAX_ANSWER_BYTES >> 20),
            ));
        }
        let headers = match posted {
            Posted::Streamed { headers } => headers,
            Posted::Refused(response) if response.status == 404 => return Ok(Exchanged::Gone),
            Posted::Refused(response) => {
                return Err(said(
                    server,
                    format!(
                        "answered HTTP {}: {}",
                        response.status,
                        quote(&response.body)
                    ),
                ));
            }
            // A server may hold its event stream open after the answer: what came counts.
            Posted::Failed { why, .. } => match id.and_then(|id| find_answer(&answer, id).ok()) {
                Some(found) => return Ok(Exchanged::Answer(found, None)),
                None => return Err(said(server, why)),
            },
            Posted::Stopped => return Err(Failed::Shutdown),
            // A tool call's messages are only kept (`Heard::GoOn`); a stop waits for its end.
            Posted::Dropped => return Err(said(server, "the call was dropped")),
        };
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let Some(id) = id else {
            return Ok(Exchanged::Answer(Value::Null, header("mcp-session-id")));
        };
        let found = find_answer(&answer, id).map_err(|why| said(server, why))?;
        Ok(Exchanged::Answer(found, header("mcp-session-id")))
    }
}

/// The JSON-RPC message with `id` in a body that is one JSON message, a batch of them, or
/// server-sent events whose data are messages (requests and notifications of the server are
/// passed over).
fn find_answer(body: &[u8], id: u64) -> Result<Value, String> {
    let messages: Vec<Value> = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(batch)) => batch,
        Ok(message) => vec![message],
        Err(_) if sse::looks_like_events(body) => {
            let mut parser = sse::Parser::default();
            let mut events = parser.feed(body)?;
            events.extend(parser.finish()?);
            events
                .iter()
                .filter_map(|event| serde_json::from_str(&event.data).ok())
                .collect()
        }
        Err(_) => {
            return Err(format!(
                "answered something that is neither JSON nor server-sent events: {}",
                quote(body)
            ));
        }
    };
    messages
        .into_iter()
        .find(|m| m["id"] == id && m.get("method").is_none())
        .ok_or_else(|| {
            format!(
                "sent no answer to request {id} (the answer began: {})",
                quote(body)
            )
        })
}

/// The `result` of a JSON-RPC answer, or its `error` in words.
fn result_of(server: &McpServer, method: &str, answer: Value) -> Result<Value, Failed> {
    if let Some(error) = answer.get("error") {
        let message = error["message"].as_str().unwrap_or("no message");
        return Err(said(
            server,
            format!("refused {method}: {message} (code {})", error["code"]),
        ));
    }
    match answer.get("result") {
        Some(result @ Value::Object(_)) => Ok(result.clone()),
        _ => Err(said(
            server,
            format!("answered {method} without a result: {answer}"),
        )),
    }
}

fn said(server: &McpServer, what: impl std::fmt::Display) -> Failed {
    Failed::Said(format!(
        "MCP server {} ({}): {what}",
        server.name, server.url
    ))
}

/// The start of a body, for a failure's words.
fn quote(body: &[u8]) -> String {
    match body.trim_ascii() {
        [] => "(nothing)".into(),
        text => shorten(&String::from_utf8_lossy(text), QUOTED_CHARS),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::testing::{Answer, ScriptedHost};

    fn server() -> McpServer {
        McpServer {
            name: "weather".into(),
            url: "http://127.0.0.1:8123/mcp".into(),
            tools: [("weather".to_string(), vec![Tier::Owner])].into(),
            timeout: Duration::from_secs(5),
        }
    }

    fn json_answer(id: u64, result: Value) -> Answer {
        let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
        Answer::Headed(
            vec![("mcp-session-id".into(), "s-1".into())],
            body.to_string().into_bytes(),
        )
    }

    /// The answers of a session opened as requests 1 (initialize) and the notification.
    fn opened() -> Vec<Answer> {
        vec![
            json_answer(1, json!({"protocolVersion": PROTOCOL_VERSION})),
            Answer::Stream(Vec::new()),
        ]
    }

    /// Calls `weather` over a new session with these answers after the session's; the output
    /// and the host.
    fn call(answers: Vec<Answer>) -> (Result<String, Failed>, ScriptedHost) {
        let mut host = ScriptedHost {
            answers: opened().into_iter().chain(answers).collect(),
            ..ScriptedHost::default()
        };
        let mut sessions = Sessions::default();
        let output = Client {
            host: &mut host,
            sessions: &mut sessions,
            meanwhile: &mut |_| Heard::GoOn,
        }
        .call_tool(&server(), "weather", &json!({"city": "Oslo"}));
        (output, host)
    }

    fn said_text(output: Result<String, Failed>) -> String {
        match output {
            Err(Failed::Said(words)) => words,
            other => panic!("expected words, got {other:?}"),
        }
    }

    #[test]
    fn an_sse_answer_gives_the_message_with_the_id_and_passes_notifications_over() {
        let stream = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n\
                      : keep-alive\n\n\
                      data: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"sunny\"},{\"type\":\"text\",\"text\":\"12 C\"}]}}\n\n";
        let (output, host) = call(vec![Answer::Stream(stream.as_bytes().to_vec())]);
        assert_eq!(output, Ok("sunny\n12 C".into()));
        assert_eq!(host.requests.len(), 3);
    }

    #[test]
    fn a_json_answer_and_an_is_error_result() {
        let content = json!({"content": [{"type": "text", "text": "sunny"}, {"type": "image"}]});
        assert_eq!(
            call(vec![json_answer(2, content)]).0,
            Ok("sunny\n[image content, not shown]".into())
        );
        let failed =
            json!({"content": [{"type": "text", "text": "no such city"}], "isError": true});
        assert_eq!(
            call(vec![json_answer(2, failed)]).0,
            Ok("error: no such city".into())
        );
    }

    #[test]
    fn a_timeout_an_http_error_and_garbage_are_words_naming_the_server() {
        let timeout = Answer::Failed {
            why: "no whole answer came within 5 s".into(),
            retry: false,
        };
        let words = said_text(call(vec![timeout]).0);
        assert_eq!(
            words,
            "MCP server weather (http://127.0.0.1:8123/mcp): no whole answer came within 5 s"
        );
        let error = ScriptedHost::refused(500, &[], json!({"oops": 1}));
        let words = said_text(call(vec![error]).0);
        assert!(
            words.ends_with("answered HTTP 500: {\"oops\":1}"),
            "{words}"
        );
        let garbage = Answer::Stream(b"<html>bad gateway</html>".to_vec());
        let words = said_text(call(vec![garbage]).0);
        assert!(
            words.contains("neither JSON nor server-sent events: <html>"),
            "{words}"
        );
        let wrong_id = json_answer(7, json!({"content": []}));
        let words = said_text(call(vec![wrong_id]).0);
        assert!(words.contains("sent no answer to request 2"), "{words}");
        let refused = Answer::Stream(
            json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "bad city"}})
                .to_string()
                .into_bytes(),
        );
        let words = said_text(call(vec![refused]).0);
        assert!(
            words.ends_with("refused tools/call: bad city (code -32602)"),
            "{words}"
        );
        let no_content = json_answer(2, json!({"text": "x"}));
        assert!(said_text(call(vec![no_content]).0).contains("has no content"));
        assert_eq!(call(vec![Answer::Stopped]).0, Err(Failed::Shutdown));
    }

    #[test]
    fn a_session_the_server_forgot_is_made_anew_once() {
        let gone = || ScriptedHost::refused(404, &[], json!({}));
        let ok = json_answer(4, json!({"content": [{"type": "text", "text": "sunny"}]}));
        let again = [json_answer(3, json!({})), Answer::Stream(Vec::new())];
        let (output, host) = call([gone()].into_iter().chain(again).chain([ok]).collect());
        assert_eq!(output, Ok("sunny".into()));
        let methods: Vec<Value> = (host.requests.iter())
            .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap()["method"].clone())
            .collect();
        assert_eq!(
            methods,
            [
                "initialize",
                "notifications/initialized",
                "tools/call",
                "initialize",
                "notifications/initialized",
                "tools/call"
            ]
        );
        let again = [json_answer(3, json!({})), Answer::Stream(Vec::new())];
        let (output, _) = call([gone()].into_iter().chain(again).chain([gone()]).collect());
        assert!(said_text(output).ends_with("answered HTTP 404 (not found)"));
    }

    #[test]
    fn only_listed_tools_for_the_tier_are_offered_with_the_servers_schema() {
        let listed = vec![
            RemoteTool {
                name: "weather".into(),
                description: "The weather.".into(),
                input_schema: json!({"type": "object", "properties": {"city": {}}}),
            },
            RemoteTool {
                name: "other".into(),
                description: "Not listed.".into(),
                input_schema: json!({"type": "object"}),
            },
        ];
        let owner = offered(&server(), Tier::Owner, listed.clone());
        assert_eq!(owner.len(), 1);
        assert_eq!(owner[0].name, "mcp__weather__weather");
        assert_eq!(owner[0].description, "The weather.");
        assert_eq!(owner[0].parameters["properties"]["city"], json!({}));
        assert!(offered(&server(), Tier::Member, listed).is_empty());
    }
}
