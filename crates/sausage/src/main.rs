//! The `sausage` command line (DESIGN §6): `init` creates a world, `run` runs it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use tokio::io::BufReader;

use sausage::broker::Broker;
use sausage::console::{self, End};
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
    /// Create a new world.
    Init {
        /// The world's folder.
        #[arg(default_value = "world")]
        dir: PathBuf,
    },
    /// Run a world: the broker, the console and every actor that was running.
    Run {
        /// The world's folder.
        #[arg(default_value = "world")]
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Init { dir } => init(dir),
        Command::Run { dir } => tokio::runtime::Runtime::new()
            .map_err(anyhow::Error::from)
            .and_then(|rt| {
                let result = rt.block_on(run(dir));
                // The stdin reader may sit in a blocking read forever; do not wait for it.
                rt.shutdown_background();
                result
            }),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sausage: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init(dir: PathBuf) -> Result<ExitCode> {
    let world = World::new(&dir);
    world.create()?;
    println!("Created the world `{}`.", dir.display());
    println!("Run it with: sausage run {}", dir.display());
    Ok(ExitCode::SUCCESS)
}

async fn run(dir: PathBuf) -> Result<ExitCode> {
    let world = World::new(&dir);
    world.load_registry()?;
    let _lock = world.lock()?;
    let runtime = Runtime::new()?;
    let broker = Broker::start(world, runtime).await?;
    eprintln!(
        "sausage: world `{}` is running; type /help for commands",
        dir.display()
    );
    let server = tokio::spawn({
        let broker = broker.clone();
        async move { broker.serve().await }
    });
    let cargo = tokio::spawn(sausage::cargo::serve(broker.clone()));

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stdin = BufReader::new(tokio::io::stdin());
    // Waits for: the console to end (`/quit`, end of input, a failed `/await`), Ctrl-C, or
    // SIGTERM. Each ends the run the same way: every actor is stopped gracefully.
    let end = tokio::select! {
        end = console::run(broker.clone(), stdin) => end,
        _ = tokio::signal::ctrl_c() => End::Quit,
        _ = sigterm.recv() => End::Quit,
    };
    eprintln!("sausage: stopping every actor");
    broker.shutdown().await;
    server.abort();
    cargo.abort();
    Ok(match end {
        End::Quit => ExitCode::SUCCESS,
        End::AwaitFailed => ExitCode::FAILURE,
    })
}
