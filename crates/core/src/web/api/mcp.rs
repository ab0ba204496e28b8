//! The world as an MCP server (DESIGN §23): streamable HTTP at `/mcp` on the web address, for a
//! person's bearer token (`sausage people token ID`) or the host's local token (`sausage mcp`,
//! which acts for the console's person). Built with the official Rust SDK, `rmcp`.
//!
//! Tools: `list_actors`, `send`, `rollback`, `logs`, `ask_agent` (a turn, its progress as MCP
//! progress notifications); resources: each actor's log, public files and source. Every call
//! acts for the caller's person, as the web page does: messages go as `web`, speaking for them,
//! and the broker and the agent check their tier (DESIGN §18).
//! **Invariant:** an MCP call acts only by sending messages as `web` for its caller and by
//! reading the world's files an actor's page shows; a refusal is a tool error in words.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ListResourcesResult, PaginatedRequestParams,
    ProgressNotificationParam, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{App, Person, ask};
use crate::message::ActorId;
use crate::people::People;
use crate::people::readers::{Reader, reader_of};

/// How long `send` waits for a reply unless told; at most [`MAX_SEND_WAIT`].
const SEND_WAIT: u64 = 30;
const MAX_SEND_WAIT: u64 = 300;
/// How long an agent's turn may take before `ask_agent` gives up waiting for it.
const TURN_PATIENCE: Duration = Duration::from_secs(600);
/// How long the broker has for a request (a rollback compiles).
const REQUEST_PATIENCE: Duration = Duration::from_secs(120);
/// How long a build may take (cargo's own limit is shorter).
const BUILD_PATIENCE: Duration = Duration::from_secs(900);
/// Files and bytes of a crate `deploy` takes.
const MAX_CRATE_FILES: usize = 200;
const MAX_CRATE_BYTES: usize = 1 << 20;
/// Lines of a log `logs` returns unless told; at most [`MAX_LOG_LINES`].
const LOG_LINES: usize = 100;
const MAX_LOG_LINES: usize = 2000;
/// Resources listed at most, and the largest file read as one.
const MAX_RESOURCES: usize = 1000;
const MAX_RESOURCE_BYTES: u64 = 1 << 20;

/// The caller of an MCP request, found from its bearer token by [`authenticate`].
#[derive(Clone)]
pub struct Caller(pub Person);

/// The `/mcp` service: a stateful streamable HTTP server of [`Mcp`] sessions.
pub fn service(app: Arc<App>) -> StreamableHttpService<Mcp, LocalSessionManager> {
    StreamableHttpService::new(
        move || Ok(Mcp::new(app.clone())),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    )
}

/// Lets in a request whose `Authorization: Bearer` token is a person's (theirs) or the host's
/// local one (the console's person); refuses any other with [`unauthorized`]. A session's end
/// (`DELETE`) is answered 204, as MCP clients expect, where the server library says 202.
pub async fn authenticate(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Response {
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|v| v.trim().to_string())
        .unwrap_or_default();
    let world = app.broker.world.clone();
    let person = tokio::task::spawn_blocking(move || {
        let people = People::new(&world);
        match people.person_by_token(&bearer) {
            Ok(Some(person)) => Some(person),
            _ => match reader_of(&world, &bearer) {
                Some(Reader::Local) => people.console_person().ok(),
                _ => None,
            },
        }
    })
    .await
    .ok()
    .flatten();
    let Some(person) = person else {
        return unauthorized();
    };
    let ends_session = request.method() == Method::DELETE;
    request.extensions_mut().insert(Caller(person));
    let mut response = next.run(request).await;
    // The official SDKs take only 200 or 204 for a session's end, and warn at every other.
    if ends_session && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// The 401 of a request without a person's token: `WWW-Authenticate: Bearer` (RFC 6750) and, as
/// the body, a JSON-RPC error, which an MCP client shows as the request's error (a plain body
/// only becomes "Server returned an error response").
fn unauthorized() -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {
        "code": UNAUTHORIZED_CODE,
        "message": "MCP needs a person's bearer token: an owner makes one with `sausage people \
                    token ID`; send it as `Authorization: Bearer <token>`",
    }});
    let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The JSON-RPC error code of a refused token: one of the codes JSON-RPC leaves to servers.
const UNAUTHORIZED_CODE: i64 = -32001;

