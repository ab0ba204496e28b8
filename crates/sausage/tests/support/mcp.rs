//! The official Python MCP SDK on both sides of the tests of MCP (DESIGN §23), run by the python
//! of `target/mcp-venv` (`scripts/install-mcp` puts `mcp` there): `mcp_client.py` drives an MCP
//! server (`sausage mcp`, over stdio or HTTP) and `mcp_server.py` is a server for the agent's
//! MCP client.
//!
//! Boundaries: a script of steps in, a JSON result per step out ([`run_script`]); a server's URL
//! and token in, the tool calls it received out ([`McpServer`]). Both processes die with the test.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::service::{Process, PythonService, support_file, venv_python};

/// The driver's bound on connecting and on each step when the script sets no `"timeout"`
/// (seconds); `DEFAULT_TIMEOUT` in mcp_client.py.
const DEFAULT_CALL_TIMEOUT: f64 = 120.0;

/// What [`run_script`] allows the driver beyond its own timeouts (starting python and importing
/// the SDK on a busy machine), before it kills it and fails the test.
const DRIVER_SLACK: Duration = Duration::from_secs(60);

/// How often a wait looks again at a process's output.
const POLL: Duration = Duration::from_millis(20);

/// Runs a script through `mcp_client.py` and returns what it printed: `{"results": [...]}`, one
/// result per step, or `{"error": "Type: message (at ...)", "results": [those before]}`.
///
/// The script is `{"transport": "stdio", "command": [...], "env": {...}}` or `{"transport":
/// "http", "url": ".../mcp", "token": "..."}`, with `"steps"` and an optional `"timeout"` in
/// seconds; mcp_client.py's doc lists the steps and their results. Fails the test when the driver
/// outlives its own timeouts or prints something that is not JSON.
pub fn run_script(script: &Value) -> Value {
    let python = python();
    let folder = tempfile::tempdir().unwrap();
    let file = |name: &str| folder.path().join(name);
    std::fs::write(file("script.json"), script.to_string()).unwrap();
    let mut command = Command::new(&python);
    command
        .arg(support_file("mcp_client.py"))
        .arg(file("script.json"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(file("stdout")).unwrap())
        .stderr(std::fs::File::create(file("stderr")).unwrap());
    let process = Process::spawn(command)
        .unwrap_or_else(|e| panic!("{}: cannot start the MCP client: {e}", python.display()));

    // The driver bounds connecting and each step by the timeout; this is the backstop.
    let timeout = script["timeout"].as_f64().unwrap_or(DEFAULT_CALL_TIMEOUT);
    let steps = script["steps"].as_array().map_or(0, Vec::len);
    let patience = Duration::from_secs_f64(timeout * (steps + 1) as f64) + DRIVER_SLACK;
    let deadline = Instant::now() + patience;
    while !process.exited() && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    let finished = process.exited();
    // Kills the driver if it is still running, so that its output is complete.
    drop(process);
    let read = |name: &str| std::fs::read_to_string(file(name)).unwrap_or_default();
    let (stdout, stderr) = (read("stdout"), read("stderr"));
    assert!(
        finished,
        "the MCP client did not finish within {patience:?} and was killed; its stdout:\n{stdout}\
         \nits stderr:\n{stderr}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("the MCP client printed no JSON ({e}); its stdout:\n{stdout}\nits stderr:\n{stderr}")
    })
}

/// A running `mcp_server.py`: tools `weather(city)` ("sunny in CITY") and `slow(seconds)`, over
/// streamable HTTP for one bearer token; dropping it kills it and removes what it logged.
pub struct McpServer {
    /// Writes `calls.jsonl`, the tool calls.
    service: PythonService,
}

impl McpServer {
    /// Starts the server, refusing every request without `Authorization: Bearer {token}` with
    /// 401, and waits until it listens.
    pub fn start(token: &str) -> McpServer {
        let service =
            PythonService::start("the MCP server", &python(), "mcp_server.py", |folder| {
                vec![token.into(), folder.join("calls.jsonl").into()]
            });
        McpServer { service }
    }

    /// `http://127.0.0.1:PORT/mcp`, the server's streamable HTTP endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.service.port())
    }

    /// Every tool call received so far, in order, as `{"tool": NAME, "arguments": {...}}`,
    /// logged when the call starts (a `slow` call shows before it answers).
    pub fn calls(&self) -> Vec<Value> {
        self.service.json_lines("calls.jsonl")
    }

    /// What the server wrote on stderr (the SDK's notes on sessions, a tool's traceback).
    pub fn stderr(&self) -> String {
        self.service.stderr()
    }
}

/// The python of `target/mcp-venv`, with the Python MCP SDK.
fn python() -> PathBuf {
    venv_python(
        "mcp-venv",
        "install-mcp",
        "the MCP tests need the Python MCP SDK",
    )
}
