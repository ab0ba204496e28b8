//! The `sausage` command line (DESIGN §6): `init` creates a world, `run` runs it.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use clap::{Parser, Subcommand};
use tokio::io::BufReader;

use sausage::broker::Broker;
use sausage::console::{self, End};
use sausage::init::{self, AgentConfig};
use sausage::runtime::Runtime;
use sausage::world::World;

#[derive(Parser)]
#[command(
    version,
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
        /// The world's folder.
        #[arg(default_value = "world")]
        dir: PathBuf,
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
    },
    /// Run a world: the broker, the console, the web console and every actor that was running.
    Run {
        /// The world's folder.
        #[arg(default_value = "world")]
        dir: PathBuf,
        /// Where the web console listens (port 0: any free port).
        #[arg(long, value_name = "ADDR", default_value = sausage::web::DEFAULT_ADDR)]
        web: SocketAddr,
        /// Do not serve the web console.
        #[arg(long)]
        no_web: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    raise_file_limit();
    let result = match cli.command {
        Command::Init {
            dir,
            api,
            base_url,
            model,
        } => {
            let config = AgentConfig {
                api,
                base_url,
                model,
                token: None,
            };
            block_on(init(dir, config))
        }
        Command::Run { dir, web, no_web } => block_on(run(dir, (!no_web).then_some(web))),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sausage: {e:#}");
            ExitCode::FAILURE
        }
    }
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
    let rt = sausage::scheduler()?;
    let result = rt.block_on(job);
    // The stdin reader may sit in a blocking read forever; do not wait for it.
    rt.shutdown_background();
    result
}

/// Creates the world, writes the agent's configuration, then builds and spawns the agent.
async fn init(dir: PathBuf, config: AgentConfig) -> Result<ExitCode> {
    let world = World::new(&dir);
    world.check_new()?;
    let terminal = std::io::stdin().is_terminal();
    let config = config.complete(
        &mut std::io::stdin().lock(),
        &mut std::io::stdout(),
        terminal,
    )?;
    world.create()?;
    config.write(&world)?;
    println!("Created the world `{}`. Building the agent…", dir.display());
    let source = init::write_agent_source(&world, &config)?;
    let (broker, services) = open(&world).await?;
    let script = BufReader::new(std::io::Cursor::new(init::deploy_script(&source)));
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
    println!("The world is ready. Start it with:");
    println!("    sausage run {}", dir.display());
    println!("then type what you want, for example: make me an actor that counts words");
    Ok(ExitCode::SUCCESS)
}

/// The broker and native actors of an open world; stopping them is `close`.
async fn open(world: &World) -> Result<(Arc<Broker>, [tokio::task::JoinHandle<()>; 2])> {
    let runtime = Runtime::new(Some(world.cache_dir()))?;
    let broker = Broker::start(world.clone(), runtime).await?;
    let server = tokio::spawn({
        let broker = broker.clone();
        async move { broker.serve().await }
    });
    let cargo = tokio::spawn(sausage::cargo::serve(broker.clone()));
    Ok((broker, [server, cargo]))
}

async fn close(broker: &Broker, services: [tokio::task::JoinHandle<()>; 2]) {
    broker.shutdown().await;
    for service in services {
        service.abort();
    }
}

async fn run(dir: PathBuf, web: Option<SocketAddr>) -> Result<ExitCode> {
    let world = World::new(&dir);
    world.load_registry()?;
    let _lock = world.lock()?;
    let (broker, services) = open(&world).await?;
    eprintln!(
        "sausage: world `{}` is running; type /help for commands",
        dir.display()
    );
    let web = match web {
        Some(addr) => match sausage::web::start(broker.clone(), addr).await {
            Ok(web) => {
                eprintln!("sausage: web console: {}", web.login_link);
                Some(web)
            }
            Err(e) => {
                eprintln!("sausage: {e:#}; running without it");
                None
            }
        },
        None => None,
    };

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    // A person at a terminal gets the line editor; anything else (a pipe on either side) is a
    // script, which sees every message as one line.
    let end = if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
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
    eprintln!("sausage: stopping every actor");
    if let Some(web) = web {
        web.stop();
    }
    close(&broker, services).await;
    Ok(match end? {
        End::Quit => ExitCode::SUCCESS,
        End::Failed => ExitCode::FAILURE,
    })
}