#[derive(Clone)]
pub struct Mcp {
    app: Arc<App>,
    tool_router: ToolRouter<Mcp>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct SendArgs {
    /// The recipient: an actor id (`broker`, `agent`, or any actor of the world).
    to: String,
    /// The message body: a JSON object with a "type" field.
    body: serde_json::Map<String, Value>,
    /// How long to wait for the reply, in seconds (default 30, at most 300; 0: do not wait).
    timeout_seconds: Option<u64>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct RollbackArgs {
    /// The actor to roll back.
    actor: String,
    /// The version to go to (default: the one before the current).
    version: Option<u32>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct LogsArgs {
    /// The actor whose stderr.log to read.
    actor: String,
    /// How many of its last lines (default 100, at most 2000).
    lines: Option<usize>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct DeployArgs {
    /// The actor to make, or to upgrade when it exists.
    actor: String,
    /// The crate's files, by path inside it: "Cargo.toml", "src/main.rs", "tests/x.jsonl"
    /// (transcript tests), "actor.json" (its manifest); text, 1 MiB in all at most.
    files: std::collections::BTreeMap<String, String>,
    /// An upgrade's shadow run: "report" (default), "same" (refuse any difference) or "off".
    shadow: Option<String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct AskArgs {
    /// What to say to the agent, as you would in the web page's chat.
    text: String,
}

/// A tool's failure in words: the result the caller's model reads, marked as an error.
fn failed(why: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(why.into())])
}

fn answered(value: &Value) -> CallToolResult {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    if value.is_object() {
        result.structured_content = Some(value.clone());
    }
    result
}

/// The value of a `Result` whose error is already the tool's answer, or that answer, returned.
macro_rules! or_answer {
    ($result:expr) => {
        match $result {
            Ok(value) => value,
            Err(answer) => return answer,
        }
    };
}

fn caller(context: &RequestContext<RoleServer>) -> Result<Person, CallToolResult> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .map(|caller| caller.0.clone())
        .ok_or_else(|| failed("this call came without a person's token; connect with one"))
}

fn actor_id(id: &str) -> Result<ActorId, CallToolResult> {
    ActorId::parse(id).map_err(|e| failed(format!("`{id}` is not an actor id: {e}")))
}

#[tool_router]
impl Mcp {
    pub fn new(app: Arc<App>) -> Mcp {
        Mcp {
            app,
            tool_router: Self::tool_router(),
        }
    }

    /// Asks `to` for the caller and returns the reply's body, or the refusal in words.
    async fn ask_for(
        &self,
        person: &Person,
        to: &ActorId,
        body: &Value,
        patience: Duration,
    ) -> Result<Value, CallToolResult> {
        match ask(&self.app, person, to, body, patience).await {
            Ok(reply) => Ok(reply.body_value()),
            Err(refusal) => Err(failed(refusal.1)),
        }
    }

    #[tool(
        description = "List the world's actors: id, kind, state, version, owner, host, \
        queued messages, restarts, memory; and the subscriptions."
    )]
    async fn list_actors(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        let person = or_answer!(caller(&context));
        match self
            .ask_for(
                &person,
                &ActorId::broker(),
                &json!({"type": "list"}),
                REQUEST_PATIENCE,
            )
            .await
        {
            Ok(list) => answered(&list),
            Err(refused) => refused,
        }
    }

