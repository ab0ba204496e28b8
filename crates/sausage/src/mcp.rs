//! `sausage mcp [DIR]` (DESIGN §23): the running world's MCP server over stdio, for a
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

/// How long the host may take to answer whether it runs, before `sausage mcp` says it does not.
const PROBE_PATIENCE: Duration = Duration::from_secs(10);

struct Bridge {
    client: reqwest::blocking::Client,
    url: String,
    token: String,
    session: Mutex<Option<String>>,
    stdout: Mutex<std::io::Stdout>,
}

pub fn serve(world: &World) -> Result<ExitCode> {
    match reach(world) {
        Ok((client, base, token)) => bridge(client, &base, token),
        Err(why) => refuse_all(&why),
    }
}

/// The running world's host: a client, its base URL and the local token; or, when the world
/// does not run (or is no world), what to do, in words.
fn reach(world: &World) -> Result<(reqwest::blocking::Client, String, String), String> {
    let not_running = format!(
        "the world in {} is not running with its web console; start it with `sausage run {}` \
         (without --no-web), then start `sausage mcp` again",
        world.root().display(),
        world.root().display()
    );
    let address =
        std::fs::read_to_string(world.web_address_path()).map_err(|_| not_running.clone())?;
    let token = readers::local_token(world).map_err(|_| not_running.clone())?;
    let client = reqwest::blocking::Client::builder()
        .timeout(PATIENCE)
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
    let base = format!("http://{}", address.trim());
    let probe = client
        .get(format!("{base}/status"))
        .bearer_auth(&token)
        .timeout(PROBE_PATIENCE)
        .send();
    if !probe.is_ok_and(|r| r.status().is_success()) {
        return Err(not_running);
    }
    Ok((client, base, token))
}

/// Without a world to carry them to, every request (`initialize` first) is answered with a
/// JSON-RPC error saying why, which the client shows, rather than a closed pipe; the same words
/// go to stderr. Ends, failing, when the client closes stdin.
fn refuse_all(why: &str) -> Result<ExitCode> {
    eprintln!("sausage mcp: {why}");
    let mut stdout = std::io::stdout();
    for line in BufReader::new(std::io::stdin()).lines() {
        let line = line.context("reading stdin")?;
        let id = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|m| m.get("id").cloned());
        // A notification gets no answer, by JSON-RPC's rules.
        if let Some(id) = id {
            let error = error_answer(id, &format!("sausage mcp: {why}"));
            writeln!(stdout, "{error}").and_then(|()| stdout.flush())?;
        }
    }
    Ok(ExitCode::FAILURE)
}

/// A JSON-RPC error answer to the request `id` (code -32603, an internal error).
fn error_answer(id: serde_json::Value, message: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0", "id": id,
        "error": {"code": -32603, "message": message},
    })
    .to_string()
}

/// Carries stdin's messages to the host at `base` until stdin ends, then ends the session.
fn bridge(client: reqwest::blocking::Client, base: &str, token: String) -> Result<ExitCode> {
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
                Some(id) => self.write(&error_answer(id, &format!("sausage mcp: {e:#}"))),
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

/// `sausage mcp-server add NAME URL --tool TOOL=TIER,...`: lets the agent use an MCP server
/// (DESIGN §23): an entry in its `/data/config.json` (`mcp_servers`), the server's host in its
/// network allow-list (its installed `actor.json`), and the server's token (from
/// `SAUSAGE_MCP_TOKEN`, if set) as a credential the host adds under the URL. The agent reads
/// all three when it next starts.
pub fn add_server(
    world: &World,
    name: &str,
    url: &str,
    tools: &[String],
    timeout_seconds: Option<u64>,
) -> Result<ExitCode> {
    use sausage_core::message::ActorId;
    use serde_json::{Value, json};
    if name.is_empty()
        || name.len() > 32
        || !name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_'))
    {
        bail!("`{name}`: a server's name is 1 to 32 of a-z, 0-9, - and _");
    }
    let uri: http::Uri = url
        .parse()
        .with_context(|| format!("`{url}` is not a URL; give the server's MCP endpoint"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        bail!("`{url}` is not an http:// or https:// URL");
    };
    if !matches!(scheme, "http" | "https") {
        bail!("`{url}` is not an http:// or https:// URL");
    }
    if tools.is_empty() {
        bail!("name the tools the agent may use, each with its tiers: --tool weather=owner,member");
    }
    let mut allowed = serde_json::Map::new();
    for tool in tools {
        let Some((tool, tiers)) = tool.split_once('=') else {
            bail!("`{tool}`: write a tool as NAME=TIER[,TIER], such as weather=owner,member");
        };
        let tiers: Vec<&str> = tiers.split(',').map(str::trim).collect();
        if tool.is_empty()
            || tiers
                .iter()
                .any(|t| sausage_core::message::Tier::parse(t).is_err())
        {
            bail!(
                "`{tool}={}`: tiers are owner, member and guest",
                tiers.join(",")
            );
        }
        allowed.insert(tool.to_string(), json!(tiers));
    }
    if let Some(seconds) = timeout_seconds
        && !(1..=300).contains(&seconds)
    {
        bail!("--timeout {seconds}: give 1 to 300 seconds");
    }
    let agent = ActorId::parse("agent").expect("a valid id");

    let config_path = world.data_dir(&agent).join("config.json");
    let mut config: Value = std::fs::read(&config_path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .with_context(|| {
            format!(
                "{}: the agent has no readable config; set the world up with `sausage init`",
                config_path.display()
            )
        })?;
    let mut entry = json!({"name": name, "url": url, "tools": allowed});
    if let Some(seconds) = timeout_seconds {
        entry["timeout_seconds"] = json!(seconds);
    }
    let mut servers: Vec<Value> = config["mcp_servers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    servers.retain(|s| s["name"] != name);
    servers.push(entry);
    config["mcp_servers"] = Value::Array(servers);
    sausage_core::fs::write_atomically(
        &config_path,
        &serde_json::to_vec_pretty(&config).expect("JSON serialises"),
    )?;

    let manifest_path = world.source_dir(&agent).join(sausage_core::world::MANIFEST);
    let mut manifest: Value = std::fs::read(&manifest_path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_else(|| json!({}));
    let host = authority.as_str().to_string();
    let mut network: Vec<Value> = manifest["network"].as_array().cloned().unwrap_or_default();
    if !network.iter().any(|h| h == host.as_str()) {
        network.push(json!(host));
    }
    manifest["network"] = Value::Array(network);
    sausage_core::fs::write_atomically(
        &manifest_path,
        &serde_json::to_vec_pretty(&manifest).expect("JSON serialises"),
    )?;

    if let Ok(token) = std::env::var("SAUSAGE_MCP_TOKEN")
        && !token.is_empty()
    {
        world.write_credentials(
            &agent,
            &sausage_core::runtime::network::Credentials {
                base_url: url.trim_end_matches('/').to_string(),
                header: "authorization".into(),
                value: format!("Bearer {token}"),
            },
        )?;
    }
    println!(
        "the agent may use {name} ({url}) from its next start (the world's next run, or a stop \
         and a start of `agent`)"
    );
    Ok(ExitCode::SUCCESS)
}
