//! `sausage mcp [--world DIR]` (DESIGN §23): the running world's MCP server over stdio, for a
//! coding assistant's MCP configuration. It carries each JSON-RPC message read on stdin to the
//! host's `/mcp` (streamable HTTP, with the host's local token: it acts for the console's
//! person) and writes every message of the answer, a JSON object or an event stream, as a line
//! on stdout. Each request is carried on its own thread, so a long call (`ask_agent`) does not
//! hold up the next; the session the first answer names goes with every later request.

use std::io::{BufRead, BufReader, Write};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use sausage_core::people::readers;
use sausage_core::world::World;

/// How long the host may take to answer one request (an agent's turn is the longest).
const PATIENCE: Duration = Duration::from_secs(900);

struct Bridge {
    client: reqwest::blocking::Client,
    url: String,
    token: String,
    session: Mutex<Option<String>>,
    stdout: Mutex<std::io::Stdout>,
}

pub fn serve(world: &World) -> Result<ExitCode> {
    if !world.registry_path().is_file() {
        bail!(
            "{} is not a world (no {}); give the world's folder with --world",
            world.root().display(),
            sausage_core::world::REGISTRY
        );
    }
    let not_running = || {
        format!(
            "the world in {} is not running with its web console; start it with `sausage run {}` \
             (without --no-web), then start `sausage mcp` again",
            world.root().display(),
            world.root().display()
        )
    };
    let address = std::fs::read_to_string(world.web_address_path()).with_context(not_running)?;
    let token = readers::local_token(world).with_context(not_running)?;
    let client = reqwest::blocking::Client::builder()
        .timeout(PATIENCE)
        .build()?;
    let base = format!("http://{}", address.trim());
    let probe = client
        .get(format!("{base}/status"))
        .bearer_auth(&token)
        .timeout(Duration::from_secs(10))
        .send();
    if !probe.is_ok_and(|r| r.status().is_success()) {
        bail!(not_running());
    }
    let bridge = Arc::new(Bridge {
        client,
        url: format!("{base}/mcp"),
        token,
        session: Mutex::new(None),
        stdout: Mutex::new(std::io::stdout()),
    });
    let mut carrying = Vec::new();
    for line in BufReader::new(std::io::stdin()).lines() {
        let line = line.context("reading stdin")?;
        if line.trim().is_empty() {
            continue;
        }
        let first = bridge.session.lock().expect("session lock").is_none();
        if first {
            // The initialize request names the session the others go on.
            bridge.carry(&line);
        } else {
            let bridge = bridge.clone();
            carrying.push(std::thread::spawn(move || bridge.carry(&line)));
        }
        carrying.retain(|t| !t.is_finished());
    }
    for thread in carrying {
        let _ = thread.join();
    }
    if let Some(session) = bridge.session.lock().expect("session lock").clone() {
        let _ = bridge
            .client
            .delete(&bridge.url)
            .bearer_auth(&bridge.token)
            .header("mcp-session-id", session)
            .send();
    }
    Ok(ExitCode::SUCCESS)
}

impl Bridge {
    /// Carries one message to the host and its answer back; a failure becomes a JSON-RPC error
    /// for the request's id (a notification's is only noted on stderr).
    fn carry(&self, line: &str) {
        if let Err(e) = self.try_carry(line) {
            let id = serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|m| m.get("id").cloned());
            match id {
                Some(id) => self.write(
                    &serde_json::json!({
                        "jsonrpc": "2.0", "id": id,
                        "error": {"code": -32603, "message": format!("sausage mcp: {e:#}")},
                    })
                    .to_string(),
                ),
                None => eprintln!("sausage mcp: {e:#}"),
            }
        }
    }

    fn try_carry(&self, line: &str) -> Result<()> {
        let mut request = self
            .client
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(line.to_string());
        if let Some(session) = self.session.lock().expect("session lock").clone() {
            request = request.header("mcp-session-id", session);
        }
        let response = request.send().context("the world's host does not answer")?;
        let status = response.status();
        if let Some(session) = response.headers().get("mcp-session-id")
            && let Ok(session) = session.to_str()
        {
            *self.session.lock().expect("session lock") = Some(session.to_string());
        }
        if !status.is_success() {
            let text = response.text().unwrap_or_default();
            bail!("the host answered {status}: {text}");
        }
        let streamed = response
            .headers()
            .get("content-type")
            .and_then(|t| t.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if !streamed {
            let text = response.text()?;
            if !text.trim().is_empty() {
                self.write(text.trim());
            }
            return Ok(());
        }
        // An event stream: each event's data is one message.
        let mut data = String::new();
        for line in BufReader::new(response).lines() {
            let line = line?;
            if let Some(rest) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            } else if line.is_empty() && !data.is_empty() {
                self.write(&std::mem::take(&mut data));
            }
        }
        if !data.is_empty() {
            self.write(&data);
        }
        Ok(())
    }

    fn write(&self, message: &str) {
        let mut stdout = self.stdout.lock().expect("stdout lock");
        // JSON-RPC over stdio is one message a line.
        let _ = writeln!(stdout, "{}", message.replace('\n', " "));
        let _ = stdout.flush();
    }
}