    #[tool(
        description = "Send a message to an actor as you, and wait for its reply (the \
        message whose reply_to is this one). Needs a member's tier (a guest talks to the agent \
        with ask_agent). Requests to `broker`, `cargo` and `scheduler` are checked against your \
        tier; their refusals are errors of this call."
    )]
    async fn send(
        &self,
        Parameters(args): Parameters<SendArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let person = or_answer!(caller(&context));
        if let Some(why) = super::messages::may_not_send(&person) {
            return failed(why);
        }
        let to = or_answer!(actor_id(&args.to));
        if !args.body.get("type").is_some_and(Value::is_string) {
            return failed("`body` needs a string \"type\", such as {\"type\": \"ping\"}");
        }
        // A program acting with a person's token does not decide what waits for that
        // person's approval (DESIGN §25): they do, on the page, the console or Matrix.
        if to == ActorId::broker()
            && args.body.get("type").and_then(Value::as_str) == Some("decide")
        {
            return failed(
                "refused: only a person decides what waits for approval (on the web page, at \
                 the console or in Matrix), not a program with their token",
            );
        }
        let wait = args.timeout_seconds.unwrap_or(SEND_WAIT);
        if wait > MAX_SEND_WAIT {
            return failed(format!("`timeout_seconds` is at most {MAX_SEND_WAIT}"));
        }
        let body = Value::Object(args.body);
        if wait == 0 {
            let id = super::tell(&self.app, &person, &to, &body, None).await;
            return answered(&json!({"sent": id}));
        }
        match self
            .ask_for(&person, &to, &body, Duration::from_secs(wait))
            .await
        {
            // A native actor's refusal (`broker`, `cargo`, `scheduler`) is the call's error.
            Ok(reply)
                if reply["type"] == "undeliverable"
                    || (to.is_native() && reply["type"] == "error") =>
            {
                failed(reply["reason"].as_str().unwrap_or("refused").to_string())
            }
            Ok(reply) => answered(&reply),
            Err(refused) => refused,
        }
    }

    #[tool(
        description = "Deploy a Rust crate as an actor: it is built for wasm32-wasip2 in a \
        sandbox, its tests (tests/*.jsonl) run, and it is spawned, or upgraded when the actor \
        exists (tried first on the actor's recent messages: the shadow report comes back). \
        Needs a member's tier; upgrading another's actor an owner's."
    )]
    async fn deploy(
        &self,
        Parameters(args): Parameters<DeployArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let person = or_answer!(caller(&context));
        let actor = or_answer!(actor_id(&args.actor));
        if let Some(mode) = &args.shadow
            && !matches!(mode.as_str(), "report" | "same" | "off")
        {
            return failed(format!("`shadow` is report, same or off, not `{mode}`"));
        }
        if let Err(why) = check_crate(&args.files) {
            return failed(why);
        }
        let uploads = self.app.broker.world.uploads_dir();
        let files = args.files;
        let upload = match tokio::task::spawn_blocking(move || write_upload(&uploads, &files)).await
        {
            Ok(Ok(upload)) => upload,
            Ok(Err(e)) => return failed(format!("the crate cannot be kept to build it: {e}")),
            Err(_) => return failed("keeping the crate failed"),
        };
        let result = self
            .deploy_upload(&person, &actor, &upload, args.shadow, &context)
            .await;
        let folder = upload.folder;
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(folder)).await;
        result
    }

    #[tool(
        description = "Roll an actor back to its previous version (or to `version`), with \
        its files as they were. Needs a member's tier for your own actors, an owner's for others."
    )]
    async fn rollback(
        &self,
        Parameters(args): Parameters<RollbackArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let person = or_answer!(caller(&context));
        or_answer!(actor_id(&args.actor));
        let mut body = json!({"type": "rollback", "actor": args.actor});
        if let Some(version) = args.version {
            body["version"] = json!(version);
        }
        match self
            .ask_for(&person, &ActorId::broker(), &body, REQUEST_PATIENCE)
            .await
        {
            Ok(reply) if reply["type"] == "error" => {
                failed(reply["reason"].as_str().unwrap_or("refused").to_string())
            }
            Ok(reply) => answered(&reply),
            Err(refused) => refused,
        }
    }

    #[tool(
        description = "Read the last lines of an actor's stderr.log (what it logged, and the \
        host's notes about it: crashes, restarts, lines not routed)."
    )]
    async fn logs(
        &self,
        Parameters(args): Parameters<LogsArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        or_answer!(caller(&context));
        let actor = or_answer!(actor_id(&args.actor));
        let lines = args.lines.unwrap_or(LOG_LINES);
        if lines == 0 || lines > MAX_LOG_LINES {
            return failed(format!("`lines` is 1 to {MAX_LOG_LINES}"));
        }
        if !self
            .app
            .broker
            .registry()
            .await
            .actors
            .contains_key(actor.as_str())
        {
            return failed(format!("no actor `{actor}`; list_actors shows the actors"));
        }
        let path = self.app.broker.world.log_path(&actor);
        let read = tokio::task::spawn_blocking(move || tail(&path, lines)).await;
        match read {
            Ok(Ok(text)) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Ok(Err(e)) => failed(format!("the log of `{actor}` cannot be read: {e}")),
            Err(_) => failed("reading the log failed"),
        }
    }

    #[tool(
        description = "Ask the world's agent (it can build, test, deploy and upgrade actors) \
        as you, and wait for its answer: a turn, its progress sent as progress notifications, \
        the answer with what it cost. Your tier and budget apply."
    )]
    async fn ask_agent(
        &self,
        Parameters(args): Parameters<AskArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let person = or_answer!(caller(&context));
        if args.text.trim().is_empty() {
            return failed("`text` is empty; say what you want of the agent");
        }
        let agent = ActorId::parse("agent").expect("a valid id");
        let mut turn = match self.app.follow_turn(&person, &agent, &args.text).await {
            Ok(turn) => turn,
            Err(why) => return failed(why),
        };
        let token = context.meta.get_progress_token();
        let mut step = 0.0;
        let deadline = tokio::time::Instant::now() + TURN_PATIENCE;
        loop {
            let message = tokio::select! {
                message = turn.next() => message,
                () = tokio::time::sleep_until(deadline) => None,
                () = context.ct.cancelled() => {
                    return failed("the call was cancelled; the turn goes on (stop it from the web page)");
                }
            };
            let Some(message) = message else {
                return failed(format!(
                    "the agent did not finish within {} s; its answer will be in your \
                     conversation on the web page",
                    TURN_PATIENCE.as_secs()
                ));
            };
            let body = message.body_value();
            let said = match body["type"].as_str() {
                Some("text") => {
                    let mut result = answered(&json!({
                        "text": body["text"], "usage": body["usage"], "stopped": body["stopped"],
                    }));
                    result.content = vec![ContentBlock::text(format!(
                        "{}\n\n(cost: {})",
                        body["text"].as_str().unwrap_or_default(),
                        body["usage"]["cost_usd"]
                            .as_f64()
                            .map_or("unknown".into(), |usd| format!("${usd:.4}"))
                    ))];
                    return result;
                }
                Some("question") => {
                    return answered(&json!({
                        "question": body["text"], "choices": body["choices"],
                        "note": "the agent asks this; answer it on the web page or the console",
                    }));
                }
                Some("undeliverable") | Some("error") => {
                    return failed(
                        body["reason"]
                            .as_str()
                            .unwrap_or("the agent cannot be asked")
                            .to_string(),
                    );
                }
                Some("progress") => body["text"].as_str().map(str::to_string),
                Some("tool") if body["state"] == "started" => Some(format!(
                    "{} {}",
                    body["tool"].as_str().unwrap_or("tool"),
                    body["preview"].as_str().unwrap_or_default()
                )),
                _ => None,
            };
            if let (Some(token), Some(said)) = (&token, said) {
                step += 1.0;
                let mut progress = ProgressNotificationParam::new(token.clone(), step);
                progress.message = Some(said);
                let _ = context.peer.notify_progress(progress).await;
            }
        }
    }
}

