//! Tests of the agent as an MCP client in a turn (DESIGN §23) through [`ScriptedHost`]: people's
//! texts and a fake MCP server and model in; the tools each request offers, the MCP requests
//! made and the tool results, out.

use serde_json::{Value, json};

use super::people_tests::{call, requests, run_with, says, text, tool_results, world};
use crate::testing::{Answer, ScriptedHost};

const MCP_URL: &str = "http://127.0.0.1:8123/mcp";

fn config() -> String {
    json!({"api": "openai-responses", "base_url": "http://model.test", "model": "m",
        "mcp_servers": [{"name": "weather", "url": MCP_URL,
            "tools": {"weather": ["owner", "member"], "slow": ["owner"]}, "timeout_seconds": 30}]})
    .to_string()
}

/// A fake MCP server that answers as JSON (`initialize` with a session id), then the model's
/// answers in order.
fn responder(model: Vec<Answer>) -> crate::testing::Responder {
    let mut model = std::collections::VecDeque::from(model);
    Box::new(move |request| {
        if request.url != MCP_URL {
            return model.pop_front().unwrap_or_else(|| text("done"));
        }
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let result = match body["method"].as_str().unwrap() {
            "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "serverInfo": {"name": "weather", "version": "1"}}),
            "notifications/initialized" => return Answer::Stream(Vec::new()),
            "tools/list" => json!({"tools": [
                {"name": "weather", "description": "The weather of a city.",
                 "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                {"name": "slow", "description": "Slow.", "inputSchema": {"type": "object"}},
                {"name": "secret", "description": "Never listed.", "inputSchema": {"type": "object"}}]}),
            "tools/call" => json!({"content": [{"type": "text",
                "text": format!("sunny in {}", body["params"]["arguments"]["city"])}]}),
            other => panic!("unexpected {other}"),
        };
        let answer = json!({"jsonrpc": "2.0", "id": body["id"], "result": result});
        Answer::Headed(
            vec![("mcp-session-id".into(), "s-1".into())],
            answer.to_string().into_bytes(),
        )
    })
}

fn host(events: Vec<crate::host::Event>, model: Vec<Answer>) -> ScriptedHost {
    ScriptedHost {
        events: events.into(),
        respond: Some(responder(model)),
        ..ScriptedHost::default()
    }
}

fn offered_tools(body: &str) -> Vec<String> {
    let value: Value = serde_json::from_str(body).unwrap();
    value["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| n.starts_with("mcp__"))
        .map(str::to_string)
        .collect()
}

#[test]
fn each_tier_is_offered_only_the_tools_listed_for_it() {
    let data = world(&config());
    let host = run_with(
        &data,
        host(
            vec![
                says("m-1", "ann", "owner", "hi"),
                says("m-2", "bob", "member", "hi"),
                says("m-3", "gus", "guest", "hi"),
            ],
            vec![],
        ),
    );
    let model: Vec<(String, String)> = requests(&host)
        .into_iter()
        .zip(&host.requests)
        .filter(|(_, r)| r.url != MCP_URL)
        .map(|(r, _)| r)
        .collect();
    let offered: Vec<(String, Vec<String>)> = model
        .iter()
        .map(|(person, body)| (person.clone(), offered_tools(body)))
        .collect();
    assert_eq!(
        offered,
        [
            (
                "ann".into(),
                vec!["mcp__weather__weather".into(), "mcp__weather__slow".into()]
            ),
            ("bob".into(), vec!["mcp__weather__weather".into()]),
            ("gus".into(), vec![]),
        ]
    );
    let mcp: Vec<Value> = (host.requests.iter().filter(|r| r.url == MCP_URL))
        .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap()["method"].clone())
        .collect();
    assert_eq!(
        mcp,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/list"
        ],
        "the session is kept across turns; the guest's turn asks nothing"
    );
}

#[test]
fn a_call_initializes_a_session_and_sends_the_arguments_with_its_id() {
    let data = world(&config());
    let host = run_with(
        &data,
        host(
            vec![says("m-1", "ann", "owner", "weather?")],
            vec![
                call("mcp__weather__weather", json!({"city": "Oslo"})),
                text("sunny"),
            ],
        ),
    );
    let mcp: Vec<_> = host.requests.iter().filter(|r| r.url == MCP_URL).collect();
    let bodies: Vec<Value> = mcp
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(bodies[0]["method"], "initialize");
    assert_eq!(bodies[0]["params"]["protocolVersion"], "2025-06-18");
    assert_eq!(bodies[0]["params"]["clientInfo"]["name"], "sausage-agent");
    assert_eq!(
        bodies[1],
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    );
    assert_eq!(bodies[3]["method"], "tools/call");
    assert_eq!(
        bodies[3]["params"],
        json!({"name": "weather", "arguments": {"city": "Oslo"}})
    );
    let header = |r: &crate::message::HttpRequest, name: &str| {
        r.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header(mcp[0], "mcp-session-id"), None);
    for request in &mcp[1..] {
        assert_eq!(header(request, "mcp-session-id").as_deref(), Some("s-1"));
    }
    for request in &mcp {
        assert_eq!(
            header(request, "accept").as_deref(),
            Some("application/json, text/event-stream")
        );
        assert_eq!(
            header(request, "content-type").as_deref(),
            Some("application/json")
        );
        assert_eq!(
            header(request, "authorization"),
            None,
            "the host adds the token"
        );
        assert_eq!(request.timeout, Some(std::time::Duration::from_secs(30)));
    }
    assert_eq!(tool_results(&host), ["sunny in \"Oslo\""]);
}

#[test]
fn a_tool_not_listed_for_the_tier_is_refused_by_name_and_nothing_is_sent() {
    let data = world(&config());
    let host = run_with(
        &data,
        host(
            vec![
                says("m-1", "gus", "guest", "weather?"),
                says("m-2", "bob", "member", "slow?"),
                says("m-3", "ann", "owner", "secret?"),
            ],
            vec![
                call("mcp__weather__weather", json!({"city": "Oslo"})),
                text("no"),
                call("mcp__weather__slow", json!({})),
                text("no"),
                call("mcp__weather__secret", json!({})),
                text("no"),
            ],
        ),
    );
    let results = tool_results(&host);
    assert!(
        results[0].starts_with("refused: mcp__weather__weather is not for a guest"),
        "{results:?}"
    );
    assert!(
        results[1].starts_with("refused: mcp__weather__slow is not for a member"),
        "{results:?}"
    );
    assert!(
        results[2].starts_with("error: there is no tool `mcp__weather__secret`"),
        "{results:?}"
    );
    let calls = (host.requests.iter().filter(|r| r.url == MCP_URL))
        .filter(|r| String::from_utf8_lossy(&r.body).contains("tools/call"))
        .count();
    assert_eq!(calls, 0);
}

#[test]
fn a_server_that_is_down_leaves_its_tools_out_and_the_turn_goes_on() {
    let data = world(&config());
    let mut model = vec![text("fine")];
    let host = run_with(
        &data,
        ScriptedHost {
            events: vec![says("m-1", "ann", "owner", "hi")].into(),
            respond: Some(Box::new(move |request| {
                if request.url == MCP_URL {
                    Answer::Failed {
                        why: "connection refused".into(),
                        retry: true,
                    }
                } else {
                    model.pop().unwrap_or_else(|| text("done"))
                }
            })),
            ..ScriptedHost::default()
        },
    );
    let model: Vec<_> = requests(&host);
    let last = &model.last().unwrap().1;
    assert!(offered_tools(last).is_empty());
    assert!(host.sent.iter().any(|m| m.body["text"] == "fine"));
}
