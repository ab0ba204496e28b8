//! The `sausage` command line (DESIGN §6): `init` creates a world, `run` runs it, `people`
//! manages who may use it (DESIGN §13).

mod actor_logs;
mod init;
mod logs;
mod mcp;
mod model;
mod roles;
mod secret;
mod status;
mod world_arg;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use clap::{Parser, Subcommand};
use serde_json::json;
use tokio::io::BufReader;

use init::{AgentConfig, MatrixConfig};
use sausage_core::broker::Broker;
use sausage_core::console::{self, End};
use sausage_core::message::Tier;
use sausage_core::people::People;
use sausage_core::runtime::Runtime;
use sausage_core::world::World;
use world_arg::WorldArg;

/// `sausage --version`: the version and the commit it was built from (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SAUSAGE_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    version = VERSION,
    about = "Runs a world of WebAssembly actors that talk in JSON messages"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a new world and build its agent.
    Init {
        #[command(flatten)]
        world: WorldArg,
        /// The model provider's API shape: openai-responses, anthropic-messages or openai-chat
        /// (`/v1/chat/completions`, as local servers such as llama.cpp speak it).
        #[arg(long)]
        api: Option<String>,
        /// The provider's base URL, such as https://api.example.com (asked if missing).
        #[arg(long)]
        base_url: Option<String>,
        /// The model to use (asked if missing).
        #[arg(long)]
        model: Option<String>,
        /// Your person id, the world's first owner (asked at a terminal; default `owner`).
        #[arg(long, value_name = "ID")]
        owner: Option<String>,
        /// Also connect the world to this Matrix homeserver (the `matrix` actor).
        #[arg(long, value_name = "HOMESERVER_URL")]
        matrix: Option<String>,
        /// The world's own Matrix user id with `--matrix` (asked if missing; its token comes
        /// from SAUSAGE_MATRIX_TOKEN or is asked).
        #[arg(long, value_name = "USER_ID", requires = "matrix")]
        matrix_user: Option<String>,
    },
    /// Run a world: the broker, the console, the web console and every actor that was running.
    Run {
        #[command(flatten)]
        world: WorldArg,
        /// Where the web console listens (port 0: any free port).
        #[arg(long, value_name = "ADDR", default_value = sausage_core::web::DEFAULT_ADDR)]
        web: SocketAddr,
        /// Do not serve the web console.
        #[arg(long)]
        no_web: bool,
        /// Where the world's public address serves the actors' HTTP routes (port 0: any free
        /// port); nothing of the web console is served there.
        #[arg(
            long,
            value_name = "ADDR",
            env = "SAUSAGE_HTTP",
            default_value = sausage_core::http::DEFAULT_ADDR
        )]
        http: SocketAddr,
        /// Do not serve the public address.
        #[arg(long)]
        no_http: bool,
        /// Run this world together with other hosts on NATS JetStream, as `--host-id`: the
        /// server's address (nats://HOST:PORT), or a NATS cluster's nodes separated by commas,
        /// tried in that order.
        #[arg(long, value_name = "NATS_URLS", requires = "host_id")]
        cluster: Option<sausage_cluster::Servers>,
        /// This host's id in the cluster (a-z, 0-9, -, _); the same id on a restart takes
        /// back its leases.
        #[arg(long, value_name = "ID", requires = "cluster")]
        host_id: Option<String>,
        /// How many copies of the cluster's streams and buckets JetStream keeps, when this host
        /// makes them (default: 3, or the NATS cluster's node count when smaller).
        #[arg(long, value_name = "N", requires = "cluster")]
        replicas: Option<usize>,
        /// Export traces over OTLP/HTTP to this endpoint (such as http://127.0.0.1:4318; spans
        /// go to its /v1/traces); default: OTEL_EXPORTER_OTLP_ENDPOINT, else none are made.
        #[arg(long, value_name = "URL")]
        otlp: Option<String>,
    },
    /// Print an actor's stderr.log (the host's notes about it included); `-f` follows it.
    Logs {
        /// The actor's id.
        actor: String,
        #[command(flatten)]
        world: WorldArg,
        /// Keep printing what is appended, across rotations, until interrupted.
        #[arg(short, long)]
        follow: bool,
    },
    /// Print the world's actors as a table: id, state, version, owner, host, queued, restarts,
    /// memory (asked of the running host; from the world's files when it does not run).
    Status {
        #[command(flatten)]
        world: WorldArg,
    },
    /// The running world as an MCP server over stdio (for a coding assistant), acting for the
    /// console's person; over HTTP it is /mcp on the web address.
    Mcp {
        #[command(flatten)]
        world: WorldArg,
    },
    /// MCP servers the agent may use: `sausage mcp-server add NAME URL --tool TOOL=TIERS`.
    McpServer {
        #[command(subcommand)]
        command: McpServerCommand,
    },
    /// Metrics for Prometheus at the web address's /metrics: `sausage metrics token`.
    Metrics {
        #[command(subcommand)]
        command: MetricsCommand,
    },
    /// A world spread over several hosts: `sausage cluster status`.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Connect a world to Matrix: `sausage matrix setup`.
    Matrix {
        #[command(subcommand)]
        command: MatrixCommand,
    },
    /// The agent's model settings: `sausage model show|set|test [DIR]` (`show` when none is
    /// named).
    #[command(args_conflicts_with_subcommands = true)]
    Model {
        #[command(subcommand)]
        command: Option<ModelCommand>,
        #[command(flatten)]
        world: WorldArg,
    },
    /// Manage the people who may use a world: add, list, remove, or change a tier. Works
    /// whether the world runs or not.
    People {
        #[command(subcommand)]
        command: PeopleCommand,
    },
    /// Secrets actors use without seeing them: `sausage secret set|list|grant|revoke|remove`.
    /// Works whether the world runs or not.
    Secret {
        #[command(subcommand)]
        command: secret::SecretCommand,
    },
    /// What waits for a person's decision: held actions and the agent's requests.
    Approvals {
        /// One JSON array, for programs.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        world: WorldArg,
    },
    /// The roles the agent's sub-agents take: the built-in ones and the owners' files.
    Roles {
        /// One JSON object, for programs.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        world: WorldArg,
    },
    /// The audit log: every secret set, grant, use, approval and tier change, oldest first.
    Audit {
        /// One JSON array, for programs.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        world: WorldArg,
    },
}