impl Mcp {
    /// Builds the crate at `upload`, then spawns or upgrades `actor` with it.
    async fn deploy_upload(
        &self,
        person: &Person,
        actor: &ActorId,
        upload: &Upload,
        shadow: Option<String>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let token = context.meta.get_progress_token();
        let say = |step: f64, what: &'static str| {
            let (token, peer) = (token.clone(), context.peer.clone());
            async move {
                if let Some(token) = token {
                    let mut progress = ProgressNotificationParam::new(token, step);
                    progress.total = Some(2.0);
                    progress.message = Some(what.to_string());
                    let _ = peer.notify_progress(progress).await;
                }
            }
        };
        say(0.0, "building").await;
        let cargo = ActorId::parse("cargo").expect("a valid id");
        let build = json!({"type": "build", "source": upload.path});
        let built = or_answer!(self.ask_for(person, &cargo, &build, BUILD_PATIENCE).await);
        match built["type"].as_str() {
            Some("built") => {}
            Some("build_failed") => {
                let mut result = failed(format!(
                    "the build failed:\n{}",
                    built["errors"].as_str().unwrap_or_default()
                ));
                result.structured_content = Some(built);
                return result;
            }
            _ => {
                return failed(
                    built["reason"]
                        .as_str()
                        .unwrap_or("the build was refused")
                        .to_string(),
                );
            }
        }
        say(1.0, "testing and installing").await;
        let exists = (self.app.broker.registry().await.actors).contains_key(actor.as_str());
        let mut request = json!({
            "type": if exists { "upgrade" } else { "spawn" },
            "actor": actor.as_str(), "wasm": built["wasm"], "source": upload.path,
            "built_by": "cargo",
        });
        if let Some(mode) = shadow {
            request["shadow"] = json!(mode);
        }
        match self
            .ask_for(person, &ActorId::broker(), &request, BUILD_PATIENCE)
            .await
        {
            Ok(reply) if reply["type"] == "error" => {
                let mut result = failed(reply["reason"].as_str().unwrap_or("refused").to_string());
                result.structured_content = Some(reply);
                result
            }
            Ok(reply) => answered(&reply),
            Err(refused) => refused,
        }
    }
}

/// A crate kept to be built: its folder and how requests name it (`/uploads/<id>`).
struct Upload {
    folder: PathBuf,
    path: String,
}

/// Whether `files` can be a crate: a `Cargo.toml`, relative paths without `.` or `..`, within
/// the limits.
fn check_crate(files: &std::collections::BTreeMap<String, String>) -> Result<(), String> {
    if !files.contains_key("Cargo.toml") {
        return Err(
            "`files` has no \"Cargo.toml\": give the crate's files by path inside it".into(),
        );
    }
    if files.len() > MAX_CRATE_FILES {
        return Err(format!(
            "{} files; a crate may have at most {MAX_CRATE_FILES}",
            files.len()
        ));
    }
    let bytes: usize = files
        .iter()
        .map(|(path, text)| path.len() + text.len())
        .sum();
    if bytes > MAX_CRATE_BYTES {
        return Err(format!("{bytes} bytes; a crate may have at most 1 MiB"));
    }
    for path in files.keys() {
        let bad = path.is_empty()
            || path.starts_with('/')
            || path.contains('\\')
            || path
                .split('/')
                .any(|part| part.is_empty() || part == "." || part == "..")
            || path.split('/').next() == Some("target");
        if bad {
            return Err(format!(
                "`{path}` is not a path inside the crate: relative, without `.`, `..` or \
                 `target/`, such as src/main.rs"
            ));
        }
    }
    Ok(())
}

/// Writes `files` into a new folder of `uploads` named by 32 random hex digits.
fn write_upload(
    uploads: &Path,
    files: &std::collections::BTreeMap<String, String>,
) -> std::io::Result<Upload> {
    let id = crate::people::sessions::random_token()[..32].to_string();
    let folder = uploads.join(&id);
    for (path, text) in files {
        let file = folder.join(path);
        std::fs::create_dir_all(file.parent().expect("inside the folder"))?;
        std::fs::write(&file, text)?;
    }
    Ok(Upload {
        folder,
        path: format!("/uploads/{id}"),
    })
}

/// The last `lines` lines of a file (an empty text for a file that does not exist yet).
fn tail(path: &Path, lines: usize) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(e),
    };
    let size = file.metadata()?.len();
    // A log line is rarely over 1 KiB; read enough of the end for the lines asked.
    let from = size.saturating_sub((lines as u64 + 1) * 1024);
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    let skip = all.len().saturating_sub(lines) + usize::from(from > 0 && all.len() <= lines);
    Ok(all[skip.min(all.len())..].join("\n"))
}

/// A resource's place: `sausage://actor/<id>/log`, `.../public/<path>` or `.../source/<path>`.
enum Place {
    Log(ActorId),
    File(ActorId, &'static str, String),
}

fn place(uri: &str) -> Result<Place, String> {
    let rest = uri
        .strip_prefix("sausage://actor/")
        .ok_or_else(|| format!("`{uri}` is not a resource of this world (sausage://actor/...)"))?;
    let (id, rest) = rest.split_once('/').unwrap_or((rest, ""));
    let actor = ActorId::parse(id).map_err(|e| format!("`{id}` is not an actor id: {e}"))?;
    let (kind, path) = rest.split_once('/').unwrap_or((rest, ""));
    let kind = match kind {
        "log" if path.is_empty() => return Ok(Place::Log(actor)),
        "public" => "public",
        "source" => "source",
        _ => {
            return Err(format!(
                "`{uri}`: an actor's resources are log, public/... and source/..."
            ));
        }
    };
    if path.is_empty()
        || path
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(format!("`{uri}`: name a file, without `.` or `..`"));
    }
    Ok(Place::File(actor, kind, path.to_string()))
}