#[derive(Subcommand)]
enum PeopleCommand {
    /// Add a person; prints a one-time login link for the web console.
    Add {
        /// Their id (a-z, 0-9, -, _).
        id: String,
        /// owner, member or guest.
        #[arg(long, value_parser = parse_tier)]
        tier: Tier,
        /// How they are called (default: the id).
        #[arg(long)]
        name: Option<String>,
        /// Their Matrix user id (`@ann:example.org`), for the `matrix` actor.
        #[arg(long, value_name = "USER_ID")]
        matrix: Option<String>,
        #[command(flatten)]
        world: WorldArg,
    },
    /// List everyone with their tier.
    List {
        #[command(flatten)]
        world: WorldArg,
    },
    /// Remove a person; their web sessions end at once.
    Remove {
        id: String,
        #[command(flatten)]
        world: WorldArg,
    },
    /// Change a person's tier.
    Tier {
        id: String,
        #[arg(value_parser = parse_tier)]
        tier: Tier,
        #[command(flatten)]
        world: WorldArg,
    },
    /// Print a new one-time login link for a person.
    Link {
        id: String,
        #[command(flatten)]
        world: WorldArg,
    },
    /// Print a new bearer token for a person, for MCP at the web address's /mcp (it replaces
    /// their old one); `--revoke` takes it away.
    Token {
        id: String,
        #[arg(long)]
        revoke: bool,
        #[command(flatten)]
        world: WorldArg,
    },
    /// Set a person's Matrix user id (`@ann:example.org`), or clear it when none is given
    /// (a world's folder alone in its place names the world, and clears the id).
    Matrix {
        id: String,
        user_id: Option<String>,
        /// The world's folder (default: `world`).
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The world's folder, as a flag: the same as DIR.
        #[arg(long = "world", value_name = "DIR")]
        world: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Print the API shape, the base URL, the model and the secret holding the token (its name,
    /// URL and header, never the token).
    Show {
        #[command(flatten)]
        world: WorldArg,
    },
    /// Change the API shape, the base URL, the model or the token, in every file that holds
    /// them, then check them with one small request.
    Set {
        /// openai-responses, anthropic-messages or openai-chat.
        #[arg(long)]
        api: Option<String>,
        /// The provider's base URL, with or without its `/v1`.
        #[arg(long)]
        base_url: Option<String>,
        /// The model to use.
        #[arg(long)]
        model: Option<String>,
        /// Take a new token: from SAUSAGE_API_TOKEN, else typed without being shown at a
        /// terminal, else a line of stdin (never an argument, which other users could see).
        #[arg(long)]
        new_token: bool,
        #[command(flatten)]
        world: WorldArg,
    },
    /// Send the provider one small request, as the agent would, and say what is wrong.
    Test {
        #[command(flatten)]
        world: WorldArg,
    },
}

#[derive(Subcommand)]
enum McpServerCommand {
    /// Let the agent use an MCP server's tools (its token from SAUSAGE_MCP_TOKEN, kept by the
    /// host and added to the agent's requests to URL).
    Add {
        /// The server's name (a-z, 0-9, -, _): its tools reach the model as mcp__NAME__TOOL.
        name: String,
        /// Its streamable HTTP endpoint, such as http://127.0.0.1:8123/mcp.
        url: String,
        /// A tool the agent may use and the tiers whose turns may, as TOOL=TIER[,TIER]
        /// (repeat for each tool).
        #[arg(long = "tool", value_name = "TOOL=TIERS", required = true)]
        tools: Vec<String>,
        /// How long a call may take, in seconds (default 30).
        #[arg(long = "timeout", value_name = "SECONDS")]
        timeout_seconds: Option<u64>,
        #[command(flatten)]
        world: WorldArg,
    },
}

#[derive(Subcommand)]
enum MetricsCommand {
    /// Make a new bearer token for /metrics (the old one stops working) and print it.
    Token {
        #[command(flatten)]
        world: WorldArg,
    },
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Print the cluster's hosts, its leases (which host runs each actor) and how many messages
    /// wait in each mailbox.
    Status {
        /// The NATS server's address (nats://HOST:PORT), or a NATS cluster's nodes separated
        /// by commas.
        #[arg(long, value_name = "NATS_URLS")]
        cluster: sausage_cluster::Servers,
    },
}

#[derive(Subcommand)]
enum MatrixCommand {
    /// Configure and deploy the `matrix` actor: its homeserver, its user id and its access
    /// token (from SAUSAGE_MATRIX_TOKEN or asked; kept outside every actor's files). People
    /// reach the agent from Matrix once they have a Matrix id (`sausage people matrix ID @…`).
    Setup {
        #[command(flatten)]
        world: WorldArg,
        /// The homeserver's URL, such as https://matrix.example.org (asked if missing).
        #[arg(long, value_name = "URL")]
        homeserver: Option<String>,
        /// The world's own Matrix user id, such as @sausage:example.org (asked if missing).
        #[arg(long, value_name = "USER_ID")]
        user: Option<String>,
    },
}

fn parse_tier(name: &str) -> Result<Tier, String> {
    Tier::parse(name)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = logs::install() {
        eprintln!("sausage: {e:#}");
        return ExitCode::FAILURE;
    }
    raise_file_limit();
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sausage: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one command.
fn dispatch(command: Command) -> Result<ExitCode> {
    match command {
        Command::Init {
            world,
            api,
            base_url,
            model,
            owner,
            matrix,
            matrix_user,
        } => {
            let config = AgentConfig {
                api,
                base_url,
                model,
                token: None,
            };
            let matrix = matrix.map(|homeserver| MatrixConfig {
                homeserver: Some(homeserver),
                user_id: matrix_user,
                token: None,
            });
            block_on(init(world.folder()?, config, owner, matrix))
        }
        Command::Matrix {
            command:
                MatrixCommand::Setup {
                    world,
                    homeserver,
                    user,
                },
        } => {
            let config = MatrixConfig {
                homeserver,
                user_id: user,
                token: None,
            };
            block_on(matrix_setup(world.existing("matrix setup")?, config))
        }
        Command::Run {
            world,
            web,
            no_web,
            http,
            no_http,
            cluster,
            host_id,
            replicas,
            otlp,
        } => {
            let dir = world.folder()?;
            let otlp = otlp.or_else(|| {
                std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
                    .ok()
                    .filter(|url| !url.is_empty())
            });
            let exporting = match &otlp {
                Some(url) => {
                    let host = host_id.clone().unwrap_or_else(|| host_name(&dir));
                    sausage_core::traces::export_to(url, &host).map(|()| true)
                }
                None => Ok(false),
            };
            exporting.and_then(|exporting| {
                if exporting {
                    tracing::info!(
                        "traces go to {}",
                        sausage_core::traces::traces_url(otlp.as_deref().unwrap_or_default())
                    );
                }
                let cluster = cluster.zip(host_id).map(|(servers, host)| Joining {
                    servers,
                    host,
                    replicas,
                });
                let addresses = Addresses {
                    web: (!no_web).then_some(web),
                    http: (!no_http).then_some(http),
                };
                let ran = block_on(run(dir, addresses, cluster));
                sausage_core::traces::flush();
                ran
            })
        }
        Command::Cluster {
            command: ClusterCommand::Status { cluster },
        } => block_on(async move {
            print!("{}", sausage_cluster::status::report(&cluster).await?);
            Ok(ExitCode::SUCCESS)
        }),
        Command::People { command } => people(command),
        Command::Secret { command } => secret::run(command),
        Command::Audit { json, world } => secret::audit(&world.existing("audit")?, json),
        Command::Approvals { json, world } => {
            secret::approvals(&world.existing("approvals")?, json)
        }
        Command::Roles { json, world } => roles::list(&world.existing("roles")?, json),
        Command::Model { command, world } => {
            let (world, usage) = match &command {
                None => (world, "model show"),
                Some(ModelCommand::Show { world }) => (world.clone(), "model show"),
                Some(ModelCommand::Test { world }) => (world.clone(), "model test"),
                Some(ModelCommand::Set { world, .. }) => (world.clone(), "model set"),
            };
            let world = world.existing(usage)?;
            model::adopt_legacy(&world)?;
            match command {
                None | Some(ModelCommand::Show { .. }) => model::show(&world),
                Some(ModelCommand::Test { .. }) => model::test(&world),
                Some(ModelCommand::Set {
                    api,
                    base_url,
                    model,
                    new_token,
                    ..
                }) => model::set(
                    &world,
                    model::Change {
                        api,
                        base_url,
                        model,
                        new_token,
                    },
                ),
            }
        }
        Command::Status { world } => status::print(&world.existing("status")?),
        Command::Mcp { world } => mcp::serve(&world.existing("mcp")?),
        Command::McpServer {
            command:
                McpServerCommand::Add {
                    name,
                    url,
                    tools,
                    timeout_seconds,
                    world,
                },
        } => mcp::add_server(
            &world.existing("mcp-server add NAME URL --tool TOOL=TIERS")?,
            &name,
            &url,
            &tools,
            timeout_seconds,
        ),
        Command::Metrics {
            command: MetricsCommand::Token { world },
        } => status::metrics_token(&world.existing("metrics token")?),
        Command::Logs {
            actor,
            world,
            follow,
        } => actor_logs::print(&world.existing("logs ACTOR")?, &actor, follow),
    }
}

/// What a lone host calls itself in its traces: its world folder's name.
fn host_name(dir: &std::path::Path) -> String {
    std::fs::canonicalize(dir)
        .ok()
        .and_then(|dir| Some(dir.file_name()?.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "sausage".into())
}

/// Raises the soft limit of open files to the hard one. Idle actors hold no file open, but a
/// world of many busy ones (each reading or writing a file for a moment) may hold thousands,
/// and the default soft limit (often 1,024) is far below what the machine allows.
fn raise_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: both calls only read or write the `rlimit` passed to them. A failure leaves the
    // limit as it was, which is no worse than not asking.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

fn block_on(job: impl Future<Output = Result<ExitCode>>) -> Result<ExitCode> {
    let rt = sausage_core::scheduler()?;
    let result = rt.block_on(job);
    // The stdin reader may sit in a blocking read forever; do not wait for it.
    rt.shutdown_background();
    result
}

/// Creates the world, writes the agent's configuration, then builds and spawns the agent.
async fn init(
    dir: PathBuf,
    config: AgentConfig,
    owner: Option<String>,
    matrix: Option<MatrixConfig>,
) -> Result<ExitCode> {
    let world = World::new(&dir);
    world.check_new()?;
    let terminal = std::io::stdin().is_terminal();
    let owner = match owner {
        // Checked before anything is created, so a wrong id leaves no half-made world.
        Some(owner) => match sausage_core::message::ActorId::parse(&owner) {
            Ok(_) => owner,
            Err(e) => anyhow::bail!("--owner: {}", e.replace("actor id", "person id")),
        },
        None if terminal => init::ask_owner(&mut std::io::stdin().lock(), &mut std::io::stdout())?,
        None => sausage_core::people::DEFAULT_OWNER.to_string(),
    };
    let config = config.complete(
        &mut std::io::stdin().lock(),
        &mut std::io::stdout(),
        terminal,
    )?;
    let matrix = match matrix {
        Some(matrix) => Some(matrix.complete(
            &mut std::io::stdin().lock(),
            &mut std::io::stdout(),
            terminal,
        )?),
        None => None,
    };
    // Before the agent's build (most of a minute): a wrong URL or token is said now, in
    // words, and leaves no half-made world.
    println!("Checking the model provider…");
    if let Err(problem) = model::check(&config).await {
        anyhow::bail!(
            "the model provider: {problem}; no world was created (run this again once it is \
             fixed)"
        );
    }
    world.create()?;
    let people = People::new(&world);
    people.create(&owner)?;
    // The agent acts for people (and checks their tiers in its tools): what it asks for one,
    // such as a schedule, is theirs (`"as": "<person>"`).
    let agent = sausage_core::message::ActorId::parse("agent").expect("a valid id");
    people.grant_surface(&agent, sausage_core::people::PERSON_HANDLE)?;
    config.write(&world)?;
    println!("Created the world `{}`. Building the agent…", dir.display());
    let source = init::write_agent_source(&world, &config)?;
    let mut script = init::deploy_line("agent", &source);
    if let Some(matrix) = &matrix {
        matrix.write(&world)?;
        script.push_str(&init::deploy_line(
            init::MATRIX,
            &matrix.write_source(&world)?,
        ));
    }
    let (broker, services) = open(&world, None).await?;
    let script = BufReader::new(std::io::Cursor::new(script));
    let end = console::run(broker.clone(), script).await;
    close(&broker, services).await;
    if end != End::Quit {
        eprintln!(
            "sausage: the agent was not deployed; fix the cause above, then type \
             `/deploy agent {}` in `sausage run {}`",
            source.display(),
            dir.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    println!();
    println!("The world is ready; this runs it:");
    println!("    sausage run {}", dir.display());
    println!("Then type what you want, for example: make me an actor that counts words");
    Ok(ExitCode::SUCCESS)
}

/// `sausage matrix setup`: the `matrix` actor's configuration and credentials, then its build
/// and spawn (or upgrade) in the world, headless; a running world is told by a line to type.
async fn matrix_setup(world: World, config: MatrixConfig) -> Result<ExitCode> {
    world.load_registry()?;
    let terminal = std::io::stdin().is_terminal();
    let config = config.complete(
        &mut std::io::stdin().lock(),
        &mut std::io::stdout(),
        terminal,
    )?;
    config.write(&world)?;
    let source = config.write_source(&world)?;
    let line = init::deploy_line(init::MATRIX, &source);
    let Ok(_lock) = world.lock() else {
        println!("The world is running: type this at its console to deploy the matrix actor:");
        print!("    {line}");
        return Ok(ExitCode::SUCCESS);
    };
    println!("Building the matrix actor…");
    let (broker, services) = open(&world, None).await?;
    let end = console::run(
        broker.clone(),
        BufReader::new(std::io::Cursor::new(line.clone())),
    )
    .await;
    close(&broker, services).await;
    if end != End::Quit {
        eprintln!(
            "sausage: the matrix actor was not deployed; fix the cause above, then type `{}` in `sausage run`",
            line.trim_end()
        );
        return Ok(ExitCode::FAILURE);
    }
    println!(
        "The matrix actor runs. Give people their Matrix ids with `sausage people matrix ID @user:server`."
    );
    Ok(ExitCode::SUCCESS)
}

/// `sausage people …`: one change to `people.json` (under its lock, so a running world and
/// this command never lose each other's change).
/// A change of who is in the world, or of a tier, in the audit log (DESIGN §25), by the
/// folder's user as its first owner.
fn audit_people(world: &World, mut entry: serde_json::Value) {
    entry["by"] = json!(secret::me(world).unwrap_or_else(|_| "owner".into()));
    sausage_core::secrets::audit::Audit::new(world).append(entry);
}

fn people(command: PeopleCommand) -> Result<ExitCode> {
    let (named, usage) = match &command {
        PeopleCommand::Add { world, .. } => (world.clone(), "people add ID --tier TIER"),
        PeopleCommand::List { world } => (world.clone(), "people list"),
        PeopleCommand::Remove { world, .. } => (world.clone(), "people remove ID"),
        PeopleCommand::Tier { world, .. } => (world.clone(), "people tier ID TIER"),
        PeopleCommand::Link { world, .. } => (world.clone(), "people link ID"),
        PeopleCommand::Token { world, .. } => (world.clone(), "people token ID"),
        PeopleCommand::Matrix {
            user_id,
            dir,
            world,
            ..
        } => {
            let dir = match user_id {
                Some(folder) if user_id_is_a_world(user_id, dir, world) => {
                    Some(PathBuf::from(folder))
                }
                _ => dir.clone(),
            };
            (
                WorldArg::new(dir, world.clone()),
                "people matrix ID [@USER:SERVER]",
            )
        }
    };
    let world = &named.existing(usage)?;
    world.load_registry()?;
    let people = People::new(world);
    match command {
        PeopleCommand::Add {
            id,
            tier,
            name,
            matrix,
            ..
        } => {
            let handles = matrix
                .map(|m| ("matrix".to_string(), m))
                .into_iter()
                .collect();
            let token = people.add_with(&id, tier, name.as_deref(), handles)?;
            audit_people(
                world,
                json!({"event": "person_add", "person": id, "tier": tier.as_str()}),
            );
            println!("Added {id} ({}). Their one-time login link:", tier.as_str());
            println!("    {}", login_link(world, &token));
        }
        PeopleCommand::List { .. } => {
            println!("{:<24} {:<7} name", "id", "tier");
            for person in people.list()? {
                println!(
                    "{:<24} {:<7} {}",
                    person.id,
                    person.tier.as_str(),
                    person.name
                );
            }
        }
        PeopleCommand::Remove { id, .. } => {
            people.remove(&id)?;
            audit_people(world, json!({"event": "person_remove", "person": id}));
            println!("Removed {id}; their sessions have ended.");
        }
        PeopleCommand::Tier { id, tier, .. } => {
            people.set_tier(&id, tier)?;
            audit_people(
                world,
                json!({"event": "person_tier", "person": id, "tier": tier.as_str()}),
            );
            println!("{id} is now {}.", tier.as_str());
        }
        PeopleCommand::Matrix {
            id,
            user_id,
            dir,
            world: flag,
        } => {
            let names_the_world = user_id_is_a_world(&user_id, &dir, &flag);
            let user_id = user_id.filter(|_| !names_the_world);
            people.set_handle(&id, "matrix", user_id.as_deref())?;
            match user_id {
                Some(user_id) => println!("{id} is {user_id} on Matrix."),
                None => println!("{id} has no Matrix user id now."),
            }
        }
        PeopleCommand::Link { id, .. } => {
            let token = people.new_link(&id)?;
            println!("{}", login_link(world, &token));
        }
        PeopleCommand::Token {
            id, revoke: false, ..
        } => {
            println!("{}", people.new_token(&id)?);
            eprintln!(
                "sausage: {id}'s MCP clients connect to http://{}/mcp with `Authorization: \
                 Bearer <this token>`; any earlier token of {id} no longer works",
                web_address(world)
            );
        }
        PeopleCommand::Token {
            id, revoke: true, ..
        } => {
            people.revoke_token(&id)?;
            println!("{id}'s token is revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `people matrix ID X` names the world's folder with X rather than a user id (and
/// so clears the id): X alone, not a Matrix id (which starts with `@`), with no `--world`, and
/// a folder that holds a world; anything else is a user id, checked as one.
fn user_id_is_a_world(
    user_id: &Option<String>,
    dir: &Option<PathBuf>,
    world: &Option<PathBuf>,
) -> bool {
    user_id.as_deref().is_some_and(|folder| {
        !folder.starts_with('@')
            && dir.is_none()
            && world.is_none()
            && std::path::Path::new(folder)
                .join(sausage_core::world::REGISTRY)
                .is_file()
    })
}

/// A login link on the web console's address: the one the world last served on, or the
/// default.
fn login_link(world: &World, token: &str) -> String {
    format!("http://{}/login?token={token}", web_address(world))
}

/// The web console's address: the one the world last served on, or the default.
fn web_address(world: &World) -> String {
    std::fs::read_to_string(world.web_address_path())
        .ok()
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| sausage_core::web::DEFAULT_ADDR.to_string())
}

/// The broker and native actors of an open world; stopping them is `close`.
async fn open(
    world: &World,
    cluster: Option<Arc<sausage_cluster::Cluster>>,
) -> Result<(Arc<Broker>, [tokio::task::JoinHandle<()>; 3])> {
    // A host of a cluster runs its guests only while its leases are renewed (DESIGN §20).
    let runtime = match &cluster {
        Some(cluster) => Runtime::bounded(Some(world.cache_dir()), cluster.run_until())?,
        None => Runtime::new(Some(world.cache_dir()))?,
    };
    let ports = cluster.as_ref().map(|cluster| cluster.ports());
    let broker = Broker::start_in(world.clone(), runtime, ports).await?;
    if let Some(cluster) = cluster {
        // The broker holds the ports; placement, heartbeats and snapshots start now, and with
        // them this host's share of the actors.
        cluster.run(broker.clone()).await?;
    }
    let server = tokio::spawn({
        let broker = broker.clone();
        async move { broker.serve().await }
    });
    let cargo = tokio::spawn(sausage_core::cargo::serve(broker.clone()));
    let scheduler = sausage_core::schedules::spawn(broker.clone());
    Ok((broker, [server, cargo, scheduler]))
}

async fn close(broker: &Broker, services: [tokio::task::JoinHandle<()>; 3]) {
    broker.shutdown().await;
    for service in services {
        service.abort();
    }
}

/// What `run --cluster` asks: to join the cluster at `servers` as host `host`.
struct Joining {
    servers: sausage_cluster::Servers,
    host: String,
    replicas: Option<usize>,
}

/// Where a run serves the web console and the public address; `None` for neither.
struct Addresses {
    web: Option<SocketAddr>,
    http: Option<SocketAddr>,
}

async fn run(dir: PathBuf, addresses: Addresses, cluster: Option<Joining>) -> Result<ExitCode> {
    let world = World::new(&dir);
    if cluster.is_some() && !world.registry_path().exists() {
        // A host joining a cluster needs no world of its own: it takes the shared one.
        world.create()?;
        tracing::info!(
            "{}: a new folder for this host of the cluster",
            dir.display()
        );
    }
    world_arg::must_hold_a_world(&dir, "run", true)?;
    world.load_registry()?;
    let _lock = world.lock()?;
    // Before a cluster shares the credentials files: the token then travels sealed.
    if let Err(e) = model::adopt_legacy(&world) {
        eprintln!(
            "sausage: the model token stays where it was: {e:#}; the agent uses it from there"
        );
    }
    let cluster = match cluster {
        Some(Joining {
            servers,
            host,
            replicas,
        }) => {
            let cluster = sausage_cluster::Cluster::join(&servers, &host, replicas).await?;
            sausage_cluster::patiently("seeding the cluster or taking its world", || {
                cluster.seed_or_take(&world)
            })
            .await?;
            Some(cluster)
        }
        None => None,
    };
    let (broker, services) = open(&world, cluster).await?;
    tracing::info!(
        "world `{}` is running; type /help for commands",
        dir.display()
    );
    // The web console starts beside the console: a script's first line need not wait for it.
    // The web console's task holds `said` and drops it once the login link is printed or the
    // start failed; that wakes a terminal console, which waits on `web_said` to draw its prompt.
    let (said, web_said) = tokio::sync::oneshot::channel::<()>();
    let http = match addresses.http {
        Some(addr) => match sausage_core::http::start(broker.clone(), addr).await {
            Ok(http) => {
                tracing::info!("public address: http://{}", http.addr);
                Some(http)
            }
            Err(e) => {
                tracing::error!("{e:#}; running without it");
                None
            }
        },
        None => None,
    };
    let web = addresses.web.map(|addr| {
        let broker = broker.clone();
        tokio::spawn(async move {
            let _said = said;
            let build = sausage_core::web::metrics::Build {
                version: env!("CARGO_PKG_VERSION"),
                commit: env!("SAUSAGE_COMMIT"),
            };
            match sausage_core::web::start(broker, addr, build).await {
                Ok(web) => {
                    tracing::info!("web console: {}", web.login_link);
                    Some(web)
                }
                Err(e) => {
                    tracing::error!("{e:#}; running without it");
                    None
                }
            }
        })
    });

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    // A person at a terminal gets the line editor; anything else (a pipe on either side) is a
    // script, which sees every message as one line.
    let end = if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        // The login link is printed before the editor draws its first prompt, which a line
        // printed beside it would land on. The error only says that the sender is gone.
        let _ = web_said.await;
        // Waits for: the console to end (`/quit`, Ctrl-D, a Ctrl-C when no turn of the agent
        // runs or pressed twice; the console handles Ctrl-C itself), or SIGTERM.
        tokio::select! {
            end = console::run_terminal(broker.clone()) => end,
            _ = sigterm.recv() => Ok(End::Quit),
        }
    } else {
        let stdin = BufReader::new(tokio::io::stdin());
        // Waits for: the script to end (`/quit`, end of input, a failed `/await` or
        // `/deploy`), Ctrl-C, or SIGTERM.
        tokio::select! {
            end = console::run(broker.clone(), stdin) => Ok(end),
            _ = tokio::signal::ctrl_c() => Ok(End::Quit),
            _ = sigterm.recv() => Ok(End::Quit),
        }
    };
    // Each way ends the run the same way: every actor is stopped gracefully.
    tracing::info!("stopping every actor");
    if let Some(starting) = web
        && let Ok(Some(web)) = starting.await
    {
        web.stop();
    }
    if let Some(http) = http {
        http.stop().await;
    }
    close(&broker, services).await;
    Ok(match end? {
        End::Quit => ExitCode::SUCCESS,
        End::Failed => ExitCode::FAILURE,
    })
}