/// Every file under `dir` (not following links), as paths relative to it, up to `max`.
fn files_under(dir: &Path, max: usize) -> Vec<String> {
    let mut found = Vec::new();
    let mut folders = vec![PathBuf::new()];
    while let Some(rel) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(dir.join(&rel)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".sausage-tmp") || name == "target" {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = rel.join(&name);
            if kind.is_dir() {
                folders.push(path);
            } else if kind.is_file() {
                found.push(path.to_string_lossy().into_owned());
                if found.len() >= max {
                    return found;
                }
            }
        }
    }
    found.sort();
    found
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Mcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("sausage", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "A Sausage world: WebAssembly actors that talk in JSON messages, and an agent that \
             writes, tests and deploys them. list_actors shows the world; send talks to an \
             actor; ask_agent gives the agent work; logs and the resources show what actors did.",
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        if caller(&context).is_err() {
            return Err(ErrorData::invalid_request("no person's token", None));
        }
        let registry = self.app.broker.registry().await;
        let world = self.app.broker.world.clone();
        let actors: Vec<ActorId> = registry
            .actors
            .keys()
            .filter_map(|id| ActorId::parse(id).ok())
            .collect();
        let resources = tokio::task::spawn_blocking(move || {
            let mut resources = Vec::new();
            for actor in actors {
                resources.push(Resource::new(
                    format!("sausage://actor/{actor}/log"),
                    format!("{actor}: stderr.log"),
                ));
                for (kind, dir) in [
                    ("public", world.public_dir(&actor)),
                    ("source", world.source_dir(&actor)),
                ] {
                    let left = MAX_RESOURCES.saturating_sub(resources.len());
                    for path in files_under(&dir, left) {
                        resources.push(Resource::new(
                            format!("sausage://actor/{actor}/{kind}/{path}"),
                            format!("{actor}: {kind}/{path}"),
                        ));
                    }
                }
                if resources.len() >= MAX_RESOURCES {
                    break;
                }
            }
            resources
        })
        .await
        .unwrap_or_default();
        Ok(ListResourcesResult {
            resources,
            ..Default::default()
        })
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if caller(&context).is_err() {
            return Err(ErrorData::invalid_request("no person's token", None));
        }
        let uri = request.uri.clone();
        let place = place(&uri).map_err(|why| ErrorData::invalid_params(why, None))?;
        let actor = match &place {
            Place::Log(actor) | Place::File(actor, _, _) => actor.clone(),
        };
        if !self
            .app
            .broker
            .registry()
            .await
            .actors
            .contains_key(actor.as_str())
        {
            return Err(ErrorData::resource_not_found(
                format!("no actor `{actor}`; list_actors shows the actors"),
                None,
            ));
        }
        let world = self.app.broker.world.clone();
        let read = tokio::task::spawn_blocking(move || -> Result<String, String> {
            let path = match &place {
                Place::Log(actor) => world.log_path(actor),
                Place::File(actor, "public", rel) => world.public_dir(actor).join(rel),
                Place::File(actor, _, rel) => world.source_dir(actor).join(rel),
            };
            let meta = std::fs::symlink_metadata(&path).map_err(|_| "no such file".to_string())?;
            if !meta.is_file() {
                return Err("not a file".into());
            }
            if meta.len() > MAX_RESOURCE_BYTES {
                return Err(format!(
                    "{} bytes: larger than the 1 MiB a resource may be",
                    meta.len()
                ));
            }
            let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
            String::from_utf8(bytes).map_err(|_| "not text".to_string())
        })
        .await
        .map_err(|_| ErrorData::internal_error("reading the resource failed", None))?;
        match read {
            Ok(text) => Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri)]).into()),
            Err(why) => Err(ErrorData::resource_not_found(
                format!("`{uri}`: {why}"),
                None,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_uris_name_an_actors_log_public_files_and_source_and_nothing_else() {
        assert!(matches!(
            place("sausage://actor/notes/log"),
            Ok(Place::Log(_))
        ));
        assert!(matches!(
            place("sausage://actor/notes/public/a/b.txt"),
            Ok(Place::File(_, "public", p)) if p == "a/b.txt"
        ));
        assert!(matches!(
            place("sausage://actor/notes/source/src/main.rs"),
            Ok(Place::File(_, "source", _))
        ));
        for bad in [
            "file:///etc/passwd",
            "sausage://actor/Notes/log",
            "sausage://actor/notes/data/x",
            "sausage://actor/notes/public/../data/x",
            "sausage://actor/notes/public/",
            "sausage://actor/notes/public//x",
            "sausage://actor/notes/log/x",
        ] {
            assert!(place(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_tail_is_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let text: String = (1..=300).map(|n| format!("line {n}\n")).collect();
        std::fs::write(&path, text).unwrap();
        assert_eq!(tail(&path, 2).unwrap(), "line 299\nline 300");
        assert_eq!(tail(&dir.path().join("none"), 5).unwrap(), "");
    }
}
